//! The VPC's view of the ENIs: one link per attached ENI and, for every address an ENI holds, a
//! `/32` route and a permanent neighbour towards it; with IPv6, also a route per held IPv6
//! address or /80 and the source rules of [`super::v6`]. Computed from the model, diffed
//! against what was applied, and turned into `ip -batch` lines.
//!
//! Each line is one kernel operation with a known effect on the record of what is applied, so
//! when `ip -batch` stops at line N the record is exactly "lines before N applied".

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnetwork::Ipv6Network;

use super::ENI_MTU;
use super::plan::{NodeRef, eni_link, node_ifname};
use super::v6::{self, ALLOW_PREF, GUARD_PREF, LINK_LOCAL, ROUTER6, ROUTER6_LEN};
use crate::model::{Eni, Model};

/// One attached ENI as a veth pair: the VPC side in the VPC namespace, the node side in the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EniLink {
    /// VPC-side name (`n1d1`).
    pub name: String,
    /// Node namespace the peer goes into.
    pub node_netns: String,
    /// Device index: the peer is `eth<device>`.
    pub device: u32,
    /// The ENI's MAC, carried by the node side.
    pub mac: String,
    /// The subnet's router address, put on the VPC side as a /32.
    pub router: Ipv4Addr,
    /// With IPv6 (the subnet has a /64): the ENI's EUI-64 link-local address, the next hop of
    /// its IPv6 delivery; the link then also carries [`ROUTER6`].
    pub next_hop6: Option<Ipv6Addr>,
}

/// How far a link got: created, then its router address, then prompt proxy ARP, then up; with
/// IPv6 then the IPv6 router address and the next hop's neighbour entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkState {
    /// What was created.
    pub link: EniLink,
    /// The router address is on it.
    pub addressed: bool,
    /// It answers proxy ARP at once.
    pub prompt: bool,
    /// It is up.
    pub up: bool,
    /// [`ROUTER6`] is on it (always false without IPv6).
    pub router6: bool,
    /// The permanent neighbour of its IPv6 next hop is set (always false without IPv6).
    pub next_hop6: bool,
}

impl LinkState {
    fn complete(link: EniLink) -> Self {
        let v6 = link.next_hop6.is_some();
        Self {
            link,
            addressed: true,
            prompt: true,
            up: true,
            router6: v6,
            next_hop6: v6,
        }
    }
}

/// Links, delivery routes and neighbours in the VPC namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wiring {
    /// VPC-side link name -> state.
    pub links: BTreeMap<String, LinkState>,
    /// Address -> VPC-side link its `/32` route points at.
    pub routes: BTreeMap<Ipv4Addr, String>,
    /// (address, VPC-side link) -> MAC of its permanent neighbour entry.
    pub neighbours: BTreeMap<(Ipv4Addr, String), String>,
    /// Held IPv6 address (/128) or prefix (/80) -> (VPC-side link, next hop) of its route.
    pub routes6: BTreeMap<Ipv6Network, (String, Ipv6Addr)>,
    /// (VPC-side link, source network) of each rule letting IPv6 from that source in.
    pub allowed6: BTreeSet<(String, Ipv6Network)>,
    /// Links whose other IPv6 sources are dropped by a blackhole rule.
    pub guarded6: BTreeSet<String>,
}

/// One line of `ip -batch`, with its effect on [`Wiring`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Deletes a link (its peer, routes and neighbours go with it).
    DelLink(String),
    /// Deletes the `/32` route of an address.
    DelRoute(Ipv4Addr, String),
    /// Deletes a neighbour entry.
    DelNeighbour(Ipv4Addr, String),
    /// Creates a veth pair, the peer in the node with the ENI's MAC.
    AddLink(EniLink),
    /// Puts the router address on a link.
    AddRouter(String, Ipv4Addr),
    /// Makes a link answer proxy ARP at once. Linux delays such answers by up to 0.8 s
    /// (`proxy_delay`), EC2 does not; the `default` of that setting cannot be changed outside
    /// the host's own namespace, hence one line per link.
    PromptArp(String),
    /// Brings a link up.
    Up(String),
    /// Points an address's `/32` route at a link.
    Route(Ipv4Addr, String),
    /// Sets the permanent neighbour entry of an address on a link.
    Neighbour(Ipv4Addr, String, String),
    /// Puts EC2's IPv6 router address on a link.
    AddRouter6(String),
    /// Sets the permanent neighbour entry of a link's IPv6 next hop: (link, next hop, MAC).
    NextHop6(String, Ipv6Addr, String),
    /// Routes a held IPv6 address or prefix via a link's next hop: (network, link, next hop).
    Route6(Ipv6Network, String, Ipv6Addr),
    /// Deletes the route of a held IPv6 address or prefix.
    DelRoute6(Ipv6Network, String),
    /// Lets IPv6 from a source network in on a link (an `ip -6 rule`).
    Allow6(String, Ipv6Network),
    /// Deletes such a rule.
    Disallow6(String, Ipv6Network),
    /// Drops IPv6 from any other source on a link (an `ip -6 rule`).
    Guard6(String),
    /// Deletes that rule.
    Unguard6(String),
}

impl Op {
    /// The `ip -batch` line.
    pub fn line(&self) -> String {
        match self {
            Self::DelLink(l) => format!("link del {l}"),
            Self::DelRoute(ip, l) => format!("route del {ip}/32 dev {l}"),
            Self::DelNeighbour(ip, l) => format!("neigh del {ip} dev {l}"),
            Self::AddLink(e) => format!(
                "link add {} mtu {ENI_MTU} type veth peer name {} address {} mtu {ENI_MTU} netns {}",
                e.name,
                node_ifname(e.device),
                e.mac,
                e.node_netns
            ),
            Self::AddRouter(l, r) => format!("addr add {r}/32 dev {l}"),
            Self::PromptArp(l) => format!("ntable change name arp_cache dev {l} proxy_delay 0"),
            Self::Up(l) => format!("link set {l} up"),
            Self::Route(ip, l) => format!("route replace {ip}/32 dev {l}"),
            Self::Neighbour(ip, l, mac) => {
                format!("neigh replace {ip} lladdr {mac} dev {l} nud permanent")
            }
            Self::AddRouter6(l) => format!("addr add {ROUTER6}/{ROUTER6_LEN} dev {l} nodad"),
            Self::NextHop6(l, hop, mac) => {
                format!("neigh replace {hop} lladdr {mac} dev {l} nud permanent")
            }
            Self::Route6(net, l, hop) => format!("route replace {net} via {hop} dev {l}"),
            Self::DelRoute6(net, l) => format!("route del {net} dev {l}"),
            Self::Allow6(l, net) => {
                format!("rule add iif {l} from {net} lookup main pref {ALLOW_PREF}")
            }
            Self::Disallow6(l, net) => {
                format!("rule del iif {l} from {net} lookup main pref {ALLOW_PREF}")
            }
            // Blackhole, not prohibit: EC2 drops such a packet silently, and an ICMP error
            // would go to the forged source, i.e. to somebody else.
            Self::Guard6(l) => format!("rule add iif {l} blackhole pref {GUARD_PREF}"),
            Self::Unguard6(l) => format!("rule del iif {l} blackhole pref {GUARD_PREF}"),
        }
    }

    /// Whether the line must run in an `ip -6` batch: `ip rule` takes its address family from
    /// the command line, not from the addresses (without `-6` a rule with an IPv6 `from` is
    /// refused, and one without `from` becomes an IPv4 rule).
    pub fn is_ipv6_rule(&self) -> bool {
        matches!(
            self,
            Self::Allow6(..) | Self::Disallow6(..) | Self::Guard6(_) | Self::Unguard6(_)
        )
    }

    /// Whether the line removes something (and so is done when that is already gone).
    pub fn is_deletion(&self) -> bool {
        matches!(
            self,
            Self::DelLink(_)
                | Self::DelRoute(..)
                | Self::DelNeighbour(..)
                | Self::DelRoute6(..)
                | Self::Disallow6(..)
                | Self::Unguard6(_)
        )
    }

    /// What the kernel state becomes once this line succeeded.
    pub fn apply(&self, w: &mut Wiring) {
        match self {
            // Routes and neighbours through the link go with it; rules stay (see `v6`).
            Self::DelLink(l) => {
                w.links.remove(l);
                w.routes.retain(|_, link| link != l);
                w.neighbours.retain(|(_, link), _| link != l);
                w.routes6.retain(|_, (link, _)| link != l);
            }
            Self::DelRoute(ip, _) => {
                w.routes.remove(ip);
            }
            Self::DelNeighbour(ip, l) => {
                w.neighbours.remove(&(*ip, l.clone()));
            }
            Self::AddLink(e) => {
                w.links.insert(
                    e.name.clone(),
                    LinkState {
                        link: e.clone(),
                        addressed: false,
                        prompt: false,
                        up: false,
                        router6: false,
                        next_hop6: false,
                    },
                );
            }
            Self::AddRouter(l, _) => {
                if let Some(s) = w.links.get_mut(l) {
                    s.addressed = true;
                }
            }
            Self::PromptArp(l) => {
                if let Some(s) = w.links.get_mut(l) {
                    s.prompt = true;
                }
            }
            Self::Up(l) => {
                if let Some(s) = w.links.get_mut(l) {
                    s.up = true;
                }
            }
            Self::Route(ip, l) => {
                w.routes.insert(*ip, l.clone());
            }
            Self::Neighbour(ip, l, mac) => {
                w.neighbours.insert((*ip, l.clone()), mac.clone());
            }
            Self::AddRouter6(l) => {
                if let Some(s) = w.links.get_mut(l) {
                    s.router6 = true;
                }
            }
            Self::NextHop6(l, ..) => {
                if let Some(s) = w.links.get_mut(l) {
                    s.next_hop6 = true;
                }
            }
            Self::Route6(net, l, hop) => {
                w.routes6.insert(*net, (l.clone(), *hop));
            }
            Self::DelRoute6(net, _) => {
                w.routes6.remove(net);
            }
            Self::Allow6(l, net) => {
                w.allowed6.insert((l.clone(), *net));
            }
            Self::Disallow6(l, net) => {
                w.allowed6.remove(&(l.clone(), *net));
            }
            Self::Guard6(l) => {
                w.guarded6.insert(l.clone());
            }
            Self::Unguard6(l) => {
                w.guarded6.remove(l);
            }
        }
    }
}

impl Wiring {
    /// What the VPC must look like for `model`: a complete link for every ENI attached to a
    /// known node, and a route + neighbour for each of its addresses (primary, secondaries,
    /// every address of its prefixes). ENIs that are not attached get nothing.
    pub fn wanted(model: &Model, nodes: &BTreeMap<String, NodeRef>) -> Self {
        let mut w = Self::default();
        for eni in model.enis() {
            let Some(att) = &eni.attachment else {
                continue;
            };
            let Some(node) = nodes.get(&att.instance_id) else {
                tracing::warn!(eni = %eni.id, instance = %att.instance_id, "ENI attached to an instance without a node namespace: no link");
                continue;
            };
            let Ok(subnet) = model.subnet(&eni.subnet_id) else {
                tracing::warn!(eni = %eni.id, subnet = %eni.subnet_id, "ENI in an unknown subnet: no link");
                continue;
            };
            let name = eni_link(node.index, att.device_index);
            let next_hop6 = match subnet.ipv6_cidr() {
                Some(_) => next_hop(eni),
                None => None,
            };
            let link = EniLink {
                name: name.clone(),
                node_netns: node.netns.clone(),
                device: att.device_index,
                mac: eni.mac.clone(),
                router: subnet.router(),
                next_hop6,
            };
            let prefix_ips = eni.prefixes.iter().flat_map(|p| p.value.iter());
            for ip in eni.private_ips().chain(prefix_ips) {
                w.routes.insert(ip, name.clone());
                w.neighbours.insert((ip, name.clone()), eni.mac.clone());
            }
            if let Some(hop) = next_hop6 {
                w.want_ipv6(eni, &name, hop);
            }
            w.links.insert(name, LinkState::complete(link));
        }
        w
    }

    /// IPv6 delivery and source rules of `eni` on `link`: every held network routed via `hop`
    /// and allowed as a source, link-local sources allowed, the rest dropped.
    fn want_ipv6(&mut self, eni: &Eni, link: &str, hop: Ipv6Addr) {
        for net in v6::held(eni) {
            self.routes6.insert(net, (link.to_string(), hop));
            self.allowed6.insert((link.to_string(), net));
        }
        self.allowed6.insert((link.to_string(), LINK_LOCAL));
        self.guarded6.insert(link.to_string());
    }

    /// The lines that turn `self` (what is applied) into `want`: removals first (a link that
    /// changed is deleted and created again), then new links, then routes and neighbours.
    pub fn diff(&self, want: &Wiring) -> Vec<Op> {
        let mut ops = Vec::new();
        let mut now = self.clone();
        for (name, state) in &self.links {
            if want.links.get(name) != Some(state) {
                ops.push(Op::DelLink(name.clone()));
            }
        }
        for op in &ops {
            op.apply(&mut now);
        }
        let mut more = Vec::new();
        for (ip, link) in &now.routes {
            if !want.routes.contains_key(ip) {
                more.push(Op::DelRoute(*ip, link.clone()));
            }
        }
        for (ip, link) in now.neighbours.keys() {
            if !want.neighbours.contains_key(&(*ip, link.clone())) {
                more.push(Op::DelNeighbour(*ip, link.clone()));
            }
        }
        for (net, (link, _)) in &now.routes6 {
            if !want.routes6.contains_key(net) {
                more.push(Op::DelRoute6(*net, link.clone()));
            }
        }
        for (name, state) in &want.links {
            if now.links.get(name) != Some(state) {
                more.extend(create_link(state));
            }
        }
        for (ip, link) in &want.routes {
            if now.routes.get(ip) != Some(link) {
                more.push(Op::Route(*ip, link.clone()));
            }
        }
        for ((ip, link), mac) in &want.neighbours {
            if now.neighbours.get(&(*ip, link.clone())) != Some(mac) {
                more.push(Op::Neighbour(*ip, link.clone(), mac.clone()));
            }
        }
        for (net, (link, hop)) in &want.routes6 {
            if now.routes6.get(net) != Some(&(link.clone(), *hop)) {
                more.push(Op::Route6(*net, link.clone(), *hop));
            }
        }
        ops.extend(more);
        ops.extend(self.diff_rules(want));
        ops
    }

    /// The `ip -6 rule` lines, last (they run in a batch of their own): removals, then each
    /// new link's blackhole rule, then what its ENI holds.
    fn diff_rules(&self, want: &Wiring) -> Vec<Op> {
        let gone = self.allowed6.difference(&want.allowed6);
        let mut ops: Vec<Op> = gone
            .map(|(l, net)| Op::Disallow6(l.clone(), *net))
            .collect();
        ops.extend(
            self.guarded6
                .difference(&want.guarded6)
                .map(|l| Op::Unguard6(l.clone())),
        );
        ops.extend(
            want.guarded6
                .difference(&self.guarded6)
                .map(|l| Op::Guard6(l.clone())),
        );
        ops.extend(
            want.allowed6
                .difference(&self.allowed6)
                .map(|(l, net)| Op::Allow6(l.clone(), *net)),
        );
        ops
    }
}

/// The lines that create a link and bring it up.
fn create_link(state: &LinkState) -> Vec<Op> {
    let (link, name) = (&state.link, &state.link.name);
    let mut ops = vec![
        Op::AddLink(link.clone()),
        Op::AddRouter(name.clone(), link.router),
        Op::PromptArp(name.clone()),
        Op::Up(name.clone()),
    ];
    if let Some(hop) = link.next_hop6 {
        ops.push(Op::AddRouter6(name.clone()));
        ops.push(Op::NextHop6(name.clone(), hop, link.mac.clone()));
    }
    ops
}

/// The IPv6 next hop of `eni`, or none (and a warning) when its MAC cannot give one.
fn next_hop(eni: &Eni) -> Option<Ipv6Addr> {
    let hop = v6::eui64_link_local(&eni.mac);
    if hop.is_none() {
        tracing::warn!(eni = %eni.id, mac = %eni.mac, "MAC without an EUI-64 link-local address: no IPv6 on its link");
    }
    hop
}

/// The 1-based line at which `ip -batch` stopped, from its stderr (`Command failed -:N`).
pub fn failed_line(stderr: &str) -> Option<usize> {
    stderr.lines().find_map(|l| {
        let rest = l.split("Command failed -:").nth(1)?;
        rest.trim().parse().ok()
    })
}
