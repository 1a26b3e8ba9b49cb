"""Multimodal RoPE (M-RoPE) configs against transformers' own rotary modules: the cache by
position that ``posenc.rope_cache`` gives, gathered per frequency by its ``mrope_axes``,
equals what each family's module returns for position ids that differ per axis (time,
height, width), within float32 rounding; the CLI writes the same values and axes."""

from __future__ import annotations

import importlib
import json
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import posenc  # noqa: E402
from conftest import HAVE_GPU  # noqa: E402

# (text config class, its modeling module and rotary class, config keys, layout): hub-like
# text configs of each family, small enough to build in milliseconds.
FAMILIES = {
    "qwen2_vl": ("Qwen2VLTextConfig", "qwen2_vl", "Qwen2VLRotaryEmbedding",
                 dict(hidden_size=256, num_attention_heads=2, rope_parameters={
                     "rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]}),
                 "sections"),
    "qwen2_5_vl": ("Qwen2_5_VLTextConfig", "qwen2_5_vl", "Qwen2_5_VLRotaryEmbedding",
                   dict(hidden_size=256, num_attention_heads=2, rope_parameters={
                       "rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]}),
                   "sections"),
    "qwen3_vl": ("Qwen3VLTextConfig", "qwen3_vl", "Qwen3VLTextRotaryEmbedding",
                 dict(hidden_size=256, num_attention_heads=2, head_dim=128, rope_parameters={
                     "rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20],
                     "mrope_interleaved": True}),
                 "interleaved"),
    "qwen3_5": ("Qwen3_5TextConfig", "qwen3_5", "Qwen3_5TextRotaryEmbedding",
                dict(hidden_size=256, num_attention_heads=2, head_dim=256, rope_parameters={
                    "rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                    "mrope_section": [11, 11, 10], "mrope_interleaved": True}),
                "interleaved"),
    "glm4v": ("Glm4vTextConfig", "glm4v", "Glm4vTextRotaryEmbedding",
              dict(hidden_size=256, num_attention_heads=2, rope_parameters={
                  "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                  "mrope_section": [8, 12, 12]}),
              "sections"),
    "ernie4_5_vl_moe": ("Ernie4_5_VLMoeTextConfig", "ernie4_5_vl_moe",
                        "Ernie4_5_VLMoeTextRotaryEmbedding",
                        dict(hidden_size=256, num_attention_heads=2, rope_parameters={
                            "rope_type": "default", "rope_theta": 5e5,
                            "mrope_section": [22, 22, 20]}),
                        "alternating"),
    "paddleocr_vl": ("PaddleOCRTextConfig", "paddleocr_vl", "PaddleOCRRotaryEmbedding",
                     dict(hidden_size=256, num_attention_heads=2, head_dim=128, rope_parameters={
                         "rope_type": "default", "rope_theta": 5e5,
                         "mrope_section": [16, 24, 24]}),
                     "sections"),
}


def _module(name):
    config_class, module_name, rotary_class, keys, _ = FAMILIES[name]
    if not hasattr(transformers, config_class):
        pytest.skip(f"{config_class} is not in transformers {transformers.__version__}")
    modeling = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    config = getattr(transformers, config_class)(**keys)
    if not hasattr(modeling, rotary_class):
        pytest.skip(f"{rotary_class} is not in transformers {transformers.__version__}")
    return config, getattr(modeling, rotary_class)(config=config)


def _gathered(table, axes, ids, pairing):
    """The model's cos (or sin) for position ids [3, n]: column c of a token takes its
    frequency's axis's position."""
    freqs = len(axes)
    columns = np.arange(table.shape[1])
    freq = columns // 2 if pairing == "gptj" else columns % freqs
    rows = ids[axes[freq]].T  # [n, rotary_dim]: the position each column reads
    return table[rows, columns[None, :]]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_gathered_cache_is_the_modules(name):
    config, module = _module(name)
    rng = np.random.default_rng(0)
    n = 64
    # Per-axis positions as a vision block has them: time constant, height and width a grid,
    # then text positions past them (all axes equal).
    ids = np.stack([
        np.concatenate([np.full(32, 5), np.arange(40, 72)]),
        np.concatenate([5 + np.repeat(np.arange(4), 8), np.arange(40, 72)]),
        np.concatenate([5 + np.tile(np.arange(8), 4), np.arange(40, 72)]),
    ]).astype(np.int64)
    ids[:, rng.permutation(n)[:4]] += 1000  # some far positions too
    with torch.no_grad():
        cos_m, sin_m = module(torch.zeros(1, dtype=torch.float32), torch.from_numpy(ids[:, None, :]))
    cos_m, sin_m = cos_m[0].numpy(), sin_m[0].numpy()  # [n, rotary_dim]

    cache = posenc.rope_cache(config.to_dict(), seq_len=int(ids.max()) + 1, device="cpu")
    assert cache.mrope_layout == FAMILIES[name][4]
    assert tuple(cache.mrope_section) == tuple(config.rope_parameters["mrope_section"])
    assert cache.mrope_axes.dtype == np.uint8 and len(cache.mrope_axes) == cache.cos.shape[1] // 2
    cos = _gathered(cache.cos, cache.mrope_axes, ids, cache.pairing)
    sin = _gathered(cache.sin, cache.mrope_axes, ids, cache.pairing)
    assert cos.shape == cos_m.shape
    # transformers rounds inv_freq and the angle to float32: a few ulps of the angle.
    tol = 4e-7 * (ids.max() + 1)
    np.testing.assert_allclose(cos, cos_m, rtol=0, atol=tol)
    np.testing.assert_allclose(sin, sin_m, rtol=0, atol=tol)
    # The gather is not trivially right: with the axes rotated it is not the module's.
    wrong = _gathered(cache.cos, np.roll(cache.mrope_axes, 1), ids, cache.pairing)
    assert np.abs(wrong - cos_m).max() > 100 * tol


def _image_then_text(n_image, n_text, first_text):
    """Position ids [3, n] as the model gives them: an image's tokens at (time, row,
    column) of a grid, then text tokens at the same position on every axis."""
    side = int(np.ceil(np.sqrt(n_image)))
    t = np.full(n_image, 3)
    h = 3 + np.arange(n_image) // side
    w = 3 + np.arange(n_image) % side
    text = np.arange(first_text, first_text + n_text)
    return np.stack([np.concatenate([a, text]) for a in (t, h, w)]).astype(np.int64)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_rope_with_positions_per_axis_is_the_models_rotation(name, device):
    """posenc.rope with [3, B, L] positions rotates q as the family's own attention does
    (its rotary module's cos/sin through its apply_rotary_pos_emb), within float32's
    rounding of the angle; text positions ([B, L]) rotate as every axis at them."""
    config, module = _module(name)
    modeling = importlib.import_module(type(module).__module__)
    ids = _image_then_text(20, 12, 40)
    ids[:, -3:] += 3000  # far text positions too
    n = ids.shape[1]
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 3, n, head_dim)).astype(np.float32)  # bhld
    with torch.no_grad():
        cos, sin = module(torch.zeros(1, dtype=torch.float32), torch.from_numpy(ids[:, None, :]))
        want, _ = modeling.apply_rotary_pos_emb(torch.from_numpy(q), torch.from_numpy(q), cos, sin)
    got = posenc.rope(q, layout="bhld", config=config.to_dict(), positions=ids[:, None, :],
                      device=device)
    tol = 4e-7 * (ids.max() + 1) * np.abs(q).max() * 2
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=tol)
    # Not trivially so: the image's tokens with one position each (the time axis's) differ
    # from the model far beyond the rounding of their small angles.
    flat = posenc.rope(q, layout="bhld", config=config.to_dict(), positions=ids[:1], device=device)
    assert np.abs(flat - want.numpy())[:, :, :20].max() > 1e-2
    # Text tokens: [B, L] and [3, B, L] of equal axes are the same rotation, bit for bit.
    text = np.broadcast_to(ids[:1], (3, n))[:, None, :]
    np.testing.assert_array_equal(
        posenc.rope(q, layout="bhld", config=config.to_dict(), positions=text, device=device), flat)
    # Into out=, in place, and as bfloat16 bits: the same rotation.
    out = np.empty_like(q)
    assert posenc.rope(q, layout="bhld", config=config.to_dict(), positions=ids[:, None, :],
                       device=device, out=out) is out
    np.testing.assert_array_equal(out, got)
    y = q.copy()
    posenc.rope(y, layout="bhld", config=config.to_dict(), positions=ids[:, None, :],
                device=device, out=y)
    np.testing.assert_array_equal(y, got)


def test_positions_per_axis_need_a_multimodal_config_and_their_shape():
    config, _ = _module("qwen2_vl")
    q = np.zeros((1, 4, 2, 128), np.float32)
    ids = np.zeros((3, 1, 4), np.int64)
    with pytest.raises(ValueError, match=r"positions.*\[3, 1, 4\], one per axis.*M-RoPE"):
        posenc.rope(q, layout="blhd", positions=ids)
    with pytest.raises(ValueError, match=r"\[3, batch, len\].*expected \[3, 1, 4\], got \[3, 1, 5\]"):
        posenc.rope(q, layout="blhd", config=config.to_dict(), positions=np.zeros((3, 1, 5), np.int64))
    with pytest.raises(ValueError, match=r"mrope_section.*rotary_dim 64 \(from --rotary-dim\)"):
        posenc.rope(q, layout="blhd", config=config.to_dict(), positions=ids, rotary_dim=64)
    # A bad position is named by its index, as the command line names it.
    bad = ids.copy()
    bad[1, 0, 2] = -1
    with pytest.raises(ValueError, match=r"invalid positions: -1 at \[1, 0, 2\]"):
        posenc.rope(q, layout="blhd", config=config.to_dict(), positions=bad)
    with pytest.raises(ValueError, match=r"invalid positions: 4294967296 at \[0, 3\]"):
        posenc.rope(q, layout="blhd", positions=np.array([[0, 1, 2, 2**32]]))
    with pytest.raises(ValueError, match="rank 2 or 3"):
        posenc.rope(q, layout="blhd", config=config.to_dict(), positions=np.zeros((1, 3, 1, 4), np.int64))


def test_the_cli_rotates_with_positions_per_axis(tmp_path, cli):
    config, _ = _module("qwen3_vl")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.to_dict()))
    ids = _image_then_text(9, 3, 20)[:, None, :]
    q = np.random.default_rng(2).standard_normal((1, 12, 2, 128)).astype(np.float32)
    np.save(tmp_path / "q.npy", q)
    np.save(tmp_path / "p.npy", ids)
    for device in ("cpu", "gpu"):
        out = tmp_path / f"out-{device}.npy"
        run = cli.run("rope", "--input", tmp_path / "q.npy", "--layout", "blhd", "--config", path,
                      "--positions", tmp_path / "p.npy", "--device", device, "-o", out)
        if device == "gpu" and not HAVE_GPU:
            continue
        assert run.returncode == 0, run.stderr
        want = posenc.rope(q, layout="blhd", config=config.to_dict(), positions=ids, device="cpu")
        np.testing.assert_array_equal(np.load(out), want)
    # Without the config the positions per axis are refused before the output is made.
    out = tmp_path / "none.npy"
    run = cli.run("rope", "--input", tmp_path / "q.npy", "--layout", "blhd",
                  "--positions", tmp_path / "p.npy", "-o", out)
    assert run.returncode == 2 and "one per axis" in run.stderr and not out.exists(), run.stderr


def test_rope_spec_keeps_the_axes():
    config, _ = _module("qwen3_vl")
    text = config.to_json_string()
    spec = posenc.RopeSpec(text)
    section, layout, axes = spec.mrope
    assert (section, layout) == ((24, 20, 20), "interleaved")
    cache = posenc.rope_cache(text, seq_len=8)
    np.testing.assert_array_equal(axes, cache.mrope_axes)
    np.testing.assert_array_equal(spec.cache(np.arange(8, dtype=np.uint32))[0], cache.cos)
    # A RoPE without axes has none, and the cache pickles with its axes.
    assert posenc.rope_cache(head_dim=8, seq_len=2).mrope_axes is None
    assert posenc.RopeSpec(head_dim=8).mrope is None
    again = pickle.loads(pickle.dumps(cache))
    assert again.mrope_section == cache.mrope_section
    np.testing.assert_array_equal(again.mrope_axes, cache.mrope_axes)


def test_the_cli_writes_the_same_values_and_axes(tmp_path, cli):
    config, _ = _module("glm4v")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.to_dict()))
    out = tmp_path / "cache.safetensors"
    run = cli.run("rope-cache", "--config", path, "--len", 16, "-o", out)
    assert run.returncode == 0 and "M-RoPE" in run.stderr, run.stderr
    st = pytest.importorskip("safetensors")  # a dependency of transformers
    from safetensors.numpy import load_file

    tensors = load_file(out)
    with st.safe_open(out, "np") as f:
        meta = f.metadata()
    cache = posenc.rope_cache(config.to_dict(), seq_len=16)
    np.testing.assert_array_equal(tensors["cos"], cache.cos)
    assert meta["mrope_axes"] == "".join(map(str, cache.mrope_axes))
    assert (meta["mrope_layout"], meta["mrope_section"]) == ("sections", "8,12,12")


# Flat hub configs (the language model's keys at the top level) as transformers 5.24's
# composite classes build their language model from them: only the keys the class passes on
# reach it (no head_dim, no top-level partial_rotary_factor for Qwen2-VL; Fuyu's gets 0.5
# and no rope_parameters whatever the top level says).
FLAT = {
    "qwen2_vl-head-dim": ("Qwen2VLConfig", "qwen2_vl", "Qwen2VLRotaryEmbedding", dict(
        hidden_size=256, num_attention_heads=2, head_dim=64, partial_rotary_factor=0.5,
        rope_theta=1e6, rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]})),
    "qwen2_5_vl-head-dim": ("Qwen2_5_VLConfig", "qwen2_5_vl", "Qwen2_5_VLRotaryEmbedding", dict(
        hidden_size=256, num_attention_heads=2, head_dim=64,
        rope_theta=1e6, rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]})),
    "fuyu-8b": ("FuyuConfig", "persimmon", "PersimmonRotaryEmbedding", dict(
        hidden_size=4096, num_attention_heads=64, partial_rotary_factor=0.5, rope_theta=25000.0,
        rope_scaling=None)),
    "fuyu-head-dim-linear": ("FuyuConfig", "persimmon", "PersimmonRotaryEmbedding", dict(
        hidden_size=512, num_attention_heads=4, head_dim=32, rope_theta=10000.0,
        rope_scaling={"rope_type": "linear", "factor": 2.0})),
    # HunyuanOCR: XD-RoPE (four axes, the same at text positions) with HunYuan's NTK-alpha,
    # its head dim from attention_head_dim, keys as tencent ships them.
    "hunyuan_vl-ocr": ("HunYuanVLConfig", "hunyuan_vl", "HunYuanVLRotaryEmbedding", dict(
        hidden_size=1024, num_attention_heads=16, attention_head_dim=128, rope_theta=10000.0,
        rope_scaling={"alpha": 1000.0, "beta_fast": 32, "beta_slow": 1, "factor": 1.0,
                      "mscale": 1.0, "mscale_all_dim": 1.0, "type": "xdrope",
                      "xdrope_section": [16, 16, 16, 16]})),
}


@pytest.mark.parametrize("name", sorted(FLAT))
def test_flat_composites_read_what_their_language_model_gets(name):
    config_class, module_name, rotary_class, keys = FLAT[name]
    if not hasattr(transformers, config_class):
        pytest.skip(f"{config_class} is not in transformers {transformers.__version__}")
    modeling = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    composite = getattr(transformers, config_class)(**json.loads(json.dumps(keys)))
    module = getattr(modeling, rotary_class)(config=composite.text_config)
    _same_cache_at_text_positions(module, dict(keys, model_type=composite.model_type))


def _same_cache_at_text_positions(module, keys, n=4100):
    """posenc's cache of config ``keys`` is ``module``'s cos and sin at positions ``0..n``
    (every axis the same for a multimodal module), within float32's rounding of the angle."""
    ids = torch.arange(n)[None, :]
    if getattr(module, "mrope_section", None):  # text positions: every axis the same
        ids = ids[None].expand(len(module.mrope_section), 1, n)
    with torch.no_grad():
        cos_m, sin_m = module(torch.zeros(1, dtype=torch.float32), ids)
    cache = posenc.rope_cache(json.dumps(keys), seq_len=n, device="cpu")
    assert cache.cos.shape == tuple(cos_m[0].shape)
    tol = 4e-7 * n
    np.testing.assert_allclose(cache.cos, cos_m[0].numpy(), rtol=0, atol=tol)
    np.testing.assert_allclose(cache.sin, sin_m[0].numpy(), rtol=0, atol=tol)
    return cache


def test_fuyu_refuses_a_top_level_partial_rotary_factor_the_versions_read_apart():
    flat = dict(FLAT["fuyu-8b"][3], model_type="fuyu", partial_rotary_factor=0.25)
    with pytest.raises(ValueError, match="partial_rotary_factor.*0.25.*0.5"):
        posenc.rope_cache(json.dumps(flat), seq_len=2)


def test_hunyuan_vl_axes_gather_from_the_cache_by_position():
    """HunyuanOCR's XD-RoPE gives each value of the head the position of one of four axes
    (its section runs over the frequencies once per half): its module's cos and sin for
    positions that differ per axis are posenc's cache by position gathered so. posenc
    rotates one position per token only for it, and posenc.hf refuses its module."""
    config_class, module_name, rotary_class, keys = FLAT["hunyuan_vl-ocr"]
    if not hasattr(transformers, config_class):
        pytest.skip(f"{config_class} is not in transformers {transformers.__version__}")
    modeling = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    composite = getattr(transformers, config_class)(**json.loads(json.dumps(keys)))
    module = getattr(modeling, rotary_class)(config=composite.text_config)
    section = module.mrope_section
    assert section == [16, 16, 16, 16]
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 3000, size=(4, 40)).astype(np.int64)
    with torch.no_grad():
        cos_m, sin_m = module(torch.zeros(1, dtype=torch.float32), torch.from_numpy(ids[:, None, :]))
    cache = posenc.rope_cache(json.dumps(dict(keys, model_type="hunyuan_vl")), seq_len=3000)
    assert cache.mrope_section is None
    half = cache.cos.shape[1] // 2
    # Value c of the head: frequency c % half, and axis k for the k-th run, of 2 section[k]
    # values, over the head (whose two halves repeat the frequencies).
    runs = np.repeat(np.arange(len(section)), 2 * np.array(section))
    columns = np.arange(2 * half)
    rows = ids[runs[columns]].T
    tol = 4e-7 * 3000
    np.testing.assert_allclose(cache.cos[rows, columns[None, :]], cos_m[0].numpy(), rtol=0, atol=tol)
    np.testing.assert_allclose(cache.sin[rows, columns[None, :]], sin_m[0].numpy(), rtol=0, atol=tol)
    # The two values of a pair take different axes: not a rotation posenc computes.
    assert (runs[:half] != runs[half:]).any()
    # Text positions rotate as every axis at them; positions per axis are refused.
    flat = json.dumps(dict(keys, model_type="hunyuan_vl"))
    x = rng.standard_normal((1, 5, 2, 128)).astype(np.float32)
    one = posenc.rope(x, layout="blhd", positions=np.arange(5)[None], config=flat, device="cpu")
    text = np.broadcast_to(np.arange(5)[None, None], (4, 1, 5))
    with torch.no_grad():
        cos_t, sin_t = module(torch.zeros(1), torch.from_numpy(text.copy()))
    q = torch.from_numpy(x).transpose(1, 2)
    want = modeling.apply_rotary_pos_emb(q, q, cos_t, sin_t)[0].transpose(1, 2).numpy()
    np.testing.assert_allclose(one, want, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="positions"):
        posenc.rope(x, layout="blhd", positions=ids[:3, None, :5], config=flat, device="cpu")


@pytest.mark.parametrize("name", ["colqwen2", "colpali"])
def test_retrievers_read_the_vision_language_model_they_wrap(name):
    """ColQwen2 and ColPali build one vision-language model from ``vlm_config``: its
    language model's RoPE is the config's (it was refused, naming a missing head dim)."""
    vlm = {
        "colqwen2": dict(model_type="qwen2_vl", hidden_size=1536, num_attention_heads=12,
                         rope_theta=1e6, rope_scaling={"type": "mrope", "rope_type": "default",
                                                       "mrope_section": [16, 24, 24]}),
        "colpali": dict(model_type="paligemma", text_config=dict(
            model_type="gemma", hidden_size=2048, num_attention_heads=8, head_dim=256,
            num_key_value_heads=1, rope_theta=10000.0)),
    }[name]
    config_class = {"colqwen2": "ColQwen2Config", "colpali": "ColPaliConfig"}[name]
    if not hasattr(transformers, config_class):
        pytest.skip(f"{config_class} is not in transformers {transformers.__version__}")
    keys = dict(model_type=name, vlm_config=vlm, embedding_dim=128)
    config = getattr(transformers, config_class)(**json.loads(json.dumps(keys)))
    text = config.vlm_config.text_config
    module_name = text.model_type.removesuffix("_text")
    modeling = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    rotary = next(getattr(modeling, n) for n in dir(modeling)
                  if n.endswith("RotaryEmbedding") and "Vision" not in n)
    _same_cache_at_text_positions(rotary(config=text), keys)


def test_a_text_config_without_its_sizes_is_the_class_defaults():
    """llava-hf/llava-1.5-7b-hf's text_config gives no hidden_size nor num_attention_heads:
    LlamaConfig's defaults (4096, 32) make its head, as transformers builds it."""
    keys = dict(model_type="llava", text_config=dict(
        model_type="llama", max_position_embeddings=4096, rms_norm_eps=1e-05, vocab_size=32064))
    config = transformers.LlavaConfig(**json.loads(json.dumps(keys)))
    from transformers.models.llama import modeling_llama
    module = modeling_llama.LlamaRotaryEmbedding(config=config.text_config)
    assert _same_cache_at_text_positions(module, keys).cos.shape[1] == 128
