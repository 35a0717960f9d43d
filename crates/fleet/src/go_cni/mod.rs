//! The Go CNI's ipamd (aws/amazon-vpc-cni-k8s v1.23.1, b52188387), modelled from its code for
//! the same simulated EC2; the file:line of each behaviour is at the code that copies it, and
//! docs/development/fleet.md lists them with what the model leaves out.
//! - Init ([`init`]): DescribeNetworkInterfaces for the attached ENIs (12 tries), CreateTags on
//!   an untagged ENI, setupENI's DescribeSubnets, ModifyNetworkInterfaceAttribute(Groups) on
//!   every ENI it manages (not with custom networking), one pool increase; a failure of the
//!   first, the second or the increase ends the process, which the kubelet restarts after
//!   CrashLoopBackOff. The leaked-ENI cleanup runs 0–300 s after the process starts, then
//!   hourly.
//! - The pool loop, every 5 s ([`grow`], [`release`]): an increase (fill an ENI with room,
//!   else a new ENI: DescribeSubnets, CreateNetworkInterface, DescribeInstances,
//!   AttachNetworkInterface, ModifyNetworkInterfaceAttribute, IMDS, DescribeSubnets), a
//!   subnet-full answer moving on to the next ENI and only a new ENI's pausing growth for
//!   120 s; or a decrease of addresses or /28 prefixes over the targets; then an ENI freed
//!   when the targets allow it; then, after 60 s without a pool action, a reconcile against
//!   IMDS that re-adopts ENIs attached but unknown.
//! - No client-side rate limit: each EC2 call goes through the AWS SDK's standard retryer
//!   (3 attempts, exponential backoff with full jitter, up to 20 s), under the Go CNI's own
//!   retries where it has them.
//! - An ADD with no free address fails at once (no waiting for growth); addresses in cooldown
//!   count as available.
//!
//! The address bookkeeping is the `pool` crate's datastore (assign, release into cooldown);
//! the decisions are the Go CNI's, not our planner's. ENIs are visited in a random order per
//! pass, as Go's map iteration does.

mod grow;
mod init;
mod release;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cloud::{CloudError, CloudErrorKind, Ec2, EniFilter, NetworkInterface};
use pool::{AttachmentKey, EniInfo, PodInfo, Pool, Targets, Timestamp};
use tokio::task::JoinHandle;
use vpc_sim::rand::Rng;

use crate::node::{AddOutcome, Cni};
use vpc_sim::inproc::{Account, NodeEc2, NodeImds};

/// `IP_COOLDOWN_PERIOD`'s default.
const COOLDOWN: Duration = Duration::from_secs(30);
/// Half of the pool loop: it sleeps this, checks the pool, sleeps this, reconciles
/// (`ipPoolMonitorInterval / 2`, ipamd.go:60, 784-793).
const HALF_LOOP: Duration = Duration::from_millis(2_500);
/// The SDK's standard retryer (aws-sdk-go-v2, as `config.LoadDefaultConfig` leaves it,
/// awsutils.go:443).
const SDK_ATTEMPTS: u32 = 3;
const SDK_MAX_BACKOFF: Duration = Duration::from_secs(20);
/// `maxENIBackoffDelay`, the cap of the Go CNI's own retry backoffs (awsutils.go:62).
const MAX_ENI_BACKOFF: Duration = Duration::from_secs(60);
/// `maxENIEC2APIRetries` (awsutils.go:61).
const ENI_EC2_TRIES: u32 = 12;
/// Addresses in a delegated /28.
const PER_PREFIX: u32 = pool::ADDRS_PER_PREFIX;
/// The kubelet's default max pods, the node's capacity with prefix delegation (EKS's
/// max-pods calculator gives 110 for such instance types), as ipamd takes it too.
const PD_MAX_PODS: u32 = 110;
/// The tag the Go CNI puts on every ENI it manages (`eniNodeTagKey`).
const NODE_TAG: &str = "node.k8s.amazonaws.com/instance_id";
/// When it created one (`eniCreatedAtTagKey`).
const CREATED_AT_TAG: &str = "node.k8s.amazonaws.com/createdAt";
/// The description of ENIs it creates (`eniDescriptionPrefix`).
const DESCRIPTION_PREFIX: &str = "aws-K8S-";

/// The Go CNI's settings the model takes (its environment variables).
#[derive(Clone, Debug, Default)]
pub struct GoOptions {
    /// WARM_ENI_TARGET, WARM_IP_TARGET, MINIMUM_IP_TARGET, WARM_PREFIX_TARGET,
    /// ENABLE_PREFIX_DELEGATION.
    pub targets: Targets,
    /// AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG: the primary ENI serves no pod, new ENIs go to the
    /// ENIConfig's subnet, and security groups are not refreshed on the ENIs.
    pub custom_networking: bool,
    /// The ENIConfig's subnet under custom networking; the node's own subnet when `None`.
    pub eni_config_subnet: Option<String>,
    /// MAX_ENI: fewer ENIs than the instance type allows (ipamd.go:1406-1422).
    pub max_enis: Option<u32>,
}

struct State {
    pool: Pool,
    rng: Rng,
    /// `lastDecreaseIPPool`.
    last_release: Option<Duration>,
    /// `lastNodeIPPoolAction`: the reconcile waits 60 s after it.
    last_action: Duration,
    /// `lastInsufficientCidrError` + `insufficientCidrErrorCooldown`.
    paused_until: Option<Duration>,
    /// The node's last EC2 answer was `RequestLimitExceeded`.
    throttled: bool,
}

struct Node {
    account: Arc<Account>,
    ec2: NodeEc2,
    imds: NodeImds,
    instance: String,
    primary_eni: String,
    /// The primary ENI's subnet, VPC and AZ.
    subnet: String,
    vpc_id: String,
    az: String,
    /// Where new ENIs go: the ENIConfig's subnet under custom networking, else `subnet`.
    eni_subnet: String,
    groups: Vec<String>,
    /// Secondary addresses per ENI, or /28 prefixes per ENI with prefix delegation.
    per_eni: u32,
    max_enis: u32,
    max_pods: u32,
    opts: GoOptions,
    state: Mutex<State>,
}

/// The Go CNI's ipamd on one node.
pub struct GoCni {
    node: Arc<Node>,
    /// Ended with it, as the process's goroutines are.
    _tasks: Tasks,
}

/// A process's background tasks, aborted when it goes (also when its start fails).
struct Tasks(Vec<JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

fn stamp(account: &Account) -> Timestamp {
    Timestamp(u64::try_from(account.elapsed().as_millis()).unwrap_or(0))
}

fn eni_info(id: &str, mac: &str, device: u32, subnet: &str, created: Timestamp) -> EniInfo {
    EniInfo {
        id: id.to_string(),
        device_number: device,
        mac: mac.to_string(),
        primary_ip: std::net::Ipv4Addr::UNSPECIFIED,
        subnet_id: subnet.to_string(),
        // The datastore's routing facts; the Go model routes nothing.
        subnet_cidr: ipnetwork::Ipv4Network::from(std::net::Ipv4Addr::UNSPECIFIED),
        created_at: created,
    }
}

/// `containsPrivateIPAddressLimitExceededError` (ipamd.go).
fn ip_limit(e: &CloudError) -> bool {
    e.code.as_deref() == Some("PrivateIpAddressLimitExceeded")
}

/// The pool's counts as the Go CNI takes them (`GetIPStats`, data_store.go:916-941).
#[derive(Clone, Copy, Debug)]
struct Stats {
    total: u32,
    assigned: u32,
    /// `TotalIPs − AssignedIPs`: cooling addresses are available.
    available: u32,
}

impl Node {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> Duration {
        self.account.elapsed()
    }

    fn pd(&self) -> bool {
        self.opts.targets.prefix_delegation
    }

    /// WARM_IP_TARGET or MINIMUM_IP_TARGET set (`warmIPTargetsDefined`).
    fn warm_ip_mode(&self) -> bool {
        self.opts.targets.warm_ip > 0 || self.opts.targets.minimum_ip > 0
    }

    /// One EC2 call through the SDK's standard retryer.
    async fn sdk<T, F, Fut>(&self, call: F) -> Result<T, CloudError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, CloudError>>,
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

    /// The Go CNI's own retry around a call (`retry.NWithBackoff` with a `SimpleBackoff`,
    /// pkg/utils/retry): `tries` tries whatever the error, sleeping `first` doubling up to
    /// [`MAX_ENI_BACKOFF`], plus up to `jitter` of it.
    async fn retry<T, F, Fut>(
        &self,
        tries: u32,
        first: Duration,
        jitter: f64,
        mut call: F,
    ) -> Result<T, CloudError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, CloudError>>,
    {
        let mut delay = first;
        let mut left = tries;
        loop {
            let result = call().await;
            left = left.saturating_sub(1);
            if result.is_ok() || left == 0 {
                return result;
            }
            let extra = delay.mul_f64(jitter * self.state().rng.unit());
            tokio::time::sleep(delay + extra).await;
            delay = (delay * 2).min(MAX_ENI_BACKOFF);
        }
    }

    /// `items` in a random order, as Go's map iteration gives them.
    fn map_order<T>(&self, mut items: Vec<T>) -> Vec<T> {
        let mut st = self.state();
        for i in (1..items.len()).rev() {
            let j = ((st.rng.unit() * (i + 1) as f64) as usize).min(i);
            items.swap(i, j);
        }
        items
    }

    fn stats(&self) -> Stats {
        let st = self.state();
        let c = st.pool.counts(stamp(&self.account));
        Stats {
            total: c.total,
            assigned: c.assigned,
            available: c.total - c.assigned,
        }
    }

    /// Delegated prefixes none of whose addresses is assigned, cooling ones included
    /// (`GetFreePrefixes`, data_store.go:1448), and all delegated prefixes.
    fn prefix_counts(&self) -> (u32, u32) {
        let st = self.state();
        let mut free = 0;
        let mut total = 0;
        for e in st.pool.enis() {
            for p in st.pool.prefixes(&e.id) {
                total += 1;
                let used = st
                    .pool
                    .addresses(&e.id)
                    .any(|(_, s)| s.prefix == Some(p) && s.is_assigned());
                free += u32::from(!used);
            }
        }
        (free, total)
    }

    /// `datastoreTargetState` (ipamd.go:2177-2232): how many addresses (with prefix
    /// delegation, /28s) the pool is short of and over WARM_IP_TARGET / MINIMUM_IP_TARGET;
    /// `None` when neither is set.
    fn target_state(&self, s: Stats) -> Option<(u32, u32)> {
        if !self.warm_ip_mode() {
            return None;
        }
        let t = &self.opts.targets;
        let short = t
            .warm_ip
            .saturating_sub(s.available)
            .max(t.minimum_ip.saturating_sub(s.total));
        let over = s
            .available
            .saturating_sub(t.warm_ip)
            .min(s.total.saturating_sub(t.minimum_ip));
        if !self.pd() {
            return Some((short, over));
        }
        // ipamd.go:2207-2228: in /28s, keeping those the warm and minimum targets need.
        let (free, total) = self.prefix_counts();
        let for_warm = (s.assigned + t.warm_ip).div_ceil(PER_PREFIX);
        let for_min = t.minimum_ip.div_ceil(PER_PREFIX);
        let over = free
            .min(total.saturating_sub(for_warm))
            .min(total.saturating_sub(for_min));
        Some((short.div_ceil(PER_PREFIX), over))
    }

    /// `updateIPPoolIfRequired` (ipamd.go:796-823), for the one network card.
    async fn update_pool(&self) {
        let stats = self.stats();
        let mut decreased = false;
        if self.too_low(stats) {
            let _ = self.increase().await;
        } else if self.too_high(stats) && self.may_release() {
            self.decrease(stats).await;
            decreased = true;
        }
        // ipamd.go:812: always, with the round's first counts.
        if self.should_remove_extra_enis(stats) {
            self.try_free_eni().await;
        }
        if decreased {
            let now = self.now();
            let mut st = self.state();
            st.last_release = Some(now);
            st.last_action = now;
        }
    }

    /// `isDatastorePoolTooLow` (ipamd.go:2623-2657).
    fn too_low(&self, s: Stats) -> bool {
        if s.total >= self.max_pods {
            return false;
        }
        if let Some((short, _)) = self.target_state(s) {
            return short > 0;
        }
        let t = &self.opts.targets;
        let (warm, per) = if self.pd() {
            (t.warm_prefix, PER_PREFIX)
        } else {
            (t.warm_eni, self.per_eni)
        };
        s.available < per * warm || (warm == 0 && s.available == 0)
    }

    /// The pause after EC2 said the subnet is full (`inInsufficientCidrCoolingPeriod`).
    fn paused(&self) -> bool {
        let now = self.now();
        self.state().paused_until.is_some_and(|u| now < u)
    }

    /// The 120 s pause (`insufficientCidrErrorCooldown`, ipamd.go:167).
    fn pause(&self) {
        self.state().paused_until = Some(self.now() + Duration::from_secs(120));
    }

    fn touched(&self) {
        let now = self.now();
        self.state().last_action = now;
    }

    /// IMDS's view of the attached ENIs (`GetAttachedENIs`): id, MAC, device, subnet,
    /// secondary addresses and prefixes.
    async fn attached(&self) -> Result<Vec<Attached>, CloudError> {
        let mut out = Vec::new();
        for mac in cloud::attached_macs(&self.imds).await? {
            let meta = cloud::eni_metadata(&self.imds, &mac).await?;
            let addrs = cloud::eni_addresses(&self.imds, &mac).await?;
            out.push(Attached {
                id: meta.eni_id,
                mac,
                device: meta.device_number,
                subnet: meta.subnet_id,
                ips: addrs.secondary_ips,
                prefixes: addrs.prefixes,
            });
        }
        Ok(out)
    }

    /// `DescribeAllENIs`' EC2 call (awsutils.go:1686-1728): DescribeNetworkInterfaces of the
    /// ENIs IMDS lists, tried up to 12 times, sleeping 10 ms more each time.
    async fn describe_all(&self, ids: &[String]) -> Result<Vec<NetworkInterface>, CloudError> {
        let mut tries = 0u32;
        loop {
            match self.sdk(|| self.ec2.describe_network_interfaces(ids)).await {
                Ok(found) => return Ok(found),
                Err(e) if tries + 1 >= ENI_EC2_TRIES => return Err(e),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10 * u64::from(tries))).await;
                    tries += 1;
                }
            }
        }
    }

    /// `TagENI` (awsutils.go:1381-1426): CreateTags of the missing tags, 5 tries
    /// (500 ms doubling, 30% jitter); nothing when the ENI has them.
    async fn tag_eni(&self, eni: &str, tags: &BTreeMap<String, String>) -> Result<(), CloudError> {
        if tags.get(NODE_TAG).map(String::as_str) == Some(self.instance.as_str()) {
            return Ok(());
        }
        let missing = BTreeMap::from([(NODE_TAG.to_string(), self.instance.clone())]);
        self.retry(5, Duration::from_millis(500), 0.3, || {
            self.sdk(|| self.ec2.create_tags(eni, &missing))
        })
        .await
    }

    /// `setupENI` (ipamd.go:1270-1330): the ENI goes into the datastore first (AddENI :1283),
    /// then subnet discovery's exclusion check calls DescribeSubnets (:1297 → awsutils.go:2578
    /// → GetVpcSubnets :1223); only then its addresses or prefixes. A failed check leaves the
    /// ENI in the datastore with nothing on it.
    async fn setup_eni(&self, eni: &Attached) -> Result<(), CloudError> {
        let created = stamp(&self.account);
        self.state().pool.upsert_eni(eni_info(
            &eni.id,
            &eni.mac,
            eni.device,
            &eni.subnet,
            created,
        ));
        self.vpc_subnets().await?;
        let mut st = self.state();
        if self.pd() {
            let _ = st.pool.add_prefixes(&eni.id, &eni.prefixes);
        } else {
            let _ = st.pool.add_addresses(&eni.id, &eni.ips);
        }
        Ok(())
    }

    /// `GetVpcSubnets` (awsutils.go:1223-1250): DescribeSubnets of the node's VPC and AZ.
    async fn vpc_subnets(&self) -> Result<Vec<cloud::Subnet>, CloudError> {
        let filters = [
            EniFilter::new("vpc-id", &self.vpc_id),
            EniFilter::new("availability-zone", &self.az),
        ];
        self.sdk(|| self.ec2.describe_subnets(&filters)).await
    }
}

/// One attached ENI as IMDS shows it.
#[derive(Clone, Debug)]
struct Attached {
    id: String,
    mac: String,
    device: u32,
    subnet: String,
    ips: Vec<std::net::Ipv4Addr>,
    prefixes: Vec<ipnetwork::Ipv4Network>,
}

impl GoCni {
    /// Starts the Go CNI's ipamd on `instance` with `opts`: its init (which may fail, as the
    /// process exits), then its pool loop and its leaked-ENI cleanup.
    pub async fn start(
        account: &Arc<Account>,
        instance: &str,
        opts: GoOptions,
        seed: u64,
    ) -> anyhow::Result<GoCni> {
        init::start(account, instance, opts, seed).await
    }

    /// The ENIs in its datastore, by id.
    pub fn enis(&self) -> Vec<String> {
        self.node
            .state()
            .pool
            .enis()
            .map(|e| e.id.clone())
            .collect()
    }

    /// Addresses (with prefix delegation, the prefixes' addresses) in its datastore.
    pub fn total(&self) -> u32 {
        self.node.stats().total
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
            Ok((allocated, _)) => AddOutcome::Placed(Some(allocated.ip)),
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
        let s = self.node.stats();
        s.total - s.assigned
    }
}
