//! A small seedable pseudo-random source for ids, MACs and tokens.
//!
//! Nothing here is security-relevant: the simulator only needs values that look like AWS's and
//! do not repeat. A seed makes tests reproducible; production seeds from the OS.

use std::time::{SystemTime, UNIX_EPOCH};

/// SplitMix64 generator.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// Seeds from the OS; falls back to time and pid when the OS source is unavailable, since a
    /// simulator without randomness is still useful.
    pub fn from_entropy() -> Self {
        let mut buf = [0u8; 8];
        let seed = match getrandom::fill(&mut buf) {
            Ok(()) => u64::from_le_bytes(buf),
            Err(_) => {
                let nanos = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0);
                nanos ^ (u64::from(std::process::id()) << 32)
            }
        };
        Self::seeded(seed)
    }

    /// A generator with a fixed seed (tests).
    pub fn seeded(seed: u64) -> Self {
        Self { state: seed }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform draw from [0, 1): the top 53 bits, which is all an `f64` can hold exactly.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `n` lowercase hex digits.
    pub fn hex(&mut self, n: usize) -> String {
        let mut out = String::with_capacity(n);
        while out.len() < n {
            let word = self.next_u64();
            for shift in (0..16).rev() {
                if out.len() == n {
                    break;
                }
                let nibble = ((word >> (shift * 4)) & 0xf) as u32;
                out.push(char::from_digit(nibble, 16).unwrap_or('0'));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_has_the_requested_length_and_alphabet() {
        let mut r = Rng::seeded(7);
        for n in [0, 1, 16, 17, 40] {
            let h = r.hex(n);
            assert_eq!(h.len(), n);
            assert!(
                h.chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            );
        }
    }

    #[test]
    fn unit_stays_in_range_and_spreads() {
        let mut r = Rng::seeded(3);
        let draws: Vec<f64> = (0..1000).map(|_| r.unit()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        let low = draws.iter().filter(|d| **d < 0.5).count();
        assert!((400..600).contains(&low), "{low} of 1000 below 0.5");
    }

    #[test]
    fn same_seed_same_sequence() {
        let (mut a, mut b) = (Rng::seeded(1), Rng::seeded(1));
        assert_eq!(a.hex(32), b.hex(32));
        assert_ne!(Rng::seeded(1).hex(32), Rng::seeded(2).hex(32));
    }
}
