//! `--prefix-delegation` and `--custom-networking` on both sides, alone and together, at a
//! few nodes of the launch scenario: every pod placed, on /28 prefixes with the one, in the
//! ENIConfig's subnet and never the node's with the other. On the simulated clock.

use fleet::report::{Report, Side};
use fleet::scenario::{Kind, Networking};

const NODES: usize = 8;

fn launch(prefix_delegation: bool, custom_networking: bool) -> Report {
    let networking = Networking {
        prefix_delegation,
        custom_networking,
    };
    let r = fleet::simulate_with(Kind::Launch, Some(NODES), 7, networking).unwrap();
    eprintln!("{}", r.title());
    eprintln!("ours: {}", r.ours);
    eprintln!("go_cni: {}", r.go_cni);
    assert_eq!(
        (r.prefix_delegation, r.custom_networking),
        (prefix_delegation, custom_networking),
        "the report says which options ran"
    );
    r
}

fn sides(r: &Report) -> [(&str, &Side); 2] {
    [("ours", &r.ours), ("go_cni", &r.go_cni)]
}

fn calls(s: &Side, api: &str) -> u64 {
    s.calls_by_api.get(api).copied().unwrap_or(0)
}

/// Every pod placed, no node down, the same pods on both sides.
fn all_placed(r: &Report) {
    assert!(r.ours.pods_bound > 0);
    assert_eq!(r.ours.pods_bound, r.go_cni.pods_bound, "the same pods");
    for (name, s) in sides(r) {
        assert_eq!(s.pods_placed, s.pods_bound, "{name} placed every pod");
        assert_eq!((s.pods_failed, s.nodes_down), (0, 0), "{name}");
    }
}

/// The pods' addresses came from delegated /28s, not secondary /32s.
fn on_prefixes(r: &Report) {
    for (name, s) in sides(r) {
        assert!(
            s.prefix_addresses_at_end >= s.pods_bound,
            "{name} holds its pods' addresses in /28s: {}",
            s.prefix_addresses_at_end
        );
        assert_eq!(s.prefix_addresses_at_end % 16, 0, "{name}: whole /28s");
        assert_eq!(s.secondary_addresses_at_end, 0, "{name} holds no /32");
    }
}

/// Every pod's address is in its node's ENIConfig subnet, none in a node subnet.
fn in_eni_config_subnets(r: &Report) {
    for (name, s) in sides(r) {
        assert_eq!(s.pods_in_node_subnets, Some(0), "{name}");
        assert_eq!(s.pods_in_eni_config_subnets, Some(s.pods_placed), "{name}");
        // Every pod needs an ENI of the ENIConfig's subnet: the primary ENI serves none.
        assert!(
            calls(s, "CreateNetworkInterface") >= NODES as u64,
            "{name}: {:?}",
            s.calls_by_api
        );
    }
}

/// The requirement of every scenario: ours fails no pod by throttling, makes fewer
/// EC2 calls per node than the Go CNI's algorithm, and has a p50 and p99 time to an address
/// no worse than it.
fn ours_no_worse(r: &Report) {
    assert_eq!(r.ours.pods_failed_throttling, 0);
    let total: u64 = r.ours.calls_by_api.values().sum();
    assert!(total > 0, "ours' EC2 calls are counted");
    assert!((r.ours.ec2_calls_per_node - total as f64 / NODES as f64).abs() < 1e-9);
    assert!(r.ours.ec2_calls_per_node < r.go_cni.ec2_calls_per_node);
    // A pod never placed waits forever.
    let no_later = |a: Option<u64>, b: Option<u64>| a.unwrap_or(u64::MAX) <= b.unwrap_or(u64::MAX);
    assert!(no_later(r.ours.address_p50_ms, r.go_cni.address_p50_ms));
    assert!(no_later(r.ours.address_p99_ms, r.go_cni.address_p99_ms));
}

#[test]
fn with_prefix_delegation_both_sides_place_every_pod_on_28s() {
    let r = launch(true, false);
    all_placed(&r);
    on_prefixes(&r);
    ours_no_worse(&r);
    // No ENIConfig subnet: the figures are not given.
    assert_eq!(r.ours.pods_in_eni_config_subnets, None);
}

#[test]
fn with_custom_networking_no_pod_of_either_side_is_in_its_nodes_subnet() {
    let r = launch(false, true);
    all_placed(&r);
    in_eni_config_subnets(&r);
    ours_no_worse(&r);
    for (name, s) in sides(&r) {
        assert_eq!(s.prefix_addresses_at_end, 0, "{name}: /32s");
    }
    // Ours looks the ENIConfig's subnet up before creating an ENI there.
    assert!(calls(&r.ours, "DescribeSubnets") > 0);
}

#[test]
fn prefix_delegation_and_custom_networking_together() {
    let r = launch(true, true);
    all_placed(&r);
    on_prefixes(&r);
    in_eni_config_subnets(&r);
    ours_no_worse(&r);
}

#[test]
fn the_fragmented_scenario_runs_with_custom_networking_too() {
    let networking = Networking {
        prefix_delegation: false,
        custom_networking: true,
    };
    let r = fleet::simulate_with(Kind::Fragmented, Some(3), 7, networking).unwrap();
    assert!(r.prefix_delegation, "implied by the scenario");
    assert_eq!(r.ours.pods_placed, r.ours.pods_bound);
    assert_eq!(r.ours.pods_in_node_subnets, Some(0));
    // Ours placed every pod on /32s of the fragmented ENIConfig subnet before the heal.
    assert_eq!(
        r.ours.pods_placed_while_fragmented,
        r.ours.pods_bound_while_fragmented
    );
}
