"""Every function against the posenc binary's output, bit for bit, on the CPU and the GPU."""

from __future__ import annotations

import json

import numpy as np
import pytest

import posenc
from conftest import CONFIGS, same_bits

# ---- table ------------------------------------------------------------------------------

TABLE_CASES = [
    (dict(dim=64, len=16), ["--dim", 64, "--len", 16]),
    (dict(dim=512, positions="0..4,1000000,4294967295"),
     ["--dim", 512, "--positions", "0..4,1000000,4294967295"]),
    (dict(dim=33, len=5, variant="distilbert"), ["--dim", 33, "--len", 5, "--variant", "distilbert"]),
    (dict(dim=30, len=7, variant="fairseq", padding_idx=1),
     ["--dim", 30, "--len", 7, "--variant", "fairseq", "--padding-idx", 1]),
    (dict(dim=31, len=7, variant="fairseq", padding_idx="none"),
     ["--dim", 31, "--len", 7, "--variant", "fairseq", "--padding-idx", "none"]),
    (dict(dim=24, len=9, variant="tensor2tensor", min_timescale=2.0, max_timescale=5e4, start_index=3),
     ["--dim", 24, "--len", 9, "--variant", "tensor2tensor", "--min-timescale", 2.0,
      "--max-timescale", 5e4, "--start-index", 3]),
    (dict(dim=48, len=6, variant="whisper"), ["--dim", 48, "--len", 6, "--variant", "whisper"]),
    (dict(dim=40, len=6, variant="marian", base=500.0, frequencies="f32"),
     ["--dim", 40, "--len", 6, "--variant", "marian", "--base", 500.0, "--frequencies", "f32"]),
    (dict(config=CONFIGS / "opus-mt-en-de.json", len=5), ["--config", CONFIGS / "opus-mt-en-de.json", "--len", 5]),
    (dict(config=CONFIGS / "whisper-tiny.json", len=3), ["--config", CONFIGS / "whisper-tiny.json", "--len", 3]),
]


@pytest.mark.parametrize("case", range(len(TABLE_CASES)))
def test_table(cli, device, case):
    kwargs, args = TABLE_CASES[case]
    ours = posenc.table(**kwargs, device=device)
    theirs = cli.npy("table", *args, "--format", "npy", "--device", device)
    assert ours.dtype == np.float32
    same_bits(ours, theirs)


def test_table_positions_array_and_reference(cli):
    positions = np.array([0, 7, 2**20, 2**32 - 1], dtype=np.uint32)
    ours = posenc.table(16, positions=positions, device="cpu")
    theirs = cli.npy("table", "--dim", 16, "--positions", "0,7,1048576,4294967295", "--format", "npy", "--device", "cpu")
    same_bits(ours, theirs)
    ref = posenc.table(16, positions=[3, 2**31], device="reference")
    same_bits(ref, cli.npy("table", "--dim", 16, "--positions", "3,2147483648", "--format", "npy", "--device", "reference"))


def test_table_inv_freq(cli, device):
    inv = np.geomspace(1.0, 1e-4, 8).astype(np.float32)
    path = cli.save("inv.npy", inv)
    ours = posenc.table(16, len=5, inv_freq=inv, device=device)
    same_bits(ours, cli.npy("table", "--dim", 16, "--len", 5, "--inv-freq", path, "--format", "npy", "--device", device))
    same_bits(ours, posenc.table(16, len=5, inv_freq=path, device=device))


# ---- encode -----------------------------------------------------------------------------


def _weights(rng, vocab, dim, dtype):
    w = rng.standard_normal((vocab, dim)).astype(np.float32)
    if dtype == "f16":
        return w.astype(np.float16)
    return w


@pytest.mark.parametrize("out_dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("table_dtype", ["f32", "f16"])
def test_encode(cli, device, out_dtype, table_dtype):
    rng = np.random.default_rng(7)
    w = _weights(rng, 100, 64, table_dtype)
    ids = rng.integers(0, 100, (3, 17)).astype(np.int64)
    wp, ip = cli.save("w.npy", w), cli.save("ids.npy", ids)
    ours = posenc.encode(w, ids, out_dtype=out_dtype, device=device)
    theirs = cli.npy("encode", "--weights", wp, "--ids", ip, "--out-dtype", out_dtype, "--device", "cpu")
    same_bits(ours, theirs)
    if out_dtype == "bf16":
        assert ours.dtype == np.uint16


def test_encode_options(cli, device):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((50, 32)).astype(np.float32)
    ids = rng.integers(0, 50, (2, 9)).astype(np.int32)
    ids[0, :3] = 49  # left padding with pad id 49
    offsets = np.array([5, 2**20], dtype=np.int64)
    positions = rng.integers(0, 2**32, (2, 9), dtype=np.uint64).astype(np.uint32)
    wp, ip = cli.save("w.npy", w), cli.save("ids.npy", ids)
    op, pp = cli.save("off.npy", offsets), cli.save("pos.npy", positions)
    cases = [
        (dict(pad_id=49), ["--pad-id", 49]),
        (dict(offsets=offsets), ["--offsets", op]),
        (dict(positions=positions), ["--positions", pp]),
        (dict(variant="fairseq", padding_idx=49), ["--variant", "fairseq", "--padding-idx", 49]),
        (dict(base=500.0, start_index=4), ["--base", 500.0, "--start-index", 4]),
    ]
    for kwargs, args in cases:
        ours = posenc.encode(w, ids, device=device, **kwargs)
        same_bits(ours, cli.npy("encode", "--weights", wp, "--ids", ip, *args, "--device", "cpu"))
    # A scale too: the kernels round its product before the add, so no GPU fuses them.
    ours = posenc.encode(w, ids, scale="sqrt", device=device)
    same_bits(ours, cli.npy("encode", "--weights", wp, "--ids", ip, "--scale", "sqrt", "--device", "cpu"))
    ours = posenc.encode(w, ids, scale=0.5, device=device)
    same_bits(ours, cli.npy("encode", "--weights", wp, "--ids", ip, "--scale", 0.5, "--device", "cpu"))


def test_encode_one_sequence_learned_and_files(cli, device):
    rng = np.random.default_rng(5)
    w = rng.standard_normal((40, 16)).astype(np.float32)
    p = rng.standard_normal((30, 16)).astype(np.float32)
    ids = rng.integers(0, 40, 12).astype(np.uint32)
    wp, pp, ip = cli.save("w.npy", w), cli.save("p.npy", p), cli.save("ids.npy", ids)
    ours = posenc.encode(w, ids, position_table=p, device=device)
    assert ours.shape == (12, 16)
    same_bits(ours, cli.npy("encode", "--weights", wp, "--ids", ip, "--position-table", pp, "--device", "cpu"))
    # Files, as the command line reads them.
    same_bits(posenc.encode(str(wp), ids, position_table=pp, device=device), ours)


def test_encode_config(cli, device):
    rng = np.random.default_rng(9)
    config = json.loads((CONFIGS / "opus-mt-en-de.json").read_text())
    d = config["d_model"]
    w = rng.standard_normal((config["vocab_size"] // 100, d)).astype(np.float32)
    ids = rng.integers(0, w.shape[0], (2, 5)).astype(np.int64)
    wp, ip = cli.save("w.npy", w), cli.save("ids.npy", ids)
    ours = posenc.encode(w, ids, config=CONFIGS / "opus-mt-en-de.json", device="cpu")
    same_bits(ours, cli.npy("encode", "--weights", wp, "--ids", ip, "--config", CONFIGS / "opus-mt-en-de.json", "--device", "cpu"))
    # The same config as a dict and as JSON text.
    same_bits(posenc.encode(w, ids, config=config, device="cpu"), ours)
    same_bits(posenc.encode(w, ids, config=json.dumps(config), device="cpu"), ours)


def test_encode_bf16_table(device):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(2)
    w = rng.standard_normal((20, 8)).astype(ml_dtypes.bfloat16)
    ids = np.array([[1, 2, 3]])
    a = posenc.encode(w, ids, device=device)
    b = posenc.encode(w.view(np.uint16), ids, device=device)
    same_bits(a, b)
    # bf16 rows widen exactly: the same as the f32 table of the same values.
    same_bits(a, posenc.encode(w.astype(np.float32), ids, device=device))


def test_encode_strided_input(device):
    rng = np.random.default_rng(4)
    big = rng.standard_normal((30, 64)).astype(np.float32)
    w = big[:, ::2]  # not contiguous
    ids = np.array([[0, 5, 29]])
    same_bits(posenc.encode(w, ids, device=device), posenc.encode(np.ascontiguousarray(w), ids, device=device))


@pytest.mark.parametrize("out_dtype", ["f32", "f16", "bf16", "ml_bf16"])
def test_encode_into_out(device, out_dtype):
    # `out=` gets the bits of a new result: in C order (the CPU's sinusoid writes it where
    # it is), every other element of a wider array (the elements between untouched), one
    # sequence's rank-2 output; with a learned table and a scale too. The sizes cross the
    # CPU's serial bound.
    rng = np.random.default_rng(15)
    dtype = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}.get(out_dtype)
    if out_dtype == "ml_bf16":
        dtype = pytest.importorskip("ml_dtypes").bfloat16
    od = "bf16" if out_dtype == "ml_bf16" else out_dtype
    w = rng.standard_normal((500, 256)).astype(np.float32)
    ids = rng.integers(0, 500, (3, 300))
    learned = rng.standard_normal((400, 256)).astype(np.float32)
    for kwargs in (dict(), dict(scale="sqrt", offsets=[0, 7, 2**31]), dict(position_table=learned)):
        want = posenc.encode(w, ids, out_dtype=od, device=device, **kwargs)
        out = np.empty((3, 300, 256), dtype)
        assert posenc.encode(w, ids, out_dtype=od, device=device, out=out, **kwargs) is out
        same_bits(out, want)
        wide = np.full((3, 300, 512), 7, dtype)
        every_other = wide[..., ::2]
        assert posenc.encode(w, ids, out_dtype=od, device=device, out=every_other, **kwargs) is every_other
        same_bits(every_other, want)
        same_bits(wide[..., 1::2], np.full((3, 300, 256), 7, dtype))
        if "offsets" not in kwargs:
            one = np.empty((300, 256), dtype)
            posenc.encode(w, ids[1], out_dtype=od, device=device, out=one, **kwargs)
            same_bits(one, want[1])


# ---- rope -------------------------------------------------------------------------------
# ---- rope -------------------------------------------------------------------------------


def _tensor(rng, shape, dtype):
    x = rng.standard_normal(shape).astype(np.float32)
    if dtype == "f16":
        return x.astype(np.float16)
    if dtype == "bf16":
        return (x.view(np.uint32) >> 16).astype(np.uint16)
    return x


ROPE_CASES = [
    (dict(), []),
    (dict(pairing="gptj", base=5e5), ["--pairing", "gptj", "--base", 5e5]),
    (dict(rotary_dim=16), ["--rotary-dim", 16]),
    (dict(offset=2**20 + 3), ["--offset", 2**20 + 3]),
    (dict(scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, offset=100000),
     ["--scaling", json.dumps({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
      "--offset", 100000]),
    (dict(scaling='{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}'),
     ["--scaling", '{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}']),
    (dict(scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 8}, seq_len=64),
     ["--scaling", '{"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 8}', "--seq-len", 64]),
]


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("layout", ["blhd", "bhld"])
@pytest.mark.parametrize("case", range(len(ROPE_CASES)))
def test_rope(cli, device, dtype, layout, case):
    kwargs, args = ROPE_CASES[case]
    rng = np.random.default_rng(case)
    shape = (2, 5, 3, 32) if layout == "blhd" else (2, 3, 5, 32)
    x = _tensor(rng, shape, dtype)
    xp = cli.save("x.npy", x)
    ours = posenc.rope(x, layout=layout, device=device, **kwargs)
    theirs = cli.npy("rope", "--input", xp, "--layout", layout, *args, "--device", device)
    assert ours.dtype == x.dtype
    same_bits(ours, theirs)


def test_rope_positions_and_config(cli, device):
    rng = np.random.default_rng(11)
    x = _tensor(rng, (2, 4, 2, 128), "f32")
    positions = rng.integers(0, 2**32, (2, 4), dtype=np.uint64).astype(np.int64)
    xp, pp = cli.save("x.npy", x), cli.save("p.npy", positions)
    for name in ["llama-3.1-8b.json", "qwen2.5-7b-instruct.yarn.json", "deepseek-v3.json"]:
        config = CONFIGS / name
        head = json.loads(config.read_text())
        x_ = x if name != "deepseek-v3.json" else _tensor(rng, (2, 4, 2, head["qk_rope_head_dim"]), "f32")
        xp_ = cli.save(f"x-{name}.npy", x_)
        ours = posenc.rope(x_, layout="blhd", positions=positions, config=config, device=device)
        same_bits(ours, cli.npy("rope", "--input", xp_, "--layout", "blhd", "--positions", pp, "--config", config, "--device", device))
    phi = CONFIGS / "phi-2.json"
    x = _tensor(rng, (1, 3, 2, 80), "f16")
    xp = cli.save("phi.npy", x)
    same_bits(posenc.rope(x, layout="blhd", config=phi, offset=9, device=device),
              cli.npy("rope", "--input", xp, "--layout", "blhd", "--config", phi, "--offset", 9, "--device", device))


def test_rope_inv_freq(cli, device):
    rng = np.random.default_rng(12)
    x = _tensor(rng, (1, 6, 2, 16), "f32")
    inv = (1.0 / 10000 ** (np.arange(0, 16, 2) / 16)).astype(np.float32)
    xp, ip = cli.save("x.npy", x), cli.save("inv.npy", inv)
    ours = posenc.rope(x, layout="blhd", inv_freq=inv, attention_factor=1.25, offset=2**31, device=device)
    same_bits(ours, cli.npy("rope", "--input", xp, "--layout", "blhd", "--inv-freq", ip,
                            "--attention-factor", 1.25, "--offset", 2**31, "--device", device))


def test_rope_bf16_ml_dtypes(device):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(13)
    bits = _tensor(rng, (1, 4, 2, 16), "bf16")
    out = posenc.rope(bits.view(ml_dtypes.bfloat16), layout="blhd", offset=77, device=device)
    assert out.dtype == ml_dtypes.bfloat16
    same_bits(out.view(np.uint16), posenc.rope(bits, layout="blhd", offset=77, device=device))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "ml_bf16"])
@pytest.mark.parametrize("layout", ["blhd", "bhld"])
def test_rope_into_out_and_in_place(device, dtype, layout):
    # `out=` gets the bits of a new result: a contiguous out, every other element of a wider
    # array (the elements between untouched), x itself, and another view laid over x. The
    # sizes cross the CPU's serial bound, so the pool's tasks copy and rotate too.
    rng = np.random.default_rng(14)
    shape = (2, 90, 4, 256) if layout == "blhd" else (2, 4, 90, 256)
    x = _tensor(rng, shape, "bf16" if dtype == "ml_bf16" else dtype)
    if dtype == "ml_bf16":
        x = x.view(pytest.importorskip("ml_dtypes").bfloat16)
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    kwargs = dict(layout=layout, offset=4_000_000_000, scaling=yarn, device=device)
    want = posenc.rope(x, **kwargs)
    before = x.copy()

    out = np.empty_like(x)
    assert posenc.rope(x, out=out, **kwargs) is out
    same_bits(out, want)
    same_bits(x, before)

    wide = np.full(shape[:3] + (2 * shape[3],), 7, dtype=x.dtype)
    every_other = wide[..., ::2]
    assert posenc.rope(x, out=every_other, **kwargs) is every_other
    same_bits(every_other, want)
    same_bits(wide[..., 1::2], np.full(shape, 7, dtype=x.dtype))

    y = x.copy()
    assert posenc.rope(y, out=y, **kwargs) is y
    same_bits(y, want)

    wide[..., ::2] = x
    strided = wide[..., ::2]
    posenc.rope(strided, out=wide[..., ::2], **kwargs)
    same_bits(strided, want)
    same_bits(wide[..., 1::2], np.full(shape, 7, dtype=x.dtype))


# ---- rope_cache -------------------------------------------------------------------------


def _cli_cache(cli, *args):
    both = cli.npy("rope-cache", *args, "--format", "npy")
    return both[0], both[1]


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_rope_cache_config(cli, device, dtype):
    config = CONFIGS / "llama-3.1-8b.json"
    cos, sin = posenc.rope_cache(config, seq_len=300, dtype=dtype, device=device)
    tc, ts = _cli_cache(cli, "--config", config, "--len", 300, "--dtype", dtype, "--device", device)
    same_bits(cos, tc)
    same_bits(sin, ts)


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.json")))
def test_rope_cache_every_corpus_config(cli, name):
    config = CONFIGS / name
    text = json.loads(config.read_text())
    layer_types = [None]
    if "gemma-3" in name or "gemma-4" in name:
        layer_types = ["full_attention", "sliding_attention"]
    for layer_type in layer_types:
        extra = [] if layer_type is None else ["--layer-type", layer_type]
        done = cli.run("rope-cache", "--config", config, "--len", 3, *extra, "-o", cli.tmp / "x")
        if done.returncode != 0:
            message = done.stderr.strip().removeprefix("posenc: ")
            with pytest.raises(ValueError) as e:
                posenc.rope_cache(config, seq_len=3, layer_type=layer_type, device="cpu")
            assert str(e.value) == message
            continue
        try:
            pairing = posenc.module_pairing(config)
            # The command's default is the module's layout too: one table in the library.
            given = []
        except ValueError:
            pairing = "gptj"  # GPT-J: no module; compare the config's own layout
            given = ["--pairing", pairing]
        cache = posenc.rope_cache(config, positions="0..2,1000000", layer_type=layer_type,
                                  pairing=None if not given else pairing, device="cpu")
        tc, ts = _cli_cache(cli, "--config", config, "--positions", "0..2,1000000", *given,
                            *extra, "--device", "cpu")
        same_bits(cache.cos, tc)
        same_bits(cache.sin, ts)
        assert cache.pairing == pairing, text.get("model_type")


def test_rope_cache_module_layout():
    # GLM-4 rotates (2i, 2i + 1) pairs, but its rotary module returns cat(freqs, freqs).
    glm4 = {"model_type": "glm4", "hidden_size": 256, "num_attention_heads": 4, "head_dim": 64,
            "partial_rotary_factor": 0.5, "rope_theta": 10000.0}
    assert posenc.RopeSpec(glm4, pairing=None).pairing == "neox"
    assert posenc.rope_cache(glm4, seq_len=2).pairing == "neox"
    cohere = {"model_type": "cohere", "hidden_size": 256, "num_attention_heads": 4, "rope_theta": 10000.0}
    assert posenc.rope_cache(cohere, seq_len=2).pairing == "gptj"
    # (With rope_parameters: its legacy form is its class's own yarn RoPE, refused first.)
    gpt_oss = {"model_type": "gpt_oss", "hidden_size": 256, "num_attention_heads": 4, "head_dim": 64,
               "rope_parameters": {"rope_type": "default", "rope_theta": 150000.0}}
    with pytest.raises(ValueError, match="gpt_oss.*half the rotary width"):
        posenc.rope_cache(gpt_oss, seq_len=2)
    roformer = {"model_type": "roformer", "hidden_size": 64, "num_attention_heads": 4}
    with pytest.raises(ValueError, match="roformer.*one table of sines then cosines"):
        posenc.module_pairing(roformer)
    assert posenc.rope_cache(roformer, seq_len=2, pairing="gptj").pairing == "gptj"


def test_rope_cache_options(cli, device):
    args = ["--head-dim", 64, "--rotary-dim", 32, "--base", 5e5, "--pairing", "gptj",
            "--positions", "0..8,4294967295"]
    cache = posenc.rope_cache(head_dim=64, rotary_dim=32, base=5e5, pairing="gptj",
                              positions="0..8,4294967295", device=device)
    tc, ts = _cli_cache(cli, *args, "--device", device)
    same_bits(cache.cos, tc)
    same_bits(cache.sin, ts)
    scaling = {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
               "original_max_position_embeddings": 16, "factor": 4.0}
    cache = posenc.rope_cache(head_dim=16, scaling=scaling, positions=np.arange(4), seq_len=100, device=device)
    tc, ts = _cli_cache(cli, "--head-dim", 16, "--scaling", json.dumps(scaling), "--positions", "0..4",
                        "--seq-len", 100, "--device", device)
    same_bits(cache.cos, tc)
    same_bits(cache.sin, ts)
    assert cache.attention_factor > 1


# ---- alibi ------------------------------------------------------------------------------


@pytest.mark.parametrize("heads", [1, 8, 12, 80])
def test_alibi_slopes(cli, heads):
    done = cli.run("alibi", "--heads", heads, "--slopes")
    theirs = np.array([np.float32(v) for v in done.stdout.split()], dtype=np.float32)
    same_bits(posenc.alibi_slopes(heads), theirs)


@pytest.mark.parametrize("form", ["symmetric", "causal"])
def test_alibi_bias(cli, device, form):
    ours = posenc.alibi_bias(12, 7, kv_len=20, form=form, offset=9, device=device)
    theirs = cli.npy("alibi", "--heads", 12, "--len", 7, "--kv-len", 20, "--form", form,
                     "--offset", 9, "--device", device)
    same_bits(ours, theirs)
    same_bits(posenc.alibi_bias(5, 6, device=device), cli.npy("alibi", "--heads", 5, "--len", 6, "--device", device))


def test_devices(cli):
    done = cli.run("devices", "--json")
    assert posenc.devices() == json.loads(done.stdout)


def test_table_and_alibi_bias_into_out(device):
    # `out=` gets the bits of a new result: in C order, every other element of a wider
    # array (the elements between untouched); the reference path too for the table.
    positions = np.array([0, 7, 2**20, 2**32 - 1, 5] * 40, dtype=np.uint32)
    want = posenc.table(64, positions=positions, device=device)
    out = np.empty((200, 64), np.float32)
    assert posenc.table(64, positions=positions, device=device, out=out) is out
    same_bits(out, want)
    wide = np.full((200, 128), 7.0, np.float32)
    assert posenc.table(64, positions=positions, device=device, out=wide[:, ::2]) is not None
    same_bits(wide[:, ::2], want)
    assert (wide[:, 1::2] == 7.0).all()
    ref = posenc.table(16, positions=[3, 2**31], device="reference")
    out = np.empty((2, 16), np.float32)
    posenc.table(16, positions=[3, 2**31], device="reference", out=out)
    same_bits(out, ref)
    for form in ("symmetric", "causal"):
        want = posenc.alibi_bias(12, 7, kv_len=300, form=form, offset=9, device=device)
        out = np.empty((12, 7, 300), np.float32)
        assert posenc.alibi_bias(12, 7, kv_len=300, form=form, offset=9, device=device, out=out) is out
        same_bits(out, want)
        wide = np.full((12, 7, 600), 7.0, np.float32)
        posenc.alibi_bias(12, 7, kv_len=300, form=form, offset=9, device=device, out=wide[..., ::2])
        same_bits(wide[..., ::2], want)
        assert (wide[..., 1::2] == 7.0).all()
