//! EC2 errors on the wire: `<Response><Errors><Error><Code>..` with HTTP 400 (client errors),
//! 500 or 503 (EC2's side, throttling).

use thiserror::Error;

use super::xml::escape;
use crate::model::ModelError;

/// An EC2 error reply.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{code}: {message}")]
pub struct Ec2Error {
    /// EC2 error code, e.g. `InvalidParameterValue`.
    pub code: String,
    /// Human-readable message in EC2's words.
    pub message: String,
    /// HTTP status (400 for client errors).
    pub status: u16,
}

impl Ec2Error {
    /// A client error (HTTP 400).
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.to_string(),
            message: message.into(),
            status: 400,
        }
    }

    /// `MissingParameter` naming `param`.
    pub fn missing(param: &str) -> Self {
        Self::new(
            "MissingParameter",
            format!("The request must contain the parameter {param}"),
        )
    }

    /// `InvalidParameterValue`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new("InvalidParameterValue", message)
    }

    /// `InvalidParameterValue` for a value that does not parse.
    pub fn bad_value(param: &str, value: &str) -> Self {
        Self::invalid(format!("Value ({value}) for parameter {param} is invalid."))
    }

    /// `InvalidParameterCombination`.
    pub fn combination(message: impl Into<String>) -> Self {
        Self::new("InvalidParameterCombination", message)
    }

    /// `InternalError` (HTTP 500), which SDKs treat as transient; `detail` says what failed.
    pub fn internal(detail: &str) -> Self {
        Self {
            code: "InternalError".to_string(),
            message: format!("An internal error has occurred ({detail})"),
            status: 500,
        }
    }

    /// The HTTP status to send (400 if `status` is not one).
    pub fn http_status(&self) -> axum::http::StatusCode {
        axum::http::StatusCode::from_u16(self.status).unwrap_or(axum::http::StatusCode::BAD_REQUEST)
    }

    /// The body EC2 sends with an error.
    pub fn to_xml(&self, request_id: &str) -> String {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{}</Code><Message>{}</Message></Error></Errors><RequestID>{}</RequestID></Response>",
            escape(&self.code),
            escape(&self.message),
            escape(request_id)
        )
    }
}

impl From<ModelError> for Ec2Error {
    fn from(e: ModelError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}
