//! Capacity: room in the subnets against the warm targets, the instance's ENI and address
//! limits, max pods against what the node can address, paused growth, EC2 errors.

use std::collections::{BTreeMap, BTreeSet};

use introspect::json::PoolStatus;

use super::super::{Facts, Finding, Group, Severity};

const G: Group = Group::Capacity;

/// Host-network pods (kube-proxy, aws-node) the max-pods formula counts but never addresses.
const HOST_NETWORK_PODS: u64 = 2;

/// Addresses ipamd wants free beyond what pods hold, by its targets.
fn warm_need(pool: &PoolStatus) -> u64 {
    let t = &pool.targets;
    if t.warm_ip > 0 || t.minimum_ip > 0 {
        u64::from(
            t.warm_ip
                .max(t.minimum_ip.saturating_sub(pool.totals.assigned)),
        )
    } else if t.prefix_delegation {
        16 * u64::from(t.warm_prefix.max(1))
    } else {
        u64::from(pool.limits.ips_per_eni) * u64::from(t.warm_eni.max(1))
    }
}

fn subnets(facts: &Facts) -> Vec<Finding> {
    let (Ok(ec2), Ok(identity)) = (&facts.ec2, &facts.identity) else {
        return vec![];
    };
    let mut used: BTreeSet<&str> = ec2.enis.iter().map(|e| e.subnet_id.as_str()).collect();
    used.insert(&identity.primary_eni.subnet_id);
    if facts.config.subnet_discovery {
        used.extend(
            ec2.subnets
                .iter()
                .filter(|s| {
                    s.tags
                        .get(crate::daemon::SUBNET_ROLE_TAG)
                        .is_some_and(|v| v != "0")
                })
                .map(|s| s.id.as_str()),
        );
    }
    let pool = facts.ipamd.pool.as_ref().ok();
    let need = pool.map(warm_need).unwrap_or(1);
    let pool_empty = pool.is_some_and(|p| p.totals.available == 0);
    let room = "add room: a subnet tagged kubernetes.io/role/cni=1 in the node's zone (ENABLE_SUBNET_DISCOVERY), a larger subnet through custom networking (ENIConfig), or a secondary VPC CIDR; or hold fewer spare addresses (WARM_IP_TARGET / MINIMUM_IP_TARGET instead of WARM_ENI_TARGET)";
    let mut out = Vec::new();
    for subnet in ec2.subnets.iter().filter(|s| used.contains(s.id.as_str())) {
        let desc = format!(
            "subnet {} ({}, {}) has {} free address(es)",
            subnet.id, subnet.cidr, subnet.availability_zone, subnet.available_ips
        );
        out.push(if subnet.available_ips == 0 {
            Finding::new(
                "subnet-capacity",
                G,
                if pool_empty {
                    Severity::Error
                } else {
                    Severity::Warning
                },
                format!(
                    "{desc}: ipamd cannot grow in it{}",
                    if pool_empty {
                        " and has no free address left, so new pods stay in ContainerCreating"
                    } else {
                        "; new pods use the addresses ipamd already holds"
                    }
                ),
            )
            .fix(room)
        } else if u64::from(subnet.available_ips) < need {
            Finding::new(
                "subnet-capacity",
                G,
                Severity::Warning,
                format!("{desc}, fewer than the {need} the warm targets ask for"),
            )
            .fix(room)
        } else {
            Finding::new("subnet-capacity", G, Severity::Ok, desc)
        });
    }
    out
}

fn enis(facts: &Facts) -> Option<Finding> {
    let ec2 = facts.ec2.as_ref().ok()?;
    let (limits, _) = facts.limits.as_ref().ok()?;
    let max_enis = facts
        .config
        .max_eni
        .map_or(limits.max_enis, |m| m.min(limits.max_enis));
    let per_eni = limits.secondary_ips_per_eni();
    let full = ec2
        .enis
        .iter()
        .filter(|e| e.secondary_ips.len() as u32 + 16 * e.prefixes.len() as u32 >= per_eni)
        .count();
    let evidence = format!(
        "{} of {max_enis} ENIs attached, {full} of them holding all {per_eni} secondary addresses",
        ec2.enis.len()
    );
    let at_limit = ec2.enis.len() as u32 >= max_enis && full == ec2.enis.len();
    let pool_empty = facts
        .ipamd
        .pool
        .as_ref()
        .is_ok_and(|p| p.totals.available == 0);
    Some(if at_limit && pool_empty {
        Finding::new(
            "eni-capacity",
            G,
            Severity::Warning,
            format!("{evidence}: the node can address no more pods"),
        )
        .fix("the node is full: set the kubelet's --max-pods to what the node can address, use prefix delegation (ENABLE_PREFIX_DELEGATION on Nitro), or a larger instance type")
    } else {
        Finding::new("eni-capacity", G, Severity::Ok, evidence)
    })
}

fn max_pods(facts: &Facts) -> Option<Finding> {
    let pool = facts.ipamd.pool.as_ref().ok()?;
    let l = &pool.limits;
    let source = if facts.config.max_pods.is_some() {
        "MAX_PODS"
    } else {
        "the instance type's max pods"
    };
    // EKS's max-pods formula allows 2 host-network pods, which need no address.
    Some(if u64::from(l.max_pods) > l.max_ips + HOST_NETWORK_PODS {
        Finding::new(
            "max-pods",
            G,
            Severity::Warning,
            format!(
                "{source} is {} but the node can address {} pod(s) (+{HOST_NETWORK_PODS} host-network): the scheduler may place pods that never get an address",
                l.max_pods, l.max_ips
            ),
        )
        .fix(format!("set the kubelet's --max-pods (and MAX_PODS) to at most {}, or enable prefix delegation", l.max_ips + HOST_NETWORK_PODS))
    } else {
        Finding::new(
            "max-pods",
            G,
            Severity::Ok,
            format!(
                "{source} is {}; the node can address {} pod(s) (the kubelet's own --max-pods is not read here: keep it at or below this)",
                l.max_pods, l.max_ips
            ),
        )
    })
}

fn growth(facts: &Facts) -> Option<Finding> {
    let pool = facts.ipamd.pool.as_ref().ok()?;
    let error = pool.last_error.as_deref().unwrap_or("no error recorded");
    Some(if pool.growth_paused {
        Finding::new(
            "growth",
            G,
            Severity::Warning,
            format!(
                "growth is paused until {} after EC2 refused: {error}",
                pool.growth_paused_until.as_deref().unwrap_or("later")
            ),
        )
        .fix("see the EC2 refusal above: it names the limit or permission; ipamd retries by itself with backoff")
    } else if let Some(e) = &pool.last_error {
        Finding::new(
            "growth",
            G,
            Severity::Info,
            format!(
                "growing; the last attempt failed: {e}. Next: {}",
                pool.reason
            ),
        )
    } else {
        Finding::new("growth", G, Severity::Ok, format!("next: {}", pool.reason))
    })
}

/// `awscni_aws_api_error_count` by (API, error code), from ipamd's metrics.
fn api_errors(metrics: &str) -> std::collections::BTreeMap<(String, String), f64> {
    let label = |line: &str, name: &str| {
        line.split(&format!("{name}=\""))
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or("?")
            .to_string()
    };
    let mut out = std::collections::BTreeMap::new();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("awscni_aws_api_error_count{"))
    {
        let Some(value) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        *out.entry((label(line, "api"), label(line, "error")))
            .or_insert(0.0) += value;
    }
    out
}

fn ec2_errors(facts: &Facts) -> Option<Finding> {
    let metrics = facts.ipamd.metrics.as_ref().ok()?;
    let mut errors: BTreeMap<String, f64> = BTreeMap::new();
    for ((_, code), n) in api_errors(metrics) {
        *errors.entry(code).or_insert(0.0) += n;
    }
    let total: f64 = errors.values().sum();
    Some(if total == 0.0 {
        Finding::new(
            "ec2-errors",
            G,
            Severity::Ok,
            "no EC2 error since ipamd started",
        )
    } else {
        let by_code: Vec<String> = errors.iter().map(|(c, n)| format!("{c} ×{n}")).collect();
        let throttled = errors
            .keys()
            .any(|c| cloud::classify_code(c) == cloud::CloudErrorKind::Throttled);
        Finding::new(
            "ec2-errors",
            G,
            Severity::Info,
            format!("EC2 errors since ipamd started: {}", by_code.join(", ")),
        )
        .fix(if throttled {
            "EC2 throttled this account's calls: many nodes growing at once, or another tool calling EC2; lower WARM_ENI_TARGET churn or spread node launches"
        } else {
            "see awscni_aws_api_error_count; the growth finding shows whether growth is held up"
        })
    })
}

/// With prefix delegation: subnets where EC2 found no free /28 block, so pods get /32s.
fn prefix_fallback(facts: &Facts) -> Option<Finding> {
    let fallback = facts.ipamd.pool.as_ref().ok()?.prefix_fallback.as_ref()?;
    let refused: BTreeSet<String> = fallback
        .enis
        .iter()
        .filter_map(|e| {
            let r = e.refused.as_ref()?;
            Some(format!(
                "{} ({} refusals since {})",
                e.subnet, r.refusals, r.since
            ))
        })
        .collect();
    if refused.is_empty() && fallback.new_enis.is_none() {
        let evidence = format!(
            "EC2 delegates /28 prefixes; {} address(es) still held as /32s go back as their pods leave",
            fallback.ips
        );
        return Some(Finding::new("prefix-fallback", G, Severity::Ok, evidence));
    }
    let mut places: Vec<String> = refused.into_iter().collect();
    if fallback.new_enis.is_some() {
        places.push("every subnet a new ENI may go to".into());
    }
    Some(
        Finding::new(
            "prefix-fallback",
            G,
            Severity::Warning,
            format!(
                "EC2 has no free aligned /28 in {}: {} address(es) held as /32s, one pod per ENI \
                 slot instead of 16; prefixes are asked for again with backoff",
                places.join(", "),
                fallback.ips
            ),
        )
        .fix("give the subnet aligned free space: a subnet CIDR reservation of type prefix (aws ec2 create-subnet-cidr-reservation --reservation-type prefix), a subnet tagged kubernetes.io/role/cni=1 (ENABLE_SUBNET_DISCOVERY), or a new subnet through custom networking"),
    )
}

pub(super) fn check(facts: &Facts) -> Vec<Finding> {
    let mut out = subnets(facts);
    out.extend(enis(facts));
    out.extend(prefix_fallback(facts));
    out.extend(max_pods(facts));
    out.extend(growth(facts));
    out.extend(ec2_errors(facts));
    out
}

#[cfg(test)]
mod tests {
    use super::super::fixture::healthy;
    use super::*;

    #[test]
    fn a_healthy_node_has_room() {
        let found = check(&healthy());
        assert!(
            found.iter().all(|f| f.severity == Severity::Ok),
            "{found:#?}"
        );
        assert!(found.iter().any(|f| f.check == "subnet-capacity"));
    }

    #[test]
    fn a_prefix_fallback_is_a_warning_naming_the_subnet() {
        use introspect::json::{EniFallback, PrefixFallbackStatus, Refusal};
        let mut f = healthy();
        let refusal = Refusal {
            since: "2026-11-28T07:40:02Z".into(),
            reason: "InsufficientCidrBlocks".into(),
            refusals: 2,
            retry_at: "2026-11-28T07:41:17Z".into(),
            active: true,
        };
        let status = PrefixFallbackStatus {
            ips: 9,
            enis: vec![EniFallback {
                eni: "eni-1".into(),
                subnet: "subnet-frag".into(),
                ips: 9,
                refused: Some(refusal),
            }],
            new_enis: None,
        };
        f.ipamd.pool.as_mut().unwrap().prefix_fallback = Some(status.clone());
        let found = check(&f);
        let x = found.iter().find(|x| x.check == "prefix-fallback").unwrap();
        assert_eq!(x.severity, Severity::Warning);
        assert!(x.evidence.contains("subnet-frag") && x.evidence.contains("9 address"));
        assert!(x.fix.is_some());
        // Prefixes back: fine, with the /32s still held counted.
        let mut back = status;
        back.enis[0].refused = None;
        f.ipamd.pool.as_mut().unwrap().prefix_fallback = Some(back);
        let found = check(&f);
        let x = found.iter().find(|x| x.check == "prefix-fallback").unwrap();
        assert_eq!(x.severity, Severity::Ok, "{x:?}");
    }

    #[test]
    fn an_exhausted_subnet_is_named_and_an_error_once_the_pool_is_empty() {
        let mut f = healthy();
        f.ec2.as_mut().unwrap().subnets[0].available_ips = 0;
        let id = f.ec2.as_ref().unwrap().subnets[0].id.clone();
        let sev = |f: &Facts| {
            let found = check(f);
            let x = found
                .iter()
                .find(|x| x.check == "subnet-capacity")
                .unwrap()
                .clone();
            assert!(x.evidence.contains(&id) && x.fix.is_some());
            x.severity
        };
        assert_eq!(sev(&f), Severity::Warning);
        f.ipamd.pool.as_mut().unwrap().totals.available = 0;
        assert_eq!(sev(&f), Severity::Error);
    }

    #[test]
    fn paused_growth_and_throttling_are_reported() {
        let mut f = healthy();
        let pool = f.ipamd.pool.as_mut().unwrap();
        pool.growth_paused = true;
        pool.last_error = Some("InsufficientFreeAddressesInSubnet".into());
        f.ipamd.metrics = Ok(format!(
            "awscni_aws_api_error_count{{api=\"{}\",error=\"RequestLimitExceeded\"}} 3\n",
            cloud::Action::AssignPrivateIpAddresses
        ));
        let found = check(&f);
        let g = found.iter().find(|x| x.check == "growth").unwrap();
        assert_eq!(g.severity, Severity::Warning);
        assert!(g.evidence.contains("InsufficientFreeAddressesInSubnet"));
        let e = found.iter().find(|x| x.check == "ec2-errors").unwrap();
        assert!(
            e.evidence.contains("RequestLimitExceeded ×3"),
            "{}",
            e.evidence
        );
        assert!(e.fix.as_deref().unwrap().contains("throttled"));
    }

    #[test]
    fn max_pods_beyond_the_addressable_is_a_warning() {
        let mut f = healthy();
        let l = &mut f.ipamd.pool.as_mut().unwrap().limits;
        l.max_pods = 110;
        l.max_ips = 15;
        let found = check(&f);
        assert_eq!(
            found
                .iter()
                .find(|x| x.check == "max-pods")
                .unwrap()
                .severity,
            Severity::Warning
        );
    }
}
