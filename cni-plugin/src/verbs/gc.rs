//! GC: ipamd releases every attachment of this network the runtime no longer lists; the
//! plugin removes their host routes, rules and veths.

use cni::{CniError, NetConf};
use ipam_proto::{Client, GcRequest, ValidAttachment};
use netops::{Netlink, teardown_pod_host};
use tracing::{error, info, warn};

use crate::errors::gc_failed;
use crate::names::allocation_veth_name;

/// GC: releases the network's attachments missing from the valid list and tears down their
/// host state; keeps going after a failure and reports the first one.
pub fn run(conf: &NetConf, client: &Client) -> Result<(), CniError> {
    let Some(valid) = &conf.valid_attachments else {
        // Reading a missing list as "nothing is valid" would release every pod's address.
        warn!(
            "GC request without cni.dev/valid-attachments (or cni.dev/attachments): \
             nothing collected"
        );
        return Ok(());
    };
    let request = GcRequest {
        network: conf.name.clone(),
        valid: valid
            .iter()
            .map(|a| ValidAttachment {
                container_id: a.container_id.clone(),
                ifname: a.ifname.clone(),
            })
            .collect(),
    };
    let released = client
        .gc(request)
        .map_err(|e| {
            let err = gc_failed(&e);
            error!("GC: {}", err.msg);
            err
        })?
        .released;
    info!(
        "GC of network {}: {} valid attachment(s), ipamd released {}",
        conf.name,
        valid.len(),
        released.len()
    );
    if released.is_empty() {
        return Ok(());
    }

    let host = Netlink::current().map_err(|e| {
        CniError::internal(format!(
            "GC: cannot open netlink in the node namespace: {e}"
        ))
    })?;
    let mut first_error = None;
    for allocation in &released {
        let veth = allocation_veth_name(&conf.veth_prefix, allocation);
        let ips = allocation.addresses();
        match teardown_pod_host(&host, ips.ipv4, ips.ipv6, Some(&veth)) {
            Ok(_) => info!(
                "GC: released {ips} of {} and removed its host state (veth {veth})",
                allocation.key
            ),
            Err(e) => {
                let err = CniError::internal(format!(
                    "GC: failed to tear down the host network of {ips} ({}): {e}",
                    allocation.key
                ));
                error!("{}", err.msg);
                first_error.get_or_insert(err);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}
