//! CHECK: ipamd still holds the address `prevResult` reports, and the pod and host are wired
//! as ADD left them.

use std::fmt::Display;
use std::path::Path;

use cni::CniError;
use ipam_proto::{CheckRequest, Client};
use netops::{CheckError, ExpectedPod, Netlink, check_pod, parse_mac};
use tracing::{error, info};

use super::Attachment;
use crate::errors::check_failed;
use crate::prev::recorded;

/// CHECK: fails with every difference found between `prevResult`, ipamd and the kernel.
pub fn run(att: &Attachment, client: &Client) -> Result<(), CniError> {
    let result = check(att, client);
    match &result {
        Ok(()) => info!("CHECK of {} passed", att.key),
        Err(e) => error!("CHECK of {} failed: {}", att.key, e.msg),
    }
    result
}

fn check(att: &Attachment, client: &Client) -> Result<(), CniError> {
    let Some(prev) = &att.conf.prev_result else {
        return Err(CniError::invalid_config(
            "CHECK needs a prevResult (the result of the ADD being checked), and the config has none",
        ));
    };
    let ifname = &att.inv.ifname;
    let recorded = recorded(prev, ifname, &att.conf.veth_prefix);
    let allocation = client
        .check(CheckRequest {
            key: att.key.clone(),
        })
        .map_err(|e| check_failed(&e, &att.key))?
        .allocation;

    let mut problems = Vec::new();
    compare("IPv4", recorded.ipv4, allocation.ip, att, &mut problems);
    compare("IPv6", recorded.ipv6, allocation.ipv6, att, &mut problems);
    if allocation.addresses().is_empty() {
        problems.push(format!("ipamd holds no address for {}", att.key));
    }
    let expected = ExpectedPod {
        container_ifname: ifname.clone(),
        host_veth: recorded.host_veth.unwrap_or_else(|| att.host_veth.clone()),
        ipv4: allocation.ip,
        ipv6: allocation.ipv6,
        egress_ipv4: allocation.egress_ipv4,
        route_table: allocation.route_table,
        container_mac: recorded.container_mac.as_deref().and_then(parse_mac),
        host_mac: recorded.host_mac.as_deref().and_then(parse_mac),
    };

    let unreadable = |e: netops::NetlinkError| {
        CniError::internal(format!("CHECK could not read the network state: {e}"))
    };
    let host = Netlink::current().map_err(unreadable)?;
    let pod = Netlink::in_netns(Path::new(att.netns())).map_err(unreadable)?;
    match check_pod(&host, &pod, &expected) {
        Ok(()) => {}
        Err(CheckError::Mismatch(m)) => problems.extend(m.problems),
        Err(CheckError::Netlink(e)) => return Err(unreadable(e)),
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CniError::internal(format!(
            "pod network of {} is not as set up: {}",
            att.key,
            problems.join("; ")
        )))
    }
}

/// One family's address as `prevResult` recorded it against what ipamd holds.
fn compare<A: PartialEq + Display>(
    family: &str,
    recorded: Option<A>,
    held: Option<A>,
    att: &Attachment,
    problems: &mut Vec<String>,
) {
    let ifname = &att.inv.ifname;
    match (recorded, held) {
        (None, None) => {}
        (None, Some(held)) => problems.push(format!(
            "prevResult has no {family} address for {ifname}, but ipamd holds {held} for {}",
            att.key
        )),
        (Some(ip), None) => problems.push(format!(
            "prevResult has {family} address {ip} but ipamd holds no {family} address for {}",
            att.key
        )),
        (Some(ip), Some(held)) if ip != held => problems.push(format!(
            "prevResult has address {ip} but ipamd holds {held} for {} ({family})",
            att.key
        )),
        (Some(_), Some(_)) => {}
    }
}
