#!/usr/bin/env python3
"""Tables of benches/device/run.sh's interleaved pairs: per preset, each variant's median
per step (us) of every steps-mode item, one column per item, the repeats side by side
("a / b"), and each operation's ratio to the same run's copy of its bytes.

    python3 benches/device/pairs.py OUT/pairs.jsonl [--markdown]

A file ending in .xz (as docs/measurements keeps them) is read decompressed.
"""
import json
import lzma
import sys
from collections import defaultdict


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    markdown = "--markdown" in sys.argv
    if len(args) != 1:
        sys.exit(__doc__)
    # preset -> variant -> item -> {repeat: median us}; a repeat whose bench failed is
    # missing and shown as "-", so the columns stay aligned by repeat.
    cells = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))
    ratios = defaultdict(lambda: defaultdict(dict))
    order = defaultdict(list)
    repeats = defaultdict(list)
    opener = lzma.open if args[0].endswith(".xz") else open
    with opener(args[0], "rt") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            d = json.loads(line)
            preset, variant, rep = d["tag"].split("/")
            if variant not in order[preset]:
                order[preset].append(variant)
            if rep not in repeats[preset]:
                repeats[preset].append(rep)
            for r in d.get("results", []):
                if r["name"].endswith("_steps") or r["name"] == "gpu_dispatch_floor":
                    cells[preset][variant][r["name"]][rep] = r["median_s"] * 1e6
                    if r["name"] in ("gpu_rope_steps", "gpu_alibi_steps") and r.get("ratio"):
                        ratios[preset][variant][rep] = r["ratio"]
    for preset, variants in cells.items():
        items = []
        for v in order[preset]:
            for name in variants[v]:
                if name not in items:
                    items.append(name)
        head = ["variant"] + items + (["of the copy"] if ratios[preset] else [])
        rows = []
        for v in order[preset]:
            def cell(values):
                return " / ".join(
                    f"{values[r]:.2f}" if r in values else "-" for r in repeats[preset]
                )

            row = [v] + [cell(variants[v].get(i, {})) for i in items]
            if ratios[preset]:
                row.append(cell(ratios[preset][v]))
            rows.append(row)
        print(f"\n{preset} (us per step)")
        if markdown:
            print("| " + " | ".join(head) + " |")
            print("|" + " --- |" * len(head))
            for row in rows:
                print("| " + " | ".join(row) + " |")
        else:
            widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
            for row in [head] + rows:
                print("  ".join(c.ljust(w) for c, w in zip(row, widths)))


if __name__ == "__main__":
    main()
