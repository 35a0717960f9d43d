//! Real container runtimes drive the plugin through the conflist we ship: libcni's `cnitool`
//! (the library containerd and CRI-O are built on) and podman 4 with its CNI backend, each run
//! inside a node of VPC-in-a-box exactly as it would run on the node itself.
//!
//! scripts/test.sh installs the runtimes: cnitool (built from Debian's libcni source package),
//! containernetworking-plugins (portmap), podman with crun and conmon, and busybox-static.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::*;
use e2e::{Node, Pod, VpcBox, bin_dir, conf, repo, require_root, run_bounded};
use ipam_proto::AttachmentKey;
use serde_json::{Value, json};
use tempfile::TempDir;

/// The network name of the shipped conflist.
const NETWORK: &str = "aws-cni";
/// Where libcni caches results (for cnitool and podman alike; no variable moves it).
const CNI_RESULTS: &str = "/var/lib/cni/results";
/// Debian's containernetworking-plugins, for portmap.
const REFERENCE_PLUGINS: &str = "/usr/lib/cni";
/// ipamd's introspection endpoint listing the pods it holds addresses for.
const PODS_ENDPOINT: &str = "http://127.0.0.1:61679/v1/pods";
/// The runtimes get this PATH and nothing else of the caller's environment (portmap needs
/// iptables, podman needs crun and conmon).
const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A tool scripts/test.sh installs, or a panic saying so.
fn installed(name: &str, found: Option<PathBuf>) -> PathBuf {
    found.unwrap_or_else(|| panic!("{name} is not installed: scripts/test.sh installs it"))
}

/// cnitool: `VPC_CNI_CNITOOL`, else where scripts/test.sh builds it, else on PATH.
fn cnitool() -> PathBuf {
    let cached = std::env::var_os("HOME")
        .map(|home| PathBuf::from(home).join(".cache/vpc-cni/bin/cnitool"))
        .filter(|p| p.is_file());
    let found = std::env::var_os("VPC_CNI_CNITOOL")
        .map(PathBuf::from)
        .or(cached)
        .or_else(|| testkit::cmd::which("cnitool"));
    let tool = installed("cnitool", found);
    assert!(
        tool.is_file(),
        "VPC_CNI_CNITOOL={} does not exist",
        tool.display()
    );
    tool
}

/// Portmap, which the shipped conflist chains after vpc-cni.
fn require_portmap() {
    let portmap = Path::new(REFERENCE_PLUGINS).join("portmap");
    installed("portmap", Some(portmap).filter(|p| p.is_file()));
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn assert_ok(out: &Output, what: &str) -> String {
    assert!(out.status.success(), "{what} failed: {}", text(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The shipped conflist written into `dir`/net.d, pointed at `node`'s ipamd and logging to
/// `dir`/plugin.log; everything else as shipped. Returns it and the log's path.
fn render_conflist(node: &Node, dir: &Path) -> (Value, PathBuf) {
    let shipped = repo().join("config/10-vpc-cni.conflist");
    let mut conflist: Value = serde_json::from_str(
        &std::fs::read_to_string(&shipped).unwrap_or_else(|e| panic!("{shipped:?}: {e}")),
    )
    .expect("the shipped conflist is JSON");
    assert_eq!(conflist["name"], NETWORK, "{conflist}");
    let log = dir.join("plugin.log");
    let plugin = conflist["plugins"]
        .as_array_mut()
        .expect("plugins")
        .iter_mut()
        .find(|p| p["type"] == "vpc-cni")
        .expect("a vpc-cni plugin");
    plugin["ipamdSocket"] = json!(node.ipamd_socket);
    plugin["pluginLogFile"] = json!(log.display().to_string());
    let netd = dir.join("net.d");
    std::fs::create_dir_all(&netd).unwrap();
    std::fs::write(
        netd.join("10-vpc-cni.conflist"),
        serde_json::to_string_pretty(&conflist).unwrap(),
    )
    .unwrap();
    (conflist, log)
}

/// The plugin's `Received CNI <verb> request` lines for `container_id`: (verb, CNI_ARGS).
fn requests(log: &Path, container_id: &str) -> Vec<(String, String)> {
    let needle = format!("ContainerID({container_id})");
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|entry| entry["message"].as_str().map(str::to_string))
        .filter(|m| m.contains(&needle))
        .filter_map(|m| {
            let verb = m
                .strip_prefix("Received CNI ")?
                .split(' ')
                .next()?
                .to_string();
            let args = m.rsplit_once("Args(")?.1.strip_suffix(')')?.to_string();
            Some((verb, args))
        })
        .collect()
}

/// Whether ipamd on `node` lists a pod with address `ip`.
fn ipamd_lists(node: &Node, ip: &str) -> bool {
    node.get_json(PODS_ENDPOINT)
        .as_array()
        .expect("/v1/pods is an array")
        .iter()
        .any(|p| p["IP"] == ip)
}

fn key(container_id: &str) -> AttachmentKey {
    AttachmentKey {
        network: NETWORK.into(),
        container_id: container_id.into(),
        ifname: "eth0".into(),
    }
}

/// libcni's result cache file of an attachment.
fn cache_file(container_id: &str) -> PathBuf {
    Path::new(CNI_RESULTS).join(format!("{NETWORK}-{container_id}-eth0"))
}

/// The nat table of a namespace.
fn nat_rules(netns: &str) -> String {
    let out = run_bounded(
        15,
        "ip",
        &["netns", "exec", netns, "iptables-save", "-t", "nat"],
        None,
    );
    assert_ok(&out, "iptables-save")
}

// --- cnitool --------------------------------------------------------------------------------

/// cnitool on a node for one pod; DELs the attachment and removes libcni's cache file on drop,
/// also when the test failed half-way.
struct Cnitool {
    tool: PathBuf,
    node_netns: String,
    netconf: PathBuf,
    netns_path: String,
    container_id: String,
}

impl Cnitool {
    fn new(node: &Node, dir: &Path, pod: &Pod) -> Cnitool {
        let netns_path = pod.netns_path();
        // cnitool names the container "cnitool-" + the first 10 bytes of SHA-512(netns path).
        let out = run_bounded(10, "sha512sum", &[], Some(netns_path.as_bytes()));
        let digest = assert_ok(&out, "sha512sum");
        Cnitool {
            tool: cnitool(),
            node_netns: node.netns.clone(),
            netconf: dir.join("net.d"),
            netns_path,
            container_id: format!("cnitool-{}", &digest[..20]),
        }
    }

    /// `cnitool <verb> aws-cni <netns>` inside the node, with `CAP_ARGS` when given.
    fn run(&self, verb: &str, cap_args: Option<&str>) -> Output {
        let mut args = vec![
            "netns".to_string(),
            "exec".into(),
            self.node_netns.clone(),
            "env".into(),
            "-i".into(),
            format!("PATH={SYSTEM_PATH}"),
            format!("NETCONFPATH={}", self.netconf.display()),
            format!("CNI_PATH={}:{REFERENCE_PLUGINS}", bin_dir().display()),
        ];
        if let Some(cap) = cap_args {
            args.push(format!("CAP_ARGS={cap}"));
        }
        args.extend([
            self.tool.display().to_string(),
            verb.into(),
            NETWORK.into(),
            self.netns_path.clone(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_bounded(60, "ip", &args, None)
    }

    fn cache_file(&self) -> PathBuf {
        cache_file(&self.container_id)
    }
}

impl Drop for Cnitool {
    fn drop(&mut self) {
        let _ = self.run("del", None);
        let _ = std::fs::remove_file(self.cache_file());
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn cnitool_adds_checks_and_deletes_through_the_shipped_conflist() {
    require_root();
    require_portmap();
    let vbox = VpcBox::up(&[]);
    let node = vbox.node(1);
    let work = tempfile::tempdir().unwrap();
    let (conflist, log) = render_conflist(node, work.path());
    let pod = vbox.pod(1);
    let cni = Cnitool::new(node, work.path(), &pod);

    let add = cni.run("add", None);
    let result: Value = serde_json::from_str(&assert_ok(&add, "cnitool add"))
        .unwrap_or_else(|e| panic!("cnitool add printed no result ({e}): {}", text(&add)));
    assert_eq!(result["cniVersion"], conflist["cniVersion"], "{result}");
    let ip = pod_ip(&result);
    assert!(
        in_cidr(&ip, &vbox.subnet().cidr),
        "{ip} not in {}",
        vbox.subnet().cidr
    );
    assert_eth0_in(&result, &pod.netns_path());
    let cached = std::fs::read_to_string(cni.cache_file())
        .unwrap_or_else(|e| panic!("libcni cached no result at {:?}: {e}", cni.cache_file()));
    assert!(cached.contains(&ip), "{cached}");
    assert_eq!(
        vbox.allocation(1, key(&cni.container_id))
            .ip
            .map(|ip| ip.to_string()),
        Some(ip.clone())
    );
    assert!(pod.ping_from_node(&ip), "node cannot reach {ip}");
    let veth = host_veth(&result);
    assert_host_wired(&node.netns, &ip, &veth);

    // CHECK gets the cached result as prevResult.
    assert_ok(&cni.run("check", None), "cnitool check");

    assert_ok(&cni.run("del", None), "cnitool del");
    assert!(!ipamd_lists(node, &ip), "ipamd still holds {ip}");
    assert_eq!(vbox.status(1).pool.assigned, 0);
    assert!(
        !cni.cache_file().exists(),
        "libcni kept {:?} after DEL",
        cni.cache_file()
    );
    assert_host_clean(&node.netns, &ip, &veth);

    // No cached result any more: the second DEL reaches the plugin without prevResult.
    assert_ok(&cni.run("del", None), "the second cnitool del");

    let seen = requests(&log, &cni.container_id);
    let verbs: Vec<&str> = seen.iter().map(|(v, _)| v.as_str()).collect();
    assert_eq!(verbs, ["add", "check", "del", "del"], "{seen:?}");
    eprintln!("CNI_ARGS from cnitool: {:?}", seen[0].1);
}

/// A one-shot TCP server in a pod: answers the first connection with `token`, then exits.
struct Listener(Child);

impl Listener {
    fn spawn(pod: &Pod, port: u16, token: &str) -> Listener {
        let busybox = installed("busybox", testkit::cmd::which("busybox"));
        let busybox = busybox.to_str().expect("path");
        let child = Command::new("timeout")
            .args(["60", "ip", "netns", "exec", &pod.netns, busybox, "nc", "-l"])
            .args(["-p", &port.to_string(), "-e", busybox, "echo", token])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning the listener");
        Listener(child)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // SIGTERM to `timeout`, which passes it on to the server it started.
        let _ = run_bounded(5, "kill", &[&self.0.id().to_string()], None);
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn cnitool_port_mapping_reaches_the_pod_through_portmap() {
    require_root();
    require_portmap();
    const HOST_PORT: u16 = 8080;
    const POD_PORT: u16 = 8000;
    let vbox = VpcBox::up(&["--nodes", "2"]);
    let (node, peer) = (vbox.node(1), vbox.node(2));
    let work = tempfile::tempdir().unwrap();
    render_conflist(node, work.path());
    let pod = vbox.pod(1);
    let cni = Cnitool::new(node, work.path(), &pod);
    let cap = json!({ "portMappings": [
        { "hostPort": HOST_PORT, "containerPort": POD_PORT, "protocol": "tcp" }
    ]})
    .to_string();

    let add = cni.run("add", Some(&cap));
    let result: Value = serde_json::from_str(&assert_ok(&add, "cnitool add"))
        .unwrap_or_else(|e| panic!("cnitool add printed no result ({e}): {}", text(&add)));
    let ip = pod_ip(&result);
    let dnat = format!("-j DNAT --to-destination {ip}:{POD_PORT}");
    let rules = nat_rules(&node.netns);
    assert!(
        rules.contains(&dnat) && rules.contains(&cni.container_id),
        "portmap's DNAT for the pod is missing:\n{rules}"
    );

    // Real traffic: the peer node connects to this node's primary address and host port, and
    // the pod's server answers.
    let token = format!("hello-from-{}", pod.name);
    let _server = Listener::spawn(&pod, POD_PORT, &token);
    let target = node.primary_ip.to_string();
    // The server may not be listening yet: try until it answers (bounded).
    testkit::wait_ok(
        Duration::from_secs(20),
        &format!("{target}:{HOST_PORT} to reach the pod's {POD_PORT}"),
        || {
            let out = run_bounded(
                10,
                "ip",
                &[
                    "netns",
                    "exec",
                    &peer.netns,
                    "busybox",
                    "nc",
                    "-w",
                    "3",
                    &target,
                    &HOST_PORT.to_string(),
                ],
                None,
            );
            if String::from_utf8_lossy(&out.stdout).contains(&token) {
                Ok(())
            } else {
                Err(format!("{}\n{}", text(&out), nat_rules(&node.netns)))
            }
        },
    );

    // No CHECK here: Debian's portmap 1.1.1 looks for an IPv6 chain of an IPv4-only pod and
    // fails (containernetworking/plugins#819), whatever the plugin before it did.
    assert_ok(&cni.run("del", Some(&cap)), "cnitool del");
    let rules = nat_rules(&node.netns);
    assert!(
        !rules.contains(&dnat) && !rules.contains(&cni.container_id),
        "portmap left the pod's rules:\n{rules}"
    );
    assert!(!ipamd_lists(node, &ip), "ipamd still holds {ip}");
    assert!(!cni.cache_file().exists(), "{:?} left", cni.cache_file());
    assert_host_clean(&node.netns, &ip, &host_veth(&result));
}

// --- podman ---------------------------------------------------------------------------------

/// Podman with its own configuration, storage and state under a temp dir, run inside a node.
/// Nothing of the machine's podman setup (/etc/containers, /var/lib/containers, /etc/cni) is
/// read or written; only libcni's cache under /var/lib/cni is shared, as for every runtime.
struct Podman {
    podman: PathBuf,
    node_netns: String,
    dir: TempDir,
}

impl Podman {
    fn new(node: &Node) -> (Podman, PathBuf) {
        let podman = installed("podman", testkit::cmd::which("podman"));
        let busybox = installed("busybox", testkit::cmd::which("busybox"));
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (_, log) = render_conflist(node, d);
        for sub in ["root", "runroot", "tmp", "rootfs/bin"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        std::fs::copy(&busybox, d.join("rootfs/bin/busybox")).unwrap();
        std::fs::write(
            d.join("containers.conf"),
            format!(
                r#"[network]
network_backend = "cni"
cni_plugin_dirs = ["{bin}", "{REFERENCE_PLUGINS}"]
network_config_dir = "{d}/net.d"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{d}/events.log"
tmp_dir = "{d}/tmp"
"#,
                bin = bin_dir().display(),
                d = d.display()
            ),
        )
        .unwrap();
        std::fs::write(
            d.join("storage.conf"),
            format!(
                "[storage]\ndriver = \"vfs\"\ngraphroot = \"{d}/root\"\nrunroot = \"{d}/runroot\"\n",
                d = d.display()
            ),
        )
        .unwrap();
        let p = Podman {
            podman,
            node_netns: node.netns.clone(),
            dir,
        };
        (p, log)
    }

    fn rootfs(&self) -> PathBuf {
        self.dir.path().join("rootfs")
    }

    /// `podman <args>` inside the node, bounded to `secs`.
    ///
    /// Not `ip netns exec`: it gives the command a mount namespace of its own, with a fresh
    /// /sys, which breaks podman twice. crun finds no cgroup filesystem under /sys/fs/cgroup
    /// ("invalid file system type"), and the container's netns, which podman bind-mounts under
    /// /run/netns, stays in that throwaway mount namespace, so the next podman command cannot
    /// join it and `podman rm` never tears the network down. So: only the node's network
    /// namespace (nsenter --net), plus a private mount namespace in which an empty tmpfs hides
    /// the machine's cgroups (the containers run with --cgroups=disabled, so podman creates
    /// none, and crun does not refuse this machine's hybrid cgroup layout). /run/netns keeps
    /// its shared propagation, so the netns podman creates is visible to `ip netns` and to the
    /// next podman command, as on a real host.
    fn run(&self, secs: u32, args: &[&str]) -> Output {
        let d = self.dir.path();
        let netns = format!("--net=/run/netns/{}", self.node_netns);
        let conf = format!("CONTAINERS_CONF={}", d.join("containers.conf").display());
        let storage = format!(
            "CONTAINERS_STORAGE_CONF={}",
            d.join("storage.conf").display()
        );
        let root = d.join("root").display().to_string();
        let runroot = d.join("runroot").display().to_string();
        let path = format!("PATH={SYSTEM_PATH}");
        let mut all = vec![
            netns.as_str(),
            "--",
            "unshare",
            "--mount",
            "--propagation",
            "unchanged",
            "--",
            "sh",
            "-c",
            "mount --make-rprivate /sys && mount -t tmpfs -o mode=755 none /sys/fs/cgroup && exec \"$@\"",
            "sh",
            "env",
            "-i",
            &path,
            &conf,
            &storage,
            self.podman.to_str().expect("path"),
            "--root",
            &root,
            "--runroot",
            &runroot,
        ];
        all.extend_from_slice(args);
        run_bounded(secs, "nsenter", &all, None)
    }
}

/// A container podman started; removed on drop unless the test removed it.
struct Container<'a> {
    podman: &'a Podman,
    name: String,
    id: String,
    pids: Vec<u32>,
    sandbox: String,
    removed: bool,
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        if !self.removed {
            let _ = self.podman.run(60, &["rm", "-f", "-t", "0", &self.name]);
        }
        // Should podman have failed: the processes it started, then its netns mount.
        for pid in &self.pids {
            if Path::new(&format!("/proc/{pid}")).exists() {
                let _ = run_bounded(5, "kill", &["-KILL", &pid.to_string()], None);
            }
        }
        if !self.sandbox.is_empty() && Path::new(&self.sandbox).exists() {
            let _ = run_bounded(10, "umount", &[&self.sandbox], None);
            let _ = std::fs::remove_file(&self.sandbox);
        }
        if !self.id.is_empty() {
            let _ = std::fs::remove_file(cache_file(&self.id));
        }
    }
}

/// Whether a process is gone, waiting a little for it.
fn gone(pid: u32) -> bool {
    testkit::within(Duration::from_secs(10), || {
        !Path::new(&format!("/proc/{pid}")).exists()
    })
}

#[test]
#[ignore = "needs root: run by scripts/test.sh as root"]
fn podman_runs_a_container_on_the_network_and_releases_it_on_rm() {
    require_root();
    require_portmap();
    let vbox = VpcBox::up(&["--nodes", "2"]);
    let node = vbox.node(1);
    // The peer: a pod on the other node, wired by the plugin directly.
    let peer = vbox.pod(2);
    let peer_ip = pod_ip(
        &peer
            .cni("ADD")
            .stdin(conf("1.1.0", &vbox.node(2).ipamd_socket, json!({})))
            .run()
            .ok(),
    );

    let (podman, log) = Podman::new(node);
    let ls = podman.run(30, &["network", "ls", "--format", "{{.Name}}"]);
    let networks = assert_ok(&ls, "podman network ls");
    assert!(
        networks.lines().any(|n| n.trim() == NETWORK),
        "podman does not list {NETWORK}: {}",
        text(&ls)
    );

    let mut ctr = Container {
        podman: &podman,
        name: format!("{}-c", vbox.name()),
        id: String::new(),
        pids: Vec::new(),
        sandbox: String::new(),
        removed: false,
    };
    let rootfs = podman.rootfs().display().to_string();
    let run = podman.run(
        120,
        &[
            "run",
            "-d",
            "--name",
            &ctr.name,
            "--network",
            NETWORK,
            "--cgroups=disabled",
            "--cap-add",
            "NET_RAW",
            "--ulimit=nofile=20000:20000",
            "--ulimit=nproc=4096:4096",
            "--rootfs",
            &rootfs,
            "/bin/busybox",
            "sleep",
            "600",
        ],
    );
    ctr.id = assert_ok(&run, "podman run").trim().to_string();
    let inspect = assert_ok(&podman.run(30, &["inspect", &ctr.name]), "podman inspect");
    let inspect: Value = serde_json::from_str(&inspect).expect("inspect JSON");
    let state = &inspect[0]["State"];
    ctr.pids = [&state["ConmonPid"], &state["Pid"]]
        .iter()
        .filter_map(|p| p.as_u64())
        .map(|p| p as u32)
        .filter(|p| *p > 0)
        .collect();
    let settings = &inspect[0]["NetworkSettings"];
    ctr.sandbox = settings["SandboxKey"].as_str().unwrap_or("").to_string();
    assert_eq!(inspect[0]["Id"], ctr.id.as_str());
    assert_eq!(state["Status"], "running", "{state}");
    assert!(ctr.sandbox.starts_with("/run/netns/"), "{settings}");
    let ip = settings["Networks"][NETWORK]["IPAddress"]
        .as_str()
        .unwrap_or_else(|| panic!("no {NETWORK} address: {settings}"))
        .to_string();

    // The address is the one ipamd assigned to this container, from the box's subnet.
    assert!(in_cidr(&ip, &vbox.subnet().cidr), "{ip}");
    assert_eq!(
        vbox.allocation(1, key(&ctr.id)).ip.map(|ip| ip.to_string()),
        Some(ip.clone())
    );
    assert!(ipamd_lists(node, &ip));
    let seen = requests(&log, &ctr.id);
    assert_eq!(
        seen.first().map(|(v, _)| v.as_str()),
        Some("add"),
        "{seen:?}"
    );
    eprintln!("CNI_ARGS from podman: {:?}", seen[0].1);
    let routes = e2e::ip(&["-n", &node.netns, "-4", "route", "show", &ip]);
    let veth = routes
        .iter()
        .find_map(|r| r.strip_prefix(&format!("{ip} dev "))?.split(' ').next())
        .unwrap_or_else(|| panic!("no route to {ip} in the node: {routes:?}"))
        .to_string();
    assert_host_wired(&node.netns, &ip, &veth);

    // From inside the container, the pod on the other node answers.
    let pinged = (0..3).any(|_| {
        podman
            .run(
                20,
                &[
                    "exec",
                    &ctr.name,
                    "/bin/busybox",
                    "ping",
                    "-c",
                    "1",
                    "-W",
                    "2",
                    &peer_ip,
                ],
            )
            .status
            .success()
    });
    assert!(pinged, "the container cannot reach {peer_ip} on node 2");

    assert_ok(
        &podman.run(60, &["rm", "-f", "-t", "0", &ctr.name]),
        "podman rm",
    );
    ctr.removed = true;
    assert!(!ipamd_lists(node, &ip), "ipamd still holds {ip}");
    assert_eq!(vbox.status(1).pool.assigned, 0);
    assert_host_clean(&node.netns, &ip, &veth);
    assert!(
        !Path::new(&ctr.sandbox).exists(),
        "podman left {}",
        ctr.sandbox
    );
    assert!(
        !cache_file(&ctr.id).exists(),
        "{:?} left",
        cache_file(&ctr.id)
    );
    for pid in &ctr.pids {
        assert!(gone(*pid), "process {pid} of the container still runs");
    }
    let seen = requests(&log, &ctr.id);
    assert_eq!(
        seen.last().map(|(v, _)| v.as_str()),
        Some("del"),
        "{seen:?}"
    );
}
