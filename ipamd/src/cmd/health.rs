//! `ipamd health`: the readiness and liveness probes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Exit 0 if ipamd answers on `socket` and is ready to serve ADDs (or, with `live`, whenever
/// it answers); print why not otherwise.
pub fn run(socket: PathBuf, live: bool) -> anyhow::Result<ExitCode> {
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
