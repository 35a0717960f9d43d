//! A raw HTTP/1.1 client over a stream the test made (in any namespace): one request with
//! `Connection: close`, the response read to the end. Enough for our servers, which send
//! whole bodies with a Content-Length; and raw enough to send what a real client would not.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The bound on reading a response: generous, so only a hang fails a test.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The text of one request (`Connection: close`, a Content-Length for `body`).
pub fn request(
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> String {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    req
}

/// `GET path` without a body.
pub fn get_request(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
}

/// The status code of a raw response, if it has a status line.
pub fn status(response: &str) -> Option<u16> {
    response.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

/// Sends one request on `stream` and reads the response until the server closes; returns
/// the status (0 without a status line) and the body.
pub fn exchange(
    mut stream: TcpStream,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .expect("setting a read timeout");
    stream
        .write_all(request(method, host, path, headers, body).as_bytes())
        .unwrap_or_else(|e| panic!("sending {method} {path} to {host}: {e}"));
    let mut raw = String::new();
    stream
        .read_to_string(&mut raw)
        .unwrap_or_else(|e| panic!("reading the answer to {method} {path} from {host}: {e}"));
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{method} {path}: a chunked body, which this client does not decode:\n{head}"
    );
    (status(head).unwrap_or(0), body.to_string())
}

/// `GET url` (`http://host:port/path`) on a connection from the caller's namespace.
pub fn get(url: &str) -> (u16, String) {
    let (host, path) = split_url(url);
    let stream = TcpStream::connect(host).unwrap_or_else(|e| panic!("connecting to {host}: {e}"));
    exchange(stream, "GET", host, path, &[], "")
}

/// `http://host:port/path` -> (`host:port`, `/path`).
pub fn split_url(url: &str) -> (&str, &str) {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, "/"),
    }
}

/// `host` with a port to connect to: its own, else HTTP's 80.
pub fn with_port(host: &str) -> String {
    if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:80")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_carries_its_headers_and_body() {
        let req = request("POST", "h:1", "/x", &[("A", "b")], "body");
        assert_eq!(
            req,
            "POST /x HTTP/1.1\r\nHost: h:1\r\nConnection: close\r\nContent-Length: 4\r\nA: b\r\n\r\nbody"
        );
    }

    #[test]
    fn urls_and_status_lines_are_taken_apart() {
        assert_eq!(
            split_url("http://127.0.0.1:80/v1/pool"),
            ("127.0.0.1:80", "/v1/pool")
        );
        assert_eq!(split_url("http://127.0.0.1:80"), ("127.0.0.1:80", "/"));
        assert_eq!(with_port("169.254.169.254"), "169.254.169.254:80");
        assert_eq!(with_port("127.0.0.1:8"), "127.0.0.1:8");
        assert_eq!(status("HTTP/1.1 404 Not Found\r\n"), Some(404));
        assert_eq!(status("garbage"), None);
    }

    #[test]
    fn an_exchange_with_a_real_server() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let server = std::thread::spawn(move || {
            use std::io::BufRead;
            let (mut conn, _) = listener.accept().expect("accept");
            let mut head = Vec::new();
            let mut reader = std::io::BufReader::new(conn.try_clone().expect("clone"));
            // The whole head, so closing leaves nothing unread (which would reset the peer).
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).expect("request line");
                if line == "\r\n" {
                    break;
                }
                head.push(line);
            }
            conn.write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
                .expect("answer");
            head
        });
        assert_eq!(get(&format!("http://{addr}/made")), (201, "ok".to_string()));
        assert_eq!(server.join().expect("server")[0], "GET /made HTTP/1.1\r\n");
    }
}
