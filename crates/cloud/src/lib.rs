//! The cloud seam: what ipamd needs from EC2 and IMDS, as traits, plus the instance limits table.
//!
//! ipamd is generic over [`Ec2`] and [`Imds`]; production passes the `aws` implementation (real
//! aws-sdk-ec2 and aws-config IMDS clients, which also drive vpc-sim over HTTP); daemon tests
//! pass vpc-sim's in-process EC2 and IMDS (`vpc_sim::inproc`), which run on the same model.

mod action;
#[cfg(feature = "aws")]
pub mod aws;
#[cfg(feature = "aws")]
mod aws_dry_run;
mod dry_run;
mod error;
mod identity;
pub mod limits;
pub mod retry;
pub mod throttle;
mod types;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::Ipv4Addr;

use ipnetwork::{Ipv4Network, Ipv6Network};

pub use action::{Action, UnknownAction};
pub use dry_run::{DryRun, DryRunCall, Permission};
pub use error::{CloudError, CloudErrorKind, classify_code};
pub use identity::{
    EniAddresses, EniMetadata, NodeIdentity, attached_macs, eni_addresses, eni_id, eni_metadata,
    node_identity,
};
pub use limits::{InstanceLimits, InstanceTable};
pub use types::{Attachment, CreateEni, EniFilter, NetworkInterface, Subnet};

/// The EC2 calls ipamd makes. Each call is one API request (the implementation may retry
/// transient failures); errors carry the AWS error code.
pub trait Ec2: Send + Sync + 'static {
    /// Limits of an instance type (DescribeInstanceTypes), for types the embedded table lacks.
    fn describe_instance_type(
        &self,
        instance_type: &str,
    ) -> impl Future<Output = Result<InstanceLimits, CloudError>> + Send;

    /// The given ENIs (DescribeNetworkInterfaces). An unknown id fails the call with
    /// [`CloudErrorKind::NotFound`], as EC2 does.
    fn describe_network_interfaces(
        &self,
        ids: &[String],
    ) -> impl Future<Output = Result<Vec<NetworkInterface>, CloudError>> + Send;

    /// Assigns `count` new secondary addresses to an ENI (AssignPrivateIpAddresses) and returns
    /// the new ones.
    fn assign_private_ips(
        &self,
        eni_id: &str,
        count: u32,
    ) -> impl Future<Output = Result<Vec<Ipv4Addr>, CloudError>> + Send;

    /// Returns secondary addresses to the subnet (UnassignPrivateIpAddresses).
    fn unassign_private_ips(
        &self,
        eni_id: &str,
        ips: &[Ipv4Addr],
    ) -> impl Future<Output = Result<(), CloudError>> + Send;

    /// Every ENI attached to an instance (DescribeNetworkInterfaces with the
    /// `attachment.instance-id` filter): the truth about what a node holds.
    fn describe_instance_enis(
        &self,
        instance_id: &str,
    ) -> impl Future<Output = Result<Vec<NetworkInterface>, CloudError>> + Send;

    /// Creates an ENI (CreateNetworkInterface).
    fn create_network_interface(
        &self,
        request: &CreateEni,
    ) -> impl Future<Output = Result<NetworkInterface, CloudError>> + Send;

    /// Attaches an ENI at a device index (AttachNetworkInterface); returns the attachment id.
    fn attach_network_interface(
        &self,
        eni_id: &str,
        instance_id: &str,
        device_index: u32,
    ) -> impl Future<Output = Result<String, CloudError>> + Send;

    /// Makes an attached ENI go with its instance (ModifyNetworkInterfaceAttribute
    /// `Attachment.DeleteOnTermination=true`), so a node that dies does not leak it.
    fn set_delete_on_termination(
        &self,
        eni_id: &str,
        attachment_id: &str,
    ) -> impl Future<Output = Result<(), CloudError>> + Send;

    /// Detaches an ENI (DetachNetworkInterface).
    fn detach_network_interface(
        &self,
        attachment_id: &str,
    ) -> impl Future<Output = Result<(), CloudError>> + Send;

    /// Deletes a detached ENI (DeleteNetworkInterface).
    fn delete_network_interface(
        &self,
        eni_id: &str,
    ) -> impl Future<Output = Result<(), CloudError>> + Send;

    /// Delegates `count` new /28 prefixes to an ENI (AssignPrivateIpAddresses with
    /// Ipv4PrefixCount) and returns the new ones.
    fn assign_ipv4_prefixes(
        &self,
        eni_id: &str,
        count: u32,
    ) -> impl Future<Output = Result<Vec<Ipv4Network>, CloudError>> + Send;

    /// Returns prefixes (UnassignPrivateIpAddresses with Ipv4Prefix).
    fn unassign_ipv4_prefixes(
        &self,
        eni_id: &str,
        prefixes: &[Ipv4Network],
    ) -> impl Future<Output = Result<(), CloudError>> + Send;

    /// Delegates `count` new /80 IPv6 prefixes to an ENI (AssignIpv6Addresses with
    /// Ipv6PrefixCount) and returns the new ones. All or nothing, as EC2 does.
    fn assign_ipv6_prefixes(
        &self,
        eni_id: &str,
        count: u32,
    ) -> impl Future<Output = Result<Vec<Ipv6Network>, CloudError>> + Send;

    /// Returns IPv6 prefixes (UnassignIpv6Addresses with Ipv6Prefix).
    fn unassign_ipv6_prefixes(
        &self,
        eni_id: &str,
        prefixes: &[Ipv6Network],
    ) -> impl Future<Output = Result<(), CloudError>> + Send;

    /// ENIs matching every filter (DescribeNetworkInterfaces with filters, all pages).
    fn find_network_interfaces(
        &self,
        filters: &[EniFilter],
    ) -> impl Future<Output = Result<Vec<NetworkInterface>, CloudError>> + Send;

    /// Adds or replaces tags on a resource (CreateTags).
    fn create_tags(
        &self,
        resource_id: &str,
        tags: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), CloudError>> + Send;

    /// Subnets matching every filter (DescribeSubnets with filters, all pages), e.g. those of
    /// the node's VPC and AZ, for subnet discovery.
    fn describe_subnets(
        &self,
        filters: &[EniFilter],
    ) -> impl Future<Output = Result<Vec<Subnet>, CloudError>> + Send;

    /// Whether EC2 throttled this client (`RequestLimitExceeded`) within the last `window`:
    /// the account is busy. A client that does not keep count says no.
    fn throttled_within(&self, window: std::time::Duration) -> bool {
        let _ = window;
        false
    }
}

/// Instance metadata (IMDSv2).
pub trait Imds: Send + Sync + 'static {
    /// The value at `path` under `/latest/` (e.g. `meta-data/instance-id`); `Ok(None)` when the
    /// path does not exist (404).
    fn get(&self, path: &str) -> impl Future<Output = Result<Option<String>, CloudError>> + Send;
}

/// A shared EC2 client is an EC2 client (a caller keeps a handle on the client it passes on).
impl<T: Ec2> Ec2 for std::sync::Arc<T> {
    fn describe_instance_type(
        &self,
        instance_type: &str,
    ) -> impl Future<Output = Result<InstanceLimits, CloudError>> + Send {
        (**self).describe_instance_type(instance_type)
    }

    fn describe_network_interfaces(
        &self,
        ids: &[String],
    ) -> impl Future<Output = Result<Vec<NetworkInterface>, CloudError>> + Send {
        (**self).describe_network_interfaces(ids)
    }

    fn assign_private_ips(
        &self,
        eni_id: &str,
        count: u32,
    ) -> impl Future<Output = Result<Vec<Ipv4Addr>, CloudError>> + Send {
        (**self).assign_private_ips(eni_id, count)
    }

    fn unassign_private_ips(
        &self,
        eni_id: &str,
        ips: &[Ipv4Addr],
    ) -> impl Future<Output = Result<(), CloudError>> + Send {
        (**self).unassign_private_ips(eni_id, ips)
    }

    fn describe_instance_enis(
        &self,
        instance_id: &str,
    ) -> impl Future<Output = Result<Vec<NetworkInterface>, CloudError>> + Send {
        (**self).describe_instance_enis(instance_id)
    }

    fn create_network_interface(
        &self,
        request: &CreateEni,
    ) -> impl Future<Output = Result<NetworkInterface, CloudError>> + Send {
        (**self).create_network_interface(request)
    }

    fn attach_network_interface(
        &self,
        eni_id: &str,
        instance_id: &str,
        device_index: u32,
    ) -> impl Future<Output = Result<String, CloudError>> + Send {
        (**self).attach_network_interface(eni_id, instance_id, device_index)
    }

    fn set_delete_on_termination(
        &self,
        eni_id: &str,
        attachment_id: &str,
    ) -> impl Future<Output = Result<(), CloudError>> + Send {
        (**self).set_delete_on_termination(eni_id, attachment_id)
    }

    fn detach_network_interface(
        &self,
        attachment_id: &str,
    ) -> impl Future<Output = Result<(), CloudError>> + Send {
        (**self).detach_network_interface(attachment_id)
    }

    fn delete_network_interface(
        &self,
        eni_id: &str,
    ) -> impl Future<Output = Result<(), CloudError>> + Send {
        (**self).delete_network_interface(eni_id)
    }

    fn assign_ipv4_prefixes(
        &self,
        eni_id: &str,
        count: u32,
    ) -> impl Future<Output = Result<Vec<Ipv4Network>, CloudError>> + Send {
        (**self).assign_ipv4_prefixes(eni_id, count)
    }

    fn unassign_ipv4_prefixes(
        &self,
        eni_id: &str,
        prefixes: &[Ipv4Network],
    ) -> impl Future<Output = Result<(), CloudError>> + Send {
        (**self).unassign_ipv4_prefixes(eni_id, prefixes)
    }

    fn assign_ipv6_prefixes(
        &self,
        eni_id: &str,
        count: u32,
    ) -> impl Future<Output = Result<Vec<Ipv6Network>, CloudError>> + Send {
        (**self).assign_ipv6_prefixes(eni_id, count)
    }

    fn unassign_ipv6_prefixes(
        &self,
        eni_id: &str,
        prefixes: &[Ipv6Network],
    ) -> impl Future<Output = Result<(), CloudError>> + Send {
        (**self).unassign_ipv6_prefixes(eni_id, prefixes)
    }

    fn find_network_interfaces(
        &self,
        filters: &[EniFilter],
    ) -> impl Future<Output = Result<Vec<NetworkInterface>, CloudError>> + Send {
        (**self).find_network_interfaces(filters)
    }

    fn create_tags(
        &self,
        resource_id: &str,
        tags: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), CloudError>> + Send {
        (**self).create_tags(resource_id, tags)
    }

    fn describe_subnets(
        &self,
        filters: &[EniFilter],
    ) -> impl Future<Output = Result<Vec<Subnet>, CloudError>> + Send {
        (**self).describe_subnets(filters)
    }

    fn throttled_within(&self, window: std::time::Duration) -> bool {
        (**self).throttled_within(window)
    }
}
