"""Bad input raises the right exception, carrying the command line's one-line message; no
panic crosses into Python; a missing GPU is posenc.GpuError."""

from __future__ import annotations

import json
import math
import os
import re
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
    with pytest.raises(ValueError, match="invalid device") as e:
        posenc.table(8, device="tpu")
    # The table takes "reference" too, and a refusal names it; the others do not.
    assert str(e.value).endswith('(allowed: "auto", "cpu", "gpu", "reference")'), e.value
    for device in [3, np.array(["reference"])]:
        with pytest.raises(ValueError, match="invalid device") as e:
            posenc.table(8, device=device)
        assert '"reference"' in str(e.value), e.value
    with pytest.raises(ValueError) as e:
        posenc.alibi_bias(4, len=2, device="reference")
    assert str(e.value).endswith('(allowed: "auto", "cpu", "gpu")'), e.value
    with pytest.raises(ValueError, match="ids must be integers, got dtype float64"):
        posenc.encode(np.zeros((4, 8), np.float32), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="must have rank 4|4-D"):
        posenc.rope(np.zeros((2, 8), np.float32), layout="blhd")
    with pytest.raises(ValueError, match="invalid layout"):
        posenc.rope(np.zeros((1, 1, 1, 8), np.float32), layout="lbhd")
    with pytest.raises(ValueError, match="positions must be integers"):
        posenc.table(8, positions=[0.5, 1.5])
    # rope's positions are arrays alone: a spec string is named as one (round seventeen).
    with pytest.raises(ValueError, match=r"positions must be an array of integers, got the string '0\.\.2'"):
        posenc.rope(np.zeros((1, 2, 1, 8), np.float32), layout="blhd", positions="0..2")
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
        (lambda: posenc.table(8, len=2**64), "len", 2**64),
        (lambda: posenc.table(8, gpu_memory_budget=-1), "gpu_memory_budget", -1),
        (lambda: posenc.rope(x, layout="blhd", offset=2**32), "offset", 2**32),
        (lambda: posenc.alibi_bias(8, 4, offset=-1), "offset", -1),
        (lambda: posenc.encode(np.ones((10, 8), np.float32), [[1]], pad_id=-2), "pad_id", -2),
    ]:
        with pytest.raises(ValueError, match=f"invalid {name}: {value} \\(allowed: 0\\.\\.="):
            call()
    # A table's width in --dim's words, as the ranges test below has it.
    with pytest.raises(ValueError, match="invalid dim: -1 \\(allowed: a whole number in 1\\.\\.=65536"):
        posenc.table(-1)
    with pytest.raises(ValueError, match="invalid heads: 1099511627776 \\(allowed: 1\\.\\.="):
        posenc.alibi_slopes(2**40)
    with pytest.raises(ValueError, match="invalid heads: True"):
        posenc.alibi_slopes(True)
    with pytest.raises(ValueError, match="invalid scale: True"):
        posenc.encode(np.ones((10, 8), np.float32), [[1]], scale=True)


def test_integers_past_64_bits_in_lists_are_named_with_their_range():
    """A list holding 2**70 is an object array to NumPy: its integers were called not
    integers (round twenty-three)."""
    w = np.ones((4, 4), np.float32)
    for call, message in [
        (lambda: posenc.encode(w, [[1, 2**70]]),
         "token id 1180591620717411303424 at row 0, column 1 is out of range: ids are 32-bit"),
        (lambda: posenc.encode(w, [[1, 2]], positions=[[3, -2**64]]),
         "invalid positions: -18446744073709551616 at [0, 1]"),
        (lambda: posenc.encode(w, [[1]], offsets=[2**70]), "invalid offsets: 1180591620717411303424 at index 0"),
        (lambda: posenc.table(4, positions=[1, 2**65]), "invalid positions: 36893488147419103232 at index 1"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message) + r" \(allowed: 0\.\.=4294967295\)$"):
            call()
    with pytest.raises(ValueError, match="token id 1180591620717411303424 at row 0, column 2 is"):
        posenc.encode(w, [0, 1, 2**70])
    # Integers that NumPy makes float64 (no 64-bit type holds both -1 and 2**64 - 1).
    with pytest.raises(ValueError, match=r"invalid offsets: -1 at index 0 \(allowed: 0\.\.=4294967295\)$"):
        posenc.encode(w, [[1], [2]], offsets=[-1, 2**64 - 1])
    # Not all integers: named as before; the rank is checked first.
    with pytest.raises(ValueError, match="ids must be integers, got dtype object"):
        posenc.encode(w, [["a", 2**70]])
    with pytest.raises(ValueError, match="ids must have rank 1 or 2"):
        posenc.encode(w, [[[2**70]]])
    # A broadcast view of billions of elements is not walked: refused at once.
    huge = np.broadcast_to(np.array([1], dtype=object), (1 << 20, 1 << 12))
    with pytest.raises(ValueError, match="ids must be integers, got dtype object"):
        posenc.encode(w, huge)


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


def test_non_finite_numbers_in_dicts_are_named(tmp_path):
    """JSON has no NaN: a dict's non-finite number is refused by its key, not as text the
    parser cannot read."""
    x = np.ones((1, 2, 2, 8), np.float32)
    with pytest.raises(ValueError, match="invalid rope_scaling.factor: nan"):
        posenc.rope(x, layout="blhd", scaling={"rope_type": "linear", "factor": float("nan")})
    # A config's is refused where posenc reads it, named as transformers 5 writes it; a key
    # posenc does not read may hold one (Falcon-H1's and Bamba's time_step_limit).
    config = {"model_type": "llama", "head_dim": 8, "rope_theta": float("inf")}
    with pytest.raises(ValueError, match=r"invalid rope_theta: Infinity \(allowed: a finite"):
        posenc.rope(x, layout="blhd", config=config)
    config = {"model_type": "llama", "head_dim": 8, "rope_theta": 1e4,
              "time_step_limit": [0.0, float("inf")], "x": {"y": [float("nan"), -math.inf]}}
    assert posenc.rope_cache(config, seq_len=2).cos.shape == (2, 8)
    with open(tmp_path / "config.json", "w") as f:
        json.dump(config, f)  # Python writes bare Infinity and NaN, as transformers 4.x did
    assert posenc.rope_cache(str(tmp_path / "config.json"), seq_len=2).cos.shape == (2, 8)


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


# ---- round six of the hostile probes (2026-12-02): the package, by a stranger -----------


def _in_a_child(code: str, seconds: float = 60) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter, which a hang cannot take the suite with."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=seconds, cwd="/")


def test_a_config_path_is_read_once_by_posenc_s_reader(tmp_path):
    """Without a pairing, the module layout's lookup read a config path in Python with no
    limit before the reader that has one: /dev/urandom ate memory until the process was
    killed, a FIFO without a writer hung, a 300 MB file was parsed before its refusal and
    a deep nesting was Python's RecursionError. Each now fails at once, as with a
    pairing."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(300 << 20)  # sparse: no disk, but its size says 300 MB
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    code = (
        "import posenc, sys\n"
        "for path in sys.argv[1:]:\n"
        "    for call in (lambda: posenc.rope_cache(path, seq_len=2, device='cpu'),\n"
        "                 lambda: posenc.RopeSpec(path), lambda: posenc.module_pairing(path)):\n"
        "        try:\n"
        "            print('returned', call())\n"
        "        except (OSError, ValueError) as e:\n"
        "            print(type(e).__name__, e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "/dev/zero", "/dev/urandom", str(fifo), str(big), str(deep)],
        capture_output=True, text=True, timeout=60, cwd="/",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 15, lines
    for line in lines[:6]:
        assert line.startswith("ValueError /dev/") and "more than 4194304 bytes" in line, line
    for line in lines[6:9]:
        assert line.startswith("OSError") and "no process has open for writing" in line, line
    for line in lines[9:12]:
        assert line.startswith("ValueError") and "314572800 bytes" in line, line
    # The layout's lookup parses it as the RoPE's read does (module_pairing answered "neox"
    # for text it could not parse, until the lookup moved into the library).
    for line in lines[12:15]:
        assert line.startswith(f"ValueError {deep}: invalid (json)"), line


def test_a_fifo_config_with_a_writer_is_read_once(tmp_path):
    """A config from a pipe gives its text once: the layout's lookup and the RoPE must
    share one read (the second read of a FIFO finds nothing)."""
    config = {"model_type": "cohere", "hidden_size": 64, "num_attention_heads": 4,
              "rope_theta": 10000.0}
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = (
        "import posenc, sys\n"
        "cos, sin = c = posenc.rope_cache(sys.argv[1], seq_len=3, device='cpu')\n"
        "print(c.pairing, cos.shape)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(fifo)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd="/")
    with open(fifo, "w") as f:
        f.write(__import__("json").dumps(config))
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    want = posenc.rope_cache(config, seq_len=3, device="cpu")
    assert out.split()[0] == "gptj" == want.pairing
    assert out.strip().endswith(str(want.cos.shape))


def test_config_errors_name_the_file_read_once(tmp_path):
    """The text read once is parsed by the RoPE as the path would have been: its errors
    name the file, and the errors of the files given beside it (a scaling object, a
    model's inv_freq) still name theirs."""
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "head_dim": 8, "rope_theta": -1}')
    for call in (lambda: posenc.rope_cache(path, seq_len=2), lambda: posenc.RopeSpec(path)):
        with pytest.raises(ValueError, match=f"^{path}: invalid rope_theta: -1"):
            call()
    path.write_text('{"model_type": "llama", "head_dim": 8}')
    scaling = tmp_path / "scaling.json"
    scaling.write_text('{"rope_type": "linear", "factor": -2}')
    freqs = tmp_path / "freqs.npy"
    np.save(freqs, np.array([1.0, -0.5, 0.1, 0.01]))
    for pairing in (None, "neox"):
        for make in (lambda p, **k: posenc.rope_cache(p, seq_len=2, **k), posenc.RopeSpec):
            with pytest.raises(ValueError, match=f"^{scaling}: "):
                make(path, scaling=f"@{scaling}", pairing=pairing)
            with pytest.raises(ValueError, match=f"^{freqs}: "):
                make(path, inv_freq=freqs, pairing=pairing)


def test_every_integer_type_is_taken_and_sizes_are_checked_before_any_copy():
    """ids, positions and offsets of every NumPy integer type give int64's results; a
    broadcast view of any of them is refused by the output's size at once (the types
    other than int64 were scanned and copied to int64 first: minutes, then an allocation
    of terabytes)."""
    w = np.arange(40, dtype=np.float32).reshape(10, 4)
    ids = np.array([[1, 2, 3], [4, 5, 9]])
    pos = np.array([[0, 7, 100], [2, 1, 0]])
    x = np.ones((2, 3, 1, 4), np.float32)
    want = posenc.encode(w, ids, positions=pos, device="cpu")
    want_off = posenc.encode(w, ids, offsets=[3, 100], device="cpu")
    want_rope = posenc.rope(x, layout="blhd", positions=pos, device="cpu")
    want_table = posenc.table(4, positions=[0, 7, 100], device="cpu")
    want_cache = posenc.RopeSpec(head_dim=8).cache(np.array([0, 7, 100]))
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
        got = posenc.encode(w, ids.astype(t), positions=pos.astype(t), device="cpu")
        assert np.array_equal(got, want), t
        got = posenc.encode(w, ids.astype(t), offsets=np.array([3, 100], t), device="cpu")
        assert np.array_equal(got, want_off), t
        got = posenc.rope(x, layout="blhd", positions=pos.astype(t), device="cpu")
        assert np.array_equal(got, want_rope), t
        p = np.array([0, 7, 100], t)
        assert np.array_equal(posenc.table(4, positions=p, device="cpu"), want_table), t
        cache = posenc.RopeSpec(head_dim=8).cache(p)
        assert np.array_equal(cache[0], want_cache[0]), t
        # Negative values are named as given.
        if np.dtype(t).kind == "i":
            with pytest.raises(ValueError, match="invalid positions: -1 at index 1"):
                posenc.table(4, positions=np.array([0, -1], t), device="cpu")
            with pytest.raises(ValueError, match="token id -3 at row 0, column 1"):
                posenc.encode(w, np.array([[0, -3]], t), device="cpu")
        big = np.broadcast_to(t(1), (10**6, 10**6))
        for call in (
            lambda: posenc.encode(w, big, device="cpu"),
            lambda: posenc.table(8, positions=np.broadcast_to(t(7), (2**29,)), device="cpu"),
            lambda: posenc.rope_cache(head_dim=8, positions=np.broadcast_to(t(0), (2**40,))),
        ):
            with pytest.raises(ValueError, match="MAX_OUTPUT_VALUES"):
                call()
    # Big-endian and unaligned integers are copied to native, aligned ones.
    assert np.array_equal(posenc.table(4, positions=np.array([0, 7, 100], ">i4")), want_table)
    raw = np.zeros(13, np.uint8)
    unaligned = np.frombuffer(raw.data, np.int32, count=3, offset=1)
    raw[1:13] = np.array([0, 7, 100], "<i4").view(np.uint8)
    assert not unaligned.flags.aligned
    assert np.array_equal(posenc.table(4, positions=unaligned), want_table)
    with pytest.raises(ValueError, match="MAX_OUTPUT_VALUES"):
        posenc.table(4, positions=np.broadcast_to(np.array(1, ">i8"), (2**32,)))


def test_rope_caches_pickle_and_copy():
    import copy
    import pickle

    c = posenc.rope_cache(head_dim=8, seq_len=3, device="cpu")
    for d in (pickle.loads(pickle.dumps(c)), copy.copy(c), copy.deepcopy(c)):
        assert isinstance(d, posenc.RopeCache)
        assert np.array_equal(d.cos, c.cos) and np.array_equal(d.sin, c.sin)
        assert np.array_equal(d.inv_freq, c.inv_freq)
        assert (d.attention_factor, d.pairing) == (c.attention_factor, c.pairing)


def test_rope_of_a_list_holding_bfloat16_keeps_the_type():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.ones((1, 2, 1, 4), ml_dtypes.bfloat16)
    got = posenc.rope([x[0]], layout="blhd", device="cpu")
    assert got.dtype == ml_dtypes.bfloat16
    assert np.array_equal(got.view(np.uint16), posenc.rope(x, layout="blhd").view(np.uint16))


def test_options_of_the_wrong_type_are_value_errors_naming_them():
    """The extension's conversion raised TypeError naming its own parameter (`len` for
    seq_len) or, in the message, none."""
    w = np.ones((10, 8), np.float32)
    for call, name in [
        (lambda: posenc.rope_cache(head_dim=8, seq_len=4.0), "seq_len"),
        (lambda: posenc.encode(w, [[1]], pad_id=1.0), "pad_id"),
        (lambda: posenc.rope(np.ones((1, 1, 1, 8), np.float32), layout="blhd", offset=1.5),
         "offset"),
        (lambda: posenc.alibi_slopes(4.0), "heads"),
        (lambda: posenc.rope_cache(head_dim=8, seq_len=4, dtype=np.float32), "dtype"),
        (lambda: posenc.rope(np.ones((1, 1, 1, 8), np.float32), layout=1), "layout"),
        (lambda: posenc.encode(w, [[1]], out_dtype=np.float16), "out_dtype"),
    ]:
        with pytest.raises(ValueError, match=f"^invalid {name}: "):
            call()
    for call, name in [
        (lambda: posenc.table(4, frequencies=None), "frequencies"),
        (lambda: posenc.encode(w, [[1]], out_dtype=None), "out_dtype"),
        (lambda: posenc.alibi_bias(4, 2, form=1), "form"),
        (lambda: posenc.RopeSpec(head_dim=8).with_pairing(None), "pairing"),
        (lambda: posenc.table(8, base="10000"), "base"),
        (lambda: posenc.table(8, base=True), "base"),
        (lambda: posenc.table(8, base=10**400), "base"),
        (lambda: posenc.rope_cache(head_dim=8, seq_len=2, inv_freq=[1.0, 0.1, 0.01, 0.001],
                                   attention_factor="2"), "attention_factor"),
    ]:
        with pytest.raises(ValueError, match=f"^invalid {name}: "):
            call()
    # A huge integer is named by its size, in one short line (a stranger's: 10**400 was
    # spelt out in 401 digits, 10**5000 raised Python's own digit limit naming no option).
    for value, bits in [(10**400, 1329), (10**5000, 16610)]:
        for call in [lambda: posenc.table(8, 1, base=value),
                     lambda: posenc.encode(w, [[1]], scale=value),
                     lambda: posenc.alibi_slopes(value)]:
            with pytest.raises(ValueError, match=f"^invalid [a-z_]+: an integer of {bits} bits"):
                call()
    # Integers of NumPy's types, and 0-d integer arrays, are integers.
    assert posenc.alibi_slopes(np.int32(4)).shape == (4,)
    assert posenc.alibi_slopes(np.array(4)).shape == (4,)


def test_text_utf8_cannot_hold_is_refused_naming_its_option():
    """A lone surrogate in a text option raised pyo3's UnicodeEncodeError naming no option
    (round twenty-one of the hostile probes)."""
    bad = "\ud800"
    w = np.ones((10, 8), np.float32)
    x = np.ones((1, 1, 1, 8), np.float32)
    for call, name in [
        (lambda: posenc.table(8, positions=bad), "positions"),
        (lambda: posenc.table(8, variant=bad), "variant"),
        (lambda: posenc.table(8, frequencies=bad), "frequencies"),
        (lambda: posenc.table(8, device=bad), "device"),
        (lambda: posenc.table(8, config="{" + bad + "}"), "config \\(JSON text\\)"),
        (lambda: posenc.encode(w, [[1]], out_dtype=bad), "out_dtype"),
        (lambda: posenc.encode(w, [[1]], variant=bad), "variant"),
        (lambda: posenc.rope(x, layout=bad), "layout"),
        (lambda: posenc.rope(x, layout="blhd", pairing=bad), "pairing"),
        (lambda: posenc.rope(x, layout="blhd", layer_type=bad), "layer_type"),
        (lambda: posenc.rope(x, layout="blhd", scaling="{" + bad + "}"), "scaling"),
        (lambda: posenc.rope_cache(head_dim=8, positions=bad), "positions"),
        (lambda: posenc.rope_cache(head_dim=8, seq_len=2, dtype=bad), "dtype"),
        (lambda: posenc.alibi_bias(4, 2, form=bad), "form"),
        (lambda: posenc.RopeSpec(head_dim=8).with_pairing(bad), "pairing"),
        (lambda: posenc.RopeSpec(head_dim=8).cache(bad), "positions"),
    ]:
        with pytest.raises(ValueError, match=f"^invalid {name}: .*lone surrogate at index"):
            call()


def test_numpy_scalars_in_dicts_are_numbers():
    config = {"model_type": "llama", "hidden_size": np.int64(64),
              "num_attention_heads": np.int32(4), "rope_theta": np.float64(10000.0)}
    plain = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
             "rope_theta": 10000.0}
    assert np.array_equal(posenc.rope_cache(config, seq_len=3)[0],
                          posenc.rope_cache(plain, seq_len=3)[0])
    scaling = {"rope_type": "linear", "factor": np.float32(2)}
    assert posenc.rope_cache(head_dim=8, seq_len=3, scaling=scaling)[0].shape == (3, 8)
    with pytest.raises(ValueError, match="invalid rope_scaling.factor: nan"):
        posenc.rope_cache(head_dim=8, seq_len=3, scaling={"rope_type": "linear",
                                                          "factor": np.float32("nan")})
    # A scalar with no Python number to hold it is refused, not recursed on.
    with pytest.raises(ValueError, match="longdouble is not JSON"):
        posenc.rope_cache(head_dim=8, seq_len=3, scaling={"rope_type": "linear",
                                                          "factor": np.longdouble(2)})


def test_an_attention_factor_of_zero_is_refused():
    """It zeroed every cos and sin: a rotation that erases its input."""
    yarn = {"rope_type": "yarn", "factor": 4.0, "attention_factor": 0,
            "original_max_position_embeddings": 4096}
    with pytest.raises(ValueError, match="rope_scaling: invalid attention_factor: 0 "):
        posenc.rope_cache(head_dim=8, seq_len=3, scaling=yarn)
    for factor in (0.0, 1e-40):  # 1e-40: subnormal in float32, flushed on some GPUs
        # An option of its own beside inv_freq, not a key of a rope_scaling object.
        with pytest.raises(ValueError, match="^invalid attention_factor: "):
            posenc.rope_cache(head_dim=8, seq_len=3, inv_freq=[1.0, 0.1, 0.01, 0.001],
                              attention_factor=factor)


def test_a_models_own_frequencies_are_named_as_the_option_they_are():
    """They were reported as a rope_scaling object's keys (`rope_scaling: invalid
    inv_freq[1]`), which the caller never wrote."""
    for bad, message in (([0.5, -1.0, 0.25, 0.125], "^invalid inv_freq: -1 at index 1 "),
                         ([0.5, 0.25, 0.125, np.inf], "^invalid inv_freq: inf at index 3 "),
                         ([0.5, 0.25, 0.125], "^invalid inv_freq: 3 values, where rotary_dim 8 needs 4 ")):
        for call in (lambda: posenc.rope_cache(head_dim=8, seq_len=4, inv_freq=np.array(bad)),
                     lambda: posenc.rope(np.zeros((1, 2, 1, 8), np.float32), layout="blhd",
                                         inv_freq=np.array(bad))):
            with pytest.raises(ValueError, match=message):
                call()


def test_config_arguments_of_every_form():
    # JSON text opening an array is JSON, refused as such, not a file name.
    with pytest.raises(ValueError, match="config"):
        posenc.rope_cache('[{"model_type": "llama"}]', seq_len=2)
    # A path of bytes that are not UTF-8 is a path.
    with pytest.raises(FileNotFoundError):
        posenc.rope_cache(b"/nonexistent/\xff.json", seq_len=2)

    # A config object's to_json_string() giving bytes is read as UTF-8 JSON; one giving
    # something else is named (it was a bare TypeError from the extension).
    class Config:
        def __init__(self, text):
            self.text = text

        def to_json_string(self, use_diff=True):
            return self.text

    llama = '{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}'
    want = posenc.rope_cache(llama, seq_len=3)
    got = posenc.rope_cache(Config(llama.encode()), seq_len=3)
    np.testing.assert_array_equal(got.cos, want.cos)
    with pytest.raises(ValueError, match="Config.to_json_string.. gave bytes that are not UTF-8"):
        posenc.rope_cache(Config(b"{\xff}"), seq_len=3)
    with pytest.raises(ValueError, match="Config.to_json_string.. gave dict"):
        posenc.rope_cache(Config({"model_type": "llama"}), seq_len=3)


# ---- round six, second pass: the fixes probed again ---------------------------------------


def test_an_interrupt_pending_at_the_first_call_is_a_keyboard_interrupt(tmp_path):
    """NumPy's C API was loaded on a process's first call that made an array, running an
    import that a pending Ctrl-C interrupted: rust-numpy then panicked, a PanicException
    that `except Exception` does not catch. Here the Ctrl-C lands while the first call
    waits for its config from a pipe, so the interrupt is pending when the call makes its
    arrays; the API is loaded at import now, and the interrupt comes after the call."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = (
        "import os, signal, sys, threading, time, posenc\n"
        "fifo = sys.argv[1]\n"
        # Open for reading and writing, which never waits: a writer before posenc opens.
        "fd = os.open(fifo, os.O_RDWR)\n"
        "def writer():\n"
        "    time.sleep(1.0)\n"
        "    os.write(fd, b'{\"model_type\": \"llama\", \"head_dim\": 8}')\n"
        "    os.close(fd)\n"
        "threading.Thread(target=writer).start()\n"
        "threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
        "try:\n"
        "    posenc.rope_cache(fifo, seq_len=3, pairing='neox', device='cpu')\n"
        "    time.sleep(5)\n"
        "    print('no interrupt')\n"
        "except KeyboardInterrupt:\n"
        "    print('KeyboardInterrupt')\n"
        "except BaseException as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True,
                          text=True, timeout=60, cwd="/")
    assert done.stdout.strip() == "KeyboardInterrupt", (done.stdout, done.stderr)


def test_pickled_rope_specs_come_back_as_they_were(tmp_path):
    import copy
    import pickle

    config = tmp_path / "config.json"
    config.write_text('{"model_type": "cohere", "hidden_size": 64, "num_attention_heads": 4, '
                      '"rope_theta": 10000.0}')
    spec = posenc.RopeSpec(config)
    assert spec.pairing == "gptj"
    positions = np.array([0, 5, 4096])
    for other in (spec, spec.with_pairing("neox")):
        for back in (pickle.loads(pickle.dumps(other)), copy.copy(other), copy.deepcopy(other)):
            assert back.pairing == other.pairing
            assert np.array_equal(back.cache(positions)[0], other.cache(positions)[0])
    # The config path's text was read once: a pickle does not read it again.
    data = pickle.dumps(spec)
    config.unlink()
    assert np.array_equal(pickle.loads(data).cache(positions)[1], spec.cache(positions)[1])


class Tagged(posenc.RopeCache):
    """A subclass of RopeCache, pickled by reference (so at module level)."""


def test_rope_caches_pickle_with_their_attributes():
    import pickle

    c = posenc.rope_cache(head_dim=8, seq_len=2, device="cpu")
    t = Tagged(c.cos, c.sin, c.inv_freq, c.attention_factor, c.pairing)
    t.tag = "kept"
    back = pickle.loads(pickle.dumps(t))
    assert type(back) is Tagged and back.tag == "kept" and back.pairing == c.pairing


def test_big_endian_integers_are_sized_before_they_are_read():
    """A big-endian view is read where it is, after the output's size is checked (it was
    copied up to 2^31 values, 16 GiB, before any check once; then before the check of a
    size Python could not know)."""
    w = np.ones((10, 8), np.float32)
    for call in (
        lambda: posenc.encode(w, np.broadcast_to(np.zeros(1, ">i8"), (2**31,))),
        lambda: posenc.encode(w, np.broadcast_to(np.zeros(1, ">i2"), (2**30,))),
        lambda: posenc.rope_cache(head_dim=8, positions=np.broadcast_to(np.zeros(1, ">i8"),
                                                                      (2**30,))),
        lambda: posenc.table(8, positions=np.broadcast_to(np.zeros(1, ">u4"), (2**29,))),
        lambda: posenc.RopeSpec(head_dim=8).cache(np.broadcast_to(np.zeros(1, ">i4"), (2**29,))),
    ):
        with pytest.raises(ValueError, match="MAX_OUTPUT_VALUES"):
            call()
    with pytest.raises(ValueError, match=r"expected \[1, 1\], got \[268435456, 1\]"):
        posenc.rope(np.ones((1, 1, 2, 8), np.float32), layout="blhd",
                    positions=np.broadcast_to(np.zeros(1, ">i4"), (2**28, 1)))
    # Unaligned views are still copied, after the size as far as Python knows it.
    raw = np.zeros(8 * 32769 + 1, np.uint8)[1:].view(">i8")
    assert not raw.flags.aligned
    with pytest.raises(ValueError, match="MAX_OUTPUT_VALUES"):
        posenc.table(65536, positions=raw, device="cpu")
    assert posenc.table(8, positions=raw[:4], device="cpu").shape == (4, 8)


def test_path_objects_of_bytes_and_bytes_paths_are_paths(tmp_path):
    class BytesPath:
        def __init__(self, p):
            self.p = os.fsencode(p)

        def __fspath__(self):
            return self.p

    config = tmp_path / "config.json"
    config.write_text('{"model_type": "llama", "head_dim": 8}')
    want = posenc.rope_cache(config, seq_len=2)
    for given in (BytesPath(config), os.fsencode(config)):
        assert np.array_equal(posenc.rope_cache(given, seq_len=2).cos, want.cos)
        assert posenc.module_pairing(given) == "neox"
    freqs = tmp_path / "freqs.npy"
    np.save(freqs, np.array([1.0, 0.1, 0.01, 0.001]))
    want = posenc.table(8, inv_freq=freqs)
    for given in (BytesPath(freqs), os.fsencode(freqs)):
        assert np.array_equal(posenc.table(8, inv_freq=given), want)
    weights = tmp_path / "w.npy"
    np.save(weights, np.ones((4, 8), np.float32))
    assert posenc.encode(os.fsencode(weights), [[1]]).shape == (1, 1, 8)


def test_required_options_given_none_and_bools_for_integers_are_refused_by_name():
    w = np.ones((10, 8), np.float32)
    for call, name in [
        (lambda: posenc.alibi_slopes(None), "heads"),
        (lambda: posenc.alibi_bias(2, None), "len"),
        (lambda: posenc.alibi_bias(2, 2, offset=None), "offset"),
        (lambda: posenc.RopeSpec(head_dim=8).frequencies(None), "seq_len"),
        (lambda: posenc.module_pairing(None), "config"),
        (lambda: posenc.table(8, 2, variant="fairseq", padding_idx=True), "padding_idx"),
        (lambda: posenc.encode(w, [[1]], scale=np.bool_(True)), "scale"),
    ]:
        with pytest.raises(ValueError, match=f"^invalid {name}: "):
            call()


def test_dicts_that_are_not_json_are_refused_by_name():
    deep: dict = {}
    for _ in range(5000):
        deep = {"a": deep}
    cyclic: list = []
    cyclic.append(cyclic)
    for config in (deep, {"model_type": "llama", "x": cyclic}, {(1, 2): 2}):
        with pytest.raises(ValueError, match="^invalid config: "):
            posenc.rope_cache(config, seq_len=2, pairing="neox")
    with pytest.raises(ValueError, match="^invalid config: JSON text that is not UTF-8"):
        posenc.rope_cache(b'{"model_type": "\xff"}', seq_len=2)
    # Values the JSON reader would stop at, with a column of text the caller never wrote.
    llama = {"model_type": "llama", "head_dim": 8}
    with pytest.raises(ValueError, match=r"^invalid config\.rope_theta: an integer of 1329 bits"):
        posenc.rope_cache({**llama, "rope_theta": 10**400}, seq_len=2)
    with pytest.raises(ValueError, match=r"^invalid rope_scaling\.factor: an integer of 1025 bits"):
        posenc.rope_cache(head_dim=8, scaling={"rope_type": "linear", "factor": -(2**1024)}, seq_len=2)
    with pytest.raises(ValueError, match=r"^invalid config\.model_type: 'llama\\ud800' \(allowed: text"):
        posenc.rope_cache({**llama, "model_type": "llama\ud800"}, seq_len=2)
    with pytest.raises(ValueError, match=r"^invalid config key: '\\udc80'"):
        posenc.rope_cache({**llama, "\udc80": 1}, seq_len=2)
    # Large integers within float64's range are numbers, as JSON reads them.
    assert posenc.rope_cache({**llama, "rope_theta": 10**300}, seq_len=2).cos.shape == (2, 8)


def test_json_text_and_files_with_a_byte_order_mark(tmp_path):
    text = '\ufeff{"model_type": "llama", "head_dim": 8}'
    want = posenc.rope_cache('{"model_type": "llama", "head_dim": 8}', seq_len=2)
    assert np.array_equal(posenc.rope_cache(text, seq_len=2).cos, want.cos)
    assert np.array_equal(posenc.rope_cache(text.encode(), seq_len=2).cos, want.cos)
    path = tmp_path / "config.json"
    path.write_text(text, encoding="utf-8")
    for pairing in (None, "neox"):
        assert np.array_equal(posenc.rope_cache(path, seq_len=2, pairing=pairing).cos, want.cos)


def test_a_family_without_a_drop_in_cache_is_named_with_its_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "gptj", "n_embd": 64, "n_head": 4, "rotary_dim": 8}')
    # As `posenc rope-cache --config` says it (one table and one message in the library).
    with pytest.raises(ValueError, match=f'^{path}: model_type "gptj": its rotary module returns sin then cos'):
        posenc.module_pairing(path)
    with pytest.raises(ValueError, match=f'^{path}: model_type "gptj": its rotary module returns sin then cos'):
        posenc.rope_cache(path, seq_len=2)
    # Given as text, it is named as text: no file is involved.
    with pytest.raises(ValueError, match=r'^config \(JSON text\): model_type "gptj": its rotary module returns sin then cos'):
        posenc.module_pairing(path.read_text())


def test_a_config_given_as_no_file_is_named_by_what_it_is():
    """A config given as a dict, as JSON text or as a transformers config is no file: its
    errors name what it was given as, in every function that takes one, where they said
    config.json (the library's name for a config read from text)."""
    rope = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
            "rope_theta": float("nan")}
    pe = {"model_type": "marian", "d_model": "x"}
    transformers = pytest.importorskip("transformers")
    given = [
        (rope, pe, "config (a dict)"),
        (json.dumps(rope), json.dumps(pe), "config (JSON text)"),
        (json.dumps(rope).encode(), json.dumps(pe).encode(), "config (JSON text)"),
    ]
    for rope_config, pe_config, label in given:
        start = "^" + re.escape(label) + ": invalid "
        calls = [
            lambda: posenc.rope_cache(rope_config, seq_len=2),
            lambda: posenc.RopeSpec(rope_config),
            lambda: posenc.rope(np.zeros((1, 2, 4, 16), np.float32), layout="blhd", config=rope_config),
            lambda: posenc.table(config=pe_config),
            lambda: posenc.encode(np.zeros((4, 8), np.float32), [[0, 1]], config=pe_config),
        ]
        for call in calls:
            with pytest.raises(ValueError, match=start):
                call()
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, head_dim=12,
                                      partial_rotary_factor=0.5)
    with pytest.raises(ValueError, match=r"^config \(a LlamaConfig\): "):
        posenc.rope_cache(config, seq_len=2)


def test_a_config_read_that_waits_hears_ctrl_c(tmp_path):
    """A config from a FIFO whose writer has written nothing yet: the read waits, and a
    Ctrl-C ended it only when the writer wrote or closed. The RoPE's config reads now
    wait where Python's signals are seen."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = (
        "import os, signal, sys, threading, time, posenc\n"
        "fifo, which = sys.argv[1], sys.argv[2]\n"
        "fd = os.open(fifo, os.O_RDWR)  # a writer that writes nothing\n"
        "threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
        "calls = {\n"
        "    'cache': lambda: posenc.rope_cache(fifo, seq_len=2),\n"
        "    'cache-neox': lambda: posenc.rope_cache(fifo, seq_len=2, pairing='neox'),\n"
        "    'spec': lambda: posenc.RopeSpec(fifo),\n"
        "    'rope': lambda: posenc.rope(__import__('numpy').ones((1, 1, 1, 8), 'f4'),\n"
        "                                layout='blhd', config=fifo),\n"
        "    'pairing': lambda: posenc.module_pairing(fifo),\n"
        "}\n"
        "start = time.monotonic()\n"
        "try:\n"
        "    calls[which]()\n"
        "    print('returned')\n"
        "except KeyboardInterrupt:\n"
        "    print('KeyboardInterrupt after %.1f s' % (time.monotonic() - start))\n"
        "os._exit(0)  # the reader thread still waits on the FIFO\n"
    )
    for which in ("cache", "cache-neox", "spec", "rope", "pairing"):
        done = subprocess.run([sys.executable, "-c", code, str(fifo), which],
                              capture_output=True, text=True, timeout=60, cwd="/")
        out = done.stdout.strip()
        assert out.startswith("KeyboardInterrupt after"), (which, out, done.stderr)
        assert float(out.split()[-2]) < 5, (which, out)


def test_rope_out_is_checked_before_anything_is_written():
    x = np.ones((1, 2, 3, 8), np.float32)
    wide = np.full((1, 2, 3, 16), 5.0, np.float32)
    cases = [
        (np.zeros((1, 2, 3, 8), np.float16), "out must have x's dtype and shape (float32, (1, 2, 3, 8)); got (float16"),
        (np.zeros((1, 2, 3, 9), np.float32), "got (float32, (1, 2, 3, 9))"),
        (np.zeros((1, 2, 3, 8), ">f4"), "got (>f4"),
        ([[[[0.0] * 8] * 3] * 2], "out must be a numpy array, got list"),
        (np.broadcast_to(np.float32(0), (1, 2, 3, 8)), "out is read-only"),
    ]
    for out, message in cases:
        with pytest.raises(ValueError) as e:
            posenc.rope(x, layout="blhd", out=out, device="cpu")
        assert message in str(e.value), (message, str(e.value))
    # Memory shared with x, not element for element: refused, x untouched.
    with pytest.raises(ValueError, match="out shares memory with x without being laid over it"):
        posenc.rope(wide[..., :8], layout="blhd", out=wide[..., 4:12], device="cpu")
    assert (wide == 5.0).all()
    # A bad option is found before out is written.
    out = np.full((1, 2, 3, 8), 3.0, np.float32)
    with pytest.raises(ValueError, match="rotary"):
        posenc.rope(x, layout="blhd", rotary_dim=7, out=out, device="cpu")
    assert (out == 3.0).all()
    # The extension's own checks, for a caller past the wrapper.
    from posenc import _posenc
    common = dict(layout="blhd", positions=None, offset=None, config_path=None,
                  config_json=None, layer_type=None, pairing=None, rotary_dim=None, base=None,
                  scaling_json=None, scaling_path=None, inv_freq=None, inv_freq_path=None,
                  inv_freq_tensor=None, attention_factor=None, seq_len=None, device="cpu")
    with pytest.raises(ValueError, match="out must have x's dtype"):
        _posenc.rope(x=x, out=np.zeros(x.shape, np.float16), **common)
    with pytest.raises(ValueError, match=r"out must have x's shape \[1, 2, 3, 8\]; got \[1, 2, 3, 9\]"):
        _posenc.rope(x=x, out=np.zeros((1, 2, 3, 9), np.float32), **common)
    with pytest.raises(ValueError, match="out cannot be written"):
        _posenc.rope(x=x, out=np.broadcast_to(np.float32(0), x.shape), **common)


def test_broadcast_bfloat16_views_are_refused_by_size_not_copied():
    # A broadcast uint16 view of 2^40 values was copied to bfloat16 before any size check,
    # and the allocation's failure aborted the interpreter (round eight of the probes).
    x = np.broadcast_to(np.uint16(0x3F80), (1, 2**20, 2**10, 1024))
    with pytest.raises(ValueError, match="MAX_OUTPUT_VALUES"):
        posenc.rope(x, layout="blhd", device="cpu")
    # A broadcast table of 2^30 rows was then refused for the copy the CPU made of it whole;
    # the CPU gathers the rows its tokens need from a table in other strides now.
    weights = np.broadcast_to(np.uint16(0x3F80), (2**30, 1024))
    one_row = np.full((1, 1024), 0x3F80, np.uint16)
    got = posenc.encode(weights, [[2**30 - 1]], device="cpu")
    assert got.tobytes() == posenc.encode(one_row, [[0]], device="cpu").tobytes()


def test_bfloat16_tables_in_any_strides_give_the_same_bits(device):
    rng = np.random.default_rng(5)
    bits = (rng.integers(0, 2**16, (50, 16)) & 0x7F7F).astype(np.uint16)
    ids = np.array([[1, 2, 3], [4, 5, 49]])
    want = posenc.encode(bits, ids, device=device)
    for strided in [np.asfortranarray(bits), bits[::-1][::-1], np.repeat(bits, 2, axis=1)[:, ::2]]:
        assert posenc.encode(strided, ids, device=device).tobytes() == want.tobytes()
    learned = (rng.integers(0, 2**16, (20, 16)) & 0x3F3F).astype(np.uint16)
    want = posenc.encode(bits, ids, position_table=learned, device=device)
    for strided in [np.asfortranarray(learned), learned[::-1].copy()[::-1]]:
        got = posenc.encode(bits, ids, position_table=strided, device=device)
        assert got.tobytes() == want.tobytes()


def test_integers_in_the_other_byte_order_are_read_without_a_copy(tmp_path):
    # Byte-swapped ids were copied to native order before the output's size was known
    # (a weights path): a broadcast view of 2^31 was a 16 GiB copy.
    weights = tmp_path / "w.npy"
    np.save(weights, np.ones((10, 8), np.float32))
    huge = np.broadcast_to(np.array(1, ">i8"), (2**16, 2**15))
    with pytest.raises(ValueError, match="MAX_OUTPUT_VALUES"):
        posenc.encode(weights, huge, device="cpu")
    ids = np.array([[1, 2, 3], [4, 5, 9]])
    positions = np.array([[0, 7, 2**32 - 1], [5, 6, 7]])
    want = posenc.encode(weights, ids, positions=positions, device="cpu")
    for dt in [">i8", ">u2", ">i4", ">u8"]:
        got = posenc.encode(weights, ids.astype(dt), positions=positions.astype(">u4"),
                            device="cpu")
        assert got.tobytes() == want.tobytes(), dt
    got = posenc.encode(weights, ids, offsets=np.array([0, 9], ">i2"), device="cpu")
    assert got.tobytes() == posenc.encode(weights, ids, offsets=[0, 9], device="cpu").tobytes()
    with pytest.raises(ValueError, match="token id -1 at row 0, column 1"):
        posenc.encode(weights, np.array([[1, -1]], ">i8"), device="cpu")
    with pytest.raises(ValueError, match="invalid positions: 1099511627776 at index 1"):
        posenc.table(8, positions=np.array([1, 2**40], ">i8"), device="cpu")
    big_endian = posenc.table(8, positions=np.array([3, 2**32 - 1], ">u8"), device="cpu")
    assert big_endian.tobytes() == posenc.table(8, positions=[3, 2**32 - 1], device="cpu").tobytes()
    cos, _ = posenc.rope_cache(head_dim=8, positions=np.array([5, 2**31], ">i8"), device="cpu")
    assert cos.tobytes() == posenc.rope_cache(head_dim=8, positions=[5, 2**31], device="cpu")[0].tobytes()


def test_ranges_named_are_the_options_own():
    # The type's range was named where the option's is narrower (round eight).
    with pytest.raises(ValueError, match=r"^invalid heads: -1 \(allowed: 1\.\.=65536\)$"):
        posenc.alibi_slopes(-1)
    with pytest.raises(ValueError, match=r"^invalid heads: 4294967296 \(allowed: 1\.\.=65536\)$"):
        posenc.alibi_bias(2**32, 4)
    assert posenc.MAX_ALIBI_HEADS == 65536 and posenc.alibi_slopes(65536).shape == (65536,)
    spec = posenc.RopeSpec(head_dim=8)
    for bad in (0, 2**32 + 1):
        with pytest.raises(ValueError, match=rf"^invalid seq_len: {bad} \(allowed: 1\.\.=4294967296 \(one"):
            spec.frequencies(bad)
    assert spec.frequencies(2**32)[0].shape == (4,)
    # RoPE's head and rotary dims and the length dynamic scaling sees, past their integer
    # types, as the command line words their ranges (a rotary dim of -2 was 0..=4294967295).
    x = np.ones((1, 2, 2, 8), np.float32)
    for call, name, value, allowed in [
        (lambda: posenc.RopeSpec(head_dim=64, rotary_dim=-2), "rotary_dim", -2, "an even number in 2..=head_dim"),
        (lambda: posenc.rope(x, layout="blhd", rotary_dim=2**32), "rotary_dim", 2**32, "an even number in 2..=head_dim"),
        (lambda: posenc.RopeSpec(head_dim=-64), "head_dim", -64, "an even number in 2..=65536"),
        (lambda: posenc.rope_cache(head_dim=2**40, seq_len=2), "head_dim", 2**40, "an even number in 2..=65536"),
        (lambda: posenc.RopeSpec(head_dim=64, seq_len=2**64), "seq_len", 2**64, "1..=4294967296"),
        (lambda: posenc.RopeSpec(head_dim=64, seq_len=0), "seq_len", 0, "1..=4294967296"),
        # rope_cache's seq_len is its length, `--len`: positions 0..N.
        (lambda: posenc.rope_cache(head_dim=8, seq_len=-1), "seq_len", -1, "0..=4294967296 (positions"),
        (lambda: posenc.rope_cache(head_dim=8, seq_len=2**33), "seq_len", 2**33, "0..=4294967296 (positions"),
        # A table's width as --dim words it (round twelve: 0..=4294967295).
        (lambda: posenc.table(-2), "dim", -2, "a whole number in 1..=65536 as the variant allows"),
        (lambda: posenc.table(2**33), "dim", 2**33, "a whole number in 1..=65536 as the variant allows"),
        # A finite scale past float32's range (round twelve: "a finite number").
        (lambda: posenc.encode(np.ones((4, 8), np.float32), [[1]], scale=3.5e38), "scale", 3.5e38,
         '"none", "sqrt" or a number finite in float32'),
        # Counts of positions as the command line words them (round twenty-six: a table's
        # len named u64's range).
        (lambda: posenc.table(8, len=-1), "len", -1, "0..=4294967296 (positions are u32)"),
        (lambda: posenc.alibi_bias(8, -1), "len", -1, "0..=4294967296 (positions are u32)"),
        (lambda: posenc.alibi_bias(8, 4, kv_len=-1), "kv_len", -1, "0..=4294967296 (positions are u32)"),
    ]:
        with pytest.raises(ValueError) as e:
            call()
        assert f"invalid {name}: {value} (allowed: {allowed}" in str(e.value), str(e.value)
    # A head dim taken from an array: the rotary-dim hint only where a rotary dim helps,
    # naming no front end's option (round twenty-six: RopeSpec::partial and --rotary-dim).
    for dim, hinted in [(7, True), (1, False)]:
        with pytest.raises(ValueError) as e:
            posenc.rope(np.ones((1, 1, 1, dim), np.float32), layout="blhd", device="cpu")
        message = str(e.value)
        assert message.startswith(f"invalid head_dim: {dim} (the last axis of x) (allowed: an even"), message
        assert ("partial rotary dim" in message) == hinted, message
        assert "RopeSpec" not in message and "--" not in message, message
    # In the types' range the extension checks, in the same words.
    with pytest.raises(ValueError, match="allowed: an even number in 2..=head_dim"):
        posenc.RopeSpec(head_dim=64, rotary_dim=3)


def test_devices_refuses_a_backend_that_names_none():
    code = "import posenc; posenc.devices()"
    env = {**os.environ, "WGPU_BACKEND": "bogus"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode != 0
    assert 'ValueError: invalid WGPU_BACKEND: "bogus"' in run.stderr, run.stderr


def test_encode_out_is_checked_before_anything_is_written(tmp_path):
    w = np.ones((10, 8), np.float32)
    ids = np.array([[1, 2, 3]])
    cases = [
        (dict(out=np.zeros((1, 3, 8), np.float16)), "out must be of out_dtype's type, float32 (out_dtype 'f32'); got float16"),
        (dict(out=np.zeros((1, 3, 8), np.float32), out_dtype="bf16"), "out must be of out_dtype's type, bfloat16"),
        (dict(out=[0.0]), "out must be a numpy array, got list"),
        (dict(out=np.broadcast_to(np.float32(0), (1, 3, 8))), "out is read-only"),
        (dict(out=np.zeros(24, np.float32)), "out must have rank 2 or 3 (the output's), got shape (24,)"),
        (dict(out=w), "out shares memory with weights"),
        (dict(out=np.zeros((1, 3, 9), np.float32)), "encode: shape mismatch for out (the output's shape): expected [1, 3, 8], got [1, 3, 9]"),
        (dict(out=np.zeros((3, 8), np.float32)), "expected [1, 3, 8], got [3, 8]"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError) as e:
            posenc.encode(w, ids, device="cpu", **kwargs)
        assert message in str(e.value), (message, str(e.value))
    # A weights path: the width is checked once the file's header is read.
    np.save(tmp_path / "w.npy", w)
    with pytest.raises(ValueError, match=r"expected \[1, 3, 8\], got \[1, 3, 4\]"):
        posenc.encode(tmp_path / "w.npy", ids, out=np.zeros((1, 3, 4), np.float32), device="cpu")
    # A bad id is found before out is written.
    out = np.full((1, 3, 8), 5.0, np.float32)
    with pytest.raises(ValueError, match="token id 10"):
        posenc.encode(w, np.array([[1, 10, 2]]), out=out, device="cpu")
    assert (out == 5.0).all()


def test_outs_whose_elements_overlap_or_are_misaligned_are_refused():
    # Writing such an out was undefined behaviour: the pool's tasks wrote the same floats
    # at once (a review of the out= change).
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy's FutureWarning: broadcast results writable
        a, b = np.broadcast_arrays(np.zeros((1, 1, 1, 128), np.float32),
                                   np.ones((1, 40, 8, 128), np.float32))
        if a.flags.writeable:
            with pytest.raises(ValueError, match="out cannot be written: its elements overlap"):
                posenc.rope(b, layout="blhd", out=a, device="cpu")
    c = np.lib.stride_tricks.as_strided(np.ones(128, np.float32), (1, 40, 8, 128), (0, 0, 0, 4))
    with pytest.raises(ValueError, match=r"x \(as out\) cannot be written: its elements overlap"):
        posenc.rope(c, layout="blhd", out=c, device="cpu")
    e = np.lib.stride_tricks.as_strided(np.zeros(8, np.float32), (1, 3, 8), (0, 0, 4))
    with pytest.raises(ValueError, match="out cannot be written: its elements overlap"):
        posenc.encode(np.ones((4, 8), np.float32), [[1, 2, 3]], out=e, device="cpu")
    unaligned = np.ndarray((1, 2, 2, 8), np.float32, buffer=bytearray(129), offset=1)
    with pytest.raises(ValueError, match="out is not aligned in memory"):
        posenc.rope(np.zeros((1, 2, 2, 8), np.float32), layout="blhd", out=unaligned)
    with pytest.raises(ValueError, match=r"x is not aligned in memory.*numpy\.require"):
        posenc.rope(unaligned, layout="blhd")
    weights = np.ndarray((4, 8), np.float32, buffer=bytearray(129), offset=1)
    with pytest.raises(ValueError, match="weights is not aligned in memory"):
        posenc.encode(weights, [[1]])


def test_outs_that_share_no_element_with_x_are_taken():
    # Bounds that overlap without a shared element (interleaved), and a view of x whose
    # length-1 axis has another stride, are not refused as overlapping.
    rng = np.random.default_rng(16)
    buf = rng.standard_normal((1, 4, 2, 32)).astype(np.float32)
    x, out = buf[..., ::2], buf[..., 1::2]
    want = posenc.rope(x.copy(), layout="blhd", offset=3, device="cpu")
    posenc.rope(x, layout="blhd", offset=3, out=out, device="cpu")
    assert np.array_equal(out, want)
    base = rng.standard_normal((4, 2, 16)).astype(np.float32)
    want = posenc.rope(base[None].copy(), layout="blhd", device="cpu")
    posenc.rope(base[None], layout="blhd", out=base.reshape(1, 4, 2, 16), device="cpu")
    assert np.array_equal(base[None], want)
    # Reversed and empty outs.
    x = rng.standard_normal((1, 4, 2, 16)).astype(np.float32)
    rev = np.empty_like(x)[:, ::-1]
    posenc.rope(x, layout="blhd", out=rev, device="cpu")
    assert np.array_equal(rev, posenc.rope(x, layout="blhd", device="cpu"))
    empty = np.empty((1, 0, 2, 16), np.float32)
    assert posenc.rope(empty, layout="blhd", out=np.empty_like(empty)).shape == (1, 0, 2, 16)


def test_bfloat16_and_its_bits_are_named_apart():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.zeros((1, 2, 2, 8), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match=r"\(bfloat16, .*got \(uint16, .*out\.view\(x\.dtype\)"):
        posenc.rope(x, layout="blhd", out=np.zeros(x.shape, np.uint16))


def test_the_extension_refuses_outs_over_its_inputs_and_empty_misaligned_arrays():
    # Found by a review: rust-numpy's borrow checks miss arrays of other element sizes
    # over one buffer, and numpy calls any empty array aligned.
    from posenc import _posenc

    ids = np.array([[1, 2, 3, 4, 5, 6, 7]] * 3)
    out = np.zeros((3, 7, 16), np.float32)
    high_halves = out.view(np.uint16).reshape(21, 32)[:, 1::2]
    options = dict(
        weights_path=None, tensor=None, one_sequence=False, positions=None, offsets=None,
        pad_id=None, scale=None, config_path=None, config_json=None, variant=None,
        frequencies="exact", inv_freq=None, inv_freq_path=None, inv_freq_tensor=None,
        base=None, min_timescale=None, max_timescale=None, start_index=None,
        padding_idx=None, position_table=None, position_table_path=None,
        position_tensor=None, out_dtype="f32", device="cpu", gpu_memory_budget=None,
    )
    with pytest.raises(ValueError, match=r"out may share memory with weights \(their address"):
        _posenc.encode(weights=high_halves, ids=ids, out=out, **options)
    with pytest.raises(ValueError, match=r"one_sequence needs ids of one row, got shape \[0, 3\]"):
        _posenc.encode(weights=np.ones((4, 8), np.float32), ids=np.zeros((0, 3), np.int64),
                       **{**options, "one_sequence": True})
    x = np.ones((1, 4, 2, 8), np.float32)
    o = np.zeros_like(x)
    with pytest.raises(ValueError, match="out shares memory with positions"):
        posenc.rope(x, layout="blhd", out=o, positions=o.view(np.int32)[:, :, 0, 0])
    empty = np.ndarray((0, 2, 2, 8), np.float32, buffer=bytearray(64), offset=1)
    with pytest.raises(ValueError, match="x is not aligned in memory"):
        posenc.rope(empty, layout="blhd", device="cpu")
    # A misaligned inv_freq is copied aligned, as every array-like is converted.
    odd = np.frombuffer(bytearray(33), np.float64, count=4, offset=1)
    assert not odd.flags.aligned
    assert posenc.rope(x, layout="blhd", inv_freq=odd).shape == x.shape


def test_table_and_alibi_outs_are_checked_before_anything_is_written():
    cases = [
        (lambda o: posenc.table(8, len=4, out=o), np.zeros((4, 8), np.float64), "out must be a float32 array of rank 2; got float64"),
        (lambda o: posenc.table(8, len=4, out=o), np.zeros((4, 9), np.float32), "table: shape mismatch for out (the output's shape): expected [4, 8], got [4, 9]"),
        (lambda o: posenc.table(8, len=4, out=o), np.broadcast_to(np.float32(0), (4, 8)), "out is read-only"),
        (lambda o: posenc.alibi_bias(2, 3, out=o), np.zeros((2, 3, 4), np.float32), "alibi: shape mismatch for out (the output's shape): expected [2, 3, 3], got [2, 3, 4]"),
        (lambda o: posenc.alibi_bias(2, 3, out=o), [0.0], "out must be a numpy array, got list"),
        (lambda o: posenc.alibi_bias(2, 3, out=o), np.zeros((2, 9), np.float32), "out must be a float32 array of rank 3"),
    ]
    for call, out, message in cases:
        with pytest.raises(ValueError) as e:
            call(out)
        assert message in str(e.value), (message, str(e.value))
    positions = np.arange(8, dtype=np.int32)
    with pytest.raises(ValueError, match="out shares memory with positions"):
        posenc.table(2, positions=positions, out=positions.view(np.float32).reshape(4, 2))
    out = np.full((4, 8), 3.0, np.float32)
    with pytest.raises(ValueError, match="base"):
        posenc.table(8, len=4, base=0.5, out=out)
    assert (out == 3.0).all()


def test_outs_apart_from_their_inputs_are_taken_wherever_their_ranges_lie():
    # Disjoint halves of one array, whose address ranges overlap: taken, with the new
    # result's bits (a stranger's round found them refused, some as "already borrowed").
    base = np.random.default_rng(17).standard_normal((2, 6, 4, 16)).astype(np.float32)
    x, out = base[:, :3], base[:, 3:]
    want = posenc.rope(x.copy(), layout="blhd", offset=5, device="cpu")
    assert posenc.rope(x, layout="blhd", offset=5, out=out, device="cpu") is out
    assert np.array_equal(out, want)
    mem = np.zeros((4, 16), np.float32)
    column = mem[:, 8].view(np.uint32)
    column[:] = [0, 3, 2**31, 7]
    want = posenc.table(8, positions=column.copy(), device="cpu")
    posenc.table(8, positions=column, out=mem[:, :8], device="cpu")
    assert np.array_equal(mem[:, :8], want)
    buf = np.random.default_rng(18).standard_normal((3, 32)).astype(np.float32)
    want = posenc.encode(buf[:, 16:].copy(), [[0, 1, 2]], device="cpu")
    out = buf[:, :16].reshape(1, 3, 16)
    posenc.encode(buf[:, 16:], [[0, 1, 2]], out=out, device="cpu")
    assert np.array_equal(buf[:, :16], want[0])
    # A model's frequencies are copied: a view of out is read as it was.
    out = np.zeros((4, 8), np.float32)
    inv = out.reshape(-1)[:8].view(np.float64)
    inv[:] = 0.1
    want = posenc.table(8, len=4, inv_freq=inv.copy(), device="cpu")
    posenc.table(8, len=4, inv_freq=inv, out=out, device="cpu")
    assert np.array_equal(out, want)


def test_a_broadcast_inv_freq_is_refused_by_size_not_copied():
    huge = np.broadcast_to(np.float64(1.0), (2**31,))
    with pytest.raises(ValueError, match=r"^invalid inv_freq: 2147483648 values \(allowed: one per frequency, at most 32768\)"):
        posenc.rope(np.ones((1, 2, 1, 8), np.float32), layout="blhd", inv_freq=huge)


def test_ranges_and_lists_are_sized_before_numpy_builds_them():
    """A range is lazy: NumPy made a Python integer of each element before the extension's
    size check (range(2**29): two minutes and all of 24 GB, round twenty-eight). Ranges,
    lists and tuples are now counted first, and a range within int64 is made by arange."""
    import time

    start = time.monotonic()
    for huge in (range(2**29), range(2**70), range(-(2**80), 2**80, 3)):
        with pytest.raises(ValueError, match=r"positions: \d+ values, 8 output values each.*MAX_OUTPUT_VALUES"):
            posenc.table(8, positions=huge, device="cpu")
        with pytest.raises(ValueError, match="MAX_OUTPUT_VALUES"):
            posenc.rope_cache(head_dim=8, positions=huge, device="cpu")
        with pytest.raises(ValueError, match="MAX_OUTPUT_VALUES"):
            posenc.RopeSpec(head_dim=8).cache(huge)
    with pytest.raises(ValueError, match="MAX_OUTPUT_VALUES"):
        posenc.table(2**20, positions=[0] * 4096, device="cpu")
    assert time.monotonic() - start < 30, "refused by their length, not built first"
    # Within the limits they read as the same values as a list: steps, negative steps,
    # empty ranges, and endpoints past 64 bits (named as the integers they are).
    for r in (range(5), range(10, 0, -3), range(3, 3), range(0, 40, 7)):
        want = posenc.table(8, positions=np.array(list(r), np.int64), device="cpu")
        np.testing.assert_array_equal(posenc.table(8, positions=r, device="cpu"), want)
        np.testing.assert_array_equal(posenc.table(8, positions=list(r), device="cpu"), want)
    with pytest.raises(ValueError, match="-1"):
        posenc.table(8, positions=range(-1, 2), device="cpu")
    with pytest.raises(ValueError, match=str(2**70)):
        posenc.table(8, positions=range(2**70, 2**70 + 2), device="cpu")
    # Every element, where float64 would count one short, and a count past sys.maxsize
    # named as it is.
    with pytest.raises(ValueError, match=str(2**60)):
        posenc.table(8, positions=range(0, 2**60 + 1, 2**60), device="cpu")
    with pytest.raises(ValueError, match=f"positions: {2**70} values"):
        posenc.table(8, positions=range(2**70), device="cpu")
    # rope_cache's output is cos and sin of the rotary dim: a partial one is sized so.
    # (2^18 + 1 positions of a 4096-wide head would pass 2^31 values; of 2 rotary dims, not.)
    n = 2**18 + 1
    cache = posenc.rope_cache(head_dim=4096, rotary_dim=2, positions=range(n), device="cpu")
    assert cache.cos.shape == (n, 2)


def test_a_pad_id_beside_a_family_that_numbers_pads_is_refused():
    """Marian numbers pad tokens like any other token: a pad id, which restarts positions
    after left padding and zeroes pad rows, would give what the model never saw (round
    twenty of the hostile probes: it was taken silently)."""
    w = np.zeros((8, 512), np.float32)
    ids = np.array([[7, 7, 1, 2]], np.uint32)
    with pytest.raises(ValueError, match=r'invalid pad_id: 7, beside a config of model_type "marian"'):
        posenc.encode(w, ids, config=CONFIGS / "opus-mt-en-de.json", pad_id=7, device="cpu")
    assert posenc.encode(w, ids, config=CONFIGS / "opus-mt-en-de.json", device="cpu").shape == (1, 4, 512)
