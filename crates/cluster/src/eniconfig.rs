//! ENIConfig (`crd.k8s.amazonaws.com/v1alpha1`, cluster-scoped): the subnet and security
//! groups a node's new ENIs get under custom networking, and how a node names its ENIConfig.

use serde::Deserialize;

use crate::NodeFacts;

/// The label that names a node's ENIConfig before anything else (set by tools that manage
/// ENIConfigs for nodes, as the Go CNI reads it).
pub const EXTERNAL_ENI_CONFIG_LABEL: &str = "vpc.amazonaws.com/externalEniConfig";

/// The ENIConfig of a node that names none.
pub const DEFAULT_ENI_CONFIG: &str = "default";

/// An ENIConfig's `spec`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EniConfigSpec {
    /// `subnet`: where new ENIs go.
    pub subnet: String,
    /// `securityGroups`: the groups new ENIs get; none means the primary ENI's.
    #[serde(default)]
    pub security_groups: Vec<String>,
}

impl EniConfigSpec {
    /// Reads a spec from an object's `spec` field; the error says what is wrong with it.
    pub fn from_json(spec: Option<&serde_json::Value>) -> Result<Self, String> {
        let spec = spec.ok_or_else(|| "it has no spec".to_string())?;
        let parsed = Self::deserialize(spec).map_err(|e| format!("its spec is invalid: {e}"))?;
        if parsed.subnet.trim().is_empty() {
            return Err("its spec.subnet is empty".into());
        }
        Ok(parsed)
    }
}

/// The node keys that name an ENIConfig: `ENI_CONFIG_ANNOTATION_DEF` and
/// `ENI_CONFIG_LABEL_DEF` (both `k8s.amazonaws.com/eniConfig` by default, as in the Go CNI).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EniConfigKeys {
    /// The annotation.
    pub annotation: String,
    /// The label.
    pub label: String,
}

impl Default for EniConfigKeys {
    fn default() -> Self {
        EniConfigKeys {
            annotation: "k8s.amazonaws.com/eniConfig".into(),
            label: "k8s.amazonaws.com/eniConfig".into(),
        }
    }
}

/// The name of the node's ENIConfig, as the Go CNI finds it: the
/// [`EXTERNAL_ENI_CONFIG_LABEL`] label, else the annotation, else the label named by `keys`,
/// else [`DEFAULT_ENI_CONFIG`]. An empty value counts as absent.
pub fn eni_config_name(node: &NodeFacts, keys: &EniConfigKeys) -> String {
    let set = |v: Option<&String>| v.filter(|v| !v.trim().is_empty()).cloned();
    set(node.labels.get(EXTERNAL_ENI_CONFIG_LABEL))
        .or_else(|| set(node.annotations.get(&keys.annotation)))
        .or_else(|| set(node.labels.get(&keys.label)))
        .unwrap_or_else(|| DEFAULT_ENI_CONFIG.to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> NodeFacts {
        let map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        NodeFacts {
            name: "ip-10-0-0-4.ec2.internal".into(),
            labels: map(labels),
            annotations: map(annotations),
            unschedulable: false,
            ..Default::default()
        }
    }

    #[test]
    fn the_name_comes_from_the_external_label_then_the_annotation_then_the_label() {
        let keys = EniConfigKeys::default();
        let key = "k8s.amazonaws.com/eniConfig";
        assert_eq!(eni_config_name(&node(&[], &[]), &keys), "default");
        assert_eq!(eni_config_name(&node(&[(key, "l")], &[]), &keys), "l");
        assert_eq!(
            eni_config_name(&node(&[(key, "l")], &[(key, "a")]), &keys),
            "a"
        );
        assert_eq!(
            eni_config_name(
                &node(
                    &[(key, "l"), (EXTERNAL_ENI_CONFIG_LABEL, "x")],
                    &[(key, "a")]
                ),
                &keys
            ),
            "x"
        );
        assert_eq!(
            eni_config_name(&node(&[(key, " ")], &[]), &keys),
            "default",
            "an empty value names nothing"
        );
        let custom = EniConfigKeys {
            annotation: "example.com/cfg".into(),
            label: "topology.kubernetes.io/zone".into(),
        };
        assert_eq!(
            eni_config_name(
                &node(&[("topology.kubernetes.io/zone", "us-west-2b")], &[]),
                &custom
            ),
            "us-west-2b",
            "the common one-ENIConfig-per-zone setup"
        );
    }

    #[test]
    fn specs_are_read_as_the_go_cnis_crd_defines_them() {
        let spec = json!({"subnet": "subnet-1", "securityGroups": ["sg-1", "sg-2"]});
        assert_eq!(
            EniConfigSpec::from_json(Some(&spec)),
            Ok(EniConfigSpec {
                subnet: "subnet-1".into(),
                security_groups: vec!["sg-1".into(), "sg-2".into()],
            })
        );
        let no_groups = json!({"subnet": "subnet-1"});
        assert!(EniConfigSpec::from_json(Some(&no_groups)).is_ok());
        assert_eq!(
            EniConfigSpec::from_json(None),
            Err("it has no spec".to_string())
        );
        let empty = json!({"subnet": ""});
        assert!(EniConfigSpec::from_json(Some(&empty)).is_err());
        let wrong = json!({"subnet": 7});
        assert!(
            EniConfigSpec::from_json(Some(&wrong))
                .unwrap_err()
                .starts_with("its spec is invalid")
        );
    }
}
