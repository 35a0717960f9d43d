use cni::{
    CniResult, CniVersion, Command, Dns, Interface, IpConfig, NetConf, Route, parse_cni_args,
};
use ipnetwork::IpNetwork;
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const COMMANDS: [Command; 6] = [
    Command::Add,
    Command::Del,
    Command::Check,
    Command::Status,
    Command::Gc,
    Command::Version,
];

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|n| IpAddr::V4(Ipv4Addr::from(n))),
        any::<u128>().prop_map(|n| IpAddr::V6(Ipv6Addr::from(n))),
    ]
}

fn net() -> impl Strategy<Value = IpNetwork> {
    (ip(), any::<u8>()).prop_map(|(ip, p)| {
        let max = if ip.is_ipv4() { 33 } else { 129 };
        IpNetwork::new(ip, p % max).unwrap()
    })
}

fn text() -> impl Strategy<Value = Option<String>> {
    proptest::option::of("[a-z0-9:/._-]{1,12}")
}

fn result() -> impl Strategy<Value = CniResult> {
    let iface = (
        "[a-z0-9]{0,15}",
        text(),
        proptest::option::of(any::<u32>()),
        text(),
    )
        .prop_map(|(name, mac, mtu, sandbox)| Interface {
            name,
            mac,
            mtu,
            sandbox,
        });
    let ipc = (
        net(),
        proptest::option::of(ip()),
        proptest::option::of(0usize..8),
    )
        .prop_map(|(address, gateway, interface)| IpConfig {
            address,
            gateway,
            interface,
        });
    let route = (net(), proptest::option::of(ip())).prop_map(|(dst, gw)| Route { dst, gw });
    let list = || proptest::collection::vec("[a-z0-9.]{1,10}", 0..3);
    let dns =
        (list(), text(), list(), list()).prop_map(|(nameservers, domain, search, options)| Dns {
            nameservers,
            domain,
            search,
            options,
        });
    (
        proptest::collection::vec(iface, 0..4),
        proptest::collection::vec(ipc, 0..4),
        proptest::collection::vec(route, 0..4),
        dns,
    )
        .prop_map(|(interfaces, ips, routes, dns)| CniResult {
            interfaces,
            ips,
            routes,
            dns,
        })
}

proptest! {
    #[test]
    fn netconf_parse_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        for cmd in COMMANDS {
            let _ = NetConf::parse(&bytes, cmd);
        }
    }

    #[test]
    fn netconf_parse_never_panics_on_json_like_input(
        s in r#"\{("(cniVersion|name|mtu|vethPrefix|prevResult|ips|address|cni.dev/attachments)":(1|-1|1.5|"[0-9./a-z]{0,6}"|null|\[\]|\{\}|true),?){0,6}\}"#
    ) {
        for cmd in COMMANDS {
            let _ = NetConf::parse(s.as_bytes(), cmd);
        }
    }

    #[test]
    fn parse_cni_args_never_panics(s in any::<String>()) {
        let _ = parse_cni_args(&s);
    }

    #[test]
    fn parse_cni_args_never_panics_on_arg_like_input(s in "([A-Za-z0-9_]{0,8}=?[a-z0-9=]{0,4};?){0,5}") {
        let _ = parse_cni_args(&s);
    }

    #[test]
    fn results_round_trip_in_every_version(r in result()) {
        for v in CniVersion::ALL {
            let back = CniResult::from_json(&r.to_json(v), v).unwrap();
            let mut want = r.clone();
            for i in &mut want.interfaces {
                if !v.has_interface_mtu() {
                    i.mtu = None;
                }
            }
            prop_assert_eq!(back, want);
        }
    }
}
