//! The transmission phase against a raw client on a socket pair: request
//! checks, replies out of order from a backend completing on another
//! thread, and the ways a connection ends (the window and the outbox have
//! their own tests, `outbox/tests.rs`).

use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::*;
use crate::nbd::backend::{BlockSize, Capabilities};
use crate::nbd::proto::{SimpleReplyRepr, SIMPLE_REPLY_LEN};
use crate::nbd::ram::RamBackend;

const SIZE: u64 = 1 << 20;

fn geometry(minimum: u32) -> Geometry {
    Geometry {
        size: SIZE,
        block: BlockSize {
            minimum,
            preferred: 4096,
            maximum: 1 << 20,
        },
        caps: Capabilities {
            read_only: false,
            flush: true,
            fua: true,
            trim: true,
            write_zeroes: true,
            multi_conn: true,
        },
    }
}

fn req(kind: u16, flags: u16, offset: u64, length: u32) -> RequestRepr {
    RequestRepr {
        flags,
        kind,
        cookie: 0,
        offset,
        length,
    }
}

#[test]
fn check_answers_as_proto_md_says() {
    let g = geometry(512);
    let ok = |r: RequestRepr| check(&r, &g).map(|c| c.kind());
    assert_eq!(ok(req(cmd::READ, 0, 0, 4096)), Ok(Kind::Read));
    assert_eq!(ok(req(cmd::READ, cmd_flag::FUA, 0, 4096)), Ok(Kind::Read));
    assert_eq!(ok(req(cmd::READ, 0, SIZE - 512, 1024)), Err(errno::EINVAL));
    assert_eq!(
        ok(req(cmd::READ, 0, u64::MAX - 511, 512)),
        Err(errno::EINVAL)
    );
    assert_eq!(ok(req(cmd::WRITE, 0, SIZE - 512, 1024)), Err(errno::ENOSPC));
    assert_eq!(ok(req(cmd::WRITE_ZEROES, 0, SIZE, 512)), Err(errno::ENOSPC));
    assert_eq!(ok(req(cmd::TRIM, 0, SIZE, 512)), Err(errno::EINVAL));
    assert_eq!(
        ok(req(cmd::WRITE, 0, 100, 512)),
        Err(errno::EINVAL),
        "misaligned"
    );
    assert_eq!(
        ok(req(cmd::READ, 0, 0, 100)),
        Err(errno::EINVAL),
        "misaligned"
    );
    assert_eq!(
        ok(req(cmd::READ, 0, 0, (1 << 20) + 512)),
        Err(errno::EINVAL),
        "over maximum"
    );
    assert_eq!(
        ok(req(cmd::TRIM, 0, 0, SIZE as u32)),
        Ok(Kind::Trim),
        "no payload: no maximum"
    );
    assert_eq!(
        ok(req(cmd::FLUSH, 0, 77, 3)),
        Ok(Kind::Flush),
        "reserved fields"
    );
    assert_eq!(ok(req(cmd::READ, cmd_flag::DF, 0, 512)), Err(errno::EINVAL));
    assert_eq!(
        ok(req(cmd::WRITE, cmd_flag::NO_HOLE, 0, 512)),
        Err(errno::EINVAL)
    );
    assert_eq!(
        ok(req(cmd::WRITE_ZEROES, cmd_flag::FAST_ZERO, 0, 512)),
        Err(errno::EINVAL)
    );
    assert_eq!(
        ok(req(cmd::WRITE, 1 << 9, 0, 512)),
        Err(errno::EINVAL),
        "unknown flag"
    );
    assert_eq!(ok(req(cmd::CACHE, 0, 0, 512)), Err(errno::EINVAL));
    assert_eq!(ok(req(cmd::BLOCK_STATUS, 0, 0, 512)), Err(errno::EINVAL));
    assert_eq!(ok(req(99, 0, 0, 512)), Err(errno::EINVAL));
    let nz = check(
        &req(cmd::WRITE_ZEROES, cmd_flag::NO_HOLE | cmd_flag::FUA, 0, 512),
        &g,
    );
    assert_eq!(
        nz,
        Ok(Checked::WriteZeroes {
            fua: true,
            no_hole: true
        })
    );

    let mut bare = g;
    bare.caps = Capabilities::default();
    let ok = |r: RequestRepr| check(&r, &bare).map(|c| c.kind());
    assert_eq!(ok(req(cmd::FLUSH, 0, 0, 0)), Err(errno::EINVAL));
    assert_eq!(ok(req(cmd::TRIM, 0, 0, 512)), Err(errno::EINVAL));
    assert_eq!(ok(req(cmd::WRITE_ZEROES, 0, 0, 512)), Err(errno::EINVAL));
    assert_eq!(
        ok(req(cmd::WRITE, cmd_flag::FUA, 0, 512)),
        Err(errno::EINVAL)
    );
    bare.caps.read_only = true;
    let ok = |r: RequestRepr| check(&r, &bare).map(|c| c.kind());
    assert_eq!(ok(req(cmd::WRITE, 0, 0, 512)), Err(errno::EPERM));
    assert_eq!(ok(req(cmd::READ, 0, 0, 512)), Ok(Kind::Read));
}

/// Holds every request until `batch` have arrived, then completes them in
/// reverse order on a thread of its own, through a RAM backend: the shape
/// of a backend that completes asynchronously and out of order.
struct Reverse {
    ram: Arc<RamBackend>,
    batch: usize,
    held: Mutex<Vec<(Request, Completion)>>,
    geometry: Geometry,
}

impl Backend for Reverse {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn submit(&self, request: Request, completion: Completion) {
        let mut held = self.held.lock().unwrap();
        held.push((request, completion));
        if held.len() == self.batch {
            let batch: Vec<_> = held.drain(..).rev().collect();
            let ram = Arc::clone(&self.ram);
            thread::spawn(move || {
                for (request, completion) in batch {
                    ram.submit(request, completion);
                }
            });
        }
    }
}

/// A client end and the server's `serve` on the other end of a pair.
fn start(backend: Arc<dyn Backend>) -> (UnixStream, thread::JoinHandle<End>, Arc<Stats>) {
    let (client, server) = UnixStream::pair().unwrap();
    let stats = Arc::new(Stats::default());
    let s = Arc::clone(&stats);
    let handle = thread::spawn(move || {
        let geometry = backend.geometry();
        let reader = BufReader::new(Stream::Unix(server.try_clone().unwrap()));
        serve(reader, Stream::Unix(server), &backend, geometry, &s)
    });
    (client, handle, stats)
}

fn send(
    c: &mut UnixStream,
    kind: u16,
    flags: u16,
    cookie: u64,
    offset: u64,
    length: u32,
    data: &[u8],
) {
    let r = RequestRepr {
        flags,
        kind,
        cookie,
        offset,
        length,
    };
    c.write_all(&r.emit()).unwrap();
    c.write_all(data).unwrap();
}

fn reply(c: &mut UnixStream) -> SimpleReplyRepr {
    let mut h = [0u8; SIMPLE_REPLY_LEN];
    c.read_exact(&mut h).unwrap();
    SimpleReplyRepr::parse(&h).unwrap()
}

fn pattern(cookie: u64) -> Vec<u8> {
    (0..4096u32)
        .map(|i| (cookie as u32 * 31 + i) as u8)
        .collect()
}

#[test]
fn replies_follow_completion_order_with_their_cookies() {
    let ram = Arc::new(RamBackend::new(SIZE).unwrap());
    let geometry = ram.geometry();
    let backend: Arc<dyn Backend> = Arc::new(Reverse {
        ram,
        batch: 32,
        held: Mutex::new(Vec::new()),
        geometry,
    });
    let (mut c, server, stats) = start(backend);
    // 32 writes in flight at once, each block its own pattern.
    for i in 0..32u64 {
        send(&mut c, cmd::WRITE, 0, 1000 + i, i * 4096, 4096, &pattern(i));
    }
    let order: Vec<u64> = (0..32)
        .map(|_| {
            let r = reply(&mut c);
            assert_eq!(r.error, 0);
            r.cookie
        })
        .collect();
    assert_eq!(
        order,
        (1000..1032).rev().collect::<Vec<_>>(),
        "completion order, not request order"
    );
    for i in 0..32u64 {
        send(&mut c, cmd::READ, 0, 2000 + i, i * 4096, 4096, &[]);
    }
    let mut seen = HashMap::new();
    for _ in 0..32 {
        let r = reply(&mut c);
        assert_eq!(r.error, 0);
        let mut data = vec![0u8; 4096];
        c.read_exact(&mut data).unwrap();
        seen.insert(r.cookie, data);
    }
    for i in 0..32u64 {
        assert!(
            seen[&(2000 + i)] == pattern(i),
            "read {i} carries its own block"
        );
    }
    send(&mut c, cmd::DISC, 0, 0, 0, 0, &[]);
    assert_eq!(server.join().unwrap(), End::Disconnect);
    let snap = stats.snapshot();
    assert_eq!((snap.reads, snap.writes, snap.errors), (32, 32, 0));
    assert_eq!(snap.read_bytes, 32 * 4096);
}

#[test]
fn errors_keep_the_stream_in_step() {
    let backend: Arc<dyn Backend> = Arc::new(RamBackend::new(SIZE).unwrap());
    let (mut c, server, stats) = start(backend);
    send(&mut c, cmd::READ, 0, 1, SIZE - 100, 200, &[]);
    let r = reply(&mut c);
    assert_eq!((r.cookie, r.error), (1, errno::EINVAL));
    // A write past the end: its payload is consumed, then ENOSPC.
    send(&mut c, cmd::WRITE, 0, 2, SIZE - 100, 200, &[9u8; 200]);
    let r = reply(&mut c);
    assert_eq!((r.cookie, r.error), (2, errno::ENOSPC));
    send(&mut c, 42, 0, 3, 0, 0, &[]);
    let r = reply(&mut c);
    assert_eq!((r.cookie, r.error), (3, errno::EINVAL));
    send(&mut c, cmd::WRITE, 0, 4, 10, 3, b"abc");
    assert_eq!(reply(&mut c).error, 0);
    send(&mut c, cmd::READ, 0, 5, 9, 5, &[]);
    let r = reply(&mut c);
    assert_eq!((r.cookie, r.error), (5, 0));
    let mut data = [0u8; 5];
    c.read_exact(&mut data).unwrap();
    assert_eq!(&data, b"\0abc\0");
    send(&mut c, cmd::READ, 0, 6, 0, 0, &[]);
    assert_eq!(reply(&mut c).error, 0, "a zero-length read has no data");
    send(&mut c, cmd::FLUSH, 0, 7, 0, 0, &[]);
    assert_eq!(reply(&mut c).cookie, 7);
    drop(c);
    assert_eq!(server.join().unwrap(), End::Eof);
    let snap = stats.snapshot();
    assert_eq!(snap.errors, 3);
    assert_eq!(snap.errors_by_code.get("ENOSPC"), Some(&1));
    assert_eq!(snap.errors_by_code.get("EINVAL"), Some(&2));
}

#[test]
fn violations_end_the_connection_by_name() {
    let backend: Arc<dyn Backend> = Arc::new(RamBackend::new(SIZE).unwrap());
    let (mut c, server, _) = start(Arc::clone(&backend));
    c.write_all(&[0xAB; REQUEST_LEN]).unwrap();
    assert!(matches!(
        server.join().unwrap(),
        End::Closed(CloseReason::BadRequestMagic, _)
    ));
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "closed with nothing sent");

    let (mut c, server, _) = start(Arc::clone(&backend));
    send(&mut c, cmd::WRITE, 0, 1, 0, MAX_PAYLOAD + 1, &[]);
    assert!(matches!(
        server.join().unwrap(),
        End::Closed(CloseReason::OversizedPayload, _)
    ));

    let (mut c, server, _) = start(backend);
    send(&mut c, cmd::WRITE, 0, 1, 0, 4096, &[1; 100]);
    drop(c);
    assert!(matches!(
        server.join().unwrap(),
        End::Closed(CloseReason::TruncatedRequest, _)
    ));
}

/// Fails every request with an I/O error, and keeps what it was handed.
struct Failing {
    seen: Mutex<Vec<(String, u64, u32)>>,
}

impl Backend for Failing {
    fn geometry(&self) -> Geometry {
        geometry(1)
    }

    fn submit(&self, request: Request, completion: Completion) {
        let op = match request.op {
            Op::Read => "read".to_string(),
            Op::Write { data, fua } => format!("write {} fua={fua}", data.len()),
            Op::Flush => "flush".to_string(),
            Op::Trim { fua } => format!("trim fua={fua}"),
            Op::WriteZeroes { fua, no_hole } => format!("zeroes fua={fua} no_hole={no_hole}"),
        };
        self.seen
            .lock()
            .unwrap()
            .push((op, request.offset, request.length));
        completion.complete(Err(crate::nbd::backend::BackendError::Io));
    }
}

#[test]
fn backend_errors_reach_the_client_as_eio_with_the_flags_passed_on() {
    let failing = Arc::new(Failing {
        seen: Mutex::new(Vec::new()),
    });
    let backend: Arc<dyn Backend> = failing.clone();
    let (mut c, server, stats) = start(backend);
    send(&mut c, cmd::WRITE, cmd_flag::FUA, 1, 512, 3, b"xyz");
    send(&mut c, cmd::READ, 0, 2, 0, 16, &[]);
    send(
        &mut c,
        cmd::WRITE_ZEROES,
        cmd_flag::NO_HOLE,
        3,
        4096,
        8192,
        &[],
    );
    send(&mut c, cmd::TRIM, cmd_flag::FUA, 4, 0, 4096, &[]);
    send(&mut c, cmd::FLUSH, 0, 5, 123, 456, &[]);
    for cookie in 1..=5 {
        let r = reply(&mut c);
        assert_eq!(
            (r.cookie, r.error),
            (cookie, errno::EIO),
            "no data after an error"
        );
    }
    send(&mut c, cmd::DISC, 0, 0, 0, 0, &[]);
    assert_eq!(server.join().unwrap(), End::Disconnect);
    let seen = failing.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            ("write 3 fua=true".to_string(), 512, 3),
            ("read".to_string(), 0, 16),
            ("zeroes fua=false no_hole=true".to_string(), 4096, 8192),
            ("trim fua=true".to_string(), 0, 4096),
            ("flush".to_string(), 0, 0),
        ]
    );
    let snap = stats.snapshot();
    assert_eq!(snap.errors_by_code.get("EIO"), Some(&5));
    assert_eq!((snap.read_bytes, snap.written_bytes), (0, 0));
}

/// Holds every request until the reader unplugs, then completes them
/// through a RAM backend: a reader that waited on its socket without
/// unplugging would never see their replies.
struct Plugged {
    ram: RamBackend,
    held: Mutex<Vec<(Request, Completion)>>,
    unplugs: AtomicUsize,
}

impl Backend for Plugged {
    fn geometry(&self) -> Geometry {
        self.ram.geometry()
    }

    fn submit(&self, request: Request, completion: Completion) {
        self.held.lock().unwrap().push((request, completion));
    }

    fn unplug(&self) {
        self.unplugs.fetch_add(1, Ordering::SeqCst);
        let held = std::mem::take(&mut *self.held.lock().unwrap());
        for (request, completion) in held {
            self.ram.submit(request, completion);
        }
    }
}

#[test]
fn the_reader_unplugs_before_it_waits() {
    let plugged = Arc::new(Plugged {
        ram: RamBackend::new(SIZE).unwrap(),
        held: Mutex::new(Vec::new()),
        unplugs: AtomicUsize::new(0),
    });
    let backend: Arc<dyn Backend> = plugged.clone();
    let (mut c, server, _) = start(backend);
    // A reply that never comes fails the test instead of hanging it.
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // A burst of writes in one send, then one read alone.
    let mut burst = Vec::new();
    for i in 0..16u64 {
        let r = req(cmd::WRITE, 0, i * 4096, 4096);
        burst.extend_from_slice(&RequestRepr { cookie: i, ..r }.emit());
        burst.extend_from_slice(&pattern(i));
    }
    c.write_all(&burst).unwrap();
    let mut cookies: Vec<u64> = (0..16)
        .map(|_| {
            let r = reply(&mut c);
            assert_eq!(r.error, 0);
            r.cookie
        })
        .collect();
    cookies.sort_unstable();
    assert_eq!(cookies, (0..16).collect::<Vec<_>>());
    send(&mut c, cmd::READ, 0, 99, 5 * 4096, 4096, &[]);
    let r = reply(&mut c);
    assert_eq!((r.cookie, r.error), (99, 0));
    let mut data = vec![0u8; 4096];
    c.read_exact(&mut data).unwrap();
    assert!(data == pattern(5));
    // A write whose payload comes in two parts: the reader waits inside
    // it, then must still unplug once it has submitted it.
    let r = RequestRepr {
        cookie: 100,
        ..req(cmd::WRITE, 0, 0, 4096)
    };
    c.write_all(&r.emit()).unwrap();
    c.write_all(&pattern(100)[..1000]).unwrap();
    thread::sleep(Duration::from_millis(50));
    c.write_all(&pattern(100)[1000..]).unwrap();
    let r = reply(&mut c);
    assert_eq!((r.cookie, r.error), (100, 0));
    send(&mut c, cmd::DISC, 0, 0, 0, 0, &[]);
    assert_eq!(server.join().unwrap(), End::Disconnect);
    assert!(plugged.unplugs.load(Ordering::SeqCst) >= 2);
}
