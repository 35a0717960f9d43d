//! EC2 fault injection: what a client sees for each fault (in-process, over a socket, and
//! through the real aws-sdk-ec2 client and ipamd's error classification), that faulted calls
//! leave the model alone, the control API, and the binary's flags.

use crate::common;

use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use cloud::aws::{AwsEc2, sdk};
use cloud::{CloudErrorKind, Ec2};
use common::{Harness, Reply, SimProcess, host_port, sdk_client};
use sdk::config::retry::RetryConfig;
use sdk::error::{ProvideErrorMetadata, SdkError};
use serde_json::{Value, json};
use testkit::http::exchange;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

/// Sends an admin request; returns the reply.
async fn admin(h: &Harness, method: &str, path: &str, body: &str) -> Reply {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::from(body.to_string()))
        .unwrap();
    Reply::from(h.ec2.clone().oneshot(req).await.unwrap()).await
}

/// Installs a plan, which must be accepted; returns the report.
async fn put_plan(h: &Harness, plan: Value) -> Value {
    let r = admin(h, "PUT", "/_sim/faults", &plan.to_string()).await;
    assert_eq!(r.status, 200, "{plan} -> {}", r.body);
    serde_json::from_str(&r.body).unwrap()
}

async fn report(h: &Harness) -> Value {
    let r = admin(h, "GET", "/_sim/faults", "").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], "application/json");
    serde_json::from_str(&r.body).unwrap()
}

async fn calls(h: &Harness) -> Value {
    serde_json::from_str(&admin(h, "GET", "/_sim/calls", "").await.body).unwrap()
}

/// The whole model, to prove a faulted call changed nothing.
fn snapshot(h: &Harness) -> String {
    serde_json::to_string(&h.sim.model().snapshot()).unwrap()
}

/// An EC2 call in-process: the reply, or the body's error when the server dropped the call.
async fn call(h: &Harness, pairs: &[(&str, &str)]) -> Result<Reply, String> {
    let mut form = form_urlencoded::Serializer::new(String::new());
    form.append_pair("Version", "2016-11-15");
    for (k, v) in pairs {
        form.append_pair(k, v);
    }
    let req = Request::post("/")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(form.finish()))
        .unwrap();
    let resp = h.ec2.clone().oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 24)
        .await
        .map_err(|e| format!("{e:#}"))?;
    Ok(Reply {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    })
}

/// (status, code, message) of an error reply.
fn error_of(r: &Reply) -> (u16, String, String) {
    let x = r.xml();
    assert_eq!(x.name, "Response", "{}", r.body);
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

#[tokio::test]
async fn throttling_is_503_request_limit_exceeded_and_changes_nothing() {
    let h = Harness::basic();
    let (_, eni) = h.instance(0);
    let before = snapshot(&h);
    let r = put_plan(&h, json!({"throttle_pct": 100, "seed": 1})).await;
    assert_eq!(r["plan"]["throttle_pct"], 100.0);
    for _ in 0..3 {
        let r = call(&h, &assign(&eni)).await.unwrap();
        assert_eq!(r.headers["content-type"], "text/xml;charset=UTF-8");
        assert_eq!(
            error_of(&r),
            (
                503,
                "RequestLimitExceeded".into(),
                "Request limit exceeded.".into()
            )
        );
    }
    assert_eq!(snapshot(&h), before);
    let r = report(&h).await;
    assert_eq!(r["injected"]["eligible"], 3);
    assert_eq!(r["injected"]["throttle"], 3);
    assert_eq!(
        r["by_action"][cloud::Action::AssignPrivateIpAddresses.wire_name()]["throttle"],
        3
    );
    // Faulted requests are still requests: /_sim/calls counts them.
    assert_eq!(
        calls(&h).await[cloud::Action::AssignPrivateIpAddresses.wire_name()],
        3
    );
}

#[tokio::test]
async fn server_errors_are_500_internal_error_or_503_unavailable() {
    let h = Harness::basic();
    let (_, eni) = h.instance(0);
    let before = snapshot(&h);
    put_plan(&h, json!({"server_error_pct": 100, "seed": 3})).await;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let r = call(&h, &assign(&eni)).await.unwrap();
        seen.insert(error_of(&r));
    }
    let expected: std::collections::BTreeSet<_> = [
        (
            500,
            "InternalError".to_string(),
            "An internal error has occurred.".to_string(),
        ),
        (
            503,
            "Unavailable".to_string(),
            "The server is overloaded and can't handle the request.".to_string(),
        ),
    ]
    .into();
    assert_eq!(seen, expected);
    assert_eq!(snapshot(&h), before);
    assert_eq!(report(&h).await["injected"]["server_error"], 20);
}

#[tokio::test]
async fn a_dropped_call_has_no_answer_and_changes_nothing_but_drop_after_applies_it() {
    let h = Harness::basic();
    let subnet = h.subnet(0);
    let create = [
        ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
        ("SubnetId", subnet.as_str()),
    ];
    let before = snapshot(&h);
    put_plan(&h, json!({"drop_pct": 100})).await;
    let e = call(&h, &create).await.unwrap_err();
    assert!(e.contains("dropped by vpc-sim fault injection"), "{e}");
    assert_eq!(snapshot(&h), before);

    put_plan(&h, json!({"drop_after_pct": 100})).await;
    call(&h, &create).await.unwrap_err();
    let state: Value = serde_json::from_str(&snapshot(&h)).unwrap();
    assert_eq!(
        state["enis"].as_array().unwrap().len(),
        2,
        "the call was applied before the connection was dropped"
    );
    let r = report(&h).await;
    assert_eq!(
        (
            r["injected"]["drop"].as_u64(),
            r["injected"]["drop_after"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(
        calls(&h).await[cloud::Action::CreateNetworkInterface.wire_name()],
        2
    );
}

#[tokio::test]
async fn an_empty_plan_turns_faults_off_and_counters_carry_on() {
    let h = Harness::basic();
    let (_, eni) = h.instance(0);
    put_plan(
        &h,
        json!({"throttle_pct": 100, "slow_pct": 100, "slow_ms": 1}),
    )
    .await;
    assert_eq!(call(&h, &assign(&eni)).await.unwrap().status, 503);
    let off = put_plan(&h, json!({})).await;
    assert_eq!(
        off["plan"],
        json!({"throttle_pct": 0.0, "server_error_pct": 0.0, "drop_pct": 0.0, "drop_after_pct": 0.0,
               "slow_pct": 0.0, "slow_ms": 0, "actions": null, "seed": null})
    );
    for _ in 0..5 {
        let r = call(&h, &assign(&eni)).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(
        report(&h).await["injected"],
        json!({"eligible": 1, "throttle": 1, "server_error": 0, "slow": 1, "drop": 0, "drop_after": 0})
    );
    // All zeros is off too.
    put_plan(&h, json!({"throttle_pct": 0, "drop_pct": 0})).await;
    let r = call(
        &h,
        &[("Action", cloud::Action::DescribeSubnets.wire_name())],
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(report(&h).await["injected"]["eligible"], 1);
}

/// Statuses of 400 DescribeSubnets calls under a 30% throttle with `seed`.
async fn thirty_percent_run(seed: u64) -> Vec<u16> {
    let h = Harness::basic();
    put_plan(&h, json!({"throttle_pct": 30, "seed": seed})).await;
    let mut statuses = Vec::new();
    for _ in 0..400 {
        statuses.push(
            call(
                &h,
                &[("Action", cloud::Action::DescribeSubnets.wire_name())],
            )
            .await
            .unwrap()
            .status,
        );
    }
    let throttled = statuses.iter().filter(|s| **s == 503).count() as u64;
    let r = report(&h).await;
    assert_eq!(r["injected"]["throttle"].as_u64(), Some(throttled));
    assert_eq!(r["injected"]["eligible"], 400);
    statuses
}

#[tokio::test]
async fn thirty_percent_lands_near_thirty_percent_and_a_seed_repeats_the_run() {
    let a = thirty_percent_run(42).await;
    let throttled = a.iter().filter(|s| **s == 503).count();
    assert!(a.iter().all(|s| *s == 200 || *s == 503));
    // 120 expected, sd 9.2: a band of more than 3 sd either side.
    assert!((90..=150).contains(&throttled), "{throttled} of 400");
    assert_eq!(thirty_percent_run(42).await, a, "same seed, same faults");
    assert_ne!(
        thirty_percent_run(43).await,
        a,
        "another seed, other faults"
    );
}

#[tokio::test]
async fn bad_plans_are_refused_naming_the_field_and_the_old_plan_stays() {
    let h = Harness::basic();
    let good = put_plan(&h, json!({"throttle_pct": 10, "seed": 4})).await["plan"].clone();
    for (body, needle) in [
        (
            r#"{"throttle_pct": 101}"#,
            "throttle_pct: 101 is not a percentage from 0 to 100",
        ),
        (
            r#"{"server_error_pct": -5}"#,
            "server_error_pct: -5 is not a percentage",
        ),
        (r#"{"drop_pct": "5"}"#, "drop_pct: \"5\" is not a number"),
        (r#"{"slow_pct": 5}"#, "slow_ms: 0, but slow_pct is 5"),
        (r#"{"throttle": 5}"#, "throttle: unknown field"),
        (
            r#"{"actions": ["Nope"]}"#,
            "actions: \"Nope\" is not an EC2 action",
        ),
        (
            r#"{"throttle_pct": 70, "server_error_pct": 40}"#,
            "throttle_pct + server_error_pct + drop_pct + drop_after_pct: 110 in all",
        ),
        ("", "not JSON"),
    ] {
        let r = admin(&h, "PUT", "/_sim/faults", body).await;
        assert_eq!(r.status, 400, "{body}");
        let e: Value = serde_json::from_str(&r.body).unwrap();
        let msg = e["error"].as_str().unwrap();
        assert!(msg.contains(needle), "{body}: {msg}");
    }
    assert_eq!(report(&h).await["plan"], good);
}

#[tokio::test]
async fn the_actions_filter_limits_faults_to_the_named_actions_and_imds_is_never_faulted() {
    let h = Harness::basic();
    let (inst, eni) = h.instance(0);
    put_plan(
        &h,
        json!({"throttle_pct": 100, "actions": [cloud::Action::AssignPrivateIpAddresses.wire_name(), cloud::Action::CreateTags.wire_name()]}),
    )
    .await;
    for _ in 0..4 {
        let r = call(
            &h,
            &[("Action", cloud::Action::DescribeInstances.wire_name())],
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200);
        let r = call(&h, &assign(&eni)).await.unwrap();
        assert_eq!(r.status, 503);
    }
    let r = report(&h).await;
    assert_eq!(r["injected"]["throttle"], 4);
    assert_eq!(
        r["by_action"],
        json!({cloud::Action::AssignPrivateIpAddresses.wire_name(): {"eligible": 4, "throttle": 4, "server_error": 0,
               "slow": 0, "drop": 0, "drop_after": 0}})
    );
    assert_eq!(
        calls(&h).await,
        json!({cloud::Action::DescribeInstances.wire_name(): 4, cloud::Action::AssignPrivateIpAddresses.wire_name(): 4})
    );

    put_plan(&h, json!({"drop_pct": 100})).await;
    let token = h
        .imds(&inst)
        .oneshot(
            Request::put("/latest/api/token")
                .header("x-aws-ec2-metadata-token-ttl-seconds", "60")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(Reply::from(token).await.status, 200);
}

#[tokio::test]
async fn slow_calls_still_succeed_and_are_counted() {
    let h = Harness::basic();
    let (_, eni) = h.instance(0);
    put_plan(&h, json!({"slow_pct": 100, "slow_ms": 20})).await;
    for _ in 0..2 {
        let r = call(&h, &assign(&eni)).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let r = report(&h).await;
    assert_eq!(
        (
            r["injected"]["slow"].as_u64(),
            r["injected"]["eligible"].as_u64()
        ),
        (Some(2), Some(2))
    );
    let state: Value = serde_json::from_str(&snapshot(&h)).unwrap();
    let primary = &state["enis"][0];
    assert_eq!(
        primary["secondary_ips"].as_array().map(Vec::len),
        Some(2),
        "{primary}"
    );
}

#[tokio::test]
async fn a_dropped_connection_gets_not_one_byte_of_a_response() {
    let h = Harness::basic();
    let subnet = h.subnet(0);
    let endpoint = h.serve().await;
    let before = snapshot(&h);
    put_plan(&h, json!({"drop_pct": 100})).await;
    let body = format!("Action=CreateNetworkInterface&Version=2016-11-15&SubnetId={subnet}");
    let mut s = tokio::net::TcpStream::connect(host_port(&endpoint))
        .await
        .unwrap();
    let req = format!(
        "POST / HTTP/1.1\r\nHost: ec2\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut got))
        .await
        .expect("the server closes the connection");
    // A close (EOF) or a reset: either way no HTTP response.
    if let Err(e) = read {
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    }
    assert!(got.is_empty(), "got {:?}", String::from_utf8_lossy(&got));
    assert_eq!(snapshot(&h), before);
    assert_eq!(
        calls(&h).await[cloud::Action::CreateNetworkInterface.wire_name()],
        1
    );
}

#[tokio::test]
async fn the_sdk_sees_ec2_throttling_retries_it_and_ipamd_classifies_it_throttled() {
    let h = Harness::basic();
    let (_, eni) = h.instance(0);
    let endpoint = h.serve().await;
    let before = snapshot(&h);
    put_plan(
        &h,
        json!({"throttle_pct": 100, "actions": [cloud::Action::AssignPrivateIpAddresses.wire_name()]}),
    )
    .await;

    let raw = sdk_client(&endpoint, RetryConfig::disabled());
    let e = raw
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .secondary_private_ip_address_count(1)
        .send()
        .await
        .unwrap_err();
    assert!(matches!(e, SdkError::ServiceError(_)), "{e:?}");
    assert_eq!(e.raw_response().map(|r| r.status().as_u16()), Some(503));
    assert_eq!(e.code(), Some("RequestLimitExceeded"));
    assert_eq!(e.message(), Some("Request limit exceeded."));

    let e = AwsEc2::from_client(raw.clone())
        .assign_private_ips(&eni, 1)
        .await
        .unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::Throttled, "{e}");
    assert_eq!(e.code.as_deref(), Some("RequestLimitExceeded"));

    // The SDK's own retryer takes it for a retryable error: three attempts, three requests.
    let retrying = sdk_client(
        &endpoint,
        RetryConfig::standard()
            .with_max_attempts(3)
            .with_initial_backoff(Duration::from_millis(1))
            .with_max_backoff(Duration::from_millis(5)),
    );
    let e = AwsEc2::from_client(retrying)
        .assign_private_ips(&eni, 1)
        .await
        .unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::Throttled, "{e}");
    assert_eq!(
        calls(&h).await[cloud::Action::AssignPrivateIpAddresses.wire_name()],
        5
    );
    assert_eq!(report(&h).await["injected"]["throttle"], 5);
    // Other actions pass.
    let ec2 = AwsEc2::from_client(raw);
    assert_eq!(
        ec2.describe_network_interfaces(std::slice::from_ref(&eni))
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(snapshot(&h), before);
}

#[tokio::test]
async fn the_sdk_sees_server_errors_and_ipamd_classifies_them_unavailable() {
    let h = Harness::basic();
    let (_, eni) = h.instance(0);
    let endpoint = h.serve().await;
    put_plan(&h, json!({"server_error_pct": 100, "seed": 3})).await;
    let raw = sdk_client(&endpoint, RetryConfig::disabled());
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..8 {
        let e = raw
            .describe_network_interfaces()
            .network_interface_ids(&eni)
            .send()
            .await
            .unwrap_err();
        let status = e.raw_response().map(|r| r.status().as_u16());
        seen.insert((status, e.code().map(str::to_string)));
    }
    assert_eq!(
        seen,
        [
            (Some(500), Some("InternalError".to_string())),
            (Some(503), Some("Unavailable".to_string()))
        ]
        .into()
    );
    let e = AwsEc2::from_client(raw)
        .describe_network_interfaces(&[eni])
        .await
        .unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::Unavailable, "{e}");
}

#[tokio::test]
async fn the_sdk_sees_a_dropped_connection_as_a_dispatch_failure() {
    let h = Harness::basic();
    let subnet = h.subnet(0);
    let endpoint = h.serve().await;
    let before = snapshot(&h);
    put_plan(&h, json!({"drop_pct": 100})).await;
    let raw = sdk_client(&endpoint, RetryConfig::disabled());
    let e = raw
        .create_network_interface()
        .subnet_id(&subnet)
        .send()
        .await
        .unwrap_err();
    let SdkError::DispatchFailure(failure) = &e else {
        panic!("expected a dispatch failure, got {e:?}");
    };
    // hyper's "connection closed before message completed", which the SDK takes for a
    // transient error (it retries those when retries are on).
    assert!(format!("{e:?}").contains("IncompleteMessage"), "{e:?}");
    assert_eq!(format!("{:?}", failure.as_other()), "Some(TransientError)");
    assert_eq!(snapshot(&h), before);

    let e = AwsEc2::from_client(raw.clone())
        .describe_network_interfaces(&[])
        .await
        .unwrap_err();
    assert_eq!(e.kind, CloudErrorKind::Unavailable, "{e}");

    // After the change: the client cannot tell that the ENI was created.
    put_plan(&h, json!({"drop_after_pct": 100})).await;
    let e = raw
        .create_network_interface()
        .subnet_id(&subnet)
        .send()
        .await
        .unwrap_err();
    assert!(matches!(e, SdkError::DispatchFailure(_)), "{e:?}");
    put_plan(&h, json!({})).await;
    let all = AwsEc2::from_client(raw)
        .find_network_interfaces(&[])
        .await
        .unwrap();
    assert_eq!(
        all.len(),
        2,
        "the primary ENI and the one created before the drop"
    );
    assert_eq!(
        calls(&h).await[cloud::Action::CreateNetworkInterface.wire_name()],
        2
    );
}

#[test]
fn the_binary_takes_a_plan_from_flags_and_refuses_a_bad_one() {
    let mut sim = SimProcess::start(
        &testkit::unique("ft"),
        &[
            "--fault-throttle-pct",
            "100",
            "--fault-actions",
            cloud::Action::DescribeInstances.wire_name(),
            "--fault-seed",
            "5",
        ],
    );
    let f = sim.wait_ready();
    let ec2 = host_port(&f.ec2_endpoint);
    let get = |path: &str| {
        exchange(
            std::net::TcpStream::connect(&ec2).unwrap(),
            "GET",
            &ec2,
            path,
            &[],
            "",
        )
    };
    let post = |form: &str| {
        exchange(
            std::net::TcpStream::connect(&ec2).unwrap(),
            "POST",
            &ec2,
            "/",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            form,
        )
    };
    let (status, body) = get("/_sim/faults");
    assert_eq!(status, 200);
    let r: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(r["plan"]["throttle_pct"], 100.0);
    assert_eq!(
        r["plan"]["actions"],
        json!([cloud::Action::DescribeInstances.wire_name()])
    );
    assert_eq!(r["plan"]["seed"], 5);
    let (status, body) = post("Action=DescribeInstances&Version=2016-11-15");
    assert_eq!(status, 503);
    assert!(body.contains("<Code>RequestLimitExceeded</Code>"), "{body}");
    assert_eq!(post("Action=DescribeSubnets&Version=2016-11-15").0, 200);
    let (status, _) = exchange(
        std::net::TcpStream::connect(&ec2).unwrap(),
        "PUT",
        &ec2,
        "/_sim/faults",
        &[("Content-Type", "application/json")],
        "{}",
    );
    assert_eq!(status, 200);
    assert_eq!(post("Action=DescribeInstances&Version=2016-11-15").0, 200);
    let (_, body) = get("/_sim/calls");
    let c: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(c[cloud::Action::DescribeInstances.wire_name()], 2);
    assert!(sim.terminate().success(), "{}", sim.log());

    let mut bad = SimProcess::start(&testkit::unique("ft"), &["--fault-throttle-pct", "120"]);
    assert!(!bad.wait_exit().success());
    assert!(
        bad.log()
            .contains("--fault-throttle-pct: 120 is not a percentage"),
        "{}",
        bad.log()
    );
}

#[tokio::test]
async fn every_action_a_plan_may_name_is_served() {
    let h = Harness::basic();
    for action in cloud::Action::ALL {
        let r = call(&h, &[("Action", action.wire_name())]).await.unwrap();
        assert!(!r.body.contains("InvalidAction"), "{action}: {}", r.body);
    }
    let r = call(&h, &[("Action", "RunInstances")]).await.unwrap();
    assert!(r.body.contains("InvalidAction"), "{}", r.body);
}
