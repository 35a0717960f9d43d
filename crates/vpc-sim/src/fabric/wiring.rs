//! The VPC's view of the ENIs: one link per attached ENI and, for every address an ENI holds, a
//! `/32` route and a permanent neighbour towards it. Computed from the model, diffed against
//! what was applied, and turned into `ip -batch` lines.
//!
//! Each line is one kernel operation with a known effect on the record of what is applied, so
//! when `ip -batch` stops at line N the record is exactly "lines before N applied".

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use super::ENI_MTU;
use super::plan::{NodeRef, eni_link, node_ifname};
use crate::model::Model;

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
}

/// How far a link got: created, then its router address, then prompt proxy ARP, then up.
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
}

impl LinkState {
    fn complete(link: EniLink) -> Self {
        Self {
            link,
            addressed: true,
            prompt: true,
            up: true,
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
        }
    }

    /// Whether the line removes something (and so is done when that is already gone).
    pub fn is_deletion(&self) -> bool {
        matches!(
            self,
            Self::DelLink(_) | Self::DelRoute(..) | Self::DelNeighbour(..)
        )
    }

    /// What the kernel state becomes once this line succeeded.
    pub fn apply(&self, w: &mut Wiring) {
        match self {
            Self::DelLink(l) => {
                w.links.remove(l);
                w.routes.retain(|_, link| link != l);
                w.neighbours.retain(|(_, link), _| link != l);
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
            let link = EniLink {
                name: name.clone(),
                node_netns: node.netns.clone(),
                device: att.device_index,
                mac: eni.mac.clone(),
                router: subnet.router(),
            };
            let prefix_ips = eni.prefixes.iter().flat_map(|p| p.value.iter());
            for ip in eni.private_ips().chain(prefix_ips) {
                w.routes.insert(ip, name.clone());
                w.neighbours.insert((ip, name.clone()), eni.mac.clone());
            }
            w.links.insert(name, LinkState::complete(link));
        }
        w
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
        for (name, state) in &want.links {
            if now.links.get(name) != Some(state) {
                more.push(Op::AddLink(state.link.clone()));
                more.push(Op::AddRouter(name.clone(), state.link.router));
                more.push(Op::PromptArp(name.clone()));
                more.push(Op::Up(name.clone()));
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
        ops.extend(more);
        ops
    }
}

/// The 1-based line at which `ip -batch` stopped, from its stderr (`Command failed -:N`).
pub fn failed_line(stderr: &str) -> Option<usize> {
    stderr.lines().find_map(|l| {
        let rest = l.split("Command failed -:").nth(1)?;
        rest.trim().parse().ok()
    })
}
