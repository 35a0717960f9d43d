//! What a CNI plugin printed and did: its outcome, its ADD result, and the node's state.

use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::netns::ip_in;

/// A network config for our plugin (`type: vpc-cni`) named `name`, with `extra` keys added.
pub fn conf(name: &str, version: &str, socket: &str, extra: Value) -> String {
    let mut conf = json!({
        "cniVersion": version,
        "name": name,
        "type": "vpc-cni",
        "ipamdSocket": socket,
    });
    for (k, v) in extra.as_object().expect("extra keys as an object") {
        conf[k] = v.clone();
    }
    conf.to_string()
}

/// What one plugin invocation did.
#[derive(Debug)]
pub struct Outcome {
    /// Exit code.
    pub code: i32,
    /// Standard output: nothing, or the result or error as one JSON object.
    pub stdout: String,
    /// Standard error (the plugin logs there without pluginLogFile).
    pub stderr: String,
}

impl Outcome {
    /// The outcome of a finished plugin process, whose stdout must be clean (see
    /// [`Outcome::assert_stdout_clean`]).
    pub fn from_output(out: Output) -> Outcome {
        let outcome = Outcome {
            code: out
                .status
                .code()
                .unwrap_or_else(|| panic!("the plugin was killed: {}", out.status)),
            stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        outcome.assert_stdout_clean();
        outcome
    }

    /// stdout is empty or exactly one JSON object on one line: nothing else may go there.
    pub fn assert_stdout_clean(&self) {
        if self.stdout.is_empty() {
            return;
        }
        assert!(
            self.stdout.ends_with('\n') && self.stdout.matches('\n').count() == 1,
            "stdout must be one JSON line: {:?}",
            self.stdout
        );
        let v: Value = serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout));
        assert!(v.is_object(), "stdout is not a JSON object: {v}");
    }

    /// Exit 0; returns stdout as JSON (`Null` when empty).
    pub fn ok(&self) -> Value {
        assert_eq!(self.code, 0, "expected success: {self:#?}");
        if self.stdout.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&self.stdout).expect("stdout was checked to be JSON")
        }
    }

    /// Exit 0 with nothing on stdout (DEL, CHECK, STATUS, GC).
    pub fn ok_silent(&self) {
        assert_eq!(self.ok(), Value::Null, "{self:#?}");
    }

    /// Exit 1 with a CNI error of `code` whose message contains `needle`; returns the error.
    pub fn error(&self, code: u64, needle: &str) -> Value {
        assert_eq!(self.code, 1, "expected failure: {self:#?}");
        let err: Value = serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("error is not JSON ({e}): {self:#?}"));
        assert_eq!(err["code"], code, "{err}\n{}", self.stderr);
        let msg = err["msg"].as_str().expect("msg is a string");
        assert!(msg.contains(needle), "{msg:?} lacks {needle:?}: {err}");
        err
    }
}

/// The pod address of an ADD result, without its /32 (which it must have).
pub fn pod_ip(result: &Value) -> String {
    let address = result["ips"][0]["address"]
        .as_str()
        .unwrap_or_else(|| panic!("no ips[0].address: {result}"));
    let (ip, len) = address.split_once('/').expect("a CIDR");
    assert_eq!(len, "32", "pods get a /32: {result}");
    ip.to_string()
}

/// The host veth of an ADD result: the interface without a sandbox.
pub fn host_veth(result: &Value) -> String {
    result["interfaces"]
        .as_array()
        .expect("interfaces")
        .iter()
        .find(|i| i.get("sandbox").is_none())
        .and_then(|i| i["name"].as_str())
        .unwrap_or_else(|| panic!("no host interface: {result}"))
        .to_string()
}

/// The result's IP points at `eth0` in the pod's namespace (containerd requires it).
pub fn assert_eth0_in(result: &Value, netns_path: &str) {
    let idx = result["ips"][0]["interface"]
        .as_u64()
        .unwrap_or_else(|| panic!("no ips[0].interface: {result}")) as usize;
    assert_eq!(result["interfaces"][idx]["name"], "eth0", "{result}");
    assert_eq!(result["interfaces"][idx]["sandbox"], netns_path, "{result}");
}

/// The node (namespace `node`) routes `pod_ip` to `veth`, with the prio-512 rule.
pub fn assert_host_wired(node: &str, pod_ip: &str, veth: &str) {
    let routes = ip_in(node, &["-4", "route", "show"]);
    let want = format!("{pod_ip} dev {veth} scope link");
    assert!(
        routes.iter().any(|l| l == &want),
        "{want} missing: {routes:?}"
    );
    let rules = ip_in(node, &["-4", "rule", "show"]);
    let want = format!("512: from all to {pod_ip} lookup main");
    assert!(
        rules.iter().any(|l| l == &want),
        "{want} missing: {rules:?}"
    );
}

/// How long a test waits for a pod's host veth to go after DEL: the kernel deletes it with the
/// pod's namespace; where the namespace stays, ipamd's sweep deletes it after two sweeps a
/// grace (3 s) apart.
pub const VETH_GONE_WAIT: Duration = Duration::from_secs(20);

/// The node (namespace `node`) has no route or rule of a pod: nothing reaches it any more.
pub fn assert_host_unrouted(node: &str, pod_ip: &str) {
    let routes = ip_in(node, &["-4", "route", "show", "table", "all"]);
    assert!(
        !routes.iter().any(|l| l.starts_with(&format!("{pod_ip} "))),
        "route to {pod_ip} left: {routes:?}"
    );
    let rules = ip_in(node, &["-4", "rule", "show"]);
    assert!(
        !rules
            .iter()
            .any(|l| l.split_whitespace().any(|w| w == pod_ip)),
        "rule for {pod_ip} left: {rules:?}"
    );
}

/// The node (namespace `node`) holds no veth, route or rule of a pod. The routes and rules
/// must be gone now; the veth within [`VETH_GONE_WAIT`].
pub fn assert_host_clean(node: &str, pod_ip: &str, veth: &str) {
    assert_host_unrouted(node, pod_ip);
    let deadline = Instant::now() + VETH_GONE_WAIT;
    loop {
        let links = ip_in(node, &["-o", "link", "show"]);
        if !links.iter().any(|l| l.contains(veth)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "host veth {veth} left after {VETH_GONE_WAIT:?}: {links:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(code: i32, stdout: &str) -> Outcome {
        Outcome {
            code,
            stdout: stdout.into(),
            stderr: String::new(),
        }
    }

    const RESULT: &str = r#"{"interfaces":[{"name":"eni1"},{"name":"eth0","sandbox":"/run/netns/p"}],"ips":[{"address":"10.0.0.5/32","interface":1}]}"#;

    #[test]
    fn an_add_result_is_read() {
        let result = outcome(0, &format!("{RESULT}\n")).ok();
        assert_eq!(pod_ip(&result), "10.0.0.5");
        assert_eq!(host_veth(&result), "eni1");
        assert_eth0_in(&result, "/run/netns/p");
    }

    #[test]
    fn an_error_is_checked_by_code_and_message() {
        let out = outcome(
            1,
            "{\"cniVersion\":\"1.0.0\",\"code\":7,\"msg\":\"bad mtu\"}\n",
        );
        assert_eq!(out.error(7, "mtu")["msg"], "bad mtu");
    }

    #[test]
    #[should_panic(expected = "stdout must be one JSON line")]
    fn anything_but_one_json_line_on_stdout_fails() {
        outcome(0, "log line\n{}\n").assert_stdout_clean();
    }

    #[test]
    fn extra_keys_extend_the_conf() {
        let conf: Value =
            serde_json::from_str(&conf("n", "1.0.0", "/s", json!({"mtu": 1}))).expect("JSON");
        assert_eq!(
            conf,
            json!({"cniVersion": "1.0.0", "name": "n", "type": "vpc-cni", "ipamdSocket": "/s", "mtu": 1})
        );
    }
}
