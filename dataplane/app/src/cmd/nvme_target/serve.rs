//! The target's datapath loop and its connection manager: initiators come
//! and go while the loop turns.
//!
//! Layer: application. Owns the sessions (one per initiator's control
//! channel), the [`Serving`] ULP (the [`Target`] and the connections whose
//! Falcon connection failed), the loop that turns the lcore, polls the
//! sessions every millisecond and prints a stats line a second. Never
//! blocks the loop on a peer: the listener and the channels are polled
//! without waiting, a message is one short line, and a send that finds no
//! room for a second ends that session (`cm::Channel::send`).
//!
//! A session's life: accepted → its initiator's offer (within the setup
//! timeout) → a connection: the UDP port learns the initiator's socket,
//! the engine adds the connection (unordered, NVMe, PSP as the node), and
//! the target's offer goes back with the namespaces. It ends when the
//! channel closes (`Done`: the initiator finished; anything else: lost) or
//! when the Falcon connection fails: the target aborts the connection's
//! tCMDs, the engine closes it (its transactions complete as dead), the
//! port forgets the peer.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use falcon_core::api::{
    Clock, ConnectionHandle, ConnectionId, Engine, EthernetAddress, Lcore, OrderingMode, PacketBuf,
    Port, Timestamp, Ulp, UlpEvent,
};
use falcon_core::wire::ProtocolType;
use nvme_ulp::data::NvmeData;
use nvme_ulp::target::Target;
use psp::Version;

use super::report::{self, ConnectionCounts, NamespaceReport, Report};
use crate::cli::NvmeTargetArgs;
use crate::cm::{self, Channel, Local, Message, NamespaceOffer, Offer, OfferPort};
use crate::error::Result;
use crate::nvmecfg::Plan;
use crate::udp::UdpPort;

/// How often the sessions are polled.
const CONTROL_POLL: Duration = Duration::from_millis(1);
/// With no initiator connected, the loop sleeps this long between polls of
/// the listener (nothing else can happen).
const IDLE_WITHOUT_SESSIONS: Duration = Duration::from_millis(1);
/// With nothing in flight for this long, the loop naps between turns...
const IDLE_BEFORE_NAPS: Duration = Duration::from_millis(2);
/// ...this long: the first request after a quiet spell waits at most a
/// nap (and the scheduler's wake-up) more, and an idle target gives its
/// CPU back.
const NAP: Duration = Duration::from_micros(50);

/// The [`Target`] as the lcore's ULP, noting the connections whose Falcon
/// connection failed for the session layer to close.
pub struct Serving {
    pub target: Target,
    failed: Vec<(ConnectionHandle, String)>,
}

impl Serving {
    pub fn new(target: Target) -> Serving {
        Serving {
            target,
            failed: Vec::new(),
        }
    }
}

impl<B: PacketBuf> Ulp<B, NvmeData> for Serving {
    fn submit(&mut self, now: Timestamp, engine: &mut Engine<B, NvmeData>) {
        self.target.submit(now, engine);
    }

    fn on_event(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        event: UlpEvent<B, NvmeData>,
    ) {
        if let UlpEvent::ConnectionError { connection, fault } = &event {
            if fault.is_fatal() {
                self.failed.push((*connection, format!("{fault:?}")));
            }
        }
        self.target.on_event(now, engine, event);
    }
}

/// What a served port does besides carrying frames and learning peers.
pub trait ServedPort: Port<Buf: std::fmt::Debug> + OfferPort {
    /// Frames received and sent.
    fn frames(&self) -> (u64, u64);
    /// The port's own counters, into the report.
    fn report_into(&self, report: &mut Report);
}

impl ServedPort for UdpPort {
    fn frames(&self) -> (u64, u64) {
        let s = self.stats();
        (s.rx_datagrams, s.tx_datagrams)
    }

    fn report_into(&self, report: &mut Report) {
        report.udp = Some(self.stats());
    }
}

/// One initiator's control channel.
struct Session {
    /// For the log lines: `#N from ADDR`.
    id: u64,
    channel: Channel,
    accepted: Instant,
    connection: Option<Connected>,
}

#[derive(Debug, Clone, Copy)]
struct Connected {
    handle: ConnectionHandle,
    cid: ConnectionId,
    /// The port's name for the peer, to forget it.
    socket: Option<SocketAddr>,
    /// The initiator's engine address.
    ip: IpAddr,
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The initiator said it was done.
    Done,
    /// The channel closed or broke, or never got an offer.
    Lost,
    /// The Falcon connection failed.
    Failed,
    /// Its offer could not be served.
    Refused,
    /// The target is stopping.
    Stopping,
}

/// The connection manager: the listener and the sessions.
pub struct Sessions {
    listener: TcpListener,
    sessions: Vec<Session>,
    next_id: u64,
    next_cid: u32,
    setup_timeout: Duration,
    /// What every offer of this node carries.
    local: Local,
    udp: Option<SocketAddr>,
    namespaces: Vec<NamespaceOffer>,
    /// The target takes our vendor Command Requests (Flush).
    vendor_commands: bool,
    counts: ConnectionCounts,
}

impl Sessions {
    /// Sessions on `listener` for the node of `plan` (engine MAC `mac`,
    /// UDP socket `udp` when the port is one) exporting `namespaces`.
    pub fn new(
        listener: TcpListener,
        plan: &Plan,
        mac: EthernetAddress,
        udp: Option<SocketAddr>,
        namespaces: &[NamespaceReport],
    ) -> Sessions {
        Sessions {
            listener,
            sessions: Vec::new(),
            next_id: 1,
            next_cid: 1,
            setup_timeout: plan.setup_timeout,
            local: Local {
                role: "target",
                cid: ConnectionId::truncating(0),
                ip: plan.ip,
                mac,
                function: plan.function,
                version: plan.psp.as_ref().map_or(Version::Aes128Gcm, |p| p.version),
                workload: "nvme-target".into(),
                // NVMe-0.9 §7: NVMe connections are unordered.
                ordering: OrderingMode::Unordered,
            },
            udp,
            namespaces: namespaces
                .iter()
                .map(|n| NamespaceOffer {
                    nsid: n.nsid,
                    blocks: n.blocks,
                    lba_size: n.lba_size,
                    metadata: n.metadata,
                    protection: n.protection.clone(),
                    sqid: n.sqid,
                })
                .collect(),
            vendor_commands: plan.target.vendor_commands,
            counts: ConnectionCounts::default(),
        }
    }

    /// Connected initiators.
    pub fn connected(&self) -> usize {
        self.sessions
            .iter()
            .filter(|s| s.connection.is_some())
            .count()
    }

    /// Accepts who came, reads what they sent, ends what is over.
    fn poll<P: ServedPort, C: Clock>(
        &mut self,
        lcore: &mut Lcore<P, C, NvmeData>,
        serving: &mut Serving,
    ) {
        let now = lcore.clock.now();
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => match Channel::from_stream(stream, peer) {
                    Ok(channel) => {
                        self.sessions.push(Session {
                            id: self.next_id,
                            channel,
                            accepted: Instant::now(),
                            connection: None,
                        });
                        self.next_id += 1;
                    }
                    Err(e) => eprintln!("nvme-target: control: {e}"),
                },
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    eprintln!("nvme-target: control: accept: {e}");
                    break;
                }
            }
        }
        // Falcon connections that failed end their sessions.
        for (handle, fault) in std::mem::take(&mut serving.failed) {
            if let Some(i) = self
                .sessions
                .iter()
                .position(|s| s.connection.is_some_and(|c| c.handle == handle))
            {
                let reason = format!("its Falcon connection failed ({fault})");
                let _ = self.sessions[i].channel.send(&Message::Abort {
                    reason: reason.clone(),
                });
                self.end(i, End::Failed, &reason, now, lcore, serving);
            }
        }
        let mut i = 0;
        while i < self.sessions.len() {
            match self.sessions[i].channel.try_recv() {
                Ok(None) => {
                    let s = &self.sessions[i];
                    if s.connection.is_none() && s.accepted.elapsed() > self.setup_timeout {
                        let reason = format!("no offer within {:?}", self.setup_timeout);
                        self.end(i, End::Lost, &reason, now, lcore, serving);
                        continue;
                    }
                }
                Ok(Some(Message::Offer(theirs))) if self.sessions[i].connection.is_none() => {
                    if let Some(old) = self.replaced_by(i, &theirs) {
                        let reason = "replaced by its new offer";
                        self.end(old, End::Lost, reason, now, lcore, serving);
                        if old < i {
                            i -= 1;
                        }
                    }
                    match self.connect(i, &theirs, now, lcore) {
                        Ok(()) => {}
                        Err(reason) => {
                            let _ = self.sessions[i].channel.send(&Message::Abort {
                                reason: reason.clone(),
                            });
                            self.end(i, End::Refused, &reason, now, lcore, serving);
                            continue;
                        }
                    }
                }
                Ok(Some(Message::Done { .. })) => {
                    let _ = self.sessions[i].channel.send(&Message::Done {
                        report: serde_json::Value::Null,
                    });
                    self.end(i, End::Done, "done", now, lcore, serving);
                    continue;
                }
                Ok(Some(Message::Abort { reason })) => {
                    let reason = format!("the initiator gave up: {reason}");
                    self.end(i, End::Lost, &reason, now, lcore, serving);
                    continue;
                }
                Ok(Some(other)) => {
                    let reason = format!("unexpected {other:?}");
                    self.end(i, End::Lost, &reason, now, lcore, serving);
                    continue;
                }
                Err(reason) => {
                    self.end(i, End::Lost, &reason, now, lcore, serving);
                    continue;
                }
            }
            i += 1;
        }
    }

    /// Serves session `i`'s offer: the peer learnt, the connection added,
    /// the target's offer sent.
    fn connect<P: ServedPort, C: Clock>(
        &mut self,
        i: usize,
        theirs: &Offer,
        now: Timestamp,
        lcore: &mut Lcore<P, C, NvmeData>,
    ) -> std::result::Result<(), String> {
        if theirs.role != "initiator" {
            return Err(format!(
                "connection manager: the peer offers as {}, an NVMe target serves initiators",
                theirs.role
            ));
        }
        let channel_peer = self.sessions[i].channel.peer().ip();
        let cid = self.free_cid(&lcore.engine)?;
        let learnt = lcore.port.learn_peer(theirs, channel_peer)?;
        let local = Local {
            cid,
            ..self.local.clone()
        };
        let result = cm::offer(&mut lcore.engine, &local, None).and_then(|ours| {
            let ours = Offer {
                udp: self.udp,
                namespaces: Some(self.namespaces.clone()),
                vendor_commands: self.vendor_commands,
                ..ours.with_protocol(ProtocolType::Nvme)
            };
            let handle = cm::add_connection(now, &mut lcore.engine, &ours, theirs)?;
            Ok((ours, handle))
        });
        let (ours, handle) = match result {
            Ok(done) => done,
            Err(e) => {
                if let Some(socket) = learnt {
                    lcore.port.forget_peer(socket);
                }
                return Err(e);
            }
        };
        let session = &mut self.sessions[i];
        session.connection = Some(Connected {
            handle,
            cid,
            socket: learnt,
            ip: theirs.ip,
        });
        self.counts.accepted += 1;
        eprintln!(
            "nvme-target: initiator #{} from {} connected: connection id {} (theirs {}), udp {}",
            session.id,
            session.channel.peer(),
            cid.value(),
            theirs.cid,
            learnt.map_or_else(|| "-".to_string(), |s| s.to_string())
        );
        // The initiator adds its end when this arrives; a send that fails
        // is a lost channel, seen on the next poll.
        let _ = session.channel.send(&Message::Offer(ours));
        Ok(())
    }

    /// The connected session whose initiator offers again on session `i`:
    /// the same engine address and UDP socket, reconnecting before its old
    /// channel was seen closed. Its old connection is dead to it.
    fn replaced_by(&self, i: usize, theirs: &Offer) -> Option<usize> {
        let socket = cm::udp_socket(theirs, self.sessions[i].channel.peer().ip())?;
        self.sessions.iter().position(|s| {
            s.connection
                .is_some_and(|c| c.ip == theirs.ip && c.socket == Some(socket))
        })
    }

    /// A local connection id no connection of `engine` has.
    fn free_cid<B: PacketBuf>(
        &mut self,
        engine: &Engine<B, NvmeData>,
    ) -> std::result::Result<ConnectionId, String> {
        for _ in 0..=ConnectionId::MAX.value() {
            let cid = ConnectionId::truncating(self.next_cid);
            self.next_cid = (self.next_cid + 1) & ConnectionId::MAX.value();
            if cid.value() != 0 && engine.connection(cid).is_none() {
                return Ok(cid);
            }
        }
        Err("connection manager: no free connection id".into())
    }

    /// Ends session `i`: its connection closed (tCMDs aborted, the
    /// engine's end closed, the peer forgotten), the session dropped.
    fn end<P: ServedPort, C: Clock>(
        &mut self,
        i: usize,
        end: End,
        reason: &str,
        now: Timestamp,
        lcore: &mut Lcore<P, C, NvmeData>,
        serving: &mut Serving,
    ) {
        let session = self.sessions.remove(i);
        match end {
            End::Done => self.counts.closed += 1,
            End::Lost if session.connection.is_some() => self.counts.lost += 1,
            End::Lost => {}
            End::Failed => self.counts.failed += 1,
            End::Refused => self.counts.refused += 1,
            End::Stopping => {}
        }
        let Some(c) = session.connection else {
            eprintln!(
                "nvme-target: initiator #{} from {}: {reason}",
                session.id,
                session.channel.peer()
            );
            return;
        };
        // The target first: its tCMDs of the connection and what they
        // queued go, so nothing is sent on a closed connection.
        serving.target.handle_connection_closed(c.handle);
        lcore.engine.close(now, c.handle);
        if let Some(socket) = c.socket {
            lcore.port.forget_peer(socket);
        }
        eprintln!(
            "nvme-target: initiator #{} from {} (connection id {}) {}: {reason}",
            session.id,
            session.channel.peer(),
            c.cid.value(),
            match end {
                End::Done => "closed",
                End::Failed => "failed",
                End::Stopping => "stopped",
                End::Lost | End::Refused => "lost",
            }
        );
    }

    /// Ends every session (the target is stopping).
    fn end_all<P: ServedPort, C: Clock>(
        &mut self,
        lcore: &mut Lcore<P, C, NvmeData>,
        serving: &mut Serving,
    ) {
        let now = lcore.clock.now();
        while !self.sessions.is_empty() {
            let _ = self.sessions[0].channel.send(&Message::Abort {
                reason: "the target is stopping".into(),
            });
            self.end(
                0,
                End::Stopping,
                "the target is stopping",
                now,
                lcore,
                serving,
            );
        }
    }
}

/// Turns the loop until a signal or the duration; the final figures.
///
/// # Errors
///
/// None so far: a failing initiator ends its session, not the target.
pub fn serve<P: ServedPort, C: Clock>(
    args: &NvmeTargetArgs,
    plan: &Plan,
    mut lcore: Lcore<P, C, NvmeData>,
    mut serving: Serving,
    mut sessions: Sessions,
    namespaces: Vec<NamespaceReport>,
    signalled: Arc<AtomicBool>,
) -> Result<Report> {
    let start = Instant::now();
    let deadline = args.duration.map(|d| start + Duration::from_secs_f64(d));
    let mut next_control = start;
    let mut next_line = start + Duration::from_secs(1);
    let mut last_line = (start, report::Progress::default());
    let mut busy_at = start;
    let stopped_by = loop {
        let turn = lcore.turn(&mut serving);
        let in_flight = serving.target.tcmds() > 0 || serving.target.io_in_flight() > 0;
        let t = Instant::now();
        if !turn.is_idle() || in_flight {
            busy_at = t;
        }
        if t < next_control && (lcore.turns % 16 != 0) {
            continue;
        }
        if t >= next_control {
            next_control = t + CONTROL_POLL;
            sessions.poll(&mut lcore, &mut serving);
            if signalled.load(Ordering::Relaxed) {
                break "signal";
            }
            if deadline.is_some_and(|d| t >= d) {
                break "duration";
            }
        }
        if t >= next_line {
            let now = report::Progress::of(&serving.target, &sessions, lcore.engine.stats());
            if !args.quiet {
                report::stats_line(t - start, now, last_line.1, (t - last_line.0).as_secs_f64());
            }
            last_line = (t, now);
            next_line += Duration::from_secs(1);
        }
        if sessions.sessions.is_empty() && !in_flight {
            std::thread::sleep(IDLE_WITHOUT_SESSIONS);
        } else if t - busy_at > IDLE_BEFORE_NAPS {
            std::thread::sleep(NAP);
        }
    };
    sessions.counts.at_stop = sessions.connected() as u64;
    sessions.end_all(&mut lcore, &mut serving);
    // The closes' dead completions reach the target.
    for _ in 0..4 {
        lcore.turn(&mut serving);
    }
    let seconds = start.elapsed().as_secs_f64();
    let mut report = report::final_report(
        args,
        plan,
        &lcore,
        &serving.target,
        sessions.counts,
        namespaces,
        seconds,
        stopped_by,
    );
    lcore.port.report_into(&mut report);
    // The workers finish their queues; file namespaces reach the disk.
    for mut namespace in serving.target.shutdown() {
        if let Err(status) = namespace.flush() {
            eprintln!(
                "nvme-target: namespace {}: flush at stop failed: {status:?}",
                namespace.nsid()
            );
            report.flush_failures += 1;
        }
    }
    Ok(report)
}
