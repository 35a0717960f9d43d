//! The node's CNI setup: the runtime uses the first config file of the conf dir (libcni sorts
//! them by name), so ours must be first; our plugin must be the binary the runtime runs; the
//! Go CNI's conflist must not come back.

use serde_json::Value;

use super::super::facts::ConfFile;
use super::super::{Facts, Finding, Group, Severity};
use crate::install::{GO_CNI_CONFLIST, PLUGIN_TYPE, RETIRED_GO_CNI_CONFLIST};

const G: Group = Group::Cni;

/// The plugin types a config file chains (a `.conf` has one, a `.conflist` several).
pub fn plugin_types(conf: &Value) -> Vec<String> {
    let one = |v: &Value| v.get("type").and_then(Value::as_str).map(str::to_string);
    match conf.get("plugins").and_then(Value::as_array) {
        Some(plugins) => plugins.iter().filter_map(one).collect(),
        None => one(conf).into_iter().collect(),
    }
}

/// Whether a config file sends pods to vpc-cni.
pub fn is_ours(file: &ConfFile) -> bool {
    file.content
        .as_ref()
        .is_ok_and(|c| plugin_types(c).iter().any(|t| t == PLUGIN_TYPE))
}

/// Our plugin's settings in a config file.
pub fn our_plugin(conf: &Value) -> Option<&Value> {
    conf.get("plugins").and_then(Value::as_array).and_then(|p| {
        p.iter()
            .find(|x| x.get("type").and_then(Value::as_str) == Some(PLUGIN_TYPE))
    })
}

fn conflist(facts: &Facts) -> Vec<Finding> {
    let cni = &facts.cni;
    let dir = cni.conf_dir.display();
    let files = match &cni.files {
        Ok(files) => files,
        Err(e) => {
            return vec![
                Finding::new("cni-conflist", G, Severity::Error, format!("cannot list {dir}: {e}"))
                    .fix("ipamd writes its conflist there once it serves: check that it runs (ipamd finding) and that the DaemonSet mounts the host's /etc/cni/net.d"),
            ];
        }
    };
    let Some(first) = files.first() else {
        return vec![
            Finding::new(
                "cni-conflist",
                G,
                Severity::Error,
                format!("{dir} holds no CNI configuration: the kubelet reports the node's network not ready"),
            )
            .fix("ipamd writes 10-vpc-cni.conflist once it serves: see the ipamd finding"),
        ];
    };
    let mut out = Vec::new();
    if let Err(e) = &first.content {
        out.push(
            Finding::new(
                "cni-conflist",
                G,
                Severity::Error,
                format!(
                    "{dir}/{} is the runtime's configuration but is not valid JSON: {e}",
                    first.name
                ),
            )
            .fix(format!("remove or repair {dir}/{}", first.name)),
        );
    } else if is_ours(first) {
        out.push(Finding::new(
            "cni-conflist",
            G,
            Severity::Ok,
            format!(
                "{dir}/{} is first: the runtime sends pods to vpc-cni",
                first.name
            ),
        ));
    } else {
        let ours = files.iter().find(|f| is_ours(f));
        let types = first.content.as_ref().map(plugin_types).unwrap_or_default();
        out.push(
            Finding::new(
                "cni-conflist",
                G,
                Severity::Error,
                format!(
                    "{dir}/{} sorts first, so the runtime uses it (plugins {}){}: pods are not networked by vpc-cni",
                    first.name,
                    if types.is_empty() { "none".to_string() } else { types.join(", ") },
                    match ours {
                        Some(o) => format!(", not our {}", o.name),
                        None => ", and no file there calls vpc-cni".to_string(),
                    }
                ),
            )
            .fix(format!(
                "move {dir}/{} out of the directory (another CNI's leftover?) and restart the kubelet, or remove the other CNI's DaemonSet",
                first.name
            )),
        );
    }
    if let Some(ours) = files.iter().find(|f| is_ours(f))
        && let Ok(conf) = &ours.content
        && let Some(socket) = our_plugin(conf)
            .and_then(|p| p.get("ipamdSocket"))
            .and_then(Value::as_str)
        && facts.ipamd.socket.to_str() != Some(socket)
    {
        out.push(
            Finding::new(
                "cni-conflist",
                G,
                Severity::Warning,
                format!(
                    "{} sends the plugin to ipamd at {socket}, but ipamd serves {}",
                    ours.name,
                    facts.ipamd.socket.display()
                ),
            )
            .fix("make IPAMD_SOCKET and the conflist's ipamdSocket the same (the DaemonSet sets both)"),
        );
    }
    out
}

fn plugin(facts: &Facts) -> Finding {
    let path = facts.cni.bin_dir.join(PLUGIN_TYPE);
    match &facts.cni.plugin_version {
        Ok(versions) => Finding::new(
            "cni-plugin",
            G,
            Severity::Ok,
            format!("{} answers VERSION: {versions}", path.display()),
        ),
        Err(e) => Finding::new(
            "cni-plugin",
            G,
            Severity::Error,
            format!("{} does not work as vpc-cni: {e}", path.display()),
        )
        .fix("the DaemonSet's entrypoint installs it into the host's /opt/cni/bin: restart the aws-node pod on this node, and check the mount of /opt/cni/bin"),
    }
}

fn leftovers(facts: &Facts) -> Option<Finding> {
    let files = facts.cni.files.as_ref().ok()?;
    let dir = facts.cni.conf_dir.display();
    if files.iter().any(|f| f.name == GO_CNI_CONFLIST) {
        return Some(
            Finding::new(
                "cni-leftovers",
                G,
                Severity::Warning,
                format!("{dir}/{GO_CNI_CONFLIST}, the Go CNI's (aws-node's) conflist, is back"),
            )
            .fix(format!(
                "remove the aws-node DaemonSet if it still runs; ipamd moves the file aside to {RETIRED_GO_CNI_CONFLIST} when it starts"
            )),
        );
    }
    let others: Vec<&str> = files
        .iter()
        .skip(1)
        .filter(|f| !is_ours(f))
        .map(|f| f.name.as_str())
        .chain(facts.cni.other_files.iter().map(String::as_str))
        .collect();
    Some(if others.is_empty() {
        Finding::new("cni-leftovers", G, Severity::Ok, "no other CNI's files")
    } else {
        Finding::new(
            "cni-leftovers",
            G,
            Severity::Info,
            format!(
                "also in {dir} (not used while ours sorts first): {}",
                others.join(", ")
            ),
        )
    })
}

pub(super) fn check(facts: &Facts) -> Vec<Finding> {
    let mut out = conflist(facts);
    out.push(plugin(facts));
    out.extend(leftovers(facts));
    out
}

#[cfg(test)]
mod tests {
    use super::super::fixture::healthy;
    use super::*;

    #[test]
    fn a_healthy_setup_passes() {
        let found = check(&healthy());
        assert!(
            found.iter().all(|f| f.severity == Severity::Ok),
            "{found:#?}"
        );
    }

    #[test]
    fn a_conflist_sorting_first_is_named() {
        let mut f = healthy();
        f.cni.files.as_mut().unwrap().insert(
            0,
            ConfFile {
                name: "00-other.conflist".into(),
                content: Ok(serde_json::json!({"name": "x", "plugins": [{"type": "bridge"}]})),
            },
        );
        let found = check(&f);
        let x = found.iter().find(|x| x.check == "cni-conflist").unwrap();
        assert_eq!(x.severity, Severity::Error);
        assert!(x.evidence.contains("00-other.conflist") && x.evidence.contains("bridge"));
        assert!(x.fix.as_deref().unwrap().contains("00-other.conflist"));
    }

    #[test]
    fn no_config_or_a_broken_plugin_is_an_error_and_go_leftovers_a_warning() {
        let mut f = healthy();
        f.cni.files = Ok(vec![]);
        f.cni.plugin_version = Err("no such file".into());
        let found = check(&f);
        for id in ["cni-conflist", "cni-plugin"] {
            assert_eq!(
                found.iter().find(|x| x.check == id).unwrap().severity,
                Severity::Error
            );
        }
        let mut f = healthy();
        f.cni.files.as_mut().unwrap().push(ConfFile {
            name: GO_CNI_CONFLIST.into(),
            content: Ok(serde_json::json!({"plugins": [{"type": "aws-cni"}]})),
        });
        let found = check(&f);
        assert_eq!(
            found
                .iter()
                .find(|x| x.check == "cni-leftovers")
                .unwrap()
                .severity,
            Severity::Warning
        );
    }
}
