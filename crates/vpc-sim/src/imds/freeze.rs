//! Freezing IMDS: every instance's metadata stays as it was at one moment while EC2 moves on,
//! the stale IMDS that real nodes meet (an address or an ENI EC2 reports that IMDS does not
//! show yet, or one it still shows after EC2 took it away).
//!
//! The model keeps no history (a removal is gone at once, see [`Model::imds_view`]), so the
//! view cannot be recomputed "as of" the freeze later: freezing takes a picture of what each
//! instance's IMDS showed at that moment (lag included) and serves it until unfrozen.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{InstanceView, Model};

/// The request's fields, as named in JSON.
const FIELDS: &[&str] = &["frozen"];

/// A `PUT /_sim/imds` body. `{}` (or `"frozen": null`) unfreezes, as `{}` turns faults off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FreezeRequest {
    /// Whether IMDS should be frozen.
    pub frozen: bool,
}

/// A request that cannot be used: which field, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{why}", field.as_ref().map(|f| format!("{f}: ")).unwrap_or_default())]
pub struct FreezeError {
    /// The field at fault (its JSON name); `None` when the whole document is wrong.
    pub field: Option<String>,
    /// What is wrong.
    pub why: String,
}

impl FreezeRequest {
    /// Parses a JSON body. Errors name the field: an unknown one or one that is not a boolean.
    pub fn from_json(body: &[u8]) -> Result<Self, FreezeError> {
        let doc: Value = serde_json::from_slice(body).map_err(|e| FreezeError {
            field: None,
            why: format!("not JSON: {e}"),
        })?;
        let Value::Object(map) = doc else {
            return Err(FreezeError {
                field: None,
                why: "expected a JSON object such as {\"frozen\": true}".into(),
            });
        };
        let mut req = FreezeRequest::default();
        for (key, value) in map {
            match (key.as_str(), value) {
                (_, Value::Null) => {}
                ("frozen", Value::Bool(b)) => req.frozen = b,
                ("frozen", other) => {
                    return Err(FreezeError {
                        field: Some(key),
                        why: format!("{other} is not true or false"),
                    });
                }
                _ => {
                    return Err(FreezeError {
                        field: Some(key),
                        why: format!("unknown field; known: {}", FIELDS.join(", ")),
                    });
                }
            }
        }
        Ok(req)
    }
}

/// What IMDS showed when it was frozen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frozen {
    /// When, ms since the epoch.
    pub at_ms: u64,
    /// Each instance's view then.
    pub views: BTreeMap<String, InstanceView>,
}

impl Frozen {
    /// The picture of every instance's IMDS at `now_ms` with `lag_ms` of propagation delay.
    pub fn take(model: &Model, now_ms: u64, lag_ms: u64) -> Self {
        let views = model
            .instances()
            .into_iter()
            .filter_map(|i| Some((i.id.clone(), model.imds_view(&i.id, now_ms, lag_ms)?)))
            .collect();
        Self {
            at_ms: now_ms,
            views,
        }
    }
}

/// What `GET /_sim/imds` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreezeReport {
    /// Whether IMDS is frozen.
    pub frozen: bool,
    /// Since when, ms since the epoch; `None` when not frozen.
    pub frozen_at_ms: Option<u64>,
    /// The propagation delay of the unfrozen view (`--imds-lag-ms`).
    pub lag_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(json: &str) -> Result<FreezeRequest, FreezeError> {
        FreezeRequest::from_json(json.as_bytes())
    }

    #[test]
    fn requests_parse() {
        assert!(req(r#"{"frozen": true}"#).unwrap().frozen);
        for json in [r#"{"frozen": false}"#, "{}", r#"{"frozen": null}"#] {
            assert!(!req(json).unwrap().frozen, "{json}");
        }
    }

    #[test]
    fn bad_requests_name_the_problem() {
        for (json, needle) in [
            (
                r#"{"frozen": "yes"}"#,
                "frozen: \"yes\" is not true or false",
            ),
            (r#"{"frozen": 1}"#, "frozen: 1 is not true or false"),
            (
                r#"{"freeze": true}"#,
                "freeze: unknown field; known: frozen",
            ),
            ("true", "expected a JSON object"),
            ("{", "not JSON"),
        ] {
            let e = req(json).unwrap_err().to_string();
            assert!(e.contains(needle), "{json}: {e}");
        }
    }
}
