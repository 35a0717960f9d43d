use cni::{Command, Invocation, about_message, about_requested};

use crate::{add_env, env_of};

#[test]
fn add_reads_every_variable() {
    let env = add_env(&[
        ("CNI_ARGS", Some("IgnoreUnknown=1")),
        ("CNI_NETNS_OVERRIDE", Some("TRUE")),
    ]);
    let inv = Invocation::from_env(env).unwrap();
    assert_eq!(inv.command, Command::Add);
    assert_eq!(inv.container_id, "c0ffee");
    assert_eq!(inv.netns.as_deref(), Some("/var/run/netns/cni-1"));
    assert_eq!(inv.ifname, "eth0");
    assert_eq!(inv.args, "IgnoreUnknown=1");
    assert_eq!(inv.path.as_deref(), Some("/opt/cni/bin"));
    assert!(inv.netns_override);
}

#[test]
fn every_verb_parses_and_unknown_or_lowercase_is_rejected() {
    for (raw, cmd) in [
        ("ADD", Command::Add),
        ("DEL", Command::Del),
        ("CHECK", Command::Check),
        ("STATUS", Command::Status),
        ("GC", Command::Gc),
        ("VERSION", Command::Version),
    ] {
        assert_eq!(Command::parse(raw), Some(cmd));
        assert_eq!(cmd.as_str(), raw);
        let inv = Invocation::from_env(add_env(&[("CNI_COMMAND", Some(raw))])).unwrap();
        assert_eq!(inv.command, cmd);
    }
    for bad in ["add", "FOO", "ADD "] {
        let err = Invocation::from_env(add_env(&[("CNI_COMMAND", Some(bad))])).unwrap_err();
        assert_eq!(err.code, 4, "{bad}");
        assert!(err.msg.contains("unknown CNI_COMMAND"), "{}", err.msg);
        assert!(err.msg.contains(bad), "{}", err.msg);
    }
}

#[test]
fn del_accepts_empty_or_unset_netns() {
    for netns in [Some(""), None] {
        let env = add_env(&[("CNI_COMMAND", Some("DEL")), ("CNI_NETNS", netns)]);
        let inv = Invocation::from_env(env).unwrap();
        assert_eq!(inv.netns, None);
    }
}

#[test]
fn cni_path_is_optional_for_every_verb() {
    for cmd in ["ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION"] {
        let env = add_env(&[("CNI_COMMAND", Some(cmd)), ("CNI_PATH", None)]);
        let inv = Invocation::from_env(env).unwrap();
        assert_eq!(inv.path, None, "{cmd}");
        assert_eq!(inv.path_dirs().count(), 0);
    }
}

#[test]
fn path_dirs_splits_on_colon() {
    let env = add_env(&[("CNI_PATH", Some("/opt/cni/bin::/usr/lib/cni"))]);
    let inv = Invocation::from_env(env).unwrap();
    assert_eq!(
        inv.path_dirs().collect::<Vec<_>>(),
        ["/opt/cni/bin", "/usr/lib/cni"]
    );
}

#[test]
fn status_gc_version_need_only_the_command() {
    for cmd in ["STATUS", "GC", "VERSION"] {
        let inv = Invocation::from_env(env_of(&[("CNI_COMMAND", cmd)])).unwrap();
        assert_eq!(inv.container_id, "");
        assert_eq!(inv.ifname, "");
        assert_eq!(inv.netns, None);
    }
}

#[test]
fn missing_variables_are_all_named_per_verb() {
    let cases: &[(&str, &[&str])] = &[
        ("ADD", &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"]),
        ("CHECK", &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"]),
        ("DEL", &["CNI_CONTAINERID", "CNI_IFNAME"]),
    ];
    for (cmd, expected) in cases {
        // Unset and empty must behave the same.
        for empty in [false, true] {
            let pairs: Vec<(&str, &str)> = if empty {
                vec![
                    ("CNI_COMMAND", cmd),
                    ("CNI_CONTAINERID", ""),
                    ("CNI_NETNS", ""),
                    ("CNI_IFNAME", ""),
                ]
            } else {
                vec![("CNI_COMMAND", cmd)]
            };
            let err = Invocation::from_env(env_of(&pairs)).unwrap_err();
            assert_eq!(err.code, 4);
            let want = format!("required env variables [{}] missing", expected.join(","));
            assert_eq!(err.msg, want, "{cmd} empty={empty}");
        }
    }
}

#[test]
fn missing_command_is_the_about_case() {
    for env in [env_of(&[]), env_of(&[("CNI_COMMAND", "")])] {
        assert!(about_requested(&env));
        let err = Invocation::from_env(&env).unwrap_err();
        assert_eq!(err.code, 4);
        assert!(err.msg.contains("CNI_COMMAND"), "{}", err.msg);
    }
    assert!(!about_requested(env_of(&[("CNI_COMMAND", "ADD")])));
    assert_eq!(
        about_message("vpc-cni v0.1.0"),
        "vpc-cni v0.1.0\nCNI protocol versions supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0\n"
    );
}

#[test]
fn container_id_rule() {
    for good in [
        "a",
        "0",
        "abc-DEF_1.2",
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    ] {
        let inv = Invocation::from_env(add_env(&[("CNI_CONTAINERID", Some(good))])).unwrap();
        assert_eq!(inv.container_id, good);
    }
    for bad in ["-abc", "_abc", ".abc", "abc/def", "a b", "abc:1", "ü"] {
        let err = Invocation::from_env(add_env(&[("CNI_CONTAINERID", Some(bad))])).unwrap_err();
        assert_eq!(err.code, 4, "{bad}");
        assert!(err.msg.contains("CNI_CONTAINERID"), "{}", err.msg);
        assert!(err.msg.contains(&format!("{bad:?}")), "{}", err.msg);
    }
}

#[test]
fn ifname_rules_name_the_broken_rule() {
    let ok_15 = "a".repeat(15);
    let long = "a".repeat(16);
    let inv = Invocation::from_env(add_env(&[("CNI_IFNAME", Some(ok_15.as_str()))])).unwrap();
    assert_eq!(inv.ifname, ok_15);
    let cases: &[(&str, &str)] = &[
        (long.as_str(), "at most 15"),
        (".", "\".\" or \"..\""),
        ("..", "\".\" or \"..\""),
        ("eth/0", "'/', ':' or whitespace"),
        ("eth:0", "'/', ':' or whitespace"),
        ("eth 0", "'/', ':' or whitespace"),
        ("eth\t0", "'/', ':' or whitespace"),
        // 2-byte chars: 8 of them are 16 bytes although only 8 characters.
        ("éééééééé", "16 bytes"),
    ];
    for (bad, rule) in cases {
        let err = Invocation::from_env(add_env(&[("CNI_IFNAME", Some(bad))])).unwrap_err();
        assert_eq!(err.code, 4, "{bad}");
        assert!(err.msg.contains("CNI_IFNAME"), "{}", err.msg);
        assert!(err.msg.contains(rule), "{bad}: {}", err.msg);
    }
}

#[test]
fn netns_override_values() {
    for (v, want) in [
        ("1", true),
        ("true", true),
        ("True", true),
        ("0", false),
        ("yes", false),
    ] {
        let inv = Invocation::from_env(add_env(&[("CNI_NETNS_OVERRIDE", Some(v))])).unwrap();
        assert_eq!(inv.netns_override, want, "{v}");
    }
    assert!(!Invocation::from_env(add_env(&[])).unwrap().netns_override);
}
