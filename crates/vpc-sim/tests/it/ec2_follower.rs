//! EC2 with a follower (the fabric's seam): it sees every change before the reply, and a
//! follower that cannot follow makes the call fail with InternalError and leaves nothing changed.

use crate::common;

use std::sync::{Arc, Mutex};

use common::{Harness, topology};
use vpc_sim::fabric::FabricError;
use vpc_sim::model::Model;
use vpc_sim::sim::{Follower, SharedFollower};

/// Remembers how many addresses every ENI held at each call; fails while `fail` is set.
#[derive(Default)]
struct Probe {
    seen: Vec<usize>,
    fail: bool,
}

impl Follower for Probe {
    fn follow(&mut self, model: &Model) -> Result<(), FabricError> {
        self.seen
            .push(model.enis().map(|e| e.private_ips().count()).sum());
        if self.fail {
            Err(FabricError::Plan("probe says no".into()))
        } else {
            Ok(())
        }
    }
}

fn harness() -> (Harness, Arc<Mutex<Probe>>) {
    let probe = Arc::new(Mutex::new(Probe::default()));
    let follower: SharedFollower = probe.clone();
    (
        Harness::with_follower(topology("t3.medium", &["10.0.0.0/24"], 1), follower),
        probe,
    )
}

fn addresses(h: &Harness) -> usize {
    h.sim.model().enis().map(|e| e.private_ips().count()).sum()
}

#[tokio::test]
async fn the_follower_sees_each_change_before_the_reply() {
    let (h, probe) = harness();
    let (_, eni) = h.instance(0);
    h.ok(&[
        (
            "Action",
            cloud::Action::AssignPrivateIpAddresses.wire_name(),
        ),
        ("NetworkInterfaceId", &eni),
        ("SecondaryPrivateIpAddressCount", "2"),
    ])
    .await;
    assert_eq!(probe.lock().unwrap().seen, vec![3]);
    // A refused call changes nothing and is not followed.
    h.err(&[
        (
            "Action",
            cloud::Action::AssignPrivateIpAddresses.wire_name(),
        ),
        ("NetworkInterfaceId", &eni),
        ("SecondaryPrivateIpAddressCount", "50"),
    ])
    .await;
    assert_eq!(probe.lock().unwrap().seen, vec![3]);
}

#[tokio::test]
async fn a_follower_failure_is_an_internal_error_and_the_change_is_rolled_back() {
    let (h, probe) = harness();
    let (_, eni) = h.instance(0);
    probe.lock().unwrap().fail = true;
    let r = h
        .call(&[
            (
                "Action",
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("SecondaryPrivateIpAddressCount", "2"),
        ])
        .await;
    assert_eq!(r.status, 500, "{}", r.body);
    let x = r.xml();
    assert_eq!(x.text_at("Errors/Error/Code"), "InternalError");
    assert!(
        x.text_at("Errors/Error/Message").contains("probe says no"),
        "{}",
        r.body
    );
    assert_eq!(addresses(&h), 1, "rolled back");
    // Asked to follow the change, then the rolled-back model.
    assert_eq!(probe.lock().unwrap().seen, vec![3, 1]);

    probe.lock().unwrap().fail = false;
    h.ok(&[
        (
            "Action",
            cloud::Action::AssignPrivateIpAddresses.wire_name(),
        ),
        ("NetworkInterfaceId", &eni),
        ("SecondaryPrivateIpAddressCount", "2"),
    ])
    .await;
    assert_eq!(addresses(&h), 3);
}
