//! The fabric's command sequences and the delivery diff, through a recording [`Runner`].

use std::cell::RefCell;
use std::net::Ipv4Addr;
use std::rc::Rc;

use super::vpc::VPC_SYSCTLS;
use super::*;
use crate::model::{AssignRequest, CreateEni, Model, SubnetSpec, Topology};
use crate::rand::Rng;

/// Records commands; a batch is recorded as its marker plus one `ip -n NS LINE` per line, as if
/// each ran alone. Fails the first command or batch line containing `fail_on` (which a test may
/// set at any time), as `ip` would.
#[derive(Default)]
struct Recorder {
    log: Shared<Vec<String>>,
    /// (needle, what `ip` prints for the failing line).
    fail_on: FailSwitch,
}

type Shared<T> = Rc<RefCell<T>>;
/// (needle, message) of the line to fail.
type FailSwitch = Shared<Option<(String, String)>>;

const BOOM: &str = "RTNETLINK answers: boom";

/// Makes the first line containing `needle` fail with `message`.
fn fail_with(fail: &FailSwitch, needle: &str, message: &str) {
    *fail.borrow_mut() = Some((needle.to_string(), message.to_string()));
}

impl Recorder {
    fn failing(needle: &str) -> Self {
        let r = Self::default();
        fail_with(&r.fail_on, needle, "boom");
        r
    }

    /// The message when `line` is to fail.
    fn hits(&self, line: &str) -> Option<String> {
        match &*self.fail_on.borrow() {
            Some((needle, msg)) if line.contains(needle.as_str()) => Some(msg.clone()),
            _ => None,
        }
    }
}

impl Runner for Recorder {
    fn run(&mut self, argv: &[String]) -> Result<(), FabricError> {
        let line = argv.join(" ");
        self.log.borrow_mut().push(line.clone());
        if let Some(stderr) = self.hits(&line) {
            return Err(FabricError::Failed {
                command: line,
                status: "exit status: 2".into(),
                stderr,
            });
        }
        Ok(())
    }

    fn run_with_input(&mut self, argv: &[String], input: &str) -> Result<(), FabricError> {
        let command = argv.join(" ");
        assert_eq!(
            argv[0..2],
            ["ip", "-n"],
            "batches run `ip -n NS [-6] -batch -`"
        );
        let family = match &argv[3..] {
            [b, d] if b == "-batch" && d == "-" => "",
            [six, b, d] if six == "-6" && b == "-batch" && d == "-" => "-6 ",
            other => panic!("not a batch: {other:?}"),
        };
        assert!(input.ends_with('\n'), "the last line is terminated");
        self.log.borrow_mut().push(command.clone());
        if self.hits(&command).is_some() {
            return Err(FabricError::Failed {
                command,
                status: "exit status: 255".into(),
                stderr: "Cannot open network namespace: No such file or directory".into(),
            });
        }
        for (i, line) in input.lines().enumerate() {
            let standalone = format!("ip -n {} {family}{line}", argv[2]);
            self.log.borrow_mut().push(standalone.clone());
            if let Some(msg) = self.hits(&standalone) {
                return Err(FabricError::Failed {
                    command,
                    status: "exit status: 1".into(),
                    stderr: format!("{msg}\nCommand failed -:{}", i + 1),
                });
            }
        }
        Ok(())
    }
}

const NAME: &str = "vpcsim-unit-test-nonexistent";

fn vpc() -> String {
    format!("{NAME}-vpc")
}

fn node(i: usize) -> String {
    format!("{NAME}-node{i}")
}

fn model() -> Model {
    let t = Topology {
        vpc_cidr: "10.0.0.0/16".parse().unwrap(),
        secondary_cidrs: vec![],
        region: "us-west-2".into(),
        subnets: vec![
            SubnetSpec::new("10.0.0.0/24".parse().unwrap()),
            SubnetSpec::new("10.0.1.0/24".parse().unwrap()),
        ],
        security_groups: vec![],
        ipv6: false,
        vpc_ipv6_cidr: None,
        nodes: 2,
        instance_type: "t3.medium".into(),
        extra_types: vec![],
    };
    Model::build(&t, Rng::seeded(9), 0).unwrap()
}

fn plan(m: &Model) -> FabricPlan {
    FabricPlan::from_model(NAME, m, DEFAULT_OUTSIDE_IP).unwrap()
}

/// A built fabric over `m`, its command log (cleared after the build) and its failure switch.
fn built_failable(m: &Model) -> (Fabric<Recorder>, Shared<Vec<String>>, FailSwitch) {
    let rec = Recorder::default();
    let (log, fail) = (rec.log.clone(), rec.fail_on.clone());
    let mut f = Fabric::new(rec);
    f.build(&plan(m), m).unwrap();
    log.borrow_mut().clear();
    (f, log, fail)
}

fn built(m: &Model) -> (Fabric<Recorder>, Shared<Vec<String>>) {
    let (f, log, _) = built_failable(m);
    (f, log)
}

fn take(log: &Rc<RefCell<Vec<String>>>) -> Vec<String> {
    std::mem::take(&mut *log.borrow_mut())
}

/// The lines of the one VPC batch in `log` (without the `ip -n VPC` prefix).
fn vpc_batch(log: &[String]) -> Vec<String> {
    let prefix = format!("ip -n {} ", vpc());
    assert_eq!(log[0], format!("ip -n {} -batch -", vpc()), "{log:#?}");
    log[1..]
        .iter()
        .map(|l| l.strip_prefix(&prefix).unwrap_or(l).to_string())
        .collect()
}

fn instance(m: &Model, i: usize) -> String {
    m.instances()[i].id.clone()
}

fn subnet(m: &Model, i: usize) -> String {
    m.subnets()[i].id.clone()
}

/// A new ENI in subnet `s`, attached to instance `i` at `device`; returns its id.
fn attached_eni(m: &mut Model, s: usize, i: usize, device: u32) -> String {
    let req = CreateEni {
        subnet_id: subnet(m, s),
        ..CreateEni::default()
    };
    let id = m.create_eni(req, 1).unwrap().id.clone();
    let inst = instance(m, i);
    m.attach_eni(&id, &inst, device, 0, 1).unwrap();
    id
}

#[test]
fn plan_follows_the_model() {
    let m = model();
    let plan = plan(&m);
    assert_eq!(plan.vpc_netns, vpc());
    assert_eq!(plan.vpc_cidrs, ["10.0.0.0/16".parse().unwrap()]);
    let n1 = &plan.nodes[0];
    let inst = m.instances()[0];
    let eni = m.eni(&inst.primary_eni).unwrap();
    assert_eq!((n1.index, n1.netns.as_str()), (1, node(1).as_str()));
    assert_eq!(n1.instance_id, inst.id);
    assert_eq!(n1.vpc_side, "n1d0");
    assert_eq!(n1.mac, eni.mac);
    assert_eq!(n1.address.ip(), eni.primary_ip);
    assert_eq!(n1.address.prefix(), 24);
    assert_eq!(n1.gateway.to_string(), "10.0.0.1");
    let out = &plan.outside;
    assert_eq!(out.netns, format!("{NAME}-out"));
    assert_eq!(out.ip.to_string(), "198.51.100.10");
    assert_eq!(out.vpc_side.to_string(), "192.0.2.1/30");
    assert_eq!(out.out_side.to_string(), "192.0.2.2/30");
    assert_eq!(
        plan.namespaces(),
        vec![vpc(), format!("{NAME}-out"), node(1), node(2)]
    );
}

#[test]
fn build_sets_sysctls_first_then_outside_then_links_then_nodes() {
    let m = model();
    let plan = plan(&m);
    let rec = Recorder::default();
    let log = rec.log.clone();
    let mut f = Fabric::new(rec);
    f.build(&plan, &m).unwrap();
    let lines = log.borrow().clone();
    let (v, out) = (vpc(), format!("{NAME}-out"));
    let pos = |needle: &str| {
        lines
            .iter()
            .position(|l| l == needle)
            .unwrap_or_else(|| panic!("missing {needle:?} in {lines:#?}"))
    };
    assert_eq!(lines[0], format!("ip netns add {v}"));
    assert_eq!(
        lines[1],
        format!(
            "ip netns exec {v} sysctl -q -e -w net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0"
        ),
        "DAD off right after the namespace is made"
    );
    let sysctl = VPC_SYSCTLS
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(
        lines[2],
        format!("ip netns exec {v} sysctl -q -w {sysctl}"),
        "VPC sysctls come before any link exists"
    );
    assert!(sysctl.starts_with("net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=1 net.ipv4.conf.default.rp_filter=1 net.ipv4.conf.default.proxy_arp=1"));
    let first_link = lines.iter().position(|l| l.contains("link add")).unwrap();
    assert!(first_link > 2);
    pos(&format!("ip -n {v} route add blackhole 10.0.0.0/16"));

    // The outside.
    let outside = pos(&format!("ip netns add {out}"));
    let vpc_out = pos(&format!(
        "ip -n {v} link add vpc-out mtu 1500 type veth peer name eth0 mtu 1500 netns {out}"
    ));
    assert!(outside < vpc_out);
    assert_eq!(
        lines[vpc_out + 1..vpc_out + 4],
        [
            format!("ip -n {v} addr add 192.0.2.1/30 dev vpc-out"),
            format!("ip -n {v} link set vpc-out up"),
            format!("ip -n {v} route add default via 192.0.2.2 dev vpc-out"),
        ]
    );
    let out_batch = pos(&format!("ip -n {out} -batch -"));
    assert_eq!(
        lines[out_batch + 1..out_batch + 6],
        [
            format!("ip -n {out} link set lo up"),
            format!("ip -n {out} addr add 198.51.100.10/32 dev lo"),
            format!("ip -n {out} addr add 192.0.2.2/30 dev eth0"),
            format!("ip -n {out} link set eth0 up"),
            format!("ip -n {out} route add 10.0.0.0/16 via 192.0.2.1 dev eth0"),
        ]
    );

    // Node 1: namespace, the primary ENI's link from the VPC side, then its node side.
    let n1 = node(1);
    let p1 = &plan.nodes[0];
    let ns1 = pos(&format!("ip netns add {n1}"));
    assert_eq!(
        lines[ns1 + 1],
        format!(
            "ip netns exec {n1} sysctl -q -e -w net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0"
        ),
        "every namespace of the fabric, DAD off before its first link"
    );
    pos(&format!(
        "ip netns exec {n1} sysctl -q -w net.ipv4.ip_forward=1"
    ));
    let link = pos(&format!(
        "ip -n {v} link add n1d0 mtu 9001 type veth peer name eth0 address {} mtu 9001 netns {n1}",
        p1.mac
    ));
    assert!(ns1 < link && outside < link);
    assert_eq!(
        lines[link + 1..link + 4],
        [
            format!("ip -n {v} addr add 10.0.0.1/32 dev n1d0"),
            format!("ip -n {v} ntable change name arp_cache dev n1d0 proxy_delay 0"),
            format!("ip -n {v} link set n1d0 up"),
        ]
    );
    let ip1 = p1.address.ip();
    assert!(pos(&format!("ip -n {v} route replace {ip1}/32 dev n1d0")) > link);
    pos(&format!(
        "ip -n {v} neigh replace {ip1} lladdr {} dev n1d0 nud permanent",
        p1.mac
    ));
    let node_batch = pos(&format!("ip -n {n1} -batch -"));
    assert!(node_batch > link);
    assert_eq!(
        lines[node_batch + 1..node_batch + 6],
        [
            format!("ip -n {n1} link set lo up"),
            format!("ip -n {n1} addr add 169.254.169.254/32 dev lo scope host"),
            format!("ip -n {n1} addr add {} dev eth0", p1.address),
            format!("ip -n {n1} link set eth0 up"),
            format!("ip -n {n1} route add default via 10.0.0.1 dev eth0"),
        ]
    );
    assert!(
        lines.iter().all(|l| l.contains(NAME)),
        "every command targets one of our namespaces"
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("bridge") || l.contains("master")),
        "routed, not bridged"
    );
    assert_eq!(f.wiring().links.len(), 2);
    assert_eq!(f.wiring().routes.len(), 2);
}

#[test]
fn every_vpc_cidr_is_blackholed_and_routed_back_from_the_outside() {
    // Node 2 in a subnet of the secondary CIDR, in another AZ.
    let mut pods = SubnetSpec::new("100.64.2.0/24".parse().unwrap());
    pods.az = Some("us-west-2b".into());
    pods.nodes = Some(1);
    let t = Topology {
        vpc_cidr: "10.0.0.0/16".parse().unwrap(),
        secondary_cidrs: vec!["100.64.0.0/16".parse().unwrap()],
        region: "us-west-2".into(),
        subnets: vec![SubnetSpec::new("10.0.0.0/24".parse().unwrap()), pods],
        security_groups: vec![],
        ipv6: false,
        vpc_ipv6_cidr: None,
        nodes: 2,
        instance_type: "t3.medium".into(),
        extra_types: vec![],
    };
    let m = Model::build(&t, Rng::seeded(9), 0).unwrap();
    let plan = plan(&m);
    assert_eq!(
        plan.vpc_cidrs,
        ["10.0.0.0/16", "100.64.0.0/16"].map(|c| c.parse().unwrap())
    );
    let p2 = &plan.nodes[1];
    assert_eq!(p2.address.prefix(), 24);
    assert!(
        p2.address.ip().octets()[..3] == [100, 64, 2],
        "{}",
        p2.address
    );
    let rec = Recorder::default();
    let log = rec.log.clone();
    let mut f = Fabric::new(rec);
    f.build(&plan, &m).unwrap();
    let lines = log.borrow().clone();
    let (v, out, n2) = (vpc(), format!("{NAME}-out"), node(2));
    for needle in [
        format!("ip -n {v} route add blackhole 10.0.0.0/16"),
        format!("ip -n {v} route add blackhole 100.64.0.0/16"),
        format!("ip -n {out} route add 10.0.0.0/16 via 192.0.2.1 dev eth0"),
        format!("ip -n {out} route add 100.64.0.0/16 via 192.0.2.1 dev eth0"),
        format!("ip -n {v} addr add 100.64.2.1/32 dev n2d0"),
        format!("ip -n {n2} addr add {} dev eth0", p2.address),
        format!("ip -n {n2} route add default via 100.64.2.1 dev eth0"),
    ] {
        assert!(lines.contains(&needle), "missing {needle:?} in {lines:#?}");
    }
}

#[test]
fn teardown_removes_nodes_then_outside_then_vpc() {
    let m = model();
    let (mut f, log) = built(&m);
    let removed = f.teardown();
    let expected = vec![node(2), node(1), format!("{NAME}-out"), vpc()];
    assert_eq!(removed, expected);
    assert_eq!(
        take(&log),
        expected
            .iter()
            .map(|n| format!("ip netns del {n}"))
            .collect::<Vec<_>>()
    );
    assert!(f.namespaces().is_empty());
    drop(f);
    assert!(log.borrow().is_empty(), "nothing left for drop to remove");
}

#[test]
fn attaching_an_eni_creates_its_link_and_delivery_in_one_batch() {
    let mut m = model();
    let (mut f, log) = built(&m);
    // An ENI in the second subnet, attached to node 2 at device 1.
    let id = attached_eni(&mut m, 1, 1, 1);
    let eni = m.eni(&id).unwrap().clone();
    assert_eq!(f.sync(&m).unwrap(), 6);
    let n2 = node(2);
    let ip = eni.primary_ip;
    assert_eq!(
        vpc_batch(&take(&log)),
        [
            format!(
                "link add n2d1 mtu 9001 type veth peer name eth1 address {} mtu 9001 netns {n2}",
                eni.mac
            ),
            "addr add 10.0.1.1/32 dev n2d1".to_string(),
            "ntable change name arp_cache dev n2d1 proxy_delay 0".to_string(),
            "link set n2d1 up".to_string(),
            format!("route replace {ip}/32 dev n2d1"),
            format!(
                "neigh replace {ip} lladdr {} dev n2d1 nud permanent",
                eni.mac
            ),
        ]
    );
    assert_eq!(f.sync(&m).unwrap(), 0, "nothing changed, nothing run");
    assert!(take(&log).is_empty());
}

#[test]
fn an_unattached_eni_gets_no_delivery() {
    let mut m = model();
    let (mut f, log) = built(&m);
    let req = CreateEni {
        subnet_id: subnet(&m, 0),
        secondary_count: 2,
        ..CreateEni::default()
    };
    m.create_eni(req, 1).unwrap();
    assert_eq!(f.sync(&m).unwrap(), 0);
    assert!(take(&log).is_empty());
}

#[test]
fn assign_and_unassign_add_and_remove_only_those_addresses() {
    let mut m = model();
    let id = attached_eni(&mut m, 0, 0, 1);
    let (mut f, log) = built(&m);
    let mac = m.eni(&id).unwrap().mac.clone();
    let got = m
        .assign_private_ips(&id, AssignRequest::Count(2), 2)
        .unwrap();
    f.sync(&m).unwrap();
    let mut want = Vec::new();
    for ip in &got.ips {
        want.push(format!("route replace {ip}/32 dev n1d1"));
    }
    for ip in &got.ips {
        want.push(format!(
            "neigh replace {ip} lladdr {mac} dev n1d1 nud permanent"
        ));
    }
    assert_eq!(vpc_batch(&take(&log)), want);

    m.unassign_private_ips(&id, &got.ips[..1], &[]).unwrap();
    f.sync(&m).unwrap();
    let gone = got.ips[0];
    assert_eq!(
        vpc_batch(&take(&log)),
        [
            format!("route del {gone}/32 dev n1d1"),
            format!("neigh del {gone} dev n1d1"),
        ]
    );
    assert_eq!(f.wiring(), &Wiring::wanted(&m, &plan(&m).node_map()));
}

#[test]
fn a_prefix_is_delivered_as_its_sixteen_addresses() {
    let mut m = model();
    let id = attached_eni(&mut m, 0, 0, 1);
    let (mut f, log) = built(&m);
    let got = m
        .assign_private_ips(&id, AssignRequest::PrefixCount(1), 2)
        .unwrap();
    let prefix = got.prefixes[0];
    assert_eq!(f.sync(&m).unwrap(), 32);
    let batch = vpc_batch(&take(&log));
    let routes: Vec<&String> = batch.iter().filter(|l| l.starts_with("route")).collect();
    assert_eq!(routes.len(), 16);
    for ip in prefix.iter() {
        assert!(
            batch.contains(&format!("route replace {ip}/32 dev n1d1")),
            "{ip} in {batch:#?}"
        );
    }
    assert_eq!(
        batch.iter().filter(|l| l.contains("nud permanent")).count(),
        16
    );
    m.unassign_private_ips(&id, &[], &[prefix]).unwrap();
    f.sync(&m).unwrap();
    let batch = vpc_batch(&take(&log));
    assert_eq!(batch.len(), 32);
    assert!(batch.iter().all(|l| l.contains(" del ")), "{batch:#?}");
}

#[test]
fn detach_deletes_the_link_which_takes_its_delivery_along() {
    let mut m = model();
    let id = attached_eni(&mut m, 0, 0, 1);
    m.assign_private_ips(&id, AssignRequest::Count(3), 1)
        .unwrap();
    let (mut f, log) = built(&m);
    let att = m.eni(&id).unwrap().attachment.clone().unwrap();
    m.detach_eni(&att.id, false).unwrap();
    f.sync(&m).unwrap();
    assert_eq!(vpc_batch(&take(&log)), ["link del n1d1"]);
    assert!(!f.wiring().links.contains_key("n1d1"));
    assert!(f.wiring().routes.values().all(|l| l != "n1d1"));
    assert!(f.wiring().neighbours.keys().all(|(_, l)| l != "n1d1"));

    // Re-attached: the link and every address come back.
    let inst = instance(&m, 0);
    m.attach_eni(&id, &inst, 1, 0, 3).unwrap();
    assert_eq!(f.sync(&m).unwrap(), 4 + 2 * 4);
}

#[test]
fn an_address_moving_between_enis_is_rerouted_and_its_old_neighbour_removed() {
    let ip: Ipv4Addr = "10.0.0.50".parse().unwrap();
    let link = |name: &str, mac: &str| LinkState {
        link: EniLink {
            name: name.into(),
            node_netns: node(1),
            device: 1,
            mac: mac.into(),
            router: "10.0.0.1".parse().unwrap(),
            next_hop6: None,
        },
        addressed: true,
        prompt: true,
        up: true,
        router6: false,
        next_hop6: false,
    };
    let mut from = Wiring::default();
    from.links
        .insert("n1d1".into(), link("n1d1", "02:00:00:00:00:01"));
    from.links
        .insert("n2d1".into(), link("n2d1", "02:00:00:00:00:02"));
    let mut to = from.clone();
    from.routes.insert(ip, "n1d1".into());
    from.neighbours
        .insert((ip, "n1d1".into()), "02:00:00:00:00:01".into());
    to.routes.insert(ip, "n2d1".into());
    to.neighbours
        .insert((ip, "n2d1".into()), "02:00:00:00:00:02".into());
    let ops = from.diff(&to);
    assert_eq!(
        ops,
        [
            Op::DelNeighbour(ip, "n1d1".into()),
            Op::Route(ip, "n2d1".into()),
            Op::Neighbour(ip, "n2d1".into(), "02:00:00:00:00:02".into()),
        ]
    );
    assert_eq!(
        ops.iter().map(Op::line).collect::<Vec<_>>(),
        [
            "neigh del 10.0.0.50 dev n1d1",
            "route replace 10.0.0.50/32 dev n2d1",
            "neigh replace 10.0.0.50 lladdr 02:00:00:00:00:02 dev n2d1 nud permanent",
        ]
    );
    let mut applied = from.clone();
    for op in &ops {
        op.apply(&mut applied);
    }
    assert_eq!(applied, to);
}

#[test]
fn a_different_eni_at_the_same_device_replaces_the_link() {
    let mut m = model();
    let first = attached_eni(&mut m, 0, 0, 1);
    let (mut f, log) = built(&m);
    let att = m.eni(&first).unwrap().attachment.clone().unwrap();
    m.detach_eni(&att.id, false).unwrap();
    let second = attached_eni(&mut m, 0, 0, 1);
    f.sync(&m).unwrap();
    let batch = vpc_batch(&take(&log));
    assert_eq!(batch[0], "link del n1d1");
    let mac = &m.eni(&second).unwrap().mac;
    assert!(batch[1].starts_with("link add n1d1 ") && batch[1].contains(mac.as_str()));
    assert_eq!(f.wiring(), &Wiring::wanted(&m, &plan(&m).node_map()));
}

#[test]
fn a_failed_line_leaves_the_record_at_the_lines_before_it_and_the_next_sync_resumes() {
    let mut m = model();
    let (mut f, log, fail) = built_failable(&m);
    let before = f.wiring().clone();
    let id = attached_eni(&mut m, 0, 0, 1);
    let eni = m.eni(&id).unwrap().clone();
    let ip = eni.primary_ip;

    fail_with(&fail, "route replace", BOOM);
    let e = f.sync(&m).unwrap_err();
    match &e {
        FabricError::BatchLine { line, text, .. } => {
            assert_eq!(
                *line, 5,
                "link add, addr add, ntable, link up, then the route"
            );
            assert_eq!(text, &format!("route replace {ip}/32 dev n1d1"));
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("boom"), "{e}");
    let rec = f.wiring();
    let l = &rec.links["n1d1"];
    assert!(l.addressed && l.prompt && l.up);
    assert!(!rec.routes.contains_key(&ip));
    assert_eq!(rec.routes, before.routes);

    // The record is exact, so the next sync runs only the rest.
    *fail.borrow_mut() = None;
    take(&log);
    assert_eq!(f.sync(&m).unwrap(), 2);
    assert_eq!(
        vpc_batch(&take(&log)),
        [
            format!("route replace {ip}/32 dev n1d1"),
            format!(
                "neigh replace {ip} lladdr {} dev n1d1 nud permanent",
                eni.mac
            ),
        ]
    );
}

#[test]
fn a_half_made_link_is_made_again() {
    let mut m = model();
    let (mut f, log, fail) = built_failable(&m);
    attached_eni(&mut m, 0, 0, 1);
    fail_with(&fail, "addr add 10.0.0.1/32 dev n1d1", BOOM);
    assert!(f.sync(&m).is_err());
    let state = &f.wiring().links["n1d1"];
    assert!(!state.addressed && !state.prompt && !state.up);
    *fail.borrow_mut() = None;
    take(&log);
    f.sync(&m).unwrap();
    let batch = vpc_batch(&take(&log));
    assert_eq!(batch[0], "link del n1d1");
    assert!(batch[1].starts_with("link add n1d1 "), "{batch:#?}");
    assert_eq!(f.wiring(), &Wiring::wanted(&m, &plan(&m).node_map()));
}

#[test]
fn a_failure_before_any_line_runs_applies_nothing() {
    let mut m = model();
    let (mut f, _log, fail) = built_failable(&m);
    let before = f.wiring().clone();
    attached_eni(&mut m, 0, 0, 1);
    fail_with(&fail, "-batch", BOOM);
    let e = f.sync(&m).unwrap_err();
    assert!(matches!(e, FabricError::Failed { .. }), "{e}");
    assert_eq!(f.wiring(), &before);
}

#[test]
fn deleting_what_is_already_gone_counts_as_done_and_the_rest_still_runs() {
    let mut m = model();
    let id = attached_eni(&mut m, 0, 0, 1);
    let (mut f, log, fail) = built_failable(&m);
    // One change: node 1's ENI detached, node 2's primary ENI one more address.
    let att = m.eni(&id).unwrap().attachment.clone().unwrap();
    m.detach_eni(&att.id, false).unwrap();
    let eni2 = m.instances()[1].primary_eni.clone();
    let more = m
        .assign_private_ips(&eni2, AssignRequest::Count(1), 2)
        .unwrap()
        .ips[0];

    // A real failure of the deletion: nothing applied.
    fail_with(&fail, "link del n1d1", BOOM);
    let e = f.sync(&m).unwrap_err();
    assert!(matches!(e, FabricError::BatchLine { line: 1, .. }), "{e}");
    assert!(f.wiring().links.contains_key("n1d1"));
    assert!(!f.wiring().routes.contains_key(&more));

    // The link is gone already (its node namespace was removed): done, and the rest runs.
    fail_with(&fail, "link del n1d1", "Cannot find device \"n1d1\"");
    take(&log);
    assert_eq!(f.sync(&m).unwrap(), 3);
    let lines = take(&log);
    assert_eq!(lines.iter().filter(|l| l.ends_with("-batch -")).count(), 2);
    assert!(lines.contains(&format!("ip -n {} route replace {more}/32 dev n2d0", vpc())));
    assert_eq!(f.wiring(), &Wiring::wanted(&m, &plan(&m).node_map()));

    // An addition that fails for a missing device is a failure, not "done".
    let inst = instance(&m, 0);
    m.attach_eni(&id, &inst, 1, 0, 3).unwrap();
    fail_with(&fail, "route replace", "Cannot find device \"n1d1\"");
    assert!(f.sync(&m).is_err());
}

#[test]
fn failed_line_reads_ips_message() {
    assert_eq!(
        failed_line("Cannot find device \"x\"\nCommand failed -:3"),
        Some(3)
    );
    assert_eq!(failed_line("Cannot open network namespace"), None);
}

#[test]
fn a_failure_midway_through_build_leaves_only_what_was_created_for_teardown() {
    let m = model();
    let rec = Recorder::failing(&format!("ip netns add {NAME}-node2"));
    let log = rec.log.clone();
    {
        let mut f = Fabric::new(rec);
        let e = f.build(&plan(&m), &m).unwrap_err();
        assert!(e.to_string().contains("boom"), "{e}");
        assert_eq!(f.namespaces(), &[vpc(), format!("{NAME}-out"), node(1)]);
    } // dropped: tears down
    let dels: Vec<String> = log
        .borrow()
        .iter()
        .filter(|l| l.starts_with("ip netns del"))
        .cloned()
        .collect();
    assert_eq!(
        dels,
        vec![
            format!("ip netns del {}", node(1)),
            format!("ip netns del {NAME}-out"),
            format!("ip netns del {}", vpc()),
        ]
    );
}

mod ipv6;
