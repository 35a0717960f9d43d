//! Small readers over `serde_json::Value` that report the offending field by path.
//!
//! JSON `null` counts as absent everywhere, as in Go's decoder. Errors are plain messages; the
//! caller decides the CNI code.

use std::net::IpAddr;
use std::str::FromStr;

use ipnetwork::IpNetwork;
use serde_json::{Map, Value};

/// A JSON object.
pub(crate) type Object = Map<String, Value>;

/// A short, bounded rendering of a value for error messages.
pub(crate) fn describe(v: &Value) -> String {
    const MAX: usize = 60;
    let text = v.to_string();
    if text.len() <= MAX {
        return text;
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// `obj[key]`, with `null` mapped to `None`.
pub(crate) fn field<'a>(obj: &'a Object, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

pub(crate) fn as_object<'a>(v: &'a Value, path: &str) -> Result<&'a Object, String> {
    v.as_object()
        .ok_or_else(|| format!("{path} must be a JSON object, got {}", describe(v)))
}

pub(crate) fn opt_str<'a>(
    obj: &'a Object,
    key: &str,
    path: &str,
) -> Result<Option<&'a str>, String> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!(
            "{path}{key} must be a string, got {}",
            describe(other)
        )),
    }
}

/// A string field where `""` also counts as absent (Go's `omitempty` round trip).
pub(crate) fn opt_nonempty_string(
    obj: &Object,
    key: &str,
    path: &str,
) -> Result<Option<String>, String> {
    Ok(opt_str(obj, key, path)?
        .filter(|s| !s.is_empty())
        .map(str::to_owned))
}

pub(crate) fn opt_array<'a>(obj: &'a Object, key: &str, path: &str) -> Result<&'a [Value], String> {
    match field(obj, key) {
        None => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(format!(
            "{path}{key} must be an array, got {}",
            describe(other)
        )),
    }
}

pub(crate) fn string_list(obj: &Object, key: &str, path: &str) -> Result<Vec<String>, String> {
    opt_array(obj, key, path)?
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{path}{key}[{i}] must be a string, got {}", describe(v)))
        })
        .collect()
}

/// A non-negative integer that fits `T`.
pub(crate) fn opt_uint<T: TryFrom<u64>>(
    obj: &Object,
    key: &str,
    path: &str,
) -> Result<Option<T>, String> {
    let Some(v) = field(obj, key) else {
        return Ok(None);
    };
    v.as_u64()
        .and_then(|n| T::try_from(n).ok())
        .map(Some)
        .ok_or_else(|| {
            format!(
                "{path}{key} must be a non-negative integer in range, got {}",
                describe(v)
            )
        })
}

/// CIDR notation as Go's `net.ParseCIDR` wants it: `<ip>/<decimal prefix>`, the host bits
/// kept (so `10.0.1.5/24` stays `10.0.1.5/24`).
pub(crate) fn parse_cidr(s: &str) -> Option<IpNetwork> {
    let (_, prefix) = s.split_once('/')?;
    if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    IpNetwork::from_str(s).ok()
}

pub(crate) fn req_cidr(obj: &Object, key: &str, path: &str) -> Result<IpNetwork, String> {
    let s = opt_str(obj, key, path)?.ok_or_else(|| format!("{path}{key} is missing"))?;
    parse_cidr(s).ok_or_else(|| format!("{path}{key} {s:?} is not a CIDR such as 10.0.0.5/32"))
}

pub(crate) fn opt_ip(obj: &Object, key: &str, path: &str) -> Result<Option<IpAddr>, String> {
    match opt_str(obj, key, path)? {
        None | Some("") => Ok(None),
        Some(s) => IpAddr::from_str(s)
            .map(Some)
            .map_err(|_| format!("{path}{key} {s:?} is not an IP address")),
    }
}
