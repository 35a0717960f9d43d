//! The Go CNI's start: `nodeInit` (ipamd.go:458-672), whose failure ends the process
//! (cmd/aws-k8s-agent/main.go:148-156), and the leaked-ENI cleanup the EC2 client starts
//! with the process (awsutils.go:464).

use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context;
use cloud::{CloudErrorKind, Ec2, EniFilter};
use pool::Pool;
use vpc_sim::inproc::{Account, NodeEc2, NodeImds};
use vpc_sim::rand::Rng;

use super::{
    COOLDOWN, CREATED_AT_TAG, DESCRIPTION_PREFIX, ENI_EC2_TRIES, GoCni, GoOptions, HALF_LOOP,
    NODE_TAG, Node, PD_MAX_PODS, State, Tasks,
};

/// `maxRetryCheckENI` + 1 tries of setupENI at init, `eniAttachTime` apart (ipamd.go:61-62).
const SETUP_TRIES: u32 = 6;
const SETUP_RETRY: Duration = Duration::from_secs(10);
/// `eniCleanupStartupDelayMax` (awsutils.go:89): the cleanup's first run is up to this late.
const CLEANUP_DELAY_MAX: u64 = 300;
/// The cleanup's period (`wait.Forever(…, time.Hour)`, awsutils.go:464).
const CLEANUP_PERIOD: Duration = Duration::from_secs(3_600);
/// `eniDeleteCooldownTime` (awsutils.go:90): a leaked ENI younger than this is left alone.
const LEAK_MIN_AGE: Duration = Duration::from_secs(300);
/// `createdAt` as RFC 3339, `elapsed` after the simulated day starts.
pub(super) fn created_at(elapsed: Duration) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + crate::EPOCH + elapsed).to_string()
}

/// The time since the start a `createdAt` tag stands for.
fn parse_created_at(tag: &str) -> Option<Duration> {
    let at = humantime::parse_rfc3339(tag).ok()?;
    at.duration_since(UNIX_EPOCH + crate::EPOCH).ok()
}

/// One process start: `ipamd.New` and `nodeInit`, then the pool loop.
pub(super) async fn start(
    account: &Arc<Account>,
    instance: &str,
    opts: GoOptions,
    seed: u64,
) -> anyhow::Result<GoCni> {
    let started = account.elapsed();
    let ec2 = NodeEc2::new(account);
    let imds = NodeImds::new(account, instance);
    let identity = cloud::node_identity(&imds).await?;
    let limits = cloud::InstanceTable::embedded()
        .get(&identity.instance_type)
        .ok_or_else(|| anyhow::anyhow!("unknown instance type {}", identity.instance_type))?;
    let targets = opts.targets;
    let max_pods = if targets.prefix_delegation {
        PD_MAX_PODS
    } else if opts.custom_networking {
        limits.max_pods_custom_networking()
    } else {
        limits.max_pods()
    };
    let mut node = Node {
        account: Arc::clone(account),
        ec2,
        imds,
        instance: instance.to_string(),
        primary_eni: identity.primary_eni.eni_id.clone(),
        subnet: identity.primary_eni.subnet_id.clone(),
        vpc_id: String::new(),
        az: identity.availability_zone.clone(),
        eni_subnet: String::new(),
        groups: Vec::new(),
        per_eni: limits.secondary_ips_per_eni(),
        // MAX_ENI only lowers the instance's limit (ipamd.go:1418).
        max_enis: opts
            .max_enis
            .filter(|m| *m >= 1)
            .map_or(limits.max_enis, |m| m.min(limits.max_enis)),
        max_pods,
        opts,
        state: Mutex::new(State {
            pool: Pool::new(COOLDOWN),
            rng: Rng::seeded(seed),
            last_release: None,
            last_action: Duration::ZERO,
            paused_until: None,
            throttled: false,
        }),
    };
    // DescribeAllENIs (ipamd.go:488): IMDS, then EC2 for the same ENIs; fatal when it fails.
    let attached = node.attached().await?;
    let ids: Vec<String> = attached.iter().map(|a| a.id.clone()).collect();
    let described = node
        .describe_all(&ids)
        .await
        .context("ipamd init: failed to retrieve attached ENIs info")?;
    let primary = described
        .iter()
        .find(|e| e.id == node.primary_eni)
        .ok_or_else(|| anyhow::anyhow!("no primary ENI"))?;
    node.vpc_id = primary.vpc_id.clone();
    node.groups = primary.security_groups.clone();
    node.eni_subnet = match (&node.opts.eni_config_subnet, node.opts.custom_networking) {
        (Some(s), true) => s.clone(),
        _ => node.subnet.clone(),
    };
    let node = Arc::new(node);
    // The leaked-ENI cleanup starts with the EC2 client, before nodeInit (awsutils.go:464).
    let mut tasks = Tasks(vec![{
        let node = Arc::clone(&node);
        let draw = Rng::seeded(seed ^ 0x6c65_616b).unit();
        let first = Duration::from_secs((draw * CLEANUP_DELAY_MAX as f64) as u64);
        let first = first.saturating_sub(node.now() - started);
        tokio::spawn(async move { node.cleanup_leaks(first).await })
    }]);
    for eni in &attached {
        let tags = described
            .iter()
            .find(|d| d.id == eni.id)
            .map(|d| d.tags.clone())
            .unwrap_or_default();
        // ipamd.go:531-533: a failure to tag is fatal.
        node.tag_eni(&eni.id, &tags)
            .await
            .with_context(|| format!("ipamd init: failed to tag managed ENI {}", eni.id))?;
        // ipamd.go:540-563: setupENI retried, 10 s apart, then given up without failing.
        for attempt in 1..=SETUP_TRIES {
            if node.setup_eni(eni).await.is_ok() {
                break;
            }
            if attempt < SETUP_TRIES {
                tokio::time::sleep(SETUP_RETRY).await;
            }
        }
    }
    // The first RefreshSGIDs (ipamd.go:595 → awsutils.go:677-705): its cache starts empty, so
    // every managed ENI is given the primary ENI's groups; errors are only logged
    // (awsutils.go:610-635). Not under custom networking.
    if !node.opts.custom_networking {
        let mut enis: Vec<String> = node.state().pool.enis().map(|e| e.id.clone()).collect();
        enis.sort();
        for eni in enis {
            let _ = node
                .sdk(|| node.ec2.set_security_groups(&eni, &node.groups))
                .await;
        }
    }
    // handlePreScaling (ipamd.go:664, 674-692): an increase whose error (anything but a full
    // subnet) is fatal; under custom networking an empty pool is too.
    if node.too_low(node.stats()) {
        node.increase()
            .await
            .context("error while trying to increase datastore pool")?;
        if node.opts.custom_networking && node.stats().total == 0 {
            anyhow::bail!("Failed to attach any ENIs for custom networking");
        }
    }
    let pool_loop = {
        let node = Arc::clone(&node);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(HALF_LOOP).await;
                node.update_pool().await;
                tokio::time::sleep(HALF_LOOP).await;
                node.reconcile().await;
            }
        })
    };
    tasks.0.push(pool_loop);
    Ok(GoCni {
        node,
        _tasks: tasks,
    })
}

impl Node {
    /// `cleanUpLeakedENIs` (awsutils.go:2294-2340), every hour from the process's start: a
    /// random delay (up to 300 s; `first` for the first run), one filtered
    /// DescribeNetworkInterfaces of the VPC's available ENIs tagged by a Go CNI, and each such
    /// ENI older than 5 minutes deleted (one with no createdAt tag is tagged instead).
    async fn cleanup_leaks(&self, first: Duration) {
        let mut delay = first;
        loop {
            tokio::time::sleep(delay).await;
            let filters = [
                EniFilter::new("tag-key", NODE_TAG),
                EniFilter::new("status", "available"),
                EniFilter::new("vpc-id", &self.vpc_id),
            ];
            let found = self
                .sdk(|| self.ec2.find_network_interfaces(&filters))
                .await
                .unwrap_or_default();
            for eni in found {
                if !eni.description.starts_with(DESCRIPTION_PREFIX) {
                    continue;
                }
                match eni
                    .tags
                    .get(CREATED_AT_TAG)
                    .and_then(|t| parse_created_at(t))
                {
                    Some(at) if self.now().saturating_sub(at) >= LEAK_MIN_AGE => {
                        let _ = self.delete_eni(&eni.id).await;
                    }
                    Some(_) => {}
                    None => {
                        let tags = std::collections::BTreeMap::from([(
                            CREATED_AT_TAG.to_string(),
                            created_at(self.now()),
                        )]);
                        let _ = self
                            .retry(5, Duration::from_millis(500), 0.3, || {
                                self.sdk(|| self.ec2.create_tags(&eni.id, &tags))
                            })
                            .await;
                    }
                }
            }
            let next = (self.state().rng.unit() * CLEANUP_DELAY_MAX as f64) as u64;
            delay = CLEANUP_PERIOD + Duration::from_secs(next);
        }
    }

    /// `deleteENI` (awsutils.go:1523-1552): DeleteNetworkInterface, 12 tries (500 ms
    /// doubling, 15% jitter); an ENI already gone is deleted.
    pub(super) async fn delete_eni(&self, eni: &str) -> Result<(), cloud::CloudError> {
        self.retry(ENI_EC2_TRIES, Duration::from_millis(500), 0.15, || async {
            match self.sdk(|| self.ec2.delete_network_interface(eni)).await {
                Err(e) if e.kind == CloudErrorKind::NotFound => Ok(()),
                other => other,
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_at_tags_read_back_as_the_time_they_were_written() {
        let at = Duration::from_secs(3 * 3_600 + 61);
        assert_eq!(created_at(at), "2026-01-01T03:01:01Z");
        assert_eq!(parse_created_at(&created_at(at)), Some(at));
        assert_eq!(
            parse_created_at("2025-12-31T23:59:59Z"),
            None,
            "before the day"
        );
        assert_eq!(parse_created_at("yesterday"), None);
    }
}
