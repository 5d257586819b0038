//! The one seeded pseudo-random generator of rnic-emu: everything that must reproduce from
//! a seed draws from an [`Rng`] (PCIe fault probabilities, the fabric port's drop,
//! corrupt, duplicate and reorder decisions, the timing model's queueing draw, the engine's
//! role tests, the fuzz smoke inputs). Not for anything secret.
//!
//! The algorithm is splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom
//! number generators", OOPSLA 2014; the constants of Vigna's reference code): 64 bits of
//! state, any seed (0 included) valid, and a stream fixed by the algorithm alone. It is
//! written here, not taken from a crate, because pinned results (the timing model's
//! percentiles in docs/timing.md, seeded fault runs) rest on the exact stream, which a
//! general-purpose crate does not promise to keep across versions.

/// A splitmix64 generator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng(u64);

impl Rng {
    /// The generator of `seed`: the same seed always gives the same stream.
    pub const fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), in steps of 2^-53.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in (0, 1], in steps of 2^-53 (never 0: safe to take the logarithm of).
    pub fn unit_nonzero(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// True with probability `p`. `p <= 0` (or NaN) is never and `p >= 1` always, and
    /// neither draws: a decision that cannot go either way leaves the stream alone.
    pub fn chance(&mut self, p: f64) -> bool {
        if p >= 1.0 {
            true
        } else if p > 0.0 {
            self.unit() < p
        } else {
            false
        }
    }

    /// Uniform in [0, n) (Lemire's multiply-shift; the bias is below n / 2^64); 0 when n
    /// is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Fills `buf` with random bytes (eight per draw, little-endian).
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        self.fill(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_splitmix64() {
        // The first outputs of Vigna's splitmix64.c seeded with 0 and with 1234567.
        let mut g = Rng::new(0);
        assert_eq!([g.next_u64(), g.next_u64(), g.next_u64()], [0xe220_a839_7b1d_cdaf, 0x6e78_9e6a_a1b9_65f4, 0x06c4_5d18_8009_454f]);
        let mut g = Rng::new(1_234_567);
        assert_eq!([g.next_u64(), g.next_u64()], [6_457_827_717_110_365_317, 3_203_168_211_198_807_973]);
    }

    #[test]
    fn same_seed_same_stream_other_seed_other_stream() {
        let draw = |seed| {
            let mut g = Rng::new(seed);
            (0..64).map(|_| g.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        assert_eq!(Rng::new(3).bytes(20), Rng::new(3).bytes(20));
        assert_eq!(Rng::new(3).bytes(20)[..8], Rng::new(3).next_u64().to_le_bytes());
    }

    #[test]
    fn ranges_hold_and_certain_decisions_take_no_draw() {
        let mut g = Rng::new(42);
        for n in [1u64, 2, 3, 10, 1 << 40, u64::MAX] {
            assert!((0..1000).all(|_| g.below(n) < n), "below({n})");
        }
        assert_eq!(g.below(0), 0);
        assert!((0..1000).all(|_| (0.0..1.0).contains(&g.unit())));
        assert!((0..1000).all(|_| {
            let u = g.unit_nonzero();
            u > 0.0 && u <= 1.0
        }));
        let before = g.clone();
        assert!(!g.chance(0.0) && !g.chance(-1.0) && !g.chance(f64::NAN) && g.chance(1.0) && g.chance(2.0));
        assert_eq!(g, before, "no draw for a certain decision");
        let hits = (0..10_000).filter(|_| g.chance(0.25)).count();
        assert!((2200..2800).contains(&hits), "about a quarter: {hits}");
        let mut seen = [0u32; 6];
        (0..6000).for_each(|_| seen[g.below(6) as usize] += 1);
        assert!(seen.iter().all(|&s| (850..1150).contains(&s)), "uniform: {seen:?}");
    }
}
