use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use backon::{ExponentialBuilder, Retryable};
use clap::{Parser, Subcommand};
use cloud::NodeIdentity;
use cloud::aws::{AwsEc2, AwsImds, Ec2Settings};
use cloud::retry::{RetryPolicy, retry};
use cloud::throttle::{ThrottlePolicy, Throttled};
use cluster::{ClusterView, KubeCluster};
use introspect::{Bind, Metrics};
use ipamd::clock::SystemClock;
use ipamd::config::{BindAddress, Config, ignored_settings};
use ipamd::host::{HostNetwork, NetlinkHost};
use ipamd::install::{self, CONFLIST_NAME, ConflistSettings};
use ipamd::surface::{self, DaemonSource, Ec2Metrics};
use ipamd::{Daemon, Parts, VETH_GRACE, VETH_SWEEP_PERIOD, logging, server};
use pool::Clock;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tracing::{error, info, warn};

#[derive(Parser)]
#[command(version, about = "vpc-cni node daemon: VPC addresses for pods")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Exit 0 if ipamd answers on its socket and is ready to serve ADDs; print why not otherwise.
    Health {
        /// The socket (default: IPAMD_SOCKET or /run/vpc-cni/ipamd.sock).
        #[arg(long, env = "IPAMD_SOCKET", default_value = ipam_proto::DEFAULT_SOCKET)]
        socket: PathBuf,
        /// Exit 0 whenever ipamd answers, ready or not (the liveness probe: a node whose
        /// subnet is full is not ready, but restarting ipamd would not help).
        #[arg(long)]
        live: bool,
    },
    /// Set up the node's network (rp_filter, SNAT, connmark, the primary ENI's MTU) and exit:
    /// the DaemonSet's privileged init container, so ipamd itself needs only NET_ADMIN and
    /// NET_RAW.
    Init,
    /// The DaemonSet's entrypoint: install the plugins into the host, run ipamd, and write the
    /// conflist into the host once ipamd serves (the runtime reads a conflist as "network
    /// ready").
    Entrypoint(Install),
    /// Check the node as the troubleshooting guide does (IMDS, EC2 and IAM, capacity, EC2 /
    /// IMDS / ipamd / kernel consistency, the CNI setup, ipamd itself) and say what is wrong
    /// and what to do. Run it in the node's network namespace with ipamd's environment.
    /// Exit status: 0 healthy, 1 degraded, 2 broken, 3 the doctor could not run.
    Doctor(DoctorArgs),
}

#[derive(clap::Args)]
struct DoctorArgs {
    /// Print the findings as JSON (schema in docs/doctor.md).
    #[arg(long)]
    json: bool,
    /// Also write a support bundle (gzip tarball) to FILE.
    #[arg(long, value_name = "FILE")]
    bundle: Option<PathBuf>,
    /// Carry out the safe repairs the findings name (each shown before it is done), then
    /// check again.
    #[arg(long)]
    fix: bool,
    /// The CNI conf dir the runtime reads (default: /etc/cni/net.d, or /host/etc/cni/net.d
    /// where only that exists, as in the DaemonSet's pod).
    #[arg(long, env = "HOST_CNI_CONFDIR_PATH")]
    cni_conf_dir: Option<PathBuf>,
    /// The CNI bin dir (default: /opt/cni/bin, or /host/opt/cni/bin where only that exists).
    #[arg(long, env = "HOST_CNI_BIN_PATH")]
    cni_bin_dir: Option<PathBuf>,
}

/// Where the entrypoint installs from and to.
#[derive(clap::Args, Clone)]
struct Install {
    /// The plugin binaries to install (every file in the directory).
    #[arg(long, env = "VPC_CNI_PLUGINS_DIR", default_value = "/app/cni-bin")]
    plugins: PathBuf,
    /// The conflist template.
    #[arg(
        long,
        env = "VPC_CNI_CONFLIST",
        default_value = "/app/10-vpc-cni.conflist"
    )]
    conflist: PathBuf,
    /// The host's CNI bin directory.
    #[arg(long, env = "HOST_CNI_BIN_PATH", default_value = "/host/opt/cni/bin")]
    bin_dir: PathBuf,
    /// The host's CNI conf directory.
    #[arg(
        long,
        env = "HOST_CNI_CONFDIR_PATH",
        default_value = "/host/etc/cni/net.d"
    )]
    conf_dir: PathBuf,
}

/// The conflist to write once ipamd serves.
struct PendingConflist {
    dir: PathBuf,
    content: String,
}

fn main() -> ExitCode {
    let started = Instant::now();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // A doctor that cannot run exits 3, never 2 (clap's usage status), which means broken.
        Err(e) if e.use_stderr() && std::env::args().nth(1).as_deref() == Some("doctor") => {
            let _ = e.print();
            return ExitCode::from(3);
        }
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Some(Command::Health { socket, live }) => health(socket, live),
        Some(Command::Init) => init(),
        Some(Command::Entrypoint(install)) => run(started, Some(install)),
        Some(Command::Doctor(args)) => {
            return doctor::run(args).unwrap_or_else(|e| {
                eprintln!("ipamd doctor: {e:#}");
                ExitCode::from(3)
            });
        }
        None => run(started, None),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            error!("{e:#}");
            eprintln!("ipamd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

mod doctor {
    //! `ipamd doctor`'s command line: builds the real seams and prints the report.

    use std::io::Write as _;
    use std::path::Path;
    use std::process::ExitCode;
    use std::time::Duration;

    use anyhow::Context;
    use cloud::aws::{AwsEc2, AwsImds, Ec2Settings};
    use ipamd::config::Config;
    use ipamd::doctor::{self, Facts, Report, bundle, gather, render};

    use super::DoctorArgs;

    async fn facts(config: &Config, cni: &gather::CniPaths) -> Facts {
        let imds = AwsImds::new();
        let identity = match tokio::time::timeout(
            Duration::from_secs(10),
            cloud::node_identity(&imds),
        )
        .await
        {
            Ok(identity) => identity.map_err(|e| e.to_string()),
            Err(_) => Err("no answer within 10 s".to_string()),
        };
        let ec2 = match &identity {
            Ok(id) => Some(
                AwsEc2::connect(&Ec2Settings {
                    region: id.region.clone(),
                    endpoint: config.ec2_endpoint.clone(),
                    attempt_timeout: config.http_timeout,
                })
                .await,
            ),
            Err(_) => None,
        };
        gather::gather(config, cni, &imds, identity, ec2.as_ref()).await
    }

    fn heading(facts: &Facts) -> String {
        let node = match &facts.identity {
            Ok(id) => format!(
                "node {} ({}, {})",
                id.instance_id, id.instance_type, id.availability_zone
            ),
            Err(_) => "node unknown".to_string(),
        };
        format!("vpc-cni doctor {}: {node}", env!("CARGO_PKG_VERSION"))
    }

    fn show(report: &Report, facts: &Facts, json: bool) -> anyhow::Result<()> {
        let mut out = anstream::stdout();
        if json {
            writeln!(out, "{}", render::json(report))?;
        } else {
            write!(out, "{}", render::text(report, &heading(facts)))?;
        }
        Ok(())
    }

    /// Carries out each repair the report names, once, saying what it does first.
    fn repair(report: &Report, facts: &Facts) -> usize {
        let mut repairs: Vec<&doctor::Repair> = Vec::new();
        for r in report.findings.iter().filter_map(|f| f.repair.as_ref()) {
            if !repairs.contains(&r) {
                repairs.push(r);
            }
        }
        if repairs.is_empty() {
            eprintln!("--fix: nothing here is a safe repair; see each finding's fix");
        }
        for r in &repairs {
            eprintln!("--fix: {r}");
            match doctor::fix::apply(r, facts) {
                Ok(()) => eprintln!("--fix:   done"),
                Err(e) => eprintln!("--fix:   failed: {e}"),
            }
        }
        repairs.len()
    }

    pub fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
        // ipamd's environment, but never its log: the doctor writes to the terminal only.
        let config = Config::from_env(|k| std::env::var(k).ok()).context("ipamd's environment")?;
        let cni = gather::CniPaths {
            conf_dir: args
                .cni_conf_dir
                .unwrap_or_else(|| gather::on_host(Path::new("/etc/cni/net.d"))),
            bin_dir: args
                .cni_bin_dir
                .unwrap_or_else(|| gather::on_host(Path::new("/opt/cni/bin"))),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        runtime.block_on(async {
            let mut facts = facts(&config, &cni).await;
            let mut report = doctor::diagnose(&facts);
            if args.fix {
                if !args.json {
                    show(&report, &facts, false)?;
                }
                if repair(&report, &facts) > 0 {
                    eprintln!("--fix: checking again");
                    facts = self::facts(&config, &cni).await;
                    report = doctor::diagnose(&facts);
                }
            }
            show(&report, &facts, args.json)?;
            if let Some(path) = &args.bundle {
                let parts = bundle::collect(&facts, &report).await;
                let manifest = bundle::write(path, &parts)
                    .with_context(|| format!("writing the bundle {}", path.display()))?;
                let missing = manifest.lines().filter(|l| l.contains("UNAVAILABLE")).count();
                eprintln!(
                    "bundle written to {}: {} parts, {missing} of them unavailable (see its MANIFEST.txt)",
                    path.display(),
                    parts.len()
                );
            }
            Ok(ExitCode::from(report.verdict.exit_code()))
        })
    }
}

fn health(socket: PathBuf, live: bool) -> anyhow::Result<ExitCode> {
    let status = ipam_proto::Client::new(&socket)
        .with_timeouts(Duration::from_secs(2), Duration::from_secs(5))
        .status()?;
    let pool = status.pool;
    if status.ready {
        println!(
            "ready: {} addresses, {} assigned, {} cooling, {} available",
            pool.total, pool.assigned, pool.cooling, pool.available
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!("not ready: {}", status.reason.unwrap_or_default());
        Ok(if live {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }
}

fn configure() -> anyhow::Result<Config> {
    let config = Config::from_env(|k| std::env::var(k).ok()).context("invalid configuration")?;
    logging::init(&config).context("setting up logging")?;
    Ok(config)
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

/// Who the node is, from IMDS, retried while the metadata service throttles or is not
/// reachable yet (early in a node's boot).
async fn node_identity(imds: &AwsImds) -> anyhow::Result<NodeIdentity> {
    retry(
        &RetryPolicy::IMDS,
        || cloud::node_identity(imds),
        |e, pause| warn!(error = %e, ?pause, "reading instance metadata failed; retrying"),
    )
    .await
    .context("reading instance metadata")
}

fn init() -> anyhow::Result<ExitCode> {
    let config = configure()?;
    info!(
        "vpc-cni init {}: setting up the node's network",
        env!("CARGO_PKG_VERSION")
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let imds = AwsImds::new();
        let identity = node_identity(&imds).await?;
        let net = ipamd::daemon::node_net(&config, &identity);
        let changes = NetlinkHost
            .setup_node(&net)
            .await
            .context("setting up the node's network")?;
        info!(?changes, "node network set up");
        Ok(ExitCode::SUCCESS)
    })
}

fn run(started: Instant, install: Option<Install>) -> anyhow::Result<ExitCode> {
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
    let pending = install.map(prepare_install).transpose()?;
    // Two workers: ipamd's work is small and latency-bound, and each thread costs memory.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(config, started, pending))
}

/// Installs the plugins and renders the conflist (written later, once ipamd serves).
fn prepare_install(install: Install) -> anyhow::Result<PendingConflist> {
    let settings = ConflistSettings::from_env(|k| std::env::var(k).ok())?;
    let template = std::fs::read_to_string(&install.conflist).with_context(|| {
        format!(
            "reading the conflist template {}",
            install.conflist.display()
        )
    })?;
    let content = install::render_conflist(&template, &settings)?;
    info!(
        from = %install.plugins.display(), to = %install.bin_dir.display(),
        "Copying CNI plugin binaries ..."
    );
    let installed = install::install_plugins(&install.plugins, &install.bin_dir)?;
    info!(?installed, "installed the CNI plugins");
    Ok(PendingConflist {
        dir: install.conf_dir,
        content,
    })
}

/// Writes the conflist: from now on the runtime sends pods to vpc-cni.
fn write_conflist(pending: &PendingConflist) -> anyhow::Result<()> {
    info!("Copying config file ... ");
    if let Some(retired) = install::retire_go_cni_conflist(&pending.dir)? {
        warn!(
            "moved the Go CNI's conflist aside to {}: it would sort first and send pods to aws-cni",
            retired.display()
        );
    }
    let path = pending.dir.join(CONFLIST_NAME);
    if install::write_if_changed(
        &pending.dir,
        CONFLIST_NAME,
        pending.content.as_bytes(),
        0o644,
    )? {
        info!(
            "Successfully copied CNI plugin binary and config file. ({})",
            path.display()
        );
    } else {
        info!(
            "Successfully copied CNI plugin binary; the config file was already current ({})",
            path.display()
        );
    }
    Ok(())
}

fn bind(address: &BindAddress) -> Bind {
    match address {
        BindAddress::Tcp(addr) => Bind::Tcp(*addr),
        BindAddress::Unix(path) => Bind::Unix(path.clone()),
    }
}

/// Serves `router` on `bind` until shutdown. A listener that fails (the port is taken) is
/// retried with backoff, as the Go CNI does: the endpoints matter less than the pods.
fn spawn_http(
    what: &'static str,
    bind: Bind,
    router: axum::Router,
    stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
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
            .notify(
                |e, pause| error!(error = %e, "{what} failed; retrying in {}s", pause.as_secs()),
            );
        let mut stopped = stop.clone();
        tokio::select! {
            _ = retried => {}
            _ = stopped.wait_for(|stopped| *stopped) => {}
        }
    })
}

async fn serve(
    config: Config,
    started: Instant,
    pending: Option<PendingConflist>,
) -> anyhow::Result<ExitCode> {
    let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let metrics = Arc::new(Metrics::new(env!("CARGO_PKG_VERSION")).context("registering metrics")?);

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
    .with_observer(Arc::new(Ec2Metrics(Arc::clone(&metrics))));
    let (cluster_view, writer) = follow_cluster(&config).await?;
    let (events, events_rx) = match &writer {
        Some(_) => {
            let (tx, rx) = tokio::sync::mpsc::channel(ipamd::publish::EVENT_QUEUE);
            (Some(tx), Some(rx))
        }
        None => (None, None),
    };
    let clock = Arc::new(SystemClock);
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

    let (stop, stopped) = watch::channel(false);
    let source = Arc::new(DaemonSource(Arc::clone(&daemon)));
    let mut http = Vec::new();
    if !config.disable_introspection {
        let router = introspect::introspection_router(
            Arc::clone(&source) as Arc<dyn introspect::Source>,
            surface::network_env(&config),
            surface::ipamd_env(&config),
        );
        let bind = bind(&config.introspection_bind);
        http.push(spawn_http(
            "introspection endpoints",
            bind,
            router,
            stopped.clone(),
        ));
    }
    if !config.disable_metrics {
        let router = introspect::metrics_router(Arc::clone(&metrics), source);
        let bind = bind(&config.metrics_bind);
        http.push(spawn_http("metrics", bind, router, stopped.clone()));
    }
    if let Some(pending) = &pending {
        write_conflist(pending).context("installing the conflist")?;
    }
    metrics.startup(started.elapsed().as_secs_f64(), true, "");

    let loops = daemon.spawn_loops(config.reconcile_interval, || {
        f64::from(getrandom::u32().unwrap_or(0)) / f64::from(u32::MAX)
    });

    // Started once ipamd serves: the startup taint comes off only then.
    let publishers = writer.map(|writer| {
        let writer = Arc::new(writer);
        let mut tasks = vec![tokio::spawn(ipamd::publish::publish_node(
            Arc::clone(&writer),
            Arc::clone(&daemon),
            config.startup_taint_min_ips,
            config.publish_node_max_pods,
        ))];
        if let Some(rx) = events_rx {
            tasks.push(tokio::spawn(ipamd::publish::record_events(writer, rx)));
        }
        tasks
    });

    let veth_sweeper = {
        let daemon = Arc::clone(&daemon);
        tokio::spawn(async move {
            loop {
                // The first sweep sees a DEL's veth unrouted, the one a grace later deletes it.
                loop {
                    tokio::time::sleep(VETH_GRACE).await;
                    if !daemon.sweep_veths().await {
                        break;
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(VETH_SWEEP_PERIOD) => {}
                    _ = daemon.pod_unrouted() => {}
                }
            }
        })
    };

    let leak_cleaner = (!config.disable_leaked_eni_cleanup).then(|| {
        let daemon = Arc::clone(&daemon);
        let period = config.leaked_eni_cleanup_interval;
        tokio::spawn(async move {
            // A random start, so nodes launched together do not all list the VPC at once.
            let spread = period.min(ipamd::daemon::MAX_START_JITTER);
            let fraction = f64::from(getrandom::u32().unwrap_or(0)) / f64::from(u32::MAX);
            tokio::time::sleep(spread.mul_f64(fraction)).await;
            loop {
                let report = daemon.clean_leaked_enis().await;
                if report.deleted > 0 {
                    info!(
                        deleted = report.deleted,
                        spared = report.spared,
                        "leaked-ENI cleanup"
                    );
                }
                tokio::time::sleep(period).await;
            }
        })
    });

    let shutdown = async {
        tokio::select! {
            _ = sigterm.recv() => info!("Received SIGTERM, shutting down"),
            _ = sigint.recv() => info!("Received SIGINT, shutting down"),
        }
    };
    server::serve(
        listener,
        Arc::clone(&daemon),
        server::Settings::default(),
        shutdown,
    )
    .await;
    let _ = stop.send(true);
    for task in http {
        let _ = task.await;
    }
    for task in loops {
        task.abort();
    }
    for task in publishers.into_iter().flatten() {
        task.abort();
    }
    veth_sweeper.abort();
    if let Some(task) = leak_cleaner {
        task.abort();
    }
    daemon.flush().await.context("flushing state at shutdown")?;
    if let Err(e) = std::fs::remove_file(&config.socket) {
        warn!(error = %e, "could not remove the socket");
    }
    info!("ipamd stopped");
    Ok(ExitCode::SUCCESS)
}
