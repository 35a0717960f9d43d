//! Policy routing rules of either family: add, delete, dump.

use std::fmt;

use ipnetwork::{Ipv4Network, Ipv6Network};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleFlags, RuleMessage};

use super::family::IpFamily;
use super::{FLAGS_ACK, FLAGS_CREATE_EXCL, FLAGS_DUMP, Request, table_header, table_name};

/// A rule of family `F` (`ip rule` / `ip -6 rule`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleOf<F: IpFamily> {
    /// Priority (`pref`); the kernel reports 0 for the `local` rule.
    pub priority: u32,
    /// `from` prefix; `None` is `from all`.
    pub src: Option<F>,
    /// `to` prefix; `None` is any destination.
    pub dst: Option<F>,
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

/// An IPv4 rule that looks up a table.
pub type Rule = RuleOf<Ipv4Network>;
/// An IPv6 rule that looks up a table.
pub type Rule6 = RuleOf<Ipv6Network>;

impl<F: IpFamily> RuleOf<F> {
    /// `<prio>: from <src> lookup <table>`.
    pub fn from_src(priority: u32, src: F, table: u32) -> Self {
        Self {
            src: Some(src),
            ..Self::lookup(priority, table)
        }
    }

    /// `<prio>: from all to <dst> lookup <table>`.
    pub fn to_dst(priority: u32, dst: F, table: u32) -> Self {
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

impl<F: IpFamily> fmt::Display for RuleOf<F> {
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

fn rule_message<F: IpFamily>(rule: &RuleOf<F>) -> RuleMessage {
    let mut msg = RuleMessage::default();
    msg.header.family = F::FAMILY;
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
            .push(RuleAttribute::Source(src.network().into()));
    }
    if let Some(dst) = rule.dst {
        msg.header.dst_len = dst.prefix();
        msg.attributes
            .push(RuleAttribute::Destination(dst.network().into()));
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
pub fn add_rule<F: IpFamily>(rule: &RuleOf<F>) -> Request {
    Request::new(
        RouteNetlinkMessage::NewRule(rule_message(rule)),
        FLAGS_CREATE_EXCL,
        format!("add rule {rule}"),
    )
}

/// `ip rule del ...`: deletes the first rule matching every field given; table 0 matches
/// any table.
pub fn delete_rule<F: IpFamily>(rule: &RuleOf<F>) -> Request {
    Request::new(
        RouteNetlinkMessage::DelRule(rule_message(rule)),
        FLAGS_ACK,
        format!("delete rule {rule}"),
    )
}

/// `ip -4 rule show`.
pub fn dump_rules() -> Request {
    dump_rules_of::<Ipv4Network>()
}

/// `ip -4 rule show` or `ip -6 rule show`.
pub fn dump_rules_of<F: IpFamily>() -> Request {
    let mut msg = RuleMessage::default();
    msg.header.family = F::FAMILY;
    Request::new(
        RouteNetlinkMessage::GetRule(msg),
        FLAGS_DUMP,
        format!("dump {} rules", F::NAME),
    )
}

/// Our view of a kernel rule message; `None` for anything but IPv4.
pub fn parse_rule(msg: &RuleMessage) -> Option<Rule> {
    parse_rule_of(msg)
}

/// Our view of a kernel rule message; `None` for another family.
pub fn parse_rule_of<F: IpFamily>(msg: &RuleMessage) -> Option<RuleOf<F>> {
    if msg.header.family != F::FAMILY {
        return None;
    }
    let mut rule = RuleOf {
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
            RuleAttribute::Source(ip) => {
                rule.src = F::from_ip(*ip).and_then(|ip| F::new(ip, msg.header.src_len));
            }
            RuleAttribute::Destination(ip) => {
                rule.dst = F::from_ip(*ip).and_then(|ip| F::new(ip, msg.header.dst_len));
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
    parse_rules_of(messages)
}

/// The rules of family `F` in a dump answer.
pub fn parse_rules_of<F: IpFamily>(messages: &[RouteNetlinkMessage]) -> Vec<RuleOf<F>> {
    messages
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewRule(r) => parse_rule_of(r),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL};
    use netlink_packet_route::AddressFamily;

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

    #[test]
    fn ipv6_to_pod_rule_prio_512() {
        let dst: Ipv6Network = "2001:db8::5/128".parse().unwrap();
        let rule = Rule6::to_dst(512, dst, RT_TABLE_MAIN);
        let req = add_rule(&rule);
        let m = msg(&req);
        assert_eq!(m.header.family, AddressFamily::Inet6);
        assert_eq!(m.header.action, RuleAction::ToTable);
        assert_eq!((m.header.dst_len, m.header.src_len), (128, 0));
        assert!(m.attributes.contains(&RuleAttribute::Priority(512)));
        assert!(m.attributes.contains(&RuleAttribute::Table(254)));
        assert!(
            m.attributes
                .contains(&RuleAttribute::Destination(IpAddr::V6(dst.ip())))
        );
        assert_eq!(
            req.op,
            "add rule prio 512 from all to 2001:db8::5/128 lookup main"
        );
        assert_eq!(parse_rule_of(m), Some(rule));
        assert_eq!(parse_rule(m), None, "not an IPv4 rule");
        assert_eq!(dump_rules_of::<Ipv6Network>().op, "dump IPv6 rules");
        assert_eq!(dump_rules().op, "dump IPv4 rules");
    }
}
