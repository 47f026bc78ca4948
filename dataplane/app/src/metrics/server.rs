//! The metrics endpoint: `GET /metrics` over HTTP/1.1 on a thread of its
//! own, answered from the latest snapshot the datapath published.
//!
//! The datapath hands a snapshot over through a latest-wins channel of one
//! slot (`ring-channel`, DESIGN §4): publishing never blocks and never
//! queues, an unread snapshot is replaced by the next. The endpoint renders
//! the text when scraped, off the datapath's core. One request per
//! connection (`Connection: close`); a request that does not arrive within
//! two seconds, or whose head exceeds 8 KiB, is answered 400 and closed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ring_channel::{ring_channel, RingReceiver, RingSender};

/// How long the accept loop sleeps when no client is waiting (the listener
/// is non-blocking, so that dropping the server stops it).
const IDLE: Duration = Duration::from_millis(20);
const READ_TIMEOUT: Duration = Duration::from_secs(2);
const MAX_HEAD: usize = 8 << 10;

/// A running endpoint; stopped when dropped.
pub struct MetricsServer<T: Send + 'static> {
    sender: RingSender<T>,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    scrapes: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl<T: Send + 'static> MetricsServer<T> {
    /// Listens on `addr` (port 0: any free port, see [`local_addr`]);
    /// `render` turns the latest snapshot into exposition text.
    ///
    /// # Errors
    ///
    /// The address cannot be bound.
    ///
    /// [`local_addr`]: Self::local_addr
    pub fn start(
        addr: SocketAddr,
        render: impl Fn(&T) -> String + Send + 'static,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (sender, receiver) = ring_channel(NonZeroUsize::MIN);
        let stop = Arc::new(AtomicBool::new(false));
        let scrapes = Arc::new(AtomicU64::new(0));
        let thread = std::thread::Builder::new().name("metrics".into()).spawn({
            let (stop, scrapes) = (Arc::clone(&stop), Arc::clone(&scrapes));
            move || serve(&listener, receiver, &render, &stop, &scrapes)
        })?;
        Ok(MetricsServer {
            sender,
            addr,
            stop,
            scrapes,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Hands over the latest snapshot (replacing one not yet read).
    pub fn publish(&mut self, snapshot: T) {
        // Fails only once the endpoint's thread has ended, when nobody
        // reads snapshots any more.
        let _ = self.sender.send(snapshot);
    }

    /// `GET /metrics` requests answered so far.
    pub fn scrapes(&self) -> u64 {
        self.scrapes.load(Ordering::Relaxed)
    }
}

impl<T: Send + 'static> Drop for MetricsServer<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve<T>(
    listener: &TcpListener,
    receiver: RingReceiver<T>,
    render: &dyn Fn(&T) -> String,
    stop: &AtomicBool,
    scrapes: &AtomicU64,
) {
    let mut latest: Option<T> = None;
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                while let Ok(snapshot) = receiver.try_recv() {
                    latest = Some(snapshot);
                }
                if answer(stream, latest.as_ref().map(render)) {
                    scrapes.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(IDLE),
            // A client that went away between SYN and accept: the next.
            Err(_) => std::thread::sleep(IDLE),
        }
    }
}

/// Answers one request; `true` for a `GET /metrics` served.
fn answer(mut stream: TcpStream, body: Option<String>) -> bool {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
    let _ = stream.set_write_timeout(Some(READ_TIMEOUT));
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let complete = loop {
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            break true;
        }
        if head.len() > MAX_HEAD {
            break false;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break false,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    };
    let line = String::from_utf8_lossy(&head);
    let mut words = line.split_whitespace();
    let (method, path) = (words.next(), words.next());
    let (status, content_type, text, served) = match (complete, method, path) {
        (false, ..) => (
            "400 Bad Request",
            "text/plain",
            "bad request\n".to_string(),
            false,
        ),
        (true, Some("GET"), Some("/metrics")) => match body {
            Some(text) => (
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                text,
                true,
            ),
            None => (
                "503 Service Unavailable",
                "text/plain",
                "no statistics yet\n".to_string(),
                false,
            ),
        },
        (true, Some("GET"), _) => (
            "404 Not Found",
            "text/plain",
            "try /metrics\n".to_string(),
            false,
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_string(),
            false,
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
    stream.write_all(response.as_bytes()).is_ok() && served
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn serves_the_latest_snapshot_and_refuses_the_rest() {
        let mut server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), |n: &u64| {
            format!("falcon_test_total {n}\n")
        })
        .unwrap();
        let addr = server.local_addr();
        assert!(get(addr, "/metrics").starts_with("HTTP/1.1 503"));
        server.publish(1);
        server.publish(2);
        let r = get(addr, "/metrics");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
        assert!(r.ends_with("\r\n\r\nfalcon_test_total 2\n"), "{r}");
        // No new snapshot: the last one again.
        assert!(get(addr, "/metrics").ends_with("falcon_test_total 2\n"));
        assert!(get(addr, "/").starts_with("HTTP/1.1 404"));
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "POST /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 405"), "{out}");
        assert_eq!(server.scrapes(), 2);
    }
}
