//! IPv4 policy routing rules: add, delete, dump.

use std::fmt;
use std::net::IpAddr;

use ipnetwork::Ipv4Network;
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleFlags, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{FLAGS_ACK, FLAGS_CREATE_EXCL, FLAGS_DUMP, Request, table_header, table_name};

/// An IPv4 rule that looks up a table (`ip rule`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Priority (`pref`); the kernel reports 0 for the `local` rule.
    pub priority: u32,
    /// `from` prefix; `None` is `from all`.
    pub src: Option<Ipv4Network>,
    /// `to` prefix; `None` is any destination.
    pub dst: Option<Ipv4Network>,
    /// `fwmark` value and mask.
    pub fwmark: Option<(u32, u32)>,
    /// `iif` interface name.
    pub iif: Option<String>,
    /// Table looked up; 0 for rules whose action is not a lookup (see `lookup`).
    pub table: u32,
    /// True when the action is "look up `table`" (not blackhole/unreachable/goto...).
    pub lookup: bool,
    /// `not`: the selector is inverted.
    pub invert: bool,
}

impl Rule {
    /// `<prio>: from <src> lookup <table>`.
    pub fn from_src(priority: u32, src: Ipv4Network, table: u32) -> Self {
        Self {
            src: Some(src),
            ..Self::lookup(priority, table)
        }
    }

    /// `<prio>: from all to <dst> lookup <table>`.
    pub fn to_dst(priority: u32, dst: Ipv4Network, table: u32) -> Self {
        Self {
            dst: Some(dst),
            ..Self::lookup(priority, table)
        }
    }

    /// `<prio>: from all lookup <table>`.
    pub fn lookup(priority: u32, table: u32) -> Self {
        Self {
            priority,
            src: None,
            dst: None,
            fwmark: None,
            iif: None,
            table,
            lookup: true,
            invert: false,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "prio {}", self.priority)?;
        if self.invert {
            write!(f, " not")?;
        }
        match self.src {
            Some(src) => write!(f, " from {src}")?,
            None => write!(f, " from all")?,
        }
        if let Some(dst) = self.dst {
            write!(f, " to {dst}")?;
        }
        if let Some((mark, mask)) = self.fwmark {
            write!(f, " fwmark {mark:#x}/{mask:#x}")?;
        }
        if let Some(iif) = &self.iif {
            write!(f, " iif {iif}")?;
        }
        if self.lookup {
            write!(f, " lookup {}", table_name(self.table))?;
        }
        Ok(())
    }
}

fn rule_message(rule: &Rule) -> RuleMessage {
    let mut msg = RuleMessage::default();
    msg.header.family = AddressFamily::Inet;
    msg.header.table = table_header(rule.table);
    msg.header.action = if rule.lookup {
        RuleAction::ToTable
    } else {
        RuleAction::Unspec
    };
    if rule.invert {
        msg.header.flags = RuleFlags::Invert;
    }
    msg.attributes.push(RuleAttribute::Priority(rule.priority));
    if let Some(src) = rule.src {
        msg.header.src_len = src.prefix();
        msg.attributes
            .push(RuleAttribute::Source(IpAddr::V4(src.network())));
    }
    if let Some(dst) = rule.dst {
        msg.header.dst_len = dst.prefix();
        msg.attributes
            .push(RuleAttribute::Destination(IpAddr::V4(dst.network())));
    }
    if let Some((mark, mask)) = rule.fwmark {
        msg.attributes.push(RuleAttribute::FwMark(mark));
        msg.attributes.push(RuleAttribute::FwMask(mask));
    }
    if let Some(iif) = &rule.iif {
        msg.attributes.push(RuleAttribute::Iifname(iif.clone()));
    }
    if rule.table != 0 {
        msg.attributes.push(RuleAttribute::Table(rule.table));
    }
    msg
}

/// `ip rule add ...`: fails with `EEXIST` when an identical rule exists.
pub fn add_rule(rule: &Rule) -> Request {
    Request::new(
        RouteNetlinkMessage::NewRule(rule_message(rule)),
        FLAGS_CREATE_EXCL,
        format!("add rule {rule}"),
    )
}

/// `ip rule del ...`: deletes the first rule matching every field given; table 0 matches
/// any table.
pub fn delete_rule(rule: &Rule) -> Request {
    Request::new(
        RouteNetlinkMessage::DelRule(rule_message(rule)),
        FLAGS_ACK,
        format!("delete rule {rule}"),
    )
}

/// `ip -4 rule show`.
pub fn dump_rules() -> Request {
    let mut msg = RuleMessage::default();
    msg.header.family = AddressFamily::Inet;
    Request::new(
        RouteNetlinkMessage::GetRule(msg),
        FLAGS_DUMP,
        "dump IPv4 rules".into(),
    )
}

/// Our view of a kernel rule message; `None` for anything but IPv4.
pub fn parse_rule(msg: &RuleMessage) -> Option<Rule> {
    if msg.header.family != AddressFamily::Inet {
        return None;
    }
    let mut rule = Rule {
        priority: 0,
        src: None,
        dst: None,
        fwmark: None,
        iif: None,
        table: u32::from(msg.header.table),
        lookup: msg.header.action == RuleAction::ToTable,
        invert: msg.header.flags.contains(RuleFlags::Invert),
    };
    let mut mark = None;
    let mut mask = None;
    for attr in &msg.attributes {
        match attr {
            RuleAttribute::Priority(p) => rule.priority = *p,
            RuleAttribute::Source(IpAddr::V4(ip)) => {
                rule.src = Ipv4Network::new(*ip, msg.header.src_len).ok();
            }
            RuleAttribute::Destination(IpAddr::V4(ip)) => {
                rule.dst = Ipv4Network::new(*ip, msg.header.dst_len).ok();
            }
            RuleAttribute::FwMark(m) => mark = Some(*m),
            RuleAttribute::FwMask(m) => mask = Some(*m),
            RuleAttribute::Iifname(name) => rule.iif = Some(name.clone()),
            RuleAttribute::Table(t) => rule.table = *t,
            _ => {}
        }
    }
    rule.fwmark = mark.map(|m| (m, mask.unwrap_or(u32::MAX)));
    Some(rule)
}

/// The IPv4 rules in a dump answer.
pub fn parse_rules(messages: &[RouteNetlinkMessage]) -> Vec<Rule> {
    messages
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewRule(r) => parse_rule(r),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL};

    use super::*;
    use crate::messages::RT_TABLE_MAIN;

    fn net(s: &str) -> Ipv4Network {
        s.parse().unwrap()
    }

    fn msg(req: &Request) -> &RuleMessage {
        match req.inner() {
            Some(RouteNetlinkMessage::NewRule(m)) | Some(RouteNetlinkMessage::DelRule(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn to_container_rule_prio_512() {
        let rule = Rule::to_dst(512, net("10.0.0.5/32"), RT_TABLE_MAIN);
        let req = add_rule(&rule);
        assert_eq!(
            req.flags() & (NLM_F_CREATE | NLM_F_EXCL),
            NLM_F_CREATE | NLM_F_EXCL
        );
        let m = msg(&req);
        assert_eq!(m.header.family, AddressFamily::Inet);
        assert_eq!(m.header.action, RuleAction::ToTable);
        assert_eq!((m.header.dst_len, m.header.src_len), (32, 0));
        assert_eq!(m.header.table, 254);
        assert!(m.attributes.contains(&RuleAttribute::Priority(512)));
        assert!(m.attributes.contains(&RuleAttribute::Table(254)));
        assert!(
            m.attributes
                .contains(&RuleAttribute::Destination(IpAddr::V4(Ipv4Addr::new(
                    10, 0, 0, 5
                ))))
        );
        assert!(
            !m.attributes
                .iter()
                .any(|a| matches!(a, RuleAttribute::Source(_)))
        );
        assert_eq!(
            req.op,
            "add rule prio 512 from all to 10.0.0.5/32 lookup main"
        );
        assert_eq!(parse_rule(m), Some(rule));
    }

    #[test]
    fn from_pod_rule_prio_1536() {
        let rule = Rule::from_src(1536, net("10.0.0.5/32"), 3);
        let m = msg(&add_rule(&rule)).clone();
        assert_eq!((m.header.src_len, m.header.dst_len), (32, 0));
        assert_eq!(m.header.table, 3);
        assert!(m.attributes.contains(&RuleAttribute::Priority(1536)));
        assert!(m.attributes.contains(&RuleAttribute::Table(3)));
        assert!(
            m.attributes
                .contains(&RuleAttribute::Source(IpAddr::V4(Ipv4Addr::new(
                    10, 0, 0, 5
                ))))
        );
        assert_eq!(parse_rule(&m), Some(rule));
    }

    #[test]
    fn delete_any_table_omits_the_table() {
        let rule = Rule::from_src(1536, net("10.0.0.5/32"), 0);
        let m = msg(&delete_rule(&rule)).clone();
        assert_eq!(m.header.table, 0);
        assert!(
            !m.attributes
                .iter()
                .any(|a| matches!(a, RuleAttribute::Table(_)))
        );
    }

    #[test]
    fn fwmark_rule_round_trips() {
        let rule = Rule {
            fwmark: Some((0x80, 0x80)),
            ..Rule::lookup(1024, RT_TABLE_MAIN)
        };
        let m = msg(&add_rule(&rule)).clone();
        assert_eq!(parse_rule(&m), Some(rule.clone()));
        assert_eq!(
            rule.to_string(),
            "prio 1024 from all fwmark 0x80/0x80 lookup main"
        );
        assert_eq!(dump_rules().flags() & NLM_F_DUMP, NLM_F_DUMP);
    }
}
