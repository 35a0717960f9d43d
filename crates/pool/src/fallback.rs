//! Where EC2 cannot delegate /28 prefixes for now, and when to ask again.
//!
//! A subnet with plenty of free addresses can hold no free aligned /28 once single addresses
//! are scattered through it; EC2 then refuses every prefix request there
//! (`InsufficientCidrBlocks`) while it still assigns single addresses. With prefix delegation
//! the pool then grows by secondary /32s on that subnet's ENIs (each takes a slot, as a prefix
//! would) and asks for prefixes again after a backoff; once EC2 delegates one, growth there
//! is by prefixes again and the free /32s go back as their pods leave. EC2 does not say how
//! many free /28s a subnet has, so asking is the only way to know.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::time::Timestamp;

/// First wait before prefixes are asked for again after a refusal. A subnet whose /28s are
/// all taken seldom frees one within seconds, and a fleet that launches into it asks all at
/// once: shorter first waits cost refused and throttled calls for nothing.
pub const PREFIX_RETRY_FIRST: Duration = Duration::from_secs(60);

/// Longest wait between two asks: blocks free up as other nodes give addresses back, and a
/// node should notice within minutes, while a fragmented subnet costs one refused call per
/// wait at most.
pub const PREFIX_RETRY_MAX: Duration = Duration::from_secs(300);

/// One place EC2 refused prefixes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PrefixFallback {
    /// When EC2 first refused (kept through refused retries).
    pub since: Timestamp,
    /// EC2's answer, as it gave it.
    pub reason: String,
    /// Refusals in a row.
    pub refusals: u32,
    /// When prefixes are asked for again.
    pub retry_at: Timestamp,
}

impl PrefixFallback {
    /// Whether growth here is by /32s at `now` (a retry is not yet due).
    pub fn active(&self, now: Timestamp) -> bool {
        now < self.retry_at
    }
}

/// The subnets where EC2 refused prefixes, and whether new ENIs cannot get them in any subnet
/// they may go to. Runtime facts, never persisted: after a restart prefixes are simply asked
/// for again.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PrefixFallbacks {
    /// By subnet id.
    pub subnets: BTreeMap<String, PrefixFallback>,
    /// Set when every subnet a new ENI may go to refused.
    pub new_enis: Option<PrefixFallback>,
}

/// Where a refusal or a success applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefixScope<'a> {
    /// ENIs in this subnet.
    Subnet(&'a str),
    /// ENIs yet to be created.
    NewEnis,
}

impl PrefixFallbacks {
    /// The refusal recorded for `scope`, if any (active or due for a retry).
    pub fn get(&self, scope: PrefixScope<'_>) -> Option<&PrefixFallback> {
        match scope {
            PrefixScope::Subnet(id) => self.subnets.get(id),
            PrefixScope::NewEnis => self.new_enis.as_ref(),
        }
    }

    /// Whether ENIs in `subnet` grow by /32s at `now`.
    pub fn refuses(&self, subnet: &str, now: Timestamp) -> bool {
        self.subnets.get(subnet).is_some_and(|f| f.active(now))
    }

    /// Whether new ENIs are created with /32s at `now`.
    pub fn refuses_new_enis(&self, now: Timestamp) -> bool {
        self.new_enis.as_ref().is_some_and(|f| f.active(now))
    }

    /// Records that EC2 refused prefixes in `scope` at `now`: the next ask waits twice as long
    /// as the last (from [`PREFIX_RETRY_FIRST`] up to [`PREFIX_RETRY_MAX`]).
    pub fn refused(&mut self, scope: PrefixScope<'_>, reason: &str, now: Timestamp) {
        let (since, refusals) = self
            .get(scope)
            .map_or((now, 1), |f| (f.since, f.refusals.saturating_add(1)));
        let fallback = PrefixFallback {
            since,
            reason: reason.to_string(),
            refusals,
            retry_at: now.after(backoff(refusals)),
        };
        match scope {
            PrefixScope::Subnet(id) => {
                self.subnets.insert(id.to_string(), fallback);
            }
            PrefixScope::NewEnis => self.new_enis = Some(fallback),
        }
    }

    /// Records that EC2 delegated a prefix in `scope`: growth there is by prefixes again.
    pub fn delegated(&mut self, scope: PrefixScope<'_>) {
        match scope {
            PrefixScope::Subnet(id) => {
                self.subnets.remove(id);
            }
            PrefixScope::NewEnis => self.new_enis = None,
        }
    }
}

/// The wait after `refusals` refusals in a row.
fn backoff(refusals: u32) -> Duration {
    let doublings = refusals.saturating_sub(1).min(16);
    PREFIX_RETRY_FIRST
        .saturating_mul(1 << doublings)
        .min(PREFIX_RETRY_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp(1_000_000);

    #[test]
    fn refusals_back_off_from_a_minute_to_five_minutes() {
        let mut f = PrefixFallbacks::default();
        let mut now = T0;
        let mut waits = Vec::new();
        for _ in 0..7 {
            f.refused(
                PrefixScope::Subnet("subnet-a"),
                "InsufficientCidrBlocks",
                now,
            );
            let s = &f.subnets["subnet-a"];
            waits.push(now.until(s.retry_at).as_secs());
            assert!(f.refuses("subnet-a", now));
            now = s.retry_at;
            assert!(!f.refuses("subnet-a", now), "due at retry_at");
        }
        assert_eq!(waits, [60, 120, 240, 300, 300, 300, 300]);
        assert_eq!(
            f.subnets["subnet-a"].since, T0,
            "since is the first refusal"
        );
        assert_eq!(f.subnets["subnet-a"].refusals, 7);
        assert!(!f.refuses("subnet-b", now));
    }

    #[test]
    fn a_delegated_prefix_ends_the_fallback_and_its_backoff() {
        let mut f = PrefixFallbacks::default();
        f.refused(PrefixScope::NewEnis, "no block", T0);
        f.refused(PrefixScope::Subnet("subnet-a"), "no block", T0);
        assert!(f.refuses_new_enis(T0));
        f.delegated(PrefixScope::NewEnis);
        f.delegated(PrefixScope::Subnet("subnet-a"));
        assert_eq!(f, PrefixFallbacks::default());
        f.refused(PrefixScope::Subnet("subnet-a"), "no block", T0);
        assert_eq!(f.subnets["subnet-a"].refusals, 1, "the backoff starts over");
    }
}
