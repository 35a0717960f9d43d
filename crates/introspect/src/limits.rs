//! The limits that keep a hostile or broken client from tying up the HTTP server.
//!
//! The endpoints are small in-memory GETs, so every limit can be tight: none of them comes
//! near what Prometheus, curl or the Go CNI's `cni-metrics-helper` send or need.

use std::io;
use std::time::Duration;

/// How long a client may take to send a request's line and headers, counted from when the
/// server starts waiting for them (a new connection, or an idle keep-alive connection after a
/// response). Why: without it a client that sends a request slowly, or connects and sends
/// nothing (slowloris), holds a connection slot forever. On expiry the connection is closed
/// without a response.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest request line plus headers, in bytes. Why: hyper would otherwise buffer about
/// 400 KB per connection; a real client sends a few hundred bytes. A larger request gets
/// `431 Request Header Fields Too Large` and the connection is closed.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// How many connections are served at once. Why: each one costs a task, buffers and a file
/// descriptor, and ipamd's descriptors are shared with the CNI socket and netlink. Beyond
/// the cap new connections are not refused: they wait, unaccepted, in the kernel's listen
/// backlog until a served connection closes.
pub const MAX_CONNECTIONS: usize = 64;

/// The largest request body, in bytes. Why: every endpoint is a GET that ignores its body;
/// anything larger is a mistake or an attack. A body over it gets `413 Payload Too Large`
/// (at once when `Content-Length` says so; a chunked body is read only up to the limit).
pub const MAX_BODY_BYTES: usize = 1024;

/// How long a request may take from its headers to its response. Why: the handlers take a
/// snapshot under ipamd's lock; if that stalls, requests must not pile up holding every
/// connection slot. A body that does not arrive in time gets `408 Request Timeout`, a
/// response that is not ready in time gets `503 Service Unavailable`.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest a connection is kept; then it is closed as at shutdown (the response being
/// written may finish within [`SHUTDOWN_GRACE`]). Why: the header and request timeouts do
/// not cover writing the response, so a client that never reads it would otherwise hold its
/// slot forever. Keep-alive clients such as Prometheus simply reconnect.
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(60);

/// At shutdown (or at [`MAX_CONNECTION_AGE`]), how long an open connection may take to
/// finish its response before it is dropped. Why: ipamd waits for the HTTP servers before
/// flushing its state and exiting; a stuck client must not stall that.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The limits the HTTP server enforces; [`Limits::default`] holds the constants of this
/// module. Tests shorten the timeouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// See [`HEADER_READ_TIMEOUT`].
    pub header_read_timeout: Duration,
    /// See [`MAX_HEADER_BYTES`].
    pub max_header_bytes: usize,
    /// See [`MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// See [`MAX_BODY_BYTES`].
    pub max_body_bytes: usize,
    /// See [`REQUEST_TIMEOUT`].
    pub request_timeout: Duration,
    /// See [`MAX_CONNECTION_AGE`].
    pub max_connection_age: Duration,
    /// See [`SHUTDOWN_GRACE`].
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            max_header_bytes: MAX_HEADER_BYTES,
            max_connections: MAX_CONNECTIONS,
            max_body_bytes: MAX_BODY_BYTES,
            request_timeout: REQUEST_TIMEOUT,
            max_connection_age: MAX_CONNECTION_AGE,
            shutdown_grace: SHUTDOWN_GRACE,
        }
    }
}

impl Limits {
    /// The number of connection slots as the semaphore counts them, or an `InvalidInput`
    /// error naming the first limit that cannot work (a zero timeout would drop every
    /// client; zero connections would serve none).
    pub(crate) fn check(&self) -> io::Result<u32> {
        let durations = [
            ("header_read_timeout", self.header_read_timeout),
            ("request_timeout", self.request_timeout),
            ("max_connection_age", self.max_connection_age),
            ("shutdown_grace", self.shutdown_grace),
        ];
        if let Some((name, _)) = durations.iter().find(|(_, d)| d.is_zero()) {
            return Err(invalid(format!("HTTP limit {name} must be above zero")));
        }
        if self.max_header_bytes == 0 {
            return Err(invalid(
                "HTTP limit max_header_bytes must be above zero".into(),
            ));
        }
        match u32::try_from(self.max_connections) {
            Ok(0) | Err(_) => Err(invalid(format!(
                "HTTP limit max_connections must be between 1 and {}, not {}",
                u32::MAX,
                self.max_connections
            ))),
            Ok(n) => Ok(n),
        }
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_unworkable_limits_are_named() {
        assert_eq!(Limits::default().check().unwrap(), 64);
        let cases = [
            (
                Limits {
                    max_connections: 0,
                    ..Limits::default()
                },
                "max_connections",
            ),
            (
                Limits {
                    header_read_timeout: Duration::ZERO,
                    ..Limits::default()
                },
                "header_read_timeout",
            ),
            (
                Limits {
                    shutdown_grace: Duration::ZERO,
                    ..Limits::default()
                },
                "shutdown_grace",
            ),
            (
                Limits {
                    max_header_bytes: 0,
                    ..Limits::default()
                },
                "max_header_bytes",
            ),
        ];
        for (limits, name) in cases {
            let err = limits.check().unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
            assert!(err.to_string().contains(name), "{err}");
        }
    }
}
