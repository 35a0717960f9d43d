//! Per-node settings: annotations (or labels) named `vpc-cni.io/<ENV NAME>` on the node
//! override the environment's warm targets and MAX_ENI for that node, so each node pool can
//! have its own. An annotation wins over a label of the same name. A value the environment
//! variable would not take is rejected, and the environment's value stays.

use std::collections::BTreeMap;

use cluster::NodeFacts;
use pool::Targets;

use crate::config::{max_eni, whole_number};

/// The prefix of the node keys.
pub const PREFIX: &str = "vpc-cni.io/";

/// The settings a node may override.
pub const KEYS: [&str; 5] = [
    "WARM_ENI_TARGET",
    "WARM_IP_TARGET",
    "MINIMUM_IP_TARGET",
    "WARM_PREFIX_TARGET",
    "MAX_ENI",
];

/// A node value that was not taken.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rejected {
    /// The node key (`vpc-cni.io/WARM_IP_TARGET`).
    pub key: String,
    /// Its value.
    pub value: String,
    /// Why it was not taken.
    pub problem: String,
}

/// What the node overrides.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Setting name to value, for the values taken.
    pub values: BTreeMap<&'static str, u32>,
    /// `MAX_ENI` as set on the node: `Some(None)` when it lifts the limit (a value below 1).
    pub max_eni: Option<Option<u32>>,
    /// The values not taken.
    pub rejected: Vec<Rejected>,
}

impl Overrides {
    /// Reads the node's keys.
    pub fn of(node: &NodeFacts) -> Overrides {
        let mut out = Overrides::default();
        for name in KEYS {
            let key = format!("{PREFIX}{name}");
            let Some(raw) = node.annotations.get(&key).or_else(|| node.labels.get(&key)) else {
                continue;
            };
            let value = raw.trim();
            let parsed = if name == "MAX_ENI" {
                max_eni(value).map(|m| out.max_eni = Some(m))
            } else {
                whole_number(value).map(|n| {
                    out.values.insert(name, n);
                })
            };
            if let Err(problem) = parsed {
                out.rejected.push(Rejected {
                    key,
                    value: raw.clone(),
                    problem,
                });
            }
        }
        out
    }

    /// `base` with the node's targets over it.
    pub fn targets(&self, base: Targets) -> Targets {
        let get = |name: &str, default: u32| self.values.get(name).copied().unwrap_or(default);
        Targets {
            warm_eni: get("WARM_ENI_TARGET", base.warm_eni),
            warm_ip: get("WARM_IP_TARGET", base.warm_ip),
            minimum_ip: get("MINIMUM_IP_TARGET", base.minimum_ip),
            warm_prefix: get("WARM_PREFIX_TARGET", base.warm_prefix),
            prefix_delegation: base.prefix_delegation,
        }
    }

    /// The ENIs the node may hold: the instance's limit under the node's MAX_ENI, or under
    /// the environment's (`base`) when the node sets none.
    pub fn max_enis(&self, instance: u32, base: u32) -> u32 {
        match self.max_eni {
            Some(Some(m)) => m.min(instance),
            Some(None) => instance,
            None => base,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> NodeFacts {
        let map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (format!("{PREFIX}{k}"), v.to_string()))
                .collect()
        };
        NodeFacts {
            name: "n".into(),
            annotations: map(annotations),
            labels: map(labels),
            ..Default::default()
        }
    }

    #[test]
    fn node_values_override_the_environment_and_annotations_win_over_labels() {
        let o = Overrides::of(&node(
            &[("WARM_IP_TARGET", "5"), ("MAX_ENI", "2")],
            &[("WARM_IP_TARGET", "9"), ("MINIMUM_IP_TARGET", "10")],
        ));
        assert!(o.rejected.is_empty());
        let t = o.targets(Targets::default());
        assert_eq!((t.warm_eni, t.warm_ip, t.minimum_ip), (1, 5, 10));
        assert_eq!(o.max_enis(3, 3), 2);
        assert_eq!(o.max_enis(1, 1), 1, "never above the instance's limit");
        assert_eq!(
            Overrides::of(&node(&[("MAX_ENI", "-1")], &[])).max_enis(4, 2),
            4
        );
        assert_eq!(Overrides::of(&node(&[], &[])).max_enis(4, 2), 2);
    }

    #[test]
    fn an_invalid_value_is_rejected_by_name_and_the_environment_value_kept() {
        let o = Overrides::of(&node(&[("WARM_IP_TARGET", "lots"), ("MAX_ENI", "x")], &[]));
        assert_eq!(o.targets(Targets::default()), Targets::default());
        assert_eq!(o.max_enis(3, 3), 3);
        let keys: Vec<_> = o.rejected.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, ["vpc-cni.io/WARM_IP_TARGET", "vpc-cni.io/MAX_ENI"]);
        assert!(
            o.rejected[0].problem.contains("whole number"),
            "{:?}",
            o.rejected
        );
    }
}
