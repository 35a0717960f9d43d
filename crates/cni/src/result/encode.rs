//! `CniResult` -> JSON in one version's shape (Go `omitempty` rules).

use serde_json::{Map, Value};

use super::{CniResult, Dns, Interface, IpConfig, Route};
use crate::version::CniVersion;

pub(super) fn encode(result: &CniResult, version: CniVersion) -> Value {
    let mut obj = Map::new();
    obj.insert("cniVersion".into(), Value::from(version.as_str()));
    if !result.interfaces.is_empty() {
        let list = result.interfaces.iter().map(|i| interface(i, version));
        obj.insert("interfaces".into(), Value::Array(list.collect()));
    }
    if !result.ips.is_empty() {
        let list = result.ips.iter().map(|ip| ip_config(ip, version));
        obj.insert("ips".into(), Value::Array(list.collect()));
    }
    if !result.routes.is_empty() {
        obj.insert(
            "routes".into(),
            Value::Array(result.routes.iter().map(route).collect()),
        );
    }
    if !result.dns.is_empty() {
        obj.insert("dns".into(), dns(&result.dns));
    }
    Value::Object(obj)
}

fn put_opt_str(obj: &mut Map<String, Value>, key: &str, value: Option<&str>) {
    if let Some(v) = value.filter(|v| !v.is_empty()) {
        obj.insert(key.into(), Value::from(v));
    }
}

fn interface(iface: &Interface, version: CniVersion) -> Value {
    let mut obj = Map::new();
    obj.insert("name".into(), Value::from(iface.name.as_str()));
    put_opt_str(&mut obj, "mac", iface.mac.as_deref());
    if version.has_interface_mtu()
        && let Some(mtu) = iface.mtu
    {
        obj.insert("mtu".into(), Value::from(mtu));
    }
    put_opt_str(&mut obj, "sandbox", iface.sandbox.as_deref());
    Value::Object(obj)
}

fn ip_config(ip: &IpConfig, version: CniVersion) -> Value {
    let mut obj = Map::new();
    if version.has_ip_version_field() {
        let family = if ip.address.is_ipv4() { "4" } else { "6" };
        obj.insert("version".into(), Value::from(family));
    }
    if let Some(index) = ip.interface {
        obj.insert("interface".into(), Value::from(index));
    }
    obj.insert("address".into(), Value::from(ip.address.to_string()));
    if let Some(gw) = ip.gateway {
        obj.insert("gateway".into(), Value::from(gw.to_string()));
    }
    Value::Object(obj)
}

fn route(route: &Route) -> Value {
    let mut obj = Map::new();
    obj.insert("dst".into(), Value::from(route.dst.to_string()));
    if let Some(gw) = route.gw {
        obj.insert("gw".into(), Value::from(gw.to_string()));
    }
    Value::Object(obj)
}

fn dns(dns: &Dns) -> Value {
    let mut obj = Map::new();
    if !dns.nameservers.is_empty() {
        obj.insert("nameservers".into(), Value::from(dns.nameservers.clone()));
    }
    put_opt_str(&mut obj, "domain", dns.domain.as_deref());
    if !dns.search.is_empty() {
        obj.insert("search".into(), Value::from(dns.search.clone()));
    }
    if !dns.options.is_empty() {
        obj.insert("options".into(), Value::from(dns.options.clone()));
    }
    Value::Object(obj)
}
