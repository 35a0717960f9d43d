//! ADD: an address from ipamd, then the pod's veth, routes and host rules. The veth pair, the
//! slowest request of the wiring and one that needs no address, is made while ipamd answers.

use std::path::Path;

use cni::{CniError, CniResult};
use ipam_proto::{AddRequest, Allocation, Client, DelReason, DelRequest};
use netops::{
    ExpectedPod, Netlink, PodSpec, PodVeth, check_pod, create_pod_veth, remove_pod_veth, setup_pod,
    wire_pod_veth,
};
use tracing::{debug, error, info, warn};

use super::Attachment;
use crate::errors::add_failed;
use crate::result::{Wired, add_result};

/// A wiring step that failed, for the error message.
struct SetupFailure {
    step: &'static str,
    error: netops::NetlinkError,
}

fn step(step: &'static str) -> impl FnOnce(netops::NetlinkError) -> SetupFailure {
    move |error| SetupFailure { step, error }
}

/// ADD: asks ipamd for the attachment's address, wires the pod and returns the result.
///
/// A repeated ADD of the same attachment gets the same address back from ipamd; if the pod is
/// already wired exactly as it should be, the result is returned without touching anything,
/// otherwise the pod is wired again. When wiring fails the error names the step, and an address
/// ipamd gave out for this ADD goes back to it (reason `SetupFailed`); an address the
/// attachment already held is kept, since a pod may be using it.
pub fn run(att: &Attachment, client: &Client) -> Result<CniResult, CniError> {
    let request = AddRequest {
        key: att.key.clone(),
        pod: att.pod.clone(),
        netns: att.netns().to_owned(),
    };
    let failed = |e| {
        let err = add_failed(&e);
        error!("{}", err.msg);
        err
    };
    let pending = client.start_add(request).map_err(failed)?;
    let early = EarlyPair::create(att);
    let reply = pending.reply().map_err(|e| {
        EarlyPair::remove(early.as_ref());
        failed(e)
    })?;
    let allocation = reply.allocation;
    let addresses = allocation.addresses();
    info!(
        "ipamd assigned {addresses}{} (ENI {}, device {}, table {}{}) to {}",
        allocation
            .egress_ipv4
            .map(|e| format!(" with IPv4 egress {e}"))
            .unwrap_or_default(),
        allocation.eni_id,
        allocation.device_number,
        allocation.route_table,
        if reply.existing { ", held already" } else { "" },
        att.key
    );
    if addresses.is_empty() {
        EarlyPair::remove(early.as_ref());
        // Nothing to wire; a pod without an address is worse than a failed ADD. Handing back
        // what this ADD got (nothing usable) lets ipamd forget the attachment.
        let details = if reply.existing {
            format!("the allocation stays with {}", att.key)
        } else {
            release(att, client, &allocation)
        };
        let err = CniError::internal(format!(
            "ipamd assigned neither an IPv4 nor an IPv6 address to {} (ENI {})",
            att.key, allocation.eni_id
        ))
        .with_details(details);
        error!("{}; {}", err.msg, err.details);
        return Err(err);
    }

    // A pair made just now means the pod had no veth: a repeated ADD finds its own.
    if reply.existing
        && early.is_none()
        && let Some(wired) = already_wired(att, &allocation)
    {
        info!(
            "{addresses} is already wired for {}: nothing to change",
            att.key
        );
        return Ok(add_result(att.conf.prev_result.clone(), &wired));
    }
    match wire(att, &allocation, early) {
        Ok(wired) => {
            info!(
                "wired {addresses} on {} in {} to host veth {}",
                wired.container_ifname, wired.netns, wired.host_veth
            );
            Ok(add_result(att.conf.prev_result.clone(), &wired))
        }
        Err(SetupFailure { step, error }) => {
            // setup_pod has already removed what it created.
            let details = if reply.existing {
                format!(
                    "address {addresses} stays with {}, which held it before this ADD",
                    att.key
                )
            } else {
                release(att, client, &allocation)
            };
            let err = CniError::internal(format!(
                "failed to set up the pod network ({step}) for {addresses}: {error}"
            ))
            .with_details(details);
            error!("{}; {}", err.msg, err.details);
            Err(err)
        }
    }
}

/// The wiring of a repeated ADD, when the pod already has exactly what this ADD would create.
fn already_wired(att: &Attachment, allocation: &Allocation) -> Option<Wired> {
    let host = Netlink::current().ok()?;
    let pod = Netlink::in_netns(Path::new(att.netns())).ok()?;
    let expected = ExpectedPod {
        container_ifname: att.inv.ifname.clone(),
        host_veth: att.host_veth.clone(),
        ipv4: allocation.ip,
        ipv6: allocation.ipv6,
        egress_ipv4: allocation.egress_ipv4,
        route_table: allocation.route_table,
        container_mac: None,
        host_mac: None,
    };
    if let Err(e) = check_pod(&host, &pod, &expected) {
        info!(
            "repeated ADD of {}: wiring differs, wiring again ({e})",
            att.key
        );
        return None;
    }
    Some(Wired {
        host_mac: host.link_by_name(&att.host_veth).ok()??.mac?,
        container_mac: pod.link_by_name(&att.inv.ifname).ok()??.mac?,
        host_veth: att.host_veth.clone(),
        container_ifname: att.inv.ifname.clone(),
        netns: att.netns().to_owned(),
        ipv4: allocation.ip,
        ipv6: allocation.ipv6,
        mtu: att.conf.mtu,
    })
}

/// The pod's veth pair, made while ipamd answers, with the sockets that made it.
struct EarlyPair {
    host: Netlink,
    pod: Netlink,
    veth: PodVeth,
}

impl EarlyPair {
    /// `None` where the pod has a veth already (a repeated ADD: its wiring is checked or
    /// replaced once the address is known) or the pair cannot be made now: the wiring after
    /// ipamd's answer then runs every step and reports what fails.
    fn create(att: &Attachment) -> Option<EarlyPair> {
        let host = Netlink::current().ok()?;
        let pod = Netlink::in_netns(Path::new(att.netns())).ok()?;
        match create_pod_veth(&host, &pod, &att.host_veth, &att.inv.ifname, att.conf.mtu) {
            Ok(Some(veth)) => Some(EarlyPair { host, pod, veth }),
            Ok(None) => None,
            Err(e) => {
                debug!("veth pair for {} not made ahead: {e}", att.key);
                None
            }
        }
    }

    /// Deletes the pair when the pod gets no address after all.
    fn remove(pair: Option<&EarlyPair>) {
        if let Some(p) = pair
            && let Err(e) = remove_pod_veth(&p.host, &p.veth)
        {
            warn!(
                "could not delete the veth pair {} of a pod without an address: {e}",
                p.veth.host_veth
            );
        }
    }
}

fn wire(
    att: &Attachment,
    allocation: &Allocation,
    early: Option<EarlyPair>,
) -> Result<Wired, SetupFailure> {
    let netns = att.netns();
    let spec = PodSpec {
        host_veth: att.host_veth.clone(),
        container_ifname: att.inv.ifname.clone(),
        ipv4: allocation.ip,
        ipv6: allocation.ipv6,
        egress_ipv4: allocation.egress_ipv4,
        mtu: att.conf.mtu,
        route_table: allocation.route_table,
    };
    let wiring = match early {
        Some(pair) => match wire_pod_veth(&pair.host, &pair.pod, &pair.veth, &spec) {
            // ipamd deletes a veth that carries no route for some seconds, and an ADD may
            // wait that long for the pool to grow: the pair is made again.
            Err(e) if e.is_not_found() => {
                debug!("the veth pair made ahead is gone ({e}): wiring from the start");
                setup_pod(&pair.host, &pair.pod, &spec)
            }
            other => other,
        },
        None => {
            let host = Netlink::current().map_err(step("open netlink in the node namespace"))?;
            let pod = Netlink::in_netns(Path::new(netns))
                .map_err(step("open the pod network namespace"))?;
            setup_pod(&host, &pod, &spec)
        }
    }
    .map_err(step("wire the pod"))?;
    Ok(Wired {
        host_veth: spec.host_veth,
        host_mac: wiring.host_mac,
        container_ifname: spec.container_ifname,
        container_mac: wiring.container_mac,
        netns: netns.to_owned(),
        ipv4: spec.ipv4,
        ipv6: spec.ipv6,
        mtu: spec.mtu,
    })
}

/// Best effort DEL with reason `SetupFailed`; says what happened, for the error's details.
fn release(att: &Attachment, client: &Client, allocation: &Allocation) -> String {
    let addresses = allocation.addresses();
    let request = DelRequest {
        key: att.key.clone(),
        pod: att.pod.clone(),
        reason: DelReason::SetupFailed,
    };
    match client.del(request) {
        Ok(_) => format!("address {addresses} returned to ipamd"),
        Err(e) => {
            warn!("could not return {addresses} to ipamd after the failed setup: {e}");
            format!(
                "address {addresses} could not be returned to ipamd ({e}); the runtime's DEL or \
                 ipamd's reconciliation will release it"
            )
        }
    }
}
