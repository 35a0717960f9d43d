//! Command line.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use cloud::limits::InstanceLimits;
use ipnetwork::{Ipv4Network, Ipv6Network};
use thiserror::Error;

use crate::fabric::{DEFAULT_OUTSIDE_IP, DEFAULT_OUTSIDE_IPV6, OUTSIDE_LINK_NET};
use crate::faults::{FaultError, Faults};
use crate::model::{BadFragment, SubnetSpec, Topology};

/// Where the servers listen and whether namespaces are built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Root: a VPC namespace, one namespace per node, IMDS at 169.254.169.254 inside each node.
    Fabric,
    /// Unprivileged: EC2 and one IMDS per instance on 127.0.0.1 ephemeral ports.
    Loopback,
}

impl Mode {
    /// Lowercase name, as in sim.json.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fabric => "fabric",
            Self::Loopback => "loopback",
        }
    }
}

/// The address families of the simulated VPC (`--ip-family`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum IpFamily {
    /// IPv4 only: no IPv6 CIDR anywhere, exactly as before IPv6 existed in the simulator.
    #[default]
    Ipv4,
    /// For an IPv6 cluster. The VPC and subnets are dual-stack all the same, as in AWS, where
    /// an IPv6 EKS cluster's VPC keeps its IPv4 CIDR; the family tells the box which ipamd mode
    /// to run.
    Ipv6,
    /// Dual-stack: the VPC gets an IPv6 /56 and every subnet a /64.
    Dual,
}

impl IpFamily {
    /// Lowercase name, as in sim.json and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ipv4 => "ipv4",
            Self::Ipv6 => "ipv6",
            Self::Dual => "dual",
        }
    }

    /// Whether the VPC and its subnets get IPv6 CIDRs.
    pub fn has_ipv6(self) -> bool {
        self != Self::Ipv4
    }
}

/// An `--extra-instance-type NAME:ENIS:IPV4_PER_ENI` entry (Nitro, one network card).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraType {
    /// Type name.
    pub name: String,
    /// Its limits.
    pub limits: InstanceLimits,
}

/// Parses `NAME:ENIS:IPV4_PER_ENI`.
pub fn parse_extra_type(s: &str) -> Result<ExtraType, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let [name, enis, ips] = parts[..] else {
        return Err(format!("{s:?} is not NAME:ENIS:IPV4_PER_ENI"));
    };
    let num = |what: &str, v: &str| match v.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{what} {v:?} in {s:?} is not a positive number")),
    };
    if name.is_empty() {
        return Err(format!("{s:?} has an empty type name"));
    }
    Ok(ExtraType {
        name: name.to_string(),
        limits: InstanceLimits {
            max_enis: num("ENIS", enis)?,
            ipv4_per_eni: num("IPV4_PER_ENI", ips)?,
            nitro: true,
            bare_metal: false,
            network_cards: 1,
        },
    })
}

/// Parses `CIDR[,az=AZ][,tag=KEY[=VALUE]]...[,nodes=N][,fragment=all|none|PCT]` (a tag without
/// `=VALUE` has an empty value, as EC2 allows).
pub fn parse_subnet(s: &str) -> Result<SubnetSpec, String> {
    let mut parts = s.split(',');
    let cidr = parts.next().unwrap_or_default();
    let cidr = cidr
        .parse()
        .map_err(|e| format!("{cidr:?} in {s:?} is not an IPv4 CIDR: {e}"))?;
    let mut spec = SubnetSpec::new(cidr);
    let mut fragment_given = false;
    for part in parts {
        let bad = |why: &str| format!("{part:?} in {s:?}: {why}");
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| bad(EXPECTED_SUBNET_PART))?;
        match key {
            "az" if value.is_empty() => return Err(bad("an empty AZ")),
            "az" if spec.az.is_some() => return Err(bad("a second az=")),
            "az" => spec.az = Some(value.to_string()),
            "tag" => {
                let (k, v) = value.split_once('=').unwrap_or((value, ""));
                if k.is_empty() {
                    return Err(bad("an empty tag key"));
                }
                if spec.tags.insert(k.to_string(), v.to_string()).is_some() {
                    return Err(bad("that tag key is given twice"));
                }
            }
            "nodes" if spec.nodes.is_some() => return Err(bad("a second nodes=")),
            "nodes" => {
                let n = value.parse().map_err(|_| bad("not a number of nodes"))?;
                spec.nodes = Some(n);
            }
            "fragment" if fragment_given => return Err(bad("a second fragment=")),
            "fragment" => {
                spec.fragment = value
                    .parse()
                    .map_err(|e: BadFragment| bad(&e.to_string()))?;
                fragment_given = true;
            }
            _ => return Err(bad(EXPECTED_SUBNET_PART)),
        }
    }
    Ok(spec)
}

const EXPECTED_SUBNET_PART: &str =
    "expected az=AZ, tag=KEY=VALUE, nodes=N or fragment=all|none|PCT";

/// Help on fault injection and the other runtime controls, after the options.
const FAULTS_HELP: &str = "\
Fault injection (EC2 only; IMDS is never faulted):
  Each EC2 call the plan applies to (all, or those in --fault-actions) draws once for slowness
  (--fault-slow-pct: the answer waits --fault-slow-ms, the model unlocked meanwhile) and once for
  its outcome: --fault-throttle-pct (HTTP 503 RequestLimitExceeded), --fault-server-error-pct
  (HTTP 500 InternalError or 503 Unavailable), --fault-drop-pct (connection closed with no
  response, call not applied) and --fault-drop-after-pct (call applied, then connection closed)
  are bands of that one draw and add up to at most 100. Faulted calls that are not applied
  leave the model untouched. --fault-seed makes the draws reproducible.
  At runtime: GET /_sim/faults shows the plan and what was injected (in all and by action);
  PUT /_sim/faults with a JSON plan replaces it, e.g.
    {\"throttle_pct\": 30, \"slow_pct\": 10, \"slow_ms\": 2000, \"actions\": [\"AssignPrivateIpAddresses\"], \"seed\": 1}
  and {} turns faults off. GET /_sim/calls counts every request received, faulted or not.

IAM denial and a stale IMDS (runtime only, on the EC2 endpoint):
  PUT /_sim/iam {\"deny\": [\"AssignPrivateIpAddresses\", ...]} answers those EC2 actions HTTP 403
  UnauthorizedOperation (\"... is not authorized to perform: ec2:ACTION ...\"), DryRun included,
  without touching the model; {} or {\"deny\": []} allows everything. GET /_sim/iam shows the
  policy and the calls denied (in all and by action). Unknown actions are refused with 400.
  PUT /_sim/imds {\"frozen\": true} freezes every instance's IMDS as it is at that moment while
  EC2 goes on changing; {\"frozen\": false} returns to the live view (lagged by --imds-lag-ms).
  GET /_sim/imds shows whether it is frozen and since when. IMDS tokens keep working.

Subnet fragmentation (--subnet ...,fragment=all|none|PCT, or at runtime on the EC2 endpoint):
  A fragmented subnet has one address owned by someone else (no ENI of the VPC) in every /28
  block that could hold a prefix (all), in none (none), or in PCT percent of them, evenly
  spread. Such addresses count as used. Prefix requests (Ipv4PrefixCount) that find no wholly
  free aligned /28 fail with InsufficientCidrBlocks; single addresses are assigned while any is
  free. PUT /_sim/fragment {\"subnet\": \"subnet-...\", \"fragment\": \"all\"|\"none\"|PCT} takes the
  subnet's such addresses back and places new ones (ENIs' addresses are never touched),
  answering with the subnet, its level, the addresses placed, its free addresses and its
  wholly free /28 blocks; an unknown subnet or a bad level gets 400. GET /_sim/fragment shows
  the same for every subnet.";

/// vpc-sim's command line.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "vpc-sim",
    version,
    about = "EC2 + IMDS emulator and VPC-in-a-box fabric",
    after_help = FAULTS_HELP
)]
pub struct Cli {
    /// Simulator name: prefix of its namespaces (NAME-vpc, NAME-node1, ...).
    #[arg(long)]
    pub name: String,
    /// Directory for sim.json.
    #[arg(long)]
    pub state_dir: PathBuf,
    /// fabric (root, namespaces) or loopback (unprivileged, 127.0.0.1 ports).
    #[arg(long, value_enum, default_value_t = Mode::Loopback)]
    pub mode: Mode,
    /// Number of instances (nodes).
    #[arg(long, default_value_t = 1)]
    pub nodes: usize,
    /// Instance type of every node.
    #[arg(long, default_value = "t3.medium")]
    pub instance_type: String,
    /// VPC CIDR (the primary one).
    #[arg(long, default_value = "10.0.0.0/16")]
    pub vpc_cidr: Ipv4Network,
    /// Another VPC CIDR, e.g. 100.64.0.0/16 for pods (repeatable).
    #[arg(long = "vpc-secondary-cidr")]
    pub vpc_secondary_cidrs: Vec<Ipv4Network>,
    /// Subnet CIDR[,az=AZ][,tag=KEY=VALUE]...[,nodes=N][,fragment=all|none|PCT] (repeatable;
    /// no commas in tags), in any VPC CIDR. Nodes launch in the first subnet, except N of them
    /// in each subnet with nodes=N; az= defaults to REGION + "a". fragment= puts an address
    /// owned by someone else in every /28 block (all), none (the default) or PCT% of them, so
    /// prefix delegation fails with InsufficientCidrBlocks (see the end of --help).
    #[arg(long = "subnet", default_value = "10.0.0.0/24", value_parser = parse_subnet)]
    pub subnets: Vec<SubnetSpec>,
    /// ipv4 (no IPv6 anywhere), ipv6 or dual: with ipv6 and dual the VPC gets an IPv6 /56 and
    /// every subnet the /64 numbered by its position, and new ENIs get an IPv6 address.
    #[arg(long, value_enum, default_value_t = IpFamily::Ipv4)]
    pub ip_family: IpFamily,
    /// The VPC's IPv6 /56 with --ip-family ipv6|dual; default: drawn at random from
    /// 2001:db8::/33 (documentation addresses).
    #[arg(long)]
    pub vpc_ipv6_cidr: Option<Ipv6Network>,
    /// Security group NAME to create besides the VPC's default one (repeatable).
    #[arg(long = "security-group")]
    pub security_groups: Vec<String>,
    /// Region; subnets without az= are in REGION + "a".
    #[arg(long, default_value = "us-west-2")]
    pub region: String,
    /// IMDS shows a new attachment or address this many ms after EC2 does.
    #[arg(long, default_value_t = 0)]
    pub imds_lag_ms: u64,
    /// AttachNetworkInterface answers, and the device appears, this many ms after the call.
    #[arg(long, default_value_t = 0)]
    pub attach_latency_ms: u64,
    /// Extra instance type NAME:ENIS:IPV4_PER_ENI (repeatable).
    #[arg(long = "extra-instance-type", value_parser = parse_extra_type)]
    pub extra_instance_types: Vec<ExtraType>,
    /// Fabric mode: the one address of the outside namespace (NAME-out), outside the VPC CIDR.
    #[arg(long, default_value_t = DEFAULT_OUTSIDE_IP)]
    pub outside_ip: Ipv4Addr,
    /// % of EC2 calls answered HTTP 503 RequestLimitExceeded (0-100).
    #[arg(long, default_value_t = 0.0, help_heading = FAULT_HEADING)]
    pub fault_throttle_pct: f64,
    /// % of EC2 calls answered HTTP 500 InternalError or 503 Unavailable (0-100).
    #[arg(long, default_value_t = 0.0, help_heading = FAULT_HEADING)]
    pub fault_server_error_pct: f64,
    /// % of EC2 calls whose connection is closed with no response, the call not applied.
    #[arg(long, default_value_t = 0.0, help_heading = FAULT_HEADING)]
    pub fault_drop_pct: f64,
    /// % of EC2 calls applied, then their connection closed with no response.
    #[arg(long, default_value_t = 0.0, help_heading = FAULT_HEADING)]
    pub fault_drop_after_pct: f64,
    /// % of EC2 calls delayed by --fault-slow-ms before anything else (0-100).
    #[arg(long, default_value_t = 0.0, help_heading = FAULT_HEADING)]
    pub fault_slow_pct: f64,
    /// Delay of a slow EC2 call, ms.
    #[arg(long, default_value_t = 0, help_heading = FAULT_HEADING)]
    pub fault_slow_ms: u64,
    /// Fault only these EC2 actions (comma-separated or repeated); default: all.
    #[arg(long, value_delimiter = ',', help_heading = FAULT_HEADING)]
    pub fault_actions: Vec<String>,
    /// Seed of the fault draws, for a reproducible run; default: from the OS.
    #[arg(long, help_heading = FAULT_HEADING)]
    pub fault_seed: Option<u64>,
}

/// The `--help` section of the fault flags.
const FAULT_HEADING: &str = "Fault injection (EC2 only; see the end of --help)";

/// A command line that parses but makes no sense.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    /// Bad --name.
    #[error("--name {0:?}: use 1 to 24 characters from A-Z a-z 0-9 _ -")]
    Name(String),
    /// Bad --nodes.
    #[error("--nodes {0}: must be between 1 and 64")]
    Nodes(usize),
    /// Bad --region.
    #[error("--region {0:?}: expected something like us-west-2")]
    Region(String),
    /// Bad --outside-ip.
    #[error("--outside-ip {ip}: {why}")]
    OutsideIp {
        /// The address given.
        ip: Ipv4Addr,
        /// What is wrong with it.
        why: String,
    },
    /// A VPC CIDR that collides with the fabric's link to the outside.
    #[error("{flag} {cidr}: overlaps {OUTSIDE_LINK_NET}, the fabric's link to the outside")]
    VpcCidrOverlapsOutside {
        /// `--vpc-cidr` or `--vpc-secondary-cidr`.
        flag: &'static str,
        /// The CIDR given.
        cidr: Ipv4Network,
    },
    /// --vpc-ipv6-cidr without IPv6, or not a /56.
    #[error("--vpc-ipv6-cidr {cidr}: {why}")]
    VpcIpv6Cidr {
        /// The CIDR given.
        cidr: Ipv6Network,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A VPC /56 that holds the fabric's outside, which must stay beyond the VPC.
    #[error(
        "--vpc-ipv6-cidr {0}: contains {DEFAULT_OUTSIDE_IPV6}, the fabric's outside (use a /56 of 2001:db8::/33)"
    )]
    VpcIpv6CidrHoldsOutside(Ipv6Network),
    /// A fault plan that makes no sense.
    #[error("{flags}: {why}")]
    Fault {
        /// The flags at fault, e.g. `--fault-throttle-pct`.
        flags: String,
        /// What is wrong.
        why: String,
    },
}

impl ConfigError {
    /// The plan's error in terms of the command line: `throttle_pct` is `--fault-throttle-pct`.
    pub fn from_fault(e: FaultError) -> Self {
        let flags: Vec<String> = e
            .fields
            .iter()
            .map(|f| format!("--fault-{}", f.replace('_', "-")))
            .collect();
        ConfigError::Fault {
            flags: flags.join(" + "),
            why: e.why,
        }
    }
}

/// Longest name: `NAME-node64` must stay a short, readable namespace name.
const MAX_NAME: usize = 24;

impl Cli {
    /// Checks what clap cannot and returns the topology to build.
    pub fn topology(&self) -> Result<Topology, ConfigError> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= MAX_NAME
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !name_ok {
            return Err(ConfigError::Name(self.name.clone()));
        }
        if !(1..=64).contains(&self.nodes) {
            return Err(ConfigError::Nodes(self.nodes));
        }
        let region_ok = self.region.split('-').count() >= 3
            && self
                .region
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !region_ok {
            return Err(ConfigError::Region(self.region.clone()));
        }
        if self.mode == Mode::Fabric {
            self.check_outside()?;
        }
        if let Some(cidr) = self.vpc_ipv6_cidr {
            let why = if !self.ip_family.has_ipv6() {
                Some("needs --ip-family ipv6 or dual")
            } else if cidr.prefix() != crate::model::VPC_V6_LEN || cidr.ip() != cidr.network() {
                Some("a VPC's IPv6 CIDR is a network address with a /56 mask")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(ConfigError::VpcIpv6Cidr { cidr, why });
            }
            if self.mode == Mode::Fabric && cidr.contains(DEFAULT_OUTSIDE_IPV6) {
                return Err(ConfigError::VpcIpv6CidrHoldsOutside(cidr));
            }
        }
        Ok(Topology {
            vpc_cidr: self.vpc_cidr,
            secondary_cidrs: self.vpc_secondary_cidrs.clone(),
            region: self.region.clone(),
            subnets: self.subnets.clone(),
            security_groups: self.security_groups.clone(),
            ipv6: self.ip_family.has_ipv6(),
            vpc_ipv6_cidr: self.vpc_ipv6_cidr,
            nodes: self.nodes,
            instance_type: self.instance_type.clone(),
            extra_types: self
                .extra_instance_types
                .iter()
                .map(|e| (e.name.clone(), e.limits))
                .collect(),
        })
    }
}

impl Cli {
    /// The fault plan to start with, from the `--fault-*` flags.
    pub fn faults(&self) -> Result<Faults, ConfigError> {
        let plan = Faults {
            throttle_pct: self.fault_throttle_pct,
            server_error_pct: self.fault_server_error_pct,
            drop_pct: self.fault_drop_pct,
            drop_after_pct: self.fault_drop_after_pct,
            slow_pct: self.fault_slow_pct,
            slow_ms: self.fault_slow_ms,
            actions: (!self.fault_actions.is_empty()).then(|| self.fault_actions.clone()),
            seed: self.fault_seed,
        };
        plan.validate().map_err(ConfigError::from_fault)?;
        Ok(plan)
    }

    /// The outside must be reachable only through the VPC's default route: not in the VPC, not
    /// on the link network, and an ordinary unicast address.
    fn check_outside(&self) -> Result<(), ConfigError> {
        let cidrs = std::iter::once(("--vpc-cidr", self.vpc_cidr)).chain(
            self.vpc_secondary_cidrs
                .iter()
                .map(|c| ("--vpc-secondary-cidr", *c)),
        );
        let cidrs: Vec<(&'static str, Ipv4Network)> = cidrs.collect();
        if let Some(&(flag, cidr)) = cidrs.iter().find(|(_, c)| c.overlaps(OUTSIDE_LINK_NET)) {
            return Err(ConfigError::VpcCidrOverlapsOutside { flag, cidr });
        }
        let ip = self.outside_ip;
        let why = if let Some((_, cidr)) = cidrs.iter().find(|(_, c)| c.contains(ip)) {
            format!("inside the VPC CIDR {cidr}")
        } else if OUTSIDE_LINK_NET.contains(ip) {
            format!("on {OUTSIDE_LINK_NET}, the fabric's link to the outside")
        } else if ip.is_unspecified()
            || ip.is_loopback()
            || ip.is_link_local()
            || ip.is_multicast()
            || ip.is_broadcast()
        {
            "not an ordinary unicast address".to_string()
        } else {
            return Ok(());
        };
        Err(ConfigError::OutsideIp { ip, why })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Result<Cli, clap::Error> {
        let mut all = vec!["vpc-sim", "--name", "t1", "--state-dir", "/tmp/x"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all)
    }

    #[test]
    fn defaults() {
        let c = cli(&[]).unwrap();
        let t = c.topology().unwrap();
        assert_eq!(c.mode, Mode::Loopback);
        assert_eq!((t.nodes, t.instance_type.as_str()), (1, "t3.medium"));
        assert_eq!(
            t.subnets,
            vec![SubnetSpec::new("10.0.0.0/24".parse().unwrap())]
        );
        assert!(t.secondary_cidrs.is_empty() && t.security_groups.is_empty());
        assert_eq!(t.region, "us-west-2");
        assert_eq!(c.ip_family, IpFamily::Ipv4);
        assert!(!t.ipv6 && t.vpc_ipv6_cidr.is_none());
    }

    #[test]
    fn ip_family_and_the_vpc_ipv6_cidr() {
        for (family, ipv6) in [("ipv4", false), ("ipv6", true), ("dual", true)] {
            let c = cli(&["--ip-family", family]).unwrap();
            assert_eq!(c.ip_family.as_str(), family);
            assert_eq!(c.topology().unwrap().ipv6, ipv6, "{family}");
        }
        assert!(cli(&["--ip-family", "ipv5"]).is_err());
        let c = cli(&[
            "--ip-family",
            "dual",
            "--vpc-ipv6-cidr",
            "2001:db8:42:100::/56",
        ])
        .unwrap();
        assert_eq!(
            c.topology().unwrap().vpc_ipv6_cidr.unwrap().to_string(),
            "2001:db8:42:100::/56"
        );
        for (args, needle) in [
            (
                &["--vpc-ipv6-cidr", "2001:db8:42:100::/56"][..],
                "needs --ip-family ipv6 or dual",
            ),
            (
                &["--ip-family", "ipv6", "--vpc-ipv6-cidr", "2001:db8:42::/48"][..],
                "/56 mask",
            ),
            (
                &[
                    "--ip-family",
                    "ipv6",
                    "--vpc-ipv6-cidr",
                    "2001:db8:42:101::/56",
                ][..],
                "/56 mask",
            ),
        ] {
            let e = cli(args).unwrap().topology().unwrap_err().to_string();
            assert!(
                e.starts_with("--vpc-ipv6-cidr") && e.contains(needle),
                "{args:?}: {e}"
            );
        }
    }

    #[test]
    fn a_vpc_ipv6_cidr_holding_the_outside_is_refused_in_fabric_mode_only() {
        let args = [
            "--ip-family",
            "dual",
            "--vpc-ipv6-cidr",
            "2001:db8:8000::/56",
        ];
        cli(&args).unwrap().topology().unwrap();
        let mut fabric = vec!["--mode", "fabric"];
        fabric.extend(args);
        assert_eq!(
            cli(&fabric).unwrap().topology().unwrap_err(),
            ConfigError::VpcIpv6CidrHoldsOutside("2001:db8:8000::/56".parse().unwrap())
        );
        let e = cli(&fabric).unwrap().topology().unwrap_err().to_string();
        assert!(e.contains("contains 2001:db8:8000::10"), "{e}");
        fabric[5] = "2001:db8:7fff:ff00::/56";
        cli(&fabric).unwrap().topology().unwrap();
    }

    #[test]
    fn extra_types_and_repeated_subnets() {
        let c = cli(&[
            "--mode",
            "fabric",
            "--subnet",
            "10.0.1.0/24",
            "--subnet",
            "10.0.2.0/28",
            "--extra-instance-type",
            "sim.tiny:2:4",
        ])
        .unwrap();
        let t = c.topology().unwrap();
        assert_eq!(t.subnets.len(), 2);
        assert_eq!(t.extra_types[0].0, "sim.tiny");
        assert_eq!(
            (t.extra_types[0].1.max_enis, t.extra_types[0].1.ipv4_per_eni),
            (2, 4)
        );
    }

    #[test]
    fn bad_values_are_named() {
        assert!(parse_extra_type("x:0:4").unwrap_err().contains("ENIS"));
        assert!(parse_extra_type("x:2").is_err());
        assert!(cli(&["--vpc-cidr", "10.0.0.0/33"]).is_err());
        assert!(cli(&["--mode", "cloud"]).is_err());
        let mut c = cli(&[]).unwrap();
        c.name = "bad name".into();
        assert_eq!(
            c.topology().unwrap_err(),
            ConfigError::Name("bad name".into())
        );
        c.name = "ok".into();
        c.nodes = 0;
        assert_eq!(c.topology().unwrap_err(), ConfigError::Nodes(0));
    }

    #[test]
    fn fault_flags_make_a_plan_and_bad_ones_are_named() {
        assert_eq!(cli(&[]).unwrap().faults().unwrap(), Faults::default());
        let c = cli(&[
            "--fault-throttle-pct",
            "30",
            "--fault-server-error-pct",
            "5",
            "--fault-slow-pct",
            "10",
            "--fault-slow-ms",
            "2000",
            "--fault-drop-pct",
            "5",
            "--fault-drop-after-pct",
            "0.5",
            "--fault-actions",
            &format!(
                "{},{}",
                cloud::Action::AssignPrivateIpAddresses,
                cloud::Action::CreateNetworkInterface
            ),
            "--fault-actions",
            cloud::Action::CreateTags.wire_name(),
            "--fault-seed",
            "9",
        ])
        .unwrap();
        let p = c.faults().unwrap();
        assert_eq!(
            (p.throttle_pct, p.server_error_pct, p.slow_pct, p.slow_ms),
            (30.0, 5.0, 10.0, 2000)
        );
        assert_eq!((p.drop_pct, p.drop_after_pct, p.seed), (5.0, 0.5, Some(9)));
        assert_eq!(
            p.actions.unwrap(),
            [
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
                cloud::Action::CreateNetworkInterface.wire_name(),
                cloud::Action::CreateTags.wire_name()
            ]
        );
        for (args, needle) in [
            (
                &["--fault-throttle-pct", "101"][..],
                "--fault-throttle-pct: 101 is not a percentage",
            ),
            (
                &["--fault-slow-pct", "5"][..],
                "--fault-slow-ms: 0, but slow_pct",
            ),
            (
                &["--fault-actions", "AssignPrivateIp"][..],
                "--fault-actions: \"AssignPrivateIp\" is not an EC2 action",
            ),
            (
                &["--fault-drop-pct", "60", "--fault-throttle-pct", "50"][..],
                "--fault-throttle-pct + --fault-server-error-pct + --fault-drop-pct + --fault-drop-after-pct: 110 in all",
            ),
        ] {
            let e = cli(args).unwrap().faults().unwrap_err().to_string();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
        let e = cli(&["--fault-drop-pct", "lots"]).unwrap_err().to_string();
        assert!(e.contains("--fault-drop-pct"), "{e}");
    }

    #[test]
    fn the_outside_address_is_checked_in_fabric_mode_only() {
        let c = cli(&["--mode", "fabric"]).unwrap();
        assert_eq!(c.outside_ip.to_string(), "198.51.100.10");
        c.topology().unwrap();
        for (ip, needle) in [
            ("10.0.3.4", "inside the VPC CIDR 10.0.0.0/16"),
            ("192.0.2.2", "link to the outside"),
            ("169.254.169.254", "ordinary unicast"),
            ("127.0.0.1", "ordinary unicast"),
        ] {
            let c = cli(&["--mode", "fabric", "--outside-ip", ip]).unwrap();
            let e = c.topology().unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains(ip), "{ip}: {e}");
        }
        let c = cli(&["--outside-ip", "10.0.3.4"]).unwrap();
        c.topology().unwrap();
        let c = cli(&["--mode", "fabric", "--vpc-cidr", "192.0.0.0/16"]).unwrap();
        assert_eq!(
            c.topology().unwrap_err().to_string(),
            "--vpc-cidr 192.0.0.0/16: overlaps 192.0.2.0/30, the fabric's link to the outside"
        );
        let c = cli(&["--mode", "fabric", "--vpc-secondary-cidr", "192.0.2.0/28"]).unwrap();
        assert!(
            c.topology()
                .unwrap_err()
                .to_string()
                .starts_with("--vpc-secondary-cidr 192.0.2.0/28: overlaps"),
        );
        let c = cli(&[
            "--mode",
            "fabric",
            "--vpc-secondary-cidr",
            "100.64.0.0/16",
            "--outside-ip",
            "100.64.9.9",
        ])
        .unwrap();
        let e = c.topology().unwrap_err().to_string();
        assert!(e.contains("inside the VPC CIDR 100.64.0.0/16"), "{e}");
        assert!(cli(&["--outside-ip", "300.1.1.1"]).is_err());
    }

    #[test]
    fn subnet_specs_secondary_cidrs_and_groups() {
        let c = cli(&[
            "--vpc-secondary-cidr",
            "100.64.0.0/16",
            "--subnet",
            "10.0.0.0/24",
            "--subnet",
            "100.64.1.0/24,az=us-west-2b,tag=kubernetes.io/role/cni=1,tag=flag,nodes=2",
            "--security-group",
            "pods",
            "--security-group",
            "pods-b",
        ])
        .unwrap();
        let t = c.topology().unwrap();
        assert_eq!(t.secondary_cidrs, vec!["100.64.0.0/16".parse().unwrap()]);
        assert_eq!(t.security_groups, ["pods", "pods-b"]);
        let s = &t.subnets[1];
        assert_eq!(s.cidr.to_string(), "100.64.1.0/24");
        assert_eq!(s.az.as_deref(), Some("us-west-2b"));
        assert_eq!(s.nodes, Some(2));
        assert_eq!(
            s.tags,
            [
                ("flag".to_string(), String::new()),
                ("kubernetes.io/role/cni".to_string(), "1".to_string())
            ]
            .into()
        );
        assert_eq!(
            t.subnets[0],
            SubnetSpec::new("10.0.0.0/24".parse().unwrap())
        );
    }

    #[test]
    fn subnets_take_a_fragmentation_level() {
        use crate::model::Fragment;
        let c = cli(&[
            "--subnet",
            "10.0.0.0/24,fragment=all",
            "--subnet",
            "10.0.1.0/24,nodes=1,fragment=25,tag=k=v",
            "--subnet",
            "10.0.2.0/24,fragment=none",
            "--subnet",
            "10.0.3.0/24",
        ])
        .unwrap();
        let t = c.topology().unwrap();
        let levels: Vec<Fragment> = t.subnets.iter().map(|s| s.fragment).collect();
        assert_eq!(
            levels,
            [
                Fragment::All,
                Fragment::Percent(25),
                Fragment::None,
                Fragment::None
            ]
        );
        assert_eq!(t.subnets[1].nodes, Some(1));
        assert_eq!(t.subnets[1].tags["k"], "v");
    }

    #[test]
    fn bad_subnet_specs_are_named() {
        for (spec, needle) in [
            ("10.0.0/24", "is not an IPv4 CIDR"),
            ("10.0.1.0/24,zone=a", "expected az=AZ"),
            ("10.0.1.0/24,az", "expected az=AZ"),
            ("10.0.1.0/24,az=", "an empty AZ"),
            ("10.0.1.0/24,az=us-west-2a,az=us-west-2b", "a second az="),
            ("10.0.1.0/24,tag==1", "an empty tag key"),
            ("10.0.1.0/24,tag=k=1,tag=k=2", "given twice"),
            ("10.0.1.0/24,nodes=-1", "not a number of nodes"),
            (
                "10.0.1.0/24,fragment=all,fragment=none",
                "a second fragment=",
            ),
            (
                "10.0.1.0/24,fragment=lots",
                "\"lots\" is not a fragmentation level: expected none, all or a percentage",
            ),
            (
                "10.0.1.0/24,fragment=101",
                "\"101\" is not a fragmentation level",
            ),
            (
                "10.0.1.0/24,fragment=-5",
                "\"-5\" is not a fragmentation level",
            ),
            ("10.0.1.0/24,fragment=", "\"\" is not a fragmentation level"),
            ("10.0.1.0/24,fragmented=all", "or fragment=all|none|PCT"),
        ] {
            let e = cli(&["--subnet", spec]).unwrap_err().to_string();
            assert!(e.contains("--subnet") && e.contains(needle), "{spec}: {e}");
        }
        let e = cli(&["--vpc-secondary-cidr", "100.64.0.0/33"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--vpc-secondary-cidr"), "{e}");
    }
}
