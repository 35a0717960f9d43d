use cni::{CniResult, CniVersion, Dns, Interface, IpConfig, Route};
use serde_json::{Value, json};

/// The shape our plugin emits for one dual-stack pod, plus DNS.
pub fn sample() -> CniResult {
    CniResult {
        interfaces: vec![
            Interface {
                name: "eni1a2b3c4d5e6".into(),
                mac: Some("aa:bb:cc:dd:ee:ff".into()),
                mtu: Some(9001),
                sandbox: None,
            },
            Interface {
                name: "eth0".into(),
                mac: Some("11:22:33:44:55:66".into()),
                mtu: Some(9001),
                sandbox: Some("/var/run/netns/cni-1".into()),
            },
        ],
        ips: vec![
            IpConfig {
                address: "10.0.1.5/32".parse().unwrap(),
                gateway: None,
                interface: Some(1),
            },
            IpConfig {
                address: "2001:db8::5/128".parse().unwrap(),
                gateway: Some("fe80::1".parse().unwrap()),
                interface: Some(1),
            },
        ],
        routes: vec![
            Route {
                dst: "169.254.1.1/32".parse().unwrap(),
                gw: None,
            },
            Route {
                dst: "0.0.0.0/0".parse().unwrap(),
                gw: Some("169.254.1.1".parse().unwrap()),
            },
        ],
        dns: Dns {
            nameservers: vec!["10.100.0.10".into()],
            domain: Some("cluster.local".into()),
            search: vec!["default.svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        },
    }
}

/// The exact JSON each version must produce for `sample()`.
fn expected(version: CniVersion) -> Value {
    let old = version < CniVersion::V1_0_0;
    let v11 = version == CniVersion::V1_1_0;
    let mut host = json!({"name":"eni1a2b3c4d5e6","mac":"aa:bb:cc:dd:ee:ff"});
    let mut cont =
        json!({"name":"eth0","mac":"11:22:33:44:55:66","sandbox":"/var/run/netns/cni-1"});
    if v11 {
        host["mtu"] = json!(9001);
        cont["mtu"] = json!(9001);
    }
    let mut ip4 = json!({"address":"10.0.1.5/32","interface":1});
    let mut ip6 = json!({"address":"2001:db8::5/128","gateway":"fe80::1","interface":1});
    if old {
        ip4["version"] = json!("4");
        ip6["version"] = json!("6");
    }
    json!({
        "cniVersion": version.as_str(),
        "interfaces": [host, cont],
        "ips": [ip4, ip6],
        "routes": [{"dst":"169.254.1.1/32"},{"dst":"0.0.0.0/0","gw":"169.254.1.1"}],
        "dns": {"nameservers":["10.100.0.10"],"domain":"cluster.local",
                "search":["default.svc.cluster.local"],"options":["ndots:5"]}
    })
}

#[test]
fn every_version_has_its_exact_shape() {
    for v in CniVersion::ALL {
        assert_eq!(sample().to_json(v), expected(v), "{v}");
        let text = sample().to_json_string(v);
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), expected(v));
    }
}

#[test]
fn round_trip_per_version() {
    for v in CniVersion::ALL {
        let back = CniResult::from_json(&sample().to_json(v), v).unwrap();
        let mut want = sample();
        if !v.has_interface_mtu() {
            for i in &mut want.interfaces {
                i.mtu = None;
            }
        }
        assert_eq!(back, want, "{v}");
    }
}

#[test]
fn empty_result_is_just_the_version() {
    for v in CniVersion::ALL {
        assert_eq!(
            CniResult::default().to_json(v),
            json!({"cniVersion": v.as_str()})
        );
    }
}

#[test]
fn empty_optionals_are_omitted() {
    let r = CniResult {
        interfaces: vec![Interface {
            name: "eth0".into(),
            mac: Some(String::new()),
            mtu: None,
            sandbox: Some(String::new()),
        }],
        ips: vec![IpConfig {
            address: "10.0.0.1/24".parse().unwrap(),
            gateway: None,
            interface: None,
        }],
        routes: vec![],
        dns: Dns::default(),
    };
    assert_eq!(
        r.to_json(CniVersion::V1_1_0),
        json!({"cniVersion":"1.1.0","interfaces":[{"name":"eth0"}],"ips":[{"address":"10.0.0.1/24"}]})
    );
}

#[test]
fn address_keeps_host_bits() {
    let r = CniResult::from_json(
        &json!({"ips":[{"address":"10.0.1.5/24","gateway":"10.0.1.1"}]}),
        CniVersion::V1_0_0,
    )
    .unwrap();
    assert_eq!(r.ips[0].address.to_string(), "10.0.1.5/24");
}

#[test]
fn from_json_is_tolerant() {
    // Unknown keys, nulls, a 1.1 route's extras, 0.x `version` in a 1.x result, no cniVersion.
    let v = json!({
        "interfaces":[{"name":"eth0","sandbox":"/x","socketPath":"/s","pciID":"0000:00:01.0","mtu":null}],
        "ips":[{"version":"4","address":"10.0.0.2/32","interface":0,"gateway":null}],
        "routes":[{"dst":"0.0.0.0/0","mtu":1500,"table":100,"scope":0}],
        "dns":null,
        "somethingElse":{"a":1}
    });
    for version in CniVersion::ALL {
        let r = CniResult::from_json(&v, version).unwrap();
        assert_eq!(r.interfaces[0].sandbox.as_deref(), Some("/x"));
        assert_eq!(r.ips[0].interface, Some(0));
        assert_eq!(r.routes[0].gw, None);
        assert!(r.dns.is_empty());
    }
}

#[test]
fn container_interface_index_needs_name_and_sandbox() {
    let r = sample();
    assert_eq!(r.container_interface_index("eth0"), Some(1));
    assert_eq!(r.container_interface_index("eni1a2b3c4d5e6"), None);
    assert_eq!(r.container_interface_index("eth1"), None);
    let mut host_named_eth0 = sample();
    host_named_eth0.interfaces[1].sandbox = None;
    assert_eq!(host_named_eth0.container_interface_index("eth0"), None);
}
