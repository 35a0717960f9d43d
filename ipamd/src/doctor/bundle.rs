//! `doctor --bundle FILE`: a gzip tarball of what support needs, each part bounded, with a
//! MANIFEST saying what each part is and which could not be read (and why).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use flate2::Compression;
use flate2::write::GzEncoder;

use super::facts::Facts;
use super::gather::{self, tail};
use super::{Report, checks, render};
use crate::config::LogTarget;
use crate::install::DEFAULT_PLUGIN_LOG_FILE;

/// The directory every part is under in the tarball.
pub const TOP: &str = "vpc-cni-doctor";
/// A part is cut at this many bytes (a log keeps its last ones).
pub const PART_MAX: usize = 4 << 20;
/// The parts together, before compression, never exceed this: later parts are left out.
pub const TOTAL_MAX: usize = 40 << 20;

/// One file of the bundle.
pub struct Part {
    /// File name under [`TOP`].
    pub name: String,
    /// What it is, for the MANIFEST.
    pub what: &'static str,
    /// Its content, or why it could not be read.
    pub content: Result<String, String>,
}

impl Part {
    fn new(name: impl Into<String>, what: &'static str, content: Result<String, String>) -> Self {
        Self {
            name: name.into(),
            what,
            content,
        }
    }
}

/// Whether an environment variable's value must not leave the node.
pub fn is_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "SECRET",
        "TOKEN",
        "PASSWORD",
        "CREDENTIAL",
        "ACCESS_KEY",
        "SESSION",
        "PRIVATE",
    ]
    .iter()
    .any(|s| upper.contains(s))
}

/// The effective configuration: what ipamd makes of its environment, then the environment
/// itself with secrets removed.
fn config_text(facts: &Facts, env: impl Iterator<Item = (String, String)>) -> String {
    let mut out = format!(
        "# ipamd's configuration as parsed\n{:#?}\n\n# environment\n",
        facts.config
    );
    let mut vars: Vec<(String, String)> = env.collect();
    vars.sort();
    for (k, v) in vars {
        let shown = if is_secret(&k) {
            "<redacted>"
        } else {
            v.as_str()
        };
        let _ = writeln!(out, "{k}={shown}");
    }
    out
}

fn ip_dumps(facts: &Facts) -> [Part; 4] {
    let kernel = facts.kernel.as_ref();
    let lines = |f: &dyn Fn(&super::facts::Kernel) -> Vec<String>| {
        kernel.map(|k| f(k).join("\n") + "\n").map_err(Clone::clone)
    };
    let neighbours = netops::Netlink::current()
        .map_err(|e| e.to_string())
        .and_then(|nl| {
            let names = kernel.map(|k| k.links.clone()).unwrap_or_default();
            let name = |i: u32| {
                names
                    .iter()
                    .find(|l| l.index == i)
                    .map_or_else(|| i.to_string(), |l| l.name.clone())
            };
            let mut out = String::new();
            let mut show =
                |ip: &dyn std::fmt::Display, index: u32, mac: Option<[u8; 6]>, permanent: bool| {
                    let mac = mac.map(|m| netops::format_mac(&m)).unwrap_or_default();
                    let state = if permanent { " PERMANENT" } else { "" };
                    let _ = writeln!(out, "{ip} dev {} lladdr {mac}{state}", name(index));
                };
            for n in nl.neighbours().map_err(|e| e.to_string())? {
                show(&n.ip, n.index, n.mac, n.permanent);
            }
            for n in nl.neighbours_of::<std::net::Ipv6Addr>().unwrap_or_default() {
                show(&n.ip, n.index, n.mac, n.permanent);
            }
            Ok(out)
        });
    [
        Part::new(
            "ip-rule.txt",
            "every policy rule (IPv4 and IPv6)",
            lines(&|k| k.rules.iter().map(ToString::to_string).collect()),
        ),
        Part::new(
            "ip-route.txt",
            "every route of every table",
            lines(&|k| k.routes.iter().map(ToString::to_string).collect()),
        ),
        Part::new(
            "ip-link.txt",
            "every link",
            lines(&|k| {
                k.links
                    .iter()
                    .map(|l| {
                        format!(
                            "{}: {} kind {} mtu {} {} mac {}{}",
                            l.index,
                            l.name,
                            l.kind.as_deref().unwrap_or("-"),
                            l.mtu.map_or_else(|| "-".into(), |m| m.to_string()),
                            if l.up { "UP" } else { "DOWN" },
                            l.mac.map(|m| netops::format_mac(&m)).unwrap_or_default(),
                            l.peer_index
                                .map(|p| format!(" peer {p}"))
                                .unwrap_or_default(),
                        )
                    })
                    .collect()
            }),
        ),
        Part::new("ip-neigh.txt", "every neighbour entry", neighbours),
    ]
}

fn log_part(name: &'static str, what: &'static str, path: Option<&Path>) -> Part {
    Part::new(
        name,
        what,
        match path {
            Some(p) => tail(p, PART_MAX as u64).map_err(|e| format!("{}: {e}", p.display())),
            None => Err("ipamd logs to stdout or stderr: see `kubectl logs` of its pod".into()),
        },
    )
}

/// The plugin's log file, as our conflist names it.
fn plugin_log(facts: &Facts) -> std::path::PathBuf {
    let path = facts
        .cni
        .files
        .as_ref()
        .ok()
        .and_then(|files| files.iter().find(|f| checks::cni_is_ours(f)))
        .and_then(|f| f.content.as_ref().ok())
        .and_then(checks::cni_our_plugin)
        .and_then(|p| p.get("pluginLogFile"))
        .and_then(serde_json::Value::as_str)
        .unwrap_or(DEFAULT_PLUGIN_LOG_FILE);
    gather::on_host(Path::new(path))
}

/// The bundle's file for an introspection endpoint: `/v1/enis` is `v1-enis.json`.
fn endpoint_file(path: &str) -> String {
    format!("{}.json", path.trim_start_matches('/').replace('/', "-"))
}

/// Reads every part.
pub async fn collect(facts: &Facts, report: &Report) -> Vec<Part> {
    let config = &facts.config;
    let ipamd_log = match &config.log_target {
        LogTarget::File(p) => Some(p.as_path()),
        _ => None,
    };
    let iptables = tokio::task::spawn_blocking(|| {
        let runner = netops::snat::SystemRunner;
        let program = netops::snat::detect_backend(&runner)
            .map(|b| b.save_program())
            .unwrap_or("iptables-save");
        gather::command_output(program, &[])
    })
    .await
    .map_err(|e| e.to_string());
    let mut parts = vec![
        Part::new(
            "findings.json",
            "the doctor's findings (docs/doctor.md)",
            Ok(render::json(report)),
        ),
        Part::new(
            "findings.txt",
            "the doctor's findings for a person",
            Ok(anstream::adapter::strip_str(&render::text(report, "vpc-cni doctor")).to_string()),
        ),
        Part::new(
            "config.txt",
            "ipamd's effective configuration and environment, secrets removed",
            Ok(config_text(facts, std::env::vars())),
        ),
        log_part("ipamd.log", "the tail of ipamd's log", ipamd_log),
        log_part(
            "plugin.log",
            "the tail of the CNI plugin's log",
            Some(&plugin_log(facts)),
        ),
    ];
    parts.extend(ip_dumps(facts));
    parts.push(Part::new(
        "iptables-save.txt",
        "the node's iptables, every table",
        iptables,
    ));
    for (path, body) in &facts.ipamd.introspection {
        parts.push(Part::new(
            endpoint_file(path),
            "ipamd's introspection endpoint of that name",
            body.clone(),
        ));
    }
    parts.push(Part::new(
        "metrics.txt",
        "ipamd's Prometheus metrics",
        facts.ipamd.metrics.clone(),
    ));
    parts
}

/// Cuts `text` to at most `max` bytes on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Writes the tarball; returns the MANIFEST's text.
pub fn write(path: &Path, parts: &[Part]) -> std::io::Result<String> {
    let file = std::fs::File::create(path)?;
    let mut tar = tar::Builder::new(GzEncoder::new(file, Compression::default()));
    let mtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let add = |tar: &mut tar::Builder<_>, name: &str, data: &[u8]| {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(mtime);
        header.set_cksum();
        tar.append_data(&mut header, format!("{TOP}/{name}"), data)
    };
    let mut manifest = String::from(
        "vpc-cni doctor bundle: every part, what it is, and its size or why it is missing\n\n",
    );
    let mut total = 0usize;
    for part in parts {
        match &part.content {
            Ok(text) => {
                let room = PART_MAX.min(TOTAL_MAX.saturating_sub(total));
                let kept = cut(text, room);
                total += kept.len();
                add(&mut tar, &part.name, kept.as_bytes())?;
                let note = if kept.len() < text.len() {
                    format!(" (cut from {} bytes)", text.len())
                } else {
                    String::new()
                };
                let _ = writeln!(
                    manifest,
                    "{:40} {} bytes{note}: {}",
                    part.name,
                    kept.len(),
                    part.what
                );
            }
            Err(why) => {
                let text = format!("unavailable: {why}\n");
                add(&mut tar, &part.name, text.as_bytes())?;
                let _ = writeln!(
                    manifest,
                    "{:40} UNAVAILABLE ({why}): {}",
                    part.name, part.what
                );
            }
        }
    }
    add(&mut tar, "MANIFEST.txt", manifest.as_bytes())?;
    let mut gz = tar.into_inner()?;
    gz.flush()?;
    gz.finish()?.sync_all()?;
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn secrets_are_recognised_by_name() {
        for secret in [
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "aws_access_key_id",
            "DB_PASSWORD",
        ] {
            assert!(is_secret(secret), "{secret}");
        }
        for plain in ["WARM_ENI_TARGET", "AWS_VPC_K8S_CNI_LOGLEVEL", "AWS_REGION"] {
            assert!(!is_secret(plain), "{plain}");
        }
    }

    #[test]
    fn the_tarball_holds_every_part_bounded_and_a_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.tar.gz");
        let big = "x".repeat(PART_MAX + 10);
        let parts = vec![
            Part::new("a.txt", "A", Ok("hello".into())),
            Part::new("big.txt", "big", Ok(big)),
            Part::new("gone.txt", "gone", Err("no such file".into())),
        ];
        let manifest = write(&path, &parts).unwrap();
        assert!(manifest.contains("UNAVAILABLE (no such file)"));
        assert!(manifest.contains(&format!("cut from {} bytes", PART_MAX + 10)));
        let gz = flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap());
        let mut archive = tar::Archive::new(gz);
        let mut seen = std::collections::BTreeMap::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let name = entry.path().unwrap().display().to_string();
            let mut body = String::new();
            entry.read_to_string(&mut body).unwrap();
            seen.insert(name, body);
        }
        assert_eq!(seen[&format!("{TOP}/a.txt")], "hello");
        assert_eq!(seen[&format!("{TOP}/big.txt")].len(), PART_MAX);
        assert!(seen[&format!("{TOP}/gone.txt")].starts_with("unavailable: no such file"));
        assert_eq!(seen[&format!("{TOP}/MANIFEST.txt")], manifest);
    }
}
