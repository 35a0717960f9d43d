use cni::CniError;
use serde_json::{Value, json};

#[test]
fn constructors_carry_the_spec_codes() {
    let table: Vec<(CniError, u32)> = vec![
        (CniError::incompatible_version("m"), 1),
        (CniError::unsupported_field("k", "v"), 2),
        (CniError::unknown_container("m"), 3),
        (CniError::invalid_env("m"), 4),
        (CniError::io_failure("m"), 5),
        (CniError::decoding_failure("m"), 6),
        (CniError::invalid_config("m"), 7),
        (CniError::invalid_netns("m"), 8),
        (CniError::try_again_later("m"), 11),
        (CniError::not_available("m"), 50),
        (CniError::not_available_limited_connectivity("m"), 51),
        (CniError::internal("m"), 999),
    ];
    for (err, code) in table {
        assert_eq!(err.code, code, "{err}");
    }
    assert_eq!(CniError::TRY_AGAIN_LATER, 11);
    assert_eq!(CniError::INTERNAL, 999);
    let e = CniError::unsupported_field("ipMasq", "true");
    assert!(
        e.msg.contains("ipMasq") && e.msg.contains("true"),
        "{}",
        e.msg
    );
}

#[test]
fn json_shape() {
    let e = CniError::try_again_later("ipamd busy").with_details("pool empty, retry");
    let v: Value = serde_json::from_str(&e.to_json(Some("1.1.0"))).unwrap();
    assert_eq!(
        v,
        json!({"cniVersion":"1.1.0","code":11,"msg":"ipamd busy","details":"pool empty, retry"})
    );
    let v: Value =
        serde_json::from_str(&CniError::invalid_config("bad \"x\"").to_json(None)).unwrap();
    assert_eq!(v, json!({"code":7,"msg":"bad \"x\""}));
}

#[test]
fn display_includes_code_msg_and_details() {
    let e = CniError::invalid_env("m").with_details("d");
    assert_eq!(e.to_string(), "CNI error 4: m (d)");
    assert_eq!(CniError::internal("x").to_string(), "CNI error 999: x");
    let boxed: Box<dyn std::error::Error> = Box::new(e);
    assert!(boxed.to_string().contains("m"));
}
