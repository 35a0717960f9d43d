//! IMDS (IMDSv2 only) for one instance, served from a lagged view of the model, or from the
//! view it showed when it was frozen ([`freeze`], `PUT /_sim/imds` on the EC2 endpoint).

pub mod freeze;
mod tokens;
pub mod tree;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::put;

pub use tokens::{MAX_TTL_SECONDS, Tokens};

use crate::Sim;
use crate::rand::Rng;

/// Header carrying the requested token lifetime (PUT) and echoing it back.
pub const TTL_HEADER: &str = "x-aws-ec2-metadata-token-ttl-seconds";
/// Header carrying the token on GETs.
pub const TOKEN_HEADER: &str = "x-aws-ec2-metadata-token";

struct ImdsState {
    sim: Arc<Sim>,
    instance_id: String,
    tokens: Mutex<Tokens>,
}

/// The IMDS router of `instance_id`.
pub fn router(sim: Arc<Sim>, instance_id: String) -> Router {
    let state = Arc::new(ImdsState {
        sim,
        instance_id,
        tokens: Mutex::new(Tokens::new(Rng::from_entropy())),
    });
    Router::new()
        .route("/latest/api/token", put(token))
        .fallback(lookup)
        .with_state(state)
}

fn text(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain")], body).into_response()
}

async fn token(State(st): State<Arc<ImdsState>>, headers: HeaderMap) -> Response {
    // Real IMDS refuses token requests that went through a proxy.
    if headers.contains_key("x-forwarded-for") {
        return text(StatusCode::FORBIDDEN, "Forbidden".into());
    }
    let ttl = Tokens::parse_ttl(headers.get(TTL_HEADER).and_then(|v| v.to_str().ok()));
    let Some(ttl) = ttl else {
        return text(
            StatusCode::BAD_REQUEST,
            format!("{TTL_HEADER} must be a whole number of seconds in 1..={MAX_TTL_SECONDS}"),
        );
    };
    let now = st.sim.now_ms();
    let token = st
        .tokens
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .issue(now, ttl);
    let mut resp = text(StatusCode::OK, token);
    resp.headers_mut()
        .insert(TTL_HEADER, HeaderValue::from(ttl));
    resp
}

async fn lookup(
    State(st): State<Arc<ImdsState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed".into());
    }
    let now = st.sim.now_ms();
    let authorized = headers
        .get(TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| {
            st.tokens
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .valid(t, now)
        });
    if !authorized {
        return text(StatusCode::UNAUTHORIZED, "Unauthorized".into());
    }
    let Some(path) = uri.path().strip_prefix("/latest/") else {
        return text(StatusCode::NOT_FOUND, "Not Found".into());
    };
    let view = st.sim.imds_view(&st.instance_id, now);
    match view.and_then(|v| tree::resolve(&v, path, now)) {
        Some(body) => text(StatusCode::OK, body),
        None => text(StatusCode::NOT_FOUND, "Not Found".into()),
    }
}
