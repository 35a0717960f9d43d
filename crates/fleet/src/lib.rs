//! A fleet of nodes against one simulated EC2 account, on a simulated clock: the real ipamd
//! daemon (its planner, its controller, its client-side EC2 rate limit) beside a model of the
//! Go CNI's ipamd written from its code, node for node, pod for pod, with the same launches.
//! EC2 is vpc-sim's model behind EC2's account-wide request buckets, with latencies, and IMDS
//! a little behind.

pub mod go_cni;
pub mod host;
pub mod node;
pub mod ours;
pub mod plot;
pub mod report;
pub mod scenario;

/// 2026-01-01T00:00:00Z: wall time as the simulated day starts (both sides' clocks and tags).
pub const EPOCH: Duration = Duration::from_secs(1_767_225_600);

use std::time::{Duration, Instant};

use report::{Report, Side};
use scenario::{Algorithm, Kind, Networking, Scenario};

/// Runs `kind` at `nodes` nodes (its documented size when `None`) with each algorithm in
/// turn, on a paused clock; the same `seed` gives both the same launches and pods.
pub fn simulate(kind: Kind, nodes: Option<usize>, seed: u64) -> anyhow::Result<Report> {
    simulate_with(kind, nodes, seed, Networking::default())
}

/// [`simulate`] with prefix delegation and/or custom networking on both sides.
pub fn simulate_with(
    kind: Kind,
    nodes: Option<usize>,
    seed: u64,
    networking: Networking,
) -> anyhow::Result<Report> {
    let scenario = Scenario::new(kind, nodes).with_networking(networking);
    let started = Instant::now();
    let side = |algorithm: Algorithm| -> anyhow::Result<Side> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()?;
        let run = runtime.block_on(scenario::run(&scenario, &algorithm, seed))?;
        Ok(Side::of(&run, scenario.nodes))
    };
    let scarce = kind == Kind::Scarcity;
    let pd = scenario.prefix_delegation();
    let custom = scenario.custom_networking();
    // Max pods is left to each side's default: 110 with prefix delegation on both.
    let ours_env = |scarcity: bool| -> Vec<(String, String)> {
        let mut env = vec![("SUBNET_SCARCITY_MODE", scarcity.to_string())];
        if pd {
            env.push(("ENABLE_PREFIX_DELEGATION", "true".to_string()));
            env.push(("WARM_PREFIX_TARGET", "1".to_string()));
        }
        if custom {
            // The node's ENIConfig comes with its cluster view (scenario::run).
            env.push(("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "true".to_string()));
        }
        env.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    };
    let ours = side(Algorithm::Ours(ours_env(true)))?;
    let without = if scarce {
        Some(side(Algorithm::Ours(ours_env(false)))?)
    } else {
        None
    };
    // The Go CNI's settings for prefix delegation as its manifest sets them: WARM_ENI_TARGET
    // stays 1 but gives way to WARM_PREFIX_TARGET. Under custom networking each node's
    // ENIConfig subnet is filled in by scenario::run.
    let go_options = go_cni::GoOptions {
        targets: pool::Targets {
            prefix_delegation: pd,
            warm_prefix: u32::from(pd),
            ..pool::Targets::default()
        },
        custom_networking: custom,
        ..go_cni::GoOptions::default()
    };
    let go_cni = side(Algorithm::GoCni(go_options))?;
    Ok(Report {
        scenario: kind,
        nodes: scenario.nodes,
        prefix_delegation: pd,
        custom_networking: custom,
        ours,
        go_cni,
        ours_without_scarcity_mode: without,
        simulated_seconds: scenario.horizon.as_secs(),
        healed_at_seconds: scenario
            .fragmented_until
            .filter(|t| *t < scenario.horizon)
            .map(|t| t.as_secs()),
        wall_seconds: started.elapsed().as_secs_f64(),
    })
}
