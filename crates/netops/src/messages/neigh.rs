//! Neighbour (ARP / NDP) entries of either family: add, replace, delete, dump.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnetwork::Ipv4Network;
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::neighbour::{NeighbourAttribute, NeighbourMessage, NeighbourState};

use super::family::{FamilyAddr, IpFamily};
use super::{FLAGS_ACK, FLAGS_CREATE_EXCL, FLAGS_CREATE_REPLACE, FLAGS_DUMP, Request};
use crate::names::format_mac;

/// A neighbour entry whose address is an `A` (an IPv4 or IPv6 address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighbourOf<A: FamilyAddr> {
    /// Interface index.
    pub index: u32,
    /// The neighbour's address.
    pub ip: A,
    /// Its link-layer address, when resolved.
    pub mac: Option<[u8; 6]>,
    /// `NUD_PERMANENT`: never expires, never probed.
    pub permanent: bool,
}

/// An IPv4 neighbour (ARP) entry.
pub type Neighbour = NeighbourOf<Ipv4Addr>;
/// An IPv6 neighbour (NDP) entry.
pub type Neighbour6 = NeighbourOf<Ipv6Addr>;

fn neighbour_message<A: FamilyAddr>(index: u32, ip: A, mac: Option<[u8; 6]>) -> NeighbourMessage {
    let mut msg = NeighbourMessage::default();
    msg.header.family = A::Net::FAMILY;
    msg.header.ifindex = index;
    msg.header.state = NeighbourState::Permanent;
    msg.attributes
        .push(NeighbourAttribute::Destination(A::Net::neighbour_address(
            ip,
        )));
    if let Some(mac) = mac {
        msg.attributes
            .push(NeighbourAttribute::LinkLayerAddress(mac.to_vec()));
    }
    msg
}

/// `ip neigh add <ip> lladdr <mac> dev <index> nud permanent`.
pub fn add_neighbour<A: FamilyAddr>(index: u32, ip: A, mac: [u8; 6]) -> Request {
    Request::new(
        RouteNetlinkMessage::NewNeighbour(neighbour_message(index, ip, Some(mac))),
        FLAGS_CREATE_EXCL,
        format!(
            "add neighbour {ip} lladdr {} dev #{index} permanent",
            format_mac(&mac)
        ),
    )
}

/// `ip neigh replace <ip> lladdr <mac> dev <index> nud permanent`.
pub fn replace_neighbour<A: FamilyAddr>(index: u32, ip: A, mac: [u8; 6]) -> Request {
    Request::new(
        RouteNetlinkMessage::NewNeighbour(neighbour_message(index, ip, Some(mac))),
        FLAGS_CREATE_REPLACE,
        format!(
            "replace neighbour {ip} lladdr {} dev #{index} permanent",
            format_mac(&mac)
        ),
    )
}

/// `ip neigh del <ip> dev <index>`.
pub fn delete_neighbour<A: FamilyAddr>(index: u32, ip: A) -> Request {
    Request::new(
        RouteNetlinkMessage::DelNeighbour(neighbour_message(index, ip, None)),
        FLAGS_ACK,
        format!("delete neighbour {ip} dev #{index}"),
    )
}

/// `ip -4 neigh show`.
pub fn dump_neighbours() -> Request {
    dump_neighbours_of::<Ipv4Network>()
}

/// `ip -4 neigh show` or `ip -6 neigh show`.
pub fn dump_neighbours_of<F: IpFamily>() -> Request {
    let mut msg = NeighbourMessage::default();
    msg.header.family = F::FAMILY;
    Request::new(
        RouteNetlinkMessage::GetNeighbour(msg),
        FLAGS_DUMP,
        format!("dump {} neighbours", F::NAME),
    )
}

/// Our view of a kernel neighbour message; `None` for anything but IPv4.
pub fn parse_neighbour(msg: &NeighbourMessage) -> Option<Neighbour> {
    parse_neighbour_of(msg)
}

/// Our view of a kernel neighbour message; `None` for another family.
pub fn parse_neighbour_of<A: FamilyAddr>(msg: &NeighbourMessage) -> Option<NeighbourOf<A>> {
    if msg.header.family != A::Net::FAMILY {
        return None;
    }
    let mut ip = None;
    let mut mac = None;
    for attr in &msg.attributes {
        match attr {
            NeighbourAttribute::Destination(a) => ip = A::Net::from_neighbour_address(a),
            NeighbourAttribute::LinkLayerAddress(bytes) => {
                mac = <[u8; 6]>::try_from(&bytes[..]).ok();
            }
            _ => {}
        }
    }
    Some(NeighbourOf {
        index: msg.header.ifindex,
        ip: ip?,
        mac,
        permanent: msg.header.state == NeighbourState::Permanent,
    })
}

/// The IPv4 neighbours in a dump answer.
pub fn parse_neighbours(messages: &[RouteNetlinkMessage]) -> Vec<Neighbour> {
    parse_neighbours_of(messages)
}

/// The neighbours of `A`'s family in a dump answer.
pub fn parse_neighbours_of<A: FamilyAddr>(messages: &[RouteNetlinkMessage]) -> Vec<NeighbourOf<A>> {
    messages
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewNeighbour(n) => parse_neighbour_of(n),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
    use netlink_packet_route::AddressFamily;
    use netlink_packet_route::neighbour::NeighbourAddress;

    use super::*;

    const GW: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);
    const MAC: [u8; 6] = [0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee];

    #[test]
    fn permanent_gateway_neighbour() {
        let req = replace_neighbour(5, GW, MAC);
        assert_eq!(
            req.flags() & (NLM_F_CREATE | NLM_F_REPLACE | NLM_F_EXCL),
            NLM_F_CREATE | NLM_F_REPLACE
        );
        let Some(RouteNetlinkMessage::NewNeighbour(m)) = req.inner() else {
            panic!()
        };
        assert_eq!(m.header.state, NeighbourState::Permanent);
        assert_eq!(m.header.ifindex, 5);
        assert_eq!(
            m.attributes,
            vec![
                NeighbourAttribute::Destination(NeighbourAddress::Inet(GW)),
                NeighbourAttribute::LinkLayerAddress(MAC.to_vec()),
            ]
        );
        assert_eq!(
            req.op,
            "replace neighbour 169.254.1.1 lladdr 02:aa:bb:cc:dd:ee dev #5 permanent"
        );
        assert_eq!(
            parse_neighbour(m),
            Some(Neighbour {
                index: 5,
                ip: GW,
                mac: Some(MAC),
                permanent: true
            })
        );
        let add = add_neighbour(5, GW, MAC);
        assert_eq!(add.flags() & NLM_F_EXCL, NLM_F_EXCL);
    }

    #[test]
    fn delete_has_no_lladdr() {
        let Some(RouteNetlinkMessage::DelNeighbour(m)) = delete_neighbour(5, GW).inner().cloned()
        else {
            panic!()
        };
        assert_eq!(
            m.attributes,
            vec![NeighbourAttribute::Destination(NeighbourAddress::Inet(GW))]
        );
    }

    #[test]
    fn permanent_ipv6_gateway_neighbour() {
        let gw: Ipv6Addr = "fe80::1".parse().unwrap();
        let req = replace_neighbour(2, gw, MAC);
        let Some(RouteNetlinkMessage::NewNeighbour(m)) = req.inner() else {
            panic!()
        };
        assert_eq!(m.header.family, AddressFamily::Inet6);
        assert_eq!(m.header.state, NeighbourState::Permanent);
        assert_eq!(
            m.attributes,
            vec![
                NeighbourAttribute::Destination(NeighbourAddress::Inet6(gw)),
                NeighbourAttribute::LinkLayerAddress(MAC.to_vec()),
            ]
        );
        assert_eq!(
            req.op,
            "replace neighbour fe80::1 lladdr 02:aa:bb:cc:dd:ee dev #2 permanent"
        );
        assert_eq!(
            parse_neighbour_of(m),
            Some(Neighbour6 {
                index: 2,
                ip: gw,
                mac: Some(MAC),
                permanent: true
            })
        );
        assert_eq!(parse_neighbour(m), None, "not an IPv4 neighbour");
        assert_eq!(
            dump_neighbours_of::<ipnetwork::Ipv6Network>().op,
            "dump IPv6 neighbours"
        );
    }
}
