//! Address bookkeeping for one subnet: single addresses and /28 prefixes, AWS reservations.
//!
//! AWS keeps the first four addresses (network, router, DNS, future use) and the last one
//! (broadcast) of every subnet. A delegated prefix is a /28-aligned block of 16 addresses none of
//! which is reserved or in use; it then occupies all 16.
//!
//! Addresses held by someone outside the model's ENIs ("strays", see [`super::fragment`]) are
//! kept apart from the ENIs' own, so that setting a new fragmentation level can take every
//! stray back without ever freeing an address an ENI holds, and an ENI's release can never
//! free a stray.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnetwork::Ipv4Network;

use super::fragment::Fragment;

/// Addresses in one /28 prefix.
pub const PREFIX_LEN: u8 = 28;
const PREFIX_SIZE: u32 = 16;
const RESERVED_AT_START: u32 = 4;

/// Why a specific address or prefix cannot be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakeError {
    /// Outside the subnet's CIDR.
    OutsideSubnet,
    /// One of the five addresses AWS reserves.
    Reserved,
    /// Already assigned (or inside an assigned prefix).
    InUse,
    /// A prefix that is not a /28 on a /28 boundary.
    Misaligned,
}

/// What an assignment takes from a subnet, whatever its family: the IPv4 and the IPv6
/// allocators answer the same four requests, so one `take_request` serves both.
pub trait Space {
    /// One address.
    type Addr: Copy + Eq + std::hash::Hash + std::fmt::Display;
    /// One delegated prefix.
    type Net: Copy + Eq + std::hash::Hash + std::fmt::Display;
    /// Takes `ip`, if it is free and usable.
    fn take(&mut self, ip: Self::Addr) -> Result<(), TakeError>;
    /// Takes `n` free addresses, or none.
    fn take_any(&mut self, n: u32) -> Option<Vec<Self::Addr>>;
    /// Takes prefix `p`, if it is free and aligned.
    fn take_prefix(&mut self, p: Self::Net) -> Result<(), TakeError>;
    /// Takes `n` free prefixes, or none.
    fn take_prefixes(&mut self, n: u32) -> Option<Vec<Self::Net>>;
    /// Gives back an address taken with `take` or `take_any`.
    fn release(&mut self, ip: Self::Addr);
    /// Gives back a prefix taken with `take_prefix` or `take_prefixes`.
    fn release_prefix(&mut self, p: Self::Net);
}

impl Space for AddressSpace {
    type Addr = Ipv4Addr;
    type Net = Ipv4Network;
    fn take(&mut self, ip: Ipv4Addr) -> Result<(), TakeError> {
        AddressSpace::take(self, ip)
    }
    fn take_any(&mut self, n: u32) -> Option<Vec<Ipv4Addr>> {
        AddressSpace::take_any(self, n)
    }
    fn take_prefix(&mut self, p: Ipv4Network) -> Result<(), TakeError> {
        AddressSpace::take_prefix(self, p)
    }
    fn take_prefixes(&mut self, n: u32) -> Option<Vec<Ipv4Network>> {
        AddressSpace::take_prefixes(self, n)
    }
    fn release(&mut self, ip: Ipv4Addr) {
        AddressSpace::release(self, ip)
    }
    fn release_prefix(&mut self, p: Ipv4Network) {
        AddressSpace::release_prefix(self, p)
    }
}

/// The used addresses of one subnet.
#[derive(Debug, Clone)]
pub struct AddressSpace {
    cidr: Ipv4Network,
    /// Held by the model's ENIs.
    used: BTreeSet<u32>,
    /// Held by someone else; disjoint from `used`.
    strays: BTreeSet<u32>,
    /// The assignable addresses neither in `used` nor in `strays`, as ranges (first -> last,
    /// inclusive; disjoint, none adjacent to another): an index of the two sets, so finding
    /// the lowest free addresses does not walk every used one.
    free: BTreeMap<u32, u32>,
    fragment: Fragment,
}

impl AddressSpace {
    /// An empty space over `cidr` (the caller validates /16../28).
    pub fn new(cidr: Ipv4Network) -> Self {
        let mut space = Self {
            cidr,
            used: BTreeSet::new(),
            strays: BTreeSet::new(),
            free: BTreeMap::new(),
            fragment: Fragment::None,
        };
        let (lo, hi) = (space.first() + RESERVED_AT_START, space.last() - 1);
        if lo <= hi {
            space.free.insert(lo, hi);
        }
        space
    }

    /// Takes `a`, free, out of the free ranges.
    fn occupy(&mut self, a: u32) {
        let Some((&lo, &hi)) = self.free.range(..=a).next_back() else {
            return;
        };
        if hi < a {
            return;
        }
        self.free.remove(&lo);
        if lo < a {
            self.free.insert(lo, a - 1);
        }
        if a < hi {
            self.free.insert(a + 1, hi);
        }
    }

    /// Puts `a`, assignable and no longer used nor a stray, back into the free ranges.
    fn vacate(&mut self, a: u32) {
        let mut lo = a;
        let mut hi = a;
        if let Some((&l, &h)) = self.free.range(..a).next_back()
            && h.checked_add(1) == Some(a)
        {
            lo = l;
        }
        if let Some(h) = a.checked_add(1).and_then(|next| self.free.remove(&next)) {
            hi = h;
        }
        self.free.insert(lo, hi);
    }

    fn first(&self) -> u32 {
        u32::from(self.cidr.network())
    }

    fn last(&self) -> u32 {
        u32::from(self.cidr.broadcast())
    }

    /// The subnet's router address (network + 1), where the fabric puts the gateway.
    pub fn router(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.first() + 1)
    }

    /// True for the four leading addresses and the broadcast address.
    pub fn is_reserved(&self, a: u32) -> bool {
        a < self.first() + RESERVED_AT_START || a == self.last()
    }

    /// Free, assignable addresses left (what DescribeSubnets calls availableIpAddressCount;
    /// EC2 counts addresses of other owners in the subnet as taken, so strays are not free).
    pub fn available(&self) -> u32 {
        let usable = self.cidr.size().saturating_sub(RESERVED_AT_START + 1);
        usable.saturating_sub(self.used.len() as u32 + self.strays())
    }

    /// Whether `ip` is assigned (alone or inside a prefix), or held by someone else.
    pub fn in_use(&self, ip: Ipv4Addr) -> bool {
        self.taken(u32::from(ip))
    }

    fn taken(&self, a: u32) -> bool {
        self.used.contains(&a) || self.strays.contains(&a)
    }

    /// Takes `ip` if it is free and assignable.
    pub fn take(&mut self, ip: Ipv4Addr) -> Result<(), TakeError> {
        let a = u32::from(ip);
        if !self.cidr.contains(ip) {
            return Err(TakeError::OutsideSubnet);
        }
        if self.is_reserved(a) {
            return Err(TakeError::Reserved);
        }
        if self.taken(a) {
            return Err(TakeError::InUse);
        }
        self.used.insert(a);
        self.occupy(a);
        Ok(())
    }

    /// Takes `n` free addresses, lowest first, or none at all when fewer are free.
    pub fn take_any(&mut self, n: u32) -> Option<Vec<Ipv4Addr>> {
        if n > self.available() {
            return None;
        }
        // The lowest free ones: the free ranges hold exactly the assignable addresses that
        // are neither used nor strays.
        let out: Vec<u32> = self
            .free
            .iter()
            .flat_map(|(&lo, &hi)| lo..=hi)
            .take(n as usize)
            .collect();
        if out.len() < n as usize {
            return None;
        }
        for a in &out {
            self.used.insert(*a);
            self.occupy(*a);
        }
        Some(out.into_iter().map(Ipv4Addr::from).collect())
    }

    fn block_is_free(&self, start: u32) -> bool {
        let end = start + PREFIX_SIZE - 1;
        !self.is_reserved(start)
            && !self.is_reserved(end)
            && self.used.range(start..=end).next().is_none()
            && self.strays.range(start..=end).next().is_none()
    }

    /// Starts of the subnet's /28-aligned blocks, lowest first.
    fn blocks(&self) -> impl Iterator<Item = u32> {
        let (first, last) = (self.first(), self.last());
        (first..=last)
            .step_by(PREFIX_SIZE as usize)
            .filter(move |s| s + PREFIX_SIZE - 1 <= last)
    }

    /// Aligned /28 blocks wholly free: how many prefixes could still be delegated.
    pub fn free_prefixes(&self) -> u32 {
        self.blocks().filter(|s| self.block_is_free(*s)).count() as u32
    }

    /// The fragmentation level last set.
    pub fn fragment(&self) -> Fragment {
        self.fragment
    }

    /// Addresses held by someone outside the model's ENIs.
    pub fn strays(&self) -> u32 {
        self.strays.len() as u32
    }

    /// Takes every stray back, then puts one on a free address of each block `f` selects among
    /// those that could hold a prefix at all (no reserved address). The block's last address is
    /// preferred, else its highest free one: low addresses are what `take_any` hands out first,
    /// so the strays stay out of the way of single addresses. A block with no free address is
    /// skipped; it cannot hold a prefix anyway.
    pub fn set_fragment(&mut self, f: Fragment) {
        for a in std::mem::take(&mut self.strays) {
            self.vacate(a);
        }
        self.fragment = f;
        let eligible: Vec<u32> = self
            .blocks()
            .filter(|s| !self.is_reserved(*s) && !self.is_reserved(s + PREFIX_SIZE - 1))
            .collect();
        for (i, start) in eligible.into_iter().enumerate() {
            if !f.selects(i as u64) {
                continue;
            }
            let free = (start..start + PREFIX_SIZE)
                .rev()
                .find(|a| !self.used.contains(a));
            if let Some(a) = free {
                self.strays.insert(a);
                self.occupy(a);
            }
        }
    }

    /// Takes `n` free /28 prefixes, lowest first, or none at all when fewer exist.
    pub fn take_prefixes(&mut self, n: u32) -> Option<Vec<Ipv4Network>> {
        let starts: Vec<u32> = self
            .blocks()
            .filter(|s| self.block_is_free(*s))
            .take(n as usize)
            .collect();
        if starts.len() < n as usize {
            return None;
        }
        let mut out = Vec::with_capacity(starts.len());
        for s in starts {
            self.occupy_block(s);
            out.push(to_prefix(s)?);
        }
        Some(out)
    }

    /// Takes the given prefix if it is an aligned /28 inside the subnet and entirely free.
    pub fn take_prefix(&mut self, p: Ipv4Network) -> Result<(), TakeError> {
        let start = u32::from(p.network());
        if p.prefix() != PREFIX_LEN || p.ip() != p.network() {
            return Err(TakeError::Misaligned);
        }
        if !self.cidr.contains(p.network()) || !self.cidr.contains(p.broadcast()) {
            return Err(TakeError::OutsideSubnet);
        }
        if self.is_reserved(start) || self.is_reserved(start + PREFIX_SIZE - 1) {
            return Err(TakeError::Reserved);
        }
        if !self.block_is_free(start) {
            return Err(TakeError::InUse);
        }
        self.occupy_block(start);
        Ok(())
    }

    /// Takes the free block at `start` whole.
    fn occupy_block(&mut self, start: u32) {
        for a in start..start + PREFIX_SIZE {
            self.used.insert(a);
            self.occupy(a);
        }
    }

    /// Gives `ip` back.
    pub fn release(&mut self, ip: Ipv4Addr) {
        let a = u32::from(ip);
        if self.used.remove(&a) {
            self.vacate(a);
        }
    }

    /// Gives all 16 addresses of `p` back.
    pub fn release_prefix(&mut self, p: Ipv4Network) {
        let start = u32::from(p.network());
        for a in start..start + PREFIX_SIZE {
            if self.used.remove(&a) {
                self.vacate(a);
            }
        }
    }
}

fn to_prefix(start: u32) -> Option<Ipv4Network> {
    Ipv4Network::new(Ipv4Addr::from(start), PREFIX_LEN).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(cidr: &str) -> AddressSpace {
        AddressSpace::new(cidr.parse().unwrap())
    }

    #[test]
    fn reserves_first_four_and_last() {
        let mut s = space("10.0.0.0/28");
        assert_eq!(s.available(), 11);
        for a in ["10.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.15"] {
            assert_eq!(s.take(a.parse().unwrap()), Err(TakeError::Reserved), "{a}");
        }
        let all = s.take_any(11).unwrap();
        assert_eq!(all.first().unwrap().to_string(), "10.0.0.4");
        assert_eq!(all.last().unwrap().to_string(), "10.0.0.14");
        assert_eq!(s.available(), 0);
        assert_eq!(s.take_any(1), None);
    }

    #[test]
    fn take_any_is_all_or_nothing() {
        let mut s = space("10.0.0.0/28");
        assert_eq!(s.take_any(12), None);
        assert_eq!(s.available(), 11);
    }

    #[test]
    fn specific_addresses_are_checked() {
        let mut s = space("10.0.1.0/24");
        let ip: Ipv4Addr = "10.0.1.50".parse().unwrap();
        assert_eq!(s.take(ip), Ok(()));
        assert_eq!(s.take(ip), Err(TakeError::InUse));
        assert_eq!(
            s.take("10.0.2.5".parse().unwrap()),
            Err(TakeError::OutsideSubnet)
        );
        s.release(ip);
        assert_eq!(s.take(ip), Ok(()));
    }

    #[test]
    fn prefixes_are_aligned_free_and_disjoint() {
        let mut s = space("10.0.0.0/26");
        // The first /28 holds reserved .0-.3 and the last holds the broadcast: two remain.
        s.take("10.0.0.20".parse().unwrap()).unwrap();
        let got = s.take_prefixes(1).unwrap();
        assert_eq!(got[0].to_string(), "10.0.0.32/28");
        assert_eq!(
            s.take_prefixes(1),
            None,
            "10.0.0.16/28 holds .20, .48/28 the broadcast"
        );
        assert_eq!(s.available(), 59 - 1 - 16);
        s.release_prefix(got[0]);
        assert_eq!(s.available(), 58);
    }

    #[test]
    fn specific_prefix_rules() {
        let mut s = space("10.0.0.0/24");
        let p = |t: &str| t.parse::<Ipv4Network>().unwrap();
        assert_eq!(s.take_prefix(p("10.0.0.8/28")), Err(TakeError::Misaligned));
        assert_eq!(s.take_prefix(p("10.0.0.16/27")), Err(TakeError::Misaligned));
        assert_eq!(s.take_prefix(p("10.0.0.0/28")), Err(TakeError::Reserved));
        assert_eq!(
            s.take_prefix(p("10.0.1.0/28")),
            Err(TakeError::OutsideSubnet)
        );
        assert_eq!(s.take_prefix(p("10.0.0.16/28")), Ok(()));
        assert_eq!(s.take_prefix(p("10.0.0.16/28")), Err(TakeError::InUse));
        assert!(s.in_use("10.0.0.31".parse().unwrap()));
        assert_eq!(s.take("10.0.0.17".parse().unwrap()), Err(TakeError::InUse));
    }

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn strays_of(s: &AddressSpace) -> Vec<String> {
        s.strays
            .iter()
            .map(|a| Ipv4Addr::from(*a).to_string())
            .collect()
    }

    #[test]
    fn all_puts_a_stray_at_the_end_of_every_block_that_could_be_a_prefix() {
        let mut s = space("10.0.0.0/24");
        assert_eq!(
            s.free_prefixes(),
            14,
            "the first and last /28 hold reserved addresses"
        );
        s.set_fragment(Fragment::All);
        let want: Vec<String> = (1..15).map(|b| format!("10.0.0.{}", b * 16 + 15)).collect();
        assert_eq!(strays_of(&s), want);
        assert_eq!((s.fragment(), s.strays()), (Fragment::All, 14));
        assert_eq!(s.available(), 251 - 14);
        assert_eq!(s.free_prefixes(), 0);
        assert_eq!(s.take_prefixes(1), None);
        assert_eq!(
            s.take_prefix("10.0.0.16/28".parse().unwrap()),
            Err(TakeError::InUse)
        );
        assert_eq!(s.take(ip("10.0.0.31")), Err(TakeError::InUse));
        assert!(s.in_use(ip("10.0.0.31")));
    }

    #[test]
    fn single_addresses_are_still_assigned_around_the_strays() {
        let mut s = space("10.0.0.0/24");
        s.set_fragment(Fragment::All);
        let got = s.take_any(s.available()).unwrap();
        assert_eq!(got.len(), 237);
        let strays = strays_of(&s);
        assert!(got.iter().all(|a| !strays.contains(&a.to_string())));
        assert_eq!((s.available(), s.take_any(1)), (0, None));
    }

    #[test]
    fn none_takes_the_strays_back_and_prefixes_are_free_again() {
        let mut s = space("10.0.0.0/24");
        s.set_fragment(Fragment::All);
        s.set_fragment(Fragment::None);
        assert_eq!((s.strays(), s.available(), s.free_prefixes()), (0, 251, 14));
        assert_eq!(s.take_prefixes(1).unwrap()[0].to_string(), "10.0.0.16/28");
    }

    #[test]
    fn a_percentage_fragments_that_share_of_blocks_evenly() {
        let mut s = space("10.0.0.0/24");
        s.set_fragment(Fragment::Percent(50));
        // Eligible blocks 1, 3, .., 13 of 0..14, i.e. subnet blocks 2, 4, .., 14.
        let want: Vec<String> = (1..8).map(|k| format!("10.0.0.{}", k * 32 + 15)).collect();
        assert_eq!(strays_of(&s), want);
        assert_eq!((s.free_prefixes(), s.available()), (7, 244));
        s.set_fragment(Fragment::Percent(10));
        assert_eq!(strays_of(&s), ["10.0.0.175"], "round-down of 1.4 blocks");
        s.set_fragment(Fragment::Percent(0));
        assert_eq!(s.strays(), 0);
        s.set_fragment(Fragment::Percent(100));
        assert_eq!((s.strays(), s.free_prefixes()), (14, 0));
    }

    #[test]
    fn a_stray_goes_to_the_highest_free_address_and_skips_full_blocks() {
        let mut s = space("10.0.0.0/26");
        s.take(ip("10.0.0.31")).unwrap();
        s.take(ip("10.0.0.30")).unwrap();
        s.take_prefix("10.0.0.32/28".parse().unwrap()).unwrap();
        s.set_fragment(Fragment::All);
        // Block .48/28 holds the broadcast: never eligible.
        assert_eq!(strays_of(&s), ["10.0.0.29"]);
        assert_eq!(s.available(), 59 - 2 - 16 - 1);
    }

    #[test]
    fn strays_and_eni_addresses_never_release_each_other() {
        let mut s = space("10.0.0.0/24");
        s.take(ip("10.0.0.20")).unwrap();
        s.set_fragment(Fragment::All);
        let after_all = s.available();
        // An ENI's release of an address it does not hold must not free someone else's.
        s.release(ip("10.0.0.31"));
        s.release_prefix("10.0.0.32/28".parse().unwrap());
        assert_eq!((s.strays(), s.available()), (14, after_all));
        assert!(s.in_use(ip("10.0.0.31")) && s.in_use(ip("10.0.0.47")));
        // Addresses ENIs took while fragmented stay theirs when the strays go.
        let later = s.take_any(3).unwrap();
        s.set_fragment(Fragment::None);
        assert_eq!(s.strays(), 0);
        for a in later.iter().chain([&ip("10.0.0.20")]) {
            assert!(s.in_use(*a), "{a}");
            assert_eq!(s.take(*a), Err(TakeError::InUse), "{a}");
        }
        assert_eq!(s.available(), 251 - 4);
        // Re-fragmenting never moves an ENI's address into the stray set.
        s.set_fragment(Fragment::All);
        s.release(ip("10.0.0.20"));
        assert!(!s.in_use(ip("10.0.0.20")));
        assert_eq!(s.strays(), 14);
    }

    /// The free ranges as single addresses.
    fn free_of(s: &AddressSpace) -> Vec<u32> {
        s.free.iter().flat_map(|(&lo, &hi)| lo..=hi).collect()
    }

    /// What the free ranges must hold: every assignable address neither used nor a stray.
    fn free_by_walk(s: &AddressSpace) -> Vec<u32> {
        (s.first()..=s.last())
            .filter(|a| !s.is_reserved(*a) && !s.taken(*a))
            .collect()
    }

    #[test]
    fn the_free_ranges_follow_every_change_and_give_the_lowest_free_addresses() {
        let mut rng = crate::rand::Rng::seeded(7);
        let mut s = space("10.0.0.0/24");
        let mut held: Vec<Ipv4Addr> = Vec::new();
        let mut prefixes: Vec<Ipv4Network> = Vec::new();
        let mut pick = |n: usize| (rng.next_u64() % n as u64) as usize;
        for step in 0..3_000 {
            match pick(8) {
                0 | 1 => {
                    let n = pick(6) as u32;
                    let want: Vec<Ipv4Addr> = free_by_walk(&s)
                        .into_iter()
                        .take(n as usize)
                        .map(Ipv4Addr::from)
                        .collect();
                    match s.take_any(n) {
                        Some(got) => {
                            assert_eq!(got, want, "step {step}");
                            held.extend(got);
                        }
                        None => assert!(want.len() < n as usize, "step {step}"),
                    }
                }
                2 => {
                    let ip = Ipv4Addr::from(s.first() + pick(256) as u32);
                    if s.take(ip).is_ok() {
                        held.push(ip);
                    }
                }
                3 | 4 if !held.is_empty() => {
                    let ip = held.swap_remove(pick(held.len()));
                    s.release(ip);
                }
                5 => {
                    if let Some(p) = s.take_prefixes(1) {
                        prefixes.extend(p);
                    }
                }
                6 if !prefixes.is_empty() => {
                    let p = prefixes.swap_remove(pick(prefixes.len()));
                    s.release_prefix(p);
                }
                7 => {
                    // Releasing what is not held (a stray, a free address) changes nothing.
                    s.release(Ipv4Addr::from(s.first() + pick(256) as u32));
                    if pick(10) == 0 {
                        let f = [Fragment::None, Fragment::All, Fragment::Percent(50)][pick(3)];
                        s.set_fragment(f);
                    }
                }
                _ => {}
            }
            assert_eq!(free_of(&s), free_by_walk(&s), "step {step}");
            let adjacent = s
                .free
                .iter()
                .zip(s.free.iter().skip(1))
                .any(|(a, b)| a.1 + 1 >= *b.0);
            assert!(!adjacent, "step {step}: ranges overlap or touch");
        }
    }

    #[test]
    fn a_subnet_too_small_for_an_eligible_block_gets_no_stray() {
        let mut s = space("10.0.0.0/28");
        s.set_fragment(Fragment::All);
        assert_eq!((s.strays(), s.available()), (0, 11));
    }
}
