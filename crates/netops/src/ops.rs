//! Low-level operations on a [`Netlink`] socket: each builds one request and sends it.

use std::net::Ipv4Addr;

use ipnetwork::Ipv4Network;

use crate::error::Result;
use crate::messages::Request;
use crate::messages::addr::{self, Address};
use crate::messages::link::{self, Link, VethSpec};
use crate::messages::neigh::{self, Neighbour};
use crate::messages::route::{self, Route};
use crate::messages::rule::{self, Rule};
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

    /// Adds an IPv4 address to a link (`EEXIST` if present).
    pub fn add_address(&self, index: u32, network: Ipv4Network) -> Result<()> {
        self.execute(addr::add_address(index, network))
    }

    /// Removes an IPv4 address from a link.
    pub fn delete_address(&self, index: u32, network: Ipv4Network) -> Result<()> {
        self.execute(addr::delete_address(index, network))
    }

    /// Every IPv4 address of the namespace.
    pub fn addresses(&self) -> Result<Vec<Address>> {
        Ok(addr::parse_addresses(&self.dump(addr::dump_addresses())?))
    }

    /// Adds a route (`EEXIST` if present).
    pub fn add_route(&self, route: &Route) -> Result<()> {
        self.execute(route::add_route(route))
    }

    /// Adds or replaces a route.
    pub fn replace_route(&self, route: &Route) -> Result<()> {
        self.execute(route::replace_route(route))
    }

    /// Deletes a route (`ESRCH` if absent).
    pub fn delete_route(&self, route: &Route) -> Result<()> {
        self.execute(route::delete_route(route))
    }

    /// The IPv4 unicast routes of one table.
    pub fn routes(&self, table: u32) -> Result<Vec<Route>> {
        Ok(route::parse_routes(
            &self.dump(route::dump_routes())?,
            table,
        ))
    }

    /// Adds a rule (`EEXIST` if an identical one exists).
    pub fn add_rule(&self, rule: &Rule) -> Result<()> {
        self.execute(rule::add_rule(rule))
    }

    /// Deletes the first rule matching `rule` (`ENOENT` if none).
    pub fn delete_rule(&self, rule: &Rule) -> Result<()> {
        self.execute(rule::delete_rule(rule))
    }

    /// Every IPv4 rule.
    pub fn rules(&self) -> Result<Vec<Rule>> {
        Ok(rule::parse_rules(&self.dump(rule::dump_rules())?))
    }

    /// Adds a permanent neighbour entry (`EEXIST` if present).
    pub fn add_neighbour(&self, index: u32, ip: Ipv4Addr, mac: [u8; 6]) -> Result<()> {
        self.execute(neigh::add_neighbour(index, ip, mac))
    }

    /// Adds or replaces a permanent neighbour entry.
    pub fn replace_neighbour(&self, index: u32, ip: Ipv4Addr, mac: [u8; 6]) -> Result<()> {
        self.execute(neigh::replace_neighbour(index, ip, mac))
    }

    /// Deletes a neighbour entry.
    pub fn delete_neighbour(&self, index: u32, ip: Ipv4Addr) -> Result<()> {
        self.execute(neigh::delete_neighbour(index, ip))
    }

    /// Every IPv4 neighbour entry.
    pub fn neighbours(&self) -> Result<Vec<Neighbour>> {
        Ok(neigh::parse_neighbours(
            &self.dump(neigh::dump_neighbours())?,
        ))
    }
}
