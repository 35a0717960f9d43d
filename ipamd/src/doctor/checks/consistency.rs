//! Consistency: EC2, IMDS, ipamd's store and the kernel agree.
//!
//! Each pod ipamd holds must have its host route and rules (`<ip>/32 dev <veth>`,
//! `to <ip> lookup main` prio 512, and `from <ip> lookup <ENI table>` prio 1536 on a secondary
//! ENI); nothing of that shape may exist for an address no pod holds; ipamd's ENIs and
//! addresses are EC2's; IMDS shows what EC2 has; no ENI of ours is left unattached; the node's
//! SNAT and rp_filter are as configured.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netops::{PRIO_FROM_POD, PRIO_TO_POD};

use super::super::facts::{KRoute, KRule, Kernel};
use super::super::{Facts, Finding, Group, Repair, Severity};
use super::listed;

const G: Group = Group::Consistency;

/// A pod address as ipamd holds it.
#[derive(Clone, Debug)]
struct Held {
    ip: IpAddr,
    pod: String,
    device: u32,
}

fn held(facts: &Facts) -> Option<Vec<Held>> {
    let pods = facts.ipamd.pods.as_ref().ok()?;
    Some(
        pods.iter()
            .filter_map(|p| {
                Some(Held {
                    ip: p.ip.parse().ok()?,
                    pod: format!("{}/{}", p.namespace, p.name),
                    device: p.device_number,
                })
            })
            .collect(),
    )
}

fn host(ip: IpAddr) -> IpNetwork {
    IpNetwork::from(ip)
}

fn is_host(net: &IpNetwork) -> bool {
    net.prefix() == if net.is_ipv4() { 32 } else { 128 }
}

/// The rules a pod needs on the host.
fn wanted_rules(h: &Held) -> Vec<KRule> {
    let mut rules = vec![KRule {
        priority: PRIO_TO_POD,
        src: None,
        dst: Some(host(h.ip)),
        table: netops::RT_TABLE_MAIN,
        plain: true,
    }];
    if h.ip.is_ipv4() && h.device > 0 {
        rules.push(KRule {
            priority: PRIO_FROM_POD,
            src: Some(host(h.ip)),
            dst: None,
            table: netops::eni_table(h.device),
            plain: true,
        });
    }
    rules
}

fn veth_routes<'a>(kernel: &'a Kernel, prefix: &'a str) -> impl Iterator<Item = &'a KRoute> {
    kernel.routes.iter().filter(move |r| {
        r.table == netops::RT_TABLE_MAIN
            && is_host(&r.dst)
            && r.dev.as_deref().is_some_and(|d| d.starts_with(prefix))
    })
}

fn wiring(facts: &Facts, kernel: &Kernel, held: &[Held]) -> Vec<Finding> {
    let prefix = &facts.config.veth_prefix;
    let routed: BTreeMap<IpAddr, &KRoute> = veth_routes(kernel, prefix)
        .map(|r| (r.dst.ip(), r))
        .collect();
    let mut out = Vec::new();
    for h in held {
        if !routed.contains_key(&h.ip) {
            out.push(
                Finding::new(
                    "pod-wiring",
                    G,
                    Severity::Error,
                    format!(
                        "pod {} holds {} but the host has no route {}/{} dev {prefix}*: nothing reaches the pod",
                        h.pod,
                        h.ip,
                        h.ip,
                        host(h.ip).prefix()
                    ),
                )
                .fix(format!(
                    "delete the pod so its controller re-creates it (its veth is gone or was never wired); `kubectl delete pod -n {}`",
                    h.pod.replace('/', " ")
                )),
            );
        }
        for rule in wanted_rules(h) {
            if !kernel.rules.contains(&rule) {
                let what = if rule.priority == PRIO_TO_POD {
                    "traffic to the pod is not routed by the main table"
                } else {
                    "the pod's traffic does not leave through its ENI, so the VPC drops it"
                };
                out.push(
                    Finding::new(
                        "pod-wiring",
                        G,
                        Severity::Error,
                        format!("pod {} ({}) lacks rule `{rule}`: {what}", h.pod, h.ip),
                    )
                    .fix(format!(
                        "`ipamd doctor --fix` re-adds it (`ip rule add {rule}`)"
                    ))
                    .repair(Repair::AddRule(rule)),
                );
            }
        }
    }
    if out.is_empty() {
        out.push(Finding::new(
            "pod-wiring",
            G,
            Severity::Ok,
            format!("{} pod address(es) have their route and rules", held.len()),
        ));
    }
    out
}

fn orphans(facts: &Facts, kernel: &Kernel, held: &[Held]) -> Vec<Finding> {
    let prefix = &facts.config.veth_prefix;
    let ips: BTreeSet<IpAddr> = held.iter().map(|h| h.ip).collect();
    let mut out = Vec::new();
    for rule in &kernel.rules {
        let ip = match rule.priority {
            PRIO_TO_POD if rule.src.is_none() => rule.dst.filter(is_host).map(|d| d.ip()),
            PRIO_FROM_POD if rule.dst.is_none() => rule.src.filter(is_host).map(|s| s.ip()),
            _ => None,
        };
        if let Some(ip) = ip.filter(|ip| !ips.contains(ip)) {
            out.push(
                Finding::new(
                    "orphans",
                    G,
                    Severity::Warning,
                    format!("rule `{rule}` is for {ip}, which no pod holds"),
                )
                .fix(format!(
                    "`ipamd doctor --fix` removes it (`ip rule del {rule}`)"
                ))
                .repair(Repair::DeleteRule(rule.clone())),
            );
        }
    }
    // An IPv6 pod's IPv4 egress address is routed through the veth of its IPv6 address but
    // is not in /v1/pods: such a route is owned by the pod whose veth it uses.
    let owned: BTreeSet<&str> = veth_routes(kernel, prefix)
        .filter(|r| ips.contains(&r.dst.ip()))
        .filter_map(|r| r.dev.as_deref())
        .collect();
    for route in kernel.routes.iter().filter(|r| {
        r.table == netops::RT_TABLE_MAIN && is_host(&r.dst) && !ips.contains(&r.dst.ip())
    }) {
        let egress = match route.dst {
            IpNetwork::V4(dst) => pool::EGRESS_V4_RANGE.contains(dst.ip()),
            IpNetwork::V6(_) => false,
        };
        let orphan = match route.dev.as_deref() {
            Some(dev) => dev.starts_with(prefix.as_str()) && !(egress && owned.contains(dev)),
            None => false,
        };
        if orphan {
            out.push(
                Finding::new(
                    "orphans",
                    G,
                    Severity::Warning,
                    format!(
                        "route `{route}` leads to {}, which no pod holds: a pod given that address later would be unreachable",
                        route.dst.ip()
                    ),
                )
                .fix(format!("`ipamd doctor --fix` removes it (`ip route del {route}`)"))
                .repair(Repair::DeleteRoute(route.clone())),
            );
        }
    }
    // Only the tables ENIs of this instance type can have: others belong to other software.
    if let (Ok(enis), Ok((limits, _))) = (&facts.ipamd.enis, &facts.limits) {
        let ours = 2..=netops::eni_table(limits.max_enis.saturating_sub(1));
        let tables: BTreeSet<u32> = enis
            .values()
            .flat_map(|c| c.enis.values())
            .filter(|e| e.device_number > 0)
            .map(|e| netops::eni_table(e.device_number))
            .collect();
        let stray: BTreeSet<u32> = kernel
            .routes
            .iter()
            .filter(|r| ours.contains(&r.table))
            .map(|r| r.table)
            .filter(|t| !tables.contains(t))
            .collect();
        for table in stray {
            out.push(
                Finding::new(
                    "orphans",
                    G,
                    Severity::Warning,
                    format!(
                        "route table {table} has routes but ipamd holds no ENI of device {}",
                        table - 1
                    ),
                )
                .fix(format!(
                    "if no other software uses it: `ip route flush table {table}`"
                )),
            );
        }
    }
    let idle: Vec<&str> = kernel
        .links
        .iter()
        .filter(|l| l.kind.as_deref() == Some("veth") && l.name.starts_with(prefix.as_str()))
        .filter(|l| !kernel.routes.iter().any(|r| r.oif == Some(l.index)))
        .map(|l| l.name.as_str())
        .collect();
    if !idle.is_empty() {
        out.push(Finding::new(
            "orphans",
            G,
            Severity::Info,
            format!(
                "veth(s) without routes: {} (a deleted pod's, until its namespace goes; ipamd deletes those left behind within a minute)",
                listed(&idle, 10)
            ),
        ));
    }
    if out.iter().all(|f| f.severity <= Severity::Info) {
        out.push(Finding::new(
            "orphans",
            G,
            Severity::Ok,
            "no pod rule or route without an owner",
        ));
    }
    out
}

fn duplicates(held: &[Held]) -> Finding {
    let mut seen: BTreeMap<IpAddr, Vec<&str>> = BTreeMap::new();
    for h in held {
        seen.entry(h.ip).or_default().push(&h.pod);
    }
    let twice: Vec<String> = seen
        .iter()
        .filter(|(_, pods)| pods.len() > 1)
        .map(|(ip, pods)| format!("{ip} ({})", pods.join(", ")))
        .collect();
    if twice.is_empty() {
        Finding::new("duplicates", G, Severity::Ok, "no address is held twice")
    } else {
        Finding::new(
            "duplicates",
            G,
            Severity::Error,
            format!("addresses held by more than one pod: {}", twice.join("; ")),
        )
        .fix("delete all but one of the pods named; report this as a bug with `ipamd doctor --bundle`")
    }
}

/// ipamd's ENIs and addresses against EC2's.
fn ec2_vs_ipamd(facts: &Facts) -> Option<Vec<Finding>> {
    let ec2 = facts.ec2.as_ref().ok()?;
    let ipamd = facts.ipamd.enis.as_ref().ok()?;
    let mut out = Vec::new();
    let attached: BTreeMap<&str, &cloud::NetworkInterface> =
        ec2.enis.iter().map(|e| (e.id.as_str(), e)).collect();
    for eni in ipamd.values().flat_map(|c| c.enis.values()) {
        let Some(real) = attached.get(eni.id.as_str()) else {
            out.push(
                Finding::new(
                    "ec2-ipamd",
                    G,
                    Severity::Error,
                    format!(
                        "ipamd holds ENI {} but EC2 has no such ENI attached to this instance",
                        eni.id
                    ),
                )
                .fix("restart ipamd: it re-reads the node's ENIs from EC2 at start"),
            );
            continue;
        };
        let mut on_eni: BTreeSet<IpNetwork> = real
            .secondary_ips
            .iter()
            .map(|ip| host(IpAddr::V4(*ip)))
            .collect();
        on_eni.extend(real.prefixes.iter().map(|p| IpNetwork::V4(*p)));
        let mut in_pool = BTreeSet::new();
        for key in eni.available_ipv4_cidrs.keys() {
            if let Ok(net) = key.parse::<IpNetwork>() {
                in_pool.insert(net);
            }
        }
        let missing: Vec<_> = in_pool.difference(&on_eni).collect();
        if !missing.is_empty() {
            out.push(
                Finding::new(
                    "ec2-ipamd",
                    G,
                    Severity::Error,
                    format!(
                        "ipamd holds {} on {} but EC2 does not assign them to it: a pod given one has no VPC traffic",
                        listed(&missing, 10),
                        eni.id
                    ),
                )
                .fix("restart ipamd (it reconciles its pool with EC2 at start); if it persists, collect `ipamd doctor --bundle`"),
            );
        }
        let unknown: Vec<_> = on_eni.difference(&in_pool).collect();
        if !unknown.is_empty() {
            out.push(
                Finding::new(
                    "ec2-ipamd",
                    G,
                    Severity::Warning,
                    format!(
                        "EC2 assigns {} to {} but ipamd's pool does not hold them: they are unused",
                        listed(&unknown, 10),
                        eni.id
                    ),
                )
                .fix("wait one reconcile period (ipamd adopts or returns them); if it persists, restart ipamd"),
            );
        }
    }
    if out.is_empty() {
        out.push(Finding::new(
            "ec2-ipamd",
            G,
            Severity::Ok,
            "ipamd's ENIs and addresses are EC2's",
        ));
    }
    Some(out)
}

/// What IMDS shows of each attached ENI against EC2: IMDS lags EC2 (for seconds, sometimes
/// much longer), and ipamd's start reads it.
pub fn imds_disagreements(
    ec2: &[cloud::NetworkInterface],
    imds: &[cloud::EniMetadata],
) -> Vec<String> {
    let mut out = Vec::new();
    let by_id: BTreeMap<&str, &cloud::EniMetadata> =
        imds.iter().map(|e| (e.eni_id.as_str(), e)).collect();
    for eni in ec2 {
        let Some(meta) = by_id.get(eni.id.as_str()) else {
            out.push(format!(
                "ENI {} is attached in EC2 but IMDS does not list it",
                eni.id
            ));
            continue;
        };
        let real: BTreeSet<_> = eni.primary_ip.iter().chain(&eni.secondary_ips).collect();
        let shown: BTreeSet<_> = meta.local_ipv4s.iter().collect();
        let lacking: Vec<_> = real.difference(&shown).collect();
        let extra: Vec<_> = shown.difference(&real).collect();
        if !lacking.is_empty() {
            out.push(format!(
                "IMDS lacks {} of ENI {}",
                listed(&lacking, 10),
                eni.id
            ));
        }
        if !extra.is_empty() {
            out.push(format!(
                "IMDS still shows {} on ENI {}, which EC2 no longer assigns",
                listed(&extra, 10),
                eni.id
            ));
        }
    }
    let attached: BTreeSet<&str> = ec2.iter().map(|e| e.id.as_str()).collect();
    for meta in imds
        .iter()
        .filter(|m| !attached.contains(m.eni_id.as_str()))
    {
        out.push(format!(
            "IMDS lists ENI {} which EC2 does not show attached",
            meta.eni_id
        ));
    }
    out
}

fn imds_vs_ec2(facts: &Facts) -> Option<Finding> {
    let ec2 = facts.ec2.as_ref().ok()?;
    let imds = facts.imds_enis.as_ref().ok()?;
    let found = imds_disagreements(&ec2.enis, imds);
    Some(if found.is_empty() {
        Finding::new("imds-ec2", G, Severity::Ok, "IMDS shows what EC2 has")
    } else {
        Finding::new(
            "imds-ec2",
            G,
            Severity::Warning,
            format!("IMDS disagrees with EC2 (read twice): {}", found.join("; ")),
        )
        .fix("IMDS catches up with EC2, usually within seconds; ipamd trusts EC2 and re-reads IMDS. If it lasts minutes, restart ipamd and open an AWS support case with this output")
    })
}

fn leaked(facts: &Facts) -> Option<Vec<Finding>> {
    let ec2 = facts.ec2.as_ref().ok()?;
    if ec2.leaked.is_empty() {
        return Some(vec![Finding::new(
            "leaked-enis",
            G,
            Severity::Ok,
            "no unattached ENI of ours in the VPC",
        )]);
    }
    let cleanup = if facts.config.disable_leaked_eni_cleanup {
        "DISABLE_LEAKED_ENI_CLEANUP=true: ipamd will not delete it".to_string()
    } else {
        format!(
            "ipamd deletes leaks older than 5 minutes every {}",
            humantime::format_duration(facts.config.leaked_eni_cleanup_interval)
        )
    };
    let now = std::time::SystemTime::now();
    Some(
        ec2.leaked
            .iter()
            .map(|eni| {
                let created = eni.tags.get(crate::daemon::TAG_CREATED_AT);
                let age = created
                    .and_then(|c| humantime::parse_rfc3339(c).ok())
                    .map(|t| now.duration_since(t).unwrap_or_default());
                // A young ENI may be one another node is still attaching, as ipamd's cleanup
                // judges it.
                let young = age.is_some_and(|a| a < crate::daemon::MIN_LEAK_AGE);
                let finding = Finding::new(
                    "leaked-enis",
                    G,
                    if young { Severity::Info } else { Severity::Warning },
                    format!(
                        "ENI {} ({}, subnet {}, created {}) is ours and attached to nothing{}: it holds {} subnet address(es)",
                        eni.id,
                        eni.description,
                        eni.subnet_id,
                        created.map(String::as_str).unwrap_or("at an unknown time"),
                        if young { ", but is younger than 5 minutes (another node may be attaching it)" } else { "" },
                        1 + eni.secondary_ips.len() + 16 * eni.prefixes.len()
                    ),
                );
                if young {
                    finding
                } else {
                    finding.fix(format!(
                        "{cleanup}; or delete it now: `aws ec2 delete-network-interface --network-interface-id {}`",
                        eni.id
                    ))
                }
            })
            .collect(),
    )
}

fn snat(facts: &Facts) -> Finding {
    match &facts.snat_pending {
        Ok(changes) if changes.is_empty() => Finding::new(
            "snat",
            G,
            Severity::Ok,
            if facts.config.external_snat {
                "iptables as configured (AWS_VPC_K8S_CNI_EXTERNALSNAT=true: no SNAT chain)"
            } else {
                "SNAT and connmark rules present as configured"
            },
        ),
        Ok(changes) => {
            use netops::snat::Change;
            let missing = changes
                .iter()
                .any(|c| matches!(c, Change::ChainCreated { .. } | Change::RuleAdded { .. }));
            let described: Vec<String> = changes
                .iter()
                .map(|c| match c {
                    Change::ChainCreated { table, chain } => {
                        format!("{table} chain {chain} is missing")
                    }
                    Change::RuleAdded { table, chain, rule } => {
                        format!("{table} rule `-A {chain} {rule}` is missing")
                    }
                    Change::ChainDeleted { table, chain } => {
                        format!("{table} chain {chain} is stale")
                    }
                    Change::RuleDeleted { table, chain, rule } => {
                        format!("{table} rule `-A {chain} {rule}` is stale or out of order")
                    }
                })
                .collect();
            Finding::new(
                "snat",
                G,
                if missing { Severity::Error } else { Severity::Warning },
                format!(
                    "the node's iptables differ from what ipamd sets up: {}{}",
                    described.join("; "),
                    if missing {
                        ". Pod traffic leaving the VPC is not translated to the node's address, or replies take the wrong ENI"
                    } else {
                        ""
                    }
                ),
            )
            .fix("`ipamd doctor --fix` applies them (as `ipamd init` and ipamd's start do); find what removed them (another agent flushing nat?)")
            .repair(Repair::NodeSetup)
        }
        Err(e) => Finding::new(
            "snat",
            G,
            Severity::Warning,
            format!("could not read iptables: {e}"),
        )
        .fix("run the doctor where iptables-save works (the DaemonSet pod, or the host as root)"),
    }
}

fn rp_filter(kernel: &Kernel) -> Option<Finding> {
    let (link, value) = kernel.rp_filter.as_ref()?;
    Some(if value.trim() == netops::snat::RP_FILTER_LOOSE {
        Finding::new(
            "rp-filter",
            G,
            Severity::Ok,
            format!("rp_filter of {link} is loose (2)"),
        )
    } else {
        Finding::new(
            "rp-filter",
            G,
            Severity::Warning,
            format!("rp_filter of {link} is {} (ipamd sets 2, loose): NodePort traffic to pods on secondary ENIs and replies to their SNATed connections are dropped", value.trim()),
        )
        .fix(format!("`ipamd doctor --fix`, or `sysctl -w net.ipv4.conf.{link}.rp_filter=2`"))
        .repair(Repair::NodeSetup)
    })
}

pub(super) fn check(facts: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    match (&facts.kernel, held(facts)) {
        (Ok(kernel), Some(held)) => {
            out.extend(wiring(facts, kernel, &held));
            out.extend(orphans(facts, kernel, &held));
            out.push(duplicates(&held));
        }
        (Err(e), _) => out.push(
            Finding::new("pod-wiring", G, Severity::Warning, format!("could not read the node's rules and routes: {e}"))
                .fix("run the doctor in the node's network namespace with NET_ADMIN (the DaemonSet pod, or the host as root)"),
        ),
        (Ok(_), None) => out.push(Finding::new(
            "pod-wiring",
            G,
            Severity::Info,
            "not checked: ipamd's pods are unknown (see the ipamd finding)",
        )),
    }
    if let Ok(kernel) = &facts.kernel {
        out.extend(rp_filter(kernel));
    }
    out.extend(ec2_vs_ipamd(facts).unwrap_or_default());
    out.extend(imds_vs_ec2(facts));
    out.extend(leaked(facts).unwrap_or_default());
    out.push(snat(facts));
    out
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{healthy, pod_ip, secondary_pod_ip};
    use super::*;

    fn of<'a>(found: &'a [Finding], check: &str) -> Vec<&'a Finding> {
        found.iter().filter(|f| f.check == check).collect()
    }

    #[test]
    fn a_healthy_node_is_consistent() {
        let found = check(&healthy());
        assert!(
            found.iter().all(|f| f.severity == Severity::Ok),
            "{found:#?}"
        );
    }

    #[test]
    fn a_missing_pod_rule_is_an_error_with_its_repair() {
        for (priority, ip) in [
            (PRIO_TO_POD, secondary_pod_ip()),
            (PRIO_FROM_POD, secondary_pod_ip()),
            (PRIO_TO_POD, pod_ip()),
        ] {
            let mut f = healthy();
            let kernel = f.kernel.as_mut().unwrap();
            let before = kernel.rules.len();
            kernel.rules.retain(|r| {
                !(r.priority == priority && (r.dst == Some(host(ip)) || r.src == Some(host(ip))))
            });
            assert_eq!(kernel.rules.len(), before - 1);
            let found = check(&f);
            let bad = of(&found, "pod-wiring");
            assert_eq!(bad.len(), 1, "{bad:#?}");
            assert_eq!(bad[0].severity, Severity::Error);
            assert!(bad[0].evidence.contains(&ip.to_string()));
            assert!(bad[0].evidence.contains(&priority.to_string()));
            assert!(matches!(&bad[0].repair, Some(Repair::AddRule(r)) if r.priority == priority));
        }
    }

    #[test]
    fn a_route_or_rule_nobody_owns_is_an_orphan() {
        let mut f = healthy();
        let kernel = f.kernel.as_mut().unwrap();
        let stray: IpAddr = "10.0.1.99".parse().unwrap();
        let mut route = kernel
            .routes
            .iter()
            .find(|r| r.dst.ip() == pod_ip())
            .unwrap()
            .clone();
        route.dst = host(stray);
        kernel.routes.push(route.clone());
        // An IPv6 pod's egress address on its veth is not an orphan; on a stale veth it is.
        route.dst = "169.254.172.9/32".parse().unwrap();
        kernel.routes.push(route.clone());
        route.dst = "169.254.172.10/32".parse().unwrap();
        route.dev = Some("enistale0".into());
        route.oif = Some(99);
        kernel.routes.push(route);
        let rule = KRule {
            priority: PRIO_TO_POD,
            src: None,
            dst: Some(host("10.0.1.98".parse().unwrap())),
            table: netops::RT_TABLE_MAIN,
            plain: true,
        };
        kernel.rules.push(rule);
        let found = check(&f);
        let orphans = of(&found, "orphans");
        assert_eq!(orphans.len(), 3, "{orphans:#?}");
        assert!(
            orphans
                .iter()
                .any(|o| o.evidence.contains("169.254.172.10"))
        );
        assert!(
            !orphans
                .iter()
                .any(|o| o.evidence.contains("169.254.172.9/"))
        );
        assert!(
            orphans
                .iter()
                .all(|o| o.severity == Severity::Warning && o.fix.is_some())
        );
        assert!(orphans.iter().any(|o| o.evidence.contains("10.0.1.99")
            && matches!(o.repair, Some(Repair::DeleteRoute(_)))));
        assert!(
            orphans.iter().any(|o| o.evidence.contains("10.0.1.98")
                && matches!(o.repair, Some(Repair::DeleteRule(_))))
        );
    }

    #[test]
    fn a_table_of_an_eni_ipamd_does_not_hold_is_an_orphan() {
        let mut f = healthy();
        let kernel = f.kernel.as_mut().unwrap();
        let mut stale = kernel.routes.iter().find(|r| r.table == 2).unwrap().clone();
        stale.table = 3;
        kernel.routes.push(stale.clone());
        // Beyond the instance's ENIs (3 for a t3.medium): another program's table.
        stale.table = 100;
        kernel.routes.push(stale);
        let found = check(&f);
        let orphans = of(&found, "orphans");
        assert_eq!(orphans.len(), 1, "{orphans:#?}");
        assert!(orphans[0].evidence.contains("route table 3"));
    }

    #[test]
    fn an_address_held_twice_is_an_error() {
        let mut f = healthy();
        let pods = f.ipamd.pods.as_mut().unwrap();
        let mut twin = pods[0].clone();
        twin.name = "twin".into();
        pods.push(twin);
        let found = check(&f);
        assert_eq!(of(&found, "duplicates")[0].severity, Severity::Error);
    }

    #[test]
    fn imds_lacking_an_address_is_named() {
        let mut f = healthy();
        f.imds_enis.as_mut().unwrap()[1].local_ipv4s.pop();
        let found = check(&f);
        let x = of(&found, "imds-ec2");
        assert_eq!(x[0].severity, Severity::Warning);
        assert!(x[0].evidence.contains("eni-2"), "{}", x[0].evidence);
    }

    #[test]
    fn ipamd_holding_an_address_ec2_lacks_is_an_error() {
        let mut f = healthy();
        f.ec2.as_mut().unwrap().enis[1].secondary_ips.pop();
        let found = check(&f);
        let x = of(&found, "ec2-ipamd");
        assert_eq!(x.len(), 1);
        assert_eq!(x[0].severity, Severity::Error);
    }

    #[test]
    fn a_leaked_eni_and_missing_snat_are_named() {
        let mut f = healthy();
        let mut eni = f.ec2.as_ref().unwrap().enis[1].clone();
        eni.id = "eni-leak".into();
        eni.attachment = None;
        f.ec2.as_mut().unwrap().leaked.push(eni.clone());
        eni.id = "eni-young".into();
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        eni.tags.insert(crate::daemon::TAG_CREATED_AT.into(), now);
        f.ec2.as_mut().unwrap().leaked.push(eni);
        f.snat_pending = Ok(vec![netops::snat::Change::ChainCreated {
            table: netops::snat::Table::Nat,
            chain: "AWS-SNAT-CHAIN-0".into(),
        }]);
        let found = check(&f);
        let x = of(&found, "leaked-enis");
        assert_eq!(x[0].severity, Severity::Warning);
        assert!(
            x[0].evidence.contains("eni-leak") && x[0].fix.as_deref().unwrap().contains("eni-leak")
        );
        assert_eq!(x[1].severity, Severity::Info, "{x:#?}");
        assert!(x[1].evidence.contains("eni-young") && x[1].fix.is_none());
        let s = of(&found, "snat");
        assert_eq!(s[0].severity, Severity::Error);
        assert!(s[0].evidence.contains("AWS-SNAT-CHAIN-0"));
    }

    #[test]
    fn strict_rp_filter_is_a_warning() {
        let mut f = healthy();
        f.kernel.as_mut().unwrap().rp_filter = Some(("eth0".into(), "1".into()));
        let found = check(&f);
        assert_eq!(of(&found, "rp-filter")[0].severity, Severity::Warning);
    }
}
