//! Why a plan is what it is, in the planner's own numbers: what an operator reads to tell a
//! pool that is growing, blocked, shrinking, waiting or settled apart.

use std::fmt;
use std::time::Duration;

use super::targets::{PoolMode, Targets};
use super::view::Totals;
use super::{Blocked, NodeLimits, RELEASE_INTERVAL};
use crate::model::ADDRS_PER_PREFIX;

/// Where the pool stands against its targets at the moment of a plan: the numbers a
/// [`Reason`] quotes. `available` excludes cooling addresses and `free_prefixes` counts only
/// prefixes whose 16 addresses are all available, as the planner counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    /// The mode the targets select.
    pub mode: PoolMode,
    /// Addresses held for pods.
    pub total: u32,
    /// Addresses held by attachments.
    pub assigned: u32,
    /// Addresses free and out of cooldown.
    pub available: u32,
    /// Delegated prefixes with all 16 addresses available.
    pub free_prefixes: u32,
    /// Address slots per ENI ([`NodeLimits::secondary_ips_per_eni`]).
    pub per_eni: u32,
    /// WARM_ENI_TARGET.
    pub warm_eni: u32,
    /// WARM_IP_TARGET.
    pub warm_ip: u32,
    /// MINIMUM_IP_TARGET.
    pub minimum_ip: u32,
    /// WARM_PREFIX_TARGET as acted on ([`Targets::warm_prefix_in_effect`]).
    pub warm_prefix: u32,
}

impl Standing {
    pub(super) fn new(totals: &Totals, limits: &NodeLimits, targets: &Targets) -> Self {
        Standing {
            mode: targets.mode(),
            total: totals.total,
            assigned: totals.assigned,
            available: totals.available,
            free_prefixes: totals.free_prefixes,
            per_eni: limits.secondary_ips_per_eni,
            warm_eni: targets.warm_eni,
            warm_ip: targets.warm_ip,
            minimum_ip: targets.minimum_ip,
            warm_prefix: targets.warm_prefix_in_effect(),
        }
    }

    /// The comparison that makes the pool low (the tests of `Targets::shortfall`).
    fn low(&self) -> String {
        match self.mode {
            PoolMode::WarmEni if self.warm_eni == 0 => {
                "no address available (WARM_ENI_TARGET 0)".to_string()
            }
            PoolMode::WarmEni => format!(
                "available {} < WARM_ENI_TARGET {} × {} addresses per ENI",
                self.available, self.warm_eni, self.per_eni
            ),
            PoolMode::WarmIp => {
                let mut parts = Vec::new();
                if self.available < self.warm_ip {
                    parts.push(format!(
                        "available {} < WARM_IP_TARGET {}",
                        self.available, self.warm_ip
                    ));
                }
                if self.total < self.minimum_ip {
                    parts.push(format!(
                        "total {} < MINIMUM_IP_TARGET {}",
                        self.total, self.minimum_ip
                    ));
                }
                parts.join(" and ")
            }
            PoolMode::WarmPrefix => format!(
                "available {} < WARM_PREFIX_TARGET {} × {ADDRS_PER_PREFIX}",
                self.available, self.warm_prefix
            ),
        }
    }

    /// The comparison that makes the pool high by `surplus` (the tests of `Targets::surplus`).
    fn high(&self, surplus: u32) -> String {
        match self.mode {
            PoolMode::WarmPrefix => format!(
                "{} wholly free prefixes > WARM_PREFIX_TARGET {}: {surplus} can go",
                self.free_prefixes, self.warm_prefix
            ),
            PoolMode::WarmEni | PoolMode::WarmIp => {
                let mut s = format!(
                    "available {} > WARM_IP_TARGET {}",
                    self.available, self.warm_ip
                );
                if self.minimum_ip > 0 {
                    s.push_str(&format!(
                        " and total {} > MINIMUM_IP_TARGET {}",
                        self.total, self.minimum_ip
                    ));
                }
                s.push_str(&format!(": {surplus} addresses can go"));
                s
            }
        }
    }

    /// The WARM_ENI_TARGET test for freeing an ENI (`Targets::may_free_enis`).
    fn enis_spare(&self) -> String {
        let worth = self.available.checked_div(self.per_eni).unwrap_or(0);
        format!(
            "available {} = {worth} ENIs' worth ≥ WARM_ENI_TARGET {} + 1",
            self.available, self.warm_eni
        )
    }

    /// The comparisons that hold when the pool is at target.
    fn met(&self) -> String {
        match self.mode {
            PoolMode::WarmEni if self.warm_eni == 0 => {
                format!("available {} > 0 (WARM_ENI_TARGET 0)", self.available)
            }
            PoolMode::WarmEni => format!(
                "available {} ≥ WARM_ENI_TARGET {} × {} addresses per ENI",
                self.available, self.warm_eni, self.per_eni
            ),
            PoolMode::WarmIp => format!(
                "available {} ≥ WARM_IP_TARGET {}, total {} ≥ MINIMUM_IP_TARGET {}",
                self.available, self.warm_ip, self.total, self.minimum_ip
            ),
            PoolMode::WarmPrefix => format!(
                "available {} ≥ WARM_PREFIX_TARGET {} × {ADDRS_PER_PREFIX}, {} wholly free prefixes",
                self.available, self.warm_prefix, self.free_prefixes
            ),
        }
    }
}

/// Why the planner decided what it did. Its `Display` is one line for operators, quoting the
/// comparisons the planner made, e.g. `available 2 < WARM_IP_TARGET 5`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Below target: the plan grows.
    Low(Standing),
    /// Below target, and the pool cannot grow ([`super::Plan::blocked`]).
    Blocked {
        /// The numbers.
        standing: Standing,
        /// What stops growth.
        blocked: Blocked,
    },
    /// Above target: the plan gives back free addresses or prefixes.
    Surplus {
        /// The numbers.
        standing: Standing,
        /// Addresses (prefixes in [`PoolMode::WarmPrefix`]) above target.
        surplus: u32,
    },
    /// Above target, but the last release was less than [`RELEASE_INTERVAL`] ago.
    ReleaseWait {
        /// The numbers.
        standing: Standing,
        /// Addresses (prefixes in [`PoolMode::WarmPrefix`]) above target.
        surplus: u32,
        /// Until the next release may happen.
        next_in: Duration,
    },
    /// Above target, but nothing can be given back now: the free /32s are cooling, or the
    /// free prefixes are partly in use, cooling, or larger than the surplus.
    SurplusHeld {
        /// The numbers.
        standing: Standing,
        /// Addresses (prefixes in [`PoolMode::WarmPrefix`]) above target.
        surplus: u32,
    },
    /// With prefix delegation, EC2 delegates prefixes again where free /32s were taken
    /// instead: the plan gives those back (and whatever surplus there is besides).
    Retiring {
        /// The numbers.
        standing: Standing,
        /// Free /32s going back.
        ips: u32,
    },
    /// EC2 refused prefixes in this ENI's subnet and the backoff has ended: the plan asks for
    /// one prefix there, or gives back one free /32 to make room for it.
    Probe {
        /// The numbers.
        standing: Standing,
        /// The ENI.
        eni_id: String,
    },
    /// The plan frees this unused ENI.
    FreeEni {
        /// The numbers.
        standing: Standing,
        /// The ENI.
        eni_id: String,
    },
    /// [`PoolMode::WarmEni`] holds an ENI's worth more than WARM_ENI_TARGET + 1, but no ENI
    /// can be freed: the primary, ENIs with assigned or cooling addresses, ENIs younger than
    /// [`super::MIN_ENI_AGE`] and ENIs the targets need all stay.
    EnisHeld(Standing),
    /// Below target, but EC2 throttled the node lately ([`super::PlanContext::congested`]):
    /// the warm targets wait, and only pods that find no address make the pool grow.
    Congested(Standing),
    /// At target: nothing to do.
    AtTarget(Standing),
}

impl Reason {
    /// The numbers the reason quotes.
    pub fn standing(&self) -> &Standing {
        match self {
            Reason::Low(s) | Reason::EnisHeld(s) | Reason::Congested(s) | Reason::AtTarget(s) => s,
            Reason::Blocked { standing, .. }
            | Reason::Surplus { standing, .. }
            | Reason::ReleaseWait { standing, .. }
            | Reason::SurplusHeld { standing, .. }
            | Reason::Retiring { standing, .. }
            | Reason::Probe { standing, .. }
            | Reason::FreeEni { standing, .. } => standing,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Low(s) => f.write_str(&s.low()),
            Reason::Blocked { standing, blocked } => {
                write!(f, "blocked: {blocked}; {}", standing.low())
            }
            Reason::Surplus { standing, surplus } => f.write_str(&standing.high(*surplus)),
            Reason::ReleaseWait {
                standing,
                surplus,
                next_in,
            } => write!(
                f,
                "{}, but the last release was less than {}s ago (next in {}s)",
                standing.high(*surplus),
                RELEASE_INTERVAL.as_secs(),
                next_in.as_secs().max(1)
            ),
            Reason::SurplusHeld { standing, surplus } => write!(
                f,
                "{}, but none can go now (free /32s cooling; free prefixes cooling, partly in \
                 use or larger than the surplus)",
                standing.high(*surplus)
            ),
            Reason::Retiring { ips, .. } => write!(
                f,
                "{ips} free /32s go back: prefixes are delegated again where they stood in"
            ),
            Reason::Probe { eni_id, .. } => write!(
                f,
                "prefixes were refused in {eni_id}'s subnet and the backoff has ended: asking \
                 for one again (a slot is freed first if none is)"
            ),
            Reason::FreeEni { standing, eni_id } => match standing.mode {
                PoolMode::WarmEni => write!(f, "{}: {eni_id} is unused", standing.enis_spare()),
                PoolMode::WarmIp | PoolMode::WarmPrefix => write!(
                    f,
                    "{eni_id} is unused and the pool meets its targets without it"
                ),
            },
            Reason::EnisHeld(s) => write!(
                f,
                "{}, but no ENI can be freed (the primary, ENIs with assigned or cooling \
                 addresses, ENIs younger than a minute and ENIs the targets need stay)",
                s.enis_spare()
            ),
            Reason::Congested(s) => write!(
                f,
                "EC2 throttled the node lately: the warm targets wait, growth only for pods that \
                 find no address; {}",
                s.low()
            ),
            Reason::AtTarget(s) => write!(f, "at target: {}", s.met()),
        }
    }
}
