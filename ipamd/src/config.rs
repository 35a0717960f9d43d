//! ipamd's configuration: the Go CNI's environment variables (same names, same defaults) plus
//! our own. Parsing is a pure function of a variable lookup; a bad value is an error that names
//! the variable, never a silent fallback to a default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use cluster::EniConfigKeys;
use cni::settings::{DEFAULT_MTU, DEFAULT_VETH_PREFIX, SettingError};
use ipnetwork::Ipv4Network;
use logfile::{LimitError, Rotation};
use netops::snat::{DEFAULT_CONNMARK, Randomize, SnatError};
use thiserror::Error;

/// A variable with a value ipamd cannot use.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("{var}={value:?}: {problem}")]
pub struct ConfigError {
    /// The variable.
    pub var: &'static str,
    /// Its value.
    pub value: String,
    /// What is wrong.
    pub problem: String,
}

/// Where log lines go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogTarget {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// A file (appended).
    File(PathBuf),
}

/// Where an HTTP endpoint listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindAddress {
    /// TCP.
    Tcp(SocketAddr),
    /// A Unix socket (`unix:<path>`).
    Unix(PathBuf),
}

/// Everything ipamd reads from its environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `IPAMD_SOCKET`: the plugin's socket.
    pub socket: PathBuf,
    /// `IPAMD_STATE_DIR`: the sled state.
    pub state_dir: PathBuf,
    /// `IP_COOLDOWN_PERIOD` (seconds).
    pub ip_cooldown: Duration,
    /// `WARM_ENI_TARGET`.
    pub warm_eni_target: u32,
    /// `WARM_IP_TARGET` (unset = 0).
    pub warm_ip_target: u32,
    /// `MINIMUM_IP_TARGET` (unset = 0).
    pub minimum_ip_target: u32,
    /// `WARM_PREFIX_TARGET`.
    pub warm_prefix_target: u32,
    /// `MAX_ENI` (unset = the instance's limit).
    pub max_eni: Option<u32>,
    /// `MAX_PODS` (ours): the node's kubelet `--max-pods`. The Go CNI reads it from the node
    /// object; ipamd has no API server access, so it is configured. Unset: the published
    /// formula for secondary addresses, 110 (kubelet's default) with prefix delegation.
    pub max_pods: Option<u32>,
    /// `ENABLE_PREFIX_DELEGATION`.
    pub prefix_delegation: bool,
    /// `AWS_VPC_ENI_MTU`.
    pub eni_mtu: u32,
    /// `AWS_VPC_K8S_CNI_VETHPREFIX`.
    pub veth_prefix: String,
    /// `AWS_VPC_K8S_CNI_EXTERNALSNAT`.
    pub external_snat: bool,
    /// `AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS`.
    pub exclude_snat_cidrs: Vec<Ipv4Network>,
    /// `AWS_VPC_K8S_CNI_RANDOMIZESNAT`: `prng`, `hashrandom` or `none`.
    pub randomize_snat: Randomize,
    /// `AWS_VPC_CNI_NODE_PORT_SUPPORT`.
    pub node_port_support: bool,
    /// `AWS_VPC_K8S_CNI_CONNMARK`.
    pub connmark: u32,
    /// `IPAMD_RECONCILE_INTERVAL` (ours, seconds): how often the ENIs IMDS shows are compared
    /// with the pool (the Go CNI: about every 60 s).
    pub reconcile_interval: Duration,
    /// `IPAMD_ADD_WAIT` (ours, milliseconds): how long an ADD that finds no address waits for
    /// the pool to grow before answering "try again later".
    pub add_wait: Duration,
    /// `IPAMD_LEAKED_ENI_CLEANUP_INTERVAL` (ours, seconds; the Go CNI: an hour).
    pub leaked_eni_cleanup_interval: Duration,
    /// `CLUSTER_NAME`.
    pub cluster_name: Option<String>,
    /// `ADDITIONAL_ENI_TAGS` (a JSON object of strings), reserved keys removed.
    pub additional_eni_tags: Vec<(String, String)>,
    /// Keys of `ADDITIONAL_ENI_TAGS` dropped because they contain `k8s.amazonaws.com` (the Go
    /// CNI drops them too; ipamd warns).
    pub dropped_eni_tags: Vec<String>,
    /// `AWS_EC2_ENDPOINT`.
    pub ec2_endpoint: Option<String>,
    /// `HTTP_TIMEOUT` (seconds; values under 10 are raised to 10 as the Go CNI does).
    pub http_timeout: Duration,
    /// `INTROSPECTION_BIND_ADDRESS`.
    pub introspection_bind: BindAddress,
    /// `DISABLE_INTROSPECTION`.
    pub disable_introspection: bool,
    /// `METRICS_BIND_ADDRESS`.
    pub metrics_bind: BindAddress,
    /// `DISABLE_METRICS`.
    pub disable_metrics: bool,
    /// `DISABLE_LEAKED_ENI_CLEANUP`.
    pub disable_leaked_eni_cleanup: bool,
    /// `AWS_VPC_K8S_CNI_LOGLEVEL` as a tracing level name.
    pub log_level: String,
    /// `AWS_VPC_K8S_CNI_LOG_FILE`.
    pub log_target: LogTarget,
    /// `AWS_VPC_K8S_CNI_LOG_MAX_SIZE` and `AWS_VPC_K8S_CNI_LOG_MAX_FILES` (ours; the Go CNI
    /// fixes lumberjack's 100 MB and 5 files, which are the defaults): when a log file
    /// rotates and how many rotated files stay. Only a file rotates.
    pub log_rotation: Rotation,
    /// `AWS_VPC_K8S_CNI_BACKING_STORE`: the Go CNI's checkpoint, read once when a node
    /// switches from aws-node so its pods keep their addresses.
    pub go_cni_checkpoint: PathBuf,
    /// `MY_NODE_NAME` (the downward API's `spec.nodeName`): the Node object ipamd follows.
    pub node_name: Option<String>,
    /// `AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG`: new ENIs go to the node's ENIConfig's subnet with
    /// its security groups, and the primary ENI carries no pods.
    pub custom_networking: bool,
    /// `ENI_CONFIG_ANNOTATION_DEF` and `ENI_CONFIG_LABEL_DEF`: the node keys naming its
    /// ENIConfig.
    pub eni_config_keys: EniConfigKeys,
    /// `ENABLE_SUBNET_DISCOVERY`: new ENIs may go to subnets of the node's VPC and zone
    /// tagged `kubernetes.io/role/cni`.
    pub subnet_discovery: bool,
    /// `ENABLE_IPv4` and `ENABLE_IPv6`: which addresses pods get.
    pub ip_family: IpFamily,
    /// `ENABLE_V4_EGRESS` (default true) in IPv6 mode: each pod also gets a node-local IPv4
    /// address of 169.254.172.0/22, SNATed to the node's IPv4 address, to reach IPv4-only
    /// destinations. Always false in the other modes, where pods have a VPC IPv4 address.
    pub v4_egress: bool,
    /// `AWS_MANAGE_ENIS_NON_SCHEDULABLE` (default false): when false, a cordoned node gets no
    /// new ENI (as in the Go CNI) and gives back the warm addresses its pods do not use.
    pub manage_enis_non_schedulable: bool,
    /// `STARTUP_TAINT_MIN_IPS` (default 1): the startup taint `vpc-cni.io/agent-not-ready`
    /// comes off the node once ipamd serves and holds this many free addresses.
    pub startup_taint_min_ips: u32,
    /// `PUBLISH_NODE_MAX_PODS` (default false): also write the node's real capacity into the
    /// max pods it reports (`status.capacity.pods`), not only into its annotation.
    pub publish_node_max_pods: bool,
    /// `SUBNET_SCARCITY_MODE` (default true): below 10% of a subnet free, the node keeps one
    /// warm address and gives back what it holds idle, until 15% is free again.
    pub subnet_scarcity_mode: bool,
    /// `MY_POD_NAMESPACE` and `MY_POD_NAME` (downward API): the pod ipamd runs in, which
    /// Events about ipamd itself are recorded on (else on the node).
    pub own_pod: Option<(String, String)>,
}

/// Which VPC addresses pods get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpFamily {
    /// An IPv4 address (secondary address or from a /28), as aws-node by default.
    V4,
    /// An IPv6 address from a /80 delegated to the primary ENI, as aws-node's IPv6 mode.
    V6,
    /// Both: beyond the Go CNI, which allows one family only.
    Dual,
}

impl IpFamily {
    /// Pods get an IPv4 address.
    pub fn has_v4(self) -> bool {
        self != IpFamily::V6
    }

    /// Pods get an IPv6 address.
    pub fn has_v6(self) -> bool {
        self != IpFamily::V4
    }
}

/// The family from `ENABLE_IPv4` and `ENABLE_IPv6`. aws-node's IPv6 manifests set
/// `ENABLE_IPv6=true` and `ENABLE_IPv4=false`, and its code treats an unset `ENABLE_IPv4` as
/// false once IPv6 is on: both read as IPv6 mode here. Only both set to true explicitly asks
/// for dual-stack pods, which aws-node refuses.
fn ip_family<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<IpFamily, ConfigError> {
    let v6 = env.boolean("ENABLE_IPv6", false)?;
    let v4 = match env.raw("ENABLE_IPv4") {
        None => !v6,
        Some(_) => env.boolean("ENABLE_IPv4", true)?,
    };
    match (v4, v6) {
        (true, false) => Ok(IpFamily::V4),
        (false, true) => Ok(IpFamily::V6),
        (true, true) => Ok(IpFamily::Dual),
        (false, false) => Err(ConfigError {
            var: "ENABLE_IPv4",
            value: "false".into(),
            problem: "ENABLE_IPv4 and ENABLE_IPv6 are both false: pods would get no address".into(),
        }),
    }
}

/// Go's strconv.ParseBool spellings of false.
const FALSE: &[&str] = &["false", "0", "f", "F", "FALSE", "False"];

/// The Go CNI's variables that ask for something ipamd does not do (IPv6 egress for IPv4
/// pods, branch ENIs, multi-card, ...), each with the values that ask for nothing more than ipamd
/// does. Any other value starts ipamd with a warning, so nobody believes it took effect; the
/// table in docs/configuration.md says why each one is not honoured.
pub const IGNORED_WITH_WARNING: &[(&str, &[&str])] = &[
    ("ENABLE_V6_EGRESS", FALSE),
    ("AWS_EXTERNAL_SERVICE_CIDRS", &[]),
    ("ENABLE_POD_ENI", FALSE),
    ("DISABLE_NETWORK_RESOURCE_PROVISIONING", FALSE),
    ("ENABLE_IMDS_ONLY_MODE", FALSE),
    ("MANAGE_UNTAGGED_ENI", FALSE),
    ("ANNOTATE_POD_IP", FALSE),
    (
        "NETWORK_POLICY_ENFORCING_MODE",
        &["none", "standard", "NONE", "STANDARD", "Standard", "None"],
    ),
    ("ENABLE_MULTI_NIC", FALSE),
    ("ENABLE_BANDWIDTH_PLUGIN", FALSE),
    ("DISABLE_POD_V6", FALSE),
    ("VPC_CNI_VERSION", &[]),
];

/// One warning per variable of [`IGNORED_WITH_WARNING`] set to a value ipamd cannot honour.
pub fn ignored_settings(get: impl Fn(&str) -> Option<String>) -> Vec<String> {
    IGNORED_WITH_WARNING
        .iter()
        .filter_map(|(var, harmless)| {
            let value = get(var)?.trim().to_string();
            (!value.is_empty() && !harmless.contains(&value.as_str()))
                .then(|| format!("{var}={value:?} is not supported by vpc-cni and has no effect"))
        })
        .collect()
}

/// Reads typed values through a variable lookup; every error names its variable and value.
struct Env<F> {
    get: F,
}

impl<F: Fn(&str) -> Option<String>> Env<F> {
    /// The value, with surrounding blanks removed; an empty value counts as unset.
    fn raw(&self, var: &'static str) -> Option<String> {
        (self.get)(var)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    /// The value (or `default` when unset) read by `parse`, whose error is the problem.
    fn parsed<T>(
        &self,
        var: &'static str,
        default: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<T, ConfigError> {
        let value = self.raw(var).unwrap_or_else(|| default.to_string());
        parse(&value).map_err(|problem| ConfigError {
            var,
            value,
            problem,
        })
    }

    /// Like [`Env::parsed`], for a variable whose absence means "none".
    fn optional<T>(
        &self,
        var: &'static str,
        parse: impl FnOnce(&str) -> Result<Option<T>, String>,
    ) -> Result<Option<T>, ConfigError> {
        self.parsed(var, "", |v| if v.is_empty() { Ok(None) } else { parse(v) })
    }

    fn uint(&self, var: &'static str, default: u32) -> Result<u32, ConfigError> {
        self.parsed(var, &default.to_string(), whole_number)
    }

    /// Go's strconv.ParseBool, which the Go CNI uses.
    fn boolean(&self, var: &'static str, default: bool) -> Result<bool, ConfigError> {
        self.parsed(var, if default { "true" } else { "false" }, |v| match v {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
            "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
            _ => Err("expected true or false".into()),
        })
    }

    /// Whole seconds, at least one.
    fn seconds(&self, var: &'static str, default: u32) -> Result<Duration, ConfigError> {
        self.parsed(var, &default.to_string(), |v| match whole_number(v)? {
            0 => Err("must be at least 1 second".into()),
            n => Ok(Duration::from_secs(n.into())),
        })
    }

    fn absolute_path(&self, var: &'static str, default: &str) -> Result<PathBuf, ConfigError> {
        self.parsed(var, default, |v| {
            let path = PathBuf::from(v);
            if path.is_absolute() {
                Ok(path)
            } else {
                Err("must be an absolute path".into())
            }
        })
    }
}

/// A label or annotation key: an optional DNS-subdomain prefix and `/`, then a name of at
/// most 63 characters of alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric.
fn node_key(v: &str) -> Result<String, String> {
    let (prefix, name) = v.rsplit_once('/').unwrap_or(("", v));
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = !v.contains('/')
        || (!prefix.is_empty()
            && prefix.len() <= 253
            && prefix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-.".contains(c)));
    if name_ok && prefix_ok {
        Ok(v.to_string())
    } else {
        Err(
            "expected a Kubernetes label or annotation key, e.g. k8s.amazonaws.com/eniConfig"
                .into(),
        )
    }
}

pub(crate) fn whole_number(v: &str) -> Result<u32, String> {
    v.parse()
        .map_err(|_| "expected a whole number of 0 or more".into())
}

fn mtu(v: &str) -> Result<u32, String> {
    let n = v
        .parse::<u64>()
        .map_err(|_| SettingError::Mtu.to_string())?;
    cni::settings::check_mtu(n).map_err(|e| e.to_string())
}

fn veth_prefix(v: &str) -> Result<String, String> {
    cni::settings::check_veth_prefix(v).map_err(|e| e.to_string())?;
    Ok(v.to_string())
}

/// `MAX_ENI`: values under 1 are ignored, as the Go CNI ignores them.
pub(crate) fn max_eni(v: &str) -> Result<Option<u32>, String> {
    match v.parse::<i64>() {
        Ok(n) if n < 1 => Ok(None),
        Ok(n) => u32::try_from(n).map(Some).map_err(|_| "too large".into()),
        Err(_) => Err("expected a whole number".into()),
    }
}

/// `MAX_PODS`: 0 means unset.
fn max_pods(v: &str) -> Result<Option<u32>, String> {
    whole_number(v).map(|n| (n > 0).then_some(n))
}

/// A comma-separated list of IPv4 CIDRs.
fn cidrs(v: &str) -> Result<Vec<Ipv4Network>, String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<Ipv4Network>()
                .map_err(|_| format!("{s:?} is not an IPv4 CIDR"))
        })
        .collect()
}

fn randomize(v: &str) -> Result<Randomize, String> {
    match v {
        // The empty value means the default in netops; here unset already means `prng`.
        "prng" | "hashrandom" | "none" => v.parse().map_err(|e: SnatError| e.to_string()),
        _ => Err("expected prng, hashrandom or none".into()),
    }
}

/// Go's ParseInt(v, 0, ..): 0x hex, a leading 0 octal (0200 is 0x80), else decimal; not 0.
fn connmark(v: &str) -> Result<u32, String> {
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None if v.len() > 1 && v.starts_with('0') => {
            u32::from_str_radix(v.trim_start_matches(['0', 'o', 'O']), 8).ok()
        }
        None => v.parse().ok(),
    };
    parsed
        .filter(|m| *m != 0)
        .ok_or_else(|| "expected a non-zero mark: decimal, 0x-hex or 0-octal".into())
}

/// `IPAMD_ADD_WAIT` in milliseconds. The plugin waits 30 s for any answer; a longer wait would
/// end in its timeout instead of a reason.
fn add_wait(v: &str) -> Result<Duration, String> {
    match whole_number(v)? {
        ms if ms > MAX_ADD_WAIT_MS => Err(format!(
            "must be at most {MAX_ADD_WAIT_MS} ms (the plugin waits 30 s)"
        )),
        ms => Ok(Duration::from_millis(ms.into())),
    }
}

fn log_level(v: &str) -> Result<String, String> {
    match v.to_ascii_lowercase().as_str() {
        "debug" => Ok("debug"),
        "info" => Ok("info"),
        "warn" | "warning" => Ok("warn"),
        "error" | "fatal" => Ok("error"),
        _ => Err("expected DEBUG, INFO, WARN, ERROR or FATAL"),
    }
    .map(str::to_string)
    .map_err(str::to_string)
}

/// The log file's size limit and kept files, each read by [`logfile`]'s one syntax.
fn log_rotation<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Rotation, ConfigError> {
    const SIZE: &str = "AWS_VPC_K8S_CNI_LOG_MAX_SIZE";
    const FILES: &str = "AWS_VPC_K8S_CNI_LOG_MAX_FILES";
    let max_size = env.parsed(SIZE, &logfile::DEFAULT_MAX_SIZE.to_string(), |v| {
        logfile::parse_size(v).map_err(|e| e.to_string())
    })?;
    let max_files = env.parsed(FILES, &logfile::DEFAULT_MAX_FILES.to_string(), |v| {
        logfile::parse_max_files(v).map_err(|e| e.to_string())
    })?;
    // Both were checked above; the error is mapped rather than unwrapped all the same.
    Rotation::new(max_size, max_files).map_err(|e| {
        let (var, value) = match e {
            LimitError::MaxFiles => (FILES, max_files.to_string()),
            _ => (SIZE, max_size.to_string()),
        };
        ConfigError {
            var,
            value,
            problem: e.to_string(),
        }
    })
}

/// Any case, as the Go CNI lower-cases the value before comparing.
fn log_target(v: &str) -> Result<LogTarget, String> {
    Ok(match v {
        s if s.eq_ignore_ascii_case("stdout") => LogTarget::Stdout,
        s if s.eq_ignore_ascii_case("stderr") => LogTarget::Stderr,
        path => LogTarget::File(PathBuf::from(path)),
    })
}

fn bind(v: &str) -> Result<BindAddress, String> {
    if let Some(path) = v.strip_prefix("unix:") {
        if path.is_empty() {
            return Err("unix: needs a socket path".into());
        }
        return Ok(BindAddress::Unix(PathBuf::from(path)));
    }
    v.parse()
        .map(BindAddress::Tcp)
        .map_err(|_| "expected host:port or unix:<path>".into())
}

/// Tags to set, as key and value.
type Tags = Vec<(String, String)>;

/// `ADDITIONAL_ENI_TAGS`: the tags to set, and the keys dropped because they are ipamd's own.
fn eni_tags(v: &str) -> Result<(Tags, Vec<String>), String> {
    let (kept, dropped): (Vec<_>, Vec<_>) = parse_tags(v)?
        .into_iter()
        .partition(|(k, _)| !k.contains(RESERVED_TAG_PART));
    Ok((kept, dropped.into_iter().map(|(k, _)| k).collect()))
}

impl Config {
    /// Reads the configuration through `get` (the process environment in production).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let env = Env { get };
        let (additional_eni_tags, dropped_eni_tags) =
            env.parsed("ADDITIONAL_ENI_TAGS", "{}", eni_tags)?;
        let mut config = Config {
            socket: env.absolute_path("IPAMD_SOCKET", ipam_proto::DEFAULT_SOCKET)?,
            state_dir: env.absolute_path("IPAMD_STATE_DIR", "/run/vpc-cni/state")?,
            ip_cooldown: Duration::from_secs(env.uint("IP_COOLDOWN_PERIOD", 30)?.into()),
            warm_eni_target: env.uint("WARM_ENI_TARGET", 1)?,
            warm_ip_target: env.uint("WARM_IP_TARGET", 0)?,
            minimum_ip_target: env.uint("MINIMUM_IP_TARGET", 0)?,
            warm_prefix_target: env.uint("WARM_PREFIX_TARGET", 0)?,
            max_eni: env.optional("MAX_ENI", max_eni)?,
            max_pods: env.parsed("MAX_PODS", "0", max_pods)?,
            prefix_delegation: env.boolean("ENABLE_PREFIX_DELEGATION", false)?,
            eni_mtu: env.parsed("AWS_VPC_ENI_MTU", &DEFAULT_MTU.to_string(), mtu)?,
            veth_prefix: env.parsed(
                "AWS_VPC_K8S_CNI_VETHPREFIX",
                DEFAULT_VETH_PREFIX,
                veth_prefix,
            )?,
            external_snat: env.boolean("AWS_VPC_K8S_CNI_EXTERNALSNAT", false)?,
            exclude_snat_cidrs: env.parsed("AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS", "", cidrs)?,
            randomize_snat: env.parsed("AWS_VPC_K8S_CNI_RANDOMIZESNAT", "prng", randomize)?,
            node_port_support: env.boolean("AWS_VPC_CNI_NODE_PORT_SUPPORT", true)?,
            connmark: env.parsed(
                "AWS_VPC_K8S_CNI_CONNMARK",
                &DEFAULT_CONNMARK.to_string(),
                connmark,
            )?,
            reconcile_interval: env.seconds("IPAMD_RECONCILE_INTERVAL", 60)?,
            add_wait: env.parsed("IPAMD_ADD_WAIT", "5000", add_wait)?,
            leaked_eni_cleanup_interval: env.seconds("IPAMD_LEAKED_ENI_CLEANUP_INTERVAL", 3600)?,
            cluster_name: env.raw("CLUSTER_NAME"),
            additional_eni_tags,
            dropped_eni_tags,
            ec2_endpoint: env.raw("AWS_EC2_ENDPOINT"),
            // Values under 10 are raised to 10, as the Go CNI does.
            http_timeout: Duration::from_secs(env.uint("HTTP_TIMEOUT", 10)?.max(10).into()),
            introspection_bind: env.parsed(
                "INTROSPECTION_BIND_ADDRESS",
                "127.0.0.1:61679",
                bind,
            )?,
            disable_introspection: env.boolean("DISABLE_INTROSPECTION", false)?,
            metrics_bind: env.parsed("METRICS_BIND_ADDRESS", "0.0.0.0:61678", bind)?,
            disable_metrics: env.boolean("DISABLE_METRICS", false)?,
            disable_leaked_eni_cleanup: env.boolean("DISABLE_LEAKED_ENI_CLEANUP", false)?,
            log_level: env.parsed("AWS_VPC_K8S_CNI_LOGLEVEL", "DEBUG", log_level)?,
            log_target: env.parsed(
                "AWS_VPC_K8S_CNI_LOG_FILE",
                "/var/log/aws-routed-eni/ipamd.log",
                log_target,
            )?,
            log_rotation: log_rotation(&env)?,
            node_name: env.raw("MY_NODE_NAME"),
            custom_networking: env.boolean("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", false)?,
            eni_config_keys: EniConfigKeys {
                annotation: env.parsed(
                    "ENI_CONFIG_ANNOTATION_DEF",
                    &EniConfigKeys::default().annotation,
                    node_key,
                )?,
                label: env.parsed(
                    "ENI_CONFIG_LABEL_DEF",
                    &EniConfigKeys::default().label,
                    node_key,
                )?,
            },
            subnet_discovery: env.boolean("ENABLE_SUBNET_DISCOVERY", true)?,
            ip_family: ip_family(&env)?,
            v4_egress: false,
            manage_enis_non_schedulable: env.boolean("AWS_MANAGE_ENIS_NON_SCHEDULABLE", false)?,
            startup_taint_min_ips: env.uint("STARTUP_TAINT_MIN_IPS", 1)?,
            publish_node_max_pods: env.boolean("PUBLISH_NODE_MAX_PODS", false)?,
            subnet_scarcity_mode: env.boolean("SUBNET_SCARCITY_MODE", true)?,
            own_pod: env
                .raw("MY_POD_NAMESPACE")
                .zip(env.raw("MY_POD_NAME"))
                .filter(|(ns, name)| !ns.is_empty() && !name.is_empty()),
            go_cni_checkpoint: PathBuf::from(
                env.raw("AWS_VPC_K8S_CNI_BACKING_STORE")
                    .unwrap_or_else(|| "/var/run/aws-node/ipam.json".into()),
            ),
        };
        // Read in every mode, so a bad value is an error wherever it is set.
        let v4_egress = env.boolean("ENABLE_V4_EGRESS", true)?;
        config.v4_egress = config.ip_family == IpFamily::V6 && v4_egress;
        if config.ip_family == IpFamily::V6 && config.custom_networking {
            // As aws-node: custom networking chooses the subnet of pods' IPv4 addresses, and
            // IPv6 pods have none; their addresses come from the primary ENI's /80.
            return Err(ConfigError {
                var: "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG",
                value: "true".into(),
                problem: "custom networking has no effect in IPv6 mode (ENABLE_IPv6=true, \
                          ENABLE_IPv4 not true): pods' IPv6 addresses come from the primary \
                          ENI's /80; unset it, or enable dual-stack with ENABLE_IPv4=true"
                    .into(),
            });
        }
        Ok(config)
    }
}

/// The longest `IPAMD_ADD_WAIT`, in milliseconds.
const MAX_ADD_WAIT_MS: u32 = 25_000;

/// Tag keys containing this are ipamd's own (instance id, creation time).
const RESERVED_TAG_PART: &str = "k8s.amazonaws.com";

fn parse_tags(v: &str) -> Result<Tags, String> {
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(v).map_err(|e| format!("expected a JSON object of strings: {e}"))?;
    let mut tags = Vec::new();
    for (k, v) in map {
        let serde_json::Value::String(v) = v else {
            return Err(format!("tag {k:?} must have a string value"));
        };
        tags.push((k, v));
    }
    Ok(tags)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_env(|k| map.get(k).cloned())
    }

    #[test]
    fn ipv4_egress_is_on_by_default_in_ipv6_mode_only() {
        let egress = |pairs: &[(&str, &str)]| parse(pairs).map(|c| c.v4_egress);
        let v6 = ("ENABLE_IPv6", "true");
        assert_eq!(egress(&[v6]), Ok(true));
        assert_eq!(egress(&[v6, ("ENABLE_V4_EGRESS", "false")]), Ok(false));
        assert_eq!(egress(&[]), Ok(false), "IPv4 pods need none");
        assert_eq!(
            egress(&[v6, ("ENABLE_IPv4", "true")]),
            Ok(false),
            "dual-stack pods have IPv4"
        );
        let err = egress(&[("ENABLE_V4_EGRESS", "maybe")]).unwrap_err();
        assert_eq!(err.var, "ENABLE_V4_EGRESS");
    }

    #[test]
    fn the_ip_family_follows_aws_nodes_variables_and_both_means_dual_stack() {
        let family = |pairs: &[(&str, &str)]| parse(pairs).map(|c| c.ip_family);
        assert_eq!(family(&[]), Ok(IpFamily::V4));
        assert_eq!(family(&[("ENABLE_IPv4", "true")]), Ok(IpFamily::V4));
        assert_eq!(family(&[("ENABLE_IPv6", "true")]), Ok(IpFamily::V6));
        assert_eq!(
            family(&[("ENABLE_IPv6", "true"), ("ENABLE_IPv4", "false")]),
            Ok(IpFamily::V6),
            "aws-node's IPv6 manifest"
        );
        assert_eq!(
            family(&[("ENABLE_IPv6", "true"), ("ENABLE_IPv4", "true")]),
            Ok(IpFamily::Dual)
        );
        let none = parse(&[("ENABLE_IPv4", "false")]).unwrap_err();
        assert!(none.to_string().contains("both false"), "{none}");
        let bad = parse(&[("ENABLE_IPv6", "yes")]).unwrap_err();
        assert_eq!(bad.var, "ENABLE_IPv6");
        let custom = parse(&[
            ("ENABLE_IPv6", "true"),
            ("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "true"),
        ])
        .unwrap_err();
        assert_eq!(custom.var, "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG");
        assert!(
            parse(&[
                ("ENABLE_IPv6", "true"),
                ("ENABLE_IPv4", "true"),
                ("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "true"),
            ])
            .is_ok(),
            "dual-stack keeps custom networking for the IPv4 part"
        );
    }

    #[test]
    fn defaults_are_the_go_cnis_and_ours() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.socket, PathBuf::from("/run/vpc-cni/ipamd.sock"));
        assert_eq!(c.state_dir, PathBuf::from("/run/vpc-cni/state"));
        assert_eq!(c.ip_cooldown, Duration::from_secs(30));
        assert_eq!(
            (c.warm_eni_target, c.warm_ip_target, c.max_eni),
            (1, 0, None)
        );
        assert_eq!((c.eni_mtu, c.veth_prefix.as_str()), (9001, "eni"));
        assert_eq!(
            (c.randomize_snat, c.connmark, c.node_port_support),
            (Randomize::Prng, 0x80, true)
        );
        assert_eq!(c.reconcile_interval, Duration::from_secs(60));
        assert_eq!(
            (
                c.custom_networking,
                c.subnet_discovery,
                c.node_name.as_deref()
            ),
            (false, true, None),
            "subnet discovery is on by default, as in the Go CNI since 1.18"
        );
        assert_eq!(c.eni_config_keys, EniConfigKeys::default());
        assert_eq!(
            c.introspection_bind,
            BindAddress::Tcp("127.0.0.1:61679".parse().unwrap())
        );
        assert_eq!(
            c.metrics_bind,
            BindAddress::Tcp("0.0.0.0:61678".parse().unwrap())
        );
        assert_eq!(c.http_timeout, Duration::from_secs(10));
        assert_eq!(
            c.log_target,
            LogTarget::File("/var/log/aws-routed-eni/ipamd.log".into())
        );
        assert_eq!(
            (c.log_rotation.max_size(), c.log_rotation.max_files()),
            (100 << 20, 5),
            "lumberjack's 100 MB and 5 files, as the Go CNI rotates"
        );
    }

    #[test]
    fn log_rotation_is_read_in_bytes_or_binary_units() {
        let c = parse(&[
            ("AWS_VPC_K8S_CNI_LOG_MAX_SIZE", "10Mi"),
            ("AWS_VPC_K8S_CNI_LOG_MAX_FILES", "2"),
        ])
        .unwrap();
        assert_eq!(c.log_rotation, Rotation::new(10 << 20, 2).unwrap());
        let c = parse(&[("AWS_VPC_K8S_CNI_LOG_MAX_SIZE", " 65536 ")]).unwrap();
        assert_eq!(c.log_rotation.max_size(), 65536);
    }

    #[test]
    fn values_are_read() {
        let c = parse(&[
            ("IP_COOLDOWN_PERIOD", "5"),
            ("WARM_ENI_TARGET", "2"),
            ("MAX_ENI", "0"),
            ("ENABLE_PREFIX_DELEGATION", "True"),
            (
                "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS",
                "10.1.0.0/16, 192.168.0.0/24",
            ),
            (
                "ADDITIONAL_ENI_TAGS",
                r#"{"team":"net","node.k8s.amazonaws.com/instance_id":"x"}"#,
            ),
            ("IPAMD_ADD_WAIT", "250"),
            ("INTROSPECTION_BIND_ADDRESS", "unix:/run/x.sock"),
            ("AWS_VPC_K8S_CNI_LOG_FILE", "stderr"),
            ("HTTP_TIMEOUT", "3"),
            ("AWS_VPC_K8S_CNI_RANDOMIZESNAT", "hashrandom"),
            ("AWS_VPC_K8S_CNI_CONNMARK", "0x4000"),
            ("IPAMD_RECONCILE_INTERVAL", "2"),
            ("MY_NODE_NAME", "ip-10-0-0-4.ec2.internal"),
            ("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "true"),
            ("ENI_CONFIG_LABEL_DEF", "topology.kubernetes.io/zone"),
            ("ENABLE_SUBNET_DISCOVERY", "false"),
        ])
        .unwrap();
        assert_eq!(c.node_name.as_deref(), Some("ip-10-0-0-4.ec2.internal"));
        assert!(c.custom_networking && !c.subnet_discovery);
        assert_eq!(c.eni_config_keys.label, "topology.kubernetes.io/zone");
        assert_eq!(
            (c.randomize_snat, c.connmark),
            (Randomize::HashRandom, 0x4000)
        );
        assert_eq!(c.reconcile_interval, Duration::from_secs(2));
        assert_eq!(c.ip_cooldown, Duration::from_secs(5));
        assert_eq!(c.warm_eni_target, 2);
        assert_eq!(
            c.max_eni, None,
            "MAX_ENI under 1 is ignored, as the Go CNI does"
        );
        assert!(c.prefix_delegation);
        assert_eq!(c.exclude_snat_cidrs.len(), 2);
        assert_eq!(c.additional_eni_tags, vec![("team".into(), "net".into())]);
        assert_eq!(
            c.dropped_eni_tags,
            vec!["node.k8s.amazonaws.com/instance_id".to_string()]
        );
        assert_eq!(c.add_wait, Duration::from_millis(250));
        assert_eq!(
            c.introspection_bind,
            BindAddress::Unix("/run/x.sock".into())
        );
        assert_eq!(c.log_target, LogTarget::Stderr);
        assert_eq!(c.http_timeout, Duration::from_secs(10));
    }

    #[test]
    fn go_spellings_are_read_as_go_reads_them() {
        let c = parse(&[
            ("AWS_VPC_K8S_CNI_CONNMARK", "0200"),
            ("AWS_VPC_K8S_CNI_LOG_FILE", "STDOUT"),
        ])
        .unwrap();
        assert_eq!(
            c.connmark, 0x80,
            "a leading 0 is octal, as in Go's ParseInt"
        );
        assert_eq!(c.log_target, LogTarget::Stdout);
    }

    #[test]
    fn only_settings_that_ask_for_more_than_ipamd_does_warn() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(v, _)| *v == k)
                    .map(|(_, x)| x.to_string())
            }
        };
        assert!(ignored_settings(env(&[])).is_empty());
        assert!(
            ignored_settings(env(&[
                ("ENABLE_IPv6", "false"),
                ("ENABLE_IPv4", "true"),
                ("NETWORK_POLICY_ENFORCING_MODE", "standard"),
                ("ENABLE_POD_ENI", ""),
            ]))
            .is_empty()
        );
        let warnings = ignored_settings(env(&[
            ("ENABLE_V6_EGRESS", "true"),
            ("AWS_EXTERNAL_SERVICE_CIDRS", "10.9.0.0/16"),
            ("WARM_IP_TARGET", "3"),
        ]));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with("ENABLE_V6_EGRESS=\"true\""),
            "{warnings:?}"
        );
        assert!(
            warnings[1].starts_with("AWS_EXTERNAL_SERVICE_CIDRS="),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        for (var, value) in [
            ("IP_COOLDOWN_PERIOD", "-1"),
            ("WARM_ENI_TARGET", "lots"),
            ("MAX_ENI", "two"),
            ("ENABLE_PREFIX_DELEGATION", "yes"),
            ("AWS_VPC_ENI_MTU", "100"),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "toolong"),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "eth"),
            ("AWS_VPC_K8S_CNI_VETHPREFIX", "a/b"),
            ("AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS", "10.0.0.0/8,nope"),
            ("ADDITIONAL_ENI_TAGS", "{\"a\":1}"),
            ("ADDITIONAL_ENI_TAGS", "[]"),
            ("INTROSPECTION_BIND_ADDRESS", "localhost"),
            ("AWS_VPC_K8S_CNI_RANDOMIZESNAT", "sometimes"),
            ("AWS_VPC_K8S_CNI_CONNMARK", "0xzz"),
            ("AWS_VPC_CNI_NODE_PORT_SUPPORT", "maybe"),
            ("IPAMD_RECONCILE_INTERVAL", "0"),
            ("IPAMD_LEAKED_ENI_CLEANUP_INTERVAL", "0"),
            ("IPAMD_ADD_WAIT", "soon"),
            ("IPAMD_ADD_WAIT", "60000"),
            ("MAX_PODS", "many"),
            ("METRICS_BIND_ADDRESS", "unix:"),
            ("AWS_VPC_K8S_CNI_LOGLEVEL", "loud"),
            ("AWS_VPC_K8S_CNI_LOG_MAX_SIZE", "100MB"),
            ("AWS_VPC_K8S_CNI_LOG_MAX_SIZE", "0"),
            ("AWS_VPC_K8S_CNI_LOG_MAX_FILES", "0"),
            ("AWS_VPC_K8S_CNI_LOG_MAX_FILES", "-1"),
            ("IPAMD_SOCKET", "relative.sock"),
            ("IPAMD_STATE_DIR", "state"),
            ("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "on"),
            ("ENABLE_SUBNET_DISCOVERY", "maybe"),
            ("ENI_CONFIG_LABEL_DEF", "bad key!"),
            ("ENI_CONFIG_ANNOTATION_DEF", "/eniConfig"),
        ] {
            let err = parse(&[(var, value)]).unwrap_err();
            assert_eq!(err.var, var, "{err}");
            assert!(err.to_string().starts_with(&format!("{var}=")), "{err}");
        }
    }
}
