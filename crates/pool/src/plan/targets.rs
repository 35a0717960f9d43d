//! The warm-pool targets and the Go CNI's arithmetic on them: when the pool is too low and by
//! how much, when it is too high, and when an ENI may go.

use super::NodeLimits;
use super::view::Totals;
use crate::model::ADDRS_PER_PREFIX;

/// The warm-pool targets, as the Go CNI's environment variables name them.
///
/// Which of them apply is the [`PoolMode`]: WARM_IP_TARGET/MINIMUM_IP_TARGET, when either is
/// set, override the others; otherwise WARM_PREFIX_TARGET with prefix delegation, else
/// WARM_ENI_TARGET. With prefix delegation WARM_ENI_TARGET is ignored, as in the Go CNI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Targets {
    /// WARM_ENI_TARGET: keep this many ENIs' worth of addresses available (0: keep at least
    /// one). Default 1.
    pub warm_eni: u32,
    /// WARM_IP_TARGET: keep this many addresses available. Default 0 (unset).
    pub warm_ip: u32,
    /// MINIMUM_IP_TARGET: hold at least this many addresses. Default 0 (unset).
    pub minimum_ip: u32,
    /// WARM_PREFIX_TARGET: with prefix delegation, keep this many wholly free /28 prefixes.
    /// Default 0, as in the Go CNI's code (its manifest sets 1). With prefix delegation on and
    /// every target 0 the Go CNI refuses to start; we run as if this were 1 instead
    /// ([`Targets::warm_prefix_in_effect`]).
    pub warm_prefix: u32,
    /// ENABLE_PREFIX_DELEGATION: grow by /28 prefixes instead of secondary /32 addresses.
    /// Default off.
    pub prefix_delegation: bool,
}

impl Default for Targets {
    /// The Go CNI's defaults: WARM_ENI_TARGET=1, everything else unset, no prefix delegation.
    fn default() -> Self {
        Targets {
            warm_eni: 1,
            warm_ip: 0,
            minimum_ip: 0,
            warm_prefix: 0,
            prefix_delegation: false,
        }
    }
}

/// Which targets drive the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolMode {
    /// WARM_ENI_TARGET (no prefix delegation, no IP targets): grow by whole ENIs' worth of
    /// addresses, give back only whole ENIs.
    WarmEni,
    /// WARM_IP_TARGET and/or MINIMUM_IP_TARGET: grow and shrink to the address counts (by
    /// /28s with prefix delegation).
    WarmIp,
    /// WARM_PREFIX_TARGET (prefix delegation, no IP targets): keep that many free /28s.
    WarmPrefix,
}

/// How far above target the pool is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Surplus {
    /// Addresses that can go, in any units that fit.
    Addresses(u32),
    /// Wholly free prefixes that can go.
    Prefixes(u32),
}

/// How far below target the pool is, in both kinds of growth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Shortfall {
    /// Units of growth: prefixes with delegation, else addresses.
    pub units: u32,
    /// Addresses: what growth by /32s adds where EC2 refuses prefixes (with WARM_PREFIX_TARGET,
    /// whole prefixes' worth).
    pub addresses: u32,
}

impl Shortfall {
    fn same(n: u32) -> Self {
        Shortfall {
            units: n,
            addresses: n,
        }
    }

    /// This plus `pods` addresses for pods that find none.
    pub fn plus_pods(self, pods: u32, unit: u32) -> Self {
        Shortfall {
            units: self.units.saturating_add(pods.div_ceil(unit)),
            addresses: self.addresses.saturating_add(pods),
        }
    }

    /// At least `n` of each.
    pub fn at_least(self, n: u32) -> Self {
        Shortfall {
            units: self.units.max(n),
            addresses: self.addresses.max(n),
        }
    }

    pub fn is_zero(&self) -> bool {
        self.units == 0 && self.addresses == 0
    }
}

impl Targets {
    /// The mode these targets select.
    pub fn mode(&self) -> PoolMode {
        if self.warm_ip > 0 || self.minimum_ip > 0 {
            PoolMode::WarmIp
        } else if self.prefix_delegation {
            PoolMode::WarmPrefix
        } else {
            PoolMode::WarmEni
        }
    }

    /// The WARM_PREFIX_TARGET acted on: 1 instead of 0 in [`PoolMode::WarmPrefix`] (where the
    /// Go CNI would refuse the configuration), as set otherwise.
    pub fn warm_prefix_in_effect(&self) -> u32 {
        match self.mode() {
            PoolMode::WarmPrefix => self.warm_prefix.max(1),
            PoolMode::WarmEni | PoolMode::WarmIp => self.warm_prefix,
        }
    }

    /// Addresses per unit of growth: a /28 with prefix delegation, else one /32.
    pub(super) fn unit(&self) -> u32 {
        if self.prefix_delegation {
            ADDRS_PER_PREFIX
        } else {
            1
        }
    }

    /// `n` addresses rounded up to whole units (the Go CNI's rounding of IP targets with
    /// prefix delegation).
    fn round_up(&self, n: u32) -> u32 {
        n.div_ceil(self.unit()).saturating_mul(self.unit())
    }

    /// `None` when the pool is at or above target; else how much it wants, before any limit.
    pub(super) fn shortfall(&self, t: &Totals, limits: &NodeLimits) -> Option<Shortfall> {
        match self.mode() {
            PoolMode::WarmEni => {
                let per_eni = limits.secondary_ips_per_eni;
                let low = match self.warm_eni {
                    0 => t.available == 0,
                    n => t.available < n.saturating_mul(per_eni),
                };
                low.then_some(Shortfall::same(per_eni))
            }
            PoolMode::WarmIp => {
                let short = self
                    .warm_ip
                    .saturating_sub(t.available)
                    .max(self.minimum_ip.saturating_sub(t.total));
                (short > 0).then(|| Shortfall {
                    units: short.div_ceil(self.unit()),
                    addresses: short,
                })
            }
            PoolMode::WarmPrefix => {
                let wanted = self
                    .warm_prefix_in_effect()
                    .saturating_mul(ADDRS_PER_PREFIX);
                (t.available < wanted).then(|| Shortfall {
                    units: self
                        .warm_prefix_in_effect()
                        .saturating_sub(t.free_prefixes)
                        .max(1),
                    // Where prefixes are refused, /32s a prefix's worth at a time, as a
                    // prefix would come: one call per 16 pods rather than one per pod.
                    addresses: (wanted - t.available)
                        .div_ceil(ADDRS_PER_PREFIX)
                        .saturating_mul(ADDRS_PER_PREFIX),
                })
            }
        }
    }

    /// How much could be given back without falling below target; `None` in
    /// [`PoolMode::WarmEni`], which gives back only whole ENIs.
    pub(super) fn surplus(&self, t: &Totals) -> Option<Surplus> {
        match self.mode() {
            PoolMode::WarmEni => None,
            PoolMode::WarmIp => {
                let over = t
                    .available
                    .saturating_sub(self.warm_ip)
                    .min(t.total.saturating_sub(self.minimum_ip));
                (over > 0).then_some(Surplus::Addresses(over))
            }
            PoolMode::WarmPrefix => {
                let over = t.free_prefixes.saturating_sub(self.warm_prefix_in_effect());
                (over > 0).then_some(Surplus::Prefixes(over))
            }
        }
    }

    /// Whether to look for an ENI to free at all (the Go CNI's `shouldRemoveExtraENIs`).
    pub(super) fn may_free_enis(&self, t: &Totals, limits: &NodeLimits, unused_eni: bool) -> bool {
        let per_eni = limits.secondary_ips_per_eni;
        match self.mode() {
            PoolMode::WarmIp => true,
            PoolMode::WarmEni => {
                t.available >= self.warm_eni.saturating_add(1).saturating_mul(per_eni)
            }
            PoolMode::WarmPrefix => {
                let per_eni = per_eni.saturating_mul(ADDRS_PER_PREFIX);
                unused_eni
                    || t.available
                        >= self
                            .warm_prefix_in_effect()
                            .saturating_add(1)
                            .saturating_mul(per_eni)
            }
        }
    }

    /// Whether the pool would still meet every target with only `rest` (the pool without one
    /// ENI): the Go CNI's `isRequiredFor*` checks (IP targets rounded up to whole prefixes with
    /// delegation), and in every mode not below target, so that freeing an ENI never makes the
    /// next plan grow again.
    pub(super) fn met_by(&self, rest: &Totals, limits: &NodeLimits) -> bool {
        let warm_ip_met = self.warm_ip == 0 || rest.available >= self.round_up(self.warm_ip);
        let minimum_met = self.minimum_ip == 0 || rest.total >= self.round_up(self.minimum_ip);
        let warm_prefix = self.warm_prefix_in_effect();
        let warm_prefix_met =
            !self.prefix_delegation || warm_prefix == 0 || rest.free_prefixes >= warm_prefix;
        warm_ip_met && minimum_met && warm_prefix_met && self.shortfall(rest, limits).is_none()
    }
}
