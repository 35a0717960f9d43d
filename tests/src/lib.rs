//! Harness for the end-to-end tests: VPC-in-a-box (scripts/vpc-box.sh) with the real binaries,
//! pod namespaces, and the plugin run inside a node the way a container runtime runs it.
//!
//! Every test that uses it needs root and is `#[ignore]`d; scripts/test.sh runs them as root.
//! Names are unique per process and test (pid + counter), and everything is removed on drop,
//! also when a test fails.

mod kube;
mod plugin;
mod settle;

use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicU32, Ordering};

use serde::Deserialize;
use serde_json::Value;

pub use kube::{
    KUBECTL_SECS, Kube, PluginCall, PluginLog, UP_KUBE_SECS, deployment, image_archive, pod_ip,
    pod_name, retagged_image,
};
pub use plugin::{Cni, Outcome, Pod, conf};
pub use settle::{CONTROLLER_PERIOD, SETTLE_TIMEOUT};
pub use testkit::cmd::{is_root, run_bounded};
pub use testkit::netns::ip;
pub use testkit::repo;

/// The attribute reason every test here carries.
pub const NEEDS_ROOT: &str = "needs root: run by scripts/test.sh as root";

/// ipamd's introspection endpoints, inside a node.
pub const INTROSPECT: &str = "http://127.0.0.1:61679";
/// ipamd's metrics, inside a node.
pub const METRICS: &str = "http://127.0.0.1:61678/metrics";

/// Where the built binaries are: `VPC_CNI_BIN_DIR`, else the target directory this test
/// binary was built into (`<target>/debug/deps/e2e-..` -> `<target>/debug`).
pub fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("VPC_CNI_BIN_DIR") {
        return dir.into();
    }
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf()
}

/// `scripts/vpc-box.sh <args>`, bounded to `secs`, run through `env <env>` so a test can give
/// it another environment (`VPC_CNI_BIN_DIR=...`, `-u VPC_CNI_BIN_DIR`).
pub fn vpc_box(secs: u32, env: &[&str], args: &[&str]) -> Output {
    let script = repo().join("scripts/vpc-box.sh");
    let mut all = env.to_vec();
    all.push(script.to_str().expect("a UTF-8 path"));
    all.extend_from_slice(args);
    run_bounded(secs, "env", &all, None)
}

/// One node of the box, as vpc-box.sh describes it.
#[derive(Clone, Debug, Deserialize)]
pub struct Node {
    /// Its network namespace.
    pub netns: String,
    /// EC2 instance id.
    pub instance_id: String,
    /// Instance type.
    pub instance_type: String,
    /// Primary address.
    pub primary_ip: Ipv4Addr,
    /// Primary IPv6 address (`--ip-family ipv6|dual`).
    #[serde(default)]
    pub primary_ipv6: Option<std::net::Ipv6Addr>,
    /// Primary ENI id.
    pub primary_eni: String,
    /// The subnet of its primary ENI.
    pub subnet_id: String,
    /// ipamd's socket.
    pub ipamd_socket: String,
    /// ipamd's state directory.
    pub state_dir: String,
    /// ipamd's log.
    pub ipamd_log: String,
    /// ipamd's pid when the box came up; `None` when the DaemonSet runs it.
    pub ipamd_pid: Option<u32>,
    /// Where ipamd looks for aws-node's checkpoint (AWS_VPC_K8S_CNI_BACKING_STORE).
    pub go_checkpoint: String,
    /// ipamd's environment, one KEY=VALUE per line; `None` when the DaemonSet runs it.
    pub ipamd_env: Option<String>,
    /// Its Kubernetes node name, the instance's private DNS name (a box made with `--kube`).
    #[serde(default)]
    pub k8s_node: Option<String>,
    /// The node's CNI conf dir (its /etc/cni/net.d), on the machine: `up` puts the shipped
    /// conflist there, pointed at the node's ipamd and plugin log (the DaemonSet's installer
    /// does with `--ipamd daemonset`).
    pub cni_conf_dir: String,
    /// The node's CNI bin dir (its /opt/cni/bin), on the machine: vpc-cni and the plugins the
    /// conflist chains.
    pub cni_bin_dir: String,
    /// vpc-cni's log file, as the node's conflist names it, on the machine.
    #[serde(default)]
    pub plugin_log: Option<String>,
    /// kubelet's output (`--kube`).
    #[serde(default)]
    pub kubelet_log: Option<String>,
    /// containerd's output (`--kube`).
    #[serde(default)]
    pub containerd_log: Option<String>,
}

impl Node {
    /// GET `url` from inside the node (where ipamd's HTTP endpoints listen): the HTTP status
    /// and the body.
    pub fn get(&self, url: &str) -> (u16, String) {
        let (host, path) = testkit::http::split_url(url);
        let stream = testkit::netns::connect_in(&self.netns, &testkit::http::with_port(host));
        testkit::http::exchange(stream, "GET", host, path, &[], "")
    }

    /// GET `url` from inside the node, expecting 200 and JSON.
    pub fn get_json(&self, url: &str) -> Value {
        let (code, body) = self.get(url);
        assert_eq!(code, 200, "{url}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url} is not JSON ({e}): {body}"))
    }

    /// The network config a runtime on the node gives vpc-cni: the first plugin of the
    /// conflist `up` put in the node's conf dir, with the list's `cniVersion` and `name`.
    pub fn network_conf(&self) -> String {
        let path = Path::new(&self.cni_conf_dir).join("10-vpc-cni.conflist");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let list: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not JSON ({e}): {text}", path.display()));
        let mut conf = list["plugins"][0].clone();
        assert!(conf.is_object(), "{} has no plugin: {text}", path.display());
        conf["cniVersion"] = list["cniVersion"].clone();
        conf["name"] = list["name"].clone();
        conf.to_string()
    }
}

/// A subnet of the box.
#[derive(Clone, Debug, Deserialize)]
pub struct Subnet {
    /// `subnet-...`.
    pub id: String,
    /// Its CIDR.
    pub cidr: String,
}

impl Subnet {
    /// Whether `ip` is in the subnet.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let (net, len) = self.cidr.split_once('/').expect("a CIDR");
        let net: Ipv4Addr = net.parse().expect("a CIDR's address");
        let len: u32 = len.parse().expect("a CIDR's prefix length");
        let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
        u32::from(ip) & mask == u32::from(net) & mask
    }
}

/// A security group of the box (`--security-group NAME`, and the VPC's default).
#[derive(Clone, Debug, Deserialize)]
pub struct SecurityGroup {
    /// `sg-...`.
    pub id: String,
    /// Its name.
    pub name: String,
}

/// The address beyond the VPC, for SNAT tests.
#[derive(Clone, Debug, Deserialize)]
pub struct Outside {
    /// Its namespace.
    pub netns: String,
    /// Its address, outside the VPC CIDR.
    pub ip: Ipv4Addr,
    /// Its IPv6 address, outside the VPC's /56 (`--ip-family ipv6|dual`).
    #[serde(default)]
    pub ipv6: Option<std::net::Ipv6Addr>,
}

#[derive(Debug, Deserialize)]
struct BoxInfo {
    name: String,
    ec2_endpoint: String,
    run_dir: String,
    subnets: Vec<Subnet>,
    #[serde(default)]
    security_groups: Vec<SecurityGroup>,
    nodes: Vec<Node>,
    outside: Option<Outside>,
    #[serde(default)]
    kube: Option<Kube>,
}

/// A running VPC-in-a-box, taken down on drop.
pub struct VpcBox {
    info: BoxInfo,
    pods: AtomicU32,
}

impl VpcBox {
    /// `vpc-box.sh up --name <unique> <args>`.
    pub fn up(args: &[&str]) -> VpcBox {
        VpcBox::up_with_env(&[], args)
    }

    /// [`VpcBox::up`] with `env` for the script (see [`vpc_box`]).
    pub fn up_with_env(env: &[&str], args: &[&str]) -> VpcBox {
        VpcBox::up_bounded(120, env, args)
    }

    /// [`VpcBox::up_with_env`], bounded by `secs`.
    fn up_bounded(secs: u32, env: &[&str], args: &[&str]) -> VpcBox {
        let name = testkit::unique("e");
        let mut all = vec!["up", "--name", name.as_str()];
        all.extend_from_slice(args);
        let out = vpc_box(secs, env, &all);
        assert!(
            out.status.success(),
            "vpc-box up failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let info: BoxInfo = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "vpc-box printed no box JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        assert_eq!(info.name, name);
        assert!(
            info.ec2_endpoint.starts_with("http://127.0.0.1:"),
            "{}",
            info.ec2_endpoint
        );
        VpcBox {
            info,
            pods: AtomicU32::new(0),
        }
    }

    /// The box's name.
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// Where vpc-box.sh keeps the box's state.
    pub fn run_dir(&self) -> &Path {
        Path::new(&self.info.run_dir)
    }

    /// Node `i` (1-based).
    pub fn node(&self, i: usize) -> &Node {
        &self.info.nodes[i - 1]
    }

    /// The nodes' subnet.
    pub fn subnet(&self) -> &Subnet {
        &self.info.subnets[0]
    }

    /// The box's subnet with CIDR `cidr` (`--subnet`).
    pub fn subnet_with(&self, cidr: &str) -> &Subnet {
        self.info
            .subnets
            .iter()
            .find(|s| s.cidr == cidr)
            .unwrap_or_else(|| panic!("the box has no subnet {cidr}"))
    }

    /// The id of the box's security group named `name` (`--security-group`).
    pub fn security_group(&self, name: &str) -> &str {
        self.info
            .security_groups
            .iter()
            .find(|g| g.name == name)
            .map(|g| g.id.as_str())
            .unwrap_or_else(|| panic!("the box has no security group {name}"))
    }

    /// The pid of the process the box recorded with role `role` (`<run dir>/processes`, one
    /// `PID START ROLE PROGRAM` a line).
    pub fn recorded_pid(&self, role: &str) -> u32 {
        let record = std::fs::read_to_string(self.run_dir().join("processes"))
            .expect("the box's process record");
        record
            .lines()
            .find_map(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                (fields.get(2) == Some(&role)).then(|| fields[0].parse().ok())?
            })
            .unwrap_or_else(|| panic!("no process {role} in the box's record:\n{record}"))
    }

    /// Makes the outside count the packets it receives from each of `sources` (an iptables
    /// rule per source in its namespace), for [`VpcBox::outside_seen_from`].
    pub fn watch_outside_sources(&self, sources: &[&str]) {
        let ns = &self.outside().netns;
        for src in sources {
            let rule = [
                "netns", "exec", ns, "iptables", "-w", "-I", "INPUT", "-s", src, "-p", "icmp",
                "-j", "ACCEPT",
            ];
            let out = run_bounded(10, "ip", &rule, None);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// Packets from `src` the outside received, as counted since
    /// [`VpcBox::watch_outside_sources`].
    pub fn outside_seen_from(&self, src: &str) -> u64 {
        let ns = &self.outside().netns;
        let listing = run_bounded(
            10,
            "ip",
            &["netns", "exec", ns, "iptables", "-w", "-nvxL", "INPUT"],
            None,
        );
        String::from_utf8_lossy(&listing.stdout)
            .lines()
            .find(|l| l.split_whitespace().nth(7) == Some(src))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    /// The outside address.
    pub fn outside(&self) -> &Outside {
        self.info
            .outside
            .as_ref()
            .expect("the box has an outside namespace")
    }

    /// One HTTP GET of `url` from the outside namespace (beyond the VPC), answered within
    /// `seconds` or failed. HTTP/0.9 is taken: the tests' listeners (busybox `nc -e echo`)
    /// answer with a bare line.
    pub fn get_from_outside(&self, url: &str, seconds: u32) -> std::process::Output {
        let limit = seconds.to_string();
        run_bounded(
            seconds + 10,
            "ip",
            &[
                "netns",
                "exec",
                &self.outside().netns,
                "curl",
                "-s",
                "-m",
                &limit,
                "--http0.9",
                url,
            ],
            None,
        )
    }

    /// One request to vpc-sim's EC2 endpoint (in the machine's namespace, on loopback).
    fn sim_http(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let (host, _) = testkit::http::split_url(&self.info.ec2_endpoint);
        let stream = TcpStream::connect(host).expect("connecting to vpc-sim");
        let form = [("Content-Type", "application/x-www-form-urlencoded")];
        testkit::http::exchange(stream, method, host, path, &form, body)
    }

    /// vpc-sim's JSON answer to `method path`, which must succeed.
    fn sim_json(&self, method: &str, path: &str, body: &str) -> Value {
        let (status, body) = self.sim_http(method, path, body);
        assert_eq!(status, 200, "{method} {path}: {body}");
        serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{method} {path} is not JSON ({e}): {body}"))
    }

    /// One EC2 Query API call on the root-namespace endpoint (vpc-sim does not check
    /// signatures); returns the HTTP status and the XML body.
    pub fn ec2(&self, params: &[(&str, &str)]) -> (u16, String) {
        let mut form = String::from("Version=2016-11-15");
        for (k, v) in params {
            form.push_str(&format!("&{}={}", urlencode(k), urlencode(v)));
        }
        self.sim_http("POST", "/", &form)
    }

    /// vpc-sim's whole model as JSON (`GET /_sim/state`).
    pub fn sim_state(&self) -> Value {
        self.sim_json("GET", "/_sim/state", "")
    }

    /// EC2 requests vpc-sim has received so far, by action (`GET /_sim/calls`).
    pub fn sim_calls(&self) -> std::collections::BTreeMap<String, u64> {
        serde_json::from_value(self.sim_json("GET", "/_sim/calls", "")).expect("sim calls JSON")
    }

    /// Replaces vpc-sim's fault plan (`PUT /_sim/faults`; `{}` turns faults off) and returns
    /// its report.
    pub fn set_faults(&self, plan: &Value) -> Value {
        self.sim_json("PUT", "/_sim/faults", &plan.to_string())
    }

    /// Scatters addresses owned by no node through `subnet`'s /28 blocks (`"all"`, `"none"`
    /// or a percentage: `PUT /_sim/fragment`), so prefixes find no free block there. Returns
    /// vpc-sim's report.
    pub fn set_fragment(&self, subnet: &str, fragment: Value) -> Value {
        let body = serde_json::json!({ "subnet": subnet, "fragment": fragment });
        self.sim_json("PUT", "/_sim/fragment", &body.to_string())
    }

    /// vpc-sim's fault report: the plan and the faults injected so far (`GET /_sim/faults`).
    pub fn faults(&self) -> Value {
        self.sim_json("GET", "/_sim/faults", "")
    }

    /// Replaces vpc-sim's IAM policy (`PUT /_sim/iam`): the EC2 actions named in
    /// `{"deny": [..]}` are answered 403 `UnauthorizedOperation`; `{}` allows everything.
    /// Returns its report.
    pub fn set_iam(&self, policy: &Value) -> Value {
        self.sim_json("PUT", "/_sim/iam", &policy.to_string())
    }

    /// vpc-sim's IAM report: the policy and the calls denied so far, in all and by action
    /// (`GET /_sim/iam`).
    pub fn iam(&self) -> Value {
        self.sim_json("GET", "/_sim/iam", "")
    }

    /// Freezes every node's IMDS as it is now (`true`: it goes stale while EC2 changes) or
    /// returns it to the live view (`PUT /_sim/imds`). Returns its report.
    pub fn set_imds_frozen(&self, frozen: bool) -> Value {
        self.sim_json(
            "PUT",
            "/_sim/imds",
            &serde_json::json!({ "frozen": frozen }).to_string(),
        )
    }

    /// Whether vpc-sim's IMDS is frozen and since when (`GET /_sim/imds`).
    pub fn imds_freeze(&self) -> Value {
        self.sim_json("GET", "/_sim/imds", "")
    }

    /// What ipamd on node `i` holds for an attachment.
    pub fn allocation(&self, i: usize, key: ipam_proto::AttachmentKey) -> ipam_proto::Allocation {
        ipam_proto::Client::new(&self.node(i).ipamd_socket)
            .check(ipam_proto::CheckRequest { key })
            .expect("ipamd check")
            .allocation
    }

    fn script(&self, args: &[&str]) -> String {
        // Above start-ipamd's own 60 s wait for readiness, so that one reports.
        self.script_bounded(90, args)
    }

    fn script_bounded(&self, secs: u32, args: &[&str]) -> String {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--name", self.name()]);
        let out = vpc_box(secs, &[], &all);
        assert!(
            out.status.success(),
            "vpc-box {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Stops node `i`'s ipamd: SIGKILL when `kill`, else SIGTERM.
    pub fn stop_ipamd(&self, i: usize, kill: bool) {
        let node = i.to_string();
        let mut args = vec!["stop-ipamd", "--node", node.as_str()];
        if kill {
            args.push("--kill");
        }
        self.script(&args);
    }

    /// Starts node `i`'s ipamd again and waits until it is ready; returns its pid.
    pub fn start_ipamd(&self, i: usize) -> u32 {
        let node = i.to_string();
        self.script(&["start-ipamd", "--node", node.as_str()])
            .parse()
            .expect("start-ipamd prints the pid")
    }

    /// `vpc-box.sh doctor --node <i> -- <args>` (`ipamd doctor` on node `i`): its exit code
    /// and standard output. Its standard error goes to the test's.
    pub fn doctor(&self, i: usize, args: &[&str]) -> (i32, String) {
        let node = i.to_string();
        let mut all = vec![
            "doctor",
            "--name",
            self.name(),
            "--node",
            node.as_str(),
            "--",
        ];
        all.extend_from_slice(args);
        let out = vpc_box(120, &[], &all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !stderr.is_empty() {
            eprintln!("ipamd doctor {args:?} on node {i}, stderr:\n{stderr}");
        }
        let code = out
            .status
            .code()
            .unwrap_or_else(|| panic!("vpc-box doctor was killed: {}", out.status));
        // coreutils `timeout` exits 124 when it had to stop the command.
        assert_ne!(code, 124, "ipamd doctor did not finish within 120 s");
        (code, String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// ipamd's STATUS on node `i`, asked directly on its socket.
    pub fn status(&self, i: usize) -> ipam_proto::StatusReply {
        ipam_proto::Client::new(&self.node(i).ipamd_socket)
            .status()
            .expect("ipamd status")
    }

    /// A new pod namespace behind node `node`.
    pub fn pod(&self, node: usize) -> Pod {
        let k = self.pods.fetch_add(1, Ordering::SeqCst);
        Pod::new(
            format!("{}-p{k}", self.name()),
            format!("pod{k}"),
            format!("ctr{k}{}", self.name().replace('-', "")),
            self.node(node).clone(),
        )
    }

    /// `n` new pods behind node `node`, each ADDed (cniVersion 1.1.0); with their results.
    pub fn add_pods(&self, node: usize, n: usize) -> (Vec<Pod>, Vec<Value>) {
        let pods: Vec<Pod> = (0..n).map(|_| self.pod(node)).collect();
        let results = pods.iter().map(Pod::add).collect();
        (pods, results)
    }

    /// `vpc-box.sh down` with `env` for the script (see [`vpc_box`]).
    pub fn down_with_env(&self, env: &[&str]) -> Output {
        // Kubernetes adds a kubelet, containerd and pods per node, and a control plane.
        let secs = if self.info.kube.is_some() { 180 } else { 60 };
        vpc_box(secs, env, &["down", "--name", self.name()])
    }
}

impl Drop for VpcBox {
    fn drop(&mut self) {
        let out = self.down_with_env(&[]);
        if !out.status.success() {
            eprintln!(
                "vpc-box down failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Panics with a clear message when not root: these tests are ignored by default and only
/// meaningful as root, so running them otherwise must fail loudly, never pass.
pub fn require_root() {
    assert!(is_root(), "{NEEDS_ROOT}");
}
