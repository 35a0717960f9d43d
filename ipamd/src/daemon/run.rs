//! The one place that runs the daemon: its socket, its HTTP endpoints and every background
//! task a node runs, chosen by a plain [`Tasks`] value. ipamd's `main` and the fleet simulator both go through [`Daemon::run`], so
//! the fleet runs exactly what a node runs.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use cloud::{Ec2, Imds};
use cluster::{ClusterEvent, ClusterWrite};
use introspect::Bind;
use tokio::net::UnixListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tracing::{error, info};

use super::Daemon;
use super::leaks::MAX_START_JITTER;
use super::scarcity::CHECK_PERIOD as SCARCITY_CHECK_PERIOD;
use super::veths::VETH_GRACE;
use crate::config::Config;
use crate::durability::{DaemonStore, PersistError};
use crate::host::HostNetwork;
use crate::{CONTROLLER_PERIOD, VETH_SWEEP_PERIOD};

/// Which background tasks run, and how often. The controller, the subnet-scarcity check and
/// the veth sweep always run (each does nothing where it has nothing to do).
pub struct Tasks {
    /// The reconciliation with IMDS, every this long.
    pub reconcile: Duration,
    /// The leaked-ENI cleanup, every this long; `None` turns it off.
    pub leak_cleanup: Option<Duration>,
    /// What ipamd tells the cluster, when it has a client of the API server.
    pub publish: Option<Publish>,
    /// The plugin's socket, served until shutdown (the fleet calls the daemon directly).
    pub socket: Option<(UnixListener, crate::server::Settings)>,
    /// The HTTP endpoints: introspection and metrics.
    pub http: Vec<Endpoint>,
}

/// An HTTP endpoint: `router` on `bind`. A listener that fails (the port is taken) is retried
/// with backoff, as the Go CNI does: the endpoints matter less than the pods.
pub struct Endpoint {
    /// What it serves, for the log.
    pub what: &'static str,
    /// Where.
    pub bind: Bind,
    /// The routes.
    pub router: axum::Router,
}

/// What ipamd tells the cluster: its Events, and on its Node the real pod capacity and the
/// removal of the startup taint.
pub struct Publish {
    /// The API server.
    pub writer: Arc<dyn ClusterWrite>,
    /// The Events the daemon queues (the receiving end of [`super::Parts::events`]).
    pub events: Option<mpsc::Receiver<ClusterEvent>>,
    /// STARTUP_TAINT_MIN_IPS.
    pub startup_taint_min_ips: u32,
    /// PUBLISH_NODE_MAX_PODS.
    pub max_pods: bool,
}

impl Tasks {
    /// The tasks the configuration asks for, without publishers (they need a cluster client).
    pub fn from_config(config: &Config) -> Tasks {
        Tasks {
            reconcile: config.reconcile_interval,
            leak_cleanup: (!config.disable_leaked_eni_cleanup)
                .then_some(config.leaked_eni_cleanup_interval),
            publish: None,
            socket: None,
            http: Vec::new(),
        }
    }
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// Serves and runs the background tasks `tasks` selects until `shutdown` completes, then
    /// stops them (the endpoints gracefully) and makes every change durable. `spread` draws
    /// from [0, 1) to spread the periodic EC2 calls of a fleet of nodes started together.
    /// Dropping the returned future stops every task too.
    pub async fn run(
        self: Arc<Self>,
        tasks: Tasks,
        mut spread: impl FnMut() -> f64 + Send + 'static,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), PersistError> {
        let mut set = JoinSet::new();
        set.spawn(Arc::clone(&self).run_controller());
        set.spawn(Arc::clone(&self).run_reconciler(tasks.reconcile));
        set.spawn(Arc::clone(&self).run_veth_sweeps());
        if let Some(period) = tasks.leak_cleanup {
            // A random start, so nodes launched together do not all list the VPC at once.
            let start = period.min(MAX_START_JITTER).mul_f64(spread());
            set.spawn(Arc::clone(&self).run_leak_cleanups(start, period));
        }
        set.spawn(Arc::clone(&self).run_scarcity_checks(spread));
        if let Some(publish) = tasks.publish {
            set.spawn(crate::publish::publish_node(
                Arc::clone(&publish.writer),
                Arc::clone(&self),
                publish.startup_taint_min_ips,
                publish.max_pods,
            ));
            if let Some(events) = publish.events {
                set.spawn(crate::publish::record_events(publish.writer, events));
            }
        }
        let (stop, stopped) = watch::channel(false);
        let mut endpoints = JoinSet::new();
        for endpoint in tasks.http {
            endpoints.spawn(serve_http(endpoint, stopped.clone()));
        }
        match tasks.socket {
            Some((listener, settings)) => {
                crate::server::serve(listener, Arc::clone(&self), settings, shutdown).await;
            }
            None => shutdown.await,
        }
        let _ = stop.send(true);
        endpoints.join_all().await;
        set.shutdown().await;
        self.flush().await
    }

    /// The controller: a round every [`CONTROLLER_PERIOD`], or at once when an ADD, a DEL or
    /// a change in the cluster asks for one.
    async fn run_controller(self: Arc<Self>) {
        let mut cluster = self.cluster_view();
        // A view nobody updates (no cluster) never changes: stop asking it.
        let mut followed = true;
        loop {
            self.track_waits();
            tokio::select! {
                () = tokio::time::sleep(CONTROLLER_PERIOD) => {}
                () = self.kicked() => {}
                changed = cluster.changed(), if followed => match changed {
                    Ok(()) => self.cluster_changed(),
                    Err(_) => followed = false,
                },
            }
            self.grow().await;
        }
    }

    /// The reconciliation with IMDS, every `period`.
    async fn run_reconciler(self: Arc<Self>, period: Duration) {
        loop {
            tokio::time::sleep(period).await;
            self.reconcile().await;
        }
    }

    /// The subnet-scarcity check, every [`SCARCITY_CHECK_PERIOD`] spread over half of it
    /// either way, so a fleet does not ask at once.
    async fn run_scarcity_checks(self: Arc<Self>, mut spread: impl FnMut() -> f64) {
        loop {
            tokio::time::sleep(SCARCITY_CHECK_PERIOD.mul_f64(0.5 + spread())).await;
            self.check_subnet_scarcity().await;
        }
    }

    /// The veth sweep: every [`VETH_SWEEP_PERIOD`], or soon after a DEL leaves a veth.
    async fn run_veth_sweeps(self: Arc<Self>) {
        loop {
            // The first sweep sees a DEL's veth unrouted, the one a grace later deletes it.
            loop {
                tokio::time::sleep(VETH_GRACE).await;
                if !self.sweep_veths().await {
                    break;
                }
            }
            tokio::select! {
                () = tokio::time::sleep(VETH_SWEEP_PERIOD) => {}
                () = self.pod_unrouted() => {}
            }
        }
    }

    /// The leaked-ENI cleanup, first after `start`, then every `period`.
    async fn run_leak_cleanups(self: Arc<Self>, start: Duration, period: Duration) {
        tokio::time::sleep(start).await;
        loop {
            let report = self.clean_leaked_enis().await;
            if report.deleted > 0 {
                info!(
                    deleted = report.deleted,
                    spared = report.spared,
                    "leaked-ENI cleanup"
                );
            }
            tokio::time::sleep(period).await;
        }
    }
}

/// Serves `endpoint` until `stop` turns true, retrying a listener that fails.
async fn serve_http(endpoint: Endpoint, stop: watch::Receiver<bool>) {
    let Endpoint { what, bind, router } = endpoint;
    let listen = || {
        info!("Serving {what} on {bind}");
        let mut until = stop.clone();
        let shutdown = async move {
            let _ = until.wait_for(|stopped| *stopped).await;
        };
        introspect::serve(bind.clone(), router.clone(), shutdown)
    };
    let retried = listen
        .retry(
            ExponentialBuilder::new()
                .with_min_delay(Duration::from_secs(1))
                .with_max_delay(Duration::from_secs(60))
                .without_max_times(),
        )
        .sleep(tokio::time::sleep)
        .notify(|e, pause| error!(error = %e, "{what} failed; retrying in {}s", pause.as_secs()));
    let mut stopped = stop.clone();
    tokio::select! {
        _ = retried => {}
        _ = stopped.wait_for(|stopped| *stopped) => {}
    }
}
