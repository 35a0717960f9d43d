//! Wiring one pod: the veth pair, the pod's address/routes/neighbour, the host's route and rules.

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;

use ipnetwork::Ipv4Network;

use crate::error::{Error, Result, libc_errno};
use crate::messages::RT_TABLE_MAIN;
use crate::messages::link::{Link, VethSpec};
use crate::messages::route::Route;
use crate::messages::rule::Rule;
use crate::names::{random_mac, validate_ifname};
use crate::netlink_ops::NetlinkOps;

/// The pod's next hop: a link-local address answered by the host veth (via the permanent
/// neighbour entry), never configured anywhere.
pub const POD_GATEWAY: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);
/// Priority of the host rule `to <pod ip> lookup main`.
pub const PRIO_TO_POD: u32 = 512;
/// Priority of the host rule `from <pod ip> lookup <ENI table>` (secondary-ENI pods only).
pub const PRIO_FROM_POD: u32 = 1536;

/// What to build for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSpec {
    /// Host-side veth name (see [`crate::veth_name`]).
    pub host_veth: String,
    /// Interface name inside the pod (`CNI_IFNAME`).
    pub container_ifname: String,
    /// The pod's address (configured as /32).
    pub ip: Ipv4Addr,
    /// MTU of both veth ends.
    pub mtu: u32,
    /// Route table of the ENI owning `ip`: 254 (main) for the primary ENI; any other value
    /// means a secondary ENI and adds the rule `from <ip>/32 lookup <table>` prio 1536.
    pub route_table: u32,
}

/// What [`setup_pod`] created, for the CNI result and later checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodWiring {
    /// MAC of the host veth (chosen by us).
    pub host_mac: [u8; 6],
    /// MAC of the pod's interface (chosen by the kernel).
    pub container_mac: [u8; 6],
    /// Index of the host veth in the host namespace.
    pub host_ifindex: u32,
    /// Index of the pod's interface in the pod namespace.
    pub container_ifindex: u32,
}

/// The pod's address as a /32.
pub(crate) fn host_prefix(ip: Ipv4Addr) -> Ipv4Network {
    Ipv4Network::from(ip)
}

/// Wires a pod: `host` is a socket in the node's namespace, `pod` one in the pod's (a
/// [`crate::Netlink`] each, in production).
///
/// Creates the veth from the pod side with the peer placed directly in the host namespace
/// (no link is moved between namespaces), both ends up with `spec.mtu`; then on the host the
/// route `<ip>/32 dev <host_veth> scope link` (replace), the rule `to <ip>/32 lookup main`
/// prio 512 and, for a secondary ENI, `from <ip>/32 lookup <table>` prio 1536 (an existing
/// identical rule is fine); then in the pod `<ip>/32` on the interface, the routes
/// `169.254.1.1/32 dev <if> scope link` and `default via 169.254.1.1`, and a permanent
/// neighbour `169.254.1.1 -> <host veth MAC>`.
///
/// A stale host veth of the same name is deleted first. An existing `container_ifname` in
/// the pod is an error ([`Error::ContainerIfaceExists`]). When any step fails, everything
/// created so far is removed and the original error is returned.
pub fn setup_pod<N: NetlinkOps + ?Sized>(host: &N, pod: &N, spec: &PodSpec) -> Result<PodWiring> {
    setup_pod_with_mac(host, pod, spec, random_mac)
}

/// [`setup_pod`] with the host veth's MAC from `new_mac`, called where `setup_pod` draws a
/// random one, so tests can predict every request.
fn setup_pod_with_mac<N: NetlinkOps + ?Sized>(
    host: &N,
    pod: &N,
    spec: &PodSpec,
    new_mac: impl FnOnce() -> Result<[u8; 6]>,
) -> Result<PodWiring> {
    validate(spec)?;
    // The host veth name belongs to this pod: a leftover one is this pod's earlier wiring, and
    // deleting it removes its pod end too, so a repeated ADD re-wires instead of failing.
    remove_stale_host_veth(host, &spec.host_veth)?;
    if pod.link_by_name(&spec.container_ifname)?.is_some() {
        return Err(Error::ContainerIfaceExists {
            name: spec.container_ifname.clone(),
        });
    }
    let host_mac = new_mac()?;

    let mut undo = Undo::default();
    let result = wire(host, pod, spec, host_mac, &mut undo);
    if result.is_err() {
        undo.run(host);
    }
    result
}

fn validate(spec: &PodSpec) -> Result<()> {
    validate_ifname("host veth name", &spec.host_veth)?;
    validate_ifname("container interface name", &spec.container_ifname)?;
    let ip = spec.ip;
    if ip.is_unspecified() || ip.is_loopback() || ip.is_multicast() || ip.is_broadcast() {
        return Err(Error::Invalid {
            what: "pod IP",
            why: format!("{ip} cannot be a pod address"),
        });
    }
    if !(68..=65535).contains(&spec.mtu) {
        return Err(Error::Invalid {
            what: "MTU",
            why: format!("{} is outside 68..=65535", spec.mtu),
        });
    }
    if spec.route_table == 0 {
        // The kernel would pick an arbitrary empty table for a rule with table 0.
        return Err(Error::Invalid {
            what: "route table",
            why: "0 is not a table (254 is main)".into(),
        });
    }
    Ok(())
}

/// Deletes a leftover host veth of this name; refuses to touch a link that is not a veth.
fn remove_stale_host_veth<N: NetlinkOps + ?Sized>(host: &N, name: &str) -> Result<()> {
    let Some(link) = host.link_by_name(name)? else {
        return Ok(());
    };
    if link.kind.as_deref() != Some("veth") {
        return Err(Error::Invalid {
            what: "host veth name",
            why: format!(
                "{name} already exists on the host as a {} link, not a veth",
                link.kind.as_deref().unwrap_or("physical")
            ),
        });
    }
    match host.delete_link_by_index(link.index) {
        Err(e) if !e.is_not_found() => Err(e.with_op(format!("delete stale host veth {name}"))),
        _ => Ok(()),
    }
}

/// What has been created so far, to remove on failure.
#[derive(Default)]
struct Undo {
    veth: Option<String>,
    route: Option<Route>,
    rules: Vec<Rule>,
}

impl Undo {
    /// Best effort: the caller returns the original error, not one from cleaning up.
    fn run<N: NetlinkOps + ?Sized>(self, host: &N) {
        for rule in self.rules.iter().rev() {
            let _ = host.delete_rule(rule);
        }
        if let Some(route) = &self.route {
            let _ = host.delete_route(route);
        }
        // The pod end, and with it the pod's address, routes and neighbour, goes with the pair.
        if let Some(veth) = &self.veth {
            let _ = host.delete_link_by_name(veth);
        }
    }
}

fn wire<N: NetlinkOps + ?Sized>(
    host: &N,
    pod: &N,
    spec: &PodSpec,
    host_mac: [u8; 6],
    undo: &mut Undo,
) -> Result<PodWiring> {
    let PodSpec {
        host_veth,
        container_ifname: ifname,
        ip,
        ..
    } = spec;
    let ip32 = host_prefix(*ip);

    pod.create_veth(&VethSpec {
        name: ifname.clone(),
        peer_name: host_veth.clone(),
        peer_mac: Some(host_mac),
        peer_netns_fd: Some(host.netns_fd().as_raw_fd()),
        mtu: spec.mtu,
        up: true,
    })?;
    undo.veth = Some(host_veth.clone());

    let host_link = require_link(host, host_veth, "host veth")?;
    let cont_link = require_link(pod, ifname, "pod interface")?;
    let container_mac = cont_link.mac.ok_or_else(|| Error::Decode {
        op: format!("get link {ifname}"),
        reason: "the new pod interface has no MAC address".into(),
    })?;

    let host_route = Route::link_scope(ip32, host_link.index, RT_TABLE_MAIN);
    host.replace_route(&host_route)
        .map_err(|e| e.with_op(format!("replace route {ip32} dev {host_veth} scope link")))?;
    undo.route = Some(host_route);

    add_host_rule(host, Rule::to_dst(PRIO_TO_POD, ip32, RT_TABLE_MAIN), undo)?;
    if spec.route_table != RT_TABLE_MAIN {
        add_host_rule(
            host,
            Rule::from_src(PRIO_FROM_POD, ip32, spec.route_table),
            undo,
        )?;
    }

    let idx = cont_link.index;
    pod.add_address(idx, ip32)
        .map_err(|e| e.with_op(format!("add address {ip32} dev {ifname} in pod")))?;
    let gw32 = host_prefix(POD_GATEWAY);
    pod.replace_route(&Route::link_scope(gw32, idx, RT_TABLE_MAIN))
        .map_err(|e| {
            e.with_op(format!(
                "replace route {gw32} dev {ifname} scope link in pod"
            ))
        })?;
    pod.add_route(&Route::default_via(POD_GATEWAY, idx, RT_TABLE_MAIN))
        .map_err(|e| {
            e.with_op(format!(
                "add route default via {POD_GATEWAY} dev {ifname} in pod"
            ))
        })?;
    pod.replace_neighbour(idx, POD_GATEWAY, host_mac)
        .map_err(|e| {
            e.with_op(format!(
                "add permanent neighbour {POD_GATEWAY} lladdr {} dev {ifname} in pod",
                crate::names::format_mac(&host_mac)
            ))
        })?;

    Ok(PodWiring {
        host_mac,
        container_mac,
        host_ifindex: host_link.index,
        container_ifindex: idx,
    })
}

/// Looks up a link just created and makes sure it is up.
fn require_link<N: NetlinkOps + ?Sized>(nl: &N, name: &str, what: &str) -> Result<Link> {
    let link = nl.link_by_name(name)?.ok_or_else(|| Error::Kernel {
        op: format!("find {what} {name} after creating it"),
        errno: libc_errno::ENODEV,
        ext_ack: None,
    })?;
    if !link.up {
        // The host end is always created down (see VethSpec::up).
        nl.set_link_up(link.index)
            .map_err(|e| e.with_op(format!("set {what} {name} up")))?;
    }
    Ok(link)
}

fn add_host_rule<N: NetlinkOps + ?Sized>(host: &N, rule: Rule, undo: &mut Undo) -> Result<()> {
    match host.add_rule(&rule) {
        Ok(()) => {
            undo.rules.push(rule);
            Ok(())
        }
        // Left by an earlier pod with this address or a retried ADD: it is the rule we want.
        Err(e) if e.is_exists() => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
pub(crate) mod tests;
