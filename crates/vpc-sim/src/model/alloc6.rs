//! IPv6 bookkeeping for one subnet's /64: single addresses and /80 delegated prefixes.
//!
//! EC2 reserves the first four and the last address of a subnet's IPv6 CIDR as it does for IPv4.
//! Single addresses are handed out lowest first from `::4`, so they stay inside the first /80;
//! a delegated /80 must hold no reserved and no assigned address, so prefixes start at the second
//! /80 (`<subnet>:1::/80`) and never meet the single addresses until a /64's first 2^80 addresses
//! run out, which no test will see. Readable, deterministic addresses beat EC2's random ones here:
//! nothing the CNI does depends on where in the /64 an address lies.

use std::collections::BTreeSet;
use std::net::Ipv6Addr;

use ipnetwork::Ipv6Network;

use super::alloc::{Space, TakeError};

/// Length of a subnet's IPv6 CIDR, as EC2 requires.
pub const SUBNET_V6_LEN: u8 = 64;
/// Length of a delegated IPv6 prefix (`Ipv6PrefixCount` hands out /80s).
pub const PREFIX_V6_LEN: u8 = 80;
/// Addresses in one /80.
const PREFIX_SIZE: u128 = 1 << (128 - PREFIX_V6_LEN);
/// /80s in one /64.
const PREFIXES_PER_SUBNET: u128 = 1 << (PREFIX_V6_LEN - SUBNET_V6_LEN);
const RESERVED_AT_START: u128 = 4;

impl Space for Ipv6Space {
    type Addr = Ipv6Addr;
    type Net = Ipv6Network;
    fn take(&mut self, ip: Ipv6Addr) -> Result<(), TakeError> {
        Ipv6Space::take(self, ip)
    }
    fn take_any(&mut self, n: u32) -> Option<Vec<Ipv6Addr>> {
        Ipv6Space::take_any(self, n)
    }
    fn take_prefix(&mut self, p: Ipv6Network) -> Result<(), TakeError> {
        Ipv6Space::take_prefix(self, p)
    }
    fn take_prefixes(&mut self, n: u32) -> Option<Vec<Ipv6Network>> {
        Ipv6Space::take_prefixes(self, n)
    }
    fn release(&mut self, ip: Ipv6Addr) {
        Ipv6Space::release(self, ip)
    }
    fn release_prefix(&mut self, p: Ipv6Network) {
        Ipv6Space::release_prefix(self, p)
    }
}

/// The used IPv6 addresses and prefixes of one subnet.
#[derive(Debug, Clone)]
pub struct Ipv6Space {
    cidr: Ipv6Network,
    addrs: BTreeSet<u128>,
    /// Start addresses of the assigned /80s.
    prefixes: BTreeSet<u128>,
}

impl Ipv6Space {
    /// An empty space over `cidr` (the caller validates the /64).
    pub fn new(cidr: Ipv6Network) -> Self {
        Self {
            cidr,
            addrs: BTreeSet::new(),
            prefixes: BTreeSet::new(),
        }
    }

    fn first(&self) -> u128 {
        u128::from(self.cidr.network())
    }

    fn last(&self) -> u128 {
        self.first() | (u128::MAX >> self.cidr.prefix())
    }

    fn is_reserved(&self, a: u128) -> bool {
        a < self.first() + RESERVED_AT_START || a == self.last()
    }

    /// The assigned /80 holding `a`, if any.
    fn in_prefix(&self, a: u128) -> Option<u128> {
        let start = a & !(PREFIX_SIZE - 1);
        self.prefixes.contains(&start).then_some(start)
    }

    /// Whether `ip` is assigned, alone or inside a delegated prefix.
    pub fn in_use(&self, ip: Ipv6Addr) -> bool {
        let a = u128::from(ip);
        self.addrs.contains(&a) || self.in_prefix(a).is_some()
    }

    /// Takes `ip` if it is inside the subnet, not reserved and free.
    pub fn take(&mut self, ip: Ipv6Addr) -> Result<(), TakeError> {
        let a = u128::from(ip);
        if !self.cidr.contains(ip) {
            return Err(TakeError::OutsideSubnet);
        }
        if self.is_reserved(a) {
            return Err(TakeError::Reserved);
        }
        if self.in_use(ip) {
            return Err(TakeError::InUse);
        }
        self.addrs.insert(a);
        Ok(())
    }

    /// Takes `n` free addresses, lowest first, or none when fewer are free.
    pub fn take_any(&mut self, n: u32) -> Option<Vec<Ipv6Addr>> {
        let mut out = Vec::with_capacity(n as usize);
        let mut a = self.first() + RESERVED_AT_START;
        // Each step either takes an address, passes a used one or jumps a whole prefix, so the
        // loop runs at most n + |addrs| + |prefixes| times before the end of the /64.
        while out.len() < n as usize && a < self.last() {
            if let Some(start) = self.in_prefix(a) {
                a = start + PREFIX_SIZE;
                continue;
            }
            if !self.addrs.contains(&a) {
                out.push(a);
            }
            a += 1;
        }
        if out.len() < n as usize {
            return None;
        }
        self.addrs.extend(out.iter().copied());
        Some(out.into_iter().map(Ipv6Addr::from).collect())
    }

    fn block_is_free(&self, start: u128) -> bool {
        let end = start + PREFIX_SIZE - 1;
        !self.is_reserved(start)
            && !self.is_reserved(end)
            && !self.prefixes.contains(&start)
            && self.addrs.range(start..=end).next().is_none()
    }

    /// Takes `n` free /80 prefixes, lowest first, or none when fewer exist.
    pub fn take_prefixes(&mut self, n: u32) -> Option<Vec<Ipv6Network>> {
        let starts: Vec<u128> = (0..PREFIXES_PER_SUBNET)
            .map(|i| self.first() + i * PREFIX_SIZE)
            .filter(|s| self.block_is_free(*s))
            .take(n as usize)
            .collect();
        if starts.len() < n as usize {
            return None;
        }
        let mut out = Vec::with_capacity(starts.len());
        for s in starts {
            out.push(Ipv6Network::new(Ipv6Addr::from(s), PREFIX_V6_LEN).ok()?);
            self.prefixes.insert(s);
        }
        Some(out)
    }

    /// Takes `p` if it is a /80 on a /80 boundary inside the subnet, holding nothing reserved or
    /// assigned.
    pub fn take_prefix(&mut self, p: Ipv6Network) -> Result<(), TakeError> {
        let start = u128::from(p.network());
        if p.prefix() != PREFIX_V6_LEN || p.ip() != p.network() {
            return Err(TakeError::Misaligned);
        }
        if !self.cidr.contains(p.network()) {
            return Err(TakeError::OutsideSubnet);
        }
        if self.is_reserved(start) || self.is_reserved(start + PREFIX_SIZE - 1) {
            return Err(TakeError::Reserved);
        }
        if !self.block_is_free(start) {
            return Err(TakeError::InUse);
        }
        self.prefixes.insert(start);
        Ok(())
    }

    /// Gives `ip` back.
    pub fn release(&mut self, ip: Ipv6Addr) {
        self.addrs.remove(&u128::from(ip));
    }

    /// Gives the prefix `p` back.
    pub fn release_prefix(&mut self, p: Ipv6Network) {
        self.prefixes.remove(&u128::from(p.network()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> Ipv6Space {
        Ipv6Space::new("2001:db8:1:200::/64".parse().unwrap())
    }

    fn ip(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    fn net(s: &str) -> Ipv6Network {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_skip_the_reserved_ones_and_never_repeat() {
        let mut s = space();
        for r in [
            "2001:db8:1:200::",
            "2001:db8:1:200::3",
            "2001:db8:1:200:ffff:ffff:ffff:ffff",
        ] {
            assert_eq!(s.take(ip(r)), Err(TakeError::Reserved), "{r}");
        }
        assert_eq!(
            s.take(ip("2001:db8:1:201::5")),
            Err(TakeError::OutsideSubnet)
        );
        assert_eq!(s.take(ip("2001:db8:1:200::5")), Ok(()));
        let got = s.take_any(3).unwrap();
        let got: Vec<String> = got.iter().map(|a| a.to_string()).collect();
        assert_eq!(
            got,
            [
                "2001:db8:1:200::4",
                "2001:db8:1:200::6",
                "2001:db8:1:200::7"
            ]
        );
        assert_eq!(s.take(ip("2001:db8:1:200::6")), Err(TakeError::InUse));
        s.release(ip("2001:db8:1:200::6"));
        assert_eq!(s.take(ip("2001:db8:1:200::6")), Ok(()));
    }

    #[test]
    fn prefixes_are_aligned_80s_clear_of_addresses_and_reserved_ones() {
        let mut s = space();
        s.take_any(1).unwrap();
        let got = s.take_prefixes(2).unwrap();
        assert_eq!(got[0].to_string(), "2001:db8:1:200:1::/80");
        assert_eq!(got[1].to_string(), "2001:db8:1:200:2::/80");
        assert!(s.in_use(ip("2001:db8:1:200:1:ffff:ffff:ffff")));
        assert_eq!(
            s.take(ip("2001:db8:1:200:2::9")),
            Err(TakeError::InUse),
            "inside a delegated prefix"
        );
        assert_eq!(
            s.take_prefix(net("2001:db8:1:200::/80")),
            Err(TakeError::Reserved)
        );
        assert_eq!(
            s.take_prefix(net("2001:db8:1:200:ffff::/80")),
            Err(TakeError::Reserved),
            "holds the subnet's last address"
        );
        assert_eq!(
            s.take_prefix(net("2001:db8:1:200:2::/80")),
            Err(TakeError::InUse)
        );
        assert_eq!(
            s.take_prefix(net("2001:db8:1:200:3::/96")),
            Err(TakeError::Misaligned)
        );
        assert_eq!(
            s.take_prefix(net("2001:db8:1:200:3::1/80")),
            Err(TakeError::Misaligned)
        );
        assert_eq!(
            s.take_prefix(net("2001:db8:1:201:3::/80")),
            Err(TakeError::OutsideSubnet)
        );
        assert_eq!(s.take_prefix(net("2001:db8:1:200:3::/80")), Ok(()));
        s.release_prefix(got[0]);
        assert_eq!(s.take_prefixes(1).unwrap(), vec![got[0]], "reused");
    }

    #[test]
    fn addresses_jump_over_a_prefix_in_their_way() {
        // Unreachable through the public API short of 2^80 assignments (the first /80 holds the
        // reserved addresses): put a prefix there by hand to check the jump itself.
        let mut s = space();
        let first = s.first();
        s.prefixes.insert(first);
        let got = s.take_any(2).unwrap();
        assert_eq!(got[0].to_string(), "2001:db8:1:200:1::");
        assert_eq!(got[1].to_string(), "2001:db8:1:200:1::1");
    }
}
