//! Reading our own attachment back out of a `prevResult` (DEL without ipamd, CHECK).
//!
//! With chaining, `prevResult` is the final result of the whole list, so it can hold
//! interfaces and addresses of other plugins too; only the entries that are recognisably ours
//! are taken.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cni::CniResult;

/// What a previous ADD of this attachment recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    /// The pod's IPv4 address.
    pub ipv4: Option<Ipv4Addr>,
    /// The pod's IPv6 address.
    pub ipv6: Option<Ipv6Addr>,
    /// The host veth's name.
    pub host_veth: Option<String>,
    /// The host veth's MAC as written in the result.
    pub host_mac: Option<String>,
    /// The container interface's MAC as written in the result.
    pub container_mac: Option<String>,
}

/// Finds the attachment on interface `ifname` in `prev`.
///
/// - Container interface: named `ifname` with a sandbox.
/// - Addresses: the first IPv4 and the first IPv6 `ips[]` entry that point at an interface
///   named `ifname`, or at no interface (an abbreviated IPAM-style entry).
/// - Host veth: the sandbox-less entry just before the container interface (the order our
///   ADD writes), else the first sandbox-less entry whose name starts with `veth_prefix`.
pub fn recorded(prev: &CniResult, ifname: &str, veth_prefix: &str) -> Recorded {
    let container = prev.container_interface_index(ifname);
    let ours: Vec<IpAddr> = prev
        .ips
        .iter()
        .filter(|ip| match ip.interface {
            None => true,
            Some(i) => prev.interfaces.get(i).is_some_and(|x| x.name == ifname),
        })
        .map(|ip| ip.address.ip())
        .collect();
    let ipv4 = ours.iter().find_map(|ip| match ip {
        IpAddr::V4(v4) => Some(*v4),
        IpAddr::V6(_) => None,
    });
    let ipv6 = ours.iter().find_map(|ip| match ip {
        IpAddr::V6(v6) => Some(*v6),
        IpAddr::V4(_) => None,
    });
    let is_host = |i: &&cni::Interface| i.sandbox.is_none() && !i.name.is_empty();
    let host = container
        .and_then(|c| c.checked_sub(1))
        .and_then(|h| prev.interfaces.get(h))
        .filter(is_host)
        .or_else(|| {
            prev.interfaces
                .iter()
                .filter(is_host)
                .find(|i| i.name.starts_with(veth_prefix))
        });
    Recorded {
        ipv4,
        ipv6,
        host_veth: host.map(|h| h.name.clone()),
        host_mac: host.and_then(|h| h.mac.clone()),
        container_mac: container
            .and_then(|c| prev.interfaces.get(c))
            .and_then(|c| c.mac.clone()),
    }
}

#[cfg(test)]
mod tests {
    use cni::{CniVersion, Interface, IpConfig};
    use serde_json::json;

    use super::*;

    fn parse(v: serde_json::Value) -> CniResult {
        CniResult::from_json(&v, CniVersion::V1_0_0).unwrap()
    }

    #[test]
    fn our_own_result_is_read_back() {
        let prev = parse(json!({
            "interfaces":[{"name":"enic440f455693","mac":"02:00:00:00:00:01"},
                          {"name":"eth0","mac":"0a:00:00:00:00:02","sandbox":"/run/netns/p"}],
            "ips":[{"address":"10.0.0.5/32","interface":1}],
            "routes":[{"dst":"0.0.0.0/0","gw":"169.254.1.1"}]}));
        assert_eq!(
            recorded(&prev, "eth0", "eni"),
            Recorded {
                ipv4: Some("10.0.0.5".parse().unwrap()),
                ipv6: None,
                host_veth: Some("enic440f455693".into()),
                host_mac: Some("02:00:00:00:00:01".into()),
                container_mac: Some("0a:00:00:00:00:02".into()),
            }
        );
    }

    #[test]
    fn entries_of_other_plugins_are_skipped() {
        // Another plugin first (bridge + its pod interface + address), then ours.
        let prev = parse(json!({
            "interfaces":[{"name":"cni0","mac":"02:aa:00:00:00:01"},
                          {"name":"net1","sandbox":"/run/netns/p"},
                          {"name":"enic440f455693","mac":"02:00:00:00:00:01"},
                          {"name":"eth0","sandbox":"/run/netns/p"}],
            "ips":[{"address":"192.168.1.7/24","interface":1},
                   {"address":"fd00::5/128","interface":3},
                   {"address":"10.0.0.5/32","interface":3}]}));
        let r = recorded(&prev, "eth0", "eni");
        assert_eq!(r.ipv4, Some("10.0.0.5".parse().unwrap()));
        // The IPv6 entry points at eth0 too: it is read as the pod's IPv6 address.
        assert_eq!(r.ipv6, Some("fd00::5".parse().unwrap()));
        assert_eq!(r.host_veth.as_deref(), Some("enic440f455693"));
        assert_eq!(r.container_mac, None);
    }

    #[test]
    fn host_veth_falls_back_to_the_prefix() {
        // Host entry not adjacent to the container entry (a later plugin reordered things).
        let prev = CniResult {
            interfaces: vec![
                Interface {
                    name: "eth0".into(),
                    sandbox: Some("/run/netns/p".into()),
                    ..Default::default()
                },
                Interface {
                    name: "cni0".into(),
                    ..Default::default()
                },
                Interface {
                    name: "eni3e52eb8f9f8".into(),
                    ..Default::default()
                },
            ],
            ips: vec![IpConfig {
                address: "10.0.0.5/32".parse().unwrap(),
                gateway: None,
                interface: Some(0),
            }],
            ..Default::default()
        };
        let r = recorded(&prev, "eth0", "eni");
        assert_eq!(r.host_veth.as_deref(), Some("eni3e52eb8f9f8"));
        assert_eq!(r.ipv4, Some("10.0.0.5".parse().unwrap()));
        // With another prefix nothing sandbox-less qualifies.
        assert_eq!(recorded(&prev, "eth0", "pod").host_veth, None);
    }

    #[test]
    fn abbreviated_and_empty_results() {
        let prev = parse(json!({"ips":[{"address":"10.0.0.9/32"}]}));
        let r = recorded(&prev, "eth0", "eni");
        assert_eq!(r.ipv4, Some("10.0.0.9".parse().unwrap()));
        assert_eq!(r.host_veth, None);

        assert_eq!(
            recorded(&CniResult::default(), "eth0", "eni"),
            Recorded::default()
        );

        // An address pointing at another interface is not ours.
        let prev = parse(json!({
            "interfaces":[{"name":"net1","sandbox":"/run/netns/p"}],
            "ips":[{"address":"10.0.0.9/32","interface":0}]}));
        assert_eq!(recorded(&prev, "eth0", "eni").ipv4, None);
    }

    #[test]
    fn ipv6_only_and_dual_results_are_read_back() {
        let v6 = parse(json!({
            "interfaces":[{"name":"enic440f455693","mac":"02:00:00:00:00:01"},
                          {"name":"eth0","sandbox":"/run/netns/p"}],
            "ips":[{"address":"2001:db8::5/128","gateway":"fe80::1","interface":1}],
            "routes":[{"dst":"::/0","gw":"fe80::1"}]}));
        let r = recorded(&v6, "eth0", "eni");
        assert_eq!(
            (r.ipv4, r.ipv6),
            (None, Some("2001:db8::5".parse().unwrap()))
        );
        assert_eq!(r.host_veth.as_deref(), Some("enic440f455693"));

        // A 0.4.0 result carries "version"; both entries are ours.
        let dual = CniResult::from_json(
            &json!({"cniVersion":"0.4.0",
                    "interfaces":[{"name":"enic440f455693"},
                                  {"name":"eth0","sandbox":"/run/netns/p"}],
                    "ips":[{"version":"4","address":"10.0.0.5/32","interface":1},
                           {"version":"6","address":"2001:db8::5/128","gateway":"fe80::1",
                            "interface":1}]}),
            CniVersion::V0_4_0,
        )
        .unwrap();
        let r = recorded(&dual, "eth0", "eni");
        assert_eq!(r.ipv4, Some("10.0.0.5".parse().unwrap()));
        assert_eq!(r.ipv6, Some("2001:db8::5".parse().unwrap()));
    }
}
