//! Stored state that lost records. sled drops the tail of a torn log without a sign, so at
//! every start the node's pod routes are checked against the pool: an address a pod still
//! routes to but the pool holds for nobody is adopted, so it is never handed to a second pod.
//! Addresses whose state is known to be lost start a fresh cooldown. Adopted addresses are
//! released by the periodic reconciliation once their route is gone (the plugin asks ipamd
//! first and removes the route after, so a DEL cannot be the moment to look).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use cloud::{Ec2, Imds};
use pool::{AttachmentKey, EGRESS_V4_RANGE, PodInfo, Timestamp};
use tracing::{error, info, warn};

use super::Daemon;
use crate::durability::{DaemonStore, PersistError};
use crate::host::HostNetwork;

/// How old an assignment without a route must be to count as a dead pod's. A younger one may
/// belong to an ADD whose plugin has its reply but has not added the route yet; releasing it
/// could hand a live pod's address to another. Far above the plugin's own bounds (a 30 s
/// reply wait, then netlink calls of at most 10 s each).
pub const DEAD_POD_GRACE: Duration = Duration::from_secs(60);

/// The network name of adopted addresses. No runtime uses it, so the runtime's GC (which
/// names its network) never releases them: only their route going does.
pub const RECOVERED_NETWORK: &str = "vpc-cni-recovered";

/// What was found lost before the daemon started (from the store's damage report).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LostState {
    /// Nothing stored survived: every address's state is unknown.
    pub everything: bool,
    /// Addresses whose records were unreadable and removed.
    pub ips: Vec<Ipv4Addr>,
}

/// The key an adopted address is held under: the pod's veth and the address, all that the
/// node still says about the pod.
fn recovered_key(link: &str, ip: IpAddr) -> AttachmentKey {
    AttachmentKey {
        network: RECOVERED_NETWORK.into(),
        container_id: link.into(),
        ifname: ip.to_string(),
    }
}

impl<E: Ec2, I: Imds, H: HostNetwork, S: DaemonStore> Daemon<E, I, H, S> {
    /// Adopts every address a pod on the node routes to that the pool holds for nobody, and
    /// logs each route whose address is not on this node's ENIs at all. Unreadable routes are
    /// logged and skipped: the pool is left as stored.
    pub(super) async fn adopt_routed_pods(&self) -> Result<(), PersistError> {
        let routes = match self.host.pod_routes(&self.node.net.snat.veth_prefix).await {
            Ok(routes) => routes,
            Err(e) => {
                error!(error = %e, "could not read the node's pod routes: addresses of pods stored state lost cannot be recovered");
                return Ok(());
            }
        };
        let now = self.clock.now();
        // An IPv6 pod's egress address is routed through its veth too; it is adopted with the
        // pod's IPv6 address, never on its own.
        let (egress, routes): (Vec<_>, Vec<_>) = routes
            .into_iter()
            .partition(|(ip, _)| matches!(ip, IpAddr::V4(v4) if EGRESS_V4_RANGE.contains(*v4)));
        let egress_of: HashMap<String, Ipv4Addr> = egress
            .into_iter()
            .filter_map(|(ip, link)| match ip {
                IpAddr::V4(v4) => Some((link, v4)),
                IpAddr::V6(_) => None,
            })
            .collect();
        let (adopted, unknown) = self
            .ledger
            .persist(|pool| {
                let held: BTreeSet<IpAddr> = pool
                    .allocations()
                    .iter()
                    .map(|a| IpAddr::V4(a.ip))
                    .chain(pool.v6().allocations().iter().map(|a| IpAddr::V6(a.ip)))
                    .collect();
                let (mut adopted, mut unknown, mut muts) = (Vec::new(), Vec::new(), Vec::new());
                for (ip, link) in routes.into_iter().filter(|(ip, _)| !held.contains(ip)) {
                    let key = recovered_key(&link, ip);
                    let taken = match ip {
                        IpAddr::V4(v4) => pool
                            .adopt(&key, &PodInfo::default(), v4, now)
                            .map(|(_, m)| m)
                            .map_err(|e| e.to_string()),
                        IpAddr::V6(v6) => pool
                            .v6_mut()
                            .adopt(
                                &key,
                                &PodInfo::default(),
                                v6,
                                egress_of.get(&link).copied(),
                                now,
                            )
                            .map(|(_, m)| m)
                            .ok_or_else(|| "not in an IPv6 prefix of this node".to_string()),
                    };
                    match taken {
                        Ok(m) => {
                            muts.extend(m);
                            adopted.push((ip, link));
                        }
                        Err(e) => unknown.push((ip, link, e)),
                    }
                }
                Ok::<_, PersistError>(((adopted, unknown), muts))
            })
            .await?;
        for (ip, link) in &adopted {
            warn!(
                %ip, veth = %link, network = RECOVERED_NETWORK,
                "recovered an address stored state did not hold: a pod on the node routes to it through this veth; held until that route goes (the pod's name and container are not recoverable)"
            );
        }
        for (ip, link, e) in &unknown {
            error!(
                %ip, veth = %link, error = %e,
                "could not recover: a pod on the node routes to this address, but it is not in the pool of this node's ENIs"
            );
        }
        if !adopted.is_empty() {
            self.metrics.ipamd_error("recoveredPodAddress");
        }
        Ok(())
    }

    /// Starts a cooldown on every available address whose state was lost: it may have been
    /// released moments before the loss.
    pub(super) async fn cool_lost(&self, lost: &LostState) -> Result<(), PersistError> {
        if !lost.everything && lost.ips.is_empty() {
            return Ok(());
        }
        let now = self.clock.now();
        let cooled = self
            .ledger
            .persist(|pool| {
                let candidates: Vec<Ipv4Addr> = if lost.everything {
                    let enis: Vec<String> = pool.enis().map(|e| e.id.clone()).collect();
                    enis.iter()
                        .flat_map(|id| pool.addresses(id).map(|(ip, _)| ip))
                        .collect()
                } else {
                    lost.ips.clone()
                };
                let mut cooled = Vec::new();
                let mut muts = Vec::new();
                for ip in candidates {
                    if let Some(m) = pool.start_cooldown(ip, now) {
                        cooled.push(ip);
                        muts.extend(m);
                    }
                }
                Ok::<_, PersistError>((cooled, muts))
            })
            .await?;
        if !cooled.is_empty() {
            warn!(
                addresses = ?cooled,
                cooldown = ?self.ledger.pool().cooldown(),
                "started a fresh cooldown on free addresses whose stored state was lost: each may have been released moments before"
            );
        }
        Ok(())
    }

    /// Releases, into cooldown, adopted addresses whose pod route is gone. Cheap when nothing
    /// was adopted.
    pub(super) async fn release_recovered(&self) -> Result<(), PersistError> {
        let recovered: Vec<(AttachmentKey, IpAddr)> = {
            let pool = self.ledger.pool();
            pool.allocations()
                .into_iter()
                .map(|a| (a.key, IpAddr::V4(a.ip)))
                .chain(
                    pool.v6()
                        .allocations()
                        .into_iter()
                        .map(|a| (a.key, IpAddr::V6(a.ip))),
                )
                .filter(|(key, _)| key.network == RECOVERED_NETWORK)
                .collect()
        };
        if recovered.is_empty() {
            return Ok(());
        }
        let unrouted: BTreeSet<IpAddr> = match self
            .host
            .unrouted(recovered.iter().map(|(_, ip)| *ip).collect())
            .await
        {
            Ok(ips) => ips.into_iter().collect(),
            Err(e) => {
                warn!(error = %e, "could not read the node's routes; keeping recovered addresses");
                return Ok(());
            }
        };
        let gone: Vec<_> = recovered
            .into_iter()
            .filter(|(_, ip)| unrouted.contains(ip))
            .map(|(key, _)| key)
            .collect();
        for (key, ips) in self.release_keys(&gone, self.clock.now()).await? {
            info!(addresses = ?ips, attachment = %key, "released a recovered address: its pod's route is gone");
        }
        Ok(())
    }

    /// Releases, into cooldown, every address whose pod is gone from the node: its DEL came
    /// while ipamd was away and was handled from prevResult by the plugin. Only at startup:
    /// while ipamd runs, every DEL reaches it. Assignments younger than [`DEAD_POD_GRACE`]
    /// are kept, and left to the runtime's GC if their pod is in fact gone.
    pub(super) async fn release_dead_pods(&self) -> Result<(), PersistError> {
        // Each attachment with every address it holds: a dual-stack pod is gone only when
        // neither of its routes is left.
        let mut held: BTreeMap<pool::AttachmentKey, (Timestamp, Vec<IpAddr>)> = BTreeMap::new();
        {
            let pool = self.ledger.pool();
            for a in pool.allocations() {
                let entry = held.entry(a.key).or_insert((a.assigned_at, Vec::new()));
                entry.1.push(a.ip.into());
            }
            for a in pool.v6().allocations() {
                let entry = held.entry(a.key).or_insert((a.assigned_at, Vec::new()));
                entry.0 = entry.0.max(a.assigned_at);
                entry.1.push(a.ip.into());
            }
        }
        if held.is_empty() {
            return Ok(());
        }
        let all = held
            .values()
            .flat_map(|(_, ips)| ips.iter().copied())
            .collect();
        let unrouted: BTreeSet<IpAddr> = match self.host.unrouted(all).await {
            Ok(unrouted) => unrouted.into_iter().collect(),
            Err(e) => {
                warn!(error = %e, "could not read the node's routes; keeping every assignment");
                return Ok(());
            }
        };
        let now = self.clock.now();
        let mut dead = Vec::new();
        for (key, (assigned_at, ips)) in held {
            if !ips.iter().all(|ip| unrouted.contains(ip)) {
                continue;
            }
            if assigned_at.after(DEAD_POD_GRACE) > now {
                info!(
                    addresses = ?ips, attachment = %key,
                    "kept an address without a route: assigned too recently to be sure its pod is gone"
                );
                continue;
            }
            dead.push(key);
        }
        if dead.is_empty() {
            return Ok(());
        }
        for (key, ips) in self.release_keys(&dead, now).await? {
            info!(
                addresses = ?ips, attachment = %key,
                "released an address whose pod is gone (its DEL came while ipamd was down)"
            );
        }
        Ok(())
    }

    /// Releases each of `keys` into cooldown at `now`, in one durable commit; returns what
    /// each held, IPv4 and IPv6 (keys that held nothing are skipped).
    async fn release_keys(
        &self,
        keys: &[pool::AttachmentKey],
        now: Timestamp,
    ) -> Result<Vec<(pool::AttachmentKey, Vec<IpAddr>)>, PersistError> {
        let released = self
            .ledger
            .persist(|pool| {
                let mut released = Vec::new();
                let mut muts = Vec::new();
                for key in keys {
                    let mut ips: Vec<IpAddr> = Vec::new();
                    if let Some((r, m)) = pool.release(key, now) {
                        ips.push(r.allocation.ip.into());
                        muts.extend(m);
                    }
                    if let Some((a, m)) = pool.v6_mut().release(key, now) {
                        ips.push(a.ip.into());
                        muts.extend(m);
                    }
                    if !ips.is_empty() {
                        released.push((key.clone(), ips));
                    }
                }
                Ok::<_, PersistError>((released, muts))
            })
            .await;
        if released.as_ref().is_ok_and(|r| !r.is_empty()) {
            // Their pods' veths are no longer kept: the next sweep may take them.
            self.veths.notify_unrouted();
        }
        released
    }
}
