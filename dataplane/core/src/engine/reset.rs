//! Returning an engine to the state it was built in.
//!
//! Layer: engine, setup only (not on the datapath). Owns
//! [`Engine::reset`], for harnesses that replay many inputs against one
//! freshly set-up engine (the `engine_rx` fuzz targets, whose inputs must
//! reproduce: each must meet the same engine, whatever ran before it). It
//! never runs on a live node: a reset engine hands out its SPIs again.

use crate::engine::{Engine, EngineConfig};
use crate::port::PacketBuf;
use crate::time::Timestamp;
use crate::transaction::DataSource;

impl<B: PacketBuf, S: DataSource> Engine<B, S> {
    /// Back to what [`Engine::new`] built from the same configuration at
    /// `now`: no connections, every counter zero, the generator at its seed,
    /// the timing wheel starting at `now` (which may be earlier than the
    /// engine's last input), the RUE and the resources as new, the PSP SA
    /// database back to its master keys with SPI allocation starting over
    /// and nothing cached. Connections (and their SAs) are set up again
    /// after it, as after `new`. (A shard of a shared node, `EngineConfig::node`,
    /// takes the node's current keys instead, and its SPI numbering goes on
    /// from the node's.)
    ///
    /// Everything is rebuilt from the stored configuration except the SA
    /// database's cache table, which is cleared in place: its `sa_cache`
    /// contexts are the one large allocation of a new engine (with the
    /// default 1024, 44 % of a fuzz target's time went to building and
    /// freeing them under AddressSanitizer).
    pub fn reset(&mut self, now: Timestamp) {
        let sa_database = self.psp.take().map(|psp| psp.db);
        let config = EngineConfig::clone(&self.config);
        // Invariant: `Engine::build` is a function of the configuration,
        // which built this engine once already, so it succeeds again.
        *self = Engine::build(config, now, sa_database).expect("the configuration built it before");
    }
}

#[cfg(test)]
mod tests {
    use crate::port::FrameBuf;
    use crate::transaction::UlpHeader;
    use core::time::Duration;

    use psp::{MasterKey, MasterKeys};

    use crate::engine::{connect, ConnectionHandle, Engine, EngineConfig, PairSpec, PspConfig};
    use crate::time::Timestamp;
    use crate::transaction::{Transaction, TransactionKind, UlpEvent};
    use crate::wire::EthernetAddress;

    fn config(ip: &str, mac: u8, key: u8) -> EngineConfig {
        EngineConfig {
            local_ip: ip.parse().expect("literal address"),
            local_mac: EthernetAddress([2, 0, 0, 0, 0, mac]),
            psp: Some(PspConfig::new(MasterKeys {
                k0: MasterKey::new([key; 32]),
                k1: MasterKey::new([key + 1; 32]),
            })),
            ..EngineConfig::default()
        }
    }

    /// Everything observable of a scripted exchange between `a` and `b`
    /// from `start`: each frame on the wire (PSP-sealed, so SPIs, keys and
    /// IVs show), each ULP event, the final counters and snapshots. The
    /// frame from A to B whose index is `lose` is lost, so retransmission
    /// timers fire too.
    fn transcript(a: &mut Engine, b: &mut Engine, start: Timestamp) -> Vec<String> {
        let (ca, cb) = connect(start, a, b, &PairSpec::default()).expect("connect");
        let mut log = Vec::new();
        let mut now = start;
        a.submit(now, ca, Transaction::push(1, vec![7; 1000]))
            .expect("submit");
        a.submit(now, ca, Transaction::pull(2, 500))
            .expect("submit");
        b.submit(now, cb, Transaction::push(3, vec![5; 64]))
            .expect("submit");
        let mut wire: Vec<(bool, Vec<u8>)> = Vec::new();
        let mut sent_by_a = 0;
        let mut buf = vec![0u8; a.max_frame_len()];
        for step in 0..2_000u32 {
            for (to_b, frame) in core::mem::take(&mut wire) {
                let engine = if to_b { &mut *b } else { &mut *a };
                let _ = engine.handle_packet(now, FrameBuf::from_frame(&frame, 0));
            }
            for (from_a, engine, conn) in [(true, &mut *a, ca), (false, &mut *b, cb)] {
                engine.handle_timeout(now);
                answer(&mut log, engine, conn, now);
                while let Some(len) = engine.poll_transmit_into(now, &mut buf) {
                    log.push(format!("{from_a} {:02x?}", &buf[..len]));
                    if from_a {
                        sent_by_a += 1;
                        if sent_by_a == 2 {
                            continue;
                        }
                    }
                    wire.push((from_a, buf[..len].to_vec()));
                }
            }
            now = now + Duration::from_micros(if step % 100 == 99 { 5_000 } else { 2 });
        }
        for (engine, conn) in [(&*a, ca), (&*b, cb)] {
            log.push(format!("{:?}", engine.stats()));
            log.push(format!("{:?}", engine.connection_snapshot(conn)));
        }
        log
    }

    /// A target that takes every push and serves every pull.
    fn answer(log: &mut Vec<String>, engine: &mut Engine, conn: ConnectionHandle, now: Timestamp) {
        while let Some(event) = engine.poll_event() {
            log.push(format!("{event:?}"));
            if let UlpEvent::Request(r) = event {
                if r.kind == TransactionKind::Push {
                    engine.ulp_ack(now, conn, r.rsn).expect("ack");
                } else {
                    let data = vec![9; usize::from(r.request_length)];
                    engine
                        .submit_pull_data(now, conn, r.rsn, UlpHeader::EMPTY, data)
                        .expect("pull data");
                }
            }
        }
    }

    #[test]
    fn reset_engine_behaves_as_new() {
        let start = Timestamp::from_micros(1);
        let new_pair = || {
            let a = Engine::new(config("10.0.0.1", 1, 1), start).expect("config");
            let b = Engine::new(config("10.0.0.2", 2, 3), start).expect("config");
            (a, b)
        };
        let (mut a, mut b) = new_pair();
        let first = transcript(&mut a, &mut b, start);
        assert!(
            first.iter().any(|l| l.contains("Completion")),
            "the exchange completes transactions"
        );
        assert_ne!(a.stats().tx_frames, 0);

        // The same engines after their run, and once more after a run that
        // left a connection with state (and the clock well past `start`).
        a.reset(start);
        b.reset(start);
        assert_eq!(transcript(&mut a, &mut b, start), first);
        let later = start + Duration::from_secs(1);
        let (mut c, mut d) = new_pair();
        let _ = connect(later, &mut c, &mut d, &PairSpec::default()).expect("connect");
        c.reset(start);
        d.reset(start);
        assert_eq!(transcript(&mut c, &mut d, start), first);

        // And the same transcript from engines built anew.
        let (mut e, mut f) = new_pair();
        assert_eq!(transcript(&mut e, &mut f, start), first);
    }
}
