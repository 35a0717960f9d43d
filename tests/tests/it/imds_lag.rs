//! IMDS shows a new ENI 5 s after EC2 attached it (as real IMDS lags). ipamd growing and
//! reconciling every second meanwhile, and killed and restarted inside the lag, attaches no
//! ENI twice and loses none.

use crate::common;

use std::time::Duration;

use common::*;
use e2e::{Node, VpcBox, conf, require_root};
use serde_json::json;
use testkit::http::{exchange, split_url, with_port};
use testkit::netns::connect_in;

fn calls(vbox: &VpcBox, action: &str) -> u64 {
    vbox.sim_calls().get(action).copied().unwrap_or(0)
}

/// Waits (bounded) until vpc-sim has received `n` calls of `action`.
fn wait_for_calls(vbox: &VpcBox, action: &str, n: u64) {
    testkit::wait_ok(
        Duration::from_secs(60),
        &format!("{n} {action} calls"),
        || match calls(vbox, action) {
            done if done >= n => Ok(()),
            _ => Err(format!("{:?}", vbox.sim_calls())),
        },
    );
}

/// How many ENIs the node's IMDS lists now, asked from inside the node as ipamd asks it
/// (IMDSv2: a session token first).
fn imds_enis(node: &Node) -> usize {
    let env = std::fs::read_to_string(node.ipamd_env.as_ref().expect("an ipamd the box started"))
        .expect("ipamd's environment");
    let endpoint = env
        .lines()
        .find_map(|l| l.strip_prefix("AWS_EC2_METADATA_SERVICE_ENDPOINT="))
        .expect("ipamd's IMDS endpoint");
    let (host, _) = split_url(endpoint);
    let ask = |method: &str, path: &str, header: (&str, &str)| {
        let stream = connect_in(&node.netns, &with_port(host));
        let (status, body) = exchange(stream, method, host, path, &[header], "");
        assert_eq!(status, 200, "{method} {path}: {body}");
        body
    };
    let token = ask(
        "PUT",
        "/latest/api/token",
        ("X-aws-ec2-metadata-token-ttl-seconds", "60"),
    );
    ask(
        "GET",
        "/latest/meta-data/network/interfaces/macs/",
        ("X-aws-ec2-metadata-token", &token),
    )
    .lines()
    .filter(|l| !l.trim().is_empty())
    .count()
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn a_lagging_imds_causes_no_double_attach_and_no_lost_eni() {
    require_root();
    let vbox = VpcBox::up(&[
        "--imds-lag-ms",
        "5000",
        "--ipamd-env",
        "IPAMD_RECONCILE_INTERVAL=1",
    ]);
    // t3.medium: 5 secondary addresses per ENI, 3 ENIs. WARM_ENI_TARGET=1: the primary ENI's
    // five are the warm pool until pods take them.
    let socket = vbox.node(1).ipamd_socket.clone();
    let c = conf("1.1.0", &socket, json!({}));
    let pods: Vec<_> = (0..10).map(|_| vbox.pod(1)).collect();
    let mut ips = Vec::new();
    for (n, pod) in pods.iter().enumerate() {
        ips.push(pod_ip(&pod.cni("ADD").stdin(c.clone()).run().ok()));
        if n == 4 || n == 9 {
            // The primary (then the second) ENI is full: ipamd attaches another ENI now...
            let attaches = if n == 4 { 1 } else { 2 };
            wait_for_calls(
                &vbox,
                cloud::Action::AttachNetworkInterface.wire_name(),
                attaches,
            );
            // ...and is killed while IMDS does not show it yet, then restarted inside the lag.
            vbox.stop_ipamd(1, true);
            vbox.start_ipamd(1);
        }
    }
    // Reconciliation runs every second through the rest of the lag, until IMDS shows every
    // ENI, and after it while the pool settles.
    testkit::wait_until(
        Duration::from_secs(60),
        "IMDS to list the node's three ENIs",
        || imds_enis(vbox.node(1)) == 3,
    );
    settle_and_agree(&vbox, 1);

    let (attached, _) = ec2_view(&vbox, 1);
    assert_eq!(attached.len(), 3, "ENIs attached to the node: {attached:?}");
    let c = vbox.sim_calls();
    let n = |a: &str| c.get(a).copied().unwrap_or(0);
    assert_eq!(
        (
            n(cloud::Action::CreateNetworkInterface.wire_name()),
            n(cloud::Action::AttachNetworkInterface.wire_name())
        ),
        (2, 2),
        "each ENI created and attached once: {c:?}"
    );
    assert_eq!(
        (
            n(cloud::Action::DetachNetworkInterface.wire_name()),
            n(cloud::Action::DeleteNetworkInterface.wire_name())
        ),
        (0, 0),
        "no ENI given up: {c:?}"
    );
    assert_eq!(vbox.status(1).pool.assigned, 10);
    for (pod, ip) in pods.iter().zip(&ips) {
        assert!(pod.ping_from_node(ip), "{ip} unreachable");
    }
    let log = std::fs::read_to_string(&vbox.node(1).ipamd_log).unwrap_or_default();
    assert!(!log.contains("panicked"), "{log}");
}
