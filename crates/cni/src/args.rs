//! `CNI_ARGS` (`K1=V1;K2=V2`) as Go's `types.LoadArgs` parses it into Kubernetes pod args.

use crate::error::CniError;

/// The Kubernetes keys runtimes put in `CNI_ARGS`. A key that was present with an empty
/// value is `Some("")`; an absent key is `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct K8sArgs {
    /// `K8S_POD_NAMESPACE`.
    pub namespace: Option<String>,
    /// `K8S_POD_NAME`.
    pub name: Option<String>,
    /// `K8S_POD_INFRA_CONTAINER_ID` (the sandbox container).
    pub infra_container_id: Option<String>,
    /// `K8S_POD_UID`.
    pub uid: Option<String>,
    /// `IgnoreUnknown` was set to a true value.
    pub ignore_unknown: bool,
    /// Other pairs, in order; only possible when `ignore_unknown` is set.
    pub other: Vec<(String, String)>,
}

/// Parses `CNI_ARGS` with `types.LoadArgs` semantics, for the AWS plugin's `K8sArgs` keys.
///
/// - Empty input gives all-`None`.
/// - Pairs are split on `;`; each must split on `=` into exactly two parts (so a value may not
///   contain `=`, and an empty pair such as a trailing `;` is rejected), as in Go.
/// - Keys are case-sensitive; a repeated key keeps its last value.
/// - `IgnoreUnknown` takes `1`/`true`/`0`/`false` in any case (Go's `UnmarshallableBool`), and
///   also `t`/`f` (strconv's spellings); any other value is an error. It applies wherever it
///   appears in the list, because unknown keys are judged after all pairs are read.
///
/// Errors are code 4 ([`CniError::INVALID_ENV`]) and name `CNI_ARGS` and the offending pair(s).
/// Go's `LoadArgs` returns a plain error, which skel reports as code 999; we use 4 because the
/// problem is an invalid environment variable, which is what code 4 means in the spec.
pub fn parse_cni_args(args: &str) -> Result<K8sArgs, CniError> {
    let mut out = K8sArgs::default();
    if args.is_empty() {
        return Ok(out);
    }
    let mut unknown: Vec<(String, String)> = Vec::new();
    for pair in args.split(';') {
        let mut parts = pair.split('=');
        let (Some(key), Some(value), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(CniError::invalid_env(format!(
                "invalid CNI_ARGS pair {pair:?}: expected exactly one '=' (KEY=VALUE)"
            )));
        };
        let slot = match key {
            "K8S_POD_NAMESPACE" => &mut out.namespace,
            "K8S_POD_NAME" => &mut out.name,
            "K8S_POD_INFRA_CONTAINER_ID" => &mut out.infra_container_id,
            "K8S_POD_UID" => &mut out.uid,
            "IgnoreUnknown" => {
                out.ignore_unknown = parse_bool(value).ok_or_else(|| {
                    CniError::invalid_env(format!(
                        "invalid CNI_ARGS pair {pair:?}: IgnoreUnknown must be 1, true, 0 or false"
                    ))
                })?;
                continue;
            }
            _ => {
                unknown.push((key.to_owned(), value.to_owned()));
                continue;
            }
        };
        *slot = Some(value.to_owned());
    }
    if !unknown.is_empty() && !out.ignore_unknown {
        let names: Vec<String> = unknown.iter().map(|(k, v)| format!("{k}={v}")).collect();
        return Err(CniError::invalid_env(format!(
            "unknown CNI_ARGS {names:?} (set IgnoreUnknown=1 to allow them)"
        )));
    }
    out.other = unknown;
    Ok(out)
}

fn parse_bool(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "true" | "t" => Some(true),
        "0" | "false" | "f" => Some(false),
        _ => None,
    }
}
