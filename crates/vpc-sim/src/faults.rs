//! Fault injection for the EC2 API: a plan saying how often calls are throttled, fail with a
//! server error, answer slowly or lose their connection, and the injector that rolls the dice.
//!
//! Each EC2 request the plan applies to (every action, or only those in `actions`) gets two
//! draws from the injector's seeded RNG before the model is touched:
//!
//! * one for **slow**: with `slow_pct` %, the answer waits `slow_ms` first (the model is not
//!   locked meanwhile, so other calls go on);
//! * one for the **outcome**: `throttle_pct`, `server_error_pct`, `drop_pct` and
//!   `drop_after_pct` are adjacent bands of that one draw (so their sum is at most 100), and
//!   the rest is an ordinary answer.
//!
//! | outcome      | what the client gets                                              | model   |
//! |--------------|-------------------------------------------------------------------|---------|
//! | throttle     | HTTP 503, `RequestLimitExceeded` / "Request limit exceeded."      | unchanged |
//! | server_error | HTTP 500 `InternalError` or 503 `Unavailable` (a coin toss)       | unchanged |
//! | drop         | the connection closes with no HTTP response at all                | unchanged |
//! | drop_after   | the call IS applied, then the connection closes with no response   | changed |
//!
//! The same seed and the same sequence of calls give the same faults. Counters of what was
//! injected, in all and by action, accumulate from the start and are not reset by a new plan.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use cloud::Action;

use crate::rand::Rng;

/// The longest `slow_ms` accepted: longer than any client's timeout is already a hang.
pub const MAX_SLOW_MS: u64 = 600_000;

/// A fault plan. `Faults::default()` (JSON `{}`) injects nothing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// % of calls answered HTTP 503 `RequestLimitExceeded`, EC2's throttling error.
    pub throttle_pct: f64,
    /// % of calls answered HTTP 500 `InternalError` or 503 `Unavailable`.
    pub server_error_pct: f64,
    /// % of calls whose connection is closed without a response, the call not applied.
    pub drop_pct: f64,
    /// % of calls applied to the model, then their connection closed without a response.
    pub drop_after_pct: f64,
    /// % of calls delayed by `slow_ms` before anything else happens to them.
    pub slow_pct: f64,
    /// The delay of a slow call, ms.
    pub slow_ms: u64,
    /// Only these EC2 actions are faulted; `None` faults every request.
    pub actions: Option<Vec<String>>,
    /// Reseeds the injector's RNG when the plan is installed, for a reproducible run.
    pub seed: Option<u64>,
}

/// The plan's fields, as named in JSON.
const FIELDS: &[&str] = &[
    "throttle_pct",
    "server_error_pct",
    "drop_pct",
    "drop_after_pct",
    "slow_pct",
    "slow_ms",
    "actions",
    "seed",
];

/// The fields that share the outcome draw.
const OUTCOME_FIELDS: [&str; 4] = [
    "throttle_pct",
    "server_error_pct",
    "drop_pct",
    "drop_after_pct",
];

/// A plan that cannot be used: which fields, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{why}", if fields.is_empty() { String::new() } else { format!("{}: ", fields.join(" + ")) })]
pub struct FaultError {
    /// The fields at fault (JSON names); empty when the whole document is wrong.
    pub fields: Vec<String>,
    /// What is wrong.
    pub why: String,
}

impl FaultError {
    fn field(field: &str, why: impl Into<String>) -> Self {
        Self {
            fields: vec![field.to_string()],
            why: why.into(),
        }
    }
}

impl Faults {
    /// Parses a JSON plan (a `PUT /_sim/faults` body) and validates it. Errors name the field:
    /// an unknown one, one of the wrong type, or a value out of range. `null` means the default.
    pub fn from_json(body: &[u8]) -> Result<Self, FaultError> {
        let doc: Value = serde_json::from_slice(body).map_err(|e| FaultError {
            fields: vec![],
            why: format!("not JSON: {e}"),
        })?;
        let Value::Object(map) = doc else {
            return Err(FaultError {
                fields: vec![],
                why: "expected a JSON object such as {\"throttle_pct\": 30}".into(),
            });
        };
        let mut plan = Faults::default();
        for (key, value) in map {
            if value.is_null() {
                continue;
            }
            let typed = |what: &str| {
                let key = key.clone();
                let shown = value.to_string();
                let what = what.to_string();
                move |_: serde_json::Error| {
                    FaultError::field(&key, format!("{shown} is not {what}"))
                }
            };
            match key.as_str() {
                "throttle_pct" => {
                    plan.throttle_pct = f64::deserialize(&value).map_err(typed("a number"))?
                }
                "server_error_pct" => {
                    plan.server_error_pct = f64::deserialize(&value).map_err(typed("a number"))?
                }
                "drop_pct" => {
                    plan.drop_pct = f64::deserialize(&value).map_err(typed("a number"))?
                }
                "drop_after_pct" => {
                    plan.drop_after_pct = f64::deserialize(&value).map_err(typed("a number"))?
                }
                "slow_pct" => {
                    plan.slow_pct = f64::deserialize(&value).map_err(typed("a number"))?
                }
                "slow_ms" => {
                    plan.slow_ms =
                        u64::deserialize(&value).map_err(typed("a whole number of milliseconds"))?
                }
                "actions" => {
                    plan.actions = Some(
                        Vec::<String>::deserialize(&value)
                            .map_err(typed("a list of EC2 action names"))?,
                    )
                }
                "seed" => {
                    plan.seed = Some(
                        u64::deserialize(&value).map_err(typed("an unsigned 64-bit integer"))?,
                    )
                }
                other => {
                    return Err(FaultError::field(
                        other,
                        format!("unknown field; known: {}", FIELDS.join(", ")),
                    ));
                }
            }
        }
        plan.validate()?;
        Ok(plan)
    }

    /// Checks ranges: percentages within 0..=100 and the outcome bands summing to at most 100,
    /// a delay for slow calls, known action names.
    pub fn validate(&self) -> Result<(), FaultError> {
        for (field, pct) in self.percentages() {
            if !(0.0..=100.0).contains(&pct) {
                return Err(FaultError::field(
                    field,
                    format!("{pct} is not a percentage from 0 to 100"),
                ));
            }
        }
        let sum = self.outcome_pcts().iter().sum::<f64>();
        if sum > 100.0 {
            return Err(FaultError {
                fields: OUTCOME_FIELDS.iter().map(|f| f.to_string()).collect(),
                why: format!(
                    "{sum} in all, more than 100 (one draw picks at most one of them per call)"
                ),
            });
        }
        if self.slow_pct > 0.0 && self.slow_ms == 0 {
            return Err(FaultError::field(
                "slow_ms",
                format!(
                    "0, but slow_pct is {}: give the delay of a slow call",
                    self.slow_pct
                ),
            ));
        }
        if self.slow_ms > MAX_SLOW_MS {
            return Err(FaultError::field(
                "slow_ms",
                format!("{} is more than {MAX_SLOW_MS}", self.slow_ms),
            ));
        }
        if let Some(actions) = &self.actions {
            if actions.is_empty() {
                return Err(FaultError::field(
                    "actions",
                    "an empty list would fault nothing; leave it out (or null) to fault every action",
                ));
            }
            if let Some(bad) = actions.iter().find(|a| Action::from_wire(a).is_none()) {
                return Err(FaultError::field(
                    "actions",
                    format!(
                        "{bad:?} is not an EC2 action vpc-sim serves; known: {}",
                        Action::known()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether this plan can inject anything.
    pub fn is_active(&self) -> bool {
        self.percentages().iter().any(|(_, p)| *p > 0.0)
    }

    /// Whether calls of `action` are subject to the plan.
    pub fn applies_to(&self, action: &str) -> bool {
        self.actions
            .as_ref()
            .is_none_or(|list| list.iter().any(|a| a == action))
    }

    fn outcome_pcts(&self) -> [f64; 4] {
        [
            self.throttle_pct,
            self.server_error_pct,
            self.drop_pct,
            self.drop_after_pct,
        ]
    }

    fn percentages(&self) -> [(&'static str, f64); 5] {
        let o = self.outcome_pcts();
        [
            (OUTCOME_FIELDS[0], o[0]),
            (OUTCOME_FIELDS[1], o[1]),
            (OUTCOME_FIELDS[2], o[2]),
            (OUTCOME_FIELDS[3], o[3]),
            ("slow_pct", self.slow_pct),
        ]
    }
}

/// Which server error a call gets: EC2 sends both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerError {
    /// HTTP 500 `InternalError`.
    Internal,
    /// HTTP 503 `Unavailable`.
    Unavailable,
}

/// What happens to one call after its delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The ordinary answer.
    Answer,
    /// `RequestLimitExceeded`; the model is not touched.
    Throttle,
    /// A 5xx; the model is not touched.
    ServerError(ServerError),
    /// No response; the model is not touched.
    Drop,
    /// The call is applied, then no response.
    DropAfter,
}

/// The injector's verdict on one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Delay before anything else, ms (0: none).
    pub slow_ms: u64,
    /// What follows.
    pub outcome: Outcome,
}

impl Decision {
    /// No fault.
    pub const NONE: Decision = Decision {
        slow_ms: 0,
        outcome: Outcome::Answer,
    };
}

/// Faults injected, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultCounts {
    /// Calls a plan applied to (active plan, action selected), faulted or not.
    pub eligible: u64,
    /// Throttled calls.
    pub throttle: u64,
    /// Calls answered with a 5xx.
    pub server_error: u64,
    /// Delayed calls (they may have been faulted otherwise too).
    pub slow: u64,
    /// Connections dropped before the call was applied.
    pub drop: u64,
    /// Connections dropped after the call was applied.
    pub drop_after: u64,
}

impl FaultCounts {
    fn count(&mut self, d: &Decision) {
        self.eligible += 1;
        if d.slow_ms > 0 {
            self.slow += 1;
        }
        match d.outcome {
            Outcome::Answer => {}
            Outcome::Throttle => self.throttle += 1,
            Outcome::ServerError(_) => self.server_error += 1,
            Outcome::Drop => self.drop += 1,
            Outcome::DropAfter => self.drop_after += 1,
        }
    }
}

/// What `GET /_sim/faults` shows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultReport {
    /// The plan in force.
    pub plan: Faults,
    /// Everything injected since the simulator started.
    pub injected: FaultCounts,
    /// The same, by EC2 action.
    pub by_action: BTreeMap<String, FaultCounts>,
}

/// The plan in force, its RNG and the counters.
#[derive(Debug)]
pub struct Injector {
    plan: Faults,
    rng: Rng,
    injected: FaultCounts,
    by_action: BTreeMap<String, FaultCounts>,
}

impl Default for Injector {
    fn default() -> Self {
        Self::new(Rng::from_entropy())
    }
}

impl Injector {
    /// An injector with no plan, drawing from `rng` until a plan brings a seed.
    pub fn new(rng: Rng) -> Self {
        Self {
            plan: Faults::default(),
            rng,
            injected: FaultCounts::default(),
            by_action: BTreeMap::new(),
        }
    }

    /// Validates and installs `plan`, reseeding when it has a seed. Counters carry on.
    pub fn set(&mut self, plan: Faults) -> Result<(), FaultError> {
        plan.validate()?;
        if let Some(seed) = plan.seed {
            self.rng = Rng::seeded(seed);
        }
        self.plan = plan;
        Ok(())
    }

    /// The plan in force.
    pub fn plan(&self) -> &Faults {
        &self.plan
    }

    /// Decides the fate of one call of `action` and counts it. Calls the plan does not apply
    /// to draw nothing, so they do not shift the faults of the others.
    pub fn decide(&mut self, action: &str) -> Decision {
        let plan = &self.plan;
        if !plan.is_active() || !plan.applies_to(action) {
            return Decision::NONE;
        }
        let slow = self.rng.unit() * 100.0 < plan.slow_pct;
        let roll = self.rng.unit() * 100.0;
        let [throttle, server, drop, drop_after] = plan.outcome_pcts();
        let outcome = if roll < throttle {
            Outcome::Throttle
        } else if roll < throttle + server {
            Outcome::ServerError(if self.rng.next_u64() & 1 == 0 {
                ServerError::Internal
            } else {
                ServerError::Unavailable
            })
        } else if roll < throttle + server + drop {
            Outcome::Drop
        } else if roll < throttle + server + drop + drop_after {
            Outcome::DropAfter
        } else {
            Outcome::Answer
        };
        let d = Decision {
            slow_ms: if slow { plan.slow_ms } else { 0 },
            outcome,
        };
        self.injected.count(&d);
        self.by_action
            .entry(action.to_string())
            .or_default()
            .count(&d);
        d
    }

    /// `n` hex digits from the injector's RNG (request ids of faulted calls, which must not
    /// draw from the model's).
    pub fn random_hex(&mut self, n: usize) -> String {
        self.rng.hex(n)
    }

    /// The plan and the counters.
    pub fn report(&self) -> FaultReport {
        FaultReport {
            plan: self.plan.clone(),
            injected: self.injected.clone(),
            by_action: self.by_action.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(json: &str) -> Result<Faults, FaultError> {
        Faults::from_json(json.as_bytes())
    }

    #[test]
    fn empty_and_zero_plans_are_off() {
        for json in [
            "{}",
            r#"{"throttle_pct": 0, "slow_ms": 5}"#,
            r#"{"seed": null}"#,
        ] {
            let p = plan(json).unwrap();
            assert!(!p.is_active(), "{json}");
        }
        let mut i = Injector::new(Rng::seeded(1));
        assert_eq!(
            i.decide(cloud::Action::DescribeInstances.wire_name()),
            Decision::NONE
        );
        assert_eq!(i.report().injected, FaultCounts::default());
    }

    #[test]
    fn bad_plans_name_the_field() {
        for (json, needle) in [
            (
                r#"{"throttle_pct": 150}"#,
                "throttle_pct: 150 is not a percentage",
            ),
            (
                r#"{"slow_pct": -1, "slow_ms": 5}"#,
                "slow_pct: -1 is not a percentage",
            ),
            (r#"{"drop_pct": "5"}"#, "drop_pct: \"5\" is not a number"),
            (r#"{"slow_ms": -3}"#, "slow_ms: -3 is not a whole number"),
            (r#"{"slow_pct": 10}"#, "slow_ms: 0, but slow_pct is 10"),
            (
                r#"{"slow_ms": 600001}"#,
                "slow_ms: 600001 is more than 600000",
            ),
            (
                r#"{"throttle_percent": 5}"#,
                "throttle_percent: unknown field; known: throttle_pct",
            ),
            (r#"{"actions": []}"#, "actions: an empty list"),
            (
                &format!(r#"{{"actions": "{}"}}"#, cloud::Action::CreateTags),
                &format!("actions: \"{}\" is not a list", cloud::Action::CreateTags),
            ),
            (
                r#"{"actions": ["CreateTag"]}"#,
                "actions: \"CreateTag\" is not an EC2 action",
            ),
            (r#"{"seed": -1}"#, "seed: -1 is not an unsigned"),
            (
                r#"{"throttle_pct": 60, "drop_after_pct": 50}"#,
                "throttle_pct + server_error_pct + drop_pct + drop_after_pct: 110 in all",
            ),
            ("[1]", "expected a JSON object"),
            ("{", "not JSON"),
        ] {
            let e = plan(json).unwrap_err().to_string();
            assert!(e.contains(needle), "{json}: {e}");
        }
    }

    #[test]
    fn outcomes_follow_the_bands() {
        let mut i = Injector::new(Rng::seeded(0));
        i.set(plan(r#"{"throttle_pct": 100}"#).unwrap()).unwrap();
        assert_eq!(
            i.decide(cloud::Action::CreateTags.wire_name()).outcome,
            Outcome::Throttle
        );
        i.set(plan(r#"{"drop_pct": 100, "slow_pct": 100, "slow_ms": 7}"#).unwrap())
            .unwrap();
        assert_eq!(
            i.decide(cloud::Action::CreateTags.wire_name()),
            Decision {
                slow_ms: 7,
                outcome: Outcome::Drop
            }
        );
        i.set(plan(r#"{"drop_after_pct": 100}"#).unwrap()).unwrap();
        assert_eq!(
            i.decide(cloud::Action::CreateTags.wire_name()).outcome,
            Outcome::DropAfter
        );
        i.set(plan(r#"{"server_error_pct": 100}"#).unwrap())
            .unwrap();
        let kinds: Vec<Outcome> = (0..40)
            .map(|_| i.decide(cloud::Action::CreateTags.wire_name()).outcome)
            .collect();
        for k in [ServerError::Internal, ServerError::Unavailable] {
            assert!(
                kinds.contains(&Outcome::ServerError(k)),
                "{k:?} never drawn"
            );
        }
        let r = i.report();
        assert_eq!(
            (
                r.injected.eligible,
                r.injected.throttle,
                r.injected.drop,
                r.injected.slow
            ),
            (43, 1, 1, 1)
        );
        assert_eq!((r.injected.drop_after, r.injected.server_error), (1, 40));
        assert_eq!(
            r.by_action[cloud::Action::CreateTags.wire_name()],
            r.injected
        );
    }

    #[test]
    fn the_actions_filter_selects_calls_and_draws_nothing_for_others() {
        let mut a = Injector::new(Rng::seeded(9));
        let mut b = Injector::new(Rng::seeded(9));
        let p = plan(&format!(
            r#"{{"throttle_pct": 50, "actions": ["{}"]}}"#,
            cloud::Action::AssignPrivateIpAddresses
        ))
        .unwrap();
        a.set(p.clone()).unwrap();
        b.set(p).unwrap();
        let mut seq_a = Vec::new();
        let mut seq_b = Vec::new();
        for _ in 0..50 {
            assert_eq!(
                a.decide(cloud::Action::DescribeInstances.wire_name()),
                Decision::NONE
            );
            seq_a.push(a.decide(cloud::Action::AssignPrivateIpAddresses.wire_name()));
            seq_b.push(b.decide(cloud::Action::AssignPrivateIpAddresses.wire_name()));
        }
        assert_eq!(seq_a, seq_b);
        let r = a.report();
        assert!(
            !r.by_action
                .contains_key(cloud::Action::DescribeInstances.wire_name())
        );
        assert_eq!(r.injected.eligible, 50);
    }

    #[test]
    fn a_seed_in_the_plan_makes_a_run_reproducible() {
        let p = plan(r#"{"throttle_pct": 30, "seed": 42}"#).unwrap();
        let run = |rng| {
            let mut i = Injector::new(rng);
            i.set(p.clone()).unwrap();
            (0..200)
                .map(|_| i.decide(cloud::Action::CreateTags.wire_name()))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(Rng::seeded(1)), run(Rng::seeded(2)));
    }

    #[test]
    fn the_plan_round_trips_through_json() {
        let p = plan(&format!(
            r#"{{"throttle_pct": 30, "server_error_pct": 5, "slow_pct": 10, "slow_ms": 2000,
                "drop_pct": 5, "drop_after_pct": 1.5, "actions": ["{}"], "seed": 3}}"#,
            cloud::Action::CreateNetworkInterface
        ))
        .unwrap();
        let json = serde_json::to_vec(&p).unwrap();
        assert_eq!(Faults::from_json(&json).unwrap(), p);
        assert_eq!(p.drop_after_pct, 1.5);
    }
}
