use thiserror::Error;

/// What kind of failure a cloud call met; decides retry, backoff and what the operator is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloudErrorKind {
    /// EC2 throttled the call (RequestLimitExceeded, Throttling...). Retry with backoff.
    Throttled,
    /// The resource does not exist.
    NotFound,
    /// The subnet has no free address left.
    SubnetFull,
    /// The subnet has no free aligned /28 block for a prefix, though it may still have free
    /// addresses (`InsufficientCidrBlocks`): single addresses can still be had.
    NoCidrBlock,
    /// An instance or ENI limit was hit (ENIs per instance, addresses per ENI).
    LimitExceeded,
    /// The IAM role lacks a permission.
    Unauthorized,
    /// The request was invalid (a bug, or an instance type EC2 does not know).
    Invalid,
    /// The service could not be reached, timed out, or failed on its side (5xx).
    Unavailable,
    /// The resource is still in use (`InvalidNetworkInterface.InUse`: an ENI EC2 is still
    /// detaching cannot be deleted yet).
    InUse,
    /// Refused before it was sent: too many calls to this API are already waiting for the
    /// client's rate limit.
    Overloaded,
    /// Anything else.
    Other,
}

/// A failed EC2 or IMDS call.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{api}: {}{message}", code.as_deref().map(|c| format!("{c}: ")).unwrap_or_default())]
pub struct CloudError {
    /// The API or IMDS path called.
    pub api: String,
    /// Classification.
    pub kind: CloudErrorKind,
    /// The AWS error code, when the service sent one.
    pub code: Option<String>,
    /// The service's (or transport's) message.
    pub message: String,
}

impl CloudError {
    /// Whether the failure may go away by itself, so the call is worth trying again: EC2
    /// throttling, or EC2 failing or unreachable. A retried mutating call may repeat what EC2
    /// already did before its answer was lost; callers make such calls idempotent (a
    /// ClientToken) or reconcile afterwards.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.kind,
            CloudErrorKind::Throttled | CloudErrorKind::Unavailable
        )
    }

    /// Whether EC2 said the subnet cannot give what was asked: no address, or no /28 block.
    pub fn is_subnet_exhausted(&self) -> bool {
        matches!(
            self.kind,
            CloudErrorKind::SubnetFull | CloudErrorKind::NoCidrBlock
        )
    }

    /// An error from an AWS error code and message.
    pub fn from_code(api: impl Into<String>, code: &str, message: impl Into<String>) -> Self {
        CloudError {
            api: api.into(),
            kind: classify_code(code),
            code: Some(code.to_string()),
            message: message.into(),
        }
    }

    /// An error without an AWS code.
    pub fn new(api: impl Into<String>, kind: CloudErrorKind, message: impl Into<String>) -> Self {
        CloudError {
            api: api.into(),
            kind,
            code: None,
            message: message.into(),
        }
    }
}

/// Classifies an AWS error code.
pub fn classify_code(code: &str) -> CloudErrorKind {
    use CloudErrorKind::*;
    match code {
        "RequestLimitExceeded"
        | "Throttling"
        | "ThrottlingException"
        | "TooManyRequestsException"
        | "RequestThrottled"
        | "EC2ThrottledException"
        | "SlowDown" => Throttled,
        "InsufficientFreeAddressesInSubnet" => SubnetFull,
        "InsufficientCidrBlocks" => NoCidrBlock,
        "PrivateIpAddressLimitExceeded"
        | "AttachmentLimitExceeded"
        | "NetworkInterfaceLimitExceeded" => LimitExceeded,
        "UnauthorizedOperation" | "AuthFailure" | "Blocked" | "OptInRequired" => Unauthorized,
        "InternalError" | "InternalFailure" | "ServiceUnavailable" | "Unavailable" => Unavailable,
        "InvalidInstanceType"
        | "InvalidParameterValue"
        | "InvalidParameterCombination"
        | "MissingParameter"
        | "InvalidAction"
        | "IdempotentParameterMismatch" => Invalid,
        c if c.ends_with(".NotFound") => NotFound,
        c if c.ends_with(".Malformed") => Invalid,
        c if c.ends_with(".InUse") => InUse,
        _ => Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_codes_are_classified() {
        use CloudErrorKind::*;
        for (code, kind) in [
            ("RequestLimitExceeded", Throttled),
            ("InsufficientFreeAddressesInSubnet", SubnetFull),
            ("InsufficientCidrBlocks", NoCidrBlock),
            ("PrivateIpAddressLimitExceeded", LimitExceeded),
            ("AttachmentLimitExceeded", LimitExceeded),
            ("InvalidNetworkInterfaceID.NotFound", NotFound),
            ("InvalidNetworkInterfaceID.Malformed", Invalid),
            ("InvalidNetworkInterface.InUse", InUse),
            ("IdempotentParameterMismatch", Invalid),
            ("UnauthorizedOperation", Unauthorized),
            ("InternalError", Unavailable),
            ("SomethingNew", Other),
        ] {
            assert_eq!(classify_code(code), kind, "{code}");
        }
    }

    #[test]
    fn messages_name_the_api_and_code() {
        let e = CloudError::from_code(
            crate::Action::AssignPrivateIpAddresses,
            "InsufficientFreeAddressesInSubnet",
            "subnet-1 is full",
        );
        assert_eq!(
            e.to_string(),
            format!(
                "{}: InsufficientFreeAddressesInSubnet: subnet-1 is full",
                crate::Action::AssignPrivateIpAddresses
            )
        );
        let e = CloudError::new(
            "IMDS meta-data/mac",
            CloudErrorKind::Unavailable,
            "connection refused",
        );
        assert_eq!(e.to_string(), "IMDS meta-data/mac: connection refused");
    }
}
