//! ipamd's command line: the daemon, and the commands that run beside it (`cmd/`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use tracing::error;

mod cmd;

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
    Entrypoint(cmd::entrypoint::Install),
    /// Check the node as the troubleshooting guide does (IMDS, EC2 and IAM, capacity, EC2 /
    /// IMDS / ipamd / kernel consistency, the CNI setup, ipamd itself) and say what is wrong
    /// and what to do. Run it in the node's network namespace with ipamd's environment.
    /// Exit status: 0 healthy, 1 degraded, 2 broken, 3 the doctor could not run.
    Doctor(cmd::doctor::Args),
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
        Some(Command::Health { socket, live }) => cmd::health::run(socket, live),
        Some(Command::Init) => cmd::init::run(),
        Some(Command::Entrypoint(install)) => cmd::serve::run(started, Some(install)),
        Some(Command::Doctor(args)) => {
            return cmd::doctor::run(args).unwrap_or_else(|e| {
                eprintln!("ipamd doctor: {e:#}");
                ExitCode::from(3)
            });
        }
        None => cmd::serve::run(started, None),
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
