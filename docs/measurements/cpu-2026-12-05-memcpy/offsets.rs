use std::time::Instant;
unsafe fn sse_copy(d: *mut u8, s: *const u8, len: usize) {
    use std::arch::x86_64::*;
    let n = len / 64 * 64;
    let mut i = 0;
    while i < n {
        let a = _mm_loadu_si128(s.add(i).cast());
        let b = _mm_loadu_si128(s.add(i + 16).cast());
        let c = _mm_loadu_si128(s.add(i + 32).cast());
        let e = _mm_loadu_si128(s.add(i + 48).cast());
        _mm_storeu_si128(d.add(i).cast(), a);
        _mm_storeu_si128(d.add(i + 16).cast(), b);
        _mm_storeu_si128(d.add(i + 32).cast(), c);
        _mm_storeu_si128(d.add(i + 48).cast(), e);
        i += 64;
    }
    std::ptr::copy_nonoverlapping(s.add(n), d.add(n), len - n);
}
fn main() {
    for n in [4096usize, 16384, 65536, 131072, 262144, 524288, 1 << 20] {
        let src_buf = vec![1u8; n + 8192];
        let mut dst_buf = vec![0u8; n + 8192];
        let s0 = (4096 - src_buf.as_ptr() as usize % 4096) % 4096;
        let d0 = (4096 - dst_buf.as_ptr() as usize % 4096) % 4096;
        let mut line = format!("{n:>8} |");
        for delta in [0usize, 1, 8, 16, 24, 31, 32, 48, 63, 64, 2048] {
            line += &format!(" {delta:>4}:");
            for sse in [false, true] {
            let s = &src_buf[s0..s0 + n];
            let d = &mut dst_buf[d0 + delta..d0 + delta + n];
            let mut times = vec![];
            for _ in 0..101 {
                let t = Instant::now();
                if sse { unsafe { sse_copy(d.as_mut_ptr(), s.as_ptr(), n) } } else { d.copy_from_slice(s); }
                std::hint::black_box(&mut *d);
                times.push(t.elapsed().as_secs_f64());
            }
            times.sort_by(f64::total_cmp);
            line += &format!(" {:>3.0}", 2.0 * n as f64 / times[times.len()/2] / 1e9);
            }
        }
        println!("{line}");
    }
}
