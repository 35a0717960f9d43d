//! The cloud seams on aws-sdk-ec2 and aws-config's IMDS client.
//!
//! Endpoints follow the SDK's conventions so the same binary talks to AWS or to vpc-sim:
//! `AWS_EC2_METADATA_SERVICE_ENDPOINT` moves IMDS (read by aws-config itself) and
//! `AWS_EC2_ENDPOINT` (the Go CNI's variable) moves EC2. The region comes from IMDS and the
//! credentials from the SDK's default chain (environment, web identity, IMDS role, ...).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::imds::client::error::ImdsError;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types::{
    Filter, InstanceType, InstanceTypeHypervisor, NetworkInterfaceAttachmentChanges, ResourceType,
    SubnetCidrBlockStateCode, Tag, TagSpecification,
};

/// The SDK itself, for callers that need to build their own client (tests against moto).
pub use aws_sdk_ec2 as sdk;

use crate::{
    Action, Attachment, CloudError, CloudErrorKind, CreateEni, Ec2, EniFilter, Imds,
    InstanceLimits, NetworkInterface, Subnet,
};
use ipnetwork::{Ipv4Network, Ipv6Network};

/// IMDS through aws-config (IMDSv2, token cached and refreshed by the client).
#[derive(Clone, Debug)]
pub struct AwsImds {
    client: aws_config::imds::Client,
}

impl AwsImds {
    /// A client for the default endpoint or `AWS_EC2_METADATA_SERVICE_ENDPOINT`.
    pub fn new() -> Self {
        Self {
            client: aws_config::imds::Client::builder().build(),
        }
    }

    /// A client for an explicit endpoint (`http://host:port`), for callers that must not go
    /// through the process-wide environment variable (tests running several simulated nodes).
    pub fn with_endpoint(endpoint: &str) -> Result<Self, CloudError> {
        let builder = aws_config::imds::Client::builder()
            .endpoint(endpoint)
            .map_err(|e| {
                CloudError::new(
                    "IMDS",
                    CloudErrorKind::Invalid,
                    format!("endpoint {endpoint:?}: {e}"),
                )
            })?;
        Ok(Self {
            client: builder.build(),
        })
    }
}

impl Default for AwsImds {
    fn default() -> Self {
        Self::new()
    }
}

impl Imds for AwsImds {
    async fn get(&self, path: &str) -> Result<Option<String>, CloudError> {
        match self.client.get(format!("/latest/{path}")).await {
            Ok(value) => Ok(Some(value.as_ref().to_string())),
            Err(ImdsError::ErrorResponse(resp)) if resp.response().status().as_u16() == 404 => {
                Ok(None)
            }
            Err(e) => Err(CloudError::new(
                format!("IMDS {path}"),
                CloudErrorKind::Unavailable,
                DisplayErrorContext(&e).to_string(),
            )),
        }
    }
}

/// Settings of the EC2 client.
#[derive(Clone, Debug)]
pub struct Ec2Settings {
    /// The node's region.
    pub region: String,
    /// Overrides the EC2 endpoint (`AWS_EC2_ENDPOINT`).
    pub endpoint: Option<String>,
    /// Per-attempt timeout (`HTTP_TIMEOUT`).
    pub attempt_timeout: Duration,
}

/// EC2 through aws-sdk-ec2.
#[derive(Clone, Debug)]
pub struct AwsEc2 {
    pub(crate) client: aws_sdk_ec2::Client,
}

impl AwsEc2 {
    /// Builds the client from the SDK's default configuration chain and `settings`.
    pub async fn connect(settings: &Ec2Settings) -> Self {
        let timeouts = TimeoutConfig::builder()
            .operation_attempt_timeout(settings.attempt_timeout)
            .build();
        // No retries in the SDK: `throttle::Throttled` retries throttling and transient
        // failures itself, visibly in the metrics, and two layers would multiply the waits.
        let shared = aws_config::defaults(BehaviorVersion::latest())
            .region(aws_config::Region::new(settings.region.clone()))
            .timeout_config(timeouts)
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .load()
            .await;
        let mut conf = aws_sdk_ec2::config::Builder::from(&shared);
        if let Some(endpoint) = &settings.endpoint {
            conf = conf.endpoint_url(endpoint);
        }
        Self::from_client(aws_sdk_ec2::Client::from_conf(conf.build()))
    }

    /// Wraps a client built elsewhere (tests against moto build their own).
    pub fn from_client(client: aws_sdk_ec2::Client) -> Self {
        Self { client }
    }
}

pub(crate) fn sdk_error<E>(api: &str, err: SdkError<E>) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match (&err, err.code()) {
        (SdkError::ServiceError(_), Some(code)) => {
            CloudError::from_code(api, code, err.message().unwrap_or_default())
        }
        (
            SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_),
            _,
        ) => CloudError::new(
            api,
            CloudErrorKind::Unavailable,
            DisplayErrorContext(&err).to_string(),
        ),
        _ => CloudError::new(
            api,
            CloudErrorKind::Other,
            DisplayErrorContext(&err).to_string(),
        ),
    }
}

fn ipv4(api: &str, what: &str, s: &str) -> Result<Ipv4Addr, CloudError> {
    s.parse().map_err(|_| {
        CloudError::new(
            api,
            CloudErrorKind::Other,
            format!("EC2 returned {what} {s:?}, not an IPv4 address"),
        )
    })
}

/// A value of EC2's answer parsed as `T`; `what` names the field and `expected` what it should
/// have been, for the error.
fn parsed<T: FromStr>(api: &str, what: &str, s: &str, expected: &str) -> Result<T, CloudError> {
    s.parse().map_err(|_| {
        CloudError::new(
            api,
            CloudErrorKind::Other,
            format!("EC2 returned {what} {s:?}, not {expected}"),
        )
    })
}

/// A field the answer of `api` lacks although ipamd needs it: an error that names both, never
/// a silent empty value.
fn missing(api: &str, what: &str) -> CloudError {
    CloudError::new(
        api,
        CloudErrorKind::Other,
        format!("EC2's answer lacks {what}"),
    )
}

fn required<'a>(api: &str, what: &str, value: Option<&'a str>) -> Result<&'a str, CloudError> {
    value
        .filter(|v| !v.is_empty())
        .ok_or_else(|| missing(api, what))
}

fn to_network_interface(
    api: &str,
    eni: &aws_sdk_ec2::types::NetworkInterface,
) -> Result<NetworkInterface, CloudError> {
    let id = required(api, "NetworkInterfaceId", eni.network_interface_id())?;
    let field = |name: &str| format!("{name} of {id}");
    let primary_ip = eni
        .private_ip_address()
        .map(|s| ipv4(api, "primary address", s))
        .transpose()?;
    let mut secondary_ips = Vec::new();
    for a in eni.private_ip_addresses() {
        if a.primary() == Some(true) {
            continue;
        }
        if let Some(ip) = a.private_ip_address() {
            secondary_ips.push(ipv4(api, "secondary address", ip)?);
        }
    }
    let mut prefixes = Vec::new();
    for p in eni.ipv4_prefixes() {
        if let Some(prefix) = p.ipv4_prefix() {
            prefixes.push(prefix.parse().map_err(|_| {
                CloudError::new(
                    api,
                    CloudErrorKind::Other,
                    format!("EC2 returned prefix {prefix:?}"),
                )
            })?);
        }
    }
    let ipv6_addresses = eni
        .ipv6_addresses()
        .iter()
        .filter_map(|a| a.ipv6_address())
        .map(|a| parsed(api, &field("Ipv6Address"), a, "an IPv6 address"))
        .collect::<Result<Vec<_>, _>>()?;
    let ipv6_prefixes = eni
        .ipv6_prefixes()
        .iter()
        .filter_map(|p| p.ipv6_prefix())
        .map(|p| parsed(api, &field("Ipv6Prefix"), p, "an IPv6 network"))
        .collect::<Result<Vec<_>, _>>()?;
    let attachment = match eni.attachment() {
        None => None,
        Some(a) => Some(Attachment {
            id: required(api, &field("Attachment.AttachmentId"), a.attachment_id())?.to_string(),
            instance_id: a.instance_id().map(str::to_string),
            device_index: a
                .device_index()
                .and_then(|d| u32::try_from(d).ok())
                .ok_or_else(|| missing(api, &field("Attachment.DeviceIndex")))?,
            // Absent in answers from before multi-card instances: card 0.
            network_card_index: a.network_card_index().unwrap_or(0).max(0) as u32,
            delete_on_termination: a.delete_on_termination().unwrap_or(false),
        }),
    };
    Ok(NetworkInterface {
        id: id.to_string(),
        mac: required(api, &field("MacAddress"), eni.mac_address())?.to_ascii_lowercase(),
        subnet_id: required(api, &field("SubnetId"), eni.subnet_id())?.to_string(),
        vpc_id: required(api, &field("VpcId"), eni.vpc_id())?.to_string(),
        // EC2 leaves an empty description out.
        description: eni.description().unwrap_or_default().to_string(),
        status: required(api, &field("Status"), eni.status().map(|s| s.as_str()))?.to_string(),
        primary_ip,
        secondary_ips,
        prefixes,
        ipv6_addresses,
        ipv6_prefixes,
        attachment,
        security_groups: eni
            .groups()
            .iter()
            .filter_map(|g| g.group_id().map(str::to_string))
            .collect(),
        tags: tag_map(eni.tag_set()),
    })
}

fn tag_map(tags: &[Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| {
            Some((
                t.key()?.to_string(),
                t.value().unwrap_or_default().to_string(),
            ))
        })
        .collect()
}

fn to_subnet(api: &str, s: &aws_sdk_ec2::types::Subnet) -> Result<Subnet, CloudError> {
    let id = required(api, "SubnetId", s.subnet_id())?;
    let field = |name: &str| format!("{name} of {id}");
    let cidr = required(api, &field("CidrBlock"), s.cidr_block())?;
    // Associations being removed or that failed are not the subnet's CIDR; EC2 lets a subnet
    // have one associated IPv6 block at a time.
    let ipv6_cidr = s
        .ipv6_cidr_block_association_set()
        .iter()
        .filter(|a| {
            a.ipv6_cidr_block_state()
                .and_then(|st| st.state())
                .is_none_or(|st| *st == SubnetCidrBlockStateCode::Associated)
        })
        .find_map(|a| a.ipv6_cidr_block())
        .map(|c| parsed::<Ipv6Network>(api, &field("Ipv6CidrBlock"), c, "an IPv6 network"))
        .transpose()?;
    let available = s
        .available_ip_address_count()
        .ok_or_else(|| missing(api, &field("AvailableIpAddressCount")))?;
    Ok(Subnet {
        id: id.to_string(),
        cidr: cidr.parse().map_err(|_| {
            CloudError::new(
                api,
                CloudErrorKind::Other,
                format!("EC2 returned CidrBlock {cidr:?} of {id}, not an IPv4 network"),
            )
        })?,
        ipv6_cidr,
        availability_zone: required(api, &field("AvailabilityZone"), s.availability_zone())?
            .to_string(),
        vpc_id: required(api, &field("VpcId"), s.vpc_id())?.to_string(),
        available_ips: u32::try_from(available).unwrap_or(0),
        tags: tag_map(s.tags()),
    })
}

/// The subnets of an answer that can hold IPv4 ENIs: an IPv6-only subnet has no IPv4 CIDR by
/// design, so it is left out rather than taken for an incomplete answer.
fn ipv4_subnets(
    api: &str,
    subnets: &[aws_sdk_ec2::types::Subnet],
) -> Result<Vec<Subnet>, CloudError> {
    subnets
        .iter()
        .filter(|s| s.ipv6_native() != Some(true))
        .map(|s| to_subnet(api, s))
        .collect()
}

fn sdk_filters(filters: &[EniFilter]) -> Vec<Filter> {
    filters
        .iter()
        .map(|f| {
            Filter::builder()
                .name(&f.name)
                .set_values(Some(f.values.clone()))
                .build()
        })
        .collect()
}

/// Pages the answers of `api` are cut into, at most; a listing that needs more is refused
/// rather than followed forever (a VPC-wide listing at 1000 a page ends long before).
const MAX_PAGES: usize = 1000;

/// Every item of a paginated call: `page(token)` sends one request and returns its items and
/// the next token.
async fn all_pages<T, F, Fut>(api: &str, mut page: F) -> Result<Vec<T>, CloudError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<String>), CloudError>>,
{
    let mut all = Vec::new();
    let mut token = None;
    for _ in 0..MAX_PAGES {
        let (items, next) = page(token).await?;
        all.extend(items);
        token = next;
        if token.is_none() {
            return Ok(all);
        }
    }
    Err(CloudError::new(
        api,
        CloudErrorKind::Other,
        format!("more than {MAX_PAGES} pages"),
    ))
}

impl Ec2 for AwsEc2 {
    async fn describe_instance_type(
        &self,
        instance_type: &str,
    ) -> Result<InstanceLimits, CloudError> {
        let api = Action::DescribeInstanceTypes.wire_name();
        let out = self
            .client
            .describe_instance_types()
            .instance_types(InstanceType::from(instance_type))
            .send()
            .await
            .map_err(|e| sdk_error(api, e))?;
        let missing = |what: &str| missing(api, &format!("{what} of {instance_type}"));
        let info = out
            .instance_types()
            .iter()
            .find(|t| t.instance_type().map(|t| t.as_str()) == Some(instance_type))
            .ok_or_else(|| {
                CloudError::new(
                    api,
                    CloudErrorKind::NotFound,
                    format!("EC2 does not know instance type {instance_type}"),
                )
            })?;
        let net = info.network_info().ok_or_else(|| missing("NetworkInfo"))?;
        let default_card = net.default_network_card_index().unwrap_or(0);
        // Multi-card types: ipamd manages the default card, so its ENI count is the limit.
        let max_enis = net
            .network_cards()
            .iter()
            .find(|c| c.network_card_index() == Some(default_card))
            .and_then(|c| c.maximum_network_interfaces())
            .or(net.maximum_network_interfaces())
            .ok_or_else(|| missing("MaximumNetworkInterfaces"))?;
        let ipv4_per_eni = net
            .ipv4_addresses_per_interface()
            .ok_or_else(|| missing("Ipv4AddressesPerInterface"))?;
        Ok(InstanceLimits {
            max_enis: max_enis.max(0) as u32,
            ipv4_per_eni: ipv4_per_eni.max(0) as u32,
            nitro: info.hypervisor() == Some(&InstanceTypeHypervisor::Nitro),
            bare_metal: info.bare_metal().unwrap_or(false),
            network_cards: net.maximum_network_cards().unwrap_or(1).max(1) as u32,
        })
    }

    async fn describe_network_interfaces(
        &self,
        ids: &[String],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        let api = Action::DescribeNetworkInterfaces.wire_name();
        let out = self
            .client
            .describe_network_interfaces()
            .set_network_interface_ids(Some(ids.to_vec()))
            .send()
            .await
            .map_err(|e| sdk_error(api, e))?;
        out.network_interfaces()
            .iter()
            .map(|e| to_network_interface(api, e))
            .collect()
    }

    async fn assign_private_ips(
        &self,
        eni_id: &str,
        count: u32,
    ) -> Result<Vec<Ipv4Addr>, CloudError> {
        let api = Action::AssignPrivateIpAddresses.wire_name();
        let out = self
            .client
            .assign_private_ip_addresses()
            .network_interface_id(eni_id)
            .secondary_private_ip_address_count(count.min(i32::MAX as u32) as i32)
            .send()
            .await
            .map_err(|e| sdk_error(api, e))?;
        out.assigned_private_ip_addresses()
            .iter()
            .filter_map(|a| a.private_ip_address())
            .map(|s| ipv4(api, "assigned address", s))
            .collect()
    }

    async fn unassign_private_ips(&self, eni_id: &str, ips: &[Ipv4Addr]) -> Result<(), CloudError> {
        let api = Action::UnassignPrivateIpAddresses.wire_name();
        self.client
            .unassign_private_ip_addresses()
            .network_interface_id(eni_id)
            .set_private_ip_addresses(Some(ips.iter().map(Ipv4Addr::to_string).collect()))
            .send()
            .await
            .map_err(|e| sdk_error(api, e))?;
        Ok(())
    }

    async fn describe_instance_enis(
        &self,
        instance_id: &str,
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.find_network_interfaces(&[EniFilter::new("attachment.instance-id", instance_id)])
            .await
    }

    async fn create_network_interface(
        &self,
        request: &CreateEni,
    ) -> Result<NetworkInterface, CloudError> {
        let api = Action::CreateNetworkInterface.wire_name();
        let tags = request
            .tags
            .iter()
            .map(|(k, v)| Tag::builder().key(k).value(v).build())
            .collect();
        let out = self
            .client
            .create_network_interface()
            .subnet_id(&request.subnet_id)
            .description(&request.description)
            .client_token(&request.client_token)
            .set_groups(Some(request.security_groups.clone()))
            .set_secondary_private_ip_address_count(
                (request.ipv4_prefixes == 0)
                    .then_some(request.secondary_ips.min(i32::MAX as u32) as i32),
            )
            .set_ipv4_prefix_count(
                (request.ipv4_prefixes > 0)
                    .then_some(request.ipv4_prefixes.min(i32::MAX as u32) as i32),
            )
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::NetworkInterface)
                    .set_tags(Some(tags))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| sdk_error(api, e))?;
        let eni = out
            .network_interface()
            .ok_or_else(|| missing(api, "NetworkInterface"))?;
        to_network_interface(api, eni)
    }

    async fn attach_network_interface(
        &self,
        eni_id: &str,
        instance_id: &str,
        device_index: u32,
    ) -> Result<String, CloudError> {
        let api = Action::AttachNetworkInterface.wire_name();
        let out = self
            .client
            .attach_network_interface()
            .network_interface_id(eni_id)
            .instance_id(instance_id)
            .device_index(device_index.min(i32::MAX as u32) as i32)
            .network_card_index(0)
            .send()
            .await
            .map_err(|e| sdk_error(api, e))?;
        required(api, "AttachmentId", out.attachment_id()).map(str::to_string)
    }

    async fn set_delete_on_termination(
        &self,
        eni_id: &str,
        attachment_id: &str,
    ) -> Result<(), CloudError> {
        let api = Action::ModifyNetworkInterfaceAttribute.wire_name();
        self.client
            .modify_network_interface_attribute()
            .network_interface_id(eni_id)
            .attachment(
                NetworkInterfaceAttachmentChanges::builder()
                    .attachment_id(attachment_id)
                    .delete_on_termination(true)
                    .build(),
            )
            .send()
            .await
            .map_err(|e| sdk_error(api, e))?;
        Ok(())
    }

    async fn detach_network_interface(&self, attachment_id: &str) -> Result<(), CloudError> {
        let api = Action::DetachNetworkInterface.wire_name();
        self.client
            .detach_network_interface()
            .attachment_id(attachment_id)
            .send()
            .await
            .map_err(|e| sdk_error(api, e))?;
        Ok(())
    }

    async fn delete_network_interface(&self, eni_id: &str) -> Result<(), CloudError> {
        let api = Action::DeleteNetworkInterface.wire_name();
        self.client
            .delete_network_interface()
            .network_interface_id(eni_id)
            .send()
            .await
            .map_err(|e| sdk_error(api, e))?;
        Ok(())
    }

    async fn assign_ipv4_prefixes(
        &self,
        eni_id: &str,
        count: u32,
    ) -> Result<Vec<Ipv4Network>, CloudError> {
        let api = Action::AssignPrivateIpAddresses.wire_name();
        let out = self
            .client
            .assign_private_ip_addresses()
            .network_interface_id(eni_id)
            .ipv4_prefix_count(count.min(i32::MAX as u32) as i32)
            .send()
            .await
            .map_err(|e| sdk_error(api, e))?;
        out.assigned_ipv4_prefixes()
            .iter()
            .filter_map(|p| p.ipv4_prefix())
            .map(|p| {
                p.parse().map_err(|_| {
                    CloudError::new(
                        api,
                        CloudErrorKind::Other,
                        format!("EC2 returned prefix {p:?}"),
                    )
                })
            })
            .collect()
    }

    async fn unassign_ipv4_prefixes(
        &self,
        eni_id: &str,
        prefixes: &[Ipv4Network],
    ) -> Result<(), CloudError> {
        let api = Action::UnassignPrivateIpAddresses.wire_name();
        self.client
            .unassign_private_ip_addresses()
            .network_interface_id(eni_id)
            .set_ipv4_prefixes(Some(prefixes.iter().map(Ipv4Network::to_string).collect()))
            .send()
            .await
            .map_err(|e| sdk_error(api, e))?;
        Ok(())
    }

    async fn assign_ipv6_prefixes(
        &self,
        eni_id: &str,
        count: u32,
    ) -> Result<Vec<Ipv6Network>, CloudError> {
        let api = Action::AssignIpv6Addresses.wire_name();
        let out = self
            .client
            .assign_ipv6_addresses()
            .network_interface_id(eni_id)
            .ipv6_prefix_count(count.min(i32::MAX as u32) as i32)
            .send()
            .await
            .map_err(|e| sdk_error(api, e))?;
        out.assigned_ipv6_prefixes()
            .iter()
            .map(|p| parsed(api, "prefix", p, "an IPv6 network"))
            .collect()
    }

    async fn unassign_ipv6_prefixes(
        &self,
        eni_id: &str,
        prefixes: &[Ipv6Network],
    ) -> Result<(), CloudError> {
        let api = Action::UnassignIpv6Addresses.wire_name();
        self.client
            .unassign_ipv6_addresses()
            .network_interface_id(eni_id)
            .set_ipv6_prefixes(Some(prefixes.iter().map(Ipv6Network::to_string).collect()))
            .send()
            .await
            .map_err(|e| sdk_error(api, e))?;
        Ok(())
    }

    async fn find_network_interfaces(
        &self,
        filters: &[EniFilter],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        let api = Action::DescribeNetworkInterfaces.wire_name();
        let filters = &sdk_filters(filters);
        all_pages(api, |token| async move {
            let out = self
                .client
                .describe_network_interfaces()
                .set_filters(Some(filters.to_vec()))
                .max_results(1000)
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| sdk_error(api, e))?;
            let enis = out
                .network_interfaces()
                .iter()
                .map(|e| to_network_interface(api, e))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((enis, out.next_token().map(str::to_string)))
        })
        .await
    }

    async fn create_tags(
        &self,
        resource_id: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), CloudError> {
        let api = Action::CreateTags.wire_name();
        self.client
            .create_tags()
            .resources(resource_id)
            .set_tags(Some(
                tags.iter()
                    .map(|(k, v)| Tag::builder().key(k).value(v).build())
                    .collect(),
            ))
            .send()
            .await
            .map_err(|e| sdk_error(api, e))?;
        Ok(())
    }

    async fn describe_subnets(&self, filters: &[EniFilter]) -> Result<Vec<Subnet>, CloudError> {
        let api = Action::DescribeSubnets.wire_name();
        let filters = &sdk_filters(filters);
        all_pages(api, |token| async move {
            let out = self
                .client
                .describe_subnets()
                .set_filters(Some(filters.to_vec()))
                .max_results(1000)
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| sdk_error(api, e))?;
            let subnets = ipv4_subnets(api, out.subnets())?;
            Ok((subnets, out.next_token().map(str::to_string)))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_ec2::types::{
        NetworkInterface as SdkEni, NetworkInterfaceAttachment, Subnet as SdkSubnet,
    };

    use super::*;

    fn complete() -> aws_sdk_ec2::types::builders::NetworkInterfaceBuilder {
        SdkEni::builder()
            .network_interface_id("eni-1")
            .mac_address("02:AA:00:00:00:01")
            .subnet_id("subnet-1")
            .vpc_id("vpc-1")
            .status(aws_sdk_ec2::types::NetworkInterfaceStatus::InUse)
            .private_ip_address("10.0.0.5")
    }

    #[test]
    fn a_complete_answer_converts() {
        let eni = to_network_interface(
            Action::DescribeNetworkInterfaces.wire_name(),
            &complete().build(),
        )
        .unwrap();
        assert_eq!(
            (eni.id.as_str(), eni.mac.as_str(), eni.status.as_str()),
            ("eni-1", "02:aa:00:00:00:01", "in-use")
        );
        assert_eq!(eni.description, "", "EC2 leaves an empty description out");
    }

    #[test]
    fn a_missing_field_is_an_error_naming_it_and_the_call() {
        let api = Action::DescribeNetworkInterfaces.wire_name();
        let no_id = complete().set_network_interface_id(None).build();
        let e = to_network_interface(api, &no_id).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{api}: EC2's answer lacks NetworkInterfaceId")
        );
        let no_mac = complete().set_mac_address(None).build();
        let e = to_network_interface(api, &no_mac).unwrap_err();
        assert!(e.to_string().ends_with("lacks MacAddress of eni-1"), "{e}");
        let no_subnet = complete().subnet_id("").build();
        let e = to_network_interface(api, &no_subnet).unwrap_err();
        assert!(e.to_string().ends_with("lacks SubnetId of eni-1"), "{e}");
        let no_device = complete()
            .attachment(
                NetworkInterfaceAttachment::builder()
                    .attachment_id("eni-attach-1")
                    .build(),
            )
            .build();
        let e = to_network_interface(api, &no_device).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("lacks Attachment.DeviceIndex of eni-1"),
            "{e}"
        );
    }

    fn complete_subnet() -> aws_sdk_ec2::types::builders::SubnetBuilder {
        SdkSubnet::builder()
            .subnet_id("subnet-1")
            .cidr_block("100.64.1.0/24")
            .availability_zone("us-west-2b")
            .vpc_id("vpc-1")
            .available_ip_address_count(247)
            .tags(
                Tag::builder()
                    .key("kubernetes.io/role/cni")
                    .value("1")
                    .build(),
            )
    }

    #[test]
    fn a_complete_subnet_converts_and_an_ipv6_only_one_is_left_out() {
        let api = Action::DescribeSubnets.wire_name();
        let v6 = SdkSubnet::builder()
            .subnet_id("subnet-6")
            .ipv6_native(true)
            .build();
        let got = ipv4_subnets(api, &[complete_subnet().build(), v6]).unwrap();
        assert_eq!(
            got,
            vec![Subnet {
                id: "subnet-1".into(),
                cidr: "100.64.1.0/24".parse().unwrap(),
                ipv6_cidr: None,
                availability_zone: "us-west-2b".into(),
                vpc_id: "vpc-1".into(),
                available_ips: 247,
                tags: [("kubernetes.io/role/cni".to_string(), "1".to_string())].into(),
            }]
        );
    }

    #[test]
    fn a_subnet_missing_a_field_is_an_error_naming_it_and_the_call() {
        let api = Action::DescribeSubnets.wire_name();
        let lacks = |s: SdkSubnet| to_subnet(api, &s).unwrap_err().to_string();
        assert_eq!(
            lacks(complete_subnet().set_subnet_id(None).build()),
            format!("{}: EC2's answer lacks SubnetId", Action::DescribeSubnets)
        );
        for (subnet, field) in [
            (complete_subnet().set_cidr_block(None).build(), "CidrBlock"),
            (
                complete_subnet().set_availability_zone(None).build(),
                "AvailabilityZone",
            ),
            (complete_subnet().vpc_id("").build(), "VpcId"),
            (
                complete_subnet()
                    .set_available_ip_address_count(None)
                    .build(),
                "AvailableIpAddressCount",
            ),
        ] {
            let e = lacks(subnet);
            assert!(e.ends_with(&format!("lacks {field} of subnet-1")), "{e}");
        }
        let e = lacks(complete_subnet().cidr_block("2600::/64").build());
        assert!(e.contains("CidrBlock \"2600::/64\" of subnet-1"), "{e}");
    }

    #[test]
    fn an_enis_ipv6_addresses_and_prefixes_convert_and_a_bad_one_is_named() {
        use aws_sdk_ec2::types::{Ipv6PrefixSpecification, NetworkInterfaceIpv6Address};
        let api = Action::DescribeNetworkInterfaces.wire_name();
        let addr = |a: &str| {
            NetworkInterfaceIpv6Address::builder()
                .ipv6_address(a)
                .build()
        };
        let prefix = |p: &str| Ipv6PrefixSpecification::builder().ipv6_prefix(p).build();
        let eni = complete()
            .ipv6_addresses(addr("2001:db8::4"))
            .ipv6_addresses(addr("2001:db8::5"))
            .ipv6_prefixes(prefix("2001:db8:0:0:1::/80"))
            .build();
        let got = to_network_interface(api, &eni).unwrap();
        assert_eq!(
            got.ipv6_addresses,
            [
                "2001:db8::4".parse::<std::net::Ipv6Addr>().unwrap(),
                "2001:db8::5".parse().unwrap()
            ]
        );
        assert_eq!(
            got.ipv6_prefixes,
            ["2001:db8:0:0:1::/80".parse::<Ipv6Network>().unwrap()]
        );
        let v4 = to_network_interface(api, &complete().build()).unwrap();
        assert!(v4.ipv6_addresses.is_empty() && v4.ipv6_prefixes.is_empty());

        let bad = complete().ipv6_addresses(addr("10.0.0.9")).build();
        let e = to_network_interface(api, &bad).unwrap_err().to_string();
        assert!(
            e.contains("Ipv6Address of eni-1 \"10.0.0.9\", not an IPv6 address"),
            "{e}"
        );
        let bad = complete().ipv6_prefixes(prefix("2001:db8::/200")).build();
        let e = to_network_interface(api, &bad).unwrap_err().to_string();
        assert!(e.contains("Ipv6Prefix of eni-1 \"2001:db8::/200\""), "{e}");
    }

    #[test]
    fn a_subnets_associated_ipv6_cidr_is_read_and_others_are_not() {
        use aws_sdk_ec2::types::{SubnetCidrBlockState, SubnetIpv6CidrBlockAssociation};
        let api = Action::DescribeSubnets.wire_name();
        let assoc = |cidr: &str, state: SubnetCidrBlockStateCode| {
            SubnetIpv6CidrBlockAssociation::builder()
                .ipv6_cidr_block(cidr)
                .ipv6_cidr_block_state(SubnetCidrBlockState::builder().state(state).build())
                .build()
        };
        let dual = complete_subnet()
            .ipv6_cidr_block_association_set(assoc(
                "2001:db8:0:7::/64",
                SubnetCidrBlockStateCode::Disassociated,
            ))
            .ipv6_cidr_block_association_set(assoc(
                "2001:db8:0:8::/64",
                SubnetCidrBlockStateCode::Associated,
            ))
            .build();
        assert_eq!(
            to_subnet(api, &dual).unwrap().ipv6_cidr,
            Some("2001:db8:0:8::/64".parse().unwrap()),
            "the disassociated block is not the subnet's"
        );
        let gone = complete_subnet()
            .ipv6_cidr_block_association_set(assoc(
                "2001:db8:0:7::/64",
                SubnetCidrBlockStateCode::Disassociating,
            ))
            .build();
        assert_eq!(to_subnet(api, &gone).unwrap().ipv6_cidr, None);
        let bad = complete_subnet()
            .ipv6_cidr_block_association_set(assoc(
                "10.0.0.0/24",
                SubnetCidrBlockStateCode::Associated,
            ))
            .build();
        let e = to_subnet(api, &bad).unwrap_err().to_string();
        assert!(
            e.contains("Ipv6CidrBlock of subnet-1 \"10.0.0.0/24\", not an IPv6 network"),
            "{e}"
        );
    }
}
