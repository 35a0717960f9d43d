//! What ipamd waits for from the cluster before a node under custom networking can give its
//! pods addresses, with a deadline per stage: every stage is logged when it starts, logged
//! again as an error each time it overruns its deadline, and shown on /v1/pool, so a stuck
//! start is never silent (the Go CNI's #3705). Without custom networking ipamd waits for
//! nothing from the cluster and serves pods even while the API server is away.

use std::fmt;
use std::time::{Duration, SystemTime};

use cloud::{Ec2, Imds};
use cluster::{ApiState, ClusterView, EniConfigKeys};
use introspect::ClusterStatus;
use tracing::{error, info};

use super::Daemon;
use super::eni::wall_time;
use crate::durability::DaemonStore;
use crate::host::HostNetwork;

/// How long each stage may take before ipamd says, as an error, that it is stuck there. The
/// Go CNI waits as long for the API server at startup.
pub const STAGE_DEADLINE: Duration = Duration::from_secs(30);

/// What custom networking waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// An answer from the API server.
    ApiServer,
    /// The node object.
    Node(String),
    /// The list of ENIConfigs.
    EniConfigs,
    /// The ENIConfig the node names, which does not exist (or cannot be used) yet.
    EniConfig(String),
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stage::ApiServer => f.write_str("an answer from the Kubernetes API server"),
            Stage::Node(name) => write!(f, "node {name} in the API server"),
            Stage::EniConfigs => f.write_str("the list of ENIConfigs"),
            Stage::EniConfig(name) => write!(f, "a usable ENIConfig {name:?}"),
        }
    }
}

/// The stage custom networking is in, or `None` when it has everything it needs.
pub fn stage(view: &ClusterView, keys: &EniConfigKeys) -> Option<Stage> {
    let Some(node) = &view.node else {
        return Some(match view.api {
            ApiState::Connected => Stage::Node(view.node_name.clone().unwrap_or_default()),
            _ => Stage::ApiServer,
        });
    };
    let name = cluster::eni_config_name(node, keys);
    match &view.eni_configs {
        None => Some(Stage::EniConfigs),
        Some(configs) if !matches!(configs.get(&name), Some(Ok(_))) => Some(Stage::EniConfig(name)),
        Some(_) => None,
    }
}

/// The stage being waited in, since when, and how many deadlines it has overrun (each one
/// is logged once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Waiting {
    stage: Stage,
    since: SystemTime,
    overruns: u32,
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

fn api_text(api: &ApiState) -> String {
    match api {
        ApiState::NotConfigured(why) => format!("not used: {why}"),
        ApiState::Connecting { since } => format!("no answer yet (since {})", rfc3339(*since)),
        ApiState::Connected => "answering".into(),
        ApiState::Failing { error, since } => {
            format!("failing since {}: {error}", rfc3339(*since))
        }
    }
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// Notes the stage custom networking is in now: a new stage is logged with its deadline,
    /// and a stage past its deadline is logged as an error once per deadline overrun. Called
    /// on every change of the cluster view and by the controller's rounds.
    pub fn track_waits(&self) {
        if !self.node.custom_networking {
            return;
        }
        let now = wall_time(self.clock.now());
        let current = stage(&self.steering.view(), &self.node.eni_config_keys);
        let mut waiting = self.steering.waiting();
        match (current, waiting.as_mut()) {
            (None, None) => {}
            (None, Some(w)) => {
                info!(
                    waited_s = now.duration_since(w.since).unwrap_or_default().as_secs(),
                    "custom networking has what it needs; new ENIs can be created"
                );
                *waiting = None;
            }
            (Some(stage), Some(w)) if w.stage == stage => {
                let waited = now.duration_since(w.since).unwrap_or_default();
                let due = STAGE_DEADLINE * (w.overruns + 1);
                if waited >= due {
                    w.overruns += 1;
                    error!(
                        "custom networking has waited {}s for {stage}, past its {}s deadline; \
                         this node's pods get no address until it arrives ({})",
                        waited.as_secs(),
                        STAGE_DEADLINE.as_secs(),
                        api_text(&self.steering.view().api)
                    );
                }
            }
            (Some(stage), _) => {
                info!(
                    "custom networking waits for {stage} (deadline {}s, then an error is logged)",
                    STAGE_DEADLINE.as_secs()
                );
                *waiting = Some(Waiting {
                    stage,
                    since: now,
                    overruns: 0,
                });
            }
        }
    }

    /// The cluster as introspection shows it.
    pub(super) fn cluster_status(&self) -> ClusterStatus {
        let view = self.steering.view();
        let waiting = self.steering.waiting().as_ref().map(|w| {
            format!(
                "{} since {} (deadline {}s{})",
                w.stage,
                rfc3339(w.since),
                STAGE_DEADLINE.as_secs(),
                if w.overruns > 0 { ", overrun" } else { "" }
            )
        });
        ClusterStatus {
            api: api_text(&view.api),
            node: view.node_name.clone(),
            eni_config: self
                .node
                .custom_networking
                .then(|| view.eni_config_name(&self.node.eni_config_keys))
                .flatten(),
            waiting,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cluster::{EniConfigSpec, NodeFacts};

    use super::*;

    fn view(api: ApiState, node: bool, configs: Option<&[&str]>) -> ClusterView {
        ClusterView {
            api,
            node_name: Some("n1".into()),
            node: node.then(|| NodeFacts {
                name: "n1".into(),
                labels: BTreeMap::from([("k8s.amazonaws.com/eniConfig".into(), "az-a".into())]),
                ..Default::default()
            }),
            eni_configs: configs.map(|names| {
                names
                    .iter()
                    .map(|n| (n.to_string(), Ok(EniConfigSpec::default())))
                    .collect()
            }),
            eni_configs_error: None,
            pods: None,
        }
    }

    #[test]
    fn the_stages_follow_what_is_known() {
        let keys = EniConfigKeys::default();
        let connecting = ApiState::Connecting {
            since: SystemTime::UNIX_EPOCH,
        };
        assert_eq!(
            stage(&view(connecting, false, None), &keys),
            Some(Stage::ApiServer)
        );
        assert_eq!(
            stage(&view(ApiState::Connected, false, None), &keys),
            Some(Stage::Node("n1".into()))
        );
        assert_eq!(
            stage(&view(ApiState::Connected, true, None), &keys),
            Some(Stage::EniConfigs)
        );
        assert_eq!(
            stage(&view(ApiState::Connected, true, Some(&["other"])), &keys),
            Some(Stage::EniConfig("az-a".into()))
        );
        assert_eq!(
            stage(&view(ApiState::Connected, true, Some(&["az-a"])), &keys),
            None
        );
        // Once known, the node and its ENIConfig carry a node through an API server outage.
        let failing = ApiState::Failing {
            error: "refused".into(),
            since: SystemTime::UNIX_EPOCH,
        };
        assert_eq!(stage(&view(failing, true, Some(&["az-a"])), &keys), None);
    }
}
