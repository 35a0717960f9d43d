//! AttachNetworkInterface / DetachNetworkInterface and instance termination.

use super::{Attachment, EniStatus, Model, ModelError};

impl Model {
    /// AttachNetworkInterface. Returns the new attachment id.
    pub fn attach_eni(
        &mut self,
        eni_id: &str,
        instance_id: &str,
        device_index: u32,
        network_card_index: u32,
        now_ms: u64,
    ) -> Result<String, ModelError> {
        let eni = self.eni(eni_id)?;
        let instance = self.instance(instance_id)?;
        let limits = self.limits(&instance.instance_type)?;
        if eni.attachment.is_some() {
            return Err(ModelError::EniInUse(eni_id.to_string()));
        }
        if eni.az != instance.az {
            return Err(ModelError::InvalidParameterCombination(format!(
                "You may not attach a network interface to an instance if they are not in the same availability zone ({} vs {}).",
                eni.az, instance.az
            )));
        }
        if network_card_index != 0 {
            // Only card 0 is modelled; ipamd manages card 0 only as well.
            return Err(ModelError::invalid(format!(
                "Network card index {network_card_index} is not supported: vpc-sim models network card 0 only."
            )));
        }
        let attached = self.enis_of(instance_id);
        if attached.iter().any(|e| {
            e.attachment
                .as_ref()
                .is_some_and(|a| a.device_index == device_index)
        }) {
            return Err(ModelError::invalid(format!(
                "Instance '{instance_id}' already has an interface attached at device index '{device_index}'."
            )));
        }
        let count = attached.len() as u32 + 1;
        if count > limits.max_enis {
            return Err(ModelError::AttachmentLimit {
                count,
                instance_type: instance.instance_type.clone(),
            });
        }
        if eni.ipv4_slots() > limits.ipv4_per_eni {
            return Err(ModelError::PrivateIpLimit);
        }
        let limit6 = super::ipv6_per_eni(&instance.instance_type, &limits);
        if eni.ipv6_slots() > limit6 {
            return Err(ModelError::Ipv6Limit {
                eni_id: eni_id.to_string(),
                limit: limit6,
            });
        }
        let attachment = Attachment {
            id: self.ids.id("eni-attach"),
            instance_id: instance_id.to_string(),
            device_index,
            network_card_index,
            delete_on_termination: false,
            attached_ms: now_ms,
        };
        let id = attachment.id.clone();
        let eni = self.eni_mut(eni_id)?;
        eni.attachment = Some(attachment.clone());
        eni.status = EniStatus::InUse;
        self.index_attachment(eni_id, &attachment);
        Ok(id)
    }

    /// DetachNetworkInterface. Returns the ENI id. The primary ENI (device 0) never detaches.
    pub fn detach_eni(&mut self, attachment_id: &str, _force: bool) -> Result<String, ModelError> {
        let not_found = || ModelError::AttachmentNotFound(attachment_id.to_string());
        let eni_id = self
            .attachment_enis
            .get(attachment_id)
            .cloned()
            .ok_or_else(not_found)?;
        let eni = self.enis.get_mut(&eni_id).ok_or_else(not_found)?;
        if eni.attachment.as_ref().is_some_and(|a| a.device_index == 0) {
            return Err(ModelError::OperationNotPermitted(
                "The network interface at device index 0 cannot be detached.".into(),
            ));
        }
        let attachment = eni.attachment.take().ok_or_else(not_found)?;
        eni.status = EniStatus::Available;
        self.unindex_attachment(&eni_id, &attachment);
        Ok(eni_id)
    }

    /// Terminates an instance: ENIs with DeleteOnTermination are deleted (addresses freed), the
    /// others detached. Returns the ids of the deleted ENIs.
    pub fn terminate_instance(&mut self, instance_id: &str) -> Result<Vec<String>, ModelError> {
        self.instance(instance_id)?;
        let ids: Vec<String> = self
            .enis_of(instance_id)
            .iter()
            .map(|e| e.id.clone())
            .collect();
        let mut deleted = Vec::new();
        for id in ids {
            let Some(mut eni) = self.enis.remove(&id) else {
                continue;
            };
            if let Some(a) = &eni.attachment {
                self.unindex_attachment(&id, a);
            }
            if eni
                .attachment
                .as_ref()
                .is_some_and(|a| a.delete_on_termination)
            {
                self.release_all(&eni);
                deleted.push(id);
            } else {
                eni.attachment = None;
                eni.status = EniStatus::Available;
                self.enis.insert(id, eni);
            }
        }
        self.instances.remove(instance_id);
        Ok(deleted)
    }
}
