//! EC2 Query parameters: a flat `Key=Value` map with `Foo.N` lists and `Filter.N.Value.M` nests.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use super::error::Ec2Error;
use crate::model::Tags;

/// One `Filter.N`: a name and the values any of which may match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// e.g. `attachment.instance-id` or `tag:Name`.
    pub name: String,
    /// Patterns (`*` and `?` wildcards allowed).
    pub values: Vec<String>,
}

/// A `TagSpecification.N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagSpec {
    /// e.g. `network-interface`.
    pub resource_type: String,
    /// Its tags.
    pub tags: Tags,
}

/// The decoded parameters of one request.
#[derive(Debug, Clone, Default)]
pub struct Params {
    map: BTreeMap<String, String>,
}

impl Params {
    /// Decodes an `application/x-www-form-urlencoded` body.
    pub fn parse(body: &[u8]) -> Self {
        Self {
            map: form_urlencoded::parse(body).into_owned().collect(),
        }
    }

    /// Builds from pairs (tests).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self {
            map: pairs
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// A parameter's value.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.map.get(key).map(String::as_str)
    }

    /// A parameter that must be present and non-empty.
    pub fn required(&self, key: &str) -> Result<&str, Ec2Error> {
        self.get(key)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Ec2Error::missing(key))
    }

    /// Whether any key is `prefix` or starts with `prefix.`.
    pub fn has(&self, prefix: &str) -> bool {
        self.map
            .keys()
            .any(|k| k == prefix || k.strip_prefix(prefix).is_some_and(|r| r.starts_with('.')))
    }

    /// A parsed optional parameter; a value that does not parse is `InvalidParameterValue`.
    pub fn parsed<T: FromStr>(&self, key: &str) -> Result<Option<T>, Ec2Error> {
        self.get(key)
            .map(|v| v.parse().map_err(|_| Ec2Error::bad_value(key, v)))
            .transpose()
    }

    /// An optional boolean (`true` / `false`, any case).
    pub fn bool(&self, key: &str) -> Result<Option<bool>, Ec2Error> {
        self.get(key)
            .map(|v| match v.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(Ec2Error::bad_value(key, v)),
            })
            .transpose()
    }

    /// The indices N (ascending) for which some key `prefix.N` or `prefix.N.…` exists.
    pub fn indices(&self, prefix: &str) -> BTreeSet<u32> {
        let lead = format!("{prefix}.");
        self.map
            .range(lead.clone()..)
            .take_while(|(k, _)| k.starts_with(&lead))
            .filter_map(|(k, _)| k[lead.len()..].split('.').next()?.parse().ok())
            .collect()
    }

    /// The values of `prefix.1`, `prefix.2`, … in index order.
    pub fn list(&self, prefix: &str) -> Vec<String> {
        self.indices(prefix)
            .into_iter()
            .filter_map(|n| self.get(&format!("{prefix}.{n}")).map(str::to_string))
            .collect()
    }

    /// [`Params::list`] with every value parsed.
    pub fn parsed_list<T: FromStr>(&self, prefix: &str) -> Result<Vec<T>, Ec2Error> {
        self.indices(prefix)
            .into_iter()
            .filter_map(|n| {
                let key = format!("{prefix}.{n}");
                self.get(&key).map(|v| (key, v))
            })
            .map(|(key, v)| v.parse().map_err(|_| Ec2Error::bad_value(&key, v)))
            .collect()
    }

    /// `Filter.N.Name` + `Filter.N.Value.M`.
    pub fn filters(&self) -> Result<Vec<Filter>, Ec2Error> {
        self.indices("Filter")
            .into_iter()
            .map(|n| {
                let name = self.required(&format!("Filter.{n}.Name"))?.to_string();
                let values = self.list(&format!("Filter.{n}.Value"));
                Ok(Filter { name, values })
            })
            .collect()
    }

    /// `<prefix>.N.Key` + `<prefix>.N.Value` (value defaults to empty, as in EC2).
    pub fn tags(&self, prefix: &str) -> Result<Tags, Ec2Error> {
        self.indices(prefix)
            .into_iter()
            .map(|n| {
                let key = self.required(&format!("{prefix}.{n}.Key"))?.to_string();
                let value = self
                    .get(&format!("{prefix}.{n}.Value"))
                    .unwrap_or_default()
                    .to_string();
                Ok((key, value))
            })
            .collect()
    }

    /// The tags of every `TagSpecification.N`, which must all be for `resource_type` (the one
    /// kind of resource the call creates).
    pub fn tags_for(&self, resource_type: &str) -> Result<Tags, Ec2Error> {
        let mut tags = Tags::new();
        for spec in self.tag_specs()? {
            if spec.resource_type != resource_type {
                return Err(Ec2Error::invalid(format!(
                    "'{}' is not a valid taggable resource type for this operation.",
                    spec.resource_type
                )));
            }
            tags.extend(spec.tags);
        }
        Ok(tags)
    }

    /// `TagSpecification.N.ResourceType` + `TagSpecification.N.Tag.M.Key/Value`.
    pub fn tag_specs(&self) -> Result<Vec<TagSpec>, Ec2Error> {
        self.indices("TagSpecification")
            .into_iter()
            .map(|n| {
                let p = format!("TagSpecification.{n}");
                Ok(TagSpec {
                    resource_type: self.required(&format!("{p}.ResourceType"))?.to_string(),
                    tags: self.tags(&format!("{p}.Tag"))?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_lists_in_numeric_order() {
        let p = Params::parse(
            b"Action=X&NetworkInterfaceId.10=eni-c&NetworkInterfaceId.2=eni-b&NetworkInterfaceId.1=eni-a&NetworkInterfaceIdX=no",
        );
        assert_eq!(
            p.list("NetworkInterfaceId"),
            vec!["eni-a", "eni-b", "eni-c"]
        );
        assert_eq!(p.get("Action"), Some("X"));
        assert!(p.has("NetworkInterfaceId"));
        assert!(!p.has("NetworkInterface"));
    }

    #[test]
    fn decodes_filters_tags_and_specs() {
        let p = Params::parse(
            b"Filter.1.Name=tag%3Acluster.k8s.amazonaws.com%2Fname&Filter.1.Value.1=a&Filter.1.Value.2=b&Filter.2.Name=status&Filter.2.Value.1=available\
&TagSpecification.1.ResourceType=network-interface&TagSpecification.1.Tag.1.Key=node&TagSpecification.1.Tag.1.Value=i-1&TagSpecification.1.Tag.2.Key=empty",
        );
        let f = p.filters().unwrap();
        assert_eq!(f[0].name, "tag:cluster.k8s.amazonaws.com/name");
        assert_eq!(f[0].values, vec!["a", "b"]);
        assert_eq!(f[1].values, vec!["available"]);
        let specs = p.tag_specs().unwrap();
        assert_eq!(specs[0].resource_type, "network-interface");
        assert_eq!(specs[0].tags.get("node").map(String::as_str), Some("i-1"));
        assert_eq!(specs[0].tags.get("empty").map(String::as_str), Some(""));
    }

    #[test]
    fn bad_values_and_missing_names_are_errors() {
        let p = Params::from_pairs([
            ("DeviceIndex", "one"),
            ("Force", "yes"),
            ("Filter.1.Value.1", "x"),
        ]);
        assert_eq!(
            p.parsed::<u32>("DeviceIndex").unwrap_err().code,
            "InvalidParameterValue"
        );
        assert_eq!(p.bool("Force").unwrap_err().code, "InvalidParameterValue");
        let e = p.filters().unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            (
                "MissingParameter",
                "The request must contain the parameter Filter.1.Name"
            )
        );
        assert_eq!(p.required("Nope").unwrap_err().code, "MissingParameter");
    }
}
