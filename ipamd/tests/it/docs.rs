//! Docs that cannot drift: every environment variable ipamd reads is in
//! docs/configuration.md, and every metric it exports is on docs/operations/metrics.md.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use introspect::Metrics;
use ipamd::config::{Config, IGNORED_WITH_WARNING, ignored_settings};
use ipamd::install::ConflistSettings;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names `text` shows as code (`NAME`), the way the docs name variables and metrics.
fn documented(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| {
            s.split(['=', '{', ' '])
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// Every key `read_env` asks for, with nothing set.
fn keys_read(read_env: impl FnOnce(&dyn Fn(&str) -> Option<String>)) -> BTreeSet<String> {
    let asked = RefCell::new(BTreeSet::new());
    read_env(&|key: &str| {
        asked.borrow_mut().insert(key.to_string());
        None
    });
    asked.into_inner()
}

/// The `env = "NAME"` of the command line's arguments (clap reads them).
fn clap_env(source: &str) -> Vec<String> {
    source
        .split("env = \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_string)
        .collect()
}

/// Quoted names with an underscore in the non-test part of config.rs: the variables read
/// only when another one is set, which a read with nothing set does not ask for.
fn named_in_config(source: &str) -> Vec<String> {
    let code = source.split("#[cfg(test)]").next().unwrap_or_default();
    code.split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.contains('_')
                && s.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn every_environment_variable_ipamd_reads_is_documented() {
    let mut reads = keys_read(|get| {
        let _ = Config::from_env(get);
    });
    reads.extend(keys_read(|get| {
        let _ = ignored_settings(get);
    }));
    reads.extend(keys_read(|get| {
        let _ = ConflistSettings::from_env(get);
    }));
    reads.extend(IGNORED_WITH_WARNING.iter().map(|(k, _)| k.to_string()));
    let src = repo().join("ipamd/src");
    reads.extend(named_in_config(&read(&src.join("config.rs"))));
    let mut commands = vec![src.join("main.rs")];
    for entry in std::fs::read_dir(src.join("cmd")).expect("ipamd/src/cmd") {
        commands.push(entry.expect("a directory entry").path());
    }
    for path in commands {
        reads.extend(clap_env(&read(&path)));
    }
    assert!(
        reads.contains("WARM_IP_TARGET") && reads.contains("HOST_CNI_BIN_PATH") && reads.len() > 50,
        "the reads were not all seen: {reads:?}"
    );
    let docs = documented(&read(&repo().join("docs/configuration.md")));
    let missing: Vec<_> = reads.difference(&docs).collect();
    assert!(
        missing.is_empty(),
        "read by ipamd but not in docs/configuration.md: {missing:?}"
    );
}

#[test]
fn every_metric_ipamd_exports_is_documented() {
    let metrics = Metrics::new("docs").expect("metrics");
    let names: BTreeSet<&str> = metrics.names().iter().map(String::as_str).collect();
    assert!(
        names.contains("awscni_assigned_ip_addresses") && names.len() > 20,
        "{names:?}"
    );
    let page = documented(&read(&repo().join("docs/operations/metrics.md")));
    let missing: Vec<_> = names.iter().filter(|n| !page.contains(**n)).collect();
    assert!(
        missing.is_empty(),
        "exported by ipamd but not in docs/operations/metrics.md: {missing:?}"
    );
}
