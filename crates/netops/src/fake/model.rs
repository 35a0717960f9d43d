//! The kernel as far as pod wiring sees it: links (veth pairs across namespaces), addresses,
//! routes, rules and neighbours, with the errno the kernel answers where callers depend on it.

use std::net::Ipv4Addr;
use std::os::fd::RawFd;

use ipnetwork::Ipv4Network;
use nix::errno::Errno;

use crate::messages::addr::Address;
use crate::messages::link::{Link, VethSpec};
use crate::messages::neigh::Neighbour;
use crate::messages::route::Route;
use crate::messages::rule::Rule;

type Outcome<T = ()> = Result<T, i32>;

const EBADF: i32 = Errno::EBADF as i32;
const EEXIST: i32 = Errno::EEXIST as i32;
const ENODEV: i32 = Errno::ENODEV as i32;
const ENOENT: i32 = Errno::ENOENT as i32;
const ENETUNREACH: i32 = Errno::ENETUNREACH as i32;
const ESRCH: i32 = Errno::ESRCH as i32;

/// The objects of one namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NsState {
    pub(crate) links: Vec<FakeLink>,
    pub(crate) addresses: Vec<Address>,
    pub(crate) routes: Vec<Route>,
    /// In the kernel's order: by priority, then age.
    pub(crate) rules: Vec<Rule>,
    pub(crate) neighbours: Vec<Neighbour>,
}

/// A link and, for a veth, the namespace its peer is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FakeLink {
    pub(crate) link: Link,
    peer_ns: Option<usize>,
}

/// Which call a fault hits.
pub(super) enum Trigger {
    /// The call with this position in the log.
    Nth(usize),
    /// The first call whose log line starts with this.
    Prefix(String),
}

struct Fault {
    trigger: Trigger,
    errno: i32,
}

struct Namespace {
    name: &'static str,
    /// The number of the descriptor its handle lends, to find it from a veth's peer fd.
    fd: RawFd,
    state: NsState,
    last_index: u32,
}

#[derive(Default)]
pub(super) struct World {
    namespaces: Vec<Namespace>,
    pub(super) calls: Vec<String>,
    faults: Vec<Fault>,
}

impl World {
    pub(super) fn add_namespace(&mut self, name: &'static str, fd: RawFd) -> usize {
        self.namespaces.push(Namespace {
            name,
            fd,
            state: NsState::default(),
            last_index: 0,
        });
        self.namespaces.len() - 1
    }

    pub(super) fn add_fault(&mut self, trigger: Trigger, errno: i32) {
        self.faults.push(Fault { trigger, errno });
    }

    /// Appends the call to the log; the errno when a fault hits it (each fault hits once).
    pub(super) fn log(&mut self, id: usize, op: &str) -> Option<i32> {
        let line = format!("{}: {op}", self.namespaces[id].name);
        let position = self.calls.len();
        self.calls.push(line);
        let line = &self.calls[position];
        let hit = self.faults.iter().position(|f| match &f.trigger {
            Trigger::Nth(n) => *n == position,
            Trigger::Prefix(prefix) => line.starts_with(prefix.as_str()),
        })?;
        Some(self.faults.remove(hit).errno)
    }

    pub(super) fn state(&self, id: usize) -> &NsState {
        &self.namespaces[id].state
    }

    pub(super) fn state_mut(&mut self, id: usize) -> &mut NsState {
        &mut self.namespaces[id].state
    }

    pub(super) fn states(&self) -> Vec<NsState> {
        self.namespaces.iter().map(|ns| ns.state.clone()).collect()
    }

    fn new_link(&mut self, id: usize, name: &str, kind: Option<&str>) -> Link {
        let ns = &mut self.namespaces[id];
        ns.last_index += 1;
        let index = ns.last_index;
        Link {
            index,
            name: name.to_string(),
            // Locally administered, and telling namespace and index apart in assertions.
            mac: Some([0x02, 0, 0, 0, id as u8, index as u8]),
            mtu: Some(1500),
            up: false,
            kind: kind.map(str::to_string),
            peer_index: None,
        }
    }

    pub(super) fn seed_link(&mut self, id: usize, name: &str, kind: Option<&str>) {
        let link = self.new_link(id, name, kind);
        self.state_mut(id).links.push(FakeLink {
            link,
            peer_ns: None,
        });
    }

    /// As the kernel: both names must be free, the local end may start up, the peer never.
    pub(super) fn create_veth(&mut self, id: usize, spec: &VethSpec) -> Outcome {
        let peer_id = match spec.peer_netns_fd {
            None => id,
            Some(fd) => self
                .namespaces
                .iter()
                .position(|ns| ns.fd == fd)
                .ok_or(EBADF)?,
        };
        if self.state(id).link_named(&spec.name).is_some()
            || self.state(peer_id).link_named(&spec.peer_name).is_some()
        {
            return Err(EEXIST);
        }
        let mut local = self.new_link(id, &spec.name, Some("veth"));
        let mut peer = self.new_link(peer_id, &spec.peer_name, Some("veth"));
        local.up = spec.up;
        local.mtu = Some(spec.mtu);
        local.peer_index = Some(peer.index);
        peer.mac = spec.peer_mac.or(peer.mac);
        peer.mtu = Some(spec.mtu);
        peer.peer_index = Some(local.index);
        self.state_mut(id).links.push(FakeLink {
            link: local,
            peer_ns: Some(peer_id),
        });
        self.state_mut(peer_id).links.push(FakeLink {
            link: peer,
            peer_ns: Some(id),
        });
        Ok(())
    }

    /// As the kernel: a veth takes its peer along, and a link its addresses, routes and
    /// neighbours.
    pub(super) fn delete_link(&mut self, id: usize, index: u32) -> Outcome {
        let gone = self.state_mut(id).remove_link(index)?;
        if let (Some(peer_id), Some(peer_index)) = (gone.peer_ns, gone.link.peer_index) {
            // Already gone only if the model was seeded inconsistently; nothing to undo then.
            let _ = self.state_mut(peer_id).remove_link(peer_index);
        }
        Ok(())
    }
}

impl NsState {
    pub(crate) fn link_named(&self, name: &str) -> Option<&FakeLink> {
        self.links.iter().find(|l| l.link.name == name)
    }

    fn link_mut(&mut self, index: u32) -> Outcome<&mut Link> {
        self.links
            .iter_mut()
            .map(|l| &mut l.link)
            .find(|l| l.index == index)
            .ok_or(ENODEV)
    }

    pub(super) fn index_of(&self, name: &str) -> Outcome<u32> {
        self.link_named(name).map(|l| l.link.index).ok_or(ENODEV)
    }

    fn remove_link(&mut self, index: u32) -> Outcome<FakeLink> {
        let at = self
            .links
            .iter()
            .position(|l| l.link.index == index)
            .ok_or(ENODEV)?;
        self.addresses.retain(|a| a.index != index);
        self.routes.retain(|r| r.oif != Some(index));
        self.neighbours.retain(|n| n.index != index);
        Ok(self.links.remove(at))
    }

    pub(super) fn set_up(&mut self, index: u32) -> Outcome {
        self.link_mut(index)?.up = true;
        Ok(())
    }

    pub(super) fn add_address(&mut self, index: u32, network: Ipv4Network) -> Outcome {
        self.link_mut(index)?;
        let address = Address { index, network };
        if self.addresses.contains(&address) {
            return Err(EEXIST);
        }
        self.addresses.push(address);
        Ok(())
    }

    /// A route needs its device, and a gateway a route on the way to it; one route per
    /// destination and table (the kernel's key, ignoring TOS and metric, which we never set).
    pub(super) fn add_route(&mut self, route: &Route, replace: bool) -> Outcome {
        if let Some(oif) = route.oif {
            self.link_mut(oif)?;
        }
        if let Some(gw) = route.gateway {
            let reachable = self.routes.iter().any(|r| {
                r.table == route.table
                    && r.gateway.is_none()
                    && r.dst.contains(gw)
                    && (route.oif.is_none() || r.oif == route.oif)
            });
            if !reachable {
                return Err(ENETUNREACH);
            }
        }
        let same_key = |r: &Route| r.dst == route.dst && r.table == route.table;
        match self.routes.iter().position(same_key) {
            Some(_) if !replace => Err(EEXIST),
            Some(at) => {
                self.routes[at] = *route;
                Ok(())
            }
            None => {
                self.routes.push(*route);
                Ok(())
            }
        }
    }

    /// Fields the request leaves unset match anything, as for the kernel.
    pub(super) fn delete_route(&mut self, route: &Route) -> Outcome {
        let at = self
            .routes
            .iter()
            .position(|r| {
                r.dst == route.dst
                    && r.table == route.table
                    && route.oif.is_none_or(|oif| r.oif == Some(oif))
                    && route.gateway.is_none_or(|gw| r.gateway == Some(gw))
            })
            .ok_or(ESRCH)?;
        self.routes.remove(at);
        Ok(())
    }

    pub(super) fn add_rule(&mut self, rule: &Rule) -> Outcome {
        if self.rules.contains(rule) {
            return Err(EEXIST);
        }
        let at = self
            .rules
            .iter()
            .position(|r| r.priority > rule.priority)
            .unwrap_or(self.rules.len());
        self.rules.insert(at, rule.clone());
        Ok(())
    }

    pub(super) fn delete_rule(&mut self, rule: &Rule) -> Outcome {
        let at = self.rules.iter().position(|r| r == rule).ok_or(ENOENT)?;
        self.rules.remove(at);
        Ok(())
    }

    pub(super) fn replace_neighbour(&mut self, index: u32, ip: Ipv4Addr, mac: [u8; 6]) -> Outcome {
        self.link_mut(index)?;
        self.neighbours
            .retain(|n| !(n.index == index && n.ip == ip));
        self.neighbours.push(Neighbour {
            index,
            ip,
            mac: Some(mac),
            permanent: true,
        });
        Ok(())
    }
}
