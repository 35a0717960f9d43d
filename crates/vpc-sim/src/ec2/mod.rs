//! The EC2 Query API over HTTP: `POST /` with a form body, XML replies, AWS-shaped errors.
//! Also the simulator's own admin endpoints:
//!
//! * `GET /_sim/state`: the whole model as JSON;
//! * `GET /_sim/calls`: EC2 requests received so far, by action: every one, whether it was
//!   answered, refused, or hit by an injected fault (a dropped call counts too);
//! * `GET /_sim/faults`: the fault plan in force and the faults injected so far, in all and by
//!   action ([`crate::faults::FaultReport`]);
//! * `PUT /_sim/faults`: replaces the plan with the JSON body ([`crate::faults::Faults`];
//!   `{}` turns faults off) and answers like GET; a bad plan gets 400 `{"error": ".."}` naming
//!   the field, and the old plan stays;
//! * `GET /_sim/iam`: the IAM policy in force and the calls it denied so far, in all and by
//!   action ([`crate::iam::IamReport`]);
//! * `PUT /_sim/iam`: replaces the policy with the JSON body `{"deny": [<action>, ..]}`
//!   ([`crate::iam::IamPolicy`]; `{}` or `{"deny": []}` allows everything) and answers
//!   like GET; an unknown action or field, or a wrong type, gets 400 `{"error": ".."}` naming
//!   it, and the old policy stays. A denied call is answered HTTP 403 `UnauthorizedOperation`
//!   ([`inject::unauthorized`]), also when it is a DryRun;
//! * `GET /_sim/imds`: whether every instance's IMDS is frozen, since when, and its lag
//!   ([`crate::imds::freeze::FreezeReport`]);
//! * `PUT /_sim/imds`: `{"frozen": true}` freezes every IMDS as it is now (EC2 goes on changing),
//!   `{"frozen": false}` (or `{}`) returns to the live, lagged view; answers like GET, and a bad
//!   body gets 400 `{"error": ".."}` ([`crate::imds::freeze`]);
//! * `GET /_sim/fragment`: every subnet's fragmentation, `{"subnets": [<report>, ..]}`, where a
//!   report is [`crate::model::FragmentReport`]: `{"subnet", "cidr", "fragment", "strays",
//!   "available_ip_address_count", "free_prefixes"}`;
//! * `PUT /_sim/fragment`: `{"subnet": "subnet-..", "fragment": "all"|"none"|PCT}` (PCT a
//!   number or numeric string, 0-100) takes the subnet's strays back and places new ones, one
//!   on a free address of every /28 block that could hold a prefix, of none, or of PCT% of
//!   them ([`crate::model::Fragment`]); answers with that subnet's report. Addresses held by
//!   ENIs are never touched. An unknown subnet, field or level gets 400 `{"error": ".."}`
//!   naming it ([`fragment`]). Prefix requests that then find no free /28 fail with
//!   `InsufficientCidrBlocks`, as on EC2, while single addresses are still assigned.
//!
//! An injected fault and an IAM denial are decided before the model is touched, the fault
//! first (it stands in front of the service, as EC2's throttling does); see [`crate::faults`]
//! and [`crate::iam`].

pub(crate) mod actions;
pub mod error;
pub mod filter;
pub mod fragment;
pub mod inject;
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

use cloud::Action;

use crate::Sim;
use crate::faults::Outcome;
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

/// The EC2 router (plus `/_sim/state`, `/_sim/calls`, `/_sim/faults`, `/_sim/iam`,
/// `/_sim/imds` and `/_sim/fragment`).
pub fn router(sim: Arc<Sim>) -> Router {
    Router::new()
        .route("/", post(handle))
        .route("/_sim/state", get(state))
        .route("/_sim/calls", get(calls))
        .route(
            "/_sim/faults",
            get(inject::get_faults).put(inject::put_faults),
        )
        .route("/_sim/iam", get(inject::get_iam).put(inject::put_iam))
        .route("/_sim/imds", get(inject::get_imds).put(inject::put_imds))
        .route(
            "/_sim/fragment",
            get(fragment::get_fragment).put(fragment::put_fragment),
        )
        .with_state(sim)
}

async fn calls(State(sim): State<Arc<Sim>>) -> Response {
    json_reply(serde_json::to_string_pretty(&sim.calls()))
}

async fn state(State(sim): State<Arc<Sim>>) -> Response {
    json_reply(serde_json::to_string_pretty(&sim.model().snapshot()))
}

pub(crate) fn json_reply(json: serde_json::Result<String>) -> Response {
    match json {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn handle(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let params = Params::parse(&body);
    let action = params.get("Action").unwrap_or("-").to_string();
    sim.record_call(&action);
    let fault = sim.decide_fault(&action);
    if fault.slow_ms > 0 {
        // Before the model is locked, like the attach latency.
        tokio::time::sleep(std::time::Duration::from_millis(fault.slow_ms)).await;
    }
    let injected = match fault.outcome {
        Outcome::Throttle => Some(inject::throttled()),
        Outcome::ServerError(kind) => Some(inject::server_error(kind)),
        Outcome::Drop => {
            tracing::info!(
                action,
                "injected fault: dropping the connection, call not applied"
            );
            return inject::dropped_connection();
        }
        Outcome::Answer | Outcome::DropAfter => None,
    };
    if let Some(e) = injected {
        let request_id = format_request_id(&sim.fault_request_hex());
        tracing::info!(action, request_id, code = %e.code, "injected fault");
        return render(e.http_status(), e.to_xml(&request_id), &request_id);
    }
    // Here, not in `dispatch`: every request comes through `handle` (with or without a
    // follower), the check must come before `dispatch` looks at DryRun (EC2 checks the
    // permission first), and a denial must not lock the model or draw its request id from it.
    let (request_id, result) = if sim.iam_denies(&action) {
        let request_id = format_request_id(&sim.iam_request_hex());
        tracing::info!(
            action,
            request_id,
            "IAM policy denies the action: UnauthorizedOperation, call not applied"
        );
        (request_id, Err(inject::unauthorized(&action)))
    } else {
        if action == Action::AttachNetworkInterface.wire_name() && sim.attach_latency_ms() > 0 {
            // Before the model is locked: other calls go on meanwhile, as on EC2.
            tokio::time::sleep(std::time::Duration::from_millis(sim.attach_latency_ms())).await;
        }
        if sim.follower().is_some() {
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
        }
    };
    if fault.outcome == Outcome::DropAfter {
        tracing::info!(
            action,
            request_id,
            ok = result.is_ok(),
            "injected fault: call applied, dropping the connection"
        );
        return inject::dropped_connection();
    }
    reply(&action, &request_id, result)
}

/// The HTTP answer to one call.
fn reply(action: &str, request_id: &str, result: Result<String, Ec2Error>) -> Response {
    let (status, body) = match result {
        Ok(xml) => {
            tracing::debug!(action, request_id, "ok");
            (StatusCode::OK, xml)
        }
        Err(e) => {
            tracing::info!(action, request_id, code = %e.code, message = %e.message, "refused");
            (e.http_status(), e.to_xml(request_id))
        }
    };
    render(status, body, request_id)
}

/// An EC2 reply: XML with the request id in a header too.
fn render(status: StatusCode, body: String, request_id: &str) -> Response {
    let mut resp = (status, body).into_response();
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/xml;charset=UTF-8"),
    );
    if let Ok(v) = HeaderValue::from_str(request_id) {
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
    format_request_id(&model.random_hex(32))
}

/// 32 hex digits as a UUID.
fn format_request_id(h: &str) -> String {
    if h.len() < 32 {
        return h.to_string();
    }
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Runs one action against the locked model. Permissions are not checked here: `handle`
/// has denied the call already when the IAM policy says so.
pub fn dispatch(cx: &mut Ctx<'_>) -> Result<String, Ec2Error> {
    use actions::*;
    let name = cx.params.required("Action")?.to_string();
    if cx.params.bool("DryRun")? == Some(true) {
        let mut e = Ec2Error::new(
            "DryRunOperation",
            "Request would have succeeded, but DryRun flag is set.",
        );
        e.status = 412;
        return Err(e);
    }
    let Some(action) = Action::from_wire(&name) else {
        return Err(Ec2Error::new(
            "InvalidAction",
            format!("The action {name} is not valid for this web service."),
        ));
    };
    match action {
        Action::DescribeInstances => instances::describe(cx),
        Action::DescribeInstanceTypes => instance_types::describe(cx),
        Action::DescribeSubnets => subnets::describe(cx),
        Action::DescribeNetworkInterfaces => describe_enis::describe(cx),
        Action::CreateNetworkInterface => enis::create(cx),
        Action::DeleteNetworkInterface => enis::delete(cx),
        Action::ModifyNetworkInterfaceAttribute => enis::modify(cx),
        Action::AttachNetworkInterface => attach::attach(cx),
        Action::DetachNetworkInterface => attach::detach(cx),
        Action::AssignPrivateIpAddresses => addresses::assign(cx),
        Action::UnassignPrivateIpAddresses => addresses::unassign(cx),
        Action::AssignIpv6Addresses => addresses6::assign(cx),
        Action::UnassignIpv6Addresses => addresses6::unassign(cx),
        Action::CreateTags => tags::create(cx),
        Action::DeleteTags => tags::delete(cx),
        Action::CreateSecurityGroup => security_groups::create(cx),
        Action::DescribeSecurityGroups => security_groups::describe(cx),
    }
}

/// `<return>true</return>` replies.
fn ok_return(action: Action, request_id: &str) -> String {
    xml::Xml::response(action, request_id, |x| {
        x.leaf("return", true);
    })
}
