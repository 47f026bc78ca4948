//! Scraping a running node's metrics endpoint and checking the text with
//! Prometheus' own `promtool`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The body of `GET /metrics`, once the endpoint answers 200 with a body
/// that contains `ready` (`""`: any).
pub fn scrape(addr: &str, limit: Duration, ready: &str) -> String {
    let end = Instant::now() + limit;
    loop {
        if let Ok(mut s) = TcpStream::connect(addr) {
            write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
            let mut r = String::new();
            let _ = s.read_to_string(&mut r);
            if r.starts_with("HTTP/1.1 200") {
                let body = r.split_once("\r\n\r\n").expect("a head and a body").1;
                if body.contains(ready) {
                    return body.to_string();
                }
            }
        }
        assert!(Instant::now() < end, "no metrics from {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `promtool check metrics` finds no error and no lint warning in `text`.
pub fn promtool(text: &str) {
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus; scripts/setup.sh installs it)");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
