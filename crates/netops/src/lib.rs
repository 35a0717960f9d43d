//! Netlink side effects of vpc-cni: wiring a pod's veth, address, routes and neighbour, the
//! host's per-pod route and rules, their teardown and checks, plus the general link, address,
//! route, rule and neighbour operations the daemon builds per-ENI tables with.
//!
//! Everything is synchronous: a [`Netlink`] is a plain rtnetlink socket bound to one network
//! namespace (request -> ack, dumps with `NLM_F_DUMP`), with no async runtime, so the CNI
//! plugin stays a fast, short-lived process. Messages are built by pure functions in
//! [`messages`] and can be inspected without privileges. Pod wiring, its teardown and checks
//! take any [`NetlinkOps`], the seam [`Netlink`] implements, so unit tests run them against a
//! recording in-memory fake that can fail any step.
//!
//! The datapath is the Go AWS VPC CNI's (see DESIGN.md "Pod datapath"): in the pod,
//! `<ip>/32` on the interface, `169.254.1.1/32 dev <if> scope link`, `default via
//! 169.254.1.1` and a permanent neighbour `169.254.1.1 -> <host veth MAC>`; on the host,
//! `<ip>/32 dev <veth> scope link`, `to <ip> lookup main` prio 512 and, for a secondary ENI,
//! `from <ip> lookup <table>` prio 1536. An IPv6 address gets the same shape with `<ip6>/128`
//! (no DAD), the gateway `fe80::1` and the main table always, plus IPv6 enabled in the pod
//! (`disable_ipv6=0`) and router advertisements ignored on the host veth (`accept_ra=0`); a
//! dual-stack pod gets both on one veth. Messages, the [`NetlinkOps`] seam and the wiring are
//! written once over [`IpFamily`].

#![warn(missing_docs)]

mod check;
mod eni;
mod error;
#[cfg(test)]
mod fake;
pub mod messages;
mod names;
mod netlink_ops;
mod netns;
mod ops;
mod pod;
pub mod snat;
mod socket;
mod sysctl;
mod teardown;

pub use check::{CheckError, CheckMismatch, ExpectedPod, check_pod};
pub use eni::{
    EniSetup, EniSpec, EniTeardown, PRIO_FROM_ENI, eni_table, setup_eni, subnet_gateway,
    teardown_eni,
};
pub use error::{NetlinkError, Result};
pub use messages::RT_TABLE_MAIN;
pub use messages::addr::{Address, Address6, AddressOf};
pub use messages::family::{FamilyAddr, IpFamily};
pub use messages::link::{Link, VethSpec};
pub use messages::neigh::{Neighbour, Neighbour6, NeighbourOf};
pub use messages::route::{Route, Route6, RouteOf, Scope};
pub use messages::rule::{Rule, Rule6, RuleOf};
pub use names::{
    IFNAME_MAX, format_mac, host_veth_name, parse_mac, random_mac, validate_ifname, veth_name,
};
pub use netlink_ops::NetlinkOps;
pub use pod::{
    POD_GATEWAY, POD_GATEWAY6, PRIO_FROM_POD, PRIO_TO_POD, PodSpec, PodVeth, PodWiring,
    create_pod_veth, remove_pod_veth, setup_pod, wire_pod_veth,
};
pub use socket::Netlink;
pub use teardown::{
    PodTeardown, TeardownReport, is_pod_rule, routed_elsewhere, teardown_host, teardown_pod_host,
    unroute_pod,
};
