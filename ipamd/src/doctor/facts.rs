//! Everything the checks look at, gathered once. Each source that can fail is a `Result`
//! whose error says why it could not be read: an unreachable source is a finding, not a crash.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use cloud::{
    Action, EniMetadata, InstanceLimits, NetworkInterface, NodeIdentity, Permission, Subnet,
};
use introspect::json::{Ec2RefusalEntry, EniInfos, PodEntry, PoolStatus};
use ipam_proto::StatusReply;
use ipnetwork::IpNetwork;

use crate::config::Config;

/// A rule, IPv4 or IPv6, as the checks need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KRule {
    /// `pref`.
    pub priority: u32,
    /// `from`.
    pub src: Option<IpNetwork>,
    /// `to`.
    pub dst: Option<IpNetwork>,
    /// The table looked up (0 when the action is not a lookup).
    pub table: u32,
    /// A plain lookup (no fwmark, iif, not).
    pub plain: bool,
}

impl fmt::Display for KRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(src) = &self.src {
            write!(f, "from {src} ")?;
        }
        if let Some(dst) = &self.dst {
            write!(f, "to {dst} ")?;
        }
        let table = match self.table {
            netops::RT_TABLE_MAIN => "main".to_string(),
            t => t.to_string(),
        };
        write!(f, "lookup {table} prio {}", self.priority)
    }
}

/// A route, IPv4 or IPv6.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KRoute {
    /// Destination.
    pub dst: IpNetwork,
    /// Next hop.
    pub gateway: Option<IpAddr>,
    /// Output interface index.
    pub oif: Option<u32>,
    /// The interface's name, when it has one.
    pub dev: Option<String>,
    /// Table.
    pub table: u32,
    /// Scope.
    pub scope: netops::Scope,
}

impl fmt::Display for KRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.dst)?;
        if let Some(gw) = self.gateway {
            write!(f, " via {gw}")?;
        }
        if let Some(dev) = &self.dev {
            write!(f, " dev {dev}")?;
        }
        match self.table {
            netops::RT_TABLE_MAIN => Ok(()),
            t => write!(f, " table {t}"),
        }
    }
}

/// What the kernel of the node's namespace holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kernel {
    /// Every rule, both families.
    pub rules: Vec<KRule>,
    /// Every unicast route of every table, both families.
    pub routes: Vec<KRoute>,
    /// Every link.
    pub links: Vec<netops::Link>,
    /// `rp_filter` of the primary ENI's link (name, value), when the link was found.
    pub rp_filter: Option<(String, String)>,
}

/// What EC2 says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ec2View {
    /// The ENIs attached to this instance.
    pub enis: Vec<NetworkInterface>,
    /// The subnets of the node's VPC and zone.
    pub subnets: Vec<Subnet>,
    /// Available ENIs of ours in the VPC (leaked).
    pub leaked: Vec<NetworkInterface>,
}

/// Where the instance's limits came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitsSource {
    /// The table built into ipamd.
    Table,
    /// DescribeInstanceTypes.
    Ec2,
}

/// What ipamd says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ipamd {
    /// The socket asked.
    pub socket: PathBuf,
    /// STATUS over the socket.
    pub status: Result<StatusReply, String>,
    /// `/v1/pool`.
    pub pool: Result<PoolStatus, String>,
    /// `/v1/pods`.
    pub pods: Result<Vec<PodEntry>, String>,
    /// `/v1/enis`.
    pub enis: Result<BTreeMap<String, EniInfos>, String>,
    /// `/v1/ec2-refusals`.
    pub refusals: Result<Vec<Ec2RefusalEntry>, String>,
    /// `/metrics`.
    pub metrics: Result<String, String>,
    /// The body of each introspection endpoint as read (the bundle keeps them), by path.
    pub introspection: BTreeMap<&'static str, Result<String, String>>,
}

/// One file of the CNI conf dir.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfFile {
    /// File name.
    pub name: String,
    /// Its JSON, or why it could not be read.
    pub content: Result<serde_json::Value, String>,
}

/// The node's CNI setup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cni {
    /// The conf dir.
    pub conf_dir: PathBuf,
    /// Its config files (`.conf`, `.conflist`, `.json`) in the order libcni reads them, or
    /// why the directory could not be listed.
    pub files: Result<Vec<ConfFile>, String>,
    /// The bin dir.
    pub bin_dir: PathBuf,
    /// What `vpc-cni` answered to VERSION, or why it did not.
    pub plugin_version: Result<String, String>,
    /// Every other file of the conf dir (backups, leftovers).
    pub other_files: Vec<String>,
}

/// ipamd's log as the checks need it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Log {
    /// The file read.
    pub path: PathBuf,
    /// The start-up lines of the last start, in order.
    pub stages: Vec<String>,
    /// The last error lines (at most a few), with their age in seconds when known.
    pub errors: Vec<(String, Option<u64>)>,
}

/// Everything gathered.
#[derive(Clone, Debug)]
pub struct Facts {
    /// ipamd's configuration (the doctor runs with ipamd's environment).
    pub config: Config,
    /// Who the node is, from IMDS.
    pub identity: Result<NodeIdentity, String>,
    /// The attached ENIs as IMDS shows them.
    pub imds_enis: Result<Vec<EniMetadata>, String>,
    /// The instance type's limits.
    pub limits: Result<(InstanceLimits, LimitsSource), String>,
    /// What EC2 says.
    pub ec2: Result<Ec2View, String>,
    /// Each permission probed with DryRun.
    pub permissions: Vec<(Action, Permission)>,
    /// ipamd.
    pub ipamd: Ipamd,
    /// The kernel.
    pub kernel: Result<Kernel, String>,
    /// Changes the node's iptables need (empty: all in place).
    pub snat_pending: Result<Vec<netops::snat::Change>, String>,
    /// The CNI setup.
    pub cni: Cni,
    /// The log; `None` when ipamd logs to stdout/stderr.
    pub log: Option<Result<Log, String>>,
}
