//! Log rotation with the real binaries: many `vpc-cni` processes logging into one
//! `pluginLogFile` at once, and a real ipamd on a box node under ADD/DEL churn, each with a
//! tiny size limit. The files rotate, exactly the configured number of rotated files stay,
//! every line is whole JSON, and no line is lost or written twice.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use e2e::{VpcBox, bin_dir, require_root, run_bounded};
use ipam_proto::{AddRequest, AttachmentKey, Client, DelReason, DelRequest, PodMeta};
use serde_json::{Value, json};
use testkit::cni::Outcome;

/// The log at `path` and its rotated files, oldest first (`<log>.N` .. `<log>.1`, `<log>`).
fn log_files(path: &Path) -> Vec<PathBuf> {
    let name = path.file_name().unwrap().to_str().unwrap();
    let prefix = format!("{name}.");
    let mut rotated: Vec<(u32, PathBuf)> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let n = p
                .file_name()?
                .to_str()?
                .strip_prefix(&prefix)?
                .parse()
                .ok()?;
            Some((n, p))
        })
        .collect();
    rotated.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
    let mut files: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
    files.push(path.to_path_buf());
    files
}

/// Every line of the log and its rotated files, oldest first, each parsed as the JSON object
/// it must be. Checks every file is within `max_size` bytes unless it holds one line (a
/// record larger than the limit gets a file of its own), and returns the longest line.
fn read_log(path: &Path, max_size: u64) -> (Vec<Value>, usize) {
    let mut lines = Vec::new();
    let mut longest = 0;
    for file in log_files(path) {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.len() as u64 <= max_size || text.lines().count() == 1,
            "{} holds {} bytes, over the {max_size} limit",
            file.display(),
            text.len()
        );
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "{} ends in a torn line",
            file.display()
        );
        for line in text.lines() {
            longest = longest.max(line.len() + 1);
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {line}", file.display()));
            assert!(
                v["timestamp"].is_string() && v["level"].is_string() && v["message"].is_string(),
                "{}: {line}",
                file.display()
            );
            lines.push(v);
        }
    }
    (lines, longest)
}

/// The number of rotated files beside the log.
fn rotated_count(path: &Path) -> usize {
    log_files(path).len() - 1
}

// --- the plugin ---------------------------------------------------------------------------

const PLUGIN_MAX_SIZE: u64 = 2048;
/// Plugin processes running at once.
const PARALLEL: usize = 12;

/// One STATUS call, which logs two lines without ipamd (the request, then the warning that
/// ipamd is not reachable), both naming `tag`: it is the container id, and the socket's name.
fn plugin_status(dir: &Path, tag: &str, max_files: u32) {
    let log = dir.join("log/plugin.log");
    let stdin = json!({
        "cniVersion": "1.1.0",
        "name": "vpc-cni",
        "type": "vpc-cni",
        "ipamdSocket": dir.join(format!("absent/{tag}.sock")),
        "pluginLogFile": log,
        "pluginLogLevel": "Debug",
        "pluginLogMaxSize": PLUGIN_MAX_SIZE,
        "pluginLogMaxFiles": max_files,
    })
    .to_string();
    let plugin = bin_dir().join("vpc-cni");
    let args = [
        "-i",
        "CNI_COMMAND=STATUS",
        &format!("CNI_CONTAINERID={tag}"),
        plugin.to_str().unwrap(),
    ];
    let out = Outcome::from_output(run_bounded(30, "env", &args, Some(stdin.as_bytes())));
    out.error(50, "ipamd not reachable");
}

/// Runs `tags` as plugin calls, [`PARALLEL`] at a time, and waits for all of them.
fn plugin_calls(dir: &Path, tags: &[String], max_files: u32) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..PARALLEL {
            s.spawn(|| {
                while let Some(tag) = tags.get(next.fetch_add(1, Ordering::Relaxed)) {
                    plugin_status(dir, tag, max_files);
                }
            });
        }
    });
}

/// The tag each line names, by tag: `(request lines, warning lines)`. Panics on a line that
/// names no tag or several: a line merged from two calls would.
fn lines_by_tag(lines: &[Value], tags: &BTreeSet<String>) -> BTreeMap<String, (u32, u32)> {
    let mut seen: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for line in lines {
        let message = line["message"].as_str().unwrap();
        let named: Vec<&String> = tags
            .iter()
            .filter(|t| message.contains(t.as_str()))
            .collect();
        let [tag] = named[..] else {
            panic!("a line naming {named:?}: {line}");
        };
        let counts = seen.entry(tag.clone()).or_default();
        if message.starts_with(&format!("Received CNI status request: ContainerID({tag})")) {
            counts.0 += 1;
        } else if message.starts_with("STATUS: ipamd not reachable at ") {
            assert_eq!(line["level"], "WARN", "{line}");
            counts.1 += 1;
        } else {
            panic!("an unexpected line: {line}");
        }
    }
    seen
}

fn tags(prefix: &str, n: usize) -> Vec<String> {
    // Fixed width, so no tag is part of another.
    (0..n).map(|i| format!("{prefix}{i:05}x")).collect()
}

#[test]
#[ignore = "runs the built vpc-cni: scripts/test.sh builds the workspace first"]
fn concurrent_plugin_processes_rotate_without_losing_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log/plugin.log");

    // Room for every line: each call's two lines are found exactly once, whole.
    let first = tags("a", 240);
    plugin_calls(dir.path(), &first, 1000);
    let (lines, _) = read_log(&log, PLUGIN_MAX_SIZE);
    let all: BTreeSet<String> = first.iter().cloned().collect();
    let seen = lines_by_tag(&lines, &all);
    for tag in &first {
        assert_eq!(seen.get(tag), Some(&(1, 1)), "the lines of call {tag}");
    }
    assert_eq!(lines.len(), 2 * first.len());
    let rotations = rotated_count(&log);
    assert!(rotations >= 20, "only {rotations} rotations");

    // Then 3 files kept: the next rotation removes every older one, and what stays ends
    // with the last calls' lines, all of them.
    let more = tags("b", 120);
    plugin_calls(dir.path(), &more, 3);
    let last = tags("c", 4);
    plugin_calls(dir.path(), &last, 3);
    assert_eq!(rotated_count(&log), 3, "{:?}", log_files(&log));
    let (lines, longest) = read_log(&log, PLUGIN_MAX_SIZE);
    // The last calls' lines are the newest, and fit in the rotated files alone, each of which
    // was filled to within a line of the limit.
    let last_bytes = 2 * last.len() * longest;
    assert!(last_bytes < 3 * (PLUGIN_MAX_SIZE as usize - longest));
    let all: BTreeSet<String> = first.iter().chain(&more).chain(&last).cloned().collect();
    let seen = lines_by_tag(&lines, &all);
    for tag in &last {
        assert_eq!(seen.get(tag), Some(&(1, 1)), "the lines of call {tag}");
    }
    for (tag, counts) in &seen {
        assert!(counts.0 <= 1 && counts.1 <= 1, "{tag}: {counts:?}");
        assert!(
            !tag.starts_with('a'),
            "{tag}'s lines were in files rotated away"
        );
    }
}

// --- ipamd --------------------------------------------------------------------------------

const IPAMD_MAX_SIZE: u64 = 8192;
const IPAMD_MAX_FILES: usize = 3;
/// Clients churning at once, and ADD/DEL pairs each.
const CLIENTS: usize = 4;
const PAIRS: usize = 60;
/// ADD/DEL pairs made after the churn: the newest lines, which must all have stayed.
const LAST_PAIRS: usize = 3;

fn key(container_id: &str) -> AttachmentKey {
    AttachmentKey {
        network: "vpc-cni".into(),
        container_id: container_id.into(),
        ifname: "eth0".into(),
    }
}

fn pod(name: &str) -> PodMeta {
    PodMeta {
        namespace: "default".into(),
        name: name.into(),
        infra_container_id: String::new(),
        uid: String::new(),
    }
}

/// ADD then DEL of each of `ids`, one after the other, straight on ipamd's socket as the
/// plugin sends them (the plugin's own log is the other test's). ipamd logs an ADD's line
/// before it answers, so one client's lines come in its order: ADD 0, DEL 0, ADD 1, ...
fn churn(socket: &str, name: &str, ids: &[String]) {
    let client = Client::new(socket);
    for id in ids {
        client
            .add(AddRequest {
                key: key(id),
                pod: pod(name),
                netns: String::new(),
            })
            .unwrap_or_else(|e| panic!("ADD {id}: {e}"));
        let del = client
            .del(DelRequest {
                key: key(id),
                pod: pod(name),
                reason: DelReason::PodDeleted,
            })
            .unwrap_or_else(|e| panic!("DEL {id}: {e}"));
        assert!(del.released.is_some(), "DEL {id} released nothing");
    }
}

/// `n` container ids for client `client`, unique to the box, fixed width.
fn churn_ids(vbox: &VpcBox, client: &str, n: usize) -> Vec<String> {
    let box_tag = vbox.name().replace('-', "");
    (0..n)
        .map(|i| format!("{box_tag}{client}p{i:04}x"))
        .collect()
}

/// Of the `(attachment, ADD or DEL)` events in the log, those of `ids`, in log order.
fn events_of<'a>(
    events: &[(String, &'static str)],
    ids: &'a [String],
) -> Vec<(&'a str, &'static str)> {
    events
        .iter()
        .filter_map(|(attachment, kind)| {
            let id = ids.iter().find(|id| attachment.contains(id.as_str()))?;
            Some((id.as_str(), *kind))
        })
        .collect()
}

/// ADD 0, DEL 0, ADD 1, DEL 1, ... of `ids`.
fn in_order(ids: &[String]) -> Vec<(&str, &'static str)> {
    ids.iter()
        .flat_map(|id| [(id.as_str(), "ADD"), (id.as_str(), "DEL")])
        .collect()
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn ipamd_rotates_its_log_under_churn_keeping_every_recent_line() {
    require_root();
    let vbox = VpcBox::up(&[
        "--ipamd-env",
        "AWS_VPC_K8S_CNI_LOGLEVEL=DEBUG",
        "--ipamd-env",
        &format!("AWS_VPC_K8S_CNI_LOG_MAX_SIZE={}Ki", IPAMD_MAX_SIZE / 1024),
        "--ipamd-env",
        &format!("AWS_VPC_K8S_CNI_LOG_MAX_FILES={IPAMD_MAX_FILES}"),
        // A released address is free again at once: the churn never waits for the pool.
        "--ipamd-env",
        "IP_COOLDOWN_PERIOD=0",
    ]);
    let node = vbox.node(1);
    let log = PathBuf::from(&node.ipamd_log);

    let clients: Vec<Vec<String>> = (0..CLIENTS)
        .map(|c| churn_ids(&vbox, &format!("c{c}"), PAIRS))
        .collect();
    std::thread::scope(|s| {
        for (c, ids) in clients.iter().enumerate() {
            let socket = node.ipamd_socket.as_str();
            s.spawn(move || churn(socket, &format!("churn-{c}"), ids));
        }
    });
    let last = churn_ids(&vbox, "last", LAST_PAIRS);
    churn(&node.ipamd_socket, "last", &last);

    assert_eq!(
        rotated_count(&log),
        IPAMD_MAX_FILES,
        "{:?}",
        log_files(&log)
    );
    let (lines, _) = read_log(&log, IPAMD_MAX_SIZE);
    let events: Vec<(String, &'static str)> = lines
        .iter()
        .filter_map(|l| {
            let attachment = l["attachment"].as_str()?;
            let kind = match l["message"].as_str()? {
                "assigned address" => "ADD",
                "released address" => "DEL",
                _ => return None,
            };
            Some((attachment.to_string(), kind))
        })
        .collect();
    // The last pairs' lines are the newest: every one of them stayed, once, in order.
    assert_eq!(events_of(&events, &last), in_order(&last));
    // Of each churning client, what stayed is the end of its lines with nothing missing: from
    // the first that stayed to its last DEL, every ADD and DEL in order, once. (How much of
    // each stayed depends on how the clients interleaved.)
    let mut kept = 0;
    for ids in &clients {
        let got = events_of(&events, ids);
        let expected = in_order(ids);
        assert_eq!(
            got,
            expected[expected.len() - got.len()..],
            "the lines kept are the last ones, none missing"
        );
        kept += got.len();
    }
    assert!(
        kept < CLIENTS * PAIRS * 2,
        "every line stayed: the churn did not rotate the early ones away"
    );
}
