//! ENIs of ours: how they are marked (description and tags, as the Go CNI marks them), how an
//! attached one is made usable on the node, and how the pool is kept equal to what EC2 says
//! an ENI holds. Used by growth and by reconciliation alike.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use backon::{ExponentialBuilder, Retryable};
use cloud::{Ec2, Imds, NetworkInterface};
use ipnetwork::Ipv4Network;
use netops::EniSpec;
use pool::{EniInfo, Mutation, Pool, Removal, Timestamp};
use tracing::{error, info, warn};

use super::Daemon;
use super::growth::EniSetupError;
use crate::durability::DaemonStore;
use crate::host::{HostError, HostNetwork};

/// How long a hot-plugged ENI's link may take to appear before setup gives up for now (the
/// reconciliation adopts the ENI later).
const LINK_WAIT: Duration = Duration::from_secs(15);

/// The first look again for that link; later looks are further apart, up to a second.
const LINK_POLL: Duration = Duration::from_millis(20);

/// Tag keys the Go CNI puts on the ENIs it creates; tools look for them.
pub const TAG_INSTANCE_ID: &str = "node.k8s.amazonaws.com/instance_id";
/// See [`TAG_INSTANCE_ID`].
pub const TAG_CREATED_AT: &str = "node.k8s.amazonaws.com/createdAt";
/// The cluster an ENI belongs to (with CLUSTER_NAME).
pub const TAG_CLUSTER: &str = "cluster.k8s.amazonaws.com/name";
/// Set with [`TAG_CLUSTER`].
pub const TAG_OWNER: &str = "eks:eni:owner";

/// The description that marks an ENI as created by vpc-cni (or aws-node) for `instance_id`.
pub fn eni_description(instance_id: &str) -> String {
    format!("aws-K8S-{instance_id}")
}

/// True for an ENI vpc-cni manages on `instance_id`: created for it (the description the Go CNI
/// uses too) or tagged for it.
pub(super) fn is_ours(eni: &NetworkInterface, instance_id: &str) -> bool {
    eni.description == eni_description(instance_id)
        || eni
            .tags
            .get(TAG_INSTANCE_ID)
            .is_some_and(|v| v == instance_id)
}

/// Wall time of a pool timestamp.
pub(super) fn wall_time(t: Timestamp) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(t.millis())
}

/// Adds the addresses and prefixes the pool lacks on `eni_id`, each on its own so that one
/// the pool refuses (held elsewhere after a race, say) does not keep the others out.
pub(super) fn adopt(
    pool: &mut Pool,
    eni_id: &str,
    ips: &[Ipv4Addr],
    prefixes: &[Ipv4Network],
) -> Vec<Mutation> {
    let own = pool.eni(eni_id).map(|e| e.primary_ip);
    let held: BTreeSet<Ipv4Addr> = pool.addresses(eni_id).map(|(ip, _)| ip).collect();
    let held_prefixes: BTreeSet<Ipv4Network> = pool.prefixes(eni_id).collect();
    let mut muts = Vec::new();
    // Some EC2 implementations list every address of the ENI, not only the new ones.
    for ip in ips
        .iter()
        .filter(|ip| Some(**ip) != own && !held.contains(ip))
    {
        match pool.add_addresses(eni_id, &[*ip]) {
            Ok(m) => muts.extend(m),
            Err(e) => warn!(eni = eni_id, %ip, error = %e, "not adopting an address"),
        }
    }
    for prefix in prefixes.iter().filter(|p| !held_prefixes.contains(p)) {
        match pool.add_prefixes(eni_id, &[*prefix]) {
            Ok(m) => muts.extend(m),
            Err(e) => warn!(eni = eni_id, %prefix, error = %e, "not adopting a prefix"),
        }
    }
    muts
}

/// Mutations making the pool's /32s and prefixes on `eni` what EC2 says it holds: what EC2 no
/// longer has is dropped whatever its state (a pod holding it has lost it; said loudly), what
/// it has is adopted.
pub(super) fn sync_eni(pool: &mut Pool, eni: &NetworkInterface) -> Vec<Mutation> {
    let ips: BTreeSet<Ipv4Addr> = eni.secondary_ips.iter().copied().collect();
    let prefixes: BTreeSet<Ipv4Network> = eni.prefixes.iter().copied().collect();
    let mut muts = Vec::new();
    let stale: Vec<Ipv4Addr> = pool
        .addresses(&eni.id)
        .filter(|(ip, slot)| slot.prefix.is_none() && !ips.contains(ip))
        .map(|(ip, _)| ip)
        .collect();
    for ip in stale {
        if let Ok((taken, m)) = pool.remove_address(ip, Removal::Force) {
            match taken {
                Some(a) => {
                    error!(%ip, eni = %eni.id, attachment = %a.key, "address of a live attachment is no longer on its ENI in EC2; dropped")
                }
                None => info!(%ip, eni = %eni.id, "dropped address EC2 no longer has on the ENI"),
            }
            muts.extend(m);
        }
    }
    let stale: Vec<Ipv4Network> = pool
        .prefixes(&eni.id)
        .filter(|p| !prefixes.contains(p))
        .collect();
    for prefix in stale {
        if let Ok((taken, m)) = pool.remove_prefix(prefix, Removal::Force) {
            for a in taken {
                error!(ip = %a.ip, %prefix, eni = %eni.id, attachment = %a.key, "prefix of a live attachment is no longer on its ENI in EC2; dropped");
            }
            muts.extend(m);
        }
    }
    muts.extend(adopt(pool, &eni.id, &eni.secondary_ips, &eni.prefixes));
    muts
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// Sets up an attached ENI on the node (waiting for its link to appear), then adds it and
    /// what EC2 says it holds to the pool.
    pub(super) async fn configure_eni(
        &self,
        eni: &NetworkInterface,
        device: u32,
        subnet_cidr: Ipv4Network,
    ) -> Result<(), EniSetupError> {
        let primary_ip = eni.primary_ip.ok_or_else(|| EniSetupError::NoPrimaryIp {
            eni: eni.id.clone(),
        })?;
        let mac = netops::parse_mac(&eni.mac).ok_or_else(|| EniSetupError::BadMac {
            eni: eni.id.clone(),
            mac: eni.mac.clone(),
        })?;
        let spec = EniSpec {
            mac,
            device_number: device,
            primary_ip,
            subnet: subnet_cidr,
            mtu: self.node.net.mtu,
        };
        let changes = self.setup_eni_when_linked(&spec).await?;
        super::log_changes(&format!("ENI {} (device {device})", eni.id), &changes);
        let now = self.clock.now();
        self.ledger
            .persist_growth(|pool| {
                let created_at = pool.eni(&eni.id).map_or(now, |e| e.created_at);
                let mut muts = pool.upsert_eni(EniInfo {
                    id: eni.id.clone(),
                    device_number: device,
                    mac: eni.mac.clone(),
                    primary_ip,
                    subnet_id: eni.subnet_id.clone(),
                    subnet_cidr,
                    created_at,
                });
                muts.extend(sync_eni(pool, eni));
                muts
            })
            .await?;
        Ok(())
    }

    /// Sets the ENI up as soon as the kernel shows its link: hot-plug lags the attachment, so
    /// a missing link is waited for (up to [`LINK_WAIT`]); any other failure is final.
    async fn setup_eni_when_linked(&self, spec: &EniSpec) -> Result<Vec<String>, HostError> {
        (|| self.host.setup_eni(spec))
            .retry(
                ExponentialBuilder::new()
                    .with_min_delay(LINK_POLL)
                    .with_max_delay(Duration::from_secs(1))
                    .without_max_times()
                    .with_total_delay(Some(LINK_WAIT)),
            )
            .sleep(tokio::time::sleep)
            .when(|e| matches!(e, HostError::LinkNotFound(_)))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_marks_our_enis_as_the_go_cni_does() {
        assert_eq!(eni_description("i-0abc"), "aws-K8S-i-0abc");
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let t = humantime::format_rfc3339_seconds(wall_time(Timestamp(86_400_000))).to_string();
        assert_eq!(t, "1970-01-02T00:00:00Z");
    }

    #[test]
    fn ours_by_description_or_tag() {
        let mut eni = NetworkInterface {
            description: "aws-K8S-i-1".into(),
            ..Default::default()
        };
        assert!(is_ours(&eni, "i-1"));
        assert!(!is_ours(&eni, "i-2"));
        eni.description = "someone else's".into();
        assert!(!is_ours(&eni, "i-1"));
        eni.tags.insert(TAG_INSTANCE_ID.into(), "i-1".into());
        assert!(is_ours(&eni, "i-1"));
    }
}
