//! The EC2 actions the project names: the one place their wire names are written.
//!
//! The client, its rate limiter and metrics, vpc-sim's dispatcher, fault plans and IAM
//! policies, the fleet and `ipamd doctor` all name actions through [`Action`], so a typo is a
//! compile error rather than a bucket, a fault or a denial that silently matches nothing.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// Declares [`Action`] with each variant's wire name once.
macro_rules! actions {
    ($($(#[$doc:meta])* $variant:ident = $wire:literal,)+) => {
        /// An EC2 action, as the Query API's `Action=` parameter and IAM policies (after `ec2:`)
        /// name it.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Action {
            $($(#[$doc])* $variant,)+
        }

        impl Action {
            /// Every action, in declaration order (the order vpc-sim lists them in errors).
            pub const ALL: &'static [Action] = &[$(Action::$variant,)+];

            /// The name on the wire.
            pub const fn wire_name(self) -> &'static str {
                match self {
                    $(Action::$variant => $wire,)+
                }
            }
        }
    };
}

actions! {
    /// Instances and their ENIs (vpc-sim; the fleet's Go CNI before an attach).
    DescribeInstances = "DescribeInstances",
    /// An instance type's limits.
    DescribeInstanceTypes = "DescribeInstanceTypes",
    /// Subnets, filtered.
    DescribeSubnets = "DescribeSubnets",
    /// ENIs, by id or filtered.
    DescribeNetworkInterfaces = "DescribeNetworkInterfaces",
    /// A new ENI.
    CreateNetworkInterface = "CreateNetworkInterface",
    /// Deletes a detached ENI.
    DeleteNetworkInterface = "DeleteNetworkInterface",
    /// An ENI's attribute (ipamd: the attachment's DeleteOnTermination).
    ModifyNetworkInterfaceAttribute = "ModifyNetworkInterfaceAttribute",
    /// Attaches an ENI to an instance.
    AttachNetworkInterface = "AttachNetworkInterface",
    /// Detaches an ENI.
    DetachNetworkInterface = "DetachNetworkInterface",
    /// Secondary IPv4 addresses or /28 prefixes onto an ENI.
    AssignPrivateIpAddresses = "AssignPrivateIpAddresses",
    /// Gives secondary IPv4 addresses or /28 prefixes back.
    UnassignPrivateIpAddresses = "UnassignPrivateIpAddresses",
    /// IPv6 addresses or /80 prefixes onto an ENI.
    AssignIpv6Addresses = "AssignIpv6Addresses",
    /// Gives IPv6 addresses or /80 prefixes back.
    UnassignIpv6Addresses = "UnassignIpv6Addresses",
    /// Adds or replaces tags.
    CreateTags = "CreateTags",
    /// Removes tags.
    DeleteTags = "DeleteTags",
    /// A new security group (vpc-sim's setup).
    CreateSecurityGroup = "CreateSecurityGroup",
    /// Security groups (vpc-sim).
    DescribeSecurityGroups = "DescribeSecurityGroups",
}

impl Action {
    /// The actions ipamd's client ([`crate::Ec2`]) calls: what its IAM role must allow
    /// (`config/iam-policy.json`, checked by a test against this list).
    pub const CLIENT: &'static [Action] = &[
        Action::DescribeInstanceTypes,
        Action::DescribeSubnets,
        Action::DescribeNetworkInterfaces,
        Action::CreateNetworkInterface,
        Action::DeleteNetworkInterface,
        Action::ModifyNetworkInterfaceAttribute,
        Action::AttachNetworkInterface,
        Action::DetachNetworkInterface,
        Action::AssignPrivateIpAddresses,
        Action::UnassignPrivateIpAddresses,
        Action::AssignIpv6Addresses,
        Action::UnassignIpv6Addresses,
        Action::CreateTags,
    ];

    /// The action whose wire name is `name` (exact, case-sensitive, as EC2 matches it).
    pub fn from_wire(name: &str) -> Option<Action> {
        Action::ALL.iter().copied().find(|a| a.wire_name() == name)
    }

    /// A read-only Describe* call: EC2 gives these a request bucket of their own kind, larger
    /// and faster than the mutating calls' one.
    pub fn is_describe(self) -> bool {
        matches!(
            self,
            Action::DescribeInstances
                | Action::DescribeInstanceTypes
                | Action::DescribeSubnets
                | Action::DescribeNetworkInterfaces
                | Action::DescribeSecurityGroups
        )
    }

    /// Every wire name, comma-separated (for errors listing what is known).
    pub fn known() -> String {
        Action::ALL
            .iter()
            .map(|a| a.wire_name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire_name())
    }
}

impl AsRef<str> for Action {
    fn as_ref(&self) -> &str {
        self.wire_name()
    }
}

/// So an [`Action`] goes where an API name is taken as a string (e.g. [`crate::CloudError`]).
impl From<Action> for String {
    fn from(a: Action) -> String {
        a.wire_name().to_string()
    }
}

impl PartialEq<str> for Action {
    fn eq(&self, other: &str) -> bool {
        self.wire_name() == other
    }
}

impl PartialEq<&str> for Action {
    fn eq(&self, other: &&str) -> bool {
        self.wire_name() == *other
    }
}

/// A name that is no EC2 action the project knows.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{0:?} is not an EC2 action vpc-cni knows; known: {known}", known = Action::known())]
pub struct UnknownAction(pub String);

impl FromStr for Action {
    type Err = UnknownAction;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Action::from_wire(s).ok_or_else(|| UnknownAction(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn wire_names_round_trip_and_are_unique() {
        let names: BTreeSet<&str> = Action::ALL.iter().map(|a| a.wire_name()).collect();
        assert_eq!(names.len(), Action::ALL.len());
        for a in Action::ALL {
            assert_eq!(a.to_string().parse::<Action>(), Ok(*a));
        }
        let err = "AssignPrivateIpAddress".parse::<Action>().unwrap_err();
        assert!(
            err.to_string().contains("known: DescribeInstances"),
            "{err}"
        );
        assert_eq!(Action::from_wire("createtags"), None, "EC2 matches exactly");
    }

    #[test]
    fn describe_calls_are_told_apart_by_kind() {
        for a in Action::ALL {
            assert_eq!(
                a.is_describe(),
                a.wire_name().starts_with("Describe"),
                "{a}"
            );
        }
    }

    /// `config/iam-policy.json` (the policy the project ships for ipamd's role) allows exactly
    /// the actions ipamd's client calls: every one of [`Action::CLIENT`] is in an `Allow`
    /// statement as `ec2:<action>`, and the policy allows nothing else (least privilege). The
    /// resources each statement names are not checked here.
    #[test]
    fn the_shipped_iam_policy_allows_exactly_what_the_client_calls() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/iam-policy.json");
        let text = std::fs::read_to_string(path).expect("config/iam-policy.json is readable");
        let doc: serde_json::Value = serde_json::from_str(&text).expect("the policy is JSON");
        let statements = doc["Statement"].as_array().expect("a Statement list");
        let mut allowed = BTreeSet::new();
        for s in statements {
            assert_eq!(s["Effect"], "Allow", "only Allow statements: {s}");
            let actions = match &s["Action"] {
                serde_json::Value::String(one) => vec![one.as_str()],
                serde_json::Value::Array(many) => many.iter().filter_map(|v| v.as_str()).collect(),
                other => panic!("Action is neither a string nor a list: {other}"),
            };
            for a in actions {
                let name = a.strip_prefix("ec2:").expect("EC2 actions only");
                let action = name.parse::<Action>().expect("an action vpc-cni knows");
                allowed.insert(action);
            }
        }
        let called: BTreeSet<Action> = Action::CLIENT.iter().copied().collect();
        assert_eq!(allowed, called, "policy (left) vs client calls (right)");
    }
}
