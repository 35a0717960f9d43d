//! Root tests: the real binary wires IPv6-only and dual-stack pods handed out by the fake
//! ipamd, between a "node" and a "pod" namespace, in several CNI versions: ADD's printed
//! result, CHECK (passing, then naming what was removed) and DEL.

use crate::support;

use cni::CniVersion;
use serde_json::{Value, json};
use support::fake_ipamd::FakeIpamd;
use support::netns::Namespaces;
use support::plugin::{Call, Outcome, conf};

const IP: &str = "10.0.0.5";
const IP6: &str = "2001:db8::5";

fn veth(pod: &str) -> String {
    netops::veth_name("eni", "default", pod)
}

fn call(verb: &str, ns: &Namespaces, pod: &str, conf: String) -> Outcome {
    Call::attachment(verb, &format!("ctr-{pod}"), &ns.pod_path(), "eth0")
        .pod("default", pod)
        .stdin(conf)
        .in_node(&ns.node)
        .run()
}

fn with_prev(version: &str, socket: &str, prev: &Value) -> String {
    conf(version, socket, json!({ "prevResult": prev }))
}

/// The MAC `ip` reports for `dev` in namespace `ns`.
fn mac_of(ns: &str, dev: &str) -> String {
    let line = testkit::netns::ip_in(ns, &["-o", "link", "show", "dev", dev]).join(" ");
    let (_, rest) = line.split_once("link/ether ").expect("an ethernet link");
    rest.split_whitespace().next().unwrap().to_owned()
}

/// Bounded pings from the node namespace (the node's own IPv6 address on `lo` is the source).
fn ping(ns: &Namespaces, ip: &str) -> bool {
    (0..3).any(|_| ns.ping_from_node(ip))
}

/// The versions run: the pre-1.0 shape (with `ips[].version`), 1.0.0 and 1.1.0 (with MTUs).
const VERSIONS: [CniVersion; 3] = [CniVersion::V0_4_0, CniVersion::V1_0_0, CniVersion::V1_1_0];

/// ADD, CHECK, a CHECK after removing the pod's IPv6 default route, DEL, for one pod.
fn add_check_del(dual: bool, version: CniVersion) {
    let v = version.as_str();
    let ns = Namespaces::new();
    ns.ip_node(&["-6", "addr", "add", "fd00:99::1/128", "dev", "lo"]);
    let ipamd = FakeIpamd::pool_of(
        dual.then(|| IP.parse().unwrap()),
        Some(IP6.parse().unwrap()),
        254,
    );
    let sock = ipamd.path_str();
    let pod = format!(
        "{}-{}",
        if dual { "dual" } else { "v6" },
        v.replace('.', "-")
    );
    let veth = veth(&pod);

    let result = call("ADD", &ns, &pod, conf(v, &sock, json!({}))).ok();

    let mut host = json!({"name": veth, "mac": mac_of(&ns.node, &veth)});
    let mut cont =
        json!({"name": "eth0", "mac": mac_of(&ns.pod, "eth0"), "sandbox": ns.pod_path()});
    if version >= CniVersion::V1_1_0 {
        host["mtu"] = json!(9001);
        cont["mtu"] = json!(9001);
    }
    let mut ip4 = json!({"address": "10.0.0.5/32", "interface": 1});
    let mut ip6 = json!({"address": "2001:db8::5/128", "gateway": "fe80::1", "interface": 1});
    if version < CniVersion::V1_0_0 {
        ip4["version"] = json!("4");
        ip6["version"] = json!("6");
    }
    let route4 = json!({"dst": "0.0.0.0/0", "gw": "169.254.1.1"});
    let route6 = json!({"dst": "::/0", "gw": "fe80::1"});
    let (ips, routes) = if dual {
        (json!([ip4, ip6]), json!([route4, route6]))
    } else {
        (json!([ip6]), json!([route6]))
    };
    assert_eq!(
        result,
        json!({"cniVersion": v, "interfaces": [host, cont], "ips": ips, "routes": routes}),
        "{v}"
    );
    testkit::cni::assert_eth0_in(&result, &ns.pod_path());

    assert!(ping(&ns, IP6), "{v}: pod not reachable over IPv6");
    assert_eq!(ping(&ns, IP), dual, "{v}: IPv4 reachability");
    let rules = ns.ip_node(&["-6", "rule", "show"]);
    assert!(
        rules.contains(&"512: from all to 2001:db8::5 lookup main".to_string()),
        "{v}: {rules:?}"
    );

    call("CHECK", &ns, &pod, with_prev(v, &sock, &result)).ok_silent();
    ns.ip_pod(&["-6", "route", "del", "default"]);
    call("CHECK", &ns, &pod, with_prev(v, &sock, &result))
        .error(999, "pod route default via fe80::1 dev eth0 missing");

    call("DEL", &ns, &pod, with_prev(v, &sock, &result)).ok_silent();
    let routes = ns.ip_node(&["-6", "route", "show", "table", "all"]);
    assert!(
        !routes.iter().any(|l| l.starts_with("2001:db8::5 ")),
        "{v}: {routes:?}"
    );
    let rules = ns.ip_node(&["-6", "rule", "show"]);
    assert!(!rules.iter().any(|l| l.contains(IP6)), "{v}: {rules:?}");
    ns.assert_node_unrouted(IP, &veth);
    assert!(!ping(&ns, IP6), "{v}: pod still reachable after DEL");
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn an_ipv6_only_pod_in_several_versions() {
    for version in VERSIONS {
        add_check_del(false, version);
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn a_dual_stack_pod_in_several_versions() {
    for version in VERSIONS {
        add_check_del(true, version);
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn del_without_ipamd_tears_down_both_families_from_prev_result() {
    let ns = Namespaces::new();
    let ipamd = FakeIpamd::pool_of(Some(IP.parse().unwrap()), Some(IP6.parse().unwrap()), 3);
    let result = call(
        "ADD",
        &ns,
        "orphan",
        conf("1.0.0", &ipamd.path_str(), json!({})),
    )
    .ok();
    let dead = ipamd.dead_path();
    call("DEL", &ns, "orphan", with_prev("1.0.0", &dead, &result)).ok_silent();
    let routes = ns.ip_node(&["-6", "route", "show", "table", "all"]);
    assert!(
        !routes.iter().any(|l| l.starts_with("2001:db8::5 ")),
        "{routes:?}"
    );
    let rules = ns.ip_node(&["-6", "rule", "show"]);
    assert!(!rules.iter().any(|l| l.contains(IP6)), "{rules:?}");
    ns.assert_node_unrouted(IP, &veth("orphan"));
}

/// An allocation with neither family is refused with a clear error, and handed back.
#[test]
fn an_allocation_without_any_address_is_a_clear_error() {
    use ipam_proto::{AddReply, Allocation, DelReply, Reply, Request};
    let ipamd = FakeIpamd::start(|req| match req {
        Request::Add(add) => Ok(Reply::Add(AddReply {
            allocation: Allocation {
                key: add.key.clone(),
                pod: add.pod.clone(),
                ip: None,
                ipv6: None,
                egress_ipv4: None,
                eni_id: "eni-1".into(),
                device_number: 0,
                route_table: 254,
            },
            existing: false,
        })),
        Request::Del(_) => Ok(Reply::Del(DelReply { released: None })),
        _ => Err(ipam_proto::DaemonError::new(
            ipam_proto::ErrorKind::Internal,
            "unexpected",
        )),
    });
    let out = Call::attachment("ADD", "ctr-none", "/run/netns/none-such", "eth0")
        .pod("default", "none")
        .stdin(conf("1.0.0", &ipamd.path_str(), json!({})))
        .run();
    out.error(999, "ipamd assigned neither an IPv4 nor an IPv6 address");
    let requests = ipamd.requests();
    assert!(
        matches!(requests.last(), Some(Request::Del(d)) if d.reason == ipam_proto::DelReason::SetupFailed),
        "{requests:?}"
    );
}
