"""The Python surface: docstrings and stubs, array-likes, bfloat16 helpers, RopeCache."""

from __future__ import annotations

import pydoc
from pathlib import Path

import numpy as np
import pytest

import posenc
from conftest import CONFIGS, same_bits


def test_help_and_stubs():
    for name in posenc.__all__:
        obj = getattr(posenc, name)
        if callable(obj) and not isinstance(obj, type):
            assert obj.__doc__ and len(obj.__doc__) > 80, name
    text = pydoc.render_doc(posenc.rope_cache, renderer=pydoc.plaintext)
    assert "seq_len" in text and "layer_type" in text and "RopeCache" in text
    package = Path(posenc.__file__).parent
    assert (package / "_posenc.pyi").exists() and (package / "py.typed").exists()


def test_array_likes():
    w = [[0.0, 1.0, 2.0, 3.0]] * 5  # a list of lists: float64, converted once
    ids = [1, 2]
    a = posenc.encode(np.asarray(w, np.float32), ids, device="cpu")
    assert a.shape == (2, 4)
    positions = [[0, 1, 2]]
    x = np.ones((1, 3, 1, 4), np.float32)
    same_bits(posenc.rope(x, layout="blhd", positions=positions, device="cpu"),
              posenc.rope(x, layout="blhd", offset=0, device="cpu"))
    same_bits(posenc.table(8, positions=range(3), device="cpu"), posenc.table(8, len=3, device="cpu"))
    # An empty list is numpy's float64: no ids, like no positions.
    assert posenc.encode(np.asarray(w, np.float32), [], device="cpu").shape == (0, 4)
    with pytest.raises(ValueError, match="ids must be integers, got dtype float64"):
        posenc.encode(np.asarray(w, np.float32), [1.0], device="cpu")


def test_bf16_helpers():
    f = np.array([1.0, -2.5, 3.140625], np.float32)
    bits = (f.view(np.uint32) >> 16).astype(np.uint16)
    same_bits(posenc.bf16_to_f32(bits), f)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    view = posenc.as_bfloat16(bits)
    assert view.dtype == ml_dtypes.bfloat16
    same_bits(view.astype(np.float32), f)
    same_bits(posenc.bf16_to_f32(view), f)
    with pytest.raises(ValueError):
        posenc.as_bfloat16(f)


def test_bf16_results_are_bits():
    cos16, _ = posenc.rope_cache(head_dim=8, seq_len=4, dtype="bf16", device="cpu")
    cos32, _ = posenc.rope_cache(head_dim=8, seq_len=4, device="cpu")
    assert cos16.dtype == np.uint16
    # Round to nearest even from the f32 result.
    expected = cos32.view(np.uint32)
    expected = ((expected + 0x7FFF + ((expected >> 16) & 1)) >> 16).astype(np.uint16)
    same_bits(cos16, expected)


def test_rope_cache_result():
    cache = posenc.rope_cache(CONFIGS / "qwen2.5-7b-instruct.yarn.json", seq_len=5, device="cpu")
    cos, sin = cache
    assert cos is cache.cos and sin is cache.sin
    assert cos.shape == (5, 128) and cache.inv_freq.shape == (64,)
    assert cache.attention_factor > 1 and cache.pairing == "neox"
    np.testing.assert_array_equal(cos[0], np.full(128, cache.attention_factor, np.float32))


def test_rope_spec():
    spec = posenc.RopeSpec(CONFIGS / "llama-3.1-8b.json")
    assert (spec.head_dim, spec.rotary_dim, spec.pairing, spec.rope_type) == (128, 128, "neox", "llama3")
    cos, sin = spec.cache([0, 5, 2**32 - 1])
    full = posenc.rope_cache(CONFIGS / "llama-3.1-8b.json", positions=[0, 5, 2**32 - 1], device="cpu")
    same_bits(cos, full.cos)
    same_bits(sin, full.sin)
    inv, factor = spec.frequencies(8192)
    assert inv.dtype == np.float64 and inv.shape == (64,) and factor == 1.0
    assert "llama3" in repr(spec)
    # A spec string, as rope_cache takes it.
    cos_s, sin_s = spec.cache("0,5,4294967295")
    same_bits(cos_s, cos)
    same_bits(sin_s, sin)
    same_bits(spec.cache("3..6")[0], spec.cache(np.arange(3, 6))[0])
    with pytest.raises(ValueError, match="position spec|positions"):
        spec.cache("5..2")


def test_quiet_without_runtime_dir():
    """With XDG_RUNTIME_DIR unset, opening the GPU prints nothing (Mesa's Wayland probe
    would), and the variable then names no directory that exists."""
    import os
    import subprocess
    import sys

    from conftest import HAVE_GPU

    if not HAVE_GPU:
        pytest.skip("SKIP: no GPU adapter")
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    code = "import os, posenc; posenc.table(8, device='gpu'); print(os.environ['XDG_RUNTIME_DIR'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd="/", timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.strip() == posenc.NO_RUNTIME_DIR
    assert not os.path.exists(posenc.NO_RUNTIME_DIR)
