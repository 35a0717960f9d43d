//! STATUS: ready exactly when ipamd says it can serve an ADD.

use cni::{CniError, NetConf};
use ipam_proto::Client;
use tracing::{debug, warn};

use crate::errors::{not_ready, status_failed};

/// STATUS: `Ok` when ipamd is ready for ADDs, code 50 otherwise.
pub fn run(conf: &NetConf, client: &Client) -> Result<(), CniError> {
    let result = match client.status() {
        Ok(status) if status.ready => {
            debug!(
                "ipamd ready: {} addresses, {} assigned, {} cooling, {} available",
                status.pool.total, status.pool.assigned, status.pool.cooling, status.pool.available
            );
            Ok(())
        }
        Ok(status) => Err(not_ready(status.reason.as_deref())),
        Err(e) => Err(status_failed(&e, &conf.ipamd_socket)),
    };
    if let Err(e) = &result {
        warn!("STATUS: {}", e.msg);
    }
    result
}
