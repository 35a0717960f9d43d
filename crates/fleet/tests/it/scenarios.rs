//! Every scenario of the fleet simulator at a reduced size (the full sizes are
//! scripts/fleet-report.sh's), with what the simulation requires of ipamd against the Go
//! CNI's algorithm on the same simulated EC2. The simulator's clock is simulated: these take
//! seconds.

use fleet::report::Side;
use fleet::scenario::Kind;

fn show(name: &str, s: &Side) {
    eprintln!("{name}: {s}");
}

#[test]
fn launch_no_pod_fails_by_throttling_and_fewer_calls_than_the_go_cni() {
    let r = fleet::simulate(Kind::Launch, Some(120), 7).unwrap();
    show("ours", &r.ours);
    show("go_cni", &r.go_cni);
    assert_eq!((r.ours.pods_failed, r.ours.pods_failed_throttling), (0, 0));
    assert_eq!(r.ours.pods_placed, r.ours.pods_bound, "every pod placed");
    assert!(r.ours.ec2_calls_per_node < r.go_cni.ec2_calls_per_node);
    assert_eq!((r.ours.nodes_down, r.go_cni.nodes_down), (0, 0));
    assert_eq!(
        r.ours.pods_bound, r.go_cni.pods_bound,
        "the same pods for both"
    );
}

#[test]
fn scarcity_mode_places_more_pods_than_without_it() {
    let r = fleet::simulate(Kind::Scarcity, Some(60), 7).unwrap();
    let without = r.ours_without_scarcity_mode.as_ref().unwrap();
    show("ours", &r.ours);
    show("ours without scarcity mode", without);
    show("go_cni", &r.go_cni);
    assert!(r.ours.pods_placed > without.pods_placed);
    assert!(r.ours.pods_placed > r.go_cni.pods_placed);
    assert!(r.ours.idle_addresses < without.idle_addresses);
}

#[test]
fn a_throttling_storm_fails_no_pod_of_ours_by_throttling() {
    let r = fleet::simulate(Kind::Throttle, Some(60), 7).unwrap();
    show("ours", &r.ours);
    show("go_cni", &r.go_cni);
    assert!(
        r.ours.throttled_calls > 0,
        "the storm reached EC2's answers"
    );
    assert_eq!((r.ours.pods_failed, r.ours.pods_failed_throttling), (0, 0));
    // The same pods on both sides, timed from their creation: a node whose CNI cannot start
    // in the storm (the Go CNI's init is fatal when EC2 refuses it) keeps its pods waiting.
    assert_eq!(r.ours.pods_bound, r.go_cni.pods_bound);
    let go_p99 = r.go_cni.address_p99_ms.unwrap_or(u64::MAX);
    assert!(
        go_p99 >= 20_000,
        "the Go CNI's p99 {go_p99} ms hides its crash loop"
    );
}

#[test]
fn churn_runs_an_hour_and_places_every_pod() {
    let r = fleet::simulate(Kind::Churn, Some(30), 7).unwrap();
    show("ours", &r.ours);
    show("go_cni", &r.go_cni);
    assert_eq!(r.simulated_seconds, 3_600);
    assert!(r.ours.pods_bound > 30 * 30, "pods were replaced");
    // A pod bound in the last seconds of the hour may not have its address yet.
    assert!(
        r.ours.pods_failed <= 10,
        "{} pods got no address",
        r.ours.pods_failed
    );
}

#[test]
fn a_fragmented_subnet_places_every_pod_of_ours_and_none_of_the_go_cnis() {
    let r = fleet::simulate(Kind::Fragmented, Some(5), 7).unwrap();
    show("ours", &r.ours);
    show("go_cni", &r.go_cni);
    let healed = r.healed_at_seconds.expect("the strays go within the run");
    assert!(healed < r.simulated_seconds);
    let bound = r.ours.pods_bound_while_fragmented.unwrap();
    assert_eq!(bound, r.ours.pods_bound, "every pod bound before the heal");
    assert_eq!(r.go_cni.pods_bound_while_fragmented, Some(bound));
    // While every /28 held a stray, ours placed every pod on /32s; the Go CNI, growing by
    // prefixes only, none.
    assert_eq!(r.ours.pods_placed_while_fragmented, Some(bound));
    assert_eq!(r.go_cni.pods_placed_while_fragmented, Some(0));
    assert_eq!((r.ours.pods_failed, r.ours.nodes_down), (0, 0));
    // Both sides asked EC2 for prefixes (and were refused) rather than never trying.
    for side in [&r.ours, &r.go_cni] {
        assert!(
            side.calls_by_api
                .get("AssignPrivateIpAddresses")
                .copied()
                .unwrap_or(0)
                > 0
        );
    }
    // Once the blocks were free, ours asked for prefixes again and got them.
    assert!(
        r.ours.prefix_addresses_at_end > 0,
        "ours is back on prefixes"
    );
}
