//! The outbox on a socket pair: who sends, when, and what a full or a
//! broken socket does; the window.

use std::collections::HashSet;
use std::io::{ErrorKind, Read};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use super::*;
use crate::nbd::backend::Completion;
use crate::nbd::proto::SIMPLE_REPLY_LEN;

/// Deadline for anything a test waits on; only a broken build gets near.
const PATIENCE: Duration = Duration::from_secs(20);

/// An outbox on one end of a pair, the client on the other.
fn outbox() -> (Arc<Outbox>, UnixStream, Arc<Stats>) {
    let (client, server) = UnixStream::pair().unwrap();
    let stats = Arc::new(Stats::default());
    let outbox = Outbox::new(Stream::Unix(server), Arc::clone(&stats));
    (Arc::new(outbox), client, stats)
}

/// A read's 4 KiB, named by its cookie.
fn block(cookie: u64) -> Vec<u8> {
    (0..4096u64).map(|i| (cookie * 7 + i) as u8).collect()
}

/// Reads one reply header (and a read's 4 KiB when `data`).
fn reply(client: &mut UnixStream, data: bool) -> (SimpleReplyRepr, Vec<u8>) {
    let mut header = [0u8; SIMPLE_REPLY_LEN];
    client.read_exact(&mut header).unwrap();
    let header = SimpleReplyRepr::parse(&header).unwrap();
    let mut payload = vec![0u8; if data { 4096 } else { 0 }];
    client.read_exact(&mut payload).unwrap();
    (header, payload)
}

/// Nothing has reached the client yet.
fn nothing_sent(client: &UnixStream) -> bool {
    client.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let result = (&*client).read(&mut byte);
    client.set_nonblocking(false).unwrap();
    matches!(result, Err(e) if e.kind() == ErrorKind::WouldBlock)
}

/// The completing thread sends the reply itself: no writer thread runs
/// here, and the reply is on the socket when `complete` returns.
#[test]
fn the_completing_thread_sends_the_reply() {
    let (outbox, mut client, stats) = outbox();
    Completion::new(7, Kind::Read, 4096, &outbox).complete(Ok(block(7)));
    let (header, data) = reply(&mut client, true);
    assert_eq!((header.cookie, header.error), (7, 0));
    assert!(data == block(7));
    Completion::new(8, Kind::Write, 4096, &outbox).complete(Ok(Vec::new()));
    assert_eq!(reply(&mut client, false).0.cookie, 8);
    let snap = stats.snapshot();
    assert_eq!((snap.reads, snap.writes, snap.read_bytes), (1, 1, 4096));
}

/// Corked, replies wait; uncorking sends them all.
#[test]
fn a_corked_outbox_holds_replies_until_uncorked() {
    let (outbox, mut client, _) = outbox();
    outbox.cork();
    for cookie in 1..=3 {
        Completion::new(cookie, Kind::Flush, 0, &outbox).complete(Ok(Vec::new()));
    }
    assert!(nothing_sent(&client), "held while corked");
    outbox.uncork();
    let cookies: Vec<u64> = (0..3).map(|_| reply(&mut client, false).0.cookie).collect();
    assert_eq!(cookies, [1, 2, 3]);
}

/// A batch sends nothing until it is flushed (or dropped), then every
/// connection's replies.
#[test]
fn a_batch_sends_each_connection_at_its_flush() {
    let (first, mut first_client, _) = outbox();
    let (second, mut second_client, _) = outbox();
    let mut batch = ReplyBatch::default();
    for cookie in 0..4 {
        let outbox = if cookie % 2 == 0 { &first } else { &second };
        Completion::new(cookie, Kind::Read, 4096, outbox)
            .complete_into(&mut batch, Ok(block(cookie)));
    }
    assert!(nothing_sent(&first_client) && nothing_sent(&second_client));
    assert_eq!(batch.outboxes.len(), 2, "one entry per connection");
    batch.flush();
    for (client, cookies) in [(&mut first_client, [0, 2]), (&mut second_client, [1, 3])] {
        for cookie in cookies {
            let (header, data) = reply(client, true);
            assert_eq!(header.cookie, cookie);
            assert!(data == block(cookie));
        }
    }
    Completion::new(9, Kind::Flush, 0, &first).complete_into(&mut batch, Ok(Vec::new()));
    drop(batch);
    assert_eq!(reply(&mut first_client, false).0.cookie, 9, "sent on drop");
}

/// A client that does not read: the completing thread never waits on
/// the full socket (the writer thread sends the rest), and once the
/// client reads, every reply arrives whole, once.
#[test]
fn a_full_socket_never_blocks_the_completing_thread() {
    const REPLIES: u64 = 2000; // 8 MiB, far beyond the socket's buffer
    let (outbox, mut client, stats) = outbox();
    let writer = {
        let outbox = Arc::clone(&outbox);
        thread::spawn(move || outbox.run_writer())
    };
    let (done, finished) = mpsc::channel();
    {
        let outbox = Arc::clone(&outbox);
        thread::spawn(move || {
            for cookie in 0..REPLIES {
                Completion::new(cookie, Kind::Read, 4096, &outbox).complete(Ok(block(cookie)));
            }
            let _ = done.send(());
        });
    }
    finished
        .recv_timeout(PATIENCE)
        .expect("every complete() returned while nobody read");
    let mut seen = HashSet::new();
    for _ in 0..REPLIES {
        let (header, data) = reply(&mut client, true);
        assert_eq!(header.error, 0);
        assert!(
            data == block(header.cookie),
            "reply {} whole",
            header.cookie
        );
        assert!(seen.insert(header.cookie), "reply {} twice", header.cookie);
    }
    outbox.reader_done();
    writer.join().unwrap().expect("the writer ends cleanly");
    assert_eq!(stats.snapshot().reads, REPLIES);
    assert!(nothing_sent(&client), "nothing more");
}

/// The writer ends only once every completion handed out is answered.
#[test]
fn the_writer_waits_for_the_completions_handed_out() {
    let (outbox, mut client, _) = outbox();
    let late = Completion::new(5, Kind::Write, 512, &outbox);
    let writer = {
        let outbox = Arc::clone(&outbox);
        thread::spawn(move || outbox.run_writer())
    };
    outbox.reader_done();
    thread::sleep(Duration::from_millis(20));
    assert!(!writer.is_finished(), "a completion is still to come");
    late.complete(Ok(Vec::new()));
    writer.join().unwrap().expect("clean end");
    assert_eq!(reply(&mut client, false).0.cookie, 5);
}

/// A client gone: the send fails, the window closes (so the reader
/// stops), later replies are dropped, and the writer reports the error.
#[test]
fn a_broken_socket_closes_the_window() {
    let (outbox, client, _) = outbox();
    let writer = {
        let outbox = Arc::clone(&outbox);
        thread::spawn(move || outbox.run_writer())
    };
    drop(client);
    assert!(outbox.window().try_acquire((1, 0)));
    Completion::new(1, Kind::Write, 512, &outbox).complete(Ok(Vec::new()));
    assert!(!outbox.window().try_acquire((1, 0)));
    assert!(!outbox.window().acquire((1, 0)), "closed, not waiting");
    Completion::new(2, Kind::Write, 512, &outbox).complete(Ok(Vec::new()));
    outbox.reader_done();
    let error = writer.join().unwrap().expect_err("the socket's error");
    assert_eq!(error.kind(), ErrorKind::BrokenPipe);
}

#[test]
fn window_blocks_past_its_limit_and_reopens() {
    let window = Arc::new(Window::default());
    assert!(window.acquire((MAX_INFLIGHT_REQUESTS, 0)));
    assert!(!window.try_acquire((1, 0)), "full");
    let got = Arc::new(AtomicBool::new(false));
    let waiter = {
        let (window, got) = (Arc::clone(&window), Arc::clone(&got));
        thread::spawn(move || {
            let ok = window.acquire((1, 0));
            got.store(true, Ordering::SeqCst);
            ok
        })
    };
    thread::sleep(Duration::from_millis(50));
    assert!(!got.load(Ordering::SeqCst), "a full window must block");
    window.release((1, 0));
    assert!(waiter.join().unwrap());
    // Bytes: one request always passes; a second beyond the limit waits,
    // and a closed window refuses.
    let window = Window::default();
    window.release((MAX_INFLIGHT_REQUESTS, 0));
    assert!(window.acquire((1, MAX_INFLIGHT_BYTES * 2)));
    assert!(!window.try_acquire((1, 1)));
    window.close();
    assert!(!window.acquire((1, 1)));
}
