"""A model forward with transformers' own rotary embedding against posenc.hf's, on CPU
torch (docs/python.md, "Speed"): a Llama of 4 layers, hidden 1024, 16 heads of 64, random
weights; prefill of 1 x 2048 tokens and a decode step of 8 x 1 at position 2047. Median
of 9 forwards (51 calls of the rotary module alone) after 2 warm-up rounds, the three
variants interleaved round by round.

    python python/bench/hf_forward.py
"""

import time

import torch
import transformers

import posenc.hf

torch.manual_seed(0)
torch.set_num_threads(torch.get_num_threads())
config = transformers.LlamaConfig(
    hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=16,
    num_key_value_heads=4, vocab_size=32000, max_position_embeddings=8192,
    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192},
)
model = transformers.AutoModelForCausalLM.from_config(config).eval()

prefill = dict(input_ids=torch.randint(0, 32000, (1, 2048)))
decode = dict(input_ids=torch.randint(0, 32000, (8, 1)), position_ids=torch.full((8, 1), 2047))


variants = {
    "transformers": lambda: None,
    "posenc table": lambda: posenc.hf.exact_rotary(model),
    "posenc per call": lambda: posenc.hf.exact_rotary(model, max_positions=0),
}


def once(f):
    t = time.perf_counter()
    f()
    return (time.perf_counter() - t) * 1e3


# Rounds interleave the variants (installed and undone each round), so that a machine
# whose load changes during the run weighs on all of them alike.
samples = {}
rounds = 9
with torch.no_grad():
    for r in range(rounds + 2):
        for name, install in variants.items():
            patch = install()
            for label, inputs in [("prefill 1 x 2048", prefill), ("decode 8 x 1", decode)]:
                ms = once(lambda: model(**inputs, use_cache=False))
                if r >= 2:  # two warm-up rounds
                    samples.setdefault((name, label, "forward"), []).append(ms)
            if patch is not None:
                patch.undo()

# The rotary modules alone, each kept (a module stays usable after its patch is undone),
# called in turn.
modules = {}
for name, install in variants.items():
    patch = install()
    modules[name] = model.model.rotary_emb
    if patch is not None:
        patch.undo()
calls = 51
with torch.no_grad():
    for r in range(calls + 2):
        for name, module in modules.items():
            for label, inputs in [("prefill 1 x 2048", prefill), ("decode 8 x 1", decode)]:
                ids = inputs.get("position_ids")
                if ids is None:
                    ids = torch.arange(inputs["input_ids"].shape[1])[None]
                x = torch.zeros(1, 1, 64)
                ms = once(lambda: module(x, ids))
                if r >= 2:
                    samples.setdefault((name, label, "rotary"), []).append(ms)

print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
      f"{torch.get_num_threads()} threads; median of {rounds} forwards, {calls} rotary calls")
for (name, label, what), times in samples.items():
    times.sort()
    print(f"{name:16s} {label:17s} {what:8s} {times[len(times) // 2]:9.3f} ms")
