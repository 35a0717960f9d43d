//! The figures of a run, as `scripts/fleet.sh --json` prints them.

use std::time::Duration;

use serde::Serialize;

use crate::scenario::Run;

/// A pod is delayed when its address comes later than this after it was created: one period
/// of a pool loop.
pub const DELAYED: Duration = Duration::from_secs(5);

/// One algorithm's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Side {
    /// EC2 requests per node (throttled ones included).
    pub ec2_calls_per_node: f64,
    /// Requests EC2 refused with `RequestLimitExceeded`.
    pub throttled_calls: u64,
    /// Pods that got no address before the end.
    pub pods_failed: u64,
    /// Of those, pods whose ADDs failed while their node's EC2 calls were being throttled.
    pub pods_failed_throttling: u64,
    /// Pods placed more than 5 s after being created.
    pub pods_delayed: u64,
    /// Pods with at least one failed ADD (a sandbox error their owner sees), placed or not.
    pub pods_with_failed_add: u64,
    /// Pods that got an address before the end.
    pub pods_placed: u64,
    /// Pods created, the same on both sides (the pods of a node whose CNI never started
    /// included). The name is the report's since before pods were timed from creation.
    pub pods_bound: u64,
    /// From creation to address, over every pod created, a pod never placed counting as
    /// forever: median and 99th percentile; `None` (never) when that rank is a pod never
    /// placed. Over placed pods alone, the side that places fewer would look faster.
    pub address_p50_ms: Option<u64>,
    /// See `address_p50_ms`.
    pub address_p99_ms: Option<u64>,
    /// Addresses the nodes hold that no pod uses, at the end.
    pub idle_addresses: u64,
    /// Nodes whose CNI did not start.
    pub nodes_down: usize,
    /// Fragmented scenario: pods created before the subnet's strays went.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods_bound_while_fragmented: Option<u64>,
    /// Fragmented scenario: pods that got their address before the strays went, while EC2
    /// refused every prefix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods_placed_while_fragmented: Option<u64>,
    /// Custom networking: placed pods whose address is in a node subnet (a primary ENI's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods_in_node_subnets: Option<u64>,
    /// Custom networking: placed pods whose address is in an ENIConfig's subnet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods_in_eni_config_subnets: Option<u64>,
    /// Addresses the nodes' ENIs hold in delegated /28 prefixes at the end, as EC2 has them.
    pub prefix_addresses_at_end: u64,
    /// Secondary /32 addresses the nodes' ENIs hold at the end, as EC2 has them.
    pub secondary_addresses_at_end: u64,
    /// EC2 requests by API.
    pub calls_by_api: std::collections::BTreeMap<String, u64>,
    /// When each pod was created, in seconds (for the plot).
    #[serde(skip)]
    pub created_at_s: Vec<f64>,
    /// When each placed pod got its address, in seconds (for the plot).
    #[serde(skip)]
    pub placed_at_s: Vec<f64>,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1} calls/node, {} throttled, {}/{} placed, {} failed ({} by throttling), {} delayed, {} with a failed ADD, p50 {}, p99 {}, {} idle",
            self.ec2_calls_per_node,
            self.throttled_calls,
            self.pods_placed,
            self.pods_bound,
            self.pods_failed,
            self.pods_failed_throttling,
            self.pods_delayed,
            self.pods_with_failed_add,
            ms(self.address_p50_ms),
            ms(self.address_p99_ms),
            self.idle_addresses
        )?;
        if let (Some(bound), Some(placed)) = (
            self.pods_bound_while_fragmented,
            self.pods_placed_while_fragmented,
        ) {
            write!(
                f,
                ", {placed}/{bound} placed while fragmented, {} addresses in /28s and {} /32s at the end",
                self.prefix_addresses_at_end, self.secondary_addresses_at_end
            )?;
        }
        if let (Some(node), Some(eni_config)) =
            (self.pods_in_node_subnets, self.pods_in_eni_config_subnets)
        {
            write!(
                f,
                ", pods in the ENIConfig's subnets {eni_config}, in the nodes' {node}"
            )?;
        }
        Ok(())
    }
}

fn ms(t: Option<u64>) -> String {
    t.map_or_else(|| "never".to_string(), |t| format!("{t} ms"))
}

/// Nearest rank `p` of `sorted`, `None` sorting last (a pod never placed).
fn percentile(sorted: &[Option<u64>], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return Some(0);
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Side {
    /// The figures of `run` over `nodes` nodes.
    pub fn of(run: &Run, nodes: usize) -> Side {
        let mut waits: Vec<Option<u64>> = run
            .pods
            .iter()
            .map(|p| {
                p.placed_at.map(|t| {
                    u64::try_from(t.saturating_sub(p.created_at).as_millis()).unwrap_or(u64::MAX)
                })
            })
            .collect();
        waits.sort_unstable_by_key(|w| w.unwrap_or(u64::MAX));
        let placed = waits.iter().filter(|w| w.is_some()).count() as u64;
        let count = |f: &dyn Fn(&crate::node::PodRecord) -> bool| {
            run.pods.iter().filter(|p| f(p)).count() as u64
        };
        let while_fragmented = |f: &dyn Fn(&crate::node::PodRecord, Duration) -> bool| {
            run.healed_at.map(|healed| count(&|p| f(p, healed)))
        };
        Side {
            ec2_calls_per_node: run.tally.total() as f64 / nodes.max(1) as f64,
            throttled_calls: run.tally.throttled,
            pods_failed: count(&|p| p.placed_at.is_none()),
            pods_failed_throttling: count(&|p| p.placed_at.is_none() && p.throttled_adds > 0),
            pods_with_failed_add: count(&|p| p.failed_adds > 0),
            pods_delayed: count(&|p| {
                p.placed_at
                    .is_some_and(|t| t.saturating_sub(p.created_at) > DELAYED)
            }),
            pods_placed: placed,
            pods_bound: run.pods.len() as u64,
            address_p50_ms: percentile(&waits, 0.50),
            address_p99_ms: percentile(&waits, 0.99),
            idle_addresses: run.idle,
            nodes_down: run.nodes_down,
            pods_bound_while_fragmented: while_fragmented(&|p, healed| p.created_at < healed),
            pods_placed_while_fragmented: while_fragmented(&|p, healed| {
                p.placed_at.is_some_and(|t| t < healed)
            }),
            pods_in_node_subnets: run.pods_in.map(|p| p.node_subnets),
            pods_in_eni_config_subnets: run.pods_in.map(|p| p.eni_config_subnets),
            prefix_addresses_at_end: run.held.in_prefixes,
            secondary_addresses_at_end: run.held.secondary,
            calls_by_api: run
                .tally
                .calls
                .iter()
                .map(|(action, n)| (action.to_string(), *n))
                .collect(),
            created_at_s: run
                .pods
                .iter()
                .map(|p| p.created_at.as_secs_f64())
                .collect(),
            placed_at_s: run
                .pods
                .iter()
                .filter_map(|p| p.placed_at.map(|t| t.as_secs_f64()))
                .collect(),
        }
    }
}

/// A scenario's report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The scenario.
    pub scenario: crate::scenario::Kind,
    /// Nodes.
    pub nodes: usize,
    /// Both sides ran with prefix delegation (`WARM_PREFIX_TARGET=1`).
    pub prefix_delegation: bool,
    /// Both sides ran with custom networking (pods in an ENIConfig's subnet).
    pub custom_networking: bool,
    /// ipamd.
    pub ours: Side,
    /// The Go CNI's algorithm.
    pub go_cni: Side,
    /// ipamd without subnet-scarcity mode (scarcity scenario only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ours_without_scarcity_mode: Option<Side>,
    /// Simulated time.
    pub simulated_seconds: u64,
    /// Fragmented scenario: when the subnet's strays went, in seconds from the start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healed_at_seconds: Option<u64>,
    /// Wall-clock time the run took.
    pub wall_seconds: f64,
}

impl Report {
    /// The scenario and the options it ran with, e.g. `launch, prefix delegation`.
    pub fn title(&self) -> String {
        let mut t = format!("{:?}", self.scenario).to_lowercase();
        if self.prefix_delegation {
            t.push_str(", prefix delegation");
        }
        if self.custom_networking {
            t.push_str(", custom networking");
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<Option<u64>> = (1..=100).map(Some).collect();
        assert_eq!(percentile(&v, 0.5), Some(50));
        assert_eq!(percentile(&v, 0.99), Some(99));
        assert_eq!(percentile(&[Some(7)], 0.99), Some(7));
        assert_eq!(percentile(&[], 0.5), Some(0));
    }

    #[test]
    fn pods_never_placed_count_as_forever() {
        // 40 placed at once, 60 never: the median is "never", not the placed pods' 800 ms.
        let mut v: Vec<Option<u64>> = vec![Some(800); 40];
        v.extend(vec![None; 60]);
        assert_eq!(percentile(&v, 0.5), None);
        assert_eq!(percentile(&v, 0.4), Some(800));
    }
}
