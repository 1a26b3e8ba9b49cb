"""posenc beside its peers, from the files benches/peers/run.sh writes into one folder:
posenc.json (`posenc bench --suite --json`), torch.jsonl (torch_peer.py), burn.jsonl
(posenc-burn-peer). Prints one table per job, microseconds per call or step, device time
unless said otherwise; what a file lacks is '-'.

    python3 benches/peers/compare.py OUT_DIR [--markdown]
"""
import json
import os
import sys


def load_lines(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    return rows


def us(seconds):
    return "-" if seconds is None else f"{seconds * 1e6:.1f}"


def pct(x):
    return "-" if x is None else f"{100 * x:.0f}%"


def table(title, header, rows, markdown):
    print()
    print(title)
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join(" --- " if i == 0 else " ---: " for i in range(len(header))) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
        for r in [header] + rows:
            print("  ".join(str(x).rjust(w) if i else str(x).ljust(w) for i, (x, w) in enumerate(zip(r, widths))))


def main():
    out = sys.argv[1]
    markdown = "--markdown" in sys.argv
    suite = {}
    path = os.path.join(out, "posenc.json")
    if not os.path.exists(path):
        path = os.path.join(out, "suite.json")
    if os.path.exists(path):
        with open(path) as f:
            suite = json.load(f)
    torch = load_lines(os.path.join(out, "torch.jsonl"))
    burn = load_lines(os.path.join(out, "burn.jsonl"))

    def item(report, name):
        for i in report.get("results", []):
            if i["name"] == name:
                return i
        return {}

    def peer(rows, op, model, key="model"):
        for r in rows:
            if r.get("op") == op and r.get(key) == model:
                return r
        return {}

    rows = []
    for r in suite.get("suite", []):
        m = r.get("model") or "default"
        t, tc = peer(torch, "encode", m), peer(torch, "encode_compiled", m)
        enc, steps, copy = item(r, "gpu_encode"), item(r, "gpu_encode_steps"), item(r, "gpu_copy_ceiling")
        rows.append([m, us(enc.get("median_s")), pct(enc.get("ratio")), us(steps.get("median_s")),
                     pct(steps.get("ratio")), us(copy.get("median_s")), us(t.get("eager_s")),
                     us(tc.get("compiled_s")), us(t.get("copy_s"))])
    table("encode (us): posenc one submission and % of its best WGSL copy; posenc steps (K in one pass) "
          "and % of the same copies recorded the same way; torch eager, torch.compile, CUDA copy of the output",
          ["preset", "posenc", "%", "steps", "%", "wgsl copy", "torch", "compile", "cuda copy"], rows, markdown)

    rows = []
    for o in suite.get("ops", []):
        op, m = o["op"], o["model"]
        one, steps = item(o, f"gpu_{op}"), item(o, f"gpu_{op}_steps")
        if op == "rope":
            t, tc = peer(torch, "rope", m), peer(torch, "rope_compiled", m)
            eager, comp, ceil = t.get("hf_eager_s"), tc.get("compiled_s"), t.get("copy_s")
        elif op == "alibi":
            t, tc = peer(torch, "alibi", m), peer(torch, "alibi_compiled", m)
            eager, comp, ceil = t.get("eager_s"), tc.get("compiled_s"), t.get("fill_s")
        else:
            eager = comp = ceil = None
        rows.append([m, op, us(one.get("median_s")), pct(one.get("ratio")), us(steps.get("median_s")),
                     pct(steps.get("ratio")),
                     "-" if steps.get("per_floor") is None else f"{steps['per_floor']:.2f}",
                     us(eager), us(comp), us(ceil)])
    table("operations (us): posenc one submission (% of its best WGSL copy), steps (% of the same copies "
          "recorded the same way, x the dispatch floor); torch eager, torch.compile, CUDA copy (ALiBi: fill)",
          ["preset", "op", "posenc", "%", "steps", "%", "x floor", "torch", "compile", "cuda ceiling"],
          rows, markdown)

    rows = []
    for r in suite.get("suite", []):
        m = r.get("model") or "default"
        b, bh = peer(burn, "encode_call", m), peer(burn, "encode_host", m)
        call, host = item(r, "gpu_encode_call"), item(r, "gpu_encode_host")
        if not b and not call:
            continue
        rows.append([m, us(call.get("median_s")), us(b.get("median_s")), us(host.get("median_s")),
                     us(bh.get("median_s"))])
    table("whole calls, wall clock (us): posenc encode_into_buffer + wait vs burn forward + sync; "
          "posenc result on the host vs burn into_data",
          ["preset", "posenc call", "burn call", "posenc host", "burn host"], rows, markdown)

    d = suite.get("device")
    if d:
        print()
        print(f"device: dispatch {d['dispatch_in_pass_s'] * 1e6:.2f} us in a pass, "
              f"{d['dispatch_own_pass_s'] * 1e6:.2f} us in its own; large copy GB/s: "
              + ", ".join(f"{c['method']} {c['gbps']:.0f}" for c in d["large_copy"][:5]))


if __name__ == "__main__":
    main()
