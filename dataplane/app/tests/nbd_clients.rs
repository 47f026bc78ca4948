//! `falcon nbd-gateway` driven by the real user-space NBD clients: nbdinfo
//! (size and flags as advertised), qemu-img convert in and back out,
//! nbdcopy both ways (several connections at once), fio's nbd engine
//! (4 KiB randrw at iodepth 32 with crc32c verification), the TCP
//! listener, and a hostile client that gets its errors while the server
//! keeps serving the others. Each test starts its own gateway on a Unix
//! socket in a scratch directory and stops it with SIGTERM (its summary
//! checked) or `--duration`.
//!
//! The clients come from Debian's fio, qemu-utils, libnbd-bin and nbdkit,
//! which scripts/setup.sh installs; a missing one fails the test by name.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::Duration;

use falcon::nbd::proto::{
    self, cmd, opt, rep, InfoRequest, OptionReplyRepr, OptionRepr, RequestRepr, SimpleReplyRepr,
    OPTION_REPLY_LEN, SIMPLE_REPLY_LEN,
};
use serde_json::Value;

mod common;
use common::nbd::{counter, fio_randrw_verify, random_file, run, same_bytes, tool, Gateway};
use common::Scratch;

#[test]
fn nbdinfo_sees_what_the_backend_advertises() {
    let scratch = Scratch::new("nbd", "nbdinfo");
    let gw = Gateway::unix(
        "ram",
        &scratch,
        &["--size", "64M", "--export", "disk", "--quiet"],
    );
    let out = run("nbdinfo", &["--json", &gw.uri("disk")]);
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["protocol"], "newstyle-fixed");
    assert_eq!(info["structured"], false, "structured replies are refused");
    let export = &info["exports"][0];
    assert_eq!(export["export-size"], 64 << 20);
    for (flag, want) in [
        ("is_read_only", false),
        ("can_flush", true),
        ("can_fua", true),
        ("can_trim", true),
        ("can_zero", true),
        ("can_multi_conn", true),
        ("can_cache", false),
        ("can_df", false),
        ("can_fast_zero", false),
    ] {
        assert_eq!(export[flag], want, "{flag} in {export}");
    }
    assert_eq!(export["block_size_minimum"], 1);
    assert_eq!(export["block_size_preferred"], 4096);
    assert_eq!(export["block_size_maximum"], 32 << 20);
    // NBD_OPT_LIST names the export; the default name reaches it too.
    let list = run("nbdinfo", &["--list", "--json", &gw.uri("")]);
    let list: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(list["exports"][0]["export-name"], "disk");
    assert!(list["exports"][0]["description"]
        .as_str()
        .unwrap()
        .contains("ram backend"));
    // An unknown name is refused (NBD_REP_ERR_UNKNOWN), not served.
    let refused = Command::new(tool("nbdinfo"))
        .args(["--size", &gw.uri("nope")])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let (summary, _) = gw.stop();
    assert_eq!(summary["stopped_by"], "signal");
    assert_eq!(summary["ok"], true);
}

#[test]
fn qemu_img_convert_in_and_back_out() {
    let scratch = Scratch::new("nbd", "qemu-img");
    let gw = Gateway::unix("ram", &scratch, &["--size", "8M", "--quiet"]);
    let src = random_file(&scratch, "src.img", 8 << 20, 11);
    let back = scratch.path("back.img");
    let uri = gw.uri("");
    run(
        "qemu-img",
        &[
            "convert",
            "-n",
            "-f",
            "raw",
            "-O",
            "raw",
            src.to_str().unwrap(),
            &uri,
        ],
    );
    run(
        "qemu-img",
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "raw",
            &uri,
            back.to_str().unwrap(),
        ],
    );
    same_bytes(&src, &back);
    let (summary, _) = gw.stop();
    assert_eq!(counter(&summary, "written_bytes"), 8 << 20);
    assert!(counter(&summary, "read_bytes") >= 8 << 20);
    assert_eq!(counter(&summary, "errors"), 0);
}

#[test]
fn nbdcopy_both_ways_over_several_connections() {
    let scratch = Scratch::new("nbd", "nbdcopy");
    let gw = Gateway::unix("ram", &scratch, &["--size", "16M", "--quiet"]);
    let src = random_file(&scratch, "src.img", 16 << 20, 23);
    let back = scratch.path("back.img");
    let uri = gw.uri("");
    run("nbdcopy", &[src.to_str().unwrap(), &uri]);
    run("nbdcopy", &[&uri, back.to_str().unwrap()]);
    same_bytes(&src, &back);
    let (summary, _) = gw.stop();
    // CAN_MULTI_CONN: nbdcopy opens several connections to each end.
    assert!(
        counter(&summary, "connections") >= 4,
        "nbdcopy used one connection each way: {summary}"
    );
    assert_eq!(counter(&summary, "written_bytes"), 16 << 20);
    assert_eq!(counter(&summary, "errors"), 0);
}

#[test]
fn fio_randrw_iodepth_32_verifies() {
    let scratch = Scratch::new("nbd", "fio");
    let gw = Gateway::unix("ram", &scratch, &["--size", "16M", "--quiet"]);
    let (reads, writes) = fio_randrw_verify(&gw);
    assert!(writes > 1000, "{writes} writes");
    // The verify pass reads back every block written, on top of the mix's
    // own reads.
    assert!(reads > writes, "{reads} reads for {writes} writes");
    let (summary, _) = gw.stop();
    assert_eq!(counter(&summary, "errors"), 0);
    assert_eq!(counter(&summary, "writes"), writes);
}

#[test]
fn tcp_listener_serves_nbdcopy() {
    let scratch = Scratch::new("nbd", "tcp");
    let gw = Gateway::start("ram", "tcp:127.0.0.1:0", &["--size", "4M", "--quiet"]);
    assert!(gw.address.starts_with("tcp:127.0.0.1:"), "{}", gw.address);
    assert!(
        !gw.address.ends_with(":0"),
        "port 0 resolved: {}",
        gw.address
    );
    let src = random_file(&scratch, "src.img", 4 << 20, 37);
    let back = scratch.path("back.img");
    let uri = gw.uri("");
    run("nbdcopy", &[src.to_str().unwrap(), &uri]);
    run("nbdcopy", &[&uri, back.to_str().unwrap()]);
    same_bytes(&src, &back);
    let (summary, _) = gw.stop();
    assert_eq!(counter(&summary, "errors"), 0);
}

/// A hand-written client: just enough NBD to misbehave precisely.
struct Raw(UnixStream);

impl Raw {
    /// Connects and reads the greeting; sends `flags`.
    fn connect(gw: &Gateway, flags: u32) -> Raw {
        let mut s = UnixStream::connect(gw.socket()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut greeting = [0u8; proto::GREETING_LEN];
        s.read_exact(&mut greeting).unwrap();
        assert_eq!(&greeting[0..16], b"NBDMAGICIHAVEOPT");
        s.write_all(&flags.to_be_bytes()).unwrap();
        Raw(s)
    }

    fn option(&mut self, option: u32, data: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let h = OptionRepr {
            option,
            length: data.len() as u32,
        };
        self.0.write_all(&h.emit()).unwrap();
        self.0.write_all(data).unwrap();
        let mut replies = Vec::new();
        loop {
            let mut h = [0u8; OPTION_REPLY_LEN];
            self.0.read_exact(&mut h).unwrap();
            let r = OptionReplyRepr::parse(&h).unwrap();
            assert_eq!(r.option, option);
            let mut data = vec![0u8; r.length as usize];
            self.0.read_exact(&mut data).unwrap();
            let last = r.reply == rep::ACK || r.reply & (1 << 31) != 0;
            replies.push((r.reply, data));
            if last {
                return replies;
            }
        }
    }

    fn go(&mut self) {
        let go = InfoRequest {
            name: Vec::new(),
            requests: Vec::new(),
        };
        let replies = self.option(opt::GO, &go.emit());
        assert_eq!(replies.last().unwrap().0, rep::ACK);
    }

    fn request(&mut self, kind: u16, cookie: u64, offset: u64, length: u32, data: &[u8]) {
        let r = RequestRepr {
            flags: 0,
            kind,
            cookie,
            offset,
            length,
        };
        self.0.write_all(&r.emit()).unwrap();
        self.0.write_all(data).unwrap();
    }

    fn reply(&mut self) -> SimpleReplyRepr {
        let mut h = [0u8; SIMPLE_REPLY_LEN];
        self.0.read_exact(&mut h).unwrap();
        SimpleReplyRepr::parse(&h).unwrap()
    }

    /// True when the server has closed the connection.
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.0.read(&mut b), Ok(0) | Err(_))
    }
}

#[test]
fn hostile_clients_get_their_errors_and_others_are_still_served() {
    let scratch = Scratch::new("nbd", "hostile");
    let gw = Gateway::unix("ram", &scratch, &["--size", "1M", "--quiet"]);
    // A well-behaved client, connected before the trouble and used after.
    let mut good = Raw::connect(&gw, 3);
    good.go();

    // Garbage options are answered NBD_REP_ERR_UNSUP, and the session
    // goes on to the transmission phase.
    let mut bad = Raw::connect(&gw, 3);
    let replies = bad.option(0x7777, b"not an option at all");
    assert_eq!(replies, vec![(rep::ERR_UNSUP, replies[0].1.clone())]);
    assert_eq!(bad.option(opt::STRUCTURED_REPLY, &[])[0].0, rep::ERR_UNSUP);
    bad.go();
    // Out of range: EINVAL for a read, ENOSPC for a write.
    bad.request(cmd::READ, 1, (1 << 20) - 512, 1024, &[]);
    let r = bad.reply();
    assert_eq!((r.cookie, r.error), (1, proto::errno::EINVAL));
    bad.request(cmd::WRITE, 2, 1 << 20, 512, &[0xEE; 512]);
    let r = bad.reply();
    assert_eq!((r.cookie, r.error), (2, proto::errno::ENOSPC));
    bad.request(cmd::BLOCK_STATUS, 3, 0, 512, &[]);
    assert_eq!(bad.reply().error, proto::errno::EINVAL);
    // Bad magic: the connection is closed.
    bad.0
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\0")
        .unwrap();
    assert!(bad.closed(), "bad request magic closes the connection");

    // Unknown client flags, and a write payload over 32 MiB: closed too.
    let mut flags = Raw::connect(&gw, 1 << 9);
    assert!(flags.closed());
    let mut big = Raw::connect(&gw, 3);
    big.go();
    big.request(cmd::WRITE, 4, 0, (32 << 20) + 1, &[]);
    assert!(big.closed());

    // The good client and a new one are served as before.
    good.request(cmd::WRITE, 10, 4096, 5, b"hello");
    assert_eq!(good.reply().error, 0);
    good.request(cmd::READ, 11, 4096, 5, &[]);
    let r = good.reply();
    assert_eq!((r.cookie, r.error), (11, 0));
    let mut data = [0u8; 5];
    good.0.read_exact(&mut data).unwrap();
    assert_eq!(&data, b"hello");
    let size = run("nbdinfo", &["--size", &gw.uri("")]);
    assert_eq!(String::from_utf8_lossy(&size.stdout).trim(), "1048576");
    good.request(cmd::DISC, 12, 0, 0, &[]);
    assert!(good.closed());

    let (summary, stderr) = gw.stop();
    let closed = &summary["closed_by_reason"];
    assert_eq!(closed["bad_request_magic"], 1, "{summary}");
    assert_eq!(closed["bad_client_flags"], 1, "{summary}");
    assert_eq!(closed["oversized_payload"], 1, "{summary}");
    assert_eq!(summary["errors_by_code"]["EINVAL"], 2, "{summary}");
    assert_eq!(summary["errors_by_code"]["ENOSPC"], 1, "{summary}");
    assert!(
        stderr.contains("bad_request_magic") && stderr.contains("protocol violation"),
        "the reason is logged:\n{stderr}"
    );
}

#[test]
fn sigterm_answers_the_requests_in_flight_then_closes() {
    let scratch = Scratch::new("nbd", "sigterm");
    let gw = Gateway::unix("ram", &scratch, &["--size", "1M", "--quiet"]);
    let mut client = Raw::connect(&gw, 3);
    client.go();
    // 32 writes sent in one go: all in the socket before the signal.
    let mut burst = Vec::new();
    for i in 0..32u64 {
        let r = RequestRepr {
            flags: 0,
            kind: cmd::WRITE,
            cookie: 100 + i,
            offset: i * 4096,
            length: 4096,
        };
        burst.extend_from_slice(&r.emit());
        burst.extend_from_slice(&[i as u8; 4096]);
    }
    client.0.write_all(&burst).unwrap();
    let (summary, _) = gw.stop();
    let mut cookies: Vec<u64> = (0..32)
        .map(|_| {
            let r = client.reply();
            assert_eq!(r.error, 0);
            r.cookie
        })
        .collect();
    cookies.sort_unstable();
    assert_eq!(cookies, (100..132).collect::<Vec<_>>());
    assert!(client.closed(), "closed once the requests are answered");
    assert_eq!(counter(&summary, "writes"), 32);
    assert_eq!(counter(&summary, "undrained_connections"), 0);
}

#[test]
fn duration_ends_the_run_with_a_summary() {
    let scratch = Scratch::new("nbd", "duration");
    let gw = Gateway::unix("ram", &scratch, &["--size", "1M", "--duration", "0.5"]);
    let socket = std::path::PathBuf::from(gw.socket());
    let (summary, stderr) = gw.wait();
    assert_eq!(summary["stopped_by"], "duration");
    assert_eq!(summary["size_bytes"], 1 << 20);
    assert_eq!(summary["backend"], "ram");
    assert!(!socket.exists(), "the socket file is removed at exit");
    assert!(stderr.contains("listening on unix:"), "{stderr}");
}
