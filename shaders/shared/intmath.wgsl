// Integer arithmetic WGSL lacks. CPU twin: mul_hi in src/cpu/sincos.rs (a 64-bit product).

// floor(a * b / 2^32) from 16-bit halves (WGSL has no 32x32 -> 64 multiply); exact.
fn mul_hi(a: u32, b: u32) -> u32 {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let lo = a0 * b0;
    let m1 = a1 * b0;
    let m2 = a0 * b1;
    let mid = (lo >> 16u) + (m1 & 0xffffu) + (m2 & 0xffffu);
    return a1 * b1 + (m1 >> 16u) + (m2 >> 16u) + (mid >> 16u);
}
