//! IPv4 unicast routes: add, replace, delete, dump.

use std::fmt;
use std::net::Ipv4Addr;

use ipnetwork::Ipv4Network;
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{
    FLAGS_ACK, FLAGS_CREATE_EXCL, FLAGS_CREATE_REPLACE, FLAGS_DUMP, RT_TABLE_MAIN, Request,
    table_header, table_name,
};

/// Route scope, as `ip route` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `scope global`: reached through a gateway.
    Universe,
    /// `scope link`: directly on the interface.
    Link,
    /// `scope host`: this host.
    Host,
    /// Any other value.
    Other(u8),
}

impl From<Scope> for RouteScope {
    fn from(scope: Scope) -> Self {
        match scope {
            Scope::Universe => RouteScope::Universe,
            Scope::Link => RouteScope::Link,
            Scope::Host => RouteScope::Host,
            Scope::Other(n) => RouteScope::from(n),
        }
    }
}

impl From<RouteScope> for Scope {
    fn from(scope: RouteScope) -> Self {
        match scope {
            RouteScope::Universe => Scope::Universe,
            RouteScope::Link => Scope::Link,
            RouteScope::Host => Scope::Host,
            other => Scope::Other(u8::from(other)),
        }
    }
}

/// An IPv4 unicast route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Destination prefix (`0.0.0.0/0` for the default route).
    pub dst: Ipv4Network,
    /// Next hop, when not directly connected.
    pub gateway: Option<Ipv4Addr>,
    /// Output interface index.
    pub oif: Option<u32>,
    /// Routing table id (254 = main).
    pub table: u32,
    /// Scope.
    pub scope: Scope,
}

impl Route {
    /// `<dst> dev <oif> scope link` in `table`.
    pub fn link_scope(dst: Ipv4Network, oif: u32, table: u32) -> Self {
        Self {
            dst,
            gateway: None,
            oif: Some(oif),
            table,
            scope: Scope::Link,
        }
    }

    /// `default via <gateway> dev <oif>` in `table`.
    pub fn default_via(gateway: Ipv4Addr, oif: u32, table: u32) -> Self {
        Self {
            dst: default_dst(),
            gateway: Some(gateway),
            oif: Some(oif),
            table,
            scope: Scope::Universe,
        }
    }

    /// True for a `0.0.0.0/0` destination.
    pub fn is_default(&self) -> bool {
        self.dst.prefix() == 0
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_default() {
            write!(f, "default")?;
        } else {
            write!(f, "{}", self.dst)?;
        }
        if let Some(gw) = self.gateway {
            write!(f, " via {gw}")?;
        }
        if let Some(oif) = self.oif {
            write!(f, " dev #{oif}")?;
        }
        if self.table != RT_TABLE_MAIN {
            write!(f, " table {}", table_name(self.table))?;
        }
        match self.scope {
            Scope::Universe => Ok(()),
            Scope::Link => write!(f, " scope link"),
            Scope::Host => write!(f, " scope host"),
            Scope::Other(n) => write!(f, " scope {n}"),
        }
    }
}

/// `0.0.0.0/0`.
pub fn default_dst() -> Ipv4Network {
    Ipv4Network::new(Ipv4Addr::UNSPECIFIED, 0).expect("prefix 0 is always valid")
}

fn route_message(route: &Route, deleting: bool) -> RouteMessage {
    let mut msg = RouteMessage::default();
    msg.header.address_family = AddressFamily::Inet;
    msg.header.destination_prefix_length = route.dst.prefix();
    msg.header.table = table_header(route.table);
    if deleting {
        // Unset fields are wildcards for the kernel's match: scope "nowhere", no type,
        // no protocol.
        msg.header.scope = RouteScope::NoWhere;
        msg.header.kind = RouteType::Unspec;
        msg.header.protocol = RouteProtocol::Unspec;
    } else {
        msg.header.scope = route.scope.into();
        msg.header.kind = RouteType::Unicast;
        msg.header.protocol = RouteProtocol::Boot;
    }
    msg.attributes.push(RouteAttribute::Table(route.table));
    if route.dst.prefix() > 0 {
        msg.attributes
            .push(RouteAttribute::Destination(RouteAddress::Inet(
                route.dst.network(),
            )));
    }
    if let Some(gw) = route.gateway {
        msg.attributes
            .push(RouteAttribute::Gateway(RouteAddress::Inet(gw)));
    }
    if let Some(oif) = route.oif {
        msg.attributes.push(RouteAttribute::Oif(oif));
    }
    msg
}

/// `ip route add ...`: fails with `EEXIST` when the route exists.
pub fn add_route(route: &Route) -> Request {
    Request::new(
        RouteNetlinkMessage::NewRoute(route_message(route, false)),
        FLAGS_CREATE_EXCL,
        format!("add route {route}"),
    )
}

/// `ip route replace ...`.
pub fn replace_route(route: &Route) -> Request {
    Request::new(
        RouteNetlinkMessage::NewRoute(route_message(route, false)),
        FLAGS_CREATE_REPLACE,
        format!("replace route {route}"),
    )
}

/// `ip route del ...`; gateway and interface narrow the match when given, the scope is
/// ignored.
pub fn delete_route(route: &Route) -> Request {
    Request::new(
        RouteNetlinkMessage::DelRoute(route_message(route, true)),
        FLAGS_ACK,
        format!("delete route {route}"),
    )
}

/// `ip -4 route show table all`; filter with [`parse_routes`].
pub fn dump_routes() -> Request {
    let mut msg = RouteMessage::default();
    msg.header.address_family = AddressFamily::Inet;
    Request::new(
        RouteNetlinkMessage::GetRoute(msg),
        FLAGS_DUMP,
        "dump IPv4 routes".into(),
    )
}

/// Our view of a kernel route message; `None` for anything but IPv4 unicast routes.
pub fn parse_route(msg: &RouteMessage) -> Option<Route> {
    if msg.header.address_family != AddressFamily::Inet || msg.header.kind != RouteType::Unicast {
        return None;
    }
    let mut dst = Ipv4Addr::UNSPECIFIED;
    let mut gateway = None;
    let mut oif = None;
    let mut table = u32::from(msg.header.table);
    for attr in &msg.attributes {
        match attr {
            RouteAttribute::Destination(RouteAddress::Inet(ip)) => dst = *ip,
            RouteAttribute::Gateway(RouteAddress::Inet(ip)) => gateway = Some(*ip),
            RouteAttribute::Oif(index) => oif = Some(*index),
            RouteAttribute::Table(t) => table = *t,
            _ => {}
        }
    }
    Some(Route {
        dst: Ipv4Network::new(dst, msg.header.destination_prefix_length).ok()?,
        gateway,
        oif,
        table,
        scope: msg.header.scope.into(),
    })
}

/// The IPv4 unicast routes of `table` in a dump answer.
pub fn parse_routes(messages: &[RouteNetlinkMessage], table: u32) -> Vec<Route> {
    messages
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewRoute(r) => parse_route(r),
            _ => None,
        })
        .filter(|r| r.table == table)
        .collect()
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE};

    use super::*;

    fn net(s: &str) -> Ipv4Network {
        s.parse().unwrap()
    }

    fn new_route(req: &Request) -> &RouteMessage {
        match req.inner() {
            Some(RouteNetlinkMessage::NewRoute(m)) | Some(RouteNetlinkMessage::DelRoute(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn host_route_replace_in_main() {
        let route = Route::link_scope(net("10.0.0.5/32"), 7, RT_TABLE_MAIN);
        let req = replace_route(&route);
        assert_eq!(
            req.flags() & (NLM_F_CREATE | NLM_F_REPLACE | NLM_F_EXCL),
            NLM_F_CREATE | NLM_F_REPLACE
        );
        let m = new_route(&req);
        assert_eq!(m.header.table, 254);
        assert_eq!(m.header.destination_prefix_length, 32);
        assert_eq!(m.header.scope, RouteScope::Link);
        assert_eq!(m.header.kind, RouteType::Unicast);
        assert!(m.attributes.contains(&RouteAttribute::Table(254)));
        assert!(m.attributes.contains(&RouteAttribute::Oif(7)));
        assert!(
            m.attributes
                .contains(&RouteAttribute::Destination(RouteAddress::Inet(
                    Ipv4Addr::new(10, 0, 0, 5)
                )))
        );
        assert_eq!(req.op, "replace route 10.0.0.5/32 dev #7 scope link");
        assert_eq!(parse_route(m), Some(route));
    }

    #[test]
    fn default_route_is_exclusive_and_has_no_destination() {
        let route = Route::default_via(Ipv4Addr::new(169, 254, 1, 1), 2, RT_TABLE_MAIN);
        let req = add_route(&route);
        assert_eq!(
            req.flags() & (NLM_F_CREATE | NLM_F_EXCL),
            NLM_F_CREATE | NLM_F_EXCL
        );
        let m = new_route(&req);
        assert_eq!(m.header.destination_prefix_length, 0);
        assert_eq!(m.header.scope, RouteScope::Universe);
        assert!(
            !m.attributes
                .iter()
                .any(|a| matches!(a, RouteAttribute::Destination(_)))
        );
        assert!(
            m.attributes
                .contains(&RouteAttribute::Gateway(RouteAddress::Inet(Ipv4Addr::new(
                    169, 254, 1, 1
                ))))
        );
        assert_eq!(req.op, "add route default via 169.254.1.1 dev #2");
        assert_eq!(parse_route(m), Some(route));
    }

    #[test]
    fn big_table_ids_go_in_the_attribute() {
        let route = Route::link_scope(net("10.1.0.0/16"), 3, 100_000);
        let m = new_route(&add_route(&route)).clone();
        assert_eq!(m.header.table, 0);
        assert!(m.attributes.contains(&RouteAttribute::Table(100_000)));
        let m2 = new_route(&add_route(&Route { table: 2, ..route })).clone();
        assert_eq!(m2.header.table, 2);
        assert!(m2.attributes.contains(&RouteAttribute::Table(2)));
    }

    #[test]
    fn delete_uses_wildcards() {
        let route = Route::link_scope(net("10.0.0.5/32"), 7, RT_TABLE_MAIN);
        let m = new_route(&delete_route(&route)).clone();
        assert_eq!(m.header.scope, RouteScope::NoWhere);
        assert_eq!(m.header.kind, RouteType::Unspec);
        assert_eq!(m.header.protocol, RouteProtocol::Unspec);
        assert!(m.attributes.contains(&RouteAttribute::Oif(7)));
    }

    #[test]
    fn dump_and_filter_by_table() {
        assert_eq!(dump_routes().flags() & NLM_F_DUMP, NLM_F_DUMP);
        let main = Route::link_scope(net("10.0.0.5/32"), 7, RT_TABLE_MAIN);
        let other = Route::default_via(Ipv4Addr::new(10, 0, 0, 1), 3, 2);
        let msgs = vec![
            RouteNetlinkMessage::NewRoute(route_message(&main, false)),
            RouteNetlinkMessage::NewRoute(route_message(&other, false)),
        ];
        assert_eq!(parse_routes(&msgs, RT_TABLE_MAIN), vec![main]);
        assert_eq!(parse_routes(&msgs, 2), vec![other]);
    }
}
