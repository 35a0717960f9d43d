//! `/metrics`: the Go CNI's names, types and labels, values after ipamd's calls, and pool
//! gauges that follow the pool.

use crate::common;

use std::sync::Arc;

use axum::http::StatusCode;
use cloud::Action;
use common::*;
use introspect::{Metrics, PoolView, Source, metrics_router};
use pool::Removal;

fn scrape_router(view: PoolView) -> (Arc<Metrics>, Arc<Fixed>, axum::Router) {
    let metrics = Arc::new(Metrics::new("v1.2.3").unwrap());
    let source = Fixed::new(view);
    let router = metrics_router(Arc::clone(&metrics), Arc::clone(&source) as Arc<dyn Source>);
    (metrics, source, router)
}

async fn scrape(router: &axum::Router) -> String {
    let (status, content_type, body) = call(router, "GET", "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    body
}

/// The value of the sample written exactly as `series` (name plus labels as encoded).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().unwrap())
    })
}

fn value(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
}

#[tokio::test]
async fn pool_gauges_come_from_the_view() {
    let (_, _, router) = scrape_router(secondary_view());
    let text = scrape(&router).await;
    for (series, v) in [
        ("awscni_eni_max", 2.0),
        ("awscni_ip_max", 8.0),
        ("awscni_eni_allocated", 2.0),
        ("awscni_total_ip_addresses", 7.0),
        ("awscni_assigned_ip_addresses", 2.0),
        ("awscni_total_ipv4_prefixes", 0.0),
        ("vpccni_cooling_ip_addresses", 1.0),
        ("awscni_assigned_ip_per_eni{eni=\"eni-0\"}", 2.0),
        ("awscni_assigned_ip_per_eni{eni=\"eni-1\"}", 0.0),
        ("awscni_assigned_ip_per_cidr{cidr=\"10.0.0.11/32\"}", 1.0),
        ("awscni_assigned_ip_per_cidr{cidr=\"10.0.0.12/32\"}", 0.0),
        ("awscni_assigned_ip_per_cidr{cidr=\"10.0.0.13/32\"}", 1.0),
        ("awscni_assigned_ip_per_cidr{cidr=\"10.0.1.13/32\"}", 0.0),
    ] {
        assert_eq!(value(&text, series), v, "{series}");
    }
    for (name, kind) in [
        ("awscni_eni_max", "gauge"),
        ("awscni_assigned_ip_per_cidr", "gauge"),
        ("awscni_add_ip_req_count", "counter"),
        ("awscni_connmark_reconcile_total", "counter"),
        ("awscni_build_info", "gauge"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} {kind}"
        );
    }
    assert_eq!(
        value(
            &text,
            &format!(
                "awscni_build_info{{goversion=\"{}\",version=\"v1.2.3\"}}",
                introspect::metrics::RUST_VERSION
            )
        ),
        1.0
    );
    assert!(introspect::metrics::RUST_VERSION.starts_with("rust"));
    assert_eq!(
        value(&text, "awscni_connmark_reconcile_total{result=\"error\"}"),
        0.0
    );
    assert!(text.contains("\nprocess_resident_memory_bytes "), "{text}");
}

#[tokio::test]
async fn a_removed_eni_and_its_cidrs_disappear_on_the_next_scrape() {
    let (_, source, router) = scrape_router(secondary_view());
    let before = scrape(&router).await;
    assert!(before.contains("eni=\"eni-1\""));
    let mut view = secondary_view();
    view.pool
        .remove_eni("eni-1", Removal::IfUnused(NOW))
        .unwrap();
    source.set(view);
    let after = scrape(&router).await;
    assert!(!after.contains("eni-1"), "{after}");
    assert!(!after.contains("10.0.1."), "{after}");
    assert_eq!(value(&after, "awscni_eni_allocated"), 1.0);
    assert_eq!(value(&after, "awscni_total_ip_addresses"), 4.0);
}

#[tokio::test]
async fn prefix_mode_counts_per_28_and_multiplies_ip_max() {
    let (_, _, router) = scrape_router(prefix_view());
    let text = scrape(&router).await;
    assert_eq!(value(&text, "awscni_ip_max"), (3 * 9 * 16) as f64);
    assert_eq!(value(&text, "awscni_total_ipv4_prefixes"), 1.0);
    assert_eq!(value(&text, "awscni_total_ip_addresses"), 16.0);
    assert_eq!(
        value(&text, "awscni_assigned_ip_per_cidr{cidr=\"10.0.32.0/28\"}"),
        2.0
    );
    assert!(
        !text.contains("/32\""),
        "prefix members are not listed as /32s"
    );
}

#[tokio::test]
async fn ipamd_events_show_with_the_go_labels() {
    let (m, _, router) = scrape_router(secondary_view());
    m.ipamd_error("decreaseIPPool");
    m.ipamd_error("decreaseIPPool");
    m.reconcile("eniReconcileAdd");
    m.add_request();
    m.del_request("PodDeleted");
    m.add_latency(0.0007, true);
    m.add_latency(3.0, false);
    let (create, assign) = (
        Action::CreateNetworkInterface.wire_name(),
        Action::AssignPrivateIpAddresses.wire_name(),
    );
    m.aws_api(create, 0.25, None);
    m.aws_api(assign, 0.1, Some("InsufficientFreeAddressesInSubnet"));
    m.imds_api("GetMetadata", 0.002, None);
    m.force_removed_eni();
    m.force_removed_ips(3);
    m.no_available_ip();
    m.startup(4.5, false, "ec2_unreachable");
    m.node_init(1.0, true);
    m.connmark_backend("nftables");
    m.connmark_backend("iptables");
    m.connmark_reconcile(true);
    let guard = m.action_in_progress("increaseDatastorePool");
    let during = scrape(&router).await;
    drop(guard);
    let text = scrape(&router).await;

    assert_eq!(
        value(
            &during,
            "awscni_ipamd_action_inprogress{fn=\"increaseDatastorePool\"}"
        ),
        1.0
    );
    assert_eq!(
        value(
            &text,
            "awscni_ipamd_action_inprogress{fn=\"increaseDatastorePool\"}"
        ),
        0.0
    );
    let insufficient = "InsufficientFreeAddressesInSubnet";
    for (series, v) in [
        ("awscni_ipamd_error_count{fn=\"decreaseIPPool\"}".to_string(), 2.0),
        ("awscni_reconcile_count{fn=\"eniReconcileAdd\"}".to_string(), 1.0),
        ("awscni_add_ip_req_count".to_string(), 1.0),
        ("awscni_del_ip_req_count{reason=\"PodDeleted\"}".to_string(), 1.0),
        (
            "vpccni_add_duration_seconds_bucket{result=\"success\",le=\"0.001\"}".to_string(),
            1.0,
        ),
        (
            "vpccni_add_duration_seconds_bucket{result=\"error\",le=\"2.5\"}".to_string(),
            0.0,
        ),
        ("vpccni_add_duration_seconds_count{result=\"error\"}".to_string(), 1.0),
        (
            format!("awscni_aws_api_latency_ms_sum{{api=\"{create}\",error=\"false\",status=\"200\"}}"),
            250.0,
        ),
        (
            format!("awscni_aws_api_latency_ms_count{{api=\"{assign}\",error=\"true\",status=\"{insufficient}\"}}"),
            1.0,
        ),
        (
            "awscni_aws_api_latency_ms_count{api=\"GetMetadata\",error=\"false\",status=\"200\"}"
                .to_string(),
            1.0,
        ),
        (
            format!("awscni_aws_api_error_count{{api=\"{assign}\",error=\"{insufficient}\"}}"),
            1.0,
        ),
        (format!("awscni_ec2api_req_count{{fn=\"{create}\"}}"), 1.0),
        (format!("awscni_ec2api_req_count{{fn=\"{assign}\"}}"), 1.0),
        (format!("awscni_ec2api_error_count{{fn=\"{assign}\"}}"), 1.0),
        (
            format!("vpccni_ec2_api_duration_seconds_count{{api=\"{assign}\",status=\"{insufficient}\"}}"),
            1.0,
        ),
        ("awscni_force_removed_enis".to_string(), 1.0),
        ("awscni_force_removed_ips".to_string(), 3.0),
        ("awscni_no_available_ip_addresses".to_string(), 1.0),
        (
            "awscni_ipamd_startup_duration_seconds_count{failure_reason=\"ec2_unreachable\",success=\"false\",with_api_server=\"false\"}"
                .to_string(),
            1.0,
        ),
        (
            "awscni_ipamd_node_initialization_duration_seconds_sum{success=\"true\"}".to_string(),
            1.0,
        ),
        ("awscni_connmark_backend{backend=\"iptables\"}".to_string(), 1.0),
        ("awscni_connmark_reconcile_total{result=\"success\"}".to_string(), 1.0),
    ] {
        assert_eq!(value(&text, &series), v, "{series}");
    }
    assert_eq!(
        sample(&text, "awscni_connmark_backend{backend=\"nftables\"}"),
        None,
        "only the backend in use shows"
    );
    assert_eq!(
        sample(&text, "awscni_ec2api_req_count{fn=\"GetMetadata\"}"),
        None,
        "IMDS calls are not EC2 calls"
    );
    assert!(text.contains("# TYPE awscni_aws_api_latency_ms summary\n"));
    assert!(
        !text.contains("awscni_aws_api_latency_ms{"),
        "no quantiles, as in the Go CNI"
    );
}

#[tokio::test]
async fn only_get_metrics_is_served() {
    let (_, _, router) = scrape_router(secondary_view());
    let (status, _, _) = call(&router, "POST", "/metrics").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _, _) = call(&router, "GET", "/other").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[test]
fn encode_without_a_scrape_holds_every_unlabelled_metric() {
    let m = Metrics::new("v1").unwrap();
    let text = m.encode();
    for name in [
        "awscni_eni_max",
        "awscni_ip_max",
        "awscni_eni_allocated",
        "awscni_total_ip_addresses",
        "awscni_assigned_ip_addresses",
        "awscni_total_ipv4_prefixes",
        "awscni_add_ip_req_count",
        "awscni_force_removed_enis",
        "awscni_force_removed_ips",
        "awscni_no_available_ip_addresses",
        "vpccni_cooling_ip_addresses",
    ] {
        assert_eq!(value(&text, name), 0.0, "{name}");
    }
    let set = Metrics::new("v1").unwrap();
    set.set_pool(&secondary_view());
    assert_eq!(value(&set.encode(), "awscni_total_ip_addresses"), 7.0);
}
