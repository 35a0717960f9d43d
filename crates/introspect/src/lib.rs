//! The operator's surface of ipamd: the introspection HTTP endpoints (`/v1/enis` and friends,
//! in the Go CNI's JSON shapes) and the Prometheus metrics (the Go CNI's `awscni_*` names,
//! labels and types, plus a few `vpccni_*` of our own).
//!
//! ipamd hands this crate snapshots of its state through a [`Source`] and records events on
//! [`Metrics`]; nothing here touches the pool or EC2.
//!
//! # Why the `prometheus` crate (tikv) and not `prometheus-client`
//! `prometheus-client` appends `_total` to every counter name, which would rename the Go
//! CNI's `awscni_*_count` counters that operators' dashboards and cni-metrics-helper use, and
//! it has no summary type, while the Go CNI's `awscni_aws_api_latency_ms` is a summary (with
//! no quantiles: only `_sum` and `_count`). The tikv crate writes names as given; its summary
//! support is in the text encoder only, so that one metric is a small custom collector
//! ([`metrics`]). It is used without its `protobuf` feature (text format only) and with
//! `process`, so `process_*` metrics are exported as the Go CNI's process collector does.
//!
//! # Hostile or broken clients
//! [`serve`] speaks HTTP/1 only and bounds what a client can hold: the time to send headers,
//! their size, the body size, the time per request, the age of a connection and the number
//! of connections at once ([`limits`] lists each with its reason). Garbage on the wire ends
//! that one connection, logged at debug; it never stops the server.

mod accept;
mod env;
mod gotime;
mod guard;
pub mod json;
pub mod limits;
pub mod metrics;
mod routes;
mod serve;
mod view;

pub use env::{IpamdEnv, NetworkUtilsEnv};
pub use limits::Limits;
pub use metrics::{ActionGuard, Metrics, metrics_router};
pub use routes::{AVAILABLE_COMMANDS, introspection_router};
pub use serve::{Bind, serve, serve_on, serve_with};
pub use view::{ClusterStatus, Ec2Refusal, PoolView, Source};
