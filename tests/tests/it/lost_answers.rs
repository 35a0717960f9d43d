//! EC2 calls whose answers are lost or that keep failing, on a box node: a CreateNetworkInterface
//! whose answer is dropped after EC2 acted costs one ENI, not one per retry (ClientToken), and
//! an ENI whose delete keeps failing is asked for at most the EC2 client's attempt budget.

use crate::common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use cloud::throttle::ThrottlePolicy;
use common::*;
use e2e::{Pod, VpcBox, conf, require_root};
use serde_json::json;

/// The EC2 client's attempts per call (its only retry layer).
fn attempt_budget() -> u64 {
    ThrottlePolicy::default().retry.attempts.into()
}

/// Faults of `kind` vpc-sim has injected into `action` so far.
fn injected(vbox: &VpcBox, action: &str, kind: &str) -> u64 {
    vbox.faults()["by_action"][action][kind]
        .as_u64()
        .unwrap_or(0)
}

/// A new pod on node 1 whose ADD must succeed at once (the primary ENI has room).
fn add_pod(vbox: &VpcBox) -> Pod {
    let pod = vbox.pod(1);
    let socket = &vbox.node(1).ipamd_socket;
    pod.cni("ADD")
        .stdin(conf("1.1.0", socket, json!({})))
        .run()
        .ok();
    pod
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn a_create_whose_answers_are_lost_after_ec2_acted_leaves_exactly_one_eni() {
    require_root();
    let vbox = VpcBox::up(&["--instance-type", "m5.large"]);
    settle_and_agree(&vbox, 1);
    let created_before = vbox
        .sim_calls()
        .get(cloud::Action::CreateNetworkInterface.wire_name())
        .copied();

    // Every CreateNetworkInterface is carried out by EC2, then its connection closes with
    // no answer, until at least two answers are lost (bounded: if they never are, the
    // assertion below says so); a pod's ADD makes the pool want a second ENI meanwhile.
    vbox.set_faults(&json!({
        "drop_after_pct": 100, "actions": [cloud::Action::CreateNetworkInterface.wire_name()], "seed": 13
    }));
    let _pod = add_pod(&vbox);
    testkit::within(Duration::from_secs(60), || {
        injected(
            &vbox,
            cloud::Action::CreateNetworkInterface.wire_name(),
            "drop_after",
        ) >= 2
    });
    let lost = injected(
        &vbox,
        cloud::Action::CreateNetworkInterface.wire_name(),
        "drop_after",
    );
    vbox.set_faults(&json!({}));
    assert!(
        lost >= 2,
        "the storm lost {lost} answers; the test needs several: {}",
        vbox.faults()
    );

    // Once answers arrive, the node ends with its primary and one new ENI, attached and in
    // use, and no ENI made for it is left unattached (agreement checks that too).
    settle_and_agree(&vbox, 1);
    let (attached, leaked) = ec2_view(&vbox, 1);
    assert_eq!(attached.len(), 2, "{attached:?}");
    assert!(leaked.is_empty(), "{leaked:?}");
    let created = vbox.sim_calls()[cloud::Action::CreateNetworkInterface.wire_name()]
        - created_before.unwrap_or(0);
    eprintln!("{lost} CreateNetworkInterface answers lost, {created} requests, 1 ENI created");
    assert!(created > lost, "{created} requests for {lost} lost answers");
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn an_eni_whose_delete_keeps_failing_gets_at_most_the_clients_attempts() {
    require_root();
    let vbox = VpcBox::up(&["--instance-type", "m5.large"]);
    settle_and_agree(&vbox, 1);
    let deletes_before = vbox
        .sim_calls()
        .get(cloud::Action::DeleteNetworkInterface.wire_name())
        .copied();

    // The next ENI cannot be attached, so ipamd deletes it at once; every delete fails too.
    vbox.set_faults(&json!({
        "server_error_pct": 100,
        "actions": [cloud::Action::AttachNetworkInterface.wire_name(), cloud::Action::DeleteNetworkInterface.wire_name()],
        "seed": 5
    }));
    let _pod = add_pod(&vbox);
    let budget = attempt_budget();
    let deadline = Instant::now() + Duration::from_secs(60);
    while injected(
        &vbox,
        cloud::Action::DeleteNetworkInterface.wire_name(),
        "server_error",
    ) < budget
    {
        assert!(
            Instant::now() < deadline,
            "ipamd never got to delete the unattached ENI: {}",
            vbox.faults()
        );
        sleep(Duration::from_millis(50));
    }
    // The failed growth step is over: the next one waits for the controller's next round.
    vbox.set_faults(&json!({}));
    let deletes = vbox.sim_calls()[cloud::Action::DeleteNetworkInterface.wire_name()]
        - deletes_before.unwrap_or(0);
    eprintln!(
        "{} requests for the ENI: {deletes} (budget {budget})",
        cloud::Action::DeleteNetworkInterface
    );
    assert_eq!(
        deletes, budget,
        "the client's attempts, and no retry on top of them"
    );
    let (_, leaked) = ec2_view(&vbox, 1);
    assert_eq!(
        leaked.len(),
        1,
        "left for the leaked-ENI cleanup: {leaked:?}"
    );
}
