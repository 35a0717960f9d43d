//! Reconciliation: the pool and the node's network against what EC2 says the instance holds.
//! Cheap when nothing changed (IMDS only); EC2 is asked, and is the truth, on any mismatch.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use cloud::{CloudError, Ec2, Imds, NetworkInterface};
use ipnetwork::Ipv4Network;
use pool::{EniInfo, Mutation, StateStore};
use tracing::{debug, error, info, warn};

use super::grow::{TAG_INSTANCE_ID, eni_description};
use super::{Daemon, StartupError, lock};
use crate::host::HostNetwork;
use crate::retry::retry_transient;

const MACS: &str = "meta-data/network/interfaces/macs/";

/// True for an ENI vpc-cni manages on `instance_id`: created for it (the description the Go CNI
/// uses too) or tagged for it.
fn is_ours(eni: &NetworkInterface, instance_id: &str) -> bool {
    eni.description == eni_description(instance_id)
        || eni
            .tags
            .get(TAG_INSTANCE_ID)
            .is_some_and(|v| v == instance_id)
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: StateStore + 'static> Daemon<E, I, H, S> {
    /// The periodic check: the ENIs IMDS lists, with their addresses and prefixes, against
    /// the pool's (and the unmanaged ENIs last seen); EC2 is asked only when they differ.
    pub async fn reconcile(&self) {
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
        if let Err(e) = self.reconcile_with_ec2().await {
            warn!("reconciliation failed: {e}");
        }
    }

    /// ENI id -> (secondary /32s, prefixes), as IMDS shows them. Unmanaged ENIs are listed
    /// without addresses: only their presence matters.
    async fn imds_view(&self) -> Result<View, CloudError> {
        let macs = self.imds.get(MACS).await?.unwrap_or_default();
        let unmanaged = lock(&self.unmanaged).clone();
        let mut view = View::new();
        for mac in macs
            .lines()
            .map(|l| l.trim().trim_end_matches('/'))
            .filter(|l| !l.is_empty())
        {
            let base = format!("{MACS}{mac}");
            let Some(id) = self.imds.get(&format!("{base}/interface-id")).await? else {
                continue;
            };
            let id = id.trim().to_string();
            if unmanaged.contains(&id) {
                view.insert(id, Default::default());
                continue;
            }
            let ips = self
                .imds
                .get(&format!("{base}/local-ipv4s"))
                .await?
                .unwrap_or_default();
            let prefixes = self
                .imds
                .get(&format!("{base}/ipv4-prefix"))
                .await?
                .unwrap_or_default();
            view.insert(
                id,
                (
                    // IMDS lists the ENI's own address first.
                    ips.lines()
                        .skip(1)
                        .filter_map(|l| l.trim().parse().ok())
                        .collect(),
                    prefixes
                        .lines()
                        .filter_map(|l| l.trim().parse().ok())
                        .collect(),
                ),
            );
        }
        Ok(view)
    }

    fn pool_view(&self) -> View {
        let pool = lock(&self.pool);
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
        for id in lock(&self.unmanaged).iter() {
            view.insert(id.clone(), Default::default());
        }
        view
    }

    /// Makes the pool and the node agree with EC2: ENIs of ours that are attached are set up
    /// and their addresses synced (addresses EC2 no longer has are dropped, assigned or not:
    /// the pod has lost it whatever we do); ENIs that are gone leave the pool and the node, with
    /// their table and rules. Runs at startup and whenever IMDS disagrees.
    pub(super) async fn reconcile_with_ec2(&self) -> Result<(), StartupError> {
        let _ec2_ops = self.ec2_ops.lock().await;
        let id = &self.node.identity;
        let attached = retry_transient("DescribeNetworkInterfaces", || {
            self.ec2.describe_instance_enis(&id.instance_id)
        })
        .await
        .map_err(StartupError::Reconcile)?;
        let primary_id = &id.primary_eni.eni_id;
        let primary = attached
            .iter()
            .find(|e| &e.id == primary_id)
            .ok_or_else(|| StartupError::NoPrimaryEni(primary_id.clone()))?;
        *lock(&self.security_groups) = primary.security_groups.clone();

        let (ours, unmanaged): (Vec<&NetworkInterface>, Vec<&NetworkInterface>) = attached
            .iter()
            .partition(|e| &e.id == primary_id || is_ours(e, &id.instance_id));
        *lock(&self.unmanaged) = unmanaged.iter().map(|e| e.id.clone()).collect();
        {
            // ENIs someone else manages still take slots on the instance.
            let base = self.node.max_eni.map_or(self.node.instance.max_enis, |m| {
                m.min(self.node.instance.max_enis)
            });
            lock(&self.limits).max_enis = base.saturating_sub(unmanaged.len() as u32).max(1);
        }

        // The primary ENI: its record and addresses.
        let seq = {
            let mut pool = lock(&self.pool);
            let created_at = pool
                .eni(primary_id)
                .map_or_else(|| self.clock.now(), |e| e.created_at);
            let mut muts = pool.upsert_eni(EniInfo {
                id: primary_id.clone(),
                device_number: 0,
                mac: id.primary_eni.mac.clone(),
                primary_ip: id.primary_ip,
                subnet_id: id.primary_eni.subnet_id.clone(),
                subnet_cidr: id.primary_eni.subnet_cidr,
                created_at,
            });
            muts.extend(sync_addresses(
                &mut pool,
                primary_id,
                &primary.secondary_ips,
            ));
            self.durable.apply(&muts)?
        };
        self.durable.wait(seq).await?;

        // Secondary ENIs of ours: set up on the node (idempotent), then addresses synced.
        for eni in ours.iter().filter(|e| &e.id != primary_id) {
            let Some(device) = eni.attachment.as_ref().map(|a| a.device_index) else {
                continue;
            };
            let Some(cidr) = self.subnet_cidr_of(eni).await else {
                warn!(eni = %eni.id, subnet = %eni.subnet_id, "subnet CIDR not known yet; the ENI waits for the next reconciliation");
                continue;
            };
            if let Err(e) = self.configure_eni(eni, device, cidr).await {
                error!(eni = %eni.id, device, error = %e, "setting up an attached ENI failed");
                continue;
            }
            let seq = {
                let mut pool = lock(&self.pool);
                let mut muts = sync_addresses(&mut pool, &eni.id, &eni.secondary_ips);
                muts.extend(sync_prefixes(&mut pool, &eni.id, &eni.prefixes));
                self.durable.apply(&muts)?
            };
            self.durable.wait(seq).await?;
        }

        // ENIs the pool holds that the instance no longer has.
        let attached_ids: BTreeSet<&str> = ours.iter().map(|e| e.id.as_str()).collect();
        let (gone, seq) = {
            let mut pool = lock(&self.pool);
            let gone: Vec<EniInfo> = pool
                .enis()
                .filter(|e| !attached_ids.contains(e.id.as_str()))
                .cloned()
                .collect();
            let mut muts = Vec::new();
            for eni in &gone {
                if let Ok((dropped, m)) = pool.remove_eni(&eni.id, true) {
                    for a in &dropped {
                        error!(eni = %eni.id, ip = %a.ip, attachment = %a.key, "ENI detached in EC2: its pod has lost its address");
                    }
                    muts.extend(m);
                }
            }
            (gone, self.durable.apply(&muts)?)
        };
        self.durable.wait(seq).await?;
        for eni in gone {
            info!(eni = %eni.id, device = eni.device_number, "ENI no longer attached: removed from the pool");
            match self
                .host
                .teardown_eni(eni.device_number, eni.primary_ip)
                .await
            {
                Ok(changes) => super::log_changes(&format!("teardown of ENI {}", eni.id), &changes),
                Err(e) => {
                    error!(eni = %eni.id, error = %e, "removing the ENI's table and rules failed")
                }
            }
        }
        self.log_pool_stats();
        Ok(())
    }

    /// The subnet CIDR of an ENI: known from the pool, the primary's when in the same subnet,
    /// else read from IMDS (which may not list a new ENI yet).
    async fn subnet_cidr_of(&self, eni: &NetworkInterface) -> Option<ipnetwork::Ipv4Network> {
        if let Some(known) = lock(&self.pool).eni(&eni.id).map(|e| e.subnet_cidr) {
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

/// Mutations making the pool's prefixes on `eni_id` equal to `ec2_prefixes`.
fn sync_prefixes(
    pool: &mut pool::Pool,
    eni_id: &str,
    ec2_prefixes: &[Ipv4Network],
) -> Vec<Mutation> {
    let ec2: BTreeSet<Ipv4Network> = ec2_prefixes.iter().copied().collect();
    let held: BTreeSet<Ipv4Network> = pool.prefixes(eni_id).collect();
    let mut muts = Vec::new();
    for prefix in held.difference(&ec2) {
        if let Ok((taken, m)) = pool.remove_prefix(*prefix, true) {
            for a in taken {
                error!(ip = %a.ip, %prefix, eni = eni_id, attachment = %a.key, "prefix of a live attachment is no longer on its ENI in EC2; dropped");
            }
            muts.extend(m);
        }
    }
    let missing: Vec<Ipv4Network> = ec2.difference(&held).copied().collect();
    if !missing.is_empty() {
        info!(
            count = missing.len(),
            eni = eni_id,
            "adopted prefixes EC2 holds on the ENI"
        );
        match pool.add_prefixes(eni_id, &missing) {
            Ok(m) => muts.extend(m),
            Err(e) => warn!(eni = eni_id, error = %e, "could not adopt prefixes"),
        }
    }
    muts
}

/// Mutations making the pool's secondary /32s on `eni_id` equal to `ec2_ips` (addresses of
/// prefixes are the prefixes' business).
fn sync_addresses(pool: &mut pool::Pool, eni_id: &str, ec2_ips: &[Ipv4Addr]) -> Vec<Mutation> {
    let ec2: BTreeSet<Ipv4Addr> = ec2_ips.iter().copied().collect();
    let held: BTreeSet<Ipv4Addr> = pool
        .addresses(eni_id)
        .filter(|(_, slot)| slot.prefix.is_none())
        .map(|(ip, _)| ip)
        .collect();
    let mut muts = Vec::new();
    for ip in held.difference(&ec2) {
        if let Ok((taken, m)) = pool.remove_address(*ip, true) {
            match taken {
                Some(a) => {
                    error!(ip = %ip, eni = eni_id, attachment = %a.key, "address of a live attachment is no longer on its ENI in EC2; dropped")
                }
                None => {
                    info!(ip = %ip, eni = eni_id, "dropped address EC2 no longer has on the ENI")
                }
            }
            muts.extend(m);
        }
    }
    let missing: Vec<Ipv4Addr> = ec2.difference(&held).copied().collect();
    if !missing.is_empty() {
        info!(
            count = missing.len(),
            eni = eni_id,
            "adopted addresses EC2 holds on the ENI"
        );
        match pool.add_addresses(eni_id, &missing) {
            Ok(m) => muts.extend(m),
            Err(e) => warn!(eni = eni_id, error = %e, "could not adopt addresses"),
        }
    }
    muts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_by_description_or_tag() {
        let mut eni = NetworkInterface {
            description: "aws-K8S-i-1".into(),
            ..Default::default()
        };
        assert!(is_ours(&eni, "i-1"));
        assert!(!is_ours(&eni, "i-2"));
        eni.description = "someone else's".into();
        assert!(!is_ours(&eni, "i-1"));
        eni.tags.insert(TAG_INSTANCE_ID.into(), "i-1".into());
        assert!(is_ours(&eni, "i-1"));
    }
}
