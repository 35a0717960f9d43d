//! `fleet --scenario launch|churn|scarcity|throttle|fragmented [--nodes N]
//! [--prefix-delegation] [--custom-networking] [--json] [--plot FILE]`: one scenario, both
//! algorithms, the figures printed (and plotted).

use clap::Parser;
use fleet::scenario::{Kind, Networking};

#[derive(Parser)]
#[command(
    about = "A fleet of nodes against one simulated EC2: ipamd beside the Go CNI's algorithm"
)]
struct Args {
    /// Which scenario.
    #[arg(long, value_enum)]
    scenario: Kind,
    /// Nodes (the scenario's documented size when not given).
    #[arg(long)]
    nodes: Option<usize>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Seed of every random draw (launch times, pods, jitter).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also draw the pods with an address over time into this PNG.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
    /// Both sides with prefix delegation, WARM_PREFIX_TARGET=1 (the fragmented scenario
    /// always runs so).
    #[arg(long)]
    prefix_delegation: bool,
    /// Both sides with custom networking: pods on ENIs in an ENIConfig's subnet beside each
    /// node subnet, never on the primary ENI.
    #[arg(long)]
    custom_networking: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let networking = Networking {
        prefix_delegation: args.prefix_delegation,
        custom_networking: args.custom_networking,
    };
    let report = fleet::simulate_with(args.scenario, args.nodes, args.seed, networking)?;
    if let Some(path) = &args.plot {
        fleet::plot::plot(&report, path)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{}: {} nodes, {} s simulated in {:.1} s",
            report.title(),
            report.nodes,
            report.simulated_seconds,
            report.wall_seconds
        );
        let mut sides = vec![("ours", &report.ours), ("go_cni", &report.go_cni)];
        if let Some(w) = &report.ours_without_scarcity_mode {
            sides.push(("ours_without_scarcity_mode", w));
        }
        for (name, s) in sides {
            println!("  {name:28} {s}");
        }
    }
    Ok(())
}
