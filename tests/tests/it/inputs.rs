//! Bad input through the real binaries: the spec's code, a message naming the problem, and
//! ipamd's state unchanged. Plus an instance type only EC2 knows.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;

use e2e::{VpcBox, conf, require_root};
use serde_json::json;

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn bad_input_gets_the_spec_code_and_changes_nothing() {
    require_root();
    let vbox = VpcBox::up(&[]);
    let node = vbox.node(1);
    let socket = node.ipamd_socket.clone();
    let before = vbox.status(1);
    let pod = vbox.pod(1);
    let good = conf("1.0.0", &socket, json!({}));

    pod.cni("ADD")
        .stdin("{\"cniVersion\": \"1.0.0\", ")
        .run()
        .error(6, "");
    pod.cni("ADD")
        .stdin(conf("9.9.9", &socket, json!({})))
        .run()
        .error(1, "9.9.9");
    pod.cni("ADD")
        .unset("CNI_NETNS")
        .stdin(good.clone())
        .run()
        .error(4, "CNI_NETNS");
    pod.cni("ADD")
        .env("CNI_CONTAINERID", "-bad id")
        .stdin(good.clone())
        .run()
        .error(4, "-bad id");
    pod.cni("ADD")
        .env("CNI_IFNAME", "eth0/../x")
        .stdin(good.clone())
        .run()
        .error(4, "eth0/../x");
    pod.cni("ADD")
        .stdin(conf("1.0.0", &socket, json!({ "vethPrefix": "toolong" })))
        .run()
        .error(7, "vethPrefix");

    // A garbage frame straight onto ipamd's socket.
    let reply = {
        let mut s = UnixStream::connect(&socket).expect("ipamd socket");
        s.write_all(b"GET / HTTP/1.1\r\n\r\n\n").unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        line
    };
    assert!(reply.contains("bad_request"), "{reply}");

    assert_eq!(
        vbox.status(1).pool,
        before.pool,
        "ipamd's state is unchanged"
    );
    // And it still serves.
    pod.cni("ADD").stdin(good).run().ok();
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn an_instance_type_missing_from_the_table_comes_from_describe_instance_types() {
    require_root();
    // x9.sim is known to vpc-sim's EC2 only: ipamd's embedded table lacks it.
    let vbox = VpcBox::up(&[
        "--instance-type",
        "x9.sim",
        "--extra-instance-type",
        "x9.sim:2:4",
    ]);
    assert_eq!(vbox.node(1).instance_type, "x9.sim");
    let s = vbox.status(1);
    assert!(s.ready, "{s:?}");
    assert_eq!(
        s.pool.total, 3,
        "4 IPv4 per ENI: 3 secondaries on the primary ENI"
    );
    let log = std::fs::read_to_string(&vbox.node(1).ipamd_log).unwrap();
    assert!(log.contains("asking DescribeInstanceTypes"), "{log}");
}
