//! The policy rule that sends marked traffic to the main table.

use crate::messages::RT_TABLE_MAIN;
use crate::messages::rule::Rule;
use crate::socket::Netlink;

use super::config::NodeNetConfig;
use super::error::Result;

/// Priority of `from all fwmark <mark>/<mark> lookup main`: after the per-pod `to` rules
/// (512), before the per-pod `from` rules (1536) that would send the traffic out of a
/// secondary ENI.
pub const PRIO_FWMARK: u32 = 1024;

/// `1024: from all fwmark <mark>/<mark> lookup main`.
pub fn fwmark_rule(mark: u32) -> Rule {
    Rule {
        fwmark: Some((mark, mark)),
        ..Rule::lookup(PRIO_FWMARK, RT_TABLE_MAIN)
    }
}

/// True for any fwmark rule at [`PRIO_FWMARK`]: ours, possibly with an old mark.
pub fn is_fwmark_rule(rule: &Rule) -> bool {
    rule.priority == PRIO_FWMARK && rule.fwmark.is_some()
}

/// True when `cfg` needs the fwmark rule: NodePort replies and SNATed pod traffic are the two
/// users of the mark.
pub fn wants_fwmark_rule(cfg: &NodeNetConfig) -> bool {
    cfg.node_port_support || !cfg.external_snat
}

/// What [`reconcile_fwmark_rule`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleChanges {
    /// Rules added.
    pub added: Vec<Rule>,
    /// Rules removed (another mark, a duplicate, or not wanted any more).
    pub removed: Vec<Rule>,
}

/// Makes the fwmark rule present exactly once when `cfg` wants it and absent otherwise,
/// leaving a correct rule in place (the Go CNI deletes and re-adds it on every start).
pub fn reconcile_fwmark_rule(nl: &Netlink, cfg: &NodeNetConfig) -> Result<RuleChanges> {
    let want = wants_fwmark_rule(cfg).then(|| fwmark_rule(cfg.connmark));
    let mut changes = RuleChanges::default();
    let mut present = false;
    for rule in nl.rules()?.into_iter().filter(is_fwmark_rule) {
        if !present && want.as_ref() == Some(&rule) {
            present = true;
            continue;
        }
        match nl.delete_rule(&rule) {
            Ok(()) => changes.removed.push(rule),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(rule) = want.filter(|_| !present) {
        match nl.add_rule(&rule) {
            Ok(()) => changes.added.push(rule),
            Err(e) if e.is_exists() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn rule_reads_like_the_go_cnis() {
        assert_eq!(
            fwmark_rule(0x80).to_string(),
            "prio 1024 from all fwmark 0x80/0x80 lookup main"
        );
        assert!(is_fwmark_rule(&fwmark_rule(0x4000)));
        assert!(!is_fwmark_rule(&Rule::lookup(PRIO_FWMARK, RT_TABLE_MAIN)));
        assert!(!is_fwmark_rule(&Rule {
            priority: 1025,
            ..fwmark_rule(0x80)
        }));
    }

    #[test]
    fn wanted_unless_external_snat_without_node_ports() {
        let base = NodeNetConfig::new("eth0", Ipv4Addr::new(10, 0, 0, 10), vec![]);
        for (external_snat, node_port_support, want) in [
            (false, false, true),
            (false, true, true),
            (true, true, true),
            (true, false, false),
        ] {
            let cfg = NodeNetConfig {
                external_snat,
                node_port_support,
                ..base.clone()
            };
            assert_eq!(
                wants_fwmark_rule(&cfg),
                want,
                "{external_snat} {node_port_support}"
            );
        }
    }
}
