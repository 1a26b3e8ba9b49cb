"""Bad input raises the right exception, carrying the command line's one-line message; no
panic crosses into Python; a missing GPU is posenc.GpuError."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import posenc
from conftest import CONFIGS

LLAMA = CONFIGS / "llama-3.1-8b.json"
GEMMA3 = CONFIGS / "gemma-3-4b-it.json"
BART = CONFIGS / "bart-base.json"

# (what Python is called with, the command line, the exception)
CASES = [
    (lambda: posenc.table(3, device="cpu"), ["table", "--dim", 3], ValueError),
    (lambda: posenc.table(8, base=0.5, device="cpu"), ["table", "--dim", 8, "--base", 0.5], ValueError),
    (lambda: posenc.table(8, positions="5..2", device="cpu"), ["table", "--dim", 8, "--positions", "5..2"], ValueError),
    (lambda: posenc.table(8, padding_idx=1, device="cpu"), ["table", "--dim", 8, "--padding-idx", 1], ValueError),
    (lambda: posenc.table(8, variant="fairseq", min_timescale=2.0, device="cpu"),
     ["table", "--dim", 8, "--variant", "fairseq", "--min-timescale", 2.0], ValueError),
    (lambda: posenc.table(config=BART, device="cpu"), ["table", "--config", BART], ValueError),
    (lambda: posenc.table(65538, len=2**20, device="cpu"), ["table", "--dim", 65538, "--len", 2**20], ValueError),
    (lambda: posenc.table(8, len=2**31, device="cpu"), ["table", "--dim", 8, "--len", 2**31], ValueError),
    (lambda: posenc.rope_cache(head_dim=64, scaling='{"rope_type": "yarn", "factr": 2}', seq_len=4, device="cpu"),
     ["rope-cache", "--head-dim", 64, "--scaling", '{"rope_type": "yarn", "factr": 2}', "--len", 4], ValueError),
    (lambda: posenc.rope_cache(head_dim=64, scaling="{not json", seq_len=4, device="cpu"),
     ["rope-cache", "--head-dim", 64, "--scaling", "{not json", "--len", 4], ValueError),
    (lambda: posenc.rope_cache(head_dim=64, rotary_dim=7, seq_len=4, device="cpu"),
     ["rope-cache", "--head-dim", 64, "--rotary-dim", 7, "--len", 4], ValueError),
    (lambda: posenc.rope_cache("/nonexistent/config.json", seq_len=4, device="cpu"),
     ["rope-cache", "--config", "/nonexistent/config.json", "--len", 4], FileNotFoundError),
    (lambda: posenc.rope_cache(BART, seq_len=4, device="cpu"), ["rope-cache", "--config", BART, "--len", 4], ValueError),
    (lambda: posenc.rope_cache(GEMMA3, seq_len=4, device="cpu"), ["rope-cache", "--config", GEMMA3, "--len", 4], ValueError),
    (lambda: posenc.rope_cache(GEMMA3, seq_len=4, layer_type="global", device="cpu"),
     ["rope-cache", "--config", GEMMA3, "--layer-type", "global", "--len", 4], ValueError),
    (lambda: posenc.rope_cache(LLAMA, positions=[1, 2], seq_len=8, device="cpu"),
     ["rope-cache", "--config", LLAMA, "--positions", "1..3", "--seq-len", 8], ValueError),
    (lambda: posenc.rope(np.zeros((1, 2, 1, 8), np.float32), layout="blhd", offset=2**32 - 1, device="cpu"),
     ["rope", "--layout", "blhd", "--offset", 2**32 - 1], ValueError),
    (lambda: posenc.alibi_bias(0, 4, device="cpu"), ["alibi", "--heads", 0, "--len", 4], ValueError),
    (lambda: posenc.alibi_bias(2, 2**32, kv_len=2**32, device="cpu"),
     ["alibi", "--heads", 2, "--len", 2**32, "--kv-len", 2**32], ValueError),
    (lambda: posenc.alibi_slopes(70000), ["alibi", "--heads", 70000, "--slopes"], ValueError),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_message_is_the_clis(cli, case):
    call, args, exception = CASES[case]
    args = list(args)
    if args[0] == "rope":
        args += ["--input", cli.save("x.npy", np.zeros((1, 2, 1, 8), np.float32))]
    if args[0] in ("rope", "rope-cache") or (args[0] == "alibi" and "--slopes" not in args):
        args += ["-o", cli.tmp / "out"]
    expected = cli.error(*args)
    with pytest.raises(exception) as e:
        call()
    assert str(e.value) == expected


def test_encode_ids_messages(cli):
    w = np.zeros((10, 8), np.float32)
    wp = cli.save("w.npy", w)
    for ids in (np.array([[1, 99]], np.int64), np.array([[-1, 2]], np.int32)):
        ip = cli.save("ids.npy", ids)
        expected = cli.error("encode", "--weights", wp, "--ids", ip, "-o", cli.tmp / "o.npy")
        with pytest.raises(ValueError) as e:
            posenc.encode(w, ids, device="cpu")
        assert str(e.value) == expected


def test_encode_weights_file_errors(cli, tmp_path):
    missing = tmp_path / "missing.safetensors"
    ids = np.array([[0]])
    ip = cli.save("ids.npy", ids)
    expected = cli.error("encode", "--weights", missing, "--ids", ip, "-o", tmp_path / "o.npy")
    with pytest.raises(FileNotFoundError) as e:
        posenc.encode(missing, ids, device="cpu")
    assert str(e.value) == expected
    garbage = tmp_path / "garbage.npy"
    garbage.write_bytes(b"not an array")
    expected = cli.error("encode", "--weights", garbage, "--ids", ip, "-o", tmp_path / "o.npy")
    with pytest.raises(ValueError) as e:
        posenc.encode(garbage, ids, device="cpu")
    assert str(e.value) == expected


def test_python_side_checks():
    with pytest.raises(ValueError, match="invalid device"):
        posenc.table(8, device="tpu")
    with pytest.raises(ValueError, match="ids has dtype float64"):
        posenc.encode(np.zeros((4, 8), np.float32), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="must have rank 4|4-D"):
        posenc.rope(np.zeros((2, 8), np.float32), layout="blhd")
    with pytest.raises(ValueError, match="invalid layout"):
        posenc.rope(np.zeros((1, 1, 1, 8), np.float32), layout="lbhd")
    with pytest.raises(ValueError, match="positions must be integers"):
        posenc.table(8, positions=[0.5, 1.5])
    # The received type is named.
    with pytest.raises(ValueError, match="got dtype <f8 and shape \\(1, 2, 2, 8\\)"):
        posenc.rope(np.ones((1, 2, 2, 8)), layout="blhd")
    with pytest.raises(ValueError, match="got dtype >f4"):
        posenc.rope(np.ones((1, 2, 2, 8), ">f4"), layout="blhd")


def test_options_the_command_line_refuses_together_are_refused():
    """Where the command line refuses two flags together (one would be ignored), the
    keyword arguments are refused too, by name."""
    w = np.ones((10, 8), np.float32)
    with pytest.raises(ValueError, match="invalid len: given beside positions"):
        posenc.table(8, 4, positions="0..2")
    with pytest.raises(ValueError, match="invalid offsets: given beside positions"):
        posenc.encode(w, [[1, 2]], offsets=[5], positions=[[0, 1]])
    with pytest.raises(ValueError, match="invalid inv_freq_tensor: given without inv_freq"):
        posenc.table(8, inv_freq_tensor="x")
    with pytest.raises(ValueError, match="invalid inv_freq_tensor: given without inv_freq"):
        posenc.rope_cache(head_dim=8, seq_len=4, inv_freq_tensor="x")
    with pytest.raises(ValueError, match="invalid inv_freq_tensor: given with an array"):
        posenc.table(8, inv_freq=[1.0, 0.1, 0.01, 0.001], inv_freq_tensor="x")
    with pytest.raises(ValueError, match="invalid tensor: given with an array"):
        posenc.encode(w, [[1, 2]], tensor="nope")
    with pytest.raises(ValueError, match="invalid position_tensor: given with an array"):
        posenc.encode(w, [[1, 2]], position_table=np.ones((4, 8), np.float32), position_tensor="p")


def test_integers_past_their_type_are_value_errors_naming_them():
    """A value the binding's integer type cannot hold is refused by name and range (it was
    an OverflowError naming neither, on Python 3.9 not even the argument)."""
    x = np.ones((1, 2, 2, 8), np.float32)
    for call, name, value in [
        (lambda: posenc.table(-1), "dim", -1),
        (lambda: posenc.table(8, len=2**64), "len", 2**64),
        (lambda: posenc.table(8, gpu_memory_budget=-1), "gpu_memory_budget", -1),
        (lambda: posenc.rope(x, layout="blhd", offset=2**32), "offset", 2**32),
        (lambda: posenc.rope_cache(head_dim=8, seq_len=-1), "seq_len", -1),
        (lambda: posenc.alibi_bias(8, 4, offset=-1), "offset", -1),
        (lambda: posenc.alibi_slopes(2**40), "heads", 2**40),
        (lambda: posenc.encode(np.ones((10, 8), np.float32), [[1]], pad_id=-2), "pad_id", -2),
    ]:
        with pytest.raises(ValueError, match=f"invalid {name}: {value} \\(allowed: 0\\.\\.="):
            call()
    with pytest.raises(ValueError, match="invalid heads: True"):
        posenc.alibi_slopes(True)
    with pytest.raises(ValueError, match="invalid scale: True"):
        posenc.encode(np.ones((10, 8), np.float32), [[1]], scale=True)


def test_a_directory_is_an_is_a_directory_error_in_the_same_words(tmp_path):
    for call in [
        lambda: posenc.rope_cache(tmp_path, seq_len=4),
        lambda: posenc.rope_cache(head_dim=8, seq_len=4, scaling=tmp_path),
        lambda: posenc.table(8, inv_freq=tmp_path),
        lambda: posenc.encode(tmp_path, [[1]]),
    ]:
        with pytest.raises(IsADirectoryError, match=f"^{tmp_path}: is a directory$"):
            call()


def test_out_of_range_uint64_ids_are_shown_as_given():
    w = np.ones((10, 8), np.float32)
    with pytest.raises(ValueError, match="token id 18446744073709551615 at row 0, column 1"):
        posenc.encode(w, np.array([3, 2**64 - 1], np.uint64))
    with pytest.raises(ValueError, match="token id 9223372036854775809 at row 1, column 0"):
        posenc.encode(w, np.array([[3], [2**63 + 1]], np.uint64))
    # The rank is checked first.
    for ids in [np.array(2**40, np.uint64), np.full((1, 1, 1), 2**40, np.uint64)]:
        with pytest.raises(ValueError, match="ids must have rank 1 or 2"):
            posenc.encode(w, ids)


def test_non_finite_numbers_in_dicts_are_named():
    """JSON has no NaN: a dict's non-finite number is refused by its key, not as text the
    parser cannot read."""
    x = np.ones((1, 2, 2, 8), np.float32)
    with pytest.raises(ValueError, match="invalid rope_scaling.factor: nan"):
        posenc.rope(x, layout="blhd", scaling={"rope_type": "linear", "factor": float("nan")})
    config = {"model_type": "llama", "head_dim": 8, "rope_theta": float("inf")}
    with pytest.raises(ValueError, match="invalid config.rope_theta: inf"):
        posenc.rope(x, layout="blhd", config=config)


def test_sizes_are_refused_before_the_inputs_are_copied():
    """Broadcast views make arrays of any logical size at no cost: the output's size is
    checked (against MAX_OUTPUT_VALUES, as the command line checks it) before the inputs are
    converted or anything is allocated, where the rope aborted the interpreter and the
    positions of table and rope_cache were copied until memory ran out."""
    assert posenc.MAX_OUTPUT_VALUES == 2**31
    huge = np.broadcast_to(np.float32(1), (2**20, 2**20, 2, 2))
    for device in ("cpu", "auto"):
        with pytest.raises(ValueError, match="MAX_OUTPUT_VALUES"):
            posenc.rope(huge, layout="blhd", device=device)
    many = np.broadcast_to(np.int64(1), (2**33,))
    with pytest.raises(ValueError, match="MAX_OUTPUT_VALUES"):
        posenc.table(8, positions=many, device="cpu")
    with pytest.raises(ValueError, match="MAX_OUTPUT_VALUES"):
        posenc.rope_cache(head_dim=8, positions=many, device="cpu")
    with pytest.raises(ValueError, match="MAX_OUTPUT_VALUES"):
        posenc.RopeSpec(head_dim=8).cache(np.broadcast_to(np.int64(1), (2**31,)))


def test_no_panic_crosses():
    with pytest.raises(RuntimeError, match="internal error.*deliberate panic"):
        posenc._posenc._panic_for_test()
    # The interpreter and the library are still there.
    assert posenc.table(4, len=1, device="cpu").shape == (1, 4)


def test_gpu_error_carries_the_clis_message(cli):
    """No adapter for the backend asked for: GpuError with the command line's line, and
    device="auto" in its GPU-first form (POSENC_AUTO=gpu) falls back to the CPU with a
    DeviceWarning saying why."""
    env = {"WGPU_BACKEND": "webgpu", "POSENC_AUTO": "gpu"}
    expected = cli.error("table", "--dim", 8, "--device", "gpu", env=env)
    code = (
        "import posenc, warnings, sys\n"
        "try:\n"
        "    posenc.table(8, device='gpu')\n"
        "except posenc.GpuError as e:\n"
        "    print(e)\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    t = posenc.table(8, device='auto')\n"
        "    print(t.shape, w[0].category.__name__, w[0].message)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd="/", timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == expected
    assert lines[1].startswith("(8, 8) DeviceWarning posenc: note: computing on the CPU: no GPU adapter")
    assert issubclass(posenc.GpuError, RuntimeError)


def test_auto_computes_small_host_results_on_the_cpu_without_a_gpu(cli):
    """device="auto" by its cost model: a small table goes to the CPU at once, with no
    warning even where no adapter would open; a malformed POSENC_AUTO is refused by name."""
    code = (
        "import posenc, warnings\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    t = posenc.table(8, device='auto')\n"
        "    print(t.shape, len(w))\n"
        "print((t == posenc.table(8, device='cpu')).all())\n"
    )
    env = {**os.environ, "WGPU_BACKEND": "webgpu"}
    env.pop("POSENC_AUTO", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd="/", timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["(8, 8) 0", "True"]
    bad = subprocess.run([sys.executable, "-c", "import posenc; posenc.table(8)"],
                         capture_output=True, text=True, env={**env, "POSENC_AUTO": "fast"},
                         cwd="/", timeout=120)
    assert bad.returncode != 0
    assert "POSENC_AUTO" in bad.stderr and "cost or gpu" in bad.stderr, bad.stderr


def test_options_the_flags_refuse_together():
    # The command line refuses these pairs in its flags' parser; the package, which has no
    # such parser, refuses them too rather than leave one of each silently unused.
    inv_freq = np.array([1.0, 0.1, 0.01, 0.001])
    with pytest.raises(ValueError, match="beside base"):
        posenc.table(8, inv_freq=inv_freq, base=100.0, device="cpu")
    with pytest.raises(ValueError, match="max_timescale: given beside base"):
        posenc.table(8, variant="tensor2tensor", base=100.0, max_timescale=5000.0, device="cpu")
    assert posenc.table(8, inv_freq=inv_freq, device="cpu").shape == (8, 8)
