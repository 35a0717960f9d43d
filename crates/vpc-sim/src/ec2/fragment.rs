//! `GET`/`PUT /_sim/fragment`: subnet fragmentation at runtime ([`crate::model::Fragment`]).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::inject::refused;
use super::json_reply;
use crate::Sim;
use crate::model::{Fragment, FragmentReport};

/// The request's fields, as named in JSON.
const FIELDS: &[&str] = &["subnet", "fragment"];

/// A `PUT /_sim/fragment` body: `{"subnet": "subnet-...", "fragment": "all"|"none"|PCT}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FragmentRequest {
    /// The subnet to fragment.
    pub subnet: String,
    /// Its new level.
    pub fragment: Fragment,
}

/// A request that cannot be used: which field, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{why}", field.as_ref().map(|f| format!("{f}: ")).unwrap_or_default())]
pub struct FragmentError {
    /// The field at fault (its JSON name); `None` when the whole document is wrong.
    pub field: Option<String>,
    /// What is wrong.
    pub why: String,
}

impl FragmentError {
    fn field(name: &str, why: impl Into<String>) -> Self {
        Self {
            field: Some(name.to_string()),
            why: why.into(),
        }
    }

    fn document(why: impl Into<String>) -> Self {
        Self {
            field: None,
            why: why.into(),
        }
    }
}

impl FragmentRequest {
    /// Parses a JSON body. Both fields are required, since a default would silently fragment
    /// or heal the wrong thing; errors name the field and the value.
    pub fn from_json(body: &[u8]) -> Result<Self, FragmentError> {
        let doc: Value = serde_json::from_slice(body)
            .map_err(|e| FragmentError::document(format!("not JSON: {e}")))?;
        let Value::Object(map) = doc else {
            return Err(FragmentError::document(
                "expected a JSON object such as {\"subnet\": \"subnet-...\", \"fragment\": \"all\"}",
            ));
        };
        let (mut subnet, mut fragment) = (None, None);
        for (key, value) in map {
            match key.as_str() {
                "subnet" => match value {
                    Value::String(s) => subnet = Some(s),
                    other => {
                        return Err(FragmentError::field(
                            "subnet",
                            format!("{other} is not a subnet id"),
                        ));
                    }
                },
                "fragment" => {
                    let f = Fragment::deserialize(&value)
                        .map_err(|e| FragmentError::field("fragment", e.to_string()))?;
                    fragment = Some(f);
                }
                _ => {
                    return Err(FragmentError::field(
                        &key,
                        format!("unknown field; known: {}", FIELDS.join(", ")),
                    ));
                }
            }
        }
        let missing = |name: &str| FragmentError::field(name, "missing");
        Ok(Self {
            subnet: subnet.ok_or_else(|| missing("subnet"))?,
            fragment: fragment.ok_or_else(|| missing("fragment"))?,
        })
    }
}

/// `GET /_sim/fragment`'s answer.
#[derive(Debug, Serialize)]
pub struct FragmentReports {
    /// Every subnet, in creation order.
    pub subnets: Vec<FragmentReport>,
}

/// `GET /_sim/fragment`.
pub async fn get_fragment(State(sim): State<Arc<Sim>>) -> Response {
    let subnets = sim.model().fragment_reports();
    json_reply(serde_json::to_string_pretty(&FragmentReports { subnets }))
}

/// `PUT /_sim/fragment`: sets one subnet's level; answers with that subnet's report.
pub async fn put_fragment(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let req = match FragmentRequest::from_json(&body) {
        Ok(r) => r,
        Err(e) => return refused("fragmentation", &e),
    };
    let set = sim.model().set_fragment(&req.subnet, req.fragment);
    match set {
        Ok(report) => {
            tracing::info!(
                subnet = report.subnet,
                fragment = %report.fragment,
                strays = report.strays,
                free_prefixes = report.free_prefixes,
                "subnet fragmentation set"
            );
            json_reply(serde_json::to_string_pretty(&report))
        }
        Err(e) => refused("fragmentation", &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<FragmentRequest, String> {
        FragmentRequest::from_json(json.as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn requests_name_a_subnet_and_a_level() {
        for (json, want) in [
            (
                r#"{"subnet": "subnet-1", "fragment": "all"}"#,
                Fragment::All,
            ),
            (
                r#"{"fragment": "none", "subnet": "subnet-1"}"#,
                Fragment::None,
            ),
            (
                r#"{"subnet": "subnet-1", "fragment": 40}"#,
                Fragment::Percent(40),
            ),
            (
                r#"{"subnet": "subnet-1", "fragment": "40"}"#,
                Fragment::Percent(40),
            ),
        ] {
            let r = parse(json).unwrap();
            assert_eq!(
                (r.subnet.as_str(), r.fragment),
                ("subnet-1", want),
                "{json}"
            );
        }
    }

    #[test]
    fn bad_requests_name_the_problem() {
        for (json, needle) in [
            ("[", "not JSON"),
            ("[1]", "expected a JSON object"),
            (r#"{"fragment": "all"}"#, "subnet: missing"),
            (r#"{"subnet": "subnet-1"}"#, "fragment: missing"),
            (
                r#"{"subnet": 7, "fragment": "all"}"#,
                "subnet: 7 is not a subnet id",
            ),
            (
                r#"{"subnet": "subnet-1", "fragment": "most"}"#,
                "fragment: \"most\" is not a fragmentation level",
            ),
            (
                r#"{"subnet": "subnet-1", "fragment": 150}"#,
                "fragment: 150 is not a fragmentation level",
            ),
            (
                r#"{"subnet": "subnet-1", "fragment": null}"#,
                "fragment: invalid type: null",
            ),
            (
                r#"{"subnet": "subnet-1", "fragment": 5, "pct": 5}"#,
                "pct: unknown field; known: subnet, fragment",
            ),
        ] {
            let e = parse(json).unwrap_err();
            assert!(e.contains(needle), "{json}: {e}");
        }
    }
}
