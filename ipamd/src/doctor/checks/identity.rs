//! Identity and reach: IMDS, the instance type's limits, EC2, and the IAM permissions.

use cloud::{Action, Permission};

use super::super::facts::LimitsSource;
use super::super::{Facts, Finding, Group, Severity};

const G: Group = Group::Identity;

/// A refusal of a call without DryRun counts as current for this long (seconds).
const RECENT_DENIAL: u64 = 600;

/// The actions whose denial only matters in IPv6 mode or when the table lacks the type.
fn needed(facts: &Facts, action: Action) -> bool {
    match action {
        Action::DescribeInstanceTypes => {
            matches!(facts.limits, Ok((_, LimitsSource::Ec2)) | Err(_))
        }
        _ => true,
    }
}

pub(super) fn check(facts: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    out.push(match &facts.identity {
        Ok(id) => Finding::new(
            "imds",
            G,
            Severity::Ok,
            format!(
                "IMDS answers: instance {} ({}) in {}, VPC {}, primary ENI {} ({})",
                id.instance_id,
                id.instance_type,
                id.availability_zone,
                id.vpc_id,
                id.primary_eni.eni_id,
                id.primary_ip
            ),
        ),
        Err(e) => Finding::new("imds", G, Severity::Error, format!("IMDS does not answer: {e}"))
            .fix("ipamd needs IMDSv2 from the node: check the instance's metadata options (http-tokens, http-put-response-hop-limit of 2 or more for a pod), and AWS_EC2_METADATA_SERVICE_ENDPOINT if set"),
    });
    let itype = facts
        .identity
        .as_ref()
        .map(|i| i.instance_type.as_str())
        .unwrap_or("the instance type");
    out.push(match &facts.limits {
        Ok((l, source)) => Finding::new(
            "instance-limits",
            G,
            Severity::Ok,
            format!(
                "{itype}: {} ENIs × {} IPv4 addresses (from {})",
                l.max_enis,
                l.ipv4_per_eni,
                match source {
                    LimitsSource::Table => "ipamd's built-in table",
                    LimitsSource::Ec2 => Action::DescribeInstanceTypes.wire_name(),
                }
            ),
        ),
        Err(e) => Finding::new(
            "instance-limits",
            G,
            Severity::Error,
            format!("the limits of {itype} are unknown: not in ipamd's table, and {e}"),
        )
        .fix("allow ec2:DescribeInstanceTypes to the node's role, or upgrade vpc-cni to a release whose table lists this type"),
    });
    out.push(match &facts.ec2 {
        Ok(view) => Finding::new(
            "ec2",
            G,
            Severity::Ok,
            format!("EC2 answers: {} ENI(s) attached to this instance", view.enis.len()),
        ),
        Err(e) => Finding::new("ec2", G, Severity::Error, format!("EC2 cannot be asked: {e}"))
            .fix("check the node's route to the EC2 endpoint (a VPC endpoint or NAT for private subnets), AWS_EC2_ENDPOINT if set, and the node role's credentials"),
    });

    let mut denied = 0;
    let mut unknown = Vec::new();
    for (action, permission) in &facts.permissions {
        match permission {
            Permission::Allowed => {}
            Permission::Denied(message) => {
                denied += 1;
                let severity = if needed(facts, *action) {
                    Severity::Error
                } else {
                    Severity::Warning
                };
                out.push(
                    Finding::new(
                        "iam",
                        G,
                        severity,
                        format!("ec2:{action} is denied (DryRun): {message}"),
                    )
                    .fix(format!(
                        "allow ec2:{action} to the node's IAM role (the policy ipamd needs is config/iam-policy.json, as AmazonEKS_CNI_Policy)"
                    )),
                );
            }
            Permission::Unknown(e) => unknown.push(format!("ec2:{action} ({e})")),
        }
    }
    // The address calls have no DryRun: ipamd's recent refusals (/v1/ec2-refusals) tell of
    // those.
    if let Ok(refusals) = &facts.ipamd.refusals {
        let probed = |api: &str| facts.permissions.iter().any(|(a, _)| *a == api);
        for r in refusals.iter().filter(|r| !probed(&r.api)) {
            let (api, age) = (&r.api, r.seconds_ago);
            let recent = age < RECENT_DENIAL;
            if recent {
                denied += 1;
            }
            let finding = Finding::new(
                "iam",
                G,
                if recent {
                    Severity::Error
                } else {
                    Severity::Info
                },
                format!(
                    "ipamd's ec2:{api} call was refused for lack of a permission {age} s ago ({}: {}; EC2 has no DryRun for it)",
                    r.code, r.message
                ),
            );
            out.push(if recent {
                finding.fix(format!(
                    "allow ec2:{api} to the node's IAM role (the policy ipamd needs is config/iam-policy.json, as AmazonEKS_CNI_Policy)"
                ))
            } else {
                finding
            });
        }
    }
    if !unknown.is_empty() {
        out.push(
            Finding::new(
                "iam",
                G,
                Severity::Warning,
                format!("could not test {}", unknown.join("; ")),
            )
            .fix("re-run the doctor once EC2 answers; a throttled or unreachable EC2 is its own finding"),
        );
    }
    if denied == 0 && unknown.is_empty() && !facts.permissions.is_empty() {
        let actions: Vec<&str> = facts
            .permissions
            .iter()
            .map(|(a, _)| a.wire_name())
            .collect();
        out.push(Finding::new(
            "iam",
            G,
            Severity::Ok,
            format!(
                "allowed by DryRun: {} (the address calls have no DryRun: ipamd's refused calls are checked instead)",
                actions.join(", ")
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::fixture::healthy;
    use super::*;
    use introspect::json::Ec2RefusalEntry;

    #[test]
    fn a_denied_permission_is_an_error_naming_the_action() {
        let mut f = healthy();
        f.permissions[1].1 = Permission::Denied("not authorized".into());
        let action = f.permissions[1].0.wire_name();
        let found = check(&f);
        let iam: Vec<_> = found.iter().filter(|x| x.check == "iam").collect();
        assert_eq!(iam.len(), 1);
        assert_eq!(iam[0].severity, Severity::Error);
        assert!(iam[0].evidence.contains(action));
        assert!(iam[0].fix.as_deref().unwrap_or("").contains(action));
    }

    #[test]
    fn describe_instance_types_matters_only_when_the_table_lacks_the_type() {
        let mut f = healthy();
        let i = f
            .permissions
            .iter()
            .position(|(a, _)| *a == Action::DescribeInstanceTypes)
            .unwrap();
        f.permissions[i].1 = Permission::Denied("no".into());
        let sev = |f: &Facts| {
            check(f)
                .into_iter()
                .find(|x| x.check == "iam")
                .map(|x| x.severity)
        };
        assert_eq!(sev(&f), Some(Severity::Warning));
        f.limits = Err(format!("{}: denied", Action::DescribeInstanceTypes));
        assert_eq!(sev(&f), Some(Severity::Error));
    }

    #[test]
    fn recent_refusals_of_calls_without_dry_run_are_named() {
        let mut f = healthy();
        let refused = |api: Action, seconds_ago: u64| Ec2RefusalEntry {
            api: api.to_string(),
            code: "UnauthorizedOperation".into(),
            message: "You are not authorized to perform this operation.".into(),
            count: 1,
            last_refused: String::new(),
            seconds_ago,
        };
        f.ipamd.refusals = Ok(vec![
            refused(Action::AssignPrivateIpAddresses, 30),
            refused(Action::UnassignPrivateIpAddresses, 3600),
            // Probed by DryRun, which tells the present: ipamd's past refusal is not repeated.
            refused(Action::CreateNetworkInterface, 30),
        ]);
        let found = check(&f);
        let iam: Vec<_> = found.iter().filter(|x| x.check == "iam").collect();
        assert_eq!(iam.len(), 2, "{iam:#?}");
        assert_eq!(iam[0].severity, Severity::Error);
        assert!(
            iam[0]
                .evidence
                .contains(Action::AssignPrivateIpAddresses.wire_name())
                && iam[0].fix.is_some()
        );
        assert_eq!(iam[1].severity, Severity::Info);
        assert!(
            iam[1]
                .evidence
                .contains(Action::UnassignPrivateIpAddresses.wire_name())
        );
    }

    #[test]
    fn imds_or_ec2_unreachable_is_an_error() {
        let mut f = healthy();
        f.identity = Err("timed out".into());
        f.ec2 = Err("connection refused".into());
        let found = check(&f);
        for id in ["imds", "ec2"] {
            let x = found.iter().find(|x| x.check == id).unwrap();
            assert_eq!(x.severity, Severity::Error, "{id}");
            assert!(x.fix.is_some());
        }
    }
}
