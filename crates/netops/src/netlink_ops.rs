//! The seam between pod wiring (ADD, DEL, CHECK) and the kernel: exactly the netlink
//! operations [`crate::setup_pod`], [`crate::teardown_host`] and [`crate::check_pod`] use.
//!
//! [`Netlink`] implements it by sending the same requests as its inherent methods, so
//! production behaviour is that of the socket. Unit tests implement it with an in-memory
//! model that records every call and can be told to fail one, which is how the order of
//! operations and every undo path are tested without root.

use std::net::Ipv4Addr;
use std::os::fd::BorrowedFd;

use ipnetwork::Ipv4Network;

use crate::error::Result;
use crate::messages::addr::Address;
use crate::messages::link::{Link, VethSpec};
use crate::messages::neigh::Neighbour;
use crate::messages::route::Route;
use crate::messages::rule::Rule;
use crate::socket::Netlink;

/// The netlink operations of one network namespace that pod wiring needs.
///
/// Errors follow the kernel's: a request for something missing fails with an error whose
/// [`crate::Error::is_not_found`] is true, creating something present with one whose
/// [`crate::Error::is_exists`] is true, and every error names the operation.
pub trait NetlinkOps {
    /// A file descriptor of this namespace, e.g. to create a veth peer in it.
    fn netns_fd(&self) -> BorrowedFd<'_>;
    /// The link named `name`, if it exists.
    fn link_by_name(&self, name: &str) -> Result<Option<Link>>;
    /// Creates a veth pair; see [`VethSpec`].
    fn create_veth(&self, spec: &VethSpec) -> Result<()>;
    /// Deletes the link named `name` (a veth takes its peer with it).
    fn delete_link_by_name(&self, name: &str) -> Result<()>;
    /// Deletes the link with index `index`.
    fn delete_link_by_index(&self, index: u32) -> Result<()>;
    /// Sets a link administratively up.
    fn set_link_up(&self, index: u32) -> Result<()>;
    /// Adds an IPv4 address to a link (`EEXIST` if present).
    fn add_address(&self, index: u32, network: Ipv4Network) -> Result<()>;
    /// Every IPv4 address of the namespace.
    fn addresses(&self) -> Result<Vec<Address>>;
    /// Adds a route (`EEXIST` if present).
    fn add_route(&self, route: &Route) -> Result<()>;
    /// Adds or replaces a route.
    fn replace_route(&self, route: &Route) -> Result<()>;
    /// Deletes a route (`ESRCH` if absent).
    fn delete_route(&self, route: &Route) -> Result<()>;
    /// The IPv4 unicast routes of one table.
    fn routes(&self, table: u32) -> Result<Vec<Route>>;
    /// Adds a rule (`EEXIST` if an identical one exists).
    fn add_rule(&self, rule: &Rule) -> Result<()>;
    /// Deletes the first rule matching `rule` (`ENOENT` if none).
    fn delete_rule(&self, rule: &Rule) -> Result<()>;
    /// Every IPv4 rule.
    fn rules(&self) -> Result<Vec<Rule>>;
    /// Adds or replaces a permanent neighbour entry.
    fn replace_neighbour(&self, index: u32, ip: Ipv4Addr, mac: [u8; 6]) -> Result<()>;
    /// Every IPv4 neighbour entry.
    fn neighbours(&self) -> Result<Vec<Neighbour>>;
}

// Forwarding keeps `Netlink`'s inherent methods, which the daemon and the root tests call
// without importing this trait; a path call picks the inherent method, never this one.
impl NetlinkOps for Netlink {
    fn netns_fd(&self) -> BorrowedFd<'_> {
        Netlink::netns_fd(self)
    }
    fn link_by_name(&self, name: &str) -> Result<Option<Link>> {
        Netlink::link_by_name(self, name)
    }
    fn create_veth(&self, spec: &VethSpec) -> Result<()> {
        Netlink::create_veth(self, spec)
    }
    fn delete_link_by_name(&self, name: &str) -> Result<()> {
        Netlink::delete_link_by_name(self, name)
    }
    fn delete_link_by_index(&self, index: u32) -> Result<()> {
        Netlink::delete_link_by_index(self, index)
    }
    fn set_link_up(&self, index: u32) -> Result<()> {
        Netlink::set_link_up(self, index)
    }
    fn add_address(&self, index: u32, network: Ipv4Network) -> Result<()> {
        Netlink::add_address(self, index, network)
    }
    fn addresses(&self) -> Result<Vec<Address>> {
        Netlink::addresses(self)
    }
    fn add_route(&self, route: &Route) -> Result<()> {
        Netlink::add_route(self, route)
    }
    fn replace_route(&self, route: &Route) -> Result<()> {
        Netlink::replace_route(self, route)
    }
    fn delete_route(&self, route: &Route) -> Result<()> {
        Netlink::delete_route(self, route)
    }
    fn routes(&self, table: u32) -> Result<Vec<Route>> {
        Netlink::routes(self, table)
    }
    fn add_rule(&self, rule: &Rule) -> Result<()> {
        Netlink::add_rule(self, rule)
    }
    fn delete_rule(&self, rule: &Rule) -> Result<()> {
        Netlink::delete_rule(self, rule)
    }
    fn rules(&self) -> Result<Vec<Rule>> {
        Netlink::rules(self)
    }
    fn replace_neighbour(&self, index: u32, ip: Ipv4Addr, mac: [u8; 6]) -> Result<()> {
        Netlink::replace_neighbour(self, index, ip, mac)
    }
    fn neighbours(&self) -> Result<Vec<Neighbour>> {
        Netlink::neighbours(self)
    }
}
