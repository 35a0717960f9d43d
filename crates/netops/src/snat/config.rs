//! What the node's SNAT/connmark setup depends on, with the Go CNI's defaults.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use ipnetwork::Ipv4Network;

use super::error::{Result, SnatError};

/// Default connection mark (`AWS_VPC_K8S_CNI_CONNMARK`): kube-proxy uses 0x4000/0x8000 and
/// Calico the upper 16 bits, so 0x80 stays clear of both.
pub const DEFAULT_CONNMARK: u32 = 0x80;
/// Default host veth prefix (`AWS_VPC_K8S_CNI_VETHPREFIX`): the plugin's, whose rule it is.
pub use cni::settings::DEFAULT_VETH_PREFIX;

/// Port randomisation of the SNAT rule (`AWS_VPC_K8S_CNI_RANDOMIZESNAT`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Randomize {
    /// `prng`, the default: `--random-fully` (every iptables >= 1.6.2 has it, so the Go CNI's
    /// fallback to `--random` is not needed).
    #[default]
    Prng,
    /// `hashrandom`: `--random`.
    HashRandom,
    /// `none`: sequential ports.
    None,
}

impl FromStr for Randomize {
    type Err = SnatError;

    /// Parses the env var's values; the empty string is the default, as in the Go CNI.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "" | "prng" => Ok(Self::Prng),
            "hashrandom" => Ok(Self::HashRandom),
            "none" => Ok(Self::None),
            other => Err(SnatError::Invalid {
                what: "SNAT randomisation",
                why: format!("{other:?} is not one of prng, hashrandom, none"),
            }),
        }
    }
}

impl fmt::Display for Randomize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Prng => "prng",
            Self::HashRandom => "hashrandom",
            Self::None => "none",
        })
    }
}

/// Everything the node-level rules are built from (reference §3.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeNetConfig {
    /// The primary ENI's link, e.g. `eth0`.
    pub primary_if: String,
    /// The node's primary private IPv4 address: the SNAT source.
    pub primary_ip: Ipv4Addr,
    /// The VPC's IPv4 CIDRs: traffic to them keeps the pod's address.
    pub vpc_cidrs: Vec<Ipv4Network>,
    /// More destinations exempt from SNAT (`AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS`).
    pub exclude_snat_cidrs: Vec<Ipv4Network>,
    /// `AWS_VPC_K8S_CNI_EXTERNALSNAT`: a NAT gateway does SNAT, so no SNAT or connmark rules.
    pub external_snat: bool,
    /// `AWS_VPC_K8S_CNI_RANDOMIZESNAT`.
    pub randomize: Randomize,
    /// Prefix of the host veths (`AWS_VPC_K8S_CNI_VETHPREFIX`), `eni`.
    pub veth_prefix: String,
    /// Mark bit(s) for traffic that must use the main table (`AWS_VPC_K8S_CNI_CONNMARK`).
    pub connmark: u32,
    /// `AWS_VPC_CNI_NODE_PORT_SUPPORT` (default true): NodePort replies leave via the primary ENI.
    pub node_port_support: bool,
    /// IPv6 mode's IPv4 egress (`ENABLE_V4_EGRESS`): the range of the pods' node-local IPv4
    /// addresses, SNATed to `primary_ip` wherever they go outside the range.
    pub v4_egress: Option<Ipv4Network>,
}

impl NodeNetConfig {
    /// A configuration with the Go CNI's defaults for everything but the node's own facts.
    pub fn new(primary_if: &str, primary_ip: Ipv4Addr, vpc_cidrs: Vec<Ipv4Network>) -> Self {
        Self {
            primary_if: primary_if.to_string(),
            primary_ip,
            vpc_cidrs,
            exclude_snat_cidrs: Vec::new(),
            external_snat: false,
            randomize: Randomize::Prng,
            veth_prefix: DEFAULT_VETH_PREFIX.to_string(),
            connmark: DEFAULT_CONNMARK,
            node_port_support: true,
            v4_egress: None,
        }
    }

    /// Checks every value that ends up in a rule, so a bad one is reported by name instead of
    /// failing inside `iptables-restore`.
    pub fn validate(&self) -> Result<()> {
        iface_name("primary interface", &self.primary_if, 15)?;
        // The prefix gets a `+` appended in rules, which must still fit IFNAMSIZ.
        iface_name("veth prefix", &self.veth_prefix, 14)?;
        if self.primary_ip.is_unspecified() {
            return Err(SnatError::Invalid {
                what: "primary IP",
                why: "0.0.0.0 cannot be a SNAT source".into(),
            });
        }
        if self.connmark == 0 {
            return Err(SnatError::Invalid {
                what: "connmark",
                why: "0 selects no mark bit".into(),
            });
        }
        if !self.external_snat && self.vpc_cidrs.is_empty() {
            return Err(SnatError::Invalid {
                what: "VPC CIDRs",
                why: "none given: without them every pod packet, VPC traffic included, \
                      would be SNATed"
                    .into(),
            });
        }
        Ok(())
    }
}

/// Interface names appear unquoted in rules: keep them to characters iptables-save prints
/// as they are and that carry no special meaning (`+` is a wildcard, `!` a negation).
fn iface_name(what: &'static str, name: &str, max: usize) -> Result<()> {
    let why = if name.is_empty() {
        Some("empty".to_string())
    } else if name.len() > max {
        Some(format!("{name:?} is longer than {max} bytes"))
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        Some(format!(
            "{name:?} may only contain ASCII letters, digits, '-', '_' and '.'"
        ))
    } else if name == "." || name == ".." {
        Some(format!("{name:?} is reserved"))
    } else {
        None
    };
    match why {
        Some(why) => Err(SnatError::Invalid { what, why }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> NodeNetConfig {
        NodeNetConfig::new(
            "eth0",
            Ipv4Addr::new(10, 0, 0, 10),
            vec!["10.0.0.0/16".parse().unwrap()],
        )
    }

    #[test]
    fn defaults_follow_the_go_cni() {
        let c = cfg();
        assert_eq!(c.connmark, 0x80);
        assert_eq!(c.veth_prefix, "eni");
        assert_eq!(c.randomize, Randomize::Prng);
        assert!(c.node_port_support);
        assert!(!c.external_snat);
        c.validate().unwrap();
    }

    #[test]
    fn randomize_parses_env_values() {
        assert_eq!("".parse::<Randomize>().unwrap(), Randomize::Prng);
        assert_eq!("prng".parse::<Randomize>().unwrap(), Randomize::Prng);
        assert_eq!(
            "hashrandom".parse::<Randomize>().unwrap(),
            Randomize::HashRandom
        );
        assert_eq!("none".parse::<Randomize>().unwrap(), Randomize::None);
        let err = "fully".parse::<Randomize>().unwrap_err().to_string();
        assert!(err.contains("\"fully\""), "{err}");
        for r in [Randomize::Prng, Randomize::HashRandom, Randomize::None] {
            assert_eq!(r.to_string().parse::<Randomize>().unwrap(), r);
        }
    }

    #[test]
    fn bad_values_are_named() {
        let cases: Vec<(NodeNetConfig, &str)> = vec![
            (
                NodeNetConfig {
                    primary_if: String::new(),
                    ..cfg()
                },
                "primary interface",
            ),
            (
                NodeNetConfig {
                    primary_if: "eth0\"x".into(),
                    ..cfg()
                },
                "primary interface",
            ),
            (
                NodeNetConfig {
                    primary_if: "eth+".into(),
                    ..cfg()
                },
                "primary interface",
            ),
            (
                NodeNetConfig {
                    veth_prefix: "abcdefghijklmno".into(),
                    ..cfg()
                },
                "veth prefix",
            ),
            (
                NodeNetConfig {
                    veth_prefix: "e ni".into(),
                    ..cfg()
                },
                "veth prefix",
            ),
            (
                NodeNetConfig {
                    connmark: 0,
                    ..cfg()
                },
                "connmark",
            ),
            (
                NodeNetConfig {
                    primary_ip: Ipv4Addr::UNSPECIFIED,
                    ..cfg()
                },
                "primary IP",
            ),
            (
                NodeNetConfig {
                    vpc_cidrs: vec![],
                    ..cfg()
                },
                "VPC CIDRs",
            ),
        ];
        for (c, what) in cases {
            let err = c.validate().unwrap_err().to_string();
            assert!(err.starts_with(&format!("invalid {what}: ")), "{err}");
        }
    }

    #[test]
    fn external_snat_needs_no_vpc_cidrs() {
        NodeNetConfig {
            vpc_cidrs: vec![],
            external_snat: true,
            ..cfg()
        }
        .validate()
        .unwrap();
    }
}
