//! How the daemon starts: its limits and targets from the instance and the configuration, its
//! state from the store, then [`STEPS`] in order. Each step relies on the ones before it: the
//! pool is reconciled with EC2 only once the node's network is there, pods are adopted from
//! their routes only once the pool knows every ENI, and growth comes last.

use std::fmt;
use std::sync::Arc;

use cloud::{CloudError, Ec2, Imds, InstanceLimits, InstanceTable, NodeIdentity};
use introspect::Metrics;
use pool::{Clock, Mutation, NodeLimits, Pool, Targets};
use thiserror::Error;
use tracing::{debug, info, warn};

use super::growth::Growth;
use super::ledger::Ledger;
use super::placement::Placements;
use super::scarcity::Scarcity;
use super::steer::Steering;
use super::veths::VethSweep;
use super::{Daemon, KUBELET_DEFAULT_MAX_PODS, LostState, Node, log_changes};
use crate::config::Config;
use crate::durability::{DaemonStore, PersistError};
use crate::host::{HostError, HostNetwork, NodeNet};

/// A step of the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The repairs the stored state needed are written back.
    Restore,
    /// The node's own network: rp_filter, SNAT, connmark, the primary ENI's MTU.
    NodeNetwork,
    /// The pool follows what EC2 says the node's ENIs hold; ENIs are set up on the node.
    Reconcile,
    /// On a node that never ran ipamd, the Go CNI's pods keep their addresses.
    Migrate,
    /// Pods whose routes are on the node keep their addresses, even if the store lost them.
    AdoptRouted,
    /// Addresses the store may have lost the release of cool down before reuse.
    CoolLost,
    /// Addresses of pods deleted while ipamd was away go back to the pool.
    ReleaseDead,
    /// The node's subnets are checked for scarcity before the first growth.
    Scarcity,
    /// The pool grows to its targets.
    FirstGrowth,
}

/// The steps of a start, in the order they run.
pub const STEPS: [Step; 9] = [
    Step::Restore,
    Step::NodeNetwork,
    Step::Reconcile,
    Step::Migrate,
    Step::AdoptRouted,
    Step::CoolLost,
    Step::ReleaseDead,
    Step::Scarcity,
    Step::FirstGrowth,
];

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What the store said at startup, for the steps that follow.
struct Restored {
    /// Repairs of the stored state, to be written back.
    fixes: Vec<Mutation>,
    /// Nothing was stored: the node may be switching from aws-node.
    first_start: bool,
    /// What the store reported lost.
    lost: LostState,
}

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
        source: store::StoreError,
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

/// Finds the instance's limits: the embedded table first, EC2 for a type the table lacks.
async fn instance_limits<E: Ec2>(
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

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
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
            source: e.into(),
        })?;
        let first_start = state.enis.is_empty() && state.addrs.is_empty();
        let (mut pool, fixes, issues) = Pool::restore(state, config.ip_cooldown);
        if config.custom_networking {
            // Pods get addresses of the ENIConfig's subnet only.
            pool.exclude_from_pods([identity.primary_eni.eni_id.clone()].into());
        }
        pool.set_prefix_delegation(targets.prefix_delegation);
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
                limits,
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
            metrics,
            ledger: Ledger::new(pool, store),
            growth: Growth::default(),
            scarcity: Scarcity::default(),
            veths: VethSweep::default(),
            placements: Placements::default(),
            steering: Steering::new(cluster, events),
        };
        let mut restored = Restored {
            fixes,
            first_start,
            lost,
        };
        for step in STEPS {
            debug!(%step, "startup step");
            daemon.step(step, config, &mut restored).await?;
        }
        Ok(daemon)
    }

    /// Carries out one step of the start.
    async fn step(
        &self,
        step: Step,
        config: &Config,
        restored: &mut Restored,
    ) -> Result<(), StartupError> {
        match step {
            Step::Restore => {
                let fixes = std::mem::take(&mut restored.fixes);
                self.ledger
                    .persist(|_| Ok::<_, PersistError>(((), fixes)))
                    .await?;
                let c = self.ledger.pool().counts(self.clock.now());
                info!(
                    assigned = c.assigned,
                    cooling = c.cooling,
                    total = c.total,
                    "restored state"
                );
            }
            Step::NodeNetwork => {
                let changes = self
                    .host
                    .setup_node(&self.node.net)
                    .await
                    .map_err(StartupError::NodeNetwork)?;
                log_changes("node network", &changes);
            }
            Step::Reconcile => self.reconcile_with_ec2().await?,
            Step::Migrate if restored.first_start => {
                self.migrate_from_go_cni(&config.go_cni_checkpoint).await?;
            }
            Step::Migrate => {}
            Step::AdoptRouted => self.adopt_routed_pods().await?,
            Step::CoolLost => self.cool_lost(&restored.lost).await?,
            Step::ReleaseDead => self.release_dead_pods().await?,
            Step::Scarcity => self.check_subnet_scarcity().await,
            Step::FirstGrowth => self.grow().await,
        }
        Ok(())
    }
}
