use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnetwork::Ipv6Network;
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::model::{AddrSlot, EniInfo, SlotState};

/// One address as persisted: where it lives and its state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersistedAddr {
    /// The address.
    pub ip: Ipv4Addr,
    /// Its ENI.
    pub eni: String,
    /// Its state, cooldown deadline included.
    pub slot: AddrSlot,
}

/// A delegated /80 and the ENI holding it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prefix6 {
    /// The prefix, named by its network address.
    pub prefix: Ipv6Network,
    /// `eni-...`.
    pub eni: String,
}

/// One IPv6 address that is held, or released and still cooling, as persisted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersistedAddr6 {
    /// The address.
    pub ip: Ipv6Addr,
    /// Assigned, or free until its cooldown ends.
    pub state: SlotState,
    /// The IPv4 egress address that goes with it (IPv4 egress on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_v4: Option<Ipv4Addr>,
}

/// The pool's durable state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersistedState {
    /// ENIs.
    pub enis: Vec<EniInfo>,
    /// Secondary addresses.
    pub addrs: Vec<PersistedAddr>,
    /// Delegated IPv6 /80s (none unless IPv6 is on).
    #[serde(default)]
    pub prefixes6: Vec<Prefix6>,
    /// IPv6 addresses held or cooling.
    #[serde(default)]
    pub addrs6: Vec<PersistedAddr6>,
}

/// A change to persist. Every pool operation returns the mutations that make the stored state
/// equal to the pool again; applying them in order is all a store has to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mutation {
    /// Insert or replace an ENI.
    PutEni(EniInfo),
    /// Remove an ENI (its addresses are removed by their own mutations).
    DeleteEni(String),
    /// Insert or replace an address.
    PutAddr(PersistedAddr),
    /// Remove an address.
    DeleteAddr(Ipv4Addr),
    /// Insert or replace a delegated IPv6 prefix.
    PutPrefix6(Prefix6),
    /// Remove a delegated IPv6 prefix (its addresses are removed by their own mutations).
    DeletePrefix6(Ipv6Network),
    /// Insert or replace an IPv6 address.
    PutAddr6(PersistedAddr6),
    /// Remove an IPv6 address.
    DeleteAddr6(Ipv6Addr),
}

/// Persistence seam for the pool. `apply` may buffer; `flush` makes everything applied so far
/// durable, and the daemon replies only after it returns, so callers can batch the flushes of
/// concurrent requests (group commit).
pub trait StateStore: Send + Sync {
    /// The store's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Reads everything stored.
    fn load(&self) -> Result<PersistedState, Self::Error>;

    /// Applies mutations, in order, atomically.
    fn apply(&self, mutations: &[Mutation]) -> Result<(), Self::Error>;

    /// Makes every applied mutation durable.
    fn flush(&self) -> Result<(), Self::Error>;

    /// Replaces everything stored with `state`, atomically: the way back to agreement after
    /// an `apply` failed and the pool moved on without the store.
    fn replace_all(&self, state: &PersistedState) -> Result<(), Self::Error>;
}

/// A store in memory, for tests of code that persists through [`StateStore`].
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Records>,
}

#[derive(Debug, Default)]
struct Records {
    enis: BTreeMap<String, EniInfo>,
    addrs: BTreeMap<Ipv4Addr, PersistedAddr>,
    prefixes6: BTreeMap<Ipv6Network, Prefix6>,
    addrs6: BTreeMap<Ipv6Addr, PersistedAddr6>,
}

impl StateStore for MemoryStore {
    type Error = Infallible;

    fn load(&self) -> Result<PersistedState, Infallible> {
        let guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(PersistedState {
            enis: guard.enis.values().cloned().collect(),
            addrs: guard.addrs.values().cloned().collect(),
            prefixes6: guard.prefixes6.values().cloned().collect(),
            addrs6: guard.addrs6.values().cloned().collect(),
        })
    }

    fn apply(&self, mutations: &[Mutation]) -> Result<(), Infallible> {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let r = &mut *guard;
        for m in mutations {
            match m {
                Mutation::PutEni(e) => {
                    r.enis.insert(e.id.clone(), e.clone());
                }
                Mutation::DeleteEni(id) => {
                    r.enis.remove(id);
                }
                Mutation::PutAddr(a) => {
                    r.addrs.insert(a.ip, a.clone());
                }
                Mutation::DeleteAddr(ip) => {
                    r.addrs.remove(ip);
                }
                Mutation::PutPrefix6(p) => {
                    r.prefixes6.insert(p.prefix, p.clone());
                }
                Mutation::DeletePrefix6(p) => {
                    r.prefixes6.remove(p);
                }
                Mutation::PutAddr6(a) => {
                    r.addrs6.insert(a.ip, a.clone());
                }
                Mutation::DeleteAddr6(ip) => {
                    r.addrs6.remove(ip);
                }
            }
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), Infallible> {
        Ok(())
    }

    fn replace_all(&self, state: &PersistedState) -> Result<(), Infallible> {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        *guard = Records {
            enis: state
                .enis
                .iter()
                .map(|e| (e.id.clone(), e.clone()))
                .collect(),
            addrs: state.addrs.iter().map(|a| (a.ip, a.clone())).collect(),
            prefixes6: state
                .prefixes6
                .iter()
                .map(|p| (p.prefix, p.clone()))
                .collect(),
            addrs6: state.addrs6.iter().map(|a| (a.ip, a.clone())).collect(),
        };
        Ok(())
    }
}
