use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use cloud::aws::{AwsEc2, AwsImds, Ec2Settings};
use cloud::throttle::{ThrottlePolicy, Throttled};
use ipamd::clock::SystemClock;
use ipamd::config::{Config, NOT_YET_EFFECTIVE};
use ipamd::host::NetlinkHost;
use ipamd::{Daemon, Parts, logging, server};
use store::SledStore;
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

/// How often the controller looks at the pool when nothing asks it to.
const CONTROLLER_PERIOD: Duration = Duration::from_secs(5);

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
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Health { socket }) => health(socket),
        None => run(),
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

fn health(socket: PathBuf) -> anyhow::Result<ExitCode> {
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
        Ok(ExitCode::FAILURE)
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let config = Config::from_env(|k| std::env::var(k).ok()).context("invalid configuration")?;
    logging::init(&config).context("setting up logging")?;
    info!("Starting vpc-cni ipamd {} ...", env!("CARGO_PKG_VERSION"));
    for key in &config.dropped_eni_tags {
        warn!(
            "ADDITIONAL_ENI_TAGS: tag {key:?} is reserved (contains k8s.amazonaws.com) and is not applied"
        );
    }
    for var in NOT_YET_EFFECTIVE {
        if std::env::var(var).is_ok_and(|v| !v.trim().is_empty()) {
            warn!("{var} is set but has no effect in this version yet");
        }
    }
    // Two workers: ipamd's work is small and latency-bound, and each thread costs memory.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(config))
}

async fn serve(config: Config) -> anyhow::Result<ExitCode> {
    let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;

    let imds = AwsImds::new();
    let identity = ipamd::retry::retry_transient("IMDS identity", || cloud::node_identity(&imds))
        .await
        .context("reading instance metadata")?;
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
    );
    let store = Arc::new(SledStore::open(&config.state_dir)?);
    let daemon = Arc::new(
        Daemon::start(
            &config,
            Parts {
                ec2,
                imds,
                host: NetlinkHost,
                store,
                clock: Arc::new(SystemClock),
                identity,
            },
        )
        .await?,
    );

    let listener = server::bind(&config.socket)
        .with_context(|| format!("binding {}", config.socket.display()))?;
    info!("Serving RPC Handler on unix:{}", config.socket.display());

    let controller = {
        let daemon = Arc::clone(&daemon);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(CONTROLLER_PERIOD) => {}
                    _ = daemon.kicked() => {}
                }
                daemon.grow().await;
            }
        })
    };

    let reconciler = {
        let daemon = Arc::clone(&daemon);
        let period = config.reconcile_interval;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                daemon.reconcile().await;
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
    server::serve(listener, Arc::clone(&daemon), 0, shutdown).await;
    controller.abort();
    reconciler.abort();
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
