//! Shrinking the pool and keeping it true to EC2: `decreaseDatastorePool` (ipamd.go:846-941),
//! `tryFreeENI` → `FreeENI` (ipamd.go:849-890, awsutils.go:1428-1483) and
//! `nodeIPPoolReconcile` (ipamd.go:1570-1708).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use cloud::{CloudError, CloudErrorKind, Ec2};
use ipnetwork::Ipv4Network;
use pool::Removal;

use super::{ENI_EC2_TRIES, Node, PER_PREFIX, Stats, stamp};

/// `decreaseIPPoolInterval` (ipamd.go:64).
const RELEASE_INTERVAL: Duration = Duration::from_secs(30);
/// `minENILifeTime` (data_store.go:38).
const MIN_ENI_AGE: Duration = Duration::from_secs(60);
/// `nodeIPPoolReconcileInterval` (ipamd.go:63).
const RECONCILE_INTERVAL: Duration = Duration::from_secs(60);
/// FreeENI sleeps this between detach and delete (awsutils.go:1429).
const DETACH_SETTLE: Duration = Duration::from_secs(2);

impl Node {
    /// `isDatastorePoolTooHigh` (ipamd.go:2659-2677): over WARM_IP_TARGET/MINIMUM_IP_TARGET,
    /// or with prefix delegation more free /28s than WARM_PREFIX_TARGET; never in the
    /// default warm-ENI mode.
    pub(super) fn too_high(&self, s: Stats) -> bool {
        if let Some((_, over)) = self.target_state(s) {
            return over > 0;
        }
        // warmPrefixTargetDefined (:2679): any target ≥ 0, i.e. always with PD.
        self.pd() && self.prefix_counts().0 > self.opts.targets.warm_prefix
    }

    /// `shouldSkipDataStorePoolDecrease` (ipamd.go:827-837), negated.
    pub(super) fn may_release(&self) -> bool {
        let now = self.now();
        self.state()
            .last_release
            .is_none_or(|l| l + RELEASE_INTERVAL < now)
    }

    /// `tryUnassignCidrsFromAll` (ipamd.go:892-941): per ENI in map order, what has no
    /// address assigned (cooling ones too, `FindFreeableCidrs` data_store.go:1562) up to
    /// what is over, out of the datastore and then one Unassign call per ENI
    /// (`DeallocCidrs` :2684-2712, whose errors are only logged).
    pub(super) async fn decrease(&self, s: Stats) {
        let mut over = match self.target_state(s) {
            Some((_, over)) => over,
            // computeExtraPrefixesOverWarmTarget (:1516-1527).
            None if self.pd() => self
                .prefix_counts()
                .0
                .saturating_sub(self.opts.targets.warm_prefix),
            None => 0,
        };
        let enis: Vec<String> = self.state().pool.enis().map(|e| e.id.clone()).collect();
        for eni in self.map_order(enis) {
            if over == 0 {
                break;
            }
            let (ips, prefixes) = {
                let mut st = self.state();
                let (ips, prefixes) = freeable(&st.pool, &eni, self.pd());
                let ips: Vec<Ipv4Addr> = ips.into_iter().take(over as usize).collect();
                let prefixes: Vec<Ipv4Network> = prefixes.into_iter().take(over as usize).collect();
                for ip in &ips {
                    let _ = st.pool.remove_address(*ip, Removal::Force);
                }
                for p in &prefixes {
                    let _ = st.pool.remove_prefix(*p, Removal::Force);
                }
                (ips, prefixes)
            };
            over = over.saturating_sub((ips.len() + prefixes.len()) as u32);
            if !prefixes.is_empty() {
                let _ = self
                    .sdk(|| self.ec2.unassign_ipv4_prefixes(&eni, &prefixes))
                    .await;
            }
            if !ips.is_empty() {
                let _ = self.sdk(|| self.ec2.unassign_private_ips(&eni, &ips)).await;
            }
        }
    }

    /// `shouldRemoveExtraENIs` (ipamd.go:1488-1514).
    pub(super) fn should_remove_extra_enis(&self, s: Stats) -> bool {
        if self.warm_ip_mode() {
            return true;
        }
        let t = &self.opts.targets;
        let (warm, per_eni_ips) = if self.pd() {
            (t.warm_prefix, self.per_eni * PER_PREFIX)
        } else {
            (t.warm_eni, self.per_eni)
        };
        if s.available >= (warm + 1) * per_eni_ips {
            return true;
        }
        // CheckFreeableENIexists (data_store.go:1594-1623): any secondary ENI with no pod.
        self.pd() && {
            let st = self.state();
            st.pool.enis().any(|e| {
                !e.is_primary() && !st.pool.addresses(&e.id).any(|(_, slot)| slot.is_assigned())
            })
        }
    }

    /// `getDeletableENI` (data_store.go:1042-1093) in map order: not the primary, at least a
    /// minute old, nothing cooling, no pod, and not needed for WARM_IP_TARGET (:974),
    /// MINIMUM_IP_TARGET (:999) or, with prefix delegation, WARM_PREFIX_TARGET (:1021).
    fn deletable_eni(&self) -> Option<String> {
        let now = stamp(&self.account);
        let t = self.opts.targets;
        let pd = self.pd();
        let enis: Vec<String> = self.state().pool.enis().map(|e| e.id.clone()).collect();
        let order = self.map_order(enis);
        let st = self.state();
        // Per ENI: (addresses, unassigned addresses, free /28s).
        let sizes = |id: &str| {
            let (mut size, mut free) = (0, 0);
            for (_, slot) in st.pool.addresses(id) {
                // With PD only prefixes count, without it only /32s (data_store.go:982).
                if slot.prefix.is_some() == pd {
                    size += 1;
                    free += u32::from(!slot.is_assigned());
                }
            }
            let free_prefixes = st
                .pool
                .prefixes(id)
                .filter(|p| {
                    !st.pool
                        .addresses(id)
                        .any(|(_, s)| s.prefix == Some(*p) && s.is_assigned())
                })
                .count() as u32;
            (size, free, free_prefixes)
        };
        let others = |id: &str| {
            order
                .iter()
                .filter(|o| o.as_str() != id)
                .map(|o| sizes(o))
                .fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2))
        };
        let in_prefixes = |n: u32| {
            if pd {
                n.div_ceil(PER_PREFIX) * PER_PREFIX
            } else {
                n
            }
        };
        order.iter().find_map(|id| {
            let info = st.pool.eni(id)?;
            if info.is_primary() || now < info.created_at.after(MIN_ENI_AGE) {
                return None;
            }
            if st
                .pool
                .addresses(id)
                .any(|(_, s)| s.is_assigned() || s.is_cooling(now))
            {
                return None;
            }
            let (other_size, other_free, other_free_prefixes) = others(id);
            let needed = (t.warm_ip != 0 && other_free < in_prefixes(t.warm_ip))
                || (t.minimum_ip != 0 && other_size < in_prefixes(t.minimum_ip))
                || (pd && t.warm_prefix != 0 && other_free_prefixes < t.warm_prefix);
            (!needed).then(|| id.clone())
        })
    }

    /// `tryFreeENI` (ipamd.go:849-890): the ENI leaves the datastore first
    /// (`RemoveUnusedENIFromStore`), then FreeENI, which the pool loop waits for.
    pub(super) async fn try_free_eni(&self) {
        let Some(eni) = self.deletable_eni() else {
            return;
        };
        let _ = self.state().pool.remove_eni(&eni, Removal::Force);
        let _ = self.free_eni(&eni).await;
    }

    /// `freeENI` (awsutils.go:1432-1483): the attachment from DescribeNetworkInterfaces;
    /// DetachNetworkInterface tried 12 times (200 ms doubling up to 60 s, :1453); 2 s; then
    /// `deleteENI` (:1528). An ENI that stays attached is out of the datastore until a
    /// reconcile finds it.
    pub(super) async fn free_eni(&self, eni: &str) -> Result<(), CloudError> {
        let ids = [eni.to_string()];
        let found = match self
            .sdk(|| self.ec2.describe_network_interfaces(&ids))
            .await
        {
            Err(e) if e.kind == CloudErrorKind::NotFound => return Ok(()),
            other => other?,
        };
        if let Some(attachment) = found.into_iter().next().and_then(|e| e.attachment) {
            let id = attachment.id;
            self.retry(ENI_EC2_TRIES, Duration::from_millis(200), 0.15, || {
                self.sdk(|| self.ec2.detach_network_interface(&id))
            })
            .await?;
        }
        tokio::time::sleep(DETACH_SETTLE).await;
        self.delete_eni(eni).await
    }

    /// `nodeIPPoolReconcile` (ipamd.go:1570-1708), 60 s after the last pool action: IMDS's
    /// ENIs against the datastore's. An ENI attached but unknown (one whose FreeENI failed,
    /// or whose wait for IMDS gave up) makes it call DescribeNetworkInterfaces (:1600-1616)
    /// and set the ENI up again (:1653-1683); a known ENI whose addresses differ in IMDS is
    /// read from EC2 (`eniIPPoolReconcile`, :1715); an ENI no longer attached leaves.
    pub(super) async fn reconcile(&self) {
        let now = self.now();
        if now.saturating_sub(self.state().last_action) <= RECONCILE_INTERVAL {
            return;
        }
        let Ok(attached) = self.attached().await else {
            return;
        };
        let known: BTreeSet<String> = self.state().pool.enis().map(|e| e.id.clone()).collect();
        let mut described = None;
        if attached.iter().any(|a| !known.contains(&a.id)) {
            let ids: Vec<String> = attached.iter().map(|a| a.id.clone()).collect();
            match self.describe_all(&ids).await {
                Ok(found) => described = Some(found),
                Err(_) => return,
            }
        }
        for eni in &attached {
            if known.contains(&eni.id) {
                self.reconcile_addresses(eni).await;
                continue;
            }
            let tags = described
                .iter()
                .flatten()
                .find(|d| d.id == eni.id)
                .map(|d| d.tags.clone())
                .unwrap_or_default();
            if self.tag_eni(&eni.id, &tags).await.is_err() {
                continue;
            }
            let _ = self.setup_eni(eni).await;
        }
        {
            let mut st = self.state();
            for gone in known
                .iter()
                .filter(|k| !attached.iter().any(|a| &a.id == *k))
            {
                let _ = st.pool.remove_eni(gone, Removal::Force);
            }
        }
        self.touched();
    }

    /// `eniIPPoolReconcile` / `eniPrefixPoolReconcile` (ipamd.go:1710-1790): when IMDS and the
    /// datastore differ, EC2's answer is taken (the 60 s cooldown of freshly unassigned
    /// addresses aside, which has run out by the time a reconcile runs).
    async fn reconcile_addresses(&self, eni: &super::Attached) {
        let (ips, prefixes) = {
            let st = self.state();
            let ips: BTreeSet<Ipv4Addr> = st
                .pool
                .addresses(&eni.id)
                .filter(|(_, s)| s.prefix.is_none())
                .map(|(ip, _)| ip)
                .collect();
            let prefixes: BTreeSet<Ipv4Network> = st.pool.prefixes(&eni.id).collect();
            (ips, prefixes)
        };
        let imds_ips: BTreeSet<Ipv4Addr> = eni.ips.iter().copied().collect();
        let imds_prefixes: BTreeSet<Ipv4Network> = eni.prefixes.iter().copied().collect();
        if ips == imds_ips && prefixes == imds_prefixes {
            return;
        }
        let ids = [eni.id.clone()];
        let Ok(found) = self
            .sdk(|| self.ec2.describe_network_interfaces(&ids))
            .await
        else {
            return;
        };
        let Some(ec2) = found.into_iter().next() else {
            return;
        };
        let mut st = self.state();
        for ip in ips.iter().filter(|ip| !ec2.secondary_ips.contains(ip)) {
            let _ = st.pool.remove_address(*ip, Removal::Force);
        }
        for p in prefixes.iter().filter(|p| !ec2.prefixes.contains(p)) {
            let _ = st.pool.remove_prefix(*p, Removal::Force);
        }
        let _ = st.pool.add_addresses(&eni.id, &ec2.secondary_ips);
        let _ = st.pool.add_prefixes(&eni.id, &ec2.prefixes);
    }
}

/// `FindFreeableCidrs` (data_store.go:1562-1586): an ENI's /32s (without prefix delegation)
/// or /28s (with it) with no address assigned.
fn freeable(pool: &pool::Pool, eni: &str, pd: bool) -> (Vec<Ipv4Addr>, Vec<Ipv4Network>) {
    if pd {
        let prefixes = pool
            .prefixes(eni)
            .filter(|p| {
                !pool
                    .addresses(eni)
                    .any(|(_, s)| s.prefix == Some(*p) && s.is_assigned())
            })
            .collect();
        (Vec::new(), prefixes)
    } else {
        let ips = pool
            .addresses(eni)
            .filter(|(_, s)| s.prefix.is_none() && !s.is_assigned())
            .map(|(ip, _)| ip)
            .collect();
        (ips, Vec::new())
    }
}
