//! `DIR/sim.json`: how tests and scripts find a running simulator.

use std::fs;
use std::io::{self, Write};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use ipnetwork::{Ipv4Network, Ipv6Network};
use serde::{Deserialize, Serialize};

use crate::config::{IpFamily, Mode};
use crate::model::Tags;

/// File name inside the state directory.
pub const FILE_NAME: &str = "sim.json";

/// The VPC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VpcInfo {
    /// `vpc-...`.
    pub id: String,
    /// Primary CIDR.
    pub cidr: Ipv4Network,
    /// Every CIDR, the primary first.
    pub cidrs: Vec<Ipv4Network>,
    /// Its IPv6 /56 (null without IPv6).
    #[serde(default)]
    pub ipv6_cidr: Option<Ipv6Network>,
}

/// One subnet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubnetInfo {
    /// `subnet-...`.
    pub id: String,
    /// CIDR.
    pub cidr: Ipv4Network,
    /// Its IPv6 /64 (null without IPv6).
    #[serde(default)]
    pub ipv6_cidr: Option<Ipv6Network>,
    /// AZ.
    pub az: String,
    /// Tags it was created with.
    pub tags: Tags,
}

/// One security group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupInfo {
    /// `sg-...`.
    pub id: String,
    /// Its name (`default` for the VPC's default group).
    pub name: String,
}

/// One node (instance).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// 1-based.
    pub index: usize,
    /// Its namespace in fabric mode.
    pub netns: Option<String>,
    /// `i-...`.
    pub instance_id: String,
    /// Type.
    pub instance_type: String,
    /// Primary ENI id.
    pub primary_eni: String,
    /// Primary ENI MAC.
    pub mac: String,
    /// Primary address.
    pub primary_ip: Ipv4Addr,
    /// The primary ENI's IPv6 address, IMDS's `meta-data/ipv6` (null without IPv6).
    #[serde(default)]
    pub primary_ipv6: Option<Ipv6Addr>,
    /// Subnet.
    pub subnet_id: String,
    /// Availability zone (its subnet's).
    pub az: String,
    /// EC2 as reachable from the node.
    pub ec2_endpoint: String,
    /// IMDS as reachable from the node.
    pub imds_endpoint: String,
}

/// The outside (fabric mode): a namespace beyond the VPC's default route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutsideInfo {
    /// Its namespace (`NAME-out`).
    pub netns: String,
    /// Its one address; it sees source addresses exactly as they leave the VPC.
    pub ip: Ipv4Addr,
    /// Its IPv6 address when the VPC has IPv6 (null otherwise); IPv6 leaves the VPC as through
    /// an egress-only internet gateway, sources unchanged.
    #[serde(default)]
    pub ipv6: Option<Ipv6Addr>,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimFile {
    /// `--name`.
    pub name: String,
    /// vpc-sim's pid.
    pub pid: u32,
    /// Mode.
    pub mode: Mode,
    /// `--ip-family` (ipv4 when an older file lacks it).
    #[serde(default)]
    pub ip_family: IpFamily,
    /// Region.
    pub region: String,
    /// VPC.
    pub vpc: VpcInfo,
    /// The VPC namespace in fabric mode.
    pub vpc_netns: Option<String>,
    /// The outside in fabric mode (null in loopback mode).
    #[serde(default)]
    pub outside: Option<OutsideInfo>,
    /// EC2 in the root namespace.
    pub ec2_endpoint: String,
    /// Subnets.
    pub subnets: Vec<SubnetInfo>,
    /// Security groups, by id.
    pub security_groups: Vec<GroupInfo>,
    /// Nodes.
    pub nodes: Vec<NodeInfo>,
}

impl SimFile {
    /// Path of sim.json in `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(FILE_NAME)
    }

    /// Writes `dir/sim.json` atomically: readers see the old file, no file, or the whole new one.
    pub fn write_atomic(&self, dir: &Path) -> io::Result<PathBuf> {
        fs::create_dir_all(dir)?;
        let json = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        let tmp = dir.join(format!(".{FILE_NAME}.{}.tmp", std::process::id()));
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&json)?;
        f.sync_all()?;
        let path = Self::path(dir);
        fs::rename(&tmp, &path)?;
        Ok(path)
    }

    /// Reads `dir/sim.json`.
    pub fn read(dir: &Path) -> io::Result<Self> {
        let bytes = fs::read(Self::path(dir))?;
        serde_json::from_slice(&bytes).map_err(io::Error::other)
    }
}
