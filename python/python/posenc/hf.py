"""Exact RoPE in a Hugging Face transformers model, in two lines::

    import posenc.hf
    posenc.hf.exact_rotary(model)

:func:`exact_rotary` replaces each rotary embedding module of ``model`` (the modules whose
class name ends in ``RotaryEmbedding``: ``model.model.rotary_emb`` in transformers 5) by
one that returns posenc's exact cos and sin for the positions it is given, in the layout
and dtype the original returns, with the same attention factor. Hugging Face computes the
angle ``p * inv_freq`` in float32, off by up to 1e-2 rad near position 1e5 and by whole
turns past 2^24; posenc's values are within 6e-8 of the true ones at every u32 position.

Before replacing anything, each module is asked for its own cos and sin at positions
0..63, and posenc's must agree within float32's angle error there: a family whose rotary
module returns another shape or other values (complex ``freqs_cis``, half-width tables,
a RoPE posenc reads differently) is refused by name, and the model is left as it was.
A multimodal RoPE (``mrope_section``: Qwen2-VL, Qwen3-VL, Qwen3.5, GLM-4V, ...) is served
with per-axis ``[3, batch, len]`` positions, each frequency taking its axis's position, and
probed with positions that differ per axis too.

Needs torch and transformers (``pip install torch transformers``); nothing else in
posenc imports them.
"""

from __future__ import annotations

import inspect
import numbers
import os
from typing import Any, Optional

import numpy as np

import posenc

__all__ = ["ExactRotary", "Patch", "exact_rotary", "undo"]

# Rows of each precomputed table when max_positions is not given: the config's
# max_position_embeddings, at most this many (32768 x 128 x 2 float32 = 32 MiB per RoPE).
DEFAULT_MAX_TABLE = 32768

# The probe: positions 0..PROBE of the original module against posenc. Float32's angle
# error there is at most PROBE * 2^-24 rad plus a few ulps of inv_freq: 1e-5 covers it
# with room, and a wrong layout, base or scaling is off by far more.
PROBE = 64
PROBE_TOLERANCE = 1e-5


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - the tests skip without torch
        raise ImportError("posenc.hf needs torch: pip install torch transformers") from e
    return torch


def _model_config(config: Any) -> Any:
    """The model's config as posenc reads it: its JSON text, read once, whose errors name
    the config's class (``config (a Qwen3Config)``). Its ``to_json_string()`` is taken as
    ``posenc.rope_cache`` takes it (UTF-8 bytes decoded; anything but text refused, naming
    what it gave)."""
    # A path or JSON text is no model's config.
    as_file = isinstance(config, (str, bytes, os.PathLike))
    text = None if as_file else posenc._config(config)[1]
    if text is None:
        raise ValueError(
            f"posenc.hf: the model's config is {type(config).__name__} (allowed: a "
            f"transformers config, or a dict)"
        )
    return posenc._ReadConfig(text, posenc._config_label(config))


def _model_type(config: Any) -> str:
    # The class's own first: a fixed text class built from a dict naming another model_type
    # keeps that name as an attribute (a Gemma 3 text config saying "llama").
    return str(getattr(type(config), "model_type", "") or getattr(config, "model_type", "") or "")


def _takes_layer_type(module: Any) -> bool:
    try:
        return "layer_type" in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False


class ExactRotary(_torch().nn.Module):
    """A rotary embedding module returning posenc's exact ``(cos, sin)`` for
    ``position_ids``, as the module it replaces did: ``[batch, len, rotary_dim]`` in
    ``x``'s dtype (float32 where that module returns float32 whatever ``x``'s, as ERNIE
    4.5's do) and on its device.

    Positions below ``max_positions`` are gathered from float32 tables computed once
    (copied to the device of the first call there; never cast); others, and every call of
    a RoPE whose frequencies depend on the sequence length (dynamic, longrope), are
    computed for that call's positions on the CPU. Attributes the model reads from its rotary module (``attention_scaling``,
    ``rope_type``, ...) are the original's."""

    def __init__(
        self, original: Any, specs: dict, max_positions: int, float32: frozenset = frozenset()
    ) -> None:
        torch = _torch()
        super().__init__()
        # The layer types whose module returns float32 cos and sin whatever x's dtype
        # (ERNIE 4.5's families keep them in full precision); the others return x's.
        self.float32 = frozenset(float32)
        # Not a submodule: the model's state dict stays as it was.
        object.__setattr__(self, "_posenc_original", original)
        self.specs = specs
        self.max_positions = max_positions
        # Plain attributes, not buffers: `model.to(torch.bfloat16)` must not round them
        # (cos and sin are rounded once, to the dtype of each call's x). They follow the
        # device of the calls that use them, copied there once.
        self._tables = {}
        # A multimodal RoPE's axis per column of its cache (posenc.rope_cache's recipe).
        self._axes = {}
        for key, spec in specs.items():
            if max_positions > 0 and not spec.depends_on_length:
                cos, sin = spec.cache(np.arange(max_positions, dtype=np.int64))
                self._tables[key] = (torch.from_numpy(cos), torch.from_numpy(sin))
            if spec.mrope is not None:
                axes = spec.mrope[2]
                col = np.arange(spec.rotary_dim)
                freq = col % len(axes) if spec.pairing == "neox" else col // 2
                self._axes[key] = torch.from_numpy(axes[freq].astype(np.int64))

    def _table(self, key: Any, device: Any):
        cos, sin = self._tables[key]
        if cos.device != device:
            cos, sin = cos.to(device), sin.to(device)
            self._tables[key] = (cos, sin)
        return cos, sin

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(object.__getattribute__(self, "_posenc_original"), name)

    @property
    def original(self) -> Any:
        """The module this one replaced."""
        return object.__getattribute__(self, "_posenc_original")

    def forward(self, x: Any, position_ids: Any = None, layer_type: Optional[str] = None, **_: Any):
        torch = _torch()
        if position_ids is None:
            raise ValueError("posenc.hf: the rotary module needs position_ids")
        spec = self.specs.get(layer_type)
        if spec is None:
            known = ", ".join(repr(k) for k in self.specs)
            raise ValueError(f"posenc.hf: layer_type {layer_type!r} (known: {known})")
        pos = _whole_positions(torch, position_ids)
        if pos.dim() == 1:
            pos = pos[None, :]
        axes = self._axes.get(layer_type)
        if axes is not None:
            # As the multimodal module takes them: [3, batch, len], or the same positions
            # on every axis.
            if pos.dim() == 2:
                pos = pos[None].expand(3, -1, -1)
            elif pos.dim() == 3 and pos.shape[0] == 1:
                # One set of positions for every axis, as the module expands it.
                pos = pos.expand(3, -1, -1)
            if pos.dim() != 3 or pos.shape[0] != 3:
                raise ValueError(
                    f"posenc.hf: position_ids of shape {tuple(pos.shape)}, not [3, batch, len] "
                    f"or [batch, len] (a multimodal RoPE)"
                )
        elif pos.dim() != 2:
            raise ValueError(f"posenc.hf: position_ids of shape {tuple(pos.shape)}, not [batch, len]")
        in_table = layer_type in self._tables and (
            pos.numel() == 0 or (int(pos.min()) >= 0 and int(pos.max()) < self.max_positions)
        )
        if in_table:
            cos_table, sin_table = self._table(layer_type, pos.device)
            cos, sin = cos_table[pos], sin_table[pos]
        else:
            flat = pos.detach().to("cpu").reshape(-1).numpy().astype(np.int64)
            # Named by its place in position_ids (the cache's own error would index the
            # sorted distinct positions).
            _refuse_past_u32(flat, pos.shape)
            unique, inverse = np.unique(flat, return_inverse=True)
            c, s = spec.cache(unique)
            index = torch.from_numpy(inverse.reshape(-1).astype(np.int64))
            shape = (*pos.shape, c.shape[1])
            cos = torch.from_numpy(c)[index].reshape(shape)
            sin = torch.from_numpy(s)[index].reshape(shape)
        if axes is not None:
            # Column c of a token: its value at the position of the column's axis.
            if axes.device != cos.device:
                axes = axes.to(cos.device)
                self._axes[layer_type] = axes
            index = axes.view(1, 1, 1, -1).expand(1, *cos.shape[1:])
            cos = torch.gather(cos, 0, index)[0]
            sin = torch.gather(sin, 0, index)[0]
        dtype = torch.float32 if layer_type in self.float32 else x.dtype
        return (
            cos.to(device=x.device, dtype=dtype),
            sin.to(device=x.device, dtype=dtype),
        )


def _whole_positions(torch: Any, pos: Any) -> Any:
    """``position_ids`` as integers: floating ones (the module it replaces takes them, and
    computes with them as floats) are taken where every value is whole, and refused naming
    the first that is not (rounded down, 2.5 read as 2); other types are refused."""
    if pos.dtype.is_floating_point:
        # In float64, which holds every value of the narrower types and posenc's range
        # exactly: a value past it is named as given (as int64 it would wrap first).
        wide = pos.to(torch.float64)
        whole = torch.isfinite(wide) & (wide == torch.floor(wide))
        whole &= (wide >= 0) & (wide <= 2**32 - 1)
        if not bool(whole.all()):
            at = np.unravel_index(int((~whole).reshape(-1).nonzero()[0]), tuple(pos.shape))
            raise ValueError(
                f"posenc.hf: position_ids{list(map(int, at))} is {float(pos[at])} "
                f"(allowed: whole numbers in 0..=4294967295, posenc's positions)"
            )
        return pos.to(torch.int64)
    if pos.dtype.is_complex or pos.dtype == torch.bool:
        raise ValueError(
            f"posenc.hf: position_ids of dtype {pos.dtype} (allowed: integers, or floats "
            f"holding whole numbers)"
        )
    if pos.dtype == torch.int64:
        return pos
    # Every other integer type as int64, which torch indexes with and compares in (a uint8
    # index is a mask to torch, and its unsigned types lack min and max): uint64's values
    # past int64 are refused as given first.
    if pos.dtype == torch.uint64:
        _refuse_past_u32(pos.detach().to("cpu").reshape(-1).numpy(), pos.shape)
    return pos.to(torch.int64)


def _refuse_past_u32(flat: np.ndarray, shape: Any) -> None:
    """Refuses the first of ``flat`` (``position_ids`` of ``shape``, flattened, integers)
    outside posenc's positions, named by its place and as given."""
    outside = (flat < 0) | (flat > 2**32 - 1)
    if outside.any():
        bad = int(np.flatnonzero(outside)[0])
        at = np.unravel_index(bad, tuple(shape))
        raise ValueError(
            f"posenc.hf: position_ids{list(map(int, at))} is {int(flat[bad])} "
            f"(allowed: 0..=4294967295, posenc's positions)"
        )


class Patch:
    """What :func:`exact_rotary` replaced; :meth:`undo` puts the originals back. Also a
    context manager: ``with posenc.hf.exact_rotary(model): ...``."""

    def __init__(self, model: Any, replaced: list) -> None:
        self.model = model
        self.replaced = replaced

    @property
    def modules(self) -> list:
        """The :class:`ExactRotary` modules now in the model."""
        return [new for _, _, _, new in self.replaced]

    def undo(self) -> None:
        """Restores the model's own rotary modules."""
        for parent, name, original, _ in reversed(self.replaced):
            setattr(parent, name, original)
        self.replaced = []
        if getattr(self.model, "_posenc_patch", None) is self:
            del self.model._posenc_patch

    def __enter__(self) -> "Patch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.undo()


def _rotary_modules(model: Any) -> list:
    """``(parent, attribute, module)`` of every rotary embedding module, outermost first."""
    found = []
    seen = set()
    for name, module in model.named_modules():
        if not type(module).__name__.endswith("RotaryEmbedding") or isinstance(module, ExactRotary):
            continue
        if any(name.startswith(s + ".") for s in seen):
            continue
        seen.add(name)
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        found.append((parent, attr, module, name))
    return found


def _in_vision_tower(model_type: str, name: str) -> bool:
    """Whether a rotary module sits in a vision tower (its config's model_type, or its
    place in the model: Qwen2-VL's ``model.visual``, ...)."""
    words = (model_type.lower(), name.lower())
    return any("vision" in w or "visual" in w for w in words)


def _refuse(model_type: str, name: str, why: str) -> ValueError:
    return ValueError(f"posenc.hf: model_type {model_type!r} ({name}): {why}")


def _specs_for(module: Any, config: Any, name: str) -> dict:
    """One posenc spec per layer type the module serves (``{None: spec}`` for one RoPE),
    in the layout its family's module returns."""
    model_type = _model_type(config)
    read = _model_config(config)
    try:
        pairing = posenc.module_pairing(read)
    except ValueError as e:
        raise _refuse(model_type, name, str(e)) from None
    section = getattr(module, "mrope_section", None)
    if section:
        # A multimodal RoPE, called with per-axis position_ids ([3, batch, len]: time,
        # height, width): served where posenc reads the family's axes and the section the
        # module uses (its config's, else its class default), each frequency gathered
        # from its axis's position.
        try:
            spec = posenc.RopeSpec(read, pairing=pairing)
        except ValueError as e:
            raise _refuse(model_type, name, f"posenc cannot read its RoPE: {e}") from None
        mrope = spec.mrope
        ours = None if mrope is None else list(mrope[0])
        if _takes_layer_type(module) or not isinstance(section, (list, tuple)) or ours != [
            int(n) for n in section
        ]:
            why = "no multimodal RoPE posenc reads" if mrope is None else f"section {ours}"
            raise _refuse(
                model_type, name,
                f"its rotary module is a multimodal RoPE (mrope_section {section}), called "
                f"with per-axis position_ids, and posenc reads {why} from its config",
            )
        return {None: spec}
    layer_types = [None]
    if _takes_layer_type(module):
        declared = getattr(config, "layer_types", None)
        if declared:
            layer_types = set(declared)
            # Layer types without a RoPE (LFM3's conv layers) are not the module's.
            served = getattr(module, "layer_types", None)
            if isinstance(served, (list, tuple)) and layer_types & set(served):
                layer_types &= set(served)
            layer_types = sorted(layer_types)
    specs = {}
    for layer_type in layer_types:
        try:
            specs[layer_type] = posenc.RopeSpec(read, layer_type=layer_type, pairing=pairing)
        except ValueError as e:
            raise _refuse(model_type, name, f"posenc cannot read its RoPE: {e}") from None
    return specs


def _scalar(torch: Any, value: Any) -> Any:
    """A one-element tensor as its number (transformers keeps a grown length as one)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return value


def _float32_twin(module: Any, config: Any) -> Any:
    """The module to probe: itself while its buffers are float32 or wider and its
    frequencies its first ones; else a fresh float32 module of the same class and config,
    what the family computes (``model.to(torch.bfloat16)`` rounds ``inv_freq`` to
    bfloat16, which is transformers' error, not the family's RoPE; a dynamic RoPE's
    module keeps the frequencies of the longest call it has seen, which posenc computes
    per call), or the module itself when its class cannot be built from the config
    alone."""
    torch = _torch()
    # transformers' dynamic_rope_update raises max_seq_len_cached past the original as it
    # grows the frequencies (a module whose inv_freq was changed otherwise is probed as it
    # is, and refused).
    # A module with a RoPE per layer type keeps one length per type (`{type}_max_seq_len_cached`).
    first = _scalar(torch, getattr(module, "original_max_seq_len", None))
    cached = [
        _scalar(torch, value) for key, value in vars(module).items()
        if key.endswith("max_seq_len_cached")
    ]
    grown = isinstance(first, numbers.Real) and any(
        isinstance(c, numbers.Real) and c > first for c in cached
    )
    wide = all(
        b.dtype in (torch.float32, torch.float64) for b in module.buffers() if b.is_floating_point()
    )
    if wide and not grown:
        return module
    try:
        with torch.device("cpu"):
            twin = type(module)(config=config)
        return twin.float().eval()
    except Exception:  # noqa: BLE001 - any other constructor: probe the module itself
        return module


def _probe(module: Any, specs: dict, model_type: str, name: str) -> dict:
    """Checks posenc's cache against the module's own at positions 0..PROBE, trying the
    other layout if the family's is not it; returns the specs that agree, or refuses."""
    torch = _torch()
    checked = {}
    for layer_type, spec in specs.items():
        positions = torch.arange(PROBE)[None, :]
        x = torch.zeros(1, PROBE, spec.head_dim, dtype=torch.float32)
        kwargs = {} if layer_type is None else {"layer_type": layer_type}
        with torch.no_grad():
            try:
                out = module(x, positions, **kwargs)
            except Exception as e:  # noqa: BLE001 - any failure means no drop-in
                raise _refuse(
                    model_type, name,
                    f"its rotary module cannot be called as (x, position_ids): {e}",
                ) from None
        shape = (1, PROBE, spec.rotary_dim)
        if not (isinstance(out, (tuple, list)) and len(out) == 2
                and all(hasattr(t, "shape") and tuple(t.shape) == shape for t in out)
                and not any(t.is_complex() for t in out)):
            what = (
                f"{type(out).__name__} of shapes {[tuple(t.shape) for t in out]}"
                if isinstance(out, (tuple, list)) and all(hasattr(t, "shape") for t in out)
                else type(out).__name__
            )
            raise _refuse(
                model_type, name,
                f"its rotary module returns {what}, not (cos, sin) of shape {shape}: no "
                f"drop-in cache of posenc's shape",
            )
        theirs = [t.detach().to("cpu", torch.float64).numpy()[0] for t in out]
        best = None
        for candidate in (spec, spec.with_pairing("gptj" if spec.pairing == "neox" else "neox")):
            ours = candidate.cache(np.arange(PROBE, dtype=np.int64))
            err = max(float(np.max(np.abs(o - t))) for o, t in zip(ours, theirs))
            if best is None or err < best[0]:
                best = (err, candidate)
        err, candidate = best
        scale = max(1.0, float(np.max(np.abs(theirs[0]))))
        if err > PROBE_TOLERANCE * scale:
            label = "" if layer_type is None else f" (layer type {layer_type!r})"
            raise _refuse(
                model_type, name,
                f"posenc's cos/sin{label} differ from its rotary module's by {err:.3g} at "
                f"positions 0..{PROBE} (float32's own error there is under "
                f"{PROBE_TOLERANCE:g}): the module computes another RoPE than posenc reads "
                f"from its config",
            )
        if candidate.mrope is not None:
            _probe_axes(module, candidate, x, model_type, name)
        checked[layer_type] = candidate
    return checked


def _keeps_float32(module: Any, layer_type: Any, spec: Any) -> bool:
    """Whether ``module`` returns float32 cos and sin for a bfloat16 ``x`` (ERNIE 4.5's
    families, whose attention rotates in float32), where most return ``x``'s dtype: asked
    once, at one position; a module that cannot be asked is taken to return x's."""
    torch = _torch()
    buffer = next((b for b in module.buffers() if b.is_floating_point()), None)
    device = buffer.device if buffer is not None else torch.device("cpu")
    x = torch.zeros(1, 1, spec.head_dim, dtype=torch.bfloat16, device=device)
    shape = (3, 1, 1) if spec.mrope is not None else (1, 1)
    pos = torch.zeros(shape, dtype=torch.int64, device=device)
    kwargs = {} if layer_type is None else {"layer_type": layer_type}
    try:
        with torch.no_grad():
            out = module(x, pos, **kwargs)
        return all(t.dtype == torch.float32 for t in out)
    except Exception:  # noqa: BLE001 - its own dtype rules unknown: x's, as before
        return False


def _probe_axes(module: Any, spec: Any, x: Any, model_type: str, name: str) -> None:
    """A multimodal RoPE's axes: the module's cos and sin for positions that differ per
    axis (as an image's grid has them) against posenc's gathered by its axes."""
    torch = _torch()
    n = torch.arange(PROBE)
    pos = torch.stack([n // 16, (n // 4) % 4 + 3 * (n // 16), n % 4 + 5 * (n // 16)])[:, None, :]
    with torch.no_grad():
        theirs = module(x, pos)
        ours = ExactRotary(module, {None: spec}, 0)(x, pos)
    err = max(float((a.double() - b.double()).abs().max()) for a, b in zip(theirs, ours))
    if err > PROBE_TOLERANCE * max(1.0, float(theirs[0].abs().max())):
        raise _refuse(
            model_type, name,
            f"its multimodal RoPE gives positions of different axes otherwise than posenc's "
            f"axes (off by {err:.3g} at per-axis positions 0..{PROBE}): not served",
        )


def exact_rotary(model: Any, max_positions: Optional[int] = None, *, check: bool = True) -> Patch:
    """Replaces the rotary embedding of ``model`` (a transformers ``PreTrainedModel``) by
    posenc's exact one; returns a :class:`Patch` whose ``undo()`` restores it.

    ``max_positions``: rows of the precomputed cos/sin tables (positions at or past it,
    and every call of dynamic or longrope scaling, are computed per call, just as
    exactly); default the config's ``max_position_embeddings``, at most
    :data:`DEFAULT_MAX_TABLE`. ``check`` (default True): compare with the module's own
    values at positions 0..63 first, and refuse on disagreement.

    Raises ValueError naming the family (``model_type``) when posenc cannot serve it: no
    rotary module, a config posenc refuses, a module that returns another shape, or
    values that disagree. Nothing is replaced then.
    """
    _torch()
    if max_positions is not None and (
        isinstance(max_positions, bool) or not isinstance(max_positions, numbers.Integral)
        or not 0 <= max_positions <= 2**32
    ):
        raise ValueError(f"invalid max_positions: {max_positions!r} (allowed: None or a "
                         f"whole number in 0..=4294967296, rows of posenc's positions)")
    if getattr(model, "_posenc_patch", None) is not None:
        raise ValueError("posenc.hf: this model's rotary embedding is already posenc's "
                         "(call .undo() on the patch, or posenc.hf.undo(model), first)")
    # Patched through a model that holds this one, or in a part of this one: the same
    # (round fifteen: "no rotary embedding module").
    mine = _exact_modules(model)
    if mine:
        where = mine[0] or "the model itself"
        raise ValueError(
            f"posenc.hf: this model's rotary embedding is already posenc's ({where}; call "
            f".undo() on the patch that replaced it first)"
        )
    found = _rotary_modules(model)
    model_config = getattr(model, "config", None)
    if not found:
        raise _refuse(
            _model_type(model_config), type(model).__name__,
            "no rotary embedding module (a module whose class name ends in RotaryEmbedding)",
        )
    planned = []
    for parent, attr, module, name in found:
        config = getattr(module, "config", None) or model_config
        model_type = _model_type(config)
        try:
            specs = _specs_for(module, config, name)
            if check:
                specs = _probe(_float32_twin(module, config), specs, model_type, name)
        except ValueError as e:
            if _in_vision_tower(model_type, name):
                raise ValueError(
                    f"{e}; this is a vision tower's rotary module: patch the language model "
                    f"alone, exact_rotary(model.model.language_model)"
                ) from None
            raise
        rows = None if max_positions is None else int(max_positions)
        if rows is None:
            rows = min(int(getattr(config, "max_position_embeddings", 0) or 0), DEFAULT_MAX_TABLE)
        for spec in specs.values():
            # Refused before the table's positions are made (np.arange of 2^31 rows is
            # 16 GiB), as the cache would refuse its values.
            if not spec.depends_on_length and rows * spec.rotary_dim > posenc.MAX_OUTPUT_VALUES:
                raise ValueError(
                    f"invalid max_positions: {rows} rows of {spec.rotary_dim} values are "
                    f"more than MAX_OUTPUT_VALUES = {posenc.MAX_OUTPUT_VALUES} per table"
                )
        float32 = frozenset(t for t, spec in specs.items() if _keeps_float32(module, t, spec))
        planned.append((parent, attr, module, specs, rows, float32))
    # Every table built before the first module is swapped: a failure building a later
    # one (its memory) leaves the model as it was, as the docstring promises.
    built = [(parent, attr, module, ExactRotary(module, specs, rows, float32))
             for parent, attr, module, specs, rows, float32 in planned]
    replaced = []
    for parent, attr, module, new in built:
        setattr(parent, attr, new)
        replaced.append((parent, attr, module, new))
    patch = Patch(model, replaced)
    model._posenc_patch = patch
    return patch


def _exact_modules(model: Any) -> list:
    """The names of the :class:`ExactRotary` modules in ``model``."""
    return [name for name, module in model.named_modules() if isinstance(module, ExactRotary)]


def undo(model: Any) -> None:
    """Restores the rotary modules :func:`exact_rotary` replaced in ``model``, or in any of
    its parts it was called on."""
    patches = [
        patch for _, module in model.named_modules()
        if (patch := getattr(module, "_posenc_patch", None)) is not None
    ]
    if not patches:
        if _exact_modules(model):
            raise ValueError(
                "posenc.hf: this model's rotary embedding was replaced through a model that "
                "holds it: undo that one's patch"
            )
        raise ValueError("posenc.hf: this model's rotary embedding is its own")
    for patch in patches:
        patch.undo()

