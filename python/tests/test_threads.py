"""Several threads calling at once get the serial results, and the GIL is released while
posenc computes."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

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
