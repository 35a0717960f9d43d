//! Pure builders of rtnetlink requests and parsers of the kernel's answers.
//!
//! Nothing here touches a socket, so unprivileged tests can assert on every attribute and flag.
//! Each builder returns a [`Request`]: the message plus a description of the operation used in
//! error messages.

pub mod addr;
pub mod family;
pub mod link;
pub mod neigh;
pub mod route;
pub mod rule;

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST, NetlinkHeader,
    NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;

/// The kernel's main routing table, under the kernel's name: where traffic from pods on the
/// primary ENI is routed. This is the workspace's one definition; the per-ENI numbering
/// ([`crate::eni_table`]) and the daemon's allocations use it.
pub const RT_TABLE_MAIN: u32 = 254;

/// Flags of a request that changes something and wants an acknowledgement.
pub const FLAGS_ACK: u16 = NLM_F_REQUEST | NLM_F_ACK;
/// Create, failing with `EEXIST` when the object exists (like `ip ... add`).
pub const FLAGS_CREATE_EXCL: u16 = FLAGS_ACK | NLM_F_CREATE | NLM_F_EXCL;
/// Create or replace (like `ip ... replace`).
pub const FLAGS_CREATE_REPLACE: u16 = FLAGS_ACK | NLM_F_CREATE | NLM_F_REPLACE;
/// A dump of a whole table.
pub const FLAGS_DUMP: u16 = NLM_F_REQUEST | NLM_F_DUMP;

/// One rtnetlink request, ready to send.
#[derive(Debug, Clone)]
pub struct Request {
    /// The message; the socket fills in sequence number and length.
    pub message: NetlinkMessage<RouteNetlinkMessage>,
    /// What the request does, in `ip`-like words, for error messages.
    pub op: String,
}

impl Request {
    pub(crate) fn new(inner: RouteNetlinkMessage, flags: u16, op: String) -> Self {
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        let message = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(inner));
        Self { message, op }
    }

    /// The netlink header flags (`NLM_F_*`).
    pub fn flags(&self) -> u16 {
        self.message.header.flags
    }

    /// The rtnetlink message carried.
    pub fn inner(&self) -> Option<&RouteNetlinkMessage> {
        match &self.message.payload {
            NetlinkPayload::InnerMessage(m) => Some(m),
            _ => None,
        }
    }

    /// The message as the kernel will receive it (sequence number 0).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut message = self.message.clone();
        message.finalize();
        let mut bytes = vec![0u8; message.buffer_len()];
        message.serialize(&mut bytes);
        bytes
    }
}

/// `main`, `local`, `default` or the number, as `ip` prints a table.
pub fn table_name(table: u32) -> String {
    match table {
        253 => "default".into(),
        RT_TABLE_MAIN => "main".into(),
        255 => "local".into(),
        n => n.to_string(),
    }
}

/// The 8-bit header field for a table; ids above 255 only fit the 32-bit attribute, which
/// the kernel prefers whenever present.
pub(crate) fn table_header(table: u32) -> u8 {
    u8::try_from(table).unwrap_or(0)
}
