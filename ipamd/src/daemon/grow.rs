//! The controller round, and growing the pool: more addresses or prefixes on an ENI, or a new
//! ENI created, attached and set up before its addresses are offered to pods.

use std::collections::{BTreeMap, BTreeSet};

use cloud::{CloudError, CloudErrorKind, CreateEni, Ec2, Imds, NetworkInterface};
use pool::{Action, Blocked, PlanContext, PrefixScope, Timestamp};
use tracing::{debug, error, info, warn};

use super::Daemon;
use super::eni::{TAG_CLUSTER, TAG_CREATED_AT, TAG_INSTANCE_ID, TAG_OWNER};
use super::eni::{adopt, eni_description, wall_time};
use super::growth::GrowthFailure;
use super::placement::Placement;
use crate::durability::DaemonStore;
use crate::host::HostNetwork;

/// Actions carried out in one controller round at most; the next round follows shortly.
const ACTIONS_PER_ROUND: usize = 4;

/// What a growth step asks EC2 for on an existing ENI.
#[derive(Clone, Copy, Debug)]
enum More {
    Ips(u32),
    Prefixes(u32),
}

/// A fresh CreateNetworkInterface idempotency token: the instance, so an operator can tell
/// whose it is, and 64 random bits (EC2 allows 64 ASCII characters).
fn client_token(instance_id: &str) -> String {
    // getrandom fails only when the OS has no entropy source at all; a clock-derived token is
    // then still unique enough for one node's own requests.
    let random = getrandom::u64().unwrap_or_else(|_| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    format!("vpc-cni-{instance_id}-{random:016x}")
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// The plan for now.
    pub(super) fn current_plan(&self, now: Timestamp) -> pool::Plan {
        let ctx = PlanContext {
            now,
            last_release: self.growth.status().last_release,
            pending: self.pending_pods(),
            draining: self.draining(),
            scarce: self.subnet_scarce(),
            congested: self.congested(),
        };
        // Read before the pool's lock: each reads the cluster's view, which is never read
        // under that lock.
        let (limits, targets) = (self.limits(), self.targets());
        pool::plan(&self.ledger.pool(), &limits, &targets, ctx)
    }

    /// One round of the controller: plans and carries out what the pool needs from EC2,
    /// planning again after each step (the plan holds one growth step at a time).
    pub async fn grow(&self) {
        let _ec2_ops = self.growth.ec2_ops().await;
        let _busy = self.metrics.action_in_progress("increaseDatastorePool");
        if self.node.ip_family.has_v6() {
            self.ensure_prefix6().await;
        }
        if !self.node.ip_family.has_v4() {
            // IPv6 mode has no IPv4 pool to manage.
            return;
        }
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
            let paused = self.growth.status().paused_until.is_some_and(|u| now < u);
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

    async fn request_more(
        &self,
        eni_id: &str,
        more: More,
    ) -> Result<(Vec<std::net::Ipv4Addr>, Vec<ipnetwork::Ipv4Network>), CloudError> {
        match more {
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
        }
    }

    /// Assigns more to an ENI. A subnet too full for all of it may still hold one: that one
    /// is asked for at once, as the Go CNI does, rather than pausing growth with addresses
    /// left. Where EC2 has no free /28 for a prefix, records the refusal and reports
    /// progress: the next plan of the round takes /32s instead.
    async fn assign_more(&self, eni_id: &str, more: More) -> bool {
        let subnet = self.ledger.pool().eni(eni_id).map(|e| e.subnet_id.clone());
        let (more, got) = match (more, self.request_more(eni_id, more).await) {
            (More::Ips(n), Err(e)) if n > 1 && e.kind == CloudErrorKind::SubnetFull => {
                info!(
                    eni = eni_id,
                    asked = n,
                    "the subnet cannot give {n} addresses; asking for one"
                );
                (More::Ips(1), self.request_more(eni_id, More::Ips(1)).await)
            }
            (more, got) => (more, got),
        };
        match got {
            Ok((ips, prefixes)) => {
                if let (More::Prefixes(_), Some(subnet)) = (more, &subnet) {
                    self.prefixes_delegated(PrefixScope::Subnet(subnet));
                }
                match self
                    .ledger
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
            Err(e) if e.kind == CloudErrorKind::NoCidrBlock => {
                self.metrics.prefix_refused();
                // An ENI gone from the pool meanwhile has no subnet to mark; the next plan
                // no longer names it.
                if let Some(subnet) = &subnet {
                    self.prefixes_refused(PrefixScope::Subnet(subnet), &e.to_string());
                }
                true
            }
            Err(e) => {
                self.metrics
                    .ipamd_error("increaseIPPoolAllocIPAddressesFailed");
                self.ec2_failed(format!("assigning {more:?} to {eni_id}"), e);
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

    /// Sends CreateNetworkInterface. A request whose answer may have been lost after EC2 acted
    /// (a transient failure) is kept and sent again as it was, token and tags included, until
    /// EC2 answers it: EC2 then returns the ENI the lost answer was about instead of creating
    /// another, so a storm of lost answers costs one ENI, not one per attempt.
    async fn create_network_interface(
        &self,
        placement: &Placement,
        ips: u32,
        prefixes: u32,
    ) -> Result<NetworkInterface, CloudError> {
        let request = self
            .growth
            .pending_create()
            .clone()
            .unwrap_or_else(|| CreateEni {
                subnet_id: placement.subnet_id.clone(),
                description: eni_description(&self.node.identity.instance_id),
                security_groups: placement.security_groups.clone(),
                secondary_ips: ips,
                ipv4_prefixes: prefixes,
                tags: self.eni_tags(),
                client_token: client_token(&self.node.identity.instance_id),
            });
        let result = self.ec2.create_network_interface(&request).await;
        let unanswered = result
            .as_ref()
            .err()
            .is_some_and(|e| e.is_transient() || e.kind == CloudErrorKind::Overloaded);
        *self.growth.pending_create() = unanswered.then_some(request);
        result
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
                self.ec2_failed("finding a free device index", e);
                return false;
            }
        };
        let placement = match self.placement().await {
            Ok(p) => p,
            Err(e) => {
                self.metrics.ipamd_error("increaseIPPoolAllocENI");
                self.growth_failed(GrowthFailure::Placement(e));
                return false;
            }
        };
        let refused_there = || {
            let pool = self.ledger.pool();
            pool.prefix_fallbacks()
                .refuses(&placement.subnet_id, self.clock.now())
        };
        if prefixes > 0 && refused_there() {
            // Placement prefers subnets that delegate prefixes: this one means none does.
            let why = format!(
                "prefixes are refused in {}, chosen by {}",
                placement.subnet_id, placement.why
            );
            self.prefixes_refused(PrefixScope::NewEnis, &why);
            return true;
        }
        let created = match self
            .create_network_interface(&placement, ips, prefixes)
            .await
        {
            // Room for the ENI and one address may remain where there is none for all.
            Err(e) if ips > 1 && e.kind == CloudErrorKind::SubnetFull => {
                info!(subnet = %placement.subnet_id, asked = ips, "the subnet cannot take an ENI with {ips} addresses; asking for one");
                self.create_network_interface(&placement, 1, 0).await
            }
            other => other,
        };
        let eni = match created {
            Ok(eni) => eni,
            Err(e) if prefixes > 0 && e.kind == CloudErrorKind::NoCidrBlock => {
                // The next plan asks again: placement then prefers another subnet, or, with
                // none left, new ENIs take /32s.
                self.metrics.prefix_refused();
                self.prefixes_refused(PrefixScope::Subnet(&placement.subnet_id), &e.to_string());
                return true;
            }
            Err(e) => {
                self.metrics.ipamd_error("increaseIPPoolAllocENI");
                self.ec2_failed("creating an ENI", e);
                return false;
            }
        };
        let instance_id = &self.node.identity.instance_id;
        let attachment = match self
            .ec2
            .attach_network_interface(&eni.id, instance_id, device)
            .await
        {
            Ok(a) => a,
            Err(e) => {
                self.delete_unattached(&eni.id).await;
                self.metrics.ipamd_error("increaseIPPoolAllocENI");
                self.ec2_failed(format!("attaching {} at device {device}", eni.id), e);
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
            self.ec2_failed(format!("setting DeleteOnTermination on {}", eni.id), e);
            return false;
        }
        info!(
            eni = %eni.id, device, subnet = %eni.subnet_id, ips = eni.secondary_ips.len(),
            prefixes = eni.prefixes.len(), why = %placement.why, "created and attached ENI"
        );
        if !eni.prefixes.is_empty() {
            self.prefixes_delegated(PrefixScope::NewEnis);
            self.prefixes_delegated(PrefixScope::Subnet(&eni.subnet_id));
        }
        // A resent request may have been placed before the configuration changed: the ENI's
        // own subnet is the truth.
        let subnet_cidr = if eni.subnet_id == placement.subnet_id {
            placement.subnet_cidr
        } else {
            match self.subnet_cidr_of(&eni).await {
                Some(cidr) => cidr,
                None => {
                    warn!(eni = %eni.id, subnet = %eni.subnet_id, "subnet CIDR not known yet; the reconciliation sets the ENI up");
                    return false;
                }
            }
        };
        self.placements
            .chosen()
            .insert(eni.id.clone(), placement.why.clone());
        match self.configure_eni(&eni, device, subnet_cidr).await {
            Ok(()) => {
                self.growth_succeeded();
                self.log_pool_stats();
                true
            }
            Err(source) => {
                // Attached and ours: the reconciliation adopts it once its link is usable.
                // Meanwhile no further ENI: the next would most likely fare no better.
                self.metrics.ipamd_error("increaseIPPoolsetupENIFailed");
                self.growth_failed(GrowthFailure::EniSetup {
                    eni: eni.id.clone(),
                    source,
                });
                false
            }
        }
    }

    /// The lowest device index below the instance's ENI limit that no ENI uses: neither one
    /// IMDS lists as attached, nor one of an ENI someone else manages as EC2 last listed it,
    /// nor one the pool still holds (a detached ENI's table stays its own until the
    /// reconciliation has removed it). No EC2 call: a fleet launching at once pays for each in
    /// throttling. An ENI someone else attached a moment ago may show nowhere yet; the attach
    /// then fails and the next round tries again.
    async fn free_device_index(&self) -> Result<u32, CloudError> {
        let mut used: BTreeSet<u32> = self.growth.unmanaged().values().copied().collect();
        for mac in cloud::attached_macs(&self.imds).await? {
            used.insert(cloud::eni_metadata(&self.imds, &mac).await?.device_number);
        }
        used.extend(self.ledger.pool().enis().map(|e| e.device_number));
        (1..self.node.instance.max_enis.max(1))
            .find(|d| !used.contains(d))
            .ok_or_else(|| {
                CloudError::new(
                    cloud::Action::AttachNetworkInterface,
                    CloudErrorKind::LimitExceeded,
                    format!(
                        "every device index below {} is in use",
                        self.node.instance.max_enis
                    ),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_tokens_fit_ec2s_limit_name_the_instance_and_differ() {
        let a = client_token("i-0123456789abcdef0");
        let b = client_token("i-0123456789abcdef0");
        assert!(a.len() <= 64 && a.is_ascii(), "{a}");
        assert!(a.starts_with("vpc-cni-i-0123456789abcdef0-"), "{a}");
        assert_ne!(a, b);
    }
}
