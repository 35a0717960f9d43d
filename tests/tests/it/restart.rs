//! ipamd killed and restarted, and ipamd away during DEL.

use crate::common;

use common::*;
use e2e::{VpcBox, conf, require_root};
use serde_json::json;

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn sigkill_and_restart_keep_every_assignment_and_cooldown() {
    require_root();
    // A long cooldown so that "still cooling after the restart" cannot be an accident of timing.
    // MAX_ENI=1 keeps the pool on the primary ENI, so its counts are exact.
    let vbox = VpcBox::up(&[
        "--ipamd-env",
        "IP_COOLDOWN_PERIOD=600",
        "--ipamd-env",
        "MAX_ENI=1",
    ]);
    let node = vbox.node(1);
    let socket = node.ipamd_socket.clone();
    let (pods, results) = vbox.add_pods(1, 3);
    // The third pod goes away: its address cools down.
    pods[2].del(&results[2]);
    let before = vbox.status(1);
    assert_eq!(
        (before.pool.total, before.pool.assigned, before.pool.cooling),
        (5, 2, 1)
    );

    vbox.stop_ipamd(1, true);
    let pid = vbox.start_ipamd(1);
    assert_ne!(Some(pid), node.ipamd_pid);

    let after = vbox.status(1);
    assert_eq!(after.pool, before.pool, "the pool came back exactly");
    // The live pods' routes were found: nothing was taken for a dead pod's.
    let log = std::fs::read_to_string(&node.ipamd_log).unwrap();
    assert!(!log.contains("without a route"), "{log}");
    // Live pods: ipamd still holds their addresses, and their wiring checks out.
    for (pod, result) in pods.iter().zip(&results).take(2) {
        pod.cni("CHECK")
            .stdin(conf("1.1.0", &socket, json!({ "prevResult": result })))
            .run()
            .ok_silent();
        assert!(pod.ping_from_node(&pod_ip(result)));
    }
    // The two never-used addresses go to new pods; the cooling one is not handed out.
    let cooling = pod_ip(&results[2]);
    let newcomers: Vec<_> = (0..3).map(|_| vbox.pod(1)).collect();
    for pod in &newcomers[..2] {
        assert_ne!(
            pod_ip(&pod.add()),
            cooling,
            "a cooling address was handed out after the restart"
        );
    }
    newcomers[2]
        .cni("ADD")
        .stdin(conf("1.1.0", &socket, json!({})))
        .run()
        .error(11, "cooling");
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn del_succeeds_and_cleans_the_host_while_ipamd_is_down() {
    require_root();
    let vbox = VpcBox::up(&[]);
    let node = vbox.node(1);
    let socket = node.ipamd_socket.clone();
    let pod = vbox.pod(1);
    let result = pod.add();
    let (ip, veth) = (pod_ip(&result), host_veth(&result));

    vbox.stop_ipamd(1, false);
    let out = pod
        .cni("DEL")
        .stdin(conf("1.1.0", &socket, json!({ "prevResult": result })))
        .run();
    out.ok_silent();
    assert!(
        out.stderr.contains("Handled pod teardown using prevResult"),
        "{}",
        out.stderr
    );
    // The pod is unreachable at once; its veth pair waits for the namespace's removal or,
    // as here where the namespace stays, for ipamd's sweep once it is back.
    assert_host_unrouted(&node.netns, &ip);
    // The second, bare DEL of containerd also succeeds with ipamd away.
    pod.cni("DEL")
        .env("CNI_NETNS", "")
        .stdin(conf("1.1.0", &socket, json!({})))
        .run()
        .ok_silent();

    // ipamd missed the DEL. When back it finds the pod's route gone, but the address was
    // assigned too recently to be sure no ADD is still wiring it (DEAD_POD_GRACE), so it is
    // kept and the runtime's GC hands it back. (Older ones are released at startup: see
    // ipamd/tests/recovery.rs.)
    vbox.start_ipamd(1);
    assert_eq!(vbox.status(1).pool.assigned, 1);
    let log = std::fs::read_to_string(&node.ipamd_log).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("kept an address without a route") && l.contains(&ip)),
        "{log}"
    );
    let gc = conf("1.1.0", &socket, json!({ "cni.dev/valid-attachments": [] }));
    e2e::Cni::new("GC", node).stdin(gc).run().ok_silent();
    assert_eq!(vbox.status(1).pool.assigned, 0);
    // While ipamd held the address it kept the pod's veth; released, the veth goes.
    assert_host_clean(&node.netns, &ip, &veth);
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn damaged_state_is_rebuilt_and_live_pods_keep_their_addresses() {
    require_root();
    // Reconciliation every 2 s: it releases recovered addresses once their pods are gone.
    let vbox = VpcBox::up(&["--ipamd-env", "IPAMD_RECONCILE_INTERVAL=2"]);
    let node = vbox.node(1);
    let (pods, results) = vbox.add_pods(1, 3);
    let ips: Vec<String> = results.iter().map(pod_ip).collect();
    let state = std::path::Path::new(&node.state_dir);
    let log_since = |mark: usize| {
        let log = std::fs::read_to_string(&node.ipamd_log).unwrap();
        log[mark.min(log.len())..].to_string()
    };

    // 1. Killed, and the database truncated behind its back: sled opens it empty.
    vbox.stop_ipamd(1, true);
    let mark = std::fs::metadata(&node.ipamd_log).unwrap().len() as usize;
    std::fs::OpenOptions::new()
        .write(true)
        .open(state.join("db"))
        .unwrap()
        .set_len(100)
        .unwrap();
    vbox.start_ipamd(1);
    let log = log_since(mark);
    assert!(log.contains("stored state lost"), "{log}");
    for ip in &ips {
        assert!(
            log.lines().any(
                |l| l.contains("recovered an address stored state did not hold")
                    && l.contains(ip.as_str())
            ),
            "{ip} not recovered:\n{log}"
        );
    }
    assert_eq!(
        vbox.status(1).pool.assigned,
        3,
        "the live pods' addresses are held"
    );
    for (pod, ip) in pods.iter().zip(&ips) {
        assert!(pod.ping_from_node(ip), "{ip} unreachable");
    }
    // A new pod gets none of them (it waits for an address nobody may still be using).
    let newcomer = vbox.pod(1);
    let fresh = pod_ip(&newcomer.add());
    assert!(!ips.contains(&fresh), "{fresh} handed out twice");

    // 2. Killed again, and the database made unopenable: it is moved aside, not deleted.
    vbox.stop_ipamd(1, true);
    let mark = std::fs::metadata(&node.ipamd_log).unwrap().len() as usize;
    std::fs::write(state.join("conf"), b"\xff\xfe not a sled config").unwrap();
    vbox.start_ipamd(1);
    let log = log_since(mark);
    assert!(log.contains("could not be opened"), "{log}");
    let parent = state.parent().unwrap();
    let kept = std::fs::read_dir(parent)
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().contains(".corrupt-"));
    assert!(
        kept,
        "the damaged database was not kept next to {}",
        state.display()
    );
    assert_eq!(
        vbox.status(1).pool.assigned,
        4,
        "three recovered pods and the newcomer"
    );

    // 3. The pods go. Their DELs name keys ipamd no longer has; the recovered addresses
    // are released once their routes are gone, and everything agrees again.
    for (pod, result) in pods.iter().zip(&results) {
        pod.del(result);
    }
    settle_and_agree(&vbox, 1);
    assert_eq!(vbox.status(1).pool.assigned, 1, "only the newcomer");
}
