//! The real binary against a fake ipamd, without privileges: nothing here reaches a netlink
//! call that changes anything.

use crate::support;

use ipam_proto::{
    DaemonError, DelReason, DelReply, ErrorKind, GcReply, PoolCounts, Reply, Request, StatusReply,
    ValidAttachment,
};
use serde_json::json;
use support::fake_ipamd::{FakeIpamd, ready};
use support::plugin::{Call, NETWORK, conf};

/// A fake that fails the test if it is asked anything.
fn untouchable() -> FakeIpamd {
    FakeIpamd::start(|req| {
        Err(DaemonError::new(
            ErrorKind::Internal,
            format!("unexpected {req:?}"),
        ))
    })
}

#[test]
fn version_answers_whatever_stdin_holds() {
    for stdin in ["", "not json", r#"{"cniVersion":"0.1.0"}"#] {
        let out = Call::new("VERSION").stdin(stdin).run();
        let reply = out.ok();
        assert_eq!(reply["cniVersion"], "1.1.0");
        assert_eq!(
            reply["supportedVersions"],
            json!(["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
        );
    }
}

#[test]
fn without_a_command_the_about_text_goes_to_stderr() {
    let out = Call::new("").unset("CNI_COMMAND").run();
    assert_eq!(out.code, 0);
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(out.stderr.starts_with("vpc-cni "), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("CNI protocol versions supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"),
        "{}",
        out.stderr
    );
}

#[test]
fn bad_input_is_refused_before_ipamd_is_asked() {
    let ipamd = untouchable();
    let sock = ipamd.path_str();
    let good = conf("1.0.0", &sock, json!({}));
    let add =
        || Call::attachment("ADD", "c0ffee", "/run/netns/nowhere", "eth0").stdin(good.clone());
    let cases: Vec<(&str, Call, u64, &str)> = vec![
        (
            "malformed JSON",
            add().stdin(r#"{"cniVersion":"1.0.0","name":"#),
            6,
            "error unmarshalling network config",
        ),
        (
            "unsupported cniVersion",
            add().stdin(conf("0.2.0", &sock, json!({}))),
            1,
            "incompatible CNI versions: config is \"0.2.0\"",
        ),
        (
            "missing CNI_IFNAME",
            add().unset("CNI_IFNAME"),
            4,
            "required env variables [CNI_IFNAME] missing",
        ),
        (
            "missing CNI_NETNS on ADD",
            add().unset("CNI_NETNS"),
            4,
            "[CNI_NETNS]",
        ),
        (
            "invalid container id",
            add().var("CNI_CONTAINERID", "-c0ffee"),
            4,
            "invalid characters in CNI_CONTAINERID \"-c0ffee\"",
        ),
        (
            "invalid ifname",
            add().var("CNI_IFNAME", "eth/0"),
            4,
            "invalid CNI_IFNAME \"eth/0\"",
        ),
        (
            "vethPrefix of 5 chars",
            add().stdin(conf("1.0.0", &sock, json!({"vethPrefix":"abcde"}))),
            7,
            "invalid vethPrefix \"abcde\"",
        ),
        (
            "bad CNI_ARGS",
            add().var("CNI_ARGS", "K8S_POD_NAME"),
            4,
            "invalid CNI_ARGS pair",
        ),
        (
            "CNI_NETNS is the plugin's own namespace",
            add().var("CNI_NETNS", "/proc/self/ns/net"),
            8,
            "CNI_NETNS /proc/self/ns/net is the plugin's own network namespace",
        ),
        (
            "DEL into the plugin's own namespace",
            Call::attachment("DEL", "c0ffee", "/proc/self/ns/net", "eth0").stdin(good.clone()),
            8,
            "own network namespace",
        ),
        (
            "CHECK without prevResult",
            Call::attachment("CHECK", "c0ffee", "/run/netns/nowhere", "eth0").stdin(good.clone()),
            7,
            "CHECK needs a prevResult",
        ),
        (
            "CHECK below 0.4.0",
            Call::attachment("CHECK", "c0ffee", "/run/netns/nowhere", "eth0").stdin(conf(
                "0.3.1",
                &sock,
                json!({}),
            )),
            1,
            "does not allow CHECK",
        ),
        (
            "unknown command",
            add().var("CNI_COMMAND", "FROB"),
            4,
            "unknown CNI_COMMAND",
        ),
    ];
    for (what, call, code, needle) in cases {
        let out = call.run();
        let err = out.error(code, needle);
        // The error carries the config's version whenever it is one we speak.
        let version = match what {
            "malformed JSON" | "unsupported cniVersion" => None,
            "CHECK below 0.4.0" => Some("0.3.1"),
            _ => Some("1.0.0"),
        };
        assert_eq!(
            err.get("cniVersion").and_then(|v| v.as_str()),
            version,
            "{what}: {err}"
        );
        assert!(
            ipamd.requests().is_empty(),
            "{what}: ipamd was asked {:?}",
            ipamd.requests()
        );
    }
}

#[test]
fn own_netns_is_allowed_with_the_override() {
    // With the override the request goes on to ipamd (which here has no address to give).
    let ipamd = FakeIpamd::start(|_| Err(DaemonError::new(ErrorKind::NoAddresses, "pool empty")));
    let out = Call::attachment("ADD", "c0ffee", "/proc/self/ns/net", "eth0")
        .var("CNI_NETNS_OVERRIDE", "true")
        .stdin(conf("1.1.0", &ipamd.path_str(), json!({})))
        .run();
    out.error(11, "pool empty");
    assert_eq!(ipamd.requests().len(), 1);
}

#[test]
fn add_failures_from_ipamd_name_the_reason() {
    let reason = "no free address: subnet subnet-0a1 (10.0.0.0/24) is exhausted";
    let ipamd = FakeIpamd::start(move |_| Err(DaemonError::new(ErrorKind::NoAddresses, reason)));
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("nested/dir/plugin.log");
    let out = Call::attachment("ADD", "c0ffee", "/run/netns/nowhere", "eth0")
        .pod("default", "web-1")
        .stdin(conf(
            "1.1.0",
            &ipamd.path_str(),
            json!({"pluginLogFile": log.display().to_string(), "pluginLogLevel": "Debug"}),
        ))
        .run();
    let err = out.error(
        11,
        &format!("failed to assign an IP address to container: {reason}"),
    );
    assert_eq!(err["cniVersion"], "1.1.0");

    match ipamd.requests().as_slice() {
        [Request::Add(add)] => {
            assert_eq!(add.key.network, NETWORK);
            assert_eq!(add.key.container_id, "c0ffee");
            assert_eq!(add.key.ifname, "eth0");
            assert_eq!(add.pod.namespace, "default");
            assert_eq!(add.pod.name, "web-1");
            assert_eq!(add.pod.uid, "uid-1");
            assert_eq!(add.pod.infra_container_id, "infra");
            assert_eq!(add.netns, "/run/netns/nowhere");
        }
        other => panic!("{other:?}"),
    }

    // The log went to the file (parents created), not to stderr.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(
            "Received CNI add request: ContainerID(c0ffee) Netns(/run/netns/nowhere) IfName(eth0) \
             Args(K8S_POD_INFRA_CONTAINER_ID=infra;"
        ),
        "{text}"
    );
    assert!(text.contains(reason), "{text}");
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    // One JSON object per line, as the Go CNI writes its log.
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(v["level"].is_string() && v["message"].is_string(), "{line}");
    }
}

#[test]
fn plugin_log_file_stderr_names_the_stream_not_a_file() {
    let ipamd = untouchable();
    let cwd = tempfile::tempdir().unwrap();
    let out = Call::attachment("ADD", "c0ffee", "/run/netns/nowhere", "eth0")
        .cwd(cwd.path())
        .stdin(conf(
            "1.0.0",
            &ipamd.dead_path(),
            json!({"pluginLogFile": "STDERR"}),
        ))
        .run();
    out.error(11, "ipamd is not reachable");
    assert!(
        out.stderr.contains("Received CNI add request"),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read_dir(cwd.path()).unwrap().count(),
        0,
        "no file named STDERR"
    );
}

#[test]
fn add_with_ipamd_down_is_try_again_later() {
    let ipamd = untouchable();
    let out = Call::attachment("ADD", "c0ffee", "/run/netns/nowhere", "eth0")
        .stdin(conf("1.0.0", &ipamd.dead_path(), json!({})))
        .run();
    out.error(
        11,
        "failed to assign an IP address to container: ipamd is not reachable at",
    );
    // The log line goes to stderr when no pluginLogFile is set.
    assert!(
        out.stderr
            .contains("Received CNI add request: ContainerID(c0ffee)"),
        "{}",
        out.stderr
    );
}

#[test]
fn unusable_log_rotation_settings_are_a_warning_not_a_failure() {
    let ipamd = FakeIpamd::start(|_| Ok(ready()));
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("plugin.log");
    Call::new("STATUS")
        .stdin(conf(
            "1.1.0",
            &ipamd.path_str(),
            json!({"pluginLogFile": log.display().to_string(), "pluginLogLevel": "Debug",
                   "pluginLogMaxSize": "100MB", "pluginLogMaxFiles": 0}),
        ))
        .run()
        .ok_silent();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(r#"pluginLogMaxSize \"100MB\": expected a number of bytes"#),
        "{text}"
    );
    assert!(text.contains(r#"pluginLogMaxFiles \"0\""#), "{text}");
    assert!(text.contains("ipamd ready"), "{text}");
}

#[test]
fn status_ready_is_silent_success() {
    let ipamd = FakeIpamd::start(|_| Ok(ready()));
    Call::new("STATUS")
        .stdin(conf("1.1.0", &ipamd.path_str(), json!({})))
        .run()
        .ok_silent();
    assert_eq!(ipamd.requests(), vec![Request::Status]);
}

#[test]
fn status_not_ready_is_50_with_the_reason() {
    let ipamd = FakeIpamd::start(|_| {
        Ok(Reply::Status(StatusReply {
            ready: false,
            reason: Some("no address free and the node is at its ENI limit".into()),
            pool: PoolCounts::default(),
        }))
    });
    let out = Call::new("STATUS")
        .stdin(conf("1.1.0", &ipamd.path_str(), json!({})))
        .run();
    out.error(50, "no address free and the node is at its ENI limit");
}

#[test]
fn status_without_ipamd_is_50_naming_the_socket() {
    let ipamd = untouchable();
    let dead = ipamd.dead_path();
    let out = Call::new("STATUS")
        .stdin(conf("1.1.0", &dead, json!({})))
        .run();
    out.error(50, &format!("ipamd not reachable at {dead}: "));
}

#[test]
fn del_without_netns_prev_result_or_ipamd_succeeds() {
    // containerd's second DEL on RemovePodSandbox, while ipamd is down.
    let ipamd = untouchable();
    for version in ["0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let out = Call::attachment("DEL", "c0ffee", "", "eth0")
            .pod("default", "web-1")
            .stdin(conf(version, &ipamd.dead_path(), json!({})))
            .run();
        out.ok_silent();
        assert!(
            out.stderr.contains("released once the pod's route is gone"),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn del_with_an_unparsable_prev_result_still_succeeds() {
    let ipamd = untouchable();
    let out = Call::attachment("DEL", "c0ffee", "/run/netns/gone", "eth0")
        .stdin(conf(
            "1.0.0",
            &ipamd.dead_path(),
            json!({"prevResult": {"ips": [{"address": "not-an-ip"}]}}),
        ))
        .run();
    out.ok_silent();
    assert!(
        out.stderr
            .contains("ignoring the prevResult of this DEL: could not parse prevResult"),
        "{}",
        out.stderr
    );
}

#[test]
fn del_twice_succeeds_and_asks_ipamd_both_times() {
    // Nothing of this pod exists on the machine: the teardown finds nothing to remove.
    let ipamd = FakeIpamd::pool("192.0.2.77".parse().unwrap(), 254);
    let sock = ipamd.path_str();
    // Seed the fake with an allocation, as an earlier ADD would have.
    let key = ipam_proto::AttachmentKey {
        network: NETWORK.into(),
        container_id: "c0ffee".into(),
        ifname: "eth0".into(),
    };
    ipam_proto::Client::new(ipamd.path())
        .add(ipam_proto::AddRequest {
            key: key.clone(),
            pod: Default::default(),
            netns: String::new(),
        })
        .unwrap();

    for _ in 0..2 {
        Call::attachment("DEL", "c0ffee", "/run/netns/gone", "eth0")
            .pod("default", "web-1")
            .stdin(conf("1.1.0", &sock, json!({})))
            .run()
            .ok_silent();
    }
    let dels: Vec<_> = ipamd
        .requests()
        .into_iter()
        .filter_map(|r| match r {
            Request::Del(d) => Some(d),
            _ => None,
        })
        .collect();
    assert_eq!(dels.len(), 2);
    for d in dels {
        assert_eq!(d.key, key);
        assert_eq!(d.reason, DelReason::PodDeleted);
        assert_eq!(d.pod.name, "web-1");
    }
}

#[test]
fn del_when_ipamd_fails_asks_for_a_retry() {
    let ipamd = FakeIpamd::start(|_| {
        Err(DaemonError::new(
            ErrorKind::Internal,
            "state store write failed: disk full",
        ))
    });
    let out = Call::attachment("DEL", "c0ffee", "", "eth0")
        .stdin(conf("1.1.0", &ipamd.path_str(), json!({})))
        .run();
    out.error(11, "state store write failed: disk full");
}

#[test]
fn del_of_an_unknown_attachment_succeeds() {
    let ipamd = FakeIpamd::start(|req| match req {
        Request::Del(_) => Err(DaemonError::new(ErrorKind::UnknownAttachment, "unknown")),
        _ => Ok(Reply::Del(DelReply { released: None })),
    });
    Call::attachment("DEL", "c0ffee", "", "eth0")
        .stdin(conf("1.1.0", &ipamd.path_str(), json!({})))
        .run()
        .ok_silent();
}

#[test]
fn check_needs_ipamd_to_know_the_attachment() {
    let prev = json!({"cniVersion":"1.1.0",
        "interfaces":[{"name":"enic440f455693"},{"name":"eth0","sandbox":"/run/netns/x"}],
        "ips":[{"address":"10.0.0.5/32","interface":1}]});
    let unknown = FakeIpamd::start(|_| {
        Err(DaemonError::new(
            ErrorKind::UnknownAttachment,
            "no allocation",
        ))
    });
    let out = Call::attachment("CHECK", "c0ffee", "/run/netns/x", "eth0")
        .stdin(conf(
            "1.1.0",
            &unknown.path_str(),
            json!({"prevResult": prev}),
        ))
        .run();
    out.error(999, "ipamd holds no address for aws-cni/c0ffee/eth0");

    let out = Call::attachment("CHECK", "c0ffee", "/run/netns/x", "eth0")
        .stdin(conf(
            "1.1.0",
            &unknown.dead_path(),
            json!({"prevResult": prev}),
        ))
        .run();
    out.error(11, "ipamd not reachable: ");
}

#[test]
fn gc_sends_the_network_and_the_valid_attachments() {
    let ipamd = FakeIpamd::start(|_| Ok(Reply::Gc(GcReply { released: vec![] })));
    Call::new("GC")
        .stdin(conf(
            "1.1.0",
            &ipamd.path_str(),
            json!({
                "cni.dev/valid-attachments": [
                    {"containerID":"c1","ifname":"eth0"},
                    {"containerID":"c2","ifname":"eth0"}],
                "cni.dev/attachments": [{"containerID":"c3","ifname":"net1"}],
            }),
        ))
        .run()
        .ok_silent();
    let valid = |c: &str, i: &str| ValidAttachment {
        container_id: c.into(),
        ifname: i.into(),
    };
    match ipamd.requests().as_slice() {
        [Request::Gc(gc)] => {
            assert_eq!(gc.network, NETWORK);
            assert_eq!(
                gc.valid,
                vec![
                    valid("c1", "eth0"),
                    valid("c2", "eth0"),
                    valid("c3", "net1")
                ]
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn gc_with_an_empty_list_still_asks_but_without_a_list_does_nothing() {
    let ipamd = FakeIpamd::start(|_| Ok(Reply::Gc(GcReply { released: vec![] })));
    Call::new("GC")
        .stdin(conf(
            "1.1.0",
            &ipamd.path_str(),
            json!({"cni.dev/valid-attachments": []}),
        ))
        .run()
        .ok_silent();
    assert_eq!(ipamd.requests().len(), 1);

    let out = Call::new("GC")
        .stdin(conf("1.1.0", &ipamd.path_str(), json!({})))
        .run();
    out.ok_silent();
    assert_eq!(
        ipamd.requests().len(),
        1,
        "GC without a list must not reach ipamd"
    );
    assert!(out.stderr.contains("nothing collected"), "{}", out.stderr);
}
