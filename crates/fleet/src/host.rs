//! A node's network for the simulator: nothing to wire (no kernel is involved), every pod
//! alive until the simulation deletes it.

use std::net::{IpAddr, Ipv4Addr};

use ipamd::host::{HostError, HostNetwork, IdleVeth, NodeNet};
use netops::EniSpec;

/// The simulated node's network: every change succeeds at once.
#[derive(Clone, Copy, Debug, Default)]
pub struct SimHost;

impl HostNetwork for SimHost {
    async fn setup_node(&self, _: &NodeNet) -> Result<Vec<String>, HostError> {
        Ok(Vec::new())
    }

    async fn setup_eni(&self, _: &EniSpec) -> Result<Vec<String>, HostError> {
        Ok(Vec::new())
    }

    async fn teardown_eni(&self, _: u32, _: Ipv4Addr, _: bool) -> Result<Vec<String>, HostError> {
        Ok(Vec::new())
    }

    async fn unrouted(&self, _: Vec<IpAddr>) -> Result<Vec<IpAddr>, HostError> {
        Ok(Vec::new())
    }

    async fn pod_routes(&self, _: &str) -> Result<Vec<(IpAddr, String)>, HostError> {
        Ok(Vec::new())
    }

    async fn idle_veths(&self, _: &str) -> Result<Vec<IdleVeth>, HostError> {
        Ok(Vec::new())
    }

    async fn delete_link(&self, _: u32) -> Result<bool, HostError> {
        Ok(false)
    }
}
