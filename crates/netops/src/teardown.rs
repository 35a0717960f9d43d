//! Undoing a pod's wiring: host rules, routes and veth.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnetwork::{Ipv4Network, Ipv6Network};

use crate::error::Result;
use crate::messages::RT_TABLE_MAIN;
use crate::messages::family::{FamilyAddr, IpFamily};
use crate::messages::link::Link;
use crate::messages::route::RouteOf;
use crate::messages::rule::RuleOf;
use crate::netlink_ops::NetlinkOps;
use crate::pod::{PRIO_FROM_POD, PRIO_TO_POD};
// The tests' `super::*`, written for IPv4.
#[cfg(test)]
use crate::{messages::rule::Rule, pod::host_prefix};

/// What [`teardown_host`] actually removed for an address of family `F`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeardownReport<F: IpFamily = Ipv4Network> {
    /// The rules deleted (prio 512 `to <ip>` and every prio 1536 `from <ip>`).
    pub rules_removed: Vec<RuleOf<F>>,
    /// The host route `<ip>/32` (`/128`) was deleted.
    pub route_removed: bool,
    /// The host veth was deleted.
    pub veth_removed: bool,
}

impl<F: IpFamily> Default for TeardownReport<F> {
    fn default() -> Self {
        Self {
            rules_removed: Vec::new(),
            route_removed: false,
            veth_removed: false,
        }
    }
}

impl<F: IpFamily> TeardownReport<F> {
    /// True when anything at all was removed.
    pub fn removed_anything(&self) -> bool {
        !self.rules_removed.is_empty() || self.route_removed || self.veth_removed
    }
}

/// What [`teardown_pod_host`] removed, per family of the pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodTeardown {
    /// The IPv4 address's rules and route (`veth_removed` is never set here).
    pub ipv4: Option<TeardownReport<Ipv4Network>>,
    /// The IPv6 address's rule and route (`veth_removed` is never set here).
    pub ipv6: Option<TeardownReport<Ipv6Network>>,
    /// The host veth was deleted.
    pub veth_removed: bool,
}

impl PodTeardown {
    /// Rules removed, both families.
    pub fn rules_removed(&self) -> usize {
        self.ipv4.as_ref().map_or(0, |r| r.rules_removed.len())
            + self.ipv6.as_ref().map_or(0, |r| r.rules_removed.len())
    }

    /// Host routes removed, both families.
    pub fn routes_removed(&self) -> usize {
        usize::from(self.ipv4.as_ref().is_some_and(|r| r.route_removed))
            + usize::from(self.ipv6.as_ref().is_some_and(|r| r.route_removed))
    }
}

/// True for the host rules a pod with address `ip` owns: `to <ip>/32 lookup main` prio 512
/// and `from <ip>/32 lookup <any table>` prio 1536 (older versions could leave several); the
/// same with `/128` for an IPv6 address.
pub fn is_pod_rule<F: IpFamily>(rule: &RuleOf<F>, ip: F::Addr) -> bool {
    let ip_host = Some(F::host(ip));
    let plain = rule.lookup && !rule.invert && rule.fwmark.is_none() && rule.iif.is_none();
    let to_pod = rule.priority == PRIO_TO_POD
        && rule.dst == ip_host
        && rule.src.is_none()
        && rule.table == RT_TABLE_MAIN;
    let from_pod = rule.priority == PRIO_FROM_POD && rule.src == ip_host && rule.dst.is_none();
    plain && (to_pod || from_pod)
}

/// True when `ip` is routed on the host to a link other than `host_veth`: another pod holds
/// the address now, so rules for `ip` are not ours to delete. A late DEL that knows the address
/// only from its `prevResult` must check this first: the address may have been released,
/// cooled down and handed to a new pod since. The kernel drops a route with its link, so an
/// existing `<ip>/32` (`/128`) route always leads to a live link.
pub fn routed_elsewhere<N: NetlinkOps + ?Sized, A: FamilyAddr>(
    host: &N,
    ip: A,
    host_veth: Option<&str>,
) -> Result<bool> {
    let dst = A::Net::host(ip);
    let Some(route) = host
        .routes_of::<A::Net>(RT_TABLE_MAIN)?
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

/// Removes the host side of a pod with address `ip` (IPv4 or IPv6): its rules, its
/// `<ip>/32` (`/128`) route in main and, when named, present and carrying that route, its host
/// veth (which takes the pod end with it). A veth of that name without the route is a newer
/// sandbox's and is left alone.
///
/// Anything already gone counts as success, so calling it twice is fine; the report says
/// what this call removed. When `host_veth` is given only a route through that veth is
/// deleted (a route to the same address through another link belongs to someone else);
/// without it, any `<ip>/32` route in main is deleted, as the Go CNI does. For a dual-stack
/// pod use [`teardown_pod_host`], which removes both families before the veth.
pub fn teardown_host<N: NetlinkOps + ?Sized, A: FamilyAddr>(
    host: &N,
    ip: A,
    host_veth: Option<&str>,
) -> Result<TeardownReport<A::Net>> {
    let rules_removed = remove_rules::<N, A::Net>(host, ip)?;
    let veth = find_veth(host, host_veth)?;
    let route_removed = remove_route::<N, A::Net>(host, ip, host_veth, veth.as_ref())?;
    let veth_removed = remove_veth(host, host_veth, veth, route_removed)?;
    Ok(TeardownReport {
        rules_removed,
        route_removed,
        veth_removed,
    })
}

/// [`teardown_host`] for a pod's addresses of both families on one veth: the rules and route
/// of each, IPv4 first, then the veth if it carried either route.
pub fn teardown_pod_host<N: NetlinkOps + ?Sized>(
    host: &N,
    ipv4: Option<Ipv4Addr>,
    ipv6: Option<Ipv6Addr>,
    host_veth: Option<&str>,
) -> Result<PodTeardown> {
    let veth = find_veth(host, host_veth)?;
    let mut report = unroute(host, ipv4, ipv6, host_veth, veth.as_ref())?;
    report.veth_removed = remove_veth(host, host_veth, veth, report.routes_removed() > 0)?;
    Ok(report)
}

/// [`teardown_pod_host`] without deleting the veth: the pod is unreachable once its rules and
/// routes are gone, and the kernel deletes a veth with the pod's namespace, which a runtime
/// removes right after DEL. Deleting it here would cost the DEL most of its time (the kernel
/// waits for RCU grace periods); ipamd deletes the veths whose namespace stays.
pub fn unroute_pod<N: NetlinkOps + ?Sized>(
    host: &N,
    ipv4: Option<Ipv4Addr>,
    ipv6: Option<Ipv6Addr>,
    host_veth: Option<&str>,
) -> Result<PodTeardown> {
    let veth = find_veth(host, host_veth)?;
    unroute(host, ipv4, ipv6, host_veth, veth.as_ref())
}

fn unroute<N: NetlinkOps + ?Sized>(
    host: &N,
    ipv4: Option<Ipv4Addr>,
    ipv6: Option<Ipv6Addr>,
    host_veth: Option<&str>,
    veth: Option<&Link>,
) -> Result<PodTeardown> {
    let mut report = PodTeardown::default();
    if let Some(ip) = ipv4 {
        let rules_removed = remove_rules::<N, Ipv4Network>(host, ip)?;
        let route_removed = remove_route::<N, Ipv4Network>(host, ip, host_veth, veth)?;
        report.ipv4 = Some(TeardownReport {
            rules_removed,
            route_removed,
            veth_removed: false,
        });
    }
    if let Some(ip) = ipv6 {
        let rules_removed = remove_rules::<N, Ipv6Network>(host, ip)?;
        let route_removed = remove_route::<N, Ipv6Network>(host, ip, host_veth, veth)?;
        report.ipv6 = Some(TeardownReport {
            rules_removed,
            route_removed,
            veth_removed: false,
        });
    }
    Ok(report)
}

fn remove_rules<N: NetlinkOps + ?Sized, F: IpFamily>(
    host: &N,
    ip: F::Addr,
) -> Result<Vec<RuleOf<F>>> {
    let mut removed = Vec::new();
    for rule in host
        .rules_of::<F>()?
        .into_iter()
        .filter(|r| is_pod_rule(r, ip))
    {
        match host.delete_rule(&rule) {
            Ok(()) => removed.push(rule),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

fn find_veth<N: NetlinkOps + ?Sized>(host: &N, host_veth: Option<&str>) -> Result<Option<Link>> {
    Ok(match host_veth {
        Some(name) => host
            .link_by_name(name)?
            .filter(|l| l.kind.as_deref() == Some("veth")),
        None => None,
    })
}

/// Deletes the `<ip>` host route in main through `veth` (any link when no veth is named);
/// true when this call deleted it.
fn remove_route<N: NetlinkOps + ?Sized, F: IpFamily>(
    host: &N,
    ip: F::Addr,
    host_veth: Option<&str>,
    veth: Option<&Link>,
) -> Result<bool> {
    let ip_host = F::host(ip);
    let route = match (host_veth, veth) {
        // The veth is gone and took its routes with it.
        (Some(_), None) => None,
        (Some(name), Some(link)) => Some((
            RouteOf::link_scope(ip_host, link.index, RT_TABLE_MAIN),
            format!("delete route {ip_host} dev {name}"),
        )),
        (None, _) => Some((
            RouteOf {
                oif: None,
                ..RouteOf::link_scope(ip_host, 0, RT_TABLE_MAIN)
            },
            format!("delete route {ip_host}"),
        )),
    };
    let Some((route, op)) = route else {
        return Ok(false);
    };
    match host.delete_route(&route) {
        Ok(()) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e.with_op(op)),
    }
}

/// The veth's name depends on the pod only, so a newer sandbox of the same pod has the same
/// name: the link is this attachment's only if it carried this pod's address.
fn remove_veth<N: NetlinkOps + ?Sized>(
    host: &N,
    host_veth: Option<&str>,
    veth: Option<Link>,
    carried_route: bool,
) -> Result<bool> {
    let (Some(name), Some(link), true) = (host_veth, veth, carried_route) else {
        return Ok(false);
    };
    match host.delete_link_by_index(link.index) {
        Ok(()) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e.with_op(format!("delete host veth {name}"))),
    }
}

#[cfg(test)]
mod tests;
