//! Shared test helpers: an in-process harness, an XML tree for assertions, raw HTTP.

pub mod root;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response};
use cloud::aws::sdk;
use cloud::limits::InstanceLimits;
use quick_xml::events::Event;
use sdk::config::retry::RetryConfig;
use tower::ServiceExt;
use vpc_sim::Sim;
use vpc_sim::clock::ManualClock;
use vpc_sim::model::{Model, SubnetSpec, Topology};
use vpc_sim::rand::Rng;
use vpc_sim::{ec2, imds};

/// Start of time in the harness.
pub const T0: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

/// An element with its text and children.
#[derive(Debug, Clone, Default)]
pub struct Node {
    pub name: String,
    pub attrs: Vec<(String, String)>,
    pub text: String,
    pub children: Vec<Node>,
}

impl Node {
    pub fn child(&self, name: &str) -> Option<&Node> {
        self.children.iter().find(|c| c.name == name)
    }

    /// Follows `a/b/c`; panics with the available names when a step is missing.
    pub fn at(&self, path: &str) -> &Node {
        let mut n = self;
        for step in path.split('/') {
            n = n
                .child(step)
                .unwrap_or_else(|| panic!("no <{step}> under <{}>; has {:?}", n.name, n.names()));
        }
        n
    }

    pub fn text_at(&self, path: &str) -> &str {
        &self.at(path).text
    }

    /// The `<item>` children of the set at `path`.
    pub fn items(&self, path: &str) -> Vec<&Node> {
        self.at(path)
            .children
            .iter()
            .filter(|c| c.name == "item")
            .collect()
    }

    pub fn names(&self) -> Vec<&str> {
        self.children.iter().map(|c| c.name.as_str()).collect()
    }
}

/// Parses a document into its root element.
pub fn parse_xml(xml: &str) -> Node {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut stack: Vec<Node> = vec![Node::default()];
    loop {
        match reader.read_event().expect("well-formed XML") {
            Event::Start(e) => {
                let attrs = e
                    .attributes()
                    .map(|a| {
                        let a = a.unwrap();
                        (
                            String::from_utf8(a.key.as_ref().to_vec()).unwrap(),
                            String::from_utf8(a.value.to_vec()).unwrap(),
                        )
                    })
                    .collect();
                stack.push(Node {
                    name: String::from_utf8(e.name().as_ref().to_vec()).unwrap(),
                    attrs,
                    ..Default::default()
                });
            }
            Event::Empty(e) => {
                let node = Node {
                    name: String::from_utf8(e.name().as_ref().to_vec()).unwrap(),
                    ..Default::default()
                };
                stack.last_mut().unwrap().children.push(node);
            }
            Event::End(_) => {
                let done = stack.pop().unwrap();
                stack.last_mut().unwrap().children.push(done);
            }
            Event::Text(t) => stack
                .last_mut()
                .unwrap()
                .text
                .push_str(&t.decode().unwrap()),
            Event::GeneralRef(r) => {
                let name = r.decode().unwrap();
                let c = match name.as_ref() {
                    "lt" => '<',
                    "gt" => '>',
                    "amp" => '&',
                    "quot" => '"',
                    "apos" => '\'',
                    other => panic!("unexpected entity {other}"),
                };
                stack.last_mut().unwrap().text.push(c);
            }
            Event::Eof => break,
            _ => {}
        }
    }
    stack
        .pop()
        .unwrap()
        .children
        .into_iter()
        .next()
        .expect("a root element")
}

/// The extra instance type every harness knows: 4 ENIs x 10 addresses.
pub fn sim_big() -> (String, InstanceLimits) {
    (
        "sim.big".to_string(),
        InstanceLimits {
            max_enis: 4,
            ipv4_per_eni: 10,
            nitro: true,
            bare_metal: false,
            network_cards: 1,
        },
    )
}

pub fn topology(instance_type: &str, subnets: &[&str], nodes: usize) -> Topology {
    Topology {
        vpc_cidr: "10.0.0.0/16".parse().unwrap(),
        secondary_cidrs: vec![],
        region: "us-west-2".into(),
        subnets: subnets
            .iter()
            .map(|s| SubnetSpec::new(s.parse().unwrap()))
            .collect(),
        security_groups: vec![],
        ipv6: false,
        vpc_ipv6_cidr: None,
        nodes,
        instance_type: instance_type.into(),
        extra_types: vec![sim_big()],
    }
}

/// A simulator driven in-process with a hand-moved clock.
pub struct Harness {
    pub sim: Arc<Sim>,
    pub clock: Arc<ManualClock>,
    pub ec2: Router,
}

impl Harness {
    pub fn new(t: Topology, lag_ms: u64) -> Self {
        let clock = Arc::new(ManualClock::new(T0));
        let model = Model::build(&t, Rng::seeded(7), T0).unwrap();
        let sim = Arc::new(Sim::new(model, clock.clone(), lag_ms));
        let ec2 = ec2::router(sim.clone());
        Self { sim, clock, ec2 }
    }

    /// Like [`Harness::new`], with `follower` kept in line with every EC2 change.
    pub fn with_follower(t: Topology, follower: vpc_sim::sim::SharedFollower) -> Self {
        let clock = Arc::new(ManualClock::new(T0));
        let model = Model::build(&t, Rng::seeded(7), T0).unwrap();
        let sim = Arc::new(Sim::new(model, clock.clone(), 0).with_follower(follower));
        let ec2 = ec2::router(sim.clone());
        Self { sim, clock, ec2 }
    }

    /// One t3.medium node in 10.0.0.0/24, no lag.
    pub fn basic() -> Self {
        Self::new(topology("t3.medium", &["10.0.0.0/24"], 1), 0)
    }

    pub fn instance(&self, idx: usize) -> (String, String) {
        let m = self.sim.model();
        let i = m.instances()[idx];
        (i.id.clone(), i.primary_eni.clone())
    }

    pub fn subnet(&self, idx: usize) -> String {
        self.sim.model().subnets()[idx].id.clone()
    }

    /// Sends an EC2 Query call; returns the status, parsed body and the raw response parts.
    pub async fn call(&self, pairs: &[(&str, &str)]) -> Reply {
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("Version", "2016-11-15");
        for (k, v) in pairs {
            form.append_pair(k, v);
        }
        let req = Request::post("/")
            .header("content-type", "application/x-www-form-urlencoded; charset=utf-8")
            .header("authorization", "AWS4-HMAC-SHA256 Credential=AKIA/20260101/us-west-2/ec2/aws4_request, SignedHeaders=host, Signature=00")
            .body(Body::from(form.finish()))
            .unwrap();
        Reply::from(self.ec2.clone().oneshot(req).await.unwrap()).await
    }

    /// Sends an EC2 call expected to succeed; returns its root element.
    pub async fn ok(&self, pairs: &[(&str, &str)]) -> Node {
        let r = self.call(pairs).await;
        assert_eq!(r.status, 200, "{pairs:?} -> {}", r.body);
        r.xml()
    }

    /// Sends an EC2 call expected to fail; returns (code, message) after checking the shape.
    pub async fn err(&self, pairs: &[(&str, &str)]) -> (String, String) {
        let r = self.call(pairs).await;
        assert_eq!(r.status, 400, "{pairs:?} -> {}", r.body);
        assert!(
            r.body.starts_with(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>"
            ),
            "{}",
            r.body
        );
        let x = r.xml();
        assert_eq!(x.name, "Response");
        assert!(!x.text_at("RequestID").is_empty());
        let e = x.at("Errors/Error");
        (
            e.text_at("Code").to_string(),
            e.text_at("Message").to_string(),
        )
    }

    /// Serves the EC2 router on a real socket (for the SDK); returns the endpoint.
    pub async fn serve(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = self.ec2.clone();
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        format!("http://{addr}")
    }

    pub fn imds(&self, instance_id: &str) -> Router {
        imds::router(self.sim.clone(), instance_id.to_string())
    }
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: axum::http::HeaderMap,
    pub body: String,
}

impl Reply {
    pub async fn from(resp: Response<Body>) -> Self {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24)
            .await
            .unwrap();
        Self {
            status,
            headers,
            body: String::from_utf8(bytes.to_vec()).unwrap(),
        }
    }

    pub fn xml(&self) -> Node {
        parse_xml(&self.body)
    }
}

/// The SDK client the way ipamd builds it, against `endpoint`, with `retry`.
pub fn sdk_client(endpoint: &str, retry: RetryConfig) -> sdk::Client {
    let conf = sdk::Config::builder()
        .behavior_version(sdk::config::BehaviorVersion::latest())
        .region(sdk::config::Region::new("us-west-2"))
        .credentials_provider(sdk::config::Credentials::new(
            "AKIDVPCSIMTESTS",
            "secret",
            None,
            None,
            "static",
        ))
        .endpoint_url(endpoint)
        .retry_config(retry)
        .timeout_config(
            sdk::config::timeout::TimeoutConfig::builder()
                .operation_attempt_timeout(Duration::from_secs(30))
                .build(),
        )
        .build();
    sdk::Client::from_conf(conf)
}

/// `http://127.0.0.1:PORT` -> `127.0.0.1:PORT`.
pub fn host_port(endpoint: &str) -> String {
    testkit::http::split_url(endpoint).0.to_string()
}

/// GET `path` from an IMDS endpoint with a fresh IMDSv2 token.
pub fn imds_get(endpoint: &str, path: &str) -> String {
    let addr = host_port(endpoint);
    let (status, token) = testkit::http::exchange(
        std::net::TcpStream::connect(&addr).unwrap(),
        "PUT",
        &addr,
        "/latest/api/token",
        &[("X-aws-ec2-metadata-token-ttl-seconds", "60")],
        "",
    );
    assert_eq!(status, 200);
    let (status, body) = testkit::http::exchange(
        std::net::TcpStream::connect(&addr).unwrap(),
        "GET",
        &addr,
        &format!("/latest/{path}"),
        &[("X-aws-ec2-metadata-token", &token)],
        "",
    );
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// How long the binary gets to come up or go.
const PATIENCE: Duration = Duration::from_secs(60);

/// A running `vpc-sim` binary; killed (and its state dir removed) on drop.
pub struct SimProcess {
    pub child: Option<std::process::Child>,
    pub dir: std::path::PathBuf,
}

impl SimProcess {
    /// Starts the binary with `--name NAME --state-dir <fresh dir>` plus `args`.
    pub fn start(name: &str, args: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(testkit::unique("vpc-sim-test-"));
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(dir.join("stderr.log")).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_vpc-sim"))
            .args(["--name", name, "--state-dir"])
            .arg(&dir)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Self {
            child: Some(child),
            dir,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default()
    }

    fn child(&mut self) -> &mut std::process::Child {
        self.child.as_mut().expect("vpc-sim is running")
    }

    /// Waits (bounded) for sim.json; panics with the log if the process exits first.
    pub fn wait_ready(&mut self) -> vpc_sim::simfile::SimFile {
        let ready = testkit::wait::poll(PATIENCE, || {
            if let Ok(f) = vpc_sim::simfile::SimFile::read(&self.dir) {
                return Ok(f);
            }
            match self.child().try_wait().unwrap() {
                Some(status) => panic!(
                    "vpc-sim exited with {status} before it was ready:\n{}",
                    self.log()
                ),
                None => Err(()),
            }
        });
        ready.unwrap_or_else(|()| panic!("vpc-sim not ready after {PATIENCE:?}:\n{}", self.log()))
    }

    /// Waits (bounded) for the process to exit by itself.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let exited = testkit::wait::poll(PATIENCE, || self.child().try_wait().unwrap().ok_or(()));
        let status = exited.unwrap_or_else(|()| {
            panic!("vpc-sim did not exit within {PATIENCE:?}:\n{}", self.log())
        });
        self.child = None;
        status
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child().id() as i32;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        self.wait_exit()
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            // SIGTERM first so it can remove its namespaces; SIGKILL if it does not go.
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            testkit::within(Duration::from_secs(10), || {
                matches!(child.try_wait(), Ok(Some(_)))
            });
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
