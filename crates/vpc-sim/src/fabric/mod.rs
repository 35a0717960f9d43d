//! VPC-in-a-box: the simulated VPC as network namespaces, built from the model with `ip` and
//! `sysctl`.
//!
//! `NAME-vpc` is a router, not a switch: every attached ENI is one veth pair whose VPC side
//! (`n<node>d<device>`) carries the subnet's router address as a /32, and the VPC delivers each
//! address an ENI holds through a `/32` route and a permanent neighbour on that ENI's link.
//! Strict reverse-path filtering there is EC2's source/destination check: a packet whose source
//! is not held by the ENI it comes from is dropped. `NAME-out` stands for everything outside
//! the VPC and sees source addresses as they arrive. When the VPC has IPv6 the same holds for
//! it, with the mechanisms [`v6`] explains: EC2's link-local router `fe80:ec2::1` on every
//! ENI link, delivery of each held address and /80 via the ENI's link-local next hop, and
//! `ip -6 rule`s as the source/destination check. Commands go through a [`Runner`] so every
//! sequence can be checked without root; only namespaces this process created are ever deleted.

mod plan;
mod runner;
pub mod v6;
mod vpc;
mod wiring;

#[cfg(test)]
mod tests;

use std::net::Ipv4Addr;

use thiserror::Error;

pub use plan::{
    DEFAULT_OUTSIDE_IP, DEFAULT_OUTSIDE_IPV6, FabricPlan, NodePlan, NodeRef, OUT_LINK, OUT_LINK6,
    OUTSIDE_LINK_NET, OUTSIDE_MTU, OutsidePlan, VPC_OUT_LINK, VPC_OUT_LINK6, eni_link, node_ifname,
    node_netns, out_netns, vpc_netns,
};
pub use runner::{CommandRunner, Runner};
pub use vpc::Fabric;
pub use wiring::{EniLink, LinkState, Op, Wiring, failed_line};

/// MTU of every ENI, as on EC2 (jumbo frames inside a VPC).
pub const ENI_MTU: u32 = 9001;
/// The IMDS address, put on `lo` in each node namespace.
pub const IMDS_ADDR: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);

/// A fabric operation that failed.
#[derive(Debug, Error)]
pub enum FabricError {
    /// The namespace is already there: another simulator, or leftovers of a crashed one.
    #[error(
        "network namespace {0} already exists (another vpc-sim with this name, or leftovers: `ip netns del {0}`)"
    )]
    NamespaceExists(String),
    /// A command could not be started.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Cause.
        source: std::io::Error,
    },
    /// A command failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Exit status.
        status: String,
        /// What it printed.
        stderr: String,
    },
    /// One line of an `ip -batch` failed; the lines before it were applied, none after.
    #[error("`ip -n {netns}` line {line} `{text}` failed: {stderr}")]
    BatchLine {
        /// Namespace the batch ran in.
        netns: String,
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
        /// What `ip` printed.
        stderr: String,
    },
    /// The model lacks something the plan needs, or the fabric is not built.
    #[error("cannot plan the fabric: {0}")]
    Plan(String),
}
