//! Subnet fragmentation over HTTP: `--subnet ...,fragment=` at build time, `/_sim/fragment` at
//! runtime, and EC2's `InsufficientCidrBlocks` for prefixes while single addresses still work.

use crate::common;

use axum::body::Body;
use axum::http::Request;
use common::{Harness, Reply, topology};
use serde_json::{Value, json};
use tower::ServiceExt;
use vpc_sim::model::Fragment;

/// One t3.medium (Nitro: prefixes allowed) in 10.0.0.0/24, the subnet fragmented as `f`.
fn harness(f: Fragment) -> Harness {
    let mut t = topology("t3.medium", &["10.0.0.0/24"], 1);
    t.subnets[0].fragment = f;
    Harness::new(t, 0)
}

async fn admin(h: &Harness, method: &str, body: &str) -> Reply {
    let req = Request::builder()
        .method(method)
        .uri("/_sim/fragment")
        .body(Body::from(body.to_string()))
        .unwrap();
    Reply::from(h.ec2.clone().oneshot(req).await.unwrap()).await
}

/// A fragment request that must be accepted; returns the JSON answer.
async fn fragment(h: &Harness, subnet: &str, level: Value) -> Value {
    let body = json!({ "subnet": subnet, "fragment": level }).to_string();
    let r = admin(h, "PUT", &body).await;
    assert_eq!(r.status, 200, "{body} -> {}", r.body);
    assert_eq!(r.headers["content-type"], "application/json");
    serde_json::from_str(&r.body).unwrap()
}

/// A fragment request that must be refused; returns the error text.
async fn refused(h: &Harness, body: &str) -> String {
    let r = admin(h, "PUT", body).await;
    assert_eq!(r.status, 400, "{body} -> {}", r.body);
    let v: Value = serde_json::from_str(&r.body).unwrap();
    v["error"].as_str().unwrap().to_string()
}

async fn available(h: &Harness, subnet: &str) -> String {
    let x = h
        .ok(&[
            ("Action", cloud::Action::DescribeSubnets.wire_name()),
            ("SubnetId.1", subnet),
        ])
        .await;
    x.items("subnetSet")[0]
        .text_at("availableIpAddressCount")
        .to_string()
}

#[tokio::test]
async fn a_fully_fragmented_subnet_refuses_prefixes_but_not_addresses_until_healed() {
    let h = harness(Fragment::All);
    let (_, eni) = h.instance(0);
    let subnet = h.subnet(0);
    // 251 usable, the primary ENI's address, and 14 strays (every /28 but the first and last).
    assert_eq!(available(&h, &subnet).await, "236");

    let (code, msg) = h.err(&assign_pairs(&eni, "Ipv4PrefixCount", "1")).await;
    assert_eq!(code, "InsufficientCidrBlocks", "{msg}");
    assert!(msg.contains("free cidr blocks"), "{msg}");
    let (code, msg) = h
        .err(&[
            ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
            ("SubnetId", &subnet),
            ("Ipv4PrefixCount", "1"),
        ])
        .await;
    assert_eq!(code, "InsufficientCidrBlocks", "{msg}");
    let enis = h.sim.model().enis().count();
    assert_eq!(enis, 1, "the refused CreateNetworkInterface left no ENI");

    let r = h
        .call(&assign_pairs(&eni, "SecondaryPrivateIpAddressCount", "3"))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let got: Vec<String> = r
        .xml()
        .items("assignedPrivateIpAddressesSet")
        .iter()
        .map(|i| i.text_at("privateIpAddress").to_string())
        .collect();
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|a| !a.ends_with(".31")), "{got:?}");
    assert_eq!(available(&h, &subnet).await, "233");

    let listed = admin(&h, "GET", "").await;
    assert_eq!(listed.status, 200);
    let listed: Value = serde_json::from_str(&listed.body).unwrap();
    assert_eq!(
        listed,
        json!({"subnets": [{
            "subnet": subnet,
            "cidr": "10.0.0.0/24",
            "fragment": "all",
            "strays": 14,
            "available_ip_address_count": 233,
            "free_prefixes": 0,
        }]})
    );

    let healed = fragment(&h, &subnet, json!("none")).await;
    assert_eq!(
        (
            &healed["fragment"],
            &healed["strays"],
            &healed["free_prefixes"]
        ),
        (&json!("none"), &json!(0), &json!(14))
    );
    assert_eq!(healed["available_ip_address_count"], 247);
    let r = h.call(&assign_pairs(&eni, "Ipv4PrefixCount", "1")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let p = r.xml().items("assignedIpv4PrefixSet")[0]
        .text_at("ipv4Prefix")
        .to_string();
    assert_eq!(p, "10.0.0.16/28");
    // The ENI's secondaries survived the strays going.
    let held = h.sim.model().eni(&eni).unwrap().secondary_ips.len();
    assert_eq!(held, 3);
    h.ok(&[
        ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
        ("SubnetId", &subnet),
        ("Ipv4PrefixCount", "1"),
    ])
    .await;
}

fn assign_pairs<'a>(eni: &'a str, what: &'a str, n: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        (
            "Action",
            cloud::Action::AssignPrivateIpAddresses.wire_name(),
        ),
        ("NetworkInterfaceId", eni),
        (what, n),
    ]
}

#[tokio::test]
async fn fragmenting_at_runtime_takes_a_share_of_blocks_and_bad_requests_get_400() {
    let h = harness(Fragment::None);
    let (_, eni) = h.instance(0);
    let subnet = h.subnet(0);
    let r = fragment(&h, &subnet, json!(50)).await;
    assert_eq!((&r["fragment"], &r["strays"]), (&json!(50), &json!(7)));
    assert_eq!(r["free_prefixes"], 7);
    let r = fragment(&h, &subnet, json!("100")).await;
    assert_eq!(
        (&r["fragment"], &r["free_prefixes"]),
        (&json!(100), &json!(0))
    );
    let (code, _) = h.err(&assign_pairs(&eni, "Ipv4PrefixCount", "1")).await;
    assert_eq!(code, "InsufficientCidrBlocks");

    let before = serde_json::to_string(&h.sim.model().fragment_reports()).unwrap();
    for (body, named) in [
        (
            json!({"subnet": "subnet-0000000000000000f", "fragment": "all"}).to_string(),
            "The subnet ID 'subnet-0000000000000000f' does not exist",
        ),
        (
            json!({"subnet": subnet, "fragment": "most"}).to_string(),
            "fragment: \"most\" is not a fragmentation level",
        ),
        (
            json!({"subnet": subnet, "fragment": 101}).to_string(),
            "fragment: 101 is not a fragmentation level",
        ),
        (json!({"fragment": "all"}).to_string(), "subnet: missing"),
        ("all".to_string(), "not JSON"),
    ] {
        let e = refused(&h, &body).await;
        assert!(e.contains(named), "{body}: {e}");
    }
    let after = serde_json::to_string(&h.sim.model().fragment_reports()).unwrap();
    assert_eq!(before, after, "a refused request changes nothing");
}
