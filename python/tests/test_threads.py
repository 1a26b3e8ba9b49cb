"""Several threads calling at once get the serial results, and the GIL is released while
posenc computes."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import posenc
from conftest import CONFIGS, same_bits


def _jobs(device):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    x = rng.standard_normal((2, 8, 4, 32)).astype(np.float32)
    jobs = []
    for k in range(24):
        ids = rng.integers(0, 64, (2, 8 + k))
        jobs.append(lambda ids=ids: posenc.encode(w, ids, device=device))
        jobs.append(lambda k=k: posenc.table(32, positions=np.arange(k, 4 * k + 1), device=device))
        jobs.append(lambda k=k: posenc.rope(x, layout="blhd", offset=1000 * k, device=device))
        jobs.append(lambda k=k: posenc.rope_cache(CONFIGS / "llama-3.1-8b.json", seq_len=16 + k, device=device)[0])
        jobs.append(lambda k=k: posenc.alibi_bias(4, 3 + k, device=device))
    return jobs


def test_threads_agree_with_serial(device):
    jobs = _jobs(device)
    serial = [job() for job in jobs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(job) for job in jobs * 2]
        results = [f.result() for f in futures]
    for k, result in enumerate(results):
        same_bits(result, serial[k % len(jobs)])


def test_gil_is_released():
    done = threading.Event()

    def work():
        try:
            for _ in range(3):
                posenc.rope_cache(head_dim=128, seq_len=1 << 17, device="cpu")
        finally:
            done.set()

    worker = threading.Thread(target=work)
    ticks = 0
    worker.start()
    while not done.is_set():
        ticks += 1
    worker.join()
    # With the GIL held through each call this loop would run only between calls.
    assert ticks > 10000, ticks


def _forked_jobs(k):
    """Large enough that the CPU path goes parallel (rayon's pool), in a forked child."""
    table = posenc.table(512, 4096 + k, device="cpu")
    cos, _ = posenc.rope_cache(CONFIGS / "llama-3.1-8b.json", seq_len=8192 + k, device="cpu")
    return float(table.sum()) + float(cos.sum())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_forked_children_compute_and_agree():
    """A child forked after the import (multiprocessing's fork start method, a DataLoader's
    workers) has none of its parent's threads: posenc gives it a pool of its own, where a
    parallel call into the inherited one waited for ever."""
    want = [_forked_jobs(k) for k in range(4)]
    ctx = multiprocessing.get_context("fork")
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a multi-threaded process may deadlock: the case
        # under test.
        warnings.simplefilter("ignore", DeprecationWarning)
        with ctx.Pool(2) as pool:
            got = pool.map_async(_forked_jobs, range(4)).get(timeout=120)
        # A grandchild, forked from a child that has built its own pool, builds one again.
        with ctx.Pool(1) as pool:
            got2 = pool.apply_async(_grandchild).get(timeout=120)
    assert got == want
    assert got2 == want[:2]


def _grandchild():
    """In a pool's worker: the job here, then in a child forked from here (by hand: a
    pool's workers may not start pools of their own)."""
    first = _forked_jobs(0)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, repr(_forked_jobs(1)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        second = float(pipe.read())
    os.waitpid(pid, 0)
    return [first, second]


_FORK_THREADS = r"""
import os, sys, numpy as np, posenc
def threads():
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith("Threads:")).split()[1])
big = np.zeros((1 << 16, 8), np.float32)
posenc.encode(big, np.zeros((64, 1024), np.int64), device="cpu")
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    posenc.encode(big, np.zeros((64, 1024), np.int64), device="cpu")
    os.write(write, str(threads()).encode())
    os._exit(0)
os.close(write)
child = int(os.read(read, 64))
os.waitpid(pid, 0)
print(threads(), child)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_forked_children_keep_the_thread_cap():
    """A forked child's pool has the parent's count, capped at four threads per core (64 at
    least): it was built with RAYON_NUM_THREADS's count whole (1001 threads for 1000, where
    the parent had 66; 20000 would abort, as the parent did before the cap)."""
    env = {**os.environ, "RAYON_NUM_THREADS": "1000"}
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", _FORK_THREADS], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    cap = max(64, 4 * (os.cpu_count() or 1))
    parent, child = map(int, out.stdout.split())
    assert parent <= cap + 8 and child <= cap + 8, out.stdout
