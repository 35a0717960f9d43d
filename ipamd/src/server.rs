//! The plugin's Unix socket: mode 0600, only peers with the allowed uid (root), one JSON frame
//! per line, bounded in size and in time so a stuck or hostile client cannot hold ipamd.

use std::fs;
use std::future::Future;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ipam_proto::{DaemonError, ErrorKind, FrameError, READ_LIMIT, Reply, Request, end_frame};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinSet;
use tracing::{debug, warn};

/// By default, a client gets this long to send each frame before the connection is closed.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(10);

/// At shutdown, how long requests in progress get to finish.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Who may use the socket and how long a client may take.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// The only peer uid served (root in production).
    pub allowed_uid: u32,
    /// How long a client gets to send each frame before its connection is closed.
    pub frame_timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            allowed_uid: 0,
            frame_timeout: FRAME_TIMEOUT,
        }
    }
}

/// Answers requests.
pub trait Handler: Send + Sync + 'static {
    /// One request.
    fn handle(&self, req: Request) -> impl Future<Output = Result<Reply, DaemonError>> + Send;
}

impl<E, I, H, S> Handler for crate::daemon::Daemon<E, I, H, S>
where
    E: cloud::Ec2,
    I: cloud::Imds,
    H: crate::host::HostNetwork,
    S: crate::durability::DaemonStore,
{
    fn handle(&self, req: Request) -> impl Future<Output = Result<Reply, DaemonError>> + Send {
        crate::daemon::Daemon::handle(self, req)
    }
}

/// Binds the socket: creates its directory, replaces a stale socket (never another kind of
/// file), and restricts it to its owner.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => fs::remove_file(path)?,
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serves connections until `shutdown` completes.
pub async fn serve<H: Handler>(
    listener: UnixListener,
    handler: Arc<H>,
    settings: Settings,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let handler = Arc::clone(&handler);
                    connections.spawn(async move {
                        if let Err(e) = connection(stream, handler, settings).await {
                            debug!(error = %e, "plugin connection ended with an error");
                        }
                    });
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    // Requests already being served get their answer: an ADD whose reply is cut would be
    // retried by the runtime anyway, but a clean stop should not cause that.
    drop(listener);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        warn!(
            left = connections.len(),
            "stopping with plugin connections still open"
        );
    }
}

async fn read_frame<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
) -> Result<Option<Vec<u8>>, FrameError> {
    let mut buf = Vec::with_capacity(512);
    (&mut *reader)
        .take(READ_LIMIT)
        .read_until(b'\n', &mut buf)
        .await?;
    end_frame(buf)
}

async fn connection<H: Handler>(
    stream: UnixStream,
    handler: Arc<H>,
    settings: Settings,
) -> io::Result<()> {
    let (read, mut write) = stream.into_split();
    let uid = read.as_ref().peer_cred()?.uid();
    let mut reader = BufReader::new(read);
    loop {
        let next = tokio::time::timeout(settings.frame_timeout, read_frame(&mut reader));
        let frame = match next.await {
            Err(_) => return Ok(()),
            Ok(Ok(None)) => return Ok(()),
            Ok(Ok(Some(frame))) => frame,
            Ok(Err(FrameError::Io(e))) => return Err(e),
            Ok(Err(e)) => {
                // Too long or cut short: answer once, then drop the connection, since the rest
                // of the stream cannot be trusted to be framed.
                let err = DaemonError::new(ErrorKind::BadRequest, e.to_string());
                return write.write_all(&ipam_proto::encode_reply(&Err(err))).await;
            }
        };
        if uid != settings.allowed_uid {
            // Refused only after the request is read: a client whose write met a closed socket
            // would see a broken pipe instead of the reason.
            warn!(uid, "refused a request from a non-root peer");
            let err = DaemonError::new(
                ErrorKind::Forbidden,
                format!("uid {uid} may not use ipamd's socket"),
            );
            return write.write_all(&ipam_proto::encode_reply(&Err(err))).await;
        }
        let reply = match ipam_proto::decode_request(&frame) {
            Ok(req) => handler.handle(req).await,
            Err(e) => {
                warn!(error = %e.message, "bad request on ipamd's socket");
                Err(e)
            }
        };
        write.write_all(&ipam_proto::encode_reply(&reply)).await?;
    }
}
