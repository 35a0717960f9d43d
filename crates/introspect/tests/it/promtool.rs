//! `promtool check metrics` on every metric, populated: the output must parse, and its only
//! lint complaints must be the ones `promtool-allow.txt` keeps on purpose (the Go CNI's names)
//! and every one of those must still occur.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use cloud::Action;
use common::*;
use introspect::Metrics;

/// Every metric with at least one series, labelled ones included.
fn populated() -> String {
    let m = Metrics::new("v1.2.3").unwrap();
    m.ipamd_error("decreaseIPPool");
    let _guard = m.action_in_progress("nodeIPPoolReconcile");
    m.reconcile("eniReconcileAdd");
    m.add_request();
    m.del_request("PodDeleted");
    m.pod_eni_error("podENIErr");
    m.aws_utils_error("getENIaddresses", "UnauthorizedOperation");
    m.add_latency(0.001, true);
    m.aws_api(Action::CreateNetworkInterface.wire_name(), 0.2, None);
    m.aws_api(
        Action::AssignPrivateIpAddresses.wire_name(),
        0.1,
        Some("InsufficientFreeAddressesInSubnet"),
    );
    m.imds_api("GetMetadata", 0.001, None);
    m.force_removed_eni();
    m.force_removed_ips(2);
    m.no_available_ip();
    m.startup(3.0, true, "");
    m.node_init(1.0, true);
    m.connmark_backend("iptables");
    m.connmark_reconcile(true);
    let mut view = secondary_view();
    // Both kinds of per-CIDR series: /32s and a /28.
    view.pool
        .add_prefixes("eni-1", &["10.0.48.0/28".parse().unwrap()])
        .unwrap();
    m.scrape(&view)
}

fn allowed() -> BTreeSet<String> {
    testkit::promtool::allowed(&Path::new(env!("CARGO_MANIFEST_DIR")).join("promtool-allow.txt"))
}

#[test]
#[ignore = "needs promtool: run by scripts/test.sh as root"]
fn promtool_accepts_the_metrics_but_for_the_go_names() {
    let found = testkit::promtool::findings(&populated());
    let allowed = allowed();
    let unexpected: Vec<&String> = found.difference(&allowed).collect();
    let stale: Vec<&String> = allowed.difference(&found).collect();
    assert!(
        unexpected.is_empty(),
        "promtool lines not in promtool-allow.txt: {unexpected:#?}"
    );
    assert!(
        stale.is_empty(),
        "promtool-allow.txt entries promtool no longer prints: {stale:#?}"
    );
}

/// The allow-list itself: each entry follows a comment saying why it is kept.
#[test]
fn every_allowed_line_says_why() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/promtool-allow.txt");
    let text = std::fs::read_to_string(path).unwrap();
    let mut commented = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') {
            commented = true;
        } else if line.is_empty() {
            commented = false;
        } else {
            assert!(commented, "no reason given above {line:?}");
        }
    }
    assert!(!allowed().is_empty());
}
