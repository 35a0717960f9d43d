//! The plugin's requests: ADD, DEL, CHECK, STATUS, GC. Each change is committed to the store
//! under the pool lock and the reply waits for a (shared) flush.

use std::collections::HashSet;

use cloud::{Ec2, Imds};
use ipam_proto::{self as proto, DaemonError, ErrorKind, Reply, Request};
use pool::{AssignError, StateStore, Timestamp};
use tracing::{debug, info, warn};

use super::{Daemon, lock};
use crate::convert;
use crate::durability::PersistError;
use crate::host::HostNetwork;

fn internal(e: impl std::fmt::Display) -> DaemonError {
    DaemonError::new(ErrorKind::Internal, e.to_string())
}

impl From<PersistError> for DaemonError {
    fn from(e: PersistError) -> Self {
        internal(e)
    }
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: StateStore + 'static> Daemon<E, I, H, S> {
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
    async fn add(&self, r: proto::AddRequest) -> Result<Reply, DaemonError> {
        let key = convert::key(&r.key);
        let pod = convert::pod(&r.pod, &r.netns);
        let deadline = tokio::time::Instant::now() + self.node.add_wait;
        // Subscribed before the first attempt, so growth in between is not missed.
        let mut grown = self.grown.subscribe();
        let (allocated, existing, seq) = loop {
            let now = self.clock.now();
            let attempt = {
                let mut pool = lock(&self.pool);
                let existing = pool.get(&key).is_some();
                match pool.assign(&key, &pod, now) {
                    Ok((allocated, muts)) => Ok((allocated, existing, self.commit(&pool, &muts)?)),
                    Err(e) => Err(e),
                }
            };
            match attempt {
                Ok(done) => break done,
                Err(e) => {
                    self.kick.notify_one();
                    if self.can_grow(now).is_err() {
                        return Err(self.no_address(&key, e, now));
                    }
                    match tokio::time::timeout_at(deadline, grown.changed()).await {
                        Ok(Ok(())) => {
                            debug!(attachment = %key, "addresses arrived; assigning again")
                        }
                        _ => return Err(self.no_address(&key, e, self.clock.now())),
                    }
                }
            }
        };
        // A failed flush leaves the assignment in place: the runtime retries the ADD (which
        // gets the same address) or sends DEL, and the next commit writes it.
        self.durable.wait(seq).await?;
        // The pool may have dropped below its target: let the controller look now.
        self.kick.notify_one();
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
            Err(why) => why.to_string(),
            Ok(()) => match self.last_growth_error() {
                Some(last) => format!("the pool is growing (last attempt: {last})"),
                None => "the pool is growing, retry shortly".to_string(),
            },
        };
        self.metrics.no_available_ip();
        let message = format!("no address for {key}: {e}; {growth}");
        warn!("{message}");
        DaemonError::new(ErrorKind::NoAddresses, message)
    }

    async fn del(&self, r: proto::DelRequest) -> Result<Reply, DaemonError> {
        let key = convert::key(&r.key);
        let now = self.clock.now();
        let released = self
            .persist(|pool| {
                let Some(allocated) = pool.get(&key) else {
                    return Ok((None, Vec::new()));
                };
                // An address whose wiring failed never reached a pod: nothing to cool down.
                let muts = if r.reason == proto::DelReason::SetupFailed {
                    pool.unassign_unused(&key).unwrap_or_default()
                } else {
                    pool.release(&key, now).map(|(_, m)| m).unwrap_or_default()
                };
                Ok::<_, DaemonError>((Some(allocated), muts))
            })
            .await?;
        // The pool may now be above its target: let the controller look.
        self.kick.notify_one();
        match &released {
            Some(a) => info!(attachment = %key, ip = %a.ip, reason = ?r.reason, "released address"),
            None => debug!(attachment = %key, "DEL of an attachment that holds nothing"),
        }
        Ok(Reply::Del(proto::DelReply {
            released: released.map(|a| convert::allocation(&a)),
        }))
    }

    async fn check(&self, r: proto::CheckRequest) -> Result<Reply, DaemonError> {
        let key = convert::key(&r.key);
        let found = lock(&self.pool).get(&key);
        self.durable.wait(self.durable.seen()).await?;
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
        let reason = self.not_ready(now);
        Reply::Status(proto::StatusReply {
            ready: reason.is_none(),
            reason,
            pool: convert::counts(lock(&self.pool).counts(now)),
        })
    }

    /// Why an ADD now would fail, if it would: no address free and none coming.
    pub(super) fn not_ready(&self, now: Timestamp) -> Option<String> {
        let counts = lock(&self.pool).counts(now);
        if counts.available > 0 {
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
        let released = self
            .persist(|pool| Ok::<_, DaemonError>(pool.gc(&r.network, &valid, now)))
            .await?;
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
}
