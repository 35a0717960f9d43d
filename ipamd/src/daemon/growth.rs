//! Why the pool is, or is not, growing: the last failed growth step, the pause it caused, and
//! the answer an ADD that found no address gets. Each reason is a value that keeps its cause;
//! it becomes text only where it is shown (STATUS, the CNI error, the log, /v1/pool).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use cloud::{CloudError, CloudErrorKind, CreateEni, Ec2, Imds};
use pool::{Action, Blocked, Targets, Timestamp};
use thiserror::Error;
use tokio::sync::Notify;
use tracing::{info, warn};

use super::placement::{NoPlacement, eni_config};
use super::{Daemon, lock};
use crate::durability::{DaemonStore, PersistError};
use crate::host::{HostError, HostNetwork};

/// How long growth pauses after EC2 says the subnet is full (the Go CNI's 120 s).
pub const SUBNET_FULL_PAUSE: Duration = Duration::from_secs(120);

/// Growth pauses this long after a new ENI could not be set up on the node (its link did not
/// appear, say), so a node whose ENIs never show up does not create one ENI after another.
pub const ENI_SETUP_PAUSE: Duration = Duration::from_secs(30);

/// Growth pauses this long after no subnet could take a new ENI, unless the cluster's
/// configuration changes first.
pub const PLACEMENT_PAUSE: Duration = Duration::from_secs(30);

/// How long after EC2 last throttled the node its pool grows only for pods that wait
/// ([`pool::PlanContext::congested`]): long enough to span a storm's retries, short enough
/// that the warm pool refills soon after.
pub const CONGESTION_WINDOW: Duration = Duration::from_secs(60);

/// Why the pool is not growing, for STATUS and the CNI error of an ADD that found no address.
#[derive(Clone, Debug, Default)]
pub(super) struct GrowthStatus {
    pub(super) paused_until: Option<Timestamp>,
    pub(super) last_error: Option<Arc<GrowthFailure>>,
    /// When addresses were last given back (releases happen at most every 30 s).
    pub(super) last_release: Option<Timestamp>,
}

/// Growing the pool: its status, the controller's wake-up, the one-at-a-time lock on ENI
/// changes, and what growth must remember between rounds.
#[derive(Default)]
pub(super) struct Growth {
    status: Mutex<GrowthStatus>,
    /// A CreateNetworkInterface request whose answer did not come back: sent again as it is
    /// (same client token) until EC2 answers, so a lost answer never costs a second ENI.
    pending_create: Mutex<Option<CreateEni>>,
    /// Growth and reconciliation both change ENIs through EC2: one at a time.
    ec2_ops: tokio::sync::Mutex<()>,
    kick: Notify,
    /// Attached ENIs ipamd does not manage, as EC2 last listed them: they take device indexes
    /// and ENI slots.
    unmanaged: Mutex<BTreeMap<String, u32>>,
}

impl Growth {
    pub(super) fn status(&self) -> MutexGuard<'_, GrowthStatus> {
        lock(&self.status)
    }

    pub(super) fn pending_create(&self) -> MutexGuard<'_, Option<CreateEni>> {
        lock(&self.pending_create)
    }

    /// Held while ENIs change through EC2.
    pub(super) async fn ec2_ops(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.ec2_ops.lock().await
    }

    /// Asks the controller for a round now.
    pub(super) fn kick(&self) {
        self.kick.notify_one();
    }

    /// Waits until something asks the controller for a round.
    pub(super) async fn kicked(&self) {
        self.kick.notified().await;
    }

    /// ENI id -> device index of the ENIs ipamd does not manage.
    pub(super) fn unmanaged(&self) -> MutexGuard<'_, BTreeMap<String, u32>> {
        lock(&self.unmanaged)
    }
}

/// An attached ENI that could not be made usable on the node.
#[derive(Debug, Error)]
pub enum EniSetupError {
    /// EC2 described the ENI without its own address.
    #[error("EC2 gave {eni} no primary address")]
    NoPrimaryIp {
        /// The ENI.
        eni: String,
    },
    /// EC2 described the ENI with a MAC that is not one.
    #[error("EC2 gave {eni} the MAC {mac:?}")]
    BadMac {
        /// The ENI.
        eni: String,
        /// What EC2 said.
        mac: String,
    },
    /// Its link, table or rule could not be set up.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The pool could not keep it.
    #[error(transparent)]
    Persist(#[from] PersistError),
}

/// A growth step that failed, and what it did to growth.
#[derive(Debug)]
pub enum GrowthFailure {
    /// EC2 refused or failed a call of the step (`doing` says which).
    Ec2 {
        /// The step, e.g. `creating an ENI`.
        doing: String,
        /// EC2's error.
        source: CloudError,
        /// The node's subnet, named when EC2 says it is full.
        subnet: String,
    },
    /// The ENI is attached but could not be set up on the node.
    EniSetup {
        /// The ENI.
        eni: String,
        /// Why.
        source: EniSetupError,
    },
    /// No subnet can take the ENI (custom networking or subnet discovery says why).
    Placement(NoPlacement),
}

impl GrowthFailure {
    /// How long growth pauses after this failure, if it pauses at all.
    pub fn pause(&self) -> Option<Duration> {
        match self {
            GrowthFailure::Ec2 { source, .. } if source.is_subnet_exhausted() => {
                Some(SUBNET_FULL_PAUSE)
            }
            GrowthFailure::Ec2 { .. } | GrowthFailure::Placement(NoPlacement::Ec2(_)) => None,
            GrowthFailure::EniSetup { .. } => Some(ENI_SETUP_PAUSE),
            // Until the configuration changes (which ends the pause at once) a retry would
            // fail the same way.
            GrowthFailure::Placement(_) => Some(PLACEMENT_PAUSE),
        }
    }
}

impl fmt::Display for GrowthFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pause = self.pause().map(|p| p.as_secs());
        match self {
            GrowthFailure::Ec2 {
                doing,
                source,
                subnet,
            } => match source.kind {
                // The first sentence is the Go CNI's, which operators grep for.
                CloudErrorKind::SubnetFull | CloudErrorKind::NoCidrBlock => write!(
                    f,
                    "Unable to attach IPs/Prefixes for the ENI, subnet doesn't seem to have enough \
                     IPs/Prefixes. Consider using new subnet or carve a reserved range using \
                     create-subnet-cidr-reservation: subnet {subnet} is exhausted ({source}); \
                     pausing growth for {}s",
                    pause.unwrap_or_default()
                ),
                CloudErrorKind::Throttled => write!(f, "EC2 is throttling ({doing}: {source})"),
                CloudErrorKind::Overloaded => {
                    write!(f, "too many EC2 calls are queued ({doing}: {source})")
                }
                CloudErrorKind::LimitExceeded => {
                    write!(f, "an instance limit was hit ({doing}: {source})")
                }
                CloudErrorKind::Unauthorized => {
                    write!(
                        f,
                        "the node's IAM role lacks a permission ({doing}: {source})"
                    )
                }
                _ => write!(f, "{doing} failed ({source})"),
            },
            GrowthFailure::EniSetup { eni, source } => write!(
                f,
                "setting up ENI {eni} on the node failed ({source}); pausing growth for {}s",
                pause.unwrap_or_default()
            ),
            GrowthFailure::Placement(why) => why.fmt(f),
        }
    }
}

impl std::error::Error for GrowthFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GrowthFailure::Ec2 { source, .. } => Some(source),
            GrowthFailure::EniSetup { source, .. } => Some(source),
            GrowthFailure::Placement(why) => Some(why),
        }
    }
}

/// Why an ADD that found no address cannot wait for the pool to grow.
#[derive(Clone, Debug)]
pub enum NoGrowth {
    /// Growth is paused after a failure.
    Paused {
        /// The failure, when known.
        cause: Option<Arc<GrowthFailure>>,
        /// Until growth resumes.
        resumes_in: Duration,
    },
    /// A limit of the node stops it.
    Blocked(Blocked),
    /// No subnet can take a new ENI now (custom networking's ENIConfig is missing, say).
    Placement(NoPlacement),
    /// The pool is at its targets, so it will not grow although nothing is free (e.g.
    /// MINIMUM_IP_TARGET met with every address assigned, as in the Go CNI).
    AtTargets(Targets),
}

impl fmt::Display for NoGrowth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoGrowth::Paused { cause, resumes_in } => match cause {
                Some(cause) => write!(f, "{cause} (resumes in {}s)", resumes_in.as_secs()),
                None => write!(f, "growth paused (resumes in {}s)", resumes_in.as_secs()),
            },
            NoGrowth::Blocked(blocked) => blocked.fmt(f),
            NoGrowth::Placement(why) => why.fmt(f),
            NoGrowth::AtTargets(t) => write!(
                f,
                "the pool is at its targets and will not grow (WARM_ENI_TARGET={}, \
                 WARM_IP_TARGET={}, MINIMUM_IP_TARGET={}, WARM_PREFIX_TARGET={})",
                t.warm_eni, t.warm_ip, t.minimum_ip, t.warm_prefix
            ),
        }
    }
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// EC2 throttled the node within [`CONGESTION_WINDOW`].
    pub(super) fn congested(&self) -> bool {
        self.ec2.throttled_within(CONGESTION_WINDOW)
    }

    pub(super) fn growth_succeeded(&self) {
        let mut growth = self.growth.status();
        growth.last_error = None;
        growth.paused_until = None;
    }

    /// The node just gave addresses back to EC2: a pause for a full subnet ends, since the
    /// subnet now has at least those free, and the node's own pending pods are served at once
    /// rather than after the 120 s (scarcity mode gives idle addresses back exactly so that
    /// they can be taken where pods wait).
    pub(super) fn gave_back(&self) {
        let mut growth = self.growth.status();
        let full = growth.last_error.as_deref().is_some_and(
            |f| matches!(f, GrowthFailure::Ec2 { source, .. } if source.is_subnet_exhausted()),
        );
        if full && growth.paused_until.take().is_some() {
            info!("addresses given back to the subnet: growth resumes");
        }
    }

    /// Records a failed growth step (and the pause it calls for) and logs it.
    pub(super) fn growth_failed(&self, failure: GrowthFailure) {
        warn!("{failure}");
        let now = self.clock.now();
        let mut growth = self.growth.status();
        if let Some(pause) = failure.pause() {
            growth.paused_until = Some(now.after(pause));
        }
        growth.last_error = Some(Arc::new(failure));
    }

    /// An EC2 call of a growth step failed.
    pub(super) fn ec2_failed(&self, doing: impl Into<String>, source: CloudError) {
        if source.is_subnet_exhausted() {
            self.subnet_full();
        }
        if source.kind == CloudErrorKind::Unauthorized
            && let Some(regarding) = self.own_object()
        {
            // As the Go CNI does, on ipamd's own pod.
            self.steering.emit(cluster::ClusterEvent {
                regarding,
                kind: cluster::EventKind::Warning,
                reason: "MissingIAMPermissions".into(),
                action: source.api.clone(),
                note: format!(
                    "Unauthorized operation: failed to call {} due to missing permissions. \
                     Please refer to https://github.com/aws/amazon-vpc-cni-k8s/blob/master/docs/iam-policy.md \
                     to attach relevant policy to IAM role ({source})",
                    source.api
                ),
            });
        }
        self.growth_failed(GrowthFailure::Ec2 {
            doing: doing.into(),
            source,
            subnet: self.node.identity.primary_eni.subnet_id.clone(),
        });
    }

    /// Whether the pool is growing or about to, or why not: paused, blocked by a limit, or
    /// already at its targets (an ADD then finds nothing to wait for).
    pub(super) fn can_grow(&self, now: Timestamp) -> Result<(), NoGrowth> {
        let growth = self.growth.status().clone();
        if let Some(until) = growth.paused_until.filter(|u| now < *u) {
            return Err(NoGrowth::Paused {
                cause: growth.last_error,
                resumes_in: now.until(until),
            });
        }
        let plan = self.current_plan(now);
        if let Some(blocked) = plan.blocked {
            return Err(NoGrowth::Blocked(blocked));
        }
        let creates = plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::CreateEni { .. }));
        if creates && self.node.custom_networking {
            // What the cluster says decides at once whether an ENI can be placed, so an ADD
            // is told why instead of waiting for growth that cannot come.
            eni_config(&self.steering.view(), &self.node.eni_config_keys)
                .map_err(NoGrowth::Placement)?;
        }
        if plan.actions.iter().any(Action::is_growth) {
            return Ok(());
        }
        Err(NoGrowth::AtTargets(self.targets()))
    }

    /// The cluster's configuration changed: a pause caused by where ENIs go ends now, so the
    /// next round tries the new configuration at once.
    pub fn cluster_changed(&self) {
        self.report_rejected_settings();
        let mut growth = self.growth.status();
        if growth
            .last_error
            .as_deref()
            .is_some_and(|e| matches!(e, GrowthFailure::Placement(_)))
        {
            growth.paused_until = None;
        }
        drop(growth);
        self.growth.kick();
    }

    /// The last growth failure, if the latest attempt failed.
    pub(super) fn last_growth_error(&self) -> Option<Arc<GrowthFailure>> {
        self.growth.status().last_error.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ec2_error(code: &str) -> CloudError {
        CloudError::from_code(cloud::Action::CreateNetworkInterface, code, "no")
    }

    #[test]
    fn a_full_subnet_pauses_growth_and_keeps_the_go_cni_wording() {
        let f = GrowthFailure::Ec2 {
            doing: "creating an ENI".into(),
            source: ec2_error("InsufficientFreeAddressesInSubnet"),
            subnet: "subnet-1".into(),
        };
        assert_eq!(f.pause(), Some(SUBNET_FULL_PAUSE));
        let text = f.to_string();
        assert!(
            text.starts_with("Unable to attach IPs/Prefixes for the ENI, subnet doesn't seem")
                && text.contains("subnet subnet-1 is exhausted")
                && text.ends_with("pausing growth for 120s"),
            "{text}"
        );
        assert!(std::error::Error::source(&f).is_some(), "the cause is kept");
    }

    #[test]
    fn other_failures_name_the_step_and_do_not_pause() {
        let f = GrowthFailure::Ec2 {
            doing: "creating an ENI".into(),
            source: ec2_error("RequestLimitExceeded"),
            subnet: "subnet-1".into(),
        };
        assert_eq!(f.pause(), None);
        assert_eq!(
            f.to_string(),
            "EC2 is throttling (creating an ENI: CreateNetworkInterface: RequestLimitExceeded: no)"
        );
        let setup = GrowthFailure::EniSetup {
            eni: "eni-1".into(),
            source: EniSetupError::NoPrimaryIp {
                eni: "eni-1".into(),
            },
        };
        assert_eq!(setup.pause(), Some(ENI_SETUP_PAUSE));
        assert_eq!(
            setup.to_string(),
            "setting up ENI eni-1 on the node failed (EC2 gave eni-1 no primary address); \
             pausing growth for 30s"
        );
    }

    #[test]
    fn no_growth_reads_as_before() {
        let paused = NoGrowth::Paused {
            cause: None,
            resumes_in: Duration::from_secs(7),
        };
        assert_eq!(paused.to_string(), "growth paused (resumes in 7s)");
        let at = NoGrowth::AtTargets(Targets {
            warm_eni: 0,
            warm_ip: 0,
            minimum_ip: 3,
            warm_prefix: 0,
            prefix_delegation: false,
        });
        assert!(at.to_string().contains("MINIMUM_IP_TARGET=3"), "{at}");
    }
}
