//! Each opcode end to end, multi-MTU transfers against an oracle, and
//! scatter/gather lists on both sides.

use super::*;
use crate::verbs::{SendFlags, SgList, WcFlags, WcOpcode, WcStatus, WrOp};
use crate::wire::RKey;

/// What the test posts.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Send,
    SendImm,
    SendInv,
    Write,
    WriteImm,
    Read,
    FetchAdd,
    CompareSwap,
}

/// Each opcode at sizes around the MTU (1024 here) and the 4-byte pad:
/// the requester's and the responder's completions and the bytes they
/// moved, checked.
#[test]
fn every_opcode_at_every_size() {
    let kinds = [
        Kind::Send,
        Kind::SendImm,
        Kind::SendInv,
        Kind::Write,
        Kind::WriteImm,
        Kind::Read,
    ];
    for kind in kinds {
        for len in [0usize, 1, 3, 1024, 1025, 5000] {
            one_op(kind, len);
        }
    }
    one_op(Kind::FetchAdd, 8);
    one_op(Kind::CompareSwap, 8);
}

fn one_op(kind: Kind, len: usize) {
    let what = format!("{kind:?} of {len}");
    let mut pair = Pair::new(Setup::default());
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    // A's data and sink, B's target (offset 100 into it) and receive buffer.
    let (a_region, a_mr) = pair.na.region(len.max(8) + 16, 1, Access::LOCAL_WRITE);
    let (b_region, b_mr) = pair.nb.region(len + 200, 2, all);
    let (b_recv, b_recv_mr) = pair.nb.region(len + 8, 3, Access::LOCAL_WRITE);
    let (_, inv_mr) = pair
        .nb
        .region(64, 4, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let before_a = a_region.to_vec();
    let before_b = b_region.to_vec();
    let remote_addr = b_mr.addr_at(100);
    let rkey = b_mr.rkey();
    let op = match kind {
        Kind::Send => WrOp::Send,
        Kind::SendImm => WrOp::SendWithImm(0xDEAD_BEEF),
        Kind::SendInv => WrOp::SendWithInv(inv_mr.rkey()),
        Kind::Write => WrOp::Write { remote_addr, rkey },
        Kind::WriteImm => WrOp::WriteWithImm {
            remote_addr,
            rkey,
            imm: 0x1234_5678,
        },
        Kind::Read => WrOp::Read { remote_addr, rkey },
        Kind::FetchAdd => WrOp::FetchAdd {
            remote_addr: b_mr.addr_at(104),
            rkey,
            add: 0x0101,
        },
        Kind::CompareSwap => WrOp::CompareSwap {
            remote_addr: b_mr.addr_at(104),
            rkey,
            compare: u64::from_le_bytes(before_b[104..112].try_into().expect("8 bytes")),
            swap: 0x5A5A_5A5A_5A5A_5A5A,
        },
    };
    let receives = matches!(
        kind,
        Kind::Send | Kind::SendImm | Kind::SendInv | Kind::WriteImm
    );
    if receives {
        pair.nb
            .post_recv(0, RecvWr::new(77, Node::sge(&b_recv_mr, 0, len as u32 + 8)));
    }
    let sge = Node::sge(&a_mr, 8, len as u32);
    pair.na.post_send(0, SendWr::new(7, op, sge));
    pair.until_completions(1, usize::from(receives));
    let (wa, wb) = pair.take();
    assert_eq!(wa.len(), 1, "{what}");
    let wc = wa[0];
    assert_eq!(
        (wc.wr_id, wc.status),
        (7, WcStatus::Success),
        "{what}: {wc:?}"
    );
    assert_eq!(wc.opcode, op.wc_opcode(), "{what}");
    assert_eq!(wc.qp_num, pair.na.qps[0].value());
    let sent = &before_a[8..8 + len];
    match kind {
        Kind::Send | Kind::SendImm | Kind::SendInv => {
            let wc = wb[0];
            assert_eq!(
                (wc.wr_id, wc.status, wc.opcode),
                (77, WcStatus::Success, WcOpcode::Recv)
            );
            assert_eq!(wc.byte_len as usize, len, "{what}");
            assert_eq!(&b_recv.to_vec()[..len], sent, "{what}: received bytes");
            assert_eq!(b_region.to_vec(), before_b, "{what}: nothing else written");
            match kind {
                Kind::SendImm => {
                    assert_eq!(wc.wc_flags, WcFlags::WITH_IMM);
                    assert_eq!(wc.imm_data, 0xDEAD_BEEF);
                }
                Kind::SendInv => {
                    assert_eq!(wc.wc_flags, WcFlags::WITH_INV);
                    assert_eq!(wc.invalidated_rkey, inv_mr.rkey().0);
                    assert!(!pair.nb.device.mr_valid(&inv_mr), "{what}: invalidated");
                }
                _ => assert!(wc.wc_flags.is_empty()),
            }
        }
        Kind::Write | Kind::WriteImm => {
            let mut expected = before_b.clone();
            expected[100..100 + len].copy_from_slice(sent);
            assert_eq!(b_region.to_vec(), expected, "{what}: written bytes");
            if let Kind::WriteImm = kind {
                let wc = wb[0];
                assert_eq!((wc.wr_id, wc.opcode), (77, WcOpcode::RecvRdmaWithImm));
                assert_eq!((wc.imm_data, wc.wc_flags), (0x1234_5678, WcFlags::WITH_IMM));
                assert_eq!(wc.byte_len as usize, len, "{what}: the WRITE's length");
            } else {
                assert!(wb.is_empty());
            }
        }
        Kind::Read => {
            assert_eq!(wc.byte_len as usize, len);
            let mut expected = before_a.clone();
            expected[8..8 + len].copy_from_slice(&before_b[100..100 + len]);
            assert_eq!(a_region.to_vec(), expected, "{what}: read bytes");
            assert_eq!(b_region.to_vec(), before_b, "{what}: source untouched");
        }
        Kind::FetchAdd | Kind::CompareSwap => {
            let original = u64::from_le_bytes(before_b[104..112].try_into().expect("8 bytes"));
            let now = u64::from_le_bytes(b_region.to_vec()[104..112].try_into().expect("8 bytes"));
            let expected = match kind {
                Kind::FetchAdd => original.wrapping_add(0x0101),
                _ => 0x5A5A_5A5A_5A5A_5A5A,
            };
            assert_eq!(now, expected, "{what}");
            let result = u64::from_le_bytes(a_region.to_vec()[8..16].try_into().expect("8 bytes"));
            assert_eq!(result, original, "{what}: the original value lands locally");
            assert_eq!(wc.byte_len, 8);
        }
    }
    assert_eq!(pair.na.state(0), QpState::Rts);
    assert_eq!(pair.nb.state(0), QpState::Rts);
}

/// WRITE, READ and SEND of many MTUs over four QPs at once, every byte
/// against an oracle, lossless and with 1 % loss and reordering each way;
/// the RDMA-over-Falcon work it took is counted.
#[test]
fn multi_mtu_transfers_over_several_qps_lossless_and_lossy() {
    for (percent, seed) in [(0, 1), (1, 7), (1, 8)] {
        bulk(percent, seed, QpOrdering::Strong);
    }
}

pub(super) fn bulk(percent: u32, seed: u64, ordering: QpOrdering) {
    const QPS: usize = 4;
    const MESSAGES: usize = 6;
    let mut pair = Pair::new(Setup {
        qps: QPS,
        ordering,
        error_mode: if ordering == QpOrdering::Unordered {
            ErrorMode::CompleteInError
        } else {
            ErrorMode::VerbsCompatible
        },
        faults: lossy(percent),
        seed,
        mtu: Mtu::B1024,
        ..Setup::default()
    });
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let sizes = [1usize, 1023, 1024, 1025, 7777, 40_000];
    let mut checks = Vec::new();
    let mut expected_b = 0;
    for qp in 0..QPS {
        for (m, &len) in sizes.iter().enumerate().take(MESSAGES) {
            let seed = (qp * 100 + m) as u64;
            let mut op = (qp + m) % 3;
            if op == 2 && ordering == QpOrdering::Unordered && len > 1024 {
                // RDMA-0.9 §6.4: an unordered QP's SENDs are one MTU.
                op = 0;
            }
            let (a_region, a_mr) = pair.na.region(len, seed, all);
            let (b_region, b_mr) = pair.nb.region(len, seed + 10_000, all);
            let remote_addr = b_mr.addr();
            let rkey = b_mr.rkey();
            let wr_id = (qp * 1000 + m) as u64;
            let sge = Node::sge(&a_mr, 0, len as u32);
            let (wr, oracle) = match op {
                0 => (
                    SendWr::new(wr_id, WrOp::Write { remote_addr, rkey }, sge),
                    (b_region, a_region.to_vec()),
                ),
                1 => (
                    SendWr::new(wr_id, WrOp::Read { remote_addr, rkey }, sge),
                    (a_region, b_region.to_vec()),
                ),
                _ => {
                    pair.nb
                        .post_recv(qp, RecvWr::new(wr_id, Node::sge(&b_mr, 0, len as u32)));
                    expected_b += 1;
                    (
                        SendWr::new(wr_id, WrOp::Send, sge),
                        (b_region, a_region.to_vec()),
                    )
                }
            };
            pair.na.post_send(qp, wr);
            checks.push((wr_id, oracle));
        }
    }
    pair.until_completions(QPS * MESSAGES, expected_b);
    let (wa, wb) = pair.take();
    assert_all_ok(&wa);
    assert_all_ok(&wb);
    for (wr_id, (region, expected)) in checks {
        assert!(region.to_vec() == expected, "wr {wr_id}: bytes differ");
    }
    if ordering.completes_in_order() {
        for qp in 0..QPS {
            let ids: Vec<u64> = wa
                .iter()
                .filter(|wc| wc.qp_num == pair.na.qps[qp].value())
                .map(|wc| wc.wr_id)
                .collect();
            let mut sorted = ids.clone();
            sorted.sort_unstable();
            assert_eq!(ids, sorted, "QP {qp}: completions in posting order");
        }
    }
    let stats = pair.na.device.stats();
    assert_eq!(stats.sends_ok, (QPS * MESSAGES) as u64);
    assert!(stats.pushes > 0 && stats.pulls > 0, "{stats:?}");
    if percent > 0 {
        let lost = pair.a.port.stats().lost + pair.b.port.stats().lost;
        assert!(lost > 0, "the faults dropped frames");
    }
}

/// A SEND gathered from three entries into a receive scattered over four
/// of other sizes; a WRITE gathered from three; a READ scattered over five
/// entries (RDMA-0.9 §6.7's example shape): every byte where it belongs.
#[test]
fn scatter_gather_lists_on_both_sides() {
    let mut pair = Pair::new(Setup {
        faults: lossy(1),
        seed: 3,
        ..Setup::default()
    });
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let (a_region, a_mr) = pair.na.region(20_000, 11, all);
    let (b_region, b_mr) = pair.nb.region(20_000, 12, all);
    let a_bytes = a_region.to_vec();
    let b_bytes = b_region.to_vec();
    // SEND: A [0..700) [2000..2900) [5000..5001) → B [10000..10300)
    // [11000..11500) [12000..12002) [13000..14000).
    let gather = [(0u64, 700u32), (2000, 900), (5000, 1)];
    let scatter = [
        (10_000u64, 300u32),
        (11_000, 500),
        (12_000, 2),
        (13_000, 1000),
    ];
    let list = |mr: &MemoryRegion, parts: &[(u64, u32)]| {
        let sges: Vec<Sge> = parts.iter().map(|&(o, l)| Node::sge(mr, o, l)).collect();
        SgList::new(&sges).expect("fits")
    };
    pair.nb.post_recv(0, RecvWr::new(1, list(&b_mr, &scatter)));
    pair.na
        .post_send(0, SendWr::new(1, WrOp::Send, list(&a_mr, &gather)));
    pair.until_completions(1, 1);
    let message: Vec<u8> = gather
        .iter()
        .flat_map(|&(o, l)| a_bytes[o as usize..(o + u64::from(l)) as usize].to_vec())
        .collect();
    let mut expected = b_bytes.clone();
    let mut at = 0;
    for &(o, l) in &scatter {
        let n = (l as usize).min(message.len() - at);
        expected[o as usize..o as usize + n].copy_from_slice(&message[at..at + n]);
        at += n;
    }
    assert_eq!(at, message.len());
    assert_eq!(b_region.to_vec(), expected, "SEND scattered");
    let (wa, wb) = pair.take();
    assert_all_ok(&wa);
    assert_eq!(wb[0].byte_len as usize, message.len());

    // WRITE gathered from three entries to B [15000..).
    let gather = [(100u64, 50u32), (3000, 2500), (9000, 7)];
    let op = WrOp::Write {
        remote_addr: b_mr.addr_at(15_000),
        rkey: b_mr.rkey(),
    };
    pair.na
        .post_send(0, SendWr::new(2, op, list(&a_mr, &gather)));
    pair.until_completions(1, 0);
    let message: Vec<u8> = gather
        .iter()
        .flat_map(|&(o, l)| a_bytes[o as usize..(o + u64::from(l)) as usize].to_vec())
        .collect();
    expected[15_000..15_000 + message.len()].copy_from_slice(&message);
    assert_eq!(b_region.to_vec(), expected, "WRITE gathered");

    // READ of B [1000..5647) into five A entries.
    let sinks = [
        (12_000u64, 1500u32),
        (14_000, 300),
        (15_000, 2048),
        (18_000, 100),
        (19_000, 699),
    ];
    let total: u32 = sinks.iter().map(|s| s.1).sum();
    let op = WrOp::Read {
        remote_addr: b_mr.addr_at(1000),
        rkey: b_mr.rkey(),
    };
    pair.na
        .post_send(0, SendWr::new(3, op, list(&a_mr, &sinks)));
    pair.until_completions(2, 0);
    let (wa, _) = pair.take();
    assert_all_ok(&wa);
    let source = &b_region.to_vec()[1000..1000 + total as usize];
    let mut expected_a = a_bytes.clone();
    let mut at = 0;
    for &(o, l) in &sinks {
        expected_a[o as usize..(o + u64::from(l)) as usize]
            .copy_from_slice(&source[at..at + l as usize]);
        at += l as usize;
    }
    assert_eq!(a_region.to_vec(), expected_a, "READ scattered");
    // 1500 → 1024 + 476, 300, 2048 → 1024 + 1024, 100, 699: 7 pulls.
    assert_eq!(pair.na.device.stats().pulls, 7);
}

/// Unsignalled sends complete silently; `sq_sig_all` signals every one;
/// inline data is copied at post time (the buffer may change at once).
#[test]
fn signalled_unsignalled_and_inline_sends() {
    for sig_all in [false, true] {
        let mut pair = Pair::new(Setup {
            sq_sig_all: sig_all,
            ..Setup::default()
        });
        let (a_region, a_mr) = pair.na.region(64, 1, Access::LOCAL_WRITE);
        let (b_region, b_mr) = pair
            .nb
            .region(1024, 2, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        for i in 0..10u64 {
            let op = WrOp::Write {
                remote_addr: b_mr.addr_at(i * 64),
                rkey: b_mr.rkey(),
            };
            let flags = match i {
                4 | 9 => SendFlags::SIGNALED | SendFlags::INLINE,
                _ => SendFlags::INLINE,
            };
            pair.na.post_send(
                0,
                SendWr::new(i, op, Node::sge(&a_mr, 0, 64)).with_flags(flags),
            );
            // Inline: the buffer may be reused once posted.
            a_region.write(0, &[i as u8; 64]).expect("inside");
        }
        pair.settle(Duration::from_millis(10));
        let (wa, _) = pair.take();
        let ids: Vec<u64> = wa.iter().map(|wc| wc.wr_id).collect();
        if sig_all {
            assert_eq!(ids, (0..10).collect::<Vec<_>>());
        } else {
            assert_eq!(ids, [4, 9]);
        }
        let bytes = b_region.to_vec();
        let first = pattern(1, 64);
        assert_eq!(&bytes[..64], &first[..], "the bytes as posted");
        for i in 1..10 {
            assert_eq!(&bytes[i * 64..(i + 1) * 64], &[(i - 1) as u8; 64][..]);
        }
        assert_eq!(pair.na.device.stats().sends_ok, 10);
    }
    // A key that does not allow the inline copy fails the send.
    let mut pair = Pair::new(Setup::default());
    let (_, b_mr) = pair
        .nb
        .region(64, 2, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let bad = Sge {
        addr: 0,
        length: 8,
        lkey: crate::wire::LKey(0xBAD),
    };
    let op = WrOp::Write {
        remote_addr: b_mr.addr(),
        rkey: RKey(b_mr.rkey().0),
    };
    pair.na.post_send(
        0,
        SendWr::new(1, op, bad).with_flags(SendFlags::SIGNALED | SendFlags::INLINE),
    );
    pair.until_completions(1, 0);
    assert_eq!(pair.wa[0].status, WcStatus::LocProtErr);
}

/// A measurement, not a check: wall-clock goodput of 64 KiB RDMA WRITEs
/// over one QP, PSP on, lossless, both engines and devices on this thread
/// (so it is the cost of both ends). Run with
/// `cargo test --release -p rdma-ulp write_goodput -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement; run it in release"]
fn write_goodput() {
    const MESSAGE: u32 = 64 * 1024;
    const MESSAGES: u64 = 4000;
    const DEPTH: u64 = 16;
    let mut pair = Pair::new(Setup {
        mtu: Mtu::B4096,
        ..Setup::default()
    });
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let (_, a_mr) = pair.na.region(MESSAGE as usize, 1, Access::LOCAL_WRITE);
    let (_, b_mr) = pair.nb.region(MESSAGE as usize, 2, all);
    let op = WrOp::Write {
        remote_addr: b_mr.addr(),
        rkey: b_mr.rkey(),
    };
    let start = std::time::Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    while done < MESSAGES {
        while posted < MESSAGES && posted - done < DEPTH {
            pair.na
                .post_send(0, SendWr::new(posted, op, Node::sge(&a_mr, 0, MESSAGE)));
            posted += 1;
        }
        pair.step();
        done += pair.wa.len() as u64;
        assert_all_ok(&pair.wa);
        pair.wa.clear();
    }
    let elapsed = start.elapsed();
    let bytes = MESSAGES * u64::from(MESSAGE);
    println!(
        "{{\"write_goodput_gbps\": {:.2}, \"messages\": {MESSAGES}, \"message_bytes\": {MESSAGE}, \"elapsed_ms\": {}}}",
        bytes as f64 * 8.0 / elapsed.as_secs_f64() / 1e9,
        elapsed.as_millis()
    );
}
