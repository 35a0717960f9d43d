//! EC2 misbehaving during a scale-up: vpc-sim throttles 30% of the calls
//! (RequestLimitExceeded), fails 10% with 500/503, drops the connection of 10% and answers
//! 10% a second late. ipamd must not crash, must serve ADDs from its warm pool at once, must
//! back off (visible in its metrics) and, once the faults stop, converge: every pod gets an
//! address and EC2, ipamd and the node agree.

use crate::common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::*;
use e2e::{Pod, VpcBox, conf, require_root};
use serde_json::{Value, json};

/// Pods in the scale-up: beyond the primary ENI of an m5.large (9 addresses), so ENIs are
/// created and attached under the faults.
const PODS: usize = 20;

/// ADD as kubelet does: after a failure, DEL, then try again a little later. Returns the
/// result and how many attempts it took.
fn add_until_ok(pod: &Pod, c: &str, socket: &str) -> (Value, usize) {
    for attempt in 1..=120 {
        let out = pod.cni("ADD").stdin(c.to_string()).run();
        if out.code == 0 {
            return (
                serde_json::from_str(&out.stdout).expect("ADD result"),
                attempt,
            );
        }
        pod.cni("DEL")
            .stdin(conf("1.1.0", socket, json!({})))
            .run()
            .ok_silent();
        // Kubelet's retry pause: part of the scenario (ADDs keep coming while EC2 misbehaves),
        // not a wait for anything.
        sleep(Duration::from_millis(500));
    }
    panic!("ADD of {} never succeeded", pod.container_id);
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.contains("ipamd"))
}

/// The sum of the samples of metric `name` whose line contains `needle` (e.g. a label).
fn metric(text: &str, name: &str, needle: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn ec2_faults_during_scale_up_are_survived_backed_off_and_converged() {
    require_root();
    // WARM_IP_TARGET=5: five spare addresses, and an Assign call after nearly every ADD.
    let vbox = VpcBox::up(&[
        "--instance-type",
        "m5.large",
        "--ipamd-env",
        "WARM_IP_TARGET=5",
    ]);
    let node = vbox.node(1);
    let socket = node.ipamd_socket.clone();
    let c = conf("1.1.0", &socket, json!({}));
    settle_and_agree(&vbox, 1);
    let start = vbox.status(1).pool;
    let warm = (start.total - start.assigned - start.cooling) as usize;
    assert!(warm >= 5, "{start:?}");
    let pid = node.ipamd_pid.expect("an ipamd the box started");

    let plan = json!({
        "throttle_pct": 30, "server_error_pct": 10, "drop_pct": 10,
        "slow_pct": 10, "slow_ms": 1000, "seed": 7
    });
    vbox.set_faults(&plan);
    let pods: Vec<Pod> = (0..PODS).map(|_| vbox.pod(1)).collect();
    let mut results = Vec::new();
    for (n, pod) in pods.iter().enumerate() {
        let (result, attempts) = add_until_ok(pod, &c, &socket);
        if n < warm {
            assert_eq!(
                attempts, 1,
                "pod {n} found no address although the warm pool held {warm}"
            );
        }
        results.push(result);
        assert!(alive(pid), "ipamd (pid {pid}) died during the scale-up");
    }
    // Keep EC2 busy until every kind of fault has been injected at least once (bounded):
    // pods come and go, and ipamd tops the pool up after each.
    let kinds = ["throttle", "server_error", "drop", "slow"];
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut extra = Vec::new();
    while kinds
        .iter()
        .any(|k| vbox.faults()["injected"][k].as_u64().unwrap_or(0) == 0)
    {
        assert!(
            Instant::now() < deadline,
            "not every fault was injected: {}",
            vbox.faults()
        );
        let pod = vbox.pod(1);
        let (result, _) = add_until_ok(&pod, &c, &socket);
        extra.push((pod, result));
        if extra.len() > 4 {
            let (pod, result) = extra.remove(0);
            pod.del(&result);
        }
        assert!(alive(pid), "ipamd (pid {pid}) died");
    }
    let report = vbox.faults();
    eprintln!("faults injected: {}", report["injected"]);

    // Backoff shows in the metrics: retries by reason, and the time spent waiting.
    let (status, text) = node.get("http://127.0.0.1:61678/metrics");
    assert_eq!(status, 200);
    let retries = metric(&text, "vpccni_ec2_retries_total{", "");
    let throttle_retries = metric(
        &text,
        "vpccni_ec2_retries_total{",
        "reason=\"RequestLimitExceeded\"",
    );
    let waited = metric(&text, "vpccni_ec2_backoff_seconds_total{", "");
    eprintln!(
        "ipamd: {retries} EC2 retries ({throttle_retries} after throttling), {waited:.2} s backing off"
    );
    assert!(
        throttle_retries >= 1.0,
        "no throttling retry in the metrics:\n{text}"
    );
    assert!(waited > 0.0, "no backoff in the metrics:\n{text}");

    // The faults stop: everything converges.
    vbox.set_faults(&json!({}));
    settle_and_agree(&vbox, 1);
    assert_eq!(vbox.status(1).pool.assigned as usize, PODS + extra.len());
    for (pod, result) in pods.iter().zip(&results) {
        assert!(
            pod.ping_from_node(&pod_ip(result)),
            "{} unreachable",
            pod_ip(result)
        );
    }
    assert!(alive(pid), "ipamd (pid {pid}) died");
    let log = std::fs::read_to_string(&node.ipamd_log).unwrap_or_default();
    assert!(!log.contains("panicked"), "{log}");
}
