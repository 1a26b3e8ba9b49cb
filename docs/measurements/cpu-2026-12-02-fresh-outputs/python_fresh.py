"""Python calls that return fresh arrays, medians of 15 (ms), CPU path."""
import json, sys, time
import numpy as np, posenc
def med(f, n=15):
    ts = []
    for _ in range(n):
        t = time.perf_counter(); r = f(); ts.append((time.perf_counter() - t) * 1e3); del r
    ts.sort(); return round(ts[n // 2], 2), round(ts[0], 2), round(ts[-1], 2)
rng = np.random.default_rng(0)
w = rng.standard_normal((32000, 4096), dtype=np.float32)
ids = rng.integers(0, 32000, (1, 2048))
q = rng.standard_normal((1, 2048, 32, 128), dtype=np.float32)
res = {
  "table 2048x4096": med(lambda: posenc.table(4096, len=2048, device="cpu")),
  "encode 1x2048x4096": med(lambda: posenc.encode(w, ids, device="cpu")),
  "rope q 1x2048x32x128 f32": med(lambda: posenc.rope(q, layout="blhd", device="cpu")),
  "alibi 32x512x512": med(lambda: posenc.alibi_bias(32, 512, device="cpu")),
  "numpy empty+fill 32 MiB": med(lambda: np.full((2048, 4096), 1.0, np.float32)),
}
print(json.dumps({"label": sys.argv[1], **res}))
