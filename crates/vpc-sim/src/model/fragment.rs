//! Subnet fragmentation: addresses held by someone outside the simulated ENIs (another
//! account's endpoint, a load balancer, a NAT gateway), scattered so that /28 blocks stop being
//! wholly free. EC2 then refuses prefix delegation (`InsufficientCidrBlocks`) while single
//! addresses are still handed out, the state prefix-mode clients must cope with.

use std::fmt;
use std::str::FromStr;

use ipnetwork::Ipv4Network;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::{Model, ModelError};

/// How many of a subnet's /28 blocks hold one address owned by someone else.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fragment {
    /// No stray address.
    #[default]
    None,
    /// One in every block that could otherwise hold a prefix.
    All,
    /// One in this percentage (0..=100) of those blocks, evenly spread.
    Percent(u8),
}

/// A fragmentation level that is not `none`, `all` or a percentage from 0 to 100.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value} is not a fragmentation level: expected none, all or a percentage from 0 to 100")]
pub struct BadFragment {
    /// The value given, as written (strings quoted).
    pub value: String,
}

impl Fragment {
    /// A percentage, if it is one.
    pub fn percent(p: u64) -> Result<Self, BadFragment> {
        match u8::try_from(p) {
            Ok(p) if p <= 100 => Ok(Self::Percent(p)),
            _ => Err(BadFragment {
                value: p.to_string(),
            }),
        }
    }

    /// Whether the `i`-th block able to hold a prefix (counting from 0) gets a stray. For a
    /// percentage, exactly round-down of p% of the blocks are picked, spread evenly over the
    /// subnet rather than bunched at its start, so the free blocks left are scattered too.
    pub fn selects(self, i: u64) -> bool {
        match self {
            Self::None => false,
            Self::All => true,
            Self::Percent(p) => {
                let p = u64::from(p);
                (i + 1) * p / 100 > i * p / 100
            }
        }
    }
}

impl FromStr for Fragment {
    type Err = BadFragment;

    fn from_str(s: &str) -> Result<Self, BadFragment> {
        let bad = || BadFragment {
            value: format!("{s:?}"),
        };
        match s {
            "none" => Ok(Self::None),
            "all" => Ok(Self::All),
            _ if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                let n: u64 = s.parse().map_err(|_| bad())?;
                Self::percent(n).map_err(|_| bad())
            }
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for Fragment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("none"),
            Self::All => f.write_str("all"),
            Self::Percent(p) => write!(f, "{p}"),
        }
    }
}

impl Serialize for Fragment {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Percent(p) => s.serialize_u8(*p),
            other => s.serialize_str(&other.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for Fragment {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(FragmentVisitor)
    }
}

struct FragmentVisitor;

impl Visitor<'_> for FragmentVisitor {
    type Value = Fragment;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"none\", \"all\" or a percentage from 0 to 100")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Fragment, E> {
        v.parse().map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Fragment, E> {
        Fragment::percent(v).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Fragment, E> {
        let bad = || BadFragment {
            value: v.to_string(),
        };
        let n = u64::try_from(v).map_err(|_| E::custom(bad()))?;
        Fragment::percent(n).map_err(E::custom)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Fragment, E> {
        // A whole number written as 50.0 is still a percentage; 12.5 is not.
        if v.fract() == 0.0 && (0.0..=100.0).contains(&v) {
            return Ok(Fragment::Percent(v as u8));
        }
        Err(E::custom(BadFragment {
            value: v.to_string(),
        }))
    }
}

/// A subnet's fragmentation and what it leaves for prefixes (`/_sim/fragment`'s answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FragmentReport {
    /// `subnet-...`.
    pub subnet: String,
    /// Its CIDR.
    pub cidr: Ipv4Network,
    /// The level in force.
    pub fragment: Fragment,
    /// Addresses held by someone outside the model's ENIs.
    pub strays: u32,
    /// Free addresses, as DescribeSubnets counts them (strays are not free).
    pub available_ip_address_count: u32,
    /// Aligned /28 blocks wholly free: the prefixes that could still be delegated.
    pub free_prefixes: u32,
}

impl Model {
    /// Sets `subnet_id`'s fragmentation: the old strays go, then new ones are placed on free
    /// addresses as `f` says. Addresses held by ENIs are never touched, so a block partly used
    /// by an ENI may still get a stray, and one with no free address gets none.
    pub fn set_fragment(
        &mut self,
        subnet_id: &str,
        f: Fragment,
    ) -> Result<FragmentReport, ModelError> {
        self.subnet(subnet_id)?;
        if let Some(s) = self.subnets.get_mut(subnet_id) {
            s.space.set_fragment(f);
        }
        self.fragment_report(subnet_id)
    }

    /// `subnet_id`'s fragmentation.
    pub fn fragment_report(&self, subnet_id: &str) -> Result<FragmentReport, ModelError> {
        let s = self.subnet(subnet_id)?;
        Ok(FragmentReport {
            subnet: s.id.clone(),
            cidr: s.cidr,
            fragment: s.space.fragment(),
            strays: s.space.strays(),
            available_ip_address_count: s.space.available(),
            free_prefixes: s.space.free_prefixes(),
        })
    }

    /// Every subnet's fragmentation, in creation order.
    pub fn fragment_reports(&self) -> Vec<FragmentReport> {
        self.subnets()
            .into_iter()
            .filter_map(|s| self.fragment_report(&s.id).ok())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_from_words_and_percentages() {
        for (text, want) in [
            ("none", Fragment::None),
            ("all", Fragment::All),
            ("0", Fragment::Percent(0)),
            ("37", Fragment::Percent(37)),
            ("100", Fragment::Percent(100)),
        ] {
            assert_eq!(text.parse::<Fragment>(), Ok(want), "{text}");
            assert_eq!(want.to_string(), text);
        }
        for text in [
            "",
            "some",
            "101",
            "-1",
            "+5",
            "5%",
            "1e2",
            "ALL",
            "99999999999999999999",
        ] {
            let e = text.parse::<Fragment>().unwrap_err();
            assert_eq!(e.value, format!("{text:?}"));
            assert!(
                e.to_string()
                    .ends_with("expected none, all or a percentage from 0 to 100"),
                "{e}"
            );
        }
    }

    #[test]
    fn json_takes_words_numbers_and_numeric_strings() {
        let de = |j: &str| serde_json::from_str::<Fragment>(j).map_err(|e| e.to_string());
        assert_eq!(de(r#""all""#), Ok(Fragment::All));
        assert_eq!(de(r#""none""#), Ok(Fragment::None));
        assert_eq!(de("25"), Ok(Fragment::Percent(25)));
        assert_eq!(de("25.0"), Ok(Fragment::Percent(25)));
        assert_eq!(de(r#""25""#), Ok(Fragment::Percent(25)));
        for (json, named) in [
            ("101", "101 is not"),
            ("-3", "-3 is not"),
            ("12.5", "12.5 is not"),
            (r#""half""#, r#""half" is not"#),
        ] {
            let e = de(json).unwrap_err();
            assert!(e.contains(named), "{json}: {e}");
        }
        assert!(de("true").unwrap_err().contains("\"none\", \"all\""));
        let out = serde_json::to_string(&[Fragment::None, Fragment::All, Fragment::Percent(7)]);
        assert_eq!(out.unwrap(), r#"["none","all",7]"#);
    }

    #[test]
    fn percentages_pick_round_down_evenly_spread() {
        let picked = |f: Fragment, n: u64| (0..n).filter(|i| f.selects(*i)).collect::<Vec<_>>();
        assert_eq!(picked(Fragment::Percent(50), 6), [1, 3, 5]);
        assert_eq!(picked(Fragment::Percent(25), 8), [3, 7]);
        assert_eq!(picked(Fragment::Percent(33), 10), [3, 6, 9]);
        assert_eq!(picked(Fragment::Percent(0), 10), Vec::<u64>::new());
        assert_eq!(picked(Fragment::Percent(100), 4), [0, 1, 2, 3]);
        assert_eq!(picked(Fragment::All, 3), [0, 1, 2]);
        assert!(picked(Fragment::None, 5).is_empty());
        for p in 0..=100u8 {
            let n = 14;
            let got = picked(Fragment::Percent(p), n).len() as u64;
            assert_eq!(got, n * u64::from(p) / 100, "{p}%");
        }
    }
}
