@compute @workgroup_size(X4_WORKGROUP)
fn encode_pass_x4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let t0 = (wg.z * params.groups_y + wg.y) * DIAG_TOK;
    let n = params.row_units;
    let x = wg.x * X4_WORKGROUP + li;
    let first = (params.flags & FLAG_FIRST_WINDOW) != 0u;
    var e: array<vec4<f32>, DIAG_TOK>;
    var p: array<vec4<f32>, DIAG_TOK>;
    var live: array<bool, DIAG_TOK>;
    var at: array<u32, DIAG_TOK>;
    for (var j = 0u; j < DIAG_TOK; j++) {
        let t = t0 + j;
        live[j] = false;
        if t >= params.n_tokens {
            continue;
        }
        at[j] = params.out_base + t * n;
        let k = token(t);
        if k.zero {
            if first {
                if wg.x == 0u && li == 0u {
                    count_fault(k);
                }
                if x < n {
                    out[at[j] + x] = OutWord();
                }
            }
            continue;
        }
        if !k.in_window || x >= n {
            continue;
        }
        e[j] = widen(table_word(k.slot, k.row * n + x));
        p[j] = pe_unit(k.position, k.cached, x);
        live[j] = true;
    }
    let scaled = (params.flags & FLAG_SCALE) != 0u;
    let s = bitcast<f32>(params.scale_bits);
    for (var j = 0u; j < DIAG_TOK; j++) {
        if live[j] {
            var v = e[j];
            if scaled {
                v = rounded4(v * s, params.zero);
            }
            out[at[j] + x] = narrow(v + p[j]);
        }
    }
}
