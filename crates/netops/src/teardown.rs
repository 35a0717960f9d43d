//! Undoing a pod's wiring: host rules, route and veth; the pod's interface.

use std::net::Ipv4Addr;
use std::path::Path;

use crate::error::{Error, Result};
use crate::messages::RT_TABLE_MAIN;
use crate::messages::route::Route;
use crate::messages::rule::Rule;
use crate::netlink_ops::NetlinkOps;
use crate::pod::{PRIO_FROM_POD, PRIO_TO_POD, host_prefix};
use crate::socket::Netlink;

/// What [`teardown_host`] actually removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TeardownReport {
    /// The rules deleted (prio 512 `to <ip>` and every prio 1536 `from <ip>`).
    pub rules_removed: Vec<Rule>,
    /// The host route `<ip>/32` was deleted.
    pub route_removed: bool,
    /// The host veth was deleted.
    pub veth_removed: bool,
}

impl TeardownReport {
    /// True when anything at all was removed.
    pub fn removed_anything(&self) -> bool {
        !self.rules_removed.is_empty() || self.route_removed || self.veth_removed
    }
}

/// True for the host rules a pod with address `ip` owns: `to <ip>/32 lookup main` prio 512
/// and `from <ip>/32 lookup <any table>` prio 1536 (older versions could leave several).
pub fn is_pod_rule(rule: &Rule, ip: Ipv4Addr) -> bool {
    let ip32 = Some(host_prefix(ip));
    let plain = rule.lookup && !rule.invert && rule.fwmark.is_none() && rule.iif.is_none();
    let to_pod = rule.priority == PRIO_TO_POD
        && rule.dst == ip32
        && rule.src.is_none()
        && rule.table == RT_TABLE_MAIN;
    let from_pod = rule.priority == PRIO_FROM_POD && rule.src == ip32 && rule.dst.is_none();
    plain && (to_pod || from_pod)
}

/// True when `ip` is routed on the host to a link other than `host_veth`: another pod holds
/// the address now, so rules for `ip` are not ours to delete. A late DEL that knows the address
/// only from its `prevResult` must check this first: the address may have been released,
/// cooled down and handed to a new pod since. The kernel drops a route with its link, so an
/// existing `<ip>/32` route always leads to a live link.
pub fn routed_elsewhere<N: NetlinkOps + ?Sized>(
    host: &N,
    ip: Ipv4Addr,
    host_veth: Option<&str>,
) -> Result<bool> {
    let dst = host_prefix(ip);
    let Some(route) = host
        .routes(RT_TABLE_MAIN)?
        .into_iter()
        .find(|r| r.dst == dst)
    else {
        return Ok(false);
    };
    let ours = match host_veth {
        Some(name) => host.link_by_name(name)?.map(|l| l.index),
        None => None,
    };
    Ok(ours.is_none() || route.oif != ours)
}

/// Removes the host side of a pod with address `ip`: its rules, its `<ip>/32` route in main
/// and, when named, present and carrying that route, its host veth (which takes the pod end
/// with it). A veth of that name without the route is a newer sandbox's and is left alone.
///
/// Anything already gone counts as success, so calling it twice is fine; the report says
/// what this call removed. When `host_veth` is given only a route through that veth is
/// deleted (a route to the same address through another link belongs to someone else);
/// without it, any `<ip>/32` route in main is deleted, as the Go CNI does.
pub fn teardown_host<N: NetlinkOps + ?Sized>(
    host: &N,
    ip: Ipv4Addr,
    host_veth: Option<&str>,
) -> Result<TeardownReport> {
    let mut report = TeardownReport::default();
    for rule in host.rules()?.into_iter().filter(|r| is_pod_rule(r, ip)) {
        match host.delete_rule(&rule) {
            Ok(()) => report.rules_removed.push(rule),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }

    let veth = match host_veth {
        Some(name) => host
            .link_by_name(name)?
            .filter(|l| l.kind.as_deref() == Some("veth")),
        None => None,
    };
    let ip32 = host_prefix(ip);
    let route = match (host_veth, &veth) {
        // The veth is gone and took its routes with it.
        (Some(_), None) => None,
        (Some(name), Some(link)) => Some((
            Route::link_scope(ip32, link.index, RT_TABLE_MAIN),
            format!("delete route {ip32} dev {name}"),
        )),
        (None, _) => Some((
            Route {
                oif: None,
                ..Route::link_scope(ip32, 0, RT_TABLE_MAIN)
            },
            format!("delete route {ip32}"),
        )),
    };
    if let Some((route, op)) = route {
        match host.delete_route(&route) {
            Ok(()) => report.route_removed = true,
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.with_op(op)),
        }
    }

    // The veth's name depends on the pod only, so a newer sandbox of the same pod has the same
    // name: the link is this attachment's only if it carried this address.
    if let (Some(name), Some(link), true) = (host_veth, veth, report.route_removed) {
        match host.delete_link_by_index(link.index) {
            Ok(()) => report.veth_removed = true,
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.with_op(format!("delete host veth {name}"))),
        }
    }
    Ok(report)
}

/// Deletes the interface `ifname` inside the namespace at `netns`.
///
/// Ok(false) when there was nothing to delete: the namespace path is missing or no longer a
/// namespace, or the interface does not exist.
pub fn teardown_container(netns: &Path, ifname: &str) -> Result<bool> {
    let pod = match Netlink::in_netns(netns) {
        Ok(pod) => pod,
        Err(Error::NetnsNotFound { .. } | Error::NotANetns { .. }) => return Ok(false),
        Err(e) => return Err(e),
    };
    match pod.delete_link_by_name(ifname) {
        Ok(()) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e.with_op(format!("delete {ifname} in {}", netns.display()))),
    }
}

#[cfg(test)]
mod tests;
