//! `doctor --fix`: the safe repairs. Each restores what ipamd itself would have set up or
//! removes what no pod owns; none takes an address from a pod or touches EC2.

use ipnetwork::IpNetwork;
use netops::{Netlink, RouteOf, RuleOf};

use super::facts::{Facts, KRoute, KRule};
use super::{Repair, gather};

fn rule_of<F: netops::IpFamily>(r: &KRule, src: Option<F>, dst: Option<F>) -> RuleOf<F> {
    RuleOf {
        src,
        dst,
        ..RuleOf::lookup(r.priority, r.table)
    }
}

fn rule(nl: &Netlink, r: &KRule, add: bool) -> netops::Result<()> {
    let v4 = |n: Option<IpNetwork>| match n {
        Some(IpNetwork::V4(n)) => Some(n),
        _ => None,
    };
    let v6 = |n: Option<IpNetwork>| match n {
        Some(IpNetwork::V6(n)) => Some(n),
        _ => None,
    };
    let is_v4 = r.src.or(r.dst).is_none_or(|n| n.is_ipv4());
    match (is_v4, add) {
        (true, true) => nl.add_rule(&rule_of(r, v4(r.src), v4(r.dst))),
        (true, false) => nl.delete_rule(&rule_of(r, v4(r.src), v4(r.dst))),
        (false, true) => nl.add_rule(&rule_of(r, v6(r.src), v6(r.dst))),
        (false, false) => nl.delete_rule(&rule_of(r, v6(r.src), v6(r.dst))),
    }
}

fn delete_route(nl: &Netlink, r: &KRoute) -> netops::Result<()> {
    match (r.dst, r.gateway) {
        (IpNetwork::V4(dst), gateway) => nl.delete_route(&RouteOf {
            dst,
            gateway: gateway.and_then(|g| match g {
                std::net::IpAddr::V4(g) => Some(g),
                std::net::IpAddr::V6(_) => None,
            }),
            oif: r.oif,
            table: r.table,
            scope: r.scope,
        }),
        (IpNetwork::V6(dst), gateway) => nl.delete_route(&RouteOf {
            dst,
            gateway: gateway.and_then(|g| match g {
                std::net::IpAddr::V6(g) => Some(g),
                std::net::IpAddr::V4(_) => None,
            }),
            oif: r.oif,
            table: r.table,
            scope: r.scope,
        }),
    }
}

/// Carries out one repair in the namespace the doctor runs in.
pub fn apply(repair: &Repair, facts: &Facts) -> Result<(), String> {
    let nl = || Netlink::current().map_err(|e| e.to_string());
    match repair {
        Repair::AddRule(r) => rule(&nl()?, r, true).map_err(|e| e.to_string()),
        Repair::DeleteRule(r) => rule(&nl()?, r, false).map_err(|e| e.to_string()),
        Repair::DeleteRoute(r) => delete_route(&nl()?, r).map_err(|e| e.to_string()),
        Repair::NodeSetup => {
            let identity = facts
                .identity
                .as_ref()
                .map_err(|e| format!("the node is unknown: {e}"))?;
            let kernel = facts.kernel.as_ref().map_err(Clone::clone)?;
            let snat = gather::node_snat(&facts.config, identity, kernel)?;
            let mut net = crate::daemon::node_net(&facts.config, identity);
            net.snat = snat;
            crate::nodenet::setup(&net)
                .map(drop)
                .map_err(|e| e.to_string())
        }
    }
}
