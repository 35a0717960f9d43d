//! IAM denial for the EC2 API: a policy naming the EC2 actions the caller is not allowed, so a
//! client (and a troubleshooting command such as `ipamd doctor`) can be tested against a node
//! role that lacks a permission.
//!
//! A denied call is answered the way EC2 answers a missing permission: HTTP 403
//! `UnauthorizedOperation` ([`crate::ec2::inject::unauthorized`]). It is decided before the
//! model is locked, so the model (and the ids it hands out next) stays as if the call had never
//! come. EC2 checks the permission before it looks at `DryRun`, so a dry run of a denied action
//! is denied too. A fault plan comes first: a call it throttles or fails never reaches the
//! policy, and its `drop_after` loses a denial's answer like any other. Denials are counted, in
//! all and by action, from the start; a new policy does not reset the counters.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use cloud::Action;

use crate::rand::Rng;

/// The policy's fields, as named in JSON.
const FIELDS: &[&str] = &["deny"];

/// An IAM policy. `IamPolicy::default()` (JSON `{}` or `{"deny": []}`) allows every action.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IamPolicy {
    /// EC2 actions answered `UnauthorizedOperation`; kept sorted and without repeats so the
    /// policy reads back the same however it was written.
    pub deny: BTreeSet<String>,
}

/// A policy that cannot be used: which field, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{why}", field.as_ref().map(|f| format!("{f}: ")).unwrap_or_default())]
pub struct IamError {
    /// The field at fault (its JSON name); `None` when the whole document is wrong.
    pub field: Option<String>,
    /// What is wrong.
    pub why: String,
}

impl IamError {
    fn field(field: &str, why: impl Into<String>) -> Self {
        Self {
            field: Some(field.to_string()),
            why: why.into(),
        }
    }

    fn document(why: impl Into<String>) -> Self {
        Self {
            field: None,
            why: why.into(),
        }
    }
}

impl IamPolicy {
    /// Parses a JSON policy (a `PUT /_sim/iam` body) and validates it. Errors name the field: an
    /// unknown one, one of the wrong type, or an action vpc-sim does not serve (a typo would
    /// otherwise deny nothing and the test would pass for the wrong reason). `null` means the
    /// default.
    pub fn from_json(body: &[u8]) -> Result<Self, IamError> {
        let doc: Value = serde_json::from_slice(body)
            .map_err(|e| IamError::document(format!("not JSON: {e}")))?;
        let Value::Object(map) = doc else {
            return Err(IamError::document(format!(
                "expected a JSON object such as {{\"deny\": [\"{}\"]}}",
                cloud::Action::AssignPrivateIpAddresses
            )));
        };
        let mut policy = IamPolicy::default();
        for (key, value) in map {
            if value.is_null() {
                continue;
            }
            match key.as_str() {
                "deny" => {
                    let names = Vec::<String>::deserialize(&value).map_err(|_| {
                        IamError::field(
                            "deny",
                            format!("{value} is not a list of EC2 action names"),
                        )
                    })?;
                    policy.deny = names.into_iter().collect();
                }
                other => {
                    return Err(IamError::field(
                        other,
                        format!("unknown field; known: {}", FIELDS.join(", ")),
                    ));
                }
            }
        }
        policy.validate()?;
        Ok(policy)
    }

    /// Checks that every denied action is one vpc-sim serves.
    pub fn validate(&self) -> Result<(), IamError> {
        match self.deny.iter().find(|a| Action::from_wire(a).is_none()) {
            Some(bad) => Err(IamError::field(
                "deny",
                format!(
                    "{bad:?} is not an EC2 action vpc-sim serves; known: {}",
                    Action::known()
                ),
            )),
            None => Ok(()),
        }
    }

    /// Whether calls of `action` are denied.
    pub fn denies(&self, action: &str) -> bool {
        self.deny.contains(action)
    }
}

/// What `GET /_sim/iam` shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IamReport {
    /// The policy in force.
    pub policy: IamPolicy,
    /// Calls denied since the simulator started.
    pub denied: u64,
    /// The same, by EC2 action.
    pub by_action: BTreeMap<String, u64>,
}

/// The policy in force, the counters, and an RNG for the request ids of denied calls.
#[derive(Debug)]
pub struct Iam {
    policy: IamPolicy,
    denied: u64,
    by_action: BTreeMap<String, u64>,
    rng: Rng,
}

impl Default for Iam {
    fn default() -> Self {
        Self::new(Rng::from_entropy())
    }
}

impl Iam {
    /// Allows everything; request ids of denied calls come from `rng`.
    pub fn new(rng: Rng) -> Self {
        Self {
            policy: IamPolicy::default(),
            denied: 0,
            by_action: BTreeMap::new(),
            rng,
        }
    }

    /// Validates and installs `policy`. Counters carry on.
    pub fn set(&mut self, policy: IamPolicy) -> Result<(), IamError> {
        policy.validate()?;
        self.policy = policy;
        Ok(())
    }

    /// Whether one call of `action` is denied; a denial is counted.
    pub fn check(&mut self, action: &str) -> bool {
        if !self.policy.denies(action) {
            return false;
        }
        self.denied += 1;
        *self.by_action.entry(action.to_string()).or_default() += 1;
        true
    }

    /// `n` hex digits for a denied call's request id: drawn here, not from the model's RNG, so
    /// the ids the model hands out next are the same as without the denial.
    pub fn random_hex(&mut self, n: usize) -> String {
        self.rng.hex(n)
    }

    /// The policy and the counters.
    pub fn report(&self) -> IamReport {
        IamReport {
            policy: self.policy.clone(),
            denied: self.denied,
            by_action: self.by_action.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(json: &str) -> Result<IamPolicy, IamError> {
        IamPolicy::from_json(json.as_bytes())
    }

    #[test]
    fn empty_policies_allow_everything() {
        for json in ["{}", r#"{"deny": []}"#, r#"{"deny": null}"#] {
            let p = policy(json).unwrap();
            assert_eq!(p, IamPolicy::default(), "{json}");
            assert!(
                Action::ALL.iter().all(|a| !p.denies(a.wire_name())),
                "{json}"
            );
        }
    }

    #[test]
    fn a_policy_denies_exactly_the_named_actions() {
        let (tags, assign) = (
            cloud::Action::CreateTags,
            cloud::Action::AssignPrivateIpAddresses,
        );
        let p = policy(&format!(r#"{{"deny": ["{tags}", "{assign}", "{tags}"]}}"#)).unwrap();
        assert_eq!(
            p.deny.iter().collect::<Vec<_>>(),
            [
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
                cloud::Action::CreateTags.wire_name()
            ]
        );
        assert!(p.denies(cloud::Action::CreateTags.wire_name()));
        assert!(!p.denies(cloud::Action::DescribeInstances.wire_name()));
        let json = serde_json::to_vec(&p).unwrap();
        assert_eq!(IamPolicy::from_json(&json).unwrap(), p);
    }

    #[test]
    fn bad_policies_name_the_problem() {
        let tags = cloud::Action::CreateTags;
        for (json, needle) in [
            (
                r#"{"deny": ["AssignPrivateIpAddress"]}"#,
                "deny: \"AssignPrivateIpAddress\" is not an EC2 action vpc-sim serves; known: DescribeInstances",
            ),
            (
                &format!(r#"{{"deny": ["ec2:{tags}"]}}"#),
                &format!("deny: \"ec2:{tags}\" is not an EC2 action"),
            ),
            (
                &format!(r#"{{"deny": "{tags}"}}"#),
                &format!("deny: \"{tags}\" is not a list of EC2 action names"),
            ),
            (r#"{"deny": [1]}"#, "deny: [1] is not a list"),
            (
                &format!(r#"{{"allow": ["{tags}"]}}"#),
                "allow: unknown field; known: deny",
            ),
            ("[1]", "expected a JSON object"),
            ("", "not JSON"),
        ] {
            let e = policy(json).unwrap_err().to_string();
            assert!(e.contains(needle), "{json}: {e}");
        }
    }

    #[test]
    fn denials_are_counted_by_action_across_policies() {
        let mut iam = Iam::new(Rng::seeded(1));
        assert!(!iam.check(cloud::Action::CreateTags.wire_name()));
        let (tags, untag) = (cloud::Action::CreateTags, cloud::Action::DeleteTags);
        iam.set(policy(&format!(r#"{{"deny": ["{tags}", "{untag}"]}}"#)).unwrap())
            .unwrap();
        assert!(iam.check(cloud::Action::CreateTags.wire_name()));
        assert!(iam.check(cloud::Action::CreateTags.wire_name()));
        assert!(iam.check(cloud::Action::DeleteTags.wire_name()));
        assert!(!iam.check(cloud::Action::DescribeInstances.wire_name()));
        iam.set(IamPolicy::default()).unwrap();
        assert!(!iam.check(cloud::Action::CreateTags.wire_name()));
        let r = iam.report();
        assert_eq!(r.policy, IamPolicy::default());
        assert_eq!(r.denied, 3);
        assert_eq!(
            r.by_action,
            BTreeMap::from([
                (cloud::Action::CreateTags.wire_name().to_string(), 2),
                (cloud::Action::DeleteTags.wire_name().to_string(), 1)
            ])
        );
    }

    #[test]
    fn a_bad_policy_leaves_the_old_one() {
        let mut iam = Iam::new(Rng::seeded(1));
        let good = policy(&format!(r#"{{"deny": ["{}"]}}"#, cloud::Action::CreateTags)).unwrap();
        iam.set(good.clone()).unwrap();
        let bad = IamPolicy {
            deny: BTreeSet::from(["Nope".to_string()]),
        };
        assert!(iam.set(bad).is_err());
        assert_eq!(iam.report().policy, good);
    }
}
