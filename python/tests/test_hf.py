"""posenc.hf on real transformers modules built from configs with random weights (no hub
download), on CPU torch: logits equal to the original's within float32 rounding at small
positions, closer to a float64 reference past 2^20, generate() with the KV cache, families
refused by name, and undo."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import posenc  # noqa: E402
import posenc.hf  # noqa: E402

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=256, max_position_embeddings=4096,
            pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _model(config_class: str, auto: str = "AutoModelForCausalLM", **kwargs):
    if not hasattr(transformers, config_class):
        pytest.skip(f"{config_class} is not in transformers {transformers.__version__}")
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**{**TINY, **kwargs})
    config._attn_implementation = "eager"
    model = getattr(transformers, auto).from_config(config)
    model.eval()
    return model


FAMILIES = {
    "llama3": lambda: _model("LlamaConfig", rope_parameters={
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}),
    "qwen2-yarn": lambda: _model("Qwen2Config", rope_parameters={
        "rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 1024}),
    # transformers tests `truncate` for truth: false and null (None) alike leave YaRN's
    # correction range unrounded (round twenty-eight: posenc had truncated at a null).
    "qwen2-yarn-truncate-false": lambda: _model("Qwen2Config", rope_parameters={
        "rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 1024,
        "truncate": False}),
    "qwen2-yarn-truncate-null": lambda: _model("Qwen2Config", rope_parameters={
        "rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 1024,
        "truncate": None}),
    "mistral": lambda: _model("MistralConfig", rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
    "phi-partial": lambda: _model("PhiConfig", partial_rotary_factor=0.5, num_key_value_heads=4,
                                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    "gemma3-layer-types": lambda: _model(
        "Gemma3TextConfig", head_dim=16, sliding_window=32,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    "cohere-interleaved": lambda: _model("CohereConfig", rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    "glm4-neox-cache": lambda: _model("Glm4Config", head_dim=16, partial_rotary_factor=0.5,
                                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    # Its RoPE parameters carry its attention's llama_4_scaling_beta (a query scale after
    # the rotation, 1 below original_max_position_embeddings) and max_position_embeddings,
    # as its config class writes them.
    "ministral3-attention-keys": lambda: _model("Ministral3Config", head_dim=16, rope_parameters={
        "type": "yarn", "rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
        "original_max_position_embeddings": 1024, "max_position_embeddings": 4096,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
        "llama_4_scaling_beta": 0.1}),
    # HunYuan's NTK-alpha: a "dynamic" object with alpha, as tencent ships it.
    "hunyuan-ntk-alpha": lambda: _model("HunYuanDenseV1Config", head_dim=16, rope_scaling={
        "alpha": 1000.0, "beta_fast": 32, "beta_slow": 1, "factor": 1.0, "mscale": 1.0,
        "mscale_all_dim": 1.0, "type": "dynamic"}),
}


def _logits(model, ids, positions=None):
    with torch.no_grad():
        return model(input_ids=ids, position_ids=positions).logits.double()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_match_at_small_positions(family):
    model = FAMILIES[family]()
    ids = torch.randint(0, TINY["vocab_size"], (2, 24), generator=torch.Generator().manual_seed(1))
    before = _logits(model, ids)
    original = [m for _, m in model.named_modules() if type(m).__name__.endswith("RotaryEmbedding")]
    patch = posenc.hf.exact_rotary(model)
    assert all(isinstance(m, posenc.hf.ExactRotary) for m in patch.modules)
    after = _logits(model, ids)
    # Float32 rounding: HF's float32 angles at positions < 24 are within 24 * 2^-24 rad of
    # posenc's exact ones; through two layers that moves logits of magnitude ~1 by < 1e-4.
    scale = float(before.abs().max())
    assert float((after - before).abs().max()) <= 1e-4 * max(scale, 1.0)
    patch.undo()
    now = [m for _, m in model.named_modules() if type(m).__name__.endswith("RotaryEmbedding")]
    assert [id(m) for m in now] == [id(m) for m in original]
    assert torch.equal(_logits(model, ids), before)


class Float64Rotary(torch.nn.Module):
    """The reference: cos and sin of Llama's default RoPE in float64 (the angle p * w
    has a relative error of 2^-53, 1e-10 rad at position 2^21)."""

    def __init__(self, head_dim, base):
        super().__init__()
        self.inv_freq64 = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)

    def forward(self, x, position_ids):
        p = position_ids.double().numpy()[..., None]
        freqs = p * self.inv_freq64
        emb = np.concatenate([freqs, freqs], axis=-1)
        return (torch.from_numpy(np.cos(emb)).to(x.dtype), torch.from_numpy(np.sin(emb)).to(x.dtype))


def test_closer_to_float64_past_2_20():
    base = 10000.0
    model = _model("LlamaConfig", max_position_embeddings=1 << 22,
                   rope_parameters={"rope_type": "default", "rope_theta": base})
    ids = torch.randint(0, TINY["vocab_size"], (1, 16), generator=torch.Generator().manual_seed(2))
    positions = (torch.arange(16) + (1 << 20) + 12345)[None, :]

    reference_model = _model("LlamaConfig", max_position_embeddings=1 << 22,
                             rope_parameters={"rope_type": "default", "rope_theta": base}).double()
    reference_model.model.rotary_emb = Float64Rotary(16, base)
    reference = _logits(reference_model, ids, positions)

    hf = _logits(model, ids, positions)
    posenc.hf.exact_rotary(model, max_positions=0)  # every position computed per call
    exact = _logits(model, ids, positions)
    err_hf = float((hf - reference).abs().max())
    err_exact = float((exact - reference).abs().max())
    print(f"max |logits - float64 reference| past 2^20: transformers {err_hf:.3g}, posenc {err_exact:.3g}")
    assert err_exact * 10 < err_hf
    # posenc's error is float32 arithmetic in the layers, not the angles.
    assert err_exact < 1e-4


def test_table_and_per_call_paths_agree():
    model = FAMILIES["llama3"]()
    ids = torch.randint(0, TINY["vocab_size"], (1, 8), generator=torch.Generator().manual_seed(3))
    positions = torch.tensor([[0, 1, 2, 500, 4094, 4095, 4096, 100000]])
    with posenc.hf.exact_rotary(model):  # table of 4096 rows; the last two per call
        a = _logits(model, ids, positions)
    with posenc.hf.exact_rotary(model, max_positions=0):
        b = _logits(model, ids, positions)
    assert torch.equal(a, b)


@pytest.mark.parametrize("family", ["llama3", "gemma3-layer-types"])
def test_generate_with_kv_cache(family):
    model = FAMILIES[family]()
    ids = torch.randint(0, TINY["vocab_size"], (2, 7), generator=torch.Generator().manual_seed(4))
    settings = dict(max_new_tokens=12, do_sample=False, use_cache=True, pad_token_id=0)
    with torch.no_grad():
        theirs = model.generate(ids, **settings)
        posenc.hf.exact_rotary(model)
        ours = model.generate(ids, **settings)
        posenc.hf.undo(model)
    assert ours.shape == (2, 19)
    # At these positions the two rotaries agree within float32 rounding, far below the
    # random model's logit gaps: greedy decoding picks the same tokens.
    assert torch.equal(ours, theirs)


def test_refused_by_name():
    model = _model("GptOssConfig", head_dim=16, num_local_experts=2, num_experts_per_tok=1,
                   layer_types=["full_attention", "full_attention"])
    with pytest.raises(ValueError, match=r"model_type 'gpt_oss'.*half the rotary width"):
        posenc.hf.exact_rotary(model)
    # Nothing was replaced.
    assert not any(isinstance(m, posenc.hf.ExactRotary) for m in model.modules())


def test_a_failure_building_a_later_table_replaces_nothing(monkeypatch):
    # Two rotary modules; the second table's build fails (as a MemoryError did for a
    # stranger's max_positions=2**25): the first must not have been swapped in already.
    import copy
    model = FAMILIES["mistral"]()
    model.model.second_rotary_emb = copy.deepcopy(model.model.rotary_emb)
    built = []
    real_init = posenc.hf.ExactRotary.__init__

    def failing_second(self, *args, **kwargs):
        if built:
            raise MemoryError("could not allocate the cos cache")
        built.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(posenc.hf.ExactRotary, "__init__", failing_second)
    with pytest.raises(MemoryError):
        posenc.hf.exact_rotary(model)
    assert not any(isinstance(m, posenc.hf.ExactRotary) for m in model.modules())
    assert getattr(model, "_posenc_patch", None) is None
    for bad in ("64", 1.5, -3, True, 2**32 + 1):
        with pytest.raises(ValueError, match="max_positions"):
            posenc.hf.exact_rotary(model, max_positions=bad)


def test_a_table_past_max_output_values_is_refused_before_its_positions_are_made(monkeypatch):
    # 2^31 rows of 16 values: np.arange of its rows alone took 16 GiB before the cache
    # refused it (round twenty-one of the hostile probes); refused first, naming the limit.
    model = FAMILIES["mistral"]()
    made, arange = [], np.arange
    monkeypatch.setattr(np, "arange", lambda *a, **k: made.append(a) or arange(*a, **k))
    with pytest.raises(ValueError, match=r"max_positions: 2147483648 rows .*MAX_OUTPUT_VALUES"):
        posenc.hf.exact_rotary(model, max_positions=2**31, check=False)
    assert not made
    assert getattr(model, "_posenc_patch", None) is None


def test_negative_positions_are_named_where_they_are():
    model = FAMILIES["mistral"]()
    with posenc.hf.exact_rotary(model) as patch:
        rotary = patch.modules[0]
        x = torch.zeros(1, 3, 8)
        pos = torch.tensor([[0, 5, -1]])
        with pytest.raises(ValueError, match=r"^posenc.hf: position_ids\[0, 2\] is -1 "):
            rotary(x, pos)


def test_whole_float_positions_are_taken_and_fractions_refused():
    # The module posenc replaces takes float position_ids (it computes with them as
    # floats): whole ones give its integers' values, on the table path and per call; a
    # fraction was rounded down per call (2.5 read as 2) and an IndexError on the table.
    model = FAMILIES["mistral"]()
    x = torch.zeros(1, 3, 8)
    for max_positions in (None, 0):
        with posenc.hf.exact_rotary(model, max_positions=max_positions) as patch:
            rotary = patch.modules[0]
            want = rotary(x, torch.tensor([[1, 2, 3]]))
            got = rotary(x, torch.tensor([[1.0, 2.0, 3.0]]))
            for a, b in zip(got, want):
                assert torch.equal(a, b)
            with pytest.raises(ValueError, match=r"position_ids\[0, 1\] is 2.5 \(allowed: whole"):
                rotary(x, torch.tensor([[1.0, 2.5, 3.75]]))
            with pytest.raises(ValueError, match="position_ids of dtype torch.bool"):
                rotary(x, torch.tensor([[True, False, True]]))
            # A whole float past posenc's positions is named as given (it was named as
            # int64's wrapped value, -9223372036854775808).
            for big, dtype in ((1e30, torch.float32), (3e38, torch.bfloat16)):
                with pytest.raises(ValueError, match=r"position_ids\[0, 1\] is [0-9.e+]+ \(allowed"):
                    rotary(x, torch.tensor([[1.0, big, 3.0]], dtype=dtype))


def test_every_integer_type_of_positions_is_served_as_int64():
    # The module posenc replaces takes position ids of any integer type; int8 and int16
    # met torch's index rules, the unsigned ones its missing min and max, and uint8 was
    # taken as a mask (a (0,) result where the module gives [batch, len, dim]).
    model = FAMILIES["mistral"]()
    x = torch.zeros(1, 3, 8)
    dtypes = [torch.int8, torch.int16, torch.int32, torch.uint8]
    dtypes += [getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n)]
    for max_positions in (None, 1, 0):
        with posenc.hf.exact_rotary(model, max_positions=max_positions) as patch:
            rotary = patch.modules[0]
            want = rotary(x, torch.tensor([[0, 2, 5]]))
            for dtype in dtypes:
                got = rotary(x, torch.tensor([[0, 2, 5]], dtype=dtype))
                for a, b in zip(got, want):
                    assert a.shape == b.shape and torch.equal(a, b), (max_positions, dtype)
            if hasattr(torch, "uint64"):
                past = torch.tensor([[0, 2**40]], dtype=torch.uint64)
                with pytest.raises(ValueError, match=r"position_ids\[0, 1\] is 1099511627776 "):
                    rotary(x[:, :2], past)


def test_a_config_whose_json_is_not_text_is_refused_as_rope_cache_refuses_it():
    # posenc.hf passed to_json_string()'s result on unchecked: bytes and ints met a
    # TypeError of pyo3's; UTF-8 bytes are read, as rope_cache reads them.
    model = FAMILIES["mistral"]()
    text = model.config.to_json_string(use_diff=False)

    class Gives:
        model_type = "mistral"

        def __init__(self, value):
            self.value = value
            self.max_position_embeddings = 64

        def to_json_string(self, use_diff=False):
            return self.value

    def rotary_module_with(config):
        model = FAMILIES["mistral"]()
        model.config = config
        model.model.rotary_emb.config = config
        return model

    patch = posenc.hf.exact_rotary(rotary_module_with(Gives(text.encode())), check=False)
    patch.undo()
    for bad, named in ((b"\xff{", "not UTF-8"), (7, "gave int")):
        with pytest.raises(ValueError, match=named):
            posenc.hf.exact_rotary(rotary_module_with(Gives(bad)), check=False)


def test_patching_a_part_of_a_patched_model_and_undoing_through_it():
    model = FAMILIES["mistral"]()
    # The whole model, then its part: already posenc's (it said "no rotary module").
    patch = posenc.hf.exact_rotary(model)
    with pytest.raises(ValueError, match="already posenc's \\(model.rotary_emb|already posenc's \\(rotary_emb"):
        posenc.hf.exact_rotary(model.model)
    with pytest.raises(ValueError, match="through a model that holds it"):
        posenc.hf.undo(model.model)
    patch.undo()
    # The part, then the whole: refused; undo of the whole undoes the part's patch.
    posenc.hf.exact_rotary(model.model)
    with pytest.raises(ValueError, match="already posenc's"):
        posenc.hf.exact_rotary(model)
    posenc.hf.undo(model)
    assert not isinstance(model.model.rotary_emb, posenc.hf.ExactRotary)
    with pytest.raises(ValueError, match="its own"):
        posenc.hf.undo(model)


def test_refused_when_the_module_disagrees():
    model = FAMILIES["mistral"]()
    # A module whose values are not what its config says: the probe catches it.
    model.model.rotary_emb.inv_freq.mul_(1.01)
    with pytest.raises(ValueError, match="differ from its rotary module's"):
        posenc.hf.exact_rotary(model)


def test_no_rotary_module():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64, n_positions=64)
    model = transformers.GPT2LMHeadModel(config)
    with pytest.raises(ValueError, match="no rotary embedding module"):
        posenc.hf.exact_rotary(model)


def test_twice_is_refused_and_undo_is_idempotent():
    model = FAMILIES["mistral"]()
    patch = posenc.hf.exact_rotary(model)
    with pytest.raises(ValueError, match="already posenc's"):
        posenc.hf.exact_rotary(model)
    patch.undo()
    patch.undo()
    with pytest.raises(ValueError, match="its own"):
        posenc.hf.undo(model)


def test_bf16_model():
    model = FAMILIES["llama3"]().to(torch.bfloat16)
    ids = torch.randint(0, TINY["vocab_size"], (1, 10), generator=torch.Generator().manual_seed(5))
    posenc.hf.exact_rotary(model)
    rotary = model.model.rotary_emb
    x = torch.zeros(1, 10, 16, dtype=torch.bfloat16)
    cos, sin = rotary(x, torch.arange(10)[None])
    assert cos.dtype == torch.bfloat16 and cos.shape == (1, 10, 16)
    assert math.isfinite(float(_logits(model, ids).abs().max()))
    # Cast after the patch, back and forth: the tables stay float32, cos and sin are
    # rounded once per call, to that call's dtype.
    model.to(torch.float32)
    model.to(torch.bfloat16)
    model.to(torch.float32)
    x32 = torch.zeros(1, 10, 16)
    cos32, _ = rotary(x32, torch.arange(10)[None])
    fresh = posenc.rope_cache(model.config, positions=range(10), device="cpu").cos
    assert torch.equal(cos32[0], torch.from_numpy(fresh))


def _tiny(config_class: str, **kwargs):
    if not hasattr(transformers, config_class):
        pytest.skip(f"transformers {transformers.__version__} has no {config_class}")
    return _model(config_class, **kwargs)


def _text_model(config_class: str, **kwargs):
    """A multimodal model's language model alone (no causal LM class of its own)."""
    return _model(config_class, auto="AutoModel", **kwargs)


MROPE = {
    # Qwen3.5's text RoPE is a multimodal one (mrope_section [11, 11, 10] when the config
    # has none), called with [3, batch, len] position_ids.
    "qwen3_5": lambda: _tiny("Qwen3_5TextConfig", head_dim=16, linear_key_head_dim=16,
                             linear_value_head_dim=16,
                             layer_types=["linear_attention", "full_attention"]),
    "qwen2_vl": lambda: _text_model("Qwen2VLTextConfig", rope_parameters={
        "rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]}),
    "qwen3_vl": lambda: _text_model("Qwen3VLTextConfig", head_dim=16, rope_parameters={
        "rope_type": "default", "rope_theta": 5e6, "mrope_section": [2, 3, 3],
        "mrope_interleaved": True}),
    "glm4v": lambda: _text_model("Glm4vTextConfig", partial_rotary_factor=0.5, rope_parameters={
        "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]}),
    # Its height and width axes alternate over the first six frequencies, then time.
    "ernie4_5_vl_moe": lambda: _ernie_vl_text(rope_parameters={
        "rope_type": "default", "rope_theta": 5e5, "mrope_section": [3, 3, 2]}),
}


def _ernie_vl_text(**kwargs):
    """ERNIE 4.5 VL's language model (no AutoModel maps its text config), small."""
    if not hasattr(transformers, "Ernie4_5_VLMoeTextConfig"):
        pytest.skip(f"transformers {transformers.__version__} has no Ernie4_5_VLMoeTextConfig")
    from transformers.models.ernie4_5_vl_moe import modeling_ernie4_5_vl_moe as modeling

    torch.manual_seed(0)
    config = transformers.Ernie4_5_VLMoeTextConfig(
        **TINY, moe_num_experts=4, moe_k=2, moe_intermediate_size=[32, 16], **kwargs)
    config._attn_implementation = "eager"
    return modeling.Ernie4_5_VLMoeTextModel(config).eval()


@pytest.mark.parametrize("family", sorted(MROPE))
def test_mrope_modules_are_served_with_per_axis_positions(family):
    # Served since 2026-12-02 (refused before): each frequency gathered from the position
    # of its axis, for position ids that differ per axis as an image's grid has them.
    model = MROPE[family]()
    ids = torch.randint(3, 256, (1, 40))
    n = torch.arange(40)
    per_axis = torch.stack([n // 8, n % 8 + n // 8, (n * 3) % 8 + 100])[:, None, :]

    def outputs():
        with torch.no_grad():
            out = [model(ids), model(ids, position_ids=per_axis)]
        return [o.logits if hasattr(o, "logits") else o.last_hidden_state for o in out]

    before = outputs()
    patch = posenc.hf.exact_rotary(model)
    assert len(patch.modules) == 1
    after = outputs()
    for b, a in zip(before, after):
        torch.testing.assert_close(a, b, rtol=0, atol=2e-5)
    # The axes matter: the per-axis positions change the output.
    assert (before[1] - before[0]).abs().max() > 1e-3
    patch.undo()


@pytest.mark.parametrize("family", ["ernie4_5", "ernie4_5_vl_moe"])
def test_modules_that_keep_cos_and_sin_in_float32_still_do(family):
    # Review of round seventeen: ERNIE 4.5's rotary modules return float32 cos and sin for
    # a bfloat16 model (its attention rotates in float32); the patch rounded them to
    # bfloat16, less exact than the module it replaced.
    if family == "ernie4_5":
        model = _tiny("Ernie4_5Config", rope_parameters={"rope_type": "default",
                                                         "rope_theta": 5e5})
    else:
        model = MROPE[family]()
    rotary = model.model.rotary_emb if hasattr(model, "model") else model.rotary_emb
    x = torch.zeros(1, 12, 16, dtype=torch.bfloat16)
    pos = torch.arange(12)[None] + 3000
    with torch.no_grad():
        # Before the cast, which rounds the module's own inv_freq to bfloat16.
        cos_m, sin_m = rotary(x, pos)
    assert cos_m.dtype == torch.float32
    model.to(torch.bfloat16)
    patch = posenc.hf.exact_rotary(model)
    rotary = patch.modules[0]
    with torch.no_grad():
        cos, sin = rotary(x, pos)
    assert (cos.dtype, sin.dtype) == (torch.float32, torch.float32)
    # Not rounded to bfloat16: within float32's angle error of the module's.
    torch.testing.assert_close(cos, cos_m, rtol=0, atol=4e-7 * 3012)
    torch.testing.assert_close(sin, sin_m, rtol=0, atol=4e-7 * 3012)
    # A module that returns x's dtype still gets x's.
    llama = FAMILIES["llama3"]().to(torch.bfloat16)
    posenc.hf.exact_rotary(llama)
    assert llama.model.rotary_emb(x, pos)[0].dtype == torch.bfloat16


def test_a_dynamic_module_grown_by_a_long_call_is_still_served():
    # Round eighteen: after a call past max_position_embeddings, a float32 model's dynamic
    # module keeps the grown frequencies (transformers' state), and the check refused it
    # for computing "another RoPE"; it is checked against a fresh module of its config.
    model = _model("Qwen3Config", max_position_embeddings=32, head_dim=16,
                   rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4})
    ids = torch.randint(3, TINY["vocab_size"], (1, 12))
    with torch.no_grad():
        model(ids, position_ids=torch.arange(300, 312)[None])
    rotary = model.model.rotary_emb
    assert not torch.equal(rotary.inv_freq, rotary.original_inv_freq), "the module grew"
    patch = posenc.hf.exact_rotary(model)
    # Served: a call computes its own frequencies, as a fresh module would.
    fresh = _model("Qwen3Config", max_position_embeddings=32, head_dim=16,
                   rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4})
    x = torch.zeros(1, 40, 16)
    pos = torch.arange(40)[None]
    with torch.no_grad():
        torch.testing.assert_close(patch.modules[0](x, pos)[0], fresh.model.rotary_emb(x, pos)[0],
                                   rtol=0, atol=4e-7 * 40)


def test_a_vision_language_model_s_tower_is_named_with_the_way_out():
    # Round thirteen: the vision tower's 2-D RoPE was refused with a message that did not
    # say to patch the language model alone.
    if not hasattr(transformers, "Qwen2VLConfig"):
        pytest.skip(f"transformers {transformers.__version__} has no Qwen2VLConfig")
    torch.manual_seed(0)
    text = dict(TINY, rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                       "mrope_section": [2, 3, 3]})
    vision = dict(depth=1, embed_dim=32, num_heads=2, hidden_size=64, mlp_ratio=2,
                  in_channels=3, patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
    config = transformers.Qwen2VLConfig(text_config=text, vision_config=vision)
    model = transformers.AutoModelForImageTextToText.from_config(config).eval()
    with pytest.raises(ValueError, match=r"qwen2_vl_vision.*exact_rotary\(model\.model\.language_model\)"):
        posenc.hf.exact_rotary(model)
    patch = posenc.hf.exact_rotary(model.model.language_model)
    rotary = patch.modules[0]
    # Position ids of [1, batch, len] are every axis's, as the module expands them.
    x = torch.zeros(1, 5, 16)
    one = rotary(x, torch.arange(5)[None, None, :])
    two = rotary(x, torch.arange(5)[None, :])
    assert all(torch.equal(a, b) for a, b in zip(one, two))
    patch.undo()


def test_mrope_module_whose_section_posenc_does_not_read_is_refused():
    model = MROPE["qwen2_vl"]()
    rotary = next(m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding"))
    rotary.mrope_section = [4, 2, 2]  # not its config's: what would posenc's axes be?
    with pytest.raises(ValueError, match=r"multimodal RoPE \(mrope_section \[4, 2, 2\]\).*section \[2, 3, 3\]"):
        posenc.hf.exact_rotary(model)
    assert not any(isinstance(m, posenc.hf.ExactRotary) for m in model.modules())


def test_hunyuan_vl_xd_rope_module_is_refused():
    # Its module turns the two values of a pair by up to two axes' positions: not served.
    model = _text_model("HunYuanVLTextConfig", head_dim=16, rope_scaling={
        "alpha": 1000.0, "factor": 1.0, "type": "xdrope", "xdrope_section": [2, 2, 2, 2]})
    with pytest.raises(ValueError, match=r"model_type 'hunyuan_vl_text'.*mrope_section \[2, 2, 2, 2\]"):
        posenc.hf.exact_rotary(model)
    assert not any(isinstance(m, posenc.hf.ExactRotary) for m in model.modules())


def test_layer_types_without_rope():
    # LFM3's conv layers have no RoPE, and its rotary module serves only the attention
    # layer types: the others are not asked of posenc (which refused "conv").
    model = _tiny("Lfm3Config", head_dim=16, layer_types=["conv", "full_attention"])
    ids = torch.randint(3, TINY["vocab_size"], (1, 12), generator=torch.Generator().manual_seed(7))
    before = _logits(model, ids)
    with posenc.hf.exact_rotary(model) as patch:
        assert list(patch.modules[0].specs) == ["full_attention"]
        after = _logits(model, ids)
    assert float((after - before).abs().max()) <= 1e-4 * max(float(before.abs().max()), 1.0)


def _causal_lm_types():
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError:
        return []
    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


# What a rotary family needs beside TINY to build small and run its own forward: fewer
# experts, a head_dim that fits hidden_size, MLA ranks (DeepSeek-style attention, with as many
# KV heads as heads), layer lists of two layers, small vision/audio towers. A type that is not
# in the installed transformers is never looked up.
_MLA = dict(num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8,
            qk_nope_head_dim=8, v_head_dim=16, head_dim=8)
_ROUTED = dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, n_group=1,
               topk_group=1)
_EXPERTS = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                shared_expert_intermediate_size=32)
_LOCAL = dict(num_local_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
_INDEX = dict(index_head_dim=16, index_n_heads=2, index_topk=8)
_LINEAR = dict(head_dim=16, linear_key_head_dim=16, linear_value_head_dim=16,
               layer_types=["linear_attention", "full_attention"])
_SLIDING = dict(head_dim=16, sliding_window=32, layer_types=["sliding_attention", "full_attention"])
_GEMMA4 = dict(_SLIDING, global_head_dim=32, vocab_size_per_layer_input=256,
               hidden_size_per_layer_input=8)
_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
               image_size=32, patch_size=8)
_QWEN_VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                    out_hidden_size=64, patch_size=8)
_QWEN4_INDEX = dict(indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=16, indexer_budget=8,
                    indexer_compress_ratio=4)
_BLT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
_DOTS3 = dict(_MLA, **_ROUTED, **_INDEX, head_dim=16, per_layer_config={},
              shared_experts_intermediate_size=32)
OVERRIDES = {
    "axk1": dict(_MLA, **_ROUTED),
    "axk2": dict(_MLA, **_ROUTED, **_INDEX),
    "bailing_hybrid": dict(_MLA, num_experts=4, num_experts_per_token=2, moe_intermediate_size=32,
                           num_expert_group=1, topk_group=1, linear_head_dim=16,
                           layer_types=["linear_attention", "full_attention"],
                           mlp_layer_types=["dense", "sparse"]),
    "bamba": dict(attn_layer_indices=[1], mamba_n_heads=4, mamba_d_state=8),
    "blt": dict(patcher_config=_BLT, encoder_config=dict(_BLT, hidden_size_global=64),
                decoder_config=dict(_BLT, hidden_size_global=64), encoder_hash_byte_group_vocab=64,
                global_config=dict(_BLT, hidden_size=64, intermediate_size=128, num_attention_heads=4)),
    "codegen": dict(rotary_dim=8),
    "cohere_compass_text": dict(layer_types=["full_attention"] * 2, rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    "dbrx": dict(d_model=64, n_heads=4, n_layers=2,
                 attn_config=dict(kv_n_heads=2, rope_theta=10000.0, clip_qkv=8.0),
                 ffn_config=dict(ffn_hidden_size=32, moe_num_experts=2, moe_top_k=1)),
    "deepseek_v2": dict(_MLA, **_ROUTED),
    "deepseek_v3": dict(_MLA, **_ROUTED),
    "deepseek_v32": dict(_MLA, **_ROUTED, **_INDEX),
    "deepseek_v4": dict(_ROUTED, **_INDEX, head_dim=16, q_lora_rank=32, o_lora_rank=32,
                        qk_rope_head_dim=8),
    "dory": dict(head_dim=16, layer_types=["sliding_attention", "full_attention"],
                 n_input_layers=1, n_output_layers=1),
    "dots1": dict(_ROUTED, n_shared_experts=1),
    "dots3_note": dict(text_config={**TINY, **_DOTS3}, vision_config=dict(
        _BLT, mlp_layer_types=["dense"], per_layer_config={}, moe_intermediate_size=32,
        num_local_experts=2, adapter_in_dim=32, adapter_out_dim=64), audio_config=dict(
        _BLT, downsample_hidden_size=32, adapter_input_size=32, adapter_output_size=64)),
    "dots3_note_text": _DOTS3,
    "emu3": dict(text_config=TINY, vq_config=dict(embed_dim=8, codebook_size=16, base_channels=8,
                                                  channel_multiplier=[1], num_res_blocks=1,
                                                  attn_resolutions=[])),
    "gemma3": dict(text_config={**TINY, **_SLIDING}, vision_config=_VISION, mm_tokens_per_image=16),
    "gemma3n_text": dict(_SLIDING, num_kv_shared_layers=0, vocab_size_per_layer_input=256,
                         hidden_size_per_layer_input=8, laurel_rank=4),
    "gemma4": dict(text_config={**TINY, **_GEMMA4}, vision_config=None, audio_config=None),
    "gemma4_text": _GEMMA4,
    "gemma4_unified": dict(text_config={**TINY, **_GEMMA4}),
    "glm4_moe": dict(_ROUTED, head_dim=16),
    "glm4_moe_lite": dict(_MLA, **_ROUTED),
    "glm_moe_dsa": dict(_MLA, **_ROUTED, **_INDEX),
    "gptj": dict(rotary_dim=8),
    "granitemoehybrid": dict(position_embedding_type="rope", layer_types=["mamba", "attention"]),
    "helium": dict(head_dim=16),
    "hunyuan_v1_dense": dict(head_dim=16),
    "hunyuan_v1_moe": dict(head_dim=16, num_experts=4, moe_topk=2),
    "hy_v3": dict(_EXPERTS, head_dim=16),
    "hy_v4": dict(_MLA, **_ROUTED, **_INDEX),
    "kolibri1": dict(_LOCAL, head_dim=16, shared_expert_intermediate_size=32),
    "laguna": dict(_EXPERTS, head_dim=16),
    "lara_mini": dict(_EXPERTS, **_LINEAR),
    "lfm2_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                     num_dense_layers=1, layer_types=["conv", "full_attention"]),
    "lfm3": dict(head_dim=16, layer_types=["conv", "full_attention"]),
    "llama4": dict(text_config=dict(TINY, head_dim=16, num_local_experts=2, intermediate_size_mlp=128,
                                    interleave_moe_layer_step=1, no_rope_layers=[1, 1]),
                   vision_config=dict(_VISION, vision_output_dim=64, projector_input_dim=64,
                                      projector_output_dim=64)),
    "longcat_flash": dict(_MLA, n_routed_experts=4, moe_topk=2, zero_expert_num=2,
                          expert_ffn_hidden_size=32),
    "mellum": dict(_LOCAL, head_dim=16),
    "mimo_v2_flash": dict(_ROUTED, head_dim=48, v_head_dim=16),  # rotary 0.334 * 48: 16
    "minicpm3": _MLA,
    "ministral": dict(head_dim=16),
    "mllama": dict(text_config=dict(TINY, cross_attention_layers=[1]), vision_config=dict(
        _VISION, num_global_layers=1, intermediate_layers_indices=[0], vision_output_dim=64)),
    "phi4_multimodal": dict(vision_config=dict(_VISION, crop_size=32), audio_config=dict(
        _BLT, num_blocks=1, ext_pw_out_channel=32, depthwise_separable_out_channel=32,
        nemo_conv_channels=32)),
    "qwen2_moe": _EXPERTS,
    # Two layers of the default pattern are both recurrent (no attention, no RoPE).
    "recurrent_gemma": dict(block_types=["recurrent", "attention"], lru_width=64,
                            attention_window_size=32),
    "qwen3_5": dict(text_config={**TINY, **_LINEAR}, vision_config=_QWEN_VISION),
    "qwen3_5_moe": dict(text_config={**TINY, **_LINEAR, **_EXPERTS}, vision_config=_QWEN_VISION),
    "qwen3_5_moe_text": dict(_EXPERTS, **_LINEAR),
    "qwen3_5_text": _LINEAR,
    "qwen3_moe": _LOCAL,
    "qwen3_next": dict(_EXPERTS, **_LINEAR),
    "qwen4_exp": dict(text_config={**TINY, **_LINEAR, **_EXPERTS, **_QWEN4_INDEX},
                      vision_config=_QWEN_VISION),
    "qwen4_exp_text": dict(_EXPERTS, **_LINEAR, **_QWEN4_INDEX),
    "sarvam_mla": dict(_MLA, **_ROUTED),
    "sarvam_moe": _ROUTED,
    "solar_open": dict(_ROUTED, head_dim=16),
    "youtu": _MLA,
    "zamba2": dict(layers_block_type=["hybrid", "mamba"], use_mem_rope=True, attention_head_dim=16,
                   mamba_d_state=8),
}


@pytest.mark.parametrize("model_type", _causal_lm_types())
def test_every_causal_lm_family_served_or_refused_by_name(model_type):
    """Every causal LM family of the installed transformers that builds small from its
    config class with TINY's sizes (and its OVERRIDES) and has a rotary module: posenc.hf
    either serves it (logits within float32 rounding of the original's) or refuses it with
    a ValueError naming its model_type. Never another exception, never a silent difference."""
    try:
        config = transformers.AutoConfig.for_model(model_type, **{**TINY, **OVERRIDES.get(model_type, {})})
        config._attn_implementation = "eager"
        with torch.device("meta"):
            meta = transformers.AutoModelForCausalLM.from_config(config)
        if sum(p.numel() for p in meta.parameters()) > 20e6:
            pytest.skip("not small with these sizes")
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config).eval()
    except Exception as e:  # noqa: BLE001 - a config class that needs more than TINY
        pytest.skip(f"does not build from TINY: {type(e).__name__}")
    if not any(type(m).__name__.endswith("RotaryEmbedding") for m in model.modules()):
        pytest.skip("no rotary module")
    ids = torch.randint(3, TINY["vocab_size"], (1, 12), generator=torch.Generator().manual_seed(6))
    try:
        before = _logits(model, ids)
    except Exception as e:  # noqa: BLE001 - the family's own forward fails with TINY
        pytest.skip(f"its own forward fails with TINY: {type(e).__name__}")
    try:
        patch = posenc.hf.exact_rotary(model)
    except ValueError as e:
        assert f"model_type {model_type!r}" in str(e) or f"model_type '{config.get_text_config().model_type}'" in str(e), str(e)
        return
    after = _logits(model, ids)
    patch.undo()
    scale = float(before.abs().max())
    assert float((after - before).abs().max()) <= 1e-4 * max(scale, 1.0)
