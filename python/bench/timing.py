"""The Python side of docs/python.md's speed figures (the Rust side is
python/examples/timing.rs): median of 15 calls after 3 warm-up calls.

    python python/bench/timing.py [cpu|gpu]
"""

import sys
import time

import numpy as np

import posenc


def median(f):
    for _ in range(3):
        f()
    times = []
    for _ in range(15):
        t = time.perf_counter()
        f()
        times.append((time.perf_counter() - t) * 1e3)
    return sorted(times)[len(times) // 2]


device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
ms = median(lambda: posenc.rope_cache(head_dim=128, seq_len=131072, device=device))
print(f"python {device} rope_cache 131072 x 128: {ms:.2f} ms")

v, d = np.meshgrid(np.arange(32000), np.arange(1024), indexing="ij")
table = (((v * 31 + d * 7) % 1000) * 1e-3).astype(np.float32)
ids = ((np.arange(8 * 1024) * 7919) % 32000).reshape(8, 1024).astype(np.uint32)
ms = median(lambda: posenc.encode(table, ids, device=device))
print(f"python {device} encode 8 x 1024 x 1024, V 32000, f32: {ms:.2f} ms")
