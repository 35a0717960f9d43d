//! Contract tests for the `cni` crate, one binary with a module per area.

mod args;
mod codes;
mod conf;
mod env;
mod error;
mod fuzz_corpus;
mod props;
mod result;
mod version;

use std::collections::HashMap;

/// An environment lookup over a fixed map.
pub fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

/// A complete ADD environment, with `overrides` replacing or (with `None`) removing variables.
pub fn add_env(overrides: &[(&str, Option<&str>)]) -> impl Fn(&str) -> Option<String> + use<> {
    let mut map: HashMap<String, String> = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "c0ffee"),
        ("CNI_NETNS", "/var/run/netns/cni-1"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/opt/cni/bin"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in overrides {
        match v {
            Some(v) => map.insert(k.to_string(), v.to_string()),
            None => map.remove(*k),
        };
    }
    move |k| map.get(k).cloned()
}
