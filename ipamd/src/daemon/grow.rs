//! Growing the pool: the plan's actions carried out through EC2 and the node's network.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::{Duration, SystemTime};

use cloud::{CloudError, CloudErrorKind, CreateEni, Ec2, Imds, NetworkInterface};
use ipnetwork::Ipv4Network;
use netops::EniSpec;
use pool::{Action, EniInfo, Mutation, PlanContext, StateStore, Timestamp};
use tracing::{debug, error, info, warn};

use super::{Daemon, SUBNET_FULL_PAUSE, lock};
use crate::host::{HostError, HostNetwork};
use crate::retry::retry_transient;

/// Actions carried out in one controller round at most; the next round follows shortly.
const ACTIONS_PER_ROUND: usize = 4;

/// How long a hot-plugged ENI's link may take to appear before setup gives up for now (the
/// reconciliation adopts the ENI later).
const LINK_WAIT: Duration = Duration::from_secs(15);

/// Tag keys the Go CNI puts on the ENIs it creates; tools look for them.
pub const TAG_INSTANCE_ID: &str = "node.k8s.amazonaws.com/instance_id";
/// See [`TAG_INSTANCE_ID`].
pub const TAG_CREATED_AT: &str = "node.k8s.amazonaws.com/createdAt";
/// The cluster an ENI belongs to (with CLUSTER_NAME).
pub const TAG_CLUSTER: &str = "cluster.k8s.amazonaws.com/name";
/// Set with [`TAG_CLUSTER`].
pub const TAG_OWNER: &str = "eks:eni:owner";

/// The description that marks an ENI as created by vpc-cni (or aws-node) for `instance_id`.
pub fn eni_description(instance_id: &str) -> String {
    format!("aws-K8S-{instance_id}")
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: StateStore + 'static> Daemon<E, I, H, S> {
    /// The plan for now.
    pub(super) fn current_plan(&self, now: Timestamp) -> pool::Plan {
        let ctx = PlanContext {
            now,
            last_release: lock(&self.growth).last_release,
        };
        pool::plan(&lock(&self.pool), &self.limits(), &self.node.targets, ctx)
    }

    /// One round of the controller: plans and carries out what the pool needs from EC2,
    /// planning again after each growth step (the plan holds one at a time).
    pub async fn grow(&self) {
        let _ec2_ops = self.ec2_ops.lock().await;
        for _ in 0..ACTIONS_PER_ROUND {
            let now = self.clock.now();
            let plan = self.current_plan(now);
            lock(&self.growth).blocked = plan.blocked;
            if let Some(blocked) = plan.blocked {
                debug!("pool below target but cannot grow: {blocked}");
            }
            let paused_until = lock(&self.growth).paused_until;
            let paused = paused_until.is_some_and(|u| now < u);
            let mut releases = Vec::new();
            let mut progressed = false;
            for action in plan.actions {
                match action {
                    a if a.is_release() => releases.push(a),
                    _ if paused => {
                        debug!("pool growth paused");
                    }
                    Action::AssignIps { eni_id, count } => {
                        progressed = self.assign_ips(&eni_id, count).await;
                    }
                    Action::AssignPrefixes { eni_id, count } => {
                        progressed = self.assign_prefixes(&eni_id, count).await;
                    }
                    Action::CreateEni { ips, prefixes } => {
                        progressed = self.create_eni(ips, prefixes).await;
                    }
                    Action::FreeEni { eni_id } => {
                        progressed = self.free_eni(&eni_id).await;
                    }
                    Action::ReleaseIps { .. } | Action::ReleasePrefixes { .. } => {}
                }
            }
            if !releases.is_empty() {
                self.release(releases, now).await;
                progressed = true;
            }
            if !progressed {
                return;
            }
        }
    }

    /// Adds addresses EC2 assigned to an ENI to the pool and persists them.
    async fn adopt_addresses(&self, eni_id: &str, ips: Vec<Ipv4Addr>) -> Result<(), String> {
        let seq = {
            let mut pool = lock(&self.pool);
            let own = pool.eni(eni_id).map(|e| e.primary_ip);
            // Some EC2 implementations list every address of the ENI, not only the new ones.
            let new: Vec<Ipv4Addr> = ips
                .into_iter()
                .filter(|ip| Some(*ip) != own)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let muts = pool
                .add_addresses(eni_id, &new)
                .map_err(|e| e.to_string())?;
            self.durable.apply(&muts).map_err(|e| e.to_string())?
        };
        self.durable.wait(seq).await.map_err(|e| e.to_string())?;
        self.grown.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Adds prefixes EC2 delegated to an ENI to the pool (those it holds already are skipped).
    async fn adopt_prefixes(&self, eni_id: &str, prefixes: &[Ipv4Network]) -> Result<(), String> {
        let seq = {
            let mut pool = lock(&self.pool);
            let held: BTreeSet<Ipv4Network> = pool.prefixes(eni_id).collect();
            let new: Vec<Ipv4Network> = prefixes
                .iter()
                .filter(|p| !held.contains(p))
                .copied()
                .collect();
            if new.is_empty() {
                return Ok(());
            }
            let muts = pool.add_prefixes(eni_id, &new).map_err(|e| e.to_string())?;
            self.durable.apply(&muts).map_err(|e| e.to_string())?
        };
        self.durable.wait(seq).await.map_err(|e| e.to_string())?;
        self.grown.send_modify(|n| *n += 1);
        Ok(())
    }

    async fn assign_prefixes(&self, eni_id: &str, count: u32) -> bool {
        match self.ec2.assign_ipv4_prefixes(eni_id, count).await {
            Ok(prefixes) => match self.adopt_prefixes(eni_id, &prefixes).await {
                Ok(()) => {
                    self.growth_succeeded();
                    self.log_pool_stats();
                    true
                }
                Err(e) => {
                    error!(eni = eni_id, error = %e, "EC2 delegated prefixes the pool could not keep");
                    false
                }
            },
            Err(e) => {
                self.growth_failed(&format!("delegating prefixes to {eni_id}"), e);
                false
            }
        }
    }

    /// Gives addresses and prefixes above target back to EC2. Each leaves the pool first (and
    /// is skipped if an ADD took it since the plan), so nothing a pod holds is ever released.
    async fn release(&self, actions: Vec<Action>, now: Timestamp) {
        lock(&self.growth).last_release = Some(now);
        for action in actions {
            match action {
                Action::ReleaseIps { eni_id, ips } => {
                    let gone = self
                        .take_from_pool(ips, |pool, ip| {
                            pool.remove_address(ip, false).map(|(_, m)| m)
                        })
                        .await;
                    if gone.is_empty() {
                        continue;
                    }
                    match self.ec2.unassign_private_ips(&eni_id, &gone).await {
                        Ok(()) => {
                            info!(eni = %eni_id, count = gone.len(), "released addresses above target")
                        }
                        // Still on the ENI in EC2: the next reconciliation adopts them again.
                        Err(e) => {
                            warn!(eni = %eni_id, error = %e, "UnassignPrivateIpAddresses failed")
                        }
                    }
                }
                Action::ReleasePrefixes { eni_id, prefixes } => {
                    let gone = self
                        .take_from_pool(prefixes, |pool, p| {
                            pool.remove_prefix(p, false).map(|(_, m)| m)
                        })
                        .await;
                    if gone.is_empty() {
                        continue;
                    }
                    match self.ec2.unassign_ipv4_prefixes(&eni_id, &gone).await {
                        Ok(()) => {
                            info!(eni = %eni_id, count = gone.len(), "released prefixes above target")
                        }
                        Err(e) => warn!(eni = %eni_id, error = %e, "unassigning prefixes failed"),
                    }
                }
                _ => {}
            }
        }
        self.log_pool_stats();
    }

    /// Removes each item the pool still lets go of (not assigned, not cooling) and persists
    /// that; returns the ones removed.
    async fn take_from_pool<T: Copy + std::fmt::Display>(
        &self,
        items: Vec<T>,
        remove: impl Fn(&mut pool::Pool, T) -> Result<Vec<Mutation>, pool::PoolError>,
    ) -> Vec<T> {
        let (gone, seq) = {
            let mut pool = lock(&self.pool);
            let mut gone = Vec::new();
            let mut muts = Vec::new();
            for item in items {
                match remove(&mut pool, item) {
                    Ok(m) => {
                        gone.push(item);
                        muts.extend(m);
                    }
                    Err(e) => debug!(%item, error = %e, "not releasing: taken since the plan"),
                }
            }
            match self.durable.apply(&muts) {
                Ok(seq) => (gone, seq),
                Err(e) => {
                    error!(error = %e, "could not persist a release; keeping the addresses");
                    return Vec::new();
                }
            }
        };
        if let Err(e) = self.durable.wait(seq).await {
            error!(error = %e, "could not persist a release");
        }
        gone
    }

    /// Frees an ENI that holds nothing for pods: out of the pool, its table and rules off the
    /// node, detached, deleted.
    async fn free_eni(&self, eni_id: &str) -> bool {
        let (info, seq) = {
            let mut pool = lock(&self.pool);
            let Some(info) = pool.eni(eni_id).cloned() else {
                return false;
            };
            match pool.remove_eni(eni_id, false) {
                Ok((_, muts)) => match self.durable.apply(&muts) {
                    Ok(seq) => (info, seq),
                    Err(e) => {
                        error!(eni = eni_id, error = %e, "could not persist freeing an ENI");
                        return false;
                    }
                },
                Err(e) => {
                    debug!(eni = eni_id, error = %e, "not freeing: in use since the plan");
                    return false;
                }
            }
        };
        if let Err(e) = self.durable.wait(seq).await {
            error!(eni = eni_id, error = %e, "could not persist freeing an ENI");
        }
        match self
            .host
            .teardown_eni(info.device_number, info.primary_ip)
            .await
        {
            Ok(changes) => super::log_changes(&format!("teardown of ENI {eni_id}"), &changes),
            Err(e) => error!(eni = eni_id, error = %e, "removing the ENI's table and rules failed"),
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
        if let Some(attachment) = attachment
            && let Err(e) = self.ec2.detach_network_interface(&attachment).await
        {
            warn!(eni = eni_id, error = %e, "detaching failed; reconciliation will adopt it again");
            return true;
        }
        // Detaching takes EC2 a moment; deleting too early answers InUse.
        let mut pause = Duration::from_millis(200);
        for attempt in 1..=8 {
            match self.ec2.delete_network_interface(eni_id).await {
                Ok(()) => break,
                Err(e) if e.kind == CloudErrorKind::NotFound => break,
                Err(e) if attempt == 8 => {
                    warn!(eni = eni_id, error = %e, "could not delete the detached ENI; leaked-ENI cleanup will");
                }
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
            }
        }
        info!(eni = eni_id, device = info.device_number, "freed ENI");
        self.log_pool_stats();
        true
    }

    async fn assign_ips(&self, eni_id: &str, count: u32) -> bool {
        match self.ec2.assign_private_ips(eni_id, count).await {
            Ok(ips) => match self.adopt_addresses(eni_id, ips).await {
                Ok(()) => {
                    self.growth_succeeded();
                    true
                }
                Err(e) => {
                    error!(eni = eni_id, error = %e, "EC2 assigned addresses the pool could not keep");
                    false
                }
            },
            Err(e) => {
                self.growth_failed(&format!("assigning addresses to {eni_id}"), e);
                false
            }
        }
    }

    /// Creates an ENI with `ips` secondary addresses, attaches it at the lowest free device
    /// index, makes it go with the instance, configures its link, table and rule, and only
    /// then offers its addresses to pods.
    async fn create_eni(&self, ips: u32, prefixes: u32) -> bool {
        let id = &self.node.identity;
        let created_at = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
        let request = CreateEni {
            subnet_id: id.primary_eni.subnet_id.clone(),
            description: eni_description(&id.instance_id),
            security_groups: lock(&self.security_groups).clone(),
            secondary_ips: ips,
            ipv4_prefixes: prefixes,
            tags: self.eni_tags(created_at),
        };
        let eni = match self.ec2.create_network_interface(&request).await {
            Ok(eni) => eni,
            Err(e) => {
                self.growth_failed("creating an ENI", e);
                return false;
            }
        };
        let device = match self.free_device_index().await {
            Ok(d) => d,
            Err(e) => {
                self.delete_unattached(&eni.id).await;
                self.growth_failed("finding a free device index", e);
                return false;
            }
        };
        let attachment = match self
            .ec2
            .attach_network_interface(&eni.id, &id.instance_id, device)
            .await
        {
            Ok(a) => a,
            Err(e) => {
                self.delete_unattached(&eni.id).await;
                self.growth_failed(&format!("attaching {} at device {device}", eni.id), e);
                return false;
            }
        };
        if let Err(e) = retry_transient("ModifyNetworkInterfaceAttribute", || {
            self.ec2.set_delete_on_termination(&eni.id, &attachment)
        })
        .await
        {
            // Attached but would outlive the instance: give it back rather than risk a leak.
            warn!(eni = %eni.id, error = %e, "DeleteOnTermination could not be set; freeing the ENI");
            if self.ec2.detach_network_interface(&attachment).await.is_ok() {
                self.delete_unattached(&eni.id).await;
            }
            self.growth_failed(&format!("setting DeleteOnTermination on {}", eni.id), e);
            return false;
        }
        info!(
            eni = %eni.id, device, ips = eni.secondary_ips.len(), prefixes = eni.prefixes.len(),
            "created and attached ENI"
        );
        match self
            .configure_eni(&eni, device, self.node.identity.primary_eni.subnet_cidr)
            .await
        {
            Ok(()) => {
                self.growth_succeeded();
                self.log_pool_stats();
                true
            }
            Err(e) => {
                // Attached and ours: the reconciliation adopts it once its link is usable.
                error!(eni = %eni.id, error = %e, "the new ENI could not be set up on the node");
                self.record_growth_error(format!(
                    "setting up ENI {} on the node failed: {e}",
                    eni.id
                ));
                false
            }
        }
    }

    /// The tags of a new ENI, as the Go CNI sets them: instance, creation time, the cluster's
    /// tags when CLUSTER_NAME is set, then ADDITIONAL_ENI_TAGS (reserved keys already removed).
    fn eni_tags(&self, created_at: String) -> BTreeMap<String, String> {
        let mut tags = BTreeMap::from([
            (
                TAG_INSTANCE_ID.to_string(),
                self.node.identity.instance_id.clone(),
            ),
            (TAG_CREATED_AT.to_string(), created_at),
        ]);
        if let Some(cluster) = &self.node.cluster_name {
            tags.insert(TAG_CLUSTER.to_string(), cluster.clone());
            tags.insert(TAG_OWNER.to_string(), "amazon-vpc-cni".to_string());
        }
        for (k, v) in &self.node.extra_tags {
            tags.entry(k.clone()).or_insert_with(|| v.clone());
        }
        tags
    }

    /// Sets up an attached ENI on the node (waiting for its link to appear) and adds it and
    /// its addresses to the pool.
    pub(super) async fn configure_eni(
        &self,
        eni: &NetworkInterface,
        device: u32,
        subnet_cidr: ipnetwork::Ipv4Network,
    ) -> Result<(), String> {
        let primary_ip = eni
            .primary_ip
            .ok_or_else(|| format!("EC2 gave {} no primary address", eni.id))?;
        let mac = netops::parse_mac(&eni.mac)
            .ok_or_else(|| format!("EC2 gave {} the MAC {:?}", eni.id, eni.mac))?;
        let spec = EniSpec {
            mac,
            device_number: device,
            primary_ip,
            subnet: subnet_cidr,
            mtu: self.node.net.mtu,
        };
        let changes = self
            .setup_eni_when_linked(&spec)
            .await
            .map_err(|e| e.to_string())?;
        super::log_changes(&format!("ENI {} (device {device})", eni.id), &changes);
        let seq = {
            let mut pool = lock(&self.pool);
            let created_at = pool
                .eni(&eni.id)
                .map_or_else(|| self.clock.now(), |e| e.created_at);
            let muts = pool.upsert_eni(EniInfo {
                id: eni.id.clone(),
                device_number: device,
                mac: eni.mac.clone(),
                primary_ip,
                subnet_id: eni.subnet_id.clone(),
                subnet_cidr,
                created_at,
            });
            self.durable.apply(&muts).map_err(|e| e.to_string())?
        };
        self.durable.wait(seq).await.map_err(|e| e.to_string())?;
        self.adopt_addresses(&eni.id, eni.secondary_ips.clone())
            .await
    }

    async fn setup_eni_when_linked(&self, spec: &EniSpec) -> Result<Vec<String>, HostError> {
        let deadline = tokio::time::Instant::now() + LINK_WAIT;
        let mut pause = Duration::from_millis(20);
        loop {
            match self.host.setup_eni(spec).await {
                Err(HostError::LinkNotFound(_)) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                other => return other,
            }
        }
    }

    /// The lowest device index no ENI of this instance uses, below the instance's ENI limit.
    async fn free_device_index(&self) -> Result<u32, CloudError> {
        let attached = retry_transient("DescribeNetworkInterfaces", || {
            self.ec2
                .describe_instance_enis(&self.node.identity.instance_id)
        })
        .await?;
        let used: BTreeSet<u32> = attached
            .iter()
            .filter_map(|e| e.attachment.as_ref().map(|a| a.device_index))
            .collect();
        (1..self.node.instance.max_enis.max(1))
            .find(|d| !used.contains(d))
            .ok_or_else(|| {
                CloudError::new(
                    "AttachNetworkInterface",
                    CloudErrorKind::LimitExceeded,
                    format!(
                        "every device index below {} is in use",
                        self.node.instance.max_enis
                    ),
                )
            })
    }

    async fn delete_unattached(&self, eni_id: &str) {
        if let Err(e) = self.ec2.delete_network_interface(eni_id).await {
            warn!(eni = eni_id, error = %e, "could not delete an ENI that failed to attach; leaked-ENI cleanup will");
        }
    }

    fn growth_succeeded(&self) {
        let mut growth = lock(&self.growth);
        growth.last_error = None;
        growth.paused_until = None;
    }

    fn record_growth_error(&self, reason: String) {
        warn!("{reason}");
        lock(&self.growth).last_error = Some(reason);
    }

    fn growth_failed(&self, doing: &str, e: CloudError) {
        let now = self.clock.now();
        let reason = match e.kind {
            CloudErrorKind::SubnetFull => {
                lock(&self.growth).paused_until = Some(now.after(SUBNET_FULL_PAUSE));
                format!(
                    "subnet {} is exhausted ({e}); pausing growth for {}s",
                    self.node.identity.primary_eni.subnet_id,
                    SUBNET_FULL_PAUSE.as_secs()
                )
            }
            CloudErrorKind::Throttled => format!("EC2 is throttling ({doing}: {e})"),
            CloudErrorKind::LimitExceeded => format!("an instance limit was hit ({doing}: {e})"),
            CloudErrorKind::Unauthorized => {
                format!("the node's IAM role lacks a permission ({doing}: {e})")
            }
            _ => format!("{doing} failed ({e})"),
        };
        self.record_growth_error(reason);
    }

    /// Whether the pool could grow now, or why not.
    pub(super) fn can_grow(&self, now: Timestamp) -> Result<(), String> {
        let growth = lock(&self.growth).clone();
        if let Some(until) = growth.paused_until.filter(|u| now < *u) {
            return Err(format!(
                "{} (resumes in {}s)",
                growth.last_error.as_deref().unwrap_or("growth paused"),
                now.until(until).as_secs()
            ));
        }
        match self.current_plan(now).blocked {
            Some(blocked) => Err(blocked.to_string()),
            None => Ok(()),
        }
    }

    /// The last growth failure, if the latest attempt failed.
    pub(super) fn last_growth_error(&self) -> Option<String> {
        lock(&self.growth).last_error.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    #[test]
    fn the_description_marks_our_enis_as_the_go_cni_does() {
        assert_eq!(eni_description("i-0abc"), "aws-K8S-i-0abc");
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let t =
            humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(86_400)).to_string();
        assert_eq!(t, "1970-01-02T00:00:00Z");
    }
}
