//! The introspection endpoints (GET only; axum answers 405 to other methods). Like the Go
//! CNI, `/` and any unknown path answer with the list of endpoints.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

use crate::env::{IpamdEnv, NetworkUtilsEnv};
use crate::json;
use crate::view::{PoolView, Source};

/// Every introspection path, as `/` lists them.
pub const AVAILABLE_COMMANDS: [&str; 7] = [
    "/v1/ec2-refusals",
    "/v1/enis",
    "/v1/eni-configs",
    "/v1/networkutils-env-settings",
    "/v1/ipamd-env-settings",
    "/v1/pods",
    "/v1/pool",
];

#[derive(Clone)]
struct AppState {
    source: Arc<dyn Source>,
    net_env: Arc<NetworkUtilsEnv>,
    ipamd_env: IpamdEnv,
}

/// The introspection endpoints: `/v1/enis`, `/v1/pods`, `/v1/pool`, `/v1/eni-configs`, the
/// two env-settings endpoints, and the list of them at `/` and any other path.
pub fn introspection_router(
    source: Arc<dyn Source>,
    net_env: NetworkUtilsEnv,
    ipamd_env: IpamdEnv,
) -> Router {
    let state = AppState {
        source,
        net_env: Arc::new(net_env),
        ipamd_env,
    };
    Router::new()
        .route("/", get(root))
        .route("/v1/ec2-refusals", get(ec2_refusals))
        .route("/v1/enis", get(enis))
        .route("/v1/pods", get(pods))
        .route("/v1/pool", get(pool_status))
        .route("/v1/eni-configs", get(eni_configs))
        .route("/v1/networkutils-env-settings", get(net_env_settings))
        .route("/v1/ipamd-env-settings", get(ipamd_env_settings))
        .fallback(get(root))
        .layer(middleware::from_fn(log_request))
        .with_state(state)
}

/// Logs every request at debug, as the Go CNI logs each ("Handling http request").
pub(crate) async fn log_request(req: Request, next: Next) -> Response {
    tracing::debug!(method = %req.method(), uri = %req.uri(), "Handling http request");
    next.run(req).await
}

#[derive(Serialize)]
struct RootResponse {
    #[serde(rename = "AvailableCommands")]
    available_commands: [&'static str; 7],
}

async fn root() -> Response {
    json_response(
        StatusCode::OK,
        &RootResponse {
            available_commands: AVAILABLE_COMMANDS,
        },
    )
}

async fn enis(State(state): State<AppState>) -> Response {
    with_view(&state, |v| json_response(StatusCode::OK, &json::enis(v))).await
}

async fn ec2_refusals(State(state): State<AppState>) -> Response {
    with_view(&state, |v| {
        json_response(StatusCode::OK, &json::ec2_refusals(v))
    })
    .await
}

async fn pods(State(state): State<AppState>) -> Response {
    with_view(&state, |v| json_response(StatusCode::OK, &json::pods(v))).await
}

async fn pool_status(State(state): State<AppState>) -> Response {
    with_view(&state, |v| {
        json_response(StatusCode::OK, &json::pool_status(v))
    })
    .await
}

#[derive(Serialize)]
struct ErrorBody {
    error: &'static str,
}

/// The node's ENIConfig name as a JSON string, as the Go CNI answers; 404 without custom
/// networking or before the node has been read.
async fn eni_configs(State(state): State<AppState>) -> Response {
    with_view(&state, |v| match &v.cluster.eni_config {
        Some(name) => json_response(StatusCode::OK, name),
        None => json_response(
            StatusCode::NOT_FOUND,
            &ErrorBody {
                error: "this node has no ENIConfig: custom networking is off, or the node has not been read from the API server yet",
            },
        ),
    })
    .await
}

async fn net_env_settings(State(state): State<AppState>) -> Response {
    json_response(StatusCode::OK, state.net_env.as_ref())
}

async fn ipamd_env_settings(State(state): State<AppState>) -> Response {
    json_response(StatusCode::OK, &state.ipamd_env)
}

/// Takes a snapshot on a blocking thread (the source may wait on ipamd's lock) and renders
/// it.
async fn with_view(state: &AppState, render: impl FnOnce(&PoolView) -> Response) -> Response {
    let source = Arc::clone(&state.source);
    match tokio::task::spawn_blocking(move || source.view()).await {
        Ok(view) => render(&view),
        Err(e) => {
            tracing::error!(error = %e, "taking a snapshot of ipamd's state failed");
            json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &ErrorBody {
                    error: "taking a snapshot of ipamd's state failed",
                },
            )
        }
    }
}

fn json_response<T: Serialize + ?Sized>(status: StatusCode, body: &T) -> Response {
    (status, Json(body)).into_response()
}
