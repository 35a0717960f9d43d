//! The HTTP side of fault injection: EC2's throttling, server-error and permission replies, a
//! response that makes the server drop the connection, and the controls `GET`/`PUT
//! /_sim/faults`, `/_sim/iam` and `/_sim/imds`.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hyper::body::Frame;

use super::{Ec2Error, json_reply};
use crate::Sim;
use crate::faults::{Faults, ServerError};
use crate::iam::IamPolicy;
use crate::imds::freeze::FreezeRequest;
use crate::model::ACCOUNT_ID;

/// The role a denied caller is told it assumed: fake, but stable, so tests and docs can quote
/// the message.
pub const DENIED_ROLE: &str = "vpc-sim-node-role";
/// The role session of a denied caller (EC2 names the instance there; vpc-sim cannot tell which
/// node called, so it is one stable name).
pub const DENIED_SESSION: &str = "vpc-sim-node";

/// EC2's throttling answer. The SDKs recognise the code (aws-sdk-rust lists it among its
/// throttling errors and backs off); EC2 sends it with HTTP 503.
pub fn throttled() -> Ec2Error {
    Ec2Error {
        code: "RequestLimitExceeded".into(),
        message: "Request limit exceeded.".into(),
        status: 503,
    }
}

/// One of EC2's server errors, in EC2's words.
pub fn server_error(kind: ServerError) -> Ec2Error {
    match kind {
        ServerError::Internal => Ec2Error {
            code: "InternalError".into(),
            message: "An internal error has occurred.".into(),
            status: 500,
        },
        ServerError::Unavailable => Ec2Error {
            code: "Unavailable".into(),
            message: "The server is overloaded and can't handle the request.".into(),
            status: 503,
        },
    }
}

/// EC2's answer to an action the caller's IAM policy does not allow: HTTP 403
/// `UnauthorizedOperation`, with the message in EC2's shape naming the principal and the action
/// (the piece an operator greps for).
pub fn unauthorized(action: &str) -> Ec2Error {
    Ec2Error {
        code: "UnauthorizedOperation".into(),
        message: format!(
            "You are not authorized to perform this operation. User: \
             arn:aws:sts::{ACCOUNT_ID}:assumed-role/{DENIED_ROLE}/{DENIED_SESSION} is not \
             authorized to perform: ec2:{action} because no identity-based policy allows the \
             ec2:{action} action"
        ),
        status: 403,
    }
}

/// The error the dropping body fails with.
#[derive(Debug, thiserror::Error)]
#[error("connection dropped by vpc-sim fault injection")]
pub struct Dropped;

/// A body whose first poll fails. hyper buffers the response head and polls the body before it
/// writes anything; a failing body makes it abandon the connection there, so the client gets
/// the connection closed with not one byte of a response (`connection closed before message
/// completed`), as when a load balancer or the network drops it. No panic, no task killed.
struct DroppingBody;

impl axum::body::HttpBody for DroppingBody {
    type Data = Bytes;
    type Error = Dropped;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Dropped>>> {
        Poll::Ready(Some(Err(Dropped)))
    }
}

/// A response the server cannot send: the connection is closed without any answer.
pub fn dropped_connection() -> Response {
    Response::new(Body::new(DroppingBody))
}

/// `GET /_sim/faults`.
pub async fn get_faults(State(sim): State<Arc<Sim>>) -> Response {
    json_reply(serde_json::to_string_pretty(&sim.fault_report()))
}

/// `PUT /_sim/faults`: the body is the new plan.
pub async fn put_faults(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let installed = Faults::from_json(&body).and_then(|plan| {
        sim.set_faults(plan.clone())?;
        tracing::info!(?plan, "fault plan replaced");
        Ok(())
    });
    match installed {
        Ok(()) => get_faults(State(sim)).await,
        Err(e) => refused("fault plan", &e),
    }
}

/// `GET /_sim/iam`.
pub async fn get_iam(State(sim): State<Arc<Sim>>) -> Response {
    json_reply(serde_json::to_string_pretty(&sim.iam_report()))
}

/// `PUT /_sim/iam`: the body is the new policy.
pub async fn put_iam(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let installed = IamPolicy::from_json(&body).and_then(|policy| {
        sim.set_iam(policy.clone())?;
        tracing::info!(deny = ?policy.deny, "IAM policy replaced");
        Ok(())
    });
    match installed {
        Ok(()) => get_iam(State(sim)).await,
        Err(e) => refused("IAM policy", &e),
    }
}

/// `GET /_sim/imds`.
pub async fn get_imds(State(sim): State<Arc<Sim>>) -> Response {
    json_reply(serde_json::to_string_pretty(&sim.imds_report()))
}

/// `PUT /_sim/imds`: freezes or unfreezes every instance's IMDS.
pub async fn put_imds(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    match FreezeRequest::from_json(&body) {
        Ok(req) => {
            sim.set_imds_frozen(req.frozen);
            let report = sim.imds_report();
            tracing::info!(
                frozen = report.frozen,
                since_ms = report.frozen_at_ms,
                "IMDS freeze set"
            );
            get_imds(State(sim)).await
        }
        Err(e) => refused("IMDS control", &e),
    }
}

/// HTTP 400 with `{"error": ".."}` for a control body that cannot be used (what was in force
/// stays).
pub(crate) fn refused(what: &str, e: &dyn std::error::Error) -> Response {
    tracing::info!(error = %e, "{what} refused");
    let body = serde_json::json!({ "error": e.to_string() }).to_string();
    (
        StatusCode::BAD_REQUEST,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}
