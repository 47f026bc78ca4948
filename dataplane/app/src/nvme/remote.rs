//! An NVMe-over-Falcon initiator whose target is another process
//! (`falcon nvme-target`): what `falcon nvme-perf --connect` drives.
//!
//! Layer: application. Owns the initiator's side of a remote pair: its
//! engine (PSP on, Swift set for the host's network stack as `falcon
//! node`'s) on a kernel UDP socket of its own ([`RemoteInitiator::connect`])
//! or on another port, a DPDK one ([`RemoteInitiator::connect_on`]), the
//! [`Initiator`] ULP, the control channel to the target's connection
//! manager ([`crate::cm`]) and the connection's life. It learns everything from the target's offer:
//! the target's engine and UDP addresses, and the namespaces (NSID,
//! blocks, LBA format, SQID), from which it builds the LBA translation
//! tables (NVMe-0.9 §6.6.2: one row per 1 GiB chunk, initiator NSID =
//! target NSID, one connection). Never blocks a turn while connected; a
//! (re)connection attempt blocks for its exchange only, when nothing is in
//! flight.
//!
//! # Losing the target
//!
//! When the control channel drops (the target process died, the target
//! ended the session) or the Falcon connection fails, every outstanding
//! iCMD completes with Transient Transport Error ([`Status`] SCT 0, SC
//! 22h) through [`NvmeDevice::poll_completion`]: reported, never lost. The
//! connection is closed in the engine, the port forgets the target, and
//! the initiator reconnects by itself: attempts with a doubling backoff
//! (from 10 ms to 1 s) until the configured deadline, after which it stays
//! disconnected. While it is down, [`NvmeDevice::submit`] refuses with
//! [`SubmitRefusal::Reconnecting`] (or [`SubmitRefusal::Disconnected`]
//! after the deadline), naming why it went down. A target that comes back
//! must export the namespace in the same format; one that does not is
//! refused as the connection is set up.
//!
//! [`Status`]: nvme_ulp::Status

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use falcon_core::api::{
    Clock, ConnectionHandle, ConnectionId, DeliveryConfig, DestinationFunction, Engine,
    EngineConfig, EthernetAddress, Lcore, OrderingMode, PacketBuf, Port, PspConfig, SystemClock,
    Timestamp, Ulp, UlpEvent,
};
use falcon_core::testing::FaultStats;
use falcon_core::wire::ProtocolType;
use nvme_ulp::data::NvmeData;
use nvme_ulp::initiator::{
    Icmd, IcmdCompletion, Initiator, InitiatorConfig, NamespaceSpec, PiPolicy,
};
use nvme_ulp::layout::{Format, LbaSize, MetadataSize};
use nvme_ulp::lba::{self, LbaRow, TranslationTables};
use psp::Version;

use super::{DeviceStats, NvmeDevice, SubmitError, SubmitRefusal};
use crate::cm::{self, Channel, Local, Message, NamespaceOffer, Offer, OfferPort};
use crate::error::{AppError, Result};
use crate::udp::{UdpPort, UdpPortConfig};

/// Bytes an LBA table row covers (chunk shift 0: 1 GiB, NVMe-0.9 §6.6.1).
const CHUNK_BYTES: u64 = 1 << 30;
/// How often the control channel is read while connected.
const CONTROL_POLL: Duration = Duration::from_millis(1);
/// The first wait before a reconnection attempt, and the longest.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How long one reconnection attempt waits for the TCP connection.
const CONNECT_ATTEMPT: Duration = Duration::from_millis(200);
/// After the last completion, how long [`RemoteInitiator::close`] keeps
/// turning so the target's last pushes get their ACKs before it says done.
const LINGER: Duration = Duration::from_millis(20);

/// How a [`RemoteInitiator`] is set up.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// The target's connection manager (`node.control` of its file).
    pub control: SocketAddr,
    /// This initiator's UDP socket (port 0: any free one; an unspecified
    /// IP: the target sends to the address the control channel comes
    /// from).
    pub bind: SocketAddr,
    /// The namespace the device shows (a Target NSID the target offers).
    pub nsid: u32,
    /// iCMDs outstanding at most.
    pub queue_depth: usize,
    pub icmd_timeout: Duration,
    /// PSP on the connection (the target's `[psp] enabled` must agree).
    pub psp: bool,
    /// UDP segmentation offload.
    pub offload: bool,
    /// Swift's base target delay and the least retransmit timeout, µs
    /// (`falcon node`'s flags of the same names).
    pub target_delay_us: f64,
    pub min_rto_us: f64,
    /// How long the first connection may take (the target may still be
    /// starting), and one exchange of offers.
    pub setup_timeout: Duration,
    /// How long to keep trying to reconnect once the target is lost.
    pub reconnect_deadline: Duration,
}

impl RemoteConfig {
    /// Defaults for the target at `control`: any UDP port, NSID 1, QD 128,
    /// PSP on, the node's Swift and RTO, 10 s to set up or reconnect.
    pub fn new(control: SocketAddr) -> RemoteConfig {
        RemoteConfig {
            control,
            bind: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            nsid: 1,
            queue_depth: 128,
            icmd_timeout: Duration::from_secs(30),
            psp: true,
            offload: true,
            target_delay_us: crate::cli::NODE_TARGET_DELAY_US,
            min_rto_us: crate::cli::NODE_MIN_RTO_US,
            setup_timeout: Duration::from_secs(10),
            reconnect_deadline: Duration::from_secs(10),
        }
    }
}

/// The [`Initiator`] as the lcore's ULP, noting connections that failed.
#[derive(Debug)]
struct Initiating {
    initiator: Initiator,
    failed: Vec<ConnectionHandle>,
}

impl<B: PacketBuf> Ulp<B, NvmeData> for Initiating {
    fn submit(&mut self, now: Timestamp, engine: &mut Engine<B, NvmeData>) {
        Ulp::<B, NvmeData>::submit(&mut self.initiator, now, engine);
    }

    fn on_event(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        event: UlpEvent<B, NvmeData>,
    ) {
        if let UlpEvent::ConnectionError { connection, fault } = &event {
            if fault.is_fatal() {
                self.failed.push(*connection);
            }
        }
        self.initiator.on_event(now, engine, event);
    }
}

/// Where the connection to the target stands.
#[derive(Debug)]
enum State {
    Connected(Link),
    /// Down since `since`; the next attempt at `next_attempt`.
    Reconnecting {
        since: Instant,
        reason: String,
        next_attempt: Instant,
        backoff: Duration,
    },
    /// Down for good.
    Disconnected {
        reason: String,
    },
}

/// A live connection to the target.
#[derive(Debug)]
struct Link {
    channel: Channel,
    connection: ConnectionHandle,
    cid: ConnectionId,
    /// The port's name for the target, when it keeps a peer table.
    target_udp: Option<SocketAddr>,
}

/// The initiator's engine addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineAddress {
    pub ip: IpAddr,
    pub mac: EthernetAddress,
}

/// An initiator connected to a remote target (see the module doc), over
/// a port of type `P` (the kernel UDP port, or a DPDK port).
pub struct RemoteInitiator<P: Port + OfferPort = UdpPort, C: Clock = SystemClock> {
    config: RemoteConfig,
    address: EngineAddress,
    lcore: Lcore<P, C, NvmeData>,
    ulp: Initiating,
    state: State,
    /// The namespaces as first offered: a reconnection must find them so.
    namespaces: Vec<NamespaceOffer>,
    format: Format,
    blocks: u64,
    next_cid: u32,
    next_control: Instant,
    connects: u64,
    disconnects: u64,
    target_control: SocketAddr,
    /// The target takes NVMe Flush (our vendor Command Request).
    takes_flush: bool,
}

impl<P: Port + OfferPort, C: Clock> std::fmt::Debug for RemoteInitiator<P, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteInitiator")
            .field("control", &self.config.control)
            .field("state", &self.state)
            .field("outstanding", &self.ulp.initiator.outstanding())
            .finish()
    }
}

impl EngineAddress {
    /// The engine address of an initiator on UDP socket `udp`: 10.1.P.P for
    /// port P. The target's UDP port routes its frames by engine address,
    /// so every initiator of a target needs its own: two initiators on one
    /// host have different ports.
    pub fn of_udp(udp: SocketAddr) -> EngineAddress {
        let [hi, lo] = udp.port().to_be_bytes();
        EngineAddress {
            ip: IpAddr::from([10, 1, hi, lo]),
            mac: EthernetAddress([2, 0, 0, 1, hi, lo]),
        }
    }
}

impl RemoteInitiator {
    /// Binds the UDP socket, connects to the target (retrying while it
    /// starts, up to `setup_timeout`) and builds the initiator from its
    /// namespaces.
    ///
    /// # Errors
    ///
    /// [`AppError::Usage`] for an unusable bind address or an NSID the
    /// target does not offer; [`AppError::Failed`] when the target cannot
    /// be reached or refuses the connection (its reason named).
    pub fn connect(config: RemoteConfig) -> Result<RemoteInitiator> {
        let failed = |e: String| AppError::Failed(format!("nvme initiator: {e}"));
        let socket = UdpSocket::bind(config.bind)
            .map_err(|e| AppError::Usage(format!("--bind {}: {e}", config.bind)))?;
        let udp = socket.local_addr().map_err(|e| failed(e.to_string()))?;
        let address = EngineAddress::of_udp(udp);
        let mut clock = SystemClock::new();
        let engine = engine(&config, address, None, clock.now())?;
        let port_config = UdpPortConfig {
            offload: config.offload,
            ..UdpPortConfig::new(address.ip, address.mac, engine.max_frame_len())
        };
        let port = UdpPort::new(socket, &[], port_config).map_err(failed)?;
        RemoteInitiator::start(config, address, Lcore::new(engine, port, clock))
    }
}

impl<P: Port + OfferPort, C: Clock> RemoteInitiator<P, C> {
    /// As [`connect`](RemoteInitiator::connect), on `port` (a DPDK port:
    /// frames up to `max_frame` bytes, the target's `port.max_frame`)
    /// timed by `clock`, the engine at `address`.
    ///
    /// # Errors
    ///
    /// As [`connect`](RemoteInitiator::connect).
    pub fn connect_on(
        config: RemoteConfig,
        port: P,
        mut clock: C,
        address: EngineAddress,
        max_frame: usize,
    ) -> Result<RemoteInitiator<P, C>> {
        let engine = engine(&config, address, Some(max_frame), clock.now())?;
        RemoteInitiator::start(config, address, Lcore::new(engine, port, clock))
    }

    /// The first connection, and the initiator built from its namespaces.
    fn start(
        config: RemoteConfig,
        address: EngineAddress,
        mut lcore: Lcore<P, C, NvmeData>,
    ) -> Result<RemoteInitiator<P, C>> {
        let failed = |e: String| AppError::Failed(format!("nvme initiator: {e}"));
        let channel = Channel::connect(config.control, config.setup_timeout).map_err(failed)?;
        let cid = ConnectionId::truncating(0x10);
        let (link, theirs) = set_up(&config, address, &mut lcore, channel, cid).map_err(failed)?;
        let namespaces = theirs.namespaces.clone().unwrap_or_default();
        let Some(chosen) = namespaces.iter().find(|n| u32::from(n.nsid) == config.nsid) else {
            let offered: Vec<String> = namespaces.iter().map(|n| n.nsid.to_string()).collect();
            let mut link = link;
            let _ = link.channel.send(&Message::Abort {
                reason: format!("no namespace {}", config.nsid),
            });
            return Err(AppError::Usage(format!(
                "--nsid {}: the target at {} exports namespaces {}",
                config.nsid,
                config.control,
                if offered.is_empty() {
                    "none".to_string()
                } else {
                    offered.join(", ")
                }
            )));
        };
        let format = format_of(chosen).map_err(failed)?;
        let blocks = chosen.blocks;
        let takes_flush = theirs.vendor_commands;
        let initiator = initiator(&config, &namespaces, takes_flush, link.cid).map_err(failed)?;
        let target_control = link.channel.peer();
        Ok(RemoteInitiator {
            config,
            address,
            lcore,
            ulp: Initiating {
                initiator,
                failed: Vec::new(),
            },
            state: State::Connected(link),
            namespaces,
            format,
            blocks,
            next_cid: 0x11,
            next_control: Instant::now(),
            connects: 1,
            disconnects: 0,
            target_control,
            takes_flush,
        })
    }

    /// Whether the connection to the target is up.
    pub fn is_connected(&self) -> bool {
        matches!(self.state, State::Connected(_))
    }

    /// Whether the target takes NVMe Flush (its offer's `vendor_commands`,
    /// ulp.md §3.9): without it [`NvmeDevice::flush`] is refused.
    pub fn takes_flush(&self) -> bool {
        self.takes_flush
    }

    /// Connections set up so far (the first one included).
    pub fn connects(&self) -> u64 {
        self.connects
    }

    /// The target's offered namespaces.
    pub fn namespaces(&self) -> &[NamespaceOffer] {
        &self.namespaces
    }

    /// The UDP socket frames go out of (the UDP port).
    pub fn local_udp(&self) -> Option<SocketAddr> {
        self.lcore.port.local_udp()
    }

    /// Ends the session cleanly: outstanding commands are waited for (up
    /// to `timeout`), the target's last pushes get their ACKs, the target
    /// is told and the connection closed.
    pub fn close(&mut self, timeout: Duration) {
        let start = Instant::now();
        while self.ulp.initiator.outstanding() > 0 && start.elapsed() < timeout {
            self.turn();
        }
        let linger = Instant::now();
        while linger.elapsed() < LINGER {
            self.lcore.turn(&mut self.ulp);
        }
        if let State::Connected(mut link) = std::mem::replace(
            &mut self.state,
            State::Disconnected {
                reason: "closed".into(),
            },
        ) {
            let done = Message::Done {
                report: serde_json::Value::Null,
            };
            if link.channel.send(&done).is_ok() {
                let _ = link.channel.recv(Duration::from_secs(1));
            }
            let now = self.lcore.clock.now();
            self.ulp
                .initiator
                .handle_connection_closed(now, link.connection);
            self.lcore.engine.close(now, link.connection);
            if let Some(socket) = link.target_udp {
                self.lcore.port.forget_peer(socket);
            }
        }
    }

    /// Drops the connection: outstanding iCMDs fail with Transient
    /// Transport Error, the engine's end closes, the port forgets the
    /// target; reconnection starts.
    fn lose(&mut self, reason: String) {
        let State::Connected(mut link) = std::mem::replace(
            &mut self.state,
            State::Disconnected {
                reason: String::new(),
            },
        ) else {
            return;
        };
        let _ = link.channel.send(&Message::Abort {
            reason: reason.clone(),
        });
        let now = self.lcore.clock.now();
        self.ulp
            .initiator
            .handle_connection_closed(now, link.connection);
        self.lcore.engine.close(now, link.connection);
        let _ = self.ulp.initiator.tables_mut().set_connection(0, None);
        if let Some(socket) = link.target_udp {
            self.lcore.port.forget_peer(socket);
        }
        self.disconnects += 1;
        let at = Instant::now();
        eprintln!(
            "nvme initiator: lost the target at {} ({reason}); reconnecting for up to {:?}",
            self.target_control, self.config.reconnect_deadline
        );
        self.state = State::Reconnecting {
            since: at,
            reason,
            next_attempt: at + FIRST_BACKOFF,
            backoff: FIRST_BACKOFF,
        };
    }

    /// One reconnection attempt, when it is due.
    fn reconnect(&mut self) {
        let State::Reconnecting {
            since,
            reason,
            next_attempt,
            backoff,
        } = &self.state
        else {
            return;
        };
        let now = Instant::now();
        if now < *next_attempt {
            return;
        }
        let (since, backoff, reason) = (*since, *backoff, reason.clone());
        let attempt = Channel::connect(self.config.control, CONNECT_ATTEMPT).and_then(|channel| {
            let cid = ConnectionId::truncating(self.next_cid);
            self.next_cid = (self.next_cid + 1) & ConnectionId::MAX.value();
            let (link, theirs) = set_up(&self.config, self.address, &mut self.lcore, channel, cid)?;
            if let Err(e) = self.same_namespaces(&theirs) {
                if let Some(socket) = link.target_udp {
                    self.lcore.port.forget_peer(socket);
                }
                let now = self.lcore.clock.now();
                self.lcore.engine.close(now, link.connection);
                return Err(e);
            }
            Ok(link)
        });
        match attempt {
            Ok(link) => {
                let tables = self.ulp.initiator.tables_mut();
                if let Err(e) = tables.set_connection(0, Some(link.cid)) {
                    self.state = State::Disconnected {
                        reason: format!("translation tables: {e}"),
                    };
                    return;
                }
                eprintln!(
                    "nvme initiator: reconnected to {} after {:.2} s (connection id {})",
                    self.config.control,
                    since.elapsed().as_secs_f64(),
                    link.cid.value()
                );
                self.connects += 1;
                self.state = State::Connected(link);
            }
            Err(e) if since.elapsed() + backoff > self.config.reconnect_deadline => {
                self.state = State::Disconnected {
                    reason: format!(
                        "{reason}; no reconnection within {:?} (last attempt: {e})",
                        self.config.reconnect_deadline
                    ),
                };
            }
            Err(_) => {
                let backoff = (backoff * 2).min(MAX_BACKOFF);
                if let State::Reconnecting {
                    next_attempt,
                    backoff: b,
                    ..
                } = &mut self.state
                {
                    *next_attempt = Instant::now() + backoff;
                    *b = backoff;
                }
            }
        }
    }

    /// The namespace this device shows is offered again, in the same format.
    fn same_namespaces(&self, theirs: &Offer) -> std::result::Result<(), String> {
        let offered = theirs.namespaces.as_deref().unwrap_or_default();
        let chosen = self
            .namespaces
            .iter()
            .find(|n| u32::from(n.nsid) == self.config.nsid);
        let again = offered
            .iter()
            .find(|n| u32::from(n.nsid) == self.config.nsid);
        match (chosen, again) {
            (Some(a), Some(b)) if a == b => Ok(()),
            (_, None) => Err(format!(
                "the target no longer exports namespace {}",
                self.config.nsid
            )),
            (_, Some(b)) => Err(format!(
                "the target's namespace {} changed: now {} blocks of {} + {} B, protection {}, SQID {}",
                b.nsid, b.blocks, b.lba_size, b.metadata, b.protection, b.sqid
            )),
        }
    }

    /// Reads the control channel; ends the connection on a drop, an abort
    /// or a failed Falcon connection.
    fn watch(&mut self) {
        let failed = std::mem::take(&mut self.ulp.failed);
        let State::Connected(link) = &mut self.state else {
            return;
        };
        if failed.contains(&link.connection) {
            self.lose("its Falcon connection failed".into());
            return;
        }
        match link.channel.try_recv() {
            Ok(None) => {}
            Ok(Some(Message::Abort { reason })) => {
                self.lose(format!("the target ended the session: {reason}"));
            }
            Ok(Some(_)) => {}
            Err(e) => self.lose(e),
        }
    }
}

impl<P: Port + OfferPort, C: Clock> NvmeDevice for RemoteInitiator<P, C> {
    fn submit(&mut self, icmd: Icmd) -> std::result::Result<(), SubmitError> {
        match &self.state {
            State::Connected(_) => {
                let now = self.lcore.clock.now();
                self.ulp
                    .initiator
                    .submit_icmd(now, icmd)
                    .map_err(SubmitError::from)
            }
            State::Reconnecting { reason, .. } => Err(SubmitError {
                reason: SubmitRefusal::Reconnecting(reason.clone()),
                icmd,
            }),
            State::Disconnected { reason } => Err(SubmitError {
                reason: SubmitRefusal::Disconnected(reason.clone()),
                icmd,
            }),
        }
    }

    fn flush(&mut self, tag: u64) -> std::result::Result<(), SubmitRefusal> {
        match &self.state {
            State::Connected(_) => {
                let now = self.lcore.clock.now();
                let nsid = self.config.nsid;
                self.ulp
                    .initiator
                    .submit_flush(now, tag, nsid)
                    .map_err(SubmitRefusal::Initiator)
            }
            State::Reconnecting { reason, .. } => Err(SubmitRefusal::Reconnecting(reason.clone())),
            State::Disconnected { reason } => Err(SubmitRefusal::Disconnected(reason.clone())),
        }
    }

    fn poll_completion(&mut self) -> Option<IcmdCompletion> {
        self.ulp.initiator.poll_completion()
    }

    fn turn(&mut self) -> bool {
        let busy = !self.lcore.turn(&mut self.ulp).is_idle();
        let now = Instant::now();
        if now >= self.next_control || !self.ulp.failed.is_empty() {
            self.next_control = now + CONTROL_POLL;
            match self.state {
                State::Connected(_) => self.watch(),
                State::Reconnecting { .. } => self.reconnect(),
                State::Disconnected { .. } => {}
            }
        }
        busy
    }

    fn outstanding(&self) -> usize {
        self.ulp.initiator.outstanding()
    }

    fn has_room(&self) -> bool {
        self.ulp.initiator.outstanding() < self.ulp.initiator.config().queue_depth
    }

    fn stats(&self) -> DeviceStats {
        let e = self.lcore.engine.stats();
        DeviceStats {
            initiator: *self.ulp.initiator.stats(),
            target: None,
            retransmissions: e.retransmissions,
            drops: e.drops.clone(),
            rnr_nacks: e.transactions.rnr_received,
            faults: FaultStats::default(),
            connects: self.connects,
            disconnects: self.disconnects,
        }
    }

    fn format(&self) -> Format {
        self.format
    }

    fn blocks(&self) -> u64 {
        self.blocks
    }

    fn nsid(&self) -> u32 {
        self.config.nsid
    }

    fn epoch(&self) -> u64 {
        self.connects
    }

    fn transport(&self) -> String {
        format!(
            "NVMe over Falcon, {} to the target at {} (unordered connection, PSP {}, Swift)",
            if self.lcore.port.local_udp().is_some() {
                "UDP"
            } else {
                "DPDK"
            },
            self.config.control,
            if self.config.psp { "on" } else { "off" }
        )
    }
}

/// The initiator's engine: PSP as configured (fresh master keys), Swift
/// and the least RTO for the host's network stack; frames up to
/// `max_frame` bytes (`None`: the engine's default, the UDP port's).
fn engine<B: PacketBuf>(
    config: &RemoteConfig,
    address: EngineAddress,
    max_frame: Option<usize>,
    now: Timestamp,
) -> Result<Engine<B, NvmeData>> {
    let defaults = EngineConfig::default();
    let engine_config = EngineConfig {
        local_ip: address.ip,
        local_mac: address.mac,
        max_frame_len: max_frame.unwrap_or(defaults.max_frame_len),
        psp: if config.psp {
            Some(PspConfig::new(crate::cmd::node::master_keys()?))
        } else {
            None
        },
        seed: u64::from(std::process::id()),
        rue: crate::cmd::node::swift(config.target_delay_us, config.min_rto_us)?,
        delivery: DeliveryConfig {
            initial_rto: Duration::from_secs_f64(config.min_rto_us / 1e6),
            ..DeliveryConfig::default()
        },
        ..defaults
    };
    Engine::new(engine_config, now)
        .map_err(|e| AppError::Usage(format!("nvme initiator: engine configuration: {e}")))
}

/// The exchange of offers on `channel` and the connection it sets up: the
/// port learns the target, the engine adds its end.
fn set_up<P: Port + OfferPort, C: Clock>(
    config: &RemoteConfig,
    address: EngineAddress,
    lcore: &mut Lcore<P, C, NvmeData>,
    mut channel: Channel,
    cid: ConnectionId,
) -> std::result::Result<(Link, Offer), String> {
    let local = Local {
        role: "initiator",
        cid,
        ip: address.ip,
        mac: address.mac,
        function: DestinationFunction::truncating(0x10),
        version: Version::Aes128Gcm,
        workload: "nvme".into(),
        // NVMe-0.9 §7: NVMe connections are unordered.
        ordering: OrderingMode::Unordered,
    };
    let ours = cm::offer(&mut lcore.engine, &local, Some(cm::initiator_sequence()))?;
    let ours = Offer {
        udp: lcore.port.local_udp(),
        ..ours.with_protocol(ProtocolType::Nvme)
    };
    let theirs = cm::exchange(&mut channel, &ours, config.setup_timeout)?;
    let target_udp = lcore.port.learn_peer(&theirs, channel.peer().ip())?;
    let now = lcore.clock.now();
    match cm::add_connection(now, &mut lcore.engine, &ours, &theirs) {
        Ok(connection) => Ok((
            Link {
                channel,
                connection,
                cid,
                target_udp,
            },
            theirs,
        )),
        Err(e) => {
            if let Some(socket) = target_udp {
                lcore.port.forget_peer(socket);
            }
            let _ = channel.send(&Message::Abort { reason: e.clone() });
            Err(e)
        }
    }
}

/// A namespace's LBA format as offered.
fn format_of(n: &NamespaceOffer) -> std::result::Result<Format, String> {
    let lba_size = LbaSize::from_bytes(n.lba_size as usize)
        .ok_or_else(|| format!("namespace {}: LBA size {}", n.nsid, n.lba_size))?;
    let metadata = MetadataSize::from_bytes(n.metadata as usize)
        .ok_or_else(|| format!("namespace {}: {} metadata bytes", n.nsid, n.metadata))?;
    Ok(Format { lba_size, metadata })
}

/// The initiator over every offered namespace: initiator NSID = target
/// NSID, one LBA table row per 1 GiB chunk on connection 0 (`cid`), each
/// namespace's commands to its SQID (NVMe-0.9 §6.6.2).
fn initiator(
    config: &RemoteConfig,
    namespaces: &[NamespaceOffer],
    vendor_commands: bool,
    cid: ConnectionId,
) -> std::result::Result<Initiator, String> {
    let mut layout = Vec::new();
    let mut start = 0u32;
    for n in namespaces {
        let format = format_of(n)?;
        let bytes = n.blocks.saturating_mul(n.lba_size as u64);
        let rows = u32::try_from(bytes.div_ceil(CHUNK_BYTES).max(1))
            .map_err(|_| format!("namespace {}: too large", n.nsid))?;
        layout.push((n, format, start, rows));
        start = start
            .checked_add(rows)
            .ok_or_else(|| "namespaces too large for the LBA table".to_string())?;
    }
    let mut tables = TranslationTables::new(start, 1);
    tables
        .set_connection(0, Some(cid))
        .map_err(|e| format!("translation: {e}"))?;
    for &(n, _, first, rows) in &layout {
        for row in 0..rows {
            let entry = LbaRow {
                valid: true,
                target_sqid: n.sqid,
                connection_index: 0,
                target_nsid: n.nsid,
                target_chunk: u64::from(row),
            };
            tables
                .set_row(first + row, entry)
                .map_err(|e| format!("translation: {e}"))?;
        }
    }
    let initiator_config = InitiatorConfig {
        queue_depth: config.queue_depth,
        icmd_timeout: config.icmd_timeout,
        vendor_commands,
        ..InitiatorConfig::default()
    };
    let mut initiator =
        Initiator::new(initiator_config, tables).map_err(|e| format!("initiator: {e}"))?;
    for &(n, format, first, rows) in &layout {
        let translation = lba::Namespace::new(first, rows, 0, 0, 0, format.lba_size)
            .map_err(|e| format!("namespace {}: {e}", n.nsid))?;
        let spec = NamespaceSpec {
            translation,
            metadata: format.metadata,
            pi: PiPolicy::Off,
        };
        initiator
            .add_namespace(u32::from(n.nsid), spec)
            .map_err(|e| format!("namespace {}: {e}", n.nsid))?;
    }
    Ok(initiator)
}
