//! Starting and stopping a simulator: model, listeners, fabric, servers, sim.json.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock::{Clock, SystemClock};
use crate::config::{Cli, ConfigError, Mode};
use crate::fabric::{CommandRunner, Fabric, FabricError, FabricPlan, IMDS_ADDR};
use crate::model::{Model, ModelError};
use crate::netns::{NetnsError, bind_in};
use crate::rand::Rng;
use crate::sim::SharedFollower;
use crate::simfile::{GroupInfo, NodeInfo, OutsideInfo, SimFile, SubnetInfo, VpcInfo};
use crate::{Sim, ec2, imds};

/// How long shutdown waits for open connections before dropping them.
const DRAIN: Duration = Duration::from_secs(5);

/// Why the simulator could not start.
#[derive(Debug, Error)]
pub enum LaunchError {
    /// Bad command line.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The topology cannot be built.
    #[error(
        "cannot build the VPC of --vpc-cidr, --vpc-secondary-cidr, --subnet, --security-group, --nodes and --instance-type: {0}"
    )]
    Model(#[from] ModelError),
    /// Namespaces, links, addresses.
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// Binding inside a namespace.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// Anything else that is I/O.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LaunchError {
    let what = what.into();
    move |source| LaunchError::Io { what, source }
}

/// A started simulator.
pub struct Running {
    /// Shared state (tests may poke at it).
    pub sim: Arc<Sim>,
    /// What was written to sim.json.
    pub sim_file: SimFile,
    sim_json: PathBuf,
    fabric: Option<SharedFabric>,
    stop: watch::Sender<bool>,
    servers: Vec<JoinHandle<()>>,
}

fn serve(listener: TcpListener, router: Router, stop: &watch::Sender<bool>) -> JoinHandle<()> {
    let mut rx = stop.subscribe();
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = rx.wait_for(|stop| *stop).await;
        };
        if let Err(e) = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "server stopped");
        }
    })
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
}

/// The fabric, shared by the EC2 server (which keeps it in line with the model) and shutdown.
type SharedFabric = Arc<Mutex<Fabric<CommandRunner>>>;

/// Listeners of one node: (IMDS, EC2-inside-the-node if any).
type NodeListeners = (std::net::TcpListener, Option<std::net::TcpListener>);

/// Starts everything `cli` asks for. On failure, whatever was created is removed again.
pub async fn launch(cli: &Cli) -> Result<Running, LaunchError> {
    let topology = cli.topology()?;
    let faults = cli.faults()?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let model = Model::build(&topology, Rng::from_entropy(), clock.now_ms())?;

    let ec2_listener = TcpListener::bind(loopback(0))
        .await
        .map_err(io("cannot listen for EC2 on 127.0.0.1"))?;
    let ec2_port = ec2_listener
        .local_addr()
        .map_err(io("EC2 listener address"))?
        .port();

    let (fabric, node_listeners, plan) = match cli.mode {
        Mode::Loopback => {
            let mut v = Vec::new();
            for _ in 0..topology.nodes {
                let l = std::net::TcpListener::bind(loopback(0))
                    .and_then(|l| l.set_nonblocking(true).map(|()| l))
                    .map_err(io("cannot listen for IMDS on 127.0.0.1"))?;
                v.push((l, None));
            }
            (None, v, None)
        }
        Mode::Fabric => {
            let plan = FabricPlan::from_model(&cli.name, &model, cli.outside_ip)?;
            let (p, m) = (plan.clone(), model.clone());
            let (fabric, listeners) =
                tokio::task::spawn_blocking(move || build_fabric(&p, &m, ec2_port))
                    .await
                    .map_err(|e| LaunchError::Io {
                        what: "fabric setup task".into(),
                        source: std::io::Error::other(e.to_string()),
                    })??;
            (Some(Arc::new(Mutex::new(fabric))), listeners, Some(plan))
        }
    };
    let mut sim =
        Sim::new(model, clock, cli.imds_lag_ms).with_attach_latency(cli.attach_latency_ms);
    if faults.is_active() {
        tracing::info!(plan = ?faults, "EC2 fault injection on");
    }
    sim.set_faults(faults).map_err(ConfigError::from_fault)?;
    if let Some(f) = &fabric {
        let follower: SharedFollower = f.clone();
        sim = sim.with_follower(follower);
    }
    let sim = Arc::new(sim);

    let (stop, _) = watch::channel(false);
    let ec2_router = ec2::router(sim.clone());
    let mut servers = vec![serve(ec2_listener, ec2_router.clone(), &stop)];
    let model = sim.model().clone();
    let vpc = model.vpc();
    let mut nodes = Vec::new();
    for (i, (inst, (imds_l, node_ec2))) in model
        .instances()
        .into_iter()
        .zip(node_listeners)
        .enumerate()
    {
        let imds_port = imds_l
            .local_addr()
            .map_err(io("IMDS listener address"))?
            .port();
        let imds_l = TcpListener::from_std(imds_l).map_err(io("IMDS listener"))?;
        servers.push(serve(
            imds_l,
            imds::router(sim.clone(), inst.id.clone()),
            &stop,
        ));
        if let Some(l) = node_ec2 {
            let l = TcpListener::from_std(l).map_err(io("node EC2 listener"))?;
            servers.push(serve(l, ec2_router.clone(), &stop));
        }
        let eni = model.eni(&inst.primary_eni)?;
        let netns = plan.as_ref().map(|p| p.nodes[i].netns.clone());
        nodes.push(NodeInfo {
            index: i + 1,
            netns: netns.clone(),
            instance_id: inst.id.clone(),
            instance_type: inst.instance_type.clone(),
            primary_eni: eni.id.clone(),
            mac: eni.mac.clone(),
            primary_ip: eni.primary_ip,
            primary_ipv6: eni.ipv6_addresses.first().map(|a| a.value),
            subnet_id: eni.subnet_id.clone(),
            az: inst.az.clone(),
            ec2_endpoint: format!("http://127.0.0.1:{ec2_port}"),
            imds_endpoint: match netns {
                Some(_) => format!("http://{IMDS_ADDR}"),
                None => format!("http://127.0.0.1:{imds_port}"),
            },
        });
    }
    let sim_file = SimFile {
        name: cli.name.clone(),
        pid: std::process::id(),
        mode: cli.mode,
        ip_family: cli.ip_family,
        region: vpc.region.clone(),
        vpc: VpcInfo {
            id: vpc.id.clone(),
            cidr: vpc.cidr,
            cidrs: vpc.cidrs(),
            ipv6_cidr: vpc.ipv6_cidr,
        },
        vpc_netns: plan.as_ref().map(|p| p.vpc_netns.clone()),
        outside: plan.as_ref().map(|p| OutsideInfo {
            netns: p.outside.netns.clone(),
            ip: p.outside.ip,
            ipv6: p.outside.ipv6,
        }),
        ec2_endpoint: format!("http://127.0.0.1:{ec2_port}"),
        subnets: model
            .subnets()
            .iter()
            .map(|s| SubnetInfo {
                id: s.id.clone(),
                cidr: s.cidr,
                ipv6_cidr: s.ipv6_cidr(),
                az: s.az.clone(),
                tags: s.tags.clone(),
            })
            .collect(),
        security_groups: model
            .security_groups()
            .map(|g| GroupInfo {
                id: g.id.clone(),
                name: g.name.clone(),
            })
            .collect(),
        nodes,
    };
    let mut running = Running {
        sim,
        sim_file,
        sim_json: SimFile::path(&cli.state_dir),
        fabric,
        stop,
        servers,
    };
    // From here on, dropping `running` on error tears the fabric down.
    running.sim_json = running
        .sim_file
        .write_atomic(&cli.state_dir)
        .map_err(io(format!("cannot write {}", running.sim_json.display())))?;
    tracing::info!(path = %running.sim_json.display(), ec2 = %running.sim_file.ec2_endpoint, "vpc-sim ready");
    Ok(running)
}

/// Builds the namespaces and the links of `model`'s attached ENIs, then binds IMDS and EC2
/// inside each node (blocking; own threads).
fn build_fabric(
    plan: &FabricPlan,
    model: &Model,
    ec2_port: u16,
) -> Result<(Fabric<CommandRunner>, Vec<NodeListeners>), LaunchError> {
    let mut fabric = Fabric::new(CommandRunner);
    fabric.build(plan, model)?;
    for ns in fabric.namespaces() {
        tracing::info!(netns = %ns, "created namespace");
    }
    let imds = SocketAddr::V4(SocketAddrV4::new(IMDS_ADDR, 80));
    let mut listeners = Vec::new();
    for node in &plan.nodes {
        let mut pair = bind_in(&node.netns, &[imds, loopback(ec2_port)])?;
        let ec2 = pair.pop();
        let imds = pair.pop().ok_or_else(|| LaunchError::Io {
            what: format!("IMDS listener in {}", node.netns),
            source: std::io::Error::other("missing"),
        })?;
        listeners.push((imds, ec2));
    }
    Ok((fabric, listeners))
}

impl Running {
    /// Stops the servers, removes sim.json and every namespace created; returns what was removed.
    pub async fn shutdown(mut self) -> Vec<String> {
        let _ = self.stop.send(true);
        for mut server in std::mem::take(&mut self.servers) {
            if tokio::time::timeout(DRAIN, &mut server).await.is_err() {
                server.abort();
            }
        }
        let mut removed = Vec::new();
        if std::fs::remove_file(&self.sim_json).is_ok() {
            removed.push(self.sim_json.display().to_string());
        }
        if let Some(fabric) = self.fabric.take() {
            let gone = tokio::task::spawn_blocking(move || {
                fabric.lock().unwrap_or_else(|p| p.into_inner()).teardown()
            })
            .await
            .unwrap_or_default();
            removed.extend(gone.into_iter().map(|ns| format!("netns {ns}")));
        }
        removed
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for s in &self.servers {
            s.abort();
        }
    }
}
