//! JSON of any supported version -> `CniResult`. Errors are messages naming the field path.

use serde_json::Value;

use super::{CniResult, Dns, Interface, IpConfig, Route};
use crate::json::{
    as_object, field, opt_array, opt_ip, opt_nonempty_string, opt_str, opt_uint, req_cidr,
    string_list,
};

pub(super) fn decode(value: &Value) -> Result<CniResult, String> {
    let obj = as_object(value, "result")?;
    // Only the type is checked: the shape is read tolerantly whatever version it claims.
    opt_str(obj, "cniVersion", "")?;

    let interfaces = opt_array(obj, "interfaces", "")?
        .iter()
        .enumerate()
        .map(|(i, v)| interface(v, &format!("interfaces[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let ips = opt_array(obj, "ips", "")?
        .iter()
        .enumerate()
        .map(|(i, v)| ip_config(v, &format!("ips[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let routes = opt_array(obj, "routes", "")?
        .iter()
        .enumerate()
        .map(|(i, v)| route(v, &format!("routes[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let dns = match field(obj, "dns") {
        None => Dns::default(),
        Some(v) => dns(v)?,
    };
    Ok(CniResult {
        interfaces,
        ips,
        routes,
        dns,
    })
}

fn interface(v: &Value, path: &str) -> Result<Interface, String> {
    let obj = as_object(v, path)?;
    let path = format!("{path}.");
    Ok(Interface {
        name: opt_str(obj, "name", &path)?.unwrap_or("").to_owned(),
        mac: opt_nonempty_string(obj, "mac", &path)?,
        mtu: opt_uint(obj, "mtu", &path)?,
        sandbox: opt_nonempty_string(obj, "sandbox", &path)?,
    })
}

fn ip_config(v: &Value, path: &str) -> Result<IpConfig, String> {
    let obj = as_object(v, path)?;
    let path = format!("{path}.");
    // `version` (0.x only) is ignored: the address already says which family it is.
    Ok(IpConfig {
        address: req_cidr(obj, "address", &path)?,
        gateway: opt_ip(obj, "gateway", &path)?,
        interface: opt_uint(obj, "interface", &path)?,
    })
}

fn route(v: &Value, path: &str) -> Result<Route, String> {
    let obj = as_object(v, path)?;
    let path = format!("{path}.");
    Ok(Route {
        dst: req_cidr(obj, "dst", &path)?,
        gw: opt_ip(obj, "gw", &path)?,
    })
}

fn dns(v: &Value) -> Result<Dns, String> {
    let obj = as_object(v, "dns")?;
    Ok(Dns {
        nameservers: string_list(obj, "nameservers", "dns.")?,
        domain: opt_nonempty_string(obj, "domain", "dns.")?,
        search: string_list(obj, "search", "dns.")?,
        options: string_list(obj, "options", "dns.")?,
    })
}
