//! CHECK: compare a pod's wiring with what [`crate::setup_pod`] builds.

use std::fmt;
use std::net::Ipv4Addr;

use crate::error::Error;
use crate::messages::RT_TABLE_MAIN;
use crate::messages::link::Link;
use crate::messages::route::{Route, Scope};
use crate::messages::table_name;
use crate::names::format_mac;
use crate::netlink_ops::NetlinkOps;
use crate::pod::{POD_GATEWAY, PRIO_FROM_POD, PRIO_TO_POD, host_prefix};
use crate::teardown::is_pod_rule;

/// What a correctly wired pod looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedPod {
    /// Interface name inside the pod.
    pub container_ifname: String,
    /// Host veth name.
    pub host_veth: String,
    /// The pod's address.
    pub ip: Ipv4Addr,
    /// ENI route table (254 = main, no prio-1536 rule).
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
    Netlink(#[from] Error),
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
    if let Some(cont) = &cont {
        check_pod_side(pod, expected, cont, veth.as_ref(), &mut problems)?;
    }
    check_host_side(host, expected, veth.as_ref(), &mut problems)?;
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

fn check_pod_side<N: NetlinkOps + ?Sized>(
    pod: &N,
    expected: &ExpectedPod,
    cont: &Link,
    veth: Option<&Link>,
    problems: &mut Vec<String>,
) -> Result<(), Error> {
    let ifname = &expected.container_ifname;
    let ip32 = host_prefix(expected.ip);

    let addresses: Vec<_> = pod
        .addresses()?
        .into_iter()
        .filter(|a| a.index == cont.index)
        .collect();
    if !addresses.iter().any(|a| a.network == ip32) {
        problems.push(format!("pod address {ip32} on {ifname} missing"));
    }
    for extra in addresses.iter().filter(|a| a.network != ip32) {
        problems.push(format!(
            "pod address {} on {ifname} unexpected",
            extra.network
        ));
    }

    let routes = pod.routes(RT_TABLE_MAIN)?;
    let gw32 = host_prefix(POD_GATEWAY);
    let gw_route = Route::link_scope(gw32, cont.index, RT_TABLE_MAIN);
    if !routes.contains(&gw_route) {
        problems.push(format!(
            "pod route {POD_GATEWAY} dev {ifname} scope link missing"
        ));
    }
    let default = routes
        .iter()
        .any(|r| r.is_default() && r.gateway == Some(POD_GATEWAY) && r.oif == Some(cont.index));
    if !default {
        problems.push(format!(
            "pod route default via {POD_GATEWAY} dev {ifname} missing"
        ));
    }

    let neighbour = pod
        .neighbours()?
        .into_iter()
        .find(|n| n.index == cont.index && n.ip == POD_GATEWAY);
    match neighbour {
        None => problems.push(format!("pod neighbour {POD_GATEWAY} dev {ifname} missing")),
        Some(n) => {
            if !n.permanent {
                problems.push(format!(
                    "pod neighbour {POD_GATEWAY} dev {ifname} is not permanent"
                ));
            }
            if let Some(v) = veth
                && n.mac != v.mac
            {
                problems.push(format!(
                    "pod neighbour {POD_GATEWAY} has lladdr {}, but host veth {} has MAC {}",
                    mac_text(n.mac),
                    expected.host_veth,
                    mac_text(v.mac)
                ));
            }
        }
    }
    Ok(())
}

fn check_host_side<N: NetlinkOps + ?Sized>(
    host: &N,
    expected: &ExpectedPod,
    veth: Option<&Link>,
    problems: &mut Vec<String>,
) -> Result<(), Error> {
    let ip = expected.ip;
    let ip32 = host_prefix(ip);
    let host_veth = &expected.host_veth;

    let host_routes: Vec<_> = host
        .routes(RT_TABLE_MAIN)?
        .into_iter()
        .filter(|r| r.dst == ip32)
        .collect();
    let via_veth = veth.is_some_and(|v| {
        host_routes
            .iter()
            .any(|r| r.oif == Some(v.index) && r.gateway.is_none() && r.scope == Scope::Link)
    });
    if !via_veth {
        problems.push(format!(
            "host route {ip32} dev {host_veth} scope link missing"
        ));
    }

    let rules: Vec<_> = host
        .rules()?
        .into_iter()
        .filter(|r| is_pod_rule(r, ip))
        .collect();
    if !rules.iter().any(|r| r.priority == PRIO_TO_POD) {
        problems.push(format!(
            "host rule to {ip} lookup main prio {PRIO_TO_POD} missing"
        ));
    }
    let from_pod = rules.iter().filter(|r| r.priority == PRIO_FROM_POD);
    let wanted = expected.route_table;
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
