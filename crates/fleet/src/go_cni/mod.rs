//! The Go CNI's algorithm, written from its documented behaviour (our notes,
//! reference/aws-vpc-cni.md §3.8 and §8), for the same simulated EC2:
//! - a pool loop every 5 s (2.5 s sleeps on each side of the reconcile step), one action per
//!   round: fill the first ENI with room, else a new ENI pre-loaded with a full ENI's worth
//!   (DescribeSubnets, CreateNetworkInterface, DescribeInstances, AttachNetworkInterface,
//!   ModifyNetworkInterfaceAttribute, then IMDS polled until the ENI shows);
//! - addresses in cooldown count as available, and are given back by a shrink;
//! - growth paused 120 s after a subnet-full error; nothing while nothing is short;
//! - no client-side rate limit: each EC2 call goes through the AWS SDK's standard retryer
//!   (3 attempts, exponential backoff with full jitter, up to 20 s);
//! - an ADD with no free address fails at once (no waiting for growth);
//! - with prefix delegation (`Targets::prefix_delegation`), growth by /28 prefixes only and
//!   never by /32s (ipamd.go `tryAssignPrefixes` :1217-1265, `tryAllocateENI` :1050-1101):
//!   each ENI with a free slot is asked for the prefixes needed, then for one; an
//!   `InsufficientCidrBlocks` answer there moves on to the next ENI (subnet discovery, its
//!   default, :1232); then a new ENI pre-loaded with prefixes, whose refusal pauses growth
//!   for 120 s (:1076-1079). Giving prefixes back and freeing ENIs are not modelled with
//!   prefix delegation: the one scenario that uses it (fragmented) has no pod leave.
//!
//! The address bookkeeping is the `pool` crate's datastore (assign, release into cooldown);
//! the decisions are the Go CNI's, not our planner's.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cloud::{CloudError, CloudErrorKind, CreateEni, Ec2, EniFilter, NetworkInterface};
use pool::{AttachmentKey, EniInfo, PodInfo, Pool, Removal, Targets, Timestamp};
use tokio::task::JoinHandle;
use vpc_sim::rand::Rng;

use crate::node::{AddOutcome, Cni};
use vpc_sim::inproc::{Account, NodeEc2, NodeImds};

/// `IP_COOLDOWN_PERIOD`'s default.
const COOLDOWN: Duration = Duration::from_secs(30);
/// Half of the pool loop: it sleeps this, checks the pool, sleeps this, reconciles.
const HALF_LOOP: Duration = Duration::from_millis(2_500);
/// `decreaseIPPoolInterval`.
const RELEASE_INTERVAL: Duration = Duration::from_secs(30);
/// `minENILifeTime`.
const MIN_ENI_AGE: Duration = Duration::from_secs(60);
/// Growth pauses this long after EC2 says the subnet is full.
const SUBNET_FULL_PAUSE: Duration = Duration::from_secs(120);
/// The SDK's standard retryer.
const SDK_ATTEMPTS: u32 = 3;
const SDK_MAX_BACKOFF: Duration = Duration::from_secs(20);
/// Addresses in a delegated /28.
const PER_PREFIX: u32 = pool::ADDRS_PER_PREFIX;
/// The kubelet's default max pods, the node's capacity with prefix delegation (EKS's
/// max-pods calculator gives 110 for such instance types), as ipamd takes it too.
const PD_MAX_PODS: u32 = 110;

struct State {
    pool: Pool,
    rng: Rng,
    last_release: Option<Duration>,
    paused_until: Option<Duration>,
    /// The node's last EC2 answer was `RequestLimitExceeded`.
    throttled: bool,
}

struct Node {
    account: Arc<Account>,
    ec2: NodeEc2,
    imds: NodeImds,
    instance: String,
    subnet: String,
    groups: Vec<String>,
    per_eni: u32,
    max_enis: u32,
    max_pods: u32,
    targets: Targets,
    state: Mutex<State>,
}

/// The Go CNI's ipamd on one node.
pub struct GoCni {
    node: Arc<Node>,
    task: JoinHandle<()>,
}

impl Drop for GoCni {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn stamp(account: &Account) -> Timestamp {
    Timestamp(u64::try_from(account.elapsed().as_millis()).unwrap_or(0))
}

fn eni_info(eni: &NetworkInterface, device: u32, created: Timestamp) -> EniInfo {
    EniInfo {
        id: eni.id.clone(),
        device_number: device,
        mac: eni.mac.clone(),
        primary_ip: eni.primary_ip.unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
        subnet_id: eni.subnet_id.clone(),
        // The datastore's routing facts; the Go model routes nothing.
        subnet_cidr: ipnetwork::Ipv4Network::from(std::net::Ipv4Addr::UNSPECIFIED),
        created_at: created,
    }
}

impl Node {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One EC2 call through the SDK's standard retryer.
    async fn sdk<T, F, Fut>(&self, call: F) -> Result<T, CloudError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, CloudError>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = call().await;
            let throttled = matches!(&result, Err(e) if e.kind == CloudErrorKind::Throttled);
            self.state().throttled = throttled;
            match result {
                Err(e) if e.is_transient() && attempt < SDK_ATTEMPTS => {
                    let cap = SDK_MAX_BACKOFF.min(Duration::from_secs(1 << attempt));
                    let jitter = self.state().rng.unit();
                    tokio::time::sleep(cap.mul_f64(jitter)).await;
                }
                other => return other,
            }
        }
    }

    /// Go's counts: cooling addresses are available.
    fn counts(&self) -> (u32, u32, u32) {
        let st = self.state();
        let c = st.pool.counts(stamp(&self.account));
        (c.total, c.assigned, c.total - c.assigned)
    }

    /// `updateIPPoolIfRequired`.
    async fn update_pool(&self) {
        if self.targets.prefix_delegation {
            self.update_pool_prefixes().await;
            return;
        }
        let now = self.account.elapsed();
        let (total, assigned, available) = self.counts();
        let t = &self.targets;
        let warm_ip_mode = t.warm_ip > 0 || t.minimum_ip > 0;
        let short = if warm_ip_mode {
            t.warm_ip
                .saturating_sub(available)
                .max(t.minimum_ip.saturating_sub(total))
        } else if (t.warm_eni == 0 && available == 0) || available < t.warm_eni * self.per_eni {
            self.per_eni
        } else {
            0
        };
        let paused = self.state().paused_until.is_some_and(|u| now < u);
        if short > 0 && total < self.max_pods {
            if !paused {
                self.grow(short).await;
            }
            return;
        }
        if warm_ip_mode {
            let over = available
                .saturating_sub(t.warm_ip)
                .min(total.saturating_sub(t.minimum_ip));
            let may_release = self
                .state()
                .last_release
                .is_none_or(|l| l + RELEASE_INTERVAL <= now);
            if over > 0 && may_release {
                self.release(over).await;
            }
        }
        let may_free = warm_ip_mode || available >= (t.warm_eni + 1) * self.per_eni;
        if may_free && assigned < total {
            self.try_free_eni().await;
        }
    }

    /// Delegated prefixes none of whose addresses is assigned (cooling ones count as free,
    /// as in `GetFreePrefixes`, data_store.go:1448).
    fn free_prefixes(&self) -> u32 {
        let st = self.state();
        st.pool
            .enis()
            .flat_map(|e| st.pool.prefixes(&e.id).map(|p| (e.id.clone(), p)))
            .filter(|(eni, p)| {
                !st.pool
                    .addresses(eni)
                    .any(|(_, s)| s.prefix == Some(*p) && s.is_assigned())
            })
            .count() as u32
    }

    /// `updateIPPoolIfRequired` with prefix delegation, as far as growth goes
    /// (`isDatastorePoolTooLow` :2623-2657, `getPrefixesNeeded` :2714-2731).
    async fn update_pool_prefixes(&self) {
        let now = self.account.elapsed();
        let (total, _, available) = self.counts();
        if total >= self.max_pods {
            return;
        }
        let t = &self.targets;
        let (low, needed) = if t.warm_ip > 0 || t.minimum_ip > 0 {
            // WARM_IP_TARGET / MINIMUM_IP_TARGET take precedence, in /28s.
            let short = t
                .warm_ip
                .saturating_sub(available)
                .max(t.minimum_ip.saturating_sub(total))
                .div_ceil(PER_PREFIX);
            (short > 0, short.max(1))
        } else {
            let low =
                available < PER_PREFIX * t.warm_prefix || (t.warm_prefix == 0 && available == 0);
            (
                low,
                t.warm_prefix.saturating_sub(self.free_prefixes()).max(1),
            )
        };
        let paused = self.state().paused_until.is_some_and(|u| now < u);
        if low && !paused {
            self.grow_prefixes(needed).await;
        }
    }

    /// `tryAssignPrefixes`, then `tryAllocateENI` with prefixes when no ENI took one.
    async fn grow_prefixes(&self, needed: u32) {
        let open: Vec<(String, u32)> = {
            let st = self.state();
            st.pool
                .enis()
                .map(|e| (e.id.clone(), st.pool.prefixes(&e.id).count() as u32))
                .filter(|(_, n)| *n < self.per_eni)
                .collect()
        };
        for (eni, held) in open {
            let want = needed.min(self.per_eni - held);
            let mut got = self.sdk(|| self.ec2.assign_ipv4_prefixes(&eni, want)).await;
            // Any failure but the ENI's limit is retried for a single prefix.
            if matches!(&got, Err(e) if e.kind != CloudErrorKind::LimitExceeded) {
                got = self.sdk(|| self.ec2.assign_ipv4_prefixes(&eni, 1)).await;
            }
            match got {
                Ok(prefixes) => {
                    let _ = self.state().pool.add_prefixes(&eni, &prefixes);
                    return;
                }
                // No /28 (or no address) in the subnet: the next ENI, no pause.
                Err(e) if e.is_subnet_exhausted() => continue,
                // Any other error ends the round without a new ENI (the Go CNI re-reads the
                // ENI on its limit; the model's per-ENI count never reaches it).
                Err(e) => {
                    self.failed(&e);
                    return;
                }
            }
        }
        let enis = self.state().pool.enis().count() as u32;
        if enis < self.max_enis
            && let Err(e) = self.new_eni(0, needed.min(self.per_eni)).await
        {
            self.failed(&e);
        }
    }

    async fn grow(&self, short: u32) {
        let room = {
            let st = self.state();
            st.pool
                .enis()
                .map(|e| (e.id.clone(), st.pool.addresses(&e.id).count() as u32))
                .find(|(_, n)| *n < self.per_eni)
        };
        let count = short.min(self.per_eni);
        match room {
            Some((eni, held)) => {
                let want = count.min(self.per_eni - held);
                let mut got = self.sdk(|| self.ec2.assign_private_ips(&eni, want)).await;
                if got.is_err() && want > 1 {
                    got = self.sdk(|| self.ec2.assign_private_ips(&eni, 1)).await;
                }
                match got {
                    Ok(ips) => {
                        let _ = self.state().pool.add_addresses(&eni, &ips);
                    }
                    Err(e) => self.failed(&e),
                }
            }
            None => {
                let enis = self.state().pool.enis().count() as u32;
                if enis < self.max_enis
                    && let Err(e) = self.new_eni(self.per_eni, 0).await
                {
                    self.failed(&e);
                }
            }
        }
    }

    fn failed(&self, e: &CloudError) {
        // The Go CNI pauses on both (its containsInsufficientCIDRsOrSubnetIPs).
        if matches!(
            e.kind,
            CloudErrorKind::SubnetFull | CloudErrorKind::NoCidrBlock
        ) {
            self.state().paused_until = Some(self.account.elapsed() + SUBNET_FULL_PAUSE);
        }
    }

    /// `AllocENI` with `ips` secondary addresses or `prefixes` /28s.
    async fn new_eni(&self, ips: u32, prefixes: u32) -> Result<(), CloudError> {
        let filter = [EniFilter::new("subnet-id", &self.subnet)];
        self.sdk(|| self.ec2.describe_subnets(&filter)).await?;
        let request = CreateEni {
            subnet_id: self.subnet.clone(),
            description: format!("aws-K8S-{}", self.instance),
            security_groups: self.groups.clone(),
            secondary_ips: ips,
            ipv4_prefixes: prefixes,
            ..Default::default()
        };
        let eni = self
            .sdk(|| self.ec2.create_network_interface(&request))
            .await?;
        let devices = self
            .sdk(|| self.ec2.describe_instance(&self.instance))
            .await?;
        let device = (1..).find(|d| !devices.contains(d)).unwrap_or(1);
        let attachment = self
            .sdk(|| {
                self.ec2
                    .attach_network_interface(&eni.id, &self.instance, device)
            })
            .await?;
        self.sdk(|| self.ec2.set_delete_on_termination(&eni.id, &attachment))
            .await?;
        // Wait for IMDS to show the ENI: 100 ms, doubling, 12 tries.
        let mut delay = Duration::from_millis(100);
        for _ in 0..12 {
            if cloud::eni_id(&self.imds, &eni.mac)
                .await
                .ok()
                .flatten()
                .is_some()
            {
                break;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(60));
        }
        let mut st = self.state();
        let now = stamp(&self.account);
        st.pool.upsert_eni(eni_info(&eni, device, now));
        let _ = st.pool.add_addresses(&eni.id, &eni.secondary_ips);
        let _ = st.pool.add_prefixes(&eni.id, &eni.prefixes);
        Ok(())
    }

    /// `decreaseDatastorePool`: unassigned addresses, cooling ones included, up to `over`.
    async fn release(&self, over: u32) {
        let batches: Vec<(String, Vec<std::net::Ipv4Addr>)> = {
            let st = self.state();
            let mut left = over;
            st.pool
                .enis()
                .map(|e| {
                    let ips: Vec<_> = st
                        .pool
                        .addresses(&e.id)
                        .filter(|(_, s)| !s.is_assigned())
                        .map(|(ip, _)| ip)
                        .take(left as usize)
                        .collect();
                    left -= ips.len() as u32;
                    (e.id.clone(), ips)
                })
                .filter(|(_, ips)| !ips.is_empty())
                .collect()
        };
        for (eni, ips) in batches {
            {
                let mut st = self.state();
                for ip in &ips {
                    let _ = st.pool.remove_address(*ip, Removal::Force);
                }
            }
            if let Err(e) = self.sdk(|| self.ec2.unassign_private_ips(&eni, &ips)).await {
                self.failed(&e);
            }
        }
        self.state().last_release = Some(self.account.elapsed());
    }

    /// `tryFreeENI`: the first ENI that is not the primary, older than a minute, with nothing
    /// assigned or cooling.
    async fn try_free_eni(&self) {
        let now = stamp(&self.account);
        let candidate = {
            let st = self.state();
            st.pool
                .enis()
                .filter(|e| !e.is_primary() && e.created_at.after(MIN_ENI_AGE) <= now)
                .find(|e| {
                    st.pool
                        .addresses(&e.id)
                        .all(|(_, s)| !s.is_assigned() && !s.is_cooling(now))
                })
                .map(|e| e.id.clone())
        };
        let Some(eni) = candidate else { return };
        let _ = self.state().pool.remove_eni(&eni, Removal::IfUnused(now));
        let ids = [eni.clone()];
        let attachment = match self
            .sdk(|| self.ec2.describe_network_interfaces(&ids))
            .await
        {
            Ok(found) => found
                .into_iter()
                .next()
                .and_then(|e| e.attachment)
                .map(|a| a.id),
            Err(_) => None,
        };
        if let Some(attachment) = attachment {
            let _ = self
                .sdk(|| self.ec2.detach_network_interface(&attachment))
                .await;
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let _ = self.sdk(|| self.ec2.delete_network_interface(&eni)).await;
    }
}

impl GoCni {
    /// Starts the Go CNI's ipamd on `instance` with `targets`: it reads its ENIs, and its pool
    /// loop starts.
    pub async fn start(
        account: &Arc<Account>,
        instance: &str,
        targets: Targets,
        seed: u64,
    ) -> anyhow::Result<GoCni> {
        let ec2 = NodeEc2::new(account);
        let imds = NodeImds::new(account, instance);
        let identity = cloud::node_identity(&imds).await?;
        let instance_limits = cloud::InstanceTable::embedded()
            .get(&identity.instance_type)
            .ok_or_else(|| anyhow::anyhow!("unknown instance type {}", identity.instance_type))?;
        let mut pool = Pool::new(COOLDOWN);
        let enis = ec2.describe_instance_enis(instance).await?;
        let primary = enis
            .iter()
            .find(|e| e.id == identity.primary_eni.eni_id)
            .ok_or_else(|| anyhow::anyhow!("no primary ENI"))?;
        pool.upsert_eni(eni_info(primary, 0, Timestamp(0)));
        let node = Arc::new(Node {
            account: Arc::clone(account),
            ec2,
            imds,
            instance: instance.to_string(),
            subnet: primary.subnet_id.clone(),
            groups: primary.security_groups.clone(),
            per_eni: instance_limits.secondary_ips_per_eni(),
            max_enis: instance_limits.max_enis,
            max_pods: if targets.prefix_delegation {
                PD_MAX_PODS
            } else {
                instance_limits.max_pods()
            },
            targets,
            state: Mutex::new(State {
                pool,
                rng: Rng::seeded(seed),
                last_release: None,
                paused_until: None,
                throttled: false,
            }),
        });
        // Its init fills the pool before the node reports ready.
        node.update_pool().await;
        let task = {
            let node = Arc::clone(&node);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(HALF_LOOP).await;
                    node.update_pool().await;
                    tokio::time::sleep(HALF_LOOP).await;
                }
            })
        };
        Ok(GoCni { node, task })
    }
}

fn key(name: &str) -> AttachmentKey {
    AttachmentKey {
        network: "aws-cni".into(),
        container_id: format!("sandbox-{name}"),
        ifname: "eth0".into(),
    }
}

impl Cni for GoCni {
    async fn add(&self, name: &str) -> AddOutcome {
        let now = stamp(&self.node.account);
        let mut st = self.node.state();
        match st.pool.assign(&key(name), &PodInfo::default(), now) {
            Ok(_) => AddOutcome::Placed,
            Err(_) => AddOutcome::Failed {
                throttled: st.throttled,
            },
        }
    }

    async fn del(&self, name: &str) {
        let now = stamp(&self.node.account);
        let _ = self.node.state().pool.release(&key(name), now);
    }

    fn idle(&self) -> u32 {
        let (total, assigned, _) = self.node.counts();
        total - assigned
    }
}
