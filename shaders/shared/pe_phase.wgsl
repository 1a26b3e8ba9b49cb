// The phase of frequency i of a sinusoidal spec at position p (start added as a 33-bit
// sum), in units of 2^-32 turn: exact steps, or a float32 framework's angle (FLAG_F32)
// followed by the steps of powers of two. The importing kernel defines
// `fn freq_step(k: u32) -> vec2<u32>`, the host's frequency words (`exact::kernel_words`):
// step i of frequency i, or with float32 frequencies each frequency's f32 bits in .x and
// then F32_STEPS steps from word n_freqs on. CPU twin: src/cpu/table.rs.
#import sincos
#import f32_angle

fn pe_phase(p: u32, start: u32, float32: bool, n_freqs: u32, i: u32) -> u32 {
    let r = p + start;
    let carry = r < p;
    if !float32 {
        return phase_turns_u33(r, carry, freq_step(i));
    }
    let a = f32_angle_parts(r, carry, freq_step(i).x);
    if a.m == 0u {
        return 0u;
    }
    let k = u32(clamp(a.e + F32_STEP_BIAS, 0, i32(F32_STEPS) - 1));
    return phase_turns(a.m, freq_step(n_freqs + k));
}
