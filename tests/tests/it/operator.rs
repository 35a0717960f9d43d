//! The operator's surface on a running node: the introspection endpoints, the metrics, the
//! migration from aws-node's checkpoint, and the install choreography of the entrypoint.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use e2e::{INTROSPECT, METRICS, VpcBox, bin_dir, repo, require_root, run_bounded};
use serde_json::{Value, json};

/// The value of the sample `series` (name with labels, exactly as exposed) in `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn every_endpoint_answers_in_its_documented_shape() {
    require_root();
    let vbox = VpcBox::up(&["--ipamd-env", "WARM_IP_TARGET=3"]);
    let node = vbox.node(1);
    let (pods, results) = vbox.add_pods(1, 2);
    let ips: Vec<String> = results.iter().map(pod_ip).collect();
    // The pool tops up to WARM_IP_TARGET after the ADDs: read it once that is done.
    node.quiesce();

    // `/` and unknown paths list the endpoints, as the Go CNI's do.
    let root = node.get_json(&format!("{INTROSPECT}/"));
    let commands: Vec<&str> = root["AvailableCommands"]
        .as_array()
        .expect("AvailableCommands")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for path in [
        "/v1/enis",
        "/v1/pods",
        "/v1/pool",
        "/v1/eni-configs",
        "/v1/networkutils-env-settings",
        "/v1/ipamd-env-settings",
    ] {
        assert!(commands.contains(&path), "{path} missing from {root}");
    }
    assert_eq!(node.get_json(&format!("{INTROSPECT}/v1/nope")), root);

    // /v1/enis: keyed by network card, the primary ENI with both pods, ids blanked.
    let enis = node.get_json(&format!("{INTROSPECT}/v1/enis"));
    let card = &enis["0"];
    assert_eq!(card["AssignedIPs"], 2, "{enis}");
    assert!(card["TotalIPs"].as_u64().unwrap() >= 5, "{enis}");
    let primary = &card["ENIs"][&node.primary_eni];
    assert_eq!(primary["IsPrimary"], true, "{enis}");
    assert_eq!(primary["DeviceNumber"], 0);
    assert_eq!(primary["RouteTableID"], 254);
    for ip in &ips {
        let cidr = &primary["AvailableIPv4Cidrs"][format!("{ip}/32")];
        assert_eq!(cidr["IsPrefix"], false, "{enis}");
        let addr = &cidr["IPAddresses"][ip.as_str()];
        assert_eq!(addr["Address"], ip.as_str());
        assert_eq!(addr["IPAMKey"]["networkName"], "vpc-cni");
        assert_eq!(
            addr["IPAMKey"]["containerID"], "",
            "blanked as the Go CNI does"
        );
        assert_eq!(addr["IPAMKey"]["ifName"], "");
        assert_eq!(addr["IPAMMetadata"]["k8sPodNamespace"], "default");
        assert_ne!(addr["AssignedTime"], "0001-01-01T00:00:00Z");
    }
    let text = enis.to_string();
    for pod in &pods {
        assert!(
            !text.contains(&pod.container_id),
            "container ids never leak: {text}"
        );
    }

    // /v1/pods: one entry per pod, with its address and ENI.
    let listed = node.get_json(&format!("{INTROSPECT}/v1/pods"));
    let listed = listed.as_array().expect("an array");
    assert_eq!(listed.len(), 2, "{listed:?}");
    for (pod, ip) in pods.iter().zip(&ips) {
        let entry = listed
            .iter()
            .find(|e| e["Name"] == pod.name.as_str())
            .unwrap_or_else(|| panic!("{} not in {listed:?}", pod.name));
        assert_eq!(entry["Namespace"], "default");
        assert_eq!(entry["IP"], ip.as_str());
        assert_eq!(entry["ENI"], node.primary_eni.as_str());
        assert_eq!(entry["DeviceNumber"], 0);
        assert!(
            entry["AssignedTime"].as_str().unwrap().ends_with('Z'),
            "{entry}"
        );
    }

    // /v1/pool: totals, targets and what comes next.
    let pool = node.get_json(&format!("{INTROSPECT}/v1/pool"));
    assert_eq!(pool["Totals"]["AssignedIPs"], 2, "{pool}");
    assert_eq!(pool["Mode"], "WARM_IP_TARGET", "{pool}");
    assert_eq!(pool["Targets"]["WARM_IP_TARGET"], 3, "{pool}");
    assert_eq!(pool["Ready"], true);
    assert!(
        pool["Reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{pool}"
    );

    let net = node.get_json(&format!("{INTROSPECT}/v1/networkutils-env-settings"));
    assert_eq!(net["AWS_VPC_K8S_CNI_VETHPREFIX"], "eni", "{net}");
    assert_eq!(net["AWS_VPC_K8S_CNI_CONNMARK"], 128);
    assert_eq!(net["AWS_VPC_K8S_CNI_RANDOMIZESNAT"], 2);
    let ipamd = node.get_json(&format!("{INTROSPECT}/v1/ipamd-env-settings"));
    assert_eq!(ipamd["WARM_IP_TARGET"], 3, "{ipamd}");
    let (code, body) = node.get(&format!("{INTROSPECT}/v1/eni-configs"));
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("custom networking"), "{body}");

    // Metrics: the Go CNI's names, our histograms, and promtool clean bar the allow-list.
    let (code, metrics) = node.get(METRICS);
    assert_eq!(code, 200);
    assert_eq!(
        sample(&metrics, "awscni_assigned_ip_addresses"),
        Some(2.0),
        "{metrics}"
    );
    assert_eq!(sample(&metrics, "awscni_add_ip_req_count"), Some(2.0));
    assert_eq!(
        sample(
            &metrics,
            r#"vpccni_add_duration_seconds_count{result="success"}"#
        ),
        Some(2.0),
        "{metrics}"
    );
    assert!(sample(&metrics, "awscni_total_ip_addresses").unwrap() >= 5.0);
    assert!(sample(&metrics, "awscni_eni_allocated").unwrap() >= 1.0);
    assert!(
        sample(
            &metrics,
            &format!(
                r#"awscni_ec2api_req_count{{fn="{}"}}"#,
                cloud::Action::DescribeNetworkInterfaces
            )
        )
        .unwrap()
            >= 1.0,
        "{metrics}"
    );
    assert!(metrics.contains("awscni_build_info{"), "{metrics}");
    assert!(
        metrics.contains("process_resident_memory_bytes"),
        "{metrics}"
    );
    promtool_accepts(&metrics);

    // The log is JSON lines, and keeps the Go CNI's wording for the pool.
    let log = std::fs::read_to_string(&node.ipamd_log).unwrap();
    for line in log.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v["level"].is_string() && v["timestamp"].is_string(),
            "{line}"
        );
    }
    assert!(
        log.contains("IP pool stats for network card 0: Total IPs/Prefixes = "),
        "{log}"
    );
}

/// `promtool check metrics` finds nothing but the lines the allow-list keeps on purpose.
fn promtool_accepts(metrics: &str) {
    let allowed = testkit::promtool::allowed(&repo().join("crates/introspect/promtool-allow.txt"));
    let findings = testkit::promtool::findings(metrics);
    let unexpected: Vec<&String> = findings.difference(&allowed).collect();
    assert!(
        unexpected.is_empty(),
        "promtool findings not in the allow-list: {unexpected:#?}"
    );
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn a_node_switching_from_aws_node_keeps_its_pods_addresses() {
    require_root();
    let vbox = VpcBox::up(&["--ipamd-env", "MAX_ENI=1"]);
    let node = vbox.node(1);
    let (pods, results) = vbox.add_pods(1, 3);
    let ips: Vec<String> = results.iter().map(pod_ip).collect();

    // What aws-node leaves behind: the pods' wiring, EC2's addresses and its checkpoint, but
    // none of our state.
    vbox.stop_ipamd(1, false);
    std::fs::remove_dir_all(&node.state_dir).unwrap();
    let long_ago_ns = (humantime::parse_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()) as u64;
    let mut allocations: Vec<Value> = pods
        .iter()
        .zip(&ips)
        .map(|(pod, ip)| {
            json!({
                "networkName": "vpc-cni", "containerID": pod.container_id, "ifName": "eth0",
                "ipv4": ip, "allocationTimestamp": long_ago_ns,
                "metadata": {"k8sPodNamespace": "default", "k8sPodName": pod.name, "interfacesCount": 1}
            })
        })
        .collect();
    // A pod whose address the node no longer has, and an IPv6 one: neither can be kept.
    allocations.push(
        json!({"networkName": "vpc-cni", "containerID": "gone", "ifName": "eth0",
        "ipv4": "10.99.0.1", "allocationTimestamp": long_ago_ns}),
    );
    allocations.push(
        json!({"networkName": "vpc-cni", "containerID": "v6", "ifName": "eth0",
        "ipv6": "fd00::1", "allocationTimestamp": long_ago_ns}),
    );
    std::fs::write(
        &node.go_checkpoint,
        json!({"version": "vpc-cni-ipam/1", "allocations": allocations}).to_string(),
    )
    .unwrap();
    vbox.start_ipamd(1);

    // Every pod kept its address, and its wiring still checks out.
    let listed = node.get_json(&format!("{INTROSPECT}/v1/pods"));
    let mut kept: Vec<(String, String)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["Name"].as_str().unwrap().to_string(),
                e["IP"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    kept.sort();
    let mut want: Vec<(String, String)> = pods
        .iter()
        .map(|p| p.name.clone())
        .zip(ips.iter().cloned())
        .collect();
    want.sort();
    assert_eq!(kept, want);
    for (pod, result) in pods.iter().zip(&results) {
        pod.cni("CHECK")
            .stdin(e2e::conf(
                "1.1.0",
                &node.ipamd_socket,
                json!({ "prevResult": result }),
            ))
            .run()
            .ok_silent();
    }
    let log = std::fs::read_to_string(&node.ipamd_log).unwrap();
    assert!(log.contains("took over the Go CNI's assignments"), "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("presuming stale/dead") && l.contains("10.99.0.1")),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("not migrated") && l.contains("fd00::1")),
        "{log}"
    );

    // A new pod never gets a migrated address; a migrated pod's DEL releases its address.
    let newcomer = vbox.pod(1);
    let fresh = pod_ip(&newcomer.add());
    assert!(
        !ips.contains(&fresh),
        "{fresh} was still held by a migrated pod"
    );
    pods[0].del(&results[0]);
    assert_eq!(vbox.status(1).pool.assigned, 3);
}

/// The entrypoint, run by hand in a node; SIGTERMed when dropped.
struct Entrypoint(Child);

impl Drop for Entrypoint {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        if !testkit::within(Duration::from_secs(10), || {
            matches!(self.0.try_wait(), Ok(Some(_)))
        }) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn the_entrypoint_installs_the_plugin_and_writes_the_conflist_once_ipamd_serves() {
    require_root();
    let vbox = VpcBox::up(&[]);
    let node = vbox.node(1);
    vbox.stop_ipamd(1, false);

    // The host's /opt/cni/bin and /etc/cni/net.d, with aws-node's conflist still there.
    let host = tempfile::tempdir().unwrap();
    let (src, bin, netd) = (
        host.path().join("app"),
        host.path().join("bin"),
        host.path().join("net.d"),
    );
    for dir in [&src, &bin, &netd] {
        std::fs::create_dir(dir).unwrap();
    }
    std::fs::copy(bin_dir().join("vpc-cni"), src.join("vpc-cni")).unwrap();
    std::fs::write(netd.join("10-aws.conflist"), "{}").unwrap();
    let plugin_log = host.path().join("plugin.log");

    let mut env: Vec<String> =
        std::fs::read_to_string(node.ipamd_env.as_ref().expect("an ipamd the box started"))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
    env.extend([
        format!("VPC_CNI_PLUGINS_DIR={}", src.display()),
        format!(
            "VPC_CNI_CONFLIST={}",
            repo().join("config/10-vpc-cni.conflist").display()
        ),
        format!("HOST_CNI_BIN_PATH={}", bin.display()),
        format!("HOST_CNI_CONFDIR_PATH={}", netd.display()),
        format!("AWS_VPC_K8S_PLUGIN_LOG_FILE={}", plugin_log.display()),
    ]);
    let ipamd = bin_dir().join("ipamd");
    let mut args = vec![
        "netns".to_string(),
        "exec".into(),
        node.netns.clone(),
        "env".into(),
        "-i".into(),
    ];
    args.extend(env);
    args.extend([ipamd.display().to_string(), "entrypoint".into()]);
    let _entrypoint = Entrypoint(
        Command::new("ip")
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let conflist = netd.join("10-vpc-cni.conflist");
    testkit::wait_until(Duration::from_secs(30), "the entrypoint's conflist", || {
        conflist.exists()
    });
    // By then the plugin was in place and ipamd was serving: the log says in which order.
    assert_eq!(
        std::fs::read(bin.join("vpc-cni")).unwrap(),
        std::fs::read(src.join("vpc-cni")).unwrap()
    );
    let health = run_bounded(
        10,
        "ip",
        &[
            "netns",
            "exec",
            &node.netns,
            &ipamd.display().to_string(),
            "health",
            "--socket",
            &node.ipamd_socket,
        ],
        None,
    );
    assert!(
        health.status.success(),
        "{}",
        String::from_utf8_lossy(&health.stdout)
    );
    let log = std::fs::read_to_string(&node.ipamd_log).unwrap();
    let serving = log.rfind("Serving RPC Handler").expect("ipamd served");
    let copying = log
        .rfind("Copying config file")
        .expect("the conflist was written");
    assert!(
        serving < copying,
        "the conflist came before ipamd served:\n{log}"
    );

    // aws-node's conflist is out of the runtime's way, and ours drives a pod.
    assert!(!netd.join("10-aws.conflist").exists());
    assert!(netd.join("10-aws.conflist.replaced-by-vpc-cni").exists());
    let rendered: Value =
        serde_json::from_str(&std::fs::read_to_string(&conflist).unwrap()).unwrap();
    assert_eq!(rendered["name"], "aws-cni");
    assert_eq!(rendered["plugins"][1]["type"], "portmap");
    let mut plugin = rendered["plugins"][0].clone();
    assert_eq!(plugin["type"], "vpc-cni");
    assert_eq!(plugin["ipamdSocket"], node.ipamd_socket.as_str());
    plugin["cniVersion"] = rendered["cniVersion"].clone();
    plugin["name"] = rendered["name"].clone();
    let pod = vbox.pod(1);
    let result = pod.cni("ADD").stdin(plugin.to_string()).run().ok();
    assert!(pod.ping_from_node(&pod_ip(&result)));
    assert!(
        std::fs::read_to_string(&plugin_log)
            .unwrap()
            .contains("Received CNI add request")
    );
}
