//! Reading the Go CNI's `vpc-cni-ipam/1` checkpoint.

use std::fs;
use std::net::Ipv4Addr;
use std::path::Path;

use pool::{AttachmentKey, PodInfo, Timestamp};
use store::checkpoint::{GO_CNI_CHECKPOINT_VERSION, MAX_CHECKPOINT_BYTES};
use store::{CheckpointError, SkipReason, parse_checkpoint, read_checkpoint};

const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/aws-node-ipam.json");

fn doc(entries: &[&str]) -> String {
    format!(
        r#"{{"version":"vpc-cni-ipam/1","allocations":[{}]}}"#,
        entries.join(",")
    )
}

fn entry(container: &str, ip: &str) -> String {
    format!(
        r#"{{"networkName":"aws-cni","containerID":"{container}","ifName":"eth0","ipv4":"{ip}",
            "allocationTimestamp":1718012345000000000,
            "metadata":{{"k8sPodNamespace":"ns","k8sPodName":"pod-{container}"}}}}"#
    )
}

#[test]
fn sample_from_aws_node_imports_every_pod() {
    let c = read_checkpoint(Path::new(SAMPLE)).unwrap().unwrap();
    assert!(c.skipped.is_empty(), "{:?}", c.skipped);
    let ips: Vec<Ipv4Addr> = c.imported.iter().map(|i| i.ip).collect();
    let expected: Vec<Ipv4Addr> = [
        "10.0.1.23",
        "10.0.1.87",
        "10.0.2.140",
        "10.0.2.201",
        "10.0.1.45",
        "10.0.3.9",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    assert_eq!(ips, expected);

    let first = &c.imported[0];
    let id = "cda108633272ba2d4c5321cf4a58d90ddc5bd47742f1a3a10d5b17a952c907cb";
    assert_eq!(
        first.key,
        AttachmentKey {
            network: "aws-cni".into(),
            container_id: id.into(),
            ifname: "eth0".into(),
        }
    );
    assert_eq!(
        first.pod,
        PodInfo {
            namespace: "kube-system".into(),
            name: "coredns-787cb67946-7xkzp".into(),
            infra_container_id: id.into(),
            ..PodInfo::default()
        }
    );
    // 1718012345123456789 ns.
    assert_eq!(first.assigned_at, Timestamp(1_718_012_345_123));

    // Empty metadata object and a zero timestamp, as the Go writer emits for unknown values.
    let bare = &c.imported[3];
    assert_eq!(bare.pod.namespace, "");
    assert_eq!(bare.pod.name, "");
    assert_eq!(bare.assigned_at, Timestamp(0));

    // A key migrated from CRI state by Go CNI 1.7 is taken as written.
    assert_eq!(c.imported[4].key.network, "_migrated-from-cri");
    assert_eq!(c.imported[4].key.ifname, "unknown");
}

#[test]
fn ipv6_entry_is_skipped_and_the_rest_imported() {
    let v6 = r#"{"networkName":"aws-cni","containerID":"six","ifName":"eth0",
        "ipv6":"2001:db8:1::5","allocationTimestamp":1,"metadata":{}}"#;
    let c = parse_checkpoint(doc(&[&entry("a", "10.0.0.1"), v6]).as_bytes()).unwrap();
    assert_eq!(c.imported.len(), 1);
    assert_eq!(c.skipped.len(), 1);
    let s = &c.skipped[0];
    assert_eq!(s.index, 1);
    assert_eq!(
        s.reason,
        SkipReason::Ipv6 {
            address: "2001:db8:1::5".into()
        }
    );
    let text = s.to_string();
    assert!(text.contains("entry 1"), "{text}");
    assert!(text.contains("container six"), "{text}");
    assert!(text.contains("IPv6 address \"2001:db8:1::5\""), "{text}");
}

#[test]
fn entry_without_metadata_or_timestamp_is_imported() {
    // The shape Go CNI 1.7/1.8 wrote: key and address only.
    let old = r#"{"networkName":"aws-cni","containerID":"old","ifName":"eth0","ipv4":"10.0.0.9"}"#;
    let c = parse_checkpoint(doc(&[old]).as_bytes()).unwrap();
    assert!(c.skipped.is_empty());
    let i = &c.imported[0];
    assert_eq!(i.ip, Ipv4Addr::new(10, 0, 0, 9));
    assert_eq!(
        i.pod,
        PodInfo {
            infra_container_id: "old".into(),
            ..PodInfo::default()
        }
    );
    assert_eq!(i.assigned_at, Timestamp(0));
}

#[test]
fn wrong_version_is_an_error_naming_both_versions() {
    let e = parse_checkpoint(br#"{"version":"vpc-cni-ipam/2","allocations":[]}"#).unwrap_err();
    assert!(matches!(e, CheckpointError::Version { ref found, .. } if found == "vpc-cni-ipam/2"));
    let text = e.to_string();
    assert!(text.contains("\"vpc-cni-ipam/2\""), "{text}");
    assert!(
        text.contains(&format!("{GO_CNI_CHECKPOINT_VERSION:?}")),
        "{text}"
    );
}

#[test]
fn truncated_file_is_a_json_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ipam.json");
    let full = fs::read(SAMPLE).unwrap();
    fs::write(&path, &full[..full.len() / 2]).unwrap();
    let e = read_checkpoint(&path).unwrap_err();
    assert!(matches!(e, CheckpointError::NotJson { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("is not valid JSON"), "{text}");
    assert!(text.contains("EOF"), "{text}");
}

#[test]
fn duplicates_keep_the_first_entry() {
    let same_key_other_ip = entry("a", "10.0.0.3");
    let c = parse_checkpoint(
        doc(&[
            &entry("a", "10.0.0.1"),
            &entry("b", "10.0.0.1"),
            &entry("c", "10.0.0.2"),
            &same_key_other_ip,
        ])
        .as_bytes(),
    )
    .unwrap();
    let kept: Vec<&str> = c
        .imported
        .iter()
        .map(|i| i.key.container_id.as_str())
        .collect();
    assert_eq!(kept, ["a", "c"]);
    assert_eq!(c.imported[0].ip, Ipv4Addr::new(10, 0, 0, 1));
    assert_eq!(c.skipped.len(), 2);
    assert_eq!(c.skipped[0].index, 1);
    assert_eq!(
        c.skipped[0].reason,
        SkipReason::DuplicateIp {
            ip: Ipv4Addr::new(10, 0, 0, 1),
            first: 0
        }
    );
    assert_eq!(c.skipped[1].index, 3);
    assert!(
        matches!(&c.skipped[1].reason, SkipReason::DuplicateKey { key, first: 0 } if key.container_id == "a")
    );
    assert!(
        c.skipped[1]
            .to_string()
            .contains("attachment aws-cni/a/eth0 already has an address from entry 0")
    );
}

#[test]
fn unusable_entries_are_skipped_with_their_reason() {
    let c = parse_checkpoint(
        doc(&[
            r#"{"networkName":"aws-cni","containerID":"","ifName":"eth0","ipv4":"10.0.0.1"}"#,
            r#"{"networkName":"aws-cni","ifName":"eth0","ipv4":"10.0.0.2"}"#,
            r#"{"networkName":"aws-cni","containerID":"x","ifName":"","ipv4":"10.0.0.3"}"#,
            r#"{"containerID":"y","ifName":"eth0","ipv4":"10.0.0.4"}"#,
            r#"{"networkName":"aws-cni","containerID":"z","ifName":"eth0","ipv4":"10.0.0.256"}"#,
            r#"{"networkName":"aws-cni","containerID":"w","ifName":"eth0","ipv4":""}"#,
            r#""not an object""#,
            &entry("ok", "10.0.0.7"),
        ])
        .as_bytes(),
    )
    .unwrap();
    assert_eq!(c.imported.len(), 1);
    assert_eq!(c.imported[0].key.container_id, "ok");
    let reasons: Vec<(usize, SkipReason)> = c
        .skipped
        .iter()
        .map(|s| (s.index, s.reason.clone()))
        .collect();
    let field = |field| SkipReason::EmptyKeyField { field };
    assert_eq!(reasons[0], (0, field("containerID")));
    assert_eq!(reasons[1], (1, field("containerID")));
    assert_eq!(reasons[2], (2, field("ifName")));
    assert_eq!(reasons[3], (3, field("networkName")));
    assert_eq!(
        reasons[4],
        (
            4,
            SkipReason::BadAddress {
                value: "10.0.0.256".into()
            }
        )
    );
    assert_eq!(reasons[5], (5, SkipReason::NoAddress));
    assert_eq!(reasons[6].0, 6);
    assert!(matches!(reasons[6].1, SkipReason::Malformed { .. }));
    assert_eq!(c.skipped.len(), 7);
    assert!(
        c.skipped[0]
            .to_string()
            .ends_with("containerID is missing or empty")
    );
}

#[test]
fn not_json_at_all_is_an_error() {
    let e = parse_checkpoint(b"\x00\x01binary").unwrap_err();
    assert!(matches!(e, CheckpointError::NotJson { path: None, .. }));
}

#[test]
fn oversized_file_is_refused_without_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ipam.json");
    // Sparse: the size check must come before any read.
    let f = fs::File::create(&path).unwrap();
    f.set_len(MAX_CHECKPOINT_BYTES + 1).unwrap();
    let e = read_checkpoint(&path).unwrap_err();
    assert!(matches!(e, CheckpointError::TooLarge { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("refusing"), "{text}");
}

#[test]
fn file_at_the_limit_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ipam.json");
    let mut body = doc(&[&entry("a", "10.0.0.1")]).into_bytes();
    body.resize(MAX_CHECKPOINT_BYTES as usize, b' ');
    fs::write(&path, &body).unwrap();
    let c = read_checkpoint(&path).unwrap().unwrap();
    assert_eq!(c.imported.len(), 1);
}

#[test]
fn missing_file_is_none() {
    let dir = tempfile::tempdir().unwrap();
    assert!(
        read_checkpoint(&dir.path().join("ipam.json"))
            .unwrap()
            .is_none()
    );
}

#[test]
fn directory_is_a_read_error() {
    let dir = tempfile::tempdir().unwrap();
    let e = read_checkpoint(dir.path()).unwrap_err();
    assert!(matches!(e, CheckpointError::Read { .. }), "{e:?}");
    assert!(e.to_string().contains("not a regular file"), "{e}");
}
