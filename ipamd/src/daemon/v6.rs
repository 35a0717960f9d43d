//! IPv6 mode's one piece of EC2 work: the primary ENI's delegated /80, kept as EC2 lists it
//! and asked for when there is none. A /80 serves the node for its whole life, so there is no
//! warm pool to manage, as in aws-node's IPv6 mode.

use cloud::{Ec2, Imds, NetworkInterface};
use tracing::{error, info, warn};

use super::Daemon;
use crate::durability::{DaemonStore, PersistError};
use crate::host::HostNetwork;

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// Makes the pool's /80s exactly those EC2 lists on the primary ENI: a stored prefix EC2
    /// no longer delegates is dropped with its addresses (their pods have lost them, which
    /// is logged), and a delegated one the store lacks is taken in.
    pub(super) async fn sync_prefixes6(
        &self,
        primary: &NetworkInterface,
    ) -> Result<(), PersistError> {
        let delegated = &primary.ipv6_prefixes;
        let lost = self
            .ledger
            .persist(|pool| {
                let stale: Vec<_> = pool
                    .v6()
                    .prefixes()
                    .filter(|(p, _)| !delegated.contains(p))
                    .map(|(p, _)| p)
                    .collect();
                let mut muts = Vec::new();
                let mut lost = Vec::new();
                for prefix in stale {
                    let (taken, m) = pool.v6_mut().remove_prefix(prefix);
                    lost.extend(taken.into_iter().map(|a| (prefix, a)));
                    muts.extend(m);
                }
                for prefix in delegated {
                    match pool.v6_mut().add_prefix(&primary.id, *prefix) {
                        Ok(m) => muts.extend(m),
                        Err(e) => warn!(%prefix, error = %e, "IPv6 prefix EC2 lists not taken"),
                    }
                }
                Ok::<_, PersistError>((lost, muts))
            })
            .await?;
        for (prefix, a) in lost {
            error!(%prefix, ip = %a.ip, attachment = %a.key, "IPv6 prefix no longer delegated in EC2: its pod has lost its address");
        }
        Ok(())
    }

    /// Asks EC2 for a /80 on the primary ENI when the node holds none. The caller holds
    /// `ec2_ops`. A failure is recorded like a failed growth step and tried again next round.
    pub(super) async fn ensure_prefix6(&self) {
        if self.ledger.pool().v6().prefixes().next().is_some() {
            return;
        }
        let primary = self.node.identity.primary_eni.eni_id.clone();
        match self.ec2.assign_ipv6_prefixes(&primary, 1).await {
            Ok(prefixes) => {
                let added = self
                    .ledger
                    .persist_growth(|pool| {
                        let mut muts = Vec::new();
                        for prefix in &prefixes {
                            match pool.v6_mut().add_prefix(&primary, *prefix) {
                                Ok(m) => muts.extend(m),
                                Err(e) => {
                                    warn!(%prefix, error = %e, "IPv6 prefix from EC2 not taken")
                                }
                            }
                        }
                        muts
                    })
                    .await;
                match added {
                    Ok(()) => {
                        info!(eni = %primary, ?prefixes, "IPv6 prefix delegated to the primary ENI");
                        self.growth_succeeded();
                    }
                    Err(e) => error!(error = %e, "storing the IPv6 prefix failed"),
                }
            }
            Err(e) => self.ec2_failed(
                format!("assigning an IPv6 /80 prefix to the primary ENI {primary}"),
                e,
            ),
        }
    }
}
