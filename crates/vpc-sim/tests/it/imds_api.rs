//! IMDS over HTTP, in-process: IMDSv2 token rules, the metadata tree, lag.

use crate::common;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use common::{Harness, Reply, topology};
use tower::ServiceExt;

const TTL: &str = "x-aws-ec2-metadata-token-ttl-seconds";
const TOKEN: &str = "x-aws-ec2-metadata-token";

async fn send(r: &Router, req: Request<Body>) -> Reply {
    Reply::from(r.clone().oneshot(req).await.unwrap()).await
}

async fn token(r: &Router, ttl: &str) -> Reply {
    send(
        r,
        Request::put("/latest/api/token")
            .header(TTL, ttl)
            .body(Body::empty())
            .unwrap(),
    )
    .await
}

async fn get(r: &Router, tok: &str, path: &str) -> Reply {
    send(
        r,
        Request::get(path)
            .header(TOKEN, tok)
            .body(Body::empty())
            .unwrap(),
    )
    .await
}

/// GET that must succeed; returns the body.
async fn md(r: &Router, tok: &str, path: &str) -> String {
    let reply = get(r, tok, &format!("/latest/meta-data/{path}")).await;
    assert_eq!(reply.status, 200, "{path}: {}", reply.body);
    reply.body
}

#[tokio::test]
async fn token_rules() {
    let h = Harness::basic();
    let (inst, _) = h.instance(0);
    let r = h.imds(&inst);

    let no_ttl = send(
        &r,
        Request::put("/latest/api/token")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(no_ttl.status, 400);
    for bad in ["0", "21601", "abc"] {
        assert_eq!(token(&r, bad).await.status, 400, "ttl {bad}");
    }
    let ok = token(&r, "21600").await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.headers[TTL], "21600");
    assert!(!ok.body.is_empty());

    let v1 = send(
        &r,
        Request::get("/latest/meta-data/instance-id")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(v1.status, 401, "IMDSv1 is refused");
    assert_eq!(
        get(&r, "forged", "/latest/meta-data/instance-id")
            .await
            .status,
        401
    );
    assert_eq!(
        get(&r, &ok.body, "/latest/meta-data/instance-id")
            .await
            .body,
        inst
    );
    let via_get = send(
        &r,
        Request::get("/latest/api/token")
            .header(TOKEN, &ok.body)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(via_get.status, 405);

    let short = token(&r, "2").await.body;
    assert_eq!(
        get(&r, &short, "/latest/meta-data/instance-id")
            .await
            .status,
        200
    );
    h.clock.advance(2_000);
    assert_eq!(
        get(&r, &short, "/latest/meta-data/instance-id")
            .await
            .status,
        401,
        "expired"
    );
    // A token from another instance's IMDS is not valid here.
    let other = Harness::basic();
    let (other_inst, _) = other.instance(0);
    let foreign = token(&other.imds(&other_inst), "60").await.body;
    assert_eq!(
        get(&r, &foreign, "/latest/meta-data/instance-id")
            .await
            .status,
        401
    );
}

#[tokio::test]
async fn metadata_paths() {
    let h = Harness::new(topology("t3.medium", &["10.0.0.0/24"], 1), 0);
    let (inst, eni) = h.instance(0);
    let (mac, ip, sg) = {
        let m = h.sim.model();
        let e = m.eni(&eni).unwrap();
        (
            e.mac.clone(),
            e.primary_ip.to_string(),
            e.security_groups[0].clone(),
        )
    };
    let vpc = h.sim.model().vpc().id.clone();
    let subnet = h.subnet(0);
    let r = h.imds(&inst);
    let t = token(&r, "600").await.body;

    assert_eq!(md(&r, &t, "instance-id").await, inst);
    assert_eq!(md(&r, &t, "instance-type").await, "t3.medium");
    assert_eq!(md(&r, &t, "local-ipv4").await, ip);
    assert_eq!(md(&r, &t, "mac").await, mac);
    let host = format!("ip-{}.us-west-2.compute.internal", ip.replace('.', "-"));
    assert_eq!(md(&r, &t, "hostname").await, host);
    assert_eq!(md(&r, &t, "local-hostname").await, host);
    assert_eq!(
        md(&r, &t, "placement/availability-zone").await,
        "us-west-2a"
    );
    assert_eq!(md(&r, &t, "placement/region").await, "us-west-2");
    let listing = md(&r, &t, "").await;
    for entry in [
        "instance-id",
        "local-ipv4",
        "mac",
        "network/",
        "placement/",
        "iam/",
    ] {
        assert!(
            listing.lines().any(|l| l == entry),
            "{entry} not in {listing:?}"
        );
    }
    assert_eq!(md(&r, &t, "network/interfaces/").await, "macs/");
    assert_eq!(
        md(&r, &t, "network/interfaces/macs/").await,
        format!("{mac}/")
    );

    let base = format!("network/interfaces/macs/{mac}");
    let fields = md(&r, &t, &format!("{base}/")).await;
    for f in [
        "device-number",
        "interface-id",
        "local-ipv4s",
        "mac",
        "subnet-id",
        "subnet-ipv4-cidr-block",
        "vpc-id",
        "vpc-ipv4-cidr-block",
        "vpc-ipv4-cidr-blocks",
        "security-group-ids",
        "network-card",
    ] {
        assert!(fields.lines().any(|l| l == f), "{f} not in {fields:?}");
    }
    assert_eq!(md(&r, &t, &format!("{base}/device-number")).await, "0");
    assert_eq!(md(&r, &t, &format!("{base}/interface-id")).await, eni);
    assert_eq!(md(&r, &t, &format!("{base}/mac")).await, mac);
    assert_eq!(md(&r, &t, &format!("{base}/subnet-id")).await, subnet);
    assert_eq!(
        md(&r, &t, &format!("{base}/subnet-ipv4-cidr-block")).await,
        "10.0.0.0/24"
    );
    assert_eq!(md(&r, &t, &format!("{base}/vpc-id")).await, vpc);
    assert_eq!(
        md(&r, &t, &format!("{base}/vpc-ipv4-cidr-block")).await,
        "10.0.0.0/16"
    );
    assert_eq!(
        md(&r, &t, &format!("{base}/vpc-ipv4-cidr-blocks")).await,
        "10.0.0.0/16"
    );
    assert_eq!(md(&r, &t, &format!("{base}/security-group-ids")).await, sg);
    assert_eq!(md(&r, &t, &format!("{base}/network-card")).await, "0");
    assert_eq!(
        get(&r, &t, &format!("/latest/meta-data/{base}/ipv4-prefix"))
            .await
            .status,
        404
    );

    let ec2 = h
        .ok(&[
            (
                "Action",
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("SecondaryPrivateIpAddressCount", "2"),
        ])
        .await;
    let new: Vec<String> = ec2
        .items("assignedPrivateIpAddressesSet")
        .iter()
        .map(|i| i.text_at("privateIpAddress").to_string())
        .collect();
    let ips = md(&r, &t, &format!("{base}/local-ipv4s")).await;
    let lines: Vec<&str> = ips.lines().collect();
    assert_eq!(
        lines,
        vec![ip.as_str(), new[0].as_str(), new[1].as_str()],
        "primary first"
    );
    let ec2 = h
        .ok(&[
            (
                "Action",
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("Ipv4PrefixCount", "1"),
        ])
        .await;
    let prefix = ec2.items("assignedIpv4PrefixSet")[0]
        .text_at("ipv4Prefix")
        .to_string();
    assert_eq!(md(&r, &t, &format!("{base}/ipv4-prefix")).await, prefix);
    assert!(
        md(&r, &t, &format!("{base}/"))
            .await
            .lines()
            .any(|l| l == "ipv4-prefix")
    );

    assert_eq!(
        get(&r, &t, "/latest/meta-data/no-such-thing").await.status,
        404
    );
    assert_eq!(
        get(
            &r,
            &t,
            "/latest/meta-data/network/interfaces/macs/02:00:00:00:00:00/mac"
        )
        .await
        .status,
        404
    );
    assert_eq!(
        get(&r, &t, "/2009-04-04/meta-data/instance-id")
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn identity_document_and_credentials() {
    let h = Harness::basic();
    let (inst, eni) = h.instance(0);
    let ip = h.sim.model().eni(&eni).unwrap().primary_ip.to_string();
    let r = h.imds(&inst);
    let t = token(&r, "60").await.body;
    let doc = get(&r, &t, "/latest/dynamic/instance-identity/document").await;
    assert_eq!(doc.status, 200);
    let v: serde_json::Value = serde_json::from_str(&doc.body).unwrap();
    for key in [
        "accountId",
        "architecture",
        "availabilityZone",
        "imageId",
        "instanceId",
        "instanceType",
        "pendingTime",
        "privateIp",
        "region",
        "version",
    ] {
        assert!(v.get(key).is_some(), "{key} missing in {v}");
    }
    assert_eq!(v["instanceId"], inst.as_str());
    assert_eq!(v["privateIp"], ip.as_str());
    assert_eq!(v["region"], "us-west-2");
    assert_eq!(v["pendingTime"], "2026-01-01T00:00:00Z");

    let role = md(&r, &t, "iam/security-credentials/").await;
    assert!(!role.is_empty() && !role.contains('\n'));
    let creds: serde_json::Value =
        serde_json::from_str(&md(&r, &t, &format!("iam/security-credentials/{role}")).await)
            .unwrap();
    assert_eq!(creds["Code"], "Success");
    assert_eq!(creds["Type"], "AWS-HMAC");
    assert_eq!(creds["LastUpdated"], "2026-01-01T00:00:00Z");
    assert_eq!(creds["Expiration"], "2026-01-01T01:00:00Z");
    for key in ["AccessKeyId", "SecretAccessKey", "Token"] {
        assert!(!creds[key].as_str().unwrap().is_empty(), "{key}");
    }
    assert_eq!(
        get(
            &r,
            &t,
            "/latest/meta-data/iam/security-credentials/other-role"
        )
        .await
        .status,
        404
    );
}

#[tokio::test]
async fn imds_lags_behind_ec2() {
    let lag = 1_500;
    let h = Harness::new(topology("t3.medium", &["10.0.0.0/24"], 1), lag);
    let (inst, primary) = h.instance(0);
    let r = h.imds(&inst);
    let t = token(&r, "600").await.body;
    // The primary ENI existed at launch: visible at once.
    assert_eq!(
        md(&r, &t, "network/interfaces/macs/").await.lines().count(),
        1
    );

    h.clock.advance(10_000);
    let subnet = h.subnet(0);
    let x = h
        .ok(&[
            ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
            ("SubnetId", &subnet),
            ("SecondaryPrivateIpAddressCount", "2"),
        ])
        .await;
    let eni = x.text_at("networkInterface/networkInterfaceId").to_string();
    let mac = x.text_at("networkInterface/macAddress").to_string();
    h.ok(&[
        ("Action", cloud::Action::AttachNetworkInterface.wire_name()),
        ("NetworkInterfaceId", &eni),
        ("InstanceId", &inst),
        ("DeviceIndex", "1"),
    ])
    .await;
    let new_ip = h
        .ok(&[
            (
                "Action",
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &primary),
            ("SecondaryPrivateIpAddressCount", "1"),
        ])
        .await
        .items("assignedPrivateIpAddressesSet")[0]
        .text_at("privateIpAddress")
        .to_string();
    let primary_mac = md(&r, &t, "mac").await;
    let primary_ips = format!("network/interfaces/macs/{primary_mac}/local-ipv4s");

    // EC2 already reports both changes; IMDS does not yet.
    let x = h
        .ok(&[
            (
                "Action",
                cloud::Action::DescribeNetworkInterfaces.wire_name(),
            ),
            ("NetworkInterfaceId.1", &eni),
        ])
        .await;
    assert_eq!(
        x.items("networkInterfaceSet")[0].text_at("status"),
        "in-use"
    );
    h.clock.advance(lag - 1);
    assert!(!md(&r, &t, "network/interfaces/macs/").await.contains(&mac));
    assert!(!md(&r, &t, &primary_ips).await.contains(&new_ip));
    assert_eq!(
        get(
            &r,
            &t,
            &format!("/latest/meta-data/network/interfaces/macs/{mac}/device-number")
        )
        .await
        .status,
        404
    );

    h.clock.advance(1);
    let macs = md(&r, &t, "network/interfaces/macs/").await;
    assert_eq!(
        macs.lines().collect::<Vec<_>>(),
        vec![format!("{primary_mac}/"), format!("{mac}/")]
    );
    assert_eq!(
        md(
            &r,
            &t,
            &format!("network/interfaces/macs/{mac}/device-number")
        )
        .await,
        "1"
    );
    assert_eq!(
        md(
            &r,
            &t,
            &format!("network/interfaces/macs/{mac}/local-ipv4s")
        )
        .await
        .lines()
        .count(),
        3
    );
    assert!(md(&r, &t, &primary_ips).await.lines().any(|l| l == new_ip));
}
