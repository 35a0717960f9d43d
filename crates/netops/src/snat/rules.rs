//! The rules the node should have, as `iptables-save` prints them, and how we recognise ours.
//!
//! Rules are kept as the exact text `iptables-save` (1.8.x, both backends) prints after
//! `-A <chain> `: comparing that text with the kernel's state is what lets [`super::apply`]
//! change only what differs, so packet counters survive.

use std::fmt;

use ipnetwork::Ipv4Network;

use super::config::{NodeNetConfig, Randomize};

/// The SNAT chain in the nat table (name kept from the Go CNI; tools look for it).
pub const SNAT_CHAIN: &str = "AWS-SNAT-CHAIN-0";
/// The chain marking outbound pod connections in the nat table.
pub const CONNMARK_CHAIN: &str = "AWS-CONNMARK-CHAIN-0";

/// Comment of the POSTROUTING jump and the VPC RETURNs in [`SNAT_CHAIN`].
pub const COMMENT_SNAT_CHAIN: &str = "AWS SNAT CHAIN";
/// Comment of the excluded-CIDR RETURNs in [`SNAT_CHAIN`].
pub const COMMENT_SNAT_EXCLUSION: &str = "AWS SNAT CHAIN EXCLUSION";
/// Comment of the SNAT rule itself.
pub const COMMENT_SNAT: &str = "AWS, SNAT";
/// Comment of the nat PREROUTING jump to [`CONNMARK_CHAIN`].
pub const COMMENT_OUTBOUND: &str = "AWS, outbound connections";
/// Comment of the connmark set (in [`CONNMARK_CHAIN`]) and restore (nat PREROUTING) rules.
pub const COMMENT_CONNMARK: &str = "AWS, CONNMARK";
/// Comment of the RETURNs in [`CONNMARK_CHAIN`].
pub const COMMENT_CONNMARK_CHAIN: &str = "AWS CONNMARK CHAIN";
/// Comment of the mangle PREROUTING (NodePort) rules.
pub const COMMENT_PRIMARY_ENI: &str = "AWS, primary ENI";
/// Comment of the nat POSTROUTING SNAT of IPv6 pods' IPv4 egress addresses.
pub const COMMENT_EGRESS: &str = "AWS, IPv4 egress SNAT";

/// Every comment any version of the Go CNI or this crate gives its rules: a rule carrying one
/// is ours, also when it is outside our chains.
const OUR_COMMENTS: [&str; 8] = [
    COMMENT_SNAT_CHAIN,
    COMMENT_SNAT_EXCLUSION,
    COMMENT_SNAT,
    COMMENT_OUTBOUND,
    COMMENT_CONNMARK,
    COMMENT_CONNMARK_CHAIN,
    COMMENT_PRIMARY_ENI,
    COMMENT_EGRESS,
];

/// Prefixes of our chains; older Go CNIs numbered them `-1`, `-2`, ... (one per CIDR).
const OWN_CHAIN_PREFIXES: [&str; 2] = ["AWS-SNAT-CHAIN-", "AWS-CONNMARK-CHAIN-"];

/// The iptables tables we write to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    /// `nat`: SNAT and the connmark for SNATed connections.
    Nat,
    /// `mangle`: the NodePort connmark and the mark restore for pod traffic.
    Mangle,
}

impl Table {
    /// The table's name for `-t`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Nat => "nat",
            Self::Mangle => "mangle",
        }
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The desired rules of one chain, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainRules {
    /// Chain name.
    pub name: String,
    /// Each rule as `iptables-save` prints it after `-A <chain> `.
    pub rules: Vec<String>,
}

/// The desired rules of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRules {
    /// Which table.
    pub table: Table,
    /// Built-in chains first, then our own chains; chains without rules of ours are absent.
    pub chains: Vec<ChainRules>,
}

impl TableRules {
    /// The desired rules of `chain`; empty when we want nothing there.
    pub fn chain(&self, chain: &str) -> &[String] {
        self.chains
            .iter()
            .find(|c| c.name == chain)
            .map(|c| c.rules.as_slice())
            .unwrap_or(&[])
    }

    /// True when `chain` is one of our own chains and should exist.
    pub fn wants_own_chain(&self, chain: &str) -> bool {
        is_own_chain(chain) && self.chains.iter().any(|c| c.name == chain)
    }
}

/// The desired state of both tables; `Display` prints it like `iptables-save`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSet {
    /// `nat`, then `mangle` (both always present, possibly without chains).
    pub tables: Vec<TableRules>,
}

impl RuleSet {
    /// The desired rules of `table`.
    pub fn table(&self, table: Table) -> Option<&TableRules> {
        self.tables.iter().find(|t| t.table == table)
    }

    /// Every rule as an `iptables-save` line (`-A <chain> <rule>`), for one table.
    pub fn save_lines(&self, table: Table) -> Vec<String> {
        self.table(table)
            .map(|t| {
                t.chains
                    .iter()
                    .flat_map(|c| c.rules.iter().map(move |r| format!("-A {} {r}", c.name)))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl fmt::Display for RuleSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for t in &self.tables {
            writeln!(f, "*{}", t.table)?;
            for c in t.chains.iter().filter(|c| is_own_chain(&c.name)) {
                writeln!(f, ":{} - [0:0]", c.name)?;
            }
            for line in self.save_lines(t.table) {
                writeln!(f, "{line}")?;
            }
            writeln!(f, "COMMIT")?;
        }
        Ok(())
    }
}

/// The exact rules the node should have for `cfg` (reference §3.5); pure.
///
/// With `external_snat` off, nat gets the SNAT chain (RETURN for each VPC CIDR, then each
/// excluded CIDR, then the SNAT to the primary IP) and the connmark chain (RETURN for the same
/// CIDRs, then set the connmark on new outbound pod connections), jumped to from POSTROUTING
/// and PREROUTING, plus the restore of the mark in nat PREROUTING. mangle PREROUTING marks
/// connections arriving on the primary ENI for a local address (NodePort) and restores the
/// mark on traffic from pods. With `v4_egress`, nat POSTROUTING also SNATs the egress range
/// to the primary IP for every destination outside it: those addresses mean nothing beyond
/// the node, so no VPC CIDR is exempt. Call [`NodeNetConfig::validate`] first;
/// [`super::apply`] does.
pub fn desired_rules(cfg: &NodeNetConfig) -> RuleSet {
    let mark = cfg.connmark;
    let pods = format!("{}+", cfg.veth_prefix);
    let random = match cfg.randomize {
        Randomize::Prng => " --random-fully",
        Randomize::HashRandom => " --random",
        Randomize::None => "",
    };
    let mut nat = Vec::new();
    if !cfg.external_snat {
        nat.push(chain(
            "PREROUTING",
            vec![
                format!(
                    "-i {pods} -m comment --comment {} -j {CONNMARK_CHAIN}",
                    quote(COMMENT_OUTBOUND)
                ),
                restore_mark(None, COMMENT_CONNMARK, mark),
            ],
        ));
        nat.push(chain(
            "POSTROUTING",
            vec![format!(
                "-m comment --comment {} -j {SNAT_CHAIN}",
                quote(COMMENT_SNAT_CHAIN)
            )],
        ));
        let exempt = cfg.vpc_cidrs.iter().map(|c| (c, COMMENT_SNAT_CHAIN)).chain(
            cfg.exclude_snat_cidrs
                .iter()
                .map(|c| (c, COMMENT_SNAT_EXCLUSION)),
        );
        let mut snat: Vec<String> = exempt.map(|(c, comment)| ret(c, comment)).collect();
        snat.push(format!(
            "! -o vlan+ -m comment --comment {} -m addrtype ! --dst-type LOCAL \
             -j SNAT --to-source {}{random}",
            quote(COMMENT_SNAT),
            cfg.primary_ip
        ));
        nat.push(chain(SNAT_CHAIN, snat));
        let mut connmark: Vec<String> = cfg
            .vpc_cidrs
            .iter()
            .chain(&cfg.exclude_snat_cidrs)
            .map(|c| ret(c, COMMENT_CONNMARK_CHAIN))
            .collect();
        connmark.push(format!(
            "-m comment --comment {} -j CONNMARK --set-xmark {mark:#x}/{mark:#x}",
            quote(COMMENT_CONNMARK)
        ));
        nat.push(chain(CONNMARK_CHAIN, connmark));
    }
    if let Some(range) = cfg.v4_egress {
        let range = format!("{}/{}", range.network(), range.prefix());
        let rule = format!(
            "-s {range} ! -d {range} -m comment --comment {} -j SNAT --to-source {}{random}",
            quote(COMMENT_EGRESS),
            cfg.primary_ip
        );
        match nat.iter_mut().find(|c| c.name == "POSTROUTING") {
            Some(post) => post.rules.push(rule),
            None => nat.push(chain("POSTROUTING", vec![rule])),
        }
    }

    let mut mangle_pre = Vec::new();
    if cfg.node_port_support {
        mangle_pre.push(format!(
            "-i {} -m comment --comment {} -m addrtype --dst-type LOCAL --limit-iface-in \
             -j CONNMARK --set-xmark {mark:#x}/{mark:#x}",
            cfg.primary_if,
            quote(COMMENT_PRIMARY_ENI)
        ));
    }
    if cfg.node_port_support || !cfg.external_snat {
        mangle_pre.push(restore_mark(Some(&pods), COMMENT_PRIMARY_ENI, mark));
    }
    if cfg.node_port_support {
        // Branch-ENI (VLAN) pods; kept for parity with the Go CNI's rule set.
        mangle_pre.push(restore_mark(Some("vlan+"), COMMENT_PRIMARY_ENI, mark));
    }
    let mangle = if mangle_pre.is_empty() {
        Vec::new()
    } else {
        vec![chain("PREROUTING", mangle_pre)]
    };

    RuleSet {
        tables: vec![
            TableRules {
                table: Table::Nat,
                chains: nat,
            },
            TableRules {
                table: Table::Mangle,
                chains: mangle,
            },
        ],
    }
}

/// A chain with its rules, duplicates dropped (a CIDR listed twice must not make two
/// identical rules, which could never be matched one to one against the kernel's).
fn chain(name: &str, rules: Vec<String>) -> ChainRules {
    let mut unique: Vec<String> = Vec::with_capacity(rules.len());
    for r in rules {
        if !unique.contains(&r) {
            unique.push(r);
        }
    }
    ChainRules {
        name: name.to_string(),
        rules: unique,
    }
}

/// `RETURN` for a destination; iptables prints the network address, and no `-d` at all for
/// `0.0.0.0/0`.
fn ret(cidr: &Ipv4Network, comment: &str) -> String {
    let dst = if cidr.prefix() == 0 {
        String::new()
    } else {
        format!("-d {}/{} ", cidr.network(), cidr.prefix())
    };
    format!("{dst}-m comment --comment {} -j RETURN", quote(comment))
}

/// `CONNMARK --restore-mark --mask <mark>`, as iptables-save prints it.
fn restore_mark(iface: Option<&str>, comment: &str, mark: u32) -> String {
    let iface = iface.map(|i| format!("-i {i} ")).unwrap_or_default();
    format!(
        "{iface}-m comment --comment {} -j CONNMARK --restore-mark --nfmask {mark:#x} --ctmask {mark:#x}",
        quote(comment)
    )
}

/// A string argument as iptables-save prints it: bare when it is only letters, digits, `_`
/// and `-`, otherwise in double quotes with `"`, `\` and `'` backslash-escaped.
pub(crate) fn quote(value: &str) -> String {
    let bare = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        return value.to_string();
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        if matches!(c, '"' | '\\' | '\'') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Splits a rule the way iptables-restore does: on blanks, with double-quoted arguments
/// whose backslash escapes the next character.
pub(crate) fn tokens(rule: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quoted = false;
    let mut chars = rule.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if quoted => {
                if let Some(next) = chars.next() {
                    cur.push(next);
                }
            }
            '"' => {
                quoted = !quoted;
                in_word = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

/// True for `AWS-SNAT-CHAIN-<n>` and `AWS-CONNMARK-CHAIN-<n>`: the current chains (`-0`) and
/// the per-CIDR chains of old Go CNI versions, which are ours to remove.
pub fn is_own_chain(chain: &str) -> bool {
    OWN_CHAIN_PREFIXES.iter().any(|p| {
        chain
            .strip_prefix(p)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// True when a rule (text after `-A <chain> `) belongs to us: it carries one of our comments
/// or jumps to one of our chains. Anything else is never touched.
pub fn is_our_rule(rule: &str) -> bool {
    let toks = tokens(rule);
    let mut i = 0;
    while i < toks.len() {
        match toks[i].as_str() {
            "--comment" => {
                if toks
                    .get(i + 1)
                    .is_some_and(|c| OUR_COMMENTS.contains(&c.as_str()))
                {
                    return true;
                }
                i += 2;
            }
            "-j" | "--jump" | "-g" | "--goto" => {
                if toks.get(i + 1).is_some_and(|t| is_own_chain(t)) {
                    return true;
                }
                i += 2;
            }
            _ => i += 1,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn net(s: &str) -> Ipv4Network {
        s.parse().unwrap()
    }

    fn cfg() -> NodeNetConfig {
        NodeNetConfig::new(
            "eth0",
            Ipv4Addr::new(10, 0, 0, 10),
            vec![net("10.0.0.0/16"), net("100.64.0.0/16")],
        )
    }

    /// The whole rule set as iptables-save lines, nat then mangle.
    fn lines(cfg: &NodeNetConfig) -> Vec<String> {
        let set = desired_rules(cfg);
        let mut out = set.save_lines(Table::Nat);
        out.extend(set.save_lines(Table::Mangle));
        out
    }

    const NAT_PRE: [&str; 2] = [
        r#"-A PREROUTING -i eni+ -m comment --comment "AWS, outbound connections" -j AWS-CONNMARK-CHAIN-0"#,
        r#"-A PREROUTING -m comment --comment "AWS, CONNMARK" -j CONNMARK --restore-mark --nfmask 0x80 --ctmask 0x80"#,
    ];
    const NAT_POST: &str =
        r#"-A POSTROUTING -m comment --comment "AWS SNAT CHAIN" -j AWS-SNAT-CHAIN-0"#;
    const MANGLE_NODEPORT: &str = r#"-A PREROUTING -i eth0 -m comment --comment "AWS, primary ENI" -m addrtype --dst-type LOCAL --limit-iface-in -j CONNMARK --set-xmark 0x80/0x80"#;
    const MANGLE_PODS: &str = r#"-A PREROUTING -i eni+ -m comment --comment "AWS, primary ENI" -j CONNMARK --restore-mark --nfmask 0x80 --ctmask 0x80"#;
    const MANGLE_VLAN: &str = r#"-A PREROUTING -i vlan+ -m comment --comment "AWS, primary ENI" -j CONNMARK --restore-mark --nfmask 0x80 --ctmask 0x80"#;

    fn snat_chain(exclusions: &[&str], random: &str) -> Vec<String> {
        let mut v = vec![
            r#"-A AWS-SNAT-CHAIN-0 -d 10.0.0.0/16 -m comment --comment "AWS SNAT CHAIN" -j RETURN"#.to_string(),
            r#"-A AWS-SNAT-CHAIN-0 -d 100.64.0.0/16 -m comment --comment "AWS SNAT CHAIN" -j RETURN"#.to_string(),
        ];
        v.extend(exclusions.iter().map(|e| e.to_string()));
        v.push(format!(
            r#"-A AWS-SNAT-CHAIN-0 ! -o vlan+ -m comment --comment "AWS, SNAT" -m addrtype ! --dst-type LOCAL -j SNAT --to-source 10.0.0.10{random}"#
        ));
        v
    }

    fn connmark_chain(exclusions: &[&str]) -> Vec<String> {
        let mut v = vec![
            r#"-A AWS-CONNMARK-CHAIN-0 -d 10.0.0.0/16 -m comment --comment "AWS CONNMARK CHAIN" -j RETURN"#.to_string(),
            r#"-A AWS-CONNMARK-CHAIN-0 -d 100.64.0.0/16 -m comment --comment "AWS CONNMARK CHAIN" -j RETURN"#.to_string(),
        ];
        v.extend(exclusions.iter().map(|e| e.to_string()));
        v.push(
            r#"-A AWS-CONNMARK-CHAIN-0 -m comment --comment "AWS, CONNMARK" -j CONNMARK --set-xmark 0x80/0x80"#
                .to_string(),
        );
        v
    }

    fn expected(snat: Vec<String>, connmark: Vec<String>, mangle: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = NAT_PRE.iter().map(|s| s.to_string()).collect();
        v.push(NAT_POST.to_string());
        v.extend(snat);
        v.extend(connmark);
        v.extend(mangle.iter().map(|s| s.to_string()));
        v
    }

    #[test]
    fn default_config_is_the_go_cni_rule_set() {
        assert_eq!(
            lines(&cfg()),
            expected(
                snat_chain(&[], " --random-fully"),
                connmark_chain(&[]),
                &[MANGLE_NODEPORT, MANGLE_PODS, MANGLE_VLAN]
            )
        );
    }

    #[test]
    fn randomize_variants_change_only_the_snat_rule() {
        for (randomize, suffix) in [
            (Randomize::Prng, " --random-fully"),
            (Randomize::HashRandom, " --random"),
            (Randomize::None, ""),
        ] {
            let c = NodeNetConfig { randomize, ..cfg() };
            assert_eq!(
                lines(&c),
                expected(
                    snat_chain(&[], suffix),
                    connmark_chain(&[]),
                    &[MANGLE_NODEPORT, MANGLE_PODS, MANGLE_VLAN]
                ),
                "{randomize}"
            );
        }
    }

    #[test]
    fn exclusions_follow_the_vpc_cidrs_and_default_route_has_no_destination() {
        let c = NodeNetConfig {
            exclude_snat_cidrs: vec![net("192.168.7.1/24"), net("0.0.0.0/0")],
            ..cfg()
        };
        assert_eq!(
            lines(&c),
            expected(
                snat_chain(
                    &[
                        r#"-A AWS-SNAT-CHAIN-0 -d 192.168.7.0/24 -m comment --comment "AWS SNAT CHAIN EXCLUSION" -j RETURN"#,
                        r#"-A AWS-SNAT-CHAIN-0 -m comment --comment "AWS SNAT CHAIN EXCLUSION" -j RETURN"#,
                    ],
                    " --random-fully"
                ),
                connmark_chain(&[
                    r#"-A AWS-CONNMARK-CHAIN-0 -d 192.168.7.0/24 -m comment --comment "AWS CONNMARK CHAIN" -j RETURN"#,
                    r#"-A AWS-CONNMARK-CHAIN-0 -m comment --comment "AWS CONNMARK CHAIN" -j RETURN"#,
                ]),
                &[MANGLE_NODEPORT, MANGLE_PODS, MANGLE_VLAN]
            )
        );
    }

    #[test]
    fn node_port_off_keeps_only_the_pod_restore_in_mangle() {
        let c = NodeNetConfig {
            node_port_support: false,
            ..cfg()
        };
        assert_eq!(
            lines(&c),
            expected(
                snat_chain(&[], " --random-fully"),
                connmark_chain(&[]),
                &[MANGLE_PODS]
            )
        );
    }

    #[test]
    fn ipv4_egress_is_snated_to_the_primary_ip_also_with_external_snat() {
        let range: Ipv4Network = "169.254.172.0/22".parse().unwrap();
        let egress = "-A POSTROUTING -s 169.254.172.0/22 ! -d 169.254.172.0/22 -m comment \
                      --comment \"AWS, IPv4 egress SNAT\" -j SNAT --to-source 10.0.0.10 --random-fully";
        let alone = NodeNetConfig {
            external_snat: true,
            v4_egress: Some(range),
            ..cfg()
        };
        assert_eq!(desired_rules(&alone).save_lines(Table::Nat), [egress]);
        assert!(is_our_rule(egress.strip_prefix("-A POSTROUTING ").unwrap()));
        let both = NodeNetConfig {
            v4_egress: Some(range),
            ..cfg()
        };
        let nat = desired_rules(&both).save_lines(Table::Nat);
        let post: Vec<&String> = nat
            .iter()
            .filter(|l| l.starts_with("-A POSTROUTING"))
            .collect();
        assert_eq!(post.len(), 2, "{nat:?}");
        assert_eq!(
            post[1], egress,
            "after the SNAT chain's jump, in one POSTROUTING"
        );
    }

    #[test]
    fn external_snat_drops_every_nat_rule() {
        let c = NodeNetConfig {
            external_snat: true,
            exclude_snat_cidrs: vec![net("192.168.0.0/16")],
            ..cfg()
        };
        assert_eq!(lines(&c), vec![MANGLE_NODEPORT, MANGLE_PODS, MANGLE_VLAN]);
        let set = desired_rules(&c);
        assert!(set.table(Table::Nat).unwrap().chains.is_empty());
        assert!(!set.table(Table::Nat).unwrap().wants_own_chain(SNAT_CHAIN));

        let c = NodeNetConfig {
            node_port_support: false,
            ..c
        };
        assert!(lines(&c).is_empty());
        assert!(
            desired_rules(&c)
                .table(Table::Mangle)
                .unwrap()
                .chains
                .is_empty()
        );
    }

    #[test]
    fn custom_mark_prefix_and_interface() {
        let c = NodeNetConfig {
            primary_if: "ens5".into(),
            veth_prefix: "cali".into(),
            connmark: 0x4000,
            vpc_cidrs: vec![net("10.1.0.0/16")],
            randomize: Randomize::None,
            ..cfg()
        };
        assert_eq!(
            lines(&c),
            vec![
                r#"-A PREROUTING -i cali+ -m comment --comment "AWS, outbound connections" -j AWS-CONNMARK-CHAIN-0"#,
                r#"-A PREROUTING -m comment --comment "AWS, CONNMARK" -j CONNMARK --restore-mark --nfmask 0x4000 --ctmask 0x4000"#,
                r#"-A POSTROUTING -m comment --comment "AWS SNAT CHAIN" -j AWS-SNAT-CHAIN-0"#,
                r#"-A AWS-SNAT-CHAIN-0 -d 10.1.0.0/16 -m comment --comment "AWS SNAT CHAIN" -j RETURN"#,
                r#"-A AWS-SNAT-CHAIN-0 ! -o vlan+ -m comment --comment "AWS, SNAT" -m addrtype ! --dst-type LOCAL -j SNAT --to-source 10.0.0.10"#,
                r#"-A AWS-CONNMARK-CHAIN-0 -d 10.1.0.0/16 -m comment --comment "AWS CONNMARK CHAIN" -j RETURN"#,
                r#"-A AWS-CONNMARK-CHAIN-0 -m comment --comment "AWS, CONNMARK" -j CONNMARK --set-xmark 0x4000/0x4000"#,
                r#"-A PREROUTING -i ens5 -m comment --comment "AWS, primary ENI" -m addrtype --dst-type LOCAL --limit-iface-in -j CONNMARK --set-xmark 0x4000/0x4000"#,
                r#"-A PREROUTING -i cali+ -m comment --comment "AWS, primary ENI" -j CONNMARK --restore-mark --nfmask 0x4000 --ctmask 0x4000"#,
                r#"-A PREROUTING -i vlan+ -m comment --comment "AWS, primary ENI" -j CONNMARK --restore-mark --nfmask 0x4000 --ctmask 0x4000"#,
            ]
        );
    }

    #[test]
    fn duplicate_cidrs_make_one_rule_each() {
        let c = NodeNetConfig {
            vpc_cidrs: vec![net("10.0.0.0/16"), net("10.0.5.0/16")],
            exclude_snat_cidrs: vec![net("10.0.0.0/16")],
            ..cfg()
        };
        let set = desired_rules(&c);
        let nat = set.table(Table::Nat).unwrap();
        // Same CIDR as VPC and exclusion: two SNAT-chain rules (their comments differ), one
        // connmark-chain rule.
        assert_eq!(
            nat.chain(SNAT_CHAIN)[..2],
            [
                r#"-d 10.0.0.0/16 -m comment --comment "AWS SNAT CHAIN" -j RETURN"#.to_string(),
                r#"-d 10.0.0.0/16 -m comment --comment "AWS SNAT CHAIN EXCLUSION" -j RETURN"#
                    .to_string(),
            ]
        );
        assert_eq!(nat.chain(SNAT_CHAIN).len(), 3);
        assert_eq!(nat.chain(CONNMARK_CHAIN).len(), 2);
    }

    #[test]
    fn every_desired_rule_is_recognised_as_ours() {
        let c = NodeNetConfig {
            exclude_snat_cidrs: vec![net("0.0.0.0/0")],
            ..cfg()
        };
        for t in desired_rules(&c).tables {
            for ch in t.chains {
                for r in ch.rules {
                    assert!(is_our_rule(&r), "{r}");
                }
            }
        }
    }

    #[test]
    fn display_is_restore_shaped() {
        let text = desired_rules(&NodeNetConfig {
            node_port_support: false,
            external_snat: true,
            ..cfg()
        })
        .to_string();
        assert_eq!(text, "*nat\nCOMMIT\n*mangle\nCOMMIT\n");
        let text = desired_rules(&NodeNetConfig {
            node_port_support: false,
            ..cfg()
        })
        .to_string();
        assert!(text.ends_with(&format!("COMMIT\n*mangle\n{MANGLE_PODS}\nCOMMIT\n")));
        let text = desired_rules(&cfg()).to_string();
        assert!(
            text.starts_with("*nat\n:AWS-SNAT-CHAIN-0 - [0:0]\n:AWS-CONNMARK-CHAIN-0 - [0:0]\n")
        );
    }

    #[test]
    fn quoting_matches_iptables_save() {
        assert_eq!(quote("single"), "single");
        assert_eq!(quote("a_b-1"), "a_b-1");
        assert_eq!(quote("AWS, SNAT"), r#""AWS, SNAT""#);
        assert_eq!(quote(r#"a;b "q" x"#), r#""a;b \"q\" x""#);
        assert_eq!(quote(""), r#""""#);
        assert_eq!(quote(r"back\slash's"), r#""back\\slash\'s""#);
    }

    #[test]
    fn tokens_undo_quoting() {
        assert_eq!(
            tokens(r#"-m comment --comment "a;b \"q\" x" -j RETURN"#),
            vec!["-m", "comment", "--comment", r#"a;b "q" x"#, "-j", "RETURN"]
        );
        assert_eq!(tokens(r#"--comment """#), vec!["--comment", ""]);
        assert_eq!(tokens("  -j   X  "), vec!["-j", "X"]);
        for v in ["single", "AWS, SNAT", r#"a"b\c'd"#, ""] {
            assert_eq!(tokens(&quote(v)), vec![v.to_string()], "{v}");
        }
    }

    #[test]
    fn own_chains_are_the_numbered_aws_chains() {
        for c in [
            "AWS-SNAT-CHAIN-0",
            "AWS-SNAT-CHAIN-1",
            "AWS-SNAT-CHAIN-12",
            "AWS-CONNMARK-CHAIN-0",
            "AWS-CONNMARK-CHAIN-3",
        ] {
            assert!(is_own_chain(c), "{c}");
        }
        for c in [
            "AWS-SNAT-CHAIN-",
            "AWS-SNAT-CHAIN-x",
            "AWS-SNAT-CHAIN",
            "KUBE-POSTROUTING",
            "POSTROUTING",
            "MY-AWS-SNAT-CHAIN-0",
        ] {
            assert!(!is_own_chain(c), "{c}");
        }
    }

    #[test]
    fn ours_by_comment_or_target_only() {
        assert!(is_our_rule(
            r#"-i eni+ -m comment --comment "AWS, outbound connections" -m state --state NEW -j AWS-CONNMARK-CHAIN-0"#
        ));
        assert!(is_our_rule(r#"! -d 10.0.0.0/16 -j AWS-SNAT-CHAIN-1"#));
        assert!(is_our_rule(r#"-g AWS-CONNMARK-CHAIN-2"#));
        assert!(is_our_rule(
            r#"-m comment --comment "AWS, SNAT" -m addrtype ! --dst-type LOCAL -j SNAT --to-source 10.0.0.10"#
        ));
        assert!(!is_our_rule(
            r#"-m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING"#
        ));
        assert!(!is_our_rule(
            r#"-m comment --comment "AWS SNAT CHAIN 2" -j RETURN"#
        ));
        assert!(!is_our_rule(r#"-o eth0 -j MASQUERADE"#));
        // A comment that merely contains a flag-looking word is still just a comment.
        assert!(!is_our_rule(
            r#"-m comment --comment "-j AWS-SNAT-CHAIN-0" -j RETURN"#
        ));
        assert!(!is_our_rule(""));
    }
}
