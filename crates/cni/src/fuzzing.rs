//! Checks run by the fuzz targets in `fuzz/` and by the corpus replay test
//! (`tests/it/fuzz_corpus.rs`), kept here so both run exactly the same code. Not part of the API.
//!
//! Each check takes arbitrary bytes and panics when a parser panics or breaks an invariant the
//! parser's documentation promises; an input the parser rightly rejects is not a failure.

use crate::{
    CniError, CniResult, CniVersion, Command, Invocation, K8sArgs, NetConf, about_requested,
    parse_cni_args, parse_version_request, validate_container_id, validate_ifname,
    validate_network_name,
};
use crate::{MAX_MTU, MAX_VETH_PREFIX_LEN, MIN_MTU};

/// Every verb, in the order [`check_conf`] parses with them.
const COMMANDS: [Command; 6] = [
    Command::Add,
    Command::Del,
    Command::Check,
    Command::Status,
    Command::Gc,
    Command::Version,
];

/// The plugin's stdin, as every verb reads it.
///
/// Parses `data` with [`NetConf::parse`] for each verb and [`parse_version_request`], then checks:
/// - errors carry the documented codes (1, 6, 7) and print as JSON that reads back;
/// - the verbs differ only where [`NetConf::parse`] says they do: VERSION skips the name check,
///   CHECK needs 0.4.0, STATUS/GC need 1.1.0, DEL drops an unreadable `prevResult` (and the
///   message it records is the one ADD fails with);
/// - an accepted config is within the documented bounds (`mtu`, `vethPrefix`, `name`, ...);
/// - an accepted `prevResult` survives [`CniResult::to_json`] and [`CniResult::from_json`] in
///   every version (minus `interfaces[].mtu` before 1.1.0, which those versions lack).
pub fn check_conf(data: &[u8]) {
    let _ = parse_version_request(data);
    let [add, del, check, status, gc, version] = COMMANDS.map(|c| NetConf::parse(data, c));
    for (command, parsed) in COMMANDS
        .iter()
        .zip([&add, &del, &check, &status, &gc, &version])
    {
        match parsed {
            Ok(conf) => check_accepted(conf, *command),
            Err(e) => check_error(e, &[1, 6, 7], command.as_str()),
        }
    }

    match &add {
        Ok(conf) => {
            assert_eq!(del.as_ref(), Ok(conf), "DEL differs from an accepted ADD");
            assert_eq!(version.as_ref(), Ok(conf), "VERSION differs from ADD");
            let gated = [
                (&check, conf.cni_version.supports_check()),
                (&status, conf.cni_version.supports_status_gc()),
                (&gc, conf.cni_version.supports_status_gc()),
            ];
            for (parsed, allowed) in gated {
                match parsed {
                    Ok(c) => assert!(allowed && c == conf, "verb gate let {c:?} through"),
                    Err(e) => assert!(!allowed && e.code == 1, "gated verb failed with {e:?}"),
                }
            }
        }
        Err(add_err) => {
            for (verb, parsed) in [("CHECK", &check), ("STATUS", &status), ("GC", &gc)] {
                assert!(
                    parsed.is_err(),
                    "{verb} accepts what ADD rejects: {add_err:?}"
                );
            }
            if let Ok(d) = &del {
                // Only an unreadable prevResult separates DEL from ADD.
                assert_eq!(d.prev_result, None);
                assert_eq!(
                    Some(&add_err.msg),
                    d.prev_result_problem.as_ref(),
                    "DEL accepts what ADD rejects for another reason"
                );
                assert_eq!(add_err.code, CniError::DECODING_FAILURE);
            }
            if let Ok(v) = &version {
                // Only the name check separates VERSION from ADD.
                assert_eq!(
                    validate_network_name(&v.name).as_ref(),
                    Err(add_err),
                    "VERSION accepts what ADD rejects for another reason"
                );
            }
        }
    }
    if let Ok(d) = &del
        && d.prev_result_problem.is_some()
    {
        assert!(
            add.is_err(),
            "DEL reports a prevResult problem ADD accepted"
        );
    }
}

fn check_accepted(conf: &NetConf, command: Command) {
    if command != Command::Version {
        assert!(validate_network_name(&conf.name).is_ok(), "{:?}", conf.name);
    }
    assert!((MIN_MTU..=MAX_MTU).contains(&conf.mtu), "mtu {}", conf.mtu);
    let prefix_len = conf.veth_prefix.len();
    assert!((1..=MAX_VETH_PREFIX_LEN).contains(&prefix_len), "{conf:?}");
    assert!(!conf.ipamd_socket.is_empty());
    if command != Command::Del {
        assert_eq!(conf.prev_result_problem, None);
    }
    assert!(conf.prev_result.is_none() || conf.prev_result_problem.is_none());
    if let Some(attachments) = &conf.valid_attachments {
        for (i, a) in attachments.iter().enumerate() {
            assert!(!attachments[..i].contains(a), "duplicate attachment {a:?}");
        }
    }
    let _ = conf.pod_annotation("k8s.amazonaws.com/eniConfig");
    if let Some(prev) = &conf.prev_result {
        check_result_round_trip(prev);
    }
}

fn check_result_round_trip(result: &CniResult) {
    for v in CniVersion::ALL {
        let json = result.to_json(v);
        assert_eq!(json["cniVersion"], v.as_str());
        let back = CniResult::from_json(&json, v)
            .unwrap_or_else(|e| panic!("{v} rendering of {result:?} does not read back: {e}"));
        let mut want = result.clone();
        if !v.has_interface_mtu() {
            want.interfaces.iter_mut().for_each(|i| i.mtu = None);
        }
        assert_eq!(back, want, "{v} round trip changed the result; JSON {json}");
    }
    for iface in &result.interfaces {
        let _ = result.container_interface_index(&iface.name);
    }
}

fn check_error(e: &CniError, codes: &[u32], what: &str) {
    assert!(
        codes.contains(&e.code),
        "{what}: undocumented code in {e:?}"
    );
    assert!(!e.msg.is_empty(), "{what}: error without a message");
    let printed: serde_json::Value = serde_json::from_str(&e.to_json(Some("1.1.0")))
        .unwrap_or_else(|err| panic!("{what}: error JSON does not parse: {err}"));
    assert_eq!(printed["code"], e.code);
    assert_eq!(printed["msg"], e.msg.as_str());
}

/// The environment variables [`check_args`] fills from its input lines after `CNI_ARGS`.
const ENV_LINES: [&str; 6] = [
    "CNI_COMMAND",
    "CNI_CONTAINERID",
    "CNI_NETNS",
    "CNI_IFNAME",
    "CNI_PATH",
    "CNI_NETNS_OVERRIDE",
];

/// `CNI_ARGS` and the `CNI_*` environment.
///
/// The input, read as UTF-8 (lossily, as the plugin maps the environment), is split into lines:
/// the first is `CNI_ARGS`, the following ones are the values of `CNI_COMMAND`,
/// `CNI_CONTAINERID`, `CNI_NETNS`, `CNI_IFNAME`, `CNI_PATH` and `CNI_NETNS_OVERRIDE` in that
/// order, and a variable without a line is unset. Checks:
/// - [`parse_cni_args`] fails only with code 4; what it accepts prints back as `K=V;...` that
///   parses to the same value, and unknown keys survive only with `IgnoreUnknown`;
/// - [`Invocation::from_env`] fails only with code 4 (always when [`about_requested`] says so);
///   what it accepts obeys the rules of its verb (ids and names valid, `CNI_NETNS` present for
///   ADD and CHECK) and carries `CNI_ARGS` verbatim.
pub fn check_args(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let args = lines.next().unwrap_or("");

    match parse_cni_args(args) {
        Ok(parsed) => {
            assert!(
                parsed.ignore_unknown || parsed.other.is_empty(),
                "{parsed:?}"
            );
            let printed = print_cni_args(&parsed);
            assert_eq!(
                parse_cni_args(&printed).as_ref(),
                Ok(&parsed),
                "CNI_ARGS {args:?} printed as {printed:?} parses differently"
            );
        }
        Err(e) => check_error(&e, &[CniError::INVALID_ENV], "CNI_ARGS"),
    }

    let values: Vec<&str> = lines.take(ENV_LINES.len()).collect();
    let get = |key: &str| -> Option<String> {
        if key == "CNI_ARGS" {
            return Some(args.to_owned());
        }
        let i = ENV_LINES.iter().position(|k| *k == key)?;
        values.get(i).map(|v| (*v).to_owned())
    };
    let about = about_requested(get);
    match Invocation::from_env(get) {
        Ok(inv) => {
            assert!(!about, "about_requested on an accepted environment");
            assert_eq!(get("CNI_COMMAND").as_deref(), Some(inv.command.as_str()));
            assert_eq!(inv.args, args);
            if inv.command.is_attachment_op() {
                assert!(validate_container_id(&inv.container_id).is_ok(), "{inv:?}");
                assert!(validate_ifname(&inv.ifname).is_ok(), "{inv:?}");
                assert!(
                    inv.netns.is_some() || inv.command == Command::Del,
                    "{inv:?}"
                );
            }
            assert!(inv.netns.as_deref() != Some(""), "{inv:?}");
            assert!(inv.path.as_deref() != Some(""), "{inv:?}");
            assert!(inv.path_dirs().all(|d| !d.is_empty() && !d.contains(':')));
        }
        Err(e) => check_error(&e, &[CniError::INVALID_ENV], "CNI_* environment"),
    }
}

/// `K8sArgs` back in `CNI_ARGS` form.
fn print_cni_args(args: &K8sArgs) -> String {
    let known = [
        ("K8S_POD_NAMESPACE", &args.namespace),
        ("K8S_POD_NAME", &args.name),
        ("K8S_POD_INFRA_CONTAINER_ID", &args.infra_container_id),
        ("K8S_POD_UID", &args.uid),
    ];
    let mut pairs: Vec<String> = known
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}")))
        .collect();
    if args.ignore_unknown {
        pairs.push("IgnoreUnknown=1".into());
    }
    pairs.extend(args.other.iter().map(|(k, v)| format!("{k}={v}")));
    pairs.join(";")
}
