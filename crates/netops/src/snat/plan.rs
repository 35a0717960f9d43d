//! The smallest `iptables-restore --noflush` script that turns the current table into the
//! desired one, touching only our rules.
//!
//! Per chain, the rules of ours that already sit in the desired order (a longest common
//! subsequence) are kept as they are, with their counters; every other rule of ours is
//! deleted and each missing one inserted right before the next kept rule (or appended).
//! That one step handles missing rules, stale ones, duplicates and wrong order alike, and
//! never rewrites a rule that is already where it should be. Rules that are not ours are
//! never named in the script: in shared chains ours are deleted by their exact text, in our
//! own chains (which only we write) by position.

use std::fmt;

use super::rules::{Table, TableRules, is_our_rule, is_own_chain};
use super::save::TableState;

/// One change to the firewall, as [`super::ApplyReport`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// One of our chains was created.
    ChainCreated {
        /// Its table.
        table: Table,
        /// The chain.
        chain: String,
    },
    /// A stale chain of ours (e.g. `AWS-SNAT-CHAIN-1` of an old Go CNI) was flushed and removed.
    ChainDeleted {
        /// Its table.
        table: Table,
        /// The chain.
        chain: String,
    },
    /// A rule was added.
    RuleAdded {
        /// Its table.
        table: Table,
        /// Its chain.
        chain: String,
        /// The rule as `iptables-save` prints it.
        rule: String,
    },
    /// A rule of ours was removed (stale, duplicate, out of order, or in a removed chain).
    RuleDeleted {
        /// Its table.
        table: Table,
        /// Its chain.
        chain: String,
        /// The rule as `iptables-save` printed it.
        rule: String,
    },
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::ChainCreated { table, chain } => write!(f, "{table}: created chain {chain}"),
            Change::ChainDeleted { table, chain } => write!(f, "{table}: removed chain {chain}"),
            Change::RuleAdded { table, chain, rule } => {
                write!(f, "{table}: added -A {chain} {rule}")
            }
            Change::RuleDeleted { table, chain, rule } => {
                write!(f, "{table}: removed -A {chain} {rule}")
            }
        }
    }
}

/// What to do to one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablePlan {
    /// The table.
    pub table: Table,
    /// `iptables-restore` command lines, in order.
    pub script: Vec<String>,
    /// The same, described for the report.
    pub changes: Vec<Change>,
}

impl TablePlan {
    /// True when the table is already as desired.
    pub fn is_empty(&self) -> bool {
        self.script.is_empty()
    }

    /// Input for `iptables-restore --noflush`: one transaction for the table.
    pub fn restore_input(&self) -> String {
        let mut s = format!("*{}\n", self.table);
        for line in &self.script {
            s.push_str(line);
            s.push('\n');
        }
        s.push_str("COMMIT\n");
        s
    }
}

/// Plans the changes that make `current` hold exactly `desired` of our rules.
pub fn plan_table(current: &TableState, desired: &TableRules) -> TablePlan {
    let table = desired.table;
    let mut plan = TablePlan {
        table,
        script: Vec::new(),
        changes: Vec::new(),
    };

    // Our new chains first: rules added below may jump to them.
    for c in desired.chains.iter().filter(|c| is_own_chain(&c.name)) {
        if !current.has_chain(&c.name) {
            plan.script.push(format!("-N {}", c.name));
            plan.changes.push(Change::ChainCreated {
                table,
                chain: c.name.clone(),
            });
        }
    }

    let mut chains: Vec<&str> = desired.chains.iter().map(|c| c.name.as_str()).collect();
    for c in &current.chains {
        if !chains.contains(&c.as_str()) {
            chains.push(c);
        }
    }
    let mut stale = Vec::new();
    for chain in chains {
        let own = is_own_chain(chain);
        if own && !desired.wants_own_chain(chain) {
            stale.push(chain);
            continue;
        }
        plan_chain(
            &mut plan,
            chain,
            &current.chain_rules(chain),
            desired.chain(chain),
            own,
        );
    }

    // Every jump to a stale chain is ours and was deleted above, so they can go now; flush
    // them all before removing any, as old chains jump to each other.
    for chain in &stale {
        plan.script.push(format!("-F {chain}"));
        for rule in current.chain_rules(chain) {
            plan.changes.push(Change::RuleDeleted {
                table,
                chain: chain.to_string(),
                rule: rule.to_string(),
            });
        }
    }
    for chain in &stale {
        plan.script.push(format!("-X {chain}"));
        plan.changes.push(Change::ChainDeleted {
            table,
            chain: chain.to_string(),
        });
    }
    plan
}

/// Plans one chain; `own` chains hold only our rules, others may hold anyone's.
fn plan_chain(plan: &mut TablePlan, chain: &str, current: &[&str], desired: &[String], own: bool) {
    let table = plan.table;
    let ours: Vec<usize> = (0..current.len())
        .filter(|&i| own || is_our_rule(current[i]))
        .collect();
    let ours_text: Vec<&str> = ours.iter().map(|&i| current[i]).collect();

    if !own && has_duplicates(&ours_text) {
        // Deleting by text removes the first copy, so which copies would survive cannot be
        // steered: remove all of ours and start this chain's share over.
        for rule in &ours_text {
            plan.script.push(format!("-D {chain} {rule}"));
            plan.changes.push(Change::RuleDeleted {
                table,
                chain: chain.to_string(),
                rule: rule.to_string(),
            });
        }
        for rule in desired {
            plan.script.push(format!("-A {chain} {rule}"));
            plan.changes.push(Change::RuleAdded {
                table,
                chain: chain.to_string(),
                rule: rule.clone(),
            });
        }
        return;
    }

    let pairs = lcs(&ours_text, desired);
    // For each current rule: Some(desired index) if kept.
    let mut kept: Vec<Option<usize>> = vec![None; current.len()];
    let mut matched = vec![false; desired.len()];
    for &(o, d) in &pairs {
        kept[ours[o]] = Some(d);
        matched[d] = true;
    }

    // The chain after the deletions: Some(desired index) for our kept rules, None for others'.
    let mut working: Vec<Option<usize>> = Vec::with_capacity(current.len() + desired.len());
    let mut deleted: Vec<usize> = Vec::new();
    let mut o = 0;
    for (i, k) in kept.iter().enumerate() {
        let is_ours = ours.get(o) == Some(&i);
        if is_ours {
            o += 1;
        }
        match (is_ours, k) {
            (true, Some(d)) => working.push(Some(*d)),
            (true, None) => deleted.push(i),
            (false, _) => working.push(None),
        }
    }
    if own {
        // Only we write our chains, so positions are stable; from the end, so they stay valid.
        for &i in deleted.iter().rev() {
            plan.script.push(format!("-D {chain} {}", i + 1));
        }
    } else {
        for &i in &deleted {
            plan.script.push(format!("-D {chain} {}", current[i]));
        }
    }
    for &i in &deleted {
        plan.changes.push(Change::RuleDeleted {
            table,
            chain: chain.to_string(),
            rule: current[i].to_string(),
        });
    }

    for (d, rule) in desired.iter().enumerate() {
        if matched[d] {
            continue;
        }
        match working.iter().position(|t| t.is_some_and(|k| k > d)) {
            Some(p) => {
                plan.script.push(format!("-I {chain} {} {rule}", p + 1));
                working.insert(p, Some(d));
            }
            None => {
                plan.script.push(format!("-A {chain} {rule}"));
                working.push(Some(d));
            }
        }
        plan.changes.push(Change::RuleAdded {
            table,
            chain: chain.to_string(),
            rule: rule.clone(),
        });
    }
}

fn has_duplicates(rules: &[&str]) -> bool {
    rules
        .iter()
        .enumerate()
        .any(|(i, r)| rules[..i].contains(r))
}

/// A longest common subsequence of `a` and `b`, as index pairs in increasing order.
fn lcs(a: &[&str], b: &[String]) -> Vec<(usize, usize)> {
    let (n, m) = (a.len(), b.len());
    let mut len = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            len[i][j] = if a[i] == b[j] {
                len[i + 1][j + 1] + 1
            } else {
                len[i + 1][j].max(len[i][j + 1])
            };
        }
    }
    let mut pairs = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if a[i] == b[j] {
            pairs.push((i, j));
            i += 1;
            j += 1;
        } else if len[i + 1][j] >= len[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    pairs
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::snat::config::NodeNetConfig;
    use crate::snat::rules::{ChainRules, desired_rules};
    use crate::snat::save::parse_save;

    fn cfg() -> NodeNetConfig {
        NodeNetConfig::new(
            "eth0",
            Ipv4Addr::new(10, 0, 0, 10),
            vec!["10.0.0.0/16".parse().unwrap()],
        )
    }

    fn desired(cfg: &NodeNetConfig, table: Table) -> TableRules {
        desired_rules(cfg).table(table).unwrap().clone()
    }

    fn state(text: &str, table: Table) -> TableState {
        parse_save(text, table, "test").unwrap()
    }

    /// Applies a plan's script to a parsed state, the way iptables-restore would (only the
    /// commands plans use), so tests can check the result and that a second plan is empty.
    fn simulate(state: &TableState, plan: &TablePlan) -> TableState {
        let mut s = state.clone();
        s.present = true;
        for line in &plan.script {
            let (cmd, rest) = line.split_once(' ').unwrap();
            let (chain, arg) = rest.split_once(' ').unwrap_or((rest, ""));
            let chain = chain.to_string();
            let idx_of_nth = |s: &TableState, n: usize| {
                s.rules
                    .iter()
                    .enumerate()
                    .filter(|(_, (c, _))| *c == chain)
                    .nth(n)
                    .map(|(i, _)| i)
            };
            match cmd {
                "-N" => {
                    assert!(!s.has_chain(&chain), "{line}");
                    s.chains.push(chain);
                }
                "-X" => {
                    assert!(s.chain_rules(&chain).is_empty(), "{line}: not empty");
                    assert!(
                        !s.rules
                            .iter()
                            .any(|(_, r)| r.ends_with(&format!("-j {chain}"))),
                        "{line}: still referenced"
                    );
                    s.chains.retain(|c| *c != chain);
                }
                "-F" => s.rules.retain(|(c, _)| *c != chain),
                "-A" => {
                    assert!(s.has_chain(&chain) || !is_own_chain(&chain), "{line}");
                    if !s.has_chain(&chain) {
                        s.chains.push(chain.clone());
                    }
                    let last = s
                        .rules
                        .iter()
                        .rposition(|(c, _)| *c == chain)
                        .map(|i| i + 1)
                        .unwrap_or(s.rules.len());
                    s.rules.insert(last, (chain, arg.to_string()));
                }
                "-I" => {
                    let (n, rule) = arg.split_once(' ').unwrap();
                    let n: usize = n.parse().unwrap();
                    let at = idx_of_nth(&s, n - 1).expect("insert position exists");
                    s.rules.insert(at, (chain, rule.to_string()));
                }
                "-D" => {
                    let at = match arg.parse::<usize>() {
                        Ok(n) => idx_of_nth(&s, n - 1),
                        Err(_) => s.rules.iter().position(|(c, r)| *c == chain && r == arg),
                    };
                    s.rules.remove(at.expect("deleted rule exists"));
                }
                other => panic!("unexpected command {other}"),
            }
        }
        s
    }

    /// Plans, simulates, and checks the result holds the desired rules exactly and the
    /// foreign ones untouched in their order; returns the plan.
    fn converge(text: &str, d: &TableRules) -> TablePlan {
        let before = state(text, d.table);
        let plan = plan_table(&before, d);
        let after = simulate(&before, &plan);
        for c in &d.chains {
            let ours: Vec<&str> = after
                .chain_rules(&c.name)
                .into_iter()
                .filter(|r| is_own_chain(&c.name) || is_our_rule(r))
                .collect();
            assert_eq!(ours, c.rules, "chain {}", c.name);
        }
        for c in &after.chains {
            if is_own_chain(c) {
                assert!(d.wants_own_chain(c), "stale chain {c} left");
            } else if d.chain(c).is_empty() {
                assert!(
                    !after.chain_rules(c).iter().any(|r| is_our_rule(r)),
                    "our rule left in {c}"
                );
            }
        }
        let foreign = |s: &TableState| -> Vec<(String, String)> {
            s.rules
                .iter()
                .filter(|(c, r)| !is_own_chain(c) && !is_our_rule(r))
                .cloned()
                .collect()
        };
        assert_eq!(foreign(&after), foreign(&before), "foreign rules changed");
        assert!(plan_table(&after, d).is_empty(), "second plan not empty");
        plan
    }

    fn save_of(d: &TableRules, extra_pre: &[&str]) -> String {
        let mut s = format!(
            "*{}\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n",
            d.table
        );
        for c in d.chains.iter().filter(|c| is_own_chain(&c.name)) {
            s.push_str(&format!(":{} - [0:0]\n", c.name));
        }
        for l in extra_pre {
            s.push_str(l);
            s.push('\n');
        }
        for c in &d.chains {
            for r in &c.rules {
                s.push_str(&format!("[7:700] -A {} {r}\n", c.name));
            }
        }
        s.push_str("COMMIT\n");
        s
    }

    #[test]
    fn fresh_table_gets_chains_then_rules() {
        let d = desired(&cfg(), Table::Nat);
        let plan = converge("", &d);
        assert_eq!(
            plan.restore_input(),
            r#"*nat
-N AWS-SNAT-CHAIN-0
-N AWS-CONNMARK-CHAIN-0
-A PREROUTING -i eni+ -m comment --comment "AWS, outbound connections" -j AWS-CONNMARK-CHAIN-0
-A PREROUTING -m comment --comment "AWS, CONNMARK" -j CONNMARK --restore-mark --nfmask 0x80 --ctmask 0x80
-A POSTROUTING -m comment --comment "AWS SNAT CHAIN" -j AWS-SNAT-CHAIN-0
-A AWS-SNAT-CHAIN-0 -d 10.0.0.0/16 -m comment --comment "AWS SNAT CHAIN" -j RETURN
-A AWS-SNAT-CHAIN-0 ! -o vlan+ -m comment --comment "AWS, SNAT" -m addrtype ! --dst-type LOCAL -j SNAT --to-source 10.0.0.10 --random-fully
-A AWS-CONNMARK-CHAIN-0 -d 10.0.0.0/16 -m comment --comment "AWS CONNMARK CHAIN" -j RETURN
-A AWS-CONNMARK-CHAIN-0 -m comment --comment "AWS, CONNMARK" -j CONNMARK --set-xmark 0x80/0x80
COMMIT
"#
        );
        assert_eq!(plan.changes.len(), 9);
        assert_eq!(
            plan.changes[0].to_string(),
            "nat: created chain AWS-SNAT-CHAIN-0"
        );
    }

    #[test]
    fn desired_state_plans_nothing() {
        for table in [Table::Nat, Table::Mangle] {
            let d = desired(&cfg(), table);
            let text = save_of(
                &d,
                &[
                    "-A PREROUTING -j KUBE-SERVICES",
                    r#"-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING"#,
                ],
            );
            let plan = plan_table(&state(&text, table), &d);
            assert!(plan.is_empty(), "{table}: {:?}", plan.script);
            assert!(plan.changes.is_empty());
        }
    }

    #[test]
    fn stale_cidr_and_old_chains_go_foreign_rules_stay() {
        let d = desired(&cfg(), Table::Nat);
        let text = r#"*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:AWS-SNAT-CHAIN-0 - [0:0]
:AWS-SNAT-CHAIN-1 - [0:0]
:AWS-CONNMARK-CHAIN-0 - [0:0]
:AWS-CONNMARK-CHAIN-1 - [0:0]
:KUBE-POSTROUTING - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A PREROUTING -i eni+ -m comment --comment "AWS, outbound connections" -m state --state NEW -j AWS-CONNMARK-CHAIN-0
-A PREROUTING -i eni+ -m comment --comment "AWS, outbound connections" -j AWS-CONNMARK-CHAIN-0
-A PREROUTING -m comment --comment "AWS, CONNMARK" -j CONNMARK --restore-mark --nfmask 0x80 --ctmask 0x80
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A POSTROUTING -m comment --comment "AWS SNAT CHAIN" -j AWS-SNAT-CHAIN-0
-A AWS-SNAT-CHAIN-0 ! -d 10.0.0.0/16 -m comment --comment "AWS SNAT CHAIN" -j AWS-SNAT-CHAIN-1
-A AWS-SNAT-CHAIN-0 -d 10.0.0.0/16 -m comment --comment "AWS SNAT CHAIN" -j RETURN
-A AWS-SNAT-CHAIN-0 -d 172.16.0.0/12 -m comment --comment "AWS SNAT CHAIN" -j RETURN
-A AWS-SNAT-CHAIN-0 ! -o vlan+ -m comment --comment "AWS, SNAT" -m addrtype ! --dst-type LOCAL -j SNAT --to-source 10.0.0.10 --random-fully
-A AWS-SNAT-CHAIN-1 ! -o vlan+ -m comment --comment "AWS, SNAT" -m addrtype ! --dst-type LOCAL -j SNAT --to-source 10.0.0.10
-A AWS-CONNMARK-CHAIN-0 -d 10.0.0.0/16 -m comment --comment "AWS CONNMARK CHAIN" -j RETURN
-A AWS-CONNMARK-CHAIN-0 -m comment --comment "AWS, CONNMARK" -j CONNMARK --set-xmark 0x80/0x80
-A AWS-CONNMARK-CHAIN-1 -j RETURN
-A KUBE-POSTROUTING -j MASQUERADE
COMMIT
"#;
        let plan = converge(text, &d);
        assert_eq!(
            plan.script,
            vec![
                r#"-D PREROUTING -i eni+ -m comment --comment "AWS, outbound connections" -m state --state NEW -j AWS-CONNMARK-CHAIN-0"#,
                "-D AWS-SNAT-CHAIN-0 3",
                "-D AWS-SNAT-CHAIN-0 1",
                "-F AWS-SNAT-CHAIN-1",
                "-F AWS-CONNMARK-CHAIN-1",
                "-X AWS-SNAT-CHAIN-1",
                "-X AWS-CONNMARK-CHAIN-1",
            ]
        );
        let report: Vec<String> = plan.changes.iter().map(|c| c.to_string()).collect();
        assert!(report.contains(
            &r#"nat: removed -A AWS-SNAT-CHAIN-0 -d 172.16.0.0/12 -m comment --comment "AWS SNAT CHAIN" -j RETURN"#
                .to_string()
        ));
        assert!(report.contains(&"nat: removed chain AWS-CONNMARK-CHAIN-1".to_string()));
        assert!(report.contains(&"nat: removed -A AWS-CONNMARK-CHAIN-1 -j RETURN".to_string()));
    }

    #[test]
    fn new_exclusion_is_inserted_before_the_snat_rule() {
        let old = cfg();
        let new = NodeNetConfig {
            exclude_snat_cidrs: vec!["192.168.0.0/16".parse().unwrap()],
            ..cfg()
        };
        let text = save_of(&desired(&old, Table::Nat), &[]);
        let plan = converge(&text, &desired(&new, Table::Nat));
        assert_eq!(
            plan.script,
            vec![
                r#"-I AWS-SNAT-CHAIN-0 2 -d 192.168.0.0/16 -m comment --comment "AWS SNAT CHAIN EXCLUSION" -j RETURN"#,
                r#"-I AWS-CONNMARK-CHAIN-0 2 -d 192.168.0.0/16 -m comment --comment "AWS CONNMARK CHAIN" -j RETURN"#,
            ]
        );
        // And back: just those two go.
        let text = save_of(&desired(&new, Table::Nat), &[]);
        let plan = converge(&text, &desired(&old, Table::Nat));
        assert_eq!(
            plan.script,
            vec!["-D AWS-SNAT-CHAIN-0 2", "-D AWS-CONNMARK-CHAIN-0 2"]
        );
    }

    #[test]
    fn go_cni_reversed_returns_are_reordered_with_few_moves() {
        // The Go CNI inserts each RETURN at the top, so its chain lists CIDRs backwards.
        let c = NodeNetConfig {
            vpc_cidrs: vec![
                "10.0.0.0/16".parse().unwrap(),
                "10.1.0.0/16".parse().unwrap(),
            ],
            exclude_snat_cidrs: vec!["192.168.0.0/16".parse().unwrap()],
            ..cfg()
        };
        let d = desired(&c, Table::Nat);
        let snat = d.chain("AWS-SNAT-CHAIN-0");
        let mut reversed: Vec<String> = snat[..3].iter().rev().cloned().collect();
        reversed.push(snat[3].clone());
        let mut go = d.clone();
        for c in go
            .chains
            .iter_mut()
            .filter(|c| c.name == "AWS-SNAT-CHAIN-0")
        {
            c.rules = reversed.clone();
        }
        let text = save_of(&go, &[]);
        let plan = converge(&text, &d);
        // Two of the three RETURNs move; the SNAT rule and one RETURN keep their counters.
        assert_eq!(
            plan.changes
                .iter()
                .filter(|c| matches!(c, Change::RuleDeleted { .. }))
                .count(),
            2
        );
    }

    #[test]
    fn missing_jump_goes_before_the_existing_restore() {
        let d = desired(&cfg(), Table::Nat);
        let text = save_of(&d, &[]).replace(
            r#"[7:700] -A PREROUTING -i eni+ -m comment --comment "AWS, outbound connections" -j AWS-CONNMARK-CHAIN-0
"#,
            "",
        );
        let text = text.replace(
            "[7:700] -A PREROUTING -m comment --comment \"AWS, CONNMARK\"",
            "-A PREROUTING -j KUBE-SERVICES\n[7:700] -A PREROUTING -m comment --comment \"AWS, CONNMARK\"",
        );
        let plan = converge(&text, &d);
        assert_eq!(
            plan.script,
            vec![
                r#"-I PREROUTING 2 -i eni+ -m comment --comment "AWS, outbound connections" -j AWS-CONNMARK-CHAIN-0"#
            ]
        );
    }

    #[test]
    fn duplicates_in_a_shared_chain_are_redone() {
        let d = desired(&cfg(), Table::Mangle);
        let dup = format!("-A PREROUTING {}", d.chain("PREROUTING")[1]);
        let text = save_of(&d, &["-A PREROUTING -i lo -j RETURN", &dup]);
        let plan = converge(&text, &d);
        assert_eq!(
            plan.script.iter().filter(|l| l.starts_with("-D ")).count(),
            4
        );
        assert_eq!(
            plan.script.iter().filter(|l| l.starts_with("-A ")).count(),
            3
        );
    }

    #[test]
    fn duplicates_in_our_chain_are_deleted_by_position() {
        let d = desired(&cfg(), Table::Nat);
        let ret = &d.chain("AWS-SNAT-CHAIN-0")[0];
        let text = save_of(&d, &[]).replace(
            &format!("[7:700] -A AWS-SNAT-CHAIN-0 {ret}\n"),
            &format!("[7:700] -A AWS-SNAT-CHAIN-0 {ret}\n[1:1] -A AWS-SNAT-CHAIN-0 {ret}\n"),
        );
        let plan = converge(&text, &d);
        assert_eq!(plan.script, vec!["-D AWS-SNAT-CHAIN-0 2"]);
    }

    #[test]
    fn external_snat_removes_every_nat_rule_of_ours() {
        let on = desired(&cfg(), Table::Nat);
        let off = desired(
            &NodeNetConfig {
                external_snat: true,
                ..cfg()
            },
            Table::Nat,
        );
        let text = save_of(&on, &["-A POSTROUTING -o eth9 -j MASQUERADE"]);
        let plan = converge(&text, &off);
        assert!(plan.script.ends_with(&[
            "-F AWS-SNAT-CHAIN-0".to_string(),
            "-F AWS-CONNMARK-CHAIN-0".to_string(),
            "-X AWS-SNAT-CHAIN-0".to_string(),
            "-X AWS-CONNMARK-CHAIN-0".to_string(),
        ]));
        assert_eq!(plan.script.len(), 7);
    }

    #[test]
    fn node_port_toggle_keeps_the_pod_restore_counters() {
        let without = desired(
            &NodeNetConfig {
                node_port_support: false,
                ..cfg()
            },
            Table::Mangle,
        );
        let with = desired(&cfg(), Table::Mangle);
        let plan = converge(&save_of(&without, &[]), &with);
        assert_eq!(plan.script.len(), 2);
        assert!(plan.script[0].starts_with("-I PREROUTING 1 -i eth0 "));
        assert!(plan.script[1].starts_with("-A PREROUTING -i vlan+ "));
        let plan = converge(&save_of(&with, &[]), &without);
        assert_eq!(plan.script.len(), 2);
        assert!(
            plan.script
                .iter()
                .all(|l| l.starts_with("-D PREROUTING -i "))
        );
    }

    #[test]
    fn unknown_own_chain_contents_are_replaced() {
        let d = TableRules {
            table: Table::Nat,
            chains: vec![ChainRules {
                name: "AWS-SNAT-CHAIN-0".into(),
                rules: vec!["-j RETURN".into()],
            }],
        };
        let text = "*nat\n:AWS-SNAT-CHAIN-0 - [0:0]\n-A AWS-SNAT-CHAIN-0 -j ACCEPT\n-A AWS-SNAT-CHAIN-0 -j DROP\nCOMMIT\n";
        let plan = converge(text, &d);
        assert_eq!(
            plan.script,
            vec![
                "-D AWS-SNAT-CHAIN-0 2",
                "-D AWS-SNAT-CHAIN-0 1",
                "-A AWS-SNAT-CHAIN-0 -j RETURN"
            ]
        );
    }

    #[test]
    fn lcs_pairs_are_increasing_and_maximal() {
        let b: Vec<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
        assert_eq!(lcs(&["a", "b", "c", "d"], &b).len(), 4);
        assert_eq!(lcs(&["d", "c", "b", "a"], &b).len(), 1);
        assert_eq!(lcs(&["x", "b", "y", "d"], &b), vec![(1, 1), (3, 3)]);
        assert!(lcs(&[], &b).is_empty());
    }
}
