//! Leaked-ENI cleanup: ENIs created by vpc-cni (or aws-node) that are no longer attached to
//! anything, typically because a node died between detach and delete. Left alone they hold
//! subnet addresses and block VPC deletion (reference §3.14, §8 row 4).

use std::time::{Duration, SystemTime};

use cloud::{CloudErrorKind, Ec2, EniFilter, Imds, NetworkInterface};
use tracing::{debug, info, warn};

use super::Daemon;
use super::eni::{TAG_CLUSTER, TAG_CREATED_AT, TAG_INSTANCE_ID, wall_time};
use crate::durability::DaemonStore;
use crate::host::HostNetwork;

/// An available ENI younger than this may be one another node is still attaching.
pub const MIN_LEAK_AGE: Duration = Duration::from_secs(5 * 60);

/// The first cleanup waits a random part of this (or of the interval, if shorter), so nodes
/// started together do not all list the VPC at once.
pub const MAX_START_JITTER: Duration = Duration::from_secs(300);

/// What one cleanup round found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeakReport {
    /// ENIs deleted.
    pub deleted: usize,
    /// Too young, or just given their creation time.
    pub spared: usize,
}

fn age(eni: &NetworkInterface, now: SystemTime) -> Option<Duration> {
    let created = humantime::parse_rfc3339(eni.tags.get(TAG_CREATED_AT)?).ok()?;
    Some(now.duration_since(created).unwrap_or(Duration::ZERO))
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// One cleanup round: ENIs of this VPC (and cluster, when CLUSTER_NAME is set) that carry
    /// our instance tag and description, are `available` and are at least [`MIN_LEAK_AGE`]
    /// old are deleted. One without a creation time gets one now and is judged next round.
    /// Like the Go CNI, without CLUSTER_NAME any node may clean any node's leaks.
    pub async fn clean_leaked_enis(&self) -> LeakReport {
        let mut filters = vec![
            EniFilter::new("tag-key", TAG_INSTANCE_ID),
            EniFilter::new("status", "available"),
            EniFilter::new("vpc-id", &self.node.identity.vpc_id),
        ];
        if let Some(cluster) = &self.node.cluster_name {
            filters.push(EniFilter::new(format!("tag:{TAG_CLUSTER}"), cluster));
        }
        let found = match self.ec2.find_network_interfaces(&filters).await {
            Ok(found) => found,
            Err(e) => {
                warn!(error = %e, "listing leaked ENIs failed");
                return LeakReport::default();
            }
        };
        let now = wall_time(self.clock.now());
        let mut report = LeakReport::default();
        for eni in found
            .iter()
            .filter(|e| e.description.starts_with("aws-K8S-"))
        {
            match age(eni, now) {
                None => {
                    let stamp = humantime::format_rfc3339_seconds(now).to_string();
                    let tags = [(TAG_CREATED_AT.to_string(), stamp)].into();
                    if let Err(e) = self.ec2.create_tags(&eni.id, &tags).await {
                        warn!(eni = %eni.id, error = %e, "could not stamp a leaked ENI's creation time");
                    }
                    report.spared += 1;
                }
                Some(age) if age < MIN_LEAK_AGE => {
                    debug!(eni = %eni.id, "Found an ENI created less than 5 minutes ago, so not cleaning it up");
                    report.spared += 1;
                }
                Some(age) => match self.ec2.delete_network_interface(&eni.id).await {
                    Ok(()) => {
                        info!(eni = %eni.id, age_s = age.as_secs(), "deleted leaked ENI");
                        report.deleted += 1;
                    }
                    Err(e) if e.kind == CloudErrorKind::NotFound => {}
                    Err(e) => warn!(eni = %eni.id, error = %e, "could not delete a leaked ENI"),
                },
            }
        }
        report
    }
}
