//! Pods behind a node, and the plugin run inside the node as a runtime on it runs it.

use serde_json::{Value, json};
pub use testkit::cni::Outcome;

use crate::{Node, bin_dir, run_bounded};

/// The network name of the tests' configs.
const NETWORK: &str = "vpc-cni";

/// A network config for the plugin.
pub fn conf(version: &str, socket: &str, extra: Value) -> String {
    testkit::cni::conf(NETWORK, version, socket, extra)
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
    /// Deletes the namespace when the pod goes.
    _netns: testkit::netns::Netns,
}

impl Pod {
    pub(crate) fn new(netns: String, name: String, container_id: String, node: Node) -> Pod {
        Pod {
            _netns: testkit::netns::Netns::named(netns.clone()),
            netns,
            name,
            container_id,
            node,
        }
    }

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

    /// ADD (cniVersion 1.1.0), which must succeed; its result.
    pub fn add(&self) -> Value {
        self.cni("ADD")
            .stdin(conf("1.1.0", &self.node.ipamd_socket, json!({})))
            .run()
            .ok()
    }

    /// DEL with the ADD's result as prevResult (cniVersion 1.1.0), as a runtime stops a pod;
    /// it must succeed.
    pub fn del(&self, result: &Value) {
        let stdin = conf(
            "1.1.0",
            &self.node.ipamd_socket,
            json!({ "prevResult": result }),
        );
        self.cni("DEL").stdin(stdin).run().ok_silent();
    }

    /// One ping from the node to `ip`, bounded.
    pub fn ping_from_node(&self, ip: &str) -> bool {
        testkit::netns::ping(&self.node.netns, ip)
    }
}

/// One plugin invocation inside a node's namespace, as a runtime on that node makes it.
pub struct Cni {
    netns: String,
    env: Vec<(String, String)>,
    stdin: Vec<u8>,
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
        Outcome::from_output(run_bounded(60, "ip", &args, Some(&self.stdin)))
    }
}
