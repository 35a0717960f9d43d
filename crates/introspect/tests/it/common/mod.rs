pub mod raw;

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use introspect::{PoolView, Source};
use pool::*;
use tower::ServiceExt;

/// 2026-11-22T10:00:00Z.
pub const NOW: Timestamp = Timestamp(1_795_341_600_000);
pub const NOW_TEXT: &str = "2026-11-22T10:00:00Z";
pub const COOLDOWN: Duration = Duration::from_secs(30);

/// Container ids that must never appear in any response.
pub const SECRET_IDS: [&str; 3] = ["ctr-secret-web", "ctr-secret-dns", "ctr-secret-gone"];

pub fn eni(id: &str, device: u32, primary_ip: &str) -> EniInfo {
    EniInfo {
        id: id.into(),
        device_number: device,
        mac: format!("02:00:00:00:00:{device:02x}"),
        primary_ip: primary_ip.parse().unwrap(),
        subnet_id: "subnet-1".into(),
        subnet_cidr: "10.0.0.0/16".parse().unwrap(),
        created_at: Timestamp(0),
    }
}

pub fn key(container: &str) -> AttachmentKey {
    AttachmentKey {
        network: "aws-cni".into(),
        container_id: container.into(),
        ifname: "eth0".into(),
    }
}

pub fn pod(namespace: &str, name: &str) -> PodInfo {
    PodInfo {
        namespace: namespace.into(),
        name: name.into(),
        infra_container_id: "infra-secret".into(),
        uid: "uid-1".into(),
        netns: "/var/run/netns/x".into(),
    }
}

fn ips(base: [u8; 3], from: u8, to: u8) -> Vec<Ipv4Addr> {
    (from..=to)
        .map(|i| Ipv4Addr::new(base[0], base[1], base[2], i))
        .collect()
}

/// Secondary-IP mode: eni-0 (primary, 10.0.0.10) holds 10.0.0.11-14, eni-1 (device 1,
/// 10.0.1.10) holds 10.0.1.11-13. kube-system/coredns got 10.0.0.11 at NOW - 60 s,
/// default/web-1 got 10.0.0.12 at NOW - 1.5 s, and a third pod released 10.0.0.13 at NOW - 10 s
/// (still cooling). Limits: 2 ENIs × 4 slots; WARM_IP_TARGET 5.
pub fn secondary_view() -> PoolView {
    let mut p = Pool::new(COOLDOWN);
    p.upsert_eni(eni("eni-0", 0, "10.0.0.10"));
    p.upsert_eni(eni("eni-1", 1, "10.0.1.10"));
    p.add_addresses("eni-0", &ips([10, 0, 0], 11, 14)).unwrap();
    p.add_addresses("eni-1", &ips([10, 0, 1], 11, 13)).unwrap();
    let t0 = Timestamp(NOW.millis() - 60_000);
    let (a, _) = p
        .assign(&key(SECRET_IDS[1]), &pod("kube-system", "coredns"), t0)
        .unwrap();
    assert_eq!(a.ip, Ipv4Addr::new(10, 0, 0, 11));
    let (a, _) = p
        .assign(&key(SECRET_IDS[2]), &pod("default", "gone"), t0)
        .unwrap();
    assert_eq!(a.ip, Ipv4Addr::new(10, 0, 0, 12));
    p.release(&key(SECRET_IDS[2]), Timestamp(NOW.millis() - 10_000))
        .unwrap();
    let (a, _) = p
        .assign(
            &key(SECRET_IDS[0]),
            &pod("default", "web-1"),
            Timestamp(NOW.millis() - 1_500),
        )
        .unwrap();
    assert_eq!(a.ip, Ipv4Addr::new(10, 0, 0, 13));
    PoolView {
        pool: p,
        now: NOW,
        limits: NodeLimits {
            max_enis: 2,
            secondary_ips_per_eni: 4,
            max_pods: 29,
        },
        targets: Targets {
            warm_ip: 5,
            ..Targets::default()
        },
        last_release: None,
        pending: 0,
        draining: false,
        scarce: false,
        congested: false,
        growth_paused_until: None,
        last_error: None,
        ready: true,
        placements: Default::default(),
        cluster: Default::default(),
        refusals: Vec::new(),
    }
}

/// Prefix delegation: eni-0 (primary, 10.0.0.10) holds 10.0.32.0/28; two pods on it.
/// Limits: 3 ENIs × 9 slots; WARM_PREFIX_TARGET 1.
pub fn prefix_view() -> PoolView {
    let mut p = Pool::new(COOLDOWN);
    p.upsert_eni(eni("eni-0", 0, "10.0.0.10"));
    p.add_prefixes("eni-0", &["10.0.32.0/28".parse().unwrap()])
        .unwrap();
    p.assign(&key("pd-a"), &pod("default", "a"), NOW).unwrap();
    p.assign(&key("pd-b"), &pod("default", "b"), NOW).unwrap();
    PoolView {
        pool: p,
        now: NOW,
        limits: NodeLimits {
            max_enis: 3,
            secondary_ips_per_eni: 9,
            max_pods: 110,
        },
        targets: Targets {
            warm_prefix: 1,
            prefix_delegation: true,
            ..Targets::default()
        },
        last_release: None,
        pending: 0,
        draining: false,
        scarce: false,
        congested: false,
        growth_paused_until: None,
        last_error: None,
        ready: true,
        placements: Default::default(),
        cluster: Default::default(),
        refusals: Vec::new(),
    }
}

/// A source whose snapshot the test changes.
pub struct Fixed(pub Mutex<PoolView>);

impl Fixed {
    pub fn new(view: PoolView) -> Arc<Fixed> {
        Arc::new(Fixed(Mutex::new(view)))
    }

    pub fn set(&self, view: PoolView) {
        *self.0.lock().unwrap() = view;
    }
}

impl Source for Fixed {
    fn view(&self) -> PoolView {
        self.0.lock().unwrap().clone()
    }
}

/// One request through the router: status, content type, body.
pub async fn call(router: &Router, method: &str, uri: &str) -> (StatusCode, String, String) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
        .unwrap();
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        content_type,
        String::from_utf8(body.to_vec()).unwrap(),
    )
}

pub async fn get_json(router: &Router, uri: &str) -> serde_json::Value {
    let (status, content_type, body) = call(router, "GET", uri).await;
    assert_eq!(status, StatusCode::OK, "{uri}: {body}");
    assert_eq!(content_type, "application/json", "{uri}");
    serde_json::from_str(&body).unwrap()
}

/// The sorted keys of a JSON object.
pub fn keys(v: &serde_json::Value) -> Vec<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}
