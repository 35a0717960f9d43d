//! The `vpc-sim` binary in fabric mode: namespaces, eth0, IMDS at 169.254.169.254 inside the
//! node, EC2 on the node's loopback, and full cleanup on SIGTERM (outside included). Needs root.

use crate::common;

use common::root::{NsGuard, http_in, ip, our_namespaces};
use common::{SimProcess, host_port};

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn fabric_mode_builds_the_node_and_removes_everything() {
    let name = testkit::unique("vst");
    let _guard = NsGuard(name.clone());
    for round in 0..2 {
        // The second round checks that the same name works again after a clean shutdown.
        let mut sim = SimProcess::start(&name, &["--mode", "fabric", "--nodes", "1"]);
        let f = sim.wait_ready();
        let node = f.nodes[0].clone();
        let ns = node.netns.clone().unwrap();
        assert_eq!(ns, format!("{name}-node1"));
        assert_eq!(f.vpc_netns.as_deref(), Some(format!("{name}-vpc").as_str()));
        let out = f.outside.clone().expect("fabric mode has an outside");
        assert_eq!(out.netns, format!("{name}-out"));
        assert_eq!(out.ip.to_string(), "198.51.100.10");
        assert_eq!(out.ipv6, None, "an IPv4 VPC's outside has no IPv6");
        let mut expected = vec![
            format!("{name}-node1"),
            format!("{name}-out"),
            format!("{name}-vpc"),
        ];
        expected.sort();
        let mut present = our_namespaces(&name);
        present.sort();
        assert_eq!(present, expected, "round {round}");

        let link = ip(&["-n", &ns, "-o", "link", "show", "eth0"]);
        assert!(link.contains(&format!("link/ether {}", node.mac)), "{link}");
        assert!(link.contains("mtu 9001"), "{link}");
        assert!(link.contains("state UP"), "{link}");
        let addr = ip(&["-n", &ns, "-4", "-o", "addr", "show", "dev", "eth0"]);
        assert!(
            addr.contains(&format!("inet {}/24", node.primary_ip)),
            "{addr}"
        );
        let route = ip(&["-n", &ns, "route", "show", "default"]);
        assert!(route.contains("default via 10.0.0.1 dev eth0"), "{route}");
        let lo = ip(&["-n", &ns, "-4", "-o", "addr", "show", "dev", "lo"]);
        assert!(lo.contains("169.254.169.254/32"), "{lo}");

        assert_eq!(node.imds_endpoint, "http://169.254.169.254");
        let (status, token) = http_in(
            &ns,
            "169.254.169.254:80",
            "PUT",
            "/latest/api/token",
            &[("X-aws-ec2-metadata-token-ttl-seconds", "60")],
            "",
        );
        assert_eq!(status, 200, "{token}");
        let (status, id) = http_in(
            &ns,
            "169.254.169.254:80",
            "GET",
            "/latest/meta-data/instance-id",
            &[("X-aws-ec2-metadata-token", &token)],
            "",
        );
        assert_eq!((status, id.as_str()), (200, node.instance_id.as_str()));

        let ec2 = host_port(&node.ec2_endpoint);
        let (status, body) = http_in(
            &ns,
            &ec2,
            "POST",
            "/",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            "Action=DescribeSubnets&Version=2016-11-15",
        );
        assert_eq!(status, 200, "{body}");
        assert!(body.contains(&f.subnets[0].id), "{body}");

        let status = sim.terminate();
        assert!(status.success(), "exit {status}:\n{}", sim.log());
        assert!(
            our_namespaces(&name).is_empty(),
            "left behind: {:?}\n{}",
            our_namespaces(&name),
            sim.log()
        );
        for ns in ["vpc", "out", "node1"] {
            assert!(
                sim.log().contains(&format!("removed netns {name}-{ns}")),
                "{}",
                sim.log()
            );
        }
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn fabric_mode_refuses_an_existing_namespace_and_leaves_it_alone() {
    let name = testkit::unique("vst");
    let _guard = NsGuard(name.clone());
    let squatter = format!("{name}-node1");
    ip(&["netns", "add", &squatter]);
    let mut sim = SimProcess::start(&name, &["--mode", "fabric"]);
    let status = sim.wait_exit();
    assert!(!status.success());
    assert!(sim.log().contains("already exists"), "{}", sim.log());
    assert_eq!(
        our_namespaces(&name),
        vec![squatter],
        "created nothing, deleted nothing"
    );
}
