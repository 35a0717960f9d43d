//! Switching a node from aws-node: its pods keep their addresses. On ipamd's first start the
//! Go CNI's checkpoint says which attachment holds which address; each one still on this
//! node's ENIs is adopted, as the Go CNI itself restores its checkpoint.

use std::path::Path;

use cloud::{Ec2, Imds};
use store::{Imported, read_checkpoint};
use tracing::{info, warn};

use super::{Daemon, StartupError};
use crate::durability::{DaemonStore, PersistError};
use crate::host::HostNetwork;

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// Adopts the assignments of the Go CNI's checkpoint at `path`, if there is one. A file
    /// that exists but cannot be read stops ipamd: starting without it would count its pods'
    /// addresses as free and hand them to new pods.
    pub(super) async fn migrate_from_go_cni(&self, path: &Path) -> Result<(), StartupError> {
        let Some(checkpoint) = read_checkpoint(path).map_err(StartupError::Migrate)? else {
            return Ok(());
        };
        for skipped in &checkpoint.skipped {
            warn!(path = %path.display(), "not migrated: {skipped}");
        }
        let (adopted, refused) = self
            .ledger
            .persist(|pool| {
                let mut muts = Vec::new();
                let mut adopted = Vec::new();
                let mut refused: Vec<(Imported, pool::PoolError)> = Vec::new();
                for entry in checkpoint.imported {
                    match pool.adopt(&entry.key, &entry.pod, entry.ip, entry.assigned_at) {
                        Ok((allocated, m)) => {
                            muts.extend(m);
                            adopted.push(allocated);
                        }
                        Err(e) => refused.push((entry, e)),
                    }
                }
                Ok::<_, PersistError>(((adopted, refused), muts))
            })
            .await?;
        for (entry, e) in &refused {
            // The Go CNI's own restore drops such entries with these words.
            warn!(
                ip = %entry.ip, attachment = %entry.key, error = %e,
                "not migrated: the address is not free on this node's ENIs, presuming stale/dead"
            );
        }
        for a in &adopted {
            info!(
                ip = %a.ip, attachment = %a.key, eni = %a.eni_id,
                pod = %format_args!("{}/{}", a.pod.namespace, a.pod.name),
                "migrated an address from the Go CNI's checkpoint"
            );
        }
        info!(
            path = %path.display(),
            migrated = adopted.len(),
            not_migrated = refused.len() + checkpoint.skipped.len(),
            "took over the Go CNI's assignments"
        );
        Ok(())
    }
}
