//! The runtime controls that make a node look misconfigured: IAM denial (`/_sim/iam`).
//! In-process, plus the binary over real sockets.

mod common;

use std::net::TcpStream;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::Request;
use cloud::aws::AwsEc2;
use cloud::aws::sdk::config::retry::RetryConfig;
use cloud::aws::sdk::error::ProvideErrorMetadata;
use cloud::{CloudErrorKind, Ec2};
use common::{Harness, Reply, SimProcess, host_port, sdk_client, topology};
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
        ("Action", "AssignPrivateIpAddresses"),
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
    let r = deny(&h, &["AssignPrivateIpAddresses", "CreateTags"]).await;
    assert_eq!(
        r["policy"]["deny"],
        json!(["AssignPrivateIpAddresses", "CreateTags"])
    );
    assert_eq!(r["denied"], 0);
    for _ in 0..2 {
        let r = h.call(&assign(&eni)).await;
        assert_eq!(
            error_of(&r),
            (
                403,
                "UnauthorizedOperation".to_string(),
                denial("AssignPrivateIpAddresses")
            )
        );
    }
    assert_eq!(snapshot(&h), before);
    // Actions the policy does not name go on as usual.
    h.ok(&[("Action", "DescribeInstances")]).await;

    let r = iam(&h).await;
    assert_eq!(r["denied"], 2);
    assert_eq!(r["by_action"], json!({"AssignPrivateIpAddresses": 2}));
    // Denied calls are requests received like any other.
    let calls: Value =
        serde_json::from_str(&admin(&h, "GET", "/_sim/calls", "").await.body).unwrap();
    assert_eq!(calls["AssignPrivateIpAddresses"], 2);

    // Allowed again, the call gets exactly what it would have got had the denials never been:
    // they drew nothing from the model (ids, addresses, request ids).
    let r = control(&h, "PUT", "/_sim/iam", json!({})).await;
    assert_eq!(r["policy"]["deny"], json!([]));
    assert_eq!(r["denied"], 2, "counters survive a new policy");
    let twin = Harness::basic();
    twin.ok(&[("Action", "DescribeInstances")]).await;
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
    deny(&h, &["AssignPrivateIpAddresses"]).await;

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
    let denied = denial("AssignPrivateIpAddresses");
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
    deny(&h, &["CreateTags"]).await;
    let tag = [
        ("Action", "CreateTags"),
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
            denial("CreateTags")
        )
    );
    let r = h
        .call(&[
            ("Action", "DescribeInstances"),
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
    let good = deny(&h, &["DetachNetworkInterface"]).await["policy"].clone();
    for (body, needle) in [
        (
            r#"{"deny": ["AssignPrivateIpAddress"]}"#,
            "deny: \"AssignPrivateIpAddress\" is not an EC2 action vpc-sim serves",
        ),
        (
            r#"{"deny": "CreateTags"}"#,
            "deny: \"CreateTags\" is not a list of EC2 action names",
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
    deny(&h, &["AssignPrivateIpAddresses"]).await;
    assert_eq!(error_of(&h.call(&assign(&eni)).await).0, 403);
    assert_eq!(probe.lock().unwrap().follows, 0);
    assert_eq!(snapshot(&h), before);
    deny(&h, &[]).await;
    h.ok(&assign(&eni)).await;
    assert_eq!(probe.lock().unwrap().follows, 1);
}

#[test]
fn the_binary_serves_the_iam_control_and_documents_it() {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_vpc-sim"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for needle in ["PUT /_sim/iam", "GET /_sim/iam"] {
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
    let form = "application/x-www-form-urlencoded";

    let (status, body) = json_put("/_sim/iam", r#"{"deny": ["AssignPrivateIpAddresses"]}"#);
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

    assert!(sim.terminate().success(), "{}", sim.log());
}
