//! ipamd working with the scheduler, on kube-in-a-box driven with kubectl: the node's real pod
//! capacity published on it (secondary addresses, a node MAX_ENI, prefix delegation, custom
//! networking, and as the node's max pods when opted in); a
//! node-level WARM_IP_TARGET converged to and its removal restoring the default; an invalid
//! node value refused with an Event; a burst of 40 pods met by few EC2 calls with no ADD
//! failing; a cordon giving back the warm surplus and an uncordon bringing it back; a pod
//! that cannot get an address told why in a Warning Event; EC2 refusing a permission told on
//! the node; the startup taint keeping pods off the node until ipamd can address them; and
//! 30 pods running on a fragmented subnet with prefix delegation.

use std::time::Duration;

use e2e::{Node, VpcBox, deployment, require_root};
use serde_json::{Value, json};
use testkit::Steps;

/// Scheduling, sandboxes and ADDs of up to 40 pods on one node, ENIs attached meanwhile.
const PODS_UP: Duration = Duration::from_secs(300);
/// The pool converging to new targets: a release round waits up to 30 s after the last one,
/// and freed addresses cool 30 s first.
const CONVERGE: Duration = Duration::from_secs(150);
/// An Event, an annotation or a taint reaching the API server.
const SEEN: Duration = Duration::from_secs(60);

/// m5.4xlarge: 8 ENIs of 30 IPv4 addresses, 29 of them for pods.
const INSTANCE: &str = "m5.4xlarge";
const ENIS: u32 = 8;
const SLOTS: u32 = 29;

const EC2_ALLOCATIONS: [&str; 3] = [
    cloud::Action::AssignPrivateIpAddresses.wire_name(),
    cloud::Action::CreateNetworkInterface.wire_name(),
    "AssignIpv4Prefixes",
];

struct Box1 {
    vbox: VpcBox,
    name: String,
}

impl Box1 {
    fn node(&self) -> &Node {
        self.vbox.node(1)
    }

    fn kubectl(&self, args: &[&str]) -> String {
        self.vbox.kubectl_ok(args)
    }

    fn node_json(&self) -> Value {
        serde_json::from_str(&self.kubectl(&["get", "node", &self.name, "-o", "json"]))
            .expect("the node as JSON")
    }

    fn annotate(&self, kv: &str) {
        self.kubectl(&["annotate", "--overwrite", "node", &self.name, kv]);
    }

    fn wait<T>(&self, timeout: Duration, what: &str, f: impl FnMut() -> Result<T, String>) -> T {
        testkit::wait_ok(timeout, what, f)
    }

    fn wait_capacity(&self, expected: u32) {
        self.wait(SEEN, &format!("vpc-cni.io/max-pods = {expected}"), || {
            let shown = self.node_json()["metadata"]["annotations"]["vpc-cni.io/max-pods"].clone();
            if shown == json!(expected.to_string()) {
                Ok(())
            } else {
                Err(format!("the node shows {shown}"))
            }
        });
    }

    /// Waits until the pool, settled, satisfies `ok`; returns it.
    fn wait_pool(&self, what: &str, mut ok: impl FnMut(&Value) -> bool) -> Value {
        self.wait(CONVERGE, what, || {
            let pool = self.node().pool();
            if ok(&pool) {
                Ok(pool)
            } else {
                Err(format!(
                    "targets {} totals {} reason {}",
                    pool["Targets"], pool["Totals"], pool["Reason"]
                ))
            }
        })
    }

    fn allocation_calls(&self) -> u64 {
        let calls = self.vbox.sim_calls();
        EC2_ALLOCATIONS
            .iter()
            .map(|api| calls.get(*api).copied().unwrap_or(0))
            .sum()
    }

    /// Warning events with `reason` about objects named `object`: their messages.
    fn warnings(&self, object: &str, reason: &str) -> Vec<String> {
        let selector = format!("involvedObject.name={object},reason={reason}");
        let all = self.kubectl(&[
            "get",
            "events",
            "-A",
            "--field-selector",
            &selector,
            "-o",
            "json",
        ]);
        let list: Value = serde_json::from_str(&all).expect("events as JSON");
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["type"] == "Warning")
            .filter_map(|e| {
                e["message"]
                    .as_str()
                    .or(e["note"].as_str())
                    .map(String::from)
            })
            .collect()
    }

    fn restart_ipamd_with(&self, lines: &[&str]) {
        self.vbox.stop_ipamd(1, false);
        let env = self.vbox.run_dir().join("node1/ipamd.env");
        let mut text = std::fs::read_to_string(&env).expect("the node's ipamd.env");
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        std::fs::write(&env, text).expect("writing the node's ipamd.env");
        self.vbox.start_ipamd(1);
    }
}

fn available(pool: &Value) -> u64 {
    pool["Totals"]["AvailableIPs"].as_u64().unwrap_or(u64::MAX)
}

/// Whether the scheduler has considered `pod` and refused it: its `PodScheduled` condition
/// is False, for reason Unschedulable.
fn unschedulable(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["type"] == "PodScheduled" && c["status"] == "False" && c["reason"] == "Unschedulable"
        })
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn ipamd_works_with_the_scheduler() {
    require_root();
    let vbox = VpcBox::up_kube(&["--nodes", "1", "--instance-type", INSTANCE]);
    let name = vbox.node(1).k8s_node.clone().expect("a Kubernetes node");
    let b = Box1 { vbox, name };
    let mut steps = Steps::new("ipamd with the scheduler");

    // Real capacity, published: every ENI's secondary addresses.
    steps.step("capacity published", || {
        b.wait_capacity(ENIS * SLOTS);
        eprintln!("capacity (secondary addresses): {}", ENIS * SLOTS);
    });

    // A node-level WARM_IP_TARGET is converged to.
    steps.step("node WARM_IP_TARGET converged to", || {
        b.annotate("vpc-cni.io/WARM_IP_TARGET=1");
        b.wait_pool("WARM_IP_TARGET=1 from the node", |p| {
            p["Targets"]["WARM_IP_TARGET"] == 1 && available(p) == 1
        });
    });

    // Predictive growth: a Deployment scaled from 0 to 40 on this node.
    steps.step("predictive growth for a burst of 40 pods", || {
        let before = b.allocation_calls();
        b.vbox.apply(&deployment("burst", 0, Some(&b.name)));
        b.kubectl(&["scale", "deployment/burst", "--replicas", "40"]);
        let pods = b.vbox.wait_running("app=burst", 40, PODS_UP);
        let calls = b.allocation_calls() - before;
        eprintln!("predictive growth: 40 pods, {calls} EC2 allocation calls");
        // The ReplicaSet creates the pods in doubling batches; a burst fills the ENI it grows,
        // so the primary ENI and one new ENI meet it (3 calls when measured), whatever the
        // batches.
        assert!(calls <= 5, "40 pods took {calls} EC2 allocation calls");
        for pod in &pods {
            let pod = pod["metadata"]["name"].as_str().expect("a pod name");
            let failed = b.warnings(pod, "FailedCreatePodSandBox");
            assert!(failed.is_empty(), "{pod}'s first ADD failed: {failed:?}");
        }
        let plugin = b.node().plugin_log();
        assert!(
            plugin.errors.is_empty(),
            "the plugin logged errors: {:?}",
            plugin.errors
        );
    });

    // The burst's pods go (whether or not its checks passed): the steps after it count the
    // pool's free addresses and ENIs.
    let burst_gone = steps.step("the burst's pods deleted", || {
        b.kubectl(&["delete", "deployment", "burst"]);
        b.vbox.wait_no_pods("app=burst", PODS_UP);
    });

    // Removing the annotation restores the environment's targets; an invalid value is
    // refused with an Event and the environment's value kept.
    steps.step("node targets removed, an invalid one refused", || {
        b.kubectl(&["annotate", "node", &b.name, "vpc-cni.io/WARM_IP_TARGET-"]);
        b.annotate("vpc-cni.io/MINIMUM_IP_TARGET=plenty");
        b.wait_pool("the environment's targets again", |p| {
            p["Targets"]["WARM_IP_TARGET"] == 0
                && p["Targets"]["MINIMUM_IP_TARGET"] == 0
                && p["Targets"]["WARM_ENI_TARGET"] == 1
                && available(p) >= u64::from(SLOTS)
        });
        b.wait(SEEN, "an InvalidSetting Event on the node", || {
            let events = b.warnings(&b.name, "InvalidSetting");
            events
                .iter()
                .find(|m| m.contains("vpc-cni.io/MINIMUM_IP_TARGET") && m.contains("plenty"))
                .cloned()
                .ok_or(format!("{events:?}"))
        });
        b.kubectl(&["annotate", "node", &b.name, "vpc-cni.io/MINIMUM_IP_TARGET-"]);
    });

    // Cordon: the warm surplus goes back, and the second ENI with it; uncordon: it returns.
    // (The steps that schedule pods or grow the pool need the node uncordoned: they are
    // skipped when this step fails.)
    let uncordoned = steps.step_with("cordon and uncordon", burst_gone, |()| {
        b.kubectl(&["cordon", &b.name]);
        let drained = b.wait_pool("a drained pool", |p| {
            p["Draining"] == true && available(p) == 0 && p["Totals"]["CoolingIPs"] == 0
        });
        eprintln!("cordoned: {}", drained["Totals"]);
        b.wait_pool("the unused ENI freed", |p| p["Totals"]["ENIs"] == 1);
        b.kubectl(&["uncordon", &b.name]);
        let back = b.wait_pool("the warm pool back", |p| {
            p["Draining"] == false && available(p) >= u64::from(SLOTS)
        });
        eprintln!("uncordoned: {}", back["Totals"]);
    });

    // A pod that cannot get an address is told why: a node MAX_ENI of 1 leaves 29 addresses
    // (the published capacity follows), and the 30th pod finds none. (The node MAX_ENI and the
    // pods that fill it are gone only once this step passed: the steps that need the node's
    // full capacity are skipped when it did not.)
    let max_eni_gone = steps.step_with("a pod without an address told why", uncordoned, |()| {
        b.annotate("vpc-cni.io/MAX_ENI=1");
        b.wait_capacity(SLOTS);
        b.vbox
            .apply(&deployment("full", SLOTS as usize + 1, Some(&b.name)));
        let stuck = b.wait(PODS_UP, "a pod without an address", || {
            let pods = b.vbox.pods("app=full");
            let running = pods
                .iter()
                .filter(|p| p["status"]["phase"] == "Running")
                .count();
            let waiting: Vec<&Value> = pods
                .iter()
                .filter(|p| p["status"]["phase"] != "Running")
                .collect();
            match (running, waiting.as_slice()) {
                (r, [one]) if r == SLOTS as usize => Ok(one["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()),
                _ => Err(format!("{running} Running, {} not", waiting.len())),
            }
        });
        let described = b.wait(SEEN, "FailedAssignIP in kubectl describe", || {
            let text = b.kubectl(&["describe", "pod", &stuck]);
            if text.contains("FailedAssignIP")
                && text.contains(&format!("ENI limit 1 of {INSTANCE}"))
            {
                Ok(text)
            } else {
                Err(text.lines().rev().take(6).collect::<Vec<_>>().join(" | "))
            }
        });
        eprintln!(
            "{}",
            described
                .lines()
                .filter(|l| l.contains("FailedAssignIP"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        let events = b.warnings(&stuck, "FailedAssignIP");
        assert_eq!(
            events.len(),
            1,
            "one aggregated Event for the retrying pod: {events:?}"
        );
        b.kubectl(&["annotate", "node", &b.name, "vpc-cni.io/MAX_ENI-"]);
        b.vbox.wait_running("app=full", SLOTS as usize + 1, PODS_UP);
        b.wait_capacity(ENIS * SLOTS);
        b.kubectl(&["delete", "deployment", "full"]);
        b.vbox.wait_no_pods("app=full", PODS_UP);
    });

    // EC2 refusing a permission is told on the node (ipamd runs as a process here, not in a
    // pod): a node target asks for growth the node's role may not make. (The denial and the
    // target are lifted only once this step passed: the startup taint's step, which needs
    // ipamd to serve with free addresses, is skipped when it did not.)
    let permitted = steps.step_with(
        "a refused permission told on the node",
        max_eni_gone,
        |()| {
            b.vbox
                .set_iam(&json!({"deny": [cloud::Action::AssignPrivateIpAddresses.wire_name(), cloud::Action::CreateNetworkInterface.wire_name()]}));
            b.annotate("vpc-cni.io/WARM_IP_TARGET=80");
            b.wait(SEEN, "a MissingIAMPermissions Event", || {
                let events = b.warnings(&b.name, "MissingIAMPermissions");
                (!events.is_empty())
                    .then_some(events.clone())
                    .ok_or(format!("{events:?}"))
            });
            b.vbox.set_iam(&json!({"deny": []}));
            b.kubectl(&["annotate", "node", &b.name, "vpc-cni.io/WARM_IP_TARGET-"]);
        },
    );

    // The startup taint: with ipamd down no pod is scheduled; once it serves with free
    // addresses the taint goes and the pods run.
    steps.step_with("the startup taint", permitted, |()| {
        b.vbox.stop_ipamd(1, false);
        b.kubectl(&[
            "taint",
            "node",
            &b.name,
            "vpc-cni.io/agent-not-ready=true:NoSchedule",
        ]);
        b.vbox.apply(&deployment("tainted", 2, Some(&b.name)));
        // Until the scheduler has considered both pods and refused them, none may be on the
        // node meanwhile.
        let refused = b.wait(
            SEEN,
            "both app=tainted pods refused by the scheduler",
            || {
                let pods = b.vbox.pods("app=tainted");
                for pod in &pods {
                    assert!(
                        pod["spec"]["nodeName"].is_null(),
                        "scheduled onto a tainted node: {pod}"
                    );
                }
                let unschedulable = pods.iter().filter(|p| unschedulable(p)).count();
                if pods.len() == 2 && unschedulable == 2 {
                    Ok(pods)
                } else {
                    Err(format!(
                        "{unschedulable} of {} pods PodScheduled=False (Unschedulable)",
                        pods.len()
                    ))
                }
            },
        );
        for pod in refused {
            assert!(
                pod["spec"]["nodeName"].is_null(),
                "scheduled onto a tainted node: {pod}"
            );
        }
        b.vbox.start_ipamd(1);
        b.wait(SEEN, "the startup taint removed", || {
            let taints = b.node_json()["spec"]["taints"].clone();
            if taints.to_string().contains("vpc-cni.io/agent-not-ready") {
                Err(format!("taints {taints}"))
            } else {
                Ok(())
            }
        });
        b.vbox.wait_running("app=tainted", 2, PODS_UP);
        b.kubectl(&["delete", "deployment", "tainted"]);
        b.vbox.wait_no_pods("app=tainted", PODS_UP);
    });

    // Prefix delegation: every slot a /28. (A node MAX_ENI left by the step that sets it,
    // failed, would change the capacity: skipped then. Skipped itself, it set none.)
    let no_max_eni = if uncordoned.is_some() {
        max_eni_gone
    } else {
        Some(())
    };
    let delegating = steps.step_with("prefix delegation", no_max_eni, |()| {
        b.restart_ipamd_with(&["ENABLE_PREFIX_DELEGATION=true"]);
        b.wait_capacity(ENIS * SLOTS * 16);
        eprintln!("capacity (prefix delegation): {}", ENIS * SLOTS * 16);
    });

    // Custom networking leaves the primary ENI's slots out; opted in, the count also becomes
    // the max pods the node reports (the kubelet writes its own back at each status update,
    // and ipamd its own again). On top of prefix delegation, which the step above enabled.
    steps.step_with("custom networking, as the node's max pods", delegating, |()| {
        b.restart_ipamd_with(&[
            "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=true",
            "PUBLISH_NODE_MAX_PODS=true",
        ]);
        let custom = (ENIS - 1) * SLOTS * 16;
        b.wait_capacity(custom);
        b.wait(SEEN, "the node's max pods", || {
            let status = b.node_json()["status"].clone();
            let shown = [&status["capacity"]["pods"], &status["allocatable"]["pods"]];
            if shown.iter().all(|p| **p == json!(custom.to_string())) {
                Ok(())
            } else {
                Err(format!("capacity and allocatable pods {shown:?}"))
            }
        });
        eprintln!(
            "capacity (custom networking, prefix delegation): {custom}, also the node's max pods"
        );
    });

    // Prefix delegation on a fragmented subnet: every /28 of the node's subnet holds an
    // address someone else owns, so EC2 refuses every prefix; a Deployment of 30 runs all
    // the same, on /32s, without a failed sandbox.
    steps.step(
        "30 pods on a fragmented subnet with prefix delegation",
        || {
            let subnet = b.node().subnet_id.clone();
            let report = b.vbox.set_fragment(&subnet, json!("all"));
            eprintln!("fragmented: {report}");
            b.restart_ipamd_with(&[
                "ENABLE_PREFIX_DELEGATION=true",
                "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=false",
                "PUBLISH_NODE_MAX_PODS=false",
            ]);
            b.vbox.apply(&deployment("fragmented", 30, Some(&b.name)));
            let pods = b.vbox.wait_running("app=fragmented", 30, PODS_UP);
            for pod in &pods {
                let pod = pod["metadata"]["name"].as_str().expect("a pod name");
                let failed = b.warnings(pod, "FailedCreatePodSandBox");
                assert!(failed.is_empty(), "{pod}'s ADD failed: {failed:?}");
            }
            let pool = b.node().pool();
            let fallback = &pool["PrefixFallback"];
            let slash32s = fallback["IPsHeldAsSlash32"].as_u64().unwrap_or(0);
            let prefixes = pool["Totals"]["Prefixes"].as_u64().unwrap_or(0);
            eprintln!("fragmented subnet: 30 pods on {prefixes} /28s and {slash32s} /32s");
            assert!(slash32s > 0, "no /32 taken: {fallback}");
            assert!(slash32s + 16 * prefixes >= 30, "{pool}");
            assert!(
                fallback.to_string().contains("InsufficientCidrBlocks"),
                "the refusal shown in /v1/pool: {fallback}"
            );
            let refused = b.warnings(&b.name, "PrefixDelegationFallback");
            assert!(
                !refused.is_empty(),
                "no PrefixDelegationFallback Event on the node"
            );
            b.kubectl(&["delete", "deployment", "fragmented"]);
            b.vbox.wait_no_pods("app=fragmented", PODS_UP);
            b.vbox.set_fragment(&subnet, json!("none"));
        },
    );

    steps.finish();
}
