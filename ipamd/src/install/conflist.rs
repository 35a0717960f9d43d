//! The conflist the entrypoint installs: the shipped template with the `vpc-cni` entry's keys
//! set from the environment, checked by the same rules the plugin applies to its conf.

use std::path::Path;

use cni::settings::{DEFAULT_MTU, DEFAULT_VETH_PREFIX, SettingError, check_mtu, check_veth_prefix};
use logfile::{DEFAULT_MAX_FILES, DEFAULT_MAX_SIZE, parse_max_files, parse_size};
use serde_json::Value;

use super::InstallError;

/// The conflist's file name. It sorts after nothing we keep, and the Go CNI's
/// `10-aws.conflist` is retired by [`super::retire_go_cni_conflist`] because it would sort
/// first.
pub const CONFLIST_NAME: &str = "10-vpc-cni.conflist";

/// The Go CNI's conflist.
pub const GO_CNI_CONFLIST: &str = "10-aws.conflist";

/// What [`GO_CNI_CONFLIST`] is renamed to: libcni loads only `*.conf`, `*.conflist` and
/// `*.json`, so the runtime ignores it while an operator can still read or restore it.
pub const RETIRED_GO_CNI_CONFLIST: &str = "10-aws.conflist.replaced-by-vpc-cni";

/// The plugin `type` whose keys [`render_conflist`] sets.
pub const PLUGIN_TYPE: &str = "vpc-cni";

/// Default `AWS_VPC_K8S_PLUGIN_LOG_FILE`.
pub const DEFAULT_PLUGIN_LOG_FILE: &str = "/var/log/aws-routed-eni/plugin.log";

/// The values [`render_conflist`] puts into the `vpc-cni` plugin's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConflistSettings {
    /// `vethPrefix`, from `AWS_VPC_K8S_CNI_VETHPREFIX`.
    pub veth_prefix: String,
    /// `mtu` (written as a string, as the Go CNI does), from `POD_MTU` else `AWS_VPC_ENI_MTU`.
    pub mtu: u32,
    /// `pluginLogFile`, from `AWS_VPC_K8S_PLUGIN_LOG_FILE`; empty means stderr.
    pub plugin_log_file: String,
    /// `pluginLogLevel`, from `AWS_VPC_K8S_PLUGIN_LOG_LEVEL`.
    pub plugin_log_level: String,
    /// `pluginLogMaxSize` in bytes, from `AWS_VPC_K8S_PLUGIN_LOG_MAX_SIZE` (bytes, `Ki`, `Mi`
    /// or `Gi`).
    pub plugin_log_max_size: u64,
    /// `pluginLogMaxFiles`, from `AWS_VPC_K8S_PLUGIN_LOG_MAX_FILES`.
    pub plugin_log_max_files: u32,
    /// `ipamdSocket`, from `IPAMD_SOCKET` (the same variable ipamd listens on).
    pub ipamd_socket: String,
}

fn env_err(var: &'static str, value: &str, problem: impl Into<String>) -> InstallError {
    InstallError::Env {
        var,
        value: value.to_string(),
        problem: problem.into(),
    }
}

impl ConflistSettings {
    /// Reads the settings through `get` (the process environment in production). As in ipamd's
    /// configuration, values are trimmed and an empty value counts as unset, except for
    /// `AWS_VPC_K8S_PLUGIN_LOG_FILE`, where empty means stderr as in the Go CNI.
    ///
    /// Checks: the veth prefix and the MTU by the plugin's own rules ([`cni::settings`]; the
    /// Go CNI checks only the prefix's length and reserved names); the log file is not `stdout` (stdout
    /// carries the plugin's result) and is absolute (the runtime's working directory is
    /// unknown); `stderr` is written as empty, which is how the plugin spells stderr; the level
    /// is one the plugin knows (`FATAL` is written as `Error`, the plugin's highest); the log's
    /// size limit and kept files by [`logfile`]'s syntax, as ipamd reads its own; the socket
    /// is absolute.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, InstallError> {
        let raw = |var: &str| get(var).map(|v| v.trim().to_string());
        let set = |var: &str| raw(var).filter(|v| !v.is_empty());

        const VETH: &str = "AWS_VPC_K8S_CNI_VETHPREFIX";
        let veth_prefix = set(VETH).unwrap_or_else(|| DEFAULT_VETH_PREFIX.to_string());
        check_veth_prefix(&veth_prefix).map_err(|e| env_err(VETH, &veth_prefix, e.to_string()))?;

        let (mtu_var, mtu_value) = match set("POD_MTU") {
            Some(v) => ("POD_MTU", Some(v)),
            None => ("AWS_VPC_ENI_MTU", set("AWS_VPC_ENI_MTU")),
        };
        let mtu = match mtu_value {
            None => DEFAULT_MTU,
            Some(v) => v
                .parse::<u64>()
                .map_err(|_| SettingError::Mtu)
                .and_then(check_mtu)
                .map_err(|e| env_err(mtu_var, &v, e.to_string()))?,
        };

        const LOG_FILE: &str = "AWS_VPC_K8S_PLUGIN_LOG_FILE";
        let plugin_log_file = match raw(LOG_FILE) {
            None => DEFAULT_PLUGIN_LOG_FILE.to_string(),
            Some(v) if v.is_empty() || v == "stderr" => String::new(),
            Some(v) if v == "stdout" => {
                return Err(env_err(
                    LOG_FILE,
                    &v,
                    "the plugin's stdout carries its result to the runtime; use a file or stderr",
                ));
            }
            Some(v) if !Path::new(&v).is_absolute() => {
                return Err(env_err(
                    LOG_FILE,
                    &v,
                    "must be an absolute path, stderr or empty",
                ));
            }
            Some(v) => v,
        };

        const LOG_LEVEL: &str = "AWS_VPC_K8S_PLUGIN_LOG_LEVEL";
        let plugin_log_level = match set(LOG_LEVEL) {
            None => "DEBUG".to_string(),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "trace" | "debug" | "info" | "warn" | "warning" | "error" => v,
                "fatal" => "Error".to_string(),
                _ => {
                    return Err(env_err(
                        LOG_LEVEL,
                        &v,
                        "expected TRACE, DEBUG, INFO, WARN, ERROR or FATAL",
                    ));
                }
            },
        };

        // Checked here rather than by the plugin, which falls back to the defaults with a
        // warning: a typo should stop the rollout, not shrink into a line in a log.
        const LOG_MAX_SIZE: &str = "AWS_VPC_K8S_PLUGIN_LOG_MAX_SIZE";
        let plugin_log_max_size = match set(LOG_MAX_SIZE) {
            None => DEFAULT_MAX_SIZE,
            Some(v) => parse_size(&v).map_err(|e| env_err(LOG_MAX_SIZE, &v, e.to_string()))?,
        };
        const LOG_MAX_FILES: &str = "AWS_VPC_K8S_PLUGIN_LOG_MAX_FILES";
        let plugin_log_max_files = match set(LOG_MAX_FILES) {
            None => DEFAULT_MAX_FILES,
            Some(v) => {
                parse_max_files(&v).map_err(|e| env_err(LOG_MAX_FILES, &v, e.to_string()))?
            }
        };

        const SOCKET: &str = "IPAMD_SOCKET";
        let ipamd_socket = set(SOCKET).unwrap_or_else(|| ipam_proto::DEFAULT_SOCKET.to_string());
        if !Path::new(&ipamd_socket).is_absolute() {
            return Err(env_err(SOCKET, &ipamd_socket, "must be an absolute path"));
        }

        Ok(ConflistSettings {
            veth_prefix,
            mtu,
            plugin_log_file,
            plugin_log_level,
            plugin_log_max_size,
            plugin_log_max_files,
            ipamd_socket,
        })
    }
}

/// Renders the shipped conflist: sets `mtu` (as a string), `vethPrefix`, `pluginLogFile`,
/// `pluginLogLevel`, `pluginLogMaxSize` (bytes), `pluginLogMaxFiles` and `ipamdSocket` on the one plugin whose `type` is `vpc-cni`, leaves
/// everything else (portmap, ...) as it is, and pretty-prints the result with a final newline.
/// Errors: the template is not JSON, has no `plugins` array, or has no or several `vpc-cni`
/// entries.
pub fn render_conflist(
    template: &str,
    settings: &ConflistSettings,
) -> Result<String, InstallError> {
    let bad = |problem: String| InstallError::Template { problem };
    let mut doc: Value =
        serde_json::from_str(template).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let plugins = doc
        .get_mut("plugins")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| bad("has no \"plugins\" array".to_string()))?;
    let mut ours = plugins
        .iter_mut()
        .filter(|p| p.get("type").and_then(Value::as_str) == Some(PLUGIN_TYPE));
    let plugin = ours
        .next()
        .ok_or_else(|| bad(format!("no plugin has \"type\": {PLUGIN_TYPE:?}")))?;
    let Value::Object(entry) = plugin else {
        return Err(bad("the vpc-cni plugin entry is not an object".to_string()));
    };
    entry.insert("mtu".into(), Value::from(settings.mtu.to_string()));
    entry.insert(
        "vethPrefix".into(),
        Value::from(settings.veth_prefix.clone()),
    );
    entry.insert(
        "pluginLogFile".into(),
        Value::from(settings.plugin_log_file.clone()),
    );
    entry.insert(
        "pluginLogLevel".into(),
        Value::from(settings.plugin_log_level.clone()),
    );
    entry.insert(
        "pluginLogMaxSize".into(),
        Value::from(settings.plugin_log_max_size),
    );
    entry.insert(
        "pluginLogMaxFiles".into(),
        Value::from(settings.plugin_log_max_files),
    );
    entry.insert(
        "ipamdSocket".into(),
        Value::from(settings.ipamd_socket.clone()),
    );
    if ours.next().is_some() {
        return Err(bad(format!(
            "more than one plugin has \"type\": {PLUGIN_TYPE:?}"
        )));
    }
    let mut out =
        serde_json::to_string_pretty(&doc).map_err(|e| bad(format!("cannot be printed: {e}")))?;
    out.push('\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::fs;

    use super::*;

    const TEMPLATE: &str = r#"{
      "cniVersion": "1.1.0",
      "name": "aws-cni",
      "plugins": [
        {"type": "vpc-cni", "mtu": "9001", "vethPrefix": "eni",
         "pluginLogFile": "/var/log/aws-routed-eni/plugin.log", "pluginLogLevel": "DEBUG",
         "ipamdSocket": "/run/vpc-cni/ipamd.sock",
         "capabilities": {"io.kubernetes.cri.pod-annotations": true}},
        {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
      ]
    }"#;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_match_the_go_cni() {
        let s = ConflistSettings::from_env(env(&[])).unwrap();
        assert_eq!(
            s,
            ConflistSettings {
                veth_prefix: "eni".into(),
                mtu: 9001,
                plugin_log_file: "/var/log/aws-routed-eni/plugin.log".into(),
                plugin_log_level: "DEBUG".into(),
                plugin_log_max_size: 100 * 1024 * 1024,
                plugin_log_max_files: 5,
                ipamd_socket: "/run/vpc-cni/ipamd.sock".into(),
            }
        );
    }

    #[test]
    fn env_values_are_taken() {
        let s = ConflistSettings::from_env(env(&[
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "pod"),
            ("AWS_VPC_ENI_MTU", "1500"),
            ("POD_MTU", " 1400 "),
            ("AWS_VPC_K8S_PLUGIN_LOG_FILE", "/tmp/p.log"),
            ("AWS_VPC_K8S_PLUGIN_LOG_LEVEL", "Info"),
            ("AWS_VPC_K8S_PLUGIN_LOG_MAX_SIZE", "10Mi"),
            ("AWS_VPC_K8S_PLUGIN_LOG_MAX_FILES", " 2 "),
            ("IPAMD_SOCKET", "/run/x.sock"),
        ]))
        .unwrap();
        assert_eq!(
            (s.plugin_log_max_size, s.plugin_log_max_files),
            (10 * 1024 * 1024, 2)
        );
        assert_eq!(s.veth_prefix, "pod");
        assert_eq!(s.mtu, 1400);
        assert_eq!(s.plugin_log_file, "/tmp/p.log");
        assert_eq!(s.plugin_log_level, "Info");
        assert_eq!(s.ipamd_socket, "/run/x.sock");

        let s = ConflistSettings::from_env(env(&[("AWS_VPC_ENI_MTU", "1500"), ("POD_MTU", "")]))
            .unwrap();
        assert_eq!(s.mtu, 1500, "an empty POD_MTU falls back to the ENI MTU");

        for stderr in ["", "stderr"] {
            let s = ConflistSettings::from_env(env(&[("AWS_VPC_K8S_PLUGIN_LOG_FILE", stderr)]))
                .unwrap();
            assert_eq!(s.plugin_log_file, "", "{stderr:?}");
        }
        let s =
            ConflistSettings::from_env(env(&[("AWS_VPC_K8S_PLUGIN_LOG_LEVEL", "FATAL")])).unwrap();
        assert_eq!(s.plugin_log_level, "Error");
    }

    #[test]
    fn bad_env_values_are_rejected_naming_the_variable() {
        for (var, value) in [
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "abcde"),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "eth"),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "lo"),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "vlan"),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "a/b"),
            ("POD_MTU", "575"),
            ("POD_MTU", "9002"),
            ("POD_MTU", "jumbo"),
            ("AWS_VPC_ENI_MTU", "100"),
            ("AWS_VPC_K8S_PLUGIN_LOG_FILE", "stdout"),
            ("AWS_VPC_K8S_PLUGIN_LOG_FILE", "plugin.log"),
            ("AWS_VPC_K8S_PLUGIN_LOG_LEVEL", "loud"),
            ("AWS_VPC_K8S_PLUGIN_LOG_MAX_SIZE", "100M"),
            ("AWS_VPC_K8S_PLUGIN_LOG_MAX_SIZE", "0"),
            ("AWS_VPC_K8S_PLUGIN_LOG_MAX_FILES", "0"),
            ("AWS_VPC_K8S_PLUGIN_LOG_MAX_FILES", "many"),
            ("IPAMD_SOCKET", "ipamd.sock"),
        ] {
            let e = ConflistSettings::from_env(env(&[(var, value)])).unwrap_err();
            let InstallError::Env { var: named, .. } = &e else {
                panic!("{var}={value}: {e:?}");
            };
            assert_eq!(*named, var, "{value}");
            let text = e.to_string();
            assert!(text.starts_with(&format!("{var}={value:?}: ")), "{text}");
        }
    }

    #[test]
    fn rendering_sets_every_key_and_keeps_the_rest() {
        let settings = ConflistSettings {
            veth_prefix: "pod".into(),
            mtu: 1500,
            plugin_log_file: String::new(),
            plugin_log_level: "Info".into(),
            plugin_log_max_size: 65536,
            plugin_log_max_files: 3,
            ipamd_socket: "/run/x.sock".into(),
        };
        let out = render_conflist(TEMPLATE, &settings).unwrap();
        assert!(out.ends_with("}\n"));
        assert!(out.lines().count() > 5, "pretty-printed: {out}");
        let doc: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(doc["cniVersion"], "1.1.0");
        assert_eq!(doc["name"], "aws-cni");
        let ours = &doc["plugins"][0];
        assert_eq!(ours["type"], "vpc-cni");
        assert_eq!(ours["mtu"], Value::from("1500"));
        assert_eq!(ours["vethPrefix"], "pod");
        assert_eq!(ours["pluginLogFile"], "");
        assert_eq!(ours["pluginLogLevel"], "Info");
        assert_eq!(ours["pluginLogMaxSize"], 65536, "bytes, as a JSON number");
        assert_eq!(ours["pluginLogMaxFiles"], 3);
        assert_eq!(ours["ipamdSocket"], "/run/x.sock");
        assert_eq!(
            ours["capabilities"]["io.kubernetes.cri.pod-annotations"],
            true
        );
        let template: Value = serde_json::from_str(TEMPLATE).unwrap();
        assert_eq!(doc["plugins"][1], template["plugins"][1]);
        assert_eq!(doc["plugins"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn the_shipped_conflist_renders() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/10-vpc-cni.conflist");
        let template = fs::read_to_string(&path).unwrap();
        let s = ConflistSettings::from_env(env(&[("POD_MTU", "1500")])).unwrap();
        let doc: Value = serde_json::from_str(&render_conflist(&template, &s).unwrap()).unwrap();
        assert_eq!(doc["name"], "aws-cni");
        let ours = doc["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["type"] == PLUGIN_TYPE)
            .unwrap();
        assert_eq!(ours["mtu"], "1500");
    }

    #[test]
    fn rendering_adds_keys_the_template_lacks() {
        let template = r#"{"cniVersion":"1.1.0","name":"aws-cni","plugins":[{"type":"vpc-cni"}]}"#;
        let s = ConflistSettings::from_env(env(&[])).unwrap();
        let doc: Value = serde_json::from_str(&render_conflist(template, &s).unwrap()).unwrap();
        assert_eq!(doc["plugins"][0]["mtu"], "9001");
        assert_eq!(doc["plugins"][0]["ipamdSocket"], "/run/vpc-cni/ipamd.sock");
    }

    #[test]
    fn unusable_templates_are_rejected() {
        let s = ConflistSettings::from_env(env(&[])).unwrap();
        for (template, needle) in [
            (
                r#"{"plugins":[{"type":"portmap"}]}"#,
                "no plugin has \"type\": \"vpc-cni\"",
            ),
            (r#"{"plugins":[]}"#, "no plugin has"),
            (r#"{"name":"aws-cni"}"#, "no \"plugins\" array"),
            (
                r#"{"plugins":[{"type":"vpc-cni"},{"type":"vpc-cni"}]}"#,
                "more than one plugin",
            ),
            (r#"{"plugins":[{"type":"vpc-cni""#, "not valid JSON"),
        ] {
            let e = render_conflist(template, &s).unwrap_err();
            assert!(matches!(e, InstallError::Template { .. }), "{template}");
            assert!(e.to_string().contains(needle), "{template}: {e}");
        }
    }
}
