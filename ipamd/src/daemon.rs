//! The daemon's state and the operations on it: startup (limits -> primary ENI -> restore ->
//! reconcile with EC2 -> first fill), the plugin's requests, and growing the pool.

use std::collections::{BTreeSet, HashSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cloud::{CloudError, CloudErrorKind, Ec2, InstanceLimits, InstanceTable, NodeIdentity};
use ipam_proto::{self as proto, DaemonError, ErrorKind, Reply, Request};
use pool::{Action, AssignError, Clock, EniInfo, NodeLimits, Pool, StateStore, Timestamp};
use thiserror::Error;
use tokio::sync::Notify;
use tracing::{debug, error, info, warn};

use crate::config::Config;
use crate::convert;
use crate::durability::{Durability, PersistError};
use crate::retry::retry_transient;

/// How long growth pauses after EC2 says the subnet is full (the Go CNI's 120 s).
pub const SUBNET_FULL_PAUSE: Duration = Duration::from_secs(120);

/// Why ipamd could not start. Each names what it was doing.
#[derive(Debug, Error)]
pub enum StartupError {
    /// IMDS did not say who we are.
    #[error("reading instance metadata: {0}")]
    Identity(CloudError),
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
    #[error("reading stored state from {dir}: {reason}")]
    Restore {
        /// State directory.
        dir: String,
        /// Why.
        reason: String,
    },
    /// EC2 could not be asked what the node's ENIs hold.
    #[error("reconciling with EC2: {0}")]
    Reconcile(CloudError),
    /// Writing state failed.
    #[error(transparent)]
    Persist(#[from] PersistError),
}

/// What the node is and may hold, fixed at startup.
#[derive(Clone, Debug)]
pub struct Node {
    /// IMDS identity.
    pub identity: NodeIdentity,
    /// Instance limits (from the table or EC2).
    pub instance: InstanceLimits,
    /// Limits the pool plans with (MAX_ENI applied).
    pub limits: NodeLimits,
}

/// Why the pool is not growing, for STATUS and the CNI error of an ADD that found no address.
#[derive(Clone, Debug, Default)]
struct Growth {
    paused_until: Option<Timestamp>,
    last_error: Option<String>,
}

/// The running daemon, generic over its seams.
pub struct Daemon<E, S> {
    ec2: E,
    clock: Arc<dyn Clock>,
    node: Node,
    pool: Mutex<Pool>,
    durable: Durability<S>,
    growth: Mutex<Growth>,
    kick: Notify,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the pool half-changed (every operation
    // completes before mutating), so a poisoned lock is still usable.
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
    retry_transient("DescribeInstanceTypes", || {
        ec2.describe_instance_type(instance_type)
    })
    .await
    .map_err(|source| StartupError::UnknownInstanceType {
        instance_type: instance_type.to_string(),
        source,
    })
}

impl<E: Ec2, S: StateStore + 'static> Daemon<E, S> {
    /// Starts the daemon: limits, primary ENI, restore, reconcile with EC2, first fill. Returns
    /// once it can serve.
    pub async fn start(
        config: &Config,
        ec2: E,
        identity: NodeIdentity,
        store: Arc<S>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StartupError> {
        let instance = instance_limits(&ec2, &identity.instance_type).await?;
        let max_enis = config
            .max_eni
            .map_or(instance.max_enis, |m| m.min(instance.max_enis));
        let limits = NodeLimits {
            max_enis,
            secondary_ips_per_eni: instance.secondary_ips_per_eni(),
            max_pods: instance.max_pods(),
        };
        info!(
            instance_id = %identity.instance_id,
            instance_type = %identity.instance_type,
            max_enis,
            ips_per_eni = instance.ipv4_per_eni,
            max_pods = limits.max_pods,
            "node limits"
        );

        let state = store.load().map_err(|e| StartupError::Restore {
            dir: config.state_dir.display().to_string(),
            reason: e.to_string(),
        })?;
        let (pool, fixes, issues) = Pool::restore(state, config.ip_cooldown);
        for issue in &issues {
            warn!(?issue, "stored state repaired");
        }
        let daemon = Daemon {
            ec2,
            clock,
            node: Node {
                identity,
                instance,
                limits,
            },
            pool: Mutex::new(pool),
            durable: Durability::new(store),
            growth: Mutex::new(Growth::default()),
            kick: Notify::new(),
        };
        let seq = daemon.durable.apply(&fixes)?;
        daemon.durable.wait(seq).await?;
        {
            let pool = lock(&daemon.pool);
            let c = pool.counts(daemon.clock.now());
            info!(
                assigned = c.assigned,
                cooling = c.cooling,
                total = c.total,
                "restored state"
            );
        }
        daemon.reconcile().await?;
        daemon.grow().await;
        Ok(daemon)
    }

    /// The node.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// A snapshot of the pool (for tests and, later, introspection).
    pub fn pool_snapshot(&self) -> Pool {
        lock(&self.pool).clone()
    }

    fn primary_eni(&self, existing: Option<&EniInfo>) -> EniInfo {
        let id = &self.node.identity;
        EniInfo {
            id: id.primary_eni.eni_id.clone(),
            device_number: 0,
            mac: id.primary_eni.mac.clone(),
            primary_ip: id.primary_ip,
            subnet_id: id.primary_eni.subnet_id.clone(),
            subnet_cidr: id.primary_eni.subnet_cidr,
            created_at: existing.map_or_else(|| self.clock.now(), |e| e.created_at),
        }
    }

    /// Makes the pool agree with EC2, which is the truth: addresses EC2 holds on the ENI that the
    /// pool lacks (assigned before a crash, before they were persisted) are added; addresses the
    /// pool holds that EC2 no longer has are dropped, and if a pod held one that is logged loudly.
    async fn reconcile(&self) -> Result<(), StartupError> {
        let primary_id = self.node.identity.primary_eni.eni_id.clone();
        let ids = [primary_id.clone()];
        let enis = retry_transient("DescribeNetworkInterfaces", || {
            self.ec2.describe_network_interfaces(&ids)
        })
        .await
        .map_err(StartupError::Reconcile)?;
        let ec2_ips: BTreeSet<Ipv4Addr> = enis
            .iter()
            .find(|e| e.id == primary_id)
            .map(|e| e.secondary_ips.iter().copied().collect())
            .unwrap_or_default();

        let seq = {
            let mut pool = lock(&self.pool);
            let mut muts = Vec::new();
            let primary = self.primary_eni(pool.eni(&primary_id));
            muts.extend(pool.upsert_eni(primary));
            // ENIs other than the primary are not managed by this build; state holding one came
            // from a node whose ENIs are gone.
            let others: Vec<String> = pool
                .enis()
                .filter(|e| e.id != primary_id)
                .map(|e| e.id.clone())
                .collect();
            for id in others {
                if let Ok((dropped, m)) = pool.remove_eni(&id, true) {
                    warn!(eni = %id, pods = dropped.len(), "dropped stored ENI that is not this node's primary ENI");
                    muts.extend(m);
                }
            }
            let held: BTreeSet<Ipv4Addr> = pool.addresses(&primary_id).map(|(ip, _)| ip).collect();
            for ip in held.difference(&ec2_ips) {
                if let Ok((taken, m)) = pool.remove_address(*ip, true) {
                    match taken {
                        Some(a) => error!(
                            ip = %ip, eni = %primary_id, attachment = %a.key,
                            "address of a live attachment is no longer on its ENI in EC2; dropped"
                        ),
                        None => info!(ip = %ip, "dropped address EC2 no longer has on the ENI"),
                    }
                    muts.extend(m);
                }
            }
            let missing: Vec<Ipv4Addr> = ec2_ips.difference(&held).copied().collect();
            if !missing.is_empty() {
                info!(count = missing.len(), eni = %primary_id, "adopted addresses EC2 holds on the ENI");
                match pool.add_addresses(&primary_id, &missing) {
                    Ok(m) => muts.extend(m),
                    Err(e) => warn!(error = %e, "could not adopt addresses"),
                }
            }
            self.durable.apply(&muts)?
        };
        self.durable.wait(seq).await?;
        Ok(())
    }

    /// One round of the controller: plans and carries out what the pool needs from EC2.
    pub async fn grow(&self) {
        let now = self.clock.now();
        let paused_until = lock(&self.growth).paused_until;
        if let Some(until) = paused_until.filter(|u| now < *u) {
            debug!(resume_in = ?now.until(until), "pool growth paused");
            return;
        }
        let actions = pool::plan(&lock(&self.pool), &self.node.limits, now);
        for action in actions {
            match action {
                Action::AssignIps { eni_id, count } => self.assign_ips(&eni_id, count).await,
            }
        }
    }

    async fn assign_ips(&self, eni_id: &str, count: u32) {
        match self.ec2.assign_private_ips(eni_id, count).await {
            Ok(ips) => {
                let result = {
                    let mut pool = lock(&self.pool);
                    let own = pool.eni(eni_id).map(|e| e.primary_ip);
                    // Some EC2 implementations list every address of the ENI, not only the new
                    // ones: keep only what is new and not the ENI's own address.
                    let new: Vec<Ipv4Addr> = ips
                        .into_iter()
                        .filter(|ip| Some(*ip) != own)
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect();
                    pool.add_addresses(eni_id, &new)
                        .map_err(|e| e.to_string())
                        .and_then(|m| self.durable.apply(&m).map_err(|e| e.to_string()))
                };
                match result {
                    Ok(seq) => {
                        if let Err(e) = self.durable.wait(seq).await {
                            error!(error = %e, "new addresses could not be persisted");
                        }
                        let mut growth = lock(&self.growth);
                        growth.last_error = None;
                        growth.paused_until = None;
                        drop(growth);
                        self.log_pool_stats();
                    }
                    Err(e) => {
                        error!(eni = eni_id, error = %e, "EC2 assigned addresses the pool refused")
                    }
                }
            }
            Err(e) => self.growth_failed(eni_id, e),
        }
    }

    fn growth_failed(&self, eni_id: &str, e: CloudError) {
        let now = self.clock.now();
        let mut growth = lock(&self.growth);
        let reason = match e.kind {
            CloudErrorKind::SubnetFull => {
                growth.paused_until = Some(now.after(SUBNET_FULL_PAUSE));
                format!(
                    "subnet {} is exhausted ({e}); pausing growth for {}s",
                    self.node.identity.primary_eni.subnet_id,
                    SUBNET_FULL_PAUSE.as_secs()
                )
            }
            CloudErrorKind::Throttled => format!("EC2 is throttling address assignment ({e})"),
            CloudErrorKind::LimitExceeded => {
                format!("ENI {eni_id} cannot hold more addresses ({e})")
            }
            CloudErrorKind::Unauthorized => {
                format!("the node's IAM role may not assign addresses ({e})")
            }
            _ => format!("assigning addresses to {eni_id} failed ({e})"),
        };
        warn!("{reason}");
        growth.last_error = Some(reason);
    }

    fn log_pool_stats(&self) {
        let pool = lock(&self.pool);
        let c = pool.counts(self.clock.now());
        // Worded as the Go CNI's line so operators' greps keep working.
        info!(
            "IP pool stats: Total IPs = {}, AssignedIPs/CooldownIPs: {}/{}, c.maxIPsPerENI = {}",
            c.total, c.assigned, c.cooling, self.node.limits.secondary_ips_per_eni
        );
    }

    /// Waits until something asks the controller to run early (an ADD that found no address).
    pub async fn kicked(&self) {
        self.kick.notified().await;
    }

    /// Whether the pool could grow now, or why not.
    fn can_grow(&self, now: Timestamp) -> Result<(), String> {
        let growth = lock(&self.growth);
        if let Some(until) = growth.paused_until.filter(|u| now < *u) {
            return Err(format!(
                "{} (resumes in {}s)",
                growth.last_error.as_deref().unwrap_or("growth paused"),
                now.until(until).as_secs()
            ));
        }
        if !pool::plan(&lock(&self.pool), &self.node.limits, now).is_empty() {
            return Ok(());
        }
        Err(format!(
            "the primary ENI holds all {} addresses it can; this build does not attach secondary ENIs yet",
            self.node.limits.secondary_ips_per_eni
        ))
    }

    /// Handles one plugin request.
    pub async fn handle(&self, req: Request) -> Result<Reply, DaemonError> {
        match req {
            Request::Add(r) => self.add(r).await,
            Request::Del(r) => self.del(r).await,
            Request::Check(r) => self.check(r).await,
            Request::Status => Ok(self.status()),
            Request::Gc(r) => self.gc(r).await,
        }
    }

    async fn persist(&self, seq: u64) -> Result<(), DaemonError> {
        self.durable
            .wait(seq)
            .await
            .map_err(|e| DaemonError::new(ErrorKind::Internal, e.to_string()))
    }

    async fn add(&self, r: proto::AddRequest) -> Result<Reply, DaemonError> {
        let key = convert::key(&r.key);
        let now = self.clock.now();
        let outcome = {
            let mut pool = lock(&self.pool);
            let existing = pool.get(&key).is_some();
            match pool.assign(&key, &convert::pod(&r.pod, &r.netns), now) {
                Ok((allocated, muts)) => match self.durable.apply(&muts) {
                    Ok(seq) => Ok((allocated, existing, seq)),
                    Err(e) => {
                        // Nothing reached the store: take the assignment back.
                        pool.unassign_unused(&key);
                        return Err(DaemonError::new(ErrorKind::Internal, e.to_string()));
                    }
                },
                Err(e) => Err(e),
            }
        };
        let (allocated, existing, seq) = match outcome {
            Ok(ok) => ok,
            Err(e) => return Err(self.no_address(&key, e, now)),
        };
        if let Err(e) = self.persist(seq).await {
            if !existing {
                let mut pool = lock(&self.pool);
                if let Some(m) = pool.unassign_unused(&key) {
                    let _ = self.durable.apply(&m);
                }
            }
            return Err(e);
        }
        info!(
            attachment = %key, ip = %allocated.ip, eni = %allocated.eni_id,
            pod = %format_args!("{}/{}", r.pod.namespace, r.pod.name),
            "assigned address"
        );
        Ok(Reply::Add(proto::AddReply {
            allocation: convert::allocation(&allocated),
            existing,
        }))
    }

    fn no_address(&self, key: &pool::AttachmentKey, e: AssignError, now: Timestamp) -> DaemonError {
        self.kick.notify_one();
        let growth = match self.can_grow(now) {
            Ok(()) => "the pool is growing, retry shortly".to_string(),
            Err(why) => why,
        };
        let message = format!("no address for {key}: {e}; {growth}");
        warn!("{message}");
        DaemonError::new(ErrorKind::NoAddresses, message)
    }

    async fn del(&self, r: proto::DelRequest) -> Result<Reply, DaemonError> {
        let key = convert::key(&r.key);
        let now = self.clock.now();
        let (released, seq) = {
            let mut pool = lock(&self.pool);
            match pool.release(&key, now) {
                Some((released, muts)) => {
                    let seq = self
                        .durable
                        .apply(&muts)
                        .map_err(|e| DaemonError::new(ErrorKind::Internal, e.to_string()))?;
                    (Some(released), seq)
                }
                None => (None, self.durable.seen()),
            }
        };
        self.persist(seq).await?;
        match &released {
            Some(rel) => info!(
                attachment = %key, ip = %rel.allocation.ip, reason = ?r.reason,
                cooling_for = ?now.until(rel.cooling_until), "released address"
            ),
            None => debug!(attachment = %key, "DEL of an attachment that holds nothing"),
        }
        Ok(Reply::Del(proto::DelReply {
            released: released.map(|r| convert::allocation(&r.allocation)),
        }))
    }

    async fn check(&self, r: proto::CheckRequest) -> Result<Reply, DaemonError> {
        let key = convert::key(&r.key);
        let found = lock(&self.pool).get(&key);
        self.persist(self.durable.seen()).await?;
        match found {
            Some(a) => Ok(Reply::Check(proto::CheckReply {
                allocation: convert::allocation(&a),
            })),
            None => Err(DaemonError::new(
                ErrorKind::UnknownAttachment,
                format!("ipamd holds no address for {key}"),
            )),
        }
    }

    fn status(&self) -> Reply {
        let now = self.clock.now();
        let counts = lock(&self.pool).counts(now);
        let reason = if counts.available > 0 {
            None
        } else {
            self.can_grow(now).err().map(|why| {
                format!(
                    "no address available ({} assigned, {} cooling) and the pool cannot grow: {why}",
                    counts.assigned, counts.cooling
                )
            })
        };
        Reply::Status(proto::StatusReply {
            ready: reason.is_none(),
            reason,
            pool: convert::counts(counts),
        })
    }

    async fn gc(&self, r: proto::GcRequest) -> Result<Reply, DaemonError> {
        let valid: HashSet<(String, String)> = r
            .valid
            .into_iter()
            .map(|v| (v.container_id, v.ifname))
            .collect();
        let now = self.clock.now();
        let (released, seq) = {
            let mut pool = lock(&self.pool);
            let (released, muts) = pool.gc(&r.network, &valid, now);
            let seq = self
                .durable
                .apply(&muts)
                .map_err(|e| DaemonError::new(ErrorKind::Internal, e.to_string()))?;
            (released, seq)
        };
        self.persist(seq).await?;
        for rel in &released {
            info!(attachment = %rel.allocation.key, ip = %rel.allocation.ip, "GC released address");
        }
        Ok(Reply::Gc(proto::GcReply {
            released: released
                .iter()
                .map(|r| convert::allocation(&r.allocation))
                .collect(),
        }))
    }

    /// Makes everything applied durable (at shutdown).
    pub async fn flush(&self) -> Result<(), PersistError> {
        self.durable.wait(self.durable.seen()).await
    }
}
