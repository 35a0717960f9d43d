//! The HTTP side of fault injection: EC2's throttling and server-error replies, a response that
//! makes the server drop the connection, and `GET`/`PUT /_sim/faults`.

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
        Err(e) => {
            tracing::info!(error = %e, "fault plan refused");
            let body = serde_json::json!({ "error": e.to_string() }).to_string();
            (
                StatusCode::BAD_REQUEST,
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response()
        }
    }
}
