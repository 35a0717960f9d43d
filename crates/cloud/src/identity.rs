use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnetwork::{Ipv4Network, Ipv6Network};

use crate::{CloudError, CloudErrorKind, Imds};

/// Who this node is, from IMDS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeIdentity {
    /// `i-...`.
    pub instance_id: String,
    /// e.g. `t3.medium`.
    pub instance_type: String,
    /// Region.
    pub region: String,
    /// Availability zone.
    pub availability_zone: String,
    /// The primary ENI's primary address.
    pub primary_ip: Ipv4Addr,
    /// The node's IPv6 address (`meta-data/ipv6`); `None` on an instance without one.
    pub primary_ipv6: Option<Ipv6Addr>,
    /// The VPC.
    pub vpc_id: String,
    /// The VPC's IPv4 CIDRs.
    pub vpc_cidrs: Vec<Ipv4Network>,
    /// The primary ENI.
    pub primary_eni: EniMetadata,
}

/// One attached ENI as IMDS shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EniMetadata {
    /// MAC, lower case.
    pub mac: String,
    /// `eni-...`.
    pub eni_id: String,
    /// Device number (0 = primary).
    pub device_number: u32,
    /// Subnet.
    pub subnet_id: String,
    /// Subnet CIDR.
    pub subnet_cidr: Ipv4Network,
    /// IPv4 addresses, the ENI's primary first.
    pub local_ipv4s: Vec<Ipv4Addr>,
    /// IPv6 addresses (`ipv6s`); empty when the ENI has none.
    pub ipv6s: Vec<Ipv6Addr>,
    /// Delegated /80 IPv6 prefixes (`ipv6-prefix`); empty when the ENI has none.
    pub ipv6_prefixes: Vec<Ipv6Network>,
}

impl EniMetadata {
    /// The ENI's primary address (IMDS lists it first).
    pub fn primary_ip(&self) -> Option<Ipv4Addr> {
        self.local_ipv4s.first().copied()
    }

    /// Its secondary addresses.
    pub fn secondary_ips(&self) -> &[Ipv4Addr] {
        self.local_ipv4s.get(1..).unwrap_or(&[])
    }
}

async fn required<I: Imds>(imds: &I, path: &str) -> Result<String, CloudError> {
    match imds.get(path).await? {
        Some(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        _ => Err(CloudError::new(
            format!("IMDS {path}"),
            CloudErrorKind::NotFound,
            "missing from instance metadata",
        )),
    }
}

/// The value at `path` parsed, or `None` when IMDS has no such path (or an empty one).
async fn optional<I: Imds, T: FromStr>(imds: &I, path: &str) -> Result<Option<T>, CloudError> {
    match imds.get(path).await? {
        Some(v) if !v.trim().is_empty() => parse(path, &v).map(Some),
        _ => Ok(None),
    }
}

/// The lines at `path` parsed; a missing path (404) is none, as for an ENI without prefixes.
async fn optional_lines<I: Imds, T: FromStr>(imds: &I, path: &str) -> Result<Vec<T>, CloudError> {
    lines(path, &imds.get(path).await?.unwrap_or_default())
}

fn parse<T: FromStr>(path: &str, value: &str) -> Result<T, CloudError> {
    value.trim().parse().map_err(|_| {
        CloudError::new(
            format!("IMDS {path}"),
            CloudErrorKind::Invalid,
            format!("unexpected value {value:?}"),
        )
    })
}

fn lines<T: FromStr>(path: &str, value: &str) -> Result<Vec<T>, CloudError> {
    value
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| parse(path, l))
        .collect()
}

/// Reads what ipamd needs to know about the node before anything else.
pub async fn node_identity<I: Imds>(imds: &I) -> Result<NodeIdentity, CloudError> {
    let instance_id = required(imds, "meta-data/instance-id").await?;
    let instance_type = required(imds, "meta-data/instance-type").await?;
    let availability_zone = required(imds, "meta-data/placement/availability-zone").await?;
    // placement/region is newer than the AZ path; derive it from the AZ where it is missing.
    let region = match imds.get("meta-data/placement/region").await? {
        Some(r) if !r.trim().is_empty() => r.trim().to_string(),
        _ => availability_zone
            .trim_end_matches(|c: char| c.is_ascii_lowercase())
            .to_string(),
    };
    let primary_ip = parse(
        "meta-data/local-ipv4",
        &required(imds, "meta-data/local-ipv4").await?,
    )?;
    // IMDS leaves the path out (404) on an instance without an IPv6 address.
    let primary_ipv6 = optional(imds, "meta-data/ipv6").await?;
    let mac = required(imds, "meta-data/mac").await?.to_ascii_lowercase();
    let primary_eni = eni_metadata(imds, &mac).await?;
    let base = format!("{MACS}{mac}");
    let vpc_id = required(imds, &format!("{base}/vpc-id")).await?;
    let cidrs_path = format!("{base}/vpc-ipv4-cidr-blocks");
    let vpc_cidrs = match imds.get(&cidrs_path).await? {
        Some(v) => lines(&cidrs_path, &v)?,
        None => {
            let path = format!("{base}/vpc-ipv4-cidr-block");
            vec![parse(&path, &required(imds, &path).await?)?]
        }
    };
    Ok(NodeIdentity {
        instance_id,
        instance_type,
        region,
        availability_zone,
        primary_ip,
        primary_ipv6,
        vpc_id,
        vpc_cidrs,
        primary_eni,
    })
}

const MACS: &str = "meta-data/network/interfaces/macs/";

/// An attached ENI's addresses as IMDS shows them: what reconciliation compares with the pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EniAddresses {
    /// Secondary addresses (the ENI's own address left out).
    pub secondary_ips: Vec<Ipv4Addr>,
    /// Delegated /28 prefixes.
    pub prefixes: Vec<Ipv4Network>,
    /// IPv6 addresses (`ipv6s`), all of them: IMDS marks none as the ENI's own.
    pub ipv6s: Vec<Ipv6Addr>,
    /// Delegated /80 IPv6 prefixes (`ipv6-prefix`).
    pub ipv6_prefixes: Vec<Ipv6Network>,
}

/// The MACs of the instance's attached ENIs, lower case.
pub async fn attached_macs<I: Imds>(imds: &I) -> Result<Vec<String>, CloudError> {
    Ok(imds
        .get(MACS)
        .await?
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().trim_end_matches('/').to_ascii_lowercase())
        .filter(|l| !l.is_empty())
        .collect())
}

/// The id of the ENI with `mac`, or `None` when IMDS no longer lists it (detached meanwhile).
pub async fn eni_id<I: Imds>(imds: &I, mac: &str) -> Result<Option<String>, CloudError> {
    let id = imds.get(&format!("{MACS}{mac}/interface-id")).await?;
    Ok(id
        .map(|id| id.trim().to_string())
        .filter(|id| !id.is_empty()))
}

/// The secondary addresses and prefixes of the ENI with `mac`; an unreadable line is an error
/// naming its path.
pub async fn eni_addresses<I: Imds>(imds: &I, mac: &str) -> Result<EniAddresses, CloudError> {
    let ips_path = format!("{MACS}{mac}/local-ipv4s");
    let ips: Vec<Ipv4Addr> = lines(&ips_path, &imds.get(&ips_path).await?.unwrap_or_default())?;
    let prefixes_path = format!("{MACS}{mac}/ipv4-prefix");
    let prefixes = lines(
        &prefixes_path,
        &imds.get(&prefixes_path).await?.unwrap_or_default(),
    )?;
    let (ipv6s, ipv6_prefixes) = ipv6_of(imds, mac).await?;
    Ok(EniAddresses {
        // IMDS lists the ENI's own address first.
        secondary_ips: ips.into_iter().skip(1).collect(),
        prefixes,
        ipv6s,
        ipv6_prefixes,
    })
}

/// The IPv6 addresses and /80 prefixes of the ENI with `mac`; none for an ENI (or a VPC)
/// without IPv6, where IMDS answers 404.
async fn ipv6_of<I: Imds>(
    imds: &I,
    mac: &str,
) -> Result<(Vec<Ipv6Addr>, Vec<Ipv6Network>), CloudError> {
    let ipv6s = optional_lines(imds, &format!("{MACS}{mac}/ipv6s")).await?;
    let prefixes = optional_lines(imds, &format!("{MACS}{mac}/ipv6-prefix")).await?;
    Ok((ipv6s, prefixes))
}

/// Reads one attached ENI by MAC.
pub async fn eni_metadata<I: Imds>(imds: &I, mac: &str) -> Result<EniMetadata, CloudError> {
    let base = format!("{MACS}{mac}");
    let eni_id = required(imds, &format!("{base}/interface-id")).await?;
    let device_path = format!("{base}/device-number");
    let device_number = parse(&device_path, &required(imds, &device_path).await?)?;
    let subnet_id = required(imds, &format!("{base}/subnet-id")).await?;
    let cidr_path = format!("{base}/subnet-ipv4-cidr-block");
    let subnet_cidr = parse(&cidr_path, &required(imds, &cidr_path).await?)?;
    let ips_path = format!("{base}/local-ipv4s");
    let local_ipv4s = lines(&ips_path, &required(imds, &ips_path).await?)?;
    let (ipv6s, ipv6_prefixes) = ipv6_of(imds, mac).await?;
    Ok(EniMetadata {
        mac: mac.to_string(),
        eni_id,
        device_number,
        subnet_id,
        subnet_cidr,
        local_ipv4s,
        ipv6s,
        ipv6_prefixes,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// IMDS as a map of paths to values: what identity parsing reads.
    #[derive(Default)]
    struct FakeImds(HashMap<String, String>);

    impl FakeImds {
        fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
            FakeImds(
                pairs
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        }

        fn set(&mut self, path: &str, value: &str) {
            self.0.insert(path.to_string(), value.to_string());
        }

        fn remove(&mut self, path: &str) {
            self.0.remove(path);
        }
    }

    impl Imds for FakeImds {
        async fn get(&self, path: &str) -> Result<Option<String>, CloudError> {
            Ok(self.0.get(path).cloned())
        }
    }

    const MAC: &str = "02:aa:bb:cc:dd:ee";

    fn imds() -> FakeImds {
        let m = format!("meta-data/network/interfaces/macs/{MAC}");
        FakeImds::from_pairs([
            ("meta-data/instance-id", "i-0123456789abcdef0"),
            ("meta-data/instance-type", "t3.medium"),
            ("meta-data/placement/availability-zone", "us-west-2a"),
            ("meta-data/local-ipv4", "10.0.0.10"),
            ("meta-data/mac", "02:AA:BB:CC:DD:EE"),
            (&format!("{m}/interface-id"), "eni-0abc"),
            (&format!("{m}/device-number"), "0"),
            (&format!("{m}/subnet-id"), "subnet-1"),
            (&format!("{m}/subnet-ipv4-cidr-block"), "10.0.0.0/24"),
            (
                &format!("{m}/local-ipv4s"),
                "10.0.0.10\n10.0.0.11\n10.0.0.12\n",
            ),
            (&format!("{m}/vpc-id"), "vpc-1"),
            (
                &format!("{m}/vpc-ipv4-cidr-blocks"),
                "10.0.0.0/16\n100.64.0.0/16",
            ),
        ])
    }

    #[tokio::test]
    async fn identity_is_read_from_imds() {
        let id = node_identity(&imds()).await.unwrap();
        assert_eq!(id.instance_type, "t3.medium");
        assert_eq!(
            id.region, "us-west-2",
            "derived from the AZ when placement/region is absent"
        );
        assert_eq!(id.primary_eni.mac, MAC);
        assert_eq!(
            id.primary_eni.primary_ip(),
            Some("10.0.0.10".parse().unwrap())
        );
        assert_eq!(id.primary_eni.secondary_ips().len(), 2);
        assert_eq!(id.vpc_cidrs.len(), 2);
    }

    #[tokio::test]
    async fn a_missing_or_bad_path_is_named() {
        let mut bad = imds();
        bad.remove("meta-data/instance-type");
        let e = node_identity(&bad).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "IMDS meta-data/instance-type: missing from instance metadata"
        );

        let mut bad = imds();
        bad.set("meta-data/local-ipv4", "ten");
        let e = node_identity(&bad).await.unwrap_err();
        assert!(
            e.to_string().contains("meta-data/local-ipv4") && e.to_string().contains("\"ten\""),
            "{e}"
        );
    }

    #[tokio::test]
    async fn attached_enis_and_their_addresses_are_listed() {
        let m = format!("meta-data/network/interfaces/macs/{MAC}");
        let mut imds = imds();
        imds.set(MACS, "02:AA:BB:CC:DD:EE/\n02:00:00:00:00:01/\n");
        imds.set(&format!("{m}/ipv4-prefix"), "10.0.0.32/28\n");
        assert_eq!(
            attached_macs(&imds).await.unwrap(),
            [MAC, "02:00:00:00:00:01"]
        );
        assert_eq!(
            eni_id(&imds, MAC).await.unwrap().as_deref(),
            Some("eni-0abc")
        );
        assert_eq!(eni_id(&imds, "02:00:00:00:00:01").await.unwrap(), None);
        let got = eni_addresses(&imds, MAC).await.unwrap();
        assert_eq!(
            got.secondary_ips,
            [
                "10.0.0.11".parse::<Ipv4Addr>().unwrap(),
                "10.0.0.12".parse().unwrap()
            ]
        );
        assert_eq!(
            got.prefixes,
            ["10.0.0.32/28".parse::<Ipv4Network>().unwrap()]
        );

        imds.set(&format!("{m}/ipv4-prefix"), "10.0.0.32/28\nnonsense\n");
        let e = eni_addresses(&imds, MAC).await.unwrap_err();
        assert!(
            e.to_string().contains("ipv4-prefix") && e.to_string().contains("nonsense"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn ipv6_is_read_when_imds_has_it_and_none_when_it_answers_404() {
        let m = format!("meta-data/network/interfaces/macs/{MAC}");
        let v4 = imds();
        let id = node_identity(&v4).await.unwrap();
        assert_eq!(id.primary_ipv6, None);
        assert!(id.primary_eni.ipv6s.is_empty() && id.primary_eni.ipv6_prefixes.is_empty());
        let a = eni_addresses(&v4, MAC).await.unwrap();
        assert!(a.ipv6s.is_empty() && a.ipv6_prefixes.is_empty());

        let mut dual = imds();
        dual.set("meta-data/ipv6", "2001:db8::4");
        dual.set(&format!("{m}/ipv6s"), "2001:db8::4\n2001:db8::5\n");
        dual.set(&format!("{m}/ipv6-prefix"), "2001:db8:0:0:1::/80\n");
        let id = node_identity(&dual).await.unwrap();
        assert_eq!(id.primary_ipv6, Some("2001:db8::4".parse().unwrap()));
        let ipv6s: Vec<Ipv6Addr> = vec![
            "2001:db8::4".parse().unwrap(),
            "2001:db8::5".parse().unwrap(),
        ];
        let prefixes: Vec<Ipv6Network> = vec!["2001:db8:0:0:1::/80".parse().unwrap()];
        assert_eq!(id.primary_eni.ipv6s, ipv6s);
        assert_eq!(id.primary_eni.ipv6_prefixes, prefixes);
        assert_eq!(id.primary_eni.local_ipv4s.len(), 3, "IPv4 reads as before");
        let a = eni_addresses(&dual, MAC).await.unwrap();
        assert_eq!((a.ipv6s, a.ipv6_prefixes), (ipv6s, prefixes));

        dual.set("meta-data/ipv6", "10.0.0.10");
        let e = node_identity(&dual).await.unwrap_err().to_string();
        assert!(
            e.contains("meta-data/ipv6") && e.contains("10.0.0.10"),
            "{e}"
        );
        dual.set("meta-data/ipv6", "2001:db8::4");
        dual.set(&format!("{m}/ipv6-prefix"), "2001:db8::/200\n");
        let e = eni_addresses(&dual, MAC).await.unwrap_err().to_string();
        assert!(e.contains("ipv6-prefix") && e.contains("/200"), "{e}");
    }
}
