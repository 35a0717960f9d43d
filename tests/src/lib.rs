//! Harness for the end-to-end tests: VPC-in-a-box (scripts/vpc-box.sh) with the real binaries,
//! pod namespaces, and the plugin run inside a node the way a container runtime runs it.
//!
//! Every test that uses it needs root and is `#[ignore]`d; scripts/test.sh runs them as root.
//! Names are unique per process and test (pid + counter), and everything is removed on drop,
//! also when a test fails.

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use serde::Deserialize;
use serde_json::{Value, json};

/// The attribute reason every test here carries.
pub const NEEDS_ROOT: &str = "needs root: run by scripts/test.sh as root";

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

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

/// The repository root.
pub fn repo() -> PathBuf {
    // Read at run time: clones share one target dir outside the tree, and cargo may reuse a
    // test binary built in another clone whose compile-time path no longer exists.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir.parent().expect("repo").to_path_buf()
}

/// Runs a command bounded to `secs` seconds (coreutils timeout), returning its output.
pub fn run_bounded(secs: u32, program: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.arg(secs.to_string()).arg(program).args(args);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {program}: {e}"));
    if let Some(data) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(data).expect("writing stdin");
    }
    child.wait_with_output().expect("waiting")
}

/// `ip <args>`, asserted to succeed; output lines with whitespace normalised.
pub fn ip(args: &[&str]) -> Vec<String> {
    let out = run_bounded(10, "ip", args, None);
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect()
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
    /// Primary ENI id.
    pub primary_eni: String,
    /// ipamd's socket.
    pub ipamd_socket: String,
    /// ipamd's state directory.
    pub state_dir: String,
    /// ipamd's log.
    pub ipamd_log: String,
    /// ipamd's pid when the box came up.
    pub ipamd_pid: u32,
    /// Where ipamd looks for aws-node's checkpoint (AWS_VPC_K8S_CNI_BACKING_STORE).
    pub go_checkpoint: String,
    /// ipamd's environment, one KEY=VALUE per line.
    pub ipamd_env: String,
}

impl Node {
    /// `curl` of `url` from inside the node (where ipamd's HTTP endpoints listen): the HTTP
    /// status and the body.
    pub fn get(&self, url: &str) -> (u16, String) {
        let out = run_bounded(
            15,
            "ip",
            &[
                "netns",
                "exec",
                &self.netns,
                "curl",
                "-sS",
                "--max-time",
                "10",
                "-w",
                "\n%{http_code}",
                url,
            ],
            None,
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "curl {url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (body, code) = text.rsplit_once('\n').expect("curl prints the status last");
        (code.trim().parse().expect("HTTP status"), body.to_string())
    }

    /// GET `url` from inside the node, expecting 200 and JSON.
    pub fn get_json(&self, url: &str) -> Value {
        let (code, body) = self.get(url);
        assert_eq!(code, 200, "{url}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url} is not JSON ({e}): {body}"))
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

/// The address beyond the VPC, for SNAT tests.
#[derive(Clone, Debug, Deserialize)]
pub struct Outside {
    /// Its namespace.
    pub netns: String,
    /// Its address, outside the VPC CIDR.
    pub ip: Ipv4Addr,
}

#[derive(Debug, Deserialize)]
struct BoxInfo {
    name: String,
    ec2_endpoint: String,
    subnets: Vec<Subnet>,
    nodes: Vec<Node>,
    outside: Option<Outside>,
}

/// A running VPC-in-a-box, taken down on drop.
pub struct VpcBox {
    info: BoxInfo,
    pods: AtomicU32,
}

impl VpcBox {
    /// `vpc-box.sh up --name <unique> <args>`.
    pub fn up(args: &[&str]) -> VpcBox {
        let name = unique("e");
        let script = repo().join("scripts/vpc-box.sh");
        let mut all = vec!["up", "--name", name.as_str()];
        all.extend_from_slice(args);
        let out = run_bounded(120, script.to_str().expect("path"), &all, None);
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

    /// Node `i` (1-based).
    pub fn node(&self, i: usize) -> &Node {
        &self.info.nodes[i - 1]
    }

    /// The nodes' subnet.
    pub fn subnet(&self) -> &Subnet {
        &self.info.subnets[0]
    }

    /// The outside address.
    pub fn outside(&self) -> &Outside {
        self.info
            .outside
            .as_ref()
            .expect("the box has an outside namespace")
    }

    /// One EC2 Query API call on the root-namespace endpoint (vpc-sim does not check
    /// signatures); returns the HTTP status and the XML body.
    pub fn ec2(&self, params: &[(&str, &str)]) -> (u16, String) {
        let mut form = String::from("Version=2016-11-15");
        for (k, v) in params {
            form.push_str(&format!("&{}={}", urlencode(k), urlencode(v)));
        }
        http(&self.info.ec2_endpoint, "POST", "/", &form)
    }

    /// vpc-sim's whole model as JSON (`GET /_sim/state`).
    pub fn sim_state(&self) -> Value {
        let (status, body) = http(&self.info.ec2_endpoint, "GET", "/_sim/state", "");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).expect("sim state JSON")
    }

    /// EC2 requests vpc-sim has received so far, by action (`GET /_sim/calls`).
    pub fn sim_calls(&self) -> std::collections::BTreeMap<String, u64> {
        let (status, body) = http(&self.info.ec2_endpoint, "GET", "/_sim/calls", "");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).expect("sim calls JSON")
    }

    /// Replaces vpc-sim's fault plan (`PUT /_sim/faults`; `{}` turns faults off) and returns
    /// its report.
    pub fn set_faults(&self, plan: &Value) -> Value {
        let (status, body) = http(
            &self.info.ec2_endpoint,
            "PUT",
            "/_sim/faults",
            &plan.to_string(),
        );
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).expect("fault report JSON")
    }

    /// vpc-sim's fault report: the plan and the faults injected so far (`GET /_sim/faults`).
    pub fn faults(&self) -> Value {
        let (status, body) = http(&self.info.ec2_endpoint, "GET", "/_sim/faults", "");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).expect("fault report JSON")
    }

    /// What ipamd on node `i` holds for an attachment.
    pub fn allocation(&self, i: usize, key: ipam_proto::AttachmentKey) -> ipam_proto::Allocation {
        ipam_proto::Client::new(&self.node(i).ipamd_socket)
            .check(ipam_proto::CheckRequest { key })
            .expect("ipamd check")
            .allocation
    }

    fn script(&self, args: &[&str]) -> String {
        let script = repo().join("scripts/vpc-box.sh");
        let mut all = args.to_vec();
        all.extend_from_slice(&["--name", self.name()]);
        let out = run_bounded(60, script.to_str().expect("path"), &all, None);
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

    /// ipamd's STATUS on node `i`, asked directly on its socket.
    pub fn status(&self, i: usize) -> ipam_proto::StatusReply {
        ipam_proto::Client::new(&self.node(i).ipamd_socket)
            .status()
            .expect("ipamd status")
    }

    /// A new pod namespace behind node `node`.
    pub fn pod(&self, node: usize) -> Pod {
        let k = self.pods.fetch_add(1, Ordering::SeqCst);
        let netns = format!("{}-p{k}", self.name());
        ip(&["netns", "add", &netns]);
        Pod {
            netns,
            name: format!("pod{k}"),
            container_id: format!("ctr{k}{}", self.name().replace('-', "")),
            node: self.node(node).clone(),
        }
    }
}

impl Drop for VpcBox {
    fn drop(&mut self) {
        let script = repo().join("scripts/vpc-box.sh");
        let out = run_bounded(
            60,
            script.to_str().unwrap_or("vpc-box.sh"),
            &["down", "--name", self.name()],
            None,
        );
        if !out.status.success() {
            eprintln!(
                "vpc-box down failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// A pod: a network namespace behind a node, and the identity the runtime gives it.
pub struct Pod {
    /// The netns name (under /run/netns).
    pub netns: String,
    /// K8S_POD_NAME (namespace is `default`).
    pub name: String,
    /// CNI_CONTAINERID.
    pub container_id: String,
    /// The node it is on.
    pub node: Node,
}

impl Pod {
    /// `/run/netns/<netns>`.
    pub fn netns_path(&self) -> String {
        format!("/run/netns/{}", self.netns)
    }

    /// The plugin call for this pod's eth0 attachment.
    pub fn cni(&self, verb: &str) -> Cni {
        Cni::new(verb, &self.node)
            .env("CNI_CONTAINERID", &self.container_id)
            .env("CNI_NETNS", &self.netns_path())
            .env("CNI_IFNAME", "eth0")
            .env(
                "CNI_ARGS",
                &format!(
                    "K8S_POD_INFRA_CONTAINER_ID={};IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={}",
                    self.container_id, self.name
                ),
            )
    }

    /// One ping from the node to `ip`, bounded.
    pub fn ping_from_node(&self, ip: &str) -> bool {
        run_bounded(
            5,
            "ip",
            &[
                "netns",
                "exec",
                &self.node.netns,
                "ping",
                "-c",
                "1",
                "-W",
                "2",
                ip,
            ],
            None,
        )
        .status
        .success()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = run_bounded(10, "ip", &["netns", "del", &self.netns], None);
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

/// A minimal HTTP/1.1 exchange (Connection: close), enough for vpc-sim's endpoints.
fn http(endpoint: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::Read;
    let host = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(host).expect("connecting to vpc-sim");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("sending");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("reading");
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // vpc-sim answers with a Content-Length body; chunked encoding would need decoding.
    (status, body.to_string())
}

/// A network config for the plugin.
pub fn conf(version: &str, socket: &str, extra: Value) -> String {
    let mut c = json!({
        "cniVersion": version,
        "name": "vpc-cni",
        "type": "vpc-cni",
        "ipamdSocket": socket,
    });
    if let (Some(map), Value::Object(extra)) = (c.as_object_mut(), extra) {
        map.extend(extra);
    }
    c.to_string()
}

/// One plugin invocation inside a node's namespace, as a runtime on that node makes it.
pub struct Cni {
    netns: String,
    env: Vec<(String, String)>,
    stdin: Vec<u8>,
}

/// What the plugin did.
#[derive(Debug)]
pub struct Outcome {
    /// Exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error (the plugin logs there without pluginLogFile).
    pub stderr: String,
}

impl Cni {
    /// `verb` on `node`.
    pub fn new(verb: &str, node: &Node) -> Cni {
        Cni {
            netns: node.netns.clone(),
            env: vec![
                ("CNI_COMMAND".into(), verb.into()),
                ("CNI_PATH".into(), bin_dir().display().to_string()),
            ],
            stdin: Vec::new(),
        }
    }

    /// Sets (or replaces) an environment variable.
    pub fn env(mut self, key: &str, value: &str) -> Cni {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.into(), value.into()));
        self
    }

    /// Removes an environment variable.
    pub fn unset(mut self, key: &str) -> Cni {
        self.env.retain(|(k, _)| k != key);
        self
    }

    /// The network config on stdin.
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Cni {
        self.stdin = data.into();
        self
    }

    /// Runs `ip netns exec <node> env -i <env> vpc-cni`.
    pub fn run(self) -> Outcome {
        let plugin = bin_dir().join("vpc-cni");
        let mut args: Vec<String> = vec![
            "netns".into(),
            "exec".into(),
            self.netns.clone(),
            "env".into(),
            "-i".into(),
        ];
        args.extend(self.env.iter().map(|(k, v)| format!("{k}={v}")));
        args.push(plugin.display().to_string());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run_bounded(60, "ip", &args, Some(&self.stdin));
        Outcome {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Outcome {
    /// Asserts success and returns the parsed result.
    pub fn ok(&self) -> Value {
        assert_eq!(
            self.code, 0,
            "plugin failed: {}\n{}",
            self.stdout, self.stderr
        );
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout))
    }

    /// Asserts success with nothing on stdout (DEL, CHECK, STATUS, GC).
    pub fn ok_silent(&self) {
        assert_eq!(
            self.code, 0,
            "plugin failed: {}\n{}",
            self.stdout, self.stderr
        );
        assert!(
            self.stdout.trim().is_empty(),
            "unexpected stdout: {}",
            self.stdout
        );
    }

    /// Asserts a CNI error with `code` whose message or details contain `needle`.
    pub fn error(&self, code: u64, needle: &str) -> Value {
        assert_eq!(
            self.code, 1,
            "expected failure, got {}: {}\n{}",
            self.code, self.stdout, self.stderr
        );
        let err: Value = serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("error is not JSON ({e}): {}", self.stdout));
        assert_eq!(err["code"].as_u64(), Some(code), "{err}");
        let text = format!(
            "{} {}",
            err["msg"].as_str().unwrap_or(""),
            err["details"].as_str().unwrap_or("")
        );
        assert!(
            text.contains(needle),
            "error does not mention {needle:?}: {err}"
        );
        err
    }
}

/// Whether the caller is root.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("Uid:")
                    .map(|u| u.split_whitespace().next() == Some("0"))
            })
        })
        .unwrap_or(false)
}

/// Panics with a clear message when not root: these tests are ignored by default and only
/// meaningful as root, so running them otherwise must fail loudly, never pass.
pub fn require_root() {
    assert!(is_root(), "{NEEDS_ROOT}");
}
