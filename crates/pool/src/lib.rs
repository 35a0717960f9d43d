//! The IPAM brain, pure: which addresses the node holds on which ENI, who holds each one,
//! cooldown after release, and what the pool should ask EC2 for next.
//!
//! Nothing here does I/O or reads a clock: time comes in as a [`Timestamp`] argument, every
//! change comes out as a list of [`Mutation`]s for the caller to persist through a
//! [`StateStore`], and planning returns [`Action`]s for the caller to carry out.

mod datastore;
mod error;
mod model;
mod persist;
mod plan;
mod time;

pub use datastore::{Allocated, Counts, Pool, Released, RestoreIssue};
pub use error::{AssignError, PoolError};
pub use model::{AddrSlot, AttachmentKey, EniInfo, MAIN_TABLE, PodInfo, SlotState};
pub use persist::{MemoryStore, Mutation, PersistedAddr, PersistedState, StateStore};
pub use plan::{Action, Blocked, NodeLimits, Plan, Targets, plan};
pub use time::{Clock, Timestamp};
