//! kube-in-a-box with IPv6 (`vpc-box.sh up --kube --ip-family ipv6|dual`), driven with kubectl:
//! an IPv6 cluster (API server, Services and kubelets' InternalIPs IPv6) whose pods get an
//! address of their node's /80 and reach each other across nodes, with ipamd as a process and
//! with the shipped DaemonSet; and a dual-stack cluster whose pods' status lists both families
//! and whose Services answer over both through kube-proxy (an IPv6 cluster's over IPv6).

use crate::common;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

use common::{PING_ALL, delegated, in_prefix, ipamd_pods};
use e2e::{VpcBox, deployment, image_archive, require_root};
use serde_json::{Value, json};

/// Scheduling, sandboxes and ADDs of a few pods on a loaded two-core machine.
const PODS_UP: Duration = Duration::from_secs(180);
/// Pods going, and ipamd taking their addresses back.
const PODS_GONE: Duration = Duration::from_secs(120);
/// A listener started in a pod accepting its first connection.
const LISTENING: Duration = Duration::from_secs(30);

/// The API server's IPv6 address and the service range of an IPv6 cluster (kube-box.sh's).
const API_IP6: &str = "2001:db8:ffff:113::10";
const SERVICE_CIDR6: &str = "fd00:172:20::/108";
const SERVICE_CIDR4: &str = "172.20.0.0/16";

/// One pod as kubectl reports it: its addresses are `status.podIPs`, in order.
#[derive(Debug)]
struct RunningPod {
    name: String,
    node: String,
    ips: Vec<IpAddr>,
}

impl RunningPod {
    fn from_json(pod: &Value) -> RunningPod {
        let field = |v: &Value| v.as_str().unwrap_or_else(|| panic!("{pod}")).to_string();
        let ips: Vec<IpAddr> = pod["status"]["podIPs"]
            .as_array()
            .unwrap_or_else(|| panic!("no podIPs: {pod}"))
            .iter()
            .map(|ip| field(&ip["ip"]).parse().expect("an address"))
            .collect();
        assert_eq!(
            pod["status"]["podIP"].as_str(),
            ips.first().map(|ip| ip.to_string()).as_deref(),
            "podIP is the first of podIPs: {pod}"
        );
        RunningPod {
            name: field(&pod["metadata"]["name"]),
            node: field(&pod["spec"]["nodeName"]),
            ips,
        }
    }

    fn ipv6(&self) -> Ipv6Addr {
        let v6: Vec<Ipv6Addr> = self
            .ips
            .iter()
            .filter_map(|ip| match ip {
                IpAddr::V6(ip) => Some(*ip),
                IpAddr::V4(_) => None,
            })
            .collect();
        assert_eq!(v6.len(), 1, "one IPv6 address: {self:?}");
        v6[0]
    }
}

/// Each node's Kubernetes name and InternalIP (`kubectl get nodes`).
fn internal_ips(vbox: &VpcBox) -> Vec<(String, String)> {
    let json = vbox.kubectl_ok(&["get", "nodes", "-o", "json"]);
    let list: Value = serde_json::from_str(&json).expect("nodes as JSON");
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|n| {
            let ip = n["status"]["addresses"]
                .as_array()
                .expect("addresses")
                .iter()
                .find(|a| a["type"] == "InternalIP")
                .and_then(|a| a["address"].as_str())
                .unwrap_or_else(|| panic!("no InternalIP: {n}"));
            (
                n["metadata"]["name"].as_str().expect("a name").to_string(),
                ip.to_string(),
            )
        })
        .collect()
}

/// Runs the Deployment `app` of `replicas` spread over the nodes; its pods once Running, and
/// `kubectl get pods -o wide` of them (printed too).
fn run_pods(vbox: &VpcBox, app: &str, replicas: usize) -> (Vec<RunningPod>, String) {
    let selector = format!("app={app}");
    let t = Instant::now();
    vbox.apply(&deployment(app, replicas, None));
    let pods: Vec<RunningPod> = vbox
        .wait_running(&selector, replicas, PODS_UP)
        .iter()
        .map(RunningPod::from_json)
        .collect();
    eprintln!("{replicas} pods Running in {:?}", t.elapsed());
    let wide = vbox.kubectl_ok(&["get", "pods", "-l", &selector, "-o", "wide"]);
    eprintln!("{wide}");
    let nodes: BTreeSet<&str> = pods.iter().map(|p| p.node.as_str()).collect();
    assert_eq!(nodes.len(), 2, "pods on both nodes: {pods:?}");
    (pods, wide)
}

/// Every pod's IPv6 address is one of its node's /80 (the only one EC2 delegated to it),
/// distinct, shown by `kubectl get pods -o wide` on the pod's line, and held by ipamd on that
/// node for that very pod.
fn check_ipv6_addresses(vbox: &VpcBox, pods: &[RunningPod], wide: &str) {
    let distinct: BTreeSet<Ipv6Addr> = pods.iter().map(RunningPod::ipv6).collect();
    assert_eq!(distinct.len(), pods.len(), "distinct addresses: {pods:?}");
    for p in pods {
        let node = vbox.k8s_node(&p.node);
        let prefixes = delegated(vbox, node);
        assert_eq!(prefixes.len(), 1, "one /80 on {}: {prefixes:?}", p.node);
        assert!(
            in_prefix(p.ipv6(), &prefixes[0]),
            "{p:?} outside {}'s /80 {}",
            p.node,
            prefixes[0]
        );
        let line = wide
            .lines()
            .find(|l| l.starts_with(&format!("{} ", p.name)))
            .unwrap_or_else(|| panic!("{} not in kubectl get pods -o wide: {wide}", p.name));
        assert!(
            line.split_whitespace().any(|f| f == p.ips[0].to_string()),
            "{}'s line shows not {}: {line}",
            p.name,
            p.ips[0]
        );
        let held = ipamd_pods(node);
        let ip = p.ipv6().to_string();
        assert!(
            held.iter().any(|h| h["Namespace"] == "default"
                && h["Name"] == p.name.as_str()
                && h["IP"] == ip.as_str()),
            "{p:?} is not what ipamd on {} holds: {held:?}",
            p.node
        );
    }
}

/// Every pod pings every other pod's `addresses` and `extra`.
fn check_pings(
    vbox: &VpcBox,
    pods: &[RunningPod],
    addresses: fn(&RunningPod) -> Vec<IpAddr>,
    extra: &[String],
) {
    for p in pods {
        let targets: Vec<String> = pods
            .iter()
            .filter(|o| o.name != p.name)
            .flat_map(addresses)
            .map(|ip| ip.to_string())
            .chain(extra.iter().cloned())
            .collect();
        let mut args = vec!["exec", p.name.as_str(), "--", "sh", "-c", PING_ALL, "sh"];
        args.extend(targets.iter().map(String::as_str));
        let out = vbox.kubectl_ok(&args);
        let ok = out.lines().filter(|l| l.ends_with(" ok")).count();
        assert_eq!(ok, targets.len(), "{} ({:?}) pinged: {out}", p.name, p.ips);
    }
}

/// A TCP exchange over IPv6 between pods on different nodes: `server` answers on port 8080
/// (busybox nc, persistent), `client` connects to its IPv6 address and reads the answer.
fn check_tcp(vbox: &VpcBox, server: &RunningPod, client: &RunningPod) {
    let greeting = format!("hello from {}", server.name);
    let listen = format!("nc -ll -p 8080 -e echo '{greeting}' >/dev/null 2>&1 &");
    vbox.kubectl_ok(&["exec", &server.name, "--", "sh", "-c", &listen]);
    let to = server.ipv6().to_string();
    testkit::wait_ok(LISTENING, "an answer over TCP/IPv6", || {
        let out = vbox.kubectl(&[
            "exec",
            &client.name,
            "--",
            "sh",
            "-c",
            "nc -w 5 \"$1\" 8080 </dev/null",
            "sh",
            &to,
        ]);
        let answer = String::from_utf8_lossy(&out.stdout);
        if answer.trim() == greeting {
            Ok(())
        } else {
            Err(format!(
                "{} -> [{to}]:8080 read {answer:?} ({})",
                client.name,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    });
}

/// The cluster is IPv6: the API server's URL and the `kubernetes` Service are IPv6, each
/// node's InternalIP is its primary IPv6 address.
fn check_ipv6_cluster(vbox: &VpcBox) {
    assert_eq!(vbox.kube().server, format!("https://[{API_IP6}]:6443"));
    let cluster_ip = vbox.kubectl_ok(&[
        "get",
        "service",
        "kubernetes",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    let cluster_ip: Ipv6Addr = cluster_ip
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("the kubernetes Service's clusterIP {cluster_ip:?}: {e}"));
    assert!(in_prefix(cluster_ip, SERVICE_CIDR6), "{cluster_ip}");
    let ips = internal_ips(vbox);
    assert_eq!(ips.len(), 2, "{ips:?}");
    for (name, ip) in ips {
        let node = vbox.k8s_node(&name);
        let primary = node
            .primary_ipv6
            .expect("a node with a primary IPv6 address");
        assert_eq!(ip, primary.to_string(), "{name}'s InternalIP");
    }
}

/// The outside's IPv4 and IPv6 addresses: an IPv6 pod reaches the first through its IPv4
/// egress address (ENABLE_V4_EGRESS, on by default in IPv6 mode).
fn outside(vbox: &VpcBox) -> [String; 2] {
    let out = vbox.outside();
    [
        out.ip.to_string(),
        out.ipv6.expect("the outside's IPv6 address").to_string(),
    ]
}

fn ipv6_only(p: &RunningPod) -> Vec<IpAddr> {
    vec![IpAddr::V6(p.ipv6())]
}

fn all_addresses(p: &RunningPod) -> Vec<IpAddr> {
    p.ips.clone()
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn an_ipv6_cluster_gives_pods_their_nodes_ipv6_addresses_and_they_reach_each_other() {
    require_root();
    let started = Instant::now();
    // The Go CNI's IPv6 settings: --ip-family gives ENABLE_IPv6=true and ENABLE_IPv4=false,
    // and prefix delegation, which the Go CNI requires for IPv6.
    let vbox = VpcBox::up_kube(&[
        "--nodes",
        "2",
        "--ip-family",
        "ipv6",
        "--ipamd-env",
        "ENABLE_PREFIX_DELEGATION=true",
    ]);
    eprintln!(
        "IPv6 kube-in-a-box up with 2 nodes Ready in {:?}",
        started.elapsed()
    );
    check_ipv6_cluster(&vbox);

    let (pods, wide) = run_pods(&vbox, "web6", 4);
    for p in &pods {
        assert_eq!(p.ips.len(), 1, "an IPv6 pod has one address: {p:?}");
    }
    check_ipv6_addresses(&vbox, &pods, &wide);

    // Every pod reaches every other pod, both nodes and the API server over IPv6, and the
    // outside over IPv6 and, through its egress address, IPv4; and a pod answers another
    // node's pod over TCP.
    let mut extra: Vec<String> = [vbox.node(1), vbox.node(2)]
        .iter()
        .map(|n| n.primary_ipv6.expect("a primary IPv6 address").to_string())
        .collect();
    extra.push(API_IP6.to_string());
    extra.extend(outside(&vbox));
    check_pings(&vbox, &pods, ipv6_only, &extra);
    let server = &pods[0];
    let client = pods
        .iter()
        .find(|p| p.node != server.node)
        .expect("a pod on the other node");
    check_tcp(&vbox, server, client);

    // kube-proxy serves an IPv6 Service: from a pod at its cluster IP, and from outside the
    // VPC through its NodePort at a node's IPv6 address.
    let node_v6 = vbox.node(1).primary_ipv6.expect("a primary IPv6 address");
    check_node_port_service(&vbox, "web6", &pods, None, &[format!("[{node_v6}]")]);

    // Scaling to zero gives every address back, and vpc-cni logged no error.
    vbox.kubectl_ok(&["scale", "deployment", "web6", "--replicas=0"]);
    vbox.wait_no_pods("app=web6", PODS_GONE);
    for i in 1..=2 {
        let node = vbox.node(i);
        testkit::wait_ok(PODS_GONE, "ipamd to hold no pod", || {
            let held = ipamd_pods(node);
            if held.is_empty() {
                Ok(())
            } else {
                Err(format!("{} holds {held:?}", node.netns))
            }
        });
        let log = node.plugin_log();
        assert!(
            log.errors.is_empty(),
            "vpc-cni failed on {}: {:?}",
            node.netns,
            log.errors
        );
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn a_dual_stack_cluster_lists_both_addresses_of_each_pod_and_serves_both_families() {
    require_root();
    let vbox = VpcBox::up_kube(&["--nodes", "2", "--ip-family", "dual"]);

    // Nodes keep their IPv4 InternalIP (1.20 takes one --node-ip); the kubernetes Service is
    // IPv4, the cluster's first family.
    for (name, ip) in internal_ips(&vbox) {
        assert_eq!(ip, vbox.k8s_node(&name).primary_ip.to_string(), "{name}");
    }

    let (pods, wide) = run_pods(&vbox, "web46", 2);
    for p in &pods {
        match p.ips[..] {
            [IpAddr::V4(v4), IpAddr::V6(_)] => assert!(
                vbox.subnet().contains(v4),
                "{p:?} outside {}",
                vbox.subnet().cidr
            ),
            _ => panic!("podIPs are not [IPv4, IPv6]: {p:?}"),
        }
    }
    check_ipv6_addresses(&vbox, &pods, &wide);
    check_pings(&vbox, &pods, all_addresses, &[]);

    // A dual-stack Service gets a cluster IP of each family, and its IPv6 EndpointSlice lists
    // the pods' IPv6 addresses.
    vbox.apply(&json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web46", "namespace": "default"},
        "spec": {
            "ipFamilyPolicy": "RequireDualStack",
            "selector": {"app": "web46"},
            "ports": [{"port": 80}]
        }
    }));
    let ips = vbox.kubectl_ok(&[
        "get",
        "service",
        "web46",
        "-o",
        "jsonpath={.spec.clusterIPs}",
    ]);
    let ips: Vec<String> = serde_json::from_str(&ips).expect("clusterIPs as JSON");
    let [v4, v6] = &ips[..] else {
        panic!("not two cluster IPs: {ips:?}")
    };
    let v4: std::net::Ipv4Addr = v4.parse().expect("an IPv4 cluster IP");
    assert!(
        u32::from(v4) & 0xffff_0000 == 0xac14_0000,
        "{v4} outside {SERVICE_CIDR4}"
    );
    assert!(
        in_prefix(v6.parse().expect("an IPv6 cluster IP"), SERVICE_CIDR6),
        "{v6}"
    );
    let want: BTreeSet<String> = pods.iter().map(|p| p.ipv6().to_string()).collect();
    testkit::wait_ok(Duration::from_secs(60), "the IPv6 EndpointSlice", || {
        let json = vbox.kubectl_ok(&[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web46",
            "-o",
            "json",
        ]);
        let list: Value = serde_json::from_str(&json).expect("endpointslices as JSON");
        let got: BTreeSet<String> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["addressType"] == "IPv6")
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
            .filter_map(|a| a.as_str().map(String::from))
            .collect();
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}, want {want:?}"))
        }
    });

    // kube-proxy serves a dual-stack Service over both families: from a pod through each of
    // its cluster IPs, and from outside the VPC through its NodePort at each of a node's
    // addresses.
    let node = vbox.node(1);
    let node_v6 = node.primary_ipv6.expect("the node's IPv6 address");
    check_node_port_service(
        &vbox,
        "web46",
        &pods,
        Some("RequireDualStack"),
        &[node.primary_ip.to_string(), format!("[{node_v6}]")],
    );
}

/// A NodePort Service over `pods`, the Deployment `app` (`policy`: its ipFamilyPolicy, else
/// the cluster's default), answers every request, by one of the pods, from a pod through each of its cluster
/// IPs and from outside the VPC at each of `node_addresses` (URL hosts).
fn check_node_port_service(
    vbox: &VpcBox,
    app: &str,
    pods: &[RunningPod],
    policy: Option<&str>,
    node_addresses: &[String],
) {
    // Each pod's listener answers with its name.
    for p in pods {
        let listen = format!(
            "nc -ll -p {SERVICE_TARGET} -e echo {} >/dev/null 2>&1 &",
            p.name
        );
        vbox.kubectl_ok(&["exec", &p.name, "--", "sh", "-c", &listen]);
    }
    let mut spec = json!({
        "type": "NodePort",
        "selector": {"app": app},
        "ports": [{"port": 80, "targetPort": SERVICE_TARGET, "nodePort": NODE_PORT}]
    });
    if let Some(policy) = policy {
        spec["ipFamilyPolicy"] = json!(policy);
    }
    vbox.apply(&json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "np", "namespace": "default"},
        "spec": spec
    }));
    let ips = vbox.kubectl_ok(&["get", "service", "np", "-o", "jsonpath={.spec.clusterIPs}"]);
    let cluster_ips: Vec<String> = serde_json::from_str(&ips).expect("clusterIPs as JSON");
    let names: BTreeSet<String> = pods.iter().map(|p| p.name.clone()).collect();
    let client = &pods[0].name;
    for ip in &cluster_ips {
        answered_every_time(&names, &format!("{client} -> [{ip}]:80"), || {
            vbox.kubectl(&[
                "exec",
                client,
                "--",
                "sh",
                "-c",
                "nc -w 5 \"$1\" 80 </dev/null",
                "sh",
                ip,
            ])
        });
    }
    for host in node_addresses {
        let url = format!("http://{host}:{NODE_PORT}/");
        answered_every_time(&names, &format!("outside -> {url}"), || {
            vbox.get_from_outside(&url, 5)
        });
    }
}

/// The port the pods' listeners for the Service take (check_tcp's is 8080).
const SERVICE_TARGET: u16 = 8081;

/// The NodePort of the Services checked.
const NODE_PORT: u16 = 30090;

/// Requests `ask` until one is answered by a pod of `names` (kube-proxy has written the
/// Service's rules), bounded; then 8 more, each of which must be answered by one of them.
fn answered_every_time(
    names: &BTreeSet<String>,
    what: &str,
    ask: impl Fn() -> std::process::Output,
) {
    let answer = |out: std::process::Output| {
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if names.contains(&text) {
            Ok(text)
        } else {
            Err(format!(
                "read {text:?} ({})",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    testkit::wait_ok(LISTENING, what, || answer(ask()).map(drop));
    for n in 0..8 {
        if let Err(e) = answer(ask()) {
            panic!("{what}: request {n} after the first answer: {e}");
        }
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn the_shipped_daemonset_runs_an_ipv6_cluster() {
    require_root();
    let image = image_archive();
    let vbox = VpcBox::up_daemonset(
        &image,
        &[
            "--nodes",
            "2",
            "--ip-family",
            "ipv6",
            "--ipamd-env",
            "ENABLE_PREFIX_DELEGATION=true",
        ],
    );
    check_ipv6_cluster(&vbox);

    // Both containers run in IPv6 mode: the init container set the node up for IPv6
    // (accept_ra=2 on the primary ENI, which ipamd's unprivileged container could not write).
    let env = vbox.kubectl_ok(&[
        "-n",
        "kube-system",
        "get",
        "daemonset",
        "vpc-cni",
        "-o",
        "json",
    ]);
    let ds: Value = serde_json::from_str(&env).expect("the DaemonSet as JSON");
    let spec = &ds["spec"]["template"]["spec"];
    for container in [&spec["initContainers"][0], &spec["containers"][0]] {
        let value = |name: &str| {
            container["env"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|e| e["name"] == name)
                .and_then(|e| e["value"].as_str())
                .map(String::from)
        };
        assert_eq!(value("ENABLE_IPv6").as_deref(), Some("true"), "{container}");
        assert_eq!(
            value("ENABLE_IPv4").as_deref(),
            Some("false"),
            "{container}"
        );
    }
    for i in 1..=2 {
        let netns = &vbox.node(i).netns;
        let out = e2e::ip(&[
            "netns",
            "exec",
            netns,
            "cat",
            "/proc/sys/net/ipv6/conf/eth0/accept_ra",
        ]);
        assert_eq!(out, ["2"], "accept_ra on {netns}'s eth0");
    }

    let (pods, wide) = run_pods(&vbox, "ds6", 2);
    check_ipv6_addresses(&vbox, &pods, &wide);
    check_pings(&vbox, &pods, ipv6_only, &outside(&vbox));
}
