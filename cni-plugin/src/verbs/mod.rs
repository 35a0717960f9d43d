//! One module per CNI verb; [`run`] dispatches a parsed request to it.

mod add;
mod check;
mod del;
mod gc;
mod status;

use cni::{CniError, CniResult, Command, Invocation, NetConf, parse_cni_args};
use ipam_proto::{AttachmentKey, Client, PodMeta};

use crate::names::host_veth_name;
use crate::selfns::refuse_own_netns;

/// An ADD, DEL or CHECK: one `(network, container, ifname)` attachment.
pub struct Attachment<'a> {
    /// The `CNI_*` environment.
    pub inv: &'a Invocation,
    /// The request configuration.
    pub conf: &'a NetConf,
    /// ipamd's key for the attachment: (conf name, `CNI_CONTAINERID`, `CNI_IFNAME`), as the
    /// Go CNI and libcni's cache key it.
    pub key: AttachmentKey,
    /// Pod identity from `CNI_ARGS`.
    pub pod: PodMeta,
    /// The host veth name this attachment gets (see [`host_veth_name`]).
    pub host_veth: String,
}

impl<'a> Attachment<'a> {
    fn new(inv: &'a Invocation, conf: &'a NetConf) -> Result<Self, CniError> {
        let args = parse_cni_args(&inv.args)?;
        let pod = PodMeta {
            namespace: args.namespace.unwrap_or_default(),
            name: args.name.unwrap_or_default(),
            infra_container_id: args.infra_container_id.unwrap_or_default(),
            uid: args.uid.unwrap_or_default(),
        };
        let host_veth = host_veth_name(
            &conf.veth_prefix,
            &pod.namespace,
            &pod.name,
            &inv.container_id,
            &inv.ifname,
        );
        Ok(Attachment {
            key: AttachmentKey {
                network: conf.name.clone(),
                container_id: inv.container_id.clone(),
                ifname: inv.ifname.clone(),
            },
            inv,
            conf,
            pod,
            host_veth,
        })
    }

    /// `CNI_NETNS`, empty when unset (only possible on DEL).
    fn netns(&self) -> &str {
        self.inv.netns.as_deref().unwrap_or("")
    }
}

/// Runs one request; `Ok(Some(result))` is printed on stdout (ADD only).
pub fn run(inv: &Invocation, conf: &NetConf) -> Result<Option<CniResult>, CniError> {
    tracing::info!(
        "Received CNI {} request: ContainerID({}) Netns({}) IfName({}) Args({})",
        inv.command.as_str().to_ascii_lowercase(),
        inv.container_id,
        inv.netns.as_deref().unwrap_or(""),
        inv.ifname,
        inv.args
    );
    if matches!(inv.command, Command::Add | Command::Del)
        && let Some(netns) = &inv.netns
    {
        refuse_own_netns(netns, inv.netns_override)?;
    }
    let client = Client::new(&conf.ipamd_socket);
    match inv.command {
        Command::Add => add::run(&Attachment::new(inv, conf)?, &client).map(Some),
        Command::Del => del::run(&Attachment::new(inv, conf)?, &client).map(|()| None),
        Command::Check => check::run(&Attachment::new(inv, conf)?, &client).map(|()| None),
        Command::Status => status::run(conf, &client).map(|()| None),
        Command::Gc => gc::run(conf, &client).map(|()| None),
        // Answered in main before any config is read.
        Command::Version => Ok(None),
    }
}
