//! `ipamd doctor` on a VPC-in-a-box node, run as an operator runs it
//! (`vpc-box.sh doctor`): healthy with pods on the primary and a secondary ENI; its bundle
//! holds every part; then each fault of the checklist, made through the real parts (the
//! node's rules, routes and iptables, its CNI conf dir, EC2, ipamd itself), is named by the
//! right check with the evidence and a fix, and undone (the node checked healthy again)
//! before the next; then several at once are repaired by `--fix`.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::*;
use e2e::{Node, Pod, VpcBox, require_root, run_bounded};
use ipam_proto::AttachmentKey;
use serde_json::{Value, json};
use testkit::Steps;
use testkit::netns::ip_in;

/// What the bundle's top directory must hold, each part non-empty.
const BUNDLE_PARTS: [&str; 17] = [
    "findings.json",
    "findings.txt",
    "config.txt",
    "ipamd.log",
    "plugin.log",
    "ip-rule.txt",
    "ip-route.txt",
    "ip-link.txt",
    "ip-neigh.txt",
    "iptables-save.txt",
    "v1-enis.json",
    "v1-pods.json",
    "v1-pool.json",
    "v1-networkutils-env-settings.json",
    "v1-ipamd-env-settings.json",
    "metrics.txt",
    "MANIFEST.txt",
];

/// The bound on the node coming back to healthy once a fault is undone.
const HEAL: Duration = Duration::from_secs(60);

/// The exit status that goes with a verdict.
fn status_of(verdict: &str) -> i32 {
    match verdict {
        "healthy" => 0,
        "degraded" => 1,
        "broken" => 2,
        other => panic!("unknown verdict {other:?}"),
    }
}

/// The doctor's report on node 1 (`--json`), checked against the contract's shape: one
/// object, known groups and severities, a fix for every finding that is not ok, the verdict
/// that its findings' worst severity gives, and the exit status that goes with the verdict.
fn diagnose(vbox: &VpcBox) -> Value {
    diagnose_with(vbox, &["--json"])
}

/// [`diagnose`] with other doctor arguments (`--json` among them).
fn diagnose_with(vbox: &VpcBox, args: &[&str]) -> Value {
    let (code, stdout) = vbox.doctor(1, args);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("ipamd doctor --json (exit {code}) printed no JSON object ({e}): {stdout:?}")
    });
    let verdict = report["verdict"]
        .as_str()
        .unwrap_or_else(|| panic!("no verdict: {report:#}"));
    assert!(report["summary"].is_string(), "no summary: {report:#}");
    let findings = report["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("no findings: {report:#}"));
    let mut worst = "healthy";
    for f in findings {
        assert!(f["check"].as_str().is_some_and(|c| !c.is_empty()), "{f}");
        assert!(f["evidence"].is_string(), "a finding without evidence: {f}");
        let group = f["group"].as_str().unwrap_or_default();
        assert!(
            ["identity", "capacity", "consistency", "cni", "ipamd"].contains(&group),
            "unknown group: {f}"
        );
        match f["severity"].as_str().unwrap_or_default() {
            "ok" | "info" => assert!(f["fix"].is_null() || f["fix"].is_string(), "{f}"),
            severity @ ("warning" | "error") => {
                assert!(
                    f["fix"].as_str().is_some_and(|x| !x.trim().is_empty()),
                    "a {severity} without a fix: {f}"
                );
                if severity == "error" {
                    worst = "broken";
                } else if worst == "healthy" {
                    worst = "degraded";
                }
            }
            _ => panic!("unknown severity: {f}"),
        }
    }
    assert_eq!(
        verdict, worst,
        "the verdict does not follow the findings: {report:#}"
    );
    assert_eq!(
        code,
        status_of(verdict),
        "exit status for verdict {verdict}: {report:#}"
    );
    report
}

/// The findings of `report` that are not ok or info, one a line, for messages.
fn problems(report: &Value) -> String {
    report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| !matches!(f["severity"].as_str(), Some("ok" | "info")))
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs the doctor and asserts that check `check` reports with one of `severities` and
/// evidence containing one of `evidence` (any evidence when empty); returns the report.
fn expect_finding(vbox: &VpcBox, check: &str, severities: &[&str], evidence: &[&str]) -> Value {
    let report = diagnose(vbox);
    let found = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|f| {
            let text = f["evidence"].as_str().unwrap_or_default();
            f["check"] == check
                && severities.contains(&f["severity"].as_str().unwrap_or_default())
                && (evidence.is_empty() || evidence.iter().any(|e| text.contains(e)))
        });
    assert!(
        found,
        "expected a {severities:?} finding of check {check:?} naming one of {evidence:?}; the \
         doctor said {}: {}\nall findings: {:#}",
        report["verdict"], report["summary"], report["findings"]
    );
    report
}

/// Waits (bounded) until the doctor finds node 1 healthy again, once `what` is undone.
fn healed(vbox: &VpcBox, what: &str) {
    let mut last = Value::Null;
    let ok = testkit::within(HEAL, || {
        last = diagnose(vbox);
        last["verdict"] == "healthy"
    });
    assert!(
        ok,
        "node 1 not healthy within {HEAL:?} after undoing {what}; last: {}\n{}",
        last["summary"],
        problems(&last)
    );
}

/// Removes the POSTROUTING jump (`jump`, an `iptables -D` command) and then the SNAT chain.
fn remove_snat_chain(ns: &str, jump: &[&str]) {
    exec_in(ns, "iptables", jump, None);
    for op in ["-F", "-X"] {
        exec_in(ns, "iptables", &["-t", "nat", op, "AWS-SNAT-CHAIN-0"], None);
    }
}

/// `ip -n <netns> <words of cmd>`, which must succeed; its lines.
fn ip_ns(netns: &str, cmd: &str) -> Vec<String> {
    ip_in(netns, &cmd.split_whitespace().collect::<Vec<_>>())
}

/// `ip netns exec <netns> program args` with `stdin`, which must succeed; its stdout.
fn exec_in(netns: &str, program: &str, args: &[&str], stdin: Option<&[u8]>) -> String {
    let mut argv = vec!["netns", "exec", netns, program];
    argv.extend_from_slice(args);
    let out = run_bounded(30, "ip", &argv, stdin);
    assert!(
        out.status.success(),
        "ip {argv:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The node's nat table as iptables-save prints it, without comments and counters: the
/// lines that define chains and rules.
fn nat_rules(netns: &str) -> Vec<String> {
    exec_in(netns, "iptables-save", &["-t", "nat"], None)
        .lines()
        .filter(|l| l.starts_with('-') || l.starts_with(':'))
        .map(|l| l.split(" [").next().unwrap_or(l).to_string())
        .collect()
}

/// A pod the plugin wired from the node's conflist, with what ipamd says about it.
struct Wired {
    pod: Pod,
    ip: String,
    veth: String,
    device: u32,
    table: u32,
}

/// ADDs a pod on node 1 with the conflist's network config, as a runtime on the node would.
/// While ipamd answers "try again later" (its pool growing), waits (bounded) for a free
/// address and tries again.
fn add_pod(vbox: &VpcBox, conf: &str, network: &str) -> Wired {
    let pod = vbox.pod(1);
    let result = testkit::wait_ok(Duration::from_secs(30), "an address for the pod", || {
        let out = pod.cni("ADD").stdin(conf.to_string()).run();
        if out.code == 0 {
            return Ok(out.ok());
        }
        out.error(11, "");
        testkit::wait_until(Duration::from_secs(30), "a free address", || {
            vbox.status(1).pool.available > 0
        });
        Err(out.stdout)
    });
    let allocation = vbox.allocation(
        1,
        AttachmentKey {
            network: network.into(),
            container_id: pod.container_id.clone(),
            ifname: "eth0".into(),
        },
    );
    Wired {
        ip: pod_ip(&result),
        veth: host_veth(&result),
        pod,
        device: allocation.device_number,
        table: allocation.route_table,
    }
}

/// Pods on node 1 until at least one sits on the primary ENI and one on a secondary ENI.
fn pods_on_both_kinds_of_eni(vbox: &VpcBox) -> Vec<Wired> {
    let node = vbox.node(1);
    let conf = node.network_conf();
    let network: Value = serde_json::from_str(&conf).expect("the network config is JSON");
    let network = network["name"].as_str().expect("the conflist's name");
    let mut pods = Vec::new();
    for _ in 0..12 {
        pods.push(add_pod(vbox, &conf, network));
        if pods.iter().any(|w| w.device == 0) && pods.iter().any(|w| w.device > 0) {
            return pods;
        }
    }
    panic!("no pod on a secondary ENI of node 1 after 12 pods");
}

/// An address of ipamd's pool on the node that no pod holds, with its ENI.
fn free_pool_address(node: &Node) -> (String, String) {
    let (pool, held) = ipamd_view(node);
    pool.iter()
        .flat_map(|(eni, ips)| ips.iter().map(move |ip| (eni, ip)))
        .find(|(_, ip)| !held.contains(*ip))
        .map(|(eni, ip)| (eni.clone(), ip.clone()))
        .unwrap_or_else(|| panic!("every address of ipamd's pool is held: {pool:?}"))
}

/// The value of the first `<tag>` in an EC2 XML answer.
fn xml_value(xml: &str, tag: &str) -> String {
    let open = format!("<{tag}>");
    xml.split_once(&open)
        .and_then(|(_, rest)| rest.split_once('<'))
        .map(|(value, _)| value.to_string())
        .unwrap_or_else(|| panic!("no <{tag}> in {xml}"))
}

/// An EC2 call on vpc-sim that must succeed; its XML answer.
fn ec2_ok(vbox: &VpcBox, params: &[(&str, &str)]) -> String {
    let (status, body) = vbox.ec2(params);
    assert_eq!(status, 200, "{params:?}: {body}");
    body
}

/// The ENI ids EC2 (vpc-sim) knows.
fn eni_ids(vbox: &VpcBox) -> BTreeSet<String> {
    vbox.sim_state()["enis"]
        .as_array()
        .expect("enis")
        .iter()
        .filter_map(|e| e["id"].as_str().map(str::to_string))
        .collect()
}

/// What EC2 says is left of subnet `id`.
fn available_in(vbox: &VpcBox, id: &str) -> u64 {
    let xml = ec2_ok(
        vbox,
        &[
            ("Action", cloud::Action::DescribeSubnets.wire_name()),
            ("SubnetId.1", id),
        ],
    );
    xml_value(&xml, "availableIpAddressCount")
        .parse()
        .expect("a count")
}

/// The EC2 parameters that name one `address` of ENI `eni` (Assign/UnassignPrivateIpAddresses).
fn one_address<'a>(eni: &'a str, address: &'a str) -> [(&'static str, &'a str); 2] {
    [("NetworkInterfaceId", eni), ("PrivateIpAddress.1", address)]
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn the_doctor_names_each_fault_of_the_checklist() {
    require_root();
    // d3.xlarge: 3 IPv4 per ENI, so the second pod or so lands on a secondary ENI (for the
    // 1536 rule). The default subnet (/24) keeps the healthy node far from exhaustion.
    let vbox = VpcBox::up(&["--instance-type", "d3.xlarge"]);
    let node = vbox.node(1).clone();
    let ns = node.netns.as_str();
    let pods = pods_on_both_kinds_of_eni(&vbox);
    let primary = pods
        .iter()
        .find(|w| w.device == 0)
        .expect("a primary-ENI pod");
    let secondary = pods
        .iter()
        .find(|w| w.device > 0)
        .expect("a secondary-ENI pod");
    // Each fault is named in one step and undone in another, so that a fault the doctor does
    // not name is still undone before the next one; a fault that needs what was made of it
    // (an ENI, an address) to be undone is made in a step of its own.
    let mut steps = Steps::new("the doctor's checklist");
    // The steps that undo a fault: `--fix` starts from the node they left healthy.
    let mut undone: Vec<Option<()>> = Vec::new();

    steps.step("the pods reachable from the node", || {
        for w in &pods {
            assert!(
                w.pod.ping_from_node(&w.ip),
                "the node cannot reach {}",
                w.ip
            );
        }
    });
    node.quiesce();
    // The ADDs logged where the conflist says (the bundle's plugin.log comes from there).
    steps.step("the ADDs logged in the conflist's plugin log", || {
        let plugin_log = node.plugin_log.clone().expect("the node's plugin log");
        assert!(
            std::fs::metadata(&plugin_log).is_ok_and(|m| m.len() > 0),
            "nothing in {plugin_log}"
        );
    });

    // Healthy: exit 0, every check ok (or info).
    steps.step("healthy", || {
        let report = diagnose(&vbox);
        assert_eq!(
            report["verdict"],
            "healthy",
            "{}\n{}",
            report["summary"],
            problems(&report)
        );
    });

    // The bundle: a gzip tarball whose top directory holds every part, none empty.
    steps.step("the bundle holds every part", || {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let bundle = tmp.path().join("doctor.tar.gz");
        let bundle_arg = bundle.to_str().expect("a UTF-8 path");
        let (code, stdout) = vbox.doctor(1, &["--bundle", bundle_arg]);
        assert_eq!(code, 0, "doctor --bundle on the healthy node: {stdout}");
        let unpacked = tmp.path().join("unpacked");
        std::fs::create_dir(&unpacked).expect("a directory to unpack into");
        let tar = run_bounded(
            30,
            "tar",
            &["-xzf", bundle_arg, "-C", unpacked.to_str().expect("UTF-8")],
            None,
        );
        assert!(
            tar.status.success(),
            "tar -xzf {bundle_arg}: {}",
            String::from_utf8_lossy(&tar.stderr)
        );
        let top = unpacked.join("vpc-cni-doctor");
        let empty_or_missing: Vec<&str> = BUNDLE_PARTS
            .iter()
            .copied()
            .filter(|part| std::fs::metadata(top.join(part)).map_or(true, |m| m.len() == 0))
            .collect();
        assert!(
            empty_or_missing.is_empty(),
            "missing or empty in the bundle: {empty_or_missing:?}; it holds {:?}",
            std::fs::read_dir(&top)
                .map(|d| d
                    .filter_map(|e| Some(e.ok()?.file_name()))
                    .collect::<Vec<_>>())
                .unwrap_or_default()
        );
        let findings: Value = serde_json::from_slice(
            &std::fs::read(top.join("findings.json")).expect("findings.json"),
        )
        .expect("findings.json is JSON");
        assert_eq!(findings["verdict"], "healthy", "{findings:#}");
    });

    // Rule 512 of a pod on the primary ENI gone: `to <ip> lookup main`.
    let rule = format!("to {} lookup main pref 512", primary.ip);
    steps.step("rule 512 of a pod gone: named", || {
        ip_ns(ns, &format!("rule del {rule}"));
        assert!(
            !ip_ns(ns, "rule show pref 512")
                .iter()
                .any(|l| l.contains(&format!("to {} ", primary.ip))),
            "rule 512 of {} still there",
            primary.ip
        );
        expect_finding(&vbox, "pod-wiring", &["error"], &[&primary.ip]);
    });
    undone.push(steps.step("rule 512 of a pod back: healthy", || {
        ip_ns(ns, &format!("rule add {rule}"));
        healed(&vbox, "the removal of rule 512");
    }));

    // Rule 1536 of a pod on a secondary ENI gone: `from <ip> lookup <table>`.
    let rule = format!("from {} lookup {} pref 1536", secondary.ip, secondary.table);
    steps.step("rule 1536 of a pod gone: named", || {
        ip_ns(ns, &format!("rule del {rule}"));
        assert!(
            !ip_ns(ns, "rule show pref 1536")
                .iter()
                .any(|l| l.contains(&format!("from {} ", secondary.ip))),
            "rule 1536 of {} still there",
            secondary.ip
        );
        expect_finding(&vbox, "pod-wiring", &["error"], &[&secondary.ip]);
    });
    undone.push(steps.step("rule 1536 of a pod back: healthy", || {
        ip_ns(ns, &format!("rule add {rule}"));
        healed(&vbox, "the removal of rule 1536");
    }));

    // An orphan route: an address of the pool that no pod holds, routed to a pod's veth.
    let orphan_route = steps.step("an orphan route added", || {
        let (_, orphan) = free_pool_address(&node);
        let route = format!("{orphan}/32 dev {} scope link", primary.veth);
        ip_ns(ns, &format!("route add {route}"));
        (orphan, route)
    });
    steps.step_with(
        "an orphan route named",
        orphan_route.as_ref(),
        |(orphan, _)| {
            expect_finding(&vbox, "orphans", &["warning"], &[orphan]);
            // Still there once the doctor had looked: nothing else took it away meanwhile.
            assert!(
                !ip_ns(ns, &format!("-4 route show {orphan}/32")).is_empty(),
                "the orphan route to {orphan} went by itself"
            );
        },
    );
    undone.push(steps.step_with(
        "the orphan route deleted: healthy",
        orphan_route.as_ref(),
        |(_, route)| {
            ip_ns(ns, &format!("route del {route}"));
            healed(&vbox, "the orphan route");
        },
    ));

    // An orphan rule: prio 512 for an address nobody holds.
    let orphan_rule = steps.step_with(
        "an orphan rule added",
        orphan_route.as_ref(),
        |(orphan, _)| {
            let rule = format!("to {orphan} lookup main pref 512");
            ip_ns(ns, &format!("rule add {rule}"));
            rule
        },
    );
    steps.step_with(
        "an orphan rule named",
        orphan_route.as_ref().zip(orphan_rule.as_ref()),
        |((orphan, _), _)| {
            expect_finding(&vbox, "orphans", &["warning"], &[orphan]);
        },
    );
    undone.push(
        steps.step_with("the orphan rule deleted: healthy", orphan_rule, |rule| {
            ip_ns(ns, &format!("rule del {rule}"));
            healed(&vbox, "the orphan rule");
        }),
    );

    // SNAT: the POSTROUTING jump gone, then the chain itself. Each time the nat table is put
    // back exactly as ipamd left it.
    let jump = [
        "-t",
        "nat",
        "-D",
        "POSTROUTING",
        "-m",
        "comment",
        "--comment",
        "AWS SNAT CHAIN",
        "-j",
        "AWS-SNAT-CHAIN-0",
    ];
    let nat = steps.step("the nat table saved, with its SNAT jump", || {
        let saved = exec_in(ns, "iptables-save", &["-t", "nat"], None);
        let before = nat_rules(ns);
        assert!(
            before
                .iter()
                .any(|l| l.starts_with("-A POSTROUTING") && l.ends_with("-j AWS-SNAT-CHAIN-0")),
            "no jump to AWS-SNAT-CHAIN-0 in {before:?}"
        );
        (saved, before)
    });
    steps.step_with("the SNAT jump gone: named", nat.as_ref(), |_| {
        exec_in(ns, "iptables", &jump, None);
        expect_finding(&vbox, "snat", &["error"], &["AWS-SNAT-CHAIN-0"]);
    });
    let jump_back = steps.step_with(
        "the nat table put back: healthy",
        nat.as_ref(),
        |(saved, before)| {
            exec_in(ns, "iptables-restore", &[], Some(saved.as_bytes()));
            assert_eq!(nat_rules(ns), *before, "the nat table as it was");
            healed(&vbox, "the removal of the SNAT jump");
        },
    );
    undone.push(jump_back);
    // The chain's removal starts from the table put back (its jump included).
    steps.step_with("the SNAT chain gone: named", jump_back, |()| {
        remove_snat_chain(ns, &jump);
        assert!(
            !nat_rules(ns).iter().any(|l| l.contains("AWS-SNAT-CHAIN-0")),
            "AWS-SNAT-CHAIN-0 still there"
        );
        expect_finding(&vbox, "snat", &["error"], &["AWS-SNAT-CHAIN-0"]);
    });
    undone.push(steps.step_with(
        "the nat table put back again: healthy",
        jump_back.and(nat.as_ref()),
        |(saved, before)| {
            exec_in(ns, "iptables-restore", &[], Some(saved.as_bytes()));
            assert_eq!(nat_rules(ns), *before, "the nat table as it was");
            healed(&vbox, "the removal of AWS-SNAT-CHAIN-0");
        },
    ));

    // Another conflist that sorts first in the conf dir shadows ours.
    let other = Path::new(&node.cni_conf_dir).join("00-other.conflist");
    steps.step("a shadowing conflist named", || {
        std::fs::write(
            &other,
            r#"{"cniVersion": "1.0.0", "name": "other", "plugins": [{"type": "bridge", "bridge": "cni0"}]}"#,
        )
        .expect("writing 00-other.conflist");
        expect_finding(&vbox, "cni-conflist", &["error"], &["00-other.conflist"]);
    });
    undone.push(steps.step("the shadowing conflist removed: healthy", || {
        std::fs::remove_file(&other).expect("removing 00-other.conflist");
        healed(&vbox, "the shadowing conflist");
    }));

    // A leaked ENI of ours: made by the vpc-cni of a node that died before deleting it
    // (available, with our instance tag and description, in the node's VPC).
    let leaked = steps.step("a leaked ENI made", || {
        let dead = "i-0deadfeed0000001";
        let description = format!("aws-K8S-{dead}");
        let xml = ec2_ok(
            &vbox,
            &[
                ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
                ("SubnetId", node.subnet_id.as_str()),
                ("Description", description.as_str()),
                ("TagSpecification.1.ResourceType", "network-interface"),
                (
                    "TagSpecification.1.Tag.1.Key",
                    "node.k8s.amazonaws.com/instance_id",
                ),
                ("TagSpecification.1.Tag.1.Value", dead),
            ],
        );
        xml_value(&xml, "networkInterfaceId")
    });
    steps.step_with("the leaked ENI named", leaked.as_ref(), |leaked| {
        assert!(eni_ids(&vbox).contains(leaked));
        expect_finding(&vbox, "leaked-enis", &["warning"], &[leaked]);
    });
    undone.push(
        steps.step_with("the leaked ENI deleted: healthy", leaked, |leaked| {
            ec2_ok(
                &vbox,
                &[
                    ("Action", cloud::Action::DeleteNetworkInterface.wire_name()),
                    ("NetworkInterfaceId", leaked.as_str()),
                ],
            );
            assert!(!eni_ids(&vbox).contains(&leaked), "{leaked} still in EC2");
            healed(&vbox, "the leaked ENI");
        }),
    );

    // The node's subnet exhausted: ENIs that are no one's (no tag, another description) take
    // every address left, up to 50 each.
    let subnet = node.subnet_id.clone();
    let filled = steps.step("the node's subnet filled", || {
        let left = available_in(&vbox, &subnet);
        let mut fillers = Vec::new();
        for _ in 0..10 {
            let available = available_in(&vbox, &subnet);
            if available == 0 {
                break;
            }
            let secondaries = (available - 1).min(49).to_string();
            let xml = ec2_ok(
                &vbox,
                &[
                    ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
                    ("SubnetId", subnet.as_str()),
                    ("Description", "doctor test: takes the subnet's addresses"),
                    ("SecondaryPrivateIpAddressCount", secondaries.as_str()),
                ],
            );
            fillers.push(xml_value(&xml, "networkInterfaceId"));
        }
        (left, fillers)
    });
    steps.step_with("the exhausted subnet named", filled.as_ref(), |_| {
        assert_eq!(
            available_in(&vbox, &subnet),
            0,
            "the subnet is not exhausted"
        );
        expect_finding(&vbox, "subnet-capacity", &["warning", "error"], &[&subnet]);
    });
    undone.push(steps.step_with(
        "the subnet's addresses given back: healthy",
        filled,
        |(left, fillers)| {
            for eni in &fillers {
                ec2_ok(
                    &vbox,
                    &[
                        ("Action", cloud::Action::DeleteNetworkInterface.wire_name()),
                        ("NetworkInterfaceId", eni.as_str()),
                    ],
                );
            }
            assert_eq!(available_in(&vbox, &subnet), left, "the subnet as it was");
            healed(&vbox, "the subnet's exhaustion");
        },
    ));

    // An EC2 action ipamd needs, denied by IAM: one the doctor makes anyway, then one only a
    // DryRun can test. (The address calls have no DryRun on EC2: the doctor learns of their
    // denial only from ipamd's refused calls, which a settled pool does not make.)
    for action in [
        cloud::Action::DescribeNetworkInterfaces.wire_name(),
        cloud::Action::CreateNetworkInterface.wire_name(),
    ] {
        steps.step(&format!("the denial of {action} named"), || {
            vbox.set_iam(&json!({ "deny": [action] }));
            expect_finding(&vbox, "iam", &["error"], &[action]);
        });
        undone.push(
            steps.step(&format!("the denial of {action} lifted: healthy"), || {
                vbox.set_iam(&json!({}));
                healed(&vbox, &format!("the denial of {action}"));
            }),
        );
    }

    // IMDS out of step with EC2: IMDS frozen, then EC2 takes a free address off its ENI (IMDS
    // still shows it). Undone by giving the ENI that same address back.
    let unassigned = steps.step("IMDS frozen, an address taken off its ENI", || {
        let (eni, address) = free_pool_address(&node);
        vbox.set_imds_frozen(true);
        let unassign = one_address(&eni, &address);
        ec2_ok(
            &vbox,
            &[
                &[(
                    "Action",
                    cloud::Action::UnassignPrivateIpAddresses.wire_name(),
                )][..],
                &unassign,
            ]
            .concat(),
        );
        (eni, address)
    });
    steps.step_with(
        "IMDS out of step with EC2 named",
        unassigned.as_ref(),
        |(eni, address)| {
            expect_finding(&vbox, "imds-ec2", &["warning"], &[address, eni]);
        },
    );
    undone.push(steps.step_with(
        "the address given back, IMDS live: healthy",
        unassigned.as_ref(),
        |(eni, address)| {
            let unassign = one_address(eni, address);
            ec2_ok(
                &vbox,
                &[
                    &[(
                        "Action",
                        cloud::Action::AssignPrivateIpAddresses.wire_name(),
                    )][..],
                    &unassign,
                ]
                .concat(),
            );
            vbox.set_imds_frozen(false);
            healed(&vbox, "IMDS's freeze");
        },
    ));

    // `--fix`: rules 512 and 1536 of live pods gone, an orphan route, the SNAT chain gone, all
    // at once; the doctor repairs each (saying so first) and checks again: healthy. It starts
    // from the healthy node the steps that undid each fault left: skipped if one failed.
    let healthy = undone.iter().all(Option::is_some).then_some(());
    steps.step_with("--fix repairs several faults at once", healthy, |()| {
        let rule512 = format!("to {} lookup main pref 512", primary.ip);
        let rule1536 = format!("from {} lookup {} pref 1536", secondary.ip, secondary.table);
        ip_ns(ns, &format!("rule del {rule512}"));
        ip_ns(ns, &format!("rule del {rule1536}"));
        let (_, orphan) = free_pool_address(&node);
        ip_ns(
            ns,
            &format!("route add {orphan}/32 dev {} scope link", primary.veth),
        );
        remove_snat_chain(ns, &jump);
        expect_finding(&vbox, "pod-wiring", &["error"], &[&primary.ip]);
        let fixed = diagnose_with(&vbox, &["--fix", "--json"]);
        assert_eq!(
            fixed["verdict"],
            "healthy",
            "after --fix: {}\n{}",
            fixed["summary"],
            problems(&fixed)
        );
        let rules = ip_ns(ns, "rule show");
        for (pref, rule) in [
            ("512:", format!("to {} lookup main", primary.ip)),
            (
                "1536:",
                format!("from {} lookup {}", secondary.ip, secondary.table),
            ),
        ] {
            assert!(
                rules
                    .iter()
                    .any(|l| l.starts_with(pref) && l.contains(&rule)),
                "no rule {pref} {rule} after --fix: {rules:?}"
            );
        }
        assert!(
            ip_ns(ns, &format!("-4 route show {orphan}/32")).is_empty(),
            "the orphan route to {orphan} is still there after --fix"
        );
        assert!(
            nat_rules(ns)
                .iter()
                .any(|l| l.starts_with("-A POSTROUTING") && l.ends_with("-j AWS-SNAT-CHAIN-0")),
            "no SNAT jump after --fix"
        );
    });

    // ipamd down, last.
    steps.step("ipamd down named", || {
        vbox.stop_ipamd(1, false);
        let report = expect_finding(&vbox, "ipamd", &["error"], &[]);
        assert_eq!(report["verdict"], "broken", "{report:#}");
    });

    steps.finish();
}
