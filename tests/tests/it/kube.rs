//! kube-in-a-box, driven with kubectl as an operator would: on two nodes, a Deployment's pods
//! get VPC addresses through kubelet -> containerd -> vpc-cni, reach each other and both nodes,
//! and give every address back when scaled to zero; every DEL containerd sends succeeds,
//! the later ones with an empty CNI_NETNS included. And an image loaded with
//! `vpc-box.sh load-image` runs on every node (the image of `VPC_CNI_IMAGE`, retagged).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::{PING_ALL, ipamd_pods};
use e2e::{VpcBox, deployment, require_root, retagged_image};
use serde_json::{Value, json};

const APP: &str = "web";
const REPLICAS: usize = 6;
/// Scheduling, sandboxes and ADDs of six pods on a loaded two-core machine.
const PODS_UP: Duration = Duration::from_secs(180);
/// Pods going, and ipamd taking their addresses back.
const PODS_GONE: Duration = Duration::from_secs(120);
/// kubelet stops a removed pod's sandbox again on its own schedule (pod cleanup, then garbage
/// collection once a minute); containerd sends a DEL with an empty CNI_NETNS each time.
const LATE_DELS: Duration = Duration::from_secs(150);

/// One pod as kubectl reports it.
#[derive(Debug)]
struct RunningPod {
    name: String,
    node: String,
    ip: Ipv4Addr,
}

impl RunningPod {
    fn from_json(pod: &Value) -> RunningPod {
        let field = |v: &Value| v.as_str().unwrap_or_else(|| panic!("{pod}")).to_string();
        RunningPod {
            name: field(&pod["metadata"]["name"]),
            node: field(&pod["spec"]["nodeName"]),
            ip: field(&pod["status"]["podIP"])
                .parse()
                .expect("an IPv4 pod IP"),
        }
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn a_deployment_gets_vpc_addresses_reaches_everything_and_gives_them_back() {
    require_root();
    let started = Instant::now();
    let vbox = VpcBox::up_kube(&["--nodes", "2"]);
    eprintln!(
        "kube-in-a-box up with 2 nodes Ready in {:?}",
        started.elapsed()
    );
    let nodes = [vbox.node(1), vbox.node(2)];

    // Nodes are named as on EKS, with their VPC address as InternalIP: where the API server
    // reaches their kubelets for exec.
    let wide = vbox.kubectl_ok(&["get", "nodes", "-o", "wide", "--no-headers"]);
    for node in nodes {
        let name = node.k8s_node.as_deref().expect("a Kubernetes node name");
        // ip-10-0-0-4.ec2.internal in us-east-1, ip-10-0-0-4.REGION.compute.internal elsewhere.
        let dashed = node.primary_ip.to_string().replace('.', "-");
        assert!(
            name.starts_with(&format!("ip-{dashed}."))
                && (name.ends_with(".ec2.internal") || name.ends_with(".compute.internal")),
            "{name} is not {}'s private DNS name",
            node.primary_ip
        );
        let line = wide
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} is not a node: {wide}"));
        assert!(
            line.split_whitespace()
                .any(|f| f == node.primary_ip.to_string()),
            "{name}'s InternalIP: {line}"
        );
    }

    let selector = format!("app={APP}");
    let t = Instant::now();
    vbox.apply(&deployment(APP, REPLICAS, None));
    let pods: Vec<RunningPod> = vbox
        .wait_running(&selector, REPLICAS, PODS_UP)
        .iter()
        .map(RunningPod::from_json)
        .collect();
    eprintln!("{REPLICAS} pods Running in {:?}", t.elapsed());
    eprintln!(
        "{}",
        vbox.kubectl_ok(&["get", "pods", "-l", &selector, "-o", "wide"])
    );

    // Every address is a VPC address, distinct, and the one ipamd on the pod's node assigned
    // to that very pod: CNI_ARGS carried its namespace and name through.
    let ips: BTreeSet<Ipv4Addr> = pods.iter().map(|p| p.ip).collect();
    assert_eq!(ips.len(), REPLICAS, "distinct addresses: {pods:?}");
    for p in &pods {
        assert!(
            vbox.subnet().contains(p.ip),
            "{p:?} outside {}",
            vbox.subnet().cidr
        );
    }
    let mut by_node = BTreeMap::<&str, Vec<&RunningPod>>::new();
    for p in &pods {
        by_node.entry(p.node.as_str()).or_default().push(p);
    }
    assert_eq!(by_node.len(), 2, "pods on both nodes: {pods:?}");
    for (name, on_node) in &by_node {
        let node = vbox.k8s_node(name);
        let held = ipamd_pods(node);
        assert_eq!(held.len(), on_node.len(), "{name} holds {held:?}");
        for p in on_node {
            assert!(
                held.iter().any(|h| h["Namespace"] == "default"
                    && h["Name"] == p.name.as_str()
                    && h["IP"] == p.ip.to_string().as_str()),
                "{p:?} is not what ipamd on {name} holds: {held:?}"
            );
        }
    }

    // Every pod reaches every other pod and both nodes.
    let node_ips: Vec<String> = nodes.iter().map(|n| n.primary_ip.to_string()).collect();
    for p in &pods {
        let targets: Vec<String> = pods
            .iter()
            .filter(|o| o.name != p.name)
            .map(|o| o.ip.to_string())
            .chain(node_ips.iter().cloned())
            .collect();
        let mut args = vec!["exec", p.name.as_str(), "--", "sh", "-c", PING_ALL, "sh"];
        args.extend(targets.iter().map(String::as_str));
        let out = vbox.kubectl_ok(&args);
        let ok = out.lines().filter(|l| l.ends_with(" ok")).count();
        assert_eq!(ok, targets.len(), "{} ({}) pinged: {out}", p.name, p.ip);
    }

    // Scaling to zero gives every address back.
    let t = Instant::now();
    vbox.kubectl_ok(&["scale", "deployment", APP, "--replicas=0"]);
    vbox.wait_no_pods(&selector, PODS_GONE);
    for node in nodes {
        testkit::wait_ok(PODS_GONE, "ipamd to hold no pod", || {
            let held = ipamd_pods(node);
            if held.is_empty() {
                Ok(())
            } else {
                Err(format!("{} holds {held:?}", node.netns))
            }
        });
    }
    eprintln!("scaled to 0, every address released in {:?}", t.elapsed());

    // containerd's DELs: the first with the pod's netns, later ones with an empty CNI_NETNS.
    let t = Instant::now();
    testkit::wait_ok(
        LATE_DELS,
        "a DEL with an empty CNI_NETNS for every pod",
        || {
            for node in nodes {
                let log = node.plugin_log();
                for add in log.with_verb("add") {
                    let dels: Vec<_> = log
                        .with_verb("del")
                        .filter(|d| d.container_id == add.container_id)
                        .collect();
                    if !dels.iter().any(|d| !d.netns.is_empty()) {
                        return Err(format!("no DEL with the netns of {}", add.container_id));
                    }
                    if !dels.iter().any(|d| d.netns.is_empty()) {
                        return Err(format!("no empty-netns DEL of {} yet", add.container_id));
                    }
                }
            }
            Ok(())
        },
    );
    eprintln!(
        "every sandbox got an empty-netns DEL {:?} later",
        t.elapsed()
    );
    let mut adds = 0;
    for node in nodes {
        let log = node.plugin_log();
        let (with, empty) = log.with_verb("del").fold((0, 0), |(w, e), d| {
            if d.netns.is_empty() {
                (w, e + 1)
            } else {
                (w + 1, e)
            }
        });
        adds += log.with_verb("add").count();
        eprintln!(
            "{}: {} ADD(s), {with} DEL(s) with a netns, {empty} with an empty CNI_NETNS",
            node.netns,
            log.with_verb("add").count()
        );
        assert!(
            log.errors.is_empty(),
            "vpc-cni failed on {}: {:?}",
            node.netns,
            log.errors
        );
        let containerd = std::fs::read_to_string(node.containerd_log.as_deref().expect("a log"))
            .expect("containerd's log");
        let failed: Vec<&str> = containerd
            .lines()
            .filter(|l| {
                l.contains("failed to destroy network") || l.contains("failed to setup network")
            })
            .collect();
        assert!(
            failed.is_empty(),
            "containerd on {}: {failed:#?}",
            node.netns
        );
    }
    assert_eq!(adds, REPLICAS, "one ADD per pod");

    // `vpc-box.sh load-image` serves any --kube box, this one's ipamd a process: an image
    // loaded on every node runs there with no registry (imagePullPolicy Never).
    let image = retagged_image("e2e-load");
    vbox.load_image(&image);
    for (i, node) in nodes.iter().enumerate() {
        vbox.apply(&json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": format!("loaded-{}", i + 1), "labels": {"app": "loaded"}},
            "spec": {
                "nodeName": node.k8s_node.as_deref().expect("a Kubernetes node name"),
                "terminationGracePeriodSeconds": 0,
                "containers": [{
                    "name": "loaded",
                    "image": "localhost/vpc-cni:e2e-load",
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "600"],
                }],
            },
        }));
    }
    vbox.wait_running("app=loaded", nodes.len(), PODS_UP);
}
