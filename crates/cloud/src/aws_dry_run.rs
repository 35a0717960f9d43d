//! [`DryRun`] on aws-sdk-ec2: each probe is the real call with `DryRun=true`.

use aws_sdk_ec2::types::{
    InstanceType, NetworkInterfaceAttachmentChanges, ResourceType, Tag, TagSpecification,
};

use crate::aws::{AwsEc2, sdk_error};
use crate::dry_run::{DryRun, DryRunCall, Permission};

impl DryRun for AwsEc2 {
    async fn dry_run(&self, call: &DryRunCall) -> Permission {
        let api = call.action();
        let c = &self.client;
        let outcome = match call {
            DryRunCall::DescribeNetworkInterfaces => c
                .describe_network_interfaces()
                .dry_run(true)
                .send()
                .await
                .map(drop)
                .map_err(|x| sdk_error(api, x)),
            DryRunCall::DescribeSubnets => c
                .describe_subnets()
                .dry_run(true)
                .send()
                .await
                .map(drop)
                .map_err(|x| sdk_error(api, x)),
            DryRunCall::DescribeInstanceTypes(t) => c
                .describe_instance_types()
                .instance_types(InstanceType::from(t.as_str()))
                .dry_run(true)
                .send()
                .await
                .map(drop)
                .map_err(|x| sdk_error(api, x)),
            DryRunCall::CreateNetworkInterface(subnet) => c
                .create_network_interface()
                .subnet_id(subnet)
                .description("aws-K8S-doctor-dry-run")
                .tag_specifications(
                    TagSpecification::builder()
                        .resource_type(ResourceType::NetworkInterface)
                        .tags(
                            Tag::builder()
                                .key("vpc-cni-doctor")
                                .value("dry-run")
                                .build(),
                        )
                        .build(),
                )
                .dry_run(true)
                .send()
                .await
                .map(drop)
                .map_err(|x| sdk_error(api, x)),
            DryRunCall::AttachNetworkInterface(eni, instance) => c
                .attach_network_interface()
                .network_interface_id(eni)
                .instance_id(instance)
                .device_index(1)
                .dry_run(true)
                .send()
                .await
                .map(drop)
                .map_err(|x| sdk_error(api, x)),
            DryRunCall::DetachNetworkInterface(attachment) => c
                .detach_network_interface()
                .attachment_id(attachment)
                .dry_run(true)
                .send()
                .await
                .map(drop)
                .map_err(|x| sdk_error(api, x)),
            DryRunCall::DeleteNetworkInterface(eni) => c
                .delete_network_interface()
                .network_interface_id(eni)
                .dry_run(true)
                .send()
                .await
                .map(drop)
                .map_err(|x| sdk_error(api, x)),
            DryRunCall::ModifyNetworkInterfaceAttribute(eni, attachment) => c
                .modify_network_interface_attribute()
                .network_interface_id(eni)
                .attachment(
                    NetworkInterfaceAttachmentChanges::builder()
                        .attachment_id(attachment)
                        .delete_on_termination(true)
                        .build(),
                )
                .dry_run(true)
                .send()
                .await
                .map(drop)
                .map_err(|x| sdk_error(api, x)),
            DryRunCall::CreateTags(eni) => c
                .create_tags()
                .resources(eni)
                .tags(
                    Tag::builder()
                        .key("vpc-cni-doctor")
                        .value("dry-run")
                        .build(),
                )
                .dry_run(true)
                .send()
                .await
                .map(drop)
                .map_err(|x| sdk_error(api, x)),
        };
        Permission::from_outcome(outcome)
    }
}
