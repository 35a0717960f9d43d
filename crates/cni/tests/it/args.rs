use cni::{K8sArgs, parse_cni_args};

#[test]
fn empty_gives_all_none() {
    assert_eq!(parse_cni_args("").unwrap(), K8sArgs::default());
}

#[test]
fn containerd_style_args_parse() {
    let raw = "K8S_POD_INFRA_CONTAINER_ID=4e1c9a5d;K8S_POD_UID=0b4c-11ee;IgnoreUnknown=1;\
               K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-5d78c9869d-abcde";
    let a = parse_cni_args(raw).unwrap();
    assert_eq!(a.namespace.as_deref(), Some("kube-system"));
    assert_eq!(a.name.as_deref(), Some("coredns-5d78c9869d-abcde"));
    assert_eq!(a.infra_container_id.as_deref(), Some("4e1c9a5d"));
    assert_eq!(a.uid.as_deref(), Some("0b4c-11ee"));
    assert!(a.ignore_unknown);
    assert!(a.other.is_empty());
}

#[test]
fn ignore_unknown_anywhere_allows_unknown_keys() {
    for raw in [
        "IgnoreUnknown=1;FOO=bar;K8S_POD_NAME=p",
        "FOO=bar;K8S_POD_NAME=p;IgnoreUnknown=true",
        "FOO=bar;K8S_POD_NAME=p;IgnoreUnknown=TRUE",
        "FOO=bar;K8S_POD_NAME=p;IgnoreUnknown=t",
    ] {
        let a = parse_cni_args(raw).unwrap();
        assert_eq!(a.name.as_deref(), Some("p"), "{raw}");
        assert_eq!(a.other, vec![("FOO".to_string(), "bar".to_string())]);
    }
}

#[test]
fn empty_values_and_repeated_keys() {
    let a = parse_cni_args("K8S_POD_NAME=;K8S_POD_NAMESPACE=a;K8S_POD_NAMESPACE=b").unwrap();
    assert_eq!(a.name.as_deref(), Some(""));
    assert_eq!(a.namespace.as_deref(), Some("b"));
    assert_eq!(a.uid, None);
}

#[test]
fn errors_are_code_4_and_name_the_pair() {
    let cases: &[(&str, &str)] = &[
        ("FOO=bar", "unknown CNI_ARGS [\"FOO=bar\"]"),
        ("FOO=bar;IgnoreUnknown=0", "unknown CNI_ARGS"),
        ("FOO=1;BAR=2", "\"FOO=1\", \"BAR=2\""),
        ("K8S_POD_NAME", "invalid CNI_ARGS pair \"K8S_POD_NAME\""),
        (
            "K8S_POD_NAME=a=b",
            "invalid CNI_ARGS pair \"K8S_POD_NAME=a=b\"",
        ),
        ("K8S_POD_NAME=a;", "invalid CNI_ARGS pair \"\""),
        ("IgnoreUnknown=yes", "IgnoreUnknown must be"),
        ("k8s_pod_name=x", "k8s_pod_name=x"),
    ];
    for (raw, needle) in cases {
        let err = parse_cni_args(raw).unwrap_err();
        assert_eq!(err.code, 4, "{raw}");
        assert!(err.msg.contains(needle), "{raw}: {}", err.msg);
    }
}
