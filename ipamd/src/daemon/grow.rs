//! Growing and shrinking the pool: the plan's actions carried out through EC2 and the node's
//! network.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cloud::{CloudError, CloudErrorKind, CreateEni, Ec2, Imds, NetworkInterface};
use ipnetwork::Ipv4Network;
use netops::EniSpec;
use pool::{Action, Blocked, EniInfo, Mutation, PlanContext, Pool, Removal, StateStore, Timestamp};
use tracing::{debug, error, info, warn};

use super::{Daemon, SUBNET_FULL_PAUSE, lock};
use crate::durability::PersistError;
use crate::host::{HostError, HostNetwork};

/// Actions carried out in one controller round at most; the next round follows shortly.
const ACTIONS_PER_ROUND: usize = 4;

/// How long a hot-plugged ENI's link may take to appear before setup gives up for now (the
/// reconciliation adopts the ENI later).
const LINK_WAIT: Duration = Duration::from_secs(15);

/// Growth pauses this long after a new ENI's link did not appear, so a node whose ENIs never
/// show up does not create one ENI after another.
const LINK_FAILURE_PAUSE: Duration = Duration::from_secs(30);

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

/// Wall time of a pool timestamp.
pub(super) fn wall_time(t: Timestamp) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(t.millis())
}

/// What a growth step asks EC2 for on an existing ENI.
#[derive(Clone, Copy, Debug)]
enum More {
    Ips(u32),
    Prefixes(u32),
}

/// Adds the addresses and prefixes the pool lacks on `eni_id`, each on its own so that one
/// the pool refuses (held elsewhere after a race, say) does not keep the others out.
fn adopt(
    pool: &mut Pool,
    eni_id: &str,
    ips: &[Ipv4Addr],
    prefixes: &[Ipv4Network],
) -> Vec<Mutation> {
    let own = pool.eni(eni_id).map(|e| e.primary_ip);
    let held: BTreeSet<Ipv4Addr> = pool.addresses(eni_id).map(|(ip, _)| ip).collect();
    let held_prefixes: BTreeSet<Ipv4Network> = pool.prefixes(eni_id).collect();
    let mut muts = Vec::new();
    // Some EC2 implementations list every address of the ENI, not only the new ones.
    for ip in ips
        .iter()
        .filter(|ip| Some(**ip) != own && !held.contains(ip))
    {
        match pool.add_addresses(eni_id, &[*ip]) {
            Ok(m) => muts.extend(m),
            Err(e) => warn!(eni = eni_id, %ip, error = %e, "not adopting an address"),
        }
    }
    for prefix in prefixes.iter().filter(|p| !held_prefixes.contains(p)) {
        match pool.add_prefixes(eni_id, &[*prefix]) {
            Ok(m) => muts.extend(m),
            Err(e) => warn!(eni = eni_id, %prefix, error = %e, "not adopting a prefix"),
        }
    }
    muts
}

/// Mutations making the pool's /32s and prefixes on `eni` what EC2 says it holds: what EC2 no
/// longer has is dropped whatever its state (a pod holding it has lost it; said loudly), what
/// it has is adopted.
pub(super) fn sync_eni(pool: &mut Pool, eni: &NetworkInterface) -> Vec<Mutation> {
    let ips: BTreeSet<Ipv4Addr> = eni.secondary_ips.iter().copied().collect();
    let prefixes: BTreeSet<Ipv4Network> = eni.prefixes.iter().copied().collect();
    let mut muts = Vec::new();
    let stale: Vec<Ipv4Addr> = pool
        .addresses(&eni.id)
        .filter(|(ip, slot)| slot.prefix.is_none() && !ips.contains(ip))
        .map(|(ip, _)| ip)
        .collect();
    for ip in stale {
        if let Ok((taken, m)) = pool.remove_address(ip, Removal::Force) {
            match taken {
                Some(a) => {
                    error!(%ip, eni = %eni.id, attachment = %a.key, "address of a live attachment is no longer on its ENI in EC2; dropped")
                }
                None => info!(%ip, eni = %eni.id, "dropped address EC2 no longer has on the ENI"),
            }
            muts.extend(m);
        }
    }
    let stale: Vec<Ipv4Network> = pool
        .prefixes(&eni.id)
        .filter(|p| !prefixes.contains(p))
        .collect();
    for prefix in stale {
        if let Ok((taken, m)) = pool.remove_prefix(prefix, Removal::Force) {
            for a in taken {
                error!(ip = %a.ip, %prefix, eni = %eni.id, attachment = %a.key, "prefix of a live attachment is no longer on its ENI in EC2; dropped");
            }
            muts.extend(m);
        }
    }
    muts.extend(adopt(pool, &eni.id, &eni.secondary_ips, &eni.prefixes));
    muts
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
    /// planning again after each step (the plan holds one growth step at a time).
    pub async fn grow(&self) {
        let _ec2_ops = self.ec2_ops.lock().await;
        let _busy = self.metrics.action_in_progress("increaseDatastorePool");
        for _ in 0..ACTIONS_PER_ROUND {
            let now = self.clock.now();
            let plan = self.current_plan(now);
            match plan.blocked {
                // The Go CNI's wording, which operators grep for.
                Some(Blocked::MaxEnis { .. }) => {
                    debug!("Skipping ENI allocation as the max ENI limit is already reached")
                }
                Some(blocked) => debug!("pool below target but cannot grow: {blocked}"),
                None => {}
            }
            let paused = lock(&self.growth).paused_until.is_some_and(|u| now < u);
            let mut releases = Vec::new();
            let mut progressed = false;
            for action in plan.actions {
                match action {
                    a if a.is_release() => releases.push(a),
                    a if paused && a.is_growth() => debug!(?a, "pool growth paused"),
                    Action::AssignIps { eni_id, count } => {
                        progressed = self.assign_more(&eni_id, More::Ips(count)).await;
                    }
                    Action::AssignPrefixes { eni_id, count } => {
                        progressed = self.assign_more(&eni_id, More::Prefixes(count)).await;
                    }
                    Action::CreateEni { ips, prefixes } => {
                        progressed = self.create_eni(ips, prefixes).await;
                    }
                    Action::FreeEni { eni_id } => progressed = self.free_eni(&eni_id).await,
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

    /// Commits `change` and wakes ADDs waiting for addresses when it added any.
    async fn persist_growth(
        &self,
        change: impl FnOnce(&mut Pool) -> Vec<Mutation>,
    ) -> Result<(), PersistError> {
        let added = self
            .persist(|pool| {
                let muts = change(pool);
                let added = muts.iter().any(|m| matches!(m, Mutation::PutAddr(_)));
                Ok::<_, PersistError>((added, muts))
            })
            .await?;
        if added {
            self.grown.send_modify(|n| *n += 1);
        }
        Ok(())
    }

    async fn assign_more(&self, eni_id: &str, more: More) -> bool {
        let got = match more {
            More::Ips(n) => self
                .ec2
                .assign_private_ips(eni_id, n)
                .await
                .map(|ips| (ips, Vec::new())),
            More::Prefixes(n) => self
                .ec2
                .assign_ipv4_prefixes(eni_id, n)
                .await
                .map(|prefixes| (Vec::new(), prefixes)),
        };
        match got {
            Ok((ips, prefixes)) => {
                match self
                    .persist_growth(|pool| adopt(pool, eni_id, &ips, &prefixes))
                    .await
                {
                    Ok(()) => {
                        self.growth_succeeded();
                        self.log_pool_stats();
                        true
                    }
                    Err(e) => {
                        error!(eni = eni_id, error = %e, "EC2 gave addresses the store could not keep");
                        false
                    }
                }
            }
            Err(e) => {
                self.metrics
                    .ipamd_error("increaseIPPoolAllocIPAddressesFailed");
                self.growth_failed(&format!("assigning {more:?} to {eni_id}"), e);
                false
            }
        }
    }

    /// The tags of a new ENI, as the Go CNI sets them: instance, creation time, the cluster's
    /// tags when CLUSTER_NAME is set, then ADDITIONAL_ENI_TAGS (reserved keys already removed).
    fn eni_tags(&self) -> BTreeMap<String, String> {
        let created_at = humantime::format_rfc3339_seconds(wall_time(self.clock.now())).to_string();
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

    /// Creates an ENI pre-loaded with `ips` addresses or `prefixes` prefixes, attaches it at
    /// the lowest free device index, makes it go with the instance, configures its link, table
    /// and rule, and only then offers its addresses to pods.
    async fn create_eni(&self, ips: u32, prefixes: u32) -> bool {
        // Checked first: without a free index the ENI would be created only to be deleted.
        let device = match self.free_device_index().await {
            Ok(d) => d,
            Err(e) => {
                self.metrics.ipamd_error("increaseIPPoolAllocENI");
                self.growth_failed("finding a free device index", e);
                return false;
            }
        };
        let id = &self.node.identity;
        let request = CreateEni {
            subnet_id: id.primary_eni.subnet_id.clone(),
            description: eni_description(&id.instance_id),
            security_groups: lock(&self.security_groups).clone(),
            secondary_ips: ips,
            ipv4_prefixes: prefixes,
            tags: self.eni_tags(),
        };
        let eni = match self.ec2.create_network_interface(&request).await {
            Ok(eni) => eni,
            Err(e) => {
                self.metrics.ipamd_error("increaseIPPoolAllocENI");
                self.growth_failed("creating an ENI", e);
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
                self.delete_eni(&eni.id).await;
                self.metrics.ipamd_error("increaseIPPoolAllocENI");
                self.growth_failed(&format!("attaching {} at device {device}", eni.id), e);
                return false;
            }
        };
        if let Err(e) = self
            .ec2
            .set_delete_on_termination(&eni.id, &attachment)
            .await
        {
            // Attached but would outlive the instance: give it back rather than risk a leak.
            warn!(eni = %eni.id, error = %e, "DeleteOnTermination could not be set; freeing the ENI");
            self.detach_and_delete(&eni.id, Some(&attachment)).await;
            self.metrics.ipamd_error("increaseIPPoolAllocENI");
            self.growth_failed(&format!("setting DeleteOnTermination on {}", eni.id), e);
            return false;
        }
        info!(
            eni = %eni.id, device, ips = eni.secondary_ips.len(), prefixes = eni.prefixes.len(),
            "created and attached ENI"
        );
        match self
            .configure_eni(&eni, device, id.primary_eni.subnet_cidr)
            .await
        {
            Ok(()) => {
                self.growth_succeeded();
                self.log_pool_stats();
                true
            }
            Err(e) => {
                // Attached and ours: the reconciliation adopts it once its link is usable.
                // Meanwhile no further ENI: the next would most likely fare no better.
                self.metrics.ipamd_error("increaseIPPoolsetupENIFailed");
                lock(&self.growth).paused_until = Some(self.clock.now().after(LINK_FAILURE_PAUSE));
                self.record_growth_error(format!(
                    "setting up ENI {} on the node failed ({e}); pausing growth for {}s",
                    eni.id,
                    LINK_FAILURE_PAUSE.as_secs()
                ));
                false
            }
        }
    }

    /// Sets up an attached ENI on the node (waiting for its link to appear), then adds it and
    /// what EC2 says it holds to the pool.
    pub(super) async fn configure_eni(
        &self,
        eni: &NetworkInterface,
        device: u32,
        subnet_cidr: Ipv4Network,
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
        let now = self.clock.now();
        self.persist_growth(|pool| {
            let created_at = pool.eni(&eni.id).map_or(now, |e| e.created_at);
            let mut muts = pool.upsert_eni(EniInfo {
                id: eni.id.clone(),
                device_number: device,
                mac: eni.mac.clone(),
                primary_ip,
                subnet_id: eni.subnet_id.clone(),
                subnet_cidr,
                created_at,
            });
            muts.extend(sync_eni(pool, eni));
            muts
        })
        .await
        .map_err(|e| e.to_string())
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

    /// The lowest device index below the instance's ENI limit that no ENI uses: neither one
    /// EC2 lists as attached nor one the pool still holds (a detached ENI's table stays its own
    /// until the reconciliation has removed it).
    async fn free_device_index(&self) -> Result<u32, CloudError> {
        let attached = self
            .ec2
            .describe_instance_enis(&self.node.identity.instance_id)
            .await?;
        let mut used: BTreeSet<u32> = attached
            .iter()
            .filter_map(|e| e.attachment.as_ref().map(|a| a.device_index))
            .collect();
        used.extend(lock(&self.pool).enis().map(|e| e.device_number));
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

    /// Gives addresses and prefixes above target back to EC2. Each leaves the pool first, and
    /// only if it is still neither assigned nor cooling (an ADD and a DEL may have come since
    /// the plan), so nothing a pod holds or held a moment ago is released.
    async fn release(&self, actions: Vec<Action>, now: Timestamp) {
        lock(&self.growth).last_release = Some(now);
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
                        info!(eni = %eni_id, count = gone_ips.len(), "released addresses above target")
                    }
                    Err(e) => {
                        self.metrics.ipamd_error("decreaseIPPool");
                        warn!(eni = %eni_id, error = %e, "UnassignPrivateIpAddresses failed")
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
                        info!(eni = %eni_id, count = gone_prefixes.len(), "released prefixes above target")
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
    async fn free_eni(&self, eni_id: &str) -> bool {
        let now = self.clock.now();
        let freed = self
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

    /// Detaches (when attached) and deletes an ENI, retrying the delete while EC2 is still
    /// detaching it. What cannot be deleted is left to the leaked-ENI cleanup.
    async fn detach_and_delete(&self, eni_id: &str, attachment: Option<&str>) {
        if let Some(attachment) = attachment
            && let Err(e) = self.ec2.detach_network_interface(attachment).await
        {
            warn!(eni = eni_id, error = %e, "detaching failed; the reconciliation will adopt it again");
            return;
        }
        let mut pause = Duration::from_millis(200);
        for attempt in 1..=8 {
            match self.ec2.delete_network_interface(eni_id).await {
                Ok(()) => return,
                Err(e) if e.kind == CloudErrorKind::NotFound => return,
                Err(e) if attempt == 8 => {
                    warn!(eni = eni_id, error = %e, "could not delete the detached ENI; leaked-ENI cleanup will");
                }
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// Deletes an ENI that never got attached.
    async fn delete_eni(&self, eni_id: &str) {
        self.detach_and_delete(eni_id, None).await;
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
                // The first sentence is the Go CNI's, which operators grep for.
                format!(
                    "Unable to attach IPs/Prefixes for the ENI, subnet doesn't seem to have enough \
                     IPs/Prefixes. Consider using new subnet or carve a reserved range using \
                     create-subnet-cidr-reservation: subnet {} is exhausted ({e}); pausing growth for {}s",
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

    /// Whether the pool is growing or about to, or why not: paused, blocked by a limit, or
    /// already at its targets (an ADD then finds nothing to wait for).
    pub(super) fn can_grow(&self, now: Timestamp) -> Result<(), String> {
        let growth = lock(&self.growth).clone();
        if let Some(until) = growth.paused_until.filter(|u| now < *u) {
            return Err(format!(
                "{} (resumes in {}s)",
                growth.last_error.as_deref().unwrap_or("growth paused"),
                now.until(until).as_secs()
            ));
        }
        let plan = self.current_plan(now);
        if let Some(blocked) = plan.blocked {
            return Err(blocked.to_string());
        }
        if plan.actions.iter().any(Action::is_growth) {
            return Ok(());
        }
        let t = &self.node.targets;
        Err(format!(
            "the pool is at its targets and will not grow (WARM_ENI_TARGET={}, WARM_IP_TARGET={}, \
             MINIMUM_IP_TARGET={}, WARM_PREFIX_TARGET={})",
            t.warm_eni, t.warm_ip, t.minimum_ip, t.warm_prefix
        ))
    }

    /// The last growth failure, if the latest attempt failed.
    pub(super) fn last_growth_error(&self) -> Option<String> {
        lock(&self.growth).last_error.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_marks_our_enis_as_the_go_cni_does() {
        assert_eq!(eni_description("i-0abc"), "aws-K8S-i-0abc");
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let t = humantime::format_rfc3339_seconds(wall_time(Timestamp(86_400_000))).to_string();
        assert_eq!(t, "1970-01-02T00:00:00Z");
    }
}
