//! The Prometheus metrics: every metric the Go CNI registers (`awscni_*`: same names, types,
//! label names and meaning), a few of ours (`vpccni_*`), and the process collector.
//!
//! ipamd records events through the methods of [`Metrics`]; the pool gauges are set from a
//! [`PoolView`] on each scrape ([`Metrics::set_pool`]), so they cannot drift from the pool.

mod summary;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use pool::SlotState;
use prometheus::{
    CounterVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

use crate::view::{Ec2Refusal, PoolView, Source};
use summary::SummaryVec;

/// The compiler that built us, where the Go CNI's `awscni_build_info` puts the Go version:
/// `rust1.95.0` (or `rust` if the build could not ask rustc).
pub const RUST_VERSION: &str = env!("INTROSPECT_RUSTC_VERSION");

/// `vpccni_add_duration_seconds` buckets: an ADD answered from the pool takes well under a
/// millisecond, one that waits for EC2 seconds.
const ADD_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// `vpccni_ec2_api_duration_seconds` buckets: EC2 calls take tens of milliseconds to seconds.
const EC2_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Decrements `awscni_ipamd_action_inprogress{fn}` when dropped.
#[must_use = "the action counts as in progress only while the guard lives"]
#[derive(Debug)]
pub struct ActionGuard(IntGauge);

impl Drop for ActionGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Every metric ipamd exports, in its own registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// The name of every metric of ours and the Go CNI's (not the process collector's).
    names: Vec<String>,
    /// EC2 calls refused for lack of a permission, by API (for `/v1/ec2-refusals`).
    refusals: Mutex<BTreeMap<String, Ec2Refusal>>,
    /// Serialises scrapes: the pool's label families are reset and refilled before encoding.
    scrape: Mutex<()>,
    ipamd_error: IntCounterVec,
    action_inprogress: IntGaugeVec,
    eni_max: IntGauge,
    ip_max: IntGauge,
    reconcile: IntCounterVec,
    add_ip_req: IntCounter,
    del_ip_req: IntCounterVec,
    pod_eni_error: IntCounterVec,
    aws_api_latency: SummaryVec,
    aws_api_error: IntCounterVec,
    aws_utils_error: IntCounterVec,
    ec2api_req: IntCounterVec,
    ec2api_error: IntCounterVec,
    eni_allocated: IntGauge,
    total_ips: IntGauge,
    assigned_ips: IntGauge,
    force_removed_enis: IntCounter,
    force_removed_ips: IntCounter,
    total_prefixes: IntGauge,
    ips_per_cidr: IntGaugeVec,
    no_available_ip: IntCounter,
    ips_per_eni: IntGaugeVec,
    startup: HistogramVec,
    node_init: HistogramVec,
    connmark_backend: IntGaugeVec,
    connmark_reconcile: IntCounterVec,
    add_duration: HistogramVec,
    ec2_api_duration: HistogramVec,
    cooling_ips: IntGauge,
    ec2_retries: IntCounterVec,
    ec2_backoff: CounterVec,
    prefix_fallback_ips: IntGauge,
    prefix_refusals: IntCounter,
}

impl Metrics {
    /// Registers every metric; `awscni_build_info{version, goversion}` is 1 with `version` and
    /// [`RUST_VERSION`].
    pub fn new(version: &str) -> Result<Metrics, prometheus::Error> {
        let r = Registering::default();
        let mut m = Metrics {
            refusals: Mutex::new(BTreeMap::new()),
            ipamd_error: counter_vec(
                &r,
                "awscni_ipamd_error_count",
                "The number of errors encountered in ipamd",
                &["fn"],
            )?,
            action_inprogress: gauge_vec(
                &r,
                "awscni_ipamd_action_inprogress",
                "The number of ipamd actions in progress",
                &["fn"],
            )?,
            eni_max: gauge(
                &r,
                "awscni_eni_max",
                "The maximum number of ENIs that can be attached to the instance, accounting for unmanaged ENIs",
            )?,
            ip_max: gauge(
                &r,
                "awscni_ip_max",
                "The maximum number of IP addresses that can be allocated to the instance",
            )?,
            reconcile: counter_vec(
                &r,
                "awscni_reconcile_count",
                "The number of times ipamd reconciles on ENIs and IP/Prefix addresses",
                &["fn"],
            )?,
            add_ip_req: counter(
                &r,
                "awscni_add_ip_req_count",
                "The number of add IP address requests",
            )?,
            del_ip_req: counter_vec(
                &r,
                "awscni_del_ip_req_count",
                "The number of delete IP address requests",
                &["reason"],
            )?,
            pod_eni_error: counter_vec(
                &r,
                "awscni_pod_eni_error_count",
                "The number of errors encountered for pod ENIs",
                &["fn"],
            )?,
            aws_api_latency: registered(
                &r,
                SummaryVec::new(
                    "awscni_aws_api_latency_ms",
                    "AWS API call latency in ms",
                    &["api", "error", "status"],
                )?,
            )?,
            aws_api_error: counter_vec(
                &r,
                "awscni_aws_api_error_count",
                "The number of times AWS API returns an error",
                &["api", "error"],
            )?,
            aws_utils_error: counter_vec(
                &r,
                "awscni_aws_utils_error_count",
                "The number of errors not handled in awsutils library",
                &["fn", "error"],
            )?,
            ec2api_req: counter_vec(
                &r,
                "awscni_ec2api_req_count",
                "The number of requests made to EC2 APIs by CNI",
                &["fn"],
            )?,
            ec2api_error: counter_vec(
                &r,
                "awscni_ec2api_error_count",
                "The number of failed EC2 APIs requests",
                &["fn"],
            )?,
            eni_allocated: gauge(&r, "awscni_eni_allocated", "The number of ENIs allocated")?,
            total_ips: gauge(
                &r,
                "awscni_total_ip_addresses",
                "The total number of IP addresses",
            )?,
            assigned_ips: gauge(
                &r,
                "awscni_assigned_ip_addresses",
                "The number of IP addresses assigned to pods",
            )?,
            force_removed_enis: counter(
                &r,
                "awscni_force_removed_enis",
                "The number of ENIs force removed while they had assigned pods",
            )?,
            force_removed_ips: counter(
                &r,
                "awscni_force_removed_ips",
                "The number of IPs force removed while they had assigned pods",
            )?,
            total_prefixes: gauge(
                &r,
                "awscni_total_ipv4_prefixes",
                "The total number of IPv4 prefixes",
            )?,
            ips_per_cidr: gauge_vec(
                &r,
                "awscni_assigned_ip_per_cidr",
                "The total number of IP addresses assigned per cidr",
                &["cidr"],
            )?,
            no_available_ip: counter(
                &r,
                "awscni_no_available_ip_addresses",
                "The number of pod IP assignments that fail due to no available IP addresses",
            )?,
            ips_per_eni: gauge_vec(
                &r,
                "awscni_assigned_ip_per_eni",
                "The number of allocated ips partitioned by eni",
                &["eni"],
            )?,
            startup: histogram_vec(
                &r,
                "awscni_ipamd_startup_duration_seconds",
                "The duration of IPAMD startup from process start to ready to serve CNI requests",
                &["success", "with_api_server", "failure_reason"],
                prometheus::DEFAULT_BUCKETS.to_vec(),
            )?,
            node_init: histogram_vec(
                &r,
                "awscni_ipamd_node_initialization_duration_seconds",
                "The duration of node initialization during IPAMD startup",
                &["success"],
                prometheus::DEFAULT_BUCKETS.to_vec(),
            )?,
            connmark_backend: gauge_vec(
                &r,
                "awscni_connmark_backend",
                "The connmark backend in use; the active backend's series is set to 1",
                &["backend"],
            )?,
            connmark_reconcile: counter_vec(
                &r,
                "awscni_connmark_reconcile_total",
                "The number of connmark Setup/Cleanup reconciliations by result",
                &["result"],
            )?,
            add_duration: histogram_vec(
                &r,
                "vpccni_add_duration_seconds",
                "Time ipamd took to answer an ADD (assign an address), by result",
                &["result"],
                ADD_BUCKETS.to_vec(),
            )?,
            ec2_api_duration: histogram_vec(
                &r,
                "vpccni_ec2_api_duration_seconds",
                "EC2 API call duration in seconds, by API and status (\"200\" or the error code)",
                &["api", "status"],
                EC2_BUCKETS.to_vec(),
            )?,
            cooling_ips: gauge(
                &r,
                "vpccni_cooling_ip_addresses",
                "The number of free IP addresses still cooling down after a pod released them",
            )?,
            ec2_retries: counter_vec(
                &r,
                "vpccni_ec2_retries_total",
                "EC2 requests retried after throttling or a transient failure, by API and reason (the error code, or Unavailable for a dropped connection or timeout)",
                &["api", "reason"],
            )?,
            ec2_backoff: registered(
                &r,
                CounterVec::new(
                    Opts::new(
                        "vpccni_ec2_backoff_seconds_total",
                        "Seconds spent backing off before retrying EC2 requests, by API",
                    ),
                    &["api"],
                )?,
            )?,
            prefix_fallback_ips: gauge(
                &r,
                "vpccni_prefix_fallback_ip_addresses",
                "With prefix delegation, the IP addresses held as /32s because EC2 had no free /28 block in the subnet",
            )?,
            prefix_refusals: counter(
                &r,
                "vpccni_prefix_refusals_total",
                "Prefix requests EC2 refused for want of a free aligned /28 block (InsufficientCidrBlocks)",
            )?,
            scrape: Mutex::new(()),
            registry: r.registry.clone(),
            names: Vec::new(),
        };
        let build_info = gauge_vec(
            &r,
            "awscni_build_info",
            "A metric with a constant '1' value labeled by version, revision, and goversion from which amazon-vpc-cni-k8s was built.",
            &["version", "goversion"],
        )?;
        build_info
            .with_label_values(&[version, RUST_VERSION])
            .set(1);
        // Both results show from the start, at 0, as in the Go CNI.
        for result in ["success", "error"] {
            m.connmark_reconcile.with_label_values(&[result]);
        }
        m.names = r.names.into_inner();
        #[cfg(target_os = "linux")]
        m.registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(m)
    }

    /// The name of every `awscni_*` and `vpccni_*` metric, whether it has a sample yet or not
    /// (the text format leaves out a family without one).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Everything registered, in the text format 0.0.4.
    pub fn encode(&self) -> String {
        let _scrape = self.lock_scrape();
        self.encode_locked()
    }

    /// Sets the pool gauges from `view`, then encodes everything: one consistent scrape.
    pub fn scrape(&self, view: &PoolView) -> String {
        let _scrape = self.lock_scrape();
        self.set_pool_locked(view);
        self.encode_locked()
    }

    /// Sets the pool gauges from `view`: `awscni_eni_max`, `awscni_ip_max`,
    /// `awscni_eni_allocated`, `awscni_total_ip_addresses`, `awscni_assigned_ip_addresses`,
    /// `awscni_total_ipv4_prefixes`, `vpccni_cooling_ip_addresses`, and the per-CIDR and
    /// per-ENI families, which are emptied first so that ENIs and CIDRs gone from the pool
    /// disappear.
    pub fn set_pool(&self, view: &PoolView) {
        let _scrape = self.lock_scrape();
        self.set_pool_locked(view);
    }

    fn lock_scrape(&self) -> MutexGuard<'_, ()> {
        self.scrape.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn encode_locked(&self) -> String {
        let mut text = String::new();
        if let Err(e) = TextEncoder::new().encode_utf8(&self.registry.gather(), &mut text) {
            tracing::error!(error = %e, "encoding metrics failed");
        }
        text
    }

    fn set_pool_locked(&self, view: &PoolView) {
        let pool = &view.pool;
        let counts = pool.counts(view.now);
        self.eni_max.set(i64::from(view.limits.max_enis));
        self.ip_max
            .set(i64::try_from(view.max_ips()).unwrap_or(i64::MAX));
        self.eni_allocated.set(count(pool.enis().count()));
        // IPv6 addresses count as held or cooling too, as aws-node counts them in IPv6 mode;
        // the /80's 2^48 addresses are not counted as a total.
        let counts6 = pool.v6().counts(view.now);
        self.total_ips.set(i64::from(counts.total));
        self.assigned_ips
            .set(i64::from(counts.assigned) + i64::from(counts6.assigned));
        self.cooling_ips
            .set(i64::from(counts.cooling) + i64::from(counts6.cooling));
        self.total_prefixes.set(count(view.prefix_count()));
        let slash32s: u32 = match view.targets.prefix_delegation {
            true => pool.enis().map(|e| pool.secondary_count(&e.id)).sum(),
            false => 0,
        };
        self.prefix_fallback_ips.set(i64::from(slash32s));
        self.ips_per_cidr.reset();
        self.ips_per_eni.reset();
        for eni in pool.enis() {
            let mut on_eni = 0;
            for (ip, slot) in pool.addresses(&eni.id) {
                let assigned = i64::from(matches!(slot.state, SlotState::Assigned { .. }));
                on_eni += assigned;
                // Secondary mode has one series per /32, prefix mode one per /28 counting its
                // assigned members, as in the Go CNI.
                let cidr = match slot.prefix {
                    Some(prefix) => prefix.to_string(),
                    None => format!("{ip}/32"),
                };
                self.ips_per_cidr.with_label_values(&[&cidr]).add(assigned);
            }
            for prefix in pool.prefixes(&eni.id) {
                self.ips_per_cidr
                    .with_label_values(&[&prefix.to_string()])
                    .add(0);
            }
            self.ips_per_eni.with_label_values(&[&eni.id]).set(on_eni);
        }
        for a in pool.v6().allocations() {
            self.ips_per_eni.with_label_values(&[&a.eni_id]).add(1);
            if let Some((prefix, _)) = pool.v6().prefixes().find(|(p, _)| p.contains(a.ip)) {
                self.ips_per_cidr
                    .with_label_values(&[&prefix.to_string()])
                    .add(1);
            }
        }
        for (prefix, _) in pool.v6().prefixes() {
            self.ips_per_cidr
                .with_label_values(&[&prefix.to_string()])
                .add(0);
        }
    }

    /// `vpccni_prefix_refusals_total` += 1: EC2 refused a prefix for want of a /28 block.
    pub fn prefix_refused(&self) {
        self.prefix_refusals.inc();
    }

    /// `awscni_ipamd_error_count{fn}` += 1.
    pub fn ipamd_error(&self, func: &str) {
        self.ipamd_error.with_label_values(&[func]).inc();
    }

    /// `awscni_ipamd_action_inprogress{fn}` += 1 until the guard is dropped.
    pub fn action_in_progress(&self, func: &str) -> ActionGuard {
        let gauge = self.action_inprogress.with_label_values(&[func]);
        gauge.inc();
        ActionGuard(gauge)
    }

    /// `awscni_reconcile_count{fn}` += 1.
    pub fn reconcile(&self, func: &str) {
        self.reconcile.with_label_values(&[func]).inc();
    }

    /// `awscni_add_ip_req_count` += 1 (an ADD reached ipamd).
    pub fn add_request(&self) {
        self.add_ip_req.inc();
    }

    /// `awscni_del_ip_req_count{reason}` += 1 (`PodDeleted`, `SetupNSFailed`, ...).
    pub fn del_request(&self, reason: &str) {
        self.del_ip_req.with_label_values(&[reason]).inc();
    }

    /// Ours: `vpccni_add_duration_seconds{result="success"|"error"}` observes how long an ADD
    /// took in ipamd.
    pub fn add_latency(&self, seconds: f64, ok: bool) {
        let result = if ok { "success" } else { "error" };
        self.add_duration
            .with_label_values(&[result])
            .observe(seconds);
    }

    /// EC2 refused a call of `api` at `at` for lack of a permission, with `code` and `message`.
    pub fn ec2_refused(&self, api: &str, code: &str, message: &str, at: pool::Timestamp) {
        let mut refusals = self.refusals.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = refusals
            .entry(api.to_string())
            .or_insert_with(|| Ec2Refusal {
                api: api.to_string(),
                code: String::new(),
                message: String::new(),
                count: 0,
                last: at,
            });
        entry.code = code.to_string();
        entry.message = message.to_string();
        entry.count += 1;
        entry.last = entry.last.max(at);
    }

    /// Every API refused so far, by name.
    pub fn ec2_refusals(&self) -> Vec<Ec2Refusal> {
        self.refusals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// One EC2 call named `api` (`CreateNetworkInterface`, ...) that took `seconds` and failed
    /// with `error_code` (the AWS error code; `Some("")` when the failure has none) or
    /// succeeded (`None`):
    /// `awscni_aws_api_latency_ms{api, error="true"|"false", status="200"|code}` (a summary,
    /// in ms), `awscni_ec2api_req_count{fn=api}`, on failure
    /// `awscni_ec2api_error_count{fn=api}` and `awscni_aws_api_error_count{api, error=code}`,
    /// and ours `vpccni_ec2_api_duration_seconds{api, status}`.
    pub fn aws_api(&self, api: &str, seconds: f64, error_code: Option<&str>) {
        let status = error_code.unwrap_or("200");
        let failed = if error_code.is_some() {
            "true"
        } else {
            "false"
        };
        self.aws_api_latency
            .observe(&[api, failed, status], seconds * 1000.0);
        self.ec2api_req.with_label_values(&[api]).inc();
        self.ec2_api_duration
            .with_label_values(&[api, status])
            .observe(seconds);
        if let Some(code) = error_code {
            self.ec2api_error.with_label_values(&[api]).inc();
            self.aws_api_error.with_label_values(&[api, code]).inc();
        }
    }

    /// An EC2 request that failed for `reason` is retried after `seconds`:
    /// `vpccni_ec2_retries_total{api, reason}` += 1, `vpccni_ec2_backoff_seconds_total{api}`
    /// += `seconds`.
    pub fn ec2_backoff(&self, api: &str, reason: &str, seconds: f64) {
        self.ec2_retries.with_label_values(&[api, reason]).inc();
        self.ec2_backoff.with_label_values(&[api]).inc_by(seconds);
    }

    /// One IMDS request (the Go CNI's `GetMetadata`): only
    /// `awscni_aws_api_latency_ms{api, error, status}`, as the Go CNI records IMDS calls (they
    /// are not EC2 API calls).
    pub fn imds_api(&self, api: &str, seconds: f64, error_code: Option<&str>) {
        let status = error_code.unwrap_or("200");
        let failed = if error_code.is_some() {
            "true"
        } else {
            "false"
        };
        self.aws_api_latency
            .observe(&[api, failed, status], seconds * 1000.0);
    }

    /// `awscni_pod_eni_error_count{fn}` += 1 (security groups for pods; registered for
    /// compatibility, we have no pod ENIs).
    pub fn pod_eni_error(&self, func: &str) {
        self.pod_eni_error.with_label_values(&[func]).inc();
    }

    /// `awscni_aws_utils_error_count{fn, error}` += 1. `error` is a label: pass a bounded
    /// value (an error code), not a free-form message.
    pub fn aws_utils_error(&self, func: &str, error: &str) {
        self.aws_utils_error.with_label_values(&[func, error]).inc();
    }

    /// `awscni_force_removed_enis` += 1: an ENI vanished while pods held its addresses.
    pub fn force_removed_eni(&self) {
        self.force_removed_enis.inc();
    }

    /// `awscni_force_removed_ips` += `n`: addresses vanished while pods held them.
    pub fn force_removed_ips(&self, n: u64) {
        self.force_removed_ips.inc_by(n);
    }

    /// `awscni_no_available_ip_addresses` += 1: an ADD found no available address.
    pub fn no_available_ip(&self) {
        self.no_available_ip.inc();
    }

    /// `awscni_ipamd_startup_duration_seconds{success, with_api_server="false",
    /// failure_reason}` observes the time from process start to ready (or to failure). We
    /// never use the Kubernetes API server at startup.
    pub fn startup(&self, seconds: f64, success: bool, failure_reason: &str) {
        self.startup
            .with_label_values(&[bool_label(success), "false", failure_reason])
            .observe(seconds);
    }

    /// `awscni_ipamd_node_initialization_duration_seconds{success}` observes node init.
    pub fn node_init(&self, seconds: f64, success: bool) {
        self.node_init
            .with_label_values(&[bool_label(success)])
            .observe(seconds);
    }

    /// `awscni_connmark_backend{backend}` = 1 for the backend in use (`iptables` or
    /// `nftables`), and only for it.
    pub fn connmark_backend(&self, backend: &str) {
        self.connmark_backend.reset();
        self.connmark_backend.with_label_values(&[backend]).set(1);
    }

    /// `awscni_connmark_reconcile_total{result="success"|"error"}` += 1.
    pub fn connmark_reconcile(&self, ok: bool) {
        let result = if ok { "success" } else { "error" };
        self.connmark_reconcile.with_label_values(&[result]).inc();
    }
}

/// `GET /metrics`: sets the pool gauges from a fresh snapshot, then answers every metric in
/// the text format 0.0.4.
pub fn metrics_router(metrics: Arc<Metrics>, source: Arc<dyn Source>) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .with_state((metrics, source))
}

async fn scrape(State((metrics, source)): State<(Arc<Metrics>, Arc<dyn Source>)>) -> Response {
    let text = tokio::task::spawn_blocking(move || {
        let view = source.view();
        metrics.scrape(&view)
    })
    .await;
    match text {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "taking a snapshot for metrics failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "taking a snapshot of ipamd's state failed\n",
            )
                .into_response()
        }
    }
}

fn bool_label(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A registry being filled, with the names registered so far.
#[derive(Default)]
struct Registering {
    registry: Registry,
    names: std::cell::RefCell<Vec<String>>,
}

/// Registers `metric` with `r` and hands it back: every constructor below is just this.
fn registered<M: prometheus::core::Collector + Clone + 'static>(
    r: &Registering,
    metric: M,
) -> prometheus::Result<M> {
    r.registry.register(Box::new(metric.clone()))?;
    r.names
        .borrow_mut()
        .extend(metric.desc().iter().map(|d| d.fq_name.clone()));
    Ok(metric)
}

fn counter(r: &Registering, name: &str, help: &str) -> prometheus::Result<IntCounter> {
    registered(r, IntCounter::with_opts(Opts::new(name, help))?)
}

fn counter_vec(
    r: &Registering,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<IntCounterVec> {
    registered(r, IntCounterVec::new(Opts::new(name, help), labels)?)
}

fn gauge(r: &Registering, name: &str, help: &str) -> prometheus::Result<IntGauge> {
    registered(r, IntGauge::with_opts(Opts::new(name, help))?)
}

fn gauge_vec(
    r: &Registering,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<IntGaugeVec> {
    registered(r, IntGaugeVec::new(Opts::new(name, help), labels)?)
}

fn histogram_vec(
    r: &Registering,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: Vec<f64>,
) -> prometheus::Result<HistogramVec> {
    registered(
        r,
        HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)?,
    )
}
