//! What the planner needs to know of the pool at one moment: counts for the whole node and
//! per ENI, and which addresses and prefixes could be given back.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnetwork::Ipv4Network;

use crate::datastore::Pool;
use crate::model::{ADDRS_PER_PREFIX, EniInfo};
use crate::time::Timestamp;

/// Address counts. `available` excludes cooling addresses and `free_prefixes` counts only
/// prefixes whose 16 addresses are all available (see [`crate::plan()`] for why).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Totals {
    pub total: u32,
    pub assigned: u32,
    pub available: u32,
    pub free_prefixes: u32,
}

impl Totals {
    /// The counts without `part` (the pool without one ENI).
    pub fn without(self, part: Totals) -> Totals {
        Totals {
            total: self.total.saturating_sub(part.total),
            assigned: self.assigned.saturating_sub(part.assigned),
            available: self.available.saturating_sub(part.available),
            free_prefixes: self.free_prefixes.saturating_sub(part.free_prefixes),
        }
    }

    fn add(&mut self, part: Totals) {
        self.total += part.total;
        self.assigned += part.assigned;
        self.available += part.available;
        self.free_prefixes += part.free_prefixes;
    }
}

/// Something the pool can give back to EC2 in one piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unit {
    Ip(Ipv4Addr),
    Prefix(Ipv4Network),
}

impl Unit {
    /// Addresses it holds.
    pub fn size(self) -> u32 {
        match self {
            Unit::Ip(_) => 1,
            Unit::Prefix(_) => ADDRS_PER_PREFIX,
        }
    }

    fn start(self) -> Ipv4Addr {
        match self {
            Unit::Ip(ip) => ip,
            Unit::Prefix(p) => p.network(),
        }
    }
}

/// One ENI.
pub(super) struct EniView<'a> {
    pub info: &'a EniInfo,
    /// It gives no address to new pods (see [`Pool::exclude_from_pods`]): never grown, and
    /// only its assigned addresses count.
    pub excluded: bool,
    /// Address slots used: secondary /32s plus delegated prefixes (EC2 counts both against
    /// the ENI's IPv4 address limit).
    pub slots: u32,
    pub totals: Totals,
    pub cooling: u32,
    /// Available secondaries and wholly available prefixes, highest address first.
    pub releasable: Vec<Unit>,
    /// With prefix delegation, EC2 refuses prefixes in its subnet for now: it grows by /32s.
    pub refused: bool,
    /// With prefix delegation, EC2 refused prefixes in its subnet and the backoff has ended:
    /// one prefix is asked for (a probe) before its /32s are given up.
    pub probing: bool,
    /// The refusals began [`crate::PREFIX_RETRY_MAX`] ago or more: a probe may make room for
    /// itself even when the node needs none, so that a long fallback still ends.
    pub long_fallback: bool,
    /// With prefix delegation on an ENI whose subnet delegates prefixes, its available /32s
    /// (left from a fallback, or from before delegation was on): they go back whatever the
    /// targets say, and count nowhere in `totals`, so the pool grows by prefixes instead.
    pub retiring: Vec<Ipv4Addr>,
}

/// The whole pool, ENIs by device number.
pub(super) struct PoolView<'a> {
    pub enis: Vec<EniView<'a>>,
    pub totals: Totals,
    /// With prefix delegation, new ENIs are created with /32s for now.
    pub new_enis_refused: bool,
}

impl<'a> PoolView<'a> {
    pub fn new(pool: &'a Pool, now: Timestamp, prefix_delegation: bool) -> Self {
        let mut enis: Vec<EniView<'a>> = pool
            .enis()
            .map(|e| eni_view(pool, e, now, prefix_delegation))
            .collect();
        enis.sort_by_key(|e| (e.info.device_number, e.info.id.clone()));
        let mut totals = Totals::default();
        for e in &enis {
            totals.add(e.totals);
        }
        let new_enis_refused = prefix_delegation && pool.prefix_fallbacks().refuses_new_enis(now);
        PoolView {
            enis,
            totals,
            new_enis_refused,
        }
    }

    /// Available /32s that go back because prefixes are to be had again.
    pub fn retiring(&self) -> usize {
        self.enis.iter().map(|e| e.retiring.len()).sum()
    }
}

fn eni_view<'a>(
    pool: &Pool,
    info: &'a EniInfo,
    now: Timestamp,
    prefix_delegation: bool,
) -> EniView<'a> {
    let mut totals = Totals::default();
    let mut cooling = 0;
    let mut secondaries = 0;
    let mut releasable = Vec::new();
    let mut retiring = Vec::new();
    let mut prefix_available: BTreeMap<Ipv4Network, u32> = BTreeMap::new();
    let excluded = pool.is_excluded(&info.id);
    let fallback = pool
        .prefix_fallbacks()
        .subnets
        .get(&info.subnet_id)
        .filter(|_| prefix_delegation);
    let refused = fallback.is_some_and(|f| f.active(now));
    let probing = fallback.is_some_and(|f| !f.active(now));
    let long_fallback = fallback.is_some_and(|f| f.since.after(crate::PREFIX_RETRY_MAX) <= now);
    let retire = prefix_delegation && fallback.is_none() && !excluded;
    for (ip, slot) in pool.addresses(&info.id) {
        if excluded && !slot.is_assigned() {
            continue;
        }
        let available = slot.is_available(now);
        if retire && available && slot.prefix.is_none() {
            secondaries += 1;
            retiring.push(ip);
            continue;
        }
        totals.total += 1;
        totals.assigned += u32::from(slot.is_assigned());
        totals.available += u32::from(available);
        cooling += u32::from(slot.is_cooling(now));
        match slot.prefix {
            Some(p) => *prefix_available.entry(p).or_default() += u32::from(available),
            None => {
                secondaries += 1;
                if available {
                    releasable.push(Unit::Ip(ip));
                }
            }
        }
    }
    let prefixes = pool.prefixes(&info.id).count() as u32;
    for (prefix, available) in prefix_available {
        if available == ADDRS_PER_PREFIX {
            totals.free_prefixes += 1;
            releasable.push(Unit::Prefix(prefix));
        }
    }
    releasable.sort_by_key(|u| Reverse(u.start()));
    EniView {
        info,
        excluded,
        slots: secondaries + prefixes,
        totals,
        cooling,
        releasable,
        refused,
        probing,
        long_fallback,
        retiring,
    }
}
