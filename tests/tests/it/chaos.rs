//! Crash chaos: pods are added and deleted in parallel on a box node while ipamd is killed
//! (SIGKILL) at random moments and restarted. At no moment may two live pods share an
//! address, every DEL must succeed, and once the runtime's GC has run, EC2, ipamd's store and
//! the node agree with nothing leaked.
//!
//! The suite runs the round: 1,000 pods and 20 kills (about 90 s here), and the same
//! scenario in IPv6 mode, bounded to 300 pods and 6 kills. `scripts/chaos.sh` runs other
//! rounds through VPC_CNI_CHAOS_PODS, VPC_CNI_CHAOS_KILLS and VPC_CNI_CHAOS_SEED (IPv4).

use crate::common;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::*;
use e2e::{Cni, Pod, VpcBox, conf, require_root};
use serde_json::{Value, json};

/// Parallel "kubelets".
const WORKERS: usize = 4;
/// Pods each worker keeps alive at once: 16 live pods in all, more than the primary ENI of an
/// m5.xlarge holds (14), so ENIs are attached and filled while ipamd is being killed.
const LIVE_PER_WORKER: usize = 4;
/// A failed ADD is retried (after its DEL, as kubelet does) this many times at most.
const ADD_ATTEMPTS: usize = 100;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v:?} is not a count"))
        })
        .unwrap_or(default)
}

/// xorshift64*: the moments of the kills; the seed is printed so a run can be repeated.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

#[derive(Default)]
struct Tally {
    adds: AtomicUsize,
    add_failures: AtomicUsize,
    dels: AtomicUsize,
    done: AtomicUsize,
    /// Every broken promise, in words: the test fails if any is recorded.
    violations: Mutex<Vec<String>>,
}

impl Tally {
    fn violation(&self, what: String) {
        eprintln!("VIOLATION: {what}");
        self.violations.lock().unwrap().push(what);
    }
}

struct Run<'a> {
    vbox: &'a VpcBox,
    conf: String,
    pods: usize,
    next: AtomicUsize,
    /// Address -> container of every live pod (ADD answered, DEL not begun).
    live: Mutex<BTreeMap<String, String>>,
    tally: Tally,
}

impl Run<'_> {
    fn del(&self, pod: &Pod, prev: Option<&Value>) {
        let stdin = match prev {
            Some(result) => conf(
                "1.1.0",
                &self.vbox.node(1).ipamd_socket,
                json!({ "prevResult": result }),
            ),
            None => self.conf.clone(),
        };
        let out = pod.cni("DEL").stdin(stdin).run();
        self.tally.dels.fetch_add(1, Ordering::SeqCst);
        if out.code != 0 {
            self.tally.violation(format!(
                "DEL of {} failed ({}): {}\n{}",
                pod.container_id, out.code, out.stdout, out.stderr
            ));
        }
    }

    /// ADD until it succeeds; each failure is followed by a DEL, as the runtime does.
    fn add(&self, pod: &Pod) -> Option<Value> {
        for _ in 0..ADD_ATTEMPTS {
            let out = pod.cni("ADD").stdin(self.conf.clone()).run();
            self.tally.adds.fetch_add(1, Ordering::SeqCst);
            if out.code == 0 {
                return Some(serde_json::from_str(&out.stdout).expect("ADD result JSON"));
            }
            self.tally.add_failures.fetch_add(1, Ordering::SeqCst);
            self.del(pod, None);
            // The runtime's retry pause: part of the scenario (ADDs keep coming while ipamd is
            // down), not a wait for anything.
            sleep(Duration::from_millis(50));
        }
        self.tally
            .violation(format!("ADD of {} never succeeded", pod.container_id));
        None
    }

    fn worker(&self) {
        let mut alive: VecDeque<(Pod, Value, String)> = VecDeque::new();
        loop {
            let n = self.next.fetch_add(1, Ordering::SeqCst);
            if n >= self.pods {
                break;
            }
            let pod = self.vbox.pod(1);
            if let Some(result) = self.add(&pod) {
                let ip = address_of(&result);
                let mut live = self.live.lock().unwrap();
                if let Some(other) = live.insert(ip.clone(), pod.container_id.clone()) {
                    self.tally.violation(format!(
                        "{ip} handed to {} while {other} still uses it",
                        pod.container_id
                    ));
                }
                drop(live);
                alive.push_back((pod, result, ip));
            }
            while alive.len() > LIVE_PER_WORKER {
                self.retire(alive.pop_front().expect("more than LIVE_PER_WORKER"));
            }
        }
        for pod in alive {
            self.retire(pod);
        }
    }

    /// The pod leaves the live set, then is deleted (as kubelet deletes a pod it has stopped).
    fn retire(&self, (pod, result, ip): (Pod, Value, String)) {
        self.live.lock().unwrap().remove(&ip);
        self.del(&pod, Some(&result));
        self.tally.done.fetch_add(1, Ordering::SeqCst);
    }

    /// Every live pod's address is still what ipamd holds for it (asked right after a restart,
    /// with the live set frozen).
    fn check_live_after_restart(&self, kill: usize) {
        let live = self.live.lock().unwrap();
        for (ip, container) in live.iter() {
            let key = ipam_proto::AttachmentKey {
                network: "vpc-cni".into(),
                container_id: container.clone(),
                ifname: "eth0".into(),
            };
            let held = ipam_proto::Client::new(&self.vbox.node(1).ipamd_socket)
                .check(ipam_proto::CheckRequest { key })
                .map(|r| r.allocation.addresses().to_string());
            if held.as_deref().ok() != Some(ip.as_str()) {
                self.tally.violation(format!(
                    "after kill {kill}, ipamd holds {held:?} for {container}, which uses {ip}"
                ));
            }
        }
    }

    /// Kills ipamd `kills` times, spread over the run at random moments, restarting it each time.
    fn killer(&self, kills: usize, rng: &mut Rng) {
        for k in 1..=kills {
            let due = k * self.pods / (kills + 1);
            testkit::wait_until(
                Duration::from_secs(300),
                &format!("the churn to retire {due} pods before kill {k}"),
                || self.tally.done.load(Ordering::SeqCst) >= due,
            );
            // The moment of the kill and how long ipamd stays down are random on purpose: the
            // scenario's pacing, not waits for anything.
            sleep(Duration::from_millis(rng.below(150)));
            self.vbox.stop_ipamd(1, true);
            // Down for a while: ADDs fail, DELs are handled from prevResult.
            sleep(Duration::from_millis(rng.below(400)));
            self.vbox.start_ipamd(1);
            self.check_live_after_restart(k);
        }
    }
}

/// The pod's address from its ADD result: its one IPv4 /32 or IPv6 /128.
fn address_of(result: &Value) -> String {
    let address = result["ips"][0]["address"]
        .as_str()
        .unwrap_or_else(|| panic!("no ips[0].address: {result}"));
    let (ip, len) = address.split_once('/').expect("a CIDR");
    assert!(len == "32" || len == "128", "a single address: {result}");
    ip.to_string()
}

fn seed() -> u64 {
    std::env::var("VPC_CNI_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        })
}

/// Churns `pods` pods with `kills` SIGKILLs of ipamd on a box made with `box_args`; checks
/// that no address was ever shared and every DEL succeeded, then runs the runtime's GC.
fn churn(box_args: &[&str], pods: usize, kills: usize) -> VpcBox {
    let seed = seed();
    eprintln!("chaos {box_args:?}: {pods} pods, {kills} SIGKILLs, {WORKERS} workers, seed {seed}");
    // A short cooldown, so released addresses come back during the run and a duplicate would
    // have every chance to happen.
    let mut args = vec![
        "--instance-type",
        "m5.xlarge",
        "--ipamd-env",
        "IP_COOLDOWN_PERIOD=2",
    ];
    args.extend_from_slice(box_args);
    let vbox = VpcBox::up(&args);
    let run = Run {
        vbox: &vbox,
        conf: conf("1.1.0", &vbox.node(1).ipamd_socket, json!({})),
        pods,
        next: AtomicUsize::new(0),
        live: Mutex::new(BTreeMap::new()),
        tally: Tally::default(),
    };
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| run.worker());
        }
        run.killer(kills, &mut Rng(seed));
    });
    let t = &run.tally;
    eprintln!(
        "chaos: {} pods in {:.1} s; {} ADD calls ({} failed while ipamd was down or restarting, each followed by a DEL), {} DEL calls",
        t.done.load(Ordering::SeqCst),
        started.elapsed().as_secs_f64(),
        t.adds.load(Ordering::SeqCst),
        t.add_failures.load(Ordering::SeqCst),
        t.dels.load(Ordering::SeqCst),
    );
    let violations = t.violations.lock().unwrap().clone();
    assert!(
        violations.is_empty(),
        "{} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
    assert_eq!(t.done.load(Ordering::SeqCst), pods);
    assert!(run.live.lock().unwrap().is_empty());

    // The runtime's GC: no attachment of this network is valid any more. ADDs that ipamd
    // answered just before a kill, whose DEL came while it was down, are released here.
    let node = vbox.node(1);
    let gc = conf(
        "1.1.0",
        &node.ipamd_socket,
        json!({ "cni.dev/valid-attachments": [] }),
    );
    Cni::new("GC", node).stdin(gc).run().ok_silent();
    drop(run);
    vbox
}

/// Waits until the node routes to no pod: every pod's namespace is gone by now, and with it its
/// veth pair, whose host end carries the pod's routes. The kernel removes a namespace's devices
/// in a work queue after the last reference goes, a moment later under load, so this is a
/// bounded wait rather than a look right after the churn.
fn veths_gone(pod_routes: impl Fn() -> Vec<String>) {
    testkit::wait_ok(Duration::from_secs(30), "no pod route left", || {
        let left = pod_routes();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("pod routes left: {left:?}"))
        }
    });
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn sigkills_during_parallel_churn_never_duplicate_or_leak_an_address() {
    require_root();
    let pods = env_usize("VPC_CNI_CHAOS_PODS", 1000);
    let kills = env_usize("VPC_CNI_CHAOS_KILLS", 20);
    let started = Instant::now();
    let vbox = churn(&[], pods, kills);
    let churned = started.elapsed();
    let node = vbox.node(1);
    assert_eq!(vbox.status(1).pool.assigned, 0, "assigned after GC");
    veths_gone(|| node_pod_routes(&node.netns));

    // ipamd gives the surplus back (one round per 30 s) down to the primary ENI, which alone
    // covers WARM_ENI_TARGET=1 with no pod; then EC2, ipamd and the node agree.
    testkit::wait_ok(
        Duration::from_secs(180),
        "the surplus ENIs to go and EC2, ipamd and the node to agree",
        || match ec2_view(&vbox, 1).0.len() {
            1 => agreement(&vbox, 1),
            enis => Err(format!("{enis} ENIs attached")),
        },
    );
    // And so does the store, read directly once ipamd is stopped.
    vbox.stop_ipamd(1, false);
    assert_store_agrees(&vbox);
    vbox.start_ipamd(1);
    settle_and_agree(&vbox, 1);
    let log = std::fs::read_to_string(&node.ipamd_log).unwrap_or_default();
    assert!(!log.contains("panicked"), "ipamd panicked:\n{log}");
    eprintln!(
        "chaos: agreement reached {:.1} s after the churn",
        (started.elapsed() - churned).as_secs_f64()
    );
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn ipv6_sigkills_during_parallel_churn_never_duplicate_or_leak_an_address() {
    require_root();
    let vbox = churn(&["--ip-family", "ipv6"], 300, 6);
    let node = vbox.node(1);
    let pods = node.get_json(&format!("{}/v1/pods", e2e::INTROSPECT));
    assert_eq!(pods, json!([]), "addresses still held after GC");
    // IPv6 routes, and the IPv4 egress addresses' routes.
    veths_gone(|| {
        ["-6", "-4"]
            .iter()
            .flat_map(|family| e2e::ip(&["-n", &node.netns, family, "route", "show"]))
            .filter(|l| l.contains(" dev eni"))
            .collect()
    });
    // The store, read directly once ipamd is stopped: the one /80 EC2 delegated, and no
    // address of it held for a pod.
    vbox.stop_ipamd(1, false);
    let opened = store::SledStore::open(std::path::Path::new(&node.state_dir))
        .expect("the store opens once ipamd is gone");
    let stored = pool::StateStore::load(&opened).expect("the store reads back");
    assert_eq!(stored.prefixes6.len(), 1, "{:?}", stored.prefixes6);
    let held: Vec<_> = stored
        .addrs6
        .iter()
        .filter(|a| matches!(a.state, pool::SlotState::Assigned { .. }))
        .collect();
    assert!(held.is_empty(), "the store still assigns {held:?}");
    let log = std::fs::read_to_string(&node.ipamd_log).unwrap_or_default();
    assert!(!log.contains("panicked"), "ipamd panicked:\n{log}");
}

/// ipamd's store (opened directly; ipamd must be stopped) holds exactly EC2's addresses on the
/// node's ENIs, and none of them for a pod.
fn assert_store_agrees(vbox: &VpcBox) {
    // Opening waits for the stopped ipamd's lock to go.
    let opened = store::SledStore::open(std::path::Path::new(&vbox.node(1).state_dir))
        .expect("the store opens once ipamd is gone");
    let stored = pool::StateStore::load(&opened).expect("the store reads back");
    let mut by_eni: BTreeMap<String, std::collections::BTreeSet<String>> = stored
        .enis
        .iter()
        .map(|e| (e.id.clone(), Default::default()))
        .collect();
    for a in &stored.addrs {
        by_eni
            .entry(a.eni.clone())
            .or_default()
            .insert(a.ip.to_string());
        assert!(
            !a.slot.is_assigned(),
            "the store still assigns {}: {:?}",
            a.ip,
            a.slot
        );
    }
    assert_eq!(by_eni, ec2_view(vbox, 1).0, "the store and EC2 disagree");
}
