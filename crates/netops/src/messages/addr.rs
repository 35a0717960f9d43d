//! IPv4 interface addresses: add, delete, dump.

use std::net::{IpAddr, Ipv4Addr};

use ipnetwork::Ipv4Network;
use netlink_packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{FLAGS_ACK, FLAGS_CREATE_EXCL, FLAGS_DUMP, Request};

/// An IPv4 address on an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Address {
    /// Interface index.
    pub index: u32,
    /// Address and prefix length.
    pub network: Ipv4Network,
}

fn address_message(index: u32, network: Ipv4Network) -> AddressMessage {
    let mut msg = AddressMessage::default();
    msg.header.family = AddressFamily::Inet;
    msg.header.prefix_len = network.prefix();
    msg.header.index = index;
    msg.header.scope = AddressScope::Universe;
    let ip = IpAddr::V4(network.ip());
    // IFA_LOCAL is the address itself; IFA_ADDRESS equals it on non point-to-point links.
    msg.attributes.push(AddressAttribute::Local(ip));
    msg.attributes.push(AddressAttribute::Address(ip));
    msg
}

/// `ip addr add <ip>/<len> dev <index>`.
pub fn add_address(index: u32, network: Ipv4Network) -> Request {
    Request::new(
        RouteNetlinkMessage::NewAddress(address_message(index, network)),
        FLAGS_CREATE_EXCL,
        format!("add address {network} dev #{index}"),
    )
}

/// `ip addr del <ip>/<len> dev <index>`.
pub fn delete_address(index: u32, network: Ipv4Network) -> Request {
    Request::new(
        RouteNetlinkMessage::DelAddress(address_message(index, network)),
        FLAGS_ACK,
        format!("delete address {network} dev #{index}"),
    )
}

/// `ip -4 addr show`.
pub fn dump_addresses() -> Request {
    let mut msg = AddressMessage::default();
    msg.header.family = AddressFamily::Inet;
    Request::new(
        RouteNetlinkMessage::GetAddress(msg),
        FLAGS_DUMP,
        "dump IPv4 addresses".into(),
    )
}

/// Our view of a kernel address message; `None` for anything but IPv4.
pub fn parse_address(msg: &AddressMessage) -> Option<Address> {
    if msg.header.family != AddressFamily::Inet {
        return None;
    }
    let mut local: Option<Ipv4Addr> = None;
    let mut address: Option<Ipv4Addr> = None;
    for attr in &msg.attributes {
        match attr {
            AddressAttribute::Local(IpAddr::V4(ip)) => local = Some(*ip),
            AddressAttribute::Address(IpAddr::V4(ip)) => address = Some(*ip),
            _ => {}
        }
    }
    let ip = local.or(address)?;
    let network = Ipv4Network::new(ip, msg.header.prefix_len).ok()?;
    Some(Address {
        index: msg.header.index,
        network,
    })
}

/// The IPv4 addresses in a dump answer.
pub fn parse_addresses(messages: &[RouteNetlinkMessage]) -> Vec<Address> {
    messages
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewAddress(a) => parse_address(a),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};

    use super::*;

    #[test]
    fn add_address_is_exclusive_and_complete() {
        let net: Ipv4Network = "10.0.0.5/32".parse().unwrap();
        let req = add_address(4, net);
        assert_eq!(
            req.flags() & (NLM_F_CREATE | NLM_F_EXCL),
            NLM_F_CREATE | NLM_F_EXCL
        );
        let Some(RouteNetlinkMessage::NewAddress(m)) = req.inner() else {
            panic!()
        };
        assert_eq!(m.header.family, AddressFamily::Inet);
        assert_eq!(m.header.prefix_len, 32);
        assert_eq!(m.header.index, 4);
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5));
        assert_eq!(
            m.attributes,
            vec![AddressAttribute::Local(ip), AddressAttribute::Address(ip)]
        );
        assert_eq!(req.op, "add address 10.0.0.5/32 dev #4");
        assert_eq!(
            parse_address(m),
            Some(Address {
                index: 4,
                network: net
            })
        );
    }

    #[test]
    fn parse_ignores_ipv6() {
        let mut m = AddressMessage::default();
        m.header.family = AddressFamily::Inet6;
        m.attributes
            .push(AddressAttribute::Address("fe80::1".parse().unwrap()));
        assert_eq!(parse_address(&m), None);
    }
}
