//! The Kubernetes of a box made with `vpc-box.sh up --kube`: kubectl as the box's
//! administrator, the pods it reports, bounded waits on them, and what vpc-cni logged on a node.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::{Node, VpcBox, repo, run_bounded};

/// The bound on one kubectl call, `exec` included.
pub const KUBECTL_SECS: u32 = 60;
/// The bound on `vpc-box.sh up --kube`: the control plane, and every node Ready (about a
/// minute here; the kube cache is built by scripts/test.sh before any test runs).
pub const UP_KUBE_SECS: u32 = 300;

/// The `kube` object of the box JSON.
#[derive(Clone, Debug, Deserialize)]
pub struct Kube {
    /// The administrator's kubeconfig.
    pub kubeconfig: String,
    /// The control plane's network namespace, from which the API server is reached.
    pub netns: String,
    /// The kubectl binary.
    pub kubectl: String,
    /// The API server's URL.
    pub server: String,
    /// The Kubernetes version (`v1.20.2`).
    pub version: String,
}

/// One request vpc-cni logged on a node (its `Received CNI ... request` line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginCall {
    /// `add`, `del`, `check`, ...
    pub verb: String,
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_NETNS`, empty when the runtime sent none.
    pub netns: String,
}

/// What vpc-cni logged on a node: the requests it received, and its ERROR lines.
#[derive(Clone, Debug, Default)]
pub struct PluginLog {
    /// Every request, in order.
    pub calls: Vec<PluginCall>,
    /// The message of every ERROR line: a failed request logs one.
    pub errors: Vec<String>,
}

impl PluginLog {
    /// Reads the plugin's log file (JSON lines); no file means no request yet.
    pub fn read(path: &str) -> PluginLog {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let mut log = PluginLog::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let entry: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{path}: a line that is not JSON ({e}): {line}"));
            let message = entry["message"].as_str().unwrap_or_default();
            if entry["level"] == "ERROR" {
                log.errors.push(message.to_string());
            }
            if let Some(call) = parse_request(message) {
                log.calls.push(call);
            }
        }
        log
    }

    /// The requests with verb `verb`.
    pub fn with_verb<'a>(&'a self, verb: &'a str) -> impl Iterator<Item = &'a PluginCall> + 'a {
        self.calls.iter().filter(move |c| c.verb == verb)
    }
}

/// `Received CNI del request: ContainerID(x) Netns(y) IfName(eth0) Args(...)`.
fn parse_request(message: &str) -> Option<PluginCall> {
    let rest = message.strip_prefix("Received CNI ")?;
    let (verb, rest) = rest.split_once(" request: ")?;
    let field = |name: &str| {
        let start = rest.find(&format!("{name}("))? + name.len() + 1;
        let len = rest[start..].find(')')?;
        Some(rest[start..start + len].to_string())
    };
    Some(PluginCall {
        verb: verb.to_string(),
        container_id: field("ContainerID")?,
        netns: field("Netns")?,
    })
}

impl VpcBox {
    /// `vpc-box.sh up --kube --name <unique> <args>`: returns once every node is Ready.
    /// Fails naming what is missing when the kube cache has not been built (scripts/test.sh
    /// builds it; a test never does).
    pub fn up_kube(args: &[&str]) -> VpcBox {
        let script = repo().join("scripts/kube-build.sh");
        let check = run_bounded(
            30,
            script.to_str().expect("a UTF-8 path"),
            &["--check"],
            None,
        );
        assert!(
            check.status.success(),
            "{}",
            String::from_utf8_lossy(&check.stderr)
        );
        let mut all = vec!["--kube"];
        all.extend_from_slice(args);
        let vbox = VpcBox::up_bounded(UP_KUBE_SECS, &[], &all);
        assert!(
            vbox.info.kube.is_some(),
            "vpc-box up --kube printed no \"kube\" object"
        );
        vbox
    }

    /// `vpc-box.sh up --kube --ipamd daemonset --image IMAGE --name <unique> <args>`: returns
    /// once the DaemonSet has rolled out and every node is Ready.
    pub fn up_daemonset(image: &Path, args: &[&str]) -> VpcBox {
        let image = image.to_str().expect("a UTF-8 path");
        let mut all = vec!["--ipamd", "daemonset", "--image", image];
        all.extend_from_slice(args);
        VpcBox::up_kube(&all)
    }

    /// Loads an image archive on every node (`vpc-box.sh load-image`).
    pub fn load_image(&self, image: &Path) {
        self.script(&[
            "load-image",
            "--image",
            image.to_str().expect("a UTF-8 path"),
        ]);
    }

    /// Applies the DaemonSet with image `localhost/vpc-cni:TAG` and waits for its rollout
    /// (`vpc-box.sh deploy`, whose own wait is 180 s).
    pub fn deploy(&self, tag: &str) {
        self.script_bounded(240, &["deploy", "--tag", tag]);
    }

    /// The box's Kubernetes (made with [`VpcBox::up_kube`]).
    pub fn kube(&self) -> &Kube {
        self.info
            .kube
            .as_ref()
            .expect("the box runs Kubernetes (VpcBox::up_kube)")
    }

    /// kubectl `args` as the box's administrator, from the control plane's namespace, bounded
    /// by [`KUBECTL_SECS`].
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with_input(args, None)
    }

    /// [`VpcBox::kubectl`] with `stdin` on its standard input (`apply -f -`).
    pub fn kubectl_with_input(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        self.kubectl_bounded(KUBECTL_SECS, args, stdin)
    }

    /// [`VpcBox::kubectl_with_input`] bounded by `secs` instead: for a command meant to run
    /// longer (a long `exec`).
    pub fn kubectl_bounded(&self, secs: u32, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let kube = self.kube();
        let netns = format!("--net=/run/netns/{}", kube.netns);
        // The box's discovery cache, as vpc-box.sh's kubectl keeps it: never ~/.kube.
        let cache = self.run_dir().join("kube/cache");
        let mut all = vec![
            netns.as_str(),
            kube.kubectl.as_str(),
            "--kubeconfig",
            kube.kubeconfig.as_str(),
            "--cache-dir",
            cache.to_str().expect("a UTF-8 path"),
        ];
        all.extend_from_slice(args);
        run_bounded(secs, "nsenter", &all, stdin)
    }

    /// kubectl `args`, which must succeed; its standard output.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        checked(args, self.kubectl(args))
    }

    /// `kubectl apply -f -` of `manifest`, which must succeed.
    pub fn apply(&self, manifest: &Value) {
        let args = ["apply", "-f", "-"];
        let out = self.kubectl_with_input(&args, Some(manifest.to_string().as_bytes()));
        checked(&args, out);
    }

    /// The pods matching label `selector` (`kubectl get pods -l SELECTOR -o json`'s items).
    pub fn pods(&self, selector: &str) -> Vec<Value> {
        let json = self.kubectl_ok(&["get", "pods", "-l", selector, "-o", "json"]);
        let list: Value = serde_json::from_str(&json)
            .unwrap_or_else(|e| panic!("kubectl get pods printed no JSON ({e}): {json}"));
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// Waits, bounded by `timeout`, until exactly `n` pods match `selector`, each Running with
    /// an address and none being deleted; returns them.
    pub fn wait_running(&self, selector: &str, n: usize, timeout: Duration) -> Vec<Value> {
        let what = format!("{n} pods {selector} Running with an address");
        testkit::wait_ok(timeout, &what, || {
            let pods = self.pods(selector);
            let running = pods
                .iter()
                .filter(|p| {
                    p["status"]["phase"] == "Running"
                        && p["status"]["podIP"].is_string()
                        && p["metadata"]["deletionTimestamp"].is_null()
                })
                .count();
            if pods.len() == n && running == n {
                Ok(pods)
            } else {
                Err(format!(
                    "{running} of {} Running: {}",
                    pods.len(),
                    phases(&pods)
                ))
            }
        })
    }

    /// Waits, bounded by `timeout`, until no pod matches `selector`.
    pub fn wait_no_pods(&self, selector: &str, timeout: Duration) {
        testkit::wait_ok(timeout, &format!("no pod {selector} left"), || {
            let pods = self.pods(selector);
            if pods.is_empty() {
                Ok(())
            } else {
                Err(format!("{} left: {}", pods.len(), phases(&pods)))
            }
        });
    }

    /// The box node that is Kubernetes node `name`.
    pub fn k8s_node(&self, name: &str) -> &Node {
        self.info
            .nodes
            .iter()
            .find(|n| n.k8s_node.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no box node is Kubernetes node {name}"))
    }
}

impl Node {
    /// What vpc-cni logged on this node (a box made with `--kube`).
    pub fn plugin_log(&self) -> PluginLog {
        PluginLog::read(
            self.plugin_log
                .as_deref()
                .expect("the node runs a kubelet (VpcBox::up_kube)"),
        )
    }
}

fn checked(args: &[&str], out: Output) -> String {
    let argv: Vec<&str> = std::iter::once("kubectl")
        .chain(args.iter().copied())
        .collect();
    testkit::cmd::succeeded(&argv, out)
}

/// `name phase node` of each pod, for messages.
fn phases(pods: &[Value]) -> String {
    pods.iter()
        .map(|p| {
            format!(
                "{} {} {}",
                p["metadata"]["name"].as_str().unwrap_or("?"),
                p["status"]["phase"].as_str().unwrap_or("?"),
                p["spec"]["nodeName"].as_str().unwrap_or("-")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A Deployment of `replicas` sleeping busybox pods labelled `app=<name>`: all on Kubernetes
/// node `node`, or spread evenly over the nodes.
pub fn deployment(name: &str, replicas: usize, node: Option<&str>) -> Value {
    let placement = match node {
        Some(node) => json!({"nodeSelector": {"kubernetes.io/hostname": node}}),
        None => json!({"topologySpreadConstraints": [{
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": name}}
        }]}),
    };
    let mut spec = json!({
        // sleep, as PID 1, ignores SIGTERM: each pod would otherwise take the default 30 s
        // to go.
        "terminationGracePeriodSeconds": 1,
        "containers": [{
            "name": "box",
            "image": "localhost/busybox:box",
            "imagePullPolicy": "Never",
            "command": ["sleep", "3600"]
        }]
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), placement.as_object()) {
        spec.extend(extra.clone());
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}
        }
    })
}

/// A pod's address, as kubectl reports it.
pub fn pod_ip(pod: &Value) -> Ipv4Addr {
    pod["status"]["podIP"]
        .as_str()
        .and_then(|ip| ip.parse().ok())
        .unwrap_or_else(|| panic!("a pod without an address: {pod}"))
}

/// A pod's name.
pub fn pod_name(pod: &Value) -> &str {
    pod["metadata"]["name"].as_str().expect("a pod name")
}

impl VpcBox {
    /// `kubectl exec POD -- ping -c 1 -W 2 TARGET` succeeded.
    pub fn pings(&self, pod: &str, target: Ipv4Addr) -> bool {
        let target = target.to_string();
        self.kubectl(&["exec", pod, "--", "ping", "-c", "1", "-W", "2", &target])
            .status
            .success()
    }

    /// Every event message about `pod`.
    pub fn events_of(&self, pod: &str) -> Vec<String> {
        let selector = format!("involvedObject.name={pod}");
        let json = self.kubectl_ok(&["get", "events", "--field-selector", &selector, "-o", "json"]);
        let list: Value = serde_json::from_str(&json).expect("events as JSON");
        list["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|e| e["message"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The image archive scripts/image.sh built for this tree, which scripts/test.sh names in
/// `VPC_CNI_IMAGE`; a test never builds it (a release build takes minutes).
pub fn image_archive() -> PathBuf {
    let path = std::env::var_os("VPC_CNI_IMAGE").map(PathBuf::from).expect(
        "VPC_CNI_IMAGE names no image archive: build one with scripts/image.sh and set it (scripts/test.sh does)",
    );
    assert!(
        path.is_file(),
        "VPC_CNI_IMAGE={}: no such file",
        path.display()
    );
    path
}

/// The same image under another tag (`scripts/image.sh --tag TAG --skip-build`: the release
/// artifacts of `image_archive`, no build); its archive.
pub fn retagged_image(tag: &str) -> PathBuf {
    let script = repo().join("scripts/image.sh");
    let out = run_bounded(
        120,
        script.to_str().expect("a UTF-8 path"),
        &["--tag", tag, "--skip-build"],
        None,
    );
    let stdout = testkit::cmd::succeeded(&["scripts/image.sh", "--tag", tag], out);
    PathBuf::from(stdout.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_line_is_read_with_an_empty_netns_too() {
        let call = parse_request(
            "Received CNI del request: ContainerID(abc) Netns() IfName(eth0) \
             Args(K8S_POD_NAME=web-1;IgnoreUnknown=1)",
        )
        .expect("a request");
        assert_eq!(
            call,
            PluginCall {
                verb: "del".into(),
                container_id: "abc".into(),
                netns: String::new()
            }
        );
        assert_eq!(parse_request("ipamd released 10.0.0.5 of x"), None);
    }
}
