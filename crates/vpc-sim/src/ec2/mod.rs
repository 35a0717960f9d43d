//! The EC2 Query API over HTTP: `POST /` with a form body, XML replies, AWS-shaped errors.
//! Also the simulator's own admin views: `GET /_sim/state` (the whole model as JSON) and
//! `GET /_sim/calls` (EC2 requests so far, by action).

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

/// The EC2 router (plus `/_sim/state` and `/_sim/calls`).
pub fn router(sim: Arc<Sim>) -> Router {
    Router::new()
        .route("/", post(handle))
        .route("/_sim/state", get(state))
        .route("/_sim/calls", get(calls))
        .with_state(sim)
}

async fn calls(State(sim): State<Arc<Sim>>) -> Response {
    json_reply(serde_json::to_string_pretty(&sim.calls()))
}

async fn state(State(sim): State<Arc<Sim>>) -> Response {
    json_reply(serde_json::to_string_pretty(&sim.model().snapshot()))
}

fn json_reply(json: serde_json::Result<String>) -> Response {
    match json {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn handle(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let params = Params::parse(&body);
    let action = params.get("Action").unwrap_or("-").to_string();
    sim.record_call(&action);
    if action == "AttachNetworkInterface" && sim.attach_latency_ms() > 0 {
        // Before the model is locked: other calls go on meanwhile, as on EC2.
        tokio::time::sleep(std::time::Duration::from_millis(sim.attach_latency_ms())).await;
    }
    let (request_id, result) = if sim.follower().is_some() {
        // The follower runs commands (the fabric's `ip`): off the async workers.
        let s = sim.clone();
        match tokio::task::spawn_blocking(move || execute(&s, &params)).await {
            Ok(r) => r,
            Err(e) => (
                "00000000-0000-0000-0000-000000000000".to_string(),
                Err(Ec2Error::internal(&format!("the request task failed: {e}"))),
            ),
        }
    } else {
        execute(&sim, &params)
    };
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

/// Runs one request against the locked model and, when the simulator has a follower (the
/// fabric), brings it in line before answering. A follower that cannot follow fails the call
/// with `InternalError` and the model is rolled back, so EC2 and the fabric never disagree
/// silently: a caller sees the failure and nothing changed.
fn execute(sim: &Sim, params: &Params) -> (String, Result<String, Ec2Error>) {
    let now_ms = sim.now_ms();
    let mut model = sim.model();
    let request_id = request_id(&mut model);
    let before = sim.follower().map(|_| model.clone());
    let result = dispatch(&mut Ctx {
        model: &mut model,
        params,
        now_ms,
        request_id: &request_id,
    });
    let (Ok(_), Some(before), Some(follower)) = (&result, before, sim.follower()) else {
        return (request_id, result);
    };
    let mut follower = follower.lock().unwrap_or_else(|p| p.into_inner());
    let Err(e) = follower.follow(&model) else {
        return (request_id, result);
    };
    let action = params.get("Action").unwrap_or("-");
    tracing::error!(action, request_id, error = %e, "FABRIC FAILURE: the VPC namespace could not follow this change; rolling the change back and answering InternalError");
    *model = before;
    if let Err(again) = follower.follow(&model) {
        tracing::error!(action, request_id, error = %again, "FABRIC FAILURE: could not restore the VPC namespace either; EC2 state and the fabric DISAGREE until a later change repairs it");
    }
    (
        request_id,
        Err(Ec2Error::internal(&format!("vpc-sim fabric: {e}"))),
    )
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
