//! Reads the facts. Every source is asked once (IMDS twice when it disagrees with EC2, as it
//! lags), each failure kept as the reason it could not be read.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cloud::{DryRun, DryRunCall, Ec2, EniFilter, EniMetadata, Imds, InstanceTable, NodeIdentity};
use ipnetwork::IpNetwork;
use netops::snat::{self, Runner, SystemRunner};
use netops::{Netlink, RuleOf};
use serde_json::Value;

use super::checks::imds_disagreements;
use super::facts::{
    Cni, ConfFile, Ec2View, Facts, Ipamd, KRoute, KRule, Kernel, LimitsSource, Log,
};
use super::http;
use crate::config::{Config, LogTarget};
use crate::daemon::{TAG_CLUSTER, TAG_INSTANCE_ID};
use crate::install::PLUGIN_TYPE;

/// A host path as the doctor sees it: the DaemonSet's pod mounts the host's directories under
/// /host, where the host itself has them at their own path.
pub fn on_host(path: &Path) -> PathBuf {
    let mounted = Path::new("/host").join(path.strip_prefix("/").unwrap_or(path));
    if !path.exists() && mounted.exists() {
        mounted
    } else {
        path.to_path_buf()
    }
}

/// The introspection endpoints the doctor reads (and the bundle keeps).
pub const INTROSPECTION_PATHS: [&str; 6] = [
    "/v1/ec2-refusals",
    "/v1/enis",
    "/v1/pods",
    "/v1/pool",
    "/v1/networkutils-env-settings",
    "/v1/ipamd-env-settings",
];

/// How long IMDS may lag EC2 before the doctor calls it a disagreement.
const IMDS_SETTLE: Duration = Duration::from_secs(3);
/// The tail of a log the doctor reads.
pub const LOG_TAIL: u64 = 2 << 20;

/// Where the node's CNI files are.
#[derive(Clone, Debug)]
pub struct CniPaths {
    /// The conf dir the runtime reads.
    pub conf_dir: PathBuf,
    /// The bin dir it runs plugins from.
    pub bin_dir: PathBuf,
}

fn text<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Everything, from the node's IMDS and, when the node is known, its EC2.
pub async fn gather<E: Ec2 + DryRun, I: Imds>(
    config: &Config,
    cni: &CniPaths,
    imds: &I,
    identity: Result<NodeIdentity, String>,
    ec2: Option<&E>,
) -> Facts {
    let mut imds_enis = match &identity {
        Ok(_) => imds_enis_of(imds).await,
        Err(e) => Err(e.clone()),
    };
    let (limits, ec2_view, permissions) = match (&identity, ec2) {
        (Ok(id), Some(ec2)) => {
            let view = ec2_view(config, id, ec2).await;
            (
                limits(id, ec2).await,
                view.clone(),
                permissions(id, view.as_ref().ok(), ec2).await,
            )
        }
        (Err(e), _) => (
            Err(e.clone()),
            Err(format!("not asked: the node is unknown ({e})")),
            vec![],
        ),
        (Ok(_), None) => {
            let why = "no EC2 client".to_string();
            (Err(why.clone()), Err(why), vec![])
        }
    };
    if let (Ok(view), Ok(shown)) = (&ec2_view, &imds_enis)
        && !imds_disagreements(&view.enis, shown).is_empty()
    {
        tokio::time::sleep(IMDS_SETTLE).await;
        imds_enis = imds_enis_of(imds).await;
    }
    let kernel_identity = identity.clone();
    let kernel_config = config.clone();
    let (kernel, snat_pending) = tokio::task::spawn_blocking(move || {
        let kernel = read_kernel(kernel_identity.as_ref().ok());
        let pending = snat_pending(&kernel_config, kernel_identity.as_ref(), kernel.as_ref());
        (kernel, pending)
    })
    .await
    .unwrap_or_else(|e| (Err(text(&e)), Err(text(e))));
    Facts {
        config: config.clone(),
        imds_enis,
        limits,
        ec2: ec2_view,
        identity,
        permissions,
        ipamd: ipamd(config).await,
        kernel,
        snat_pending,
        cni: read_cni(cni).await,
        log: match &config.log_target {
            LogTarget::File(path) => Some(read_log(path, SystemTime::now())),
            _ => None,
        },
    }
}

async fn imds_enis_of<I: Imds>(imds: &I) -> Result<Vec<EniMetadata>, String> {
    let mut out = Vec::new();
    for mac in cloud::attached_macs(imds).await.map_err(text)? {
        out.push(cloud::eni_metadata(imds, &mac).await.map_err(text)?);
    }
    Ok(out)
}

async fn limits<E: Ec2>(
    id: &NodeIdentity,
    ec2: &E,
) -> Result<(cloud::InstanceLimits, LimitsSource), String> {
    if let Some(l) = InstanceTable::embedded().get(&id.instance_type) {
        return Ok((l, LimitsSource::Table));
    }
    ec2.describe_instance_type(&id.instance_type)
        .await
        .map(|l| (l, LimitsSource::Ec2))
        .map_err(text)
}

async fn ec2_view<E: Ec2>(config: &Config, id: &NodeIdentity, ec2: &E) -> Result<Ec2View, String> {
    let enis = ec2
        .describe_instance_enis(&id.instance_id)
        .await
        .map_err(text)?;
    let subnets = ec2
        .describe_subnets(&[
            EniFilter::new("vpc-id", &id.vpc_id),
            EniFilter::new("availability-zone", &id.availability_zone),
        ])
        .await
        .map_err(text)?;
    let mut filters = vec![
        EniFilter::new("tag-key", TAG_INSTANCE_ID),
        EniFilter::new("status", "available"),
        EniFilter::new("vpc-id", &id.vpc_id),
    ];
    if let Some(cluster) = &config.cluster_name {
        filters.push(EniFilter::new(format!("tag:{TAG_CLUSTER}"), cluster));
    }
    let leaked = ec2
        .find_network_interfaces(&filters)
        .await
        .map_err(text)?
        .into_iter()
        .filter(|e| e.description.starts_with("aws-K8S-"))
        .collect();
    Ok(Ec2View {
        enis,
        subnets,
        leaked,
    })
}

/// Every EC2 call ipamd makes that has a DryRun, on the node's own resources.
async fn permissions<E: DryRun>(
    id: &NodeIdentity,
    view: Option<&Ec2View>,
    ec2: &E,
) -> Vec<(cloud::Action, cloud::Permission)> {
    let eni = id.primary_eni.eni_id.clone();
    let primary = view.and_then(|v| v.enis.iter().find(|e| e.id == eni));
    let attachment = primary
        .and_then(|e| e.attachment.as_ref())
        .map(|a| a.id.clone())
        .unwrap_or_else(|| "eni-attach-00000000000000000".into());
    let calls = [
        DryRunCall::DescribeNetworkInterfaces,
        DryRunCall::DescribeSubnets,
        DryRunCall::DescribeInstanceTypes(id.instance_type.clone()),
        DryRunCall::CreateNetworkInterface(id.primary_eni.subnet_id.clone()),
        DryRunCall::AttachNetworkInterface(eni.clone(), id.instance_id.clone()),
        DryRunCall::DetachNetworkInterface(attachment.clone()),
        DryRunCall::DeleteNetworkInterface(eni.clone()),
        DryRunCall::ModifyNetworkInterfaceAttribute(eni.clone(), attachment),
        DryRunCall::CreateTags(eni),
    ];
    let mut out = Vec::new();
    for call in &calls {
        out.push((call.action(), ec2.dry_run(call).await));
    }
    out
}

async fn ipamd(config: &Config) -> Ipamd {
    let socket = config.socket.clone();
    let asked = socket.clone();
    let status = tokio::task::spawn_blocking(move || {
        ipam_proto::Client::new(&asked)
            .with_timeouts(Duration::from_secs(2), Duration::from_secs(5))
            .status()
            .map_err(text)
    })
    .await
    .unwrap_or_else(|e| Err(text(e)));
    let mut introspection = BTreeMap::new();
    for path in INTROSPECTION_PATHS {
        let body = if config.disable_introspection {
            Err("DISABLE_INTROSPECTION=true".to_string())
        } else {
            http::get(&config.introspection_bind, path).await
        };
        introspection.insert(path, body);
    }
    fn parsed<T: serde::de::DeserializeOwned>(
        bodies: &BTreeMap<&str, Result<String, String>>,
        path: &str,
    ) -> Result<T, String> {
        let body = bodies
            .get(path)
            .cloned()
            .unwrap_or_else(|| Err(format!("{path} not read")))?;
        serde_json::from_str(&body).map_err(|e| format!("not the JSON expected: {e}"))
    }
    Ipamd {
        socket,
        status,
        pool: parsed(&introspection, "/v1/pool"),
        pods: parsed(&introspection, "/v1/pods"),
        enis: parsed(&introspection, "/v1/enis"),
        refusals: parsed(&introspection, "/v1/ec2-refusals"),
        metrics: if config.disable_metrics {
            Err("DISABLE_METRICS=true".into())
        } else {
            http::get(&config.metrics_bind, "/metrics").await
        },
        introspection,
    }
}

fn rules_of<F: netops::IpFamily>(rules: Vec<RuleOf<F>>) -> impl Iterator<Item = KRule>
where
    IpNetwork: From<F>,
{
    rules.into_iter().map(|r| KRule {
        priority: r.priority,
        plain: r.lookup && r.fwmark.is_none() && r.iif.is_none() && !r.invert,
        src: r.src.map(IpNetwork::from),
        dst: r.dst.map(IpNetwork::from),
        table: r.table,
    })
}

fn routes_of<F: netops::IpFamily>(
    routes: Vec<netops::RouteOf<F>>,
    names: &BTreeMap<u32, String>,
) -> Vec<KRoute>
where
    IpNetwork: From<F>,
    IpAddr: From<F::Addr>,
{
    routes
        .into_iter()
        .map(|r| KRoute {
            dst: r.dst.into(),
            gateway: r.gateway.map(IpAddr::from),
            dev: r.oif.and_then(|i| names.get(&i).cloned()),
            oif: r.oif,
            table: r.table,
            scope: r.scope,
        })
        .collect()
}

/// The kernel of the namespace the doctor runs in.
pub fn read_kernel(identity: Option<&NodeIdentity>) -> Result<Kernel, String> {
    let nl = Netlink::current().map_err(text)?;
    let links = nl.links().map_err(text)?;
    let names: BTreeMap<u32, String> = links.iter().map(|l| (l.index, l.name.clone())).collect();
    let mut rules: Vec<KRule> =
        rules_of(nl.rules_of::<ipnetwork::Ipv4Network>().map_err(text)?).collect();
    // A node without IPv6 answers the IPv6 dumps with nothing or an error: neither is news.
    rules.extend(rules_of(
        nl.rules_of::<ipnetwork::Ipv6Network>().unwrap_or_default(),
    ));
    let mut routes = routes_of(
        nl.all_routes_of::<ipnetwork::Ipv4Network>().map_err(text)?,
        &names,
    );
    routes.extend(routes_of(
        nl.all_routes_of::<ipnetwork::Ipv6Network>()
            .unwrap_or_default(),
        &names,
    ));
    let rp_filter = identity
        .and_then(|id| netops::parse_mac(&id.primary_eni.mac))
        .and_then(|mac| links.iter().find(|l| l.mac == Some(mac)))
        .map(|link| {
            let value =
                std::fs::read_to_string(format!("/proc/sys/net/ipv4/conf/{}/rp_filter", link.name))
                    .unwrap_or_else(|e| format!("unreadable ({e})"));
            (link.name.clone(), value.trim().to_string())
        });
    Ok(Kernel {
        rules,
        routes,
        links,
        rp_filter,
    })
}

/// The node's SNAT settings as ipamd applies them, on the primary ENI's link.
pub fn node_snat(
    config: &Config,
    identity: &NodeIdentity,
    kernel: &Kernel,
) -> Result<snat::NodeNetConfig, String> {
    let net = crate::daemon::node_net(config, identity);
    let mac = netops::parse_mac(&net.primary_mac)
        .ok_or_else(|| format!("bad MAC {}", net.primary_mac))?;
    let link = kernel
        .links
        .iter()
        .find(|l| l.mac == Some(mac))
        .ok_or_else(|| format!("no link has the primary ENI's MAC {}", net.primary_mac))?;
    Ok(snat::NodeNetConfig {
        primary_if: link.name.clone(),
        ..net.snat
    })
}

fn snat_pending(
    config: &Config,
    identity: Result<&NodeIdentity, &String>,
    kernel: Result<&Kernel, &String>,
) -> Result<Vec<snat::Change>, String> {
    let identity = identity.map_err(|e| format!("the node is unknown: {e}"))?;
    let kernel = kernel.map_err(|e| format!("the node's links are unknown: {e}"))?;
    let cfg = node_snat(config, identity, kernel)?;
    let runner = SystemRunner;
    let backend = snat::detect_backend(&runner).map_err(text)?;
    snat::pending(&runner, backend, &cfg).map_err(text)
}

/// libcni reads these; everything else in the conf dir is ignored by the runtime.
fn is_cni_config(name: &str) -> bool {
    [".conf", ".conflist", ".json"]
        .iter()
        .any(|ext| name.ends_with(ext))
}

async fn read_cni(paths: &CniPaths) -> Cni {
    let mut other_files = Vec::new();
    let files = std::fs::read_dir(&paths.conf_dir)
        .map_err(|e| format!("{}: {e}", paths.conf_dir.display()))
        .map(|entries| {
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .filter(|e| e.path().is_file())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect();
            names.sort();
            let (configs, others): (Vec<_>, Vec<_>) =
                names.into_iter().partition(|n| is_cni_config(n));
            other_files = others;
            configs
                .into_iter()
                .map(|name| ConfFile {
                    content: std::fs::read(paths.conf_dir.join(&name))
                        .map_err(text)
                        .and_then(|b| serde_json::from_slice::<Value>(&b).map_err(text)),
                    name,
                })
                .collect()
        });
    Cni {
        conf_dir: paths.conf_dir.clone(),
        files,
        bin_dir: paths.bin_dir.clone(),
        plugin_version: plugin_version(&paths.bin_dir.join(PLUGIN_TYPE)).await,
        other_files,
    }
}

/// What the plugin answers to VERSION: its supported versions, or why it did not.
async fn plugin_version(path: &Path) -> Result<String, String> {
    let mut child = tokio::process::Command::new(path)
        .env_clear()
        .env("CNI_COMMAND", "VERSION")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(text)?;
    if let Some(mut stdin) = child.stdin.take() {
        use tokio::io::AsyncWriteExt;
        // A plugin that does not read its stdin is judged by its answer, not by this write.
        let _ = stdin.write_all(br#"{"cniVersion":"1.0.0"}"#).await;
    }
    let out = tokio::time::timeout(Duration::from_secs(5), child.wait_with_output())
        .await
        .map_err(|_| "no answer to VERSION within 5 s".to_string())?
        .map_err(text)?;
    let answer: Value = serde_json::from_slice(&out.stdout).map_err(|_| {
        format!(
            "VERSION did not answer CNI JSON (exit {}, stderr {:?})",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    let versions = answer
        .get("supportedVersions")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("VERSION answered {answer} without supportedVersions"))?;
    Ok(versions
        .iter()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(", "))
}

/// The last `LOG_TAIL` bytes of a file, from the first whole line.
pub fn tail(path: &Path, max: u64) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let start = len.saturating_sub(max);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Ok(match (start, text.find('\n')) {
        (0, _) | (_, None) => text,
        (_, Some(i)) => text[i + 1..].to_string(),
    })
}

/// The start-up milestones worth showing, by the words ipamd logs them with.
const STAGES: &[&str] = &[
    "Starting vpc-cni ipamd",
    "node identity from IMDS",
    "following the node",
    "running without the Kubernetes API",
    "Serving RPC Handler",
    "Successfully copied CNI plugin binary",
    "Received SIGTERM",
    "ipamd stopped",
];

/// The last start's stages and the last errors of ipamd's JSON log lines.
pub fn parse_log(text: &str, now: SystemTime) -> Log {
    let mut stages = Vec::new();
    let mut errors = Vec::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let field = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default();
        let (level, message) = (field("level"), field("message"));
        let age = || {
            humantime::parse_rfc3339_weak(field("timestamp"))
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .map(|d| d.as_secs())
        };
        if message.starts_with("Starting vpc-cni ipamd") {
            stages.clear();
        }
        if STAGES.iter().any(|s| message.starts_with(s)) {
            stages.push(message.to_string());
        }
        if level.eq_ignore_ascii_case("error") {
            let age = age();
            let error = v.get("error").and_then(Value::as_str);
            let shown = match error {
                Some(e) => format!("{} {message}: {e}", field("timestamp")),
                None => format!("{} {message}", field("timestamp")),
            };
            errors.push((shown, age));
        }
    }
    let keep = errors.len().saturating_sub(5);
    errors.drain(..keep);
    Log {
        path: PathBuf::new(),
        stages,
        errors,
    }
}

fn read_log(path: &Path, now: SystemTime) -> Result<Log, String> {
    let text = tail(path, LOG_TAIL).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Log {
        path: path.to_path_buf(),
        ..parse_log(&text, now)
    })
}

/// The raw text of a command's output, for the bundle; its failure in words.
pub fn command_output(program: &str, args: &[&str]) -> String {
    match SystemRunner.run(program, args, None) {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        Ok(out) => format!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => format!("{program} could not run: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_gives_the_last_start_and_the_last_errors() {
        let now = humantime::parse_rfc3339("2026-11-26T10:00:00Z").unwrap();
        let log = [
            r#"{"timestamp":"2026-11-26T08:00:00Z","level":"INFO","message":"Starting vpc-cni ipamd 0.1.0 ..."}"#,
            r#"{"timestamp":"2026-11-26T08:00:01Z","level":"ERROR","message":"old failure"}"#,
            "not json",
            r#"{"timestamp":"2026-11-26T09:59:00Z","level":"INFO","message":"Starting vpc-cni ipamd 0.1.0 ..."}"#,
            r#"{"timestamp":"2026-11-26T09:59:01Z","level":"INFO","message":"node identity from IMDS","instance":"i-1"}"#,
            r#"{"timestamp":"2026-11-26T09:59:02Z","level":"INFO","message":"Serving RPC Handler on unix:/x"}"#,
            r#"{"timestamp":"2026-11-26T09:59:50Z","level":"ERROR","message":"growing failed","error":"EC2 refused"}"#,
            r#"{"timestamp":"2026-11-26T09:59:55Z","level":"WARN","message":"growth paused","error":"the node's IAM role lacks a permission (assigning addresses: AssignPrivateIpAddresses: UnauthorizedOperation: You are not authorized)"}"#,
        ]
        .join("\n");
        let Log { stages, errors, .. } = parse_log(&log, now);
        assert_eq!(stages.len(), 3, "{stages:?}");
        assert!(stages[2].starts_with("Serving RPC Handler"));
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].1, Some(7199));
        assert_eq!(errors[1].1, Some(10));
        assert!(errors[1].0.contains("growing failed: EC2 refused"));
    }

    #[test]
    fn a_tail_starts_at_a_whole_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "first line\nsecond\nthird\n").unwrap();
        assert_eq!(tail(&path, 100).unwrap(), "first line\nsecond\nthird\n");
        assert_eq!(tail(&path, 10).unwrap(), "third\n");
    }

    #[test]
    fn only_cni_config_files_count() {
        assert!(is_cni_config("10-vpc-cni.conflist"));
        assert!(is_cni_config("99-loopback.conf"));
        assert!(!is_cni_config("10-aws.conflist.replaced-by-vpc-cni"));
    }
}
