//! Prefix delegation on a fragmented subnet, on vpc-sim's model: every /28 of the node's
//! subnet holds an address someone else owns, so EC2 refuses prefixes
//! (`InsufficientCidrBlocks`) while single addresses are still free.

use crate::support::*;

use std::time::Duration;

use pool::{PREFIX_RETRY_MAX, RELEASE_INTERVAL};
use vpc_sim::Fragment;

const PD: [(&str, &str); 3] = [
    ("ENABLE_PREFIX_DELEGATION", "true"),
    ("WARM_PREFIX_TARGET", "1"),
    ("IP_COOLDOWN_PERIOD", "1"),
];

/// The node's /32s and /28s in EC2, over its ENIs.
fn holdings(node: &Node) -> (usize, usize) {
    let enis = node.ec2.enis();
    let mine = enis.iter().filter(|e| {
        e.attachment
            .as_ref()
            .is_some_and(|a| a.instance_id.as_deref() == Some(node.ec2.instance.as_str()))
    });
    mine.fold((0, 0), |(ips, prefixes), e| {
        (ips + e.secondary_ips.len(), prefixes + e.prefixes.len())
    })
}

#[tokio::test]
async fn pods_get_slash_32s_on_a_fragmented_subnet_and_prefixes_return_when_blocks_do() {
    let node = Node::at(1_000_000);
    let subnet = node.ec2.eni(&node.ec2.primary).unwrap().subnet_id;
    let report = node
        .ec2
        .account()
        .set_fragment(&subnet, Fragment::All)
        .unwrap();
    assert_eq!(report.free_prefixes, 0);
    let d = node.start(&PD).await;

    // The pool met its target with /32s, and pods get them.
    let (ips, prefixes) = holdings(&node);
    assert_eq!(prefixes, 0);
    assert!(ips >= 5, "{ips} /32s");
    let first = ipv4_of(&d, 1).await;
    let pool = d.pool_snapshot();
    let refusal = &pool.prefix_fallbacks().subnets[&subnet];
    assert!(
        refusal.reason.contains("InsufficientCidrBlocks"),
        "{refusal:?}"
    );
    // t3.medium: 3 ENIs of 5 slots, a /32 in each while prefixes are refused.
    assert_eq!(d.capacity(), Some(15));

    // Retries while the subnet stays fragmented cost one refused call per backoff.
    let assigns = || {
        node.ec2
            .calls()
            .iter()
            .filter(|c| c.starts_with(cloud::Action::AssignPrivateIpAddresses.wire_name()))
            .count()
    };
    let before = assigns();
    for _ in 0..10 {
        node.clock.advance(Duration::from_secs(1));
        d.grow().await;
    }
    assert_eq!(assigns(), before, "no call before the backoff ends");

    // The strays go; once the backoff ends, a probe gets a prefix, and new pods use it.
    node.ec2
        .account()
        .set_fragment(&subnet, Fragment::None)
        .unwrap();
    node.clock.advance(PREFIX_RETRY_MAX);
    d.grow().await;
    d.grow().await;
    let (_, prefixes) = holdings(&node);
    assert!(prefixes >= 1, "a prefix after the probe");
    assert!(d.pool_snapshot().prefix_fallbacks().subnets.is_empty());
    let second = ipv4_of(&d, 2).await;
    let pool = d.pool_snapshot();
    let in_prefix = |ip| {
        pool.enis()
            .flat_map(|e| pool.prefixes(&e.id).collect::<Vec<_>>())
            .any(|p| p.contains(ip))
    };
    assert!(in_prefix(second), "{second} is not in a /28");
    assert_eq!(ipv4_of(&d, 1).await, first, "pod 1 kept its /32");

    // Pod 1 leaves: its /32 goes back with the others, and only prefixes stay.
    d.handle(del(1)).await.unwrap();
    node.clock
        .advance(RELEASE_INTERVAL + Duration::from_secs(2));
    d.grow().await;
    let (ips, prefixes) = holdings(&node);
    assert_eq!(ips, 0, "every /32 given back");
    assert!(prefixes >= 1);
    assert!(d.capacity().unwrap() > 15, "capacity counts /28s again");
}
