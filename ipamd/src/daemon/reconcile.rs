//! Reconciliation: the pool and the node's network against what EC2 says the instance holds.
//! Cheap when nothing changed (IMDS only); EC2 is asked, and is the truth, on any mismatch.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use cloud::{CloudError, Ec2, Imds, NetworkInterface};
use ipnetwork::Ipv4Network;
use pool::{EniInfo, Removal};
use tracing::{debug, error, info, warn};

use super::eni::{is_ours, sync_eni};
use super::{Daemon, StartupError};
use crate::durability::{DaemonStore, PersistError};
use crate::host::HostNetwork;

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// The periodic check: the ENIs IMDS lists, with their addresses and prefixes, against
    /// the pool's (and the unmanaged ENIs last seen); EC2 is asked only when they differ.
    /// Also releases recovered addresses whose pods are gone.
    pub async fn reconcile(&self) {
        if let Err(e) = self.release_recovered().await {
            warn!(error = %e, "releasing recovered addresses failed");
        }
        match self.imds_view().await {
            Ok(imds) => {
                let known = self.pool_view();
                if imds == known {
                    debug!(enis = imds.len(), "IMDS agrees with the pool");
                    return;
                }
                info!(?imds, pool = ?known, "IMDS and the pool disagree; asking EC2");
            }
            Err(e) => warn!(error = %e, "reading ENIs from IMDS failed; asking EC2"),
        }
        let _busy = self.metrics.action_in_progress("nodeIPPoolReconcile");
        if let Err(e) = self.reconcile_with_ec2().await {
            self.metrics.ipamd_error("reconcileFailedGetENIs");
            warn!("reconciliation failed: {e}");
        }
    }

    /// ENI id -> (secondary /32s, prefixes), as IMDS shows them. Unmanaged ENIs are listed
    /// without addresses: only their presence matters.
    async fn imds_view(&self) -> Result<View, CloudError> {
        let unmanaged = self.growth.unmanaged().clone();
        let mut view = View::new();
        for mac in cloud::attached_macs(&self.imds).await? {
            let Some(id) = cloud::eni_id(&self.imds, &mac).await? else {
                continue;
            };
            let addresses = if unmanaged.contains_key(&id) {
                Default::default()
            } else {
                let a = cloud::eni_addresses(&self.imds, &mac).await?;
                (
                    a.secondary_ips.into_iter().collect(),
                    a.prefixes.into_iter().collect(),
                )
            };
            view.insert(id, addresses);
        }
        Ok(view)
    }

    fn pool_view(&self) -> View {
        let pool = self.ledger.pool();
        let mut view: View = pool
            .enis()
            .map(|e| {
                let ips = pool
                    .addresses(&e.id)
                    .filter(|(_, slot)| slot.prefix.is_none())
                    .map(|(ip, _)| ip)
                    .collect();
                (e.id.clone(), (ips, pool.prefixes(&e.id).collect()))
            })
            .collect();
        for id in self.growth.unmanaged().keys() {
            view.insert(id.clone(), Default::default());
        }
        view
    }

    /// Makes the pool and the node agree with EC2: ENIs that are gone leave the pool and the
    /// node first (with their table and rules, unless an attached ENI now holds the same device
    /// number), then the primary ENI's addresses are synced, then every attached ENI of ours is
    /// set up (idempotent) and synced. Addresses EC2 no longer has are dropped, assigned or
    /// not: the pod has lost it whatever we do. Runs at startup and whenever IMDS disagrees.
    pub(super) async fn reconcile_with_ec2(&self) -> Result<(), StartupError> {
        let _ec2_ops = self.growth.ec2_ops().await;
        let id = &self.node.identity;
        let attached = self
            .ec2
            .describe_instance_enis(&id.instance_id)
            .await
            .map_err(StartupError::Reconcile)?;
        let primary_id = &id.primary_eni.eni_id;
        let primary = attached
            .iter()
            .find(|e| &e.id == primary_id)
            .ok_or_else(|| StartupError::NoPrimaryEni(primary_id.clone()))?;
        *self.placements.security_groups() = primary.security_groups.clone();

        let (ours, unmanaged): (Vec<&NetworkInterface>, Vec<&NetworkInterface>) = attached
            .iter()
            .partition(|e| &e.id == primary_id || is_ours(e, &id.instance_id));
        // ENIs someone else manages still take slots on the instance (`Daemon::limits`).
        *self.growth.unmanaged() = unmanaged
            .iter()
            .filter_map(|e| Some((e.id.clone(), e.attachment.as_ref()?.device_index)))
            .collect();

        // ENIs the pool holds that the instance no longer has: out before anything is set up,
        // so that tearing one down cannot undo the setup of its successor at the same index.
        let attached_ids: BTreeSet<&str> = ours.iter().map(|e| e.id.as_str()).collect();
        let attached_devices: BTreeSet<u32> = ours
            .iter()
            .filter_map(|e| e.attachment.as_ref().map(|a| a.device_index))
            .collect();
        let gone = self
            .ledger.persist(|pool| {
                let gone: Vec<EniInfo> = pool
                    .enis()
                    .filter(|e| !attached_ids.contains(e.id.as_str()))
                    .cloned()
                    .collect();
                let mut muts = Vec::new();
                for eni in &gone {
                    if let Ok((dropped, m)) = pool.remove_eni(&eni.id, Removal::Force) {
                        if !dropped.is_empty() {
                            self.metrics.force_removed_eni();
                            self.metrics.force_removed_ips(dropped.len() as u64);
                        }
                        for a in &dropped {
                            error!(eni = %eni.id, ip = %a.ip, attachment = %a.key, "ENI detached in EC2: its pod has lost its address");
                        }
                        muts.extend(m);
                    }
                }
                Ok::<_, PersistError>((gone, muts))
            })
            .await?;
        for eni in gone {
            self.metrics.reconcile("eniReconcileDel");
            info!(eni = %eni.id, device = eni.device_number, "ENI no longer attached: removed from the pool");
            let keep_table = attached_devices.contains(&eni.device_number);
            match self
                .host
                .teardown_eni(eni.device_number, eni.primary_ip, keep_table)
                .await
            {
                Ok(changes) => super::log_changes(&format!("teardown of ENI {}", eni.id), &changes),
                Err(e) => {
                    error!(eni = %eni.id, error = %e, "removing the ENI's table and rules failed")
                }
            }
        }

        // The primary ENI: its record and what it holds.
        let now = self.clock.now();
        self.ledger
            .persist(|pool| {
                let created_at = pool.eni(primary_id).map_or(now, |e| e.created_at);
                let mut muts = pool.upsert_eni(EniInfo {
                    id: primary_id.clone(),
                    device_number: 0,
                    mac: id.primary_eni.mac.clone(),
                    primary_ip: id.primary_ip,
                    subnet_id: id.primary_eni.subnet_id.clone(),
                    subnet_cidr: id.primary_eni.subnet_cidr,
                    created_at,
                });
                muts.extend(sync_eni(pool, primary));
                Ok::<_, PersistError>(((), muts))
            })
            .await?;
        if self.node.ip_family.has_v6() {
            self.sync_prefixes6(primary).await?;
        }

        // Secondary ENIs of ours: set up on the node, then synced.
        for eni in ours.iter().filter(|e| &e.id != primary_id) {
            let Some(device) = eni.attachment.as_ref().map(|a| a.device_index) else {
                continue;
            };
            let Some(cidr) = self.subnet_cidr_of(eni).await else {
                warn!(eni = %eni.id, subnet = %eni.subnet_id, "subnet CIDR not known yet; the ENI waits for the next reconciliation");
                continue;
            };
            let known = self.ledger.pool().eni(&eni.id).is_some();
            match self.configure_eni(eni, device, cidr).await {
                Ok(()) if !known => self.metrics.reconcile("eniReconcileAdd"),
                Ok(()) => {}
                Err(e) => {
                    error!(eni = %eni.id, device, error = %e, "setting up an attached ENI failed")
                }
            }
        }
        self.log_pool_stats();
        Ok(())
    }

    /// The subnet CIDR of an ENI: known from the pool, the primary's when in the same subnet,
    /// else read from IMDS (which may not list a new ENI yet).
    pub(super) async fn subnet_cidr_of(
        &self,
        eni: &NetworkInterface,
    ) -> Option<ipnetwork::Ipv4Network> {
        if let Some(known) = self.ledger.pool().eni(&eni.id).map(|e| e.subnet_cidr) {
            return Some(known);
        }
        let primary = &self.node.identity.primary_eni;
        if eni.subnet_id == primary.subnet_id {
            return Some(primary.subnet_cidr);
        }
        cloud::eni_metadata(&self.imds, &eni.mac)
            .await
            .ok()
            .map(|m| m.subnet_cidr)
    }
}

/// ENI id -> its secondary /32s and its prefixes.
type View = BTreeMap<String, (BTreeSet<Ipv4Addr>, BTreeSet<Ipv4Network>)>;
