//! [`DryRun`] on aws-sdk-ec2: each probe is the real call with `DryRun=true`.

use aws_sdk_ec2::types::{
    InstanceType, NetworkInterfaceAttachmentChanges, ResourceType, Tag, TagSpecification,
};

use crate::aws::{AwsEc2, sdk_error};
use crate::dry_run::{DryRun, DryRunCall, Permission};

/// Sends a request builder with `DryRun=true`; EC2 answers with an error either way.
macro_rules! probe {
    ($api:expr, $request:expr) => {
        $request
            .dry_run(true)
            .send()
            .await
            .map(drop)
            .map_err(|e| sdk_error($api, e))
    };
}

fn doctor_tag() -> Tag {
    Tag::builder()
        .key("vpc-cni-doctor")
        .value("dry-run")
        .build()
}

impl DryRun for AwsEc2 {
    async fn dry_run(&self, call: &DryRunCall) -> Permission {
        let api = call.action().wire_name();
        let c = &self.client;
        let outcome = match call {
            DryRunCall::DescribeNetworkInterfaces => {
                probe!(api, c.describe_network_interfaces())
            }
            DryRunCall::DescribeSubnets => probe!(api, c.describe_subnets()),
            DryRunCall::DescribeInstanceTypes(t) => probe!(
                api,
                c.describe_instance_types()
                    .instance_types(InstanceType::from(t.as_str()))
            ),
            DryRunCall::CreateNetworkInterface(subnet) => probe!(
                api,
                c.create_network_interface()
                    .subnet_id(subnet)
                    .description("aws-K8S-doctor-dry-run")
                    .tag_specifications(
                        TagSpecification::builder()
                            .resource_type(ResourceType::NetworkInterface)
                            .tags(doctor_tag())
                            .build(),
                    )
            ),
            DryRunCall::AttachNetworkInterface(eni, instance) => probe!(
                api,
                c.attach_network_interface()
                    .network_interface_id(eni)
                    .instance_id(instance)
                    .device_index(1)
            ),
            DryRunCall::DetachNetworkInterface(attachment) => {
                probe!(api, c.detach_network_interface().attachment_id(attachment))
            }
            DryRunCall::DeleteNetworkInterface(eni) => {
                probe!(api, c.delete_network_interface().network_interface_id(eni))
            }
            DryRunCall::ModifyNetworkInterfaceAttribute(eni, attachment) => probe!(
                api,
                c.modify_network_interface_attribute()
                    .network_interface_id(eni)
                    .attachment(
                        NetworkInterfaceAttachmentChanges::builder()
                            .attachment_id(attachment)
                            .delete_on_termination(true)
                            .build(),
                    )
            ),
            DryRunCall::CreateTags(eni) => {
                probe!(api, c.create_tags().resources(eni).tags(doctor_tag()))
            }
        };
        Permission::from_outcome(outcome)
    }
}
