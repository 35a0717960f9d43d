//! The IPAM brain, pure: which addresses (secondary /32s, delegated /28 prefixes, and in IPv6
//! mode addresses of a delegated /80) the node
//! holds on which ENI, who holds each one, cooldown after release, and what the pool should ask
//! EC2 for next.
//!
//! Nothing here does I/O or reads a clock: time comes in as a [`Timestamp`] argument, every
//! change comes out as a list of [`Mutation`]s for the caller to persist through a
//! [`StateStore`], and planning returns [`Action`]s for the caller to carry out.

mod datastore;
mod error;
mod fallback;
mod model;
mod persist;
mod plan;
mod time;
mod v6;

pub use datastore::{Allocated, Counts, Pool, Released, Removal, RestoreIssue};
pub use error::{AssignError, PoolError};
pub use fallback::{
    PREFIX_RETRY_FIRST, PREFIX_RETRY_MAX, PrefixFallback, PrefixFallbacks, PrefixScope,
};
pub use model::{
    ADDRS_PER_PREFIX, AddrSlot, AttachmentKey, EniInfo, PREFIX_LEN, PodInfo, SlotState,
    is_delegable_prefix,
};
pub use persist::{
    MemoryStore, Mutation, PersistedAddr, PersistedAddr6, PersistedState, Prefix6, StateStore,
};
pub use plan::{
    Action, Blocked, Explained, MIN_ENI_AGE, NodeLimits, Plan, PlanContext, PoolMode,
    RELEASE_INTERVAL, Reason, Standing, Targets, explain, plan,
};
pub use time::{Clock, Timestamp};
pub use v6::{
    Allocated6, Counts6, EGRESS_V4_RANGE, PREFIX6_LEN, Pool6, Pool6Error, RestoreIssue6,
    is_delegable_prefix6,
};
