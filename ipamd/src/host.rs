//! The node's network, behind a seam: the daemon asks for node setup and per-ENI setup and
//! teardown; production does it over netlink and iptables (netops) on blocking threads, daemon
//! tests record the calls.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};

use ipnetwork::{Ipv4Network, Ipv6Network};

use netops::EniSpec;

// The error and the node-wide settings live below this module (nodenet.rs applies the settings
// and returns the error, and must not reach back up into the seam that calls it); they keep
// their paths here, where the daemon and its tests look for them.
pub use crate::host_error::HostError;
pub use crate::nodenet::NodeNet;

/// A host veth that carries no pod route: a pod's that DEL unrouted and whose namespace is
/// still there, or one an ADD is wiring right now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdleVeth {
    /// Its index, which the kernel does not reuse soon: a new pod's veth of the same name
    /// has another.
    pub index: u32,
    /// Its name, for the log.
    pub name: String,
}

/// The daemon's side effects on the node's network. Each call is idempotent and returns what
/// it changed, in words (empty when everything was already in place).
pub trait HostNetwork: Send + Sync + 'static {
    /// Primary ENI link, SNAT, connmark, the fwmark rule and rp_filter.
    fn setup_node(
        &self,
        net: &NodeNet,
    ) -> impl Future<Output = Result<Vec<String>, HostError>> + Send;

    /// A secondary ENI's link, route table and rule.
    fn setup_eni(
        &self,
        spec: &EniSpec,
    ) -> impl Future<Output = Result<Vec<String>, HostError>> + Send;

    /// What an ENI at `device_number` left: its rule, and unless `keep_table` (another ENI
    /// now holds that device number) its table and its pods' rules.
    fn teardown_eni(
        &self,
        device_number: u32,
        primary_ip: Ipv4Addr,
        keep_table: bool,
    ) -> impl Future<Output = Result<Vec<String>, HostError>> + Send;

    /// Which of `ips` no pod on the node uses any more: no `<ip>/32` or `<ip6>/128` route in main leads to a
    /// link. A live pod always has that route through its veth, and the kernel removes it with
    /// the pod's namespace, so this finds the pods whose DEL ipamd missed while it was down.
    fn unrouted(
        &self,
        ips: Vec<IpAddr>,
    ) -> impl Future<Output = Result<Vec<IpAddr>, HostError>> + Send;

    /// Every pod the node routes to: each `<ip>/32` or `<ip6>/128` route in main through a
    /// link whose name starts with `veth_prefix`, with that link's name. Stored state can lose records
    /// without a sign; these routes are what the plugin left for each pod it wired.
    fn pod_routes(
        &self,
        veth_prefix: &str,
    ) -> impl Future<Output = Result<Vec<(IpAddr, String)>, HostError>> + Send;

    /// The veths named with `veth_prefix` that no `<ip>/32` or `<ip6>/128` route in main
    /// leads to.
    fn idle_veths(
        &self,
        veth_prefix: &str,
    ) -> impl Future<Output = Result<Vec<IdleVeth>, HostError>> + Send;

    /// Deletes the link at `index` (its peer goes with it); false when it was gone already.
    fn delete_link(&self, index: u32) -> impl Future<Output = Result<bool, HostError>> + Send;
}

/// The real node network, over netlink and iptables, each call on a blocking thread with a
/// socket of its own (in the namespace ipamd runs in).
#[derive(Clone, Copy, Debug, Default)]
pub struct NetlinkHost;

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, HostError> + Send + 'static,
) -> Result<T, HostError> {
    tokio::task::spawn_blocking(f).await?
}

impl HostNetwork for NetlinkHost {
    async fn setup_node(&self, net: &NodeNet) -> Result<Vec<String>, HostError> {
        let net = net.clone();
        blocking(move || crate::nodenet::setup(&net)).await
    }

    async fn setup_eni(&self, spec: &EniSpec) -> Result<Vec<String>, HostError> {
        let spec = spec.clone();
        blocking(move || {
            let nl = netops::Netlink::current()?;
            Ok(netops::setup_eni(&nl, &spec)?.changes)
        })
        .await
    }

    async fn teardown_eni(
        &self,
        device_number: u32,
        primary_ip: Ipv4Addr,
        keep_table: bool,
    ) -> Result<Vec<String>, HostError> {
        blocking(move || {
            let nl = netops::Netlink::current()?;
            let report = netops::teardown_eni(&nl, device_number, primary_ip, keep_table)?;
            Ok(report
                .rules
                .iter()
                .map(|r| format!("removed rule {r}"))
                .chain(report.routes.iter().map(|r| format!("removed route {r}")))
                .collect())
        })
        .await
    }

    async fn unrouted(&self, ips: Vec<IpAddr>) -> Result<Vec<IpAddr>, HostError> {
        blocking(move || {
            let routed: BTreeSet<IpAddr> = host_routes(&netops::Netlink::current()?)?
                .into_iter()
                .map(|(ip, _)| ip)
                .collect();
            Ok(ips.into_iter().filter(|ip| !routed.contains(ip)).collect())
        })
        .await
    }

    async fn pod_routes(&self, veth_prefix: &str) -> Result<Vec<(IpAddr, String)>, HostError> {
        let prefix = veth_prefix.to_string();
        blocking(move || {
            let nl = netops::Netlink::current()?;
            let veths: BTreeMap<u32, String> = nl
                .links()?
                .into_iter()
                .filter(|l| l.name.starts_with(&prefix))
                .map(|l| (l.index, l.name))
                .collect();
            Ok(host_routes(&nl)?
                .into_iter()
                .filter_map(|(ip, oif)| Some((ip, veths.get(&oif)?.clone())))
                .collect())
        })
        .await
    }

    async fn idle_veths(&self, veth_prefix: &str) -> Result<Vec<IdleVeth>, HostError> {
        let prefix = veth_prefix.to_string();
        blocking(move || Self::idle(&netops::Netlink::current()?, &prefix)).await
    }

    async fn delete_link(&self, index: u32) -> Result<bool, HostError> {
        blocking(
            move || match netops::Netlink::current()?.delete_link_by_index(index) {
                Ok(()) => Ok(true),
                Err(e) if e.is_not_found() => Ok(false),
                Err(e) => Err(e.into()),
            },
        )
        .await
    }
}

impl NetlinkHost {
    fn idle(nl: &netops::Netlink, prefix: &str) -> Result<Vec<IdleVeth>, HostError> {
        let routed: BTreeSet<u32> = host_routes(nl)?.into_iter().map(|(_, oif)| oif).collect();
        Ok(nl
            .links()?
            .into_iter()
            .filter(|l| {
                l.kind.as_deref() == Some("veth")
                    && l.name.starts_with(prefix)
                    && !routed.contains(&l.index)
            })
            .map(|l| IdleVeth {
                index: l.index,
                name: l.name,
            })
            .collect())
    }
}

/// Every single-address route in main through a link (what the plugin adds for each pod, in
/// both families), with the link's index.
fn host_routes(nl: &netops::Netlink) -> Result<Vec<(IpAddr, u32)>, HostError> {
    let v4 = nl
        .routes_of::<Ipv4Network>(netops::RT_TABLE_MAIN)?
        .into_iter()
        .filter(|r| r.dst.prefix() == 32)
        .filter_map(|r| Some((IpAddr::V4(r.dst.ip()), r.oif?)));
    let v6: Vec<_> = nl
        .routes_of::<Ipv6Network>(netops::RT_TABLE_MAIN)?
        .into_iter()
        .filter(|r| r.dst.prefix() == 128)
        .filter_map(|r| Some((IpAddr::V6(r.dst.ip()), r.oif?)))
        .collect();
    Ok(v4.chain(v6).collect())
}

impl<T: HostNetwork> HostNetwork for std::sync::Arc<T> {
    fn setup_node(
        &self,
        net: &NodeNet,
    ) -> impl Future<Output = Result<Vec<String>, HostError>> + Send {
        (**self).setup_node(net)
    }

    fn setup_eni(
        &self,
        spec: &EniSpec,
    ) -> impl Future<Output = Result<Vec<String>, HostError>> + Send {
        (**self).setup_eni(spec)
    }

    fn teardown_eni(
        &self,
        device_number: u32,
        primary_ip: Ipv4Addr,
        keep_table: bool,
    ) -> impl Future<Output = Result<Vec<String>, HostError>> + Send {
        (**self).teardown_eni(device_number, primary_ip, keep_table)
    }

    fn unrouted(
        &self,
        ips: Vec<IpAddr>,
    ) -> impl Future<Output = Result<Vec<IpAddr>, HostError>> + Send {
        (**self).unrouted(ips)
    }

    fn pod_routes(
        &self,
        veth_prefix: &str,
    ) -> impl Future<Output = Result<Vec<(IpAddr, String)>, HostError>> + Send {
        (**self).pod_routes(veth_prefix)
    }

    fn idle_veths(
        &self,
        veth_prefix: &str,
    ) -> impl Future<Output = Result<Vec<IdleVeth>, HostError>> + Send {
        (**self).idle_veths(veth_prefix)
    }

    fn delete_link(&self, index: u32) -> impl Future<Output = Result<bool, HostError>> + Send {
        (**self).delete_link(index)
    }
}
