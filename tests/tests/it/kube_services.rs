//! Services through kube-proxy on kube-in-a-box, driven with kubectl and reached
//! from a pod and from the box's outside namespace (beyond the VPC): ClusterIP to every kind of
//! backend, NodePort with externalTrafficPolicy Cluster and Local through every node, hostPort
//! through portmap, what `AWS_VPC_CNI_NODE_PORT_SUPPORT=false` breaks, what the outside sees as
//! the source with `AWS_VPC_K8S_CNI_EXTERNALSNAT` and `AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS`, and
//! Services answering while ipamd is stopped and after it restarts. One box, two nodes of a
//! small instance type, so that each node's pods sit on its primary ENI and on a secondary one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use e2e::{VpcBox, pod_ip, pod_name, require_root, run_bounded};
use serde_json::{Value, json};
use testkit::Steps;

/// Scheduling, sandboxes and ADDs of the pods, ENIs attached meanwhile.
const PODS_UP: Duration = Duration::from_secs(240);
/// kube-proxy writing a Service's endpoints, or a pod's server answering.
const SYNC: Duration = Duration::from_secs(60);
/// Requests in one batch.
const BATCH: usize = 16;
/// Batches at most while waiting to have seen every backend a test needs (each request picks
/// one of 8 backends at random: missing one in 8 batches of 16 is a chance of 1e-7).
const MAX_BATCHES: usize = 8;

const CLUSTER_PORT: u16 = 30080;
const LOCAL_PORT: u16 = 30081;
const SECONDARY_PORT: u16 = 30082;
const HOST_PORT: u16 = 18080;
/// Web pods: 4 per node. A t3.small's ENI holds 3 pod addresses, so each node has 3 on its
/// primary ENI and the 4th (and every later pod) on a secondary one.
const WEB: usize = 8;

/// A busybox httpd on :8080 whose `/cgi-bin/who` answers `<pod name> <client address>`.
const SERVE: &str = "mkdir -p /www/cgi-bin && echo $HOSTNAME >/www/index.html && \
    printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\necho $HOSTNAME $REMOTE_ADDR\\n' \
    >/www/cgi-bin/who && chmod +x /www/cgi-bin/who && exec httpd -f -p 8080 -h /www";

fn pod_spec(extra: Value) -> Value {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 1,
        "containers": [{
            "name": "web",
            "image": "localhost/busybox:box",
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", SERVE]
        }]
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    spec
}

fn web_deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": WEB,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": pod_spec(json!({"topologySpreadConstraints": [{
                    "maxSkew": 1,
                    "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}}
                }]}))
            }
        }
    })
}

/// A pod named `name` on Kubernetes node `node`.
fn pod_on(name: &str, node: &str, container_extra: Value) -> Value {
    let mut spec = pod_spec(json!({"nodeSelector": {"kubernetes.io/hostname": node}}));
    if let (Some(c), Some(extra)) = (
        spec["containers"][0].as_object_mut(),
        container_extra.as_object(),
    ) {
        c.extend(extra.clone());
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": spec
    })
}

fn node_port_service(name: &str, selector: Value, node_port: u16, policy: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "type": "NodePort",
            "externalTrafficPolicy": policy,
            "selector": selector,
            "ports": [{"port": 80, "targetPort": 8080, "nodePort": node_port}]
        }
    })
}

/// One request's outcome: the answering pod and the client address it saw, or nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Answer {
    pod: String,
    client: String,
}

/// `<pod> <addr>` lines (busybox httpd writes an IPv4 client as `[::ffff:a.b.c.d]`), `FAIL`
/// for a request that got no answer.
fn parse_answers(out: &str) -> Vec<Option<Answer>> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut words = l.split_whitespace();
            match (words.next(), words.next()) {
                (Some("FAIL"), _) | (_, None) => None,
                (Some(pod), Some(addr)) => Some(Answer {
                    pod: pod.to_string(),
                    client: addr
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .trim_start_matches("::ffff:")
                        .to_string(),
                }),
                (None, _) => None,
            }
        })
        .collect()
}

/// A shell loop of `n` requests with `fetch URL`, one line each.
fn request_loop(fetch: &str, url: &str, n: usize) -> String {
    format!("for i in $(seq {n}); do {fetch} {url}/cgi-bin/who || echo FAIL; done")
}

/// `n` requests to `host:port` from pod `pod`, with busybox nc (2 s each at most): the
/// image's busybox-static wget dies of SIGSEGV when given a timeout (`-T`).
fn from_pod(vbox: &VpcBox, pod: &str, host: &str, port: u16, n: usize) -> Vec<Option<Answer>> {
    let script = format!(
        "for i in $(seq {n}); do a=$(printf 'GET /cgi-bin/who HTTP/1.0\\r\\n\\r\\n' | nc -w 2 {host} {port} | tail -n 1); \
         if [ -n \"$a\" ]; then echo \"$a\"; else echo FAIL; fi; done"
    );
    let out = vbox.kubectl_bounded(
        30 + 3 * n as u32,
        &["exec", pod, "--", "sh", "-c", &script],
        None,
    );
    parse_answers(&String::from_utf8_lossy(&out.stdout))
}

/// `n` requests to `url` from the outside, from its own address (curl, 2 s each at most).
fn from_outside(vbox: &VpcBox, url: &str, n: usize) -> Vec<Option<Answer>> {
    let outside = vbox.outside();
    let fetch = format!("curl -s -m 2 --interface {}", outside.ip);
    let script = request_loop(&fetch, url, n);
    let out = run_bounded(
        30 + 3 * n as u32,
        "ip",
        &["netns", "exec", &outside.netns, "sh", "-c", &script],
        None,
    );
    parse_answers(&String::from_utf8_lossy(&out.stdout))
}

/// Requests in batches until the answering pods include every one of `wanted`, each request
/// answered; bounded by [`MAX_BATCHES`]. Returns every answer.
fn until_all_answer(
    what: &str,
    wanted: &BTreeSet<String>,
    mut batch: impl FnMut() -> Vec<Option<Answer>>,
) -> Vec<Answer> {
    let mut all = Vec::new();
    for _ in 0..MAX_BATCHES {
        let answers = batch();
        assert_eq!(
            answers.len(),
            BATCH,
            "{what}: {BATCH} requests made: {answers:?}"
        );
        let failed = answers.iter().filter(|a| a.is_none()).count();
        assert_eq!(
            failed, 0,
            "{what}: {failed} of {BATCH} requests unanswered: {answers:?}"
        );
        all.extend(answers.into_iter().flatten());
        let seen: BTreeSet<String> = all.iter().map(|a| a.pod.clone()).collect();
        if wanted.is_subset(&seen) {
            return all;
        }
    }
    let seen: BTreeSet<String> = all.iter().map(|a| a.pod.clone()).collect();
    panic!(
        "{what}: after {} requests, all answered, never by {:?}",
        all.len(),
        wanted.difference(&seen).collect::<Vec<_>>()
    );
}

/// A web pod: its Kubernetes node and whether its address is on a secondary ENI.
#[derive(Clone, Debug)]
struct Backend {
    node: String,
    secondary: bool,
}

/// Whether `ip` is on a secondary ENI of the node in `netns`: only those addresses have a
/// `from <ip> lookup <table>` rule (priority 1536).
fn on_secondary_eni(netns: &str, ip: &str) -> bool {
    let out = run_bounded(
        10,
        "ip",
        &["-n", netns, "rule", "show", "priority", "1536"],
        None,
    );
    assert!(
        out.status.success(),
        "ip rule: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some(ip))
}

/// Packets (ICMP) the outside received from `src` so far; counting starts with
/// [`VpcBox::watch_outside_sources`].
fn seen_from(vbox: &VpcBox, src: &str) -> u64 {
    vbox.outside_seen_from(src)
}

/// Whether every node's kube-proxy has written `n` endpoints for Service port `svc`
/// (`"default/web"` in the rule comments: a port without a name).
fn endpoints_written(nodes: &[String], svc: &str, n: usize) -> Result<(), String> {
    let comment = format!("\"default/{svc}\"");
    for netns in nodes {
        let out = run_bounded(
            10,
            "ip",
            &["netns", "exec", netns, "iptables-save", "-t", "nat"],
            None,
        );
        let dump = String::from_utf8_lossy(&out.stdout);
        let have = dump
            .lines()
            .filter(|l| {
                l.starts_with("-A KUBE-SEP-") && l.contains(&comment) && l.contains("-j DNAT")
            })
            .count();
        if have != n {
            return Err(format!("{netns}: {have} endpoints of {svc}, want {n}"));
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn services_through_kube_proxy_on_two_nodes() {
    require_root();
    let vbox = VpcBox::up_kube(&["--nodes", "2", "--instance-type", "t3.small"]);
    let mut steps = Steps::new("services through kube-proxy");
    let nodes: Vec<_> = (1..=2).map(|i| vbox.node(i).clone()).collect();
    let k8s: Vec<String> = nodes
        .iter()
        .map(|n| n.k8s_node.clone().expect("a Kubernetes node"))
        .collect();
    let netns: Vec<String> = nodes.iter().map(|n| n.netns.clone()).collect();
    let node_ip: Vec<String> = nodes.iter().map(|n| n.primary_ip.to_string()).collect();
    let outside = vbox.outside().ip.to_string();

    // The web pods, a client on node 1 and a hostPort pod on node 2 (both beyond the primary
    // ENIs' room: on secondary ENIs), and the Services.
    let backends = steps.step(
        "8 web pods on primary and secondary ENIs of both nodes",
        || {
            vbox.apply(&web_deployment());
            let pods = vbox.wait_running("app=web", WEB, PODS_UP);
            let mut backends = BTreeMap::new();
            for pod in &pods {
                let node = pod["spec"]["nodeName"]
                    .as_str()
                    .expect("a node")
                    .to_string();
                let i = k8s.iter().position(|k| *k == node).expect("a box node");
                let ip = pod_ip(pod).to_string();
                let secondary = on_secondary_eni(&netns[i], &ip);
                if secondary {
                    vbox.kubectl_ok(&["label", "pod", pod_name(pod), "eni=secondary"]);
                }
                backends.insert(pod_name(pod).to_string(), Backend { node, secondary });
            }
            for node in &k8s {
                let on = |sec: bool| {
                    backends
                        .values()
                        .filter(|b| b.node == *node && b.secondary == sec)
                        .count()
                };
                assert!(
                    on(false) >= 1 && on(true) >= 1,
                    "{node}: web pods on its primary ENI and a secondary one: {backends:?}"
                );
            }
            vbox.apply(&pod_on("client", &k8s[0], json!({})));
            vbox.apply(&pod_on(
                "hostport",
                &k8s[1],
                json!({"ports": [{"containerPort": 8080, "hostPort": HOST_PORT}]}),
            ));
            let client = vbox.wait_running("app=client", 1, PODS_UP);
            let hostport = vbox.wait_running("app=hostport", 1, PODS_UP);
            let client_ip = pod_ip(&client[0]).to_string();
            assert!(
                on_secondary_eni(&netns[0], &client_ip),
                "the client {client_ip} is on a secondary ENI"
            );
            let hostport_ip = pod_ip(&hostport[0]).to_string();
            eprintln!(
                "hostport pod {hostport_ip}, on a {} ENI",
                if on_secondary_eni(&netns[1], &hostport_ip) {
                    "secondary"
                } else {
                    "primary"
                }
            );
            vbox.apply(&node_port_service(
                "web",
                json!({"app": "web"}),
                CLUSTER_PORT,
                "Cluster",
            ));
            vbox.apply(&node_port_service(
                "web-local",
                json!({"app": "web"}),
                LOCAL_PORT,
                "Local",
            ));
            vbox.apply(&node_port_service(
                "web-secondary",
                json!({"app": "web", "eni": "secondary"}),
                SECONDARY_PORT,
                "Local",
            ));
            // Every server answers directly (from the outside, to its pod address)...
            for pod in vbox.pods("app in (web, client, hostport)") {
                let url = format!("http://{}:8080", pod_ip(&pod));
                testkit::wait_ok(SYNC, &format!("{} serving", pod_name(&pod)), || {
                    match from_outside(&vbox, &url, 1).pop().flatten() {
                        Some(a) if a.pod == pod_name(&pod) => Ok(()),
                        other => Err(format!("{other:?}")),
                    }
                });
            }
            // ...and every kube-proxy has written the endpoints.
            for (svc, n) in [("web", WEB), ("web-local", WEB), ("web-secondary", 2)] {
                testkit::wait_ok(SYNC, &format!("the endpoints of {svc}"), || {
                    endpoints_written(&netns, svc, n)
                });
            }
            (backends, client_ip)
        },
    );
    let Some((backends, client_ip)) = backends else {
        steps.finish();
        return;
    };
    let names = |f: &dyn Fn(&Backend) -> bool| -> BTreeSet<String> {
        backends
            .iter()
            .filter(|(_, b)| f(b))
            .map(|(n, _)| n.clone())
            .collect()
    };
    let cluster_ip =
        vbox.kubectl_ok(&["get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"]);

    // ClusterIP from a pod on a secondary ENI: every backend answers, same node and other
    // node, primary and secondary ENI; no masquerading inside the VPC (the client's address).
    let clusterip = |what: &str| {
        let all = until_all_answer(what, &names(&|_| true), || {
            from_pod(&vbox, "client", &cluster_ip, 80, BATCH)
        });
        for a in &all {
            assert_eq!(
                a.client, client_ip,
                "{what}: {a:?} saw the client's own address"
            );
        }
    };
    steps.step(
        "ClusterIP from a pod on a secondary ENI reaches every kind of backend",
        || {
            clusterip("ClusterIP");
        },
    );

    // NodePort, Cluster: through each node, every request answered, by pods of both nodes
    // and both kinds of ENI; masqueraded to the address of the node asked.
    let nodeport_cluster = |what: &str| {
        for (i, ip) in node_ip.iter().enumerate() {
            let url = format!("http://{ip}:{CLUSTER_PORT}");
            let all = until_all_answer(
                &format!("{what} via node {}", i + 1),
                &names(&|_| true),
                || from_outside(&vbox, &url, BATCH),
            );
            for a in &all {
                assert_eq!(
                    &a.client,
                    ip,
                    "{what}: {a:?}: masqueraded to node {}'s address",
                    i + 1
                );
            }
        }
    };
    steps.step(
        "NodePort (Cluster) from outside the VPC through every node",
        || {
            nodeport_cluster("NodePort Cluster");
        },
    );

    // NodePort, Local: only that node's pods answer, and they see the outside's address.
    let nodeport_local = |what: &str| {
        for (i, ip) in node_ip.iter().enumerate() {
            let url = format!("http://{ip}:{LOCAL_PORT}");
            let local = names(&|b| b.node == k8s[i]);
            let all = until_all_answer(&format!("{what} via node {}", i + 1), &local, || {
                from_outside(&vbox, &url, BATCH)
            });
            for a in &all {
                assert!(
                    local.contains(&a.pod),
                    "{what} via node {}: answered by {a:?}, not a pod of that node",
                    i + 1
                );
                assert_eq!(
                    a.client, outside,
                    "{what}: {a:?}: the client's address kept"
                );
            }
        }
    };
    steps.step(
        "NodePort (Local) from outside the VPC: only the node's own pods answer",
        || {
            nodeport_local("NodePort Local");
        },
    );

    let hostport = |what: &str| {
        let url = format!("http://{}:{HOST_PORT}", node_ip[1]);
        let answers = from_outside(&vbox, &url, BATCH);
        assert!(
            answers.iter().all(|a| a
                .as_ref()
                .is_some_and(|a| a.pod == "hostport" && a.client == outside)),
            "{what}: {answers:?}"
        );
    };
    steps.step("hostPort (portmap) from outside the VPC", || {
        hostport("hostPort")
    });

    // Pods to the outside: SNATed to the node's address by default.
    vbox.watch_outside_sources(&[&node_ip[0], &client_ip]);
    let ping_outside = || {
        let (node_before, pod_before) =
            (seen_from(&vbox, &node_ip[0]), seen_from(&vbox, &client_ip));
        assert!(
            vbox.pings("client", vbox.outside().ip),
            "client -> the outside"
        );
        (
            seen_from(&vbox, &node_ip[0]) - node_before,
            seen_from(&vbox, &client_ip) - pod_before,
        )
    };
    steps.step(
        "a pod's traffic to the outside leaves as the node's address (SNAT)",
        || {
            let (node, pod) = ping_outside();
            assert!(
                node >= 1 && pod == 0,
                "seen from the node {node}, from the pod {pod}"
            );
        },
    );

    // ipamd stopped on both nodes: the datapath is the kernel's, Services go on answering;
    // and after the restart.
    steps.step(
        "Services answer while ipamd is stopped and after it restarts",
        || {
            for i in 1..=2 {
                vbox.stop_ipamd(i, false);
            }
            let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                clusterip("ClusterIP, ipamd stopped");
                nodeport_cluster("NodePort Cluster, ipamd stopped");
            }));
            for i in 1..=2 {
                vbox.start_ipamd(i);
            }
            if let Err(e) = stopped {
                std::panic::resume_unwind(e);
            }
            clusterip("ClusterIP, ipamd restarted");
            nodeport_cluster("NodePort Cluster, ipamd restarted");
            nodeport_local("NodePort Local, ipamd restarted");
            hostport("hostPort, ipamd restarted");
        },
    );

    // AWS_VPC_CNI_NODE_PORT_SUPPORT=false: a reply from a pod on a secondary ENI to a
    // connection that came in through the primary ENI leaves through the pod's ENI with the
    // node's address as its source, and the VPC drops it (source/destination check). So
    // NodePort (and hostPort) through a node to its own secondary-ENI pods gets no answer;
    // ClusterIP, and NodePort to pods on the primary ENI or on the other node, still work.
    let restart = |changes: &[&str]| {
        for i in 1..=2 {
            vbox.stop_ipamd(i, false);
            let node = i.to_string();
            let mut args = vec![
                "start-ipamd",
                "--name",
                vbox.name(),
                "--node",
                node.as_str(),
            ];
            args.extend_from_slice(changes);
            let out = e2e::vpc_box(90, &[], &args);
            assert!(
                out.status.success(),
                "start-ipamd {changes:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    };
    steps.step(
        "AWS_VPC_CNI_NODE_PORT_SUPPORT=false: NodePort to a node's own secondary-ENI pods fails",
        || {
            restart(&["--ipamd-env", "AWS_VPC_CNI_NODE_PORT_SUPPORT=false"]);
            let without = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                for ip in &node_ip {
                    let answers = from_outside(&vbox, &format!("http://{ip}:{SECONDARY_PORT}"), 3);
                    assert!(
                        answers.iter().all(Option::is_none),
                        "via {ip}: no answer expected: {answers:?}"
                    );
                }
                let answers = from_outside(&vbox, &format!("http://{}:{HOST_PORT}", node_ip[1]), 3);
                let hostport_secondary = on_secondary_eni(
                    &netns[1],
                    &pod_ip(&vbox.pods("app=hostport")[0]).to_string(),
                );
                assert_eq!(
                    answers.iter().all(Option::is_none),
                    hostport_secondary,
                    "hostPort to a pod on a {} ENI: {answers:?}",
                    if hostport_secondary {
                        "secondary"
                    } else {
                        "primary"
                    }
                );
                // Through each node, every answer comes from a pod other than its own secondary ones.
                for (i, ip) in node_ip.iter().enumerate() {
                    let answers =
                        from_outside(&vbox, &format!("http://{ip}:{CLUSTER_PORT}"), BATCH);
                    for a in answers.iter().flatten() {
                        let b = &backends[&a.pod];
                        assert!(
                            !(b.node == k8s[i] && b.secondary),
                            "via node {}: {a:?} answered",
                            i + 1
                        );
                    }
                    assert!(
                        answers.iter().any(Option::is_some),
                        "via node {}: nothing answered: {answers:?}",
                        i + 1
                    );
                }
                clusterip("ClusterIP, no NodePort support");
            }));
            // Back to the default whatever failed above: the next steps need it.
            restart(&["--ipamd-unset", "AWS_VPC_CNI_NODE_PORT_SUPPORT"]);
            if let Err(e) = without {
                std::panic::resume_unwind(e);
            }
            nodeport_cluster("NodePort Cluster, NodePort support back");
            for ip in &node_ip {
                let answers = from_outside(&vbox, &format!("http://{ip}:{SECONDARY_PORT}"), 3);
                assert!(
                    answers.iter().all(Option::is_some),
                    "via {ip}, support back: {answers:?}"
                );
            }
        },
    );

    // AWS_VPC_K8S_CNI_EXTERNALSNAT=true: pods leave with their own address (a NAT gateway
    // would translate it); Services are unchanged: NodePort answers come from the node asked
    // (a TCP connection to that address), masqueraded (Cluster) or keeping the client (Local).
    steps.step(
        "AWS_VPC_K8S_CNI_EXTERNALSNAT=true: the outside sees pods' own addresses",
        || {
            restart(&["--ipamd-env", "AWS_VPC_K8S_CNI_EXTERNALSNAT=true"]);
            let (node, pod) = ping_outside();
            assert!(
                node == 0 && pod >= 1,
                "seen from the node {node}, from the pod {pod}"
            );
            nodeport_cluster("NodePort Cluster, external SNAT");
            nodeport_local("NodePort Local, external SNAT");
            clusterip("ClusterIP, external SNAT");
        },
    );

    steps.step(
        "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS: the outside's address is not SNATed",
        || {
            let excluded = format!("AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS={outside}/32");
            restart(&[
                "--ipamd-unset",
                "AWS_VPC_K8S_CNI_EXTERNALSNAT",
                "--ipamd-env",
                &excluded,
            ]);
            let (node, pod) = ping_outside();
            assert!(
                node == 0 && pod >= 1,
                "seen from the node {node}, from the pod {pod}"
            );
            nodeport_cluster("NodePort Cluster, SNAT excluded");
            restart(&["--ipamd-unset", "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS"]);
            let (node, pod) = ping_outside();
            assert!(
                node >= 1 && pod == 0,
                "back to SNAT: seen from the node {node}, from the pod {pod}"
            );
        },
    );
    steps.finish();
}
