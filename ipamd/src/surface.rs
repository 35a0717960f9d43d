//! What ipamd shows operators: the settings the introspection endpoints report, the daemon as
//! a source of snapshots, and EC2 calls fed into the metrics.

use std::sync::Arc;
use std::time::Duration;

use cloud::throttle::CallObserver;
use cloud::{Action, CloudError, CloudErrorKind, Ec2, Imds};
use introspect::{IpamdEnv, Metrics, NetworkUtilsEnv, PoolView, Source};
use pool::Clock;

use crate::Daemon;
use crate::durability::DaemonStore;
use netops::snat::Randomize;

use crate::config::Config;
use crate::host::HostNetwork;

/// `/v1/networkutils-env-settings`.
pub fn network_env(config: &Config) -> NetworkUtilsEnv {
    NetworkUtilsEnv {
        connmark: config.connmark,
        exclude_snat_cidrs: config
            .exclude_snat_cidrs
            .iter()
            .map(ToString::to_string)
            .collect(),
        external_snat: config.external_snat,
        // Not supported (a startup warning says so when it is set).
        external_service_cidrs: Vec::new(),
        mtu: config.eni_mtu,
        veth_prefix: config.veth_prefix.clone(),
        node_port_support: config.node_port_support,
        // The Go CNI's numbering.
        randomize_snat: match config.randomize_snat {
            Randomize::None => 0,
            Randomize::HashRandom => 1,
            Randomize::Prng => 2,
        },
    }
}

/// `/v1/ipamd-env-settings`, as the Go CNI's.
pub fn ipamd_env(config: &Config) -> IpamdEnv {
    IpamdEnv {
        warm_ip_target: config.warm_ip_target,
        warm_eni_target: config.warm_eni_target,
        custom_network_cfg: config.custom_networking,
        manage_enis_non_schedulable: config.manage_enis_non_schedulable,
        subnet_discovery: config.subnet_discovery,
    }
}

/// The daemon, as the endpoints' source of snapshots.
pub struct DaemonSource<E, I, H, S>(pub Arc<Daemon<E, I, H, S>>);

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Source for DaemonSource<E, I, H, S> {
    fn view(&self) -> PoolView {
        self.0.view()
    }
}

/// Feeds every EC2 request into the metrics (`awscni_aws_api_latency_ms` and friends), and
/// every refusal for lack of a permission into `/v1/ec2-refusals`.
pub struct Ec2Metrics {
    /// Where they go.
    pub metrics: Arc<Metrics>,
    /// When a refusal happened.
    pub clock: Arc<dyn Clock>,
}

impl CallObserver for Ec2Metrics {
    fn observe(&self, api: Action, elapsed: Duration, error: Option<&CloudError>) {
        // An error without an AWS code (a transport failure) is labelled by its kind.
        let code = error.map(|e| e.code.clone().unwrap_or_else(|| format!("{:?}", e.kind)));
        self.metrics
            .aws_api(api.wire_name(), elapsed.as_secs_f64(), code.as_deref());
        if let (Some(e), Some(code)) = (error, &code)
            && e.kind == CloudErrorKind::Unauthorized
        {
            self.metrics
                .ec2_refused(api.wire_name(), code, &e.message, self.clock.now());
        }
    }

    fn backoff(&self, api: Action, error: &CloudError, delay: Duration) {
        let reason = error
            .code
            .clone()
            .unwrap_or_else(|| format!("{:?}", error.kind));
        self.metrics
            .ec2_backoff(api.wire_name(), &reason, delay.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Config {
        let vars: std::collections::HashMap<_, _> = vars.iter().copied().collect();
        Config::from_env(|k| vars.get(k).map(ToString::to_string)).unwrap()
    }

    #[test]
    fn settings_report_the_configuration_in_the_go_cnis_terms() {
        let c = config(&[
            ("AWS_VPC_K8S_CNI_RANDOMIZESNAT", "hashrandom"),
            (
                "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS",
                "10.1.0.0/16,10.2.0.0/16",
            ),
            ("AWS_VPC_K8S_CNI_CONNMARK", "0x40"),
            ("WARM_IP_TARGET", "7"),
        ]);
        let net = network_env(&c);
        assert_eq!(net.randomize_snat, 1);
        assert_eq!(net.connmark, 0x40);
        assert_eq!(net.exclude_snat_cidrs, vec!["10.1.0.0/16", "10.2.0.0/16"]);
        assert_eq!(net.mtu, 9001);
        assert_eq!(ipamd_env(&c).warm_ip_target, 7);
        assert_eq!(ipamd_env(&c).warm_eni_target, 1);
    }

    struct At(pool::Timestamp);

    impl Clock for At {
        fn now(&self) -> pool::Timestamp {
            self.0
        }
    }

    fn observer(metrics: &Arc<Metrics>) -> Ec2Metrics {
        Ec2Metrics {
            metrics: Arc::clone(metrics),
            clock: Arc::new(At(pool::Timestamp(5_000))),
        }
    }

    #[test]
    fn refusals_for_lack_of_a_permission_are_recorded_by_api() {
        let metrics = Arc::new(Metrics::new("test").unwrap());
        let observer = observer(&metrics);
        let (assign, describe) = (Action::AssignPrivateIpAddresses, Action::DescribeSubnets);
        let denied =
            CloudError::from_code(assign, "UnauthorizedOperation", "You are not authorized");
        let throttled = CloudError::from_code(describe, "RequestLimitExceeded", "slow");
        for _ in 0..2 {
            observer.observe(assign, Duration::ZERO, Some(&denied));
        }
        observer.observe(describe, Duration::ZERO, Some(&throttled));
        observer.observe(describe, Duration::ZERO, None);
        let refusals = metrics.ec2_refusals();
        assert_eq!(refusals.len(), 1, "{refusals:?}");
        let r = &refusals[0];
        assert_eq!(
            (r.api.as_str(), r.code.as_str(), r.count, r.last),
            (
                assign.wire_name(),
                "UnauthorizedOperation",
                2,
                pool::Timestamp(5_000)
            )
        );
        assert!(r.message.contains("not authorized"), "{}", r.message);
    }

    #[test]
    fn ec2_calls_reach_the_metrics_with_their_error_codes() {
        let metrics = Arc::new(Metrics::new("test").unwrap());
        let observer = observer(&metrics);
        let (create, assign) = (
            Action::CreateNetworkInterface,
            Action::AssignPrivateIpAddresses,
        );
        observer.observe(create, Duration::from_millis(20), None);
        let throttled = CloudError::from_code(assign, "RequestLimitExceeded", "slow down");
        observer.observe(assign, Duration::from_millis(5), Some(&throttled));
        let text = metrics.encode();
        assert!(
            text.contains(&format!(r#"awscni_ec2api_req_count{{fn="{create}"}} 1"#)),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                r#"awscni_aws_api_error_count{{api="{assign}",error="RequestLimitExceeded"}} 1"#
            )),
            "{text}"
        );
    }

    #[test]
    fn backoffs_reach_the_metrics_with_their_reason_and_length() {
        let metrics = Arc::new(Metrics::new("test").unwrap());
        let observer = observer(&metrics);
        let throttled = CloudError::from_code("A", "RequestLimitExceeded", "slow down");
        let dropped = CloudError {
            api: "A".into(),
            kind: cloud::CloudErrorKind::Unavailable,
            code: None,
            message: "connection closed before message completed".into(),
        };
        let assign = Action::AssignPrivateIpAddresses;
        observer.backoff(assign, &throttled, Duration::from_millis(250));
        observer.backoff(assign, &dropped, Duration::from_millis(500));
        let text = metrics.encode();
        for line in [
            format!(
                r#"vpccni_ec2_retries_total{{api="{assign}",reason="RequestLimitExceeded"}} 1"#
            ),
            format!(r#"vpccni_ec2_retries_total{{api="{assign}",reason="Unavailable"}} 1"#),
            format!(r#"vpccni_ec2_backoff_seconds_total{{api="{assign}"}} 0.75"#),
        ] {
            assert!(text.contains(&line), "{line} missing:\n{text}");
        }
    }
}
