//! IPv6 in the VPC namespace: EC2's link-local router, delivery through a fixed next hop per
//! ENI link, and the source/destination check as policy rules.
//!
//! Delivery differs from IPv4 because a delegated /80 holds 2^48 addresses: a permanent
//! neighbour per address is impossible, and plain on-link routes would make the VPC ask the
//! node by NDP for each destination, which Linux answers only for addresses on the receiving
//! interface itself (not for a pod's address behind a veth, nor one on `lo`). So every held
//! address or prefix is routed `via` the ENI's own EUI-64 link-local address, whose permanent
//! neighbour entry carries the ENI's MAC: one entry per link, no NDP towards the node, and the
//! next hop is the address the node's kernel gives that interface anyway.
//!
//! Linux has no reverse-path filter for IPv6, so EC2's source/destination check is a set of
//! `ip -6 rule`s per ENI link: a packet that comes in on the link from a source the ENI holds
//! (or a link-local one, which NDP needs) is routed by the main table, anything else from that
//! link hits a blackhole rule below them. Rules are not tied to the link's lifetime (a rule
//! naming a missing `iif` just waits for it), so they are added and removed on their own.

use std::net::Ipv6Addr;

use ipnetwork::Ipv6Network;

use crate::model::Eni;

/// EC2's IPv6 router on every ENI link, the nodes' default gateway.
pub const ROUTER6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0x0ec2, 0, 0, 0, 0, 0, 1);
/// Prefix length the router address is put on with.
pub const ROUTER6_LEN: u8 = 64;
/// fe80::/10: sources always allowed in from an ENI link, so NDP works before anything is held.
pub const LINK_LOCAL: Ipv6Network =
    match Ipv6Network::new_checked(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10) {
        Some(n) => n,
        None => panic!("fe80::/10 is a valid network"),
    };
/// Priority of the rules that let a held source in (before the main table's 32766).
pub const ALLOW_PREF: u32 = 100;
/// Priority of the per-link blackhole rule, after every allowing rule.
pub const GUARD_PREF: u32 = 110;

/// The EUI-64 link-local address of `mac` (`02:00:00:00:00:01` -> `fe80::ff:fe00:1`), as a
/// node's kernel assigns it to the interface; `None` for a string that is not a MAC.
pub fn eui64_link_local(mac: &str) -> Option<Ipv6Addr> {
    let bytes: Vec<u8> = mac
        .split(':')
        .map(|b| u8::from_str_radix(b, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    let [a, b, c, d, e, f] = bytes[..] else {
        return None;
    };
    // Flipping the universal/local bit is what turns a MAC into an interface identifier.
    let id = [a ^ 0x02, b, c, 0xff, 0xfe, d, e, f];
    let word = |i: usize| u16::from_be_bytes([id[i], id[i + 1]]);
    Some(Ipv6Addr::new(
        0xfe80,
        0,
        0,
        0,
        word(0),
        word(2),
        word(4),
        word(6),
    ))
}

/// Every IPv6 network `eni` holds: its addresses as /128s (the first is its primary IPv6) and
/// its delegated /80 prefixes.
pub fn held(eni: &Eni) -> impl Iterator<Item = Ipv6Network> + '_ {
    let addresses = eni
        .ipv6_addresses
        .iter()
        .filter_map(|a| Ipv6Network::new(a.value, 128).ok());
    addresses.chain(eni.ipv6_prefixes.iter().map(|p| p.value))
}
