//! In-memory stand-ins for the cloud seams, for daemon tests that need no network.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Mutex, MutexGuard, PoisonError};

use ipnetwork::{Ipv4Network, Ipv6Network};

use crate::{
    Attachment, CloudError, CloudErrorKind, CreateEni, Ec2, EniFilter, Imds, InstanceLimits,
    NetworkInterface, Subnet,
};

/// IMDS as a map of paths to values.
#[derive(Debug, Default)]
pub struct FakeImds {
    values: Mutex<HashMap<String, String>>,
}

impl FakeImds {
    /// Builds from `(path, value)` pairs.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let values = pairs
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self {
            values: Mutex::new(values),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, String>> {
        self.values.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets one path.
    pub fn set(&mut self, path: &str, value: &str) {
        self.lock().insert(path.to_string(), value.to_string());
    }

    /// Removes one path.
    pub fn remove(&mut self, path: &str) {
        self.lock().remove(path);
    }
}

impl Imds for FakeImds {
    async fn get(&self, path: &str) -> Result<Option<String>, CloudError> {
        Ok(self.lock().get(path).cloned())
    }
}

#[derive(Debug, Default)]
struct Ec2State {
    limits: HashMap<String, InstanceLimits>,
    enis: BTreeMap<String, NetworkInterface>,
    /// Free addresses per subnet, handed out lowest first.
    free: HashMap<String, Vec<Ipv4Addr>>,
    /// Subnets DescribeSubnets knows (their `available_ips` is counted from `free` when asked).
    subnets: BTreeMap<String, Subnet>,
    /// Errors returned by the next calls of an API, in order.
    failures: HashMap<&'static str, Vec<CloudError>>,
    calls: Vec<String>,
    /// IPv4 addresses per ENI, the ENI's primary included (0 = no limit).
    ipv4_per_eni: u32,
    /// IPv6 addresses and /80 prefixes per ENI, each prefix counting one (0 = no limit).
    ipv6_per_eni: u32,
    /// ENIs per instance (0 = no limit).
    max_enis: u32,
    /// Ids handed out so far.
    created: u32,
    /// CreateNetworkInterface's client tokens: the request and the ENI it created.
    tokens: HashMap<String, (CreateEni, String)>,
    /// CreateNetworkInterface calls still to act on but answer with a lost connection.
    lose_create_answers: u32,
}

/// EC2 in memory: ENIs with secondary addresses taken from their subnet's free list, per-ENI
/// limits from the instance type, and scripted failures.
#[derive(Debug, Default)]
pub struct FakeEc2 {
    state: Mutex<Ec2State>,
}

impl FakeEc2 {
    fn lock(&self) -> MutexGuard<'_, Ec2State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Limits every ENI to `n` IPv4 addresses, its primary included, as the instance type does.
    pub fn set_ipv4_per_eni(&self, n: u32) {
        self.lock().ipv4_per_eni = n;
    }

    /// Limits every ENI to `n` IPv6 addresses and /80 prefixes together (a prefix counts one),
    /// as EC2's `Ipv6AddressesPerInterface` does.
    pub fn set_ipv6_per_eni(&self, n: u32) {
        self.lock().ipv6_per_eni = n;
    }

    /// Limits every instance to `n` attached ENIs.
    pub fn set_max_enis(&self, n: u32) {
        self.lock().max_enis = n;
    }

    /// Every ENI EC2 holds, by id.
    pub fn enis(&self) -> Vec<NetworkInterface> {
        self.lock().enis.values().cloned().collect()
    }

    /// Makes DescribeInstanceTypes know a type.
    pub fn add_instance_type(&self, name: &str, limits: InstanceLimits) {
        self.lock().limits.insert(name.to_string(), limits);
    }

    /// Adds an ENI; its subnet's free addresses are the CIDR's hosts minus AWS's reserved ones
    /// and the addresses the ENI already holds.
    pub fn add_eni(&self, eni: NetworkInterface, subnet_cidr: Ipv4Network) {
        let mut s = self.lock();
        let taken: Vec<Ipv4Addr> = s
            .enis
            .values()
            .chain([&eni])
            .flat_map(|e| e.primary_ip.iter().chain(&e.secondary_ips).copied())
            .collect();
        let free = s
            .free
            .entry(eni.subnet_id.clone())
            .or_insert_with(|| assignable(subnet_cidr));
        free.retain(|ip| !taken.contains(ip));
        s.enis.insert(eni.id.clone(), eni);
    }

    /// Makes DescribeSubnets know a subnet, and CreateNetworkInterface able to use it; its
    /// `ipv6_cidr`, if any, is the /64 that AssignIpv6Addresses delegates /80s of. Its
    /// `available_ips` is not taken from `subnet`: the fake counts what is free when asked, its
    /// CIDR's hosts minus AWS's reserved ones and the addresses its ENIs hold.
    pub fn add_subnet(&self, subnet: Subnet) {
        let mut s = self.lock();
        let held: Vec<Ipv4Addr> = s
            .enis
            .values()
            .filter(|e| e.subnet_id == subnet.id)
            .flat_map(|e| e.primary_ip.iter().chain(&e.secondary_ips).copied())
            .collect();
        s.free.entry(subnet.id.clone()).or_insert_with(|| {
            let mut free = assignable(subnet.cidr);
            free.retain(|ip| !held.contains(ip));
            free
        });
        s.subnets.insert(subnet.id.clone(), subnet);
    }

    /// Makes the next `n` CreateNetworkInterface calls create their ENI and then fail as a lost
    /// answer does (Unavailable), so only their ClientToken can tell a retry what they did.
    pub fn lose_create_answers(&self, n: u32) {
        self.lock().lose_create_answers = n;
    }

    /// Makes the next call(s) of `api` fail with these errors, one per call.
    pub fn fail_next(&self, api: &'static str, errors: Vec<CloudError>) {
        self.lock().failures.entry(api).or_default().extend(errors);
    }

    /// Every call made, as `Api(arg)` strings, in order.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// The ENI as EC2 holds it now.
    pub fn eni(&self, id: &str) -> Option<NetworkInterface> {
        self.lock().enis.get(id).cloned()
    }

    fn begin(
        &self,
        api: &'static str,
        arg: String,
    ) -> Result<MutexGuard<'_, Ec2State>, CloudError> {
        let mut s = self.lock();
        s.calls.push(format!("{api}({arg})"));
        if let Some(queue) = s.failures.get_mut(api).filter(|q| !q.is_empty()) {
            return Err(queue.remove(0));
        }
        Ok(s)
    }
}

/// The addresses of `cidr` EC2 may assign: all but the first four and the last.
fn assignable(cidr: Ipv4Network) -> Vec<Ipv4Addr> {
    let size = u64::from(cidr.size());
    cidr.iter()
        .enumerate()
        .filter(|(i, _)| *i >= 4 && (*i as u64) + 1 < size)
        .map(|(_, ip)| ip)
        .collect()
}

/// The values of a `tag-key` or `tag:<key>` filter for a resource with `tags`; `None` for any
/// other filter name.
fn tag_values(name: &str, tags: &BTreeMap<String, String>) -> Option<Vec<String>> {
    match name {
        "tag-key" => Some(tags.keys().cloned().collect()),
        _ => Some(
            tags.get(name.strip_prefix("tag:")?)
                .cloned()
                .into_iter()
                .collect(),
        ),
    }
}

/// Whether a resource passes every filter (filters AND, values OR, exact values);
/// `values(name)` gives the resource's values for a filter name, `None` for a name the fake
/// does not know, which fails the call as EC2 fails an invalid filter.
fn passes(
    api: &str,
    filters: &[EniFilter],
    values: impl Fn(&str) -> Option<Vec<String>>,
) -> Result<bool, CloudError> {
    for f in filters {
        let have = values(&f.name).ok_or_else(|| {
            CloudError::from_code(
                api,
                "InvalidParameterValue",
                format!("The filter '{}' is invalid", f.name),
            )
        })?;
        if !have.iter().any(|v| f.values.contains(v)) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Takes the lowest /28-aligned block of 16 free addresses, as EC2 delegates prefixes.
fn take_prefix_block(free: &mut Vec<Ipv4Addr>) -> Option<Ipv4Network> {
    let start = free
        .iter()
        .map(|ip| u32::from(*ip))
        .filter(|a| a % 16 == 0)
        .find(|start| (*start..start + 16).all(|a| free.contains(&Ipv4Addr::from(a))))?;
    free.retain(|ip| !(start..start + 16).contains(&u32::from(*ip)));
    Ipv4Network::new(Ipv4Addr::from(start), 28).ok()
}

/// /80s in a /64.
const PREFIXES_80_PER_64: u128 = 1 << 16;

/// Takes `count` /80s of the /64 `subnet` that are not in `held`, lowest first, or none at
/// all when fewer are free. The first /80 is never delegated: the subnet's own IPv6 addresses
/// come from it (vpc-sim hands out prefixes the same way, so the two agree in tests).
fn take_ipv6_prefixes(
    subnet: Ipv6Network,
    held: &[Ipv6Network],
    count: u32,
) -> Option<Vec<Ipv6Network>> {
    let base = u128::from(subnet.network());
    let new: Vec<Ipv6Network> = (1..PREFIXES_80_PER_64)
        .filter_map(|i| Ipv6Network::new(Ipv6Addr::from(base | (i << 48)), 80).ok())
        .filter(|p| !held.contains(p))
        .take(count as usize)
        .collect();
    (new.len() == count as usize).then_some(new)
}

fn no_cidr_block(api: &str, subnet: &str) -> CloudError {
    CloudError::from_code(
        api,
        "InsufficientCidrBlocks",
        format!("The specified subnet {subnet} does not have enough contiguous free space"),
    )
}

fn not_found(api: &str, id: &str) -> CloudError {
    CloudError::from_code(
        api,
        "InvalidNetworkInterfaceID.NotFound",
        format!("The networkInterface ID '{id}' does not exist"),
    )
}

impl Ec2State {
    fn eni(&self, api: &str, id: &str) -> Result<&NetworkInterface, CloudError> {
        self.enis.get(id).ok_or_else(|| not_found(api, id))
    }

    fn eni_mut(&mut self, api: &str, id: &str) -> Result<&mut NetworkInterface, CloudError> {
        self.enis.get_mut(id).ok_or_else(|| not_found(api, id))
    }
}

impl FakeEc2 {
    /// CreateNetworkInterface's effect: a new ENI with addresses from its subnet.
    fn create_eni(s: &mut Ec2State, request: &CreateEni) -> Result<NetworkInterface, CloudError> {
        let api = "CreateNetworkInterface";
        let wanted = request.secondary_ips as usize + 1;
        let free = s.free.get_mut(&request.subnet_id).ok_or_else(|| {
            CloudError::from_code(
                api,
                "InvalidSubnetID.NotFound",
                format!("The subnet ID '{}' does not exist", request.subnet_id),
            )
        })?;
        if free.len() < wanted {
            return Err(CloudError::from_code(
                api,
                "InsufficientFreeAddressesInSubnet",
                format!(
                    "The specified subnet {} does not have enough free addresses",
                    request.subnet_id
                ),
            ));
        }
        let mut ips: Vec<Ipv4Addr> = free.drain(..wanted).collect();
        let primary = ips.remove(0);
        let mut prefixes = Vec::new();
        for _ in 0..request.ipv4_prefixes {
            match take_prefix_block(free) {
                Some(block) => prefixes.push(block),
                None => {
                    free.extend(prefixes.iter().flat_map(|p: &Ipv4Network| p.iter()));
                    free.push(primary);
                    free.extend(ips);
                    free.sort();
                    return Err(no_cidr_block(api, &request.subnet_id));
                }
            }
        }
        s.created += 1;
        let n = s.created;
        let eni = NetworkInterface {
            id: format!("eni-fake{n:012}"),
            mac: format!("02:fa:ce:00:{:02x}:{:02x}", n / 256 % 256, n % 256),
            subnet_id: request.subnet_id.clone(),
            description: request.description.clone(),
            status: "available".into(),
            primary_ip: Some(primary),
            secondary_ips: ips,
            prefixes,
            security_groups: request.security_groups.clone(),
            tags: request.tags.clone(),
            ..Default::default()
        };
        s.enis.insert(eni.id.clone(), eni.clone());
        Ok(eni)
    }
}

impl Ec2 for FakeEc2 {
    async fn describe_instance_type(
        &self,
        instance_type: &str,
    ) -> Result<InstanceLimits, CloudError> {
        let s = self.begin("DescribeInstanceTypes", instance_type.to_string())?;
        s.limits.get(instance_type).copied().ok_or_else(|| {
            CloudError::from_code(
                "DescribeInstanceTypes",
                "InvalidInstanceType",
                format!("The following supplied instance types do not exist: [{instance_type}]"),
            )
        })
    }

    async fn describe_network_interfaces(
        &self,
        ids: &[String],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        let s = self.begin("DescribeNetworkInterfaces", ids.join(","))?;
        ids.iter()
            .map(|id| {
                s.enis
                    .get(id)
                    .cloned()
                    .ok_or_else(|| not_found("DescribeNetworkInterfaces", id))
            })
            .collect()
    }

    async fn assign_private_ips(
        &self,
        eni_id: &str,
        count: u32,
    ) -> Result<Vec<Ipv4Addr>, CloudError> {
        let api = "AssignPrivateIpAddresses";
        let mut s = self.begin(api, format!("{eni_id},{count}"))?;
        let eni = s.eni(api, eni_id)?.clone();
        let per_eni = s.ipv4_per_eni;
        if per_eni > 0 && eni.secondary_ips.len() as u32 + 1 + count > per_eni {
            return Err(CloudError::from_code(
                api,
                "PrivateIpAddressLimitExceeded",
                format!("Number of private addresses will exceed limit of {per_eni}"),
            ));
        }
        let free = s.free.entry(eni.subnet_id.clone()).or_default();
        if free.len() < count as usize {
            return Err(CloudError::from_code(
                api,
                "InsufficientFreeAddressesInSubnet",
                format!(
                    "The specified subnet {} does not have enough free addresses",
                    eni.subnet_id
                ),
            ));
        }
        let new: Vec<Ipv4Addr> = free.drain(..count as usize).collect();
        if let Some(e) = s.enis.get_mut(eni_id) {
            e.secondary_ips.extend(&new);
        }
        Ok(new)
    }

    async fn unassign_private_ips(&self, eni_id: &str, ips: &[Ipv4Addr]) -> Result<(), CloudError> {
        let api = "UnassignPrivateIpAddresses";
        let mut s = self.begin(api, eni_id.to_string())?;
        let eni = s.eni_mut(api, eni_id)?;
        if let Some(ip) = ips.iter().find(|ip| !eni.secondary_ips.contains(ip)) {
            return Err(CloudError::new(
                api,
                CloudErrorKind::Invalid,
                format!("address {ip} is not assigned to {eni_id}"),
            ));
        }
        eni.secondary_ips.retain(|ip| !ips.contains(ip));
        let subnet = eni.subnet_id.clone();
        s.free.entry(subnet).or_default().extend(ips);
        Ok(())
    }

    async fn describe_instance_enis(
        &self,
        instance_id: &str,
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        let s = self.begin(
            "DescribeNetworkInterfaces",
            format!("attachment.instance-id={instance_id}"),
        )?;
        Ok(s.enis
            .values()
            .filter(|e| {
                e.attachment
                    .as_ref()
                    .is_some_and(|a| a.instance_id.as_deref() == Some(instance_id))
            })
            .cloned()
            .collect())
    }

    async fn create_network_interface(
        &self,
        request: &CreateEni,
    ) -> Result<NetworkInterface, CloudError> {
        let api = "CreateNetworkInterface";
        let mut s = self.begin(api, request.subnet_id.clone())?;
        // A request without a token is never matched with another, as in EC2.
        let known = (!request.client_token.is_empty())
            .then(|| s.tokens.get(&request.client_token).cloned())
            .flatten();
        let eni = match known {
            // EC2's idempotency: the same token and request get the ENI the first one created.
            Some((first, id)) if first == *request => {
                s.enis.get(&id).cloned().ok_or_else(|| {
                    CloudError::from_code(
                        api,
                        "InvalidNetworkInterfaceID.NotFound",
                        format!("The networkInterface ID '{id}' does not exist"),
                    )
                })?
            }
            Some(_) => {
                return Err(CloudError::from_code(
                    api,
                    "IdempotentParameterMismatch",
                    "The client token has already been used with other parameters.",
                ));
            }
            None => {
                let eni = Self::create_eni(&mut s, request)?;
                s.tokens.insert(
                    request.client_token.clone(),
                    (request.clone(), eni.id.clone()),
                );
                eni
            }
        };
        if s.lose_create_answers > 0 {
            s.lose_create_answers -= 1;
            return Err(CloudError::new(
                api,
                CloudErrorKind::Unavailable,
                "connection closed before the answer",
            ));
        }
        Ok(eni)
    }

    async fn attach_network_interface(
        &self,
        eni_id: &str,
        instance_id: &str,
        device_index: u32,
    ) -> Result<String, CloudError> {
        let api = "AttachNetworkInterface";
        let mut s = self.begin(api, format!("{eni_id},{instance_id},{device_index}"))?;
        let attached: Vec<u32> = s
            .enis
            .values()
            .filter_map(|e| e.attachment.as_ref())
            .filter(|a| a.instance_id.as_deref() == Some(instance_id))
            .map(|a| a.device_index)
            .collect();
        if s.max_enis > 0 && attached.len() as u32 >= s.max_enis {
            return Err(CloudError::from_code(
                api,
                "AttachmentLimitExceeded",
                format!(
                    "Interface count {} exceeds the limit for this instance type",
                    attached.len() + 1
                ),
            ));
        }
        if attached.contains(&device_index) {
            return Err(CloudError::from_code(
                api,
                "InvalidParameterValue",
                format!(
                    "Instance '{instance_id}' already has an interface attached at device index '{device_index}'."
                ),
            ));
        }
        let eni = s.eni_mut(api, eni_id)?;
        if eni.attachment.is_some() {
            return Err(CloudError::from_code(
                api,
                "InvalidNetworkInterface.InUse",
                format!("Interface: [{eni_id}] in use."),
            ));
        }
        let id = format!("eni-attach-{}", eni_id.trim_start_matches("eni-"));
        eni.attachment = Some(Attachment {
            id: id.clone(),
            instance_id: Some(instance_id.to_string()),
            device_index,
            network_card_index: 0,
            delete_on_termination: false,
        });
        eni.status = "in-use".into();
        Ok(id)
    }

    async fn set_delete_on_termination(
        &self,
        eni_id: &str,
        attachment_id: &str,
    ) -> Result<(), CloudError> {
        let api = "ModifyNetworkInterfaceAttribute";
        let mut s = self.begin(api, format!("{eni_id},{attachment_id}"))?;
        let eni = s.eni_mut(api, eni_id)?;
        match eni.attachment.as_mut().filter(|a| a.id == attachment_id) {
            Some(a) => {
                a.delete_on_termination = true;
                Ok(())
            }
            None => Err(CloudError::from_code(
                api,
                "InvalidAttachmentID.NotFound",
                format!("The attachment ID '{attachment_id}' does not exist"),
            )),
        }
    }

    async fn detach_network_interface(&self, attachment_id: &str) -> Result<(), CloudError> {
        let api = "DetachNetworkInterface";
        let mut s = self.begin(api, attachment_id.to_string())?;
        let eni = s
            .enis
            .values_mut()
            .find(|e| e.attachment.as_ref().is_some_and(|a| a.id == attachment_id))
            .ok_or_else(|| {
                CloudError::from_code(
                    api,
                    "InvalidAttachmentID.NotFound",
                    format!("The attachment ID '{attachment_id}' does not exist"),
                )
            })?;
        eni.attachment = None;
        eni.status = "available".into();
        Ok(())
    }

    async fn delete_network_interface(&self, eni_id: &str) -> Result<(), CloudError> {
        let api = "DeleteNetworkInterface";
        let mut s = self.begin(api, eni_id.to_string())?;
        let eni = s.eni(api, eni_id)?;
        if eni.attachment.is_some() {
            return Err(CloudError::from_code(
                api,
                "InvalidNetworkInterface.InUse",
                format!("The network interface '{eni_id}' is currently in use."),
            ));
        }
        let eni = s
            .enis
            .remove(eni_id)
            .ok_or_else(|| not_found(api, eni_id))?;
        let back: Vec<Ipv4Addr> = eni
            .primary_ip
            .into_iter()
            .chain(eni.secondary_ips)
            .collect();
        s.free.entry(eni.subnet_id).or_default().extend(back);
        Ok(())
    }

    async fn assign_ipv4_prefixes(
        &self,
        eni_id: &str,
        count: u32,
    ) -> Result<Vec<Ipv4Network>, CloudError> {
        let api = "AssignPrivateIpAddresses";
        let mut s = self.begin(api, format!("{eni_id},prefixes={count}"))?;
        let eni = s.eni(api, eni_id)?.clone();
        let per_eni = s.ipv4_per_eni;
        let slots = eni.secondary_ips.len() + eni.prefixes.len() + 1;
        if per_eni > 0 && slots as u32 + count > per_eni {
            return Err(CloudError::from_code(
                api,
                "PrivateIpAddressLimitExceeded",
                format!("Number of private addresses will exceed limit of {per_eni}"),
            ));
        }
        let free = s.free.entry(eni.subnet_id.clone()).or_default();
        let mut new = Vec::new();
        for _ in 0..count {
            match take_prefix_block(free) {
                Some(block) => new.push(block),
                None => {
                    free.extend(new.iter().flat_map(|p: &Ipv4Network| p.iter()));
                    return Err(no_cidr_block(api, &eni.subnet_id));
                }
            }
        }
        if let Some(e) = s.enis.get_mut(eni_id) {
            e.prefixes.extend(&new);
        }
        Ok(new)
    }

    async fn unassign_ipv4_prefixes(
        &self,
        eni_id: &str,
        prefixes: &[Ipv4Network],
    ) -> Result<(), CloudError> {
        let api = "UnassignPrivateIpAddresses";
        let mut s = self.begin(api, format!("{eni_id},prefixes"))?;
        let eni = s.eni_mut(api, eni_id)?;
        if let Some(p) = prefixes.iter().find(|p| !eni.prefixes.contains(p)) {
            return Err(CloudError::new(
                api,
                CloudErrorKind::Invalid,
                format!("prefix {p} is not delegated to {eni_id}"),
            ));
        }
        eni.prefixes.retain(|p| !prefixes.contains(p));
        let subnet = eni.subnet_id.clone();
        s.free
            .entry(subnet)
            .or_default()
            .extend(prefixes.iter().flat_map(|p| p.iter()));
        Ok(())
    }

    async fn assign_ipv6_prefixes(
        &self,
        eni_id: &str,
        count: u32,
    ) -> Result<Vec<Ipv6Network>, CloudError> {
        let api = "AssignIpv6Addresses";
        let mut s = self.begin(api, format!("{eni_id},ipv6-prefixes={count}"))?;
        let eni = s.eni(api, eni_id)?.clone();
        let per_eni = s.ipv6_per_eni;
        let slots = eni.ipv6_addresses.len() + eni.ipv6_prefixes.len();
        if per_eni > 0 && slots as u32 + count > per_eni {
            // EC2 has no dedicated code for this limit; vpc-sim answers the same.
            return Err(CloudError::from_code(
                api,
                "InvalidParameterValue",
                format!(
                    "Network interface {eni_id} would exceed its limit of {per_eni} IPv6 addresses and prefixes."
                ),
            ));
        }
        let subnet = s
            .subnets
            .get(&eni.subnet_id)
            .and_then(|subnet| subnet.ipv6_cidr)
            .ok_or_else(|| {
                CloudError::from_code(
                    api,
                    "InvalidParameterValue",
                    format!("The subnet {} has no IPv6 CIDR block.", eni.subnet_id),
                )
            })?;
        let held: Vec<Ipv6Network> = s
            .enis
            .values()
            .filter(|e| e.subnet_id == eni.subnet_id)
            .flat_map(|e| e.ipv6_prefixes.iter().copied())
            .collect();
        let new = take_ipv6_prefixes(subnet, &held, count)
            .ok_or_else(|| no_cidr_block(api, &eni.subnet_id))?;
        if let Some(e) = s.enis.get_mut(eni_id) {
            e.ipv6_prefixes.extend(&new);
        }
        Ok(new)
    }

    async fn unassign_ipv6_prefixes(
        &self,
        eni_id: &str,
        prefixes: &[Ipv6Network],
    ) -> Result<(), CloudError> {
        let api = "UnassignIpv6Addresses";
        let mut s = self.begin(api, format!("{eni_id},ipv6-prefixes"))?;
        let eni = s.eni_mut(api, eni_id)?;
        if let Some(p) = prefixes.iter().find(|p| !eni.ipv6_prefixes.contains(p)) {
            return Err(CloudError::new(
                api,
                CloudErrorKind::Invalid,
                format!("prefix {p} is not delegated to {eni_id}"),
            ));
        }
        // Free again as soon as no ENI holds it: the allocator looks at what ENIs hold.
        eni.ipv6_prefixes.retain(|p| !prefixes.contains(p));
        Ok(())
    }

    async fn find_network_interfaces(
        &self,
        filters: &[EniFilter],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        let api = "DescribeNetworkInterfaces";
        let s = self.begin(api, format!("{} filters", filters.len()))?;
        let mut found = Vec::new();
        for eni in s.enis.values() {
            let values = |name: &str| {
                let one = |v: &String| Some(vec![v.clone()]);
                match name {
                    "attachment.instance-id" => Some(
                        eni.attachment
                            .iter()
                            .filter_map(|a| a.instance_id.clone())
                            .collect(),
                    ),
                    "status" => one(&eni.status),
                    "vpc-id" => one(&eni.vpc_id),
                    "subnet-id" => one(&eni.subnet_id),
                    "description" => one(&eni.description),
                    name => tag_values(name, &eni.tags),
                }
            };
            if passes(api, filters, values)? {
                found.push(eni.clone());
            }
        }
        Ok(found)
    }

    async fn create_tags(
        &self,
        resource_id: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), CloudError> {
        let api = "CreateTags";
        let mut guard = self.begin(api, resource_id.to_string())?;
        let s = &mut *guard;
        let target = match (s.enis.get_mut(resource_id), s.subnets.get_mut(resource_id)) {
            (Some(eni), _) => &mut eni.tags,
            (None, Some(subnet)) => &mut subnet.tags,
            (None, None) => return Err(not_found(api, resource_id)),
        };
        target.extend(tags.iter().map(|(k, v)| (k.clone(), v.clone())));
        Ok(())
    }

    async fn describe_subnets(&self, filters: &[EniFilter]) -> Result<Vec<Subnet>, CloudError> {
        let api = "DescribeSubnets";
        let s = self.begin(api, format!("{} filters", filters.len()))?;
        let mut found = Vec::new();
        for subnet in s.subnets.values() {
            let values = |name: &str| {
                let one = |v: String| Some(vec![v]);
                match name {
                    "subnet-id" => one(subnet.id.clone()),
                    "vpc-id" => one(subnet.vpc_id.clone()),
                    "availability-zone" => one(subnet.availability_zone.clone()),
                    "cidr-block" => one(subnet.cidr.to_string()),
                    "ipv6-cidr-block-association.ipv6-cidr-block" => {
                        Some(subnet.ipv6_cidr.iter().map(|c| c.to_string()).collect())
                    }
                    name => tag_values(name, &subnet.tags),
                }
            };
            if passes(api, filters, values)? {
                let free = s.free.get(&subnet.id).map_or(0, Vec::len);
                found.push(Subnet {
                    available_ips: u32::try_from(free).unwrap_or(u32::MAX),
                    ..subnet.clone()
                });
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet(id: &str, cidr: &str, az: &str, tags: &[(&str, &str)]) -> Subnet {
        Subnet {
            id: id.into(),
            cidr: cidr.parse().unwrap(),
            ipv6_cidr: None,
            availability_zone: az.into(),
            vpc_id: "vpc-1".into(),
            available_ips: 0,
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn ids(subnets: &[Subnet]) -> Vec<&str> {
        subnets.iter().map(|s| s.id.as_str()).collect()
    }

    #[tokio::test]
    async fn subnets_are_filtered_and_their_free_counts_follow_allocations() {
        let ec2 = FakeEc2::default();
        ec2.add_subnet(subnet("subnet-a", "10.0.0.0/24", "us-west-2a", &[]));
        ec2.add_subnet(subnet(
            "subnet-cni",
            "100.64.1.0/28",
            "us-west-2a",
            &[("kubernetes.io/role/cni", "1")],
        ));
        ec2.add_subnet(subnet(
            "subnet-b",
            "100.64.2.0/24",
            "us-west-2b",
            &[("kubernetes.io/role/cni", "0")],
        ));
        let f = EniFilter::new;
        let in_a = ec2
            .describe_subnets(&[f("availability-zone", "us-west-2a")])
            .await
            .unwrap();
        assert_eq!(ids(&in_a), ["subnet-a", "subnet-cni"]);
        assert_eq!(in_a[1].available_ips, 11, "a /28 less AWS's five");
        let tagged = ec2
            .describe_subnets(&[f("tag-key", "kubernetes.io/role/cni")])
            .await
            .unwrap();
        assert_eq!(ids(&tagged), ["subnet-b", "subnet-cni"]);
        let cni = ec2
            .describe_subnets(&[f("tag:kubernetes.io/role/cni", "1"), f("vpc-id", "vpc-1")])
            .await
            .unwrap();
        assert_eq!(ids(&cni), ["subnet-cni"]);
        assert_eq!(
            cni[0]
                .tags
                .get("kubernetes.io/role/cni")
                .map(String::as_str),
            Some("1")
        );

        let eni = ec2
            .create_network_interface(&CreateEni {
                subnet_id: "subnet-cni".into(),
                secondary_ips: 2,
                ..CreateEni::default()
            })
            .await
            .unwrap();
        let count = |v: Vec<Subnet>| v[0].available_ips;
        let cni_only = [f("subnet-id", "subnet-cni")];
        assert_eq!(count(ec2.describe_subnets(&cni_only).await.unwrap()), 8);
        ec2.unassign_private_ips(&eni.id, &eni.secondary_ips[..1])
            .await
            .unwrap();
        assert_eq!(count(ec2.describe_subnets(&cni_only).await.unwrap()), 9);

        ec2.create_tags(
            "subnet-a",
            &[("kubernetes.io/role/cni".to_string(), "1".to_string())].into(),
        )
        .await
        .unwrap();
        let cni = ec2
            .describe_subnets(&[f("tag:kubernetes.io/role/cni", "1")])
            .await
            .unwrap();
        assert_eq!(ids(&cni), ["subnet-a", "subnet-cni"]);

        let err = ec2
            .describe_subnets(&[f("default-for-az", "true")])
            .await
            .unwrap_err();
        assert_eq!(err.code.as_deref(), Some("InvalidParameterValue"), "{err}");
    }

    #[tokio::test]
    async fn a_subnet_added_after_its_enis_keeps_their_addresses_taken() {
        let ec2 = FakeEc2::default();
        let eni = NetworkInterface {
            id: "eni-1".into(),
            subnet_id: "subnet-a".into(),
            primary_ip: Some("10.0.0.4".parse().unwrap()),
            secondary_ips: vec!["10.0.0.5".parse().unwrap()],
            ..NetworkInterface::default()
        };
        ec2.add_eni(eni, "10.0.0.0/24".parse().unwrap());
        ec2.add_subnet(subnet("subnet-a", "10.0.0.0/24", "us-west-2a", &[]));
        let all = ec2.describe_subnets(&[]).await.unwrap();
        assert_eq!(all[0].available_ips, 251 - 2);
        let created = ec2
            .create_network_interface(&CreateEni {
                subnet_id: "subnet-a".into(),
                ..CreateEni::default()
            })
            .await
            .unwrap();
        assert_eq!(created.primary_ip, Some("10.0.0.6".parse().unwrap()));
    }

    /// A dual-stack fake: `subnet-a` 10.0.0.0/24 with the /64 `2001:db8:0:1::/64`, `subnet-4`
    /// IPv4 only, and one ENI in each.
    fn dual() -> FakeEc2 {
        let ec2 = FakeEc2::default();
        ec2.add_subnet(Subnet {
            ipv6_cidr: Some("2001:db8:0:1::/64".parse().unwrap()),
            ..subnet("subnet-a", "10.0.0.0/24", "us-west-2a", &[])
        });
        ec2.add_subnet(subnet("subnet-4", "10.0.1.0/24", "us-west-2a", &[]));
        for (id, subnet) in [
            ("eni-1", "subnet-a"),
            ("eni-2", "subnet-a"),
            ("eni-4", "subnet-4"),
        ] {
            ec2.add_eni(
                NetworkInterface {
                    id: id.into(),
                    subnet_id: subnet.into(),
                    ..NetworkInterface::default()
                },
                "10.0.0.0/16".parse().unwrap(),
            );
        }
        ec2
    }

    fn v6(prefixes: &[&str]) -> Vec<Ipv6Network> {
        prefixes.iter().map(|p| p.parse().unwrap()).collect()
    }

    #[tokio::test]
    async fn ipv6_prefixes_are_delegated_lowest_first_per_subnet_and_given_back() {
        let ec2 = dual();
        let got = ec2.assign_ipv6_prefixes("eni-1", 2).await.unwrap();
        assert_eq!(
            got,
            v6(&["2001:db8:0:1:1::/80", "2001:db8:0:1:2::/80"]),
            "the first /80 holds the subnet's addresses"
        );
        // Another ENI of the same subnet never gets a prefix eni-1 holds.
        let other = ec2.assign_ipv6_prefixes("eni-2", 1).await.unwrap();
        assert_eq!(other, v6(&["2001:db8:0:1:3::/80"]));
        assert_eq!(
            ec2.describe_network_interfaces(&["eni-1".into()])
                .await
                .unwrap()[0]
                .ipv6_prefixes,
            got
        );
        assert_eq!(ec2.assign_ipv6_prefixes("eni-1", 0).await.unwrap(), []);

        ec2.unassign_ipv6_prefixes("eni-1", &got[..1])
            .await
            .unwrap();
        assert_eq!(ec2.eni("eni-1").unwrap().ipv6_prefixes, got[1..]);
        let again = ec2.assign_ipv6_prefixes("eni-2", 1).await.unwrap();
        assert_eq!(again, got[..1], "a given-back /80 is free again");
        assert_eq!(
            ec2.calls()[..2],
            [
                "AssignIpv6Addresses(eni-1,ipv6-prefixes=2)",
                "AssignIpv6Addresses(eni-2,ipv6-prefixes=1)"
            ]
        );
    }

    #[tokio::test]
    async fn ipv6_prefix_calls_are_all_or_nothing() {
        let ec2 = dual();
        ec2.set_ipv6_per_eni(3);
        ec2.assign_ipv6_prefixes("eni-1", 2).await.unwrap();
        let err = ec2.assign_ipv6_prefixes("eni-1", 2).await.unwrap_err();
        assert_eq!(err.code.as_deref(), Some("InvalidParameterValue"), "{err}");
        assert!(err.message.contains("limit of 3"), "{err}");
        assert_eq!(
            ec2.eni("eni-1").unwrap().ipv6_prefixes.len(),
            2,
            "none of the two taken"
        );
        ec2.assign_ipv6_prefixes("eni-1", 1).await.unwrap();

        // One prefix that is not the ENI's fails the whole call: the ENI keeps both.
        let held = ec2.eni("eni-1").unwrap().ipv6_prefixes;
        let stranger = v6(&["2001:db8:0:1:77::/80"]);
        let err = ec2
            .unassign_ipv6_prefixes("eni-1", &[held[0], stranger[0]])
            .await
            .unwrap_err();
        assert_eq!(err.kind, CloudErrorKind::Invalid, "{err}");
        assert_eq!(ec2.eni("eni-1").unwrap().ipv6_prefixes, held);

        // The subnet runs out: 65535 /80s in a /64 besides the first; asking one more than is
        // free takes none.
        ec2.set_ipv6_per_eni(0);
        let err = ec2
            .assign_ipv6_prefixes("eni-2", 65535 - 2)
            .await
            .unwrap_err();
        assert_eq!(err.kind, CloudErrorKind::SubnetFull, "{err}");
        assert!(ec2.eni("eni-2").unwrap().ipv6_prefixes.is_empty());
        let all = ec2.assign_ipv6_prefixes("eni-2", 65535 - 3).await.unwrap();
        assert_eq!(all.last(), Some(&"2001:db8:0:1:ffff::/80".parse().unwrap()));
    }

    #[tokio::test]
    async fn ipv6_prefixes_need_an_ipv6_subnet_and_a_known_eni() {
        let ec2 = dual();
        let err = ec2.assign_ipv6_prefixes("eni-4", 1).await.unwrap_err();
        assert_eq!(err.code.as_deref(), Some("InvalidParameterValue"), "{err}");
        assert!(err.message.contains("subnet-4 has no IPv6"), "{err}");
        let err = ec2.assign_ipv6_prefixes("eni-none", 1).await.unwrap_err();
        assert_eq!(err.kind, CloudErrorKind::NotFound);
        let err = ec2
            .unassign_ipv6_prefixes("eni-none", &v6(&["2001:db8:0:1:1::/80"]))
            .await
            .unwrap_err();
        assert_eq!(err.kind, CloudErrorKind::NotFound);
    }

    #[tokio::test]
    async fn subnets_carry_and_filter_by_their_ipv6_cidr() {
        let ec2 = dual();
        let by_v6 = ec2
            .describe_subnets(&[EniFilter::new(
                "ipv6-cidr-block-association.ipv6-cidr-block",
                "2001:db8:0:1::/64",
            )])
            .await
            .unwrap();
        assert_eq!(ids(&by_v6), ["subnet-a"]);
        assert_eq!(
            by_v6[0].ipv6_cidr,
            Some("2001:db8:0:1::/64".parse().unwrap())
        );
        let all = ec2.describe_subnets(&[]).await.unwrap();
        assert_eq!(ids(&all), ["subnet-4", "subnet-a"]);
        assert_eq!(all[0].ipv6_cidr, None);
    }
}
