//! IMDSv2 session tokens.

use std::collections::HashMap;

use crate::rand::Rng;

/// Longest token lifetime IMDS accepts (6 hours).
pub const MAX_TTL_SECONDS: u64 = 21_600;

/// Issued tokens and their expiry.
#[derive(Debug)]
pub struct Tokens {
    rng: Rng,
    expiry_ms: HashMap<String, u64>,
}

impl Tokens {
    /// An empty store.
    pub fn new(rng: Rng) -> Self {
        Self {
            rng,
            expiry_ms: HashMap::new(),
        }
    }

    /// Parses the TTL header value: whole seconds in 1..=21600.
    pub fn parse_ttl(value: Option<&str>) -> Option<u64> {
        value?
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|t| (1..=MAX_TTL_SECONDS).contains(t))
    }

    /// A new token valid for `ttl_s` seconds from `now_ms`.
    pub fn issue(&mut self, now_ms: u64, ttl_s: u64) -> String {
        self.expiry_ms.retain(|_, exp| *exp > now_ms);
        let token = format!("AQAEA{}", self.rng.hex(51));
        self.expiry_ms.insert(token.clone(), now_ms + ttl_s * 1000);
        token
    }

    /// Whether `token` was issued here and has not expired.
    pub fn valid(&self, token: &str, now_ms: u64) -> bool {
        self.expiry_ms.get(token).is_some_and(|exp| *exp > now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_bounds() {
        assert_eq!(Tokens::parse_ttl(Some("1")), Some(1));
        assert_eq!(Tokens::parse_ttl(Some("21600")), Some(21_600));
        for bad in [None, Some("0"), Some("21601"), Some("-5"), Some("ten")] {
            assert_eq!(Tokens::parse_ttl(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn tokens_expire() {
        let mut t = Tokens::new(Rng::seeded(1));
        let tok = t.issue(1_000, 2);
        assert!(t.valid(&tok, 2_999));
        assert!(!t.valid(&tok, 3_000));
        assert!(!t.valid("forged", 1_000));
    }
}
