//! Describe* filtering (EC2 semantics: filters AND, values OR, `*`/`?` wildcards) and
//! MaxResults/NextToken pagination.

use super::error::Ec2Error;
use super::params::{Filter, Params};
use crate::model::Tags;

/// True when `value` matches `pattern` (`*` any run, `?` one character).
pub fn glob(pattern: &str, value: &str) -> bool {
    // Without a wildcard, a pattern matches only itself (and costs no allocation: a filter
    // scan runs this for every value of every item).
    if !pattern.contains(['*', '?']) {
        return pattern == value;
    }
    let (p, v): (Vec<char>, Vec<char>) = (pattern.chars().collect(), value.chars().collect());
    let (mut pi, mut vi) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while vi < v.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == v[vi]) {
            pi += 1;
            vi += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, vi));
            pi += 1;
        } else if let Some((sp, sv)) = star {
            pi = sp + 1;
            vi = sv + 1;
            star = Some((sp, sv + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Refuses filter names outside `allowed` (plus `tag:KEY`, `tag-key`, `tag-value`).
pub fn check_names(filters: &[Filter], allowed: &[&str]) -> Result<(), Ec2Error> {
    for f in filters {
        let ok = allowed.contains(&f.name.as_str())
            || f.name.starts_with("tag:")
            || f.name == "tag-key"
            || f.name == "tag-value";
        if !ok {
            return Err(Ec2Error::invalid(format!(
                "The filter '{}' is invalid",
                f.name
            )));
        }
    }
    Ok(())
}

/// Values of the tag filters for a resource with `tags`; `None` for a non-tag filter name.
pub fn tag_values(name: &str, tags: &Tags) -> Option<Vec<String>> {
    if let Some(key) = name.strip_prefix("tag:") {
        return Some(tags.get(key).cloned().into_iter().collect());
    }
    match name {
        "tag-key" => Some(tags.keys().cloned().collect()),
        "tag-value" => Some(tags.values().cloned().collect()),
        _ => None,
    }
}

/// Whether an item passes every filter; `values(name)` gives the item's values for a name.
pub fn matches(filters: &[Filter], mut values: impl FnMut(&str) -> Vec<String>) -> bool {
    filters.iter().all(|f| {
        let have = values(&f.name);
        f.values.iter().any(|pat| have.iter().any(|v| glob(pat, v)))
    })
}

/// MaxResults / NextToken of one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    /// Items per page (None: everything).
    pub max_results: Option<u32>,
    /// Continue after this key.
    pub after: Option<String>,
}

impl Page {
    /// Reads `MaxResults` (in `min..=max`) and `NextToken`.
    pub fn from_params(p: &Params, min: u32, max: u32) -> Result<Self, Ec2Error> {
        let max_results = p.parsed::<u32>("MaxResults")?;
        if let Some(n) = max_results
            && !(min..=max).contains(&n)
        {
            return Err(Ec2Error::invalid(format!(
                "Value ( {n} ) for parameter maxResults is invalid. Expecting a value between {min} and {max}."
            )));
        }
        let after = p
            .get("NextToken")
            .filter(|t| !t.is_empty())
            .map(|t| {
                decode_token(t).ok_or_else(|| {
                    Ec2Error::new(
                        "InvalidPaginationToken",
                        format!("Invalid pagination token: {t}"),
                    )
                })
            })
            .transpose()?;
        Ok(Self { max_results, after })
    }

    /// Cuts one page out of `items` sorted by `key`; returns it and the next token.
    pub fn apply<T>(
        &self,
        mut items: Vec<T>,
        key: impl Fn(&T) -> String,
    ) -> (Vec<T>, Option<String>) {
        items.sort_by_key(|i| key(i));
        if let Some(after) = &self.after {
            items.retain(|i| key(i) > *after);
        }
        match self.max_results {
            Some(n) if items.len() > n as usize => {
                items.truncate(n as usize);
                let token = items.last().map(|i| encode_token(&key(i)));
                (items, token)
            }
            _ => (items, None),
        }
    }
}

fn encode_token(key: &str) -> String {
    key.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_token(token: &str) -> Option<String> {
    if !token.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_wildcards() {
        assert!(glob("eni-*", "eni-0abc"));
        assert!(glob("*", ""));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a?c", "ac"));
        assert!(glob("*vpc-cni*", "created by vpc-cni ipamd"));
        assert!(!glob("exact", "exactly"));
        assert!(glob("a*b*c", "aXXbYYc"));
    }

    #[test]
    fn filters_and_names_values_or() {
        let f = vec![
            Filter {
                name: "status".into(),
                values: vec!["available".into(), "in-use".into()],
            },
            Filter {
                name: "tag:k".into(),
                values: vec!["v*".into()],
            },
        ];
        let tags: Tags = [("k".to_string(), "value".to_string())].into();
        assert!(matches(&f, |n| tag_values(n, &tags)
            .unwrap_or_else(|| vec!["in-use".into()])));
        let other: Tags = Tags::new();
        assert!(!matches(&f, |n| tag_values(n, &other)
            .unwrap_or_else(|| vec!["in-use".into()])));
        assert!(check_names(&f, &["status"]).is_ok());
        assert_eq!(
            check_names(&f, &["vpc-id"]).unwrap_err().message,
            "The filter 'status' is invalid"
        );
    }

    #[test]
    fn pages_walk_everything_once() {
        let items: Vec<String> = (0..23).map(|i| format!("eni-{i:03}")).collect();
        let mut seen = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..10 {
            let mut pairs = vec![("MaxResults", "5")];
            if let Some(t) = token.as_deref() {
                pairs.push(("NextToken", t));
            }
            let page = Page::from_params(&Params::from_pairs(pairs), 5, 1000).unwrap();
            let (got, next) = page.apply(items.clone(), |s| s.clone());
            assert!(got.len() <= 5);
            seen.extend(got);
            token = next;
            if token.is_none() {
                break;
            }
        }
        assert_eq!(seen, items);
    }

    #[test]
    fn bad_page_parameters() {
        let e = Page::from_params(&Params::from_pairs([("MaxResults", "4")]), 5, 1000).unwrap_err();
        assert_eq!(e.code, "InvalidParameterValue");
        let e = Page::from_params(&Params::from_pairs([("NextToken", "zz")]), 5, 1000).unwrap_err();
        assert_eq!(e.code, "InvalidPaginationToken");
    }
}
