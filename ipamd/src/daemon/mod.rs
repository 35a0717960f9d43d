//! The daemon's state and its startup: instance limits -> stored state -> node network ->
//! reconcile with EC2 -> adopt what live pods route to -> release what dead pods held -> first
//! growth. Requests, growth and
//! reconciliation live in the submodules.

mod eni;
mod grow;
mod growth;
mod leaks;
mod migrate;
mod overrides;
mod placement;
mod reconcile;
mod recover;
mod requests;
mod scarcity;
mod shrink;
mod steer;
mod v6;
mod veths;
mod waits;

pub use eni::{TAG_CLUSTER, TAG_CREATED_AT, TAG_INSTANCE_ID};
pub use leaks::{LeakReport, MAX_START_JITTER, MIN_LEAK_AGE};
pub use overrides::{KEYS as NODE_SETTING_KEYS, PREFIX as NODE_SETTING_PREFIX};
pub use placement::{NoPlacement, Placement, SUBNET_CLUSTER_TAG_PREFIX, SUBNET_ROLE_TAG};
pub use recover::{LostState, RECOVERED_NETWORK};
pub use scarcity::CHECK_PERIOD as SCARCITY_CHECK_PERIOD;
pub use veths::VETH_GRACE;
pub use waits::{STAGE_DEADLINE, Stage};

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cloud::{CloudError, Ec2, Imds, InstanceLimits, InstanceTable, NodeIdentity};
use introspect::{Metrics, PoolView};
use pool::{Clock, Mutation, NodeLimits, Pool, StateStore, Targets, Timestamp};
use thiserror::Error;
use tokio::sync::Notify;
use tracing::{error, info, warn};

use crate::config::{Config, IpFamily};
use crate::durability::{Durability, PersistError};
use crate::host::{HostError, HostNetwork, NodeNet};
use growth::Growth;

/// How old an assignment without a route must be to count as a dead pod's. A younger one may
/// belong to an ADD whose plugin has its reply but has not added the route yet; releasing it
/// could hand a live pod's address to another. Far above the plugin's own bounds (a 30 s
/// reply wait, then netlink calls of at most 10 s each).
pub const DEAD_POD_GRACE: Duration = Duration::from_secs(60);

/// kubelet's default `--max-pods`, the cap with prefix delegation when MAX_PODS is unset.
pub const KUBELET_DEFAULT_MAX_PODS: u32 = 110;

/// Why ipamd could not start. Each names what it was doing.
#[derive(Debug, Error)]
pub enum StartupError {
    /// Neither the embedded table nor EC2 knows the instance type.
    #[error(
        "unknown instance type {instance_type}: not in the embedded table and DescribeInstanceTypes failed: {source}"
    )]
    UnknownInstanceType {
        /// The type.
        instance_type: String,
        /// EC2's answer.
        source: CloudError,
    },
    /// Stored state could not be read.
    #[error("reading stored state from {}: {source}", dir.display())]
    Restore {
        /// State directory.
        dir: std::path::PathBuf,
        /// Why.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The node's network could not be set up.
    #[error("setting up the node's network: {0}")]
    NodeNetwork(HostError),
    /// EC2 could not be asked what the node's ENIs hold.
    #[error("reconciling with EC2: {0}")]
    Reconcile(CloudError),
    /// The primary ENI is not among the instance's ENIs in EC2.
    #[error("EC2 does not list the primary ENI {0} as attached to this instance")]
    NoPrimaryEni(String),
    /// The Go CNI's checkpoint is there but unusable.
    #[error(
        "{0}; its pods' addresses cannot be migrated from aws-node (fix the file, or remove it if no pod of aws-node is left on the node)"
    )]
    Migrate(store::CheckpointError),
    /// Writing state failed.
    #[error(transparent)]
    Persist(#[from] PersistError),
}

/// What the node is, fixed at startup.
#[derive(Clone, Debug)]
pub struct Node {
    /// IMDS identity.
    pub identity: NodeIdentity,
    /// Instance limits (from the table or EC2).
    pub instance: InstanceLimits,
    /// Node-wide network settings.
    pub net: NodeNet,
    /// The warm-pool targets.
    pub targets: Targets,
    /// ENIs the node may hold at most: the instance's limit under MAX_ENI.
    pub max_enis: u32,
    /// CLUSTER_NAME: tags new ENIs and scopes leaked-ENI cleanup.
    pub cluster_name: Option<String>,
    /// ADDITIONAL_ENI_TAGS.
    pub extra_tags: Vec<(String, String)>,
    /// How long an ADD that finds no address waits for the pool to grow.
    pub add_wait: Duration,
    /// AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG.
    pub custom_networking: bool,
    /// The node keys naming its ENIConfig.
    pub eni_config_keys: cluster::EniConfigKeys,
    /// ENABLE_SUBNET_DISCOVERY.
    pub subnet_discovery: bool,
    /// ENABLE_IPv4 and ENABLE_IPv6.
    pub ip_family: IpFamily,
    /// AWS_MANAGE_ENIS_NON_SCHEDULABLE.
    pub manage_enis_non_schedulable: bool,
    /// The pod ipamd runs in (namespace, name), when it knows.
    pub own_pod: Option<(String, String)>,
    /// SUBNET_SCARCITY_MODE.
    pub scarcity_mode: bool,
}

/// The running daemon, generic over its seams: EC2, IMDS, the node's network and the store.
pub struct Daemon<E, I, H, S> {
    ec2: E,
    imds: I,
    host: H,
    clock: Arc<dyn Clock>,
    node: Node,
    /// The planning limits before the node's MAX_ENI and the ENIs ipamd does not manage
    /// ([`Daemon::limits`] applies both).
    base_limits: NodeLimits,
    /// The primary ENI's security groups, which new ENIs get.
    security_groups: Mutex<Vec<String>>,
    /// Attached ENIs ipamd does not manage, as EC2 last listed them.
    unmanaged: Mutex<BTreeMap<String, u32>>,
    pool: Mutex<Pool>,
    durable: Durability<S>,
    /// Set when the store refused a change the pool had made: the next commit writes the whole
    /// pool, so the two agree again.
    store_behind: AtomicBool,
    growth: Mutex<Growth>,
    /// A CreateNetworkInterface request whose answer did not come back: sent again as it is
    /// (same client token) until EC2 answers, so a lost answer never costs a second ENI.
    pending_create: Mutex<Option<cloud::CreateEni>>,
    /// The cluster as ipamd last saw it (kept current by `cluster::follow`).
    cluster: tokio::sync::watch::Receiver<cluster::ClusterView>,
    /// Why each ENI ipamd created went to its subnet, for /v1/enis.
    placements: Mutex<std::collections::BTreeMap<String, String>>,
    /// What custom networking waits for from the cluster, if anything.
    waiting: Mutex<Option<waits::Waiting>>,
    /// Growth and reconciliation both change ENIs through EC2: one at a time.
    ec2_ops: tokio::sync::Mutex<()>,
    kick: Notify,
    /// Notified when a DEL leaves a veth to the sweep.
    unrouted: Notify,
    /// The host veths seen without a route, until they are deleted or routed again.
    idle_veths: Mutex<veths::IdleSince>,
    /// Bumped whenever addresses join the pool: ADDs waiting for growth watch it.
    grown: tokio::sync::watch::Sender<u64>,
    metrics: Arc<Metrics>,
    /// Where Events go (recorded in the cluster by the caller), if anywhere.
    events: Option<tokio::sync::mpsc::Sender<cluster::ClusterEvent>>,
    /// The node settings last rejected, so each is reported once.
    rejected: Mutex<Vec<overrides::Rejected>>,
    /// In subnet-scarcity mode.
    scarce: AtomicBool,
    /// When the subnets' free counts were last read.
    scarcity_read: Mutex<Option<Timestamp>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere does not make the data useless: the pool's operations check before
    // they change anything, and the small values beside it are replaced whole.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Finds the instance's limits: the embedded table first, EC2 for a type the table lacks.
pub async fn instance_limits<E: Ec2>(
    ec2: &E,
    instance_type: &str,
) -> Result<InstanceLimits, StartupError> {
    if let Some(limits) = InstanceTable::embedded().get(instance_type) {
        return Ok(limits);
    }
    info!(
        instance_type,
        "instance type not in the embedded table, asking DescribeInstanceTypes"
    );
    ec2.describe_instance_type(instance_type)
        .await
        .map_err(|source| StartupError::UnknownInstanceType {
            instance_type: instance_type.to_string(),
            source,
        })
}

/// The seams and settings a daemon starts from.
pub struct Parts<E, I, H, S> {
    /// EC2. The daemon does not retry its calls: a client that should ride out throttling
    /// and transient failures retries them itself (ipamd passes `cloud::throttle::Throttled`).
    pub ec2: E,
    /// IMDS.
    pub imds: I,
    /// The node's network.
    pub host: H,
    /// The state store.
    pub store: Arc<S>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// Who the node is.
    pub identity: NodeIdentity,
    /// Where counters go.
    pub metrics: Arc<Metrics>,
    /// What the store reported lost before startup.
    pub lost: LostState,
    /// The cluster as ipamd sees it, kept current by the caller (`cluster::follow` in
    /// production; a test sends views).
    pub cluster: tokio::sync::watch::Receiver<cluster::ClusterView>,
    /// Where the daemon's Events go; the caller records them in the cluster.
    pub events: Option<tokio::sync::mpsc::Sender<cluster::ClusterEvent>>,
}

/// The pool's targets from the configuration. Prefix delegation needs Nitro or bare metal;
/// elsewhere the Go CNI warns and falls back to secondary addresses, and so do we.
fn targets(config: &Config, instance: &InstanceLimits, instance_type: &str) -> Targets {
    let prefix_delegation = config.prefix_delegation && instance.supports_prefix_delegation();
    if config.prefix_delegation && !prefix_delegation {
        warn!(
            instance_type,
            "ENABLE_PREFIX_DELEGATION needs a Nitro or bare-metal instance; using secondary addresses"
        );
    }
    Targets {
        warm_eni: config.warm_eni_target,
        warm_ip: config.warm_ip_target,
        minimum_ip: config.minimum_ip_target,
        warm_prefix: config.warm_prefix_target,
        prefix_delegation,
    }
}

/// Max pods: MAX_PODS when set; otherwise the published secondary-address formula (without
/// the primary ENI's addresses under custom networking), or with prefix delegation kubelet's
/// default (the formula would waste nearly all of a prefix).
fn max_pods(config: &Config, instance: &InstanceLimits, targets: &Targets) -> u32 {
    config.max_pods.unwrap_or(if targets.prefix_delegation {
        KUBELET_DEFAULT_MAX_PODS
    } else if config.custom_networking {
        instance.max_pods_custom_networking()
    } else {
        instance.max_pods()
    })
}

/// The node-wide network settings: the primary ENI from IMDS, the rest from the configuration.
pub fn node_net(config: &Config, identity: &NodeIdentity) -> NodeNet {
    NodeNet {
        primary_mac: identity.primary_eni.mac.clone(),
        mtu: config.eni_mtu,
        ipv6: config.ip_family.has_v6(),
        snat: netops::snat::NodeNetConfig {
            primary_if: String::new(),
            primary_ip: identity.primary_ip,
            vpc_cidrs: identity.vpc_cidrs.clone(),
            exclude_snat_cidrs: config.exclude_snat_cidrs.clone(),
            // IPv6 mode has no VPC IPv4 pod address to translate (aws-node skips SNAT there).
            external_snat: config.external_snat || !config.ip_family.has_v4(),
            randomize: config.randomize_snat,
            veth_prefix: config.veth_prefix.clone(),
            connmark: config.connmark,
            node_port_support: config.node_port_support,
            v4_egress: config.v4_egress.then_some(pool::EGRESS_V4_RANGE),
        },
    }
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: StateStore + 'static> Daemon<E, I, H, S> {
    /// Starts the daemon; returns once it can serve.
    pub async fn start(config: &Config, parts: Parts<E, I, H, S>) -> Result<Self, StartupError> {
        let Parts {
            ec2,
            imds,
            host,
            store,
            clock,
            identity,
            metrics,
            lost,
            cluster,
            events,
        } = parts;
        let instance = instance_limits(&ec2, &identity.instance_type).await?;
        let targets = targets(config, &instance, &identity.instance_type);
        let max_enis = config
            .max_eni
            .map_or(instance.max_enis, |m| m.min(instance.max_enis));
        let limits = NodeLimits {
            max_enis,
            secondary_ips_per_eni: instance.secondary_ips_per_eni(),
            max_pods: max_pods(config, &instance, &targets),
        };
        info!(
            instance_id = %identity.instance_id,
            instance_type = %identity.instance_type,
            max_enis,
            ips_per_eni = instance.ipv4_per_eni,
            max_pods = limits.max_pods,
            mode = ?targets.mode(),
            ?targets,
            "node limits and pool targets"
        );

        let state = store.load().map_err(|e| StartupError::Restore {
            dir: config.state_dir.clone(),
            source: Box::new(e),
        })?;
        // A node that has never run ipamd may be switching from aws-node.
        let first_start = state.enis.is_empty() && state.addrs.is_empty();
        let (mut pool, fixes, issues) = Pool::restore(state, config.ip_cooldown);
        if config.custom_networking {
            // Pods get addresses of the ENIConfig's subnet only.
            pool.exclude_from_pods([identity.primary_eni.eni_id.clone()].into());
        }
        pool.v6_mut()
            .set_egress_range(config.v4_egress.then_some(pool::EGRESS_V4_RANGE));
        for issue in &issues {
            warn!(?issue, "stored state repaired");
        }
        let net = node_net(config, &identity);
        let daemon = Daemon {
            ec2,
            imds,
            host,
            clock,
            node: Node {
                identity,
                instance,
                net,
                targets,
                max_enis,
                cluster_name: config.cluster_name.clone(),
                extra_tags: config.additional_eni_tags.clone(),
                add_wait: config.add_wait,
                custom_networking: config.custom_networking,
                eni_config_keys: config.eni_config_keys.clone(),
                subnet_discovery: config.subnet_discovery,
                ip_family: config.ip_family,
                manage_enis_non_schedulable: config.manage_enis_non_schedulable,
                own_pod: config.own_pod.clone(),
                scarcity_mode: config.subnet_scarcity_mode,
            },
            base_limits: limits,
            security_groups: Mutex::new(Vec::new()),
            unmanaged: Mutex::new(BTreeMap::new()),
            pool: Mutex::new(pool),
            durable: Durability::new(store),
            store_behind: AtomicBool::new(false),
            growth: Mutex::new(Growth::default()),
            pending_create: Mutex::new(None),
            cluster,
            placements: Mutex::new(Default::default()),
            waiting: Mutex::new(None),
            ec2_ops: tokio::sync::Mutex::new(()),
            kick: Notify::new(),
            unrouted: Notify::new(),
            idle_veths: Mutex::new(Default::default()),
            grown: tokio::sync::watch::Sender::new(0),
            metrics,
            events,
            rejected: Mutex::new(Vec::new()),
            scarce: AtomicBool::new(false),
            scarcity_read: Mutex::new(None),
        };
        daemon
            .persist(|_| Ok::<_, PersistError>(((), fixes)))
            .await?;
        {
            let c = lock(&daemon.pool).counts(daemon.clock.now());
            info!(
                assigned = c.assigned,
                cooling = c.cooling,
                total = c.total,
                "restored state"
            );
        }
        let changes = daemon
            .host
            .setup_node(&daemon.node.net)
            .await
            .map_err(StartupError::NodeNetwork)?;
        log_changes("node network", &changes);
        daemon.reconcile_with_ec2().await?;
        if first_start {
            daemon
                .migrate_from_go_cni(&config.go_cni_checkpoint)
                .await?;
        }
        daemon.adopt_routed_pods().await?;
        daemon.cool_lost(&lost).await?;
        daemon.release_dead_pods().await?;
        daemon.check_subnet_scarcity().await;
        daemon.grow().await;
        Ok(daemon)
    }

    /// The node.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The cluster as ipamd sees it, to be told when it changes.
    pub fn cluster_view(&self) -> tokio::sync::watch::Receiver<cluster::ClusterView> {
        self.cluster.clone()
    }

    /// A snapshot of the pool (for tests).
    pub fn pool_snapshot(&self) -> Pool {
        lock(&self.pool).clone()
    }

    /// The counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// A snapshot of everything introspection and metrics show.
    pub fn view(&self) -> PoolView {
        let now = self.clock.now();
        let ready = self.not_ready(now).is_none();
        let growth = lock(&self.growth).clone();
        let (limits, targets) = (self.limits(), self.targets());
        let (pending, draining) = (self.pending_pods(), self.draining());
        PoolView {
            pool: lock(&self.pool).clone(),
            now,
            limits,
            targets,
            last_release: growth.last_release,
            pending,
            draining,
            scarce: self.subnet_scarce(),
            growth_paused_until: growth.paused_until.filter(|u| now < *u),
            last_error: growth.last_error.map(|e| e.to_string()),
            ready,
            placements: lock(&self.placements).clone(),
            cluster: self.cluster_status(),
        }
    }

    /// Waits until something asks the controller to run early (an ADD, a DEL, or an ADD
    /// that found no address).
    pub async fn kicked(&self) {
        self.kick.notified().await;
    }

    /// Makes everything applied durable (at shutdown).
    pub async fn flush(&self) -> Result<(), PersistError> {
        self.durable.wait(self.durable.seen()).await
    }

    /// Hands `mutations` (what the caller just did to `pool`, under its lock) to the store.
    /// If the store refused an earlier change, the whole pool is written first, so the store
    /// never stays behind the pool. Returns the batch to wait for.
    fn commit(&self, pool: &Pool, mutations: &[Mutation]) -> Result<u64, PersistError> {
        if self.store_behind.load(Ordering::SeqCst) {
            self.durable.replace_all(&pool.to_state())?;
            self.store_behind.store(false, Ordering::SeqCst);
            warn!("the store caught up with the pool after an earlier failure");
        }
        self.durable.apply(mutations).inspect_err(|e| {
            error!(error = %e, "the store refused a change; it will be rewritten whole");
            self.store_behind.store(true, Ordering::SeqCst);
        })
    }

    /// Runs `change` on the pool under its lock, commits the mutations it returns, and waits
    /// until they are durable. `change` returns its own result alongside the mutations.
    async fn persist<T, X>(
        &self,
        change: impl FnOnce(&mut Pool) -> Result<(T, Vec<Mutation>), X>,
    ) -> Result<T, X>
    where
        X: From<PersistError>,
    {
        let (value, seq) = {
            let mut pool = lock(&self.pool);
            let (value, muts) = change(&mut pool)?;
            let seq = self.commit(&pool, &muts)?;
            (value, seq)
        };
        self.durable.wait(seq).await?;
        Ok(value)
    }

    /// Releases, into cooldown, every address whose pod is gone from the node: its DEL came
    /// while ipamd was away and was handled from prevResult by the plugin. Only at startup:
    /// while ipamd runs, every DEL reaches it. Assignments younger than [`DEAD_POD_GRACE`]
    /// are kept, and left to the runtime's GC if their pod is in fact gone.
    async fn release_dead_pods(&self) -> Result<(), PersistError> {
        // Each attachment with every address it holds: a dual-stack pod is gone only when
        // neither of its routes is left.
        let mut held: BTreeMap<pool::AttachmentKey, (Timestamp, Vec<IpAddr>)> = BTreeMap::new();
        {
            let pool = lock(&self.pool);
            for a in pool.allocations() {
                let entry = held.entry(a.key).or_insert((a.assigned_at, Vec::new()));
                entry.1.push(a.ip.into());
            }
            for a in pool.v6().allocations() {
                let entry = held.entry(a.key).or_insert((a.assigned_at, Vec::new()));
                entry.0 = entry.0.max(a.assigned_at);
                entry.1.push(a.ip.into());
            }
        }
        if held.is_empty() {
            return Ok(());
        }
        let all = held
            .values()
            .flat_map(|(_, ips)| ips.iter().copied())
            .collect();
        let unrouted: BTreeSet<IpAddr> = match self.host.unrouted(all).await {
            Ok(unrouted) => unrouted.into_iter().collect(),
            Err(e) => {
                warn!(error = %e, "could not read the node's routes; keeping every assignment");
                return Ok(());
            }
        };
        let now = self.clock.now();
        let mut dead = Vec::new();
        for (key, (assigned_at, ips)) in held {
            if !ips.iter().all(|ip| unrouted.contains(ip)) {
                continue;
            }
            if assigned_at.after(DEAD_POD_GRACE) > now {
                info!(
                    addresses = ?ips, attachment = %key,
                    "kept an address without a route: assigned too recently to be sure its pod is gone"
                );
                continue;
            }
            dead.push(key);
        }
        if dead.is_empty() {
            return Ok(());
        }
        for (key, ips) in self.release_keys(&dead, now).await? {
            info!(
                addresses = ?ips, attachment = %key,
                "released an address whose pod is gone (its DEL came while ipamd was down)"
            );
        }
        Ok(())
    }

    /// Releases each of `keys` into cooldown at `now`, in one durable commit; returns what
    /// each held, IPv4 and IPv6 (keys that held nothing are skipped).
    async fn release_keys(
        &self,
        keys: &[pool::AttachmentKey],
        now: Timestamp,
    ) -> Result<Vec<(pool::AttachmentKey, Vec<IpAddr>)>, PersistError> {
        let released = self
            .persist(|pool| {
                let mut released = Vec::new();
                let mut muts = Vec::new();
                for key in keys {
                    let mut ips: Vec<IpAddr> = Vec::new();
                    if let Some((r, m)) = pool.release(key, now) {
                        ips.push(r.allocation.ip.into());
                        muts.extend(m);
                    }
                    if let Some((a, m)) = pool.v6_mut().release(key, now) {
                        ips.push(a.ip.into());
                        muts.extend(m);
                    }
                    if !ips.is_empty() {
                        released.push((key.clone(), ips));
                    }
                }
                Ok::<_, PersistError>((released, muts))
            })
            .await;
        if released.as_ref().is_ok_and(|r| !r.is_empty()) {
            // Their pods' veths are no longer kept: the next sweep may take them.
            self.unrouted.notify_one();
        }
        released
    }

    fn log_pool_stats(&self) {
        let (c, prefixes) = {
            let pool = lock(&self.pool);
            let prefixes: usize = pool.enis().map(|e| pool.prefixes(&e.id).count()).sum();
            (pool.counts(self.clock.now()), prefixes)
        };
        // Worded as the Go CNI's lines so operators' greps keep working. Every ENI is on
        // network card 0: multi-card instances are not managed.
        let kind = if self.node.targets.prefix_delegation {
            "Prefix"
        } else {
            "IP"
        };
        info!(
            "{kind} pool stats for network card 0: Total IPs/Prefixes = {}/{}, AssignedIPs/CooldownIPs: {}/{}, c.maxIPsPerENI = {}",
            c.total,
            prefixes,
            c.assigned,
            c.cooling,
            self.limits().secondary_ips_per_eni
        );
    }
}

fn log_changes(what: &str, changes: &[String]) {
    if changes.is_empty() {
        info!("{what}: already in place");
    } else {
        info!("{what}: {}", changes.join("; "));
    }
}

/// The daemon's background loops, as ipamd's `main` runs them (and the fleet simulator with
/// them). Each runs until its task is aborted.
impl<E: Ec2, I: Imds, H: HostNetwork, S: StateStore + 'static> Daemon<E, I, H, S> {
    /// Spawns the controller, the reconciler (every `reconcile`) and the subnet-scarcity check
    /// (spread by `spread`); the caller aborts the tasks at shutdown.
    pub fn spawn_loops(
        self: &Arc<Self>,
        reconcile: Duration,
        spread: impl FnMut() -> f64 + Send + 'static,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let controller = Arc::clone(self);
        let reconciler = Arc::clone(self);
        let scarcity = Arc::clone(self);
        vec![
            tokio::spawn(async move { controller.run_controller().await }),
            tokio::spawn(async move { reconciler.run_reconciler(reconcile).await }),
            tokio::spawn(async move { scarcity.run_scarcity_checks(spread).await }),
        ]
    }

    /// The controller: a round every [`crate::CONTROLLER_PERIOD`], or at once when an ADD, a
    /// DEL or a change in the cluster asks for one.
    pub async fn run_controller(&self) {
        let mut cluster = self.cluster_view();
        // A view nobody updates (no cluster) never changes: stop asking it.
        let mut followed = true;
        loop {
            self.track_waits();
            tokio::select! {
                () = tokio::time::sleep(crate::CONTROLLER_PERIOD) => {}
                () = self.kicked() => {}
                changed = cluster.changed(), if followed => match changed {
                    Ok(()) => self.cluster_changed(),
                    Err(_) => followed = false,
                },
            }
            self.grow().await;
        }
    }

    /// The reconciliation with IMDS, every `period`.
    pub async fn run_reconciler(&self, period: Duration) {
        loop {
            tokio::time::sleep(period).await;
            self.reconcile().await;
        }
    }

    /// The subnet-scarcity check, every [`SCARCITY_CHECK_PERIOD`] spread over half of it
    /// either way (`spread` draws from [0, 1)), so a fleet does not ask at once.
    pub async fn run_scarcity_checks(&self, mut spread: impl FnMut() -> f64) {
        loop {
            tokio::time::sleep(SCARCITY_CHECK_PERIOD.mul_f64(0.5 + spread())).await;
            self.check_subnet_scarcity().await;
        }
    }
}
