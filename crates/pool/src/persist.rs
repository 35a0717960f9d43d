use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::Ipv4Addr;
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::model::{AddrSlot, EniInfo};

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

/// The pool's durable state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersistedState {
    /// ENIs.
    pub enis: Vec<EniInfo>,
    /// Secondary addresses.
    pub addrs: Vec<PersistedAddr>,
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
    inner: Mutex<(BTreeMap<String, EniInfo>, BTreeMap<Ipv4Addr, PersistedAddr>)>,
}

impl StateStore for MemoryStore {
    type Error = Infallible;

    fn load(&self) -> Result<PersistedState, Infallible> {
        let guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(PersistedState {
            enis: guard.0.values().cloned().collect(),
            addrs: guard.1.values().cloned().collect(),
        })
    }

    fn apply(&self, mutations: &[Mutation]) -> Result<(), Infallible> {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let (enis, addrs) = &mut *guard;
        for m in mutations {
            match m {
                Mutation::PutEni(e) => {
                    enis.insert(e.id.clone(), e.clone());
                }
                Mutation::DeleteEni(id) => {
                    enis.remove(id);
                }
                Mutation::PutAddr(a) => {
                    addrs.insert(a.ip, a.clone());
                }
                Mutation::DeleteAddr(ip) => {
                    addrs.remove(ip);
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
        guard.0 = state
            .enis
            .iter()
            .map(|e| (e.id.clone(), e.clone()))
            .collect();
        guard.1 = state.addrs.iter().map(|a| (a.ip, a.clone())).collect();
        Ok(())
    }
}
