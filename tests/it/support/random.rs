//! The tests' deterministic inputs that the browser suite (tests/web.rs, which includes this
//! file) shares: nothing here touches files or processes.

/// A small deterministic generator (xorshift64*), so failures reproduce from the seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Positions that stress the phase: around 2^16, 2^24, 2^31, 2^32 - 1, plus random ones
/// over the whole u32 range.
pub fn hard_positions(rng: &mut Rng, random: usize) -> Vec<u32> {
    let mut p = vec![0, 1, 2, 3];
    for centre in [1u64 << 16, 1 << 20, 1 << 24, 1 << 27, 1 << 31, (1 << 32) - 1] {
        for delta in -3i64..=3 {
            let v = centre as i64 + delta;
            if (0..=i64::from(u32::MAX)).contains(&v) {
                p.push(v as u32);
            }
        }
    }
    p.extend((0..random).map(|_| rng.next_u32()));
    p
}
