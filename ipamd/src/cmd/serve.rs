//! The daemon: ipamd set up from its environment, then serving the plugin on its socket,
//! introspection and metrics over HTTP, and every background task, all through
//! [`Daemon::run`], until SIGTERM or SIGINT.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use cloud::aws::{AwsEc2, AwsImds, Ec2Settings};
use cloud::throttle::{ThrottlePolicy, Throttled};
use cluster::{ClusterView, KubeCluster};
use introspect::{Bind, Metrics};
use ipamd::clock::SystemClock;
use ipamd::config::{BindAddress, Config, ignored_settings};
use ipamd::daemon::{Endpoint, Publish, Tasks};
use ipamd::host::NetlinkHost;
use ipamd::surface::{self, DaemonSource, Ec2Metrics};
use ipamd::{Daemon, Parts, residency, server};
use pool::Clock;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tracing::{info, warn};

use super::entrypoint::{self, Install, PendingConflist};
use super::{configure, node_identity};

pub fn run(started: Instant, install: Option<Install>) -> anyhow::Result<ExitCode> {
    let config = configure()?;
    info!("Starting vpc-cni ipamd {} ...", env!("CARGO_PKG_VERSION"));
    for key in &config.dropped_eni_tags {
        warn!(
            "ADDITIONAL_ENI_TAGS: tag {key:?} is reserved (contains k8s.amazonaws.com) and is not applied"
        );
    }
    for warning in ignored_settings(|k| std::env::var(k).ok()) {
        warn!("{warning}");
    }
    // Everything the entrypoint needs is checked before ipamd starts: a bad setting fails at
    // once, not after the node is set up.
    let pending = install.map(entrypoint::prepare).transpose()?;
    // Two workers: ipamd's work is small and latency-bound, and each thread costs memory.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(config, started, pending))
}

/// The cluster as ipamd will see it. With a node name (`MY_NODE_NAME`) and a Kubernetes
/// client configuration (in-cluster, or `KUBECONFIG`), it is followed in the background and
/// ipamd never waits for it; without them ipamd runs without the cluster and says so, unless
/// custom networking needs it, which is then a startup error naming what is missing.
async fn follow_cluster(
    config: &Config,
) -> anyhow::Result<(watch::Receiver<ClusterView>, Option<KubeCluster>)> {
    let without = |why: String| {
        if config.custom_networking {
            anyhow::bail!(
                "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=true reads the node's ENIConfig from the Kubernetes API, but {why}"
            );
        }
        info!("running without the Kubernetes API: {why}");
        Ok((watch::channel(ClusterView::not_configured(why)).1, None))
    };
    let Some(node) = &config.node_name else {
        return without("MY_NODE_NAME is not set".into());
    };
    let instance = config
        .own_pod
        .as_ref()
        .map_or_else(|| node.clone(), |(_, pod)| pod.clone());
    let client = match KubeCluster::connect(instance).await {
        Ok(client) => client,
        Err(e) => return without(format!("no client configuration ({e})")),
    };
    info!(node = %node, custom_networking = config.custom_networking, "following the node in the Kubernetes API");
    let (view, seen) = watch::channel(ClusterView::not_configured("starting"));
    tokio::spawn(cluster::follow(
        client.clone(),
        node.clone(),
        config.custom_networking,
        view,
    ));
    Ok((seen, Some(client)))
}

fn bind(address: &BindAddress) -> Bind {
    match address {
        BindAddress::Tcp(addr) => Bind::Tcp(*addr),
        BindAddress::Unix(path) => Bind::Unix(path.clone()),
    }
}

async fn serve(
    config: Config,
    started: Instant,
    pending: Option<PendingConflist>,
) -> anyhow::Result<ExitCode> {
    let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let metrics = Arc::new(Metrics::new(env!("CARGO_PKG_VERSION")).context("registering metrics")?);

    let clock = Arc::new(SystemClock);
    let imds = AwsImds::new();
    let identity = node_identity(&imds).await?;
    info!(
        instance = %identity.instance_id, region = %identity.region,
        eni = %identity.primary_eni.eni_id, ip = %identity.primary_ip, "node identity from IMDS"
    );
    let ec2 = Throttled::new(
        AwsEc2::connect(&Ec2Settings {
            region: identity.region.clone(),
            endpoint: config.ec2_endpoint.clone(),
            attempt_timeout: config.http_timeout,
        })
        .await,
        ThrottlePolicy::default(),
    )
    .context("the EC2 rate limits")?
    .with_observer(Arc::new(Ec2Metrics {
        metrics: Arc::clone(&metrics),
        clock: clock.clone(),
    }));
    let (cluster_view, writer) = follow_cluster(&config).await?;
    let (events, events_rx) = match &writer {
        Some(_) => {
            let (tx, rx) = tokio::sync::mpsc::channel(ipamd::publish::EVENT_QUEUE);
            (Some(tx), Some(rx))
        }
        None => (None, None),
    };
    let (store, lost) = ipamd::state::open_state(&config.state_dir, clock.now())?;
    let store = Arc::new(store);
    let init_started = Instant::now();
    let started_daemon = {
        let _busy = metrics.action_in_progress("nodeInit");
        Daemon::start(
            &config,
            Parts {
                ec2,
                imds,
                host: NetlinkHost,
                store,
                clock,
                identity,
                metrics: Arc::clone(&metrics),
                lost,
                cluster: cluster_view,
                events,
            },
        )
        .await
    };
    metrics.node_init(init_started.elapsed().as_secs_f64(), started_daemon.is_ok());
    let daemon = Arc::new(started_daemon?);

    let listener = server::bind(&config.socket)
        .with_context(|| format!("binding {}", config.socket.display()))?;
    info!("Serving RPC Handler on unix:{}", config.socket.display());

    let mut tasks = Tasks::from_config(&config);
    tasks.socket = Some((listener, server::Settings::default()));
    let source = Arc::new(DaemonSource(Arc::clone(&daemon)));
    if !config.disable_introspection {
        tasks.http.push(Endpoint {
            what: "introspection endpoints",
            bind: bind(&config.introspection_bind),
            router: introspect::introspection_router(
                Arc::clone(&source) as Arc<dyn introspect::Source>,
                surface::network_env(&config),
                surface::ipamd_env(&config),
            ),
        });
    }
    if !config.disable_metrics {
        tasks.http.push(Endpoint {
            what: "metrics",
            bind: bind(&config.metrics_bind),
            router: introspect::metrics_router(Arc::clone(&metrics), source),
        });
    }
    // The startup taint comes off only once ipamd serves.
    tasks.publish = writer.map(|writer| Publish {
        writer: Arc::new(writer),
        events: events_rx,
        startup_taint_min_ips: config.startup_taint_min_ips,
        max_pods: config.publish_node_max_pods,
    });
    if let Some(pending) = &pending {
        entrypoint::write_conflist(pending).context("installing the conflist")?;
    }
    metrics.startup(started.elapsed().as_secs_f64(), true, "");
    tokio::spawn(release_startup_pages());

    let shutdown = async {
        tokio::select! {
            _ = sigterm.recv() => info!("Received SIGTERM, shutting down"),
            _ = sigint.recv() => info!("Received SIGINT, shutting down"),
        }
    };
    Arc::clone(&daemon)
        .run(tasks, random_fraction, shutdown)
        .await
        .context("flushing state at shutdown")?;
    if let Err(e) = std::fs::remove_file(&config.socket) {
        warn!(error = %e, "could not remove the socket");
    }
    info!("ipamd stopped");
    Ok(ExitCode::SUCCESS)
}

/// How long after ipamd starts serving the executable's pages go back to the kernel: by then
/// the background tasks have run their first rounds, and what only the start ran is over.
const RELEASE_STARTUP_PAGES_AFTER: Duration = Duration::from_secs(30);

/// Gives the kernel back the pages of the executable once the start is over (residency.rs):
/// the working code comes back as it runs. A failure costs memory, never service.
async fn release_startup_pages() {
    tokio::time::sleep(RELEASE_STARTUP_PAGES_AFTER).await;
    match tokio::task::spawn_blocking(residency::release_startup_pages).await {
        Ok(Ok(released)) => info!(
            mappings = released.mappings,
            mib = released.bytes / (1 << 20),
            flushed = released.flushed,
            "gave the kernel back the executable's pages: the working code is mapped in again as it runs"
        ),
        Ok(Err(e)) => {
            warn!(error = %e, "could not give back the executable's pages; ipamd keeps them resident")
        }
        Err(e) => warn!(error = %e, "giving back the executable's pages did not finish"),
    }
}

/// A draw from [0, 1): spreads a fleet's periodic EC2 calls.
fn random_fraction() -> f64 {
    f64::from(getrandom::u32().unwrap_or(0)) / f64::from(u32::MAX)
}
