use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::time::Duration;

use ipnetwork::Ipv4Network;

use crate::error::{AssignError, PoolError};
use crate::fallback::PrefixFallbacks;
use crate::model::{AddrSlot, AttachmentKey, EniInfo, PodInfo, SlotState, is_delegable_prefix};
use crate::persist::{Mutation, PersistedAddr, PersistedState};
use crate::time::Timestamp;
use crate::v6::{Pool6, RestoreIssue6};

/// An address held by an attachment, with where it lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocated {
    /// The attachment.
    pub key: AttachmentKey,
    /// For whom.
    pub pod: PodInfo,
    /// The address.
    pub ip: Ipv4Addr,
    /// Its ENI.
    pub eni_id: String,
    /// The ENI's device number (its routing table is `netops::eni_table` of it: the
    /// datapath's numbering, which this pure crate does not hold).
    pub device_number: u32,
    /// Since when.
    pub assigned_at: Timestamp,
}

/// How a removal treats addresses in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Giving back to EC2: only addresses that are neither assigned nor cooling at this time.
    IfUnused(Timestamp),
    /// EC2 no longer has them: whatever their state; the allocations taken are returned.
    Force,
}

/// An address given back, and until when it cools down.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Released {
    /// What it was.
    pub allocation: Allocated,
    /// It is not handed out again before this.
    pub cooling_until: Timestamp,
}

/// Address counts at one moment. `available` excludes cooling addresses: a pool whose free
/// addresses are all cooling cannot serve an ADD, so it must not be counted as able to
/// (the Go CNI counts them, which starves pods:
/// <https://github.com/aws/amazon-vpc-cni-k8s/issues/2896>).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Secondary addresses held for pods.
    pub total: u32,
    /// Held by attachments.
    pub assigned: u32,
    /// Free but cooling.
    pub cooling: u32,
    /// Free now.
    pub available: u32,
}

/// Something restored state held that could not be kept as it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreIssue {
    /// An address belonged to an ENI the state no longer has.
    OrphanAddress {
        /// The address.
        ip: Ipv4Addr,
        /// The missing ENI.
        eni: String,
    },
    /// Two addresses were held by the same attachment; the later one was freed.
    DuplicateAttachment {
        /// The attachment.
        key: AttachmentKey,
        /// The address it keeps.
        kept: Ipv4Addr,
        /// The address freed.
        freed: Ipv4Addr,
    },
    /// Addresses claimed to form a delegated prefix could not be one (not an aligned /28,
    /// spread over several ENIs, or overlapping other held addresses); they were dropped.
    BrokenPrefix {
        /// The prefix they named.
        prefix: Ipv4Network,
    },
    /// A delegated prefix lacked some of its 16 addresses; they were added back free.
    IncompletePrefix {
        /// The prefix.
        prefix: Ipv4Network,
        /// Its ENI.
        eni: String,
        /// How many were missing.
        missing: u32,
    },
    /// Something of the IPv6 part.
    V6(RestoreIssue6),
}

#[derive(Clone, Debug)]
struct Eni {
    info: EniInfo,
    /// Every address for pods: secondary /32s and the members of delegated prefixes.
    addrs: BTreeMap<Ipv4Addr, AddrSlot>,
    /// Delegated /28s; each one's 16 addresses are in `addrs`, tagged with it.
    prefixes: BTreeSet<Ipv4Network>,
}

impl Eni {
    fn new(info: EniInfo) -> Self {
        Eni {
            info,
            addrs: BTreeMap::new(),
            prefixes: BTreeSet::new(),
        }
    }
}

/// The node's address pool: ENIs, their secondary addresses and delegated /28 prefixes, and
/// who holds each address.
///
/// Invariants (property-tested): an address is on at most one ENI and held by at most one
/// attachment; an attachment holds at most one address; an address is never handed out while
/// cooling; a delegated prefix is held whole (all 16 addresses, on one ENI) or not at all.
/// Prefixes are not persisted separately: each member address carries its prefix
/// ([`AddrSlot::prefix`]), so the [`Mutation`]s of addresses are all a store needs.
#[derive(Clone, Debug)]
pub struct Pool {
    cooldown: Duration,
    enis: BTreeMap<String, Eni>,
    /// address -> ENI id
    owner: HashMap<Ipv4Addr, String>,
    /// attachment -> address
    by_key: HashMap<AttachmentKey, Ipv4Addr>,
    /// ENIs that give no address to a new pod (the primary ENI under custom networking): a
    /// fact of the node's configuration, set at every start, never persisted.
    excluded: BTreeSet<String>,
    /// Where EC2 refuses prefixes for now: a runtime fact, never persisted.
    prefix_fallbacks: PrefixFallbacks,
    /// The node grows by prefixes: /32s outside a fallback are on their way back to EC2, so
    /// they are handed out last. Configuration, set at every start, never persisted.
    prefix_delegation: bool,
    /// IPv6 addresses (IPv6 mode and dual-stack): a part of its own, persisted with the rest.
    v6: Pool6,
}

impl Pool {
    /// An empty pool whose released addresses cool down for `cooldown`.
    pub fn new(cooldown: Duration) -> Self {
        Pool {
            cooldown,
            enis: BTreeMap::new(),
            owner: HashMap::new(),
            by_key: HashMap::new(),
            excluded: BTreeSet::new(),
            prefix_fallbacks: PrefixFallbacks::default(),
            prefix_delegation: false,
            v6: Pool6::new(cooldown),
        }
    }

    /// The IPv6 addresses.
    pub fn v6(&self) -> &Pool6 {
        &self.v6
    }

    /// The IPv6 addresses, to change.
    pub fn v6_mut(&mut self) -> &mut Pool6 {
        &mut self.v6
    }

    /// Makes the ENIs in `ids` give no address to a new pod. Their assignments stay until
    /// released; their free addresses count neither as available nor towards growth, so the
    /// pool grows on other ENIs instead.
    pub fn exclude_from_pods(&mut self, ids: BTreeSet<String>) {
        self.excluded = ids;
    }

    /// Whether the ENI `id` gives no address to new pods.
    pub fn is_excluded(&self, id: &str) -> bool {
        self.excluded.contains(id)
    }

    /// Whether the node grows by prefixes (ENABLE_PREFIX_DELEGATION): then a secondary /32 on
    /// an ENI whose subnet delegates prefixes is handed out only when nothing else is free,
    /// since the planner gives it back (see [`crate::plan()`]).
    pub fn set_prefix_delegation(&mut self, on: bool) {
        self.prefix_delegation = on;
    }

    /// Where EC2 refused /28 prefixes and when to ask again (see [`crate::PrefixFallbacks`]).
    pub fn prefix_fallbacks(&self) -> &PrefixFallbacks {
        &self.prefix_fallbacks
    }

    /// The same, to record a refusal or a delegated prefix.
    pub fn prefix_fallbacks_mut(&mut self) -> &mut PrefixFallbacks {
        &mut self.prefix_fallbacks
    }

    /// Rebuilds the pool from persisted state, keeping every assignment and cooldown deadline.
    /// What cannot be kept is repaired and reported; the returned mutations persist the repair.
    pub fn restore(
        state: PersistedState,
        cooldown: Duration,
    ) -> (Pool, Vec<Mutation>, Vec<RestoreIssue>) {
        let mut pool = Pool::new(cooldown);
        let (v6, mut fixes, issues6) = Pool6::restore(state.prefixes6, state.addrs6, cooldown);
        pool.v6 = v6;
        let mut issues: Vec<RestoreIssue> = issues6.into_iter().map(RestoreIssue::V6).collect();
        for info in state.enis {
            pool.enis.insert(info.id.clone(), Eni::new(info));
        }
        let broken = broken_prefixes(&pool, &state.addrs);
        issues.extend(
            broken
                .iter()
                .map(|&prefix| RestoreIssue::BrokenPrefix { prefix }),
        );
        let mut addrs = state.addrs;
        // Deterministic repair order: earliest assignment wins a duplicated key.
        addrs.sort_by_key(|a| (assigned_at(&a.slot), a.ip));
        for PersistedAddr { ip, eni, mut slot } in addrs {
            if slot.prefix.is_some_and(|p| broken.contains(&p)) {
                fixes.push(Mutation::DeleteAddr(ip));
                continue;
            }
            let Some(entry) = pool.enis.get_mut(&eni) else {
                issues.push(RestoreIssue::OrphanAddress { ip, eni });
                fixes.push(Mutation::DeleteAddr(ip));
                continue;
            };
            if let SlotState::Assigned { key, .. } = &slot.state {
                if let Some(&kept) = pool.by_key.get(key) {
                    issues.push(RestoreIssue::DuplicateAttachment {
                        key: key.clone(),
                        kept,
                        freed: ip,
                    });
                    slot = AddrSlot::fresh(slot.prefix);
                    fixes.push(Mutation::PutAddr(PersistedAddr {
                        ip,
                        eni: eni.clone(),
                        slot: slot.clone(),
                    }));
                } else {
                    pool.by_key.insert(key.clone(), ip);
                }
            }
            if let Some(prefix) = slot.prefix {
                entry.prefixes.insert(prefix);
            }
            entry.addrs.insert(ip, slot);
            pool.owner.insert(ip, eni);
        }
        pool.complete_prefixes(&mut fixes, &mut issues);
        (pool, fixes, issues)
    }

    /// Adds back, free, the members missing from held prefixes (`broken_prefixes` made sure
    /// nobody else holds them).
    fn complete_prefixes(&mut self, fixes: &mut Vec<Mutation>, issues: &mut Vec<RestoreIssue>) {
        for (eni_id, eni) in &mut self.enis {
            for &prefix in &eni.prefixes {
                let mut missing = 0;
                for ip in prefix.iter() {
                    if eni.addrs.contains_key(&ip) {
                        continue;
                    }
                    missing += 1;
                    let slot = AddrSlot::fresh(Some(prefix));
                    eni.addrs.insert(ip, slot.clone());
                    self.owner.insert(ip, eni_id.clone());
                    fixes.push(Mutation::PutAddr(PersistedAddr {
                        ip,
                        eni: eni_id.clone(),
                        slot,
                    }));
                }
                if missing > 0 {
                    issues.push(RestoreIssue::IncompletePrefix {
                        prefix,
                        eni: eni_id.clone(),
                        missing,
                    });
                }
            }
        }
    }

    /// The cooldown applied to released addresses.
    pub fn cooldown(&self) -> Duration {
        self.cooldown
    }

    /// Adds an ENI, or updates what is known of it.
    pub fn upsert_eni(&mut self, info: EniInfo) -> Vec<Mutation> {
        match self.enis.get_mut(&info.id) {
            Some(eni) if eni.info == info => Vec::new(),
            Some(eni) => {
                eni.info = info.clone();
                vec![Mutation::PutEni(info)]
            }
            None => {
                self.enis.insert(info.id.clone(), Eni::new(info.clone()));
                vec![Mutation::PutEni(info)]
            }
        }
    }

    /// Removes an ENI with its addresses and prefixes. With [`Removal::IfUnused`] it is
    /// refused while any of them is assigned or cooling (the ENI is being given back); with
    /// [`Removal::Force`] (the ENI is gone in EC2: its pods have lost their addresses whatever
    /// we do) the attachments taken are returned so their host state can be cleaned.
    pub fn remove_eni(
        &mut self,
        id: &str,
        removal: Removal,
    ) -> Result<(Vec<Allocated>, Vec<Mutation>), PoolError> {
        let eni = self
            .enis
            .get(id)
            .ok_or_else(|| PoolError::UnknownEni(id.to_string()))?;
        let ips: Vec<Ipv4Addr> = eni.addrs.keys().copied().collect();
        self.check_removable(&ips, removal)?;
        let mut dropped = Vec::new();
        let mut muts = Vec::new();
        for ip in ips {
            if let Some(a) = self.allocation_at(ip) {
                dropped.push(a);
            }
            self.forget_address(ip);
            muts.push(Mutation::DeleteAddr(ip));
        }
        self.enis.remove(id);
        muts.push(Mutation::DeleteEni(id.to_string()));
        Ok((dropped, muts))
    }

    /// Adds secondary addresses EC2 assigned to an ENI. Addresses already held there are left
    /// as they are (EC2 and IMDS may report them again).
    pub fn add_addresses(
        &mut self,
        eni_id: &str,
        ips: &[Ipv4Addr],
    ) -> Result<Vec<Mutation>, PoolError> {
        let eni = self
            .enis
            .get(eni_id)
            .ok_or_else(|| PoolError::UnknownEni(eni_id.to_string()))?;
        for ip in ips {
            if *ip == eni.info.primary_ip {
                return Err(PoolError::PrimaryAddress {
                    ip: *ip,
                    eni: eni_id.to_string(),
                });
            }
            if let Some(held_on) = self.owner.get(ip).filter(|e| e.as_str() != eni_id) {
                return Err(PoolError::AddressOnOtherEni {
                    ip: *ip,
                    held_on: held_on.clone(),
                    eni: eni_id.to_string(),
                });
            }
            if let Some(prefix) = eni.addrs.get(ip).and_then(|s| s.prefix) {
                return Err(PoolError::AddressInPrefix { ip: *ip, prefix });
            }
        }
        let mut muts = Vec::new();
        for ip in ips {
            if self.owner.contains_key(ip) {
                continue;
            }
            let slot = AddrSlot::fresh(None);
            if let Some(eni) = self.enis.get_mut(eni_id) {
                eni.addrs.insert(*ip, slot.clone());
            }
            self.owner.insert(*ip, eni_id.to_string());
            muts.push(Mutation::PutAddr(PersistedAddr {
                ip: *ip,
                eni: eni_id.to_string(),
                slot,
            }));
        }
        Ok(muts)
    }

    /// Removes a secondary address EC2 no longer has on the ENI (or that the pool gives back).
    /// [`Removal::IfUnused`] refuses an assigned or cooling address; a forced removal returns
    /// the allocation it took. A member of a delegated prefix is refused: prefixes go whole
    /// ([`Pool::remove_prefix`]).
    pub fn remove_address(
        &mut self,
        ip: Ipv4Addr,
        removal: Removal,
    ) -> Result<(Option<Allocated>, Vec<Mutation>), PoolError> {
        let Some(slot) = self.slot(ip) else {
            return Err(PoolError::UnknownAddress(ip));
        };
        if let Some(prefix) = slot.prefix {
            return Err(PoolError::AddressInPrefix { ip, prefix });
        }
        self.check_removable(&[ip], removal)?;
        let taken = self.allocation_at(ip);
        self.forget_address(ip);
        Ok((taken, vec![Mutation::DeleteAddr(ip)]))
    }

    /// Adds /28 prefixes EC2 delegated to an ENI: each brings its 16 addresses, all free.
    /// Prefixes already held there are left as they are (EC2 and IMDS may report them again).
    /// Nothing is added unless every prefix is an aligned /28 that overlaps no address held
    /// elsewhere (another ENI's, a secondary /32, an ENI's own primary address).
    pub fn add_prefixes(
        &mut self,
        eni_id: &str,
        prefixes: &[Ipv4Network],
    ) -> Result<Vec<Mutation>, PoolError> {
        let eni = self
            .enis
            .get(eni_id)
            .ok_or_else(|| PoolError::UnknownEni(eni_id.to_string()))?;
        for &prefix in prefixes {
            if !is_delegable_prefix(prefix) {
                return Err(PoolError::InvalidPrefix(prefix));
            }
            if eni.prefixes.contains(&prefix) {
                continue;
            }
            if let Some(held_on) = self.prefix_owner(prefix) {
                return Err(PoolError::PrefixOnOtherEni {
                    prefix,
                    held_on: held_on.to_string(),
                    eni: eni_id.to_string(),
                });
            }
            if let Some((ip, held_on)) = self.first_overlap(prefix) {
                return Err(PoolError::PrefixOverlap {
                    prefix,
                    ip,
                    held_on,
                });
            }
        }
        let mut muts = Vec::new();
        for &prefix in prefixes {
            let Some(eni) = self.enis.get_mut(eni_id) else {
                break;
            };
            if !eni.prefixes.insert(prefix) {
                continue;
            }
            for ip in prefix.iter() {
                let slot = AddrSlot::fresh(Some(prefix));
                eni.addrs.insert(ip, slot.clone());
                self.owner.insert(ip, eni_id.to_string());
                muts.push(Mutation::PutAddr(PersistedAddr {
                    ip,
                    eni: eni_id.to_string(),
                    slot,
                }));
            }
        }
        Ok(muts)
    }

    /// Removes a delegated prefix and its 16 addresses (EC2 no longer has it, or the pool gives
    /// it back). [`Removal::IfUnused`] refuses while any of its addresses is assigned or
    /// cooling; a forced removal returns the allocations it took.
    pub fn remove_prefix(
        &mut self,
        prefix: Ipv4Network,
        removal: Removal,
    ) -> Result<(Vec<Allocated>, Vec<Mutation>), PoolError> {
        let eni_id = self
            .prefix_owner(prefix)
            .ok_or(PoolError::UnknownPrefix(prefix))?
            .to_string();
        let members: Vec<Ipv4Addr> = prefix
            .iter()
            .filter(|ip| self.owner.contains_key(ip))
            .collect();
        self.check_removable(&members, removal)?;
        let taken: Vec<Allocated> = prefix
            .iter()
            .filter_map(|ip| self.allocation_at(ip))
            .collect();
        let mut muts = Vec::new();
        for ip in prefix.iter() {
            if self.owner.get(&ip) == Some(&eni_id) {
                self.forget_address(ip);
                muts.push(Mutation::DeleteAddr(ip));
            }
        }
        if let Some(eni) = self.enis.get_mut(&eni_id) {
            eni.prefixes.remove(&prefix);
        }
        Ok((taken, muts))
    }

    /// Whether `ips` may leave the pool under `removal`: given back, none may be assigned or
    /// cooling (other nodes may still route the last pod's traffic to a cooling address).
    fn check_removable(&self, ips: &[Ipv4Addr], removal: Removal) -> Result<(), PoolError> {
        let Removal::IfUnused(now) = removal else {
            return Ok(());
        };
        for ip in ips {
            let Some(slot) = self.slot(*ip) else { continue };
            if let Some(key) = slot.holder() {
                return Err(PoolError::InUse {
                    ip: *ip,
                    holder: key.to_string(),
                });
            }
            if let SlotState::Free {
                cooling_until: Some(until),
            } = slot.state
                && until > now
            {
                return Err(PoolError::Cooling { ip: *ip, until });
            }
        }
        Ok(())
    }

    /// The ENI holding `prefix`.
    fn prefix_owner(&self, prefix: Ipv4Network) -> Option<&str> {
        let eni_id = self.owner.get(&prefix.network())?;
        self.enis
            .get(eni_id)
            .filter(|e| e.prefixes.contains(&prefix))
            .map(|e| e.info.id.as_str())
    }

    /// The first address of `prefix` the pool already has, as a secondary or prefix member
    /// or as an ENI's own primary address, and the ENI holding it.
    fn first_overlap(&self, prefix: Ipv4Network) -> Option<(Ipv4Addr, String)> {
        prefix.iter().find_map(|ip| {
            self.owner.get(&ip).cloned().map(|e| (ip, e)).or_else(|| {
                self.enis
                    .values()
                    .find(|e| e.info.primary_ip == ip)
                    .map(|e| (ip, e.info.id.clone()))
            })
        })
    }

    fn slot(&self, ip: Ipv4Addr) -> Option<&AddrSlot> {
        self.enis.get(self.owner.get(&ip)?)?.addrs.get(&ip)
    }

    fn forget_address(&mut self, ip: Ipv4Addr) {
        if let Some(eni_id) = self.owner.remove(&ip)
            && let Some(slot) = self.enis.get_mut(&eni_id).and_then(|e| e.addrs.remove(&ip))
            && let Some(key) = slot.holder()
        {
            self.by_key.remove(key);
        }
    }

    /// Assigns an address to `key`. The same key again gets the same address with no change
    /// (a repeated ADD is idempotent). Otherwise an available address is chosen, in order:
    /// 1. from a delegated prefix that already has assignments, fullest prefix first: packing
    ///    pods keeps other prefixes wholly free, so they can be given back;
    /// 2. a secondary /32;
    /// 3. from a prefix with no assignment;
    /// 4. with prefix delegation, a secondary /32 on an ENI whose subnet delegates prefixes
    ///    (no fallback there): the planner is giving it back;
    ///
    /// and within each, the one released longest ago (never-used first, then lowest), so an
    /// address is reused as late as possible.
    pub fn assign(
        &mut self,
        key: &AttachmentKey,
        pod: &PodInfo,
        now: Timestamp,
    ) -> Result<(Allocated, Vec<Mutation>), AssignError> {
        if let Some(existing) = self.get(key) {
            return Ok((existing, Vec::new()));
        }
        // Per prefix: (assigned, available) addresses.
        let mut usage: HashMap<Ipv4Network, (u32, u32)> = HashMap::new();
        for (_, _, slot) in self.slots() {
            if let Some(prefix) = slot.prefix {
                let entry = usage.entry(prefix).or_default();
                entry.0 += u32::from(slot.is_assigned());
                entry.1 += u32::from(slot.is_available(now));
            }
        }
        let retiring = |e: &Eni| {
            self.prefix_delegation
                && !self
                    .prefix_fallbacks
                    .subnets
                    .contains_key(&e.info.subnet_id)
        };
        let rank = |e: &Eni, slot: &AddrSlot| match slot.prefix.and_then(|p| usage.get(&p)) {
            Some(&(assigned, available)) if assigned > 0 => (0, available),
            Some(_) => (2, 0),
            None if retiring(e) => (3, 0),
            None => (1, 0),
        };
        let choice = self
            .enis
            .values()
            .filter(|e| !self.excluded.contains(&e.info.id))
            .flat_map(|e| e.addrs.iter().map(move |(ip, s)| (e, *ip, s)))
            .filter(|(_, _, s)| s.is_available(now))
            .min_by_key(|(e, ip, s)| (rank(e, s), s.released_at, *ip))
            .map(|(e, ip, _)| (e.info.id.clone(), ip));
        let Some((eni_id, ip)) = choice else {
            return Err(self.why_not(now));
        };
        let eni = self.enis.get_mut(&eni_id).ok_or(AssignError::EmptyPool)?;
        let slot = eni.addrs.get_mut(&ip).ok_or(AssignError::EmptyPool)?;
        slot.state = SlotState::Assigned {
            key: key.clone(),
            pod: pod.clone(),
            assigned_at: now,
        };
        let persisted = PersistedAddr {
            ip,
            eni: eni_id.clone(),
            slot: slot.clone(),
        };
        self.by_key.insert(key.clone(), ip);
        let allocation = self.allocation_at(ip).ok_or(AssignError::EmptyPool)?;
        Ok((allocation, vec![Mutation::PutAddr(persisted)]))
    }

    /// Records that `key` already holds `ip`, assigned at `assigned_at` by someone else (the
    /// Go CNI's checkpoint, when a node switches from aws-node): the pod keeps its address.
    /// The address must be in the pool and free, or already held by `key`; a cooling address
    /// is taken too, since its pod has been using it all along.
    pub fn adopt(
        &mut self,
        key: &AttachmentKey,
        pod: &PodInfo,
        ip: Ipv4Addr,
        assigned_at: Timestamp,
    ) -> Result<(Allocated, Vec<Mutation>), PoolError> {
        if let Some(existing) = self.get(key) {
            if existing.ip == ip {
                return Ok((existing, Vec::new()));
            }
            return Err(PoolError::KeyHoldsOther {
                key: key.to_string(),
                held: existing.ip,
            });
        }
        let eni_id = self
            .owner
            .get(&ip)
            .cloned()
            .ok_or(PoolError::UnknownAddress(ip))?;
        let eni = self
            .enis
            .get_mut(&eni_id)
            .ok_or_else(|| PoolError::UnknownEni(eni_id.clone()))?;
        let slot = eni
            .addrs
            .get_mut(&ip)
            .ok_or(PoolError::UnknownAddress(ip))?;
        if let Some(holder) = slot.holder() {
            return Err(PoolError::InUse {
                ip,
                holder: holder.to_string(),
            });
        }
        slot.state = SlotState::Assigned {
            key: key.clone(),
            pod: pod.clone(),
            assigned_at,
        };
        let persisted = PersistedAddr {
            ip,
            eni: eni_id,
            slot: slot.clone(),
        };
        self.by_key.insert(key.clone(), ip);
        let allocation = self
            .allocation_at(ip)
            .ok_or(PoolError::UnknownAddress(ip))?;
        Ok((allocation, vec![Mutation::PutAddr(persisted)]))
    }

    fn why_not(&self, now: Timestamp) -> AssignError {
        let counts = self.counts(now);
        if counts.total == 0 {
            return AssignError::EmptyPool;
        }
        if counts.cooling == 0 {
            return AssignError::AllAssigned {
                assigned: counts.assigned,
            };
        }
        let next = self
            .slots()
            .filter_map(|(_, _, s)| match s.state {
                SlotState::Free {
                    cooling_until: Some(t),
                } if t > now => Some(t),
                _ => None,
            })
            .min()
            .unwrap_or(now);
        AssignError::AllCooling {
            cooling: counts.cooling,
            next_free_in: now.until(next),
        }
    }

    /// Releases `key`'s address into cooldown. `None` when the key holds nothing (DEL is
    /// idempotent).
    pub fn release(
        &mut self,
        key: &AttachmentKey,
        now: Timestamp,
    ) -> Option<(Released, Vec<Mutation>)> {
        let ip = *self.by_key.get(key)?;
        let allocation = self.allocation_at(ip)?;
        let eni_id = self.owner.get(&ip)?.clone();
        let slot = self.enis.get_mut(&eni_id)?.addrs.get_mut(&ip)?;
        let cooling_until = now.after(self.cooldown);
        *slot = AddrSlot {
            state: SlotState::Free {
                cooling_until: Some(cooling_until),
            },
            released_at: Some(now),
            prefix: slot.prefix,
        };
        let persisted = PersistedAddr {
            ip,
            eni: eni_id,
            slot: slot.clone(),
        };
        self.by_key.remove(key);
        Some((
            Released {
                allocation,
                cooling_until,
            },
            vec![Mutation::PutAddr(persisted)],
        ))
    }

    /// Starts a cooldown on `ip` when it is available (free, not cooling). After stored state
    /// was lost, an address that looks free may have been released moments before; handing it
    /// out at once could give the next pod the previous one's traffic. `None` when the address
    /// is unknown, held or already cooling.
    pub fn start_cooldown(&mut self, ip: Ipv4Addr, now: Timestamp) -> Option<Vec<Mutation>> {
        let eni_id = self.owner.get(&ip)?.clone();
        let slot = self.enis.get_mut(&eni_id)?.addrs.get_mut(&ip)?;
        if !slot.is_available(now) {
            return None;
        }
        slot.state = SlotState::Free {
            cooling_until: Some(now.after(self.cooldown)),
        };
        Some(vec![Mutation::PutAddr(PersistedAddr {
            ip,
            eni: eni_id,
            slot: slot.clone(),
        })])
    }

    /// Undoes an assignment that never reached a pod (its persistence failed): the address is
    /// free at once, with no cooldown, and its previous release time is lost.
    pub fn unassign_unused(&mut self, key: &AttachmentKey) -> Option<Vec<Mutation>> {
        let ip = *self.by_key.get(key)?;
        let eni_id = self.owner.get(&ip)?.clone();
        let slot = self.enis.get_mut(&eni_id)?.addrs.get_mut(&ip)?;
        *slot = AddrSlot::fresh(slot.prefix);
        let persisted = PersistedAddr {
            ip,
            eni: eni_id,
            slot: slot.clone(),
        };
        self.by_key.remove(key);
        Some(vec![Mutation::PutAddr(persisted)])
    }

    /// Releases every attachment of `network` whose (container id, ifname) is not in `valid`.
    pub fn gc(
        &mut self,
        network: &str,
        valid: &HashSet<(String, String)>,
        now: Timestamp,
    ) -> (Vec<Released>, Vec<Mutation>) {
        let stale = crate::model::stale_keys(self.by_key.keys(), network, valid);
        crate::model::release_each(stale, |key| self.release(key, now))
    }

    /// What `key` holds.
    pub fn get(&self, key: &AttachmentKey) -> Option<Allocated> {
        self.by_key.get(key).and_then(|ip| self.allocation_at(*ip))
    }

    fn allocation_at(&self, ip: Ipv4Addr) -> Option<Allocated> {
        let eni = self.enis.get(self.owner.get(&ip)?)?;
        match &eni.addrs.get(&ip)?.state {
            SlotState::Assigned {
                key,
                pod,
                assigned_at,
            } => Some(Allocated {
                key: key.clone(),
                pod: pod.clone(),
                ip,
                eni_id: eni.info.id.clone(),
                device_number: eni.info.device_number,
                assigned_at: *assigned_at,
            }),
            SlotState::Free { .. } => None,
        }
    }

    /// Every current allocation, by address.
    pub fn allocations(&self) -> Vec<Allocated> {
        let mut all: Vec<Allocated> = self
            .by_key
            .values()
            .filter_map(|ip| self.allocation_at(*ip))
            .collect();
        all.sort_by_key(|a| a.ip);
        all
    }

    /// Counts at `now`.
    pub fn counts(&self, now: Timestamp) -> Counts {
        let mut c = Counts::default();
        for (eni, _, slot) in self.slots() {
            // A free address of an excluded ENI serves no pod: it is not part of the pool.
            if self.excluded.contains(&eni.id) && !slot.is_assigned() {
                continue;
            }
            c.total += 1;
            match slot.state {
                SlotState::Assigned { .. } => c.assigned += 1,
                SlotState::Free { .. } if slot.is_cooling(now) => c.cooling += 1,
                SlotState::Free { .. } => c.available += 1,
            }
        }
        c
    }

    /// The ENIs, by id.
    pub fn enis(&self) -> impl Iterator<Item = &EniInfo> {
        self.enis.values().map(|e| &e.info)
    }

    /// One ENI.
    pub fn eni(&self, id: &str) -> Option<&EniInfo> {
        self.enis.get(id).map(|e| &e.info)
    }

    /// The addresses held on one ENI with their state, by address: secondary /32s and the
    /// members of its delegated prefixes ([`AddrSlot::prefix`] tells which).
    pub fn addresses(&self, eni_id: &str) -> impl Iterator<Item = (Ipv4Addr, &AddrSlot)> {
        self.enis
            .get(eni_id)
            .into_iter()
            .flat_map(|e| e.addrs.iter().map(|(ip, s)| (*ip, s)))
    }

    /// The /28 prefixes delegated to one ENI, in order.
    pub fn prefixes(&self, eni_id: &str) -> impl Iterator<Item = Ipv4Network> {
        self.enis
            .get(eni_id)
            .into_iter()
            .flat_map(|e| e.prefixes.iter().copied())
    }

    /// How many secondary /32s (addresses outside any delegated prefix) one ENI holds.
    pub fn secondary_count(&self, eni_id: &str) -> u32 {
        let n = self
            .addresses(eni_id)
            .filter(|(_, s)| s.prefix.is_none())
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    fn slots(&self) -> impl Iterator<Item = (&EniInfo, Ipv4Addr, &AddrSlot)> {
        self.enis
            .values()
            .flat_map(|e| e.addrs.iter().map(move |(ip, s)| (&e.info, *ip, s)))
    }

    /// The whole pool as it would be persisted (for tests and introspection).
    pub fn to_state(&self) -> PersistedState {
        let (prefixes6, addrs6) = self.v6.to_state();
        PersistedState {
            prefixes6,
            addrs6,
            enis: self.enis.values().map(|e| e.info.clone()).collect(),
            addrs: self
                .slots()
                .map(|(eni, ip, slot)| PersistedAddr {
                    ip,
                    eni: eni.id.clone(),
                    slot: slot.clone(),
                })
                .collect(),
        }
    }
}

/// Prefixes named in persisted state that cannot be restored as held prefixes: not an aligned
/// /28, a member outside it, members on several ENIs, or one of its 16 addresses held
/// otherwise (as a secondary /32, or as an ENI's own primary address).
fn broken_prefixes(pool: &Pool, addrs: &[PersistedAddr]) -> BTreeSet<Ipv4Network> {
    let mut eni_of: BTreeMap<Ipv4Network, &str> = BTreeMap::new();
    let mut broken = BTreeSet::new();
    for a in addrs {
        let Some(prefix) = a.slot.prefix else {
            continue;
        };
        if !is_delegable_prefix(prefix) || !prefix.contains(a.ip) {
            broken.insert(prefix);
        }
        if *eni_of.entry(prefix).or_insert(a.eni.as_str()) != a.eni.as_str() {
            broken.insert(prefix);
        }
    }
    let held_otherwise = addrs
        .iter()
        .filter(|a| a.slot.prefix.is_none())
        .map(|a| a.ip)
        .chain(pool.enis.values().map(|e| e.info.primary_ip));
    for ip in held_otherwise {
        broken.extend(eni_of.keys().filter(|p| p.contains(ip)));
    }
    broken
}

fn assigned_at(slot: &AddrSlot) -> Timestamp {
    match slot.state {
        SlotState::Assigned { assigned_at, .. } => assigned_at,
        SlotState::Free { .. } => Timestamp(u64::MAX),
    }
}
