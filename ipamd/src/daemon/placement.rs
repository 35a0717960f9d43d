//! Where a new ENI goes, and with which security groups: the node's ENIConfig under custom
//! networking, else (subnet discovery) the tagged subnet of the node's VPC and zone with the
//! most free addresses, else the node's own subnet. And why a new ENI cannot be placed, in
//! words that name what to fix.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use cloud::{CloudError, CloudErrorKind, Ec2, EniFilter, Imds, Subnet};
use cluster::{ApiState, ClusterView, EniConfigKeys, EniConfigSpec};
use ipnetwork::Ipv4Network;
use thiserror::Error;
use tracing::{info, warn};

use super::{Daemon, lock};
use crate::durability::DaemonStore;
use crate::host::HostNetwork;

/// The tag that opts a subnet in (`1`) or out (`0`) of subnet discovery.
pub const SUBNET_ROLE_TAG: &str = "kubernetes.io/role/cni";

/// Subnets carrying tags with this prefix serve only the clusters named after it (Go CNI 1.22;
/// the older `kubernetes.io/cluster/` prefix is ignored, as it is there).
pub const SUBNET_CLUSTER_TAG_PREFIX: &str = "cni.networking.k8s.aws/cluster/";

/// Where the next ENI goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The subnet.
    pub subnet_id: String,
    /// Its CIDR (the ENI's route table needs its gateway).
    pub subnet_cidr: Ipv4Network,
    /// The ENI's security groups.
    pub security_groups: Vec<String>,
    /// Why this subnet, for the log and /v1/enis.
    pub why: String,
}

/// What placing ENIs remembers: the primary ENI's security groups (new ENIs get them unless
/// an ENIConfig names others), and why each ENI ipamd created went to its subnet.
#[derive(Default)]
pub(super) struct Placements {
    security_groups: Mutex<Vec<String>>,
    chosen: Mutex<BTreeMap<String, String>>,
}

impl Placements {
    pub(super) fn security_groups(&self) -> MutexGuard<'_, Vec<String>> {
        lock(&self.security_groups)
    }

    /// ENI id -> why it went to its subnet, for /v1/enis.
    pub(super) fn chosen(&self) -> MutexGuard<'_, BTreeMap<String, String>> {
        lock(&self.chosen)
    }
}

/// Why no ENI can be created now. Each says what to fix.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum NoPlacement {
    /// Custom networking reads the node and its ENIConfig from the API server.
    #[error("custom networking is waiting for the Kubernetes API server: {0}")]
    Api(String),
    /// The ENIConfigs cannot be listed.
    #[error("custom networking cannot list the ENIConfigs: {0}")]
    EniConfigs(String),
    /// The node object has not been seen (yet).
    #[error("custom networking is waiting for node {0} to be read from the API server")]
    NodeUnknown(String),
    /// The ENIConfig the node names does not exist.
    #[error(
        "custom networking: ENIConfig {name:?} (named by node {node}) does not exist; create it, or label the node with another"
    )]
    MissingEniConfig {
        /// The ENIConfig.
        name: String,
        /// The node naming it.
        node: String,
    },
    /// The ENIConfig exists but cannot be used.
    #[error("custom networking: ENIConfig {name:?} cannot be used: {why}")]
    InvalidEniConfig {
        /// The ENIConfig.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// The ENIConfig names a subnet EC2 does not know in the node's VPC.
    #[error(
        "custom networking: ENIConfig {name:?} names subnet {subnet}, which is not a subnet of the node's VPC {vpc}"
    )]
    UnknownSubnet {
        /// The ENIConfig.
        name: String,
        /// The subnet it names.
        subnet: String,
        /// The node's VPC.
        vpc: String,
    },
    /// Subnet discovery found no subnet that may take ENIs.
    #[error(
        "subnet discovery: no subnet of VPC {vpc} in {zone} may take ENIs: the node's subnet is tagged {SUBNET_ROLE_TAG}=0 and no other subnet is tagged for this node's cluster"
    )]
    NoSubnet {
        /// The node's VPC.
        vpc: String,
        /// The node's zone.
        zone: String,
    },
    /// EC2 could not be asked about subnets.
    #[error("looking up subnets failed: {0}")]
    Ec2(CloudError),
}

/// The node's ENIConfig under custom networking, from what ipamd knows of the cluster.
pub fn eni_config(
    view: &ClusterView,
    keys: &EniConfigKeys,
) -> Result<(String, EniConfigSpec), NoPlacement> {
    let node_name = view.node_name.clone().unwrap_or_default();
    let Some(name) = view.eni_config_name(keys) else {
        return Err(match &view.api {
            ApiState::NotConfigured(why) => NoPlacement::Api(why.clone()),
            ApiState::Failing { error, .. } => NoPlacement::Api(error.clone()),
            ApiState::Connecting { .. } => NoPlacement::Api("no answer yet".into()),
            ApiState::Connected => NoPlacement::NodeUnknown(node_name),
        });
    };
    let Some(configs) = &view.eni_configs else {
        return Err(NoPlacement::Api(
            "the ENIConfigs have not been listed yet".into(),
        ));
    };
    match configs.get(&name) {
        None => Err(NoPlacement::MissingEniConfig {
            name,
            node: node_name,
        }),
        Some(Err(why)) => Err(NoPlacement::InvalidEniConfig {
            name,
            why: why.clone(),
        }),
        Some(Ok(spec)) => Ok((name, spec.clone())),
    }
}

/// Subnet discovery's choice among `subnets` (those of the node's VPC and zone): the node's
/// own subnet unless tagged `kubernetes.io/role/cni=0`, and every other subnet tagged with a
/// value other than `0`, without cluster tags or with one for `cluster`; the one with the
/// most free addresses wins (the node's own on a tie), after those that are not `avoided`
/// (with prefix delegation: EC2 refuses prefixes there for now). `None` when no subnet may
/// be used.
pub fn discover<'a>(
    subnets: &'a [Subnet],
    node_subnet: &str,
    cluster: Option<&str>,
    avoided: &dyn Fn(&str) -> bool,
) -> Option<(&'a Subnet, String)> {
    fn role(s: &Subnet) -> Option<&str> {
        s.tags.get(SUBNET_ROLE_TAG).map(String::as_str)
    }
    let for_cluster = |s: &Subnet| {
        let mut owners = s
            .tags
            .keys()
            .filter_map(|k| k.strip_prefix(SUBNET_CLUSTER_TAG_PREFIX))
            .peekable();
        owners.peek().is_none() || cluster.is_some_and(|c| owners.any(|o| o == c))
    };
    subnets
        .iter()
        .filter(|s| {
            if s.id == node_subnet {
                role(s) != Some("0")
            } else {
                role(s).is_some_and(|r| r != "0") && for_cluster(s)
            }
        })
        .max_by_key(|s| (!avoided(&s.id), s.available_ips, s.id == node_subnet))
        .map(|s| {
            let why = if s.id == node_subnet {
                format!(
                    "subnet discovery: the node's subnet ({} free addresses; no tagged subnet has more)",
                    s.available_ips
                )
            } else {
                format!(
                    "subnet discovery: tagged {SUBNET_ROLE_TAG}={}, with the most free addresses ({}) in {}",
                    role(s).unwrap_or_default(),
                    s.available_ips,
                    s.availability_zone
                )
            };
            (s, why)
        })
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// Where the next ENI goes, as configured: custom networking, subnet discovery, or the
    /// node's subnet.
    pub(super) async fn placement(&self) -> Result<Placement, NoPlacement> {
        let id = &self.node.identity;
        let primary_groups = self.placements.security_groups().clone();
        let node_subnet = || Placement {
            subnet_id: id.primary_eni.subnet_id.clone(),
            subnet_cidr: id.primary_eni.subnet_cidr,
            security_groups: primary_groups.clone(),
            why: "the node's subnet".into(),
        };
        if self.node.custom_networking {
            let (name, spec) = eni_config(&self.steering.view(), &self.node.eni_config_keys)?;
            let unknown = || NoPlacement::UnknownSubnet {
                name: name.clone(),
                subnet: spec.subnet.clone(),
                vpc: id.vpc_id.clone(),
            };
            let found = match self
                .ec2
                .describe_subnets(&[EniFilter::new("subnet-id", &spec.subnet)])
                .await
            {
                Ok(found) => found,
                Err(e) if e.kind == CloudErrorKind::NotFound => return Err(unknown()),
                Err(e) => return Err(NoPlacement::Ec2(e)),
            };
            let subnet = found
                .into_iter()
                .find(|s| s.id == spec.subnet && s.vpc_id == id.vpc_id)
                .ok_or_else(unknown)?;
            return Ok(Placement {
                subnet_id: subnet.id,
                subnet_cidr: subnet.cidr,
                // No groups in the ENIConfig: the primary ENI's, as the Go CNI does.
                security_groups: if spec.security_groups.is_empty() {
                    primary_groups
                } else {
                    spec.security_groups
                },
                why: format!("custom networking: ENIConfig {name:?}"),
            });
        }
        if !self.node.subnet_discovery {
            return Ok(node_subnet());
        }
        let filters = [
            EniFilter::new("vpc-id", &id.vpc_id),
            EniFilter::new("availability-zone", &id.availability_zone),
        ];
        let mut subnets = match self.ec2.describe_subnets(&filters).await {
            Ok(subnets) => {
                // The same answer tells scarcity mode how full the subnets are.
                self.observe_subnets(&subnets);
                subnets
            }
            Err(e) => {
                // As the Go CNI: a node that may not list subnets keeps to its own.
                warn!(error = %e, "subnet discovery could not list subnets; using the node's subnet");
                return Ok(node_subnet());
            }
        };
        if !subnets.iter().any(|s| s.id == id.primary_eni.subnet_id) {
            // Not listed (a partial answer): still a candidate, as no tag excludes it.
            subnets.push(Subnet {
                id: id.primary_eni.subnet_id.clone(),
                cidr: id.primary_eni.subnet_cidr,
                // Not in the node identity; placement picks by IPv4 room alone.
                ipv6_cidr: None,
                availability_zone: id.availability_zone.clone(),
                vpc_id: id.vpc_id.clone(),
                available_ips: 0,
                tags: Default::default(),
            });
        }
        // With prefix delegation, subnets where EC2 refuses prefixes for now come last.
        let refusing: Vec<String> = if self.node.targets.prefix_delegation {
            let now = self.clock.now();
            let pool = self.ledger.pool();
            let fallbacks = pool.prefix_fallbacks();
            let keys = fallbacks.subnets.keys();
            keys.filter(|s| fallbacks.refuses(s, now))
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        let avoided = |s: &str| refusing.iter().any(|r| r == s);
        match discover(
            &subnets,
            &id.primary_eni.subnet_id,
            self.node.cluster_name.as_deref(),
            &avoided,
        ) {
            Some((subnet, why)) => {
                info!(subnet = %subnet.id, cidr = %subnet.cidr, "{why}");
                Ok(Placement {
                    subnet_id: subnet.id.clone(),
                    subnet_cidr: subnet.cidr,
                    security_groups: primary_groups,
                    why,
                })
            }
            None => Err(NoPlacement::NoSubnet {
                vpc: id.vpc_id.clone(),
                zone: id.availability_zone.clone(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cluster::NodeFacts;

    use super::*;

    fn subnet(id: &str, free: u32, tags: &[(&str, &str)]) -> Subnet {
        Subnet {
            id: id.into(),
            cidr: "10.0.0.0/24".parse().unwrap(),
            ipv6_cidr: None,
            availability_zone: "us-west-2a".into(),
            vpc_id: "vpc-1".into(),
            available_ips: free,
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn chosen(subnets: &[Subnet], cluster: Option<&str>) -> Option<String> {
        discover(subnets, "subnet-node", cluster, &|_| false).map(|(s, _)| s.id.clone())
    }

    #[test]
    fn discovery_takes_the_tagged_subnet_with_the_most_free_addresses() {
        let subnets = [
            subnet("subnet-node", 50, &[]),
            subnet("subnet-a", 200, &[(SUBNET_ROLE_TAG, "1")]),
            subnet("subnet-b", 300, &[(SUBNET_ROLE_TAG, "1")]),
            subnet("subnet-untagged", 900, &[]),
            subnet("subnet-off", 1000, &[(SUBNET_ROLE_TAG, "0")]),
        ];
        assert_eq!(chosen(&subnets, None).as_deref(), Some("subnet-b"));
        let (_, why) = discover(&subnets, "subnet-node", None, &|_| false).unwrap();
        assert!(why.contains("300"), "{why}");
    }

    #[test]
    fn discovery_passes_over_subnets_that_refuse_prefixes_while_another_will_do() {
        let tagged = [(SUBNET_ROLE_TAG, "1")];
        let subnets = [
            subnet("subnet-node", 100, &[]),
            subnet("subnet-b", 500, &tagged),
            subnet("subnet-c", 50, &tagged),
        ];
        let pick = |avoid: &[&str]| {
            discover(&subnets, "subnet-node", None, &|s| avoid.contains(&s))
                .map(|(s, _)| s.id.clone())
        };
        assert_eq!(pick(&[]).as_deref(), Some("subnet-b"));
        assert_eq!(pick(&["subnet-b"]).as_deref(), Some("subnet-node"));
        assert_eq!(
            pick(&["subnet-b", "subnet-node"]).as_deref(),
            Some("subnet-c")
        );
        // All refuse: the most free addresses, as without prefixes.
        let all = ["subnet-b", "subnet-node", "subnet-c"];
        assert_eq!(pick(&all).as_deref(), Some("subnet-b"));
    }

    #[test]
    fn the_nodes_subnet_counts_unless_tagged_0_and_wins_ties() {
        let subnets = [
            subnet("subnet-node", 200, &[]),
            subnet("subnet-a", 200, &[(SUBNET_ROLE_TAG, "1")]),
        ];
        assert_eq!(chosen(&subnets, None).as_deref(), Some("subnet-node"));
        let excluded = [
            subnet("subnet-node", 900, &[(SUBNET_ROLE_TAG, "0")]),
            subnet("subnet-a", 10, &[(SUBNET_ROLE_TAG, "1")]),
        ];
        assert_eq!(chosen(&excluded, None).as_deref(), Some("subnet-a"));
        let nothing = [subnet("subnet-node", 900, &[(SUBNET_ROLE_TAG, "0")])];
        assert_eq!(chosen(&nothing, None), None);
    }

    #[test]
    fn cluster_tags_keep_a_subnet_to_its_clusters() {
        let mine = format!("{SUBNET_CLUSTER_TAG_PREFIX}prod");
        let other = format!("{SUBNET_CLUSTER_TAG_PREFIX}dev");
        let subnets = [
            subnet("subnet-node", 1, &[]),
            subnet(
                "subnet-dev",
                500,
                &[(SUBNET_ROLE_TAG, "1"), (&other, "shared")],
            ),
            subnet(
                "subnet-prod",
                100,
                &[(SUBNET_ROLE_TAG, "1"), (&mine, "shared")],
            ),
            // The older prefix does not restrict a subnet, as in the Go CNI 1.22.
            subnet(
                "subnet-old",
                50,
                &[
                    (SUBNET_ROLE_TAG, "1"),
                    ("kubernetes.io/cluster/dev", "shared"),
                ],
            ),
        ];
        assert_eq!(
            chosen(&subnets, Some("prod")).as_deref(),
            Some("subnet-prod")
        );
        assert_eq!(chosen(&subnets, Some("dev")).as_deref(), Some("subnet-dev"));
        assert_eq!(
            chosen(&subnets, None).as_deref(),
            Some("subnet-old"),
            "without CLUSTER_NAME no cluster-tagged subnet is used"
        );
    }

    fn view(
        api: ApiState,
        node: Option<NodeFacts>,
        configs: Option<cluster::EniConfigs>,
    ) -> ClusterView {
        ClusterView {
            api,
            node_name: Some("ip-10-0-0-4.ec2.internal".into()),
            node,
            eni_configs: configs,
            eni_configs_error: None,
            pods: None,
        }
    }

    fn labelled(name: &str) -> NodeFacts {
        NodeFacts {
            name: "ip-10-0-0-4.ec2.internal".into(),
            labels: BTreeMap::from([("k8s.amazonaws.com/eniConfig".into(), name.into())]),
            ..Default::default()
        }
    }

    #[test]
    fn the_eniconfig_or_what_is_missing_is_named() {
        let keys = EniConfigKeys::default();
        let spec = EniConfigSpec {
            subnet: "subnet-a".into(),
            security_groups: vec!["sg-1".into()],
        };
        let configs = cluster::EniConfigs::from([
            ("az-a".to_string(), Ok(spec.clone())),
            (
                "broken".to_string(),
                Err("its spec.subnet is empty".to_string()),
            ),
        ]);
        let ok = view(
            ApiState::Connected,
            Some(labelled("az-a")),
            Some(configs.clone()),
        );
        assert_eq!(eni_config(&ok, &keys), Ok(("az-a".to_string(), spec)));

        let missing = view(
            ApiState::Connected,
            Some(labelled("az-b")),
            Some(configs.clone()),
        );
        let e = eni_config(&missing, &keys).unwrap_err();
        assert_eq!(
            e.to_string(),
            "custom networking: ENIConfig \"az-b\" (named by node ip-10-0-0-4.ec2.internal) \
             does not exist; create it, or label the node with another"
        );
        let broken = view(
            ApiState::Connected,
            Some(labelled("broken")),
            Some(configs.clone()),
        );
        assert!(matches!(
            eni_config(&broken, &keys),
            Err(NoPlacement::InvalidEniConfig { .. })
        ));

        let down = view(
            ApiState::Failing {
                error: "connection refused".into(),
                since: std::time::SystemTime::UNIX_EPOCH,
            },
            None,
            None,
        );
        assert_eq!(
            eni_config(&down, &keys),
            Err(NoPlacement::Api("connection refused".into()))
        );
        let no_node = view(ApiState::Connected, None, Some(configs));
        assert!(matches!(
            eni_config(&no_node, &keys),
            Err(NoPlacement::NodeUnknown(_))
        ));
    }
}
