//! IMDS shows a new ENI 5 s after EC2 attached it (as real IMDS lags). ipamd growing and
//! reconciling every second meanwhile, and killed and restarted inside the lag, attaches no
//! ENI twice and loses none.

mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::*;
use e2e::{VpcBox, conf, require_root};
use serde_json::json;

fn calls(vbox: &VpcBox, action: &str) -> u64 {
    vbox.sim_calls().get(action).copied().unwrap_or(0)
}

/// Waits (bounded) until vpc-sim has received `n` calls of `action`.
fn wait_for_calls(vbox: &VpcBox, action: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while calls(vbox, action) < n {
        assert!(
            Instant::now() < deadline,
            "{action} never reached {n}: {:?}",
            vbox.sim_calls()
        );
        sleep(Duration::from_millis(20));
    }
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
            wait_for_calls(&vbox, "AttachNetworkInterface", attaches);
            // ...and is killed while IMDS does not show it yet, then restarted inside the lag.
            vbox.stop_ipamd(1, true);
            vbox.start_ipamd(1);
        }
    }
    // Reconciliation runs every second through the rest of the lag and after it.
    sleep(Duration::from_secs(7));
    settle_and_agree(&vbox, 1);

    let (attached, _) = ec2_view(&vbox, 1);
    assert_eq!(attached.len(), 3, "ENIs attached to the node: {attached:?}");
    let c = vbox.sim_calls();
    let n = |a: &str| c.get(a).copied().unwrap_or(0);
    assert_eq!(
        (n("CreateNetworkInterface"), n("AttachNetworkInterface")),
        (2, 2),
        "each ENI created and attached once: {c:?}"
    );
    assert_eq!(
        (n("DetachNetworkInterface"), n("DeleteNetworkInterface")),
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
