//! Subnet-scarcity mode: when a subnet the node takes addresses from runs low, the node keeps
//! no warm pool beyond one address and gives back what it holds idle, so the subnet's last
//! addresses go to pods rather than sit in warm pools. No controller is needed: each node
//! reads its subnets' free counts (DescribeSubnets as it starts and every 10 minutes or so, unless
//! subnet discovery's own DescribeSubnets told it; at once when EC2 says a subnet is full) and decides alone; hysteresis keeps it from flapping.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cloud::{Ec2, EniFilter, Imds};
use pool::{Targets, Timestamp};
use tracing::{info, warn};

use super::{Daemon, lock};
use crate::durability::DaemonStore;
use crate::host::HostNetwork;

/// Scarce below this share of a subnet free...
pub const ENTER_FREE: f64 = 0.10;
/// ...and plentiful again only above this one.
pub const LEAVE_FREE: f64 = 0.15;

/// How often a node reads its subnets' free counts (with a random spread of half of it, so a
/// fleet does not ask at once): a thousand nodes make under two DescribeSubnets a second,
/// well under EC2's account bucket for it. A node also checks as it starts, and EC2 saying a
/// subnet is full puts it in scarcity mode at once.
pub const CHECK_PERIOD: Duration = Duration::from_secs(600);

/// Whether the node is in scarcity mode after seeing `free` of a subnet's usable addresses
/// free, having been in it (`scarce`) or not.
pub fn next(scarce: bool, free: f64) -> bool {
    if scarce {
        free <= LEAVE_FREE
    } else {
        free < ENTER_FREE
    }
}

/// The targets in scarcity mode: one address (or prefix) warm, nothing more.
pub fn scarce_targets(base: Targets) -> Targets {
    Targets {
        warm_eni: 0,
        warm_ip: 1,
        minimum_ip: 0,
        warm_prefix: 0,
        prefix_delegation: base.prefix_delegation,
    }
}

/// Whether the node is in scarcity mode, and when it last read its subnets' free counts.
#[derive(Default)]
pub(super) struct Scarcity {
    on: AtomicBool,
    read_at: Mutex<Option<Timestamp>>,
}

impl Scarcity {
    pub(super) fn is_on(&self) -> bool {
        self.on.load(Ordering::SeqCst)
    }

    /// Sets the mode; true when that changed it.
    fn set(&self, on: bool) -> bool {
        self.on.swap(on, Ordering::SeqCst) != on
    }

    /// Whether the free counts were read in the last half period.
    fn fresh(&self, now: Timestamp) -> bool {
        lock(&self.read_at).is_some_and(|at| now < at.after(CHECK_PERIOD / 2))
    }

    fn read(&self, now: Timestamp) {
        *lock(&self.read_at) = Some(now);
    }
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// Whether the node is in scarcity mode now.
    pub fn subnet_scarce(&self) -> bool {
        self.scarcity.is_on()
    }

    /// Reads the free counts of the node's subnets (its own and its ENIs') and enters or
    /// leaves scarcity mode; skipped when subnet discovery read them in the last half period.
    /// Without SUBNET_SCARCITY_MODE it does nothing.
    pub async fn check_subnet_scarcity(&self) {
        if !self.node.scarcity_mode {
            return;
        }
        let now = self.clock.now();
        if self.scarcity.fresh(now) {
            return;
        }
        let filter = [EniFilter {
            name: "subnet-id".into(),
            values: self.own_subnets(),
        }];
        match self.ec2.describe_subnets(&filter).await {
            Ok(subnets) => self.observe_subnets(&subnets),
            Err(e) => {
                warn!(error = %e, "could not read the subnets' free addresses; scarcity mode unchanged")
            }
        }
    }

    /// The subnets the node takes addresses from: its own and its ENIs'.
    fn own_subnets(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .ledger
            .pool()
            .enis()
            .map(|e| e.subnet_id.clone())
            .collect();
        ids.push(self.node.identity.primary_eni.subnet_id.clone());
        ids.sort();
        ids.dedup();
        ids
    }

    /// Enters or leaves scarcity mode from a DescribeSubnets answer (ours, or subnet
    /// discovery's): the scarcest of the node's subnets in it decides.
    pub(super) fn observe_subnets(&self, subnets: &[cloud::Subnet]) {
        if !self.node.scarcity_mode {
            return;
        }
        let own = self.own_subnets();
        let Some((subnet, free)) = subnets
            .iter()
            .filter(|s| own.contains(&s.id))
            .map(|s| {
                let usable = s.cidr.size().saturating_sub(5).max(1);
                (s, f64::from(s.available_ips) / f64::from(usable))
            })
            .min_by(|a, b| a.1.total_cmp(&b.1))
        else {
            return;
        };
        self.scarcity.read(self.clock.now());
        let now = next(self.subnet_scarce(), free);
        if self.scarcity.set(now) {
            info!(
                subnet = %subnet.id, free_addresses = subnet.available_ips,
                free_percent = format!("{:.1}", free * 100.0),
                "subnet scarcity mode {}",
                if now { "on: one warm address, idle ones given back" } else { "off: the warm targets again" }
            );
            self.growth.kick();
        }
    }

    /// EC2 said a subnet is full: scarcity mode at once, until a check says otherwise.
    pub(super) fn subnet_full(&self) {
        if self.node.scarcity_mode && self.scarcity.set(true) {
            info!("subnet scarcity mode on: EC2 says the subnet is full");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hysteresis_keeps_the_mode_between_the_thresholds() {
        assert!(!next(false, 0.12), "not scarce yet");
        assert!(next(false, 0.05));
        assert!(next(true, 0.12), "still scarce between the thresholds");
        assert!(!next(true, 0.20));
    }

    #[test]
    fn scarce_targets_keep_one_address_warm_in_the_same_mode_of_delegation() {
        let t = scarce_targets(Targets {
            warm_eni: 2,
            minimum_ip: 10,
            prefix_delegation: true,
            ..Targets::default()
        });
        assert_eq!((t.warm_ip, t.minimum_ip, t.warm_eni), (1, 0, 0));
        assert!(t.prefix_delegation);
    }
}
