//! A healthy node's facts, for the checks' tests to break one thing at a time: a t3.medium
//! with its primary ENI (device 0, table main) and one secondary ENI (device 1, table 2), one
//! pod on each.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use cloud::{
    Action, Attachment, EniMetadata, InstanceLimits, NetworkInterface, NodeIdentity, Permission,
    Subnet,
};
use introspect::json::{
    CidrInfo, Eni, EniInfos, IpNet, PodEntry, PoolLimits, PoolStatus, PoolTargets, PoolTotals,
};
use ipam_proto::{PoolCounts, StatusReply};
use ipnetwork::IpNetwork;
use netops::{Link, PRIO_FROM_POD, PRIO_TO_POD};

use super::super::Facts;
use super::super::facts::{
    Cni, ConfFile, Ec2View, Ipamd, KRoute, KRule, Kernel, LimitsSource, Log,
};
use crate::config::Config;

pub fn pod_ip() -> IpAddr {
    "10.0.1.11".parse().unwrap()
}

pub fn secondary_pod_ip() -> IpAddr {
    "10.0.1.21".parse().unwrap()
}

fn ip4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn eni(id: &str, mac: &str, device: u32, primary: &str, secondary: &[&str]) -> NetworkInterface {
    NetworkInterface {
        id: id.into(),
        mac: mac.into(),
        subnet_id: "subnet-1".into(),
        vpc_id: "vpc-1".into(),
        description: String::new(),
        status: "in-use".into(),
        primary_ip: Some(ip4(primary)),
        secondary_ips: secondary.iter().map(|s| ip4(s)).collect(),
        prefixes: vec![],
        ipv6_addresses: vec![],
        ipv6_prefixes: vec![],
        attachment: Some(Attachment {
            id: format!("attach-{device}"),
            instance_id: Some("i-1".into()),
            device_index: device,
            network_card_index: 0,
            delete_on_termination: true,
        }),
        security_groups: vec![],
        tags: BTreeMap::new(),
    }
}

fn meta(e: &NetworkInterface) -> EniMetadata {
    EniMetadata {
        mac: e.mac.clone(),
        eni_id: e.id.clone(),
        device_number: e.attachment.as_ref().unwrap().device_index,
        subnet_id: e.subnet_id.clone(),
        subnet_cidr: "10.0.1.0/24".parse().unwrap(),
        local_ipv4s: e
            .primary_ip
            .iter()
            .chain(&e.secondary_ips)
            .copied()
            .collect(),
        ipv6s: vec![],
        ipv6_prefixes: vec![],
    }
}

fn pool_eni(e: &NetworkInterface) -> Eni {
    let device = e.attachment.as_ref().unwrap().device_index;
    Eni {
        id: e.id.clone(),
        is_primary: device == 0,
        is_trunk: false,
        is_efa: false,
        device_number: device,
        available_ipv4_cidrs: e
            .secondary_ips
            .iter()
            .map(|ip| {
                (
                    format!("{ip}/32"),
                    CidrInfo {
                        cidr: IpNet {
                            ip: ip.to_string(),
                            mask: "/////w==".into(),
                        },
                        ip_addresses: BTreeMap::new(),
                        is_prefix: false,
                        address_family: String::new(),
                    },
                )
            })
            .collect(),
        ipv6_cidrs: BTreeMap::new(),
        is_excluded_for_pod_ips: false,
        route_table_id: netops::eni_table(device),
        subnet_id: e.subnet_id.clone(),
        subnet_choice: None,
    }
}

fn link(index: u32, name: &str, kind: Option<&str>) -> Link {
    Link {
        index,
        name: name.into(),
        mac: None,
        mtu: Some(9001),
        up: true,
        kind: kind.map(str::to_string),
        peer_index: None,
    }
}

fn pod(name: &str, ip: IpAddr, eni: &str, device: u32) -> PodEntry {
    PodEntry {
        namespace: "default".into(),
        name: name.into(),
        ip: ip.to_string(),
        eni: eni.into(),
        device_number: device,
        assigned_time: String::new(),
        interface: "eth0".into(),
    }
}

fn rule(priority: u32, src: Option<IpAddr>, dst: Option<IpAddr>, table: u32) -> KRule {
    KRule {
        priority,
        src: src.map(IpNetwork::from),
        dst: dst.map(IpNetwork::from),
        table,
        plain: true,
    }
}

fn route(dst: &str, gateway: Option<&str>, oif: u32, dev: &str, table: u32) -> KRoute {
    KRoute {
        dst: dst.parse().unwrap(),
        gateway: gateway.map(|g| g.parse().unwrap()),
        oif: Some(oif),
        dev: Some(dev.into()),
        table,
        scope: if gateway.is_some() {
            netops::Scope::Universe
        } else {
            netops::Scope::Link
        },
    }
}

pub fn healthy() -> Facts {
    let config = Config::from_env(|_| None).unwrap();
    let primary = eni(
        "eni-1",
        "02:00:00:00:00:01",
        0,
        "10.0.1.10",
        &["10.0.1.11", "10.0.1.12"],
    );
    let secondary = eni(
        "eni-2",
        "02:00:00:00:00:02",
        1,
        "10.0.1.20",
        &["10.0.1.21", "10.0.1.22"],
    );
    let identity = NodeIdentity {
        instance_id: "i-1".into(),
        instance_type: "t3.medium".into(),
        region: "us-west-2".into(),
        availability_zone: "us-west-2a".into(),
        primary_ip: ip4("10.0.1.10"),
        primary_ipv6: None,
        vpc_id: "vpc-1".into(),
        vpc_cidrs: vec!["10.0.0.0/16".parse().unwrap()],
        primary_eni: meta(&primary),
    };
    let main = netops::RT_TABLE_MAIN;
    let (a, b) = (pod_ip(), secondary_pod_ip());
    let kernel = Kernel {
        rules: vec![
            rule(0, None, None, 255),
            rule(PRIO_TO_POD, None, Some(a), main),
            rule(PRIO_TO_POD, None, Some(b), main),
            rule(PRIO_FROM_POD, Some(b), None, 2),
            rule(32766, None, None, main),
        ],
        routes: vec![
            route("0.0.0.0/0", Some("10.0.1.1"), 2, "eth0", main),
            route("10.0.1.11/32", None, 10, "enia", main),
            route("10.0.1.21/32", None, 11, "enib", main),
            route("0.0.0.0/0", Some("10.0.1.1"), 3, "eth1", 2),
        ],
        links: vec![
            link(1, "lo", None),
            link(2, "eth0", None),
            link(3, "eth1", None),
            link(10, "enia", Some("veth")),
            link(11, "enib", Some("veth")),
        ],
        rp_filter: Some(("eth0".into(), "2".into())),
    };
    let pool = PoolStatus {
        ready: true,
        mode: "WARM_ENI_TARGET".into(),
        totals: PoolTotals {
            total: 4,
            assigned: 2,
            cooling: 0,
            available: 2,
            prefixes: 0,
            enis: 2,
        },
        limits: PoolLimits {
            max_enis: 3,
            max_pods: 17,
            ips_per_eni: 5,
            max_ips: 15,
        },
        targets: PoolTargets {
            warm_eni: 1,
            warm_ip: 0,
            minimum_ip: 0,
            warm_prefix: 0,
            prefix_delegation: false,
        },
        last_release: None,
        growth_paused_until: None,
        growth_paused: false,
        last_error: None,
        next_action: None,
        planned_actions: vec![],
        reason: "the warm pool is full".into(),
        cluster: Default::default(),
        pending_pods: 0,
        draining: false,
        subnet_scarce: false,
        ec2_congested: false,
        prefix_fallback: None,
    };
    let socket = PathBuf::from("/run/vpc-cni/ipamd.sock");
    let ours = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "aws-cni",
        "plugins": [
            {"type": "vpc-cni", "ipamdSocket": "/run/vpc-cni/ipamd.sock"},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    });
    Facts {
        config,
        imds_enis: Ok(vec![meta(&primary), meta(&secondary)]),
        limits: Ok((
            InstanceLimits {
                max_enis: 3,
                ipv4_per_eni: 6,
                nitro: true,
                bare_metal: false,
                network_cards: 1,
            },
            LimitsSource::Table,
        )),
        ec2: Ok(Ec2View {
            enis: vec![primary.clone(), secondary.clone()],
            subnets: vec![Subnet {
                id: "subnet-1".into(),
                cidr: "10.0.1.0/24".parse().unwrap(),
                ipv6_cidr: None,
                availability_zone: "us-west-2a".into(),
                vpc_id: "vpc-1".into(),
                available_ips: 200,
                tags: BTreeMap::new(),
            }],
            leaked: vec![],
        }),
        identity: Ok(identity),
        permissions: vec![
            (Action::DescribeNetworkInterfaces, Permission::Allowed),
            (Action::CreateNetworkInterface, Permission::Allowed),
            (Action::DescribeInstanceTypes, Permission::Allowed),
        ],
        ipamd: Ipamd {
            socket: socket.clone(),
            status: Ok(StatusReply {
                ready: true,
                reason: None,
                pool: PoolCounts {
                    total: 4,
                    assigned: 2,
                    cooling: 0,
                    available: 2,
                },
            }),
            pool: Ok(pool),
            pods: Ok(vec![pod("a", a, "eni-1", 0), pod("b", b, "eni-2", 1)]),
            enis: Ok(BTreeMap::from([(
                "0".to_string(),
                EniInfos {
                    total_ips: 4,
                    assigned_ips: 2,
                    enis: BTreeMap::from([
                        ("eni-1".to_string(), pool_eni(&primary)),
                        ("eni-2".to_string(), pool_eni(&secondary)),
                    ]),
                },
            )])),
            refusals: Ok(vec![]),
            metrics: Ok("awscni_build_info{version=\"x\"} 1\n".into()),
            introspection: BTreeMap::new(),
        },
        kernel: Ok(kernel),
        snat_pending: Ok(vec![]),
        cni: Cni {
            conf_dir: "/etc/cni/net.d".into(),
            files: Ok(vec![ConfFile {
                name: "10-vpc-cni.conflist".into(),
                content: Ok(ours),
            }]),
            bin_dir: "/opt/cni/bin".into(),
            plugin_version: Ok("0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0".into()),
            other_files: vec![],
        },
        log: Some(Ok(Log {
            path: "/var/log/aws-routed-eni/ipamd.log".into(),
            stages: vec!["Starting vpc-cni ipamd".into()],
            errors: vec![],
        })),
    }
}
