//! Permission probes: EC2's `DryRun` asks "would this call be allowed?" without doing it, so
//! `ipamd doctor` can name a missing IAM permission before ipamd needs it.

use std::future::Future;

use crate::{Action, CloudError, CloudErrorKind};

/// One EC2 call ipamd makes, with real resource ids so EC2 checks the permission on them.
/// The address calls (Assign/UnassignPrivateIpAddresses, Assign/UnassignIpv6Addresses) are
/// missing: EC2 has no DryRun for them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DryRunCall {
    /// DescribeNetworkInterfaces.
    DescribeNetworkInterfaces,
    /// DescribeSubnets.
    DescribeSubnets,
    /// DescribeInstanceTypes of this type.
    DescribeInstanceTypes(String),
    /// CreateNetworkInterface in this subnet.
    CreateNetworkInterface(String),
    /// AttachNetworkInterface of this ENI to this instance.
    AttachNetworkInterface(String, String),
    /// DetachNetworkInterface of this attachment.
    DetachNetworkInterface(String),
    /// DeleteNetworkInterface of this ENI.
    DeleteNetworkInterface(String),
    /// ModifyNetworkInterfaceAttribute (delete-on-termination) of this ENI's attachment.
    ModifyNetworkInterfaceAttribute(String, String),
    /// CreateTags on this ENI.
    CreateTags(String),
}

impl DryRunCall {
    /// The EC2 action, as IAM policies name it after `ec2:`.
    pub fn action(&self) -> Action {
        match self {
            Self::DescribeNetworkInterfaces => Action::DescribeNetworkInterfaces,
            Self::DescribeSubnets => Action::DescribeSubnets,
            Self::DescribeInstanceTypes(_) => Action::DescribeInstanceTypes,
            Self::CreateNetworkInterface(_) => Action::CreateNetworkInterface,
            Self::AttachNetworkInterface(..) => Action::AttachNetworkInterface,
            Self::DetachNetworkInterface(_) => Action::DetachNetworkInterface,
            Self::DeleteNetworkInterface(_) => Action::DeleteNetworkInterface,
            Self::ModifyNetworkInterfaceAttribute(..) => Action::ModifyNetworkInterfaceAttribute,
            Self::CreateTags(_) => Action::CreateTags,
        }
    }
}

/// What a dry run said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Permission {
    /// `DryRunOperation`: the call would have been allowed.
    Allowed,
    /// `UnauthorizedOperation` (or another authorization failure): EC2's message.
    Denied(String),
    /// Neither: EC2 could not be asked, or answered something else.
    Unknown(CloudError),
}

impl Permission {
    /// A dry run's outcome: EC2 answers a dry run with an error either way.
    pub fn from_outcome(outcome: Result<(), CloudError>) -> Self {
        match outcome {
            Err(e) if e.code.as_deref() == Some("DryRunOperation") => Self::Allowed,
            Err(e) if e.kind == CloudErrorKind::Unauthorized => Self::Denied(e.message),
            Err(e) => Self::Unknown(e),
            Ok(()) => Self::Unknown(CloudError::new(
                "DryRun",
                CloudErrorKind::Other,
                "EC2 carried out a call sent with DryRun instead of answering DryRunOperation",
            )),
        }
    }
}

/// The seam for dry runs.
pub trait DryRun: Send + Sync + 'static {
    /// Sends `call` with `DryRun=true`.
    fn dry_run(&self, call: &DryRunCall) -> impl Future<Output = Permission> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_map_to_permissions() {
        let err = |code: &str| CloudError::from_code("X", code, "msg");
        assert_eq!(
            Permission::from_outcome(Err(err("DryRunOperation"))),
            Permission::Allowed
        );
        assert_eq!(
            Permission::from_outcome(Err(err("UnauthorizedOperation"))),
            Permission::Denied("msg".into())
        );
        assert!(matches!(
            Permission::from_outcome(Err(err("RequestLimitExceeded"))),
            Permission::Unknown(_)
        ));
        assert!(matches!(
            Permission::from_outcome(Ok(())),
            Permission::Unknown(_)
        ));
    }
}
