//! The metadata tree: a request path to its answer, from an [`InstanceView`]. Pure.

use serde_json::json;

use crate::clock::rfc3339_seconds;
use crate::model::{InstanceView, InterfaceView, az_id, private_dns_name};

/// Name of the instance profile role the simulator pretends is attached.
pub const ROLE: &str = "vpc-sim-node-role";
/// Lifetime of the credentials handed out.
const CREDENTIALS_TTL_MS: u64 = 3_600_000;

/// The `meta-data/` listing; `ipv6` is there only when the instance has an IPv6 address.
const META_DATA: &[&str] = &[
    "ami-id",
    "hostname",
    "iam/",
    "instance-id",
    "instance-type",
    "ipv6",
    "local-hostname",
    "local-ipv4",
    "mac",
    "network/",
    "placement/",
];

/// Answers `path` (relative to `/latest/`, e.g. `meta-data/instance-id`); `None` is a 404.
pub fn resolve(v: &InstanceView, path: &str, now_ms: u64) -> Option<String> {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return Some(lines(&["dynamic", "meta-data"]));
    }
    let parts: Vec<&str> = trimmed.split('/').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    let hostname = || private_dns_name(&v.region, v.primary_ip);
    let answer = match parts.as_slice() {
        ["meta-data"] => {
            let has_v6 = v.primary_ipv6.is_some();
            let items: Vec<&str> = META_DATA
                .iter()
                .copied()
                .filter(|f| has_v6 || *f != "ipv6")
                .collect();
            lines(&items)
        }
        // 404 without one, as IMDS answers on an IPv4-only instance.
        ["meta-data", "ipv6"] => v.primary_ipv6?.to_string(),
        ["meta-data", "ami-id"] => v.image_id.clone(),
        ["meta-data", "hostname" | "local-hostname"] => hostname(),
        ["meta-data", "instance-id"] => v.instance_id.clone(),
        ["meta-data", "instance-type"] => v.instance_type.clone(),
        ["meta-data", "local-ipv4"] => v.primary_ip.to_string(),
        ["meta-data", "mac"] => v.primary_mac.clone(),
        ["meta-data", "placement"] => {
            lines(&["availability-zone", "availability-zone-id", "region"])
        }
        ["meta-data", "placement", "availability-zone"] => v.az.clone(),
        ["meta-data", "placement", "availability-zone-id"] => az_id(&v.az),
        ["meta-data", "placement", "region"] => v.region.clone(),
        ["meta-data", "network"] => "interfaces/".into(),
        ["meta-data", "network", "interfaces"] => "macs/".into(),
        ["meta-data", "network", "interfaces", "macs"] => {
            join(v.interfaces.iter().map(|i| format!("{}/", i.mac)))
        }
        ["meta-data", "network", "interfaces", "macs", mac] => {
            lines(&interface_fields(find(v, mac)?))
        }
        ["meta-data", "network", "interfaces", "macs", mac, field] => {
            interface_field(v, find(v, mac)?, field)?
        }
        ["meta-data", "iam"] => "security-credentials/".into(),
        ["meta-data", "iam", "security-credentials"] => ROLE.into(),
        ["meta-data", "iam", "security-credentials", role] if *role == ROLE => {
            credentials(v, now_ms)
        }
        ["dynamic"] => "instance-identity/".into(),
        ["dynamic", "instance-identity"] => "document".into(),
        ["dynamic", "instance-identity", "document"] => identity_document(v),
        _ => return None,
    };
    Some(answer)
}

fn find<'a>(v: &'a InstanceView, mac: &str) -> Option<&'a InterfaceView> {
    v.interfaces.iter().find(|i| i.mac == mac)
}

fn lines(items: &[&str]) -> String {
    items.join("\n")
}

fn join(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join("\n")
}

fn interface_fields(i: &InterfaceView) -> Vec<&'static str> {
    let mut f = vec!["device-number", "interface-id"];
    // Each of these is listed (and answered) only when there is something to show: IMDS
    // answers 404 for an interface without IPv4 prefixes, IPv6 addresses or IPv6 prefixes.
    if !i.prefixes.is_empty() {
        f.push("ipv4-prefix");
    }
    if !i.ipv6_prefixes.is_empty() {
        f.push("ipv6-prefix");
    }
    if !i.ipv6s.is_empty() {
        f.push("ipv6s");
    }
    f.extend([
        "local-hostname",
        "local-ipv4s",
        "mac",
        "network-card",
        "owner-id",
        "security-group-ids",
        "security-groups",
        "subnet-id",
        "subnet-ipv4-cidr-block",
    ]);
    if i.subnet_ipv6_cidr.is_some() {
        f.push("subnet-ipv6-cidr-blocks");
    }
    f.extend(["vpc-id", "vpc-ipv4-cidr-block", "vpc-ipv4-cidr-blocks"]);
    if i.vpc_ipv6_cidr.is_some() {
        f.push("vpc-ipv6-cidr-blocks");
    }
    f
}

fn interface_field(v: &InstanceView, i: &InterfaceView, field: &str) -> Option<String> {
    Some(match field {
        "device-number" => i.device_number.to_string(),
        "interface-id" => i.eni_id.clone(),
        "ipv4-prefix" if !i.prefixes.is_empty() => join(i.prefixes.iter().map(|p| p.to_string())),
        "ipv6-prefix" if !i.ipv6_prefixes.is_empty() => {
            join(i.ipv6_prefixes.iter().map(|p| p.to_string()))
        }
        "ipv6s" if !i.ipv6s.is_empty() => join(i.ipv6s.iter().map(|ip| ip.to_string())),
        "local-hostname" => private_dns_name(&v.region, *i.ipv4s.first()?),
        "local-ipv4s" => join(i.ipv4s.iter().map(|ip| ip.to_string())),
        "mac" => i.mac.clone(),
        "network-card" => i.network_card.to_string(),
        "owner-id" => v.account_id.clone(),
        "security-group-ids" => join(i.security_groups.iter().map(|(id, _)| id.clone())),
        "security-groups" => join(i.security_groups.iter().map(|(_, name)| name.clone())),
        "subnet-id" => i.subnet_id.clone(),
        "subnet-ipv4-cidr-block" => i.subnet_cidr.to_string(),
        "subnet-ipv6-cidr-blocks" => i.subnet_ipv6_cidr?.to_string(),
        "vpc-id" => i.vpc_id.clone(),
        "vpc-ipv4-cidr-block" => i.vpc_cidrs.first()?.to_string(),
        "vpc-ipv4-cidr-blocks" => join(i.vpc_cidrs.iter().map(|c| c.to_string())),
        "vpc-ipv6-cidr-blocks" => i.vpc_ipv6_cidr?.to_string(),
        _ => return None,
    })
}

fn identity_document(v: &InstanceView) -> String {
    let doc = json!({
        "accountId": v.account_id,
        "architecture": "x86_64",
        "availabilityZone": v.az,
        "billingProducts": null,
        "devpayProductCodes": null,
        "marketplaceProductCodes": null,
        "imageId": v.image_id,
        "instanceId": v.instance_id,
        "instanceType": v.instance_type,
        "kernelId": null,
        "pendingTime": rfc3339_seconds(v.launched_ms),
        "privateIp": v.primary_ip.to_string(),
        "ramdiskId": null,
        "region": v.region,
        "version": "2017-09-30",
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

fn credentials(v: &InstanceView, now_ms: u64) -> String {
    let key_tail: String = v
        .instance_id
        .trim_start_matches("i-")
        .to_ascii_uppercase()
        .chars()
        .chain(std::iter::repeat('0'))
        .take(16)
        .collect();
    let doc = json!({
        "Code": "Success",
        "LastUpdated": rfc3339_seconds(now_ms),
        "Type": "AWS-HMAC",
        "AccessKeyId": format!("ASIA{key_tail}"),
        "SecretAccessKey": format!("vpc-sim-secret-{}", v.instance_id),
        "Token": format!("vpc-sim-session-token-{}", v.instance_id),
        "Expiration": rfc3339_seconds(now_ms + CREDENTIALS_TTL_MS),
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> InstanceView {
        InstanceView {
            instance_id: "i-0123456789abcdef0".into(),
            instance_type: "t3.medium".into(),
            image_id: "ami-1".into(),
            az: "us-west-2a".into(),
            region: "us-west-2".into(),
            primary_ip: "10.0.0.4".parse().unwrap(),
            primary_mac: "02:00:00:00:00:01".into(),
            primary_ipv6: None,
            launched_ms: 0,
            account_id: "111122223333".into(),
            interfaces: vec![InterfaceView {
                mac: "02:00:00:00:00:01".into(),
                eni_id: "eni-0123456789abcdef0".into(),
                device_number: 0,
                network_card: 0,
                subnet_id: "subnet-1".into(),
                subnet_cidr: "10.0.0.0/24".parse().unwrap(),
                vpc_id: "vpc-1".into(),
                vpc_cidrs: vec![
                    "10.0.0.0/16".parse().unwrap(),
                    "100.64.0.0/16".parse().unwrap(),
                ],
                ipv4s: vec!["10.0.0.4".parse().unwrap(), "10.0.0.5".parse().unwrap()],
                prefixes: vec![],
                ipv6s: vec![],
                ipv6_prefixes: vec![],
                subnet_ipv6_cidr: None,
                vpc_ipv6_cidr: None,
                security_groups: vec![
                    ("sg-1".into(), "default".into()),
                    ("sg-2".into(), "pods".into()),
                ],
            }],
        }
    }

    #[test]
    fn paths_and_listings() {
        let v = view();
        let r = |p: &str| resolve(&v, p, 0);
        assert_eq!(
            r("meta-data/instance-id").as_deref(),
            Some("i-0123456789abcdef0")
        );
        assert_eq!(
            r("meta-data/network/interfaces/macs/").as_deref(),
            Some("02:00:00:00:00:01/")
        );
        let mac = "meta-data/network/interfaces/macs/02:00:00:00:00:01";
        assert_eq!(
            r(&format!("{mac}/local-ipv4s")).as_deref(),
            Some("10.0.0.4\n10.0.0.5")
        );
        assert_eq!(r(&format!("{mac}/ipv4-prefix")), None, "no prefixes: 404");
        let listing = r(&format!("{mac}/")).unwrap();
        assert!(listing.lines().any(|l| l == "local-ipv4s"));
        assert!(!listing.lines().any(|l| l == "ipv4-prefix"));
        assert_eq!(
            r("meta-data/network/interfaces/macs/02:00:00:00:00:99/mac"),
            None
        );
        assert_eq!(r("meta-data/nope"), None);
        assert_eq!(r("").as_deref(), Some("dynamic\nmeta-data"));
        assert_eq!(r("meta-data//instance-id"), None);
        assert_eq!(
            r("meta-data/placement/region").as_deref(),
            Some("us-west-2")
        );
        assert_eq!(
            r(&format!("{mac}/vpc-ipv4-cidr-block")).as_deref(),
            Some("10.0.0.0/16")
        );
        assert_eq!(
            r(&format!("{mac}/vpc-ipv4-cidr-blocks")).as_deref(),
            Some("10.0.0.0/16\n100.64.0.0/16")
        );
        assert_eq!(
            r(&format!("{mac}/security-group-ids")).as_deref(),
            Some("sg-1\nsg-2")
        );
        assert_eq!(
            r(&format!("{mac}/security-groups")).as_deref(),
            Some("default\npods")
        );
    }

    #[test]
    fn ipv4_only_shows_no_ipv6_paths() {
        let v = view();
        let r = |p: &str| resolve(&v, p, 0);
        let mac = "meta-data/network/interfaces/macs/02:00:00:00:00:01";
        for p in [
            "meta-data/ipv6".to_string(),
            format!("{mac}/ipv6s"),
            format!("{mac}/ipv6-prefix"),
            format!("{mac}/subnet-ipv6-cidr-blocks"),
            format!("{mac}/vpc-ipv6-cidr-blocks"),
        ] {
            assert_eq!(r(&p), None, "{p}: 404 without IPv6");
        }
        assert!(!r("meta-data").unwrap().contains("ipv6"));
        assert!(!r(&format!("{mac}/")).unwrap().contains("ipv6"));
    }

    #[test]
    fn ipv6_paths_and_listings() {
        let mut v = view();
        v.primary_ipv6 = Some("2001:db8:1:200::4".parse().unwrap());
        let i = &mut v.interfaces[0];
        i.ipv6s = vec![
            "2001:db8:1:200::4".parse().unwrap(),
            "2001:db8:1:200::5".parse().unwrap(),
        ];
        i.ipv6_prefixes = vec!["2001:db8:1:200:1::/80".parse().unwrap()];
        i.subnet_ipv6_cidr = Some("2001:db8:1:200::/64".parse().unwrap());
        i.vpc_ipv6_cidr = Some("2001:db8:1:200::/56".parse().unwrap());
        let r = |p: &str| resolve(&v, p, 0);
        let mac = "meta-data/network/interfaces/macs/02:00:00:00:00:01";
        assert_eq!(r("meta-data/ipv6").as_deref(), Some("2001:db8:1:200::4"));
        assert!(r("meta-data").unwrap().lines().any(|l| l == "ipv6"));
        assert_eq!(
            r(&format!("{mac}/ipv6s")).as_deref(),
            Some("2001:db8:1:200::4\n2001:db8:1:200::5")
        );
        assert_eq!(
            r(&format!("{mac}/ipv6-prefix")).as_deref(),
            Some("2001:db8:1:200:1::/80")
        );
        assert_eq!(
            r(&format!("{mac}/subnet-ipv6-cidr-blocks")).as_deref(),
            Some("2001:db8:1:200::/64")
        );
        assert_eq!(
            r(&format!("{mac}/vpc-ipv6-cidr-blocks")).as_deref(),
            Some("2001:db8:1:200::/56")
        );
        let listing = r(&format!("{mac}/")).unwrap();
        let listed: Vec<&str> = listing.lines().collect();
        for f in [
            "ipv6-prefix",
            "ipv6s",
            "subnet-ipv6-cidr-blocks",
            "vpc-ipv6-cidr-blocks",
        ] {
            assert!(listed.contains(&f), "{f} in {listed:?}");
            assert!(
                r(&format!("{mac}/{f}")).is_some(),
                "every listed field answers: {f}"
            );
        }
        let mut sorted = listed.clone();
        sorted.sort();
        assert_eq!(listed, sorted, "IMDS lists fields in order");
    }

    #[test]
    fn documents_are_json_with_the_expected_keys() {
        let v = view();
        let doc: serde_json::Value =
            serde_json::from_str(&resolve(&v, "dynamic/instance-identity/document", 0).unwrap())
                .unwrap();
        assert_eq!(doc["region"], "us-west-2");
        assert_eq!(doc["privateIp"], "10.0.0.4");
        let creds: serde_json::Value = serde_json::from_str(
            &resolve(&v, &format!("meta-data/iam/security-credentials/{ROLE}"), 0).unwrap(),
        )
        .unwrap();
        assert_eq!(creds["Code"], "Success");
        assert_eq!(creds["Expiration"], "1970-01-01T01:00:00Z");
        assert_eq!(creds["AccessKeyId"].as_str().unwrap().len(), 20);
    }
}
