use cni::{Attachment, CniVersion, Command, NetConf};
use serde_json::json;

fn parse(v: serde_json::Value, cmd: Command) -> Result<NetConf, cni::CniError> {
    NetConf::parse(v.to_string().as_bytes(), cmd)
}

#[test]
fn defaults_apply_and_unknown_keys_are_ignored() {
    let c = parse(
        json!({"cniVersion":"1.1.0","name":"aws-cni","type":"vpc-cni","ipam":{"type":"x"},
               "disableCheck":true,"podSGEnforcingMode":"strict"}),
        Command::Add,
    )
    .unwrap();
    assert_eq!(c.cni_version, CniVersion::V1_1_0);
    assert_eq!(c.name, "aws-cni");
    assert_eq!(c.plugin_type, "vpc-cni");
    assert_eq!(c.ipamd_socket, "/run/vpc-cni/ipamd.sock");
    assert_eq!(c.mtu, 9001);
    assert_eq!(c.veth_prefix, "eni");
    assert_eq!(c.plugin_log_file, None);
    assert_eq!(c.plugin_log_level, None);
    assert_eq!(
        (c.plugin_log_max_size, c.plugin_log_max_files),
        (None, None)
    );
    assert_eq!(c.prev_result, None);
    assert_eq!(c.runtime_config, None);
    assert_eq!(c.valid_attachments, None);
}

#[test]
fn every_plugin_key_is_read() {
    let c = parse(
        json!({"cniVersion":"0.4.0","name":"n","type":"vpc-cni","ipamdSocket":"/tmp/s.sock",
               "mtu":"1500","vethPrefix":"veth","pluginLogFile":"/var/log/p.log",
               "pluginLogLevel":"DEBUG","pluginLogMaxSize":1048576,"pluginLogMaxFiles":"3",
               "runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"k8s.amazonaws.com/nicConfig":"x"}}}),
        Command::Add,
    )
    .unwrap();
    assert_eq!(c.ipamd_socket, "/tmp/s.sock");
    assert_eq!(c.mtu, 1500);
    assert_eq!(c.veth_prefix, "veth");
    assert_eq!(c.plugin_log_file.as_deref(), Some("/var/log/p.log"));
    assert_eq!(c.plugin_log_level.as_deref(), Some("DEBUG"));
    assert_eq!(c.plugin_log_max_size.as_deref(), Some("1048576"));
    assert_eq!(c.plugin_log_max_files.as_deref(), Some("3"));
    assert_eq!(c.pod_annotation("k8s.amazonaws.com/nicConfig"), Some("x"));
    assert_eq!(c.pod_annotation("other"), None);
}

#[test]
fn log_rotation_keys_never_fail_the_request() {
    // The plugin checks them and falls back to its defaults, with a warning in its log.
    for (v, want) in [
        (json!("100Mi"), "100Mi"),
        (json!(-1), "-1"),
        (json!(1.5), "1.5"),
        (json!(true), "true"),
        (json!({"a": 1}), "{\"a\":1}"),
    ] {
        let c = parse(
            json!({"cniVersion":"1.0.0","name":"n","pluginLogMaxSize":v,"pluginLogMaxFiles":v}),
            Command::Add,
        )
        .unwrap();
        assert_eq!(c.plugin_log_max_size.as_deref(), Some(want), "{v}");
        assert_eq!(c.plugin_log_max_files.as_deref(), Some(want), "{v}");
    }
}

#[test]
fn mtu_accepts_number_or_string_within_bounds() {
    for (v, want) in [
        (json!(576), 576),
        (json!(9001), 9001),
        (json!("576"), 576),
        (json!("9001"), 9001),
        (json!(null), 9001),
    ] {
        let c = parse(
            json!({"cniVersion":"1.0.0","name":"n","mtu":v}),
            Command::Add,
        )
        .unwrap();
        assert_eq!(c.mtu, want, "{v}");
    }
}

#[test]
fn every_supported_version_is_accepted_for_add_and_del() {
    for v in CniVersion::ALL {
        for cmd in [Command::Add, Command::Del] {
            let c = parse(json!({"cniVersion":v.as_str(),"name":"n"}), cmd).unwrap();
            assert_eq!(c.cni_version, v);
        }
    }
}

#[test]
fn version_gating_allows_from_the_minimum() {
    let allowed = |cmd: Command, v: CniVersion| {
        parse(json!({"cniVersion":v.as_str(),"name":"n"}), cmd).is_ok()
    };
    for v in CniVersion::ALL {
        assert_eq!(
            allowed(Command::Check, v),
            v >= CniVersion::V0_4_0,
            "CHECK {v}"
        );
        assert_eq!(
            allowed(Command::Status, v),
            v >= CniVersion::V1_1_0,
            "STATUS {v}"
        );
        assert_eq!(allowed(Command::Gc, v), v >= CniVersion::V1_1_0, "GC {v}");
    }
}

#[test]
fn version_verb_does_not_need_a_name() {
    let c = parse(json!({"cniVersion":"1.1.0"}), Command::Version).unwrap();
    assert_eq!(c.name, "");
}

#[test]
fn prev_result_is_parsed_in_the_conf_version() {
    let c = parse(
        json!({"cniVersion":"0.4.0","name":"n","prevResult":{
            "cniVersion":"0.4.0",
            "interfaces":[{"name":"eni1"},{"name":"eth0","sandbox":"/var/run/netns/x","mac":"rtb-1"}],
            "ips":[{"version":"4","interface":1,"address":"10.0.1.5/32"}],
            "routes":[{"dst":"0.0.0.0/0","gw":"169.254.1.1"}],
            "dns":{}}}),
        Command::Del,
    )
    .unwrap();
    let prev = c.prev_result.unwrap();
    assert_eq!(prev.interfaces.len(), 2);
    assert_eq!(prev.interfaces[1].mac.as_deref(), Some("rtb-1"));
    assert_eq!(prev.ips[0].interface, Some(1));
    assert_eq!(prev.container_interface_index("eth0"), Some(1));
    assert!(prev.dns.is_empty());

    let c = parse(
        json!({"cniVersion":"1.0.0","name":"n","prevResult":null}),
        Command::Del,
    )
    .unwrap();
    assert_eq!(c.prev_result, None);
}

#[test]
fn gc_attachments_from_either_key_are_unioned() {
    let a = |c: &str, i: &str| json!({"containerID":c,"ifname":i});
    let att = |c: &str, i: &str| Attachment {
        container_id: c.into(),
        ifname: i.into(),
    };
    let cases = [
        (
            json!({"cni.dev/valid-attachments":[a("c1","eth0")]}),
            vec![att("c1", "eth0")],
        ),
        (
            json!({"cni.dev/attachments":[a("c2","eth0")]}),
            vec![att("c2", "eth0")],
        ),
        (
            json!({"cni.dev/valid-attachments":[a("c1","eth0"),a("c2","eth0")],
                   "cni.dev/attachments":[a("c2","eth0"),a("c3","net1")]}),
            vec![att("c1", "eth0"), att("c2", "eth0"), att("c3", "net1")],
        ),
        (json!({"cni.dev/valid-attachments":[]}), vec![]),
    ];
    for (extra, want) in cases {
        let mut conf = json!({"cniVersion":"1.1.0","name":"n"});
        for (k, v) in extra.as_object().unwrap() {
            conf[k] = v.clone();
        }
        let c = parse(conf, Command::Gc).unwrap();
        assert_eq!(c.valid_attachments, Some(want));
    }
}

#[test]
fn a_bad_prev_result_does_not_fail_a_del_but_is_reported() {
    let bad = [
        json!("x"),
        json!({"ips":[{"address":"10.0.0.300/32"}]}),
        json!({"routes":[{"gw":"1.1.1.1"}]}),
    ];
    for prev in bad {
        let c = parse(
            json!({"cniVersion":"1.1.0","name":"n","prevResult":prev}),
            Command::Del,
        )
        .unwrap_or_else(|e| panic!("DEL with prevResult {prev} failed: {e}"));
        assert_eq!(c.prev_result, None, "{prev}");
        let problem = c.prev_result_problem.expect("problem recorded");
        assert!(problem.contains("could not parse prevResult"), "{problem}");

        for cmd in [Command::Add, Command::Check] {
            let err = parse(
                json!({"cniVersion":"1.1.0","name":"n","prevResult":prev}),
                cmd,
            )
            .unwrap_err();
            assert_eq!(err.code, 6, "{cmd} {prev}: {err}");
        }
    }

    let good = parse(
        json!({"cniVersion":"1.1.0","name":"n","prevResult":{"ips":[{"address":"10.0.0.5/32"}]}}),
        Command::Del,
    )
    .unwrap();
    assert_eq!(good.prev_result_problem, None);
    assert!(good.prev_result.is_some());
}
