//! Shrinking the pool: addresses and prefixes above target given back to EC2, and empty ENIs
//! taken off the node, detached and deleted.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use cloud::{CloudError, CloudErrorKind, Ec2, Imds};
use pool::{Action, Mutation, Pool, Removal, Timestamp};
use tracing::{debug, error, info, warn};

use super::Daemon;
use crate::durability::{DaemonStore, PersistError};
use crate::host::HostNetwork;

/// How long a detached ENI may still be in use in EC2 before its deletion is left to the
/// leaked-ENI cleanup. EC2 usually detaches within seconds.
const DETACH_WAIT: Duration = Duration::from_secs(20);

/// Why an ENI could not be deleted yet.
#[derive(Debug)]
enum NotDetached {
    /// EC2 still shows it attached or detaching.
    Still(String),
    /// EC2 could not be asked.
    Cloud(CloudError),
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// Gives addresses and prefixes above target back to EC2. Each leaves the pool first, and
    /// only if it is still neither assigned nor cooling (an ADD and a DEL may have come since
    /// the plan), so nothing a pod holds or held a moment ago is released.
    pub(super) async fn release(&self, actions: Vec<Action>, now: Timestamp) {
        self.growth.status().last_release = Some(now);
        for action in actions {
            let (eni_id, gone_ips, gone_prefixes) = match action {
                Action::ReleaseIps { eni_id, ips } => {
                    let gone = self
                        .take_from_pool(ips, |pool, ip| {
                            pool.remove_address(ip, Removal::IfUnused(now))
                                .map(|(_, m)| m)
                        })
                        .await;
                    (eni_id, gone, Vec::new())
                }
                Action::ReleasePrefixes { eni_id, prefixes } => {
                    let gone = self
                        .take_from_pool(prefixes, |pool, p| {
                            pool.remove_prefix(p, Removal::IfUnused(now))
                                .map(|(_, m)| m)
                        })
                        .await;
                    (eni_id, Vec::new(), gone)
                }
                _ => continue,
            };
            // Still on the ENI in EC2 if this fails: the next reconciliation adopts it again.
            if !gone_ips.is_empty() {
                match self.ec2.unassign_private_ips(&eni_id, &gone_ips).await {
                    Ok(()) => {
                        info!(eni = %eni_id, count = gone_ips.len(), "released addresses above target");
                        self.gave_back();
                    }
                    Err(e) => {
                        self.metrics.ipamd_error("decreaseIPPool");
                        warn!(eni = %eni_id, error = %e, "{} failed", cloud::Action::UnassignPrivateIpAddresses)
                    }
                }
            }
            if !gone_prefixes.is_empty() {
                match self
                    .ec2
                    .unassign_ipv4_prefixes(&eni_id, &gone_prefixes)
                    .await
                {
                    Ok(()) => {
                        info!(eni = %eni_id, count = gone_prefixes.len(), "released prefixes above target");
                        self.gave_back();
                    }
                    Err(e) => {
                        self.metrics.ipamd_error("decreaseIPPool");
                        warn!(eni = %eni_id, error = %e, "unassigning prefixes failed")
                    }
                }
            }
        }
        self.log_pool_stats();
    }

    /// Removes from the pool each item `remove` lets go of, persists that, and returns them.
    async fn take_from_pool<T: Copy + std::fmt::Display>(
        &self,
        items: Vec<T>,
        remove: impl Fn(&mut Pool, T) -> Result<Vec<Mutation>, pool::PoolError>,
    ) -> Vec<T> {
        let taken = self
            .ledger
            .persist(|pool| {
                let mut gone = Vec::new();
                let mut muts = Vec::new();
                for item in items {
                    match remove(pool, item) {
                        Ok(m) => {
                            gone.push(item);
                            muts.extend(m);
                        }
                        Err(e) => debug!(%item, error = %e, "not releasing: in use since the plan"),
                    }
                }
                Ok::<_, PersistError>((gone, muts))
            })
            .await;
        taken.unwrap_or_else(|e| {
            error!(error = %e, "could not persist a release; not giving anything back");
            Vec::new()
        })
    }

    /// Frees an ENI that holds nothing for pods: out of the pool (only if still unused), its
    /// table and rules off the node, detached, deleted.
    pub(super) async fn free_eni(&self, eni_id: &str) -> bool {
        let now = self.clock.now();
        let freed = self
            .ledger
            .persist(|pool| {
                let Some(info) = pool.eni(eni_id).cloned() else {
                    return Ok((None, Vec::new()));
                };
                match pool.remove_eni(eni_id, Removal::IfUnused(now)) {
                    Ok((_, muts)) => {
                        let shared = pool.enis().any(|e| e.device_number == info.device_number);
                        Ok::<_, PersistError>((Some((info, shared)), muts))
                    }
                    Err(e) => {
                        debug!(eni = eni_id, error = %e, "not freeing: in use since the plan");
                        Ok((None, Vec::new()))
                    }
                }
            })
            .await;
        let (info, shared) = match freed {
            Ok(Some(found)) => found,
            Ok(None) => return false,
            Err(e) => {
                error!(eni = eni_id, error = %e, "could not persist freeing an ENI");
                return false;
            }
        };
        match self
            .host
            .teardown_eni(info.device_number, info.primary_ip, shared)
            .await
        {
            Ok(changes) => super::log_changes(&format!("teardown of ENI {eni_id}"), &changes),
            Err(e) => {
                self.metrics.ipamd_error("freeENIDeleteRulesFailed");
                error!(eni = eni_id, error = %e, "removing the ENI's table and rules failed")
            }
        }
        let attachment = match self
            .ec2
            .describe_network_interfaces(&[eni_id.to_string()])
            .await
        {
            Ok(enis) => enis.into_iter().find_map(|e| e.attachment.map(|a| a.id)),
            Err(e) if e.kind == CloudErrorKind::NotFound => None,
            Err(e) => {
                warn!(eni = eni_id, error = %e, "could not look the ENI up to detach it; reconciliation will retry");
                return true;
            }
        };
        self.detach_and_delete(eni_id, attachment.as_deref()).await;
        info!(eni = eni_id, device = info.device_number, "freed ENI");
        self.log_pool_stats();
        true
    }

    /// Detaches (when attached) and deletes an ENI. EC2 detaches asynchronously: a delete
    /// refused because the ENI is still in use waits for the detach to end, then is sent once
    /// more. Each EC2 call is retried by the client alone; what cannot be deleted is left to
    /// the leaked-ENI cleanup.
    pub(super) async fn detach_and_delete(&self, eni_id: &str, attachment: Option<&str>) {
        if let Some(attachment) = attachment
            && let Err(e) = self.ec2.detach_network_interface(attachment).await
        {
            warn!(eni = eni_id, error = %e, "detaching failed; the reconciliation will adopt it again");
            return;
        }
        let deleted = match self.ec2.delete_network_interface(eni_id).await {
            Err(e) if e.kind == CloudErrorKind::InUse => match self.wait_detached(eni_id).await {
                Ok(()) => self.ec2.delete_network_interface(eni_id).await,
                Err(NotDetached::Still(status)) => {
                    warn!(
                        eni = eni_id,
                        status,
                        "the ENI was still not detached after {}s; leaked-ENI cleanup will delete it",
                        DETACH_WAIT.as_secs()
                    );
                    return;
                }
                Err(NotDetached::Cloud(e)) => Err(e),
            },
            other => other,
        };
        match deleted {
            // Its addresses are the subnet's again.
            Ok(()) => self.gave_back(),
            Err(e) if e.kind == CloudErrorKind::NotFound => {}
            Err(e) => {
                warn!(eni = eni_id, error = %e, "could not delete the detached ENI; leaked-ENI cleanup will")
            }
        }
    }

    /// Deletes an ENI that never got attached.
    pub(super) async fn delete_unattached(&self, eni_id: &str) {
        self.detach_and_delete(eni_id, None).await;
    }

    /// Waits (up to [`DETACH_WAIT`]) until EC2 shows the ENI detached, or gone.
    async fn wait_detached(&self, eni_id: &str) -> Result<(), NotDetached> {
        let ids = [eni_id.to_string()];
        let look = || async {
            match self.ec2.describe_network_interfaces(&ids).await {
                Ok(enis) => match enis.into_iter().next() {
                    Some(eni) if eni.attachment.is_some() || eni.status != "available" => {
                        Err(NotDetached::Still(eni.status))
                    }
                    _ => Ok(()),
                },
                Err(e) if e.kind == CloudErrorKind::NotFound => Ok(()),
                Err(e) => Err(NotDetached::Cloud(e)),
            }
        };
        look.retry(
            ExponentialBuilder::new()
                .with_min_delay(Duration::from_millis(250))
                .with_max_delay(Duration::from_secs(2))
                .without_max_times()
                .with_total_delay(Some(DETACH_WAIT)),
        )
        .sleep(tokio::time::sleep)
        .when(|e| matches!(e, NotDetached::Still(_)))
        .await
    }
}
