// The hook of run 2's `diag` build, inserted at the top of `build_pipeline` in
// src/gpu/mod.rs (567ae71), never committed: it rewrites a kernel's text before wgpu
// compiles it, when the variable is set.
    let mut diag = source.to_string();
    if std::env::var_os("POSENC_DIAG_RCACHE").is_some() {
        let from = "    return rope_cos_sin(p, steps[f], (params.flags & FLAG_SCALE) != 0u, params.scale_bits);";
        let to = "    return bitcast<vec2<f32>>(steps[params.cache_base + min(p, params.cached_rows - 1u) * params.n_freqs + f]);";
        if diag.contains(from) {
            eprintln!("diag: rcache in {name}");
        }
        diag = diag.replace(from, to);
    }
    if std::env::var_os("POSENC_DIAG_F16FAST").is_some() {
        let w = "    if all((em >= vec4<u32>(0x400u)) & (em < vec4<u32>(0x7c00u))) {";
        let n = "    if all((a >= vec4<u32>(0x38800000u)) & (a < vec4<u32>(0x477ff000u))) {";
        if diag.contains(w) || diag.contains(n) {
            eprintln!("diag: f16fast in {name}");
        }
        diag = diag.replace(w, "    if true {").replace(n, "    if true {");
    }
    let source = diag.as_str();
