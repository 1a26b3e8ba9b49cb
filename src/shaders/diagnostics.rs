//! Diagnostic kernels: rewrites of posenc's kernel text that each take one cost out of a
//! kernel (its arithmetic, a load, a barrier, a rounding), so that a run on a GPU can
//! measure what that cost was. A profiler would say it directly, but NVIDIA's (Nsight
//! Compute) reads CUDA kernels, not the ones wgpu builds through Vulkan, and GPUs are lent
//! to this project for minutes at a time: one binary built with these, timed against the
//! kernels as they are, answers several questions in one run
//! (`benches/device/run.sh`, its `d:NAME` variants).
//!
//! **They give wrong results**: `posenc bench` reports them (its `agree` false). They exist
//! only to be measured.
//!
//! The table and the rewriting are always compiled, so that the library's tests hold every
//! diagnostic to the kernels as they are now (each edit must find its text in every
//! source of the kernels it names). Kernels are rewritten only in a build with the
//! `diagnostics` feature, when [`DIAGNOSTICS_ENV`] names diagnostics: then every kernel the
//! process compiles whose entry point a named diagnostic lists is rewritten. A build without
//! the feature refuses that variable ([`crate::gpu::Options::from_env`]), so a run never
//! measures the plain kernels while its caller believes otherwise.

use std::borrow::Cow;

use crate::error::{Result, invalid_env};

/// Environment variable naming the diagnostics to apply, comma-separated (`rope-copy`,
/// `rope-copy,rope-nocs`); empty or unset: none. Honoured only by a build with the
/// `diagnostics` feature; any other refuses it.
pub const DIAGNOSTICS_ENV: &str = "POSENC_DIAG";

/// One diagnostic: what it takes out, from which kernels, and the edits that do it.
#[derive(Debug)]
#[non_exhaustive]
pub struct Diagnostic {
    /// The name [`DIAGNOSTICS_ENV`] takes.
    pub name: &'static str,
    /// What the rewritten kernels no longer do, in a sentence.
    pub removes: &'static str,
    /// The entry points whose kernels it rewrites.
    pub entries: &'static [&'static str],
    /// Text replacements, applied in order to a kernel's composed source; each `from` is
    /// in every source of every entry (the tests check it).
    edits: &'static [(&'static str, &'static str)],
}

const ROPE: &[&str] = &["rope_pass", "rope_pass_heads"];

/// Every diagnostic, by name.
pub const ALL: &[Diagnostic] = &[
    Diagnostic {
        name: "rope-copy",
        removes: "the rotation's arithmetic: each unit's words are stored back as loaded (the \
                  cos/sin are still read, so their loads and rope_pass's workgroup stage stay)",
        entries: ROPE,
        edits: &[(
            "fn rope_unit(a: vec4<u32>, b: vec4<u32>, c0: vec4<f32>, s0: vec4<f32>, c1: \
             vec4<f32>, s1: vec4<f32>, z: u32) -> RopeUnit {",
            "fn rope_unit(a: vec4<u32>, b: vec4<u32>, c0: vec4<f32>, s0: vec4<f32>, c1: \
             vec4<f32>, s1: vec4<f32>, z: u32) -> RopeUnit {
    // Diagnostic rope-copy: z is always 0, so the words go back unchanged; the sum keeps
    // the cos/sin live.
    let keep = bitcast<vec4<u32>>(c0 + s0 + c1 + s1) & vec4<u32>(z);
    return RopeUnit(a | keep, b | keep);
}

fn rope_unit_kept(a: vec4<u32>, b: vec4<u32>, c0: vec4<f32>, s0: vec4<f32>, c1: vec4<f32>, \
             s1: vec4<f32>, z: u32) -> RopeUnit {",
        )],
    },
    Diagnostic {
        name: "rope-nocs",
        removes: "the cos/sin: stand-ins made from the position and frequency, no cache load \
                  and no exact phase (rope_pass's workgroup stage and barrier stay)",
        entries: ROPE,
        edits: &[
            (
                "fn cos_sin4(p: u32, f: u32) -> array<vec4<f32>, 2> {",
                "fn cos_sin4(p: u32, f: u32) -> array<vec4<f32>, 2> {
    // Diagnostic rope-nocs.
    // A rotation still (0.6^2 + 0.8^2 = 1), so the data the bench rotates step after step
    // in place keeps its size: stand-ins that shrank it would send the values into the
    // conversions' general forms.
    let odd = ((p + f) & 1u) == 1u;
    return array<vec4<f32>, 2>(vec4<f32>(select(0.6, 0.8, odd)), vec4<f32>(select(0.8, 0.6, odd)));
}

fn cos_sin4_kept(p: u32, f: u32) -> array<vec4<f32>, 2> {",
            ),
            (
                "fn cos_sin4_at(p: vec3<u32>, f: u32) -> array<vec4<f32>, 2> {",
                "fn cos_sin4_at(p: vec3<u32>, f: u32) -> array<vec4<f32>, 2> {
    // Diagnostic rope-nocs: cos_sin4's stand-ins, a multimodal step's too.
    return cos_sin4(p.x, f);
}

fn cos_sin4_at_kept(p: vec3<u32>, f: u32) -> array<vec4<f32>, 2> {",
            ),
        ],
    },
    Diagnostic {
        name: "rope-nobarrier",
        removes: "rope_pass's workgroup barrier between the cos/sin stage and the rotation \
                  (the rotation may read cos/sin not yet written: stale workgroup memory, \
                  which rope_pass leaves unzeroed only because the barrier orders it)",
        entries: &["rope_pass"],
        edits: &[("    workgroupBarrier();\n", "    // Diagnostic rope-nobarrier.\n")],
    },
    Diagnostic {
        name: "rope-noround",
        removes: "the rounding of each product before a sum takes it (rounded4 returns its \
                  argument, so a compiler may contract them into multiply-adds)",
        entries: ROPE,
        edits: &[(
            "fn rounded4(v: vec4<f32>, z: u32) -> vec4<f32> {
    return v * vec4<f32>(bitcast<f32>(z | 0x3f800000u));",
            "fn rounded4(v: vec4<f32>, z: u32) -> vec4<f32> {
    // Diagnostic rope-noround.
    return v;",
        )],
    },
    Diagnostic {
        name: "rope-trunc",
        removes: "bf16's rounding and NaN test: each result truncated to its top 16 bits",
        entries: ROPE,
        edits: &[(
            "fn narrow4_bf16(v: vec4<f32>) -> vec2<u32> {
    let b = bitcast<vec4<u32>>(v);
",
            "fn narrow4_bf16(v: vec4<f32>) -> vec2<u32> {
    let b = bitcast<vec4<u32>>(v);
    // Diagnostic rope-trunc.
    if true {
        return vec2<u32>((b.x >> 16u) | (b.y & 0xffff0000u), (b.z >> 16u) | (b.w & 0xffff0000u));
    }
",
        )],
    },
    Diagnostic {
        name: "bf16-general",
        removes: "narrow4_bf16's branch: the general form (a NaN test and a select per \
                  element) for every unit, where the short path skips it for units without \
                  a NaN. The same bits: an alternative to time, not a cost taken out",
        entries: ROPE,
        edits: &[(
            "    if all(v == v) {\n        return round4_bf16(b);\n    }\n",
            "    // Diagnostic bf16-general.\n",
        )],
    },
    Diagnostic {
        name: "bf16-nonan",
        removes: "narrow4_bf16's NaN test: the rounding alone (wrong for NaN results only), \
                  which with rope-trunc splits bf16's cost between its rounding and its test",
        entries: ROPE,
        edits: &[("    if all(v == v) {\n", "    if true { // Diagnostic bf16-nonan.\n")],
    },
    Diagnostic {
        name: "bf16-inttest",
        removes: "narrow4_bf16's float NaN test (each value compared with itself): the integer \
                  test it replaced on 2026-12-04 (the bits without the sign, their maximum, a \
                  compare). The same bits: the old form, to time against the new",
        entries: ROPE,
        edits: &[(
            "    if all(v == v) {\n",
            "    // Diagnostic bf16-inttest.
    let abs_bits = b & vec4<u32>(0x7fffffffu);
    if max(max(abs_bits.x, abs_bits.y), max(abs_bits.z, abs_bits.w)) <= 0x7f800000u {\n",
        )],
    },
    Diagnostic {
        name: "bf16-masked",
        removes: "narrow4_bf16's NaN test and branch: every value rounded by integer steps \
                  in which a NaN's own bit (the magnitude plus 0x7fffff carries into bit 31 \
                  for a NaN only) masks the rounding's addend off and sets the quiet bit, so \
                  a NaN gives f32_to_bf16_bits's (b >> 16) | 0x40 and a number its rounding. \
                  The same bits, no comparison or select: an alternative to time",
        entries: ROPE,
        edits: &[(
            "    if all(v == v) {\n",
            "    if true { // Diagnostic bf16-masked.
        let nan = ((b & vec4<u32>(0x7fffffffu)) + vec4<u32>(0x7fffffu)) >> vec4<u32>(31u);
        let lsb = (b >> vec4<u32>(16u)) & vec4<u32>(1u);
        let add = (vec4<u32>(0x7fffu) + lsb) & (nan - vec4<u32>(1u));
        let r = ((b + add) >> vec4<u32>(16u)) | (nan << vec4<u32>(6u));
        return vec2<u32>(r.x | (r.y << 16u), r.z | (r.w << 16u));
    }
    if all(v == v) {\n",
        )],
    },
    Diagnostic {
        name: "bf16-oneeq",
        removes: "nothing: narrow4_bf16's NaN test as each value times an opaque one compared \
                  with itself, which no compiler can fold even where it assumes no NaNs (one \
                  float multiply more per value). The same bits: an alternative to time",
        entries: ROPE,
        edits: &[(
            "    if all(v == v) {\n",
            "    // Diagnostic bf16-oneeq.
    if all(v * vec4<f32>(bitcast<f32>(params.zero | 0x3f800000u)) == v) {\n",
        )],
    },
    Diagnostic {
        name: "f16-unpack",
        removes: "the f16 widening's integer arithmetic: WGSL's unpack2x16float (a downlevel \
                  capability, SHADER_F16_IN_F32, that Vulkan, Metal and DX12 adapters have), \
                  exact for every half that is not a NaN wherever the hardware converts \
                  exactly. An alternative to time; the bench's agreement says whether its \
                  data kept the bits",
        entries: &["rope_pass", "rope_pass_heads", "encode_pass_x4"],
        edits: &[
            (
                "fn widen4_f16(w: vec2<u32>) -> vec4<f32> {\n",
                "fn widen4_f16(w: vec2<u32>) -> vec4<f32> {
    if true { // Diagnostic f16-unpack.
        return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
    }
",
            ),
            (
                "fn widen4_f16_general(w: vec2<u32>) -> vec4<f32> {\n",
                "fn widen4_f16_general(w: vec2<u32>) -> vec4<f32> {
    if true { // Diagnostic f16-unpack.
        return widen4_f16(w);
    }
",
            ),
        ],
    },
    Diagnostic {
        name: "f16-short",
        removes: "the general form of the vec4 f16 conversions beside their short path: the \
                  short path always taken (wrong for zeros, subnormals, infinities and NaNs, \
                  and for results below 2^-14 or past 65504), in the widening that kernels for \
                  CPU adapters do by the general form alone too",
        entries: &["rope_pass", "rope_pass_heads", "encode_pass_x4"],
        edits: &[
            (
                "fn widen4_f16_general(w: vec2<u32>) -> vec4<f32> {\n",
                "fn widen4_f16_general(w: vec2<u32>) -> vec4<f32> {
    if true { // Diagnostic f16-short.
        return widen4_f16(w);
    }
",
            ),
            (
                "    if all((em >= vec4<u32>(0x400u)) & (em < vec4<u32>(0x7c00u))) {",
                "    if true { // Diagnostic f16-short.",
            ),
            (
                "    if all((a >= vec4<u32>(0x38800000u)) & (a < vec4<u32>(0x477ff000u))) {",
                "    if true { // Diagnostic f16-short.",
            ),
        ],
    },
    Diagnostic {
        name: "f16-pack",
        removes: "the f16 narrowing's integer rounding on its short path: each value rounded \
                  to f16's precision by float arithmetic (v plus 1.5 * 2^(e + 13), where e is \
                  its exponent, then minus that again times an opaque one) and the exact \
                  result packed by WGSL's pack2x16float (a downlevel capability, \
                  SHADER_F16_IN_F32), which keeps an exact value whatever its rounding. The \
                  same bits where f32 adds round to nearest even: an alternative to time",
        entries: &["rope_pass", "rope_pass_heads", "encode_pass_x4"],
        edits: &[(
            "        let rebased = a - vec4<u32>(0x38000000u);\n",
            "        // Diagnostic f16-pack.
        let c = bitcast<vec4<f32>>((a & vec4<u32>(0x7f800000u)) + vec4<u32>(0x06c00000u));
        let r = (v + c) - c * vec4<f32>(bitcast<f32>(params.zero | 0x3f800000u));
        if true {
            return vec2<u32>(pack2x16float(r.xy), pack2x16float(r.zw));
        }
        let rebased = a - vec4<u32>(0x38000000u);\n",
        )],
    },
    Diagnostic {
        name: "f16-packonly",
        removes: "the f16 narrowing's rounding on its short path: each value handed to WGSL's \
                  pack2x16float as it is, rounded however the hardware's conversion rounds \
                  (to nearest even on NVIDIA's, toward zero on AMD's packHalf2x16: wrong bits \
                  there), to time what f16-pack's float rounding costs",
        entries: &["rope_pass", "rope_pass_heads", "encode_pass_x4"],
        edits: &[(
            "        let rebased = a - vec4<u32>(0x38000000u);\n",
            "        // Diagnostic f16-packonly.
        if true {
            return vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw));
        }
        let rebased = a - vec4<u32>(0x38000000u);\n",
        )],
    },
    Diagnostic {
        name: "mrope-quad",
        removes: "a multimodal step's per-frequency gathering where sections put a unit's four \
                  frequencies on one axis (time and height runs whole vec4s, as Qwen2-VL's and \
                  Qwen2.5-VL's [16, 24, 24]): cos_sin4 at that axis's position, the one-position \
                  path, in a branch uniform over the dispatch. The same bits: an alternative to \
                  time (Qwen2.5-VL's path through it in RADV's compiler, the cold branches \
                  cut: 3700 cycles of latency, 540 instructions, where the kernel's takes \
                  6700 and 700, the one-position kernel's 3100 and 490)",
        entries: ROPE,
        edits: &[(
            "fn cos_sin4_at(p: vec3<u32>, f: u32) -> array<vec4<f32>, 2> {",
            "fn cos_sin4_at(p: vec3<u32>, f: u32) -> array<vec4<f32>, 2> {
    // Diagnostic mrope-quad.
    let section = vec3<u32>(params.section_t, params.section_h, params.section_w);
    let layouts = FLAG_INTERLEAVED | FLAG_ALTERNATING;
    if RP_AXES && (params.flags & layouts) == 0u && ((section.x | section.y) & 3u) == 0u {
        return cos_sin4(p[mrope_axis(f, params.flags, section)], f);
    }
    return cos_sin4_at_kept(p, f);
}

fn cos_sin4_at_kept(p: vec3<u32>, f: u32) -> array<vec4<f32>, 2> {",
        )],
    },
    Diagnostic {
        name: "enc-noid",
        removes: "the load of each token's id before its row's: the row is a hash of the \
                  token's index (a multiply and a remainder), spread over the vocabulary as \
                  ids are",
        entries: &["encode_pass_x4"],
        edits: &[(
            "    k.id = id_word(params.ids_base + params.token_base + t);",
            "    // Diagnostic enc-noid.
    k.id = ((params.token_base + t) * 2654435761u) % params.vocab;",
        )],
    },
    Diagnostic {
        name: "enc-nope",
        removes: "the PE row's read: PE taken as zero",
        entries: &["encode_pass_x4"],
        edits: &[(
            "fn pe_unit(p: u32, cached: bool, x: u32) -> vec4<f32> {",
            "fn pe_unit(p: u32, cached: bool, x: u32) -> vec4<f32> {
    // Diagnostic enc-nope.
    if true {
        return vec4<f32>(0.0);
    }",
        )],
    },
    Diagnostic {
        name: "enc-nocheck",
        removes: "each token's bookkeeping after its id and position are loaded (pad, \
                  vocabulary, cache and table-chunk checks): every token taken as cached, in \
                  the first chunk, at row id (wrong rows past a table's first chunk)",
        entries: &["encode_pass_x4"],
        edits: &[(
            "    k.cached = k.position < params.cached_rows;\n",
            "    // Diagnostic enc-nocheck: the bench's tokens are all valid, cached and (but for \
             a table of several chunks) in the first chunk.
    if true {
        k.cached = true;
        k.in_window = true;
        k.row = k.id;
        return k;
    }
    k.cached = k.position < params.cached_rows;\n",
        )],
    },
];

/// The diagnostic named `name`.
pub fn find(name: &str) -> Option<&'static Diagnostic> {
    // Case aside, as every `POSENC_*` word is read.
    ALL.iter().find(|d| d.name.eq_ignore_ascii_case(name))
}

/// The diagnostics a [`DIAGNOSTICS_ENV`] value names: comma-separated names, white space
/// around each ignored; empty names (an empty value) name none.
///
/// # Errors
/// [`crate::Error::InvalidParameter`] naming the variable and its value, for a name that is
/// no diagnostic's.
pub fn parse(text: &str) -> Result<Vec<&'static Diagnostic>> {
    let mut named = Vec::new();
    for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        match find(word) {
            Some(d) if named.iter().any(|n: &&Diagnostic| n.name == d.name) => {}
            Some(d) => named.push(d),
            None => return Err(invalid_env(DIAGNOSTICS_ENV, text, NAMES)),
        }
    }
    Ok(named)
}

/// The names [`parse`] accepts, for its refusal.
const NAMES: &str = "comma-separated diagnostics among rope-copy, rope-nocs, rope-nobarrier, \
                     rope-noround, rope-trunc, bf16-general, bf16-nonan, bf16-inttest, \
                     bf16-masked, bf16-oneeq, f16-unpack, f16-short, f16-pack, f16-packonly, \
                     mrope-quad, enc-noid, enc-nope and enc-nocheck";

/// `source`, the kernel of entry point `entry`, with the edits of those of `diagnostics`
/// that name it, and the names of those whose edits found their text (each edit replaces
/// every occurrence).
pub fn apply<'a>(
    diagnostics: &[&'static Diagnostic],
    entry: &str,
    source: &'a str,
) -> (Cow<'a, str>, Vec<&'static str>) {
    let mut text = Cow::Borrowed(source);
    let mut applied = Vec::new();
    for d in diagnostics.iter().filter(|d| d.entries.contains(&entry)) {
        let mut found = false;
        for (from, to) in d.edits {
            if text.contains(from) {
                found = true;
                text = Cow::Owned(text.replace(from, to));
            }
        }
        if found {
            applied.push(d.name);
        }
    }
    (text, applied)
}

/// What this process applies: the diagnostics [`DIAGNOSTICS_ENV`] names in a build with
/// the `diagnostics` feature (read once, on first use; a value [`parse`] refuses applies
/// none, and [`crate::gpu::Options::from_env`] refuses it), none in any other build.
pub fn active() -> &'static [&'static Diagnostic] {
    #[cfg(feature = "diagnostics")]
    {
        static ACTIVE: std::sync::OnceLock<Vec<&'static Diagnostic>> = std::sync::OnceLock::new();
        ACTIVE.get_or_init(|| {
            std::env::var(DIAGNOSTICS_ENV).ok().and_then(|t| parse(&t).ok()).unwrap_or_default()
        })
    }
    #[cfg(not(feature = "diagnostics"))]
    {
        &[]
    }
}

/// Checks [`DIAGNOSTICS_ENV`] as this build takes it.
///
/// # Errors
/// [`crate::Error::InvalidParameter`] naming the variable: a name that is no diagnostic's,
/// or, in a build without the `diagnostics` feature, any name at all.
pub(crate) fn check_env() -> Result<()> {
    let Some(text) = crate::error::env_text(DIAGNOSTICS_ENV, NAMES)? else { return Ok(()) };
    let named = parse(&text)?;
    if !cfg!(feature = "diagnostics") && !named.is_empty() {
        return Err(invalid_env(
            DIAGNOSTICS_ENV,
            &text,
            "unset: this posenc was built without the `diagnostics` feature",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_edit_finds_its_text_in_every_source_of_its_kernels() {
        let sources = crate::shaders::all_sources();
        for d in ALL {
            for entry in d.entries {
                let mine: Vec<_> = sources.iter().filter(|(_, e, _)| e == entry).collect();
                assert!(!mine.is_empty(), "{}: no source of {entry}", d.name);
                for (label, _, source) in mine {
                    for (from, _) in d.edits {
                        assert!(source.contains(from), "{}: {label} lacks {from:?}", d.name);
                    }
                    let (text, applied) = apply(&[d], entry, source);
                    assert_eq!(applied, [d.name]);
                    assert_ne!(text, *source);
                }
            }
        }
    }

    /// Panics, naming `what`, unless `text` parses and validates as naga does for wgpu,
    /// with the one capability a kernel may take where it calls (un)pack2x16float
    /// (f16-unpack's, f16-pack's, and the GPU forms' on adapters that have it).
    #[cfg(not(target_arch = "wasm32"))]
    fn assert_valid(what: &str, text: &str) {
        let module = naga::front::wgsl::parse_str(text)
            .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(text)));
        let capabilities = if crate::shaders::calls_unpack(text) {
            naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32
        } else {
            naga::valid::Capabilities::empty()
        };
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities)
            .validate(&module)
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn every_rewritten_kernel_is_valid_wgsl_and_keeps_its_loops_reviewed() {
        use rayon::prelude::*;
        // Every (diagnostic, source) pair, validated in parallel: serial, this was the
        // longest of the library's tests by twice, and the library's run took 50.7 - 50.8 s
        // on 2 cores where it now takes 41.9 (2026-12-05).
        let sources = crate::shaders::all_sources();
        let pairs: Vec<_> = ALL
            .iter()
            .flat_map(|d| {
                sources.iter().filter(|(_, e, _)| d.entries.contains(e)).map(move |s| (d, s))
            })
            .collect();
        pairs.into_par_iter().for_each(|(d, (label, entry, source))| {
            let (text, _) = apply(&[d], entry, source);
            assert_valid(&format!("{}: {label}", d.name), &text);
            assert_eq!(
                crate::shaders::bounds_loops_of(entry, &text),
                crate::shaders::bounds_loops_of(entry, source),
                "{}: {label}",
                d.name
            );
        });
    }

    /// The combination benches/device/run.sh times (the RoPE kernel's access pattern
    /// alone) rewrites every RoPE source into valid WGSL, each of its three applied.
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn the_device_runs_combination_applies_whole() {
        let named = parse("rope-copy,rope-nocs,rope-nobarrier").unwrap();
        let mut seen = 0;
        for (label, entry, source) in crate::shaders::all_sources() {
            if entry != "rope_pass" {
                continue;
            }
            seen += 1;
            let (text, applied) = apply(&named, entry, &source);
            assert_eq!(applied, ["rope-copy", "rope-nocs", "rope-nobarrier"], "{label}");
            assert_valid(&label, &text);
        }
        assert!(seen > 0, "no rope_pass source");
    }

    #[test]
    fn names_are_parsed_and_unknown_ones_refused() {
        assert!(parse("").unwrap().is_empty());
        assert!(parse(" , ").unwrap().is_empty());
        let named: Vec<_> =
            parse(" rope-copy,rope-nocs ,rope-copy").unwrap().iter().map(|d| d.name).collect();
        assert_eq!(named, ["rope-copy", "rope-nocs"]);
        let message = parse("rope-copy,ropecopy").unwrap_err().to_string();
        assert!(message.contains(DIAGNOSTICS_ENV) && message.contains("ropecopy"), "{message}");
        for d in ALL {
            assert!(NAMES.contains(d.name), "{} missing from the refusal's list", d.name);
        }
    }

    #[test]
    fn a_kernel_no_diagnostic_names_is_left_as_it_is() {
        let source = crate::shaders::source("table");
        let (text, applied) = apply(&ALL.iter().collect::<Vec<_>>(), "table", &source);
        assert!(matches!(text, Cow::Borrowed(_)) && applied.is_empty());
    }

    /// f16-pack's rounding, as its WGSL writes it, modelled on the CPU for every f32 its
    /// short path takes (2^-14 <= |v| < 65520, both signs): v + c, with c = 1.5 * 2^(e + 13)
    /// for v's exponent e, rounds v to a multiple of f16's quantum at that exponent, ties to
    /// even, and subtracting c again is exact; the result is the f16 value that
    /// `f32_to_f16_bits` gives, so a pack of it by any rounding has the CPU's bits.
    #[test]
    fn f16_pack_rounds_every_short_path_value_as_the_cpu() {
        let one = std::hint::black_box(1.0f32);
        for a in 0x3880_0000u32..0x477f_f000 {
            for sign in [0, 0x8000_0000u32] {
                let v = f32::from_bits(a | sign);
                let c = f32::from_bits((a & 0x7f80_0000) + 0x06c0_0000);
                let r = (v + c) - c * one;
                let want = crate::convert::f32_to_f16_bits(v.to_bits());
                let exact = crate::convert::f16_to_f32_bits(want);
                assert_eq!(r.to_bits(), exact, "{:#010x}", v.to_bits());
            }
        }
    }
}
