use cni::{CniVersion, SUPPORTED_VERSIONS, parse_version_request, version_reply};
use serde_json::{Value, json};

#[test]
fn versions_parse_print_and_order() {
    assert_eq!(CniVersion::ALL.len(), SUPPORTED_VERSIONS.len());
    for (v, s) in CniVersion::ALL.iter().zip(SUPPORTED_VERSIONS) {
        assert_eq!(v.as_str(), *s);
        assert_eq!(CniVersion::parse(s), Some(*v));
        assert_eq!(s.parse::<CniVersion>().unwrap(), *v);
        assert_eq!(v.to_string(), *s);
    }
    assert!(CniVersion::ALL.windows(2).all(|w| w[0] < w[1]));
    for bad in ["0.1.0", "0.2.0", "1.1", "v1.1.0", "", "1.2.0"] {
        assert_eq!(CniVersion::parse(bad), None, "{bad}");
        let err = bad.parse::<CniVersion>().unwrap_err();
        assert_eq!(err.code, 1);
        assert!(err.msg.contains(&format!("{bad:?}")), "{}", err.msg);
    }
}

#[test]
fn capability_helpers() {
    use CniVersion::*;
    let table = [
        (V0_3_0, false, false, true, false),
        (V0_3_1, false, false, true, false),
        (V0_4_0, true, false, true, false),
        (V1_0_0, true, false, false, false),
        (V1_1_0, true, true, false, true),
    ];
    for (v, check, status_gc, ip_version, mtu) in table {
        assert_eq!(v.supports_check(), check, "{v}");
        assert_eq!(v.supports_status_gc(), status_gc, "{v}");
        assert_eq!(v.has_ip_version_field(), ip_version, "{v}");
        assert_eq!(v.has_interface_mtu(), mtu, "{v}");
    }
}

#[test]
fn version_reply_lists_everything() {
    let v: Value = serde_json::from_str(&version_reply()).unwrap();
    assert_eq!(
        v,
        json!({"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]})
    );
}

#[test]
fn version_request_is_lenient() {
    assert_eq!(
        parse_version_request(br#"{"cniVersion":"1.1.0"}"#).as_deref(),
        Some("1.1.0")
    );
    assert_eq!(
        parse_version_request(br#"{"cniVersion":"9.9.9"}"#).as_deref(),
        Some("9.9.9")
    );
    for junk in [
        &b""[..],
        b"not json",
        b"{}",
        br#"{"cniVersion":1}"#,
        b"[]",
        b"\xff\xfe",
    ] {
        assert_eq!(parse_version_request(junk), None);
    }
}
