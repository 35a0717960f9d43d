use std::net::Ipv4Addr;
use std::time::Duration;

use ipnetwork::Ipv4Network;
use thiserror::Error;

/// Why no address could be assigned. The text reaches the operator through the CNI error.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum AssignError {
    /// The node holds no address for pods at all.
    #[error("the node holds no secondary addresses yet")]
    EmptyPool,
    /// Every held address is assigned.
    #[error("all {assigned} addresses on the node are assigned")]
    AllAssigned {
        /// How many.
        assigned: u32,
    },
    /// Some addresses are free but every one of them is still cooling down.
    #[error("every free address is cooling down ({cooling} cooling, the next is free in {}s)", .next_free_in.as_secs().max(1))]
    AllCooling {
        /// How many are cooling.
        cooling: u32,
        /// When the first of them becomes usable.
        next_free_in: Duration,
    },
}

/// An update to the pool that contradicts what it holds.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum PoolError {
    /// The ENI is not in the pool.
    #[error("unknown ENI {0}")]
    UnknownEni(String),
    /// The address is already held on another ENI.
    #[error("address {ip} is already held on {held_on}, not {eni}")]
    AddressOnOtherEni {
        /// The address.
        ip: Ipv4Addr,
        /// Where the pool has it.
        held_on: String,
        /// Where it was claimed.
        eni: String,
    },
    /// The address is the ENI's own primary address.
    #[error("address {ip} is the primary address of {eni}, not a secondary one")]
    PrimaryAddress {
        /// The address.
        ip: Ipv4Addr,
        /// The ENI.
        eni: String,
    },
    /// The address is not in the pool.
    #[error("address {0} is not in the pool")]
    UnknownAddress(Ipv4Addr),
    /// Removing it would take an address from a pod.
    #[error("address {ip} is assigned to {holder}")]
    InUse {
        /// The address.
        ip: Ipv4Addr,
        /// Who holds it.
        holder: String,
    },
    /// It is cooling down and cannot be given back yet.
    #[error("address {ip} is cooling down until {}", .until.millis())]
    Cooling {
        /// The address.
        ip: Ipv4Addr,
        /// End of its cooldown.
        until: crate::time::Timestamp,
    },
    /// The attachment already holds another address.
    #[error("{key} already holds {held}")]
    KeyHoldsOther {
        /// The attachment.
        key: String,
        /// The address it holds.
        held: Ipv4Addr,
    },
    /// A prefix to add is not a delegable /28.
    #[error("{0} is not a /28 prefix named by its network address")]
    InvalidPrefix(Ipv4Network),
    /// A prefix to add overlaps an address the pool already has.
    #[error("prefix {prefix} overlaps address {ip}, already held on {held_on}")]
    PrefixOverlap {
        /// The prefix.
        prefix: Ipv4Network,
        /// The first address they share.
        ip: Ipv4Addr,
        /// The ENI holding that address.
        held_on: String,
    },
    /// The prefix is already held on another ENI.
    #[error("prefix {prefix} is already held on {held_on}, not {eni}")]
    PrefixOnOtherEni {
        /// The prefix.
        prefix: Ipv4Network,
        /// Where the pool has it.
        held_on: String,
        /// Where it was claimed.
        eni: String,
    },
    /// The prefix is not in the pool.
    #[error("prefix {0} is not in the pool")]
    UnknownPrefix(Ipv4Network),
    /// A single address of a delegated prefix was named where only whole prefixes make sense.
    #[error("address {ip} is part of prefix {prefix}: add or remove the whole prefix")]
    AddressInPrefix {
        /// The address.
        ip: Ipv4Addr,
        /// Its prefix.
        prefix: Ipv4Network,
    },
}
