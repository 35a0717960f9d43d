//! ipamd reading a real cluster, on kube-in-a-box driven with kubectl: custom networking with
//! ENIConfig objects in a secondary VPC CIDR (each node's pods in its own ENIConfig's subnet,
//! with its security groups; a relabelled node's next ENI in the other subnet; a missing
//! ENIConfig named in the pods' sandbox errors until it is created), subnet discovery (the
//! tagged subnet with the most free addresses, never one tagged `=0`), and ipamd serving pods
//! while the API server does not answer.

use std::time::{Duration, Instant};

use e2e::{INTROSPECT, VpcBox, deployment, pod_ip, pod_name, repo, require_root, run_bounded};
use serde_json::{Value, json};

/// Scheduling, sandboxes and ADDs of a few pods, ENIs created and attached meanwhile.
const PODS_UP: Duration = Duration::from_secs(240);
/// A pod's sandbox error reaching its events.
const EVENT: Duration = Duration::from_secs(120);

const ROLE: &str = "kubernetes.io/role/cni";

fn eni_config(name: &str, subnet: &str, groups: &[&str]) -> Value {
    json!({
        "apiVersion": "crd.k8s.amazonaws.com/v1alpha1",
        "kind": "ENIConfig",
        "metadata": {"name": name},
        "spec": {"subnet": subnet, "securityGroups": groups}
    })
}

/// The ENIs EC2 (vpc-sim) has attached to `instance` in device order, the primary left out:
/// (subnet, groups).
fn secondary_enis(vbox: &VpcBox, instance: &str) -> Vec<(String, Vec<String>)> {
    let state = vbox.sim_state();
    let mut enis: Vec<_> = state["enis"]
        .as_array()
        .expect("enis")
        .iter()
        .filter(|e| {
            e["attachment"]["instance_id"] == instance && e["attachment"]["device_index"] != 0
        })
        .collect();
    // vpc-sim lists ENIs by id, which is random; attachment order is what the test reasons about.
    enis.sort_by_key(|e| e["attachment"]["device_index"].as_u64());
    enis.into_iter()
        .map(|e| {
            let groups = e["security_groups"]
                .as_array()
                .map(|g| {
                    g.iter()
                        .filter_map(|g| g.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            (
                e["subnet_id"].as_str().unwrap_or_default().to_string(),
                groups,
            )
        })
        .collect()
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn custom_networking_puts_each_nodes_pods_in_its_eniconfigs_subnet() {
    require_root();
    let vbox = VpcBox::up_kube(&[
        "--nodes",
        "2",
        "--instance-type",
        "m5.large",
        "--vpc-secondary-cidr",
        "100.64.0.0/16",
        "--subnet",
        "10.0.0.0/24",
        "--subnet",
        "100.64.1.0/24",
        "--subnet",
        "100.64.2.0/24",
        "--security-group",
        "pods-a",
        "--security-group",
        "pods-b",
        "--ipamd-env",
        "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=true",
        // Filling an ENI before creating the next, so the relabelling below decides where the
        // next one goes.
        "--ipamd-env",
        "WARM_IP_TARGET=1",
    ]);
    let subnet = |c: &str| vbox.subnet_with(c).id.clone();
    let (subnet_a, subnet_b) = (subnet("100.64.1.0/24"), subnet("100.64.2.0/24"));
    let group = |name: &str| vbox.security_group(name).to_string();
    let (sg_a, sg_b) = (group("pods-a"), group("pods-b"));
    let node1 = vbox.node(1).clone();
    let node2 = vbox.node(2).clone();
    let (k8s1, k8s2) = (
        node1.k8s_node.clone().expect("a Kubernetes node"),
        node2.k8s_node.clone().expect("a Kubernetes node"),
    );

    // The CRD as shipped, ENIConfigs for the two pod subnets, and node 2 labelled with one that
    // does not exist yet.
    let crd = repo().join("config/kubernetes/eniconfig-crd.yaml");
    vbox.kubectl_ok(&["apply", "-f", crd.to_str().expect("a UTF-8 path")]);
    vbox.kubectl_ok(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout=60s",
        "crd/eniconfigs.crd.k8s.amazonaws.com",
    ]);
    // An established CRD is served a moment later (kube-apiserver 1.20 rebuilds its handlers
    // and may drop the first requests): the first object is applied until it is accepted.
    let first = eni_config("az-a", &subnet_a, &[&sg_a]).to_string();
    testkit::wait_ok(EVENT, "the ENIConfig API served", || {
        let out = vbox.kubectl_with_input(&["apply", "-f", "-"], Some(first.as_bytes()));
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    });
    vbox.apply(&eni_config("az-b", &subnet_b, &[&sg_b]));
    let label = |node: &str, value: &str| {
        let kv = format!("k8s.amazonaws.com/eniConfig={value}");
        vbox.kubectl_ok(&["label", "node", node, &kv, "--overwrite"]);
    };
    label(&k8s1, "az-a");
    label(&k8s2, "az-late");

    vbox.apply(&deployment("one", 4, Some(&k8s1)));
    vbox.apply(&deployment("two", 2, Some(&k8s2)));
    let ones = vbox.wait_running("app=one", 4, PODS_UP);
    for pod in &ones {
        assert!(
            vbox.subnet_with("100.64.1.0/24").contains(pod_ip(pod)),
            "{} on {k8s1} has {} outside az-a's subnet",
            pod_name(pod),
            pod_ip(pod)
        );
    }
    let enis = secondary_enis(&vbox, &node1.instance_id);
    assert_eq!(
        enis,
        [(subnet_a.clone(), vec![sg_a.clone()])],
        "node 1's ENIs"
    );

    // Node 2 names a missing ENIConfig: its pods wait, and their sandbox errors name it.
    let stuck = vbox.pods("app=two");
    assert_eq!(stuck.len(), 2);
    assert!(stuck.iter().all(|p| p["status"]["phase"] != "Running"));
    let first = pod_name(&stuck[0]).to_string();
    let named = testkit::wait_ok(EVENT, "a sandbox error naming the ENIConfig", || {
        let events = vbox.events_of(&first);
        match events.iter().find(|m| m.contains("az-late")) {
            Some(m) => Ok(m.clone()),
            None => Err(format!("{events:?}")),
        }
    });
    assert!(named.contains("does not exist"), "{named}");
    assert!(
        secondary_enis(&vbox, &node2.instance_id).is_empty(),
        "no ENI without an ENIConfig"
    );
    let status = node2.get_json(&format!("{INTROSPECT}/v1/pool"));
    assert_eq!(status["Cluster"]["ENIConfig"], "az-late", "{status}");

    // Created: the pods come up, in that ENIConfig's subnet.
    vbox.apply(&eni_config("az-late", &subnet_b, &[&sg_b]));
    let twos = vbox.wait_running("app=two", 2, PODS_UP);
    for pod in &twos {
        assert!(
            vbox.subnet_with("100.64.2.0/24").contains(pod_ip(pod)),
            "{pod}"
        );
    }
    assert_eq!(
        secondary_enis(&vbox, &node2.instance_id),
        [(subnet_b.clone(), vec![sg_b.clone()])]
    );

    // Traffic: across nodes and subnets, to both nodes, and to the outside SNATed to the node.
    let one = pod_name(&ones[0]).to_string();
    let two = pod_name(&twos[0]).to_string();
    assert!(vbox.pings(&one, pod_ip(&twos[0])), "az-a -> az-late");
    assert!(vbox.pings(&two, pod_ip(&ones[0])), "az-late -> az-a");
    for target in [node1.primary_ip, node2.primary_ip] {
        assert!(vbox.pings(&one, target), "{one} -> node {target}");
    }
    let outside = vbox.outside().ip;
    vbox.watch_outside_sources(&[&node1.primary_ip.to_string(), &pod_ip(&ones[0]).to_string()]);
    assert!(vbox.pings(&one, outside), "{one} -> the outside");
    assert!(vbox.outside_seen_from(&node1.primary_ip.to_string()) >= 1);
    assert_eq!(vbox.outside_seen_from(&pod_ip(&ones[0]).to_string()), 0);

    // Node 1 relabelled: once its ENI is full, the next ENI goes to az-b's subnet.
    label(&k8s1, "az-b");
    vbox.kubectl_ok(&["scale", "deployment", "one", "--replicas=11"]);
    let ones = vbox.wait_running("app=one", 11, PODS_UP);
    let enis = secondary_enis(&vbox, &node1.instance_id);
    assert_eq!(
        enis,
        [
            (subnet_a.clone(), vec![sg_a.clone()]),
            (subnet_b.clone(), vec![sg_b.clone()])
        ],
        "node 1's ENIs after the relabelling"
    );
    assert!(
        ones.iter()
            .any(|p| vbox.subnet_with("100.64.2.0/24").contains(pod_ip(p))),
        "a pod in the new subnet"
    );
    // The primary ENI carried no pod at any time.
    let primary = vbox.subnet_with("10.0.0.0/24");
    assert!(
        ones.iter()
            .chain(&twos)
            .all(|p| !primary.contains(pod_ip(p)))
    );
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn subnet_discovery_and_serving_pods_while_the_api_server_is_down() {
    require_root();
    let tagged = |c: &str, v: &str| format!("{c},tag={ROLE}={v}");
    let vbox = VpcBox::up_kube(&[
        "--nodes",
        "1",
        "--instance-type",
        "m5.large",
        "--vpc-secondary-cidr",
        "100.64.0.0/16",
        "--subnet",
        "10.0.0.0/25",
        "--subnet",
        &tagged("100.64.1.0/26", "1"),
        "--subnet",
        &tagged("100.64.2.0/24", "1"),
        "--subnet",
        &tagged("100.64.4.0/25", "1"),
        // The most free addresses, but opted out.
        "--subnet",
        &tagged("100.64.8.0/22", "0"),
    ]);
    let node = vbox.node(1).clone();
    let k8s = node.k8s_node.clone().expect("a Kubernetes node");
    let id = |c: &str| vbox.subnet_with(c).id.clone();

    // WARM_ENI_TARGET=1: a first pod leaves less than an ENI's worth available on the primary,
    // so a second ENI is created: in the tagged /24, the biggest of those that may be used.
    vbox.apply(&deployment("disc", 1, Some(&k8s)));
    vbox.wait_running("app=disc", 1, PODS_UP);
    let enis = testkit::wait_ok(PODS_UP, "a second ENI", || {
        let enis = secondary_enis(&vbox, &node.instance_id);
        if enis.is_empty() {
            Err("none yet".to_string())
        } else {
            Ok(enis)
        }
    });
    assert_eq!(enis[0].0, id("100.64.2.0/24"), "{enis:?}");
    assert!(
        enis.iter().all(|(s, _)| *s != id("100.64.8.0/22")),
        "a subnet tagged {ROLE}=0 is never used"
    );
    let listed = node.get_json(&format!("{INTROSPECT}/v1/enis"));
    let choice = listed["0"]["ENIs"]
        .as_object()
        .expect("ENIs")
        .values()
        .find_map(|e| e["SubnetChoice"].as_str().map(String::from))
        .unwrap_or_default();
    assert!(choice.starts_with("subnet discovery: tagged"), "{listed}");

    // The API server stops answering (stopped, so connections hang rather than fail), and
    // ipamd restarts meanwhile: without custom networking it needs nothing from the cluster.
    let started = Instant::now();
    vbox.stop_ipamd(1, false);
    vbox.start_ipamd(1);
    let normal = started.elapsed();
    let apiserver = vbox.recorded_pid("kube-apiserver");
    let signal = |sig: &str| {
        let out = run_bounded(10, "kill", &[sig, &apiserver.to_string()], None);
        assert!(out.status.success(), "kill {sig} {apiserver}");
    };
    signal("-STOP");
    let started = Instant::now();
    vbox.stop_ipamd(1, false);
    vbox.start_ipamd(1);
    let without_api = started.elapsed();
    eprintln!(
        "ipamd restarted in {:.1} s with the API server up, {:.1} s with it stopped",
        normal.as_secs_f64(),
        without_api.as_secs_f64()
    );
    let pod = vbox.pod(1);
    let added = pod
        .cni("ADD")
        .stdin(e2e::conf("1.0.0", &node.ipamd_socket, json!({})))
        .run()
        .ok();
    assert!(added["ips"][0]["address"].is_string(), "{added}");
    let status = node.get_json(&format!("{INTROSPECT}/v1/pool"));
    assert_eq!(status["Cluster"]["Waiting"], Value::Null, "{status}");
    signal("-CONT");
}
