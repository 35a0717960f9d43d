//! The kernel as far as pod wiring sees it: links (veth pairs across namespaces), addresses,
//! routes, rules and neighbours, with the errno the kernel answers where callers depend on it.

use std::any::Any;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::os::fd::RawFd;

use ipnetwork::Ipv6Network;
use nix::errno::Errno;

use crate::messages::addr::{Address, AddressOf};
use crate::messages::family::{FamilyAddr, IpFamily};
use crate::messages::link::{Link, VethSpec};
use crate::messages::neigh::{Neighbour, NeighbourOf};
use crate::messages::route::{Route, RouteOf};
use crate::messages::rule::{Rule, RuleOf};

type Outcome<T = ()> = Result<T, i32>;

const EBADF: i32 = Errno::EBADF as i32;
const EEXIST: i32 = Errno::EEXIST as i32;
const ENODEV: i32 = Errno::ENODEV as i32;
const ENOENT: i32 = Errno::ENOENT as i32;
const ENETUNREACH: i32 = Errno::ENETUNREACH as i32;
const ESRCH: i32 = Errno::ESRCH as i32;

/// The objects of one namespace: links, the IPv4 objects, the IPv6 ones, and the
/// `net.ipv6.conf.<if>.<setting>` values written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NsState {
    pub(crate) links: Vec<FakeLink>,
    pub(crate) addresses: Vec<Address>,
    pub(crate) routes: Vec<Route>,
    /// In the kernel's order: by priority, then age.
    pub(crate) rules: Vec<Rule>,
    pub(crate) neighbours: Vec<Neighbour>,
    pub(crate) v6: Tables<Ipv6Network>,
    /// `(interface, setting) -> value`; an interface's entries go with it.
    pub(crate) ipv6_conf: BTreeMap<(String, String), String>,
}

/// One family's addresses, routes, rules (kernel order) and neighbours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tables<F: IpFamily> {
    pub(crate) addresses: Vec<AddressOf<F>>,
    pub(crate) routes: Vec<RouteOf<F>>,
    pub(crate) rules: Vec<RuleOf<F>>,
    pub(crate) neighbours: Vec<NeighbourOf<F::Addr>>,
}

impl<F: IpFamily> Default for Tables<F> {
    fn default() -> Self {
        Self {
            addresses: Vec::new(),
            routes: Vec::new(),
            rules: Vec::new(),
            neighbours: Vec::new(),
        }
    }
}

/// `v4` when `T` is its type, else `v6`: how a method generic over the family reaches the
/// IPv4 field or the IPv6 one (`IpFamily` is sealed to exactly these two).
fn pick<'a, T: 'static>(v4: &'a mut dyn Any, v6: &'a mut dyn Any) -> &'a mut T {
    if let Some(t) = v4.downcast_mut::<T>() {
        return t;
    }
    v6.downcast_mut::<T>()
        .expect("a table of the IPv4 or the IPv6 family")
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

    pub(crate) fn addresses_mut<F: IpFamily>(&mut self) -> &mut Vec<AddressOf<F>> {
        pick(&mut self.addresses, &mut self.v6.addresses)
    }

    pub(crate) fn routes_mut<F: IpFamily>(&mut self) -> &mut Vec<RouteOf<F>> {
        pick(&mut self.routes, &mut self.v6.routes)
    }

    pub(crate) fn rules_mut<F: IpFamily>(&mut self) -> &mut Vec<RuleOf<F>> {
        pick(&mut self.rules, &mut self.v6.rules)
    }

    pub(crate) fn neighbours_mut<A: FamilyAddr>(&mut self) -> &mut Vec<NeighbourOf<A>> {
        pick(&mut self.neighbours, &mut self.v6.neighbours)
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
        self.v6.addresses.retain(|a| a.index != index);
        self.v6.routes.retain(|r| r.oif != Some(index));
        self.v6.neighbours.retain(|n| n.index != index);
        let gone = self.links.remove(at);
        self.ipv6_conf
            .retain(|(ifname, _), _| *ifname != gone.link.name);
        Ok(gone)
    }

    /// As /proc/sys: the file exists only for an existing interface.
    pub(super) fn set_ipv6_conf(&mut self, ifname: &str, setting: &str, value: &str) -> Outcome {
        self.index_of(ifname).map_err(|_| ENOENT)?;
        self.ipv6_conf
            .insert((ifname.to_string(), setting.to_string()), value.to_string());
        Ok(())
    }

    pub(super) fn set_up(&mut self, index: u32) -> Outcome {
        self.link_mut(index)?.up = true;
        Ok(())
    }

    pub(super) fn add_address<F: IpFamily>(&mut self, index: u32, network: F) -> Outcome {
        self.link_mut(index)?;
        let address = AddressOf { index, network };
        let addresses = self.addresses_mut::<F>();
        if addresses.contains(&address) {
            return Err(EEXIST);
        }
        addresses.push(address);
        Ok(())
    }

    /// A route needs its device, and a gateway a route on the way to it (an IPv6 link-local
    /// gateway only its device); one route per destination and table (the kernel's key,
    /// ignoring TOS and metric, which we never set).
    pub(super) fn add_route<F: IpFamily>(&mut self, route: &RouteOf<F>, replace: bool) -> Outcome {
        if let Some(oif) = route.oif {
            self.link_mut(oif)?;
        }
        let routes = self.routes_mut::<F>();
        if let Some(gw) = route.gateway {
            let link_local = matches!(gw.into(), IpAddr::V6(v6) if v6.is_unicast_link_local());
            let reachable = (link_local && route.oif.is_some())
                || routes.iter().any(|r| {
                    r.table == route.table
                        && r.gateway.is_none()
                        && r.dst.contains(gw)
                        && (route.oif.is_none() || r.oif == route.oif)
                });
            if !reachable {
                return Err(ENETUNREACH);
            }
        }
        let same_key = |r: &RouteOf<F>| r.dst == route.dst && r.table == route.table;
        match routes.iter().position(same_key) {
            Some(_) if !replace => Err(EEXIST),
            Some(at) => {
                routes[at] = *route;
                Ok(())
            }
            None => {
                routes.push(*route);
                Ok(())
            }
        }
    }

    /// Fields the request leaves unset match anything, as for the kernel.
    pub(super) fn delete_route<F: IpFamily>(&mut self, route: &RouteOf<F>) -> Outcome {
        let routes = self.routes_mut::<F>();
        let at = routes
            .iter()
            .position(|r| {
                r.dst == route.dst
                    && r.table == route.table
                    && route.oif.is_none_or(|oif| r.oif == Some(oif))
                    && route.gateway.is_none_or(|gw| r.gateway == Some(gw))
            })
            .ok_or(ESRCH)?;
        routes.remove(at);
        Ok(())
    }

    pub(super) fn add_rule<F: IpFamily>(&mut self, rule: &RuleOf<F>) -> Outcome {
        let rules = self.rules_mut::<F>();
        if rules.contains(rule) {
            return Err(EEXIST);
        }
        let at = rules
            .iter()
            .position(|r| r.priority > rule.priority)
            .unwrap_or(rules.len());
        rules.insert(at, rule.clone());
        Ok(())
    }

    pub(super) fn delete_rule<F: IpFamily>(&mut self, rule: &RuleOf<F>) -> Outcome {
        let rules = self.rules_mut::<F>();
        let at = rules.iter().position(|r| r == rule).ok_or(ENOENT)?;
        rules.remove(at);
        Ok(())
    }

    pub(super) fn replace_neighbour<A: FamilyAddr>(
        &mut self,
        index: u32,
        ip: A,
        mac: [u8; 6],
    ) -> Outcome {
        self.link_mut(index)?;
        let neighbours = self.neighbours_mut::<A>();
        neighbours.retain(|n| !(n.index == index && n.ip == ip));
        neighbours.push(NeighbourOf {
            index,
            ip,
            mac: Some(mac),
            permanent: true,
        });
        Ok(())
    }
}
