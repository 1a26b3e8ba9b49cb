#!/usr/bin/env python3
"""Re-derive the family table's class defaults from an installed transformers.

posenc's family table (src/rope/families.rs, rendered as docs/families.md) says, per
Hugging Face `model_type`, what a config class fills in when a config leaves a RoPE field
out. This script asks an installed transformers the same questions, by instantiating every
configuration class it ships (no torch needed), and compares the answers with the table.

  snapshot   one transformers version's answers, as JSON (run it once per version, each
             in its own virtual environment):
               python scripts/families.py snapshot > tf-5.23.0.json
  compare    the answers of several snapshots against docs/families.md; prints each
             disagreement and exits 1 if there is one:
               python scripts/families.py compare tf-4.57.6.json tf-5.0.0.json \\
                   tf-5.12.1.json tf-5.23.0.json

The newest snapshot decides the base and the partial-rotary defaults; a head-dim default
is settled when every snapshot whose transformers has the class (two at least) gives the
same one, and unsettled otherwise. What it cannot derive (pairing, which families' modeling code reads
`partial_rotary_factor`, per-layer rules, refusals) needs the modeling files read, and
rotary modules built with torch; see the README's "The family table".
"""

import importlib
import json
import pkgutil
import re
import sys
import warnings
from pathlib import Path

GENERIC_BASE = 10000.0
# The rope types of language models (posenc's ROPE_TYPES); vision encoders' "axial" and the
# like are not the table's.
TEXT_ROPE_TYPES = {"default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional"}
# A hidden size and head count whose quotient no class uses as its own default, so a
# class default head dim shows up as one (Qwen3's 128 equals its default 4096 / 32).
PROBE_HIDDEN, PROBE_HEADS = 3840, 16
# Keys of a multimodal RoPE, which posenc refuses by their own check, not by the table.
MROPE_KEYS = {"mrope_section", "mrope_interleaved", "interleaved"}

# A rope_theta no class defaults to: whether a class reads it in the legacy form.
THETA_PROBE = 123456.0


def attr(obj, key):
    """getattr, None for whatever raises (5.23's per-layer attributes raise their own)."""
    try:
        return getattr(obj, key, None)
    except Exception:  # noqa: BLE001
        return None


def config_classes():
    """Every configuration class transformers ships that names a `model_type`."""
    import transformers.models as models
    from transformers import PretrainedConfig

    seen = {}
    for package in pkgutil.iter_modules(models.__path__):
        try:
            pkg = importlib.import_module(f"transformers.models.{package.name}")
        except Exception:  # noqa: BLE001 - a package that needs what is not installed
            continue
        for module in pkgutil.iter_modules(pkg.__path__):
            if not module.name.startswith("configuration_"):
                continue
            try:
                mod = importlib.import_module(f"{pkg.__name__}.{module.name}")
            except Exception:  # noqa: BLE001
                continue
            for obj in vars(mod).values():
                if (
                    isinstance(obj, type)
                    and issubclass(obj, PretrainedConfig)
                    and obj.__module__ == mod.__name__
                    and getattr(obj, "model_type", "")
                ):
                    seen.setdefault(obj.model_type, obj)
    return seen


def rope_of(cfg):
    """(rope_type, factor, theta, partial_rotary_factor) of one config, or a per-layer dict."""
    params = attr(cfg, "rope_parameters")
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        return {k: rope_of_params(v, cfg) for k, v in sorted(params.items())}
    if isinstance(params, dict) and params:
        return rope_of_params(params, cfg)
    # transformers 4.x: rope_theta and rope_scaling attributes.
    scaling = attr(cfg, "rope_scaling") or {}
    return {
        "rope_type": scaling.get("rope_type", scaling.get("type", "default")),
        "factor": scaling.get("factor"),
        "rope_theta": attr(cfg, "rope_theta"),
        "partial_rotary_factor": attr(cfg, "partial_rotary_factor"),
    }


def rope_of_params(params, cfg):
    return {
        "rope_type": params.get("rope_type", params.get("type", "default")),
        "factor": params.get("factor"),
        "rope_theta": params.get("rope_theta", attr(cfg, "rope_theta")),
        "partial_rotary_factor": params.get(
            "partial_rotary_factor", attr(cfg, "partial_rotary_factor")
        ),
    }


def head_dim_of(cls):
    """The head dim a config without `head_dim` gets: "computed" when it is hidden / heads,
    else the number (DeepSeek's `qk_rope_head_dim` where the class has one)."""
    try:
        cfg = cls(hidden_size=PROBE_HIDDEN, num_attention_heads=PROBE_HEADS)
    except Exception:  # noqa: BLE001
        return None
    for key in ("qk_rope_head_dim", "head_dim"):
        value = attr(cfg, key)
        if isinstance(value, int) and value > 0:
            if value == PROBE_HIDDEN // PROBE_HEADS and key == "head_dim":
                return "computed"
            if value == 2 * PROBE_HIDDEN // PROBE_HEADS and key == "head_dim":
                return "doubled"
            return value
    return "computed"


def attention_keys_of(cfg):
    """The keys a config class exempts from transformers' check of its RoPE parameters
    (`ignore_keys_at_rope_validation`, as an instance has it after its own __post_init__),
    less the multimodal RoPE's, those posenc reads (the base, the rotary factor) and the
    names of layer types (per-layer parameters' keys): the table's "attention keys"."""
    keys = set(attr(cfg, "ignore_keys_at_rope_validation") or ())
    layer_types = set(attr(cfg, "layer_types") or ())
    params = attr(cfg, "rope_parameters")
    if isinstance(params, dict):
        layer_types |= {k for k, v in params.items() if isinstance(v, dict)}
    # What posenc reads itself (the base, the rotary factor, the rope types' own keys, as
    # src/rope/scaling.rs's ROPE_TYPE_KEYS lists them): a
    # class that exempts these from transformers' check (HunYuan VL's yarn keys) keeps them
    # in its scaling, not in its attention.
    read = {"rope_type", "type", "rope_theta", "partial_rotary_factor", "factor",
            "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
            "mscale_all_dim", "attention_factor", "truncate", "low_freq_factor",
            "high_freq_factor", "short_factor", "long_factor"}
    return sorted(keys - MROPE_KEYS - read - layer_types - {"sliding_attention", "full_attention"})


# Words a modeling file that rotates anything spells somewhere (not "rope" alone, which
# "property" contains).
ROTARY_WORDS = re.compile(r"[Rr]otary|rotate_half|RoPE|\brope|rope_|freqs_cis|ROPE")


def rotary_code(cls):
    """Whether the modeling files beside `cls`'s configuration name any rotation; None
    without modeling files."""
    package = Path(importlib.import_module(cls.__module__).__file__).parent
    files = list(package.glob("modeling_*.py"))
    if not files:
        return None
    return any(ROTARY_WORDS.search(f.read_text()) for f in files)


def snapshot():
    import transformers

    warnings.simplefilter("ignore")
    out = {}
    for model_type, cls in sorted(config_classes().items()):
        row = {"class": cls.__name__}
        try:
            default = cls()
            row["legacy"] = rope_of(default)
            row["attention_keys"] = attention_keys_of(default)
            text = attr(default, "text_config") if "text_config" in (attr(cls, "sub_configs") or {}) else None
            if text is not None and attr(text, "model_type"):
                row["text_config"] = text.model_type
            text_class = (attr(cls, "sub_configs") or {}).get("text_config")
            if text_class is not None:
                # A class, not AutoConfig: built whatever model_type the dict gives.
                row["text_class_fixed"] = attr(text_class, "__name__") != "AutoConfig"
        except Exception as e:  # noqa: BLE001
            row["error"] = f"{type(e).__name__}: {e}"[:200]
            # A class that will not build with its defaults still names its text_config's
            # default type (Gemma 4's assistant).
            spec = (attr(cls, "sub_configs_defaults") or {}).get("text_config")
            if attr(spec, "model_type"):
                row["text_config"] = spec.model_type
            out[model_type] = row
            continue
        try:
            given = cls(rope_parameters={"rope_type": "default"})
            row["given"] = rope_of(given)
        except Exception:  # noqa: BLE001 - 4.x, or a class that wants its own
            pass
        try:
            # The legacy form with a base of its own: what the class makes of rope_theta
            # beside neither rope_parameters nor rope_scaling.
            row["theta_probe"] = rope_of(cls(rope_theta=THETA_PROBE))
        except Exception:  # noqa: BLE001
            pass
        row["head_dim"] = head_dim_of(cls)
        row["rotary_code"] = rotary_code(cls)
        # What posenc would read a default RoPE from: head counts at the top level.
        # (A composite with head counts at its top level is read there, not from its
        # text_config: BridgeTower's.)
        row["reads_heads"] = bool(
            any(attr(default, k) for k in ("num_attention_heads", "n_head", "head_dim"))
        )
        out[model_type] = row
    json.dump({"transformers": transformers.__version__, "families": out}, sys.stdout, indent=1)
    print()


def table_rows(path):
    """docs/families.md's rows: model_type -> the cells by column name."""
    rows = {}
    lines = Path(path).read_text().splitlines()
    header = next(i for i, l in enumerate(lines) if l.startswith("| `model_type` |"))
    names = [c.strip() for c in lines[header].strip("|").split("|")]
    for line in lines[header + 2 :]:
        if not line.startswith("| `"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = dict(zip(names, cells))
    return rows


def composite_rows(path):
    """docs/families.md's composite configs: model_type -> (its text_config's default,
    whether its class builds that whatever model_type the text_config gives)."""
    lines = Path(path).read_text().splitlines()
    header = next(i for i, l in enumerate(lines) if l.startswith("| composite `model_type` |"))
    rows = {}
    for line in lines[header + 2 :]:
        if not line.startswith("| `"):
            break
        composite, text, fixed = (c.strip().strip("`") for c in line.strip("|").split("|"))
        rows[composite] = (text, fixed == "yes")
    return rows


def number(text):
    return float(text) if text else None


def derived_base(row):
    """What the table's base column would say for a snapshot row, or None for per-layer
    classes (their bases are the layer rules')."""
    legacy, given = row.get("legacy"), row.get("given", row.get("legacy"))
    if not isinstance(legacy, dict) or legacy.get("rope_type") not in TEXT_ROPE_TYPES:
        return None
    if not isinstance(given, dict) or "rope_type" not in given:
        given = legacy
    base = given.get("rope_theta")
    if base is None:
        return ""
    scaled = legacy.get("rope_type") not in (None, "default")
    if not scaled and float(base) == GENERIC_BASE and legacy.get("rope_theta") in (None, base):
        return ""
    text = f"{float(base):g}" if float(base) < 1e5 else str(int(base))
    if scaled:
        factor = legacy.get("factor")
        text += "; legacy form: {} (factor {}) over {}".format(
            legacy["rope_type"], format_number(factor), format_number(legacy.get("rope_theta"))
        )
    return text


def format_number(v):
    if v is None:
        return "?"
    v = float(v)
    return str(int(v)) if v == int(v) else repr(v)


def partial_of(rope):
    """The class's partial_rotary_factor: one config's, or the one every layer type shares."""
    if not isinstance(rope, dict):
        return None
    if "rope_type" in rope:
        return rope.get("partial_rotary_factor")
    factors = {v.get("partial_rotary_factor") for v in rope.values()}
    return factors.pop() if len(factors) == 1 else None


def compare(paths, table="docs/families.md"):
    snaps = [json.loads(Path(p).read_text()) for p in paths]
    snaps.sort(key=lambda s: tuple(int(x) for x in re.findall(r"\d+", s["transformers"])[:3]))
    newest = snaps[-1]
    rows = table_rows(Path(__file__).resolve().parent.parent / table)
    problems, candidates = [], []
    for model_type, row in sorted(newest["families"].items()):
        have = rows.get(model_type)
        if have is None and row.get("rotary_code") is False and row.get("reads_heads"):
            # A family whose modeling code rotates nothing but whose head counts posenc would
            # read a default RoPE from: a not_rotary row is missing.
            candidates.append(f"{model_type}: not in the table, no rotary code in its modeling files")
            continue
        legacy = row.get("legacy")
        nested = isinstance(legacy, dict) and legacy and all(
            isinstance(v, dict) or v is None for v in legacy.values()
        ) and any(isinstance(v, dict) for v in legacy.values())
        if have is None and nested:
            candidates.append(f"{model_type}: not in the table, per-layer-type RoPEs by default")
            continue
        if have is None:
            # Not in the table: a language model's class base other than 10000 is a config
            # posenc would read at 10000.
            base = derived_base(row)
            if base:
                candidates.append(f"{model_type}: not in the table, base {base!r} derived")
            continue
        if have.get("refused"):
            continue
        # A class that builds one RoPE per layer type from a config without rope_parameters
        # (its legacy form): a family without a layer rule would read that form as one
        # RoPE at rope_theta (Dory's, before LayerRule::OwnDefaults).
        if nested and not have.get("layer types", ""):
            problems.append(
                f"{model_type}: its class builds per-layer-type RoPEs ({', '.join(sorted(legacy))}) "
                f"from a config without rope_parameters; the table has no layer rule"
            )
        # The legacy form: a class that builds a RoPE of its own beside a given rope_theta
        # (a scaling, or its own base) needs a row that says so (LegacyRope, own_base, a
        # layer rule, or GPT-NeoX's rotary_emb_base).
        probe = row.get("theta_probe")
        if isinstance(probe, dict) and "rope_type" in probe:
            own = probe["rope_type"] != "default" or probe["rope_theta"] != THETA_PROBE
            said = "legacy form" in have.get("base when absent", "") or have.get("layer types", "")
            if own and not said and model_type not in ("gpt_neox", "gpt_neox_japanese"):
                problems.append(
                    f"{model_type}: its class builds {probe['rope_type']} over "
                    f"{probe['rope_theta']!r} beside rope_theta {THETA_PROBE:g} and no "
                    f"rope_parameters; the table does not say so"
                )
        # Base.
        base = derived_base(row)
        if base is not None:
            # The legacy form's own base (Family::own_base) is the table's alone.
            got = re.sub(r"(; )?legacy form: \d+ whatever `rope_theta`", "", have.get("base when absent", ""))
            if got.replace(" ", "") != base.replace(" ", "") and not got.startswith("10000; `attn"):
                problems.append(f"{model_type}: base {got!r} in the table, {base!r} derived")
        # Head dim.
        dims = [s["families"].get(model_type, {}).get("head_dim") for s in snaps]
        present = [d for d in dims if d is not None]
        latest = row.get("head_dim")
        if latest in (None, "computed"):
            want = ""
        elif len(present) > 1 and all(d == latest for d in present):
            want = "2 × hidden / heads" if latest == "doubled" else str(latest)
        else:
            shown = "2 × hidden / heads" if latest == "doubled" else latest
            want = f"unsettled ({shown} in {newest['transformers'].rsplit('.', 1)[0]})"
        got = have.get("head dim when absent", "")
        if got != want:
            versions = ", ".join(f"{s['transformers']}: {d}" for s, d in zip(snaps, dims))
            problems.append(f"{model_type}: head dim {got!r} in the table, {want!r} derived ({versions})")
        # The class's partial_rotary_factor, where the table says the family's default reads it.
        cell = have.get("`partial_rotary_factor`", "")
        if cell.startswith("read"):
            legacy = partial_of(row.get("legacy"))
            given = partial_of(row.get("given") or row.get("legacy"))
            legacy, given = float(legacy or 1.0), float(given or 1.0)
            # Families that require rope_parameters have no legacy form to read.
            if have.get("layer types", "").startswith(("nothing copied in", "LFM3")):
                legacy = float(re.search(r"else ([\d.]+)", cell).group(1))
            if legacy == given:
                want = f"read, else {legacy:g}"
            else:
                want = f"read, else {legacy:g} (legacy form) or {given:g}"
            if not cell.startswith(want):
                problems.append(f"{model_type}: partial {cell!r} in the table, {want!r} derived")
        # Keys the class exempts from transformers' RoPE check (newer snapshots only).
        if "attention_keys" in row:
            want = ", ".join(f"`{k}`" for k in row["attention_keys"])
            got = have.get("attention keys", "")
            if got != want:
                problems.append(f"{model_type}: attention keys {got!r} in the table, {want!r} derived")
    # A composite's default text_config type (newer snapshots only).
    if any("text_config" in r for r in newest["families"].values()):
        derived = {
            m: r["text_config"]
            for m, r in newest["families"].items()
            if r.get("text_config") and r["text_config"] != m
        }
        composites = composite_rows(Path(__file__).resolve().parent.parent / table)
        listed = {m: text for m, (text, _) in composites.items()}
        for m in sorted(set(derived) | set(listed)):
            if derived.get(m) != listed.get(m):
                problems.append(
                    f"{m}: text_config {listed.get(m)!r} in the composite list, {derived.get(m)!r} derived"
                )
        # Whether the class builds its own text class whatever the dict names (newer
        # snapshots only).
        for m, (_, fixed) in sorted(composites.items()):
            row = newest["families"].get(m, {})
            if "text_class_fixed" in row and row["text_class_fixed"] != fixed:
                problems.append(
                    f"{m}: text class fixed {fixed} in the composite list, "
                    f"{row['text_class_fixed']} derived"
                )
    for model_type in sorted(set(rows) - set(newest["families"])):
        if not rows[model_type].get("refused"):
            problems.append(f"{model_type}: in the table, no config class in {newest['transformers']}")
    for p in problems:
        print(p)
    if candidates:
        print("\nNot in the table (a row may be missing):")
        for c in candidates:
            print(c)
    print(
        f"{len(problems)} disagreement(s), {len(candidates)} candidate(s), against transformers "
        + ", ".join(s["transformers"] for s in snaps),
        file=sys.stderr,
    )
    return 1 if problems else 0


def main(argv):
    if argv[1:2] == ["snapshot"]:
        snapshot()
        return 0
    if argv[1:2] == ["compare"] and len(argv) > 2:
        return compare(argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
