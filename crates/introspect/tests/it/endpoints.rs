//! The introspection endpoints, through the router, against pools built with the real pool.

use crate::common;

use std::sync::Arc;

use axum::http::StatusCode;
use cloud::Action;
use common::*;
use introspect::{AVAILABLE_COMMANDS, IpamdEnv, NetworkUtilsEnv, PoolView, introspection_router};
use pool::{Removal, Timestamp};
use serde_json::json;

fn router(view: PoolView) -> axum::Router {
    introspection_router(
        Fixed::new(view),
        NetworkUtilsEnv::default(),
        IpamdEnv::default(),
    )
}

fn no_secrets(body: &str) {
    for id in SECRET_IDS {
        assert!(!body.contains(id), "container id {id} leaked: {body}");
    }
    assert!(!body.contains("infra-secret"), "{body}");
}

#[tokio::test]
async fn enis_has_the_go_shape_keyed_by_network_card() {
    let r = router(secondary_view());
    let (status, _, raw) = call(&r, "GET", "/v1/enis").await;
    assert_eq!(status, StatusCode::OK);
    no_secrets(&raw);
    let v: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(keys(&v), ["0"], "one network card, keyed as a string");
    let card = &v["0"];
    assert_eq!(keys(card), ["AssignedIPs", "ENIs", "TotalIPs"]);
    assert_eq!(card["TotalIPs"], 7);
    assert_eq!(card["AssignedIPs"], 2);
    assert_eq!(keys(&card["ENIs"]), ["eni-0", "eni-1"]);

    let e0 = &card["ENIs"]["eni-0"];
    assert_eq!(
        keys(e0),
        [
            "AvailableIPv4Cidrs",
            "DeviceNumber",
            "ID",
            "IPv6Cidrs",
            "IsEFA",
            "IsExcludedForPodIPs",
            "IsPrimary",
            "IsTrunk",
            "RouteTableID",
            "SubnetID"
        ]
    );
    assert_eq!(e0["ID"], "eni-0");
    assert_eq!(e0["IsPrimary"], true);
    assert_eq!(e0["IsTrunk"], false);
    assert_eq!(e0["IsEFA"], false);
    assert_eq!(e0["IsExcludedForPodIPs"], false);
    assert_eq!(e0["DeviceNumber"], 0);
    assert_eq!(e0["RouteTableID"], 254);
    assert_eq!(e0["SubnetID"], "subnet-1");
    assert_eq!(e0["IPv6Cidrs"], json!({}));
    assert_eq!(
        keys(&e0["AvailableIPv4Cidrs"]),
        [
            "10.0.0.11/32",
            "10.0.0.12/32",
            "10.0.0.13/32",
            "10.0.0.14/32"
        ]
    );

    let e1 = &card["ENIs"]["eni-1"];
    assert_eq!(e1["IsPrimary"], false);
    assert_eq!(e1["DeviceNumber"], 1);
    assert_eq!(e1["RouteTableID"], 2);

    // An assigned /32: the key's container id and ifname are blanked.
    assert_eq!(
        e0["AvailableIPv4Cidrs"]["10.0.0.13/32"],
        json!({
            "Cidr": {"IP": "10.0.0.13", "Mask": "/////w=="},
            "IPAddresses": {
                "10.0.0.13": {
                    "Address": "10.0.0.13",
                    "IPAMKey": {"networkName": "aws-cni", "containerID": "", "ifName": ""},
                    "IPAMMetadata": {
                        "k8sPodNamespace": "default",
                        "k8sPodName": "web-1",
                        "interfacesCount": 1
                    },
                    "AssignedTime": "2026-11-22T09:59:58.5Z",
                    "UnassignedTime": "0001-01-01T00:00:00Z"
                }
            },
            "IsPrefix": false,
            "AddressFamily": ""
        })
    );
    // Released and cooling: an empty key, Go's omitempty metadata, the release time.
    assert_eq!(
        e0["AvailableIPv4Cidrs"]["10.0.0.12/32"]["IPAddresses"]["10.0.0.12"],
        json!({
            "Address": "10.0.0.12",
            "IPAMKey": {"networkName": "", "containerID": "", "ifName": ""},
            "IPAMMetadata": {},
            "AssignedTime": "0001-01-01T00:00:00Z",
            "UnassignedTime": "2026-11-22T09:59:50Z"
        })
    );
    // Never used.
    assert_eq!(
        e1["AvailableIPv4Cidrs"]["10.0.1.11/32"]["IPAddresses"]["10.0.1.11"]["UnassignedTime"],
        "0001-01-01T00:00:00Z"
    );
}

#[tokio::test]
async fn enis_shows_delegated_prefixes_as_28s() {
    let r = router(prefix_view());
    let v = get_json(&r, "/v1/enis").await;
    let card = &v["0"];
    assert_eq!(card["TotalIPs"], 16);
    assert_eq!(card["AssignedIPs"], 2);
    let cidrs = &card["ENIs"]["eni-0"]["AvailableIPv4Cidrs"];
    assert_eq!(keys(cidrs), ["10.0.32.0/28"]);
    let prefix = &cidrs["10.0.32.0/28"];
    assert_eq!(prefix["IsPrefix"], true);
    assert_eq!(
        prefix["Cidr"],
        json!({"IP": "10.0.32.0", "Mask": "////8A=="})
    );
    let addrs = prefix["IPAddresses"].as_object().unwrap();
    assert_eq!(addrs.len(), 16);
    let assigned: Vec<&String> = addrs
        .iter()
        .filter(|(_, a)| a["IPAMKey"]["networkName"] == "aws-cni")
        .map(|(ip, _)| ip)
        .collect();
    assert_eq!(assigned, ["10.0.32.0", "10.0.32.1"]);
    assert_eq!(addrs["10.0.32.0"]["AssignedTime"], NOW_TEXT);
}

#[tokio::test]
async fn pods_lists_assignments_sorted_without_container_ids() {
    let r = router(secondary_view());
    let (status, _, raw) = call(&r, "GET", "/v1/pods").await;
    assert_eq!(status, StatusCode::OK);
    no_secrets(&raw);
    let v: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(
        v,
        json!([
            {
                "Namespace": "default", "Name": "web-1", "IP": "10.0.0.13", "ENI": "eni-0",
                "DeviceNumber": 0, "AssignedTime": "2026-11-22T09:59:58.5Z", "Interface": "eth0"
            },
            {
                "Namespace": "kube-system", "Name": "coredns", "IP": "10.0.0.11", "ENI": "eni-0",
                "DeviceNumber": 0, "AssignedTime": "2026-11-22T09:59:00Z", "Interface": "eth0"
            }
        ])
    );
}

#[tokio::test]
async fn pool_shows_numbers_targets_and_the_next_action_with_its_reason() {
    let mut view = secondary_view();
    view.growth_paused_until = Some(Timestamp(NOW.millis() + 4_000));
    view.last_error = Some("InsufficientFreeAddressesInSubnet".into());
    let v = get_json(&router(view), "/v1/pool").await;
    assert_eq!(v["Ready"], true);
    assert_eq!(v["Mode"], "WARM_IP_TARGET");
    assert_eq!(
        v["Totals"],
        json!({"TotalIPs": 7, "AssignedIPs": 2, "CoolingIPs": 1, "AvailableIPs": 4,
               "Prefixes": 0, "ENIs": 2})
    );
    assert_eq!(
        v["Limits"],
        json!({"MaxENIs": 2, "MaxPods": 29, "IPsPerENI": 4, "MaxIPs": 8})
    );
    assert_eq!(
        v["Targets"],
        json!({"WARM_ENI_TARGET": 1, "WARM_IP_TARGET": 5, "MINIMUM_IP_TARGET": 0,
               "WARM_PREFIX_TARGET": 0, "ENABLE_PREFIX_DELEGATION": false})
    );
    assert_eq!(
        v["NextAction"],
        json!({"Kind": "AssignIps", "ENI": "eni-1", "Count": 1})
    );
    assert_eq!(v["PlannedActions"], json!([v["NextAction"]]));
    assert_eq!(v["Reason"], "available 4 < WARM_IP_TARGET 5");
    assert_eq!(v["GrowthPausedUntil"], "2026-11-22T10:00:04Z");
    assert_eq!(v["GrowthPaused"], true);
    assert_eq!(v["LastError"], "InsufficientFreeAddressesInSubnet");
    assert_eq!(v["LastRelease"], serde_json::Value::Null);
}

#[tokio::test]
async fn pool_says_when_growth_is_blocked_and_when_there_is_nothing_to_do() {
    let mut view = secondary_view();
    view.limits.secondary_ips_per_eni = 3;
    let v = get_json(&router(view.clone()), "/v1/pool").await;
    assert_eq!(v["NextAction"], serde_json::Value::Null);
    assert_eq!(v["PlannedActions"], json!([]));
    let reason = v["Reason"].as_str().unwrap();
    assert!(
        reason.starts_with("blocked: the max ENI limit is already reached (2 ENIs attached"),
        "{reason}"
    );
    assert!(
        reason.ends_with("available 4 < WARM_IP_TARGET 5"),
        "{reason}"
    );

    view.targets.warm_ip = 4;
    view.growth_paused_until = Some(Timestamp(NOW.millis() - 1));
    let v = get_json(&router(view), "/v1/pool").await;
    assert_eq!(v["NextAction"], serde_json::Value::Null);
    assert_eq!(
        v["Reason"],
        "at target: available 4 ≥ WARM_IP_TARGET 4, total 7 ≥ MINIMUM_IP_TARGET 0"
    );
    assert_eq!(v["GrowthPaused"], false, "the pause is over");
}

#[tokio::test]
async fn pool_in_prefix_mode() {
    let v = get_json(&router(prefix_view()), "/v1/pool").await;
    assert_eq!(v["Mode"], "WARM_PREFIX_TARGET");
    assert_eq!(v["Totals"]["Prefixes"], 1);
    assert_eq!(v["Limits"]["MaxIPs"], 3 * 9 * 16);
    assert_eq!(
        v["NextAction"],
        json!({"Kind": "AssignPrefixes", "ENI": "eni-0", "Count": 1})
    );
    assert_eq!(v["Reason"], "available 14 < WARM_PREFIX_TARGET 1 × 16");
}

#[tokio::test]
async fn a_pool_change_shows_in_the_next_response() {
    let source = Fixed::new(secondary_view());
    let r = introspection_router(
        Arc::clone(&source) as Arc<dyn introspect::Source>,
        NetworkUtilsEnv::default(),
        IpamdEnv::default(),
    );
    let mut view = secondary_view();
    view.pool
        .remove_eni("eni-1", Removal::IfUnused(NOW))
        .unwrap();
    source.set(view);
    let v = get_json(&r, "/v1/enis").await;
    assert_eq!(keys(&v["0"]["ENIs"]), ["eni-0"]);
}

#[tokio::test]
async fn env_settings_use_the_go_keys() {
    let net = NetworkUtilsEnv {
        connmark: 0x80,
        exclude_snat_cidrs: vec!["10.10.0.0/16".into()],
        external_snat: false,
        external_service_cidrs: Vec::new(),
        mtu: 9001,
        veth_prefix: "eni".into(),
        node_port_support: true,
        randomize_snat: 2,
    };
    let ipamd = IpamdEnv {
        warm_ip_target: 0,
        warm_eni_target: 1,
        custom_network_cfg: false,
        manage_enis_non_schedulable: false,
        subnet_discovery: true,
    };
    let r = introspection_router(Fixed::new(secondary_view()), net, ipamd);
    let (status, content_type, body) = call(&r, "GET", "/v1/networkutils-env-settings").await;
    assert_eq!(
        (status, content_type.as_str()),
        (StatusCode::OK, "application/json")
    );
    // Keys sorted as Go sorts a map's; an empty CIDR list is Go's nil slice.
    assert_eq!(
        body,
        r#"{"AWS_EXTERNAL_SERVICE_CIDRS":null,"AWS_VPC_CNI_NODE_PORT_SUPPORT":true,"AWS_VPC_ENI_MTU":9001,"AWS_VPC_K8S_CNI_CONNMARK":128,"AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS":["10.10.0.0/16"],"AWS_VPC_K8S_CNI_EXTERNALSNAT":false,"AWS_VPC_K8S_CNI_RANDOMIZESNAT":2,"AWS_VPC_K8S_CNI_VETHPREFIX":"eni"}"#
    );
    let back: NetworkUtilsEnv = serde_json::from_str(&body).unwrap();
    assert!(back.external_service_cidrs.is_empty());

    let (status, _, body) = call(&r, "GET", "/v1/ipamd-env-settings").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        r#"{"AWS_MANAGE_ENIS_NON_SCHEDULABLE":false,"AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG":false,"ENABLE_SUBNET_DISCOVERY":true,"WARM_ENI_TARGET":1,"WARM_IP_TARGET":0}"#
    );
}

#[tokio::test]
async fn eni_configs_is_a_json_404() {
    let (status, content_type, body) =
        call(&router(secondary_view()), "GET", "/v1/eni-configs").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(content_type, "application/json");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(keys(&v), ["error"]);
    assert!(v["error"].as_str().unwrap().contains("ENIConfig"), "{v}");
}

#[tokio::test]
async fn ec2_refusals_lists_each_refused_api_with_its_age() {
    assert_eq!(
        get_json(&router(secondary_view()), "/v1/ec2-refusals").await,
        json!([])
    );
    let mut view = secondary_view();
    view.refusals = vec![introspect::Ec2Refusal {
        api: Action::AssignPrivateIpAddresses.to_string(),
        code: "UnauthorizedOperation".into(),
        message: "You are not authorized".into(),
        count: 3,
        last: Timestamp(view.now.millis() - 42_000),
    }];
    let v = get_json(&router(view), "/v1/ec2-refusals").await;
    assert_eq!(v[0]["API"], Action::AssignPrivateIpAddresses.wire_name());
    assert_eq!(v[0]["Code"], "UnauthorizedOperation");
    assert_eq!(v[0]["Count"], 3);
    assert_eq!(v[0]["SecondsAgo"], 42);
    assert!(v[0]["LastRefused"].as_str().unwrap().ends_with('Z'), "{v}");
}

#[tokio::test]
async fn root_and_unknown_paths_list_every_endpoint() {
    let r = router(secondary_view());
    let expected = json!({"AvailableCommands": AVAILABLE_COMMANDS});
    for uri in ["/", "/v2/nothing", "/v1/enis/extra"] {
        assert_eq!(get_json(&r, uri).await, expected, "{uri}");
    }
    for path in AVAILABLE_COMMANDS {
        let (status, _, _) = call(&r, "GET", path).await;
        assert!(
            status == StatusCode::OK || path == "/v1/eni-configs",
            "{path}: {status}"
        );
    }
}

#[tokio::test]
async fn only_get_is_served() {
    let r = router(secondary_view());
    for (method, uri) in [
        ("POST", "/v1/enis"),
        ("DELETE", "/v1/pool"),
        ("PUT", "/nothing"),
    ] {
        let (status, _, _) = call(&r, method, uri).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
    }
}
