//! CHECK: compare a pod's wiring with what [`crate::setup_pod`] builds.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::{Ipv4Network, Ipv6Network};

use crate::error::NetlinkError;
use crate::messages::RT_TABLE_MAIN;
use crate::messages::family::IpFamily;
use crate::messages::link::Link;
use crate::messages::route::RouteOf;
use crate::messages::table_name;
use crate::names::format_mac;
use crate::netlink_ops::NetlinkOps;
use crate::pod::{POD_GATEWAY, POD_GATEWAY6, PRIO_FROM_POD, PRIO_TO_POD, link_scope_text};
use crate::teardown::is_pod_rule;
// The tests' `super::*`, written for IPv4.
#[cfg(test)]
use crate::{messages::route::Route, pod::host_prefix};

/// What a correctly wired pod looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedPod {
    /// Interface name inside the pod.
    pub container_ifname: String,
    /// Host veth name.
    pub host_veth: String,
    /// The pod's IPv4 address, if it has one.
    pub ipv4: Option<Ipv4Addr>,
    /// The pod's IPv6 address, if it has one (always routed in main).
    pub ipv6: Option<Ipv6Addr>,
    /// The IPv6 pod's IPv4 egress address, if it has one (no host rules).
    pub egress_ipv4: Option<Ipv4Addr>,
    /// ENI route table of the IPv4 address (254 = main, no prio-1536 rule).
    pub route_table: u32,
    /// The pod interface's MAC, when known (e.g. from the previous result).
    pub container_mac: Option<[u8; 6]>,
    /// The host veth's MAC, when known.
    pub host_mac: Option<[u8; 6]>,
}

/// Every way the pod differs from what was expected, in human words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckMismatch {
    /// One entry per difference, e.g. `pod route default via 169.254.1.1 dev eth0 missing`.
    pub problems: Vec<String>,
}

impl fmt::Display for CheckMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pod network is not as set up: {}",
            self.problems.join("; ")
        )
    }
}

impl std::error::Error for CheckMismatch {}

/// Why [`check_pod`] failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// Reading the current state failed.
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    /// The state differs from the expectation.
    #[error(transparent)]
    Mismatch(#[from] CheckMismatch),
}

/// Compares the pod's interface, address, routes and gateway neighbour, and the host's veth,
/// route and rules, with `expected`. The error lists every difference found.
pub fn check_pod<N: NetlinkOps + ?Sized>(
    host: &N,
    pod: &N,
    expected: &ExpectedPod,
) -> Result<(), CheckError> {
    let mut problems = Vec::new();
    let cont = pod.link_by_name(&expected.container_ifname)?;
    let veth = host.link_by_name(&expected.host_veth)?;
    check_links(expected, cont.as_ref(), veth.as_ref(), &mut problems);
    let families = Families {
        expected,
        cont: cont.as_ref(),
        veth: veth.as_ref(),
    };
    if let Some(ip) = expected.ipv4 {
        families.check::<N, Ipv4Network>(
            host,
            pod,
            ip,
            POD_GATEWAY,
            Some(expected.route_table),
            &mut problems,
        )?;
    }
    if let Some(ip) = expected.egress_ipv4 {
        families.check::<N, Ipv4Network>(host, pod, ip, POD_GATEWAY, None, &mut problems)?;
    }
    if let Some(ip) = expected.ipv6 {
        families.check::<N, Ipv6Network>(
            host,
            pod,
            ip,
            POD_GATEWAY6,
            Some(RT_TABLE_MAIN),
            &mut problems,
        )?;
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CheckMismatch { problems }.into())
    }
}

fn check_links(
    expected: &ExpectedPod,
    cont: Option<&Link>,
    veth: Option<&Link>,
    problems: &mut Vec<String>,
) {
    let ifname = &expected.container_ifname;
    let host_veth = &expected.host_veth;
    match cont {
        None => problems.push(format!("pod interface {ifname} missing")),
        Some(c) => {
            if !c.up {
                problems.push(format!("pod interface {ifname} is down"));
            }
            if let Some(want) = expected.container_mac
                && c.mac != Some(want)
            {
                problems.push(format!(
                    "pod interface {ifname} has MAC {}, expected {}",
                    mac_text(c.mac),
                    format_mac(&want)
                ));
            }
        }
    }
    match veth {
        None => problems.push(format!("host veth {host_veth} missing")),
        Some(v) => {
            if v.kind.as_deref() != Some("veth") {
                problems.push(format!("host link {host_veth} is not a veth"));
            }
            if !v.up {
                problems.push(format!("host veth {host_veth} is down"));
            }
            if let Some(want) = expected.host_mac
                && v.mac != Some(want)
            {
                problems.push(format!(
                    "host veth {host_veth} has MAC {}, expected {}",
                    mac_text(v.mac),
                    format_mac(&want)
                ));
            }
        }
    }
    if let (Some(c), Some(v)) = (cont, veth)
        && c.peer_index != Some(v.index)
    {
        problems.push(format!(
            "pod interface {ifname} is not the peer of host veth {host_veth}"
        ));
    }
}

/// What every family's checks share: the expectation and the links found.
struct Families<'a> {
    expected: &'a ExpectedPod,
    cont: Option<&'a Link>,
    veth: Option<&'a Link>,
}

impl Families<'_> {
    /// The pod side (when its interface exists) and the host side of one family's address.
    fn check<N: NetlinkOps + ?Sized, F: IpFamily>(
        &self,
        host: &N,
        pod: &N,
        ip: F::Addr,
        gateway: F::Addr,
        route_table: Option<u32>,
        problems: &mut Vec<String>,
    ) -> Result<(), NetlinkError> {
        if let Some(cont) = self.cont {
            check_pod_side::<N, F>(pod, self.expected, cont, self.veth, ip, gateway, problems)?;
        }
        check_host_side::<N, F>(host, self.expected, self.veth, ip, route_table, problems)
    }
}

/// The kernel's own link-local IPv6 address of an interface: present on every IPv6 link,
/// never one of ours.
fn is_link_local<A: Into<IpAddr>>(ip: A) -> bool {
    matches!(ip.into(), IpAddr::V6(v6) if v6.is_unicast_link_local())
}

fn check_pod_side<N: NetlinkOps + ?Sized, F: IpFamily>(
    pod: &N,
    expected: &ExpectedPod,
    cont: &Link,
    veth: Option<&Link>,
    ip: F::Addr,
    gateway: F::Addr,
    problems: &mut Vec<String>,
) -> Result<(), NetlinkError> {
    let ifname = &expected.container_ifname;
    let ip_host = F::host(ip);
    let scope = link_scope_text::<F>();

    let addresses: Vec<_> = pod
        .addresses_of::<F>()?
        .into_iter()
        .filter(|a| a.index == cont.index && !is_link_local(a.network.ip()))
        .collect();
    if !addresses.iter().any(|a| a.network == ip_host) {
        problems.push(format!("pod address {ip_host} on {ifname} missing"));
    }
    for extra in addresses.iter().filter(|a| a.network != ip_host) {
        problems.push(format!(
            "pod address {} on {ifname} unexpected",
            extra.network
        ));
    }

    let routes = pod.routes_of::<F>(RT_TABLE_MAIN)?;
    let gw_route = RouteOf::link_scope(F::host(gateway), cont.index, RT_TABLE_MAIN);
    if !routes.contains(&gw_route) {
        problems.push(format!("pod route {gateway} dev {ifname}{scope} missing"));
    }
    let default = routes
        .iter()
        .any(|r| r.is_default() && r.gateway == Some(gateway) && r.oif == Some(cont.index));
    if !default {
        problems.push(format!(
            "pod route default via {gateway} dev {ifname} missing"
        ));
    }

    let neighbour = pod
        .neighbours_of::<F::Addr>()?
        .into_iter()
        .find(|n| n.index == cont.index && n.ip == gateway);
    match neighbour {
        None => problems.push(format!("pod neighbour {gateway} dev {ifname} missing")),
        Some(n) => {
            if !n.permanent {
                problems.push(format!(
                    "pod neighbour {gateway} dev {ifname} is not permanent"
                ));
            }
            if let Some(v) = veth
                && n.mac != v.mac
            {
                problems.push(format!(
                    "pod neighbour {gateway} has lladdr {}, but host veth {} has MAC {}",
                    mac_text(n.mac),
                    expected.host_veth,
                    mac_text(v.mac)
                ));
            }
        }
    }
    Ok(())
}

fn check_host_side<N: NetlinkOps + ?Sized, F: IpFamily>(
    host: &N,
    expected: &ExpectedPod,
    veth: Option<&Link>,
    ip: F::Addr,
    wanted: Option<u32>,
    problems: &mut Vec<String>,
) -> Result<(), NetlinkError> {
    let ip_host = F::host(ip);
    let host_veth = &expected.host_veth;
    let scope = link_scope_text::<F>();

    let host_routes: Vec<_> = host
        .routes_of::<F>(RT_TABLE_MAIN)?
        .into_iter()
        .filter(|r| r.dst == ip_host)
        .collect();
    let via_veth = veth.is_some_and(|v| {
        let want = RouteOf::link_scope(ip_host, v.index, RT_TABLE_MAIN);
        host_routes
            .iter()
            .any(|r| r.oif == want.oif && r.gateway.is_none() && r.scope == want.scope)
    });
    if !via_veth {
        problems.push(format!(
            "host route {ip_host} dev {host_veth}{scope} missing"
        ));
    }

    let rules: Vec<_> = host
        .rules_of::<F>()?
        .into_iter()
        .filter(|r| is_pod_rule(r, ip))
        .collect();
    let Some(wanted) = wanted else {
        // An egress address: its packets are routed by main and SNATed, so no rule.
        for rule in &rules {
            problems.push(format!(
                "host rule to/from {ip} lookup {} prio {} unexpected for an egress address",
                table_name(rule.table),
                rule.priority
            ));
        }
        return Ok(());
    };
    if !rules.iter().any(|r| r.priority == PRIO_TO_POD) {
        problems.push(format!(
            "host rule to {ip} lookup main prio {PRIO_TO_POD} missing"
        ));
    }
    let from_pod = rules.iter().filter(|r| r.priority == PRIO_FROM_POD);
    if wanted != RT_TABLE_MAIN
        && !rules
            .iter()
            .any(|r| r.priority == PRIO_FROM_POD && r.table == wanted)
    {
        problems.push(format!(
            "host rule from {ip} lookup {} prio {PRIO_FROM_POD} missing",
            table_name(wanted)
        ));
    }
    for rule in from_pod.filter(|r| wanted == RT_TABLE_MAIN || r.table != wanted) {
        problems.push(format!(
            "host rule from {ip} lookup {} prio {PRIO_FROM_POD} unexpected",
            table_name(rule.table)
        ));
    }
    Ok(())
}

fn mac_text(mac: Option<[u8; 6]>) -> String {
    mac.map(|m| format_mac(&m)).unwrap_or_else(|| "none".into())
}

#[cfg(test)]
mod tests;
