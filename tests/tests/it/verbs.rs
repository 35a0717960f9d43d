//! Every verb of the real plugin, in every supported cniVersion, against a real ipamd that got
//! its addresses from vpc-sim through aws-sdk-ec2.

use crate::common;

use common::*;
use e2e::{VpcBox, conf, require_root};
use serde_json::json;

const VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn every_verb_in_every_version() {
    require_root();
    // m5.large: 9 addresses on the primary ENI, so five pods leave some available and STATUS
    // stays ready while the released ones cool down.
    // Each DEL's veth stays with its namespace until ipamd's sweep takes it (seconds): a
    // cooldown longer than the whole test keeps every released address cooling to the end.
    let vbox = VpcBox::up(&[
        "--instance-type",
        "m5.large",
        "--ipamd-env",
        "IP_COOLDOWN_PERIOD=300",
    ]);
    let node = vbox.node(1);
    let socket = node.ipamd_socket.clone();
    let mut seen = Vec::new();
    for version in VERSIONS {
        let pod = vbox.pod(1);
        let c = conf(version, &socket, json!({}));

        let result = pod.cni("ADD").stdin(c.clone()).run().ok();
        assert_eq!(result["cniVersion"], version);
        let ip = pod_ip(&result);
        assert!(
            in_cidr(&ip, &vbox.subnet().cidr),
            "{ip} not in {}",
            vbox.subnet().cidr
        );
        assert!(!seen.contains(&ip), "{ip} handed out twice");
        seen.push(ip.clone());
        // The IP points at the eth0 entry, which carries the sandbox (containerd requires it).
        assert_eth0_in(&result, &pod.netns_path());
        let per_ip_version = result["ips"][0].get("version");
        if version.starts_with("0.") {
            assert_eq!(per_ip_version, Some(&json!("4")), "{version}: {result}");
        } else {
            assert_eq!(per_ip_version, None, "{version}: {result}");
        }
        assert!(pod.ping_from_node(&ip), "{version}: node cannot reach {ip}");
        let veth = host_veth(&result);
        assert_host_wired(&node.netns, &ip, &veth);

        let with_prev = conf(version, &socket, json!({ "prevResult": result }));
        let check = pod.cni("CHECK").stdin(with_prev.clone()).run();
        if version == "0.3.0" || version == "0.3.1" {
            check.error(1, "CHECK");
        } else {
            check.ok_silent();
        }

        let status = e2e::Cni::new("STATUS", node).stdin(c.clone()).run();
        if version == "1.1.0" {
            status.ok_silent();
        } else {
            status.error(1, "STATUS");
        }

        pod.cni("DEL").stdin(with_prev.clone()).run().ok_silent();
        assert_host_clean(&node.netns, &ip, &veth);
        pod.cni("DEL").stdin(with_prev).run().ok_silent();

        let v = e2e::Cni::new("VERSION", node)
            .stdin(json!({ "cniVersion": version }).to_string())
            .run()
            .ok();
        assert!(
            v["supportedVersions"]
                .as_array()
                .unwrap()
                .contains(&json!(version)),
            "{v}"
        );
    }
    let s = vbox.status(1);
    assert_eq!(
        (s.pool.assigned, s.pool.cooling),
        (0, 5),
        "every DEL released into cooldown: {s:?}"
    );
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn the_same_add_twice_gives_the_same_address() {
    require_root();
    let vbox = VpcBox::up(&[]);
    let pod = vbox.pod(1);
    let first = pod.add();
    let second = pod.add();
    assert_eq!(pod_ip(&first), pod_ip(&second));
    assert!(pod.ping_from_node(&pod_ip(&second)));
    assert_eq!(vbox.status(1).pool.assigned, 1);
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn containerds_two_dels_succeed_and_leave_nothing() {
    require_root();
    let vbox = VpcBox::up(&[]);
    let node = vbox.node(1);
    let pod = vbox.pod(1);
    let result = pod.add();
    // StopPodSandbox: the netns and the prevResult.
    pod.del(&result);
    // RemovePodSandbox: an empty CNI_NETNS and no prevResult.
    pod.cni("DEL")
        .env("CNI_NETNS", "")
        .stdin(conf("1.1.0", &node.ipamd_socket, json!({})))
        .run()
        .ok_silent();
    assert_host_clean(&node.netns, &pod_ip(&result), &host_veth(&result));
    assert_eq!(vbox.status(1).pool.assigned, 0);
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn gc_releases_what_the_runtime_no_longer_lists() {
    require_root();
    let vbox = VpcBox::up(&[]);
    let node = vbox.node(1);
    let (pods, results) = vbox.add_pods(1, 2);
    let (keep, kept, gone) = (&pods[0], &results[0], &results[1]);
    let gc = conf(
        "1.1.0",
        &node.ipamd_socket,
        json!({ "cni.dev/valid-attachments": [{ "containerID": keep.container_id, "ifname": "eth0" }] }),
    );
    e2e::Cni::new("GC", node).stdin(gc).run().ok_silent();
    let s = vbox.status(1);
    assert_eq!((s.pool.assigned, s.pool.cooling), (1, 1), "{s:?}");
    assert_host_wired(&node.netns, &pod_ip(kept), &host_veth(kept));
    let routes = e2e::ip(&["-n", &node.netns, "-4", "route", "show"]);
    assert!(
        !routes
            .iter()
            .any(|l| l.starts_with(&format!("{} ", pod_ip(gone)))),
        "GC left the released pod's route: {routes:?}"
    );
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn three_pods_get_distinct_subnet_addresses_reachable_from_the_node() {
    require_root();
    let vbox = VpcBox::up(&[]);
    let node = vbox.node(1);
    let (pods, results) = vbox.add_pods(1, 3);
    let mut ips: Vec<String> = results.iter().map(pod_ip).collect();
    for (pod, ip) in pods.iter().zip(&ips) {
        assert!(in_cidr(ip, &vbox.subnet().cidr));
        assert_ne!(ip, &node.primary_ip.to_string());
        assert!(pod.ping_from_node(ip), "node cannot reach {ip}");
    }
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 3, "addresses are distinct");
}
