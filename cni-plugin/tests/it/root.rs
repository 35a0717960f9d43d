//! Root tests: the real binary wires pods between a "node" and a "pod" namespace. The plugin
//! runs under `ip netns exec <node>`, so the node namespace is its own, as on a real node.

use crate::support;

use std::net::Ipv4Addr;

use cni::CniVersion;
use ipam_proto::{DelReason, Request};
use serde_json::{Value, json};
use support::fake_ipamd::FakeIpamd;
use support::netns::Namespaces;
use support::plugin::{Call, Outcome, conf};

const IP: &str = "10.0.0.5";

fn ip() -> Ipv4Addr {
    IP.parse().unwrap()
}

/// The host veth of pod `default/<pod>` with the default prefix.
fn veth(pod: &str) -> String {
    netops::veth_name("eni", "default", pod)
}

/// One attachment of pod `default/<pod>` (container `ctr-<pod>`, eth0) in `ns`.
fn call(verb: &str, ns: &Namespaces, pod: &str, netns: &str, conf: String) -> Outcome {
    Call::attachment(verb, &format!("ctr-{pod}"), netns, "eth0")
        .pod("default", pod)
        .stdin(conf)
        .in_node(&ns.node)
        .run()
}

fn add(ns: &Namespaces, ipamd: &FakeIpamd, pod: &str, version: &str) -> Value {
    call(
        "ADD",
        ns,
        pod,
        &ns.pod_path(),
        conf(version, &ipamd.path_str(), json!({})),
    )
    .ok()
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

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn add_check_del_in_every_version() {
    for version in CniVersion::ALL {
        let v = version.as_str();
        let ns = Namespaces::new();
        let ipamd = FakeIpamd::pool(ip(), 254);
        let pod = format!("web-{}", v.replace('.', "-"));
        let veth = veth(&pod);

        let result = add(&ns, &ipamd, &pod, v);
        assert_eq!(result["cniVersion"], v);
        let mut host = json!({"name": veth, "mac": mac_of(&ns.node, &veth)});
        let mut cont =
            json!({"name": "eth0", "mac": mac_of(&ns.pod, "eth0"), "sandbox": ns.pod_path()});
        let mut address = json!({"address": "10.0.0.5/32", "interface": 1});
        if version < CniVersion::V1_0_0 {
            address["version"] = json!("4");
        }
        if version >= CniVersion::V1_1_0 {
            host["mtu"] = json!(9001);
            cont["mtu"] = json!(9001);
        }
        assert_eq!(
            result,
            json!({"cniVersion": v, "interfaces": [host, cont], "ips": [address],
                   "routes": [{"dst": "0.0.0.0/0", "gw": "169.254.1.1"}]}),
            "{v}"
        );
        testkit::cni::assert_eth0_in(&result, &ns.pod_path());

        assert!(
            ns.ping_from_node(IP),
            "{v}: pod not reachable from the node"
        );
        let rules = ns.ip_node(&["-4", "rule", "show"]);
        assert!(
            rules.contains(&"512: from all to 10.0.0.5 lookup main".to_string()),
            "{v}: {rules:?}"
        );

        let sock = ipamd.path_str();
        if version.supports_check() {
            call(
                "CHECK",
                &ns,
                &pod,
                &ns.pod_path(),
                with_prev(v, &sock, &result),
            )
            .ok_silent();
        }

        call(
            "DEL",
            &ns,
            &pod,
            &ns.pod_path(),
            with_prev(v, &sock, &result),
        )
        .ok_silent();
        ns.assert_node_unrouted(IP, &veth);
        assert!(
            ns.ip_pod(&["-o", "link", "show"])
                .iter()
                .any(|l| l.contains("eth0")),
            "{v}: the pod's end goes with its namespace, not with DEL"
        );
        assert!(!ns.ping_from_node(IP), "{v}: pod still reachable after DEL");
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn an_add_that_gets_no_address_leaves_no_veth_on_either_side() {
    // The pair is made while ipamd answers; a refusal takes it away again.
    let ns = Namespaces::new();
    let ipamd = FakeIpamd::start(|_| {
        Err(ipam_proto::DaemonError::new(
            ipam_proto::ErrorKind::NoAddresses,
            "subnet exhausted",
        ))
    });
    let out = call(
        "ADD",
        &ns,
        "refused",
        &ns.pod_path(),
        conf("1.1.0", &ipamd.path_str(), json!({})),
    );
    out.error(11, "subnet exhausted");
    let node_links = ns.ip_node(&["-o", "link", "show"]);
    assert!(
        !node_links.iter().any(|l| l.contains(&veth("refused"))),
        "host veth left: {node_links:?}"
    );
    let pod_links = ns.ip_pod(&["-o", "link", "show"]);
    assert!(
        !pod_links.iter().any(|l| l.contains("eth0")),
        "pod end left: {pod_links:?}"
    );
    // And the pod still gets wired once there is an address.
    let ipamd = FakeIpamd::pool(ip(), 254);
    add(&ns, &ipamd, "refused", "1.1.0");
    assert!(ns.ping_from_node(IP), "pod not reachable from the node");
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn check_names_what_was_changed_by_hand() {
    let ns = Namespaces::new();
    let ipamd = FakeIpamd::pool(ip(), 254);
    let result = add(&ns, &ipamd, "check-me", "1.1.0");
    ns.ip_pod(&["route", "del", "default"]);
    let out = call(
        "CHECK",
        &ns,
        "check-me",
        &ns.pod_path(),
        with_prev("1.1.0", &ipamd.path_str(), &result),
    );
    out.error(999, "pod route default via 169.254.1.1 dev eth0 missing");

    // A prevResult that disagrees with ipamd is reported too, in the same message.
    let mut wrong = result.clone();
    wrong["ips"][0]["address"] = json!("10.0.0.77/32");
    let out = call(
        "CHECK",
        &ns,
        "check-me",
        &ns.pod_path(),
        with_prev("1.1.0", &ipamd.path_str(), &wrong),
    );
    let err = out.error(
        999,
        "prevResult has address 10.0.0.77 but ipamd holds 10.0.0.5",
    );
    assert!(
        err["msg"]
            .as_str()
            .unwrap()
            .contains("default via 169.254.1.1"),
        "{err}"
    );
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn a_secondary_eni_address_gets_the_from_rule_and_del_removes_it() {
    let ns = Namespaces::new();
    let ipamd = FakeIpamd::pool(ip(), 3);
    let result = add(&ns, &ipamd, "on-eni-2", "1.1.0");
    let rules = ns.ip_node(&["-4", "rule", "show"]);
    assert!(
        rules.contains(&"1536: from 10.0.0.5 lookup 3".to_string()),
        "{rules:?}"
    );
    assert!(
        rules.contains(&"512: from all to 10.0.0.5 lookup main".to_string()),
        "{rules:?}"
    );
    let sock = ipamd.path_str();
    call(
        "CHECK",
        &ns,
        "on-eni-2",
        &ns.pod_path(),
        with_prev("1.1.0", &sock, &result),
    )
    .ok_silent();
    call(
        "DEL",
        &ns,
        "on-eni-2",
        &ns.pod_path(),
        with_prev("1.1.0", &sock, &result),
    )
    .ok_silent();
    ns.assert_node_unrouted(IP, &veth("on-eni-2"));
}

/// The fake got exactly an ADD and then a DEL with reason SetupFailed for the same key.
fn assert_released_after_failed_setup(ipamd: &FakeIpamd) {
    match ipamd.requests().as_slice() {
        [Request::Add(add), Request::Del(del)] => {
            assert_eq!(del.key, add.key);
            assert_eq!(del.reason, DelReason::SetupFailed);
        }
        other => panic!("expected ADD then DEL(SetupFailed): {other:?}"),
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn add_into_a_missing_netns_releases_the_address() {
    let ns = Namespaces::new();
    let ipamd = FakeIpamd::pool(ip(), 3);
    let missing = format!("/run/netns/{}-absent", ns.pod);
    let out = call(
        "ADD",
        &ns,
        "lost",
        &missing,
        conf("1.1.0", &ipamd.path_str(), json!({})),
    );
    let err = out.error(
        999,
        "failed to set up the pod network (open the pod network namespace)",
    );
    assert!(
        err["msg"].as_str().unwrap().contains("does not exist"),
        "{err}"
    );
    assert!(
        err["details"]
            .as_str()
            .unwrap()
            .contains("10.0.0.5 returned to ipamd"),
        "{err}"
    );
    assert_released_after_failed_setup(&ipamd);
    ns.assert_node_clean(IP, &veth("lost"));
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn add_with_an_existing_eth0_in_the_pod_releases_the_address() {
    let ns = Namespaces::new();
    let ipamd = FakeIpamd::pool(ip(), 3);
    ns.ip_pod(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "held0",
    ]);
    let out = call(
        "ADD",
        &ns,
        "taken",
        &ns.pod_path(),
        conf("1.1.0", &ipamd.path_str(), json!({})),
    );
    out.error(
        999,
        "interface eth0 already exists in the pod network namespace",
    );
    assert_released_after_failed_setup(&ipamd);
    ns.assert_node_clean(IP, &veth("taken"));
    // Not ours: the pod's own eth0 is left alone.
    let links = ns.ip_pod(&["-o", "link", "show"]);
    assert!(links.iter().any(|l| l.contains("eth0@held0")), "{links:?}");
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn del_with_ipamd_down_tears_down_from_prev_result() {
    let ns = Namespaces::new();
    let ipamd = FakeIpamd::pool(ip(), 3);
    let result = add(&ns, &ipamd, "orphan", "1.0.0");
    let sock = ipamd.path_str();
    drop(ipamd);

    let out = call(
        "DEL",
        &ns,
        "orphan",
        &ns.pod_path(),
        with_prev("1.0.0", &sock, &result),
    );
    out.ok_silent();
    assert!(
        out.stderr.contains("Handled pod teardown using prevResult"),
        "{}",
        out.stderr
    );
    ns.assert_node_unrouted(IP, &veth("orphan"));
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn containerd_del_sequence_succeeds() {
    let ns = Namespaces::new();
    let ipamd = FakeIpamd::pool(ip(), 254);
    let result = add(&ns, &ipamd, "sandbox", "1.1.0");
    let sock = ipamd.path_str();
    // StopPodSandbox: netns and prevResult; RemovePodSandbox: neither.
    call(
        "DEL",
        &ns,
        "sandbox",
        &ns.pod_path(),
        with_prev("1.1.0", &sock, &result),
    )
    .ok_silent();
    call("DEL", &ns, "sandbox", "", conf("1.1.0", &sock, json!({}))).ok_silent();
    ns.assert_node_unrouted(IP, &veth("sandbox"));
    let verbs: Vec<&str> = ipamd
        .requests()
        .iter()
        .map(|r| match r {
            Request::Add(_) => "add",
            Request::Del(_) => "del",
            _ => "other",
        })
        .collect();
    assert_eq!(verbs, ["add", "del", "del"]);
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn gc_tears_down_what_ipamd_released() {
    let ns = Namespaces::new();
    let ipamd = FakeIpamd::pool(ip(), 3);
    add(&ns, &ipamd, "collected", "1.1.0");
    let gc = |valid: Value| {
        Call::new("GC")
            .stdin(conf(
                "1.1.0",
                &ipamd.path_str(),
                json!({ "cni.dev/valid-attachments": valid }),
            ))
            .in_node(&ns.node)
            .run()
    };

    gc(json!([{"containerID": "ctr-collected", "ifname": "eth0"}])).ok_silent();
    assert!(ns.ping_from_node(IP), "a valid attachment must survive GC");

    gc(json!([])).ok_silent();
    ns.assert_node_clean(IP, &veth("collected"));
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn a_late_del_leaves_the_new_owner_of_the_address_alone() {
    let ns = Namespaces::new();
    let first = FakeIpamd::pool(ip(), 254);
    let old = add(&ns, &first, "old", "1.0.0");
    call(
        "DEL",
        &ns,
        "old",
        &ns.pod_path(),
        with_prev("1.0.0", &first.path_str(), &old),
    )
    .ok_silent();
    // The runtime removes the old sandbox's namespace, and the veth pair with it...
    ns.ip_pod(&["link", "del", "eth0"]);
    // ...the address cools down and goes to a new pod, served by an ipamd that knows nothing
    // of the old attachment...
    let second = FakeIpamd::pool(ip(), 254);
    add(&ns, &second, "new", "1.0.0");
    // ...when a late DEL of the old attachment arrives with only its prevResult to go by.
    call(
        "DEL",
        &ns,
        "old",
        "",
        with_prev("1.0.0", &second.path_str(), &old),
    )
    .ok_silent();

    let routes = ns.ip_node(&["-4", "route", "show"]);
    let route = format!("{IP} dev {}", veth("new"));
    assert!(
        routes.iter().any(|l| l.starts_with(&route)),
        "{route} missing: {routes:?}"
    );
    let rules = ns.ip_node(&["-4", "rule", "show"]);
    assert!(
        rules
            .iter()
            .any(|l| l.starts_with("512:") && l.contains(IP)),
        "the new pod's rule is gone: {rules:?}"
    );
    assert!(ns.ping_from_node(IP));
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn a_repeated_add_keeps_the_pod_and_never_releases_its_address() {
    let ns = Namespaces::new();
    let ipamd = FakeIpamd::pool(ip(), 254);
    let first = add(&ns, &ipamd, "again", "1.1.0");
    // Wired already: the same result, MACs included, and nothing touched.
    assert_eq!(add(&ns, &ipamd, "again", "1.1.0"), first);
    assert!(ns.ping_from_node(IP));

    // Damaged by hand: a repeated ADD wires the pod again.
    ns.ip_pod(&["route", "del", "default"]);
    let rewired = add(&ns, &ipamd, "again", "1.1.0");
    assert_eq!(rewired["ips"], first["ips"]);
    assert!(ns.ping_from_node(IP));

    // A repeated ADD that cannot wire fails, but the address stays with the attachment.
    let out = call(
        "ADD",
        &ns,
        "again",
        "/run/netns/vc-no-such-netns",
        conf("1.1.0", &ipamd.path_str(), json!({})),
    );
    let err = out.error(999, "open the pod network namespace");
    assert!(
        err["details"].as_str().unwrap_or("").contains("stays with"),
        "{err}"
    );
    let releases = ipamd
        .requests()
        .iter()
        .filter(|r| matches!(r, Request::Del(_)))
        .count();
    assert_eq!(
        releases,
        0,
        "no DEL may reach ipamd: {:?}",
        ipamd.requests()
    );
}
