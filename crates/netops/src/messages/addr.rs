//! Interface addresses of either family: add, delete, dump.

use std::net::IpAddr;

use ipnetwork::{Ipv4Network, Ipv6Network};
use netlink_packet_route::address::{
    AddressAttribute, AddressHeaderFlags, AddressMessage, AddressScope,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::family::IpFamily;
use super::{FLAGS_ACK, FLAGS_CREATE_EXCL, FLAGS_DUMP, Request};

/// An address of family `F` on an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressOf<F: IpFamily> {
    /// Interface index.
    pub index: u32,
    /// Address and prefix length.
    pub network: F,
}

/// An IPv4 address on an interface.
pub type Address = AddressOf<Ipv4Network>;
/// An IPv6 address on an interface.
pub type Address6 = AddressOf<Ipv6Network>;

fn address_message<F: IpFamily>(index: u32, network: F) -> AddressMessage {
    let mut msg = AddressMessage::default();
    msg.header.family = F::FAMILY;
    msg.header.prefix_len = network.prefix();
    msg.header.index = index;
    msg.header.scope = AddressScope::Universe;
    if F::FAMILY == AddressFamily::Inet6 {
        // A pod's address is unique by allocation: duplicate address detection would only
        // keep it tentative (unusable as a source) for a second or more after ADD.
        msg.header.flags = AddressHeaderFlags::Nodad;
    }
    let ip: IpAddr = network.ip().into();
    // IFA_LOCAL is the address itself; IFA_ADDRESS equals it on non point-to-point links.
    msg.attributes.push(AddressAttribute::Local(ip));
    msg.attributes.push(AddressAttribute::Address(ip));
    msg
}

/// `ip addr add <ip>/<len> dev <index>` (`nodad` for IPv6).
pub fn add_address<F: IpFamily>(index: u32, network: F) -> Request {
    Request::new(
        RouteNetlinkMessage::NewAddress(address_message(index, network)),
        FLAGS_CREATE_EXCL,
        format!("add address {network} dev #{index}"),
    )
}

/// `ip addr del <ip>/<len> dev <index>`.
pub fn delete_address<F: IpFamily>(index: u32, network: F) -> Request {
    Request::new(
        RouteNetlinkMessage::DelAddress(address_message(index, network)),
        FLAGS_ACK,
        format!("delete address {network} dev #{index}"),
    )
}

/// `ip -4 addr show`.
pub fn dump_addresses() -> Request {
    dump_addresses_of::<Ipv4Network>()
}

/// `ip -4 addr show` or `ip -6 addr show`.
pub fn dump_addresses_of<F: IpFamily>() -> Request {
    let mut msg = AddressMessage::default();
    msg.header.family = F::FAMILY;
    Request::new(
        RouteNetlinkMessage::GetAddress(msg),
        FLAGS_DUMP,
        format!("dump {} addresses", F::NAME),
    )
}

/// Our view of a kernel address message; `None` for anything but IPv4.
pub fn parse_address(msg: &AddressMessage) -> Option<Address> {
    parse_address_of(msg)
}

/// Our view of a kernel address message; `None` for another family.
pub fn parse_address_of<F: IpFamily>(msg: &AddressMessage) -> Option<AddressOf<F>> {
    if msg.header.family != F::FAMILY {
        return None;
    }
    let mut local = None;
    let mut address = None;
    for attr in &msg.attributes {
        match attr {
            AddressAttribute::Local(ip) => local = F::from_ip(*ip).or(local),
            AddressAttribute::Address(ip) => address = F::from_ip(*ip).or(address),
            _ => {}
        }
    }
    let ip = local.or(address)?;
    let network = F::new(ip, msg.header.prefix_len)?;
    Some(AddressOf {
        index: msg.header.index,
        network,
    })
}

/// The IPv4 addresses in a dump answer.
pub fn parse_addresses(messages: &[RouteNetlinkMessage]) -> Vec<Address> {
    parse_addresses_of(messages)
}

/// The addresses of family `F` in a dump answer.
pub fn parse_addresses_of<F: IpFamily>(messages: &[RouteNetlinkMessage]) -> Vec<AddressOf<F>> {
    messages
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewAddress(a) => parse_address_of(a),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

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

    #[test]
    fn ipv6_address_is_nodad_and_round_trips() {
        let net: Ipv6Network = "2001:db8::5/128".parse().unwrap();
        let req = add_address(2, net);
        assert_eq!(
            req.flags() & (NLM_F_CREATE | NLM_F_EXCL),
            NLM_F_CREATE | NLM_F_EXCL
        );
        let Some(RouteNetlinkMessage::NewAddress(m)) = req.inner() else {
            panic!()
        };
        assert_eq!(m.header.family, AddressFamily::Inet6);
        assert_eq!(m.header.prefix_len, 128);
        assert_eq!(m.header.flags, AddressHeaderFlags::Nodad);
        assert_eq!(m.header.scope, AddressScope::Universe);
        let ip = IpAddr::V6("2001:db8::5".parse::<Ipv6Addr>().unwrap());
        assert_eq!(
            m.attributes,
            vec![AddressAttribute::Local(ip), AddressAttribute::Address(ip)]
        );
        assert_eq!(req.op, "add address 2001:db8::5/128 dev #2");
        assert_eq!(
            parse_address_of(m),
            Some(Address6 {
                index: 2,
                network: net
            })
        );
        // The IPv4 parser does not see it, and the IPv4 message has no flags.
        assert_eq!(parse_address(m), None);
        let Some(RouteNetlinkMessage::NewAddress(v4)) =
            add_address(2, Ipv4Network::from(Ipv4Addr::new(10, 0, 0, 5)))
                .inner()
                .cloned()
        else {
            panic!()
        };
        assert_eq!(v4.header.flags, AddressHeaderFlags::empty());
        assert_eq!(dump_addresses_of::<Ipv6Network>().op, "dump IPv6 addresses");
        assert_eq!(dump_addresses().op, "dump IPv4 addresses");
    }
}
