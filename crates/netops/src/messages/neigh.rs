//! IPv4 neighbour (ARP) entries: add, replace, delete, dump.

use std::net::Ipv4Addr;

use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{FLAGS_ACK, FLAGS_CREATE_EXCL, FLAGS_CREATE_REPLACE, FLAGS_DUMP, Request};
use crate::names::format_mac;

/// An IPv4 neighbour entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbour {
    /// Interface index.
    pub index: u32,
    /// The neighbour's IPv4 address.
    pub ip: Ipv4Addr,
    /// Its link-layer address, when resolved.
    pub mac: Option<[u8; 6]>,
    /// `NUD_PERMANENT`: never expires, never probed.
    pub permanent: bool,
}

fn neighbour_message(index: u32, ip: Ipv4Addr, mac: Option<[u8; 6]>) -> NeighbourMessage {
    let mut msg = NeighbourMessage::default();
    msg.header.family = AddressFamily::Inet;
    msg.header.ifindex = index;
    msg.header.state = NeighbourState::Permanent;
    msg.attributes
        .push(NeighbourAttribute::Destination(NeighbourAddress::Inet(ip)));
    if let Some(mac) = mac {
        msg.attributes
            .push(NeighbourAttribute::LinkLayerAddress(mac.to_vec()));
    }
    msg
}

/// `ip neigh add <ip> lladdr <mac> dev <index> nud permanent`.
pub fn add_neighbour(index: u32, ip: Ipv4Addr, mac: [u8; 6]) -> Request {
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
pub fn replace_neighbour(index: u32, ip: Ipv4Addr, mac: [u8; 6]) -> Request {
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
pub fn delete_neighbour(index: u32, ip: Ipv4Addr) -> Request {
    Request::new(
        RouteNetlinkMessage::DelNeighbour(neighbour_message(index, ip, None)),
        FLAGS_ACK,
        format!("delete neighbour {ip} dev #{index}"),
    )
}

/// `ip -4 neigh show`.
pub fn dump_neighbours() -> Request {
    let mut msg = NeighbourMessage::default();
    msg.header.family = AddressFamily::Inet;
    Request::new(
        RouteNetlinkMessage::GetNeighbour(msg),
        FLAGS_DUMP,
        "dump IPv4 neighbours".into(),
    )
}

/// Our view of a kernel neighbour message; `None` for anything but IPv4.
pub fn parse_neighbour(msg: &NeighbourMessage) -> Option<Neighbour> {
    if msg.header.family != AddressFamily::Inet {
        return None;
    }
    let mut ip = None;
    let mut mac = None;
    for attr in &msg.attributes {
        match attr {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(a)) => ip = Some(*a),
            NeighbourAttribute::LinkLayerAddress(bytes) => {
                mac = <[u8; 6]>::try_from(&bytes[..]).ok();
            }
            _ => {}
        }
    }
    Some(Neighbour {
        index: msg.header.ifindex,
        ip: ip?,
        mac,
        permanent: msg.header.state == NeighbourState::Permanent,
    })
}

/// The IPv4 neighbours in a dump answer.
pub fn parse_neighbours(messages: &[RouteNetlinkMessage]) -> Vec<Neighbour> {
    messages
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewNeighbour(n) => parse_neighbour(n),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};

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
}
