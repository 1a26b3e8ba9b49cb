use std::time::Instant;
fn run(n: usize, huge: bool, threads: usize) -> f64 {
    let mut v: Vec<u8> = Vec::with_capacity(n);
    let p = v.as_mut_ptr() as usize;
    if huge {
        let a = (p + (2 << 20) - 1) & !((2 << 20) - 1);
        let end = (p + n) & !((2 << 20) - 1);
        if end > a { unsafe { libc::madvise(a as *mut _, end - a, libc::MADV_HUGEPAGE); } }
    }
    let t = Instant::now();
    let chunk = n / threads;
    std::thread::scope(|s| {
        for k in 0..threads {
            let q = p + k * chunk;
            s.spawn(move || unsafe { std::ptr::write_bytes(q as *mut u8, 1, chunk) });
        }
    });
    unsafe { v.set_len(n) };
    let e = t.elapsed().as_secs_f64() * 1e3;
    std::hint::black_box(&v);
    e
}
fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().unwrap()).collect();
    let (mib, threads, reps) = (args[0], args[1], args[2]);
    for huge in [false, true, false, true] {
        let mut r: Vec<f64> = (0..reps).map(|_| run(mib << 20, huge, threads)).collect();
        r.sort_by(f64::total_cmp);
        println!("{mib} MiB huge={huge} threads={threads}: p10 {:.1} p50 {:.1} p90 {:.1} max {:.1} ms", r[reps/10], r[reps/2], r[reps*9/10], r[reps-1]);
    }
}
