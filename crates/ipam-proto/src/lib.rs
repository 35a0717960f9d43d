//! The plugin <-> ipamd protocol: versioned requests and replies, their framing on the Unix socket,
//! and a small blocking client for the plugin (which runs no async runtime).
//!
//! Wire format: one JSON object per line. A request is `{"v":2,"req":{"op":"add",...}}`; a reply is
//! `{"v":2,"ok":{"op":"add",...}}` or `{"v":2,"err":{"kind":"...","message":"..."}}`. The envelope
//! (`v`, `req`, `ok`, `err`, `kind`, `message`) is frozen across protocol versions so that either
//! side can always tell the other that versions differ instead of failing to parse or hanging.

mod client;
mod frame;
#[doc(hidden)]
pub mod fuzzing;
mod message;

pub use client::{Client, ClientError, Pending, PendingAdd};
pub use frame::{
    FrameError, MAX_FRAME_BYTES, READ_LIMIT, decode_reply, decode_request, encode_reply,
    encode_request, end_frame, read_frame,
};
pub use message::*;

/// The protocol version this build speaks. Plugin and daemon ship together and must agree.
/// Version 2: an allocation's `ip` became optional and `ipv6` was added (IPv6 and dual-stack
/// pods).
pub const PROTOCOL_VERSION: u32 = 2;

/// Where ipamd listens unless configured otherwise.
pub const DEFAULT_SOCKET: &str = "/run/vpc-cni/ipamd.sock";
