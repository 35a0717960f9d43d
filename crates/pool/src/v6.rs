//! IPv6 addresses for pods: /80 prefixes delegated to the primary ENI, one address per
//! attachment.
//!
//! There is no warm pool: a /80 holds 2^48 addresses, so one prefix serves any node for its
//! whole life and EC2 is asked once (the Go CNI's IPv6 mode does the same). What remains of the
//! IPv4 pool's work is who holds which address, cooldown after release, and persistence.
//!
//! With IPv4 egress on, each address also carries a node-local IPv4 address from the egress
//! range (169.254.172.0/22, as aws-node's egress plugin), through which the pod reaches IPv4
//! destinations SNATed to the node. It lives and dies with its IPv6 address, in the same
//! record, so it is persisted, cooled and released with it and can never outlive it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use ipnetwork::{Ipv4Network, Ipv6Network};
use thiserror::Error;

use crate::model::{AttachmentKey, PodInfo, SlotState};
use crate::persist::{Mutation, PersistedAddr6, Prefix6};
use crate::time::Timestamp;

/// Prefix length of a delegated IPv6 prefix.
pub const PREFIX6_LEN: u8 = 80;

/// aws-node's range of node-local IPv4 egress addresses for IPv6 pods.
pub const EGRESS_V4_RANGE: Ipv4Network =
    match Ipv4Network::new_checked(Ipv4Addr::new(169, 254, 172, 0), 22) {
        Some(net) => net,
        None => panic!("169.254.172.0/22 is a valid network"),
    };

/// An IPv6 address held by an attachment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocated6 {
    /// The attachment.
    pub key: AttachmentKey,
    /// For whom.
    pub pod: PodInfo,
    /// The address.
    pub ip: Ipv6Addr,
    /// The ENI holding its prefix.
    pub eni_id: String,
    /// The node-local IPv4 egress address that goes with it, when IPv4 egress is on.
    pub egress_v4: Option<Ipv4Addr>,
    /// Since when.
    pub assigned_at: Timestamp,
}

/// IPv6 counts at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts6 {
    /// Delegated /80s.
    pub prefixes: u32,
    /// Addresses held by attachments.
    pub assigned: u32,
    /// Released addresses still cooling.
    pub cooling: u32,
}

/// Why an IPv6 address could not be assigned or a prefix not added.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum Pool6Error {
    /// No /80 is delegated to the node yet.
    #[error("the node holds no IPv6 prefix yet (ipamd asks EC2 for a /80 on the primary ENI)")]
    NoPrefix,
    /// Every address of every prefix is taken (2^48 per /80: only a broken state gets here).
    #[error("every address of the node's IPv6 prefixes is held or cooling")]
    Exhausted,
    /// Every IPv4 egress address is held or cooling.
    #[error("every IPv4 egress address of {0} is held or cooling")]
    EgressExhausted(Ipv4Network),
    /// Not a /80 named by its network address.
    #[error("{0} is not a /80 prefix named by its network address")]
    InvalidPrefix(Ipv6Network),
    /// The prefix is held on another ENI.
    #[error("IPv6 prefix {prefix} is already held on {held_on}, not {eni}")]
    PrefixOnOtherEni {
        /// The prefix.
        prefix: Ipv6Network,
        /// Where the pool has it.
        held_on: String,
        /// Where it was claimed.
        eni: String,
    },
}

/// Something restored IPv6 state held that could not be kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreIssue6 {
    /// A stored prefix was not a /80 and was dropped.
    BadPrefix(Ipv6Network),
    /// An address lay in no held prefix and was dropped.
    OrphanAddress(Ipv6Addr),
    /// Two addresses were held by one attachment; the later one was released.
    DuplicateAttachment {
        /// The attachment.
        key: AttachmentKey,
        /// The address it keeps.
        kept: Ipv6Addr,
        /// The address freed.
        freed: Ipv6Addr,
    },
    /// Two IPv6 addresses carried one IPv4 egress address; the later one lost it.
    DuplicateEgress {
        /// The egress address.
        egress: Ipv4Addr,
        /// The IPv6 address that keeps it.
        kept: Ipv6Addr,
        /// The IPv6 address that lost it.
        dropped: Ipv6Addr,
    },
}

/// True when `prefix` is one EC2 delegates: a /80 named by its network address.
pub fn is_delegable_prefix6(prefix: Ipv6Network) -> bool {
    prefix.prefix() == PREFIX6_LEN && prefix.ip() == prefix.network()
}

/// The node's IPv6 addresses for pods.
///
/// Invariants (property-tested): every address lies in a held prefix; an address is held by at
/// most one attachment and an attachment holds at most one address; a released address is not
/// handed out again before its cooldown ends. Only assigned and cooling addresses are kept:
/// a cooled address is forgotten, so the state stays as small as the node's pods.
#[derive(Clone, Debug, Default)]
pub struct Pool6 {
    cooldown: Duration,
    prefixes: BTreeMap<Ipv6Network, String>,
    slots: BTreeMap<Ipv6Addr, SlotState>,
    by_key: HashMap<AttachmentKey, Ipv6Addr>,
    /// Where new addresses get their IPv4 egress address from; `None`: IPv4 egress off.
    egress_range: Option<Ipv4Network>,
    /// The egress address of each kept IPv6 address that has one.
    egress_of: BTreeMap<Ipv6Addr, Ipv4Addr>,
    /// `egress_of` the other way round: which kept address holds each egress address.
    egress_used: BTreeMap<Ipv4Addr, Ipv6Addr>,
}

impl Pool6 {
    /// No prefix; released addresses cool down for `cooldown`.
    pub fn new(cooldown: Duration) -> Self {
        Pool6 {
            cooldown,
            ..Default::default()
        }
    }

    /// Rebuilds from persisted records, repairing what cannot be kept; the mutations persist
    /// the repair.
    pub fn restore(
        prefixes: Vec<Prefix6>,
        addrs: Vec<PersistedAddr6>,
        cooldown: Duration,
    ) -> (Pool6, Vec<Mutation>, Vec<RestoreIssue6>) {
        let mut pool = Pool6::new(cooldown);
        let mut fixes = Vec::new();
        let mut issues = Vec::new();
        for Prefix6 { prefix, eni } in prefixes {
            if is_delegable_prefix6(prefix) {
                pool.prefixes.insert(prefix, eni);
            } else {
                issues.push(RestoreIssue6::BadPrefix(prefix));
                fixes.push(Mutation::DeletePrefix6(prefix));
            }
        }
        let mut addrs = addrs;
        // Deterministic repair: the earliest assignment keeps a duplicated key.
        addrs.sort_by_key(|a| (assigned_at(&a.state), a.ip));
        for PersistedAddr6 {
            ip,
            state,
            egress_v4,
        } in addrs
        {
            if pool.prefix_of(ip).is_none() {
                issues.push(RestoreIssue6::OrphanAddress(ip));
                fixes.push(Mutation::DeleteAddr6(ip));
                continue;
            }
            let state = match state {
                SlotState::Assigned { key, .. } if pool.by_key.contains_key(&key) => {
                    let kept = pool.by_key[&key];
                    issues.push(RestoreIssue6::DuplicateAttachment {
                        key,
                        kept,
                        freed: ip,
                    });
                    fixes.push(Mutation::DeleteAddr6(ip));
                    continue;
                }
                SlotState::Assigned {
                    key,
                    pod,
                    assigned_at,
                } => {
                    pool.by_key.insert(key.clone(), ip);
                    SlotState::Assigned {
                        key,
                        pod,
                        assigned_at,
                    }
                }
                free => free,
            };
            pool.slots.insert(ip, state);
            if let Some(egress) = egress_v4 {
                if let Some(&kept) = pool.egress_used.get(&egress) {
                    issues.push(RestoreIssue6::DuplicateEgress {
                        egress,
                        kept,
                        dropped: ip,
                    });
                    fixes.push(Mutation::PutAddr6(pool.record(ip)));
                } else {
                    pool.set_egress(ip, egress);
                }
            }
        }
        (pool, fixes, issues)
    }

    /// Gives every address assigned from now on an IPv4 egress address from `range` (`None`:
    /// no more). Addresses already kept keep theirs.
    pub fn set_egress_range(&mut self, range: Option<Ipv4Network>) {
        self.egress_range = range;
    }

    /// The range new egress addresses come from, when IPv4 egress is on.
    pub fn egress_range(&self) -> Option<Ipv4Network> {
        self.egress_range
    }

    /// The delegated prefixes and their ENIs.
    pub fn prefixes(&self) -> impl Iterator<Item = (Ipv6Network, &str)> {
        self.prefixes.iter().map(|(p, e)| (*p, e.as_str()))
    }

    /// Records a /80 delegated to `eni`. Adding a held prefix again changes nothing.
    pub fn add_prefix(
        &mut self,
        eni: &str,
        prefix: Ipv6Network,
    ) -> Result<Vec<Mutation>, Pool6Error> {
        if !is_delegable_prefix6(prefix) {
            return Err(Pool6Error::InvalidPrefix(prefix));
        }
        match self.prefixes.get(&prefix) {
            Some(held_on) if held_on == eni => Ok(Vec::new()),
            Some(held_on) => Err(Pool6Error::PrefixOnOtherEni {
                prefix,
                held_on: held_on.clone(),
                eni: eni.to_string(),
            }),
            None => {
                self.prefixes.insert(prefix, eni.to_string());
                Ok(vec![Mutation::PutPrefix6(Prefix6 {
                    prefix,
                    eni: eni.to_string(),
                })])
            }
        }
    }

    /// Forgets a prefix EC2 no longer delegates, with every address in it; returns the
    /// allocations that were taken from their attachments.
    pub fn remove_prefix(&mut self, prefix: Ipv6Network) -> (Vec<Allocated6>, Vec<Mutation>) {
        let Some(eni) = self.prefixes.remove(&prefix) else {
            return (Vec::new(), Vec::new());
        };
        let mut taken = Vec::new();
        let mut muts = vec![Mutation::DeletePrefix6(prefix)];
        let members: Vec<Ipv6Addr> = self
            .slots
            .keys()
            .copied()
            .filter(|ip| prefix.contains(*ip))
            .collect();
        for ip in members {
            let egress_v4 = self.egress_of.get(&ip).copied();
            if let Some(SlotState::Assigned {
                key,
                pod,
                assigned_at,
            }) = self.forget(ip)
            {
                self.by_key.remove(&key);
                taken.push(Allocated6 {
                    key,
                    pod,
                    ip,
                    eni_id: eni.clone(),
                    egress_v4,
                    assigned_at,
                });
            }
            muts.push(Mutation::DeleteAddr6(ip));
        }
        (taken, muts)
    }

    /// Assigns an address to `key`; the same key again gets the same address with no change.
    /// The new address is the one after the highest held in the first prefix, so a released
    /// address is reused as late as possible; cooled addresses are forgotten on the way.
    pub fn assign(
        &mut self,
        key: &AttachmentKey,
        pod: &PodInfo,
        now: Timestamp,
    ) -> Result<(Allocated6, Vec<Mutation>), Pool6Error> {
        if let Some(existing) = self.get(key) {
            return Ok((existing, Vec::new()));
        }
        let mut muts = self.forget_cooled(now);
        let (&prefix, eni) = self.prefixes.iter().next().ok_or(Pool6Error::NoPrefix)?;
        let eni = eni.clone();
        let ip = self.next_address(prefix).ok_or(Pool6Error::Exhausted)?;
        let egress_v4 = match self.egress_range {
            Some(range) => Some(
                self.next_egress(range)
                    .ok_or(Pool6Error::EgressExhausted(range))?,
            ),
            None => None,
        };
        let state = SlotState::Assigned {
            key: key.clone(),
            pod: pod.clone(),
            assigned_at: now,
        };
        self.slots.insert(ip, state);
        self.by_key.insert(key.clone(), ip);
        if let Some(egress) = egress_v4 {
            self.set_egress(ip, egress);
        }
        muts.push(Mutation::PutAddr6(self.record(ip)));
        Ok((
            Allocated6 {
                key: key.clone(),
                pod: pod.clone(),
                ip,
                eni_id: eni,
                egress_v4,
                assigned_at: now,
            },
            muts,
        ))
    }

    /// Records that `key` holds `ip`, and `egress` with it (a live pod's routes found after
    /// state was lost). The address must lie in a held prefix and be free or cooling, or
    /// already be `key`'s. An egress address another address holds is not taken.
    pub fn adopt(
        &mut self,
        key: &AttachmentKey,
        pod: &PodInfo,
        ip: Ipv6Addr,
        egress: Option<Ipv4Addr>,
        assigned_at: Timestamp,
    ) -> Option<(Allocated6, Vec<Mutation>)> {
        if let Some(existing) = self.get(key) {
            return (existing.ip == ip).then_some((existing, Vec::new()));
        }
        self.prefix_of(ip)?;
        if matches!(self.slots.get(&ip), Some(SlotState::Assigned { .. })) {
            return None;
        }
        // A cooling address may carry an egress address of its own: the pod's wins.
        self.forget(ip);
        let state = SlotState::Assigned {
            key: key.clone(),
            pod: pod.clone(),
            assigned_at,
        };
        self.slots.insert(ip, state);
        self.by_key.insert(key.clone(), ip);
        if let Some(e) = egress.filter(|e| !self.egress_used.contains_key(e)) {
            self.set_egress(ip, e);
        }
        let allocation = self.allocation_at(ip)?;
        Some((allocation, vec![Mutation::PutAddr6(self.record(ip))]))
    }

    /// Releases `key`'s address into cooldown; `None` when it holds nothing.
    pub fn release(
        &mut self,
        key: &AttachmentKey,
        now: Timestamp,
    ) -> Option<(Allocated6, Vec<Mutation>)> {
        let allocation = self.get(key)?;
        let state = SlotState::Free {
            cooling_until: Some(now.after(self.cooldown)),
        };
        self.slots.insert(allocation.ip, state);
        self.by_key.remove(key);
        let muts = vec![Mutation::PutAddr6(self.record(allocation.ip))];
        Some((allocation, muts))
    }

    /// Undoes an assignment that never reached a pod: the address is forgotten at once.
    pub fn unassign_unused(&mut self, key: &AttachmentKey) -> Option<Vec<Mutation>> {
        let ip = self.by_key.remove(key)?;
        self.forget(ip);
        Some(vec![Mutation::DeleteAddr6(ip)])
    }

    /// Releases every attachment of `network` whose (container id, ifname) is not in `valid`.
    pub fn gc(
        &mut self,
        network: &str,
        valid: &HashSet<(String, String)>,
        now: Timestamp,
    ) -> (Vec<Allocated6>, Vec<Mutation>) {
        let stale = crate::model::stale_keys(self.by_key.keys(), network, valid);
        crate::model::release_each(stale, |key| self.release(key, now))
    }

    /// What `key` holds.
    pub fn get(&self, key: &AttachmentKey) -> Option<Allocated6> {
        self.allocation_at(*self.by_key.get(key)?)
    }

    /// Every allocation, by address.
    pub fn allocations(&self) -> Vec<Allocated6> {
        let mut all: Vec<Allocated6> = self
            .by_key
            .values()
            .filter_map(|ip| self.allocation_at(*ip))
            .collect();
        all.sort_by_key(|a| a.ip);
        all
    }

    /// Counts at `now`.
    pub fn counts(&self, now: Timestamp) -> Counts6 {
        let mut c = Counts6 {
            prefixes: self.prefixes.len() as u32,
            ..Default::default()
        };
        for state in self.slots.values() {
            match state {
                SlotState::Assigned { .. } => c.assigned += 1,
                SlotState::Free {
                    cooling_until: Some(t),
                } if *t > now => c.cooling += 1,
                SlotState::Free { .. } => {}
            }
        }
        c
    }

    /// The persisted form: prefixes and the addresses kept.
    pub fn to_state(&self) -> (Vec<Prefix6>, Vec<PersistedAddr6>) {
        (
            self.prefixes
                .iter()
                .map(|(p, e)| Prefix6 {
                    prefix: *p,
                    eni: e.clone(),
                })
                .collect(),
            self.slots.keys().map(|ip| self.record(*ip)).collect(),
        )
    }

    fn allocation_at(&self, ip: Ipv6Addr) -> Option<Allocated6> {
        match self.slots.get(&ip)? {
            SlotState::Assigned {
                key,
                pod,
                assigned_at,
            } => Some(Allocated6 {
                key: key.clone(),
                pod: pod.clone(),
                ip,
                eni_id: self.prefix_of(ip)?.1.to_string(),
                egress_v4: self.egress_of.get(&ip).copied(),
                assigned_at: *assigned_at,
            }),
            SlotState::Free { .. } => None,
        }
    }

    fn prefix_of(&self, ip: Ipv6Addr) -> Option<(Ipv6Network, &str)> {
        self.prefixes
            .iter()
            .find(|(p, _)| p.contains(ip))
            .map(|(p, e)| (*p, e.as_str()))
    }

    fn forget_cooled(&mut self, now: Timestamp) -> Vec<Mutation> {
        let cooled: Vec<Ipv6Addr> = self
            .slots
            .iter()
            .filter(|(_, s)| {
                matches!(s, SlotState::Free { cooling_until } if cooling_until.is_none_or(|t| t <= now))
            })
            .map(|(ip, _)| *ip)
            .collect();
        for ip in &cooled {
            self.forget(*ip);
        }
        cooled.into_iter().map(Mutation::DeleteAddr6).collect()
    }

    /// The persisted form of a kept address.
    fn record(&self, ip: Ipv6Addr) -> PersistedAddr6 {
        PersistedAddr6 {
            ip,
            state: self.slots.get(&ip).cloned().unwrap_or(SlotState::Free {
                cooling_until: None,
            }),
            egress_v4: self.egress_of.get(&ip).copied(),
        }
    }

    fn set_egress(&mut self, ip: Ipv6Addr, egress: Ipv4Addr) {
        self.egress_of.insert(ip, egress);
        self.egress_used.insert(egress, ip);
    }

    /// Drops a kept address and its egress address; returns its state.
    fn forget(&mut self, ip: Ipv6Addr) -> Option<SlotState> {
        if let Some(egress) = self.egress_of.remove(&ip) {
            self.egress_used.remove(&egress);
        }
        self.slots.remove(&ip)
    }

    /// The lowest address of `range` no kept address carries, never its first or last (the
    /// network and broadcast names, as host-local leaves them).
    fn next_egress(&self, range: Ipv4Network) -> Option<Ipv4Addr> {
        let base = u32::from(range.network());
        let size = 1u32 << (32 - u32::from(range.prefix()));
        (1..size.saturating_sub(1))
            .map(|o| Ipv4Addr::from(base + o))
            .find(|ip| !self.egress_used.contains_key(ip))
    }

    /// The address after the highest one kept in `prefix`; when that runs past the end, the
    /// lowest one not kept. Offset 0 (the prefix's own name) is never handed out.
    fn next_address(&self, prefix: Ipv6Network) -> Option<Ipv6Addr> {
        let base = u128::from(prefix.network());
        let size = 1u128 << (128 - u32::from(prefix.prefix()));
        let kept = |offset: u128| self.slots.contains_key(&Ipv6Addr::from(base + offset));
        let highest = self
            .slots
            .range(prefix.network()..=Ipv6Addr::from(base + size - 1))
            .next_back()
            .map_or(0, |(ip, _)| u128::from(*ip) - base);
        if highest + 1 < size {
            return Some(Ipv6Addr::from(base + highest + 1));
        }
        (1..size)
            .find(|o| !kept(*o))
            .map(|o| Ipv6Addr::from(base + o))
    }
}

fn assigned_at(state: &SlotState) -> Timestamp {
    match state {
        SlotState::Assigned { assigned_at, .. } => *assigned_at,
        SlotState::Free { .. } => Timestamp(u64::MAX),
    }
}
