//! The runtime controls that make a node look misconfigured: IAM denial (`/_sim/iam`) and a
//! frozen, stale IMDS (`/_sim/imds`). In-process, plus the binary over real sockets.

use crate::common;

use std::net::TcpStream;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use cloud::aws::AwsEc2;
use cloud::aws::sdk::config::retry::RetryConfig;
use cloud::aws::sdk::error::ProvideErrorMetadata;
use cloud::{CloudErrorKind, Ec2};
use common::{Harness, Reply, SimProcess, T0, host_port, imds_get, sdk_client, topology};
use serde_json::{Value, json};
use testkit::http::exchange;
use tower::ServiceExt;
use vpc_sim::fabric::FabricError;
use vpc_sim::model::Model;
use vpc_sim::sim::{Follower, SharedFollower};

/// Sends an admin request; returns the reply.
async fn admin(h: &Harness, method: &str, path: &str, body: &str) -> Reply {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::from(body.to_string()))
        .unwrap();
    Reply::from(h.ec2.clone().oneshot(req).await.unwrap()).await
}

/// A control request that must be accepted; returns the JSON answer.
async fn control(h: &Harness, method: &str, path: &str, body: Value) -> Value {
    let text = if method == "GET" {
        String::new()
    } else {
        body.to_string()
    };
    let r = admin(h, method, path, &text).await;
    assert_eq!(r.status, 200, "{method} {path} {body} -> {}", r.body);
    assert_eq!(r.headers["content-type"], "application/json");
    serde_json::from_str(&r.body).unwrap()
}

async fn deny(h: &Harness, actions: &[&str]) -> Value {
    control(h, "PUT", "/_sim/iam", json!({ "deny": actions })).await
}

async fn iam(h: &Harness) -> Value {
    control(h, "GET", "/_sim/iam", Value::Null).await
}

async fn freeze(h: &Harness, frozen: bool) -> Value {
    control(h, "PUT", "/_sim/imds", json!({ "frozen": frozen })).await
}

/// The whole model, to prove a denied call changed nothing.
fn snapshot(h: &Harness) -> String {
    serde_json::to_string(&h.sim.model().snapshot()).unwrap()
}

/// (status, code, message) of an EC2 error reply, after checking its shape.
fn error_of(r: &Reply) -> (u16, String, String) {
    let x = r.xml();
    assert_eq!(x.name, "Response", "{}", r.body);
    assert_eq!(r.headers["content-type"], "text/xml;charset=UTF-8");
    assert_eq!(
        r.headers["x-amzn-requestid"].to_str().unwrap(),
        x.text_at("RequestID")
    );
    let e = x.at("Errors/Error");
    (
        r.status,
        e.text_at("Code").to_string(),
        e.text_at("Message").to_string(),
    )
}

fn assign(eni: &str) -> Vec<(&str, &str)> {
    vec![
        (
            "Action",
            cloud::Action::AssignPrivateIpAddresses.wire_name(),
        ),
        ("NetworkInterfaceId", eni),
        ("SecondaryPrivateIpAddressCount", "1"),
    ]
}

fn denial(action: &str) -> String {
    format!(
        "You are not authorized to perform this operation. User: \
         arn:aws:sts::111122223333:assumed-role/vpc-sim-node-role/vpc-sim-node is not authorized \
         to perform: ec2:{action} because no identity-based policy allows the ec2:{action} action"
    )
}

#[tokio::test]
async fn a_denied_action_answers_403_unauthorized_operation_and_leaves_the_model_alone() {
    let h = Harness::basic();
    let (_, eni) = h.instance(0);
    let before = snapshot(&h);
    let r = deny(
        &h,
        &[
            cloud::Action::AssignPrivateIpAddresses.wire_name(),
            cloud::Action::CreateTags.wire_name(),
        ],
    )
    .await;
    assert_eq!(
        r["policy"]["deny"],
        json!([
            cloud::Action::AssignPrivateIpAddresses.wire_name(),
            cloud::Action::CreateTags.wire_name()
        ])
    );
    assert_eq!(r["denied"], 0);
    for _ in 0..2 {
        let r = h.call(&assign(&eni)).await;
        assert_eq!(
            error_of(&r),
            (
                403,
                "UnauthorizedOperation".to_string(),
                denial(cloud::Action::AssignPrivateIpAddresses.wire_name())
            )
        );
    }
    assert_eq!(snapshot(&h), before);
    // Actions the policy does not name go on as usual.
    h.ok(&[("Action", cloud::Action::DescribeInstances.wire_name())])
        .await;

    let r = iam(&h).await;
    assert_eq!(r["denied"], 2);
    assert_eq!(
        r["by_action"],
        json!({cloud::Action::AssignPrivateIpAddresses.wire_name(): 2})
    );
    // Denied calls are requests received like any other.
    let calls: Value =
        serde_json::from_str(&admin(&h, "GET", "/_sim/calls", "").await.body).unwrap();
    assert_eq!(
        calls[cloud::Action::AssignPrivateIpAddresses.wire_name()],
        2
    );

    // Allowed again, the call gets exactly what it would have got had the denials never been:
    // they drew nothing from the model (ids, addresses, request ids).
    let r = control(&h, "PUT", "/_sim/iam", json!({})).await;
    assert_eq!(r["policy"]["deny"], json!([]));
    assert_eq!(r["denied"], 2, "counters survive a new policy");
    let twin = Harness::basic();
    twin.ok(&[("Action", cloud::Action::DescribeInstances.wire_name())])
        .await;
    let got = h.call(&assign(&eni)).await;
    let want = twin.call(&assign(&eni)).await;
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(got.body, want.body);
}

#[tokio::test]
async fn the_sdk_sees_the_denial_does_not_retry_it_and_ipamd_classifies_it_unauthorized() {
    let h = Harness::basic();
    let (_, eni) = h.instance(0);
    let endpoint = h.serve().await;
    deny(&h, &[cloud::Action::AssignPrivateIpAddresses.wire_name()]).await;

    let raw = sdk_client(&endpoint, RetryConfig::disabled());
    let e = raw
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .secondary_private_ip_address_count(1)
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.raw_response().map(|r| r.status().as_u16()), Some(403));
    assert_eq!(e.code(), Some("UnauthorizedOperation"));
    let denied = denial(cloud::Action::AssignPrivateIpAddresses.wire_name());
    assert_eq!(e.message(), Some(denied.as_str()));

    // A permission error is not transient: the SDK's retryer makes one attempt only.
    let retrying = sdk_client(
        &endpoint,
        RetryConfig::standard()
            .with_max_attempts(3)
            .with_initial_backoff(std::time::Duration::from_millis(1)),
    );
    let e = AwsEc2::from_client(retrying)
        .assign_private_ips(&eni, 1)
        .await
        .unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::Unauthorized, "{e}");
    assert_eq!(e.code.as_deref(), Some("UnauthorizedOperation"));
    assert_eq!(iam(&h).await["denied"], 2);
}

#[tokio::test]
async fn the_permission_is_checked_before_dry_run() {
    let h = Harness::basic();
    let (inst, eni) = h.instance(0);
    deny(&h, &[cloud::Action::CreateTags.wire_name()]).await;
    let tag = [
        ("Action", cloud::Action::CreateTags.wire_name()),
        ("ResourceId.1", eni.as_str()),
        ("Tag.1.Key", "k"),
        ("Tag.1.Value", "v"),
        ("DryRun", "true"),
    ];
    assert_eq!(
        error_of(&h.call(&tag).await),
        (
            403,
            "UnauthorizedOperation".to_string(),
            denial(cloud::Action::CreateTags.wire_name())
        )
    );
    let r = h
        .call(&[
            ("Action", cloud::Action::DescribeInstances.wire_name()),
            ("InstanceId.1", inst.as_str()),
            ("DryRun", "true"),
        ])
        .await;
    let (status, code, message) = error_of(&r);
    assert_eq!((status, code.as_str()), (412, "DryRunOperation"));
    assert_eq!(
        message,
        "Request would have succeeded, but DryRun flag is set."
    );
    // Once allowed, the same dry run would have succeeded.
    deny(&h, &[]).await;
    assert_eq!(error_of(&h.call(&tag).await).1, "DryRunOperation");
}

#[tokio::test]
async fn a_bad_policy_is_refused_with_400_naming_the_problem_and_the_old_one_stays() {
    let h = Harness::basic();
    let good =
        deny(&h, &[cloud::Action::DetachNetworkInterface.wire_name()]).await["policy"].clone();
    for (body, needle) in [
        (
            r#"{"deny": ["AssignPrivateIpAddress"]}"#,
            "deny: \"AssignPrivateIpAddress\" is not an EC2 action vpc-sim serves",
        ),
        (
            &format!(r#"{{"deny": "{}"}}"#, cloud::Action::CreateTags),
            &format!(
                "deny: \"{}\" is not a list of EC2 action names",
                cloud::Action::CreateTags
            ),
        ),
        (r#"{"allow": []}"#, "allow: unknown field; known: deny"),
        ("", "not JSON"),
    ] {
        let r = admin(&h, "PUT", "/_sim/iam", body).await;
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(r.headers["content-type"], "application/json");
        let e: Value = serde_json::from_str(&r.body).unwrap();
        let msg = e["error"].as_str().unwrap();
        assert!(msg.contains(needle), "{body}: {msg}");
    }
    assert_eq!(iam(&h).await["policy"], good);
}

/// Counts how often it was asked to follow.
#[derive(Default)]
struct Probe {
    follows: usize,
}

impl Follower for Probe {
    fn follow(&mut self, _: &Model) -> Result<(), FabricError> {
        self.follows += 1;
        Ok(())
    }
}

#[tokio::test]
async fn denial_applies_with_a_follower_and_it_is_not_asked_to_follow() {
    let probe = Arc::new(Mutex::new(Probe::default()));
    let follower: SharedFollower = probe.clone();
    let h = Harness::with_follower(topology("t3.medium", &["10.0.0.0/24"], 1), follower);
    let (_, eni) = h.instance(0);
    let before = snapshot(&h);
    deny(&h, &[cloud::Action::AssignPrivateIpAddresses.wire_name()]).await;
    assert_eq!(error_of(&h.call(&assign(&eni)).await).0, 403);
    assert_eq!(probe.lock().unwrap().follows, 0);
    assert_eq!(snapshot(&h), before);
    deny(&h, &[]).await;
    h.ok(&assign(&eni)).await;
    assert_eq!(probe.lock().unwrap().follows, 1);
}

const TTL: &str = "x-aws-ec2-metadata-token-ttl-seconds";
const TOKEN: &str = "x-aws-ec2-metadata-token";

async fn imds_token(r: &Router) -> String {
    let req = Request::put("/latest/api/token")
        .header(TTL, "600")
        .body(Body::empty())
        .unwrap();
    let reply = Reply::from(r.clone().oneshot(req).await.unwrap()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body
}

/// An IMDS `meta-data/` GET that must succeed.
async fn md(r: &Router, tok: &str, path: &str) -> String {
    let req = Request::get(format!("/latest/meta-data/{path}"))
        .header(TOKEN, tok)
        .body(Body::empty())
        .unwrap();
    let reply = Reply::from(r.clone().oneshot(req).await.unwrap()).await;
    assert_eq!(reply.status, 200, "{path}: {}", reply.body);
    reply.body
}

fn lines(s: &str) -> Vec<String> {
    s.lines().map(str::to_string).collect()
}

#[tokio::test]
async fn frozen_imds_keeps_the_old_addresses_until_unfrozen() {
    let h = Harness::basic();
    let (inst, eni) = h.instance(0);
    let r = h.imds(&inst);
    let t = imds_token(&r).await;
    let mac = md(&r, &t, "mac").await;
    let ipv4s = format!("network/interfaces/macs/{mac}/local-ipv4s");
    let old = lines(&md(&r, &t, &ipv4s).await);
    assert_eq!(old.len(), 1);
    let report = control(&h, "GET", "/_sim/imds", Value::Null).await;
    assert_eq!(
        report,
        json!({"frozen": false, "frozen_at_ms": null, "lag_ms": 0})
    );

    h.clock.advance(1_000);
    let report = freeze(&h, true).await;
    assert_eq!(
        report,
        json!({"frozen": true, "frozen_at_ms": T0 + 1_000, "lag_ms": 0})
    );
    h.clock.advance(5_000);
    let new_ip = h
        .ok(&assign(&eni))
        .await
        .items("assignedPrivateIpAddressesSet")[0]
        .text_at("privateIpAddress")
        .to_string();
    // EC2 has it, IMDS does not: the stale IMDS a node meets.
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
        x.items("networkInterfaceSet")[0]
            .items("privateIpAddressesSet")
            .len(),
        2
    );
    assert_eq!(lines(&md(&r, &t, &ipv4s).await), old);
    // Tokens keep working while frozen: the old one and a new one.
    let t2 = imds_token(&r).await;
    assert_eq!(lines(&md(&r, &t2, &ipv4s).await), old);
    // Freezing again keeps the first moment.
    assert_eq!(freeze(&h, true).await["frozen_at_ms"], T0 + 1_000);

    let report = freeze(&h, false).await;
    assert_eq!(report["frozen"], false);
    assert_eq!(report["frozen_at_ms"], Value::Null);
    let now = lines(&md(&r, &t, &ipv4s).await);
    assert_eq!(now, vec![old[0].clone(), new_ip.clone()]);

    // Stale the other way too: an address EC2 took away stays in a frozen IMDS.
    freeze(&h, true).await;
    h.ok(&[
        (
            "Action",
            cloud::Action::UnassignPrivateIpAddresses.wire_name(),
        ),
        ("NetworkInterfaceId", &eni),
        ("PrivateIpAddress.1", &new_ip),
    ])
    .await;
    assert_eq!(lines(&md(&r, &t, &ipv4s).await), now);
    freeze(&h, false).await;
    assert_eq!(lines(&md(&r, &t, &ipv4s).await), old);
}

#[tokio::test]
async fn frozen_imds_hides_a_new_eni_and_unfreezing_returns_to_the_lagged_view() {
    let lag = 1_500;
    let h = Harness::new(topology("t3.medium", &["10.0.0.0/24"], 1), lag);
    let (inst, _) = h.instance(0);
    let r = h.imds(&inst);
    let t = imds_token(&r).await;
    h.clock.advance(10_000);
    let subnet = h.subnet(0);
    let x = h
        .ok(&[
            ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
            ("SubnetId", &subnet),
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
    // Frozen within the lag: IMDS had not shown the ENI yet, and now never will while frozen.
    h.clock.advance(lag - 1);
    assert_eq!(freeze(&h, true).await["lag_ms"], lag);
    h.clock.advance(60_000);
    assert!(!md(&r, &t, "network/interfaces/macs/").await.contains(&mac));
    freeze(&h, false).await;
    assert!(md(&r, &t, "network/interfaces/macs/").await.contains(&mac));

    // Unfrozen, the lag applies again to what comes next.
    let x = h
        .ok(&[
            (
                "Action",
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", &eni),
            ("SecondaryPrivateIpAddressCount", "1"),
        ])
        .await;
    let ip = x.items("assignedPrivateIpAddressesSet")[0]
        .text_at("privateIpAddress")
        .to_string();
    let ipv4s = format!("network/interfaces/macs/{mac}/local-ipv4s");
    assert!(!md(&r, &t, &ipv4s).await.contains(&ip));
    h.clock.advance(lag);
    assert!(md(&r, &t, &ipv4s).await.lines().any(|l| l == ip));
}

#[tokio::test]
async fn a_bad_imds_control_is_refused_with_400_and_changes_nothing() {
    let h = Harness::basic();
    freeze(&h, true).await;
    for (body, needle) in [
        (
            r#"{"frozen": "false"}"#,
            "frozen: \"false\" is not true or false",
        ),
        (
            r#"{"freeze": false}"#,
            "freeze: unknown field; known: frozen",
        ),
        ("[]", "expected a JSON object"),
    ] {
        let r = admin(&h, "PUT", "/_sim/imds", body).await;
        assert_eq!(r.status, 400, "{body}");
        let e: Value = serde_json::from_str(&r.body).unwrap();
        let msg = e["error"].as_str().unwrap();
        assert!(msg.contains(needle), "{body}: {msg}");
    }
    assert_eq!(
        control(&h, "GET", "/_sim/imds", Value::Null).await["frozen"],
        true
    );
    // `{}` unfreezes, as `{}` turns faults off.
    assert_eq!(
        control(&h, "PUT", "/_sim/imds", json!({})).await["frozen"],
        false
    );
}

#[test]
fn the_binary_serves_both_controls_and_documents_them() {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_vpc-sim"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for needle in [
        "PUT /_sim/iam",
        "GET /_sim/iam",
        "PUT /_sim/imds",
        "GET /_sim/imds",
    ] {
        assert!(
            help.contains(needle),
            "{needle} missing from --help:\n{help}"
        );
    }

    let mut sim = SimProcess::start(&testkit::unique("ctl"), &[]);
    let f = sim.wait_ready();
    let node = &f.nodes[0];
    let ec2 = host_port(&f.ec2_endpoint);
    let send = |method: &str, path: &str, content_type: &str, body: &str| {
        exchange(
            TcpStream::connect(&ec2).unwrap(),
            method,
            &ec2,
            path,
            &[("Content-Type", content_type)],
            body,
        )
    };
    let json_put = |path: &str, body: &str| send("PUT", path, "application/json", body);
    let assign = format!(
        "Action=AssignPrivateIpAddresses&Version=2016-11-15&NetworkInterfaceId={}&SecondaryPrivateIpAddressCount=1",
        node.primary_eni
    );
    let ipv4s = format!("meta-data/network/interfaces/macs/{}/local-ipv4s", node.mac);
    let form = "application/x-www-form-urlencoded";

    let deny = format!(
        r#"{{"deny": ["{}"]}}"#,
        cloud::Action::AssignPrivateIpAddresses
    );
    let (status, body) = json_put("/_sim/iam", &deny);
    assert_eq!(status, 200, "{body}");
    let (status, body) = send("POST", "/", form, &assign);
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("<Code>UnauthorizedOperation</Code>"),
        "{body}"
    );
    assert!(
        sim.log()
            .contains("IAM policy denies the action: UnauthorizedOperation"),
        "{}",
        sim.log()
    );
    let (status, body) = json_put("/_sim/iam", r#"{"deny": ["Nope"]}"#);
    assert_eq!(status, 400, "{body}");
    let e: Value = serde_json::from_str(&body).unwrap();
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("deny: \"Nope\" is not an EC2 action"),
        "{body}"
    );
    assert_eq!(json_put("/_sim/iam", "{}").0, 200);

    let before = imds_get(&node.imds_endpoint, &ipv4s);
    assert_eq!(json_put("/_sim/imds", r#"{"frozen": true}"#).0, 200);
    assert_eq!(send("POST", "/", form, &assign).0, 200);
    assert_eq!(imds_get(&node.imds_endpoint, &ipv4s), before);
    let (status, body) = send("GET", "/_sim/imds", form, "");
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["frozen"],
        true
    );
    assert_eq!(json_put("/_sim/imds", r#"{"frozen": false}"#).0, 200);
    assert_eq!(imds_get(&node.imds_endpoint, &ipv4s).lines().count(), 2);

    assert!(sim.terminate().success(), "{}", sim.log());
}
