//! DEL: release the address in ipamd, then remove the host route, rules and veth and the pod
//! interface. Succeeds whenever there is nothing (left) to delete, and when ipamd is away.

use std::net::Ipv4Addr;
use std::path::Path;

use cni::CniError;
use ipam_proto::{Client, DelReason, DelReply, DelRequest};
use netops::{Netlink, routed_elsewhere, teardown_container, teardown_host};
use tracing::{info, warn};

use super::Attachment;
use crate::errors::{DelFailure, del_failed};
use crate::names::allocation_veth_name;
use crate::prev::{Recorded, recorded};

/// The host state to remove.
struct Target {
    ip: Ipv4Addr,
    host_veth: Option<String>,
    /// ipamd itself said this attachment held `ip`. Otherwise the address comes from
    /// `prevResult` and may belong to another pod by now.
    confirmed: bool,
}

/// DEL: releases the address in ipamd and removes the host state of whatever address was
/// held (ipamd's answer first, `prevResult` otherwise) and the pod interface. Fails only when
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
            info!("ipamd released {} of {}", allocation.ip, att.key);
            // Prefer the recorded name: vethPrefix may have changed since the ADD.
            let host_veth = match (&prev.host_veth, prev.ip) {
                (Some(name), Some(ip)) if ip == allocation.ip => name.clone(),
                _ => allocation_veth_name(&att.conf.veth_prefix, &allocation),
            };
            Some(Target {
                ip: allocation.ip,
                host_veth: Some(host_veth),
                confirmed: true,
            })
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
                            t.ip, att.key
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
    if let Some(netns) = att.inv.netns.as_deref()
        && let Err(e) = teardown_container(Path::new(netns), &att.inv.ifname)
    {
        let err = CniError::internal(format!(
            "failed to delete {} in {netns}: {e}",
            att.inv.ifname
        ));
        first_error.get_or_insert(err);
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
    prev.ip.map(|ip| Target {
        ip,
        host_veth: prev.host_veth.clone(),
        confirmed: false,
    })
}

fn teardown_host_side(target: &Target) -> Result<(), CniError> {
    let failed = |e: netops::Error| {
        CniError::internal(format!(
            "failed to tear down the host network of {}: {e}",
            target.ip
        ))
    };
    let host = Netlink::current().map_err(failed)?;
    if !target.confirmed
        && routed_elsewhere(&host, target.ip, target.host_veth.as_deref()).map_err(failed)?
    {
        // The address was released, cooled down and given to another pod since this
        // attachment's ADD: its route and rules are that pod's now. Only our veth, if it is
        // still there, is ours to remove.
        warn!(
            "{} is routed to another interface now; leaving its route and rules alone",
            target.ip
        );
        if let Some(name) = &target.host_veth {
            match host.delete_link_by_name(name) {
                Ok(()) => info!("removed stale host veth {name}"),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(failed(e)),
            }
        }
        return Ok(());
    }
    let report = teardown_host(&host, target.ip, target.host_veth.as_deref()).map_err(failed)?;
    info!(
        "host teardown of {} (veth {}): {} rule(s), route {}, veth {}",
        target.ip,
        target.host_veth.as_deref().unwrap_or("unknown"),
        report.rules_removed.len(),
        if report.route_removed {
            "removed"
        } else {
            "already gone"
        },
        if report.veth_removed {
            "removed"
        } else {
            "already gone"
        },
    );
    Ok(())
}
