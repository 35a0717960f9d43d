//! One row per bad input: the code and a fragment of the message that names the problem.

use cni::{CniError, CniResult, CniVersion, Command, Invocation, NetConf, parse_cni_args};
use serde_json::{Value, json};

use crate::add_env;

fn conf(extra: Value, cmd: Command) -> Result<NetConf, CniError> {
    let mut v = json!({"cniVersion":"1.1.0","name":"aws-cni","type":"vpc-cni"});
    for (k, val) in extra.as_object().unwrap() {
        if val.is_null() {
            v.as_object_mut().unwrap().remove(k);
        } else {
            v[k] = val.clone();
        }
    }
    NetConf::parse(v.to_string().as_bytes(), cmd)
}

fn raw(bytes: &str) -> Result<NetConf, CniError> {
    NetConf::parse(bytes.as_bytes(), Command::Add)
}

struct Case {
    what: &'static str,
    run: Box<dyn Fn() -> Result<(), CniError>>,
    code: u32,
    needle: &'static str,
}

fn case<T: 'static>(
    what: &'static str,
    code: u32,
    needle: &'static str,
    f: impl Fn() -> Result<T, CniError> + 'static,
) -> Case {
    Case {
        what,
        run: Box::new(move || f().map(|_| ())),
        code,
        needle,
    }
}

fn cases() -> Vec<Case> {
    vec![
        // 6: decoding
        case(
            "malformed JSON",
            6,
            "error unmarshalling network config: EOF while parsing",
            || raw("{\"cniVersion\":"),
        ),
        case(
            "empty stdin",
            6,
            "error unmarshalling network config",
            || raw(""),
        ),
        case(
            "not an object",
            6,
            "network config must be a JSON object",
            || raw("[1,2]"),
        ),
        case(
            "name not a string",
            6,
            "name must be a string, got 5",
            || conf(json!({"name":5}), Command::Add),
        ),
        case(
            "cniVersion not a string",
            6,
            "cniVersion must be a string",
            || conf(json!({"cniVersion":1.1}), Command::Add),
        ),
        case(
            "prevResult not an object",
            6,
            "could not parse prevResult",
            || conf(json!({"prevResult":"x"}), Command::Add),
        ),
        case(
            "prevResult bad address",
            6,
            "ips[0].address \"10.0.0.300/32\" is not a CIDR",
            || {
                conf(
                    json!({"prevResult":{"ips":[{"address":"10.0.0.300/32"}]}}),
                    Command::Add,
                )
            },
        ),
        case(
            "prevResult address without prefix",
            6,
            "ips[0].address \"10.0.0.1\"",
            || {
                conf(
                    json!({"prevResult":{"ips":[{"address":"10.0.0.1"}]}}),
                    Command::Add,
                )
            },
        ),
        case(
            "prevResult negative interface",
            6,
            "ips[0].interface must be a non-negative integer",
            || {
                conf(
                    json!({"prevResult":{"ips":[{"address":"10.0.0.1/32","interface":-1}]}}),
                    Command::Check,
                )
            },
        ),
        case(
            "prevResult bad gw",
            6,
            "routes[0].gw \"nope\" is not an IP address",
            || {
                conf(
                    json!({"prevResult":{"routes":[{"dst":"0.0.0.0/0","gw":"nope"}]}}),
                    Command::Add,
                )
            },
        ),
        case(
            "prevResult missing dst",
            6,
            "routes[0].dst is missing",
            || {
                conf(
                    json!({"prevResult":{"routes":[{"gw":"1.1.1.1"}]}}),
                    Command::Add,
                )
            },
        ),
        case(
            "prevResult dns not strings",
            6,
            "dns.nameservers[0] must be a string",
            || {
                conf(
                    json!({"prevResult":{"dns":{"nameservers":[1]}}}),
                    Command::Add,
                )
            },
        ),
        case(
            "GC attachments not a list",
            6,
            "cni.dev/valid-attachments must be an array",
            || conf(json!({"cni.dev/valid-attachments":{}}), Command::Gc),
        ),
        case(
            "GC attachment without ifname",
            6,
            "cni.dev/attachments[0].ifname is missing",
            || {
                conf(
                    json!({"cni.dev/attachments":[{"containerID":"c"}]}),
                    Command::Gc,
                )
            },
        ),
        // 1: versions
        case("unsupported cniVersion", 1, "config is \"0.2.0\"", || {
            conf(json!({"cniVersion":"0.2.0"}), Command::Add)
        }),
        case(
            "future cniVersion",
            1,
            "incompatible CNI versions: config is \"2.0.0\"",
            || conf(json!({"cniVersion":"2.0.0"}), Command::Add),
        ),
        case("missing cniVersion", 1, "no cniVersion", || {
            conf(json!({"cniVersion":null}), Command::Add)
        }),
        case(
            "CHECK on 0.3.1",
            1,
            "config version 0.3.1 does not allow CHECK",
            || conf(json!({"cniVersion":"0.3.1"}), Command::Check),
        ),
        case(
            "GC on 1.0.0",
            1,
            "config version 1.0.0 does not allow GC",
            || conf(json!({"cniVersion":"1.0.0"}), Command::Gc),
        ),
        case(
            "STATUS on 0.4.0",
            1,
            "config version 0.4.0 does not allow STATUS",
            || conf(json!({"cniVersion":"0.4.0"}), Command::Status),
        ),
        // 7: invalid config
        case("missing name", 7, "missing network name", || {
            conf(json!({"name":null}), Command::Add)
        }),
        case("empty name", 7, "missing network name", || {
            conf(json!({"name":""}), Command::Del)
        }),
        case(
            "bad name",
            7,
            "invalid characters found in network name \"aws cni\"",
            || conf(json!({"name":"aws cni"}), Command::Add),
        ),
        case(
            "vethPrefix too long",
            7,
            "invalid vethPrefix \"abcde\": must be 1 to 4",
            || conf(json!({"vethPrefix":"abcde"}), Command::Add),
        ),
        case("vethPrefix empty", 7, "invalid vethPrefix \"\"", || {
            conf(json!({"vethPrefix":""}), Command::Add)
        }),
        case(
            "vethPrefix reserved",
            7,
            "invalid vethPrefix \"eth\"",
            || conf(json!({"vethPrefix":"eth"}), Command::Add),
        ),
        case("vethPrefix reserved vlan", 7, "reserved", || {
            conf(json!({"vethPrefix":"vlan"}), Command::Add)
        }),
        case("vethPrefix with slash", 7, "'/', ':' or whitespace", || {
            conf(json!({"vethPrefix":"e/n"}), Command::Add)
        }),
        case(
            "vethPrefix not a string",
            7,
            "vethPrefix must be a string",
            || conf(json!({"vethPrefix":4}), Command::Add),
        ),
        case("mtu too small", 7, "invalid mtu 575", || {
            conf(json!({"mtu":575}), Command::Add)
        }),
        case("mtu too big", 7, "invalid mtu \"9002\"", || {
            conf(json!({"mtu":"9002"}), Command::Add)
        }),
        case("mtu not a number", 7, "invalid mtu \"jumbo\"", || {
            conf(json!({"mtu":"jumbo"}), Command::Add)
        }),
        case("mtu fractional", 7, "invalid mtu 1500.5", || {
            conf(json!({"mtu":1500.5}), Command::Add)
        }),
        case("mtu negative", 7, "invalid mtu -1", || {
            conf(json!({"mtu":-1}), Command::Add)
        }),
        case("mtu bool", 7, "invalid mtu true", || {
            conf(json!({"mtu":true}), Command::Add)
        }),
        case(
            "ipamdSocket empty",
            7,
            "ipamdSocket must not be empty",
            || conf(json!({"ipamdSocket":""}), Command::Add),
        ),
        case(
            "pluginLogFile not a string",
            7,
            "pluginLogFile must be a string",
            || conf(json!({"pluginLogFile":[]}), Command::Add),
        ),
        // 4: environment
        case("missing CNI_NETNS on ADD", 4, "[CNI_NETNS]", || {
            Invocation::from_env(add_env(&[("CNI_NETNS", None)]))
        }),
        case(
            "missing CNI_CONTAINERID and CNI_IFNAME",
            4,
            "[CNI_CONTAINERID,CNI_IFNAME]",
            || {
                Invocation::from_env(add_env(&[
                    ("CNI_CONTAINERID", None),
                    ("CNI_IFNAME", Some("")),
                ]))
            },
        ),
        case(
            "invalid container id",
            4,
            "invalid characters in CNI_CONTAINERID \"-x\"",
            || Invocation::from_env(add_env(&[("CNI_CONTAINERID", Some("-x"))])),
        ),
        case("invalid ifname", 4, "invalid CNI_IFNAME \"eth0:1\"", || {
            Invocation::from_env(add_env(&[("CNI_IFNAME", Some("eth0:1"))]))
        }),
        case("unknown command", 4, "unknown CNI_COMMAND: \"FOO\"", || {
            Invocation::from_env(add_env(&[("CNI_COMMAND", Some("FOO"))]))
        }),
        case(
            "bad CNI_ARGS pair",
            4,
            "invalid CNI_ARGS pair \"nokey\"",
            || parse_cni_args("nokey"),
        ),
        case("unknown CNI_ARGS", 4, "unknown CNI_ARGS [\"X=1\"]", || {
            parse_cni_args("X=1")
        }),
        // from_json directly
        case(
            "result not an object",
            6,
            "invalid 1.0.0 result: result must be a JSON object",
            || CniResult::from_json(&json!([]), CniVersion::V1_0_0),
        ),
    ]
}

#[test]
fn every_bad_input_gets_its_code_and_a_message_naming_it() {
    let mut failures = Vec::new();
    for c in cases() {
        match (c.run)() {
            Ok(()) => failures.push(format!("{}: unexpectedly succeeded", c.what)),
            Err(e) => {
                if e.code != c.code || !e.msg.contains(c.needle) {
                    failures.push(format!(
                        "{}: want code {} containing {:?}, got code {} {:?}",
                        c.what, c.code, c.needle, e.code, e.msg
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
