use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::time::Duration;

use crate::error::{AssignError, PoolError};
use crate::model::{AddrSlot, AttachmentKey, EniInfo, PodInfo, SlotState};
use crate::persist::{Mutation, PersistedAddr, PersistedState};
use crate::time::Timestamp;

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
    /// The ENI's device number.
    pub device_number: u32,
    /// Table for traffic from the pod (main on the primary ENI).
    pub route_table: u32,
    /// Since when.
    pub assigned_at: Timestamp,
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
/// (the Go CNI counts them, which starves pods, its issue #2896).
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
}

#[derive(Clone, Debug)]
struct Eni {
    info: EniInfo,
    addrs: BTreeMap<Ipv4Addr, AddrSlot>,
}

/// The node's address pool: ENIs, their secondary addresses, and who holds each.
///
/// Invariants (property-tested): an address is on at most one ENI and held by at most one
/// attachment; an attachment holds at most one address; an address is never handed out while
/// cooling.
#[derive(Clone, Debug)]
pub struct Pool {
    cooldown: Duration,
    enis: BTreeMap<String, Eni>,
    /// address -> ENI id
    owner: HashMap<Ipv4Addr, String>,
    /// attachment -> address
    by_key: HashMap<AttachmentKey, Ipv4Addr>,
}

impl Pool {
    /// An empty pool whose released addresses cool down for `cooldown`.
    pub fn new(cooldown: Duration) -> Self {
        Pool {
            cooldown,
            enis: BTreeMap::new(),
            owner: HashMap::new(),
            by_key: HashMap::new(),
        }
    }

    /// Rebuilds the pool from persisted state, keeping every assignment and cooldown deadline.
    /// What cannot be kept is repaired and reported; the returned mutations persist the repair.
    pub fn restore(
        state: PersistedState,
        cooldown: Duration,
    ) -> (Pool, Vec<Mutation>, Vec<RestoreIssue>) {
        let mut pool = Pool::new(cooldown);
        let mut fixes = Vec::new();
        let mut issues = Vec::new();
        for info in state.enis {
            pool.enis.insert(
                info.id.clone(),
                Eni {
                    info,
                    addrs: BTreeMap::new(),
                },
            );
        }
        let mut addrs = state.addrs;
        // Deterministic repair order: earliest assignment wins a duplicated key.
        addrs.sort_by_key(|a| (assigned_at(&a.slot), a.ip));
        for PersistedAddr { ip, eni, mut slot } in addrs {
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
                    slot = AddrSlot::fresh();
                    fixes.push(Mutation::PutAddr(PersistedAddr {
                        ip,
                        eni: eni.clone(),
                        slot: slot.clone(),
                    }));
                } else {
                    pool.by_key.insert(key.clone(), ip);
                }
            }
            entry.addrs.insert(ip, slot);
            pool.owner.insert(ip, eni);
        }
        (pool, fixes, issues)
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
                self.enis.insert(
                    info.id.clone(),
                    Eni {
                        info: info.clone(),
                        addrs: BTreeMap::new(),
                    },
                );
                vec![Mutation::PutEni(info)]
            }
        }
    }

    /// Removes an ENI and its addresses. Refused while a pod holds one of them unless `force`
    /// (the ENI is gone in EC2: its pods have lost their addresses whatever we do); the forced
    /// attachments are returned so their host state can be cleaned.
    pub fn remove_eni(
        &mut self,
        id: &str,
        force: bool,
    ) -> Result<(Vec<Allocated>, Vec<Mutation>), PoolError> {
        let eni = self
            .enis
            .get(id)
            .ok_or_else(|| PoolError::UnknownEni(id.to_string()))?;
        if !force
            && let Some((ip, key)) = eni
                .addrs
                .iter()
                .find_map(|(ip, s)| s.holder().map(|k| (*ip, k)))
        {
            return Err(PoolError::InUse {
                ip,
                holder: key.to_string(),
            });
        }
        let mut dropped = Vec::new();
        let mut muts = Vec::new();
        let ips: Vec<Ipv4Addr> = eni.addrs.keys().copied().collect();
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
        }
        let mut muts = Vec::new();
        for ip in ips {
            if self.owner.contains_key(ip) {
                continue;
            }
            let slot = AddrSlot::fresh();
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

    /// Removes an address EC2 no longer has on the ENI (or that the pool gives back). Refused
    /// while assigned unless `force`; a forced removal returns the allocation it took.
    pub fn remove_address(
        &mut self,
        ip: Ipv4Addr,
        force: bool,
    ) -> Result<(Option<Allocated>, Vec<Mutation>), PoolError> {
        if !self.owner.contains_key(&ip) {
            return Err(PoolError::UnknownAddress(ip));
        }
        let taken = self.allocation_at(ip);
        if let (Some(a), false) = (&taken, force) {
            return Err(PoolError::InUse {
                ip,
                holder: a.key.to_string(),
            });
        }
        self.forget_address(ip);
        Ok((taken, vec![Mutation::DeleteAddr(ip)]))
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
    /// (a repeated ADD is idempotent). Otherwise the available address released longest ago
    /// (never-used first, then lowest) is chosen, so an address is reused as late as possible.
    pub fn assign(
        &mut self,
        key: &AttachmentKey,
        pod: &PodInfo,
        now: Timestamp,
    ) -> Result<(Allocated, Vec<Mutation>), AssignError> {
        if let Some(existing) = self.get(key) {
            return Ok((existing, Vec::new()));
        }
        let choice = self
            .enis
            .values()
            .flat_map(|e| e.addrs.iter().map(move |(ip, s)| (e, *ip, s)))
            .filter(|(_, _, s)| s.is_available(now))
            .min_by_key(|(_, ip, s)| (s.released_at, *ip))
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

    /// Undoes an assignment that never reached a pod (its persistence failed): the address is
    /// free at once, with no cooldown, and its previous release time is lost.
    pub fn unassign_unused(&mut self, key: &AttachmentKey) -> Option<Vec<Mutation>> {
        let ip = *self.by_key.get(key)?;
        let eni_id = self.owner.get(&ip)?.clone();
        let slot = self.enis.get_mut(&eni_id)?.addrs.get_mut(&ip)?;
        *slot = AddrSlot::fresh();
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
        let mut stale: Vec<AttachmentKey> = self
            .by_key
            .keys()
            .filter(|k| {
                k.network == network && !valid.contains(&(k.container_id.clone(), k.ifname.clone()))
            })
            .cloned()
            .collect();
        stale.sort();
        let mut released = Vec::new();
        let mut muts = Vec::new();
        for key in stale {
            if let Some((r, m)) = self.release(&key, now) {
                released.push(r);
                muts.extend(m);
            }
        }
        (released, muts)
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
                route_table: eni.info.route_table(),
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
        for (_, _, slot) in self.slots() {
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

    /// The addresses held on one ENI with their state.
    pub fn addresses(&self, eni_id: &str) -> impl Iterator<Item = (Ipv4Addr, &AddrSlot)> {
        self.enis
            .get(eni_id)
            .into_iter()
            .flat_map(|e| e.addrs.iter().map(|(ip, s)| (*ip, s)))
    }

    fn slots(&self) -> impl Iterator<Item = (&EniInfo, Ipv4Addr, &AddrSlot)> {
        self.enis
            .values()
            .flat_map(|e| e.addrs.iter().map(move |(ip, s)| (&e.info, *ip, s)))
    }

    /// The whole pool as it would be persisted (for tests and introspection).
    pub fn to_state(&self) -> PersistedState {
        PersistedState {
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

fn assigned_at(slot: &AddrSlot) -> Timestamp {
    match slot.state {
        SlotState::Assigned { assigned_at, .. } => assigned_at,
        SlotState::Free { .. } => Timestamp(u64::MAX),
    }
}
