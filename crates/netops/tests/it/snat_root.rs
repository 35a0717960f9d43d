//! Root tests: the node's SNAT, connmark, fwmark and rp_filter setup in fresh network
//! namespaces, on both iptables backends, with real traffic from a "pod" through the "node"
//! to an "outside" host.
//!
//! Everything runs inside namespaces named `snat-<pid>-<n>-<role>`, deleted on drop; the
//! machine's own firewall, rules and sysctls are never touched.

use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Output;
use std::time::Duration;

use ipnetwork::Ipv4Network;
use netops::Netlink;
use netops::snat::{
    Backend, Change, NodeNetConfig, Runner, SNAT_CHAIN, SystemRunner, Table, apply, desired_rules,
    detect_backend, is_our_rule, is_own_chain, setup_node_networking,
};
use testkit::cmd::{require_commands, run};
use testkit::netns::Netns;

const NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 10);
const POD_IP: &str = "10.0.1.5";
const OUTSIDE: &str = "203.0.113.1";
const BACKENDS: [Backend; 2] = [Backend::Nft, Backend::Legacy];

/// Both iptables backends and nft, which scripts/test.sh installs: without them these tests
/// fail naming what is missing.
fn require_firewall_tools() {
    require_commands(
        &[
            "iptables-nft",
            "iptables-nft-save",
            "iptables-legacy",
            "iptables-legacy-save",
        ],
        "iptables",
    );
    require_commands(&["nft"], "nftables");
}

/// Runs programs inside a named namespace via `ip netns exec`.
struct InNetns(String);

impl Runner for InNetns {
    fn run(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> io::Result<Output> {
        let mut full = vec!["netns", "exec", self.0.as_str(), program];
        full.extend_from_slice(args);
        SystemRunner.run("ip", &full, stdin)
    }
}

/// A pod, the node and an outside host, each in its own namespace:
///
/// `pod eth0 (10.0.1.5/32) <-> node eni0pod` and `node eth0 (10.0.0.10/16) <-> outside eth0
/// (203.0.113.1/24)`. The pod is wired as the CNI does it (gateway 169.254.1.1, permanent
/// neighbour); the outside host knows only the node's address, so a reply can reach the pod
/// only if the node SNATed its traffic.
struct Topo {
    node: Netns,
    pod: Netns,
    outside: Netns,
}

impl Topo {
    fn new() -> Self {
        require_firewall_tools();
        let base = testkit::unique("snat-");
        let topo = Topo {
            node: Netns::named(format!("{base}-node")),
            pod: Netns::named(format!("{base}-pod")),
            outside: Netns::named(format!("{base}-out")),
        };
        let (node, pod, out) = (topo.node.name(), topo.pod.name(), topo.outside.name());
        let ipn = |ns: &str, args: &[&str]| {
            let mut full = vec!["ip", "-n", ns];
            full.extend_from_slice(args);
            run(&full);
        };
        ipn(
            node,
            &[
                "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", out,
            ],
        );
        ipn(
            node,
            &[
                "link", "add", "eni0pod", "type", "veth", "peer", "name", "eth0", "netns", pod,
            ],
        );
        for ns in [node, pod, out] {
            ipn(ns, &["link", "set", "lo", "up"]);
            ipn(ns, &["link", "set", "eth0", "up"]);
        }
        ipn(node, &["link", "set", "eni0pod", "up"]);
        ipn(node, &["addr", "add", "10.0.0.10/16", "dev", "eth0"]);
        ipn(node, &["route", "add", "203.0.113.0/24", "dev", "eth0"]);
        ipn(
            node,
            &[
                "route",
                "add",
                "10.0.1.5/32",
                "dev",
                "eni0pod",
                "scope",
                "link",
            ],
        );
        ipn(out, &["addr", "add", "203.0.113.1/24", "dev", "eth0"]);
        ipn(out, &["route", "add", "10.0.0.10/32", "dev", "eth0"]);
        ipn(pod, &["addr", "add", "10.0.1.5/32", "dev", "eth0"]);
        ipn(
            pod,
            &[
                "route",
                "add",
                "169.254.1.1/32",
                "dev",
                "eth0",
                "scope",
                "link",
            ],
        );
        ipn(
            pod,
            &[
                "route",
                "add",
                "default",
                "via",
                "169.254.1.1",
                "dev",
                "eth0",
            ],
        );
        let mac = run(&["ip", "-n", node, "-o", "link", "show", "eni0pod"]);
        let mac = mac
            .split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .expect("veth MAC")
            .to_string();
        ipn(
            pod,
            &[
                "neigh",
                "add",
                "169.254.1.1",
                "lladdr",
                &mac,
                "dev",
                "eth0",
                "nud",
                "permanent",
            ],
        );
        run(&[
            "ip",
            "netns",
            "exec",
            node,
            "sysctl",
            "-q",
            "-w",
            "net.ipv4.ip_forward=1",
        ]);
        topo
    }

    fn node_runner(&self) -> InNetns {
        InNetns(self.node.name().to_string())
    }

    fn node_nl(&self) -> Netlink {
        Netlink::in_netns(&self.node.path()).expect("netlink")
    }

    /// `<backend>-save` in the node, comment lines (timestamps) dropped.
    fn save(&self, backend: Backend, counters: bool) -> Vec<String> {
        let prog = backend.save_program();
        let mut args = vec!["ip", "netns", "exec", self.node.name(), prog];
        if counters {
            args.push("-c");
        }
        run(&args)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_string)
            .collect()
    }

    /// `iptables` of `backend` in the node.
    fn ipt(&self, backend: Backend, args: &[&str]) {
        let prog = match backend {
            Backend::Nft => "iptables-nft",
            Backend::Legacy => "iptables-legacy",
        };
        let mut full = vec!["ip", "netns", "exec", self.node.name(), prog, "-w"];
        full.extend_from_slice(args);
        run(&full);
    }

    fn ip_rules(&self) -> Vec<String> {
        run(&["ip", "-n", self.node.name(), "-4", "rule", "show"])
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    }

    fn rp_filter(&self) -> String {
        run(&[
            "ip",
            "netns",
            "exec",
            self.node.name(),
            "sysctl",
            "-n",
            "net.ipv4.conf.eth0.rp_filter",
        ])
        .trim()
        .to_string()
    }

    /// Sends a datagram from the pod to the outside host and a reply back; returns the
    /// source address the outside host saw.
    fn roundtrip(&self) -> SocketAddr {
        let outside = udp_in(self.outside.name(), &format!("{OUTSIDE}:7777"));
        let pod = udp_in(self.pod.name(), &format!("{POD_IP}:0"));
        let mut buf = [0u8; 16];
        // The first datagrams may wait for ARP; a few tries, each bounded by the timeout.
        for _ in 0..5 {
            pod.send_to(b"ping", (OUTSIDE, 7777)).expect("pod send");
            let Ok((_, from)) = outside.recv_from(&mut buf) else {
                continue;
            };
            outside.send_to(b"pong", from).expect("outside reply");
            let (n, back) = pod.recv_from(&mut buf).expect("the reply reached the pod");
            assert_eq!(&buf[..n], b"pong");
            assert_eq!(back, SocketAddr::from(([203, 0, 113, 1], 7777)));
            return from;
        }
        panic!("the outside host never received the pod's datagram");
    }
}

/// A UDP socket bound in namespace `ns` (a socket stays in the namespace it was made in).
fn udp_in(ns: &str, addr: &str) -> UdpSocket {
    let addr = addr.to_string();
    testkit::netns::run_in(ns, move || {
        let s = UdpSocket::bind(&addr).expect("bind");
        s.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        s
    })
}

fn net(s: &str) -> Ipv4Network {
    s.parse().unwrap()
}

fn cfg() -> NodeNetConfig {
    NodeNetConfig {
        exclude_snat_cidrs: vec![net("192.168.0.0/16")],
        ..NodeNetConfig::new("eth0", NODE_IP, vec![net("10.0.0.0/16")])
    }
}

/// The `-A` rules of one table in a save dump, per chain, in order.
fn rules_by_chain(save: &[String], table: Table) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current = None;
    for line in save {
        if let Some(t) = line.strip_prefix('*') {
            current = Some(t.to_string());
        } else if current.as_deref() == Some(table.name()) {
            let rule = match line.strip_prefix('[') {
                Some(rest) => rest.split_once("] ").map(|(_, r)| r).unwrap_or(line),
                None => line,
            };
            if let Some((chain, spec)) = rule.strip_prefix("-A ").and_then(|r| r.split_once(' ')) {
                out.entry(chain.to_string())
                    .or_default()
                    .push(spec.to_string());
            }
        }
    }
    out
}

/// Our rules of a table in a save dump, per chain (chains of ours count whole).
fn ours_by_chain(save: &[String], table: Table) -> BTreeMap<String, Vec<String>> {
    rules_by_chain(save, table)
        .into_iter()
        .map(|(c, rules)| {
            let own = is_own_chain(&c);
            let rules: Vec<String> = rules
                .into_iter()
                .filter(|r| own || is_our_rule(r))
                .collect();
            (c, rules)
        })
        .filter(|(_, r)| !r.is_empty())
        .collect()
}

/// The desired rules of a table, per chain.
fn desired_by_chain(cfg: &NodeNetConfig, table: Table) -> BTreeMap<String, Vec<String>> {
    desired_rules(cfg)
        .table(table)
        .unwrap()
        .chains
        .iter()
        .map(|c| (c.name.clone(), c.rules.clone()))
        .collect()
}

fn assert_exactly_desired(topo: &Topo, backend: Backend, cfg: &NodeNetConfig) {
    let save = topo.save(backend, false);
    for table in [Table::Nat, Table::Mangle] {
        assert_eq!(
            ours_by_chain(&save, table),
            desired_by_chain(cfg, table),
            "{backend} {table}:\n{}",
            save.join("\n")
        );
    }
    let declared_own: Vec<&String> = save.iter().filter(|l| l.starts_with(":AWS-")).collect();
    let want_own = desired_rules(cfg)
        .tables
        .iter()
        .flat_map(|t| t.chains.iter())
        .filter(|c| c.name.starts_with("AWS-"))
        .count();
    assert_eq!(declared_own.len(), want_own, "{declared_own:?}");
    let fwmark = topo
        .ip_rules()
        .iter()
        .filter(|l| l.starts_with("1024:"))
        .cloned()
        .collect::<Vec<_>>();
    if cfg.node_port_support || !cfg.external_snat {
        assert_eq!(fwmark, ["1024: from all fwmark 0x80/0x80 lookup main"]);
    } else {
        assert!(fwmark.is_empty(), "{fwmark:?}");
    }
}

/// Lines of a `-save -c` dump that carry non-zero counters on one of our rules.
fn counted_rules(save: &[String]) -> Vec<&String> {
    save.iter()
        .filter(|l| l.starts_with('[') && !l.starts_with("[0:0]") && is_our_rule(l))
        .collect()
}

fn setup_applies_once_and_then_changes_nothing(backend: Backend) {
    let topo = Topo::new();
    let runner = topo.node_runner();
    let nl = topo.node_nl();
    run(&[
        "ip",
        "netns",
        "exec",
        topo.node.name(),
        "sysctl",
        "-q",
        "-w",
        "net.ipv4.conf.eth0.rp_filter=1",
    ]);

    let first = setup_node_networking(&runner, &nl, backend, &cfg()).expect("setup");
    assert_eq!(first.rp_filter_was.as_deref(), Some("1"));
    assert_eq!(first.fwmark_rules.added.len(), 1);
    assert!(!first.iptables.is_unchanged());
    assert_eq!(topo.rp_filter(), "2");
    assert_exactly_desired(&topo, backend, &cfg());

    // Traffic: the outside host sees the node's address, and the counters move.
    let seen = topo.roundtrip();
    assert_eq!(
        seen.ip(),
        NODE_IP,
        "outside saw {seen}, not the node's address"
    );
    let before = topo.save(backend, true);
    let counted = counted_rules(&before);
    assert!(
        counted.iter().any(|l| l.contains("-j SNAT")),
        "SNAT rule did not count: {before:#?}"
    );
    assert!(counted.len() >= 4, "{counted:#?}");
    let rules_before = topo.ip_rules();

    let second = setup_node_networking(&runner, &nl, backend, &cfg()).expect("second setup");
    assert!(second.is_unchanged(), "{:?}", second.changes());
    assert_eq!(
        topo.save(backend, true),
        before,
        "a re-apply changed rules or counters"
    );
    assert_eq!(topo.ip_rules(), rules_before);

    // And the datapath still works with the same rules.
    assert_eq!(topo.roundtrip().ip(), NODE_IP);
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn nft_setup_applies_once_snats_and_then_changes_nothing() {
    setup_applies_once_and_then_changes_nothing(Backend::Nft);
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn legacy_setup_applies_once_snats_and_then_changes_nothing() {
    setup_applies_once_and_then_changes_nothing(Backend::Legacy);
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn stale_rules_and_old_chains_go_and_foreign_rules_stay() {
    for backend in BACKENDS {
        let topo = Topo::new();
        let nat = |args: &[&str]| {
            let mut full = vec!["-t", "nat"];
            full.extend_from_slice(args);
            topo.ipt(backend, &full);
        };
        // Someone else's rules, before and after where ours go.
        nat(&["-N", "KUBE-POSTROUTING"]);
        nat(&["-A", "KUBE-POSTROUTING", "-j", "RETURN"]);
        nat(&[
            "-A",
            "POSTROUTING",
            "-m",
            "comment",
            "--comment",
            "kubernetes postrouting rules",
            "-j",
            "KUBE-POSTROUTING",
        ]);
        nat(&[
            "-A",
            "PREROUTING",
            "-p",
            "tcp",
            "--dport",
            "80",
            "-j",
            "RETURN",
        ]);
        topo.ipt(
            backend,
            &[
                "-t",
                "mangle",
                "-A",
                "PREROUTING",
                "-i",
                "eth9",
                "-j",
                "MARK",
                "--set-mark",
                "0x4000",
            ],
        );
        // An old Go CNI's layout: a chain per CIDR, a stale CIDR, the old state-NEW jump.
        for c in [
            "AWS-SNAT-CHAIN-0",
            "AWS-SNAT-CHAIN-1",
            "AWS-CONNMARK-CHAIN-0",
            "AWS-CONNMARK-CHAIN-1",
        ] {
            nat(&["-N", c]);
        }
        nat(&[
            "-A",
            "POSTROUTING",
            "-m",
            "comment",
            "--comment",
            "AWS SNAT CHAIN",
            "-j",
            "AWS-SNAT-CHAIN-0",
        ]);
        nat(&[
            "-A",
            "AWS-SNAT-CHAIN-0",
            "!",
            "-d",
            "10.0.0.0/16",
            "-m",
            "comment",
            "--comment",
            "AWS SNAT CHAIN",
            "-j",
            "AWS-SNAT-CHAIN-1",
        ]);
        nat(&[
            "-A",
            "AWS-SNAT-CHAIN-0",
            "-d",
            "172.16.0.0/12",
            "-m",
            "comment",
            "--comment",
            "AWS SNAT CHAIN",
            "-j",
            "RETURN",
        ]);
        nat(&[
            "-A",
            "AWS-SNAT-CHAIN-1",
            "!",
            "-o",
            "vlan+",
            "-m",
            "comment",
            "--comment",
            "AWS, SNAT",
            "-m",
            "addrtype",
            "!",
            "--dst-type",
            "LOCAL",
            "-j",
            "SNAT",
            "--to-source",
            "10.0.0.10",
        ]);
        nat(&[
            "-A",
            "PREROUTING",
            "-i",
            "eni+",
            "-m",
            "comment",
            "--comment",
            "AWS, outbound connections",
            "-m",
            "state",
            "--state",
            "NEW",
            "-j",
            "AWS-CONNMARK-CHAIN-0",
        ]);
        nat(&["-A", "AWS-CONNMARK-CHAIN-1", "-j", "RETURN"]);
        nat(&["-A", "AWS-CONNMARK-CHAIN-0", "-j", "AWS-CONNMARK-CHAIN-1"]);
        nat(&["-A", "POSTROUTING", "-o", "eth9", "-j", "MASQUERADE"]);
        // A stale fwmark rule with another mark, and someone else's rule next to it.
        run(&[
            "ip",
            "-n",
            topo.node.name(),
            "rule",
            "add",
            "prio",
            "1024",
            "fwmark",
            "0x40/0x40",
            "lookup",
            "main",
        ]);
        run(&[
            "ip",
            "-n",
            topo.node.name(),
            "rule",
            "add",
            "prio",
            "1025",
            "fwmark",
            "0x40/0x40",
            "lookup",
            "main",
        ]);

        let before = topo.save(backend, false);
        let foreign = |save: &[String], table: Table| -> BTreeMap<String, Vec<String>> {
            rules_by_chain(save, table)
                .into_iter()
                .filter(|(c, _)| !is_own_chain(c))
                .map(|(c, r)| (c, r.into_iter().filter(|r| !is_our_rule(r)).collect()))
                .collect()
        };

        let report = setup_node_networking(&topo.node_runner(), &topo.node_nl(), backend, &cfg())
            .expect("setup");
        let changes = report.changes();
        for expected in [
            "nat: removed chain AWS-SNAT-CHAIN-1",
            "nat: removed chain AWS-CONNMARK-CHAIN-1",
            r#"nat: removed -A AWS-SNAT-CHAIN-0 -d 172.16.0.0/12 -m comment --comment "AWS SNAT CHAIN" -j RETURN"#,
            r#"nat: removed -A PREROUTING -i eni+ -m comment --comment "AWS, outbound connections" -m state --state NEW -j AWS-CONNMARK-CHAIN-0"#,
            "removed rule prio 1024 from all fwmark 0x40/0x40 lookup main",
            "added rule prio 1024 from all fwmark 0x80/0x80 lookup main",
        ] {
            assert!(
                changes.iter().any(|c| c == expected),
                "{expected} not in {changes:#?}"
            );
        }
        for ch in &report.iptables.changes {
            if let Change::RuleDeleted { chain, rule, .. } = ch {
                assert!(
                    is_own_chain(chain) || is_our_rule(rule),
                    "foreign rule removed: {ch}"
                );
            }
        }
        assert_exactly_desired(&topo, backend, &cfg());
        let after = topo.save(backend, false);
        for table in [Table::Nat, Table::Mangle] {
            assert_eq!(
                foreign(&after, table),
                foreign(&before, table),
                "{backend} {table}"
            );
        }
        assert!(after.iter().any(|l| l == ":KUBE-POSTROUTING - [0:0]"));
        assert!(
            topo.ip_rules()
                .contains(&"1025: from all fwmark 0x40/0x40 lookup main".to_string())
        );
        let again = apply(&topo.node_runner(), backend, &cfg()).expect("re-apply");
        assert!(again.is_unchanged(), "{:?}", again.changes);
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn changing_exclusions_touches_only_their_rules() {
    let topo = Topo::new();
    let backend = Backend::Nft;
    let runner = topo.node_runner();
    setup_node_networking(&runner, &topo.node_nl(), backend, &cfg()).expect("setup");
    assert_eq!(topo.roundtrip().ip(), NODE_IP);
    let before = topo.save(backend, true);
    assert!(!counted_rules(&before).is_empty());

    let changed = NodeNetConfig {
        exclude_snat_cidrs: vec![net("172.16.0.0/12")],
        ..cfg()
    };
    let report = apply(&runner, backend, &changed).expect("apply");
    let mut changes: Vec<String> = report.changes.iter().map(ToString::to_string).collect();
    changes.sort();
    assert_eq!(
        changes,
        [
            r#"nat: added -A AWS-CONNMARK-CHAIN-0 -d 172.16.0.0/12 -m comment --comment "AWS CONNMARK CHAIN" -j RETURN"#,
            r#"nat: added -A AWS-SNAT-CHAIN-0 -d 172.16.0.0/12 -m comment --comment "AWS SNAT CHAIN EXCLUSION" -j RETURN"#,
            r#"nat: removed -A AWS-CONNMARK-CHAIN-0 -d 192.168.0.0/16 -m comment --comment "AWS CONNMARK CHAIN" -j RETURN"#,
            r#"nat: removed -A AWS-SNAT-CHAIN-0 -d 192.168.0.0/16 -m comment --comment "AWS SNAT CHAIN EXCLUSION" -j RETURN"#,
        ]
    );
    assert_exactly_desired(&topo, backend, &changed);
    // Every other line, counters included, is as it was.
    let after = topo.save(backend, true);
    let others = |save: &[String]| -> Vec<String> {
        save.iter()
            .filter(|l| !l.contains("192.168.0.0/16") && !l.contains("172.16.0.0/12"))
            .cloned()
            .collect()
    };
    assert_eq!(others(&after), others(&before));
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn external_snat_removes_snat_and_connmark_and_back() {
    for backend in BACKENDS {
        let topo = Topo::new();
        let runner = topo.node_runner();
        let nl = topo.node_nl();
        setup_node_networking(&runner, &nl, backend, &cfg()).expect("setup");

        let external = NodeNetConfig {
            external_snat: true,
            ..cfg()
        };
        let report = setup_node_networking(&runner, &nl, backend, &external).expect("external");
        assert!(report.fwmark_rules.added.is_empty() && report.fwmark_rules.removed.is_empty());
        assert_exactly_desired(&topo, backend, &external);
        let save = topo.save(backend, false);
        assert!(
            !save
                .iter()
                .any(|l| l.contains("AWS-SNAT") || l.contains("AWS-CONNMARK")),
            "{save:#?}"
        );
        assert!(ours_by_chain(&save, Table::Nat).is_empty());
        assert_eq!(ours_by_chain(&save, Table::Mangle)["PREROUTING"].len(), 3);

        let bare = NodeNetConfig {
            node_port_support: false,
            ..external
        };
        let report = setup_node_networking(&runner, &nl, backend, &bare).expect("bare");
        assert_eq!(report.fwmark_rules.removed.len(), 1);
        assert_exactly_desired(&topo, backend, &bare);
        let save = topo.save(backend, false);
        assert!(ours_by_chain(&save, Table::Mangle).is_empty(), "{save:#?}");

        setup_node_networking(&runner, &nl, backend, &cfg()).expect("back to SNAT");
        assert_exactly_desired(&topo, backend, &cfg());
        assert_eq!(topo.roundtrip().ip(), NODE_IP);
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn takes_over_a_go_cni_node_keeping_the_snat_counters() {
    let topo = Topo::new();
    let backend = Backend::Nft;
    let c = NodeNetConfig {
        vpc_cidrs: vec![net("10.0.0.0/16"), net("10.1.0.0/16")],
        ..cfg()
    };
    // What the Go CNI runs (iptables_connmark.go, network.go): RETURNs inserted at the top
    // (so listed backwards), masks spelled --set-mark / --mask.
    let nat = |args: &[&str]| {
        let mut full = vec!["-t", "nat"];
        full.extend_from_slice(args);
        topo.ipt(backend, &full);
    };
    nat(&["-N", SNAT_CHAIN]);
    nat(&[
        "-A",
        "POSTROUTING",
        "-m",
        "comment",
        "--comment",
        "AWS SNAT CHAIN",
        "-j",
        SNAT_CHAIN,
    ]);
    for cidr in ["10.0.0.0/16", "10.1.0.0/16"] {
        nat(&[
            "-I",
            SNAT_CHAIN,
            "1",
            "-d",
            cidr,
            "-m",
            "comment",
            "--comment",
            "AWS SNAT CHAIN",
            "-j",
            "RETURN",
        ]);
    }
    nat(&[
        "-I",
        SNAT_CHAIN,
        "1",
        "-d",
        "192.168.0.0/16",
        "-m",
        "comment",
        "--comment",
        "AWS SNAT CHAIN EXCLUSION",
        "-j",
        "RETURN",
    ]);
    nat(&[
        "-A",
        SNAT_CHAIN,
        "!",
        "-o",
        "vlan+",
        "-m",
        "comment",
        "--comment",
        "AWS, SNAT",
        "-m",
        "addrtype",
        "!",
        "--dst-type",
        "LOCAL",
        "-j",
        "SNAT",
        "--to-source",
        "10.0.0.10",
        "--random-fully",
    ]);
    nat(&["-N", "AWS-CONNMARK-CHAIN-0"]);
    nat(&[
        "-A",
        "PREROUTING",
        "-i",
        "eni+",
        "-m",
        "comment",
        "--comment",
        "AWS, outbound connections",
        "-j",
        "AWS-CONNMARK-CHAIN-0",
    ]);
    for cidr in ["10.0.0.0/16", "10.1.0.0/16", "192.168.0.0/16"] {
        nat(&[
            "-I",
            "AWS-CONNMARK-CHAIN-0",
            "1",
            "-d",
            cidr,
            "-m",
            "comment",
            "--comment",
            "AWS CONNMARK CHAIN",
            "-j",
            "RETURN",
        ]);
    }
    nat(&[
        "-A",
        "AWS-CONNMARK-CHAIN-0",
        "-m",
        "comment",
        "--comment",
        "AWS, CONNMARK",
        "-j",
        "CONNMARK",
        "--set-xmark",
        "0x80/0x80",
    ]);
    nat(&[
        "-A",
        "PREROUTING",
        "-m",
        "comment",
        "--comment",
        "AWS, CONNMARK",
        "-j",
        "CONNMARK",
        "--restore-mark",
        "--mask",
        "0x80",
    ]);
    let mangle = |args: &[&str]| {
        let mut full = vec!["-t", "mangle"];
        full.extend_from_slice(args);
        topo.ipt(backend, &full);
    };
    mangle(&[
        "-A",
        "PREROUTING",
        "-m",
        "comment",
        "--comment",
        "AWS, primary ENI",
        "-i",
        "eth0",
        "-m",
        "addrtype",
        "--dst-type",
        "LOCAL",
        "--limit-iface-in",
        "-j",
        "CONNMARK",
        "--set-mark",
        "0x80/0x80",
    ]);
    mangle(&[
        "-A",
        "PREROUTING",
        "-m",
        "comment",
        "--comment",
        "AWS, primary ENI",
        "-i",
        "eni+",
        "-j",
        "CONNMARK",
        "--restore-mark",
        "--mask",
        "0x80",
    ]);
    mangle(&[
        "-A",
        "PREROUTING",
        "-m",
        "comment",
        "--comment",
        "AWS, primary ENI",
        "-i",
        "vlan+",
        "-j",
        "CONNMARK",
        "--restore-mark",
        "--mask",
        "0x80",
    ]);
    run(&[
        "ip",
        "-n",
        topo.node.name(),
        "rule",
        "add",
        "prio",
        "1024",
        "fwmark",
        "0x80/0x80",
        "lookup",
        "main",
    ]);
    run(&[
        "ip",
        "netns",
        "exec",
        topo.node.name(),
        "sysctl",
        "-q",
        "-w",
        "net.ipv4.conf.eth0.rp_filter=2",
    ]);

    // The Go CNI's rules already work: traffic counts on its SNAT rule.
    assert_eq!(topo.roundtrip().ip(), NODE_IP);
    let snat_line = |save: &[String]| {
        save.iter()
            .find(|l| l.contains("-j SNAT"))
            .cloned()
            .expect("SNAT rule")
    };
    let counted = snat_line(&topo.save(backend, true));
    assert!(!counted.starts_with("[0:0]"), "{counted}");

    // On nf_tables nodes the Go CNI marks with a native nftables table instead.
    let go_nft = "add table ip aws-cni\n\
        add chain ip aws-cni nat-prerouting { type nat hook prerouting priority -90; policy accept; }\n\
        add chain ip aws-cni snat-mark\n\
        add rule ip aws-cni snat-mark ct mark set ct mark or 0x80\n\
        add rule ip aws-cni nat-prerouting iifname \"eni*\" jump snat-mark\n";
    let out = topo
        .node_runner()
        .run("nft", &["-f", "-"], Some(go_nft.as_bytes()))
        .expect("nft");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let nft_tables = || {
        run(&[
            "ip",
            "netns",
            "exec",
            topo.node.name(),
            "nft",
            "list",
            "tables",
            "ip",
        ])
    };
    assert!(nft_tables().contains("table ip aws-cni"));

    let report = setup_node_networking(&topo.node_runner(), &topo.node_nl(), backend, &c)
        .expect("take over");
    assert!(report.removed_go_nft_table);
    assert!(!nft_tables().contains("aws-cni"), "{}", nft_tables());
    assert!(report.rp_filter_was.is_none());
    assert!(report.fwmark_rules.added.is_empty() && report.fwmark_rules.removed.is_empty());
    assert_exactly_desired(&topo, backend, &c);
    // Only the reversed RETURNs moved; mangle, the jumps and the SNAT rule were kept.
    assert!(
        report.iptables.changes.iter().all(|ch| match ch {
            Change::RuleAdded { table, rule, .. } | Change::RuleDeleted { table, rule, .. } =>
                *table == Table::Nat && rule.ends_with("-j RETURN"),
            _ => false,
        }),
        "{:#?}",
        report.changes()
    );
    assert_eq!(snat_line(&topo.save(backend, true)), counted);
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn backend_detection_follows_the_nodes_rules() {
    let topo = Topo::new();
    let runner = topo.node_runner();
    let version = run(&["iptables", "--version"]);
    let by_version = if version.contains("(nf_tables)") {
        Backend::Nft
    } else {
        Backend::Legacy
    };
    assert_eq!(detect_backend(&runner).expect("detect"), by_version);

    // Rules in one backend only: that one.
    topo.ipt(
        Backend::Legacy,
        &[
            "-t",
            "nat",
            "-A",
            "POSTROUTING",
            "-o",
            "eth9",
            "-j",
            "MASQUERADE",
        ],
    );
    assert_eq!(detect_backend(&runner).unwrap(), Backend::Legacy);
    // More rules in nft now, but kubelet's hint chain in legacy decides.
    for port in ["1", "2", "3"] {
        topo.ipt(
            Backend::Nft,
            &[
                "-t", "filter", "-A", "INPUT", "-p", "tcp", "--dport", port, "-j", "ACCEPT",
            ],
        );
    }
    assert_eq!(detect_backend(&runner).unwrap(), Backend::Nft);
    topo.ipt(
        Backend::Legacy,
        &["-t", "mangle", "-N", "KUBE-IPTABLES-HINT"],
    );
    assert_eq!(detect_backend(&runner).unwrap(), Backend::Legacy);
}
