//! Links (network interfaces): get, dump, create veth, delete, set up, set MTU.

use std::os::fd::RawFd;

use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};

use super::{FLAGS_ACK, FLAGS_CREATE_EXCL, FLAGS_DUMP, Request};
use crate::names::format_mac;

/// A network interface as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface index in its namespace.
    pub index: u32,
    /// Interface name.
    pub name: String,
    /// Hardware address, when the link has a 6-byte one.
    pub mac: Option<[u8; 6]>,
    /// MTU.
    pub mtu: Option<u32>,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Link kind (`veth`, `bridge`, ...), absent for physical devices.
    pub kind: Option<String>,
    /// `IFLA_LINK`: for a veth, the peer's index (in the peer's namespace).
    pub peer_index: Option<u32>,
}

/// What a new veth pair looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VethSpec {
    /// Name of the end created in the socket's namespace.
    pub name: String,
    /// Name of the peer end.
    pub peer_name: String,
    /// MAC of the peer end; the kernel picks one when absent.
    pub peer_mac: Option<[u8; 6]>,
    /// Namespace (fd) to create the peer in directly; the socket's namespace when absent.
    pub peer_netns_fd: Option<RawFd>,
    /// MTU of both ends.
    pub mtu: u32,
    /// Create the end in the socket's namespace administratively up. The peer always starts
    /// down (the kernel cannot open it before the pair is linked): set it up afterwards.
    pub up: bool,
}

fn link_message(index: u32) -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    msg
}

/// `ip link show dev <name>`.
pub fn get_link_by_name(name: &str) -> Request {
    let mut msg = link_message(0);
    msg.attributes.push(LinkAttribute::IfName(name.to_string()));
    Request::new(
        RouteNetlinkMessage::GetLink(msg),
        FLAGS_ACK,
        format!("get link {name}"),
    )
}

/// The link with this index.
pub fn get_link_by_index(index: u32) -> Request {
    Request::new(
        RouteNetlinkMessage::GetLink(link_message(index)),
        FLAGS_ACK,
        format!("get link #{index}"),
    )
}

/// `ip link show`.
pub fn dump_links() -> Request {
    Request::new(
        RouteNetlinkMessage::GetLink(link_message(0)),
        FLAGS_DUMP,
        "dump links".into(),
    )
}

/// `ip link add <name> mtu M type veth peer name <peer> address <mac> netns <fd> mtu M`,
/// the local end optionally up in the same message.
pub fn create_veth(spec: &VethSpec) -> Request {
    let mut peer = link_message(0);
    peer.attributes
        .push(LinkAttribute::IfName(spec.peer_name.clone()));
    peer.attributes.push(LinkAttribute::Mtu(spec.mtu));
    if let Some(mac) = spec.peer_mac {
        peer.attributes.push(LinkAttribute::Address(mac.to_vec()));
    }
    if let Some(fd) = spec.peer_netns_fd {
        peer.attributes.push(LinkAttribute::NetNsFd(fd));
    }
    let mut msg = link_message(0);
    if spec.up {
        // The kernel applies ifi_flags/ifi_change to a new link, saving a round trip. Not to
        // the peer: it is configured before the pair is linked, and opening an unpaired veth
        // fails with ENOTCONN.
        msg.header.flags = LinkFlags::Up;
        msg.header.change_mask = LinkFlags::Up;
    }
    msg.attributes
        .push(LinkAttribute::IfName(spec.name.clone()));
    msg.attributes.push(LinkAttribute::Mtu(spec.mtu));
    msg.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Veth),
        LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
    ]));
    let mut op = format!(
        "create veth {} mtu {} peer {}",
        spec.name, spec.mtu, spec.peer_name
    );
    if let Some(mac) = spec.peer_mac {
        op.push_str(&format!(" address {}", format_mac(&mac)));
    }
    if spec.peer_netns_fd.is_some() {
        op.push_str(" in host namespace");
    }
    Request::new(RouteNetlinkMessage::NewLink(msg), FLAGS_CREATE_EXCL, op)
}

/// `ip link del <name>`.
pub fn delete_link_by_name(name: &str) -> Request {
    let mut msg = link_message(0);
    msg.attributes.push(LinkAttribute::IfName(name.to_string()));
    Request::new(
        RouteNetlinkMessage::DelLink(msg),
        FLAGS_ACK,
        format!("delete link {name}"),
    )
}

/// Deletes the link with this index.
pub fn delete_link_by_index(index: u32) -> Request {
    Request::new(
        RouteNetlinkMessage::DelLink(link_message(index)),
        FLAGS_ACK,
        format!("delete link #{index}"),
    )
}

/// `ip link set <index> up` (or down).
pub fn set_link_up(index: u32, up: bool) -> Request {
    let mut msg = link_message(index);
    msg.header.flags = if up {
        LinkFlags::Up
    } else {
        LinkFlags::empty()
    };
    msg.header.change_mask = LinkFlags::Up;
    let state = if up { "up" } else { "down" };
    Request::new(
        RouteNetlinkMessage::SetLink(msg),
        FLAGS_ACK,
        format!("set link #{index} {state}"),
    )
}

/// `ip link set <index> mtu <mtu>`.
pub fn set_link_mtu(index: u32, mtu: u32) -> Request {
    let mut msg = link_message(index);
    msg.attributes.push(LinkAttribute::Mtu(mtu));
    Request::new(
        RouteNetlinkMessage::SetLink(msg),
        FLAGS_ACK,
        format!("set link #{index} mtu {mtu}"),
    )
}

/// Our view of a kernel link message.
pub fn parse_link(msg: &LinkMessage) -> Link {
    let mut link = Link {
        index: msg.header.index,
        name: String::new(),
        mac: None,
        mtu: None,
        up: msg.header.flags.contains(LinkFlags::Up),
        kind: None,
        peer_index: None,
    };
    for attr in &msg.attributes {
        match attr {
            LinkAttribute::IfName(name) => link.name = name.clone(),
            LinkAttribute::Address(bytes) => link.mac = <[u8; 6]>::try_from(&bytes[..]).ok(),
            LinkAttribute::Mtu(mtu) => link.mtu = Some(*mtu),
            LinkAttribute::Link(index) => link.peer_index = Some(*index),
            LinkAttribute::LinkInfo(infos) => {
                for info in infos {
                    if let LinkInfo::Kind(kind) = info {
                        link.kind = Some(kind.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    link
}

/// The links in a dump answer.
pub fn parse_links(messages: &[RouteNetlinkMessage]) -> Vec<Link> {
    messages
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => Some(parse_link(l)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL};

    use super::*;
    use crate::socket::decode_datagram;

    fn spec() -> VethSpec {
        VethSpec {
            name: "eth0".into(),
            peer_name: "enic440f455693".into(),
            peer_mac: Some([0x02, 0x11, 0x22, 0x33, 0x44, 0x55]),
            peer_netns_fd: Some(7),
            mtu: 9001,
            up: true,
        }
    }

    fn new_link(req: &Request) -> &LinkMessage {
        match req.inner() {
            Some(RouteNetlinkMessage::NewLink(m)) => m,
            other => panic!("not a NewLink: {other:?}"),
        }
    }

    #[test]
    fn veth_request_carries_peer_name_mac_netns_and_mtu() {
        let req = create_veth(&spec());
        assert_eq!(
            req.flags() & (NLM_F_CREATE | NLM_F_EXCL),
            NLM_F_CREATE | NLM_F_EXCL
        );
        let msg = new_link(&req);
        assert!(
            msg.attributes
                .contains(&LinkAttribute::IfName("eth0".into()))
        );
        assert!(msg.attributes.contains(&LinkAttribute::Mtu(9001)));
        assert_eq!(msg.header.flags, LinkFlags::Up);
        assert_eq!(msg.header.change_mask, LinkFlags::Up);
        let infos = msg
            .attributes
            .iter()
            .find_map(|a| match a {
                LinkAttribute::LinkInfo(i) => Some(i),
                _ => None,
            })
            .expect("link info");
        assert_eq!(infos[0], LinkInfo::Kind(InfoKind::Veth));
        let LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))) = &infos[1] else {
            panic!("no veth peer in {infos:?}");
        };
        assert!(
            peer.attributes
                .contains(&LinkAttribute::IfName("enic440f455693".into()))
        );
        assert!(peer.attributes.contains(&LinkAttribute::Address(vec![
            0x02, 0x11, 0x22, 0x33, 0x44, 0x55
        ])));
        assert!(peer.attributes.contains(&LinkAttribute::NetNsFd(7)));
        assert!(peer.attributes.contains(&LinkAttribute::Mtu(9001)));
        assert!(peer.header.flags.is_empty(), "peer cannot be created up");
        assert_eq!(
            req.op,
            "create veth eth0 mtu 9001 peer enic440f455693 address 02:11:22:33:44:55 in host namespace"
        );
    }

    #[test]
    fn veth_request_survives_the_wire() {
        let req = create_veth(&spec());
        let decoded = decode_datagram(&req.to_bytes()).unwrap();
        assert_eq!(decoded.len(), 1);
        let parsed = match &decoded[0].payload {
            netlink_packet_core::NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(parsed, new_link(&req));
    }

    #[test]
    fn veth_without_options_sets_no_peer_extras() {
        let mut s = spec();
        s.peer_mac = None;
        s.peer_netns_fd = None;
        s.up = false;
        let req = create_veth(&s);
        let msg = new_link(&req);
        assert!(msg.header.flags.is_empty());
        let bytes = req.to_bytes();
        // No IFLA_NET_NS_FD (28) attribute anywhere in the peer.
        let decoded = decode_datagram(&bytes).unwrap();
        assert!(!format!("{decoded:?}").contains("NetNsFd"));
    }

    #[test]
    fn get_and_dump_flags() {
        assert_eq!(dump_links().flags() & NLM_F_DUMP, NLM_F_DUMP);
        assert_eq!(get_link_by_name("eth0").flags() & NLM_F_DUMP, 0);
        let Some(RouteNetlinkMessage::GetLink(m)) = get_link_by_name("eth0").inner().cloned()
        else {
            panic!()
        };
        assert_eq!(m.attributes, vec![LinkAttribute::IfName("eth0".into())]);
        let Some(RouteNetlinkMessage::GetLink(m)) = get_link_by_index(9).inner().cloned() else {
            panic!()
        };
        assert_eq!(m.header.index, 9);
    }

    #[test]
    fn set_up_and_down_touch_only_the_up_flag() {
        let Some(RouteNetlinkMessage::SetLink(m)) = set_link_up(3, true).inner().cloned() else {
            panic!()
        };
        assert_eq!((m.header.index, m.header.flags), (3, LinkFlags::Up));
        assert_eq!(m.header.change_mask, LinkFlags::Up);
        let Some(RouteNetlinkMessage::SetLink(m)) = set_link_up(3, false).inner().cloned() else {
            panic!()
        };
        assert!(m.header.flags.is_empty());
        assert_eq!(m.header.change_mask, LinkFlags::Up);
        let Some(RouteNetlinkMessage::SetLink(m)) = set_link_mtu(3, 1500).inner().cloned() else {
            panic!()
        };
        assert_eq!(m.attributes, vec![LinkAttribute::Mtu(1500)]);
    }

    #[test]
    fn parse_link_reads_mac_kind_peer() {
        let mut msg = LinkMessage::default();
        msg.header.index = 4;
        msg.header.flags = LinkFlags::Up | LinkFlags::Running;
        msg.attributes = vec![
            LinkAttribute::IfName("eni1".into()),
            LinkAttribute::Address(vec![2, 0, 0, 0, 0, 1]),
            LinkAttribute::Mtu(9001),
            LinkAttribute::Link(12),
            LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Veth)]),
        ];
        let link = parse_link(&msg);
        assert_eq!(
            link,
            Link {
                index: 4,
                name: "eni1".into(),
                mac: Some([2, 0, 0, 0, 0, 1]),
                mtu: Some(9001),
                up: true,
                kind: Some("veth".into()),
                peer_index: Some(12),
            }
        );
    }
}
