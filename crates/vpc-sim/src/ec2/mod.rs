//! The EC2 Query API over HTTP: `POST /` with a form body, XML replies, AWS-shaped errors.
//! Also `GET /_sim/state`, the simulator's own admin view (the whole model as JSON).

mod actions;
pub mod error;
pub mod filter;
pub mod params;
pub mod xml;

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

pub use error::Ec2Error;
pub use params::Params;

use crate::Sim;
use crate::model::Model;

/// What an action handler gets.
pub struct Ctx<'a> {
    /// The model, locked for the whole request (every action is atomic).
    pub model: &'a mut Model,
    /// Decoded parameters.
    pub params: &'a Params,
    /// Now, ms since the epoch.
    pub now_ms: u64,
    /// This request's id.
    pub request_id: &'a str,
}

/// The EC2 router (plus `/_sim/state`).
pub fn router(sim: Arc<Sim>) -> Router {
    Router::new()
        .route("/", post(handle))
        .route("/_sim/state", get(state))
        .with_state(sim)
}

async fn state(State(sim): State<Arc<Sim>>) -> Response {
    let model = sim.model();
    match serde_json::to_string_pretty(&model.snapshot()) {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn handle(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let params = Params::parse(&body);
    let now_ms = sim.now_ms();
    let (request_id, result) = {
        let mut model = sim.model();
        let request_id = request_id(&mut model);
        let result = dispatch(&mut Ctx {
            model: &mut model,
            params: &params,
            now_ms,
            request_id: &request_id,
        });
        (request_id, result)
    };
    let action = params.get("Action").unwrap_or("-");
    let (status, body) = match result {
        Ok(xml) => {
            tracing::debug!(action, request_id, "ok");
            (StatusCode::OK, xml)
        }
        Err(e) => {
            tracing::info!(action, request_id, code = %e.code, message = %e.message, "refused");
            let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST);
            (status, e.to_xml(&request_id))
        }
    };
    let mut resp = (status, body).into_response();
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/xml;charset=UTF-8"),
    );
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        headers.insert("x-amzn-requestid", v);
    }
    resp
}

/// A UUID-shaped request id.
fn request_id(model: &mut Model) -> String {
    let h = model.random_hex(32);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Runs one action against the locked model.
pub fn dispatch(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    use actions::*;
    let action = cx.params.required("Action")?.to_string();
    if cx.params.bool("DryRun")? == Some(true) {
        let mut e = Ec2Error::new(
            "DryRunOperation",
            "Request would have succeeded, but DryRun flag is set.",
        );
        e.status = 412;
        return Err(e);
    }
    match action.as_str() {
        "DescribeInstances" => instances::describe(cx),
        "DescribeInstanceTypes" => instance_types::describe(cx),
        "DescribeSubnets" => subnets::describe(cx),
        "DescribeNetworkInterfaces" => describe_enis::describe(cx),
        "CreateNetworkInterface" => enis::create(cx),
        "DeleteNetworkInterface" => enis::delete(cx),
        "ModifyNetworkInterfaceAttribute" => enis::modify(cx),
        "AttachNetworkInterface" => attach::attach(cx),
        "DetachNetworkInterface" => attach::detach(cx),
        "AssignPrivateIpAddresses" => addresses::assign(cx),
        "UnassignPrivateIpAddresses" => addresses::unassign(cx),
        "CreateTags" => tags::create(cx),
        other => Err(Ec2Error::new(
            "InvalidAction",
            format!("The action {other} is not valid for this web service."),
        )),
    }
}

/// `<return>true</return>` replies.
fn ok_return(action: &str, request_id: &str) -> String {
    xml::Xml::response(action, request_id, |x| {
        x.leaf("return", true);
    })
}
