//! The plugin's requests: ADD, DEL, CHECK, STATUS, GC. Each change is committed to the store
//! under the pool lock and the reply waits for a (shared) flush.

use std::collections::HashSet;

use cloud::{Ec2, Imds};
use ipam_proto::{self as proto, DaemonError, ErrorKind, NoAddressCause, Reply, Request};
use pool::{AssignError, Timestamp};
use tracing::{debug, info, warn};

use super::Daemon;
use crate::convert;
use crate::durability::{DaemonStore, PersistError};
use crate::host::HostNetwork;

fn internal(e: impl std::fmt::Display) -> DaemonError {
    DaemonError::new(ErrorKind::Internal, e.to_string())
}

impl From<PersistError> for DaemonError {
    fn from(e: PersistError) -> Self {
        internal(e)
    }
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// Handles one plugin request.
    pub async fn handle(&self, req: Request) -> Result<Reply, DaemonError> {
        match req {
            Request::Add(r) => {
                self.metrics.add_request();
                let started = std::time::Instant::now();
                let reply = self.add(r).await;
                self.metrics
                    .add_latency(started.elapsed().as_secs_f64(), reply.is_ok());
                reply
            }
            Request::Del(r) => {
                // The Go CNI's reasons, as its metric labels them.
                self.metrics.del_request(match r.reason {
                    proto::DelReason::SetupFailed => "SetupNSFailed",
                    proto::DelReason::PodDeleted => "PodDeleted",
                });
                self.del(r).await
            }
            Request::Check(r) => self.check(r).await,
            Request::Status => Ok(self.status()),
            Request::Gc(r) => self.gc(r).await,
        }
    }

    /// ADD. With no address free but the pool able to grow, the ADD waits (up to
    /// `IPAMD_ADD_WAIT`) for the addresses the controller is getting, instead of sending the
    /// runtime away to retry: that is what keeps a pod on a cold node out of ContainerCreating.
    /// A dual-stack attachment gets both addresses or neither.
    async fn add(&self, r: proto::AddRequest) -> Result<Reply, DaemonError> {
        let key = convert::key(&r.key);
        let pod = convert::pod(&r.pod, &r.netns);
        let deadline = tokio::time::Instant::now() + self.node.add_wait;
        // Subscribed before the first attempt, so growth in between is not missed.
        let mut grown = self.ledger.watch_growth();
        let (held, existing, seq) = loop {
            let now = self.clock.now();
            let attempt = {
                let mut pool = self.ledger.pool();
                let existing = pool.get(&key).is_some() || pool.v6().get(&key).is_some();
                let (result, muts) = self.assign(&mut pool, &key, &pod, now);
                match result {
                    Ok(held) => Ok((held, existing, self.ledger.commit(&pool, &muts)?)),
                    Err(e) => {
                        if !muts.is_empty() {
                            self.ledger.commit(&pool, &muts)?;
                        }
                        Err(e)
                    }
                }
            };
            match attempt {
                Ok(done) => break done,
                Err(e) => {
                    self.growth.kick();
                    if let Shortage::V4(_) = e
                        && self.can_grow(now).is_err()
                    {
                        return Err(self.no_address(&key, &r.pod, e, now));
                    }
                    match tokio::time::timeout_at(deadline, grown.changed()).await {
                        Ok(Ok(())) => {
                            debug!(attachment = %key, "addresses arrived; assigning again")
                        }
                        _ => return Err(self.no_address(&key, &r.pod, e, self.clock.now())),
                    }
                }
            }
        };
        // A failed flush leaves the assignment in place: the runtime retries the ADD (which
        // gets the same address) or sends DEL, and the next commit writes it.
        self.ledger.wait(seq).await?;
        // The pool may have dropped below its target: let the controller look now.
        self.growth.kick();
        let allocation = held
            .allocation()
            .ok_or_else(|| internal("assigned nothing"))?;
        info!(
            attachment = %key, addresses = %held, eni = %allocation.eni_id,
            pod = %format_args!("{}/{}", r.pod.namespace, r.pod.name),
            "assigned address"
        );
        Ok(Reply::Add(proto::AddReply {
            allocation,
            existing,
        }))
    }

    /// Assigns what the node's family gives a pod, under the pool lock. The mutations are
    /// returned on failure too: a failed attempt may still have changed the pool (cooled IPv6
    /// addresses forgotten), and the store must follow.
    fn assign(
        &self,
        pool: &mut pool::Pool,
        key: &pool::AttachmentKey,
        pod: &pool::PodInfo,
        now: Timestamp,
    ) -> (Result<Held, Shortage>, Vec<pool::Mutation>) {
        let family = self.node.ip_family;
        let had_v6 = pool.v6().get(key).is_some();
        let mut muts = Vec::new();
        // IPv6 first: it fails only without a prefix, and undoing it is exact (the address is
        // forgotten), whereas an IPv4 address given back loses its release time.
        let v6 = if family.has_v6() {
            match pool.v6_mut().assign(key, pod, now) {
                Ok((a, m)) => {
                    muts.extend(m);
                    Some(a)
                }
                Err(e) => return (Err(Shortage::V6(e)), muts),
            }
        } else {
            None
        };
        let v4 = if family.has_v4() {
            match pool.assign(key, pod, now) {
                Ok((a, m)) => {
                    muts.extend(m);
                    Some(a)
                }
                Err(e) => {
                    if !had_v6 {
                        muts.extend(pool.v6_mut().unassign_unused(key).unwrap_or_default());
                    }
                    return (Err(Shortage::V4(e)), muts);
                }
            }
        } else {
            None
        };
        (Ok(Held { v4, v6 }), muts)
    }

    fn no_address(
        &self,
        key: &pool::AttachmentKey,
        pod: &proto::PodMeta,
        e: Shortage,
        now: Timestamp,
    ) -> DaemonError {
        self.growth.kick();
        let can_grow = self.can_grow(now);
        let cause = cause(&e, &can_grow, self.last_growth_error().as_deref());
        let growth = match (&e, can_grow) {
            (Shortage::V6(_), _) => match self.last_growth_error() {
                Some(last) => format!("last attempt: {last}"),
                None => "ipamd is asking EC2 for one, retry shortly".to_string(),
            },
            (Shortage::V4(_), Err(why)) => why.to_string(),
            (Shortage::V4(_), Ok(())) => match self.last_growth_error() {
                Some(last) => format!("the pool is growing (last attempt: {last})"),
                None => "the pool is growing, retry shortly".to_string(),
            },
        };
        self.metrics.no_available_ip();
        let message = format!("no address for {key}: {e}; {growth}");
        warn!("{message}");
        if !pod.name.is_empty() {
            let limit = match cause {
                NoAddressCause::EniLimit => format!(
                    " (ENI limit {} of {})",
                    self.limits().max_enis,
                    self.node.identity.instance_type
                ),
                _ => String::new(),
            };
            self.steering.emit(cluster::ClusterEvent {
                regarding: cluster::Regarding::Pod {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    uid: self.pod_uid(&pod.namespace, &pod.name, &pod.uid),
                },
                kind: cluster::EventKind::Warning,
                reason: "FailedAssignIP".into(),
                action: cause.as_str().into(),
                note: format!("{e}; {growth}{limit}"),
            });
        }
        DaemonError::no_addresses(cause, message)
    }

    async fn del(&self, r: proto::DelRequest) -> Result<Reply, DaemonError> {
        let key = convert::key(&r.key);
        let now = self.clock.now();
        let released = self
            .ledger
            .persist(|pool| {
                let held = Held {
                    v4: pool.get(&key),
                    v6: pool.v6().get(&key),
                };
                // An address whose wiring failed never reached a pod: nothing to cool down.
                let mut muts = Vec::new();
                if r.reason == proto::DelReason::SetupFailed {
                    muts.extend(pool.unassign_unused(&key).unwrap_or_default());
                    muts.extend(pool.v6_mut().unassign_unused(&key).unwrap_or_default());
                } else {
                    muts.extend(pool.release(&key, now).map(|(_, m)| m).unwrap_or_default());
                    muts.extend(
                        pool.v6_mut()
                            .release(&key, now)
                            .map(|(_, m)| m)
                            .unwrap_or_default(),
                    );
                }
                Ok::<_, DaemonError>((held, muts))
            })
            .await?;
        // The pool may now be above its target: let the controller look.
        self.growth.kick();
        // The plugin unroutes the pod next (from its prevResult when ipamd held nothing): its
        // veth goes with the namespace, or with the next sweep.
        self.veths.notify_unrouted();
        let allocation = released.allocation();
        match &allocation {
            Some(_) => {
                info!(attachment = %key, addresses = %released, reason = ?r.reason, "released address")
            }
            None => debug!(attachment = %key, "DEL of an attachment that holds nothing"),
        }
        Ok(Reply::Del(proto::DelReply {
            released: allocation,
        }))
    }

    async fn check(&self, r: proto::CheckRequest) -> Result<Reply, DaemonError> {
        let key = convert::key(&r.key);
        let found = {
            let pool = self.ledger.pool();
            Held {
                v4: pool.get(&key),
                v6: pool.v6().get(&key),
            }
        };
        self.ledger.flush().await?;
        match found.allocation() {
            Some(allocation) => Ok(Reply::Check(proto::CheckReply { allocation })),
            None => Err(DaemonError::new(
                ErrorKind::UnknownAttachment,
                format!("ipamd holds no address for {key}"),
            )),
        }
    }

    fn status(&self) -> Reply {
        let now = self.clock.now();
        let reason = self.not_ready(now);
        Reply::Status(proto::StatusReply {
            ready: reason.is_none(),
            reason,
            pool: convert::counts(self.ledger.pool().counts(now)),
        })
    }

    /// Why an ADD now would fail, if it would: no IPv6 prefix (IPv6 and dual-stack), or no
    /// IPv4 address free and none coming.
    pub(super) fn not_ready(&self, now: Timestamp) -> Option<String> {
        let (counts, prefixes6) = {
            let pool = self.ledger.pool();
            (pool.counts(now), pool.v6().counts(now).prefixes)
        };
        if self.node.ip_family.has_v6() && prefixes6 == 0 {
            let last = self
                .last_growth_error()
                .map_or_else(|| "not asked yet".to_string(), |e| e.to_string());
            return Some(format!(
                "no IPv6 prefix delegated to the primary ENI yet ({last})"
            ));
        }
        if !self.node.ip_family.has_v4() || counts.available > 0 {
            return None;
        }
        self.can_grow(now).err().map(|why| {
            format!(
                "no address available ({} assigned, {} cooling) and the pool cannot grow: {why}",
                counts.assigned, counts.cooling
            )
        })
    }

    async fn gc(&self, r: proto::GcRequest) -> Result<Reply, DaemonError> {
        let valid: HashSet<(String, String)> = r
            .valid
            .into_iter()
            .map(|v| (v.container_id, v.ifname))
            .collect();
        let now = self.clock.now();
        let (released, released6) = self
            .ledger
            .persist(|pool| {
                let (released, mut muts) = pool.gc(&r.network, &valid, now);
                let (released6, m) = pool.v6_mut().gc(&r.network, &valid, now);
                muts.extend(m);
                Ok::<_, DaemonError>(((released, released6), muts))
            })
            .await?;
        // One allocation per attachment, with both of a dual-stack pod's addresses.
        let mut by_key: std::collections::BTreeMap<pool::AttachmentKey, Held> = Default::default();
        for r in released {
            let key = r.allocation.key.clone();
            by_key.entry(key).or_default().v4 = Some(r.allocation);
        }
        for a in released6 {
            let key = a.key.clone();
            by_key.entry(key).or_default().v6 = Some(a);
        }
        for (key, held) in &by_key {
            info!(attachment = %key, addresses = %held, "GC released address");
        }
        if !by_key.is_empty() {
            // A released attachment's veth is no longer kept: the next sweep may take it.
            self.veths.notify_unrouted();
        }
        Ok(Reply::Gc(proto::GcReply {
            released: by_key.values().filter_map(Held::allocation).collect(),
        }))
    }
}

/// What one attachment holds.
#[derive(Default)]
struct Held {
    v4: Option<pool::Allocated>,
    v6: Option<pool::Allocated6>,
}

impl Held {
    fn allocation(&self) -> Option<proto::Allocation> {
        convert::allocation(self.v4.as_ref(), self.v6.as_ref())
    }
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v4 = self.v4.as_ref().map(|a| a.ip.to_string());
        let v6 = self.v6.as_ref().map(|a| a.ip.to_string());
        let all: Vec<String> = v4.into_iter().chain(v6).collect();
        f.write_str(&all.join(" "))
    }
}

/// Why an attachment could not get its addresses.
#[derive(Debug)]
enum Shortage {
    V4(AssignError),
    V6(pool::Pool6Error),
}

impl std::fmt::Display for Shortage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shortage::V4(e) => write!(f, "{e}"),
            Shortage::V6(e) => write!(f, "{e}"),
        }
    }
}

/// The cause of an ADD that found no address, as the action of its Event: one Event per
/// cause, so a pod's events say what changed.
fn cause(
    e: &Shortage,
    growth: &Result<(), super::growth::NoGrowth>,
    last: Option<&super::growth::GrowthFailure>,
) -> NoAddressCause {
    use super::growth::NoGrowth;
    match (e, growth) {
        (Shortage::V4(AssignError::AllCooling { .. }), _) => NoAddressCause::AddressesCooling,
        (_, Err(NoGrowth::Blocked(pool::Blocked::MaxEnis { .. }))) => NoAddressCause::EniLimit,
        (_, Err(NoGrowth::Blocked(pool::Blocked::MaxPods { .. }))) => NoAddressCause::MaxPods,
        (_, Err(NoGrowth::Blocked(pool::Blocked::Cordoned { .. }))) => NoAddressCause::NodeCordoned,
        (_, Err(NoGrowth::Placement(_))) => NoAddressCause::NoSubnetForEni,
        (_, Err(NoGrowth::AtTargets(_))) => NoAddressCause::AtTargets,
        (_, Err(NoGrowth::Paused { cause, .. })) => {
            failure(cause.as_deref(), NoAddressCause::GrowthPaused)
        }
        (_, Ok(())) => failure(last, NoAddressCause::PoolGrowing),
    }
}

/// The cause a growth failure names, else `otherwise`.
fn failure(f: Option<&super::growth::GrowthFailure>, otherwise: NoAddressCause) -> NoAddressCause {
    use super::growth::GrowthFailure;
    use cloud::CloudErrorKind;
    match f {
        Some(GrowthFailure::Ec2 { source, .. }) => match source.kind {
            CloudErrorKind::SubnetFull | CloudErrorKind::NoCidrBlock => {
                NoAddressCause::SubnetExhausted
            }
            CloudErrorKind::Throttled | CloudErrorKind::Overloaded => NoAddressCause::Ec2Throttling,
            CloudErrorKind::Unauthorized => NoAddressCause::MissingIamPermissions,
            _ => NoAddressCause::Ec2Error,
        },
        Some(GrowthFailure::Placement(_)) => NoAddressCause::NoSubnetForEni,
        _ => otherwise,
    }
}
