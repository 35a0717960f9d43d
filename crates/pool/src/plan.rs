use std::fmt;

use crate::datastore::Pool;
use crate::time::Timestamp;

/// What the instance allows, after MAX_ENI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeLimits {
    /// ENIs the node may hold.
    pub max_enis: u32,
    /// Secondary addresses per ENI (IPv4 per ENI minus the ENI's own).
    pub secondary_ips_per_eni: u32,
    /// The pool never grows past this many addresses.
    pub max_pods: u32,
}

/// The warm-pool targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Targets {
    /// WARM_ENI_TARGET: keep this many ENIs' worth of addresses available.
    pub warm_eni: u32,
}

impl Default for Targets {
    fn default() -> Self {
        Targets { warm_eni: 1 }
    }
}

/// A step for the daemon to carry out through EC2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Assign `count` more secondary addresses to an ENI.
    AssignIps {
        /// The ENI.
        eni_id: String,
        /// How many.
        count: u32,
    },
    /// Create and attach a new ENI holding `ips` secondary addresses.
    CreateEni {
        /// How many secondary addresses it is created with.
        ips: u32,
    },
}

/// Why the pool cannot grow although it is below target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// It holds as many addresses as the node may run pods.
    MaxPods {
        /// The cap.
        max_pods: u32,
    },
    /// Every ENI is full and no further ENI may be attached.
    MaxEnis {
        /// ENIs held.
        enis: u32,
    },
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocked::MaxPods { max_pods } => {
                write!(f, "the node holds addresses for its max pods ({max_pods})")
            }
            // Worded after the Go CNI's line so operators' greps keep working.
            Blocked::MaxEnis { enis } => write!(
                f,
                "the max ENI limit is already reached ({enis} ENIs attached, every one full)"
            ),
        }
    }
}

/// The controller's next steps, or why there are none although the pool is low.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// What to ask of EC2, in order.
    pub actions: Vec<Action>,
    /// Set when the pool is below target but cannot grow.
    pub blocked: Option<Blocked>,
}

/// The Go CNI's default mode (WARM_ENI_TARGET): keep `warm_eni × secondary_ips_per_eni`
/// addresses available (with 0, keep at least one). When below, fill an existing ENI that has
/// room first (lowest device number), else create an ENI pre-loaded with a full ENI's worth,
/// never past max pods. One action per round, as the Go CNI does: the controller runs again
/// right after it.
///
/// One deliberate difference: addresses in cooldown do not count as available, since none of
/// them can serve an ADD (the Go CNI counts them and starves pods, its issue #2896).
pub fn plan(pool: &Pool, limits: &NodeLimits, targets: &Targets, now: Timestamp) -> Plan {
    let counts = pool.counts(now);
    let per_eni = limits.secondary_ips_per_eni;
    let low = match targets.warm_eni {
        0 => counts.available == 0,
        n => counts.available < n.saturating_mul(per_eni),
    };
    if !low {
        return Plan::default();
    }
    let room_for_pods = limits.max_pods.saturating_sub(counts.total);
    if room_for_pods == 0 {
        return Plan {
            actions: Vec::new(),
            blocked: Some(Blocked::MaxPods {
                max_pods: limits.max_pods,
            }),
        };
    }
    let mut enis: Vec<_> = pool.enis().collect();
    enis.sort_by_key(|e| e.device_number);
    for eni in &enis {
        let held = pool.addresses(&eni.id).count() as u32;
        let room = per_eni.saturating_sub(held).min(room_for_pods);
        if room > 0 {
            return Plan {
                actions: vec![Action::AssignIps {
                    eni_id: eni.id.clone(),
                    count: room,
                }],
                blocked: None,
            };
        }
    }
    if (enis.len() as u32) < limits.max_enis {
        return Plan {
            actions: vec![Action::CreateEni {
                ips: per_eni.min(room_for_pods),
            }],
            blocked: None,
        };
    }
    Plan {
        actions: Vec::new(),
        blocked: Some(Blocked::MaxEnis {
            enis: enis.len() as u32,
        }),
    }
}
