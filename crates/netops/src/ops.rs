//! Low-level operations on a [`Netlink`] socket: each builds one request and sends it.

use ipnetwork::Ipv4Network;

use crate::error::Result;
use crate::messages::Request;
use crate::messages::addr::{self, Address, AddressOf};
use crate::messages::family::{FamilyAddr, IpFamily};
use crate::messages::link::{self, Link, VethSpec};
use crate::messages::neigh::{self, Neighbour, NeighbourOf};
use crate::messages::route::{self, Route, RouteOf};
use crate::messages::rule::{self, Rule, RuleOf};
use crate::socket::Netlink;

impl Netlink {
    fn get_one_link(&self, request: Request) -> Result<Option<Link>> {
        match self.dump(request) {
            Ok(messages) => Ok(link::parse_links(&messages).into_iter().next()),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The link named `name`, if it exists.
    pub fn link_by_name(&self, name: &str) -> Result<Option<Link>> {
        self.get_one_link(link::get_link_by_name(name))
    }

    /// The link with index `index`, if it exists.
    pub fn link_by_index(&self, index: u32) -> Result<Option<Link>> {
        self.get_one_link(link::get_link_by_index(index))
    }

    /// Every link of the namespace.
    pub fn links(&self) -> Result<Vec<Link>> {
        Ok(link::parse_links(&self.dump(link::dump_links())?))
    }

    /// The link with hardware address `mac` (how the daemon finds an ENI), if any.
    pub fn link_by_mac(&self, mac: &[u8; 6]) -> Result<Option<Link>> {
        Ok(self
            .links()?
            .into_iter()
            .find(|l| l.mac.as_ref() == Some(mac)))
    }

    /// Creates a veth pair; see [`VethSpec`].
    pub fn create_veth(&self, spec: &VethSpec) -> Result<()> {
        self.execute(link::create_veth(spec))
    }

    /// Deletes the link named `name` (a veth takes its peer with it).
    pub fn delete_link_by_name(&self, name: &str) -> Result<()> {
        self.execute(link::delete_link_by_name(name))
    }

    /// Deletes the link with index `index`.
    pub fn delete_link_by_index(&self, index: u32) -> Result<()> {
        self.execute(link::delete_link_by_index(index))
    }

    /// Sets a link administratively up.
    pub fn set_link_up(&self, index: u32) -> Result<()> {
        self.execute(link::set_link_up(index, true))
    }

    /// Sets a link administratively down.
    pub fn set_link_down(&self, index: u32) -> Result<()> {
        self.execute(link::set_link_up(index, false))
    }

    /// Sets a link's MTU.
    pub fn set_link_mtu(&self, index: u32, mtu: u32) -> Result<()> {
        self.execute(link::set_link_mtu(index, mtu))
    }

    /// Adds an address to a link (`EEXIST` if present); IPv6 ones without duplicate address
    /// detection.
    pub fn add_address<F: IpFamily>(&self, index: u32, network: F) -> Result<()> {
        self.execute(addr::add_address(index, network))
    }

    /// Removes an address from a link.
    pub fn delete_address<F: IpFamily>(&self, index: u32, network: F) -> Result<()> {
        self.execute(addr::delete_address(index, network))
    }

    /// Every IPv4 address of the namespace.
    pub fn addresses(&self) -> Result<Vec<Address>> {
        self.addresses_of::<Ipv4Network>()
    }

    /// Every address of family `F` in the namespace.
    pub fn addresses_of<F: IpFamily>(&self) -> Result<Vec<AddressOf<F>>> {
        Ok(addr::parse_addresses_of(
            &self.dump(addr::dump_addresses_of::<F>())?,
        ))
    }

    /// Adds a route (`EEXIST` if present).
    pub fn add_route<F: IpFamily>(&self, route: &RouteOf<F>) -> Result<()> {
        self.execute(route::add_route(route))
    }

    /// Adds or replaces a route.
    pub fn replace_route<F: IpFamily>(&self, route: &RouteOf<F>) -> Result<()> {
        self.execute(route::replace_route(route))
    }

    /// Deletes a route (`ESRCH` if absent).
    pub fn delete_route<F: IpFamily>(&self, route: &RouteOf<F>) -> Result<()> {
        self.execute(route::delete_route(route))
    }

    /// The IPv4 unicast routes of one table.
    pub fn routes(&self, table: u32) -> Result<Vec<Route>> {
        self.routes_of::<Ipv4Network>(table)
    }

    /// The unicast routes of family `F` in one table.
    pub fn routes_of<F: IpFamily>(&self, table: u32) -> Result<Vec<RouteOf<F>>> {
        Ok(route::parse_routes_of(
            &self.dump(route::dump_routes_of::<F>())?,
            table,
        ))
    }

    /// The unicast routes of family `F` in every table.
    pub fn all_routes_of<F: IpFamily>(&self) -> Result<Vec<RouteOf<F>>> {
        Ok(route::parse_all_routes_of(
            &self.dump(route::dump_routes_of::<F>())?,
        ))
    }

    /// Adds a rule (`EEXIST` if an identical one exists).
    pub fn add_rule<F: IpFamily>(&self, rule: &RuleOf<F>) -> Result<()> {
        self.execute(rule::add_rule(rule))
    }

    /// Deletes the first rule matching `rule` (`ENOENT` if none).
    pub fn delete_rule<F: IpFamily>(&self, rule: &RuleOf<F>) -> Result<()> {
        self.execute(rule::delete_rule(rule))
    }

    /// Every IPv4 rule.
    pub fn rules(&self) -> Result<Vec<Rule>> {
        self.rules_of::<Ipv4Network>()
    }

    /// Every rule of family `F`.
    pub fn rules_of<F: IpFamily>(&self) -> Result<Vec<RuleOf<F>>> {
        Ok(rule::parse_rules_of(
            &self.dump(rule::dump_rules_of::<F>())?,
        ))
    }

    /// Adds a permanent neighbour entry (`EEXIST` if present).
    pub fn add_neighbour<A: FamilyAddr>(&self, index: u32, ip: A, mac: [u8; 6]) -> Result<()> {
        self.execute(neigh::add_neighbour(index, ip, mac))
    }

    /// Adds or replaces a permanent neighbour entry.
    pub fn replace_neighbour<A: FamilyAddr>(&self, index: u32, ip: A, mac: [u8; 6]) -> Result<()> {
        self.execute(neigh::replace_neighbour(index, ip, mac))
    }

    /// Deletes a neighbour entry.
    pub fn delete_neighbour<A: FamilyAddr>(&self, index: u32, ip: A) -> Result<()> {
        self.execute(neigh::delete_neighbour(index, ip))
    }

    /// Every IPv4 neighbour entry.
    pub fn neighbours(&self) -> Result<Vec<Neighbour>> {
        self.neighbours_of::<std::net::Ipv4Addr>()
    }

    /// Every neighbour entry of `A`'s family.
    pub fn neighbours_of<A: FamilyAddr>(&self) -> Result<Vec<NeighbourOf<A>>> {
        Ok(neigh::parse_neighbours_of(
            &self.dump(neigh::dump_neighbours_of::<A::Net>())?,
        ))
    }

    /// Sets `net.ipv6.conf.<ifname>.<setting>` in this socket's namespace, for
    /// the IPv6 settings of the pod and host veths. A missing file is `is_not_found`.
    pub fn set_ipv6_conf(&self, ifname: &str, setting: &str, value: &str) -> Result<()> {
        crate::sysctl::set_ipv6_conf(self.netns_fd(), ifname, setting, value)
    }
}
