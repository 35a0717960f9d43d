//! Growing the pool: `increaseDatastorePool` (ipamd.go:968-1009) with `tryAssignIPs` /
//! `tryAssignPrefixes` on the ENIs there are and `tryAllocateENI` → `AllocENI` for a new one.

use std::collections::BTreeMap;
use std::time::Duration;

use cloud::{CloudError, CloudErrorKind, CreateEni, Ec2};

use super::init::created_at;
use super::{
    Attached, CREATED_AT_TAG, DESCRIPTION_PREFIX, ENI_EC2_TRIES, NODE_TAG, Node, ip_limit,
};

/// The subnet-discovery tag (`subnetDiscoveryTagKey`).
const CNI_SUBNET_TAG: &str = "kubernetes.io/role/cni";

impl Node {
    /// `increaseDatastorePool` (ipamd.go:968-1009). Its error is what handlePreScaling makes
    /// fatal: a failure to add to an ENI that is not a full subnet.
    pub(super) async fn increase(&self) -> Result<(), CloudError> {
        // ipamd.go:980: nothing within 120 s of a subnet-full answer.
        if self.paused() {
            return Ok(());
        }
        match self.try_assign().await {
            // ipamd.go:985-992 (with subnet discovery off, which the model never is).
            Err(e) if e.is_subnet_exhausted() => self.pause(),
            Err(e) => return Err(e),
            Ok(true) => self.touched(),
            // ipamd.go:996-1006: no ENI took any, so a new ENI if there is room for one
            // (hasRoomForEni :2592); its failure is not returned.
            Ok(false) => {
                let enis = self.state().pool.enis().count() as u32;
                if enis < self.max_enis && self.try_allocate_eni().await.is_ok() {
                    self.touched();
                }
            }
        }
        Ok(())
    }

    /// `GetAllocatableENIs` (data_store.go) in map order, with what each holds: every ENI
    /// but the primary under custom networking, with room for more.
    fn allocatable(&self) -> Vec<(String, u32)> {
        let held: Vec<(String, u32)> = {
            let st = self.state();
            st.pool
                .enis()
                .filter(|e| !(self.opts.custom_networking && e.is_primary()))
                .map(|e| {
                    let n = if self.pd() {
                        st.pool.prefixes(&e.id).count()
                    } else {
                        st.pool.addresses(&e.id).count()
                    };
                    (e.id.clone(), n as u32)
                })
                .filter(|(_, n)| *n < self.per_eni)
                .collect()
        };
        self.map_order(held)
    }

    /// `tryAssignIPs` (ipamd.go:1115-1175) or `tryAssignPrefixes` (:1217-1265): the first
    /// ENI with room is asked for what is needed, then for one. `Ok(false)` when no ENI took
    /// any.
    async fn try_assign(&self) -> Result<bool, CloudError> {
        let stats = self.stats();
        let target = self.target_state(stats).map(|(short, _)| short);
        let to_allocate = if self.pd() {
            self.prefixes_needed()
        } else {
            match target {
                // ipamd.go:1118: nothing short of WARM_IP_TARGET.
                Some(0) => return Ok(false),
                Some(short) => short,
                None => self.per_eni,
            }
        };
        for (eni, held) in self.allocatable() {
            let want = (self.per_eni - held).min(to_allocate);
            let mut got = self.assign(&eni, want).await;
            if matches!(&got, Err(e) if !ip_limit(e)) {
                got = self.assign(&eni, 1).await;
                match &got {
                    // ipamd.go:1142 (:1232 with prefixes): with subnet discovery on, the
                    // default, a full subnet moves on to the next ENI.
                    Err(e) if !ip_limit(e) && e.is_subnet_exhausted() => continue,
                    Err(e) if !ip_limit(e) => return Err(e.clone()),
                    _ => {}
                }
            }
            if got.is_err() {
                // ipamd.go:1150-1156: the ENI's limit says the datastore is behind: EC2 tells
                // what the ENI holds.
                let ids = [eni.clone()];
                let found = self
                    .sdk(|| self.ec2.describe_network_interfaces(&ids))
                    .await?;
                let mut st = self.state();
                for e in found {
                    if self.pd() {
                        let _ = st.pool.add_prefixes(&e.id, &e.prefixes);
                    } else {
                        let _ = st.pool.add_addresses(&e.id, &e.secondary_ips);
                    }
                }
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// One AssignPrivateIpAddresses of `count` addresses (or /28s), added to the datastore.
    async fn assign(&self, eni: &str, count: u32) -> Result<(), CloudError> {
        if self.pd() {
            let prefixes = self
                .sdk(|| self.ec2.assign_ipv4_prefixes(eni, count))
                .await?;
            let _ = self.state().pool.add_prefixes(eni, &prefixes);
        } else {
            let ips = self.sdk(|| self.ec2.assign_private_ips(eni, count)).await?;
            let _ = self.state().pool.add_addresses(eni, &ips);
        }
        Ok(())
    }

    /// `getPrefixesNeeded` (ipamd.go:2714-2731): at least one; WARM_IP_TARGET's shortfall in
    /// /28s, else WARM_PREFIX_TARGET's.
    fn prefixes_needed(&self) -> u32 {
        match self.target_state(self.stats()) {
            Some((short, _)) => short.max(1),
            None => {
                let (free, _) = self.prefix_counts();
                self.opts.targets.warm_prefix.saturating_sub(free).max(1)
            }
        }
    }

    /// `tryAllocateENI` (ipamd.go:1050-1101).
    async fn try_allocate_eni(&self) -> Result<(), CloudError> {
        // GetENIResourcesToAllocate (ipamd.go:2551-2568): a full ENI's worth, or in
        // WARM_IP_TARGET mode only what is short.
        let resources = if self.pd() {
            self.prefixes_needed().min(self.per_eni)
        } else {
            match self.target_state(self.stats()) {
                Some((short, _)) => short.min(self.per_eni),
                None => self.per_eni,
            }
        };
        if resources == 0 {
            return Ok(());
        }
        let created = match self.alloc_eni(resources).await {
            Ok(created) => created,
            Err(e) => {
                // ipamd.go:1076-1079: only here does a full subnet pause growth.
                if e.is_subnet_exhausted() {
                    self.pause();
                }
                return Err(e);
            }
        };
        // WaitForENIAndIPsAttached; an ENI IMDS never shows stays out of the datastore
        // until a reconcile finds it.
        let attached = self.wait_attached(created, resources).await?;
        // ipamd.go:1091 → setupENI: the ENI's second DescribeSubnets.
        self.setup_eni(&attached).await
    }

    /// `AllocENI` (awsutils.go:977-1022): create, attach at a free device index, then
    /// DeleteOnTermination. An attach failure deletes the new ENI (:985-991); a failure of the
    /// last step frees it (:1011).
    async fn alloc_eni(&self, resources: u32) -> Result<Attached, CloudError> {
        let eni = self.create_eni(resources).await?;
        let attach = async {
            // awsGetFreeDeviceNumber (awsutils.go:930-973): DescribeInstances.
            let devices = self
                .sdk(|| self.ec2.describe_instance(&self.instance))
                .await?;
            let device = (0..).find(|d| !devices.contains(d)).unwrap_or(1);
            let attachment = self
                .sdk(|| {
                    self.ec2
                        .attach_network_interface(&eni.id, &self.instance, device)
                })
                .await?;
            Ok::<_, CloudError>((device, attachment))
        };
        let (device, attachment) = match attach.await {
            Ok(done) => done,
            Err(e) => {
                let _ = self.delete_eni(&eni.id).await;
                return Err(e);
            }
        };
        if let Err(e) = self
            .sdk(|| self.ec2.set_delete_on_termination(&eni.id, &attachment))
            .await
        {
            let _ = self.free_eni(&eni.id).await;
            return Err(e);
        }
        Ok(Attached {
            id: eni.id,
            mac: eni.mac,
            device,
            subnet: eni.subnet_id,
            ips: Vec::new(),
            prefixes: Vec::new(),
        })
    }

    /// `createENI` (awsutils.go:1121-1210).
    async fn create_eni(&self, resources: u32) -> Result<cloud::NetworkInterface, CloudError> {
        let tags = BTreeMap::from([
            (NODE_TAG.to_string(), self.instance.clone()),
            (CREATED_AT_TAG.to_string(), created_at(self.now())),
        ]);
        let request = |subnet: &str| CreateEni {
            subnet_id: subnet.to_string(),
            description: format!("{DESCRIPTION_PREFIX}{}", self.instance),
            security_groups: self.groups.clone(),
            secondary_ips: if self.pd() { 0 } else { resources },
            ipv4_prefixes: if self.pd() { resources } else { 0 },
            tags: tags.clone(),
            ..Default::default()
        };
        let create = |subnet: &str| {
            let request = request(subnet);
            async move {
                self.sdk(|| self.ec2.create_network_interface(&request))
                    .await
            }
        };
        // awsutils.go:1141-1148: custom networking, the ENIConfig's subnet, no lookup.
        if self.opts.custom_networking {
            return create(&self.eni_subnet).await;
        }
        // Subnet discovery, the default.
        let subnets = match self.vpc_subnets().await {
            Ok(subnets) => subnets,
            // awsutils.go:1158-1168: the primary subnet, once IsSubnetExcluded has asked
            // DescribeSubnets again.
            Err(_) => {
                let again = self.vpc_subnets().await?;
                let excluded = again
                    .iter()
                    .find(|s| s.id == self.subnet)
                    .and_then(|s| s.tags.get(CNI_SUBNET_TAG))
                    .is_some_and(|v| v == "0");
                if excluded {
                    return Err(CloudError::new(
                        "CreateNetworkInterface",
                        CloudErrorKind::Invalid,
                        "primary subnet is tagged with kubernetes.io/role/cni=0",
                    ));
                }
                return create(&self.subnet).await;
            }
        };
        // awsutils.go:1170-1196: by free addresses, most first; the primary subnet unless
        // tagged out, others only when tagged in; the first that takes the ENI.
        let mut valid: Vec<&cloud::Subnet> = subnets
            .iter()
            .filter(|s| match s.tags.get(CNI_SUBNET_TAG) {
                Some(v) => v != "0",
                None => s.id == self.subnet,
            })
            .collect();
        valid.sort_by_key(|s| std::cmp::Reverse(s.available_ips));
        let mut last = CloudError::new(
            "CreateNetworkInterface",
            CloudErrorKind::Invalid,
            "no valid subnets available for ENI creation",
        );
        for subnet in valid {
            match create(&subnet.id).await {
                Ok(eni) => return Ok(eni),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// `waitForENIAndIPsAttached` (awsutils.go:2125-2191): IMDS read up to 12 times (100 ms
    /// doubling, 15% jitter) until it shows the ENI with what was asked; with some of it at
    /// the end, that is enough; with none, an error.
    async fn wait_attached(&self, mut eni: Attached, wanted: u32) -> Result<Attached, CloudError> {
        let pd = self.pd();
        let seen = self
            .retry(ENI_EC2_TRIES, Duration::from_millis(100), 0.15, || async {
                let not_yet = |what: &str| {
                    CloudError::new("IMDS", CloudErrorKind::NotFound, what.to_string())
                };
                if cloud::eni_id(&self.imds, &eni.mac).await?.as_deref() != Some(&eni.id) {
                    return Err(not_yet("ENI not attached yet"));
                }
                let addrs = cloud::eni_addresses(&self.imds, &eni.mac).await?;
                let n = if pd {
                    addrs.prefixes.len()
                } else {
                    addrs.secondary_ips.len()
                } as u32;
                if n >= wanted {
                    Ok(addrs)
                } else {
                    Err(not_yet("not every address shows yet"))
                }
            })
            .await;
        let addrs = match seen {
            Ok(addrs) => addrs,
            Err(e) => {
                // What IMDS shows by now, if anything.
                let addrs = cloud::eni_addresses(&self.imds, &eni.mac).await?;
                if addrs.secondary_ips.is_empty() && addrs.prefixes.is_empty() {
                    return Err(e);
                }
                addrs
            }
        };
        eni.ips = addrs.secondary_ips;
        eni.prefixes = addrs.prefixes;
        Ok(eni)
    }
}
