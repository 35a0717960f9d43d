//! Unicast routes of either family: add, replace, delete, dump.

use std::fmt;

use ipnetwork::{Ipv4Network, Ipv6Network};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::route::{
    RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};

use super::family::IpFamily;
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

/// A unicast route of family `F`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteOf<F: IpFamily> {
    /// Destination prefix (`0.0.0.0/0` or `::/0` for the default route).
    pub dst: F,
    /// Next hop, when not directly connected.
    pub gateway: Option<F::Addr>,
    /// Output interface index.
    pub oif: Option<u32>,
    /// Routing table id (254 = main).
    pub table: u32,
    /// Scope (always [`Scope::Universe`] for IPv6, see [`IpFamily::ROUTE_SCOPES`]).
    pub scope: Scope,
}

/// An IPv4 unicast route.
pub type Route = RouteOf<Ipv4Network>;
/// An IPv6 unicast route.
pub type Route6 = RouteOf<Ipv6Network>;

impl<F: IpFamily> RouteOf<F> {
    /// `<dst> dev <oif> scope link` in `table` (no scope for IPv6).
    pub fn link_scope(dst: F, oif: u32, table: u32) -> Self {
        Self {
            dst,
            gateway: None,
            oif: Some(oif),
            table,
            scope: if F::ROUTE_SCOPES {
                Scope::Link
            } else {
                Scope::Universe
            },
        }
    }

    /// `default via <gateway> dev <oif>` in `table`.
    pub fn default_via(gateway: F::Addr, oif: u32, table: u32) -> Self {
        Self {
            dst: F::any(),
            gateway: Some(gateway),
            oif: Some(oif),
            table,
            scope: Scope::Universe,
        }
    }

    /// True for a `0.0.0.0/0` or `::/0` destination.
    pub fn is_default(&self) -> bool {
        self.dst.prefix() == 0
    }
}

impl<F: IpFamily> fmt::Display for RouteOf<F> {
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
    Ipv4Network::any()
}

fn route_message<F: IpFamily>(route: &RouteOf<F>, deleting: bool) -> RouteMessage {
    let mut msg = RouteMessage::default();
    msg.header.address_family = F::FAMILY;
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
            .push(RouteAttribute::Destination(F::route_address(
                route.dst.network(),
            )));
    }
    if let Some(gw) = route.gateway {
        msg.attributes
            .push(RouteAttribute::Gateway(F::route_address(gw)));
    }
    if let Some(oif) = route.oif {
        msg.attributes.push(RouteAttribute::Oif(oif));
    }
    msg
}

/// `ip route add ...`: fails with `EEXIST` when the route exists.
pub fn add_route<F: IpFamily>(route: &RouteOf<F>) -> Request {
    Request::new(
        RouteNetlinkMessage::NewRoute(route_message(route, false)),
        FLAGS_CREATE_EXCL,
        format!("add route {route}"),
    )
}

/// `ip route replace ...`.
pub fn replace_route<F: IpFamily>(route: &RouteOf<F>) -> Request {
    Request::new(
        RouteNetlinkMessage::NewRoute(route_message(route, false)),
        FLAGS_CREATE_REPLACE,
        format!("replace route {route}"),
    )
}

/// `ip route del ...`; gateway and interface narrow the match when given, the scope is
/// ignored.
pub fn delete_route<F: IpFamily>(route: &RouteOf<F>) -> Request {
    Request::new(
        RouteNetlinkMessage::DelRoute(route_message(route, true)),
        FLAGS_ACK,
        format!("delete route {route}"),
    )
}

/// `ip -4 route show table all`; filter with [`parse_routes`].
pub fn dump_routes() -> Request {
    dump_routes_of::<Ipv4Network>()
}

/// `ip -4 route show table all` or `ip -6 ...`; filter with [`parse_routes_of`].
pub fn dump_routes_of<F: IpFamily>() -> Request {
    let mut msg = RouteMessage::default();
    msg.header.address_family = F::FAMILY;
    Request::new(
        RouteNetlinkMessage::GetRoute(msg),
        FLAGS_DUMP,
        format!("dump {} routes", F::NAME),
    )
}

/// Our view of a kernel route message; `None` for anything but IPv4 unicast routes.
pub fn parse_route(msg: &RouteMessage) -> Option<Route> {
    parse_route_of(msg)
}

/// Our view of a kernel route message; `None` for anything but unicast routes of family `F`.
pub fn parse_route_of<F: IpFamily>(msg: &RouteMessage) -> Option<RouteOf<F>> {
    if msg.header.address_family != F::FAMILY || msg.header.kind != RouteType::Unicast {
        return None;
    }
    let mut dst = F::unspecified();
    let mut gateway = None;
    let mut oif = None;
    let mut table = u32::from(msg.header.table);
    for attr in &msg.attributes {
        match attr {
            RouteAttribute::Destination(a) => dst = F::from_route_address(a)?,
            RouteAttribute::Gateway(a) => gateway = Some(F::from_route_address(a)?),
            RouteAttribute::Oif(index) => oif = Some(*index),
            RouteAttribute::Table(t) => table = *t,
            _ => {}
        }
    }
    Some(RouteOf {
        dst: F::new(dst, msg.header.destination_prefix_length)?,
        gateway,
        oif,
        table,
        scope: msg.header.scope.into(),
    })
}

/// The IPv4 unicast routes of `table` in a dump answer.
pub fn parse_routes(messages: &[RouteNetlinkMessage], table: u32) -> Vec<Route> {
    parse_routes_of(messages, table)
}

/// The unicast routes of family `F` in `table` in a dump answer.
pub fn parse_routes_of<F: IpFamily>(
    messages: &[RouteNetlinkMessage],
    table: u32,
) -> Vec<RouteOf<F>> {
    parse_all_routes_of(messages)
        .into_iter()
        .filter(|r| r.table == table)
        .collect()
}

/// The unicast routes of family `F` of every table in a dump answer.
pub fn parse_all_routes_of<F: IpFamily>(messages: &[RouteNetlinkMessage]) -> Vec<RouteOf<F>> {
    messages
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewRoute(r) => parse_route_of(r),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE};
    use netlink_packet_route::AddressFamily;
    use netlink_packet_route::route::RouteAddress;

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

    const FE80_1: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);

    #[test]
    fn ipv6_pod_routes_have_no_scope_and_inet6_addresses() {
        let gw = link_scope_v6("fe80::1/128", 2);
        let req = replace_route(&gw);
        let m = new_route(&req);
        assert_eq!(m.header.address_family, AddressFamily::Inet6);
        assert_eq!(m.header.destination_prefix_length, 128);
        assert_eq!(m.header.scope, RouteScope::Universe);
        assert!(
            m.attributes
                .contains(&RouteAttribute::Destination(RouteAddress::Inet6(FE80_1)))
        );
        assert_eq!(req.op, "replace route fe80::1/128 dev #2");
        assert_eq!(parse_route_of(m), Some(gw));
        assert_eq!(parse_route(m), None, "not an IPv4 route");

        let default = Route6::default_via(FE80_1, 2, RT_TABLE_MAIN);
        let req = add_route(&default);
        let m = new_route(&req);
        assert_eq!(m.header.destination_prefix_length, 0);
        assert!(
            !m.attributes
                .iter()
                .any(|a| matches!(a, RouteAttribute::Destination(_)))
        );
        assert!(
            m.attributes
                .contains(&RouteAttribute::Gateway(RouteAddress::Inet6(FE80_1)))
        );
        assert_eq!(req.op, "add route default via fe80::1 dev #2");
        assert_eq!(parse_route_of(m), Some(default));
    }

    fn link_scope_v6(dst: &str, oif: u32) -> Route6 {
        Route6::link_scope(dst.parse().unwrap(), oif, RT_TABLE_MAIN)
    }

    #[test]
    fn dumps_are_per_family() {
        assert_eq!(dump_routes().op, "dump IPv4 routes");
        let v6 = dump_routes_of::<Ipv6Network>();
        assert_eq!(v6.op, "dump IPv6 routes");
        let Some(RouteNetlinkMessage::GetRoute(m)) = v6.inner() else {
            panic!()
        };
        assert_eq!(m.header.address_family, AddressFamily::Inet6);
        let v4 = Route::link_scope(net("10.0.0.5/32"), 7, RT_TABLE_MAIN);
        let v6 = link_scope_v6("2001:db8::5/128", 7);
        let msgs = vec![
            RouteNetlinkMessage::NewRoute(route_message(&v4, false)),
            RouteNetlinkMessage::NewRoute(route_message(&v6, false)),
        ];
        assert_eq!(parse_routes(&msgs, RT_TABLE_MAIN), vec![v4]);
        assert_eq!(parse_routes_of(&msgs, RT_TABLE_MAIN), vec![v6]);
        assert_eq!(
            Route6::default_via(FE80_1, 1, 254).dst,
            Ipv6Network::any(),
            "the IPv6 default is ::/0"
        );
        assert_eq!(default_dst(), net("0.0.0.0/0"));
    }
}
