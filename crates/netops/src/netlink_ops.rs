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
use crate::messages::addr::{Address, AddressOf};
use crate::messages::family::{FamilyAddr, IpFamily};
use crate::messages::link::{Link, VethSpec};
use crate::messages::neigh::{Neighbour, NeighbourOf};
use crate::messages::route::{Route, RouteOf};
use crate::messages::rule::{Rule, RuleOf};
use crate::socket::Netlink;

/// The netlink operations of one network namespace that pod wiring needs, for either address
/// family (the family follows from the argument, or is named: `routes_of::<Ipv6Network>`).
///
/// Errors follow the kernel's: a request for something missing fails with an error whose
/// [`crate::NetlinkError::is_not_found`] is true, creating something present with one whose
/// [`crate::NetlinkError::is_exists`] is true, and every error names the operation.
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
    /// Sets `net.ipv6.conf.<ifname>.<setting>` (`ENOENT` when the kernel has no such file,
    /// e.g. without IPv6).
    fn set_ipv6_conf(&self, ifname: &str, setting: &str, value: &str) -> Result<()>;
    /// Adds an address to a link (`EEXIST` if present); IPv6 ones without DAD.
    fn add_address<F: IpFamily>(&self, index: u32, network: F) -> Result<()>;
    /// Every address of family `F` in the namespace.
    fn addresses_of<F: IpFamily>(&self) -> Result<Vec<AddressOf<F>>>;
    /// Adds a route (`EEXIST` if present).
    fn add_route<F: IpFamily>(&self, route: &RouteOf<F>) -> Result<()>;
    /// Adds or replaces a route.
    fn replace_route<F: IpFamily>(&self, route: &RouteOf<F>) -> Result<()>;
    /// Deletes a route (`ESRCH` if absent).
    fn delete_route<F: IpFamily>(&self, route: &RouteOf<F>) -> Result<()>;
    /// The unicast routes of family `F` in one table.
    fn routes_of<F: IpFamily>(&self, table: u32) -> Result<Vec<RouteOf<F>>>;
    /// Adds a rule (`EEXIST` if an identical one exists).
    fn add_rule<F: IpFamily>(&self, rule: &RuleOf<F>) -> Result<()>;
    /// Deletes the first rule matching `rule` (`ENOENT` if none).
    fn delete_rule<F: IpFamily>(&self, rule: &RuleOf<F>) -> Result<()>;
    /// Every rule of family `F`.
    fn rules_of<F: IpFamily>(&self) -> Result<Vec<RuleOf<F>>>;
    /// Adds or replaces a permanent neighbour entry.
    fn replace_neighbour<A: FamilyAddr>(&self, index: u32, ip: A, mac: [u8; 6]) -> Result<()>;
    /// Every neighbour entry of `A`'s family.
    fn neighbours_of<A: FamilyAddr>(&self) -> Result<Vec<NeighbourOf<A>>>;

    /// Every IPv4 address of the namespace.
    fn addresses(&self) -> Result<Vec<Address>> {
        self.addresses_of::<Ipv4Network>()
    }
    /// The IPv4 unicast routes of one table.
    fn routes(&self, table: u32) -> Result<Vec<Route>> {
        self.routes_of::<Ipv4Network>(table)
    }
    /// Every IPv4 rule.
    fn rules(&self) -> Result<Vec<Rule>> {
        self.rules_of::<Ipv4Network>()
    }
    /// Every IPv4 neighbour entry.
    fn neighbours(&self) -> Result<Vec<Neighbour>> {
        self.neighbours_of::<Ipv4Addr>()
    }
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
    fn set_ipv6_conf(&self, ifname: &str, setting: &str, value: &str) -> Result<()> {
        Netlink::set_ipv6_conf(self, ifname, setting, value)
    }
    fn add_address<F: IpFamily>(&self, index: u32, network: F) -> Result<()> {
        Netlink::add_address(self, index, network)
    }
    fn addresses_of<F: IpFamily>(&self) -> Result<Vec<AddressOf<F>>> {
        Netlink::addresses_of(self)
    }
    fn add_route<F: IpFamily>(&self, route: &RouteOf<F>) -> Result<()> {
        Netlink::add_route(self, route)
    }
    fn replace_route<F: IpFamily>(&self, route: &RouteOf<F>) -> Result<()> {
        Netlink::replace_route(self, route)
    }
    fn delete_route<F: IpFamily>(&self, route: &RouteOf<F>) -> Result<()> {
        Netlink::delete_route(self, route)
    }
    fn routes_of<F: IpFamily>(&self, table: u32) -> Result<Vec<RouteOf<F>>> {
        Netlink::routes_of(self, table)
    }
    fn add_rule<F: IpFamily>(&self, rule: &RuleOf<F>) -> Result<()> {
        Netlink::add_rule(self, rule)
    }
    fn delete_rule<F: IpFamily>(&self, rule: &RuleOf<F>) -> Result<()> {
        Netlink::delete_rule(self, rule)
    }
    fn rules_of<F: IpFamily>(&self) -> Result<Vec<RuleOf<F>>> {
        Netlink::rules_of(self)
    }
    fn replace_neighbour<A: FamilyAddr>(&self, index: u32, ip: A, mac: [u8; 6]) -> Result<()> {
        Netlink::replace_neighbour(self, index, ip, mac)
    }
    fn neighbours_of<A: FamilyAddr>(&self) -> Result<Vec<NeighbourOf<A>>> {
        Netlink::neighbours_of(self)
    }
}
