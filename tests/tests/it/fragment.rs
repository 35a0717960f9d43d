//! Prefix delegation on a fragmented subnet, end to end: vpc-sim puts an address owned by no
//! node in every /28 block of the node's subnet, so EC2 refuses every prefix
//! (`InsufficientCidrBlocks`) while single addresses are still free. ipamd serves pods with
//! /32s, returns to prefixes once the strays are gone, and gives the /32s back as their pods
//! leave; no pod loses or shares its address on the way.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use e2e::{METRICS, VpcBox, require_root};
use ipnetwork::Ipv4Network;
use serde_json::{Value, json};

/// What node 1 holds in EC2, per vpc-sim: its secondary /32s and its /28s.
fn holdings(vbox: &VpcBox) -> (Vec<Ipv4Addr>, Vec<Ipv4Network>) {
    let instance = vbox.node(1).instance_id.clone();
    let state = vbox.sim_state();
    let mut ips = Vec::new();
    let mut prefixes = Vec::new();
    for eni in state["enis"].as_array().expect("enis") {
        if eni["attachment"]["instance_id"] != instance.as_str() {
            continue;
        }
        let texts = |k: &str| -> Vec<String> {
            eni[k]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v["value"].as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        ips.extend(
            texts("secondary_ips")
                .iter()
                .map(|s| s.parse::<Ipv4Addr>().expect("an IPv4")),
        );
        prefixes.extend(
            texts("prefixes")
                .iter()
                .map(|s| s.parse::<Ipv4Network>().expect("a /28")),
        );
    }
    (ips, prefixes)
}

fn address(result: &Value) -> Ipv4Addr {
    let text = result["ips"][0]["address"].as_str().expect("an address");
    let net: Ipv4Network = text.parse().expect("a CIDR");
    net.ip()
}

/// The metric's value in ipamd's scrape.
fn metric(vbox: &VpcBox, name: &str) -> f64 {
    let (status, text) = vbox.node(1).get(METRICS);
    assert_eq!(status, 200);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} not in the scrape"))
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn a_fragmented_subnet_serves_pods_by_slash_32s_until_prefixes_come_back() {
    require_root();
    let vbox = VpcBox::up(&[
        "--instance-type",
        "m5.large",
        "--subnet",
        "10.0.0.0/24,fragment=all",
        "--ipamd-env",
        "ENABLE_PREFIX_DELEGATION=true",
        "--ipamd-env",
        "WARM_PREFIX_TARGET=1",
        "--ipamd-env",
        "IP_COOLDOWN_PERIOD=1",
    ]);
    let subnet = vbox.node(1).subnet_id.clone();

    // Fragmented: pods get addresses all the same, as /32s, and traffic reaches them.
    let (old_pods, old_results) = vbox.add_pods(1, 6);
    let old: Vec<Ipv4Addr> = old_results.iter().map(address).collect();
    let (ips, prefixes) = holdings(&vbox);
    assert!(prefixes.is_empty(), "no /28 can be had: {prefixes:?}");
    for (pod, ip) in old_pods.iter().zip(&old) {
        assert!(ips.contains(ip), "{ip} is a /32 of the node's ENIs in EC2");
        assert!(pod.ping_from_node(&ip.to_string()), "no answer from {ip}");
    }
    let pool = vbox.node(1).pool();
    let fallback = &pool["PrefixFallback"];
    let refused = fallback["ENIs"]
        .as_array()
        .expect("ENIs in the fallback")
        .iter()
        .find(|e| e["SubnetID"] == subnet.as_str() && !e["Refused"].is_null())
        .unwrap_or_else(|| panic!("the subnet's refusal in /v1/pool: {fallback}"));
    let reason = refused["Refused"]["Reason"].as_str().unwrap_or_default();
    assert!(reason.contains("InsufficientCidrBlocks"), "{refused}");
    assert!(
        fallback["IPsHeldAsSlash32"].as_u64().unwrap_or(0) >= 6,
        "{fallback}"
    );
    assert!(metric(&vbox, "vpccni_prefix_fallback_ip_addresses") >= 6.0);
    assert!(metric(&vbox, "vpccni_prefix_refusals_total") >= 1.0);

    // The strays go. Six more pods take the node below its warm target with every slot
    // full of /32s: it needs room, so once the backoff ends it gives a free /32 back to ask
    // for a prefix in its slot, and gets one. (A node with what it needs asks only once the
    // fallback is five minutes old, unless a slot frees.)
    let report = vbox.set_fragment(&subnet, json!("none"));
    assert_eq!(report["strays"], 0, "{report}");
    let (filler_pods, filler_results) = vbox.add_pods(1, 6);
    testkit::wait_ok(Duration::from_secs(360), "a /28 delegated again", || {
        let (_, prefixes) = holdings(&vbox);
        if prefixes.is_empty() {
            Err(format!("pool: {}", vbox.node(1).pool()["Reason"]))
        } else {
            Ok(())
        }
    });
    vbox.node(1).quiesce();

    // New pods get addresses from /28s; the old ones keep theirs; nobody shares one.
    let (new_pods, new_results) = vbox.add_pods(1, 4);
    let (_, prefixes) = holdings(&vbox);
    for (pod, result) in new_pods.iter().zip(&new_results) {
        let ip = address(result);
        assert!(
            prefixes.iter().any(|p| p.contains(ip)),
            "{ip} is not in a delegated /28: {prefixes:?}"
        );
        assert!(pod.ping_from_node(&ip.to_string()), "no answer from {ip}");
    }
    for (pod, ip) in old_pods.iter().zip(&old) {
        assert!(pod.ping_from_node(&ip.to_string()), "{ip} lost its pod");
    }
    let mut all: Vec<Ipv4Addr> = old.clone();
    all.extend(filler_results.iter().map(address));
    all.extend(new_results.iter().map(address));
    let distinct: HashSet<&Ipv4Addr> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "an address given twice: {all:?}");

    // The /32 pods leave: their addresses go back, and the pool holds prefixes only.
    for (pod, result) in old_pods
        .iter()
        .zip(&old_results)
        .chain(filler_pods.iter().zip(&filler_results))
    {
        pod.del(result);
    }
    testkit::wait_ok(Duration::from_secs(180), "every /32 given back", || {
        let (ips, _) = holdings(&vbox);
        if ips.is_empty() {
            Ok(())
        } else {
            Err(format!("/32s still held: {ips:?}"))
        }
    });
    assert_eq!(metric(&vbox, "vpccni_prefix_fallback_ip_addresses"), 0.0);
    for (pod, result) in new_pods.iter().zip(&new_results) {
        let ip = address(result).to_string();
        assert!(pod.ping_from_node(&ip), "{ip} stopped answering");
    }
}
