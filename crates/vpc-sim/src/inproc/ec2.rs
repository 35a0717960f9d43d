//! One node's EC2 client: each call of the cloud seam as the model's operation.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

use cloud::{
    Action, CloudError, CreateEni, Ec2, EniFilter, InstanceLimits, NetworkInterface, Subnet,
};
use ipnetwork::{Ipv4Network, Ipv6Network};

use super::Account;
use super::convert::{filters as api_filters, interface, subnet};
use crate::ec2::Ec2Error;
use crate::ec2::actions::{describe_enis, subnets};
use crate::model::{Assign6Request, AssignRequest, EniChange, ModelError};

/// One node's EC2 client.
#[derive(Clone)]
pub struct NodeEc2 {
    account: Arc<Account>,
}

impl NodeEc2 {
    /// A client of `account`.
    pub fn new(account: &Arc<Account>) -> Self {
        NodeEc2 {
            account: Arc::clone(account),
        }
    }

    /// The account it calls.
    pub fn account(&self) -> &Arc<Account> {
        &self.account
    }

    /// DescribeInstances, as the Go CNI calls it before attaching an ENI: the device indexes
    /// the instance's ENIs hold.
    pub async fn describe_instance(&self, instance_id: &str) -> Result<Vec<u32>, CloudError> {
        self.account
            .call(
                Action::DescribeInstances,
                || instance_id.to_string(),
                |m, _| {
                    m.instance(instance_id)?;
                    Ok::<_, ModelError>(
                        m.enis_of(instance_id)
                            .iter()
                            .filter_map(|e| e.attachment.as_ref().map(|a| a.device_index))
                            .collect(),
                    )
                },
            )
            .await
    }

    /// ModifyNetworkInterfaceAttribute with `SecurityGroupId.N`, as the Go CNI calls it on
    /// every ENI it manages when it first reads the primary ENI's security groups: replaces
    /// the ENI's groups. ipamd never calls it, so it is not part of the cloud seam.
    pub async fn set_security_groups(
        &self,
        eni_id: &str,
        groups: &[String],
    ) -> Result<(), CloudError> {
        self.account
            .call(
                Action::ModifyNetworkInterfaceAttribute,
                || format!("{eni_id},groups={}", groups.join(",")),
                |m, _| m.modify_eni(eni_id, EniChange::SecurityGroups(groups.to_vec())),
            )
            .await
    }
}

impl Ec2 for NodeEc2 {
    async fn describe_instance_type(
        &self,
        instance_type: &str,
    ) -> Result<InstanceLimits, CloudError> {
        self.account
            .call(
                Action::DescribeInstanceTypes,
                || instance_type.to_string(),
                |m, _| m.limits(instance_type),
            )
            .await
    }

    async fn describe_network_interfaces(
        &self,
        ids: &[String],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.account
            .call(
                Action::DescribeNetworkInterfaces,
                || ids.join(","),
                |m, _| {
                    ids.iter()
                        .map(|id| m.eni(id).map(|e| interface(m, e)))
                        .collect()
                },
            )
            .await
    }

    async fn assign_private_ips(
        &self,
        eni_id: &str,
        count: u32,
    ) -> Result<Vec<Ipv4Addr>, CloudError> {
        self.account
            .call(
                Action::AssignPrivateIpAddresses,
                || format!("{eni_id},{count}"),
                |m, now| {
                    m.assign_private_ips(eni_id, AssignRequest::Count(count), now)
                        .map(|a| a.ips)
                },
            )
            .await
    }

    async fn unassign_private_ips(&self, eni_id: &str, ips: &[Ipv4Addr]) -> Result<(), CloudError> {
        self.account
            .call(
                Action::UnassignPrivateIpAddresses,
                || eni_id.to_string(),
                |m, _| m.unassign_private_ips(eni_id, ips, &[]),
            )
            .await
    }

    async fn describe_instance_enis(
        &self,
        instance_id: &str,
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.account
            .call(
                Action::DescribeNetworkInterfaces,
                || format!("attachment.instance-id={instance_id}"),
                |m, _| {
                    Ok::<_, ModelError>(
                        m.enis_of(instance_id)
                            .into_iter()
                            .map(|e| interface(m, e))
                            .collect(),
                    )
                },
            )
            .await
    }

    async fn create_network_interface(
        &self,
        request: &CreateEni,
    ) -> Result<NetworkInterface, CloudError> {
        let req = crate::model::CreateEni {
            subnet_id: request.subnet_id.clone(),
            description: request.description.clone(),
            security_groups: request.security_groups.clone(),
            primary_ip: None,
            secondary_count: request.secondary_ips,
            prefix_count: request.ipv4_prefixes,
            ipv6_address_count: None,
            tags: request.tags.clone(),
            client_token: Some(request.client_token.clone()).filter(|t| !t.is_empty()),
        };
        self.account
            .call(
                Action::CreateNetworkInterface,
                || request.subnet_id.clone(),
                |m, now| m.create_eni(req, now).map(|e| interface(m, &e)),
            )
            .await
    }

    async fn attach_network_interface(
        &self,
        eni_id: &str,
        instance_id: &str,
        device_index: u32,
    ) -> Result<String, CloudError> {
        self.account
            .call(
                Action::AttachNetworkInterface,
                || format!("{eni_id},{instance_id},{device_index}"),
                |m, now| m.attach_eni(eni_id, instance_id, device_index, 0, now),
            )
            .await
    }

    async fn set_delete_on_termination(
        &self,
        eni_id: &str,
        attachment_id: &str,
    ) -> Result<(), CloudError> {
        self.account
            .call(
                Action::ModifyNetworkInterfaceAttribute,
                || format!("{eni_id},{attachment_id}"),
                |m, _| {
                    m.modify_eni(
                        eni_id,
                        EniChange::DeleteOnTermination {
                            attachment_id: attachment_id.to_string(),
                            value: true,
                        },
                    )
                },
            )
            .await
    }

    async fn detach_network_interface(&self, attachment_id: &str) -> Result<(), CloudError> {
        self.account
            .call(
                Action::DetachNetworkInterface,
                || attachment_id.to_string(),
                |m, _| m.detach_eni(attachment_id, false).map(drop),
            )
            .await
    }

    async fn delete_network_interface(&self, eni_id: &str) -> Result<(), CloudError> {
        self.account
            .call(
                Action::DeleteNetworkInterface,
                || eni_id.to_string(),
                |m, _| m.delete_eni(eni_id),
            )
            .await
    }

    async fn assign_ipv4_prefixes(
        &self,
        eni_id: &str,
        count: u32,
    ) -> Result<Vec<Ipv4Network>, CloudError> {
        self.account
            .call(
                Action::AssignPrivateIpAddresses,
                || format!("{eni_id},prefixes={count}"),
                |m, now| {
                    m.assign_private_ips(eni_id, AssignRequest::PrefixCount(count), now)
                        .map(|a| a.prefixes)
                },
            )
            .await
    }

    async fn unassign_ipv4_prefixes(
        &self,
        eni_id: &str,
        prefixes: &[Ipv4Network],
    ) -> Result<(), CloudError> {
        self.account
            .call(
                Action::UnassignPrivateIpAddresses,
                || format!("{eni_id},prefixes"),
                |m, _| m.unassign_private_ips(eni_id, &[], prefixes),
            )
            .await
    }

    async fn assign_ipv6_prefixes(
        &self,
        eni_id: &str,
        count: u32,
    ) -> Result<Vec<Ipv6Network>, CloudError> {
        self.account
            .call(
                Action::AssignIpv6Addresses,
                || format!("{eni_id},ipv6-prefixes={count}"),
                |m, now| {
                    m.assign_ipv6(eni_id, Assign6Request::PrefixCount(count), now)
                        .map(|a| a.prefixes)
                },
            )
            .await
    }

    async fn unassign_ipv6_prefixes(
        &self,
        eni_id: &str,
        prefixes: &[Ipv6Network],
    ) -> Result<(), CloudError> {
        self.account
            .call(
                Action::UnassignIpv6Addresses,
                || format!("{eni_id},ipv6-prefixes"),
                |m, _| m.unassign_ipv6(eni_id, &[], prefixes).map(drop),
            )
            .await
    }

    async fn find_network_interfaces(
        &self,
        filters: &[EniFilter],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.account
            .call(
                Action::DescribeNetworkInterfaces,
                || format!("{} filters", filters.len()),
                |m, _| {
                    let found = describe_enis::select(m, &api_filters(filters))?;
                    Ok::<_, Ec2Error>(found.into_iter().map(|e| interface(m, e)).collect())
                },
            )
            .await
    }

    async fn create_tags(
        &self,
        resource_id: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), CloudError> {
        self.account
            .call(
                Action::CreateTags,
                || resource_id.to_string(),
                |m, _| m.create_tags(&[resource_id.to_string()], tags),
            )
            .await
    }

    async fn describe_subnets(&self, filters: &[EniFilter]) -> Result<Vec<Subnet>, CloudError> {
        self.account
            .call(
                Action::DescribeSubnets,
                || format!("{} filters", filters.len()),
                |m, _| {
                    let found = subnets::select(m, &api_filters(filters))?;
                    Ok::<_, Ec2Error>(found.into_iter().map(|s| subnet(m, s)).collect())
                },
            )
            .await
    }
}
