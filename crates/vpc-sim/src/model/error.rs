//! Model errors, each carrying EC2's error code and message wording.

use std::net::{Ipv4Addr, Ipv6Addr};

use thiserror::Error;

/// Why an EC2 operation was refused. [`ModelError::code`] is the EC2 error code; `Display` is
/// EC2's message (clients such as the Go CNI parse ids out of some of them).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ModelError {
    /// Unknown ENI id(s).
    #[error("{}", not_found("networkInterface", .0))]
    EniNotFound(Vec<String>),
    /// Not an ENI id at all.
    #[error("Invalid id: \"{0}\" (expecting \"eni-...\")")]
    EniMalformed(String),
    /// Unknown instance id(s).
    #[error("{}", not_found("instance", .0))]
    InstanceNotFound(Vec<String>),
    /// Not an instance id at all.
    #[error("Invalid id: \"{0}\" (expecting \"i-...\")")]
    InstanceMalformed(String),
    /// Unknown subnet id(s).
    #[error("{}", not_found("subnet", .0))]
    SubnetNotFound(Vec<String>),
    /// Unknown attachment id.
    #[error("The attachment ID '{0}' does not exist")]
    AttachmentNotFound(String),
    /// Unknown security group.
    #[error("The security group '{0}' does not exist")]
    GroupNotFound(String),
    /// Not a security group id at all.
    #[error("Invalid id: \"{0}\" (expecting \"sg-...\")")]
    GroupMalformed(String),
    /// A security group name already taken in the VPC.
    #[error("The security group '{name}' already exists for VPC '{vpc_id}'")]
    GroupDuplicate {
        /// The name asked for.
        name: String,
        /// The VPC.
        vpc_id: String,
    },
    /// Unknown VPC.
    #[error("The vpc ID '{0}' does not exist")]
    VpcNotFound(String),
    /// Unknown instance type(s).
    #[error("The following supplied instance types do not exist: [{}]", .0.join(", "))]
    UnknownInstanceType(Vec<String>),
    /// The ENI would hold more IPv4 addresses (prefixes count as one) than its instance type allows.
    #[error("Number of private addresses will exceed limit.")]
    PrivateIpLimit,
    /// The instance would have more ENIs than its type allows.
    #[error("Interface count {count} exceeds the limit for {instance_type}")]
    AttachmentLimit {
        /// Interfaces the instance would have.
        count: u32,
        /// Its type.
        instance_type: String,
    },
    /// Not enough free addresses left in the subnet.
    #[error("The specified subnet does not have enough free addresses to satisfy the request.")]
    SubnetFull,
    /// No free, aligned /28 left in the subnet.
    #[error("The specified subnet does not have enough free cidr blocks to satisfy the request.")]
    NoCidrBlocks,
    /// The ENI is attached.
    #[error("The network interface '{0}' is currently in use.")]
    EniInUse(String),
    /// A requested address is taken.
    #[error("The specified IP address {0} is already in use.")]
    AddressInUse(Ipv4Addr),
    /// A requested IPv6 address is taken.
    #[error("The specified IPv6 address {0} is already in use.")]
    Ipv6AddressInUse(Ipv6Addr),
    /// IPv6 asked of an ENI whose subnet has no IPv6 CIDR.
    #[error(
        "The subnet {0} has no IPv6 CIDR block: IPv6 addresses and prefixes cannot be assigned in it."
    )]
    SubnetWithoutIpv6(String),
    /// The ENI would hold more IPv6 addresses (prefixes count as one) than its instance type
    /// allows.
    #[error(
        "Network interface {eni_id} would exceed its limit of {limit} IPv6 addresses and prefixes."
    )]
    Ipv6Limit {
        /// The ENI.
        eni_id: String,
        /// Its instance type's IPv6-per-ENI figure (0: the type has no IPv6).
        limit: u32,
    },
    /// A parameter has a value EC2 would refuse.
    #[error("{0}")]
    InvalidParameterValue(String),
    /// Parameters that cannot be used together, or none of a set that needs one.
    #[error("{0}")]
    InvalidParameterCombination(String),
    /// The operation is never allowed on this resource.
    #[error("{0}")]
    OperationNotPermitted(String),
    /// A ClientToken already used with other parameters.
    #[error("The client token '{0}' has already been used with other parameters.")]
    IdempotentParameterMismatch(String),
    /// An id of no kind the simulator knows (CreateTags).
    #[error("The ID '{0}' is not valid")]
    InvalidId(String),
}

fn not_found(kind: &str, ids: &[String]) -> String {
    match ids {
        [one] => format!("The {kind} ID '{one}' does not exist"),
        many => format!("The {kind} IDs '{}' do not exist", many.join(", ")),
    }
}

impl ModelError {
    /// EC2's error code for this error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::EniNotFound(_) => "InvalidNetworkInterfaceID.NotFound",
            Self::EniMalformed(_) => "InvalidNetworkInterfaceID.Malformed",
            Self::InstanceNotFound(_) => "InvalidInstanceID.NotFound",
            Self::InstanceMalformed(_) => "InvalidInstanceID.Malformed",
            Self::SubnetNotFound(_) => "InvalidSubnetID.NotFound",
            Self::AttachmentNotFound(_) => "InvalidAttachmentID.NotFound",
            Self::GroupNotFound(_) => "InvalidGroup.NotFound",
            Self::GroupMalformed(_) => "InvalidGroupId.Malformed",
            Self::GroupDuplicate { .. } => "InvalidGroup.Duplicate",
            Self::VpcNotFound(_) => "InvalidVpcID.NotFound",
            Self::UnknownInstanceType(_) => "InvalidInstanceType",
            Self::PrivateIpLimit => "PrivateIpAddressLimitExceeded",
            Self::AttachmentLimit { .. } => "AttachmentLimitExceeded",
            Self::SubnetFull => "InsufficientFreeAddressesInSubnet",
            Self::NoCidrBlocks => "InsufficientCidrBlocks",
            Self::EniInUse(_) => "InvalidNetworkInterface.InUse",
            Self::AddressInUse(_) | Self::Ipv6AddressInUse(_) => "InvalidIPAddress.InUse",
            // EC2's error list has no IPv6 counterpart of PrivateIpAddressLimitExceeded, nor a
            // code for a subnet without IPv6: both get the generic code, the message says which.
            Self::SubnetWithoutIpv6(_) | Self::Ipv6Limit { .. } => "InvalidParameterValue",
            Self::InvalidParameterValue(_) => "InvalidParameterValue",
            Self::InvalidParameterCombination(_) => "InvalidParameterCombination",
            Self::OperationNotPermitted(_) => "OperationNotPermitted",
            Self::IdempotentParameterMismatch(_) => "IdempotentParameterMismatch",
            Self::InvalidId(_) => "InvalidID",
        }
    }

    /// Shorthand for [`ModelError::InvalidParameterValue`].
    pub fn invalid(msg: impl Into<String>) -> Self {
        Self::InvalidParameterValue(msg.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_messages_name_the_ids_as_ec2_does() {
        let one = ModelError::EniNotFound(vec!["eni-00000088".into()]);
        assert_eq!(
            one.to_string(),
            "The networkInterface ID 'eni-00000088' does not exist"
        );
        let two = ModelError::InstanceNotFound(vec!["i-1".into(), "i-2".into()]);
        assert_eq!(two.to_string(), "The instance IDs 'i-1, i-2' do not exist");
        assert_eq!(two.code(), "InvalidInstanceID.NotFound");
    }
}
