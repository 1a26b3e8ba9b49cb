#!/usr/bin/env python3
"""Loads the page (examples/web/index.html, built by build.sh) in headless Chromium and
checks what it shows: posenc's table within 1e-6 of the float64 reference at every
position, its RoPE rotation within 1e-5, and the builtin-sin kernel off by more than 1e-3
at 2^31 - 1 (the page's point). Python 3 standard library only: it serves the directory
with `python3 -m http.server`, starts chromedriver and drives Chromium through
chromedriver's HTTP API (W3C WebDriver).

usage: test_page.py [--bench] [--timeout SECONDS]

--bench opens index.html?bench and prints the timing too. CHROMEDRIVER and CHROMIUM name
the binaries (default /usr/bin/chromedriver and /usr/bin/chromium). Exit status 0 when
every check passes, 1 when one fails or the page reports an error, 2 on a timeout or
when something could not start.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
POSENC_LIMIT = 1e-6
ROPE_LIMIT = 1e-5
BUILTIN_AT_LARGEST = 1e-3
LARGEST = 2**31 - 1
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--enable-unsafe-webgpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


class Failure(Exception):
    """Something outside the page failed (exit 2)."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Straight to 127.0.0.1, whatever proxy the environment names.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def request(method, url, body=None, timeout=10):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with OPENER.open(req, timeout=timeout) as r:
        return r.read()


def wait_until(what, deadline, probe):
    """Calls probe() until it returns without an OSError, or fails at the deadline."""
    while True:
        try:
            return probe()
        except OSError as e:
            if time.monotonic() > deadline:
                raise Failure(f"{what} did not answer in time ({e})") from None
            time.sleep(0.05)


def start(argv, **kw):
    # A session of its own: the process and its children (Chromium) are stopped as a group.
    return subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, start_new_session=True, **kw
    )


def stop(proc):
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            pass


def check(summary):
    """The page's claims; a list of what failed."""
    problems = []
    acc = summary.get("accuracy")
    if not acc:
        return ["the page gave no accuracy summary"]
    if not acc["same_as_cpu"]:
        problems.append("posenc's GPU table differs from its CPU table")
    for row in acc["rows"]:
        if not row["posenc"] < POSENC_LIMIT:
            problems.append(
                f"posenc's error {row['posenc']:.3e} at position {row['position']} "
                f"is not below {POSENC_LIMIT}"
            )
    largest = [r for r in acc["rows"] if r["position"] == LARGEST]
    if not largest:
        problems.append(f"the page shows no row for position {LARGEST}")
    elif not largest[0]["builtin"] > BUILTIN_AT_LARGEST:
        problems.append(
            f"the builtin's error at {LARGEST} is {largest[0]['builtin']:.3e}, not above "
            f"{BUILTIN_AT_LARGEST}: the page does not show the point"
        )
    if not acc["rope_max"] < ROPE_LIMIT:
        problems.append(f"RoPE's error {acc['rope_max']:.3e} is not below {ROPE_LIMIT}")
    return problems


def run(args):
    if not os.path.exists(os.path.join(HERE, "pkg", "posenc_web_bg.wasm")):
        raise Failure(f"{HERE}/pkg is not built: run {HERE}/build.sh first")
    deadline = time.monotonic() + args.timeout
    server = driver = None
    session = None
    base = None
    try:
        web_port = free_port()
        server = start(
            [sys.executable, "-m", "http.server", str(web_port), "--bind", "127.0.0.1"],
            cwd=HERE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        page = f"http://127.0.0.1:{web_port}/index.html" + ("?bench" if args.bench else "")
        wait_until("the web server", deadline, lambda: request("GET", page, timeout=2))

        driver_port = free_port()
        driver = start(
            [os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"), f"--port={driver_port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{driver_port}"
        wait_until("chromedriver", deadline, lambda: request("GET", base + "/status", timeout=2))

        def call(method, path, body=None):
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError("no time left")
                return json.loads(request(method, base + path, body, timeout=left))["value"]
            except urllib.error.HTTPError as e:
                text = e.read()[:2000]
                raise Failure(f"chromedriver refused {method} {path}: {text!r}") from None
            except OSError as e:
                if time.monotonic() >= deadline - 0.1:
                    raise Failure(f"timed out after {args.timeout:g} s ({method} {path})") from None
                raise Failure(f"chromedriver: {method} {path}: {e}") from None

        options = {
            "binary": os.environ.get("CHROMIUM", "/usr/bin/chromium"),
            "args": CHROMIUM_ARGS,
        }
        caps = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": options}}}
        session = call("POST", "/session", caps)["sessionId"]
        call("POST", f"/session/{session}/url", {"url": page})
        script = (
            "const e = document.getElementById('out');"
            "return e ? [e.dataset.done || null, e.textContent, e.dataset.summary || null]"
            " : [null, null, null];"
        )
        text = None
        while True:
            try:
                done, text, summary = call(
                    "POST", f"/session/{session}/execute/sync", {"script": script, "args": []}
                )
            except Failure:
                done = None
                if time.monotonic() < deadline:
                    raise
            if done:
                break
            if time.monotonic() >= deadline:
                print(text or "")
                raise Failure(
                    f"timed out after {args.timeout:g} s: the page did not finish "
                    "(#out has no data-done)"
                )
            time.sleep(0.2)
        print(text)
        if done != "ok":
            print(f"test_page.py: FAIL: the page reports an error (data-done={done})")
            return 1
        problems = check(json.loads(summary))
        if args.bench and "bench" not in json.loads(summary):
            problems.append("--bench: the page gave no timing")
        for p in problems:
            print(f"test_page.py: FAIL: {p}")
        if problems:
            return 1
        print("test_page.py: ok")
        return 0
    finally:
        if session is not None:
            try:
                request("DELETE", f"{base}/session/{session}", timeout=10)
            except OSError:
                pass
        stop(driver)
        stop(server)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", action="store_true", help="open index.html?bench")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds (default 120)")
    args = parser.parse_args()

    # SIGTERM and SIGHUP unwind like Ctrl-C, so the finally above stops what was started.
    def interrupted(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    try:
        sys.exit(run(args))
    except Failure as e:
        print(f"test_page.py: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt as e:
        print(f"test_page.py: interrupted {e}", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
