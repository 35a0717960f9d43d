//! CHECK: ipamd still holds the address `prevResult` reports, and the pod and host are wired
//! as ADD left them.

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
    match recorded.ip {
        None => problems.push(format!("prevResult has no IPv4 address for {ifname}")),
        Some(ip) if ip != allocation.ip => problems.push(format!(
            "prevResult has address {ip} but ipamd holds {} for {}",
            allocation.ip, att.key
        )),
        Some(_) => {}
    }
    let expected = ExpectedPod {
        container_ifname: ifname.clone(),
        host_veth: recorded.host_veth.unwrap_or_else(|| att.host_veth.clone()),
        ip: allocation.ip,
        route_table: allocation.route_table,
        container_mac: recorded.container_mac.as_deref().and_then(parse_mac),
        host_mac: recorded.host_mac.as_deref().and_then(parse_mac),
    };

    let unreadable = |e: netops::Error| {
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
