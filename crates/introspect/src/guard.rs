//! Per-request limits, applied around any router: the body size and the time a request
//! may take.

use std::future::poll_fn;
use std::pin::Pin;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tokio::time::{Instant, timeout_at};

use crate::limits::Limits;

#[derive(Clone, Copy)]
struct RequestLimits {
    max_body_bytes: usize,
    request_timeout: Duration,
}

/// `router` with [`Limits::max_body_bytes`] and [`Limits::request_timeout`] enforced on
/// every request, before routing (so an oversized body gets 413 whatever the method).
pub(crate) fn apply(router: Router, limits: &Limits) -> Router {
    let limits = RequestLimits {
        max_body_bytes: limits.max_body_bytes,
        request_timeout: limits.request_timeout,
    };
    router.layer(middleware::from_fn_with_state(limits, guard))
}

async fn guard(State(limits): State<RequestLimits>, req: Request, next: Next) -> Response {
    // One deadline for the body and the response, so a client cannot get twice the time
    // by splitting its delay between them.
    let deadline = Instant::now() + limits.request_timeout;
    let took_too_long = humantime::format_duration(limits.request_timeout);
    let (parts, body) = req.into_parts();
    let body = match timeout_at(deadline, bounded(body, limits.max_body_bytes)).await {
        Ok(Ok(body)) => body,
        Ok(Err(refusal)) => return refusal,
        Err(_) => {
            tracing::debug!(uri = %parts.uri, "request body not received in time");
            return plain(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request body did not arrive within {took_too_long}\n"),
            );
        }
    };
    let uri = parts.uri.clone();
    match timeout_at(deadline, next.run(Request::from_parts(parts, body))).await {
        Ok(response) => response,
        Err(_) => {
            tracing::warn!(%uri, "no response within {took_too_long}; answering 503");
            plain(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("no response within {took_too_long}: ipamd's state is busy\n"),
            )
        }
    }
}

/// The body, read into memory if it is at most `max` bytes, or the response that refuses
/// it.
async fn bounded(body: Body, max: usize) -> Result<Body, Response> {
    let hint = body.size_hint();
    if hint.exact() == Some(0) {
        return Ok(body);
    }
    let max_u64 = u64::try_from(max).unwrap_or(u64::MAX);
    if hint.lower() > max_u64 {
        // Content-Length already says it is too big: refuse without reading a byte.
        return Err(too_large(max));
    }
    let mut body = body;
    let mut kept: Vec<u8> = Vec::new();
    while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(|e| {
            tracing::debug!(error = %e, "reading a request body failed");
            plain(
                StatusCode::BAD_REQUEST,
                format!("reading the request body failed: {e}\n"),
            )
        })?;
        if let Ok(data) = frame.into_data() {
            if data.len() > max.saturating_sub(kept.len()) {
                return Err(too_large(max));
            }
            kept.extend_from_slice(&data);
        }
    }
    Ok(Body::from(Bytes::from(kept)))
}

fn too_large(max: usize) -> Response {
    plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is over the {max}-byte limit\n"),
    )
}

fn plain(status: StatusCode, text: String) -> Response {
    (status, text).into_response()
}
