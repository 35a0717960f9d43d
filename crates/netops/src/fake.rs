//! A recording, in-memory rtnetlink for unprivileged tests of pod wiring, teardown and checks.
//!
//! A [`FakeNet`] holds namespaces; each [`FakeNs`] implements [`NetlinkOps`] against a small
//! model of the kernel ([`model`]) with the answers pod wiring depends on. Every call is logged
//! as `<namespace>: <op>`, where `<op>` is the text the real socket would put in its error, and
//! any call can be made to fail with a chosen errno, before it changes anything.

mod model;

use std::cell::RefCell;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::rc::Rc;

use crate::error::{NetlinkError, Result};
use crate::messages::addr::{self, AddressOf};
use crate::messages::family::{FamilyAddr, IpFamily};
use crate::messages::link::{self, Link, VethSpec};
use crate::messages::neigh::{self, NeighbourOf};
use crate::messages::route::{self, RouteOf};
use crate::messages::rule::{self, RuleOf};
use crate::netlink_ops::NetlinkOps;
use crate::sysctl::ipv6_conf_op;

pub(crate) use model::NsState;
use model::World;

/// The namespaces of one test, their shared call log and the failures still to inject.
#[derive(Clone, Default)]
pub(crate) struct FakeNet {
    world: Rc<RefCell<World>>,
}

impl FakeNet {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A new empty namespace; `name` prefixes its calls in the log.
    pub(crate) fn namespace(&self, name: &'static str) -> FakeNs {
        // A real descriptor, so that `netns_fd` can lend one and a veth peer can name this
        // namespace by its number, as with the real socket.
        let fd: OwnedFd = File::open("/dev/null")
            .expect("open /dev/null as a namespace handle")
            .into();
        let id = self.world.borrow_mut().add_namespace(name, fd.as_raw_fd());
        FakeNs {
            world: Rc::clone(&self.world),
            id,
            fd,
        }
    }

    /// The calls made since the last time the log was taken, oldest first.
    pub(crate) fn take_calls(&self) -> Vec<String> {
        std::mem::take(&mut self.world.borrow_mut().calls)
    }

    /// Makes call number `n` (counted from 0 since the log was last taken) fail with `errno`.
    pub(crate) fn fail_call(&self, n: usize, errno: i32) {
        self.world
            .borrow_mut()
            .add_fault(model::Trigger::Nth(n), errno);
    }

    /// Makes the first call whose log line starts with `prefix` fail with `errno`.
    pub(crate) fn fail_first(&self, prefix: &str, errno: i32) {
        self.world
            .borrow_mut()
            .add_fault(model::Trigger::Prefix(prefix.to_string()), errno);
    }

    /// Every namespace's objects, to compare before and after.
    pub(crate) fn state(&self) -> Vec<NsState> {
        self.world.borrow().states()
    }

    /// A node namespace (`lo`, `eth0`) and a pod namespace (`lo`) as a runtime hands them to
    /// ADD; the new host veth becomes #3 and the pod interface #2, so logs tell them apart.
    pub(crate) fn node_and_pod() -> (Self, FakeNs, FakeNs) {
        let net = Self::new();
        let host = net.namespace("host");
        let pod = net.namespace("pod");
        host.seed_link("lo", None);
        host.seed_link("eth0", None);
        pod.seed_link("lo", None);
        (net, host, pod)
    }
}

/// One namespace of a [`FakeNet`], used where production passes a [`crate::Netlink`].
pub(crate) struct FakeNs {
    world: Rc<RefCell<World>>,
    id: usize,
    fd: OwnedFd,
}

impl FakeNs {
    /// Adds a link without a peer (`kind` `None` is a physical device), without logging.
    pub(crate) fn seed_link(&self, name: &str, kind: Option<&str>) {
        self.world.borrow_mut().seed_link(self.id, name, kind);
    }

    /// This namespace's objects.
    pub(crate) fn state(&self) -> NsState {
        self.world.borrow().state(self.id).clone()
    }

    /// Logs the call, then fails it if told to, else applies `effect` to the model.
    fn call<T>(
        &self,
        op: String,
        effect: impl FnOnce(&mut World, usize) -> std::result::Result<T, i32>,
    ) -> Result<T> {
        let mut world = self.world.borrow_mut();
        let outcome = match world.log(self.id, &op) {
            Some(errno) => Err(errno),
            None => effect(&mut world, self.id),
        };
        outcome.map_err(|errno| NetlinkError::Kernel {
            op,
            errno,
            ext_ack: None,
        })
    }

    fn in_state<T>(
        &self,
        op: String,
        effect: impl FnOnce(&mut NsState) -> std::result::Result<T, i32>,
    ) -> Result<T> {
        self.call(op, |world, id| effect(world.state_mut(id)))
    }
}

impl NetlinkOps for FakeNs {
    fn netns_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn link_by_name(&self, name: &str) -> Result<Option<Link>> {
        self.in_state(link::get_link_by_name(name).op, |s| {
            Ok(s.link_named(name).map(|l| l.link.clone()))
        })
    }

    fn create_veth(&self, spec: &VethSpec) -> Result<()> {
        self.call(link::create_veth(spec).op, |w, id| w.create_veth(id, spec))
    }

    fn delete_link_by_name(&self, name: &str) -> Result<()> {
        self.call(link::delete_link_by_name(name).op, |w, id| {
            let index = w.state_mut(id).index_of(name)?;
            w.delete_link(id, index)
        })
    }

    fn delete_link_by_index(&self, index: u32) -> Result<()> {
        self.call(link::delete_link_by_index(index).op, |w, id| {
            w.delete_link(id, index)
        })
    }

    fn set_link_up(&self, index: u32) -> Result<()> {
        self.in_state(link::set_link_up(index, true).op, |s| s.set_up(index))
    }

    fn set_ipv6_conf(&self, ifname: &str, setting: &str, value: &str) -> Result<()> {
        self.in_state(ipv6_conf_op(ifname, setting, value), |s| {
            s.set_ipv6_conf(ifname, setting, value)
        })
    }

    fn add_address<F: IpFamily>(&self, index: u32, network: F) -> Result<()> {
        self.in_state(addr::add_address(index, network).op, |s| {
            s.add_address(index, network)
        })
    }

    fn addresses_of<F: IpFamily>(&self) -> Result<Vec<AddressOf<F>>> {
        self.in_state(addr::dump_addresses_of::<F>().op, |s| {
            Ok(s.addresses_mut::<F>().clone())
        })
    }

    fn add_route<F: IpFamily>(&self, route: &RouteOf<F>) -> Result<()> {
        self.in_state(route::add_route(route).op, |s| s.add_route(route, false))
    }

    fn replace_route<F: IpFamily>(&self, route: &RouteOf<F>) -> Result<()> {
        self.in_state(route::replace_route(route).op, |s| s.add_route(route, true))
    }

    fn delete_route<F: IpFamily>(&self, route: &RouteOf<F>) -> Result<()> {
        self.in_state(route::delete_route(route).op, |s| s.delete_route(route))
    }

    fn routes_of<F: IpFamily>(&self, table: u32) -> Result<Vec<RouteOf<F>>> {
        self.in_state(route::dump_routes_of::<F>().op, |s| {
            Ok(s.routes_mut::<F>()
                .iter()
                .filter(|r| r.table == table)
                .copied()
                .collect())
        })
    }

    fn add_rule<F: IpFamily>(&self, rule: &RuleOf<F>) -> Result<()> {
        self.in_state(rule::add_rule(rule).op, |s| s.add_rule(rule))
    }

    fn delete_rule<F: IpFamily>(&self, rule: &RuleOf<F>) -> Result<()> {
        self.in_state(rule::delete_rule(rule).op, |s| s.delete_rule(rule))
    }

    fn rules_of<F: IpFamily>(&self) -> Result<Vec<RuleOf<F>>> {
        self.in_state(rule::dump_rules_of::<F>().op, |s| {
            Ok(s.rules_mut::<F>().clone())
        })
    }

    fn replace_neighbour<A: FamilyAddr>(&self, index: u32, ip: A, mac: [u8; 6]) -> Result<()> {
        self.in_state(neigh::replace_neighbour(index, ip, mac).op, |s| {
            s.replace_neighbour(index, ip, mac)
        })
    }

    fn neighbours_of<A: FamilyAddr>(&self) -> Result<Vec<NeighbourOf<A>>> {
        self.in_state(neigh::dump_neighbours_of::<A::Net>().op, |s| {
            Ok(s.neighbours_mut::<A>().clone())
        })
    }
}

/// The kernel behaviour the pod tests rely on, pinned here so that the model cannot drift
/// silently (the root tests prove the kernel's side).
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use ipnetwork::{Ipv4Network, Ipv6Network};
    use nix::errno::Errno;

    use super::*;
    use crate::messages::RT_TABLE_MAIN;
    use crate::messages::route::{Route, Route6};
    use crate::messages::rule::{Rule, Rule6};

    fn veth(name: &str, peer: &FakeNs) -> VethSpec {
        VethSpec {
            name: name.into(),
            peer_name: format!("{name}-peer"),
            peer_mac: None,
            peer_netns_fd: Some(peer.netns_fd().as_raw_fd()),
            mtu: 1500,
            up: true,
        }
    }

    #[test]
    fn deleting_a_veth_takes_its_peer_and_everything_on_both_ends() {
        let (net, host, pod) = FakeNet::node_and_pod();
        let before = net.state();
        pod.create_veth(&veth("eth0", &host)).unwrap();
        let peer = host.state().index_of("eth0-peer").unwrap();
        let ip: Ipv4Network = "10.0.0.5/32".parse().unwrap();
        host.set_link_up(peer).unwrap();
        host.replace_route(&Route::link_scope(ip, peer, RT_TABLE_MAIN))
            .unwrap();
        let eth0 = pod.state().index_of("eth0").unwrap();
        pod.add_address(eth0, ip).unwrap();
        pod.replace_neighbour(eth0, Ipv4Addr::new(169, 254, 1, 1), [2; 6])
            .unwrap();

        host.delete_link_by_name("eth0-peer").unwrap();

        assert_eq!(net.state(), before);
    }

    #[test]
    fn creating_twice_is_eexist_and_deleting_nothing_is_not_found() {
        let (_net, host, pod) = FakeNet::node_and_pod();
        pod.create_veth(&veth("eth0", &host)).unwrap();
        assert!(
            pod.create_veth(&veth("eth0", &host))
                .unwrap_err()
                .is_exists()
        );
        let rule = Rule::lookup(512, RT_TABLE_MAIN);
        host.add_rule(&rule).unwrap();
        assert!(host.add_rule(&rule).unwrap_err().is_exists());
        host.delete_rule(&rule).unwrap();
        assert!(host.delete_rule(&rule).unwrap_err().is_not_found());
        let route = Route::link_scope("10.0.0.5/32".parse().unwrap(), 2, RT_TABLE_MAIN);
        assert!(host.delete_route(&route).unwrap_err().is_not_found());
        assert!(host.delete_link_by_index(9).unwrap_err().is_not_found());
    }

    #[test]
    fn a_gateway_needs_a_route_to_it_first() {
        let (_net, _host, pod) = FakeNet::node_and_pod();
        let gw = Ipv4Addr::new(169, 254, 1, 1);
        let default = Route::default_via(gw, 1, RT_TABLE_MAIN);
        let err = pod.add_route(&default).unwrap_err();
        assert_eq!(err.errno(), Some(Errno::ENETUNREACH as i32));
        pod.replace_route(&Route::link_scope(gw.into(), 1, RT_TABLE_MAIN))
            .unwrap();
        pod.add_route(&default).unwrap();
        assert!(pod.add_route(&default).unwrap_err().is_exists());
    }

    #[test]
    fn a_fault_fails_its_call_once_without_effect_and_names_the_operation() {
        let (net, host, _pod) = FakeNet::node_and_pod();
        let rule = Rule::lookup(512, RT_TABLE_MAIN);
        net.fail_call(1, Errno::EPERM as i32);
        host.rules().unwrap();
        let err = host.add_rule(&rule).unwrap_err();
        assert_eq!(
            err.to_string(),
            "add rule prio 512 from all lookup main: Operation not permitted (os error 1)"
        );
        assert!(host.state().rules.is_empty());
        host.add_rule(&rule).unwrap();
        assert_eq!(
            net.take_calls(),
            [
                "host: dump IPv4 rules",
                "host: add rule prio 512 from all lookup main",
                "host: add rule prio 512 from all lookup main",
            ]
        );
    }

    #[test]
    fn ipv6_objects_live_apart_from_ipv4_ones_and_go_with_their_link() {
        let (net, host, pod) = FakeNet::node_and_pod();
        let before = net.state();
        pod.create_veth(&veth("eth0", &host)).unwrap();
        let eth0 = pod.state().index_of("eth0").unwrap();
        let gw: Ipv6Addr = "fe80::1".parse().unwrap();
        let ip: Ipv6Network = "2001:db8::5/128".parse().unwrap();
        pod.set_ipv6_conf("eth0", "disable_ipv6", "0").unwrap();
        pod.add_address(eth0, ip).unwrap();
        // A link-local gateway needs its device only, as in the kernel.
        pod.add_route(&Route6::default_via(gw, eth0, RT_TABLE_MAIN))
            .unwrap();
        pod.replace_neighbour(eth0, gw, [2; 6]).unwrap();
        host.add_rule(&Rule6::to_dst(512, ip, RT_TABLE_MAIN))
            .unwrap();

        assert!(pod.addresses().unwrap().is_empty(), "no IPv4 address");
        assert!(pod.routes(RT_TABLE_MAIN).unwrap().is_empty());
        assert!(host.rules().unwrap().is_empty());
        assert_eq!(pod.addresses_of::<Ipv6Network>().unwrap().len(), 1);
        assert_eq!(pod.neighbours_of::<Ipv6Addr>().unwrap()[0].ip, gw);
        assert_eq!(
            host.rules_of::<Ipv6Network>().unwrap(),
            [Rule6::to_dst(512, ip, RT_TABLE_MAIN)]
        );
        assert_eq!(
            pod.state()
                .ipv6_conf
                .get(&("eth0".into(), "disable_ipv6".into())),
            Some(&"0".to_string())
        );
        assert_eq!(
            pod.set_ipv6_conf("eth9", "accept_ra", "0")
                .unwrap_err()
                .errno(),
            Some(Errno::ENOENT as i32)
        );

        host.delete_rule(&Rule6::to_dst(512, ip, RT_TABLE_MAIN))
            .unwrap();
        pod.delete_link_by_name("eth0").unwrap();
        assert_eq!(net.state(), before);
        let calls = net.take_calls();
        assert!(
            calls.contains(&"pod: add address 2001:db8::5/128 dev #2".to_string())
                && calls.contains(&"pod: set net.ipv6.conf.eth0.disable_ipv6=0".to_string())
                && calls.contains(&"host: dump IPv6 rules".to_string()),
            "{calls:?}"
        );
        // An IPv6 global gateway needs a route to it, like an IPv4 one.
        let far = Route6::default_via("2001:db8::1".parse().unwrap(), 1, RT_TABLE_MAIN);
        assert_eq!(
            host.add_route(&far).unwrap_err().errno(),
            Some(Errno::ENETUNREACH as i32)
        );
    }
}
