//! DEL: release the address in ipamd, then remove the host routes and rules. The veth pair is
//! left to the removal of the pod's namespace, which a runtime does right after DEL and which
//! takes the pair with it, as with the Go CNI: deleting it here would be most of DEL's time.
//! Where the namespace stays, ipamd deletes the veth once it has carried no route for a few
//! seconds (`daemon::veths`). Succeeds whenever there is nothing (left) to delete, and when
//! ipamd is away.

use cni::CniError;
use ipam_proto::{Client, DelReason, DelReply, DelRequest, PodAddresses};
use netops::{Netlink, routed_elsewhere, unroute_pod};
use tracing::{info, warn};

use super::Attachment;
use crate::errors::{DelFailure, del_failed};
use crate::names::allocation_veth_name;
use crate::prev::{Recorded, recorded};

/// The host state to remove.
struct Target {
    /// One address or both (never neither).
    ips: PodAddresses,
    host_veth: Option<String>,
    /// ipamd itself said this attachment held `ips`. Otherwise the addresses come from
    /// `prevResult` and may belong to another pod by now.
    confirmed: bool,
}

/// DEL: releases the address in ipamd and removes the host routes and rules of whatever
/// address was held (ipamd's answer first, `prevResult` otherwise). Fails only when
/// a local teardown fails or ipamd reported an error it should get another chance at.
pub fn run(att: &Attachment, client: &Client) -> Result<(), CniError> {
    if let Some(problem) = &att.conf.prev_result_problem {
        warn!("ignoring the prevResult of this DEL: {problem}");
    }
    let prev = att
        .conf
        .prev_result
        .as_ref()
        .map(|p| recorded(p, &att.inv.ifname, &att.conf.veth_prefix))
        .unwrap_or_default();

    let request = DelRequest {
        key: att.key.clone(),
        pod: att.pod.clone(),
        reason: DelReason::PodDeleted,
    };
    let mut retry = None;
    let mut from_prev_only = false;
    let target = match client.del(request) {
        Ok(DelReply {
            released: Some(allocation),
        }) => {
            let ips = allocation.addresses();
            info!("ipamd released {ips} of {}", att.key);
            // Prefer the recorded name: vethPrefix may have changed since the ADD.
            let same = prev.ipv4.is_some() && prev.ipv4 == ips.ipv4
                || prev.ipv6.is_some() && prev.ipv6 == ips.ipv6;
            let host_veth = match &prev.host_veth {
                Some(name) if same => name.clone(),
                _ => allocation_veth_name(&att.conf.veth_prefix, &allocation),
            };
            if ips.is_empty() {
                warn!("ipamd released no address of {}", att.key);
                from_prev(&prev)
            } else {
                Some(Target {
                    ips,
                    host_veth: Some(host_veth),
                    confirmed: true,
                })
            }
        }
        Ok(DelReply { released: None }) => {
            info!("ipamd held no address for {}", att.key);
            from_prev(&prev)
        }
        Err(e) => match del_failed(&e) {
            DelFailure::NothingHeld => {
                info!("ipamd held no address for {}: {e}", att.key);
                from_prev(&prev)
            }
            DelFailure::Unreachable => {
                let target = from_prev(&prev);
                match &target {
                    Some(t) => {
                        info!(
                            "ipamd unavailable ({e}): tearing down {} of {} from prevResult",
                            t.ips, att.key
                        );
                        from_prev_only = true;
                    }
                    None => warn!(
                        "ipamd unavailable ({e}) and no usable prevResult for {}: nothing to tear \
                         down here; the address is released once the pod's route is gone \
                         (at ipamd's next start) or by the runtime's GC",
                        att.key
                    ),
                }
                target
            }
            DelFailure::Retry(err) => {
                warn!(
                    "{}; tearing down locally, then asking the runtime to retry",
                    err.msg
                );
                retry = Some(err);
                from_prev(&prev)
            }
        },
    };

    let mut first_error = None;
    if let Some(target) = target
        && let Err(e) = teardown_host_side(&target)
    {
        first_error = Some(e);
    }
    match first_error.or(retry) {
        Some(err) => {
            tracing::error!("{}", err.msg);
            Err(err)
        }
        None => {
            if from_prev_only {
                info!("Handled pod teardown using prevResult for {}", att.key);
            }
            Ok(())
        }
    }
}

fn from_prev(prev: &Recorded) -> Option<Target> {
    let ips = PodAddresses {
        ipv4: prev.ipv4,
        ipv6: prev.ipv6,
    };
    (!ips.is_empty()).then(|| Target {
        ips,
        host_veth: prev.host_veth.clone(),
        confirmed: false,
    })
}

fn teardown_host_side(target: &Target) -> Result<(), CniError> {
    let failed = |e: netops::NetlinkError| {
        CniError::internal(format!(
            "failed to tear down the host network of {}: {e}",
            target.ips
        ))
    };
    let host = Netlink::current().map_err(failed)?;
    let veth = target.host_veth.as_deref();
    let mut ips = target.ips;
    if !target.confirmed {
        // The address may have been released, cooled down and given to another pod since this
        // attachment's ADD: its route and rules are that pod's now. Each family on its own.
        if let Some(ip) = ips.ipv4
            && routed_elsewhere(&host, ip, veth).map_err(failed)?
        {
            warn!(
                "IPv4 address {ip} is routed to another interface now; leaving its route and rules alone"
            );
            ips.ipv4 = None;
        }
        if let Some(ip) = ips.ipv6
            && routed_elsewhere(&host, ip, veth).map_err(failed)?
        {
            warn!(
                "IPv6 address {ip} is routed to another interface now; leaving its route and rules alone"
            );
            ips.ipv6 = None;
        }
        if ips.is_empty() {
            // Our veth, if it is still there, carries no route: it goes as any other.
            return Ok(());
        }
    }
    let report = unroute_pod(&host, ips.ipv4, ips.ipv6, veth).map_err(failed)?;
    info!(
        "host teardown of {ips} (veth {}, left to the namespace's removal): {} rule(s), {} route(s)",
        veth.unwrap_or("unknown"),
        report.rules_removed(),
        report.routes_removed(),
    );
    Ok(())
}
