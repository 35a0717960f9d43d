//! The ADD result: the two ends of the veth, the pod's /32 and /128 and its default routes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cni::{CniResult, Interface, IpConfig, Route};
use ipnetwork::{IpNetwork, Ipv4Network, Ipv6Network};
use netops::{POD_GATEWAY, POD_GATEWAY6, format_mac};

/// `0.0.0.0/0`, checked at compile time.
const DEFAULT_ROUTE: Ipv4Network = match Ipv4Network::new_checked(Ipv4Addr::UNSPECIFIED, 0) {
    Some(net) => net,
    None => panic!("0.0.0.0/0 is a valid network"),
};

/// `::/0`, checked at compile time.
const DEFAULT_ROUTE6: Ipv6Network = match Ipv6Network::new_checked(Ipv6Addr::UNSPECIFIED, 0) {
    Some(net) => net,
    None => panic!("::/0 is a valid network"),
};

/// What ADD wired, as the result reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wired {
    /// Host veth name.
    pub host_veth: String,
    /// Host veth MAC.
    pub host_mac: [u8; 6],
    /// `CNI_IFNAME`.
    pub container_ifname: String,
    /// The pod interface's MAC.
    pub container_mac: [u8; 6],
    /// `CNI_NETNS`.
    pub netns: String,
    /// The pod's IPv4 address, if it has one.
    pub ipv4: Option<Ipv4Addr>,
    /// The pod's IPv6 address, if it has one.
    pub ipv6: Option<Ipv6Addr>,
    /// MTU of both ends (only 1.1.0 results carry it).
    pub mtu: u32,
}

/// The result of ADD: `prev` (when chained after another plugin) with our entries appended,
/// else a new result.
///
/// Interfaces: the host veth (no sandbox), then the container interface (sandbox =
/// `CNI_NETNS`); `ips[]` holds `<ip>/32` pointing at the container interface, which
/// containerd requires (it looks up the IP of the interface named `eth0`); the route is the
/// pod's `default via 169.254.1.1`. No gateway in the IPv4 `ips[]` entry: 169.254.1.1 is not
/// on the pod's subnet, and the Go CNI leaves it out too. An IPv6 address adds `<ip6>/128`
/// with gateway `fe80::1` (the Go CNI reports it so) and the route `::/0 via fe80::1`; a
/// dual-stack pod lists IPv4 first.
pub fn add_result(prev: Option<CniResult>, wired: &Wired) -> CniResult {
    let mut result = prev.unwrap_or_default();
    result.interfaces.push(Interface {
        name: wired.host_veth.clone(),
        mac: Some(format_mac(&wired.host_mac)),
        mtu: Some(wired.mtu),
        sandbox: None,
    });
    let container_index = result.interfaces.len();
    result.interfaces.push(Interface {
        name: wired.container_ifname.clone(),
        mac: Some(format_mac(&wired.container_mac)),
        mtu: Some(wired.mtu),
        sandbox: Some(wired.netns.clone()),
    });
    if let Some(ip) = wired.ipv4 {
        result.ips.push(IpConfig {
            address: IpNetwork::V4(Ipv4Network::from(ip)),
            gateway: None,
            interface: Some(container_index),
        });
    }
    if let Some(ip) = wired.ipv6 {
        result.ips.push(IpConfig {
            address: IpNetwork::V6(Ipv6Network::from(ip)),
            gateway: Some(IpAddr::V6(POD_GATEWAY6)),
            interface: Some(container_index),
        });
    }
    if wired.ipv4.is_some() {
        result.routes.push(Route {
            dst: IpNetwork::V4(DEFAULT_ROUTE),
            gw: Some(IpAddr::V4(POD_GATEWAY)),
        });
    }
    if wired.ipv6.is_some() {
        result.routes.push(Route {
            dst: IpNetwork::V6(DEFAULT_ROUTE6),
            gw: Some(IpAddr::V6(POD_GATEWAY6)),
        });
    }
    result
}

#[cfg(test)]
mod tests {
    use cni::CniVersion;
    use serde_json::{Value, json};

    use super::*;

    fn wired() -> Wired {
        Wired {
            host_veth: "enic440f455693".into(),
            host_mac: [0x02, 0, 0, 0, 0, 0x01],
            container_ifname: "eth0".into(),
            container_mac: [0x0a, 0, 0, 0, 0, 0x02],
            netns: "/run/netns/pod".into(),
            ipv4: Some(Ipv4Addr::new(10, 0, 0, 5)),
            ipv6: None,
            mtu: 9001,
        }
    }

    #[test]
    fn a_new_result_in_every_version() {
        let result = add_result(None, &wired());
        for version in CniVersion::ALL {
            let v = version.as_str();
            let mut ip = json!({"address":"10.0.0.5/32","interface":1});
            let mut host = json!({"name":"enic440f455693","mac":"02:00:00:00:00:01"});
            let mut cont =
                json!({"name":"eth0","mac":"0a:00:00:00:00:02","sandbox":"/run/netns/pod"});
            if version < CniVersion::V1_0_0 {
                ip["version"] = json!("4");
            }
            if version >= CniVersion::V1_1_0 {
                host["mtu"] = json!(9001);
                cont["mtu"] = json!(9001);
            }
            let want = json!({
                "cniVersion": v,
                "interfaces": [host, cont],
                "ips": [ip],
                "routes": [{"dst":"0.0.0.0/0","gw":"169.254.1.1"}],
            });
            assert_eq!(result.to_json(version), want, "{v}");
        }
    }

    #[test]
    fn a_prev_result_is_amended() {
        let prev = CniResult::from_json(
            &json!({"cniVersion":"1.0.0",
                    "interfaces":[{"name":"cni0"},{"name":"net1","sandbox":"/run/netns/pod"}],
                    "ips":[{"address":"192.168.0.7/24","interface":1}],
                    "routes":[{"dst":"192.168.0.0/16"}],
                    "dns":{"nameservers":["10.96.0.10"]}}),
            CniVersion::V1_0_0,
        )
        .unwrap();
        let json = add_result(Some(prev), &wired()).to_json(CniVersion::V1_0_0);
        let names: Vec<&str> = json["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["cni0", "net1", "enic440f455693", "eth0"]);
        assert_eq!(
            json["ips"],
            json!([{"address":"192.168.0.7/24","interface":1},
                   {"address":"10.0.0.5/32","interface":3}])
        );
        assert_eq!(
            json["routes"],
            json!([{"dst":"192.168.0.0/16"},{"dst":"0.0.0.0/0","gw":"169.254.1.1"}])
        );
        assert_eq!(json["dns"], json!({"nameservers":["10.96.0.10"]}));
    }

    #[test]
    fn the_ip_points_at_the_container_interface() {
        let result = add_result(None, &wired());
        let index = result.container_interface_index("eth0").unwrap();
        assert_eq!(result.ips[0].interface, Some(index));
        let json: Value = result.to_json(CniVersion::V1_1_0);
        assert_eq!(json["interfaces"][index]["sandbox"], "/run/netns/pod");
    }

    #[test]
    fn ipv6_only_and_dual_results_in_every_version() {
        let v6 = Wired {
            ipv4: None,
            ipv6: Some("2001:db8::5".parse().unwrap()),
            ..wired()
        };
        let dual = Wired {
            ipv4: Some(Ipv4Addr::new(10, 0, 0, 5)),
            ..v6.clone()
        };
        for version in CniVersion::ALL {
            let old = version < CniVersion::V1_0_0;
            let mut ip4 = json!({"address":"10.0.0.5/32","interface":1});
            let mut ip6 = json!({"address":"2001:db8::5/128","gateway":"fe80::1","interface":1});
            if old {
                ip4["version"] = json!("4");
                ip6["version"] = json!("6");
            }
            let route4 = json!({"dst":"0.0.0.0/0","gw":"169.254.1.1"});
            let route6 = json!({"dst":"::/0","gw":"fe80::1"});

            let json = add_result(None, &v6).to_json(version);
            assert_eq!(json["ips"], json!([ip6.clone()]), "{version}");
            assert_eq!(json["routes"], json!([route6.clone()]), "{version}");

            let json = add_result(None, &dual).to_json(version);
            assert_eq!(json["ips"], json!([ip4, ip6]), "{version}");
            assert_eq!(json["routes"], json!([route4, route6]), "{version}");
        }
    }
}
