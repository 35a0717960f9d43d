//! Resource ids and MAC addresses shaped like AWS's, never repeated within one model.

use std::collections::HashSet;

use crate::rand::Rng;

/// Hands out unique ids (`eni-` + 17 hex digits, ...) and locally administered unicast MACs.
#[derive(Debug, Clone)]
pub struct IdGen {
    rng: Rng,
    issued: HashSet<String>,
}

impl IdGen {
    /// A generator over `rng`.
    pub fn new(rng: Rng) -> Self {
        Self {
            rng,
            issued: HashSet::new(),
        }
    }

    /// A fresh `<prefix>-0` + 16 hex digits (17 in all, the length of current AWS ids).
    pub fn id(&mut self, prefix: &str) -> String {
        loop {
            let id = format!("{prefix}-0{}", self.rng.hex(16));
            if self.issued.insert(id.clone()) {
                return id;
            }
        }
    }

    /// A fresh MAC `02:xx:xx:xx:xx:xx`: locally administered (bit 1 set), unicast (bit 0 clear).
    pub fn mac(&mut self) -> String {
        loop {
            let h = self.rng.hex(10);
            let b = h.as_bytes();
            let mac = format!(
                "02:{}{}:{}{}:{}{}:{}{}:{}{}",
                b[0] as char,
                b[1] as char,
                b[2] as char,
                b[3] as char,
                b[4] as char,
                b[5] as char,
                b[6] as char,
                b[7] as char,
                b[8] as char,
                b[9] as char
            );
            if self.issued.insert(mac.clone()) {
                return mac;
            }
        }
    }

    /// 64 random bits (the VPC's IPv6 block).
    pub fn next_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// Random hex for tokens and request ids.
    pub fn hex(&mut self, n: usize) -> String {
        self.rng.hex(n)
    }
}

/// True when `id` is `<prefix>-` followed by 8 or 17 lowercase hex digits (both lengths exist).
pub fn well_formed(id: &str, prefix: &str) -> bool {
    let Some(rest) = id.strip_prefix(prefix).and_then(|r| r.strip_prefix('-')) else {
        return false;
    };
    matches!(rest.len(), 8 | 17)
        && rest
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_look_like_aws_ids_and_never_repeat() {
        let mut g = IdGen::new(Rng::seeded(3));
        let mut seen = HashSet::new();
        for _ in 0..2000 {
            let id = g.id("eni");
            assert!(well_formed(&id, "eni"), "{id}");
            assert_eq!(id.len(), "eni-".len() + 17);
            assert!(seen.insert(id));
        }
    }

    #[test]
    fn macs_are_local_unicast() {
        let mut g = IdGen::new(Rng::seeded(4));
        let mac = g.mac();
        assert!(mac.starts_with("02:"), "{mac}");
        assert_eq!(mac.split(':').count(), 6);
    }

    #[test]
    fn well_formed_checks_prefix_and_hex() {
        assert!(well_formed("eni-00000088", "eni"));
        assert!(well_formed("eni-0123456789abcdef0", "eni"));
        assert!(!well_formed("eni-xyz", "eni"));
        assert!(!well_formed("i-00000088", "eni"));
        assert!(!well_formed("eni-0123456789ABCDEF0", "eni"));
        assert!(!well_formed("eni-123", "eni"));
    }
}
