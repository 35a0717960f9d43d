//! Runs the real `vpc-cni` binary with a CNI environment and stdin, as a runtime would.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;
pub use testkit::cni::Outcome;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_vpc-cni");

/// The network name every test conf uses.
pub const NETWORK: &str = "aws-cni";

/// A request config for our plugin.
pub fn conf(version: &str, socket: &str, extra: Value) -> String {
    testkit::cni::conf(NETWORK, version, socket, extra)
}

/// One invocation of the plugin.
pub struct Call {
    vars: BTreeMap<String, String>,
    stdin: Vec<u8>,
    node: Option<String>,
    cwd: Option<std::path::PathBuf>,
}

impl Call {
    /// `CNI_COMMAND` (and `CNI_PATH`, as runtimes always set it) only.
    pub fn new(command: &str) -> Self {
        let mut vars = BTreeMap::new();
        vars.insert("CNI_COMMAND".into(), command.into());
        vars.insert("CNI_PATH".into(), "/opt/cni/bin".into());
        Call {
            vars,
            stdin: Vec::new(),
            node: None,
            cwd: None,
        }
    }

    /// ADD/DEL/CHECK of `(container, ifname)`; an empty `netns` leaves `CNI_NETNS` unset.
    pub fn attachment(command: &str, container: &str, netns: &str, ifname: &str) -> Self {
        let call = Self::new(command)
            .var("CNI_CONTAINERID", container)
            .var("CNI_IFNAME", ifname);
        if netns.is_empty() {
            call
        } else {
            call.var("CNI_NETNS", netns)
        }
    }

    pub fn var(mut self, key: &str, value: &str) -> Self {
        self.vars.insert(key.into(), value.into());
        self
    }

    pub fn unset(mut self, key: &str) -> Self {
        self.vars.remove(key);
        self
    }

    /// Kubernetes pod args, as containerd sends them.
    pub fn pod(self, namespace: &str, name: &str) -> Self {
        let args = format!(
            "K8S_POD_INFRA_CONTAINER_ID=infra;K8S_POD_UID=uid-1;IgnoreUnknown=1;\
             K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name}"
        );
        self.var("CNI_ARGS", &args)
    }

    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.stdin = data.into();
        self
    }

    /// The working directory the plugin runs in.
    pub fn cwd(mut self, dir: &std::path::Path) -> Self {
        self.cwd = Some(dir.to_path_buf());
        self
    }

    /// Runs the plugin with `ip netns exec <node>`, so the node namespace is its own.
    pub fn in_node(mut self, node: &str) -> Self {
        self.node = Some(node.into());
        self
    }

    pub fn run(self) -> Outcome {
        let mut cmd = match &self.node {
            None => Command::new(BIN),
            Some(node) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", node, BIN]);
                c
            }
        };
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        cmd.env_clear()
            .envs(&self.vars)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(path) = std::env::var_os("PATH") {
            // For `ip` itself; the plugin does not use PATH.
            cmd.env("PATH", path);
        }
        let mut child = cmd.spawn().expect("spawn vpc-cni");
        let mut stdin = child.stdin.take().expect("stdin");
        // The plugin may exit without reading (VERSION), like skel: ignore EPIPE.
        let _ = stdin.write_all(&self.stdin);
        drop(stdin);
        Outcome::from_output(child.wait_with_output().expect("wait for vpc-cni"))
    }
}
