//! The `vpc-sim` binary in loopback mode (unprivileged), over real sockets.

use crate::common;

use std::net::TcpStream;

use common::{SimProcess, host_port, imds_get};
use testkit::http::exchange;

#[test]
fn loopback_mode_serves_ec2_and_imds_and_exits_cleanly() {
    let name = testkit::unique("lb");
    let mut sim = SimProcess::start(
        &name,
        &[
            "--mode",
            "loopback",
            "--nodes",
            "2",
            "--extra-instance-type",
            "sim.x:2:4",
        ],
    );
    let f = sim.wait_ready();
    assert_eq!(f.name, name);
    assert_eq!(f.mode.as_str(), "loopback");
    assert_eq!(f.vpc_netns, None);
    assert_eq!(f.outside, None);
    let raw = std::fs::read_to_string(sim.dir.join("sim.json")).unwrap();
    assert!(raw.contains("\"outside\": null"), "{raw}");
    assert_eq!(f.nodes.len(), 2);
    assert_eq!(f.subnets[0].cidr.to_string(), "10.0.0.0/24");
    let node = &f.nodes[0];
    assert_eq!((node.index, node.netns.as_deref()), (1, None));
    assert!(f.subnets[0].cidr.contains(node.primary_ip));

    let ec2 = host_port(&f.ec2_endpoint);
    let (status, body) = exchange(
        TcpStream::connect(&ec2).unwrap(),
        "POST",
        &ec2,
        "/",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        &format!(
            "Action=DescribeInstances&Version=2016-11-15&InstanceId.1={}",
            node.instance_id
        ),
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(&format!("<instanceId>{}</instanceId>", node.instance_id)),
        "{body}"
    );
    assert!(
        body.contains(&format!("<macAddress>{}</macAddress>", node.mac)),
        "{body}"
    );

    let imds = host_port(&node.imds_endpoint);
    assert_eq!(
        imds_get(&node.imds_endpoint, "meta-data/instance-id"),
        node.instance_id
    );
    // The second node has its own IMDS.
    let other = host_port(&f.nodes[1].imds_endpoint);
    assert_ne!(other, imds);

    let status = sim.terminate();
    assert!(status.success(), "exit {status}:\n{}", sim.log());
    assert!(
        !sim.dir.join("sim.json").exists(),
        "sim.json removed on exit"
    );
    assert!(TcpStream::connect(&ec2).is_err(), "EC2 listener closed");
}

#[test]
fn a_bad_command_line_fails_with_a_message() {
    let mut sim = SimProcess::start("bad name!", &["--mode", "loopback"]);
    let status = sim.wait_exit();
    assert!(!status.success());
    assert!(sim.log().contains("--name"), "{}", sim.log());
    let mut sim = SimProcess::start(
        &testkit::unique("lb"),
        &["--mode", "loopback", "--instance-type", "x9.nope"],
    );
    assert!(!sim.wait_exit().success());
    assert!(sim.log().contains("x9.nope"), "{}", sim.log());
    // A subnet the model refuses: the message names the flags and the value.
    let mut sim = SimProcess::start(
        &testkit::unique("lb"),
        &[
            "--mode",
            "loopback",
            "--subnet",
            "10.0.0.0/24,az=us-east-1b",
        ],
    );
    assert!(!sim.wait_exit().success());
    let log = sim.log();
    assert!(
        log.contains("--subnet") && log.contains("us-east-1b"),
        "{log}"
    );
}
