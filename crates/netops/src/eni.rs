//! A secondary ENI on the node, as the Go CNI sets it up (reference §3.6): the link found by
//! its MAC, its MTU, up, the ENI's primary address with the subnet's prefix, a route table of
//! its own (device number + 1) holding `<gw>/32 scope link` and `default via <gw>`, no
//! connected route in main, and the rule `from <ENI primary ip> lookup <table>` prio 32765.
//!
//! Every step looks before it changes anything, so running setup again on a configured ENI
//! changes nothing; what a call did change is reported, which makes that visible.

use std::net::Ipv4Addr;

use ipnetwork::Ipv4Network;

use crate::error::{NetlinkError, Result};
use crate::messages::RT_TABLE_MAIN;
use crate::messages::route::Route;
use crate::messages::rule::Rule;
use crate::names::format_mac;
use crate::pod::PRIO_FROM_POD;
use crate::socket::Netlink;

/// Priority of the rule that sends traffic from an ENI's own address to its table.
pub const PRIO_FROM_ENI: u32 = 32765;

/// A secondary ENI to configure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EniSpec {
    /// MAC address of the ENI (how its link is found).
    pub mac: [u8; 6],
    /// Attachment device index (1 or more; the primary ENI is not set up here).
    pub device_number: u32,
    /// The ENI's own primary address.
    pub primary_ip: Ipv4Addr,
    /// Its subnet.
    pub subnet: Ipv4Network,
    /// Link MTU.
    pub mtu: u32,
}

/// The routing table for traffic from pods on the ENI at `device_number`: main for the primary
/// ENI, device number + 1 otherwise (the Go CNI's numbering for network card 0). The
/// workspace's one definition: the daemon's allocations, its introspection and the doctor
/// all ask here, so the table a pod's rule names is the table this crate fills.
pub fn eni_table(device_number: u32) -> u32 {
    if device_number == 0 {
        RT_TABLE_MAIN
    } else {
        device_number + 1
    }
}

/// The VPC router of a subnet: its network address + 1.
pub fn subnet_gateway(subnet: Ipv4Network) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(subnet.network()).wrapping_add(1))
}

/// What [`setup_eni`] found and changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EniSetup {
    /// The link's name.
    pub ifname: String,
    /// Its index.
    pub ifindex: u32,
    /// Each change made, in words; empty when everything was already in place.
    pub changes: Vec<String>,
}

/// Configures a secondary ENI's link, table and rule; see the module docs. Fails with
/// [`NetlinkError::NoLinkWithMac`] while the hot-plugged link has not appeared (callers retry).
pub fn setup_eni(nl: &Netlink, spec: &EniSpec) -> Result<EniSetup> {
    if spec.device_number == 0 {
        return Err(NetlinkError::Invalid {
            what: "ENI device number",
            why: "0 is the primary ENI, which is not set up as a secondary one".into(),
        });
    }
    let link = nl
        .link_by_mac(&spec.mac)?
        .ok_or_else(|| NetlinkError::NoLinkWithMac {
            mac: format_mac(&spec.mac),
        })?;
    let idx = link.index;
    let table = eni_table(spec.device_number);
    let gw = subnet_gateway(spec.subnet);
    let mut changes = Vec::new();

    if link.mtu != Some(spec.mtu) {
        nl.set_link_mtu(idx, spec.mtu)?;
        changes.push(format!("mtu {}", spec.mtu));
    }
    if !link.up {
        nl.set_link_up(idx)?;
        changes.push("up".into());
    }

    let own = Ipv4Network::new(spec.primary_ip, spec.subnet.prefix()).map_err(|e| {
        NetlinkError::Invalid {
            what: "ENI address",
            why: e.to_string(),
        }
    })?;
    let mut has_own = false;
    for addr in nl.addresses()?.into_iter().filter(|a| a.index == idx) {
        if addr.network == own {
            has_own = true;
        } else {
            // Whatever else is on the link (a DHCP client, a previous ENI at this slot) would
            // compete with the table below.
            nl.delete_address(idx, addr.network)?;
            changes.push(format!("removed address {}", addr.network));
        }
    }
    if !has_own {
        nl.add_address(idx, own)?;
        changes.push(format!("address {own}"));
    }

    let gw_host = Ipv4Network::new(gw, 32).map_err(|e| NetlinkError::Invalid {
        what: "gateway",
        why: e.to_string(),
    })?;
    let wanted = [
        Route::link_scope(gw_host, idx, table),
        Route::default_via(gw, idx, table),
    ];
    let present = nl.routes(table)?;
    for route in present.iter().filter(|r| !wanted.contains(r)) {
        nl.delete_route(route)?;
        changes.push(format!("removed stale route {route}"));
    }
    for route in &wanted {
        if !present.contains(route) {
            nl.replace_route(route)?;
            changes.push(format!("route {route}"));
        }
    }

    // Adding the address made the kernel put `<subnet> dev <link>` in main; traffic of this
    // ENI must use its own table, and the primary ENI already reaches the subnet.
    for route in nl
        .routes(RT_TABLE_MAIN)?
        .into_iter()
        .filter(|r| r.oif == Some(idx) && r.dst == spec.subnet && r.gateway.is_none())
    {
        match nl.delete_route(&route) {
            Ok(()) => changes.push(format!("removed connected route {route}")),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }

    let from_eni = Rule::from_src(PRIO_FROM_ENI, host(spec.primary_ip)?, table);
    let mut has_rule = false;
    for rule in nl
        .rules()?
        .into_iter()
        .filter(|r| is_eni_rule(r, spec.primary_ip))
    {
        if rule == from_eni {
            has_rule = true;
        } else {
            nl.delete_rule(&rule)?;
            changes.push(format!("removed stale rule {rule}"));
        }
    }
    if !has_rule {
        nl.add_rule(&from_eni)?;
        changes.push(format!("rule {from_eni}"));
    }

    Ok(EniSetup {
        ifname: link.name,
        ifindex: idx,
        changes,
    })
}

fn host(ip: Ipv4Addr) -> Result<Ipv4Network> {
    Ipv4Network::new(ip, 32).map_err(|e| NetlinkError::Invalid {
        what: "address",
        why: e.to_string(),
    })
}

fn is_eni_rule(rule: &Rule, eni_ip: Ipv4Addr) -> bool {
    rule.priority == PRIO_FROM_ENI
        && rule
            .src
            .is_some_and(|s| s.prefix() == 32 && s.ip() == eni_ip)
        && rule.dst.is_none()
        && rule.fwmark.is_none()
        && rule.iif.is_none()
}

/// What [`teardown_eni`] removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EniTeardown {
    /// Rules deleted (the ENI's prio-32765 rule and its pods' prio-1536 rules).
    pub rules: Vec<Rule>,
    /// Routes deleted from the ENI's table.
    pub routes: Vec<Route>,
}

/// Removes what an ENI at `device_number` with address `primary_ip` left on the node: its
/// prio-32765 rule and, unless `keep_table` (another ENI holds that device number now and the
/// table is its), the table's routes (the kernel drops them with the link, but a link may still
/// be there) and every prio-1536 rule sending pods to the table. Anything already gone is fine.
pub fn teardown_eni(
    nl: &Netlink,
    device_number: u32,
    primary_ip: Ipv4Addr,
    keep_table: bool,
) -> Result<EniTeardown> {
    let table = eni_table(device_number);
    let mut report = EniTeardown::default();
    for rule in nl.rules()?.into_iter().filter(|r| {
        is_eni_rule(r, primary_ip)
            || (!keep_table && r.priority == PRIO_FROM_POD && r.lookup && r.table == table)
    }) {
        match nl.delete_rule(&rule) {
            Ok(()) => report.rules.push(rule),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    let routes = if keep_table {
        Vec::new()
    } else {
        nl.routes(table)?
    };
    for route in routes {
        match nl.delete_route(&route) {
            Ok(()) => report.routes.push(route),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_tables_follow_the_device_number() {
        assert_eq!(eni_table(0), RT_TABLE_MAIN);
        assert_eq!(eni_table(2), 3);
    }

    #[test]
    fn tables_and_gateways_follow_the_go_cni() {
        assert_eq!(eni_table(1), 2);
        assert_eq!(eni_table(2), 3);
        assert_eq!(
            subnet_gateway("10.0.1.0/24".parse().unwrap()),
            Ipv4Addr::new(10, 0, 1, 1)
        );
        assert_eq!(
            subnet_gateway("10.0.1.128/25".parse().unwrap()),
            Ipv4Addr::new(10, 0, 1, 129)
        );
    }

    #[test]
    fn only_the_enis_own_prio_32765_rule_is_its_rule() {
        let ip = Ipv4Addr::new(10, 0, 1, 20);
        let own = Rule::from_src(PRIO_FROM_ENI, host(ip).unwrap(), 2);
        assert!(is_eni_rule(&own, ip));
        assert!(is_eni_rule(
            &Rule::from_src(PRIO_FROM_ENI, host(ip).unwrap(), 9),
            ip
        ));
        assert!(!is_eni_rule(
            &Rule::from_src(PRIO_FROM_POD, host(ip).unwrap(), 2),
            ip
        ));
        assert!(!is_eni_rule(
            &Rule::from_src(PRIO_FROM_ENI, host(Ipv4Addr::new(10, 0, 1, 21)).unwrap(), 2),
            ip
        ));
    }
}
