//! The routed VPC for real (needs root): nodes reach each other and the outside, hot-plugged
//! ENIs appear and disappear with their delivery routes, the source/destination check drops a
//! packet that leaves through the wrong ENI, a fabric failure fails the EC2 call, and SIGTERM
//! removes every namespace; with IPv6 the same for IPv6 addresses and delegated /80s. EC2 is driven with plain form POSTs to the root-namespace endpoint.

use crate::common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpStream, UdpSocket};
use std::time::Duration;

use common::root::{NsGuard, exec_in, http_in, ip, our_namespaces};
use common::{Node, SimProcess, host_port, parse_xml};
use testkit::http::exchange;
use vpc_sim::netns;
use vpc_sim::simfile::SimFile;

/// A running simulator in fabric mode, with its namespaces removed on drop whatever happens.
struct Vpc {
    sim: SimProcess,
    f: SimFile,
    name: String,
    _guard: NsGuard,
}

impl Vpc {
    fn start(nodes: usize, extra: &[&str]) -> Self {
        let name = testkit::unique("vfv");
        let guard = NsGuard(name.clone());
        let n = nodes.to_string();
        let mut args = vec!["--mode", "fabric", "--nodes", n.as_str()];
        args.extend_from_slice(extra);
        let mut sim = SimProcess::start(&name, &args);
        let f = sim.wait_ready();
        Self {
            sim,
            f,
            name,
            _guard: guard,
        }
    }

    fn vpc(&self) -> String {
        self.f.vpc_netns.clone().unwrap()
    }

    fn out(&self) -> String {
        self.f.outside.as_ref().unwrap().netns.clone()
    }

    fn outside_ip(&self) -> Ipv4Addr {
        self.f.outside.as_ref().unwrap().ip
    }

    fn node(&self, i: usize) -> String {
        self.f.nodes[i].netns.clone().unwrap()
    }

    /// One EC2 call (form POST, no signature); returns status and parsed body.
    fn call(&self, pairs: &[(&str, &str)]) -> (u16, Node) {
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("Version", "2016-11-15");
        for (k, v) in pairs {
            form.append_pair(k, v);
        }
        let addr = host_port(&self.f.ec2_endpoint);
        let (status, body) = exchange(
            TcpStream::connect(&addr).unwrap(),
            "POST",
            &addr,
            "/",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            &form.finish(),
        );
        (status, parse_xml(&body))
    }

    fn ok(&self, pairs: &[(&str, &str)]) -> Node {
        let (status, x) = self.call(pairs);
        assert_eq!(status, 200, "{pairs:?} -> {x:?}\n{}", self.sim.log());
        x
    }

    /// CreateNetworkInterface in the first subnet: (id, MAC, primary address).
    fn create_eni(&self) -> (String, String, Ipv4Addr) {
        self.create_eni_in(0)
    }

    /// CreateNetworkInterface in subnet `s`: (id, MAC, primary address).
    fn create_eni_in(&self, s: usize) -> (String, String, Ipv4Addr) {
        let subnet = self.f.subnets[s].id.clone();
        let x = self.ok(&[
            ("Action", cloud::Action::CreateNetworkInterface.wire_name()),
            ("SubnetId", &subnet),
        ]);
        let e = x.at("networkInterface");
        (
            e.text_at("networkInterfaceId").to_string(),
            e.text_at("macAddress").to_string(),
            e.text_at("privateIpAddress").parse().unwrap(),
        )
    }

    /// AttachNetworkInterface to node `i` at `device`: the attachment id.
    fn attach(&self, eni: &str, i: usize, device: u32) -> String {
        let inst = self.f.nodes[i].instance_id.clone();
        let d = device.to_string();
        self.ok(&[
            ("Action", cloud::Action::AttachNetworkInterface.wire_name()),
            ("NetworkInterfaceId", eni),
            ("InstanceId", &inst),
            ("DeviceIndex", &d),
        ])
        .text_at("attachmentId")
        .to_string()
    }

    fn detach(&self, attachment: &str) {
        self.ok(&[
            ("Action", cloud::Action::DetachNetworkInterface.wire_name()),
            ("AttachmentId", attachment),
        ]);
    }

    /// AssignPrivateIpAddresses with a count: the new addresses.
    fn assign(&self, eni: &str, n: u32) -> Vec<Ipv4Addr> {
        let n = n.to_string();
        let x = self.ok(&[
            (
                "Action",
                cloud::Action::AssignPrivateIpAddresses.wire_name(),
            ),
            ("NetworkInterfaceId", eni),
            ("SecondaryPrivateIpAddressCount", &n),
        ]);
        x.items("assignedPrivateIpAddressesSet")
            .iter()
            .map(|i| i.text_at("privateIpAddress").parse().unwrap())
            .collect()
    }

    /// Where the VPC delivers `addr`: (link of its /32 route, link + MAC of its neighbour entry).
    fn delivery(&self, addr: Ipv4Addr) -> (Option<String>, Option<(String, String)>) {
        let vpc = self.vpc();
        let route = ip(&["-n", &vpc, "-4", "route", "show", &format!("{addr}/32")]);
        let link = route
            .lines()
            .find_map(|l| word_after(l, "dev"))
            .map(str::to_string);
        let neigh = ip(&["-n", &vpc, "-4", "neigh", "show", &addr.to_string()]);
        let entry = neigh
            .lines()
            .find(|l| l.contains("PERMANENT"))
            .and_then(|l| Some((word_after(l, "dev")?, word_after(l, "lladdr")?)))
            .map(|(d, m)| (d.to_string(), m.to_string()));
        (link, entry)
    }

    /// Asserts that the VPC delivers `addr` to `link` with `mac`.
    fn assert_delivered(&self, addr: Ipv4Addr, link: &str, mac: &str) {
        assert_eq!(
            self.delivery(addr),
            (
                Some(link.to_string()),
                Some((link.to_string(), mac.to_string()))
            ),
            "delivery of {addr}"
        );
    }

    fn assert_not_delivered(&self, addr: Ipv4Addr) {
        assert_eq!(self.delivery(addr), (None, None), "delivery of {addr}");
    }

    /// SIGTERM; everything of ours must be gone afterwards.
    fn stop(mut self) {
        let status = self.sim.terminate();
        assert!(status.success(), "exit {status}:\n{}", self.sim.log());
        assert_eq!(
            our_namespaces(&self.name),
            Vec::<String>::new(),
            "left behind\n{}",
            self.sim.log()
        );
    }
}

fn word_after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let mut words = line.split_whitespace();
    words.find(|w| *w == key)?;
    words.next()
}

/// The flags of `ip -o link show` output (`<BROADCAST,MULTICAST,UP,LOWER_UP>`).
fn link_flags(line: &str) -> Vec<String> {
    line.split_once('<')
        .and_then(|(_, rest)| rest.split_once('>'))
        .map(|(flags, _)| flags.split(',').map(str::to_string).collect())
        .unwrap_or_default()
}

/// Whether a short, bounded ping from `ns` (optionally from source `src`) gets any reply.
fn ping(ns: &str, src: Option<Ipv4Addr>, dst: Ipv4Addr) -> bool {
    let dst = dst.to_string();
    let src = src.map(|s| s.to_string());
    let mut args = vec![
        "ping", "-n", "-q", "-c", "2", "-i", "0.2", "-W", "1", "-w", "3",
    ];
    if let Some(s) = &src {
        args.extend(["-I", s.as_str()]);
    }
    args.push(&dst);
    exec_in(ns, &args).status.success()
}

/// Sends UDP from namespace `from` to the outside; returns the source address the outside saw.
fn source_seen_outside(v: &Vpc, from: &str) -> Ipv4Addr {
    let out_ip = v.outside_ip();
    let sock = netns::run_in(&v.out(), move || UdpSocket::bind((out_ip, 0)))
        .unwrap()
        .unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let port = sock.local_addr().unwrap().port();
    for _ in 0..5 {
        netns::run_in(from, move || {
            UdpSocket::bind("0.0.0.0:0")?.send_to(b"who am i", (out_ip, port))
        })
        .unwrap()
        .unwrap();
        let mut buf = [0u8; 16];
        if let Ok((_, peer)) = sock.recv_from(&mut buf) {
            match peer.ip() {
                std::net::IpAddr::V4(a) => return a,
                other => panic!("IPv6 source {other}"),
            }
        }
    }
    panic!("the outside got nothing from {from}");
}

/// Packets the namespace dropped for failing the reverse-path check (TcpExt IPReversePathFilter).
fn rp_filter_drops(ns: &str) -> u64 {
    let out = exec_in(ns, &["cat", "/proc/net/netstat"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        if let [names, values] = pair
            && names.starts_with("TcpExt:")
        {
            let found = names
                .split_whitespace()
                .zip(values.split_whitespace())
                .find(|(n, _)| *n == "IPReversePathFilter");
            if let Some((_, v)) = found {
                return v.parse().unwrap();
            }
        }
    }
    panic!("no TcpExt IPReversePathFilter in /proc/net/netstat:\n{text}");
}

fn sysctl(ns: &str, key: &str) -> String {
    let out = exec_in(ns, &["sysctl", "-n", key]);
    assert!(out.status.success(), "{key}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// What ipamd does for an address `s` of the ENI at eth1 in node namespace `ns`, by hand: eth1
/// up with the ENI's primary address (no connected route, so the main table keeps sending the
/// subnet out of eth0), and `s` held by the node.
fn hold_on_eth1(ns: &str, primary: Ipv4Addr, s: Ipv4Addr) {
    let primary = format!("{primary}/24");
    ip(&[
        "-n",
        ns,
        "addr",
        "add",
        &primary,
        "dev",
        "eth1",
        "noprefixroute",
    ]);
    ip(&["-n", ns, "link", "set", "eth1", "up"]);
    ip(&["-n", ns, "addr", "add", &format!("{s}/32"), "dev", "lo"]);
}

/// Traffic from `s` out of eth1 to its subnet's router `gw`: eth1's own table (2, as for device
/// 1) and the priority-1536 rule that sends `s` there.
fn route_through_eth1(ns: &str, s: Ipv4Addr, gw: Ipv4Addr) {
    let gw = gw.to_string();
    let host = format!("{gw}/32");
    ip(&[
        "-n", ns, "route", "add", &host, "dev", "eth1", "scope", "link", "table", "2",
    ]);
    ip(&[
        "-n", ns, "route", "add", "default", "via", &gw, "dev", "eth1", "table", "2",
    ]);
    let from = format!("{s}/32");
    ip(&[
        "-n", ns, "rule", "add", "from", &from, "lookup", "2", "prio", "1536",
    ]);
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn two_nodes_reach_each_other_and_the_outside_sees_their_own_addresses() {
    let v = Vpc::start(2, &[]);
    let name = v.name.clone();
    let (vpc, out) = (v.vpc(), v.out());
    assert_eq!(out, format!("{name}-out"));
    let mut present = our_namespaces(&name);
    present.sort();
    assert_eq!(
        present,
        ["node1", "node2", "out", "vpc"].map(|s| format!("{name}-{s}"))
    );
    let (n1, n2) = (&v.f.nodes[0], &v.f.nodes[1]);
    let subnet = v.f.subnets[0].cidr;
    assert!(subnet.contains(n1.primary_ip) && subnet.contains(n2.primary_ip));
    for (i, n) in [n1, n2].into_iter().enumerate() {
        let eth0 = ip(&["-n", &v.node(i), "-4", "-o", "addr", "show", "dev", "eth0"]);
        assert!(
            eth0.contains(&format!("inet {}/24", n.primary_ip)),
            "{eth0}"
        );
        let link = format!("n{}d0", i + 1);
        v.assert_delivered(n.primary_ip, &link, &n.mac);
        let side = ip(&["-n", &vpc, "-o", "link", "show", &link]);
        assert!(side.contains("mtu 9001"), "{side}");
        assert!(link_flags(&side).contains(&"UP".to_string()), "{side}");
        let addr = ip(&["-n", &vpc, "-4", "-o", "addr", "show", "dev", &link]);
        assert!(addr.contains("inet 10.0.0.1/32"), "{addr}");
        assert_eq!(
            sysctl(&vpc, &format!("net.ipv4.conf.{link}.proxy_arp")),
            "1"
        );
        assert_eq!(
            sysctl(&vpc, &format!("net.ipv4.conf.{link}.rp_filter")),
            "1"
        );
        assert_eq!(
            sysctl(&vpc, &format!("net.ipv4.neigh.{link}.proxy_delay")),
            "0"
        );
    }
    assert_eq!(sysctl(&vpc, "net.ipv4.conf.all.rp_filter"), "1");
    assert_eq!(sysctl(&vpc, "net.ipv4.ip_forward"), "1");
    let routes = ip(&["-n", &vpc, "-4", "route", "show"]);
    assert!(routes.contains("blackhole 10.0.0.0/16"), "{routes}");
    assert!(
        routes.contains("default via 192.0.2.2 dev vpc-out"),
        "{routes}"
    );
    let out_routes = ip(&["-n", &out, "-4", "route", "show"]);
    assert!(
        out_routes.contains("10.0.0.0/16 via 192.0.2.1 dev eth0"),
        "{out_routes}"
    );
    assert!(!out_routes.contains("default"), "{out_routes}");
    let out_lo = ip(&["-n", &out, "-4", "-o", "addr", "show", "dev", "lo"]);
    assert!(out_lo.contains("inet 198.51.100.10/32"), "{out_lo}");

    assert!(ping(&v.node(0), None, n2.primary_ip), "node1 -> node2");
    assert!(ping(&v.node(1), None, n1.primary_ip), "node2 -> node1");
    assert!(ping(&v.node(0), None, v.outside_ip()), "node1 -> outside");
    // No NAT in the VPC: the outside sees each node's own primary address.
    assert_eq!(source_seen_outside(&v, &v.node(0)), n1.primary_ip);
    assert_eq!(source_seen_outside(&v, &v.node(1)), n2.primary_ip);
    // Addresses nobody holds (in the subnet, and elsewhere in the VPC) go nowhere.
    assert!(!ping(&v.node(0), None, "10.0.0.200".parse().unwrap()));
    assert!(!ping(&v.node(0), None, "10.0.9.9".parse().unwrap()));

    v.stop();
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn an_attached_eni_is_hot_plugged_with_its_delivery_and_unplugged_on_detach() {
    // A long IMDS lag: the device is there at once, IMDS does not list it yet (as on EC2).
    let v = Vpc::start(1, &["--imds-lag-ms", "600000"]);
    let (vpc, node) = (v.vpc(), v.node(0));
    let (eni, mac, primary) = v.create_eni();
    assert!(
        ip(&["-n", &node, "-o", "link", "show"])
            .lines()
            .all(|l| !l.contains("eth1")),
        "no eth1 before attach"
    );
    v.assert_not_delivered(primary);

    let attachment = v.attach(&eni, 0, 1);
    let eth1 = ip(&["-n", &node, "-o", "link", "show", "eth1"]);
    assert!(eth1.contains(&format!("link/ether {mac}")), "{eth1}");
    assert!(eth1.contains("mtu 9001"), "{eth1}");
    assert!(
        !link_flags(&eth1).contains(&"UP".to_string()),
        "down: {eth1}"
    );
    let addr = ip(&["-n", &node, "-4", "-o", "addr", "show", "dev", "eth1"]);
    assert!(addr.trim().is_empty(), "no address: {addr}");
    let side = ip(&["-n", &vpc, "-4", "-o", "addr", "show", "dev", "n1d1"]);
    assert!(side.contains("inet 10.0.0.1/32"), "{side}");
    v.assert_delivered(primary, "n1d1", &mac);

    let (status, token) = http_in(
        &node,
        "169.254.169.254:80",
        "PUT",
        "/latest/api/token",
        &[("X-aws-ec2-metadata-token-ttl-seconds", "60")],
        "",
    );
    assert_eq!(status, 200);
    let (status, macs) = http_in(
        &node,
        "169.254.169.254:80",
        "GET",
        "/latest/meta-data/network/interfaces/macs/",
        &[("X-aws-ec2-metadata-token", &token)],
        "",
    );
    assert_eq!(status, 200);
    assert!(!macs.contains(&mac), "IMDS lags: {macs}");

    let added = v.assign(&eni, 2);
    assert_eq!(added.len(), 2);
    for a in &added {
        v.assert_delivered(*a, "n1d1", &mac);
    }
    v.ok(&[
        (
            "Action",
            cloud::Action::UnassignPrivateIpAddresses.wire_name(),
        ),
        ("NetworkInterfaceId", &eni),
        ("PrivateIpAddress.1", &added[0].to_string()),
    ]);
    v.assert_not_delivered(added[0]);
    v.assert_delivered(added[1], "n1d1", &mac);

    v.detach(&attachment);
    let links = ip(&["-n", &node, "-o", "link", "show"]);
    assert!(links.lines().all(|l| !l.contains("eth1")), "{links}");
    let vpc_links = ip(&["-n", &vpc, "-o", "link", "show"]);
    assert!(!vpc_links.contains("n1d1"), "{vpc_links}");
    v.assert_not_delivered(primary);
    v.assert_not_delivered(added[1]);
    // n1d0 still carries the router address it shared with n1d1, and the node still gets out.
    let local = ip(&["-n", &vpc, "-4", "route", "show", "table", "local"]);
    assert!(local.contains("local 10.0.0.1 dev n1d0"), "{local}");
    assert!(!local.contains("n1d1"), "{local}");
    assert!(ping(&node, None, v.outside_ip()), "node1 -> outside");

    v.attach(&eni, 0, 1);
    let eth1 = ip(&["-n", &node, "-o", "link", "show", "eth1"]);
    assert!(eth1.contains(&format!("link/ether {mac}")), "{eth1}");
    v.assert_delivered(primary, "n1d1", &mac);
    v.assert_delivered(added[1], "n1d1", &mac);
    // The node's own interface is untouched throughout.
    v.assert_delivered(v.f.nodes[0].primary_ip, "n1d0", &v.f.nodes[0].mac);

    v.stop();
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn the_source_destination_check_drops_a_packet_leaving_through_the_wrong_eni() {
    let v = Vpc::start(2, &[]);
    let (vpc, node1) = (v.vpc(), v.node(0));
    let peer = v.f.nodes[1].primary_ip;
    let (eni, _, primary) = v.create_eni();
    v.attach(&eni, 0, 1);
    let s = v.assign(&eni, 1)[0];

    hold_on_eth1(&node1, primary, s);
    assert!(ping(&node1, None, peer), "node1 -> node2 from its primary");

    let route = ip(&[
        "-n",
        &node1,
        "route",
        "get",
        &peer.to_string(),
        "from",
        &s.to_string(),
    ]);
    assert!(route.contains("dev eth0"), "{route}");
    let before = rp_filter_drops(&vpc);
    assert!(
        !ping(&node1, Some(s), peer),
        "S out of eth0 must be dropped"
    );
    assert!(
        rp_filter_drops(&vpc) > before,
        "dropped by the VPC's reverse-path filter"
    );

    // Traffic from S through the ENI that holds S (what the per-ENI table does).
    route_through_eth1(&node1, s, "10.0.0.1".parse().unwrap());
    let route = ip(&[
        "-n",
        &node1,
        "route",
        "get",
        &peer.to_string(),
        "from",
        &s.to_string(),
    ]);
    assert!(route.contains("dev eth1"), "{route}");
    assert!(ping(&node1, Some(s), peer), "S out of eth1 is delivered");
    assert!(ping(&v.node(1), None, s), "and node2 reaches S");

    v.stop();
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn a_fabric_failure_fails_the_call_and_leaves_ec2_unchanged() {
    let v = Vpc::start(1, &[]);
    let node = v.node(0);
    let (eni, mac, primary) = v.create_eni();
    let attachment = v.attach(&eni, 0, 1);
    // Removing eth1 behind the simulator's back takes the VPC side along.
    ip(&["-n", &node, "link", "del", "eth1"]);
    let (status, x) = v.call(&[
        (
            "Action",
            cloud::Action::AssignPrivateIpAddresses.wire_name(),
        ),
        ("NetworkInterfaceId", &eni),
        ("SecondaryPrivateIpAddressCount", "1"),
    ]);
    assert_eq!(status, 500, "{x:?}");
    assert_eq!(x.text_at("Errors/Error/Code"), "InternalError");
    assert!(v.sim.log().contains("FABRIC FAILURE"), "{}", v.sim.log());
    let x = v.ok(&[
        (
            "Action",
            cloud::Action::DescribeNetworkInterfaces.wire_name(),
        ),
        ("NetworkInterfaceId.1", &eni),
    ]);
    let sets = x.items("networkInterfaceSet");
    assert_eq!(
        sets[0].items("privateIpAddressesSet").len(),
        1,
        "the assignment was rolled back"
    );
    // Detaching what is already gone works, and a new attachment plugs a fresh eth1.
    v.detach(&attachment);
    v.attach(&eni, 0, 1);
    let eth1 = ip(&["-n", &node, "-o", "link", "show", "eth1"]);
    assert!(eth1.contains(&format!("link/ether {mac}")), "{eth1}");
    let added = v.assign(&eni, 1);
    v.assert_delivered(primary, "n1d1", &mac);
    v.assert_delivered(added[0], "n1d1", &mac);

    v.stop();
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn an_eni_in_a_secondary_cidr_of_another_az_carries_traffic_to_a_node_and_the_outside() {
    // Node 1 in 10.0.0.0/24 (AZ a); node 2 in 10.0.1.0/24 (AZ b), where the pod subnet
    // 100.64.2.0/24 of the secondary CIDR is too.
    let v = Vpc::start(
        2,
        &[
            "--vpc-secondary-cidr",
            "100.64.0.0/16",
            "--subnet",
            "10.0.0.0/24",
            "--subnet",
            "10.0.1.0/24,az=us-west-2b,nodes=1",
            "--subnet",
            "100.64.2.0/24,az=us-west-2b,tag=kubernetes.io/role/cni=1",
        ],
    );
    let (vpc, out, node1, node2) = (v.vpc(), v.out(), v.node(0), v.node(1));
    let n1 = v.f.nodes[0].primary_ip;
    assert_eq!(
        (v.f.nodes[0].az.as_str(), v.f.nodes[1].az.as_str()),
        ("us-west-2a", "us-west-2b")
    );
    assert_eq!(v.f.nodes[1].subnet_id, v.f.subnets[1].id);
    let routes = ip(&["-n", &vpc, "-4", "route", "show"]);
    assert!(routes.contains("blackhole 100.64.0.0/16"), "{routes}");
    let out_routes = ip(&["-n", &out, "-4", "route", "show"]);
    assert!(
        out_routes.contains("100.64.0.0/16 via 192.0.2.1 dev eth0"),
        "{out_routes}"
    );

    let (eni, mac, primary) = v.create_eni_in(2);
    assert_eq!(primary.octets()[..3], [100, 64, 2]);
    // EC2 attaches an ENI to an instance of its own AZ only.
    let inst1 = v.f.nodes[0].instance_id.clone();
    let (status, x) = v.call(&[
        ("Action", cloud::Action::AttachNetworkInterface.wire_name()),
        ("NetworkInterfaceId", &eni),
        ("InstanceId", &inst1),
        ("DeviceIndex", "1"),
    ]);
    assert_eq!(status, 400, "{x:?}");
    assert_eq!(
        x.text_at("Errors/Error/Code"),
        "InvalidParameterCombination"
    );
    v.attach(&eni, 1, 1);
    let side = ip(&["-n", &vpc, "-4", "-o", "addr", "show", "dev", "n2d1"]);
    assert!(side.contains("inet 100.64.2.1/32"), "{side}");
    let s = v.assign(&eni, 1)[0];
    v.assert_delivered(s, "n2d1", &mac);

    hold_on_eth1(&node2, primary, s);
    route_through_eth1(&node2, s, "100.64.2.1".parse().unwrap());

    // Across AZs from node 2's own address (which also resolves its gateway on eth0).
    assert!(ping(&node2, None, n1), "node 2 -> node 1");
    assert!(ping(&node2, Some(s), n1), "S -> node 1 in 10.0.0.0/24");
    assert!(ping(&node1, None, s), "node 1 -> S");
    // Not SNATed, as with external SNAT: the outside routes the secondary CIDR back too.
    assert!(ping(&node2, Some(s), v.outside_ip()), "S -> outside");
    // Nobody holds these: blackholed, in the pod subnet and elsewhere in the secondary CIDR.
    assert!(!ping(&node1, None, "100.64.2.200".parse().unwrap()));
    assert!(!ping(&node1, None, "100.64.9.9".parse().unwrap()));

    // Without its rule S leaves through eth0, whose ENI does not hold it: dropped.
    ip(&[
        "-n",
        &node2,
        "rule",
        "del",
        "from",
        &format!("{s}/32"),
        "lookup",
        "2",
    ]);
    let before = rp_filter_drops(&vpc);
    assert!(!ping(&node2, Some(s), n1), "S out of eth0 must be dropped");
    assert!(rp_filter_drops(&vpc) > before);

    v.stop();
}

/// Whether a bounded `ping -6` from `ns` (optionally from `src`) gets a reply within `tries`
/// attempts of one echo each (the first may wait for neighbour discovery).
fn ping6(ns: &str, src: Option<Ipv6Addr>, dst: Ipv6Addr, tries: usize) -> bool {
    let dst = dst.to_string();
    let src = src.map(|s| s.to_string());
    let mut args = vec!["ping", "-6", "-n", "-q", "-c", "1", "-W", "2"];
    if let Some(s) = &src {
        args.extend(["-I", s.as_str()]);
    }
    args.push(&dst);
    (0..tries).any(|_| exec_in(ns, &args).status.success())
}

/// ICMPv6 echo requests namespace `ns` has received (Icmp6InEchos).
fn echoes_received(ns: &str) -> u64 {
    let out = exec_in(ns, &["cat", "/proc/net/snmp6"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("Icmp6InEchos"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Icmp6InEchos in /proc/net/snmp6:\n{text}"))
}

/// Sends UDP over IPv6 from namespace `from` (from `src` when given) to the outside; returns
/// the source address the outside saw.
fn source6_seen_outside(v: &Vpc, from: &str, src: Option<Ipv6Addr>) -> Ipv6Addr {
    let out_ip = v.outside_ipv6();
    let sock = netns::run_in(&v.out(), move || UdpSocket::bind((out_ip, 0)))
        .unwrap()
        .unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let port = sock.local_addr().unwrap().port();
    let bind = src.unwrap_or(Ipv6Addr::UNSPECIFIED);
    for _ in 0..5 {
        netns::run_in(from, move || {
            UdpSocket::bind((bind, 0))?.send_to(b"who am i", (out_ip, port))
        })
        .unwrap()
        .unwrap();
        let mut buf = [0u8; 16];
        if let Ok((_, peer)) = sock.recv_from(&mut buf) {
            match peer.ip() {
                IpAddr::V6(a) => return a,
                other => panic!("IPv4 source {other}"),
            }
        }
    }
    panic!("the outside got nothing over IPv6 from {from}");
}

/// The VPC's route towards `dst` (`ip -6 route get`), or its error text.
fn vpc_route6(v: &Vpc, dst: Ipv6Addr) -> String {
    let out = exec_in(&v.vpc(), &["ip", "-6", "route", "get", &dst.to_string()]);
    let text = [out.stdout, out.stderr].concat();
    String::from_utf8(text).unwrap()
}

/// The `index`-th address of `prefix`.
fn nth(prefix: ipnetwork::Ipv6Network, index: u128) -> Ipv6Addr {
    Ipv6Addr::from(u128::from(prefix.network()) + index)
}

/// The EUI-64 link-local address of `mac`, as a node's kernel gives it to the interface.
fn eui64(mac: &str) -> Ipv6Addr {
    let b: Vec<u8> = mac
        .split(':')
        .map(|x| u8::from_str_radix(x, 16).unwrap())
        .collect();
    let w = |h: u8, l: u8| u16::from_be_bytes([h, l]);
    Ipv6Addr::new(
        0xfe80,
        0,
        0,
        0,
        w(b[0] ^ 2, b[1]),
        w(b[2], 0xff),
        w(0xfe, b[3]),
        w(b[4], b[5]),
    )
}

impl Vpc {
    fn outside_ipv6(&self) -> Ipv6Addr {
        self.f
            .outside
            .as_ref()
            .unwrap()
            .ipv6
            .expect("an outside IPv6")
    }

    fn primary_ipv6(&self, i: usize) -> Ipv6Addr {
        self.f.nodes[i].primary_ipv6.expect("a primary IPv6")
    }

    /// AssignIpv6Addresses with Ipv6PrefixCount=1: the new /80.
    fn delegate_80(&self, eni: &str) -> ipnetwork::Ipv6Network {
        let x = self.ok(&[
            ("Action", cloud::Action::AssignIpv6Addresses.wire_name()),
            ("NetworkInterfaceId", eni),
            ("Ipv6PrefixCount", "1"),
        ]);
        let items = x.items("assignedIpv6PrefixSet");
        assert_eq!(items.len(), 1, "{x:?}");
        items[0].text.parse().unwrap()
    }

    fn take_back_80(&self, eni: &str, prefix: ipnetwork::Ipv6Network) {
        self.ok(&[
            ("Action", cloud::Action::UnassignIpv6Addresses.wire_name()),
            ("NetworkInterfaceId", eni),
            ("Ipv6Prefix.1", &prefix.to_string()),
        ]);
    }
}

/// Puts `addr` on `lo` of node namespace `ns`, as a pod's address would be held by the node.
fn hold6(ns: &str, addr: Ipv6Addr) {
    ip(&[
        "-n",
        ns,
        "addr",
        "add",
        &format!("{addr}/128"),
        "dev",
        "lo",
        "nodad",
    ]);
}

fn unhold6(ns: &str, addr: Ipv6Addr) {
    ip(&["-n", ns, "addr", "del", &format!("{addr}/128"), "dev", "lo"]);
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn ipv6_nodes_reach_each_other_and_the_outside_which_sees_their_own_addresses() {
    let v = Vpc::start(2, &["--ip-family", "dual"]);
    let (vpc, out, node1, node2) = (v.vpc(), v.out(), v.node(0), v.node(1));
    let vpc6 = v.f.vpc.ipv6_cidr.expect("a VPC /56");
    assert_eq!(v.outside_ipv6().to_string(), "2001:db8:8000::10");
    let (a1, a2) = (v.primary_ipv6(0), v.primary_ipv6(1));
    assert_eq!(sysctl(&vpc, "net.ipv6.conf.all.forwarding"), "1");
    for (i, a) in [a1, a2].into_iter().enumerate() {
        let (ns, link, mac) = (v.node(i), format!("n{}d0", i + 1), &v.f.nodes[i].mac);
        assert!(vpc6.contains(a));
        let eth0 = ip(&["-n", &ns, "-6", "-o", "addr", "show", "dev", "eth0"]);
        assert!(eth0.contains(&format!("inet6 {a}/128")), "{eth0}");
        let default = ip(&["-n", &ns, "-6", "route", "show", "default"]);
        assert!(default.contains("via fe80:ec2::1 dev eth0"), "{default}");
        let side = ip(&["-n", &vpc, "-6", "-o", "addr", "show", "dev", &link]);
        assert!(side.contains("inet6 fe80:ec2::1/64"), "{side}");
        // The VPC's next hop is the node's own link-local address, its neighbour permanent.
        let hop = eui64(mac);
        assert!(eth0.contains(&format!("inet6 {hop}/64")), "{eth0}");
        let route = vpc_route6(&v, a);
        assert!(route.contains(&format!("via {hop} dev {link}")), "{route}");
        let neigh = ip(&["-n", &vpc, "-6", "neigh", "show", "dev", &link]);
        assert!(
            neigh.contains(&format!("{hop} lladdr {mac} PERMANENT")),
            "{neigh}"
        );
    }
    let routes = ip(&["-n", &vpc, "-6", "route", "show"]);
    assert!(routes.contains(&format!("blackhole {vpc6}")), "{routes}");
    assert!(
        routes.contains("default via fe80::2 dev vpc-out"),
        "{routes}"
    );
    let out_routes = ip(&["-n", &out, "-6", "route", "show"]);
    assert!(
        out_routes.contains(&format!("{vpc6} via fe80::1 dev eth0")),
        "{out_routes}"
    );

    assert!(ping6(&node1, None, a2, 3), "node1 -> node2");
    assert!(ping6(&node2, None, a1, 3), "node2 -> node1");
    assert!(ping6(&node1, None, v.outside_ipv6(), 3), "node1 -> outside");
    // An egress-only gateway: no NAT, the outside sees each node's own IPv6 address.
    assert_eq!(source6_seen_outside(&v, &node1, None), a1);
    assert_eq!(source6_seen_outside(&v, &node2, None), a2);
    // The IPv4 side is as it was.
    assert!(
        ping(&node1, None, v.f.nodes[1].primary_ip),
        "IPv4 node1 -> node2"
    );

    // Nobody holds these (in node 2's /64, elsewhere in the /56): dropped, not sent outside.
    let before = echoes_received(&out);
    let subnet6 = v.f.subnets[0].ipv6_cidr.unwrap();
    let unheld = [nth(subnet6, 0xdead), nth(vpc6, (0xff << 64) | 9)];
    for dst in unheld {
        assert!(!ping6(&node1, None, dst, 1), "{dst} is held by nobody");
        assert!(
            vpc_route6(&v, dst).contains("Invalid argument"),
            "blackhole"
        );
    }
    assert_eq!(
        echoes_received(&out),
        before,
        "nothing of it reached the outside"
    );

    v.stop();
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn a_delegated_80_is_delivered_while_held_and_sources_not_held_are_dropped() {
    let v = Vpc::start(2, &["--ip-family", "ipv6"]);
    let (vpc, out, node1, node2) = (v.vpc(), v.out(), v.node(0), v.node(1));
    let (eni1, eni2) = (&v.f.nodes[0].primary_eni, &v.f.nodes[1].primary_eni);

    // A /80 for node 1's primary ENI: any address in it reaches node 1.
    let p1 = v.delegate_80(eni1);
    assert_eq!(p1.prefix(), 80);
    let pod = nth(p1, 0x1234_5678);
    let route = vpc_route6(&v, pod);
    assert!(
        route.contains(&format!("via {} dev n1d0", eui64(&v.f.nodes[0].mac))),
        "{route}"
    );
    let rules = ip(&["-n", &vpc, "-6", "rule", "show"]);
    assert!(
        rules.contains(&format!("from {p1} iif n1d0 lookup main")),
        "{rules}"
    );
    hold6(&node1, pod);
    assert!(
        ping6(&node2, None, pod, 3),
        "node2 -> address of node1's /80"
    );
    assert!(
        ping6(&node1, Some(pod), v.outside_ipv6(), 3),
        "from the /80 to the outside"
    );
    assert_eq!(source6_seen_outside(&v, &node1, Some(pod)), pod);

    // Given back: no longer delivered, nor accepted as a source.
    v.take_back_80(eni1, p1);
    assert!(
        vpc_route6(&v, pod).contains("Invalid argument"),
        "blackholed again"
    );
    let rules = ip(&["-n", &vpc, "-6", "rule", "show"]);
    assert!(!rules.contains(&p1.to_string()), "{rules}");
    assert!(!ping6(&node2, None, pod, 1), "unassigned: unreachable");
    unhold6(&node1, pod);

    // The source/destination check. S, in a /80 of node 2, goes out from node 2, which holds
    // it, and the outside sees the echo; from node 1, whose ENI does not hold it, the VPC
    // drops it: the outside sees nothing, while node 1's own address still gets through.
    let p2 = v.delegate_80(eni2);
    let s = nth(p2, 7);
    hold6(&node2, s);
    let before = echoes_received(&out);
    assert!(ping6(&node2, Some(s), v.outside_ipv6(), 3), "S from node 2");
    let after_held = echoes_received(&out);
    assert!(after_held > before);
    unhold6(&node2, s);
    hold6(&node1, s);
    assert!(
        !ping6(&node1, Some(s), v.outside_ipv6(), 2),
        "S from node 1"
    );
    assert_eq!(echoes_received(&out), after_held, "dropped in the VPC");
    assert!(
        !ping6(&node1, Some(s), v.primary_ipv6(1), 1),
        "nor to node 2"
    );
    assert!(
        ping6(&node1, None, v.outside_ipv6(), 3),
        "node 1's own address"
    );
    assert!(echoes_received(&out) > after_held);

    v.stop();
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn a_hot_plugged_eni_brings_its_ipv6_delivery_and_rules_and_detach_takes_them() {
    let v = Vpc::start(1, &["--ip-family", "dual"]);
    let (vpc, node) = (v.vpc(), v.node(0));
    let (eni, mac, _) = v.create_eni();
    let x = v.ok(&[
        (
            "Action",
            cloud::Action::DescribeNetworkInterfaces.wire_name(),
        ),
        ("NetworkInterfaceId.1", &eni),
    ]);
    let sets = x.items("networkInterfaceSet");
    let addr6: Ipv6Addr = sets[0].items("ipv6AddressesSet")[0]
        .text_at("ipv6Address")
        .parse()
        .unwrap();
    assert!(
        vpc_route6(&v, addr6).contains("Invalid argument"),
        "not yet"
    );

    let attachment = v.attach(&eni, 0, 1);
    let route = vpc_route6(&v, addr6);
    assert!(
        route.contains(&format!("via {} dev n1d1", eui64(&mac))),
        "{route}"
    );
    let side = ip(&["-n", &vpc, "-6", "-o", "addr", "show", "dev", "n1d1"]);
    assert!(side.contains("inet6 fe80:ec2::1/64"), "{side}");
    let rules = ip(&["-n", &vpc, "-6", "rule", "show"]);
    for r in [
        "from fe80::/10 iif n1d1 lookup main".to_string(),
        format!("from {addr6} iif n1d1 lookup main"),
        "from all iif n1d1 blackhole".to_string(),
    ] {
        assert!(rules.contains(&r), "{r:?} in {rules}");
    }
    // The node reaches the outside over eth1 from the ENI's IPv6 address, as ipamd would
    // set it up: the address, eth1 up, a table with the default route via EC2's router.
    ip(&[
        "-n",
        &node,
        "addr",
        "add",
        &format!("{addr6}/128"),
        "dev",
        "eth1",
        "nodad",
    ]);
    ip(&["-n", &node, "link", "set", "eth1", "up"]);
    ip(&[
        "-n",
        &node,
        "-6",
        "route",
        "add",
        "default",
        "via",
        "fe80:ec2::1",
        "dev",
        "eth1",
        "table",
        "2",
    ]);
    ip(&[
        "-n",
        &node,
        "-6",
        "rule",
        "add",
        "from",
        &format!("{addr6}/128"),
        "lookup",
        "2",
        "prio",
        "1536",
    ]);
    assert!(ping6(&node, Some(addr6), v.outside_ipv6(), 3), "over eth1");

    v.detach(&attachment);
    assert!(vpc_route6(&v, addr6).contains("Invalid argument"), "gone");
    let rules = ip(&["-n", &vpc, "-6", "rule", "show"]);
    assert!(!rules.contains("n1d1"), "{rules}");
    assert!(ping6(&node, None, v.outside_ipv6(), 3), "eth0 untouched");

    v.stop();
}
