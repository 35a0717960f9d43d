//! `ipamd doctor`: builds the real seams, checks the node and prints the report.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use cloud::aws::{AwsEc2, AwsImds, Ec2Settings};
use ipamd::config::Config;
use ipamd::doctor::{self, Facts, Report, bundle, gather, render};

/// `ipamd doctor`'s options.
#[derive(clap::Args)]
pub struct Args {
    /// Print the findings as JSON (schema in docs/doctor.md).
    #[arg(long)]
    pub json: bool,
    /// Also write a support bundle (gzip tarball) to FILE.
    #[arg(long, value_name = "FILE")]
    pub bundle: Option<PathBuf>,
    /// Carry out the safe repairs the findings name (each shown before it is done), then
    /// check again.
    #[arg(long)]
    pub fix: bool,
    /// The CNI conf dir the runtime reads (default: /etc/cni/net.d, or /host/etc/cni/net.d
    /// where only that exists, as in the DaemonSet's pod).
    #[arg(long, env = "HOST_CNI_CONFDIR_PATH")]
    pub cni_conf_dir: Option<PathBuf>,
    /// The CNI bin dir (default: /opt/cni/bin, or /host/opt/cni/bin where only that exists).
    #[arg(long, env = "HOST_CNI_BIN_PATH")]
    pub cni_bin_dir: Option<PathBuf>,
}

async fn facts(config: &Config, cni: &gather::CniPaths) -> Facts {
    let imds = AwsImds::new();
    let identity =
        match tokio::time::timeout(Duration::from_secs(10), cloud::node_identity(&imds)).await {
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

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
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
