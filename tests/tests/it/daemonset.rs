//! The real deployment path on kube-in-a-box: the image scripts/image.sh built is loaded on
//! both nodes and config/kubernetes/ applied (with the box's small overlay), so each node's
//! kubelet runs `ipamd entrypoint` as the DaemonSet's pod, which installs the plugin and the
//! conflist and makes the node Ready. Then, as operators do: the DaemonSet rolled to a new
//! image tag while a pod pings another every 100 ms and a NodePort Service is asked from
//! outside the VPC every 200 ms, and deleted and applied again; with
//! small limits, ipamd's and the plugin's logs on the node rotate meanwhile.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use e2e::{
    INTROSPECT, VpcBox, deployment, image_archive, pod_ip, pod_name, require_root, retagged_image,
    run_bounded,
};
use serde_json::{Value, json};
use testkit::Steps;

const APP: &str = "web";
/// Scheduling, sandboxes and ADDs of a few pods on a loaded two-core machine.
const PODS_UP: Duration = Duration::from_secs(180);
/// A pod's sandbox error reaching its events.
const EVENT: Duration = Duration::from_secs(120);
/// The longest the pinging pod pings (`ping -w`): well beyond a two-node rollout here (about
/// 30 to 60 s, 74 s seen on a loaded run). It is stopped once the rollout is over and
/// [`PING_AFTER`] has passed, so the pings cover the whole roll and a little after.
const PING_SECS: u64 = 120;
/// How long the pings go on after the rollout is over: the new pods' first seconds.
const PING_AFTER: Duration = Duration::from_secs(5);
/// The file whose creation in the pinging pod stops its pings (busybox ping prints its
/// statistics on SIGINT).
const PING_STOP: &str = "/ping.stop";
const DS_SELECTOR: &str = "k8s-app=vpc-cni";
/// The NodePort of the Service asked through the roll.
const NODE_PORT: u16 = 30095;
/// kube-proxy writing a new Service's rules, and the pods' listeners starting.
const SERVICE_UP: Duration = Duration::from_secs(60);
/// The pace of the requests to the Service during the roll, and their most.
const ASK_EVERY: Duration = Duration::from_millis(200);
const MAX_ASKS: usize = 2_000;
const CONFLIST: &str = "/etc/cni/net.d/10-vpc-cni.conflist";
const PLUGIN: &str = "/opt/cni/bin/vpc-cni";

/// Where node `i`'s directory for `path` (one the DaemonSet mounts) is on the machine.
fn node_path(vbox: &VpcBox, i: usize, path: &str) -> PathBuf {
    vbox.run_dir().join(format!("node{i}/kube/paths{path}"))
}

fn inode(path: &Path) -> u64 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .ino()
}

/// The DaemonSet's pods: (uid, node, image), from `kubectl get pods -n kube-system`.
fn daemonset_pods(vbox: &VpcBox) -> Vec<(String, String, String)> {
    let json = vbox.kubectl_ok(&[
        "get",
        "pods",
        "-n",
        "kube-system",
        "-l",
        DS_SELECTOR,
        "-o",
        "json",
    ]);
    let list: Value = serde_json::from_str(&json).expect("pods as JSON");
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|p| {
                    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
                    (
                        s(&p["metadata"]["uid"]),
                        s(&p["spec"]["nodeName"]),
                        s(&p["spec"]["containers"][0]["image"]),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn daemonset_status(vbox: &VpcBox) -> Value {
    let json = vbox.kubectl_ok(&[
        "get",
        "daemonset",
        "vpc-cni",
        "-n",
        "kube-system",
        "-o",
        "json",
    ]);
    serde_json::from_str::<Value>(&json).expect("the DaemonSet as JSON")["status"].clone()
}

/// name -> address of the pods of the app, with no address shared.
fn addresses(pods: &[Value]) -> BTreeMap<String, Ipv4Addr> {
    let map: BTreeMap<String, Ipv4Addr> = pods
        .iter()
        .map(|p| (pod_name(p).to_string(), pod_ip(p)))
        .collect();
    let unique: BTreeSet<_> = map.values().collect();
    assert_eq!(unique.len(), map.len(), "an address is shared: {map:?}");
    map
}

/// Every address ipamd holds for a pod is a running pod's, and every running pod's address
/// is held by its node's ipamd: nothing leaked, nothing lost.
fn every_address_accounted_for(vbox: &VpcBox, pods: &[Value]) {
    for i in 1..=2 {
        let node = vbox.node(i);
        let k8s = node.k8s_node.as_deref().expect("a Kubernetes node");
        let want: BTreeSet<String> = pods
            .iter()
            .filter(|p| p["spec"]["nodeName"] == k8s)
            .map(|p| pod_ip(p).to_string())
            .collect();
        let held: BTreeSet<String> = node
            .get_json(&format!("{INTROSPECT}/v1/pods"))
            .as_array()
            .expect("a list of pods")
            .iter()
            .filter_map(|p| p["IP"].as_str().map(String::from))
            .collect();
        assert_eq!(held, want, "node {i}: ipamd's pods against the cluster's");
    }
}

/// The plugin as the entrypoint installed it, run in a root that holds nothing else: it
/// needs no dynamic loader and no library.
fn runs_in_an_empty_root(plugin: &Path) {
    let root = tempfile::tempdir().expect("a temporary directory");
    std::fs::copy(plugin, root.path().join("vpc-cni")).expect("copying the plugin");
    let entries = std::fs::read_dir(root.path()).expect("the root").count();
    assert_eq!(entries, 1, "the root holds only the plugin");
    let dir = root.path().to_str().expect("a UTF-8 path");
    let run = |env: &[&str], stdin: &[u8]| {
        let mut args = vec!["-i"];
        args.extend_from_slice(env);
        args.extend_from_slice(&["/usr/sbin/chroot", dir, "/vpc-cni"]);
        run_bounded(10, "env", &args, Some(stdin))
    };

    let out = run(&["CNI_COMMAND=VERSION"], b"");
    assert!(out.status.success(), "VERSION in an empty root: {out:?}");
    let version: Value = serde_json::from_slice(&out.stdout).expect("VERSION prints JSON");
    let supported = version["supportedVersions"].as_array().expect("versions");
    assert!(supported.contains(&Value::from("1.0.0")), "{version}");

    let add = [
        "CNI_COMMAND=ADD",
        "CNI_CONTAINERID=empty-root",
        "CNI_NETNS=/var/run/netns/none",
        "CNI_IFNAME=eth0",
        "CNI_PATH=/",
    ];
    let out = run(&add, b"{not json");
    assert!(!out.status.success(), "ADD of bad input succeeded: {out:?}");
    let error: Value = serde_json::from_slice(&out.stdout).expect("the error as JSON");
    // The CNI spec's code 6: failed to decode content.
    assert_eq!(error["code"], 6, "{error}");
    assert!(
        error["msg"].as_str().is_some_and(|m| !m.is_empty()),
        "{error}"
    );
}

/// The node's rotated log `name` in `dir` under a limit of `limit` bytes and `kept` files: it
/// has rotated, keeps no more than `kept` old files, and every line is whole JSON.
fn rotated(dir: &Path, name: &str, limit: u64, kept: u32) {
    let file = |n: u32| match n {
        0 => dir.join(name),
        n => dir.join(format!("{name}.{n}")),
    };
    assert!(file(1).is_file(), "{name} never rotated");
    assert!(
        !file(kept + 1).exists(),
        "{name} keeps more than {kept} files"
    );
    for n in 0..=kept {
        let Ok(text) = std::fs::read_to_string(file(n)) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            text.len() as u64 <= limit || lines.len() == 1,
            "{}: {} bytes over a limit of {limit}",
            file(n).display(),
            text.len()
        );
        for line in lines {
            assert!(
                serde_json::from_str::<Value>(line).is_ok(),
                "{}: not a whole JSON line: {line}",
                file(n).display()
            );
        }
    }
}

/// One request to the Service at `url` from outside the VPC: Ok when a pod of `names`
/// answered.
fn ask_service(vbox: &VpcBox, url: &str, names: &BTreeSet<String>) -> Result<(), String> {
    let out = vbox.get_from_outside(url, 2);
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if names.contains(&text) {
        Ok(())
    } else {
        Err(format!(
            "{url} read {text:?} ({})",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `transmitted, received` from busybox ping's summary.
fn ping_counts(output: &str) -> (u64, u64) {
    let line = output
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .unwrap_or_else(|| panic!("no ping summary in: {output}"));
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn the_daemonset_serves_pods_and_keeps_them_through_a_roll_and_a_delete() {
    require_root();
    let image = image_archive();
    // Small logs, so that ipamd's and the plugin's rotate within the test, across restarts
    // of the DaemonSet's pods too.
    let vbox = VpcBox::up_daemonset(
        &image,
        &[
            "--nodes",
            "2",
            "--ipamd-env",
            "AWS_VPC_K8S_CNI_LOG_MAX_SIZE=2Ki",
            "--ipamd-env",
            "AWS_VPC_K8S_CNI_LOG_MAX_FILES=2",
            "--ipamd-env",
            "AWS_VPC_K8S_PLUGIN_LOG_MAX_SIZE=2Ki",
            "--ipamd-env",
            "AWS_VPC_K8S_PLUGIN_LOG_MAX_FILES=2",
        ],
    );

    let mut steps = Steps::new("the DaemonSet through a roll and a delete");
    let selector = format!("app={APP}");

    // The DaemonSet is Ready on both nodes and installed the plugin and the conflist there.
    steps.step("the DaemonSet ready on both nodes", || {
        let status = daemonset_status(&vbox);
        assert_eq!(status["desiredNumberScheduled"], 2, "{status}");
        assert_eq!(status["numberReady"], 2, "{status}");
        for i in 1..=2 {
            let node = vbox.node(i);
            assert_eq!(node.ipamd_pid, None, "the box started an ipamd itself");
            assert!(
                node_path(&vbox, i, CONFLIST).is_file(),
                "node {i}: no conflist"
            );
            // It reads the cluster from inside the pod (TLS to the API server included).
            testkit::wait_ok(EVENT, "ipamd answered by the API server", || {
                let cluster = &node.get_json(&format!("{INTROSPECT}/v1/pool"))["Cluster"];
                (cluster["Api"] == "answering")
                    .then_some(())
                    .ok_or_else(|| cluster.to_string())
            });
        }
    });
    steps.step("the installed plugin runs in an empty root", || {
        runs_in_an_empty_root(&node_path(&vbox, 1, PLUGIN));
    });

    // A Deployment's pods get VPC addresses and reach each other across the nodes. What the
    // later steps need of them: their addresses, and a pod on node 1 (`a`) that pings one on
    // node 2 (`b`, its address).
    let up = steps.step("pods addressed and reaching each other", || {
        vbox.apply(&deployment(APP, 4, None));
        let pods = vbox.wait_running(&selector, 4, PODS_UP);
        let before = addresses(&pods);
        let k8s1 = vbox.node(1).k8s_node.clone().expect("a Kubernetes node");
        let (on1, on2): (Vec<&Value>, Vec<&Value>) =
            pods.iter().partition(|p| p["spec"]["nodeName"] == k8s1);
        let (a, b) = (pod_name(on1[0]), pod_ip(on2[0]));
        assert!(vbox.pings(a, b), "{a} -> {b}");
        assert!(vbox.pings(pod_name(on2[0]), pod_ip(on1[0])), "back");
        every_address_accounted_for(&vbox, &pods);
        (before, a.to_string(), b)
    });

    // A NodePort Service over the Deployment's pods, through kube-proxy: each pod answers
    // with its name. What the roll step asks of it from outside the VPC, through node 1.
    let service = steps.step_with(
        "a NodePort Service answering from outside",
        up.as_ref(),
        |(before, _, _)| {
            for name in before.keys() {
                let listen = format!("nc -ll -p 8080 -e echo {name} >/dev/null 2>&1 &");
                vbox.kubectl_ok(&["exec", name, "--", "sh", "-c", &listen]);
            }
            vbox.apply(&json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "roll", "namespace": "default"},
                "spec": {
                    "type": "NodePort",
                    "selector": {"app": APP},
                    "ports": [{"port": 80, "targetPort": 8080, "nodePort": NODE_PORT}]
                }
            }));
            let url = format!("http://{}:{NODE_PORT}/", vbox.node(1).primary_ip);
            let names: BTreeSet<String> = before.keys().cloned().collect();
            testkit::wait_ok(SERVICE_UP, "the NodePort answering", || {
                ask_service(&vbox, &url, &names)
            });
            (url, names)
        },
    );

    // `ipamd doctor`, run in the node's DaemonSet pod as an operator runs it (its /host
    // mounts, the pod's environment), finds the serving node healthy.
    steps.step("ipamd doctor finds the node healthy", || {
        let (code, stdout) = vbox.doctor(1, &["--json"]);
        let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!("ipamd doctor --json (exit {code}) printed no JSON ({e}): {stdout}")
        });
        let problems: Vec<&Value> = report["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| !matches!(f["severity"].as_str(), Some("ok" | "info")))
            .collect();
        assert_eq!(
            (code, report["verdict"].as_str()),
            (0, Some("healthy")),
            "{}: {problems:#?}",
            report["summary"]
        );
    });

    // Rolled to a new tag while `a` pings `b` every 100 ms.
    steps.step_with(
        "rolled to a new tag under pings",
        up.as_ref(),
        |(before, a, b)| {
            let conflist = inode(&node_path(&vbox, 1, CONFLIST));
            let plugin = inode(&node_path(&vbox, 1, PLUGIN));
            let plugin_bytes = std::fs::read(node_path(&vbox, 1, PLUGIN)).expect("the plugin");
            let old: BTreeSet<String> = daemonset_pods(&vbox).into_iter().map(|p| p.0).collect();
            let next = retagged_image("e2e-next");
            vbox.load_image(&next);
            let deadline = PING_SECS.to_string();
            let target = b.to_string();
            // Pings until PING_STOP exists (or the deadline), then SIGINT for the statistics.
            let pinging = format!(
                "rm -f {PING_STOP}; ping -i 0.1 -w {deadline} {target} & p=$!; \
                 while [ ! -e {PING_STOP} ] && kill -0 $p 2>/dev/null; do sleep 0.2; done; \
                 kill -INT $p 2>/dev/null; wait $p"
            );
            let rolling = AtomicBool::new(true);
            let (ping, rolled, pinged, asked) = std::thread::scope(|s| {
                let started = Instant::now();
                let pinger = s.spawn(|| {
                    // Bounded above the pings' own deadline, so they always end by themselves.
                    vbox.kubectl_bounded(
                        PING_SECS as u32 + 30,
                        &["exec", a, "--", "sh", "-c", &pinging],
                        None,
                    )
                });
                // The Service asked from outside, over and over, while the pings go on.
                let asker = s.spawn(|| {
                    let mut results = Vec::new();
                    if let Some((url, names)) = service.as_ref() {
                        while rolling.load(Ordering::SeqCst) && results.len() < MAX_ASKS {
                            results.push(ask_service(&vbox, url, names));
                            std::thread::sleep(ASK_EVERY);
                        }
                    }
                    results
                });
                vbox.deploy("e2e-next");
                let rolled = started.elapsed();
                std::thread::sleep(PING_AFTER);
                vbox.kubectl_ok(&["exec", a, "--", "touch", PING_STOP]);
                rolling.store(false, Ordering::SeqCst);
                let ping = pinger.join().expect("the pinging thread");
                let asked = asker.join().expect("the asking thread");
                (ping, rolled, started.elapsed(), asked)
            });
            if service.is_some() {
                let failed: Vec<&String> = asked.iter().filter_map(|r| r.as_ref().err()).collect();
                eprintln!(
                    "the NodePort asked {} times during the roll, {} unanswered",
                    asked.len(),
                    failed.len()
                );
                assert!(
                    asked.len() >= 10,
                    "too few requests to tell: {}",
                    asked.len()
                );
                assert!(
                    failed.is_empty(),
                    "Service requests unanswered during the roll: {failed:?}"
                );
            }
            assert!(
                rolled < Duration::from_secs(PING_SECS),
                "the rollout took {rolled:?}, longer than the pings ({PING_SECS} s) cover"
            );
            let output = String::from_utf8_lossy(&ping.stdout);
            let (sent, received) = ping_counts(&output);
            eprintln!(
                "rollout in {:.1} s; {sent} pings sent, {received} answered",
                rolled.as_secs_f64()
            );
            // Ten a second while they ran; half of that is plenty to tell.
            assert!(
                sent >= pinged.as_secs() * 5,
                "too few pings to tell in {pinged:?}: {output}"
            );
            assert_eq!(received, sent, "pings lost during the roll: {output}");
            let now = daemonset_pods(&vbox);
            assert_eq!(now.len(), 2, "{now:?}");
            for (uid, node, image) in &now {
                assert!(!old.contains(uid), "{node}'s pod was not replaced");
                assert_eq!(image, "localhost/vpc-cni:e2e-next");
            }
            assert_eq!(
                inode(&node_path(&vbox, 1, CONFLIST)),
                conflist,
                "the unchanged conflist was rewritten"
            );
            assert_ne!(
                inode(&node_path(&vbox, 1, PLUGIN)),
                plugin,
                "plugin not replaced"
            );
            assert_eq!(
                std::fs::read(node_path(&vbox, 1, PLUGIN)).expect("the plugin"),
                plugin_bytes
            );
            let pods = vbox.wait_running(&selector, 4, PODS_UP);
            assert_eq!(
                &addresses(&pods),
                before,
                "a pod's address changed in the roll"
            );
        },
    );

    // Pods created after the roll are wired too.
    let after = steps.step_with(
        "pods created after the roll wired",
        up.as_ref(),
        |(before, _, b)| {
            vbox.kubectl_ok(&["scale", "deployment", APP, "--replicas=6"]);
            let pods = vbox.wait_running(&selector, 6, PODS_UP);
            let after = addresses(&pods);
            let new: Vec<&String> = after.keys().filter(|n| !before.contains_key(*n)).collect();
            assert_eq!(new.len(), 2, "{after:?}");
            for name in new {
                assert!(vbox.pings(name, *b), "new pod {name} -> {b}");
            }
            every_address_accounted_for(&vbox, &pods);
            after
        },
    );

    // Deleted: the running pods keep their traffic, a new pod's ADD names the missing socket.
    // (Applying it again waits for the 7 pods this step asks for: skipped when it failed.)
    let deleted = steps.step_with(
        "deleted: pods keep their traffic, a new ADD names the socket",
        up.as_ref().zip(after.as_ref()),
        |((_, a, b), after)| {
            vbox.kubectl_ok(&["delete", "daemonset", "vpc-cni", "-n", "kube-system"]);
            testkit::wait_until(EVENT, "the DaemonSet's pods gone", || {
                daemonset_pods(&vbox).is_empty()
            });
            assert!(vbox.pings(a, *b), "{a} -> {b} without the DaemonSet");
            vbox.kubectl_ok(&["scale", "deployment", APP, "--replicas=7"]);
            let waiting = testkit::wait_ok(EVENT, "a pod waiting for its sandbox", || {
                vbox.pods(&selector)
                    .into_iter()
                    .find(|p| !after.contains_key(pod_name(p)))
                    .map(|p| pod_name(&p).to_string())
                    .ok_or("no new pod yet")
            });
            testkit::wait_until(EVENT, "the sandbox error naming ipamd's socket", || {
                vbox.events_of(&waiting)
                    .iter()
                    .any(|m| m.contains("ipamd is not reachable at /run/vpc-cni/ipamd.sock"))
            });
        },
    );

    // Applied again: the waiting pod starts, and every address is accounted for.
    steps.step_with(
        "applied again: every address accounted for",
        deleted.and(after),
        |after| {
            vbox.deploy("e2e-next");
            let pods = vbox.wait_running(&selector, 7, PODS_UP);
            let last = addresses(&pods);
            for (name, ip) in &after {
                assert_eq!(last.get(name), Some(ip), "{name} changed address");
            }
            every_address_accounted_for(&vbox, &pods);
        },
    );

    steps.step("ipamd's and the plugin's logs rotated", || {
        let logs = node_path(&vbox, 1, "/var/log/aws-routed-eni");
        rotated(&logs, "ipamd.log", 2 * 1024, 2);
        rotated(&logs, "plugin.log", 2 * 1024, 2);
    });

    steps.finish();
}
