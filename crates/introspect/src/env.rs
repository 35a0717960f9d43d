//! The settings `/v1/networkutils-env-settings` and `/v1/ipamd-env-settings` show, under the
//! Go CNI's environment variable names. Fields are declared in the order of their keys
//! because the Go CNI marshals a map, whose keys Go sorts.

use serde::{Deserialize, Serialize, Serializer};

/// Node networking settings (the Go CNI's `networkutils.GetConfigForDebug`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkUtilsEnv {
    /// `AWS_EXTERNAL_SERVICE_CIDRS` (empty shows as `null`, as in Go).
    #[serde(
        rename = "AWS_EXTERNAL_SERVICE_CIDRS",
        serialize_with = "null_if_empty",
        default,
        deserialize_with = "empty_if_null"
    )]
    pub external_service_cidrs: Vec<String>,
    /// `AWS_VPC_CNI_NODE_PORT_SUPPORT`.
    #[serde(rename = "AWS_VPC_CNI_NODE_PORT_SUPPORT")]
    pub node_port_support: bool,
    /// `AWS_VPC_ENI_MTU`.
    #[serde(rename = "AWS_VPC_ENI_MTU")]
    pub mtu: u32,
    /// `AWS_VPC_K8S_CNI_CONNMARK`.
    #[serde(rename = "AWS_VPC_K8S_CNI_CONNMARK")]
    pub connmark: u32,
    /// `AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS` (empty shows as `null`, as in Go).
    #[serde(
        rename = "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS",
        serialize_with = "null_if_empty",
        default,
        deserialize_with = "empty_if_null"
    )]
    pub exclude_snat_cidrs: Vec<String>,
    /// `AWS_VPC_K8S_CNI_EXTERNALSNAT`.
    #[serde(rename = "AWS_VPC_K8S_CNI_EXTERNALSNAT")]
    pub external_snat: bool,
    /// `AWS_VPC_K8S_CNI_RANDOMIZESNAT`: 0 none, 1 hashrandom, 2 prng (the Go CNI's numbers).
    #[serde(rename = "AWS_VPC_K8S_CNI_RANDOMIZESNAT")]
    pub randomize_snat: u8,
    /// `AWS_VPC_K8S_CNI_VETHPREFIX`.
    #[serde(rename = "AWS_VPC_K8S_CNI_VETHPREFIX")]
    pub veth_prefix: String,
}

/// ipamd's settings (the Go CNI's `ipamd.GetConfigForDebug`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpamdEnv {
    /// `AWS_MANAGE_ENIS_NON_SCHEDULABLE`.
    #[serde(rename = "AWS_MANAGE_ENIS_NON_SCHEDULABLE")]
    pub manage_enis_non_schedulable: bool,
    /// `AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG`.
    #[serde(rename = "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG")]
    pub custom_network_cfg: bool,
    /// `ENABLE_SUBNET_DISCOVERY`.
    #[serde(rename = "ENABLE_SUBNET_DISCOVERY")]
    pub subnet_discovery: bool,
    /// `WARM_ENI_TARGET`.
    #[serde(rename = "WARM_ENI_TARGET")]
    pub warm_eni_target: u32,
    /// `WARM_IP_TARGET` (0 = unset, as the Go CNI shows it).
    #[serde(rename = "WARM_IP_TARGET")]
    pub warm_ip_target: u32,
}

/// Go marshals a nil slice as `null`; the Go CNI's CIDR lists are nil when the variable is
/// unset.
fn null_if_empty<S: Serializer>(v: &[String], s: S) -> Result<S::Ok, S::Error> {
    if v.is_empty() {
        s.serialize_none()
    } else {
        v.serialize(s)
    }
}

fn empty_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
}
