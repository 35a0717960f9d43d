//! Wiring one pod: the veth pair, the pod's addresses/routes/neighbours, the host's routes and
//! rules, for an IPv4 address, an IPv6 address or both.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;

use ipnetwork::{Ipv4Network, Ipv6Network};

use crate::error::{NetlinkError, Result, libc_errno};
use crate::messages::RT_TABLE_MAIN;
use crate::messages::family::IpFamily;
use crate::messages::link::{Link, VethSpec};
use crate::messages::route::{Route, Route6, RouteOf};
use crate::messages::rule::{Rule, Rule6, RuleOf};
use crate::names::{random_mac, validate_ifname};
use crate::netlink_ops::NetlinkOps;

/// The pod's IPv4 next hop: a link-local address answered by the host veth (via the permanent
/// neighbour entry), never configured anywhere.
pub const POD_GATEWAY: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);
/// The pod's IPv6 next hop, `fe80::1`, answered the same way (a permanent NDP entry).
pub const POD_GATEWAY6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
/// Priority of the host rule `to <pod ip> lookup main`.
pub const PRIO_TO_POD: u32 = 512;
/// Priority of the host rule `from <pod ip> lookup <ENI table>` (secondary-ENI pods only).
pub const PRIO_FROM_POD: u32 = 1536;

/// What to build for one pod: at least one of `ipv4` and `ipv6`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSpec {
    /// Host-side veth name (see [`crate::veth_name`]).
    pub host_veth: String,
    /// Interface name inside the pod (`CNI_IFNAME`).
    pub container_ifname: String,
    /// The pod's IPv4 address (configured as /32).
    pub ipv4: Option<Ipv4Addr>,
    /// The pod's IPv6 address (configured as /128, routed in the main table).
    pub ipv6: Option<Ipv6Addr>,
    /// An IPv6 pod's node-local IPv4 egress address (IPv4 egress): wired as `ipv4` is but with
    /// no host rule, since it never leaves the node unSNATed. Only without `ipv4`.
    pub egress_ipv4: Option<Ipv4Addr>,
    /// MTU of both veth ends.
    pub mtu: u32,
    /// Route table of the ENI owning `ipv4`: 254 (main) for the primary ENI; any other value
    /// means a secondary ENI and adds the rule `from <ipv4>/32 lookup <table>` prio 1536.
    /// IPv6 always uses main.
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
#[cfg(test)]
pub(crate) fn host_prefix(ip: Ipv4Addr) -> Ipv4Network {
    Ipv4Network::from(ip)
}

/// ` scope link` where the family keeps route scopes, for operation texts.
pub(crate) fn link_scope_text<F: IpFamily>() -> &'static str {
    if F::ROUTE_SCOPES { " scope link" } else { "" }
}

/// Wires a pod: `host` is a socket in the node's namespace, `pod` one in the pod's (a
/// [`crate::Netlink`] each, in production).
///
/// Creates the veth from the pod side with the peer placed directly in the host namespace
/// (no link is moved between namespaces), both ends up with `spec.mtu`. Then, for IPv4: on
/// the host the route `<ip>/32 dev <host_veth> scope link` (replace), the rule `to <ip>/32
/// lookup main` prio 512 and, for a secondary ENI, `from <ip>/32 lookup <table>` prio 1536
/// (an existing identical rule is fine); in the pod `<ip>/32` on the interface, the routes
/// `169.254.1.1/32 dev <if> scope link` and `default via 169.254.1.1`, and a permanent
/// neighbour `169.254.1.1 -> <host veth MAC>`. An IPv4 egress address is wired the same way
/// without the rules. For IPv6, as the Go CNI: `accept_ra=0` on the
/// host veth and `disable_ipv6=0` on the pod's interface and `lo` (skipped where the kernel
/// has no IPv6 settings), then the same shape with `<ip6>/128` (no DAD), `fe80::1` and the
/// main table, and (ours) a permanent host neighbour `<ip6> -> <pod MAC>`. A dual-stack pod
/// gets both on the one veth.
///
/// A stale host veth of the same name is deleted first. An existing `container_ifname` in
/// the pod is an error ([`NetlinkError::ContainerIfaceExists`]). When any step fails, everything
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
    refuse_existing_container_iface(pod, &spec.container_ifname)?;
    let host_mac = new_mac()?;

    let mut undo = Undo::default();
    let names = (spec.host_veth.as_str(), spec.container_ifname.as_str());
    let result = create_pair(host, pod, names, spec.mtu, host_mac, &mut undo)
        .and_then(|veth| wire_addresses(host, pod, &veth, spec, &mut undo));
    if result.is_err() {
        undo.run(host);
    }
    result
}

/// Creates a pod's veth pair before its addresses are known, so that an ADD can make it while
/// ipamd answers: the pair is the slowest request of a pod's wiring. `None` when a link named
/// `host_veth` exists already: a repeated ADD, whose earlier wiring [`setup_pod`] checks or
/// replaces once the address is known. An existing `container_ifname` is
/// [`NetlinkError::ContainerIfaceExists`]; on any error nothing is left behind.
pub fn create_pod_veth<N: NetlinkOps + ?Sized>(
    host: &N,
    pod: &N,
    host_veth: &str,
    container_ifname: &str,
    mtu: u32,
) -> Result<Option<PodVeth>> {
    create_pod_veth_with_mac(host, pod, (host_veth, container_ifname), mtu, random_mac)
}

fn create_pod_veth_with_mac<N: NetlinkOps + ?Sized>(
    host: &N,
    pod: &N,
    names: (&str, &str),
    mtu: u32,
    new_mac: impl FnOnce() -> Result<[u8; 6]>,
) -> Result<Option<PodVeth>> {
    let (host_veth, ifname) = names;
    validate_veth(host_veth, ifname, mtu)?;
    if host.link_by_name(host_veth)?.is_some() {
        return Ok(None);
    }
    refuse_existing_container_iface(pod, ifname)?;
    let host_mac = new_mac()?;
    let mut undo = Undo::default();
    let created = create_pair(host, pod, names, mtu, host_mac, &mut undo);
    if created.is_err() {
        undo.run(host);
    }
    created.map(Some)
}

/// Wires `spec`'s addresses onto a pair [`create_pod_veth`] made for it, as [`setup_pod`]
/// does. When a step fails, everything is removed, the pair too, and the original error is
/// returned: one that [`NetlinkError::is_not_found`] says is missing means the pair went
/// meanwhile (ipamd deletes a veth that carried no route for some seconds) and
/// [`setup_pod`] may start over.
pub fn wire_pod_veth<N: NetlinkOps + ?Sized>(
    host: &N,
    pod: &N,
    veth: &PodVeth,
    spec: &PodSpec,
) -> Result<PodWiring> {
    validate(spec)?;
    if (
        spec.host_veth.as_str(),
        spec.container_ifname.as_str(),
        spec.mtu,
    ) != (
        veth.host_veth.as_str(),
        veth.container_ifname.as_str(),
        veth.mtu,
    ) {
        return Err(NetlinkError::Invalid {
            what: "pod spec",
            why: format!(
                "{}/{} mtu {} is not the pair made for it ({}/{} mtu {})",
                spec.host_veth,
                spec.container_ifname,
                spec.mtu,
                veth.host_veth,
                veth.container_ifname,
                veth.mtu
            ),
        });
    }
    let mut undo = Undo {
        veth: Some(veth.host_veth.clone()),
        host: Vec::new(),
    };
    let result = wire_addresses(host, pod, veth, spec, &mut undo);
    if result.is_err() {
        undo.run(host);
    }
    result
}

/// Deletes a pair [`create_pod_veth`] made, when the pod gets no address after all; one that
/// is gone already is fine.
pub fn remove_pod_veth<N: NetlinkOps + ?Sized>(host: &N, veth: &PodVeth) -> Result<()> {
    match host.delete_link_by_index(veth.host_index) {
        Err(e) if !e.is_not_found() => {
            Err(e.with_op(format!("delete host veth {}", veth.host_veth)))
        }
        _ => Ok(()),
    }
}

fn refuse_existing_container_iface<N: NetlinkOps + ?Sized>(pod: &N, ifname: &str) -> Result<()> {
    if pod.link_by_name(ifname)?.is_some() {
        return Err(NetlinkError::ContainerIfaceExists {
            name: ifname.to_string(),
        });
    }
    Ok(())
}

/// The names and MTU of a pod's pair.
fn validate_veth(host_veth: &str, ifname: &str, mtu: u32) -> Result<()> {
    validate_ifname("host veth name", host_veth)?;
    validate_ifname("container interface name", ifname)?;
    if !(68..=65535).contains(&mtu) {
        return Err(NetlinkError::Invalid {
            what: "MTU",
            why: format!("{mtu} is outside 68..=65535"),
        });
    }
    Ok(())
}

fn validate(spec: &PodSpec) -> Result<()> {
    validate_veth(&spec.host_veth, &spec.container_ifname, spec.mtu)?;
    if spec.ipv4.is_none() && spec.ipv6.is_none() {
        return Err(NetlinkError::Invalid {
            what: "pod IP",
            why: "neither an IPv4 nor an IPv6 address was given".into(),
        });
    }
    if let Some(ip) = spec.ipv4
        && (ip.is_unspecified() || ip.is_loopback() || ip.is_multicast() || ip.is_broadcast())
    {
        return Err(NetlinkError::Invalid {
            what: "pod IPv4 address",
            why: format!("{ip} cannot be a pod address"),
        });
    }
    if let Some(ip) = spec.ipv6
        && (ip.is_unspecified()
            || ip.is_loopback()
            || ip.is_multicast()
            || ip.is_unicast_link_local())
    {
        // A link-local address would also clash with the gateway's fe80::/64.
        return Err(NetlinkError::Invalid {
            what: "pod IPv6 address",
            why: format!("{ip} cannot be a pod address"),
        });
    }
    if let Some(ip) = spec.egress_ipv4 {
        let why = if spec.ipv4.is_some() {
            Some("a pod with an IPv4 address of its own takes no egress address".to_string())
        } else if !ip.is_link_local() {
            Some(format!("{ip} is not a node-local (169.254.0.0/16) address"))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(NetlinkError::Invalid {
                what: "IPv4 egress address",
                why,
            });
        }
    }
    if spec.ipv6.is_some() && spec.mtu < 1280 {
        return Err(NetlinkError::Invalid {
            what: "MTU",
            why: format!("{} is below IPv6's minimum of 1280", spec.mtu),
        });
    }
    if spec.route_table == 0 {
        // The kernel would pick an arbitrary empty table for a rule with table 0.
        return Err(NetlinkError::Invalid {
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
        return Err(NetlinkError::Invalid {
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

/// A host object created by ADD, to remove if a later step fails.
enum Created {
    Route(Route),
    Route6(Route6),
    Rule(Rule),
    Rule6(Rule6),
}

impl From<Route> for Created {
    fn from(route: Route) -> Self {
        Created::Route(route)
    }
}

impl From<Route6> for Created {
    fn from(route: Route6) -> Self {
        Created::Route6(route)
    }
}

impl From<Rule> for Created {
    fn from(rule: Rule) -> Self {
        Created::Rule(rule)
    }
}

impl From<Rule6> for Created {
    fn from(rule: Rule6) -> Self {
        Created::Rule6(rule)
    }
}

/// What has been created so far, to remove on failure.
#[derive(Default)]
struct Undo {
    veth: Option<String>,
    /// Host routes and rules, in the order they were created.
    host: Vec<Created>,
}

impl Undo {
    /// Best effort, newest first: the caller returns the original error, not one from
    /// cleaning up.
    fn run<N: NetlinkOps + ?Sized>(self, host: &N) {
        for created in self.host.iter().rev() {
            let _ = match created {
                Created::Route(route) => host.delete_route(route),
                Created::Route6(route) => host.delete_route(route),
                Created::Rule(rule) => host.delete_rule(rule),
                Created::Rule6(rule) => host.delete_rule(rule),
            };
        }
        // The pod end, and with it the pod's addresses, routes and neighbours, goes with the
        // pair; so do the veths' IPv6 settings.
        if let Some(veth) = &self.veth {
            let _ = host.delete_link_by_name(veth);
        }
    }
}

/// A pod's veth pair, made before its addresses are wired: [`create_pod_veth`] makes one while
/// the plugin waits for ipamd's answer, [`wire_pod_veth`] wires the addresses onto it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodVeth {
    /// The host end's name.
    pub host_veth: String,
    /// Its index in the host namespace.
    pub host_index: u32,
    /// Its MAC (chosen by us: the pod's neighbour entry for its gateway names it).
    pub host_mac: [u8; 6],
    /// The pod end's name (`CNI_IFNAME`).
    pub container_ifname: String,
    /// Its index in the pod namespace.
    pub container_index: u32,
    /// Its MAC (chosen by the kernel).
    pub container_mac: [u8; 6],
    /// The MTU of both ends.
    pub mtu: u32,
}

/// Creates the pair from the pod side, the host end placed straight into the host namespace,
/// and records it in `undo` (deleting the host end takes the pod end with it).
fn create_pair<N: NetlinkOps + ?Sized>(
    host: &N,
    pod: &N,
    names: (&str, &str),
    mtu: u32,
    host_mac: [u8; 6],
    undo: &mut Undo,
) -> Result<PodVeth> {
    let (host_veth, ifname) = names;
    pod.create_veth(&VethSpec {
        name: ifname.to_string(),
        peer_name: host_veth.to_string(),
        peer_mac: Some(host_mac),
        peer_netns_fd: Some(host.netns_fd().as_raw_fd()),
        mtu,
        up: true,
    })?;
    undo.veth = Some(host_veth.to_string());

    let host_link = require_link(host, host_veth, "host veth")?;
    let cont_link = require_link(pod, ifname, "pod interface")?;
    let container_mac = cont_link.mac.ok_or_else(|| NetlinkError::Decode {
        op: format!("get link {ifname}"),
        reason: "the new pod interface has no MAC address".into(),
    })?;
    Ok(PodVeth {
        host_veth: host_veth.to_string(),
        host_index: host_link.index,
        host_mac,
        container_ifname: ifname.to_string(),
        container_index: cont_link.index,
        container_mac,
        mtu,
    })
}

/// The addresses, routes, rules and neighbours of `spec` on a pair made for it.
fn wire_addresses<N: NetlinkOps + ?Sized>(
    host: &N,
    pod: &N,
    veth: &PodVeth,
    spec: &PodSpec,
    undo: &mut Undo,
) -> Result<PodWiring> {
    if let Some(ip) = spec.ipv4 {
        let table = Some(spec.route_table);
        wire_family::<N, Ipv4Network>(host, pod, veth, ip, POD_GATEWAY, table, undo)?;
    }
    if let Some(ip) = spec.egress_ipv4 {
        wire_family::<N, Ipv4Network>(host, pod, veth, ip, POD_GATEWAY, None, undo)?;
    }
    if let Some(ip) = spec.ipv6 {
        enable_ipv6(host, pod, veth)?;
        let table = Some(RT_TABLE_MAIN);
        wire_family::<N, Ipv6Network>(host, pod, veth, ip, POD_GATEWAY6, table, undo)?;
        // The host veth's link-local address is tentative (DAD) for a second or more after the
        // veth comes up, and until then the host cannot solicit the pod's address: the first
        // packets to a new pod would be dropped. A permanent entry needs no solicitation, like
        // the pod's own entry for fe80::1; it goes with the veth.
        host.replace_neighbour(veth.host_index, ip, veth.container_mac)
            .map_err(|e| {
                e.with_op(format!(
                    "add permanent neighbour {ip} lladdr {} dev {}",
                    crate::names::format_mac(&veth.container_mac),
                    veth.host_veth
                ))
            })?;
    }

    Ok(PodWiring {
        host_mac: veth.host_mac,
        container_mac: veth.container_mac,
        host_ifindex: veth.host_index,
        container_ifindex: veth.container_index,
    })
}

/// The Go CNI's IPv6 settings: runtimes may start pods with IPv6 disabled, and a router
/// advertisement on the host veth must not give the node a default route through a pod. A
/// kernel without IPv6 has no such files; the address step then says what is wrong.
fn enable_ipv6<N: NetlinkOps + ?Sized>(host: &N, pod: &N, veth: &PodVeth) -> Result<()> {
    let settings = [
        (host, veth.host_veth.as_str(), "accept_ra", "0", ""),
        (
            pod,
            veth.container_ifname.as_str(),
            "disable_ipv6",
            "0",
            " in pod",
        ),
        (pod, "lo", "disable_ipv6", "0", " in pod"),
    ];
    for (nl, ifname, setting, value, side) in settings {
        match nl.set_ipv6_conf(ifname, setting, value) {
            Err(e) if !e.is_not_found() => {
                return Err(e.with_op(format!(
                    "set net.ipv6.conf.{ifname}.{setting}={value}{side}"
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

/// One family's host route and rules and the pod's address, gateway route, default route and
/// gateway neighbour. `route_table` is the table of the address's ENI; `None` for an egress
/// address, which gets no rules.
fn wire_family<N, F>(
    host: &N,
    pod: &N,
    veth: &PodVeth,
    ip: F::Addr,
    gateway: F::Addr,
    route_table: Option<u32>,
    undo: &mut Undo,
) -> Result<()>
where
    N: NetlinkOps + ?Sized,
    F: IpFamily,
    Created: From<RouteOf<F>> + From<RuleOf<F>>,
{
    let (host_veth, ifname) = (&veth.host_veth, &veth.container_ifname);
    let ip_host = F::host(ip);
    let scope = link_scope_text::<F>();

    let host_route = RouteOf::link_scope(ip_host, veth.host_index, RT_TABLE_MAIN);
    host.replace_route(&host_route)
        .map_err(|e| e.with_op(format!("replace route {ip_host} dev {host_veth}{scope}")))?;
    undo.host.push(host_route.into());

    if let Some(table) = route_table {
        add_host_rule(
            host,
            RuleOf::to_dst(PRIO_TO_POD, ip_host, RT_TABLE_MAIN),
            undo,
        )?;
        if table != RT_TABLE_MAIN {
            add_host_rule(host, RuleOf::from_src(PRIO_FROM_POD, ip_host, table), undo)?;
        }
    }

    let idx = veth.container_index;
    pod.add_address(idx, ip_host)
        .map_err(|e| e.with_op(format!("add address {ip_host} dev {ifname} in pod")))?;
    let gw_host = F::host(gateway);
    pod.replace_route(&RouteOf::link_scope(gw_host, idx, RT_TABLE_MAIN))
        .map_err(|e| {
            e.with_op(format!(
                "replace route {gw_host} dev {ifname}{scope} in pod"
            ))
        })?;
    pod.add_route(&RouteOf::<F>::default_via(gateway, idx, RT_TABLE_MAIN))
        .map_err(|e| {
            e.with_op(format!(
                "add route default via {gateway} dev {ifname} in pod"
            ))
        })?;
    pod.replace_neighbour(idx, gateway, veth.host_mac)
        .map_err(|e| {
            e.with_op(format!(
                "add permanent neighbour {gateway} lladdr {} dev {ifname} in pod",
                crate::names::format_mac(&veth.host_mac)
            ))
        })?;
    Ok(())
}

/// Looks up a link just created and makes sure it is up.
fn require_link<N: NetlinkOps + ?Sized>(nl: &N, name: &str, what: &str) -> Result<Link> {
    let link = nl.link_by_name(name)?.ok_or_else(|| NetlinkError::Kernel {
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

fn add_host_rule<N, F>(host: &N, rule: RuleOf<F>, undo: &mut Undo) -> Result<()>
where
    N: NetlinkOps + ?Sized,
    F: IpFamily,
    Created: From<RuleOf<F>>,
{
    match host.add_rule(&rule) {
        Ok(()) => {
            undo.host.push(rule.into());
            Ok(())
        }
        // Left by an earlier pod with this address or a retried ADD: it is the rule we want.
        Err(e) if e.is_exists() => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod tests6;
