"""Exact transformer positional encodings, numpy in and out.

posenc computes sinusoid tables, the fused embedding + positional-encoding gather, RoPE
(with Hugging Face's ``rope_scaling`` schemes and ``config.json`` reading) and ALiBi biases
in exact fixed-point turns: within 6e-8 of the true value at every u32 position, the same
bits on the CPU and on any GPU wgpu reaches (Vulkan, Metal, DX12, GL).

Each function mirrors one command of the ``posenc`` binary and takes its options as
keyword arguments (``--rotary-dim`` is ``rotary_dim=``), arrays in place of files:

=================  ===================================================================
``table``          a positional-encoding table ``[positions, dim]``, float32
``encode``         ``scale * E[ids] + PE(positions)``, ``[B, L, D]``
``rope``           RoPE on a query or key tensor ``[B, L, H, Dh]`` or ``[B, H, L, Dh]``
``rope_cache``     ``(cos, sin)`` of a RoPE configuration, as a model's rotary module
                   returns them
``alibi_slopes``   the float32 ALiBi slopes of H heads
``alibi_bias``     the ALiBi bias ``[heads, len, kv_len]``
``devices``        the GPU adapters wgpu can see
=================  ===================================================================

``device="auto"`` (the default) computes where the result reaches numpy sooner: on the CPU,
without opening a GPU, unless a cost model expects a hardware GPU to deliver it sooner
(``POSENC_AUTO=gpu``: the GPU whenever one opens); a GPU that fails sends the work to the
CPU with a :class:`DeviceWarning`. ``"cpu"`` and ``"gpu"`` insist. Errors are
``ValueError`` (bad input), ``OSError`` (files) or :class:`GpuError` (the device), with the
command line's one-line message. bfloat16 values travel as ``uint16`` arrays of raw bits
(what the command line writes to ``.npy``) or as ``ml_dtypes.bfloat16`` arrays; see
:func:`as_bfloat16`. ``posenc.hf`` puts exact RoPE into a transformers model.
"""

from __future__ import annotations

import json
import operator
import os
import sys
import threading
import warnings
from typing import Any, Optional, Union

import numpy as np

from . import _posenc
from ._posenc import (
    ACCURACY_BOUND,
    MAX_ALIBI_HEADS,
    MAX_OUTPUT_VALUES,
    GpuError,
    RopeSpec as _RustRopeSpec,
)

__all__ = [
    "ACCURACY_BOUND",
    "MAX_ALIBI_HEADS",
    "MAX_OUTPUT_VALUES",
    "DeviceWarning",
    "GpuError",
    "RopeCache",
    "RopeSpec",
    "alibi_bias",
    "alibi_slopes",
    "as_bfloat16",
    "bf16_to_f32",
    "devices",
    "encode",
    "module_pairing",
    "rope",
    "rope_cache",
    "table",
]

__version__ = "0.1.0"


class DeviceWarning(RuntimeWarning):
    """``device="auto"`` computed on the CPU: no GPU opened, or it failed (lost, out of
    memory, past a limit). The CPU gives the same bits; the message says why."""


if _posenc.THREADS_NOTE:
    warnings.warn(f"posenc: note: {_posenc.THREADS_NOTE}", RuntimeWarning, stacklevel=2)


def _noted(result):
    value, note = result
    if note:
        warnings.warn(f"posenc: note: {note}", DeviceWarning, stacklevel=3)
    return value


# Mesa's Vulkan device-select layer looks for a Wayland display while wgpu enumerates
# adapters, and libwayland complains on stderr when XDG_RUNTIME_DIR is unset or not absolute.
# Any absolute path quiets it where no socket is; as the command line does, posenc points it
# at a path under /dev/null, which no one can create, before it first opens the GPU.
NO_RUNTIME_DIR = "/dev/null/posenc-no-runtime-dir"
_runtime_lock = threading.Lock()
_runtime_checked = False


def _ensure_runtime_dir(device: str) -> None:
    global _runtime_checked
    if device == "cpu" or _runtime_checked:
        return
    with _runtime_lock:
        # Mesa's layer and libwayland run on Linux and the BSDs alone: macOS and Windows
        # (where /dev/null is no path) keep their environment, as the command line does.
        apple = ("darwin", "ios", "tvos", "watchos", "visionos")
        unix = os.name == "posix" and not sys.platform.startswith(apple)
        if unix and not _runtime_checked and not os.path.isabs(os.environ.get("XDG_RUNTIME_DIR", "")):
            os.environ["XDG_RUNTIME_DIR"] = NO_RUNTIME_DIR
        _runtime_checked = True


# ---- argument normalisation -------------------------------------------------------------

PathLike = Union[str, "os.PathLike[str]"]


def _path(value: Any) -> str:
    """A path object or bytes as the text the extension takes: ``os.fspath`` may give
    bytes, and ``os.fsdecode`` keeps those that are not UTF-8 (as surrogates)."""
    return os.fsdecode(os.fspath(value))


def _is_bfloat16(dtype: np.dtype) -> bool:
    return dtype.name == "bfloat16" and dtype.itemsize == 2


def as_bfloat16(bits: np.ndarray) -> np.ndarray:
    """View a uint16 array of bfloat16 bits as ``ml_dtypes.bfloat16`` (no copy).

    posenc returns bfloat16 results as uint16 bits, whatever is installed, so that a
    result's type never depends on the environment; this needs ``ml_dtypes``
    (``pip install ml_dtypes``)."""
    import ml_dtypes

    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise ValueError(f"as_bfloat16 takes uint16 bits, got dtype {bits.dtype}")
    return bits.view(ml_dtypes.bfloat16)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 values (uint16 bits or ``ml_dtypes.bfloat16``) widened exactly to float32."""
    bits = np.asarray(bits)
    if _is_bfloat16(bits.dtype):
        bits = bits.view(np.uint16)
    if bits.dtype != np.uint16:
        raise ValueError(f"bf16_to_f32 takes uint16 bits or bfloat16, got dtype {bits.dtype}")
    return (bits.astype(np.uint32) << 16).view(np.float32)


_U32 = 2**32 - 1
_U64 = 2**64 - 1
# The ranges of RoPE's integer options, as the command line words them.
_HEAD_DIMS = "an even number in 2..=65536"
_ROTARY_DIMS = "an even number in 2..=head_dim"
# A table's width, as the command line's --dim words it (the variant checks the rest).
_TABLE_DIMS = (
    "a whole number in 1..=65536 as the variant allows (vaswani: an even number in 2..=65536)"
)
_SEQ_LENS = "1..=4294967296 (one more than the largest u32 position)"
# A count of positions (a table's len, a bias's len and kv_len), as the command line words
# it; past it, a value of the type goes on to the extension's checks, as the command line's
# does (a table's size, the bias's range).
_POSITION_COUNTS = "0..=4294967296 (positions are u32)"


def _shown(value: Any) -> str:
    """``value`` as an error names it, bounded: an integer past 128 bits by its size (its
    digits may be thousands, past what ``str`` converts), anything else by a ``repr`` cut
    to 80 characters."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        n = int(value).bit_length()
        if n > 128:
            return f"an integer of {n} bits"
        return str(int(value))
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _whole(
    value: Any,
    name: str,
    largest: int,
    optional: bool = True,
    smallest: int = 0,
    allowed: Optional[str] = None,
) -> Any:
    """An integer option within its type (``smallest..=largest``; the type's range unless
    the option's own is narrower), as an int, ``None`` as it is where the option is
    ``optional``: anything else is refused here by the option's name (the extension's
    conversion would name its own parameter, or none, and raise ``TypeError``), and so is
    an integer past the type (the conversion's ``OverflowError`` names neither the value
    nor the range). ``allowed`` is the option's own range, as the command line words it,
    where the extension checks more than the type (a rotary dim's evenness)."""
    if value is None and optional:
        return None
    range_text = allowed or f"{smallest}..={largest}"
    kind = allowed or f"a whole number in {smallest}..={largest}"
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"invalid {name}: {value} (allowed: {kind}, not a bool)")
    try:
        whole = operator.index(value)
    except TypeError:
        raise ValueError(f"invalid {name}: {_shown(value)} (allowed: {kind})") from None
    if not smallest <= whole <= largest:
        raise ValueError(f"invalid {name}: {_shown(whole)} (allowed: {range_text})")
    return whole


def _text(value: Any, name: str, optional: bool = True) -> Optional[str]:
    """A text option (``None`` as it is where the option is ``optional``): anything else
    is refused here by the option's name (the extension's conversion would raise
    ``TypeError`` naming it only in a note), and so is text UTF-8 cannot hold
    (:func:`_utf8`)."""
    if isinstance(value, str):
        return _utf8(value, name)
    if optional and value is None:
        return value
    raise ValueError(f"invalid {name}: {_shown(value)} (allowed: a string)")


def _utf8(text: str, name: str) -> str:
    """``text`` where UTF-8 can hold it; a lone surrogate (``"\\ud800"``, or what
    ``surrogateescape`` decoding makes of a byte that is not UTF-8) is refused by the
    option's name, where the extension's conversion raised ``UnicodeEncodeError`` naming
    none."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"invalid {name}: {_shown(text)} (a lone surrogate at index {e.start}; "
            f"allowed: text UTF-8 can hold)"
        ) from None
    return text


def _number(value: Any, name: str) -> Optional[float]:
    """A number option, ``None`` as it is; anything else (a string, a bool, an array) is
    refused here by the option's name, as :func:`_text` refuses."""
    if value is None:
        return None
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    ):
        try:
            return float(value)
        except OverflowError:
            pass  # an int past float64: refused below, by name
    raise ValueError(f"invalid {name}: {_shown(value)} (allowed: a finite number)")


def _padding_idx(value: Any) -> Any:
    """fairseq's ``padding_idx``: an integer or ``"none"`` (the extension checks which);
    a bool, which Python counts as an integer, is refused by name."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(
            f"invalid padding_idx: {value} (allowed: \"none\" or an integer in 0..=4294967295)"
        )
    return value


def _not_both(a_name: str, a: Any, b_name: str, b: Any) -> None:
    """Refuses two options the command line refuses together (one would be ignored)."""
    if a is not None and b is not None:
        raise ValueError(f"invalid {b_name}: given beside {a_name} (allowed: one of the two)")


def _json_of(value: Any, what: str, mark_non_finite: bool = False) -> str:
    """``json.dumps`` of a dict, refusing non-finite numbers by their key (JSON has none:
    ``json.dumps`` would write ``NaN``, which the parser then refuses as text). With
    ``mark_non_finite`` (a model config, whose Mamba layers may keep ``inf`` in keys posenc
    never reads) each is written as transformers 5 writes it, ``{"__float__": "Infinity"}``,
    and posenc refuses one only in a key it reads, naming that key."""

    def check(v: Any, at: str) -> None:
        if isinstance(v, (float, np.floating)) and not np.isfinite(v):
            if mark_non_finite:
                return
            raise ValueError(f"invalid {at}: {v} (allowed: a finite number)")
        if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 1000:
            try:
                float(v)
            except OverflowError:
                # Past float64's range: the JSON reader would stop at it, naming a column
                # of text the caller never wrote.
                raise ValueError(f"invalid {at}: an integer of {v.bit_length()} bits "
                                 f"(allowed: a number within float64's range)") from None
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"invalid {at}: {v!r} (allowed: text that is valid "
                                 f"Unicode, with no lone surrogate)") from None
        if isinstance(v, dict):
            for k, item in v.items():
                if isinstance(k, str):
                    check(k, f"{at} key")
                check(item, f"{at}.{k}")
        elif isinstance(v, (list, tuple)):
            for k, item in enumerate(v):
                check(item, f"{at}[{k}]")

    def plain(v: Any) -> Any:
        # NumPy's scalars (a config built from arrays) as the Python numbers they hold;
        # those with none (longdouble's item is itself) are not JSON either.
        if isinstance(v, np.generic):
            item = v.item()
            if not isinstance(item, np.generic):
                return item
        raise ValueError(f"invalid {what}: a {type(v).__name__} is not JSON")

    def marked(v: Any) -> Any:
        if isinstance(v, (float, np.floating)) and not np.isfinite(v):
            return {"__float__": "NaN" if np.isnan(v) else ("Infinity" if v > 0 else "-Infinity")}
        if isinstance(v, dict):
            return {k: marked(item) for k, item in v.items()}
        if isinstance(v, (list, tuple)):
            return [marked(item) for item in v]
        return v

    try:
        check(value, what)
        if mark_non_finite:
            value = marked(value)
        return json.dumps(value, default=plain)
    except (RecursionError, TypeError) as e:
        # Nesting past Python's recursion limit, a cycle, a key that is no string.
        raise ValueError(f"invalid {what}: not JSON ({type(e).__name__}: {e})") from None
    except ValueError as e:
        if str(e).startswith("invalid "):
            raise
        raise ValueError(f"invalid {what}: not JSON ({e})") from None


def _config_label(config: Any) -> str:
    """How errors name a config given as no file (the library's own say ``config.json``);
    a config read once keeps the name it was read with (its file's, or its own label)."""
    if isinstance(config, _ReadConfig):
        return config.name
    if isinstance(config, dict):
        return "config (a dict)"
    if isinstance(config, (str, bytes)):
        return "config (JSON text)"
    return f"config (a {type(config).__name__})"


def _config_named(config: Any) -> dict:
    """``_config``'s path and text as the extension's arguments, with the label of a config
    given as no file (``_config_label``)."""
    path, text = _config(config)
    named = {} if text is None else {"config_name": _config_label(config)}
    return dict(config_path=path, config_json=text, **named)


def _config(config: Any) -> tuple[Optional[str], Optional[str]]:
    """A config as ``(path, json_text)``: a path, JSON text, a dict, or a transformers
    ``PretrainedConfig``."""
    if config is None:
        return None, None
    if isinstance(config, dict):
        return None, _json_of(config, "config", mark_non_finite=True)
    if isinstance(config, os.PathLike):
        return _path(config), None
    if isinstance(config, bytes):
        # JSON text (UTF-8, as JSON is), or a path of any bytes.
        if config.lstrip(b"\xef\xbb\xbf \t\r\n").startswith((b"{", b"[")):
            try:
                config = config.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"invalid config: JSON text that is not UTF-8 ({e})") from None
        else:
            config = _path(config)
    if isinstance(config, str):
        # JSON text opens an object (after any byte order mark); one that opens an array
        # is JSON too (refused as such), not a file name.
        if config.lstrip("\ufeff \t\r\n").startswith(("{", "[")):
            return None, _utf8(config.lstrip("\ufeff"), "config (JSON text)")
        return config, None
    if isinstance(config, _ReadConfig):
        return None, config.text
    to_json = getattr(config, "to_json_string", None)
    if callable(to_json):
        text = to_json(use_diff=False)
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"invalid config: {type(config).__name__}.to_json_string() gave bytes that "
                    f"are not UTF-8 ({e})"
                ) from None
        if not isinstance(text, str):
            raise ValueError(
                f"invalid config: {type(config).__name__}.to_json_string() gave "
                f"{type(text).__name__} (allowed: JSON text, as transformers' configs give)"
            )
        return None, text
    raise ValueError(
        f"config must be a path, JSON text, a dict or a transformers config, not "
        f"{type(config).__name__}"
    )


def _scaling(scaling: Any) -> tuple[Optional[str], Optional[str]]:
    """A ``rope_scaling`` object as ``(json_text, path)``: a dict, JSON text, ``"@FILE"``
    (as ``--scaling @FILE``) or a path object."""
    if scaling is None:
        return None, None
    if isinstance(scaling, dict):
        return _json_of(scaling, "rope_scaling"), None
    if isinstance(scaling, os.PathLike):
        return None, _path(scaling)
    if isinstance(scaling, str):
        if scaling.startswith("@"):
            return None, scaling[1:]
        return _utf8(scaling, "scaling"), None
    raise ValueError(
        f"scaling must be a dict, JSON text or '@FILE', not {type(scaling).__name__}"
    )


def _inv_freq(
    inv_freq: Any, tensor: Optional[str]
) -> tuple[Optional[np.ndarray], Optional[str]]:
    """A model's frequencies as ``(float64 values, path)``; float32 widens exactly.
    ``tensor`` names a tensor of a file, so it needs a path."""
    if inv_freq is None:
        if tensor is not None:
            raise ValueError(
                "invalid inv_freq_tensor: given without inv_freq (allowed: with inv_freq, "
                "a .safetensors path)"
            )
        return None, None
    if isinstance(inv_freq, (str, bytes, os.PathLike)):
        return None, _path(inv_freq)
    if tensor is not None:
        raise ValueError(
            "invalid inv_freq_tensor: given with an array (allowed: with inv_freq, a "
            ".safetensors path)"
        )
    a = np.asarray(inv_freq)
    if a.ndim != 1:
        raise ValueError(f"inv_freq must be 1-D, got shape {a.shape}")
    if a.dtype.kind not in "fiu":
        raise ValueError(f"inv_freq must hold numbers, got dtype {a.dtype}")
    if a.size > _posenc.MAX_FREQUENCIES:
        # Before the copy below: a broadcast view may stand for billions of values.
        raise ValueError(
            f"invalid inv_freq: {a.size} values (allowed: one per frequency, at most "
            f"{_posenc.MAX_FREQUENCIES})"
        )
    # Always a copy of its own (at most 256 KiB): float64, contiguous, aligned, and held by
    # no other call (an out= being written on another thread).
    return np.array(a, dtype=np.float64, order="C", copy=True), None


def _int_array(value: Any, what: str, ndim: tuple[int, ...], width: int = 1) -> np.ndarray:
    """Integers of any NumPy integer type, of one of the ranks ``ndim``, as they are: the
    extension checks the sizes they imply, then converts each to u32 (naming the first
    that is not one), so nothing here scans or copies them (an empty list, numpy's
    float64, becomes an empty int64 array). ``width``: output values per value, as far
    as known here (at least 1), for the size check before a copy."""
    try:
        width = max(int(width), 1)
    except (TypeError, ValueError, OverflowError):
        width = 1  # an option of the wrong type, refused by name later
    if isinstance(value, (range, list, tuple)):
        # Their length is known before NumPy turns them into an array: a range would become a
        # Python integer per element first (about 36 bytes each: minutes and all the memory
        # at range(2**29) before the extension's size check, round twenty-eight), a list a
        # copy of 8 bytes per element.
        if isinstance(value, range):
            # Counted exactly (len() fails past sys.maxsize elements).
            step = value.step
            count = max(0, (value.stop - value.start + step - (1 if step > 0 else -1)) // step)
        else:
            count = len(value)
        if count * width > MAX_OUTPUT_VALUES:
            raise ValueError(
                f"{what}: {count} values, {width} output values each, would make an output "
                f"of more than MAX_OUTPUT_VALUES = {MAX_OUTPUT_VALUES} values"
            )
        # arange counts its elements in float64: exact while the span is below 2^53
        # (range(0, 2**60 + 1, 2**60) would lose its last element).
        if (
            isinstance(value, range)
            and abs(value.stop - value.start) < 2**53
            and all(-(2**63) <= v < 2**63 for v in (value.start, value.stop, value.step))
        ):
            value = np.arange(value.start, value.stop, value.step, dtype=np.int64)
    a = np.asarray(value)
    if a.size == 0 and a.dtype.kind == "f":
        a = a.astype(np.int64)
    if a.dtype.kind == "f" and not isinstance(value, np.ndarray):
        # NumPy makes a list of integers no 64-bit type holds both ends of ([-1, 2**64 - 1])
        # float64: such integers are named as integers.
        try:
            exact = np.asarray(value, dtype=object)
        except (TypeError, ValueError):
            exact = None
        if exact is not None and exact.shape == a.shape:
            _check_rank(exact, what, ndim)
            _refuse_huge_ints(exact, what)
    if a.dtype.kind not in "iu":
        if isinstance(value, str):
            # table and rope_cache take spec strings ("0..16"); these arguments do not.
            raise ValueError(
                f"{what} must be an array of integers, got the string {value!r} (a spec "
                f"string such as '0..16' is for table's and rope_cache's positions)"
            )
        if a.dtype == object:
            # Python integers past 64 bits: the rank first, as for integer arrays.
            _check_rank(a, what, ndim)
            _refuse_huge_ints(a, what)
        raise ValueError(f"{what} must be integers, got dtype {a.dtype}")
    _check_rank(a, what, ndim)
    if not a.flags.aligned:
        # The extension reads aligned integers, in either byte order; others are copied so,
        # after the output's size as far as it is known here: each value gives `width`
        # output values, so the copy is never larger than an output that may be had.
        if a.size * width > MAX_OUTPUT_VALUES:
            raise ValueError(
                f"{what}: shape {a.shape}, {width} output values each, would make an output "
                f"of more than MAX_OUTPUT_VALUES = {MAX_OUTPUT_VALUES} values"
            )
        a = np.require(a.astype(a.dtype.newbyteorder("="), copy=False), requirements="A")
    return a


def _check_rank(a: np.ndarray, what: str, ndim: tuple[int, ...]) -> None:
    if a.ndim not in ndim:
        ranks = " or ".join(str(n) for n in ndim)
        raise ValueError(f"{what} must have rank {ranks}, got shape {a.shape}")


# Elements of an object array _refuse_huge_ints looks at, at most: a broadcast view may
# stand for billions of them, each a Python object to test.
_HUGE_INT_SCAN = 1 << 20


def _refuse_huge_ints(a: np.ndarray, what: str) -> None:
    """Python integers past NumPy's 64 bits (a list holding 2**70) make an object array:
    names the first value outside 0..=2^32 - 1 among its first _HUGE_INT_SCAN elements, in
    the words the extension uses for one that fits 64 bits, while every element so far is
    an integer (a round-twenty-three stranger's: it was told its integers were not
    integers). One lazy pass, stopping at the first element that is not an integer."""
    for k, v in enumerate(a.flat):
        if k >= _HUGE_INT_SCAN or isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            return
        if 0 <= v <= 0xFFFF_FFFF:
            continue
        at = np.unravel_index(k, a.shape)
        if what == "ids":
            # 1-D ids are one sequence: row 0, as the extension names them.
            place = f"row 0, column {k}" if a.ndim == 1 else f"row {at[0]}, column {at[1]}"
            raise ValueError(
                f"token id {int(v)} at {place} is out of range: ids are 32-bit (allowed: "
                f"0..=4294967295)"
            )
        place = f"index {k}" if a.ndim == 1 else "[" + ", ".join(str(int(i)) for i in at) + "]"
        raise ValueError(f"invalid {what}: {int(v)} at {place} (allowed: 0..=4294967295)")


def _table_array(value: Any, what: str):
    """An embedding or position table: an array (float32, float16, bfloat16) or a path."""
    if isinstance(value, (str, bytes, os.PathLike)):
        return None, _path(value)
    a = np.asarray(value)
    if _is_bfloat16(a.dtype):
        a = a.view(np.uint16)
    if a.dtype not in (np.float32, np.float16, np.uint16):
        raise ValueError(
            f"{what} has dtype {a.dtype}; allowed: float32, float16, bfloat16 "
            f"(ml_dtypes.bfloat16, or uint16 holding its bits)"
        )
    if a.ndim != 2:
        raise ValueError(f"{what} must have rank 2, got shape {a.shape}")
    return a, None


def _device(device: str, reference: bool = False) -> str:
    if not isinstance(device, str):
        allowed = '"auto", "cpu", "gpu"' + (', "reference"' if reference else "")
        raise ValueError(f"invalid device: {device!r} (allowed: {allowed})")
    _ensure_runtime_dir(_utf8(device, "device"))
    return device


# ---- the commands -----------------------------------------------------------------------


def table(
    dim: Optional[int] = None,
    len: Optional[int] = None,
    positions: Any = None,
    *,
    config: Any = None,
    variant: Optional[str] = None,
    frequencies: str = "exact",
    inv_freq: Any = None,
    inv_freq_tensor: Optional[str] = None,
    base: Optional[float] = None,
    min_timescale: Optional[float] = None,
    max_timescale: Optional[float] = None,
    start_index: Optional[int] = None,
    padding_idx: Union[int, str, None] = None,
    device: str = "auto",
    gpu_memory_budget: Optional[int] = None,
    out: Optional[np.ndarray] = None,
) -> np.ndarray:
    """A positional-encoding table: one row per position, ``dim`` values per row, float32.

    As ``posenc table``. ``positions`` is a spec string (``"0..4,1000000,4294967295"``)
    or an array-like of u32 positions; without it, ``len`` gives positions ``0..len``
    (default 8). ``dim`` defaults to the config's ``d_model``, else 512.

    ``config``: a Hugging Face ``config.json`` (path, JSON text or dict) of Marian,
    Pegasus, M2M100/NLLB, FSMT, Speech2Text or Whisper: its variant, width and padding
    index. ``variant``: vaswani (default), distilbert, marian, tensor2tensor, fairseq,
    whisper. ``frequencies``: ``"exact"`` or ``"f32"`` (the float32 recipe correctly
    rounded). ``inv_freq``: a model's own frequencies (an array, or a ``.npy`` /
    ``.safetensors`` path with ``inv_freq_tensor``). ``base`` in (1, 1e7];
    tensor2tensor's ``min_timescale`` / ``max_timescale``; ``start_index`` added to every
    position; fairseq's ``padding_idx`` (an int, or ``"none"``).

    ``device``: ``"auto"``, ``"cpu"``, ``"gpu"``, or ``"reference"`` (the slow
    high-precision path, rounded to float32). cpu and gpu give the same bits.

    ``out``: a writable, aligned float32 array ``[positions, dim]`` (any strides, its
    elements apart, sharing no memory with ``positions``) that receives the table in place
    of a new array and is returned.

    Raises ValueError for bad options (the command line's message), OSError for a file
    that cannot be read, GpuError when ``device="gpu"`` has no GPU or it fails.
    """
    _not_both("positions", positions, "len", len)
    spec, pos = (positions, None) if isinstance(positions, str) else (None, positions)
    spec = _text(spec, "positions")
    if pos is not None:
        pos = _int_array(pos, "positions", (1,), width=dim or 1)
    config_args = _config_named(config)
    values, path = _inv_freq(inv_freq, inv_freq_tensor)
    target = None if out is None else _f32_out(out, 2)
    if target is not None:
        (pos,) = _apart(target, [pos], ["positions"])
    made = _noted(
        _posenc.table(
            out=target,
            dim=_whole(dim, "dim", _U32, allowed=_TABLE_DIMS),
            len=_whole(len, "len", _U64, allowed=_POSITION_COUNTS),
            positions_spec=spec,
            positions=pos,
            **config_args,
            variant=_text(variant, "variant"),
            frequencies=_text(frequencies, "frequencies", optional=False),
            inv_freq=values,
            inv_freq_path=path,
            inv_freq_tensor=_text(inv_freq_tensor, "inv_freq_tensor"),
            base=_number(base, "base"),
            min_timescale=_number(min_timescale, "min_timescale"),
            max_timescale=_number(max_timescale, "max_timescale"),
            start_index=_whole(start_index, "start_index", _U32),
            padding_idx=_padding_idx(padding_idx),
            device=(
                device
                if isinstance(device, str) and device == "reference"
                else _device(device, reference=True)
            ),
            gpu_memory_budget=_whole(gpu_memory_budget, "gpu_memory_budget", _U64),
        )
    )
    return out if out is not None else made


def _f32_out(out: Any, ndim: int) -> np.ndarray:
    """A float32 ``out`` of rank ``ndim`` (``table``, ``alibi_bias``); its shape is checked
    by the extension, which knows the result's, and its memory against the inputs'
    (``_apart``)."""
    if not isinstance(out, np.ndarray):
        raise ValueError(f"out must be a numpy array, got {type(out).__name__}")
    if out.dtype != np.float32 or out.ndim != ndim:
        raise ValueError(
            f"out must be a float32 array of rank {ndim}; got {out.dtype} of shape {out.shape}"
        )
    if not out.flags.writeable:
        raise ValueError("out is read-only")
    return out


def _apart(out: np.ndarray, inputs: list, names: list) -> list:
    """``inputs`` (arrays or None) as they are where their memory is apart from ``out``'s;
    a copy of one whose address range overlaps out's without a shared element (the
    extension refuses overlapping ranges, as NumPy's bounds test sees them); ValueError
    naming one that shares an element (or one too costly to decide)."""
    apart = []
    for a, name in zip(inputs, names):
        if isinstance(a, np.ndarray) and a.size and out.size and np.may_share_memory(out, a):
            if _shares_element(out, a):
                raise ValueError(
                    "out shares memory with x without being laid over it element for "
                    "element: pass out=x to rotate in place, or an array of its own"
                    if name == "x"
                    else f"out shares memory with {name}: pass an array of its own"
                )
            a = a.copy(order="K")
        apart.append(a)
    return apart


def _shares_element(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays share an element, as far as ``np.shares_memory`` decides in the
    work allowed; undecided is taken as shared."""
    try:
        return bool(np.shares_memory(a, b, max_work=_SHARES_MEMORY_WORK))
    except _TOO_HARD:
        return True


def encode(
    weights: Any,
    ids: Any,
    *,
    tensor: Optional[str] = None,
    positions: Any = None,
    offsets: Any = None,
    pad_id: Optional[int] = None,
    scale: Union[str, float, None] = None,
    config: Any = None,
    variant: Optional[str] = None,
    frequencies: str = "exact",
    inv_freq: Any = None,
    inv_freq_tensor: Optional[str] = None,
    base: Optional[float] = None,
    min_timescale: Optional[float] = None,
    max_timescale: Optional[float] = None,
    start_index: Optional[int] = None,
    padding_idx: Union[int, str, None] = None,
    position_table: Any = None,
    position_tensor: Optional[str] = None,
    out_dtype: str = "f32",
    device: str = "auto",
    gpu_memory_budget: Optional[int] = None,
    out: Optional[np.ndarray] = None,
) -> np.ndarray:
    """``out[b, t] = scale * weights[ids[b, t]] + PE(positions[b, t])``, in one pass.

    As ``posenc encode``. ``weights``: the embedding table ``[V, D]`` (float32, float16
    or bfloat16), or a ``.safetensors`` / ``.npy`` path (``tensor`` names the tensor).
    ``ids``: integers of any NumPy type, ``[B, L]``, or ``[L]`` for one sequence (the output
    is then ``[L, D]``); each below V, save ``pad_id``.

    Positions: ``positions`` gives each token's (u32, the ids' shape); ``offsets`` each
    row's first (``[B]``: row b at ``offsets[b], offsets[b] + 1, ...``, as when decoding
    with a KV cache); with neither, rows count from 0, except for fairseq (tokens equal to
    ``padding_idx`` get it, the others count from ``padding_idx + 1``) and with ``pad_id``
    (a left-padded batch: each row counts its non-pad tokens from 0). Pad tokens' rows are
    zeros.

    ``scale``: ``"none"``, ``"sqrt"`` (sqrt(D)) or a number; with a config, its
    ``scale_embedding``. ``position_table``: a learned table ``[max_positions, D]`` (array
    or path, ``position_tensor``) added instead of a sinusoid. The sinusoid's options are
    :func:`table`'s. ``out_dtype``: ``"f32"``, ``"f16"`` or ``"bf16"`` (uint16 bits; see
    :func:`as_bfloat16`). cpu and gpu give the same bits, with a scale or without.

    ``out``: a writable, aligned array of the output's shape and ``out_dtype``'s type
    (bfloat16: ``ml_dtypes.bfloat16`` or uint16), any strides, its elements apart, sharing
    no memory with the inputs, that receives the result in place of a new array and is
    returned. The CPU's sinusoid encode writes an ``out`` in C order where it is; the other
    paths write it once their result is had, so a failure leaves it as it was.
    """
    w, weights_path = _table_array(weights, "weights")
    if tensor is not None and weights_path is None:
        raise ValueError(
            "invalid tensor: given with an array of weights (allowed: with a .safetensors "
            "or .npy path)"
        )
    p_table, p_path = (None, None)
    if position_table is not None:
        p_table, p_path = _table_array(position_table, "position_table")
        if position_tensor is not None and p_path is None:
            raise ValueError(
                "invalid position_tensor: given with an array (allowed: with a "
                "position_table path)"
            )
    _not_both("positions", positions, "offsets", offsets)
    if isinstance(scale, (bool, np.bool_)):
        raise ValueError(
            f"invalid scale: {scale} (allowed: \"none\", \"sqrt\" or a number finite in "
            f"float32 (|scale| <= 3.4028235e38))"
        )
    width = w.shape[1] if w is not None else 1
    ids_in = _int_array(ids, "ids", (1, 2), width)
    one_sequence = ids_in.ndim == 1
    if one_sequence:
        ids_in = ids_in[None, :]
    pos = None
    if positions is not None:
        pos = _int_array(positions, "positions", (1,) if one_sequence else (2,), width)
        if one_sequence:
            pos = pos[None, :]
    off = None
    if offsets is not None:
        if np.ndim(offsets) == 0:
            offsets = [offsets]
        off = _int_array(offsets, "offsets", (1,), width * ids_in.shape[1])
    config_args = _config_named(config)
    values, path = _inv_freq(inv_freq, inv_freq_tensor)
    target = None
    if out is not None:
        target = _encode_out(out, out_dtype)
        names = ["weights", "ids", "positions", "offsets", "position_table"]
        w, ids_in, pos, off, p_table = _apart(target, [w, ids_in, pos, off, p_table], names)
    encoded = _noted(
        _posenc.encode(
            out=target,
            weights=w,
            weights_path=weights_path,
            tensor=_text(tensor, "tensor"),
            ids=ids_in,
            one_sequence=one_sequence,
            positions=pos,
            offsets=off,
            pad_id=_whole(pad_id, "pad_id", _U32),
            scale=scale,
            **config_args,
            variant=_text(variant, "variant"),
            frequencies=_text(frequencies, "frequencies", optional=False),
            inv_freq=values,
            inv_freq_path=path,
            inv_freq_tensor=_text(inv_freq_tensor, "inv_freq_tensor"),
            base=_number(base, "base"),
            min_timescale=_number(min_timescale, "min_timescale"),
            max_timescale=_number(max_timescale, "max_timescale"),
            start_index=_whole(start_index, "start_index", _U32),
            padding_idx=_padding_idx(padding_idx),
            position_table=p_table,
            position_table_path=p_path,
            position_tensor=_text(position_tensor, "position_tensor"),
            out_dtype=_text(out_dtype, "out_dtype", optional=False),
            device=_device(device),
            gpu_memory_budget=_whole(gpu_memory_budget, "gpu_memory_budget", _U64),
        )
    )
    return out if out is not None else encoded


_OUT_DTYPES = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16)}


def _encode_out(out: Any, out_dtype: Any) -> np.ndarray:
    """``encode``'s ``out`` checked against ``out_dtype``, as the array the extension writes
    (bfloat16 as uint16 bits); its shape is checked there, where the table's width is known,
    and its memory against the inputs' (``_apart``)."""
    if not isinstance(out, np.ndarray):
        raise ValueError(f"out must be a numpy array, got {type(out).__name__}")
    if out_dtype == "bf16":
        if not (_is_bfloat16(out.dtype) or out.dtype == np.uint16):
            raise ValueError(
                f"out must be of out_dtype's type, bfloat16 (ml_dtypes.bfloat16, or uint16 "
                f"holding its bits); got {out.dtype}"
            )
    elif out_dtype in _OUT_DTYPES and out.dtype != _OUT_DTYPES[out_dtype]:
        raise ValueError(
            f"out must be of out_dtype's type, {_OUT_DTYPES[out_dtype]} (out_dtype "
            f"{out_dtype!r}); got {out.dtype}"
        )
    if not out.flags.writeable:
        raise ValueError("out is read-only")
    if out.ndim not in (2, 3):
        raise ValueError(f"out must have rank 2 or 3 (the output's), got shape {out.shape}")
    return out.view(np.uint16) if _is_bfloat16(out.dtype) else out


def _rope_options(
    config, layer_type, pairing, rotary_dim, base, scaling, inv_freq, inv_freq_tensor,
    attention_factor, seq_len,
) -> dict:
    scaling_json, scaling_path = _scaling(scaling)
    values, path = _inv_freq(inv_freq, inv_freq_tensor)
    # A config read once (rope_cache and RopeSpec, for the module's layout) still names
    # its file, or what it was given as, in errors.
    return dict(
        **_config_named(config),
        layer_type=_text(layer_type, "layer_type"),
        pairing=_text(pairing, "pairing"),
        rotary_dim=_whole(rotary_dim, "rotary_dim", _U32, allowed=_ROTARY_DIMS),
        base=_number(base, "base"),
        scaling_json=scaling_json,
        scaling_path=scaling_path,
        inv_freq=values,
        inv_freq_path=path,
        inv_freq_tensor=_text(inv_freq_tensor, "inv_freq_tensor"),
        attention_factor=_number(attention_factor, "attention_factor"),
        seq_len=_whole(seq_len, "seq_len", 2**32, smallest=1, allowed=_SEQ_LENS),
    )


def rope(
    x: Any,
    *,
    layout: str,
    positions: Any = None,
    offset: Optional[int] = None,
    config: Any = None,
    layer_type: Optional[str] = None,
    pairing: Optional[str] = None,
    rotary_dim: Optional[int] = None,
    base: Optional[float] = None,
    scaling: Any = None,
    inv_freq: Any = None,
    inv_freq_tensor: Optional[str] = None,
    attention_factor: Optional[float] = None,
    seq_len: Optional[int] = None,
    device: str = "auto",
    out: Optional[np.ndarray] = None,
) -> np.ndarray:
    """Rotary position embedding of a query or key tensor; returns a new array of the
    same shape and dtype, or ``out``.

    As ``posenc rope``. ``x``: rank 4, float32, float16 or bfloat16 (``ml_dtypes`` or
    uint16 bits; the result has the same type). ``layout``: ``"blhd"`` =
    ``[batch, len, heads, head_dim]`` or ``"bhld"`` = ``[batch, heads, len, head_dim]``.
    ``positions``: each token's, ``[B, L]`` of u32; or ``offset``: every sequence counts
    from it (default 0). With a multimodal RoPE's ``config`` (M-RoPE: Qwen2-VL, Qwen2.5-VL,
    Qwen3-VL, GLM-4V, ...) ``positions`` may be ``[3, B, L]``, a position per axis (time,
    height, width) as the model's ``position_ids`` give them, and each frequency turns by
    its axis's position; ``[B, L]`` gives every axis the same (text).

    ``config``: a Hugging Face ``config.json`` (path, JSON text, dict, or a transformers
    config): base, scaling, rotary dim and pairing as transformers reads them; the
    options below override it and ``layer_type`` picks one of per-layer-type RoPEs.
    ``pairing``: ``"neox"`` (i, i + r/2) or ``"gptj"`` (2i, 2i + 1). ``rotary_dim``: the
    rotated dims per head. ``base``: rope_theta. ``scaling``: a ``rope_scaling`` object
    (dict, JSON text, or ``"@FILE"``). ``inv_freq``: a model's own frequencies (array or
    file), with ``attention_factor``. ``seq_len``: the sequence length dynamic and
    longrope scaling see (default: the largest position + 1).

    ``out``: a writable, aligned array of ``x``'s shape and dtype, any strides, its
    elements apart, that receives the result in place of a new array, and is returned;
    ``out=x`` rotates ``x`` where it is. An ``out`` that shares an element with ``x``
    without lying over it element for element is refused. Every check comes before it is
    written; a GPU error half-way that is not retried on the CPU can leave it partly
    written (docs/python.md, Outputs).
    """
    a = np.asarray(x)
    dtype = a.dtype
    ml = _is_bfloat16(dtype)
    if ml:
        a = a.view(np.uint16)
    if a.ndim != 4 or a.dtype not in (np.float32, np.float16, np.uint16):
        raise ValueError(
            f"x must be a 4-D array of float32, float16 or bfloat16 (ml_dtypes.bfloat16, or "
            f"uint16 holding its bits), in native byte order; got dtype {a.dtype.str} and "
            f"shape {a.shape}"
        )
    target = None if out is None else _rope_out(out, a, dtype)
    if target is not None and target is not a:
        if _same_elements(target, a):
            a = target  # out=x, or a view of x laid over it element for element: in place
        else:
            (a,) = _apart(target, [a], ["x"])
    if config is not None:
        # Read here, where a Ctrl-C is heard while the read waits.
        config = _read_config(config)
    heads_dims = a.shape[2] * a.shape[3] if layout == "blhd" else a.shape[1] * a.shape[3]
    pos = None
    if positions is not None:
        pos = _int_array(positions, "positions", (2, 3), heads_dims)
    if target is not None:
        (pos,) = _apart(target, [pos], ["positions"])
    rotated = _noted(
        _posenc.rope(
            x=a,
            out=target,
            layout=_text(layout, "layout", optional=False),
            positions=pos,
            offset=_whole(offset, "offset", _U32),
            device=_device(device),
            **_rope_options(
                config, layer_type, pairing, rotary_dim, base, scaling, inv_freq,
                inv_freq_tensor, attention_factor, seq_len,
            ),
        )
    )
    if out is not None:
        return out
    return rotated.view(dtype) if ml else rotated


def _rope_out(out: Any, a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``rope``'s ``out`` checked against ``x`` (``a``, bfloat16 as uint16 bits; ``dtype``
    its type as given), as the array the extension writes; its memory against x's by
    ``_apart`` (unless it lies over x: in place)."""
    if not isinstance(out, np.ndarray):
        raise ValueError(f"out must be a numpy array, got {type(out).__name__}")
    if out.dtype != dtype or out.shape != a.shape:
        hint = ""
        if {out.dtype.name, dtype.name} == {"bfloat16", "uint16"}:
            # The same bits under two names: either is taken, but as x's.
            hint = f" (out.view({'np.uint16' if dtype == np.uint16 else 'x.dtype'}) is one)"
        raise ValueError(
            f"out must have x's dtype and shape ({dtype}, {a.shape}); got "
            f"({out.dtype}, {out.shape}){hint}"
        )
    if not out.flags.writeable:
        raise ValueError("out is read-only")
    return out.view(np.uint16) if _is_bfloat16(dtype) else out


# The most work np.shares_memory may do to decide whether out and x share an element
# (strided views whose strides interleave; a plain overlap of bounds is decided at once).
_SHARES_MEMORY_WORK = 100_000
_TOO_HARD = getattr(getattr(np, "exceptions", np), "TooHardError")


def _same_elements(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays of one shape and item size address the same bytes, element for
    element (the stride of an axis of length 1 is never used)."""
    if a.shape != b.shape or a.__array_interface__["data"][0] != b.__array_interface__["data"][0]:
        return False
    return all(n == 1 or sa == sb for n, sa, sb in zip(a.shape, a.strides, b.strides))


class _ReadConfig:
    """A config path's text, read once by posenc's reader (at most 4 MiB; a FIFO without a
    writer refused at once; a read that waits is interrupted by Ctrl-C), and the path its
    errors name (for a config given as no file, its label: ``_config_label``)."""

    def __init__(self, text: str, name: Optional[str]) -> None:
        self.text = text
        self.name = name


def _read_config(config: Any) -> _ReadConfig:
    """``config`` read once: a path's text through posenc's reader, which raises as the
    RoPE's own read of it would; text, dicts and transformers configs as they are."""
    if isinstance(config, _ReadConfig):
        return config
    path, text = _config(config)
    if path is not None:
        text = _posenc.read_config_text(path)
    return _ReadConfig(text, path if path is not None else _config_label(config))


def _module_pairing_of(config: _ReadConfig) -> str:
    # posenc's family table (posenc::rope::families), as `rope-cache --config` reads it.
    return _posenc.module_pairing(config.text, config.name)


def _config_once(config: Any) -> Any:
    """A cache's config read once (a FIFO's text would not be there for a second read, and
    the read waits where a Ctrl-C is heard). Without ``pairing``, the library gives the cache
    the layout of the family's module, as ``rope-cache --config`` does."""
    return None if config is None else _read_config(config)


def module_pairing(config: Any) -> str:
    """The layout of cos and sin that the rotary module of ``config``'s family returns:
    ``"neox"`` (``cat(freqs, freqs)``) or ``"gptj"`` (each frequency repeated per pair).

    Raises ValueError naming the family whose module returns another shape (complex
    ``freqs_cis``, half-width tables, no module), as ``posenc rope-cache --config`` says it,
    and as :func:`rope_cache` where a config cannot be read (a path missing, over 4 MiB, a
    FIFO without a writer; text that is not a config object; a family whose positions are
    not rotary)."""
    if config is None:
        raise ValueError("invalid config: None (allowed: a path, JSON text, a dict or a "
                         "transformers config)")
    return _module_pairing_of(_read_config(config))


class RopeCache(tuple):
    """``(cos, sin)``, each ``[positions, rotary_dim]``, with what produced them:
    ``inv_freq`` (the exact frequencies rounded to float32, ``[rotary_dim / 2]``),
    ``attention_factor`` (already in cos and sin) and ``pairing`` (the layout).

    For a multimodal RoPE's config (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5,
    GLM-4V, ...), the cache is by position, and ``mrope_section`` (the three counts),
    ``mrope_layout`` (``"sections"`` or ``"interleaved"``) and ``mrope_axes`` (uint8,
    ``[rotary_dim / 2]``: the axis, 0 time, 1 height, 2 width, whose position each
    frequency takes) say how the model gathers it; ``None`` for other RoPEs."""

    inv_freq: np.ndarray
    attention_factor: float
    pairing: str
    mrope_section: Optional[tuple]
    mrope_layout: Optional[str]
    mrope_axes: Optional[np.ndarray]

    def __new__(cls, cos, sin, inv_freq, attention_factor, pairing, mrope=None):
        self = super().__new__(cls, (cos, sin))
        self.inv_freq = inv_freq
        self.attention_factor = attention_factor
        self.pairing = pairing
        self.mrope_section, self.mrope_layout, self.mrope_axes = mrope or (None, None, None)
        return self

    def __reduce__(self):
        # As a tuple subclass with attributes: pickle, copy and deepcopy rebuild it from
        # the six values its constructor takes.
        mrope = None
        if self.mrope_section is not None:
            mrope = (self.mrope_section, self.mrope_layout, self.mrope_axes)
        fields = (self[0], self[1], self.inv_freq, self.attention_factor, self.pairing, mrope)
        # The instance's attributes too (a subclass's, or ones set on it).
        return (type(self), fields, dict(self.__dict__))

    @property
    def cos(self) -> np.ndarray:
        return self[0]

    @property
    def sin(self) -> np.ndarray:
        return self[1]


def rope_cache(
    config: Any = None,
    *,
    seq_len: Optional[int] = None,
    positions: Any = None,
    layer_type: Optional[str] = None,
    head_dim: Optional[int] = None,
    dtype: str = "f32",
    pairing: Optional[str] = None,
    rotary_dim: Optional[int] = None,
    base: Optional[float] = None,
    scaling: Any = None,
    inv_freq: Any = None,
    inv_freq_tensor: Optional[str] = None,
    attention_factor: Optional[float] = None,
    device: str = "auto",
) -> RopeCache:
    """The exact cos/sin cache of a RoPE configuration, as a model's rotary module returns
    it: ``cos, sin = posenc.rope_cache("config.json", seq_len=4096)``.

    As ``posenc rope-cache``. ``config``: a Hugging Face ``config.json`` (path, JSON text,
    dict, or a transformers config); ``layer_type`` picks one of per-layer-type RoPEs
    (Gemma 3's ``"full_attention"``, ...); ``head_dim`` stands in where the config gives
    none (required without a config).

    Rows: ``seq_len=N`` gives positions ``0..N`` (dynamic and longrope scaling see N);
    ``positions`` gives any (a spec string such as ``"0..4096,1000000"``, or an array of
    u32), and ``seq_len`` beside it fixes the length dynamic and longrope see (the command
    line's ``--seq-len``). Row ``k`` is ``positions[k]``.

    Layout: with a config and no ``pairing``, the layout of the family's own rotary module
    (:func:`module_pairing`: ``cat(freqs, freqs)`` for Llama, Qwen, GLM, ...; per pair
    for Cohere), refused for families whose module returns another shape; otherwise
    ``pairing`` (default ``"neox"``). ``dtype``: ``"f32"``, ``"f16"`` or ``"bf16"``
    (uint16 bits). The attention factor is in the values. Returns a :class:`RopeCache`,
    which unpacks as ``(cos, sin)``.

    A multimodal RoPE's config (M-RoPE, with or without ``mrope_section``) gives the cache
    by position that each of its three axes gathers from; its ``mrope_axes`` say which
    axis's position each frequency takes (:class:`RopeCache`). For position ids ``[3, n]``
    and a cache over positions ``0..N``: ``cos[ids[axes[f]], c]`` for column ``c`` of
    frequency ``f`` (``c % (rotary_dim // 2)``, or ``c // 2`` for ``"gptj"``).
    """
    config = _config_once(config)
    spec = None
    pos = None
    length = None
    if positions is None:
        length = seq_len
        seq_len = None
        if length is None:
            raise ValueError("rope_cache needs seq_len=N (positions 0..N) or positions=")
    elif isinstance(positions, str):
        spec = _utf8(positions, "positions")
    else:
        # Output values per position, at least: cos and sin of the rotary dim, which a
        # config (or a rotary_dim) may make less than the head dim.
        rotary = rotary_dim if rotary_dim is not None else None if config is not None else head_dim
        try:
            width = 2 * max(int(rotary), 1) if rotary is not None else 2
        except (TypeError, ValueError, OverflowError):
            width = 2  # an option of the wrong type, refused by name later
        pos = _int_array(positions, "positions", (1,), width)
    cos, sin, inv, factor, pairing_used, note, mrope = _posenc.rope_cache(
        head_dim=_whole(head_dim, "head_dim", _U32, allowed=_HEAD_DIMS),
        len=_whole(length, "seq_len", 2**32, allowed=_POSITION_COUNTS),
        positions_spec=spec,
        positions=pos,
        dtype=_text(dtype, "dtype", optional=False),
        device=_device(device),
        **_rope_options(
            config, layer_type, pairing, rotary_dim, base, scaling, inv_freq,
            inv_freq_tensor, attention_factor, seq_len,
        ),
    )
    _noted((None, note))
    return RopeCache(cos, sin, inv, factor, pairing_used, mrope)


class RopeSpec:
    """A RoPE configuration read once, whose cache is then computed for any positions on
    the CPU (what :mod:`posenc.hf` calls on every forward). Takes :func:`rope_cache`'s
    configuration options; ``pairing`` defaults as there.

    ``spec.cache(positions)`` returns ``(cos, sin)``, ``[n, rotary_dim]`` float32.

    It pickles and copies (a model patched by :mod:`posenc.hf` holds some) as the
    arguments it was made from: a config path's as the text read then, while a scaling
    ``"@FILE"`` or an ``inv_freq`` path is read again when it is unpickled."""

    def __init__(
        self,
        config: Any = None,
        *,
        layer_type: Optional[str] = None,
        head_dim: Optional[int] = None,
        pairing: Optional[str] = None,
        rotary_dim: Optional[int] = None,
        base: Optional[float] = None,
        scaling: Any = None,
        inv_freq: Any = None,
        inv_freq_tensor: Optional[str] = None,
        attention_factor: Optional[float] = None,
        seq_len: Optional[int] = None,
    ) -> None:
        config = _config_once(config)
        args = dict(
            head_dim=_whole(head_dim, "head_dim", _U32, allowed=_HEAD_DIMS),
            **_rope_options(
                config, layer_type, pairing, rotary_dim, base, scaling, inv_freq,
                inv_freq_tensor, attention_factor, seq_len,
            ),
        )
        self._spec = _RustRopeSpec(**args)
        self._args = args

    def __reduce__(self):
        # Pickled (and copied) as the arguments it was made from, a config path's as the
        # text read then; a scaling "@FILE" or an inv_freq path is read again.
        return (_rebuilt_rope_spec, (self._args, self._spec.pairing))

    head_dim = property(lambda self: self._spec.head_dim, doc="Dimensions per head.")
    rotary_dim = property(lambda self: self._spec.rotary_dim, doc="Rotated dims per head.")
    pairing = property(lambda self: self._spec.pairing, doc="'neox' or 'gptj'.")
    base = property(lambda self: self._spec.base, doc="The frequency base (rope_theta).")
    rope_type = property(lambda self: self._spec.rope_type, doc="The scaling's rope_type.")
    depends_on_length = property(
        lambda self: self._spec.depends_on_length,
        doc="Whether the frequencies depend on the largest position (dynamic, longrope).",
    )

    @property
    def mrope(self) -> Optional[tuple]:
        """A multimodal RoPE's ``(mrope_section, mrope_layout, mrope_axes)``, as
        :class:`RopeCache` has them; ``None`` for other RoPEs."""
        return self._spec.mrope

    def frequencies(self, seq_len: int) -> tuple[np.ndarray, float]:
        """The frequencies (float64 radians per position) and attention factor at
        sequence length ``seq_len``."""
        # The range rope(seq_len=) and RopeSpec(seq_len=) take: one more than a u32 position.
        seq_len = _whole(seq_len, "seq_len", 2**32, optional=False, smallest=1, allowed=_SEQ_LENS)
        return self._spec.frequencies(seq_len)

    def with_pairing(self, pairing: str) -> "RopeSpec":
        """This configuration with its cache in the other layout (``"neox"``/``"gptj"``)."""
        new = object.__new__(RopeSpec)
        new._spec = self._spec.with_pairing(_text(pairing, "pairing", optional=False))
        new._args = self._args
        return new

    def cache(self, positions: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(cos, sin)`` at ``positions``, ``[n, rotary_dim]`` float32: a spec string
        (``"0..4096,1000000"``, as ``rope_cache`` takes it) or a 1-D array of u32 values."""
        if isinstance(positions, str):
            return self._spec.cache(_utf8(positions, "positions"))
        width = 2 * self._spec.rotary_dim
        return self._spec.cache(_int_array(positions, "positions", (1,), width))

    def __repr__(self) -> str:
        return repr(self._spec)


def _rebuilt_rope_spec(args: dict, pairing: str) -> RopeSpec:
    """A pickled :class:`RopeSpec` again: made from its arguments, in its pairing."""
    new = object.__new__(RopeSpec)
    new._spec = _RustRopeSpec(**args).with_pairing(pairing)
    new._args = args
    return new


def _heads(heads: Any) -> int:
    """ALiBi's head count, refused with the range the slopes take (1..=65536), not u32's."""
    return _whole(heads, "heads", MAX_ALIBI_HEADS, optional=False, smallest=1)


def alibi_slopes(heads: int) -> np.ndarray:
    """The float32 ALiBi slopes of ``heads`` heads (``posenc alibi --slopes``): for a
    power of two, ``2^(-8k/H)``; otherwise the paper's interleaving. Each the float32
    nearest its exact value."""
    return _posenc.alibi_slopes(_heads(heads))


def alibi_bias(
    heads: int,
    len: int,
    *,
    kv_len: Optional[int] = None,
    form: str = "symmetric",
    offset: int = 0,
    device: str = "auto",
    out: Optional[np.ndarray] = None,
) -> np.ndarray:
    """The ALiBi bias ``[heads, len, kv_len]`` float32 (``posenc alibi``): queries at
    ``offset..offset+len``, keys at ``0..kv_len`` (default ``offset + len``).
    ``form="symmetric"``: ``-m |q - k|``; ``"causal"``: ``-m (q - k)`` for ``k <= q``, 0
    above the diagonal (no mask). Correctly rounded, the same bits on CPU and GPU.
    ``out``: a writable, aligned float32 array ``[heads, len, kv_len]`` (any strides, its
    elements apart) that receives the bias in place of a new array and is returned: a
    decode loop's bias row without an allocation per step."""
    target = None if out is None else _f32_out(out, 3)
    made = _noted(
        _posenc.alibi_bias(
            out=target,
            heads=_heads(heads),
            len=_whole(len, "len", _U64, optional=False, allowed=_POSITION_COUNTS),
            kv_len=_whole(kv_len, "kv_len", _U64, allowed=_POSITION_COUNTS),
            form=_text(form, "form", optional=False),
            offset=_whole(offset, "offset", _U32, optional=False),
            device=_device(device),
        )
    )
    return out if out is not None else made


def devices() -> list[dict]:
    """Every GPU adapter wgpu can see (``WGPU_BACKEND`` narrows the search), as
    ``posenc devices --json`` lists them: name, backend, device_type, driver,
    max_storage_binding, max_buffer_size, shader_f16, timestamp_query."""
    _ensure_runtime_dir("gpu")
    return json.loads(_posenc.devices_json())
