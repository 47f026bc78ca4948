//! The connection manager's control channel: one connection set up between
//! two processes (DESIGN §4: "connection setup is done by our connection
//! manager (static config first, then a control channel)").
//!
//! Layer: application, setup only (never on the datapath). Owns the
//! messages two nodes exchange ([`Message`], one line of JSON each) and the
//! TCP channel that carries them ([`Channel`]). It does in two processes
//! what `falcon_core::api::connect` does in one: each side allocates its
//! receive SPI and the SA key the peer must send with
//! (`Engine::allocate_spi`), offers it with its CID, addresses, Destination
//! Function and PSP generation ([`Offer`]), and adds the connection from
//! the peer's offer ([`add_connection`]). The initiator's offer also
//! carries the initial sequence numbers; the target mirrors them. Any port
//! (UDP, memif, af_packet) uses the same exchange. Fields added since the
//! first version (`ordering`, `ulp`, `udp`, `namespaces`) are
//! optional, so an offer from an older peer still parses (and an older
//! peer ignores them).
//!
//! The channel is plain TCP and carries SA keys in clear: it is for
//! loopback and trusted development networks, as the keys of a control
//! plane would travel over an authenticated channel in a deployment.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use falcon_core::api::{
    ConnectionConfig, ConnectionHandle, ConnectionId, ConnectionPsp, DataSource,
    DestinationFunction, Engine, EthernetAddress, InitialSequence, OrderingMode, PacketBuf, Psn,
    Rsn, Timestamp,
};
use falcon_core::wire::ProtocolType;
use psp::{SaKey, Spi, SpiGeneration, Version};
use serde::{Deserialize, Serialize};

use crate::udp::{UdpPeer, UdpPort};

/// The version of the exchange; both sides must speak the same.
pub const PROTOCOL: u32 = 1;

/// One line on the control channel.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// A side's half of the connection (initiator first, target answers).
    Offer(Offer),
    /// The initiator is done; the target answers with its own `Done` and
    /// both exit. `report` is the sender's summary.
    Done { report: serde_json::Value },
    /// The sender gives up; `reason` says why.
    Abort { reason: String },
}

/// A side's half of a connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Offer {
    pub protocol: u32,
    /// `initiator` or `target`.
    pub role: String,
    /// The sender's connection id (the peer sends to it).
    pub cid: u32,
    /// The sender's engine addresses (frames to it carry them).
    pub ip: IpAddr,
    pub mac: [u8; 6],
    /// The sender's Destination Function (checked on what it receives).
    pub function: u32,
    /// Largest frame the sender's engine sends or receives, bytes.
    pub max_frame_len: usize,
    /// `None`: the sender runs without PSP.
    pub psp: Option<PspOffer>,
    /// The initiator's initial sequence numbers (the target mirrors them);
    /// `None` from the target.
    pub sequence: Option<[u32; 6]>,
    /// What the sender's side will run (for the peer's report).
    pub workload: String,
    /// `ordered` or `unordered` (OCP Falcon 0.9 §8.4.2); both sides must
    /// offer the same. Absent: ordered.
    #[serde(default)]
    pub ordering: Option<String>,
    /// The ULP the connection carries, `rdma` or `nvme` (OCP Falcon 0.9
    /// §7.2, the base header's Protocol Type); both sides must offer the
    /// same. Absent: rdma.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ulp: Option<String>,
    /// The sender's kernel UDP socket, when it runs the UDP port: the
    /// peer's port learns it (an unspecified IP stands for the address the
    /// control channel comes from, [`udp_socket`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<SocketAddr>,
    /// An NVMe target's namespaces: all an initiator needs to know of
    /// them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<NamespaceOffer>>,
    /// An NVMe target takes our vendor Command Requests (Flush, ulp.md
    /// §3.9): the initiator may send them. Absent: it does not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub vendor_commands: bool,
}

/// A namespace an NVMe target offers (ulp.md §3.9: the control plane
/// exports "Target NSID → block device, LBA size 512/4096, metadata
/// 0/8/16, Target SQID → worker queue").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceOffer {
    /// Target NSID.
    pub nsid: u16,
    /// Size in logical blocks.
    pub blocks: u64,
    /// 512 or 4096.
    pub lba_size: u32,
    /// Metadata bytes per block: 0, 8 or 16.
    pub metadata: u32,
    /// `off`, `opaque` or `verified`.
    pub protection: String,
    /// The target SQID its commands go to.
    pub sqid: u8,
}

impl Offer {
    /// The same offer for a connection carrying `protocol`.
    pub fn with_protocol(self, protocol: ProtocolType) -> Offer {
        Offer {
            ulp: Some(protocol_name(protocol).to_string()),
            ..self
        }
    }
}

/// The socket `offer`'s UDP port listens on, with an unspecified IP (a
/// socket bound to every address) replaced by `channel_peer`, the address
/// its control channel comes from.
pub fn udp_socket(offer: &Offer, channel_peer: IpAddr) -> Option<SocketAddr> {
    offer.udp.map(|mut socket| {
        if socket.ip().is_unspecified() {
            socket.set_ip(channel_peer);
        }
        socket
    })
}

/// The PSP half of an offer: the receive SA the sender allocated.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PspOffer {
    /// PSP version: 0 AES-GCM-128, 1 AES-GCM-256.
    pub version: u8,
    /// The SPI the peer must send with.
    pub spi: u32,
    /// The SA key for it (hex), derived from the sender's master key.
    pub key: String,
    /// The sender's SPI generation the SPI is of.
    pub generation: u32,
}

/// What a side puts into its offer.
#[derive(Debug, Clone)]
pub struct Local {
    pub role: &'static str,
    pub cid: ConnectionId,
    pub ip: IpAddr,
    pub mac: EthernetAddress,
    pub function: DestinationFunction,
    pub version: Version,
    pub workload: String,
    pub ordering: OrderingMode,
}

/// The initial sequence numbers an initiator offers: near the 2^32 wrap,
/// so every run crosses it (as `PairSpec::default`).
pub fn initiator_sequence() -> InitialSequence {
    InitialSequence {
        tx_request_psn: Psn::new(u32::MAX - 100),
        tx_data_psn: Psn::new(u32::MAX - 200),
        rx_request_psn: Psn::new(u32::MAX - 300),
        rx_data_psn: Psn::new(u32::MAX - 400),
        tx_rsn: Rsn::new(u32::MAX - 500),
        rx_rsn: Rsn::new(u32::MAX - 600),
    }
}

fn sequence_to_wire(s: InitialSequence) -> [u32; 6] {
    [
        s.tx_request_psn.value(),
        s.tx_data_psn.value(),
        s.rx_request_psn.value(),
        s.rx_data_psn.value(),
        s.tx_rsn.value(),
        s.rx_rsn.value(),
    ]
}

fn sequence_from_wire(s: [u32; 6]) -> InitialSequence {
    InitialSequence {
        tx_request_psn: Psn::new(s[0]),
        tx_data_psn: Psn::new(s[1]),
        rx_request_psn: Psn::new(s[2]),
        rx_data_psn: Psn::new(s[3]),
        tx_rsn: Rsn::new(s[4]),
        rx_rsn: Rsn::new(s[5]),
    }
}

/// The local half of a connection, with a receive SPI freshly allocated on
/// `engine` when it runs PSP. `sequence` is the initiator's.
///
/// # Errors
///
/// The engine could not allocate a receive SPI.
pub fn offer<B: PacketBuf, S: DataSource>(
    engine: &mut Engine<B, S>,
    local: &Local,
    sequence: Option<InitialSequence>,
) -> Result<Offer, String> {
    let psp = match engine.key_generation() {
        None => None,
        Some((generation, _)) => {
            let (spi, key) = engine
                .allocate_spi(local.version)
                .map_err(|e| format!("connection manager: receive SPI: {e}"))?;
            Some(PspOffer {
                version: local.version as u8,
                spi: spi.0,
                key: hex::encode(key.as_bytes()),
                generation: generation.0,
            })
        }
    };
    Ok(Offer {
        protocol: PROTOCOL,
        role: local.role.to_string(),
        cid: local.cid.value(),
        ip: local.ip,
        mac: local.mac.0,
        function: local.function.value(),
        max_frame_len: engine.max_frame_len(),
        psp,
        sequence: sequence.map(sequence_to_wire),
        workload: local.workload.clone(),
        ordering: Some(ordering_name(local.ordering).to_string()),
        ulp: None,
        udp: None,
        namespaces: None,
        vendor_commands: false,
    })
}

fn ordering_name(ordering: OrderingMode) -> &'static str {
    match ordering {
        OrderingMode::Ordered => "ordered",
        OrderingMode::Unordered => "unordered",
    }
}

fn protocol_name(protocol: ProtocolType) -> &'static str {
    match protocol {
        ProtocolType::Nvme => "nvme",
        _ => "rdma",
    }
}

fn protocol_of(offer: &Offer) -> Result<ProtocolType, String> {
    match offer.ulp.as_deref() {
        None | Some("rdma") => Ok(ProtocolType::Rdma),
        Some("nvme") => Ok(ProtocolType::Nvme),
        Some(other) => Err(format!("connection manager: unknown ULP `{other}`")),
    }
}

fn ordering_of(offer: &Offer) -> Result<OrderingMode, String> {
    match offer.ordering.as_deref() {
        None | Some("ordered") => Ok(OrderingMode::Ordered),
        Some("unordered") => Ok(OrderingMode::Unordered),
        Some(other) => Err(format!("connection manager: unknown ordering `{other}`")),
    }
}

/// Adds the connection `ours` and `theirs` describe to `engine`. The
/// sequence numbers are `ours.sequence`, or the mirror of
/// `theirs.sequence`.
///
/// # Errors
///
/// A message naming the mismatch: protocol versions, PSP on one side only,
/// frame sizes, a key of the wrong length, no sequence numbers offered, or
/// the engine's refusal.
pub fn add_connection<B: PacketBuf, S: DataSource>(
    now: Timestamp,
    engine: &mut Engine<B, S>,
    ours: &Offer,
    theirs: &Offer,
) -> Result<ConnectionHandle, String> {
    if theirs.protocol != PROTOCOL {
        return Err(format!(
            "connection manager: the peer speaks protocol {}, this node {PROTOCOL}",
            theirs.protocol
        ));
    }
    if theirs.max_frame_len != ours.max_frame_len {
        return Err(format!(
            "connection manager: the peer's frames are up to {} bytes, ours {}: set the same",
            theirs.max_frame_len, ours.max_frame_len
        ));
    }
    let sequence = match (ours.sequence, theirs.sequence) {
        (Some(s), _) => sequence_from_wire(s),
        (None, Some(s)) => sequence_from_wire(s).mirrored(),
        (None, None) => {
            return Err("connection manager: neither side offered initial sequence numbers".into())
        }
    };
    let psp = match (&ours.psp, &theirs.psp) {
        (None, None) => None,
        (Some(ours), Some(theirs)) => {
            let version = Version::from_raw(theirs.version)
                .map_err(|e| format!("connection manager: the peer's PSP version: {e:?}"))?;
            let bytes = hex::decode(&theirs.key)
                .map_err(|e| format!("connection manager: the peer's SA key is not hex: {e}"))?;
            let key = SaKey::new(version, &bytes)
                .map_err(|e| format!("connection manager: the peer's SA key: {e:?}"))?;
            Some(ConnectionPsp {
                rx_generation: SpiGeneration(ours.generation),
                ..ConnectionPsp::new(Spi(theirs.spi), key, Spi(ours.spi))
            })
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(format!(
                "connection manager: PSP is {} here and {} at the peer: both or neither",
                if ours.psp.is_some() { "on" } else { "off" },
                if theirs.psp.is_some() { "on" } else { "off" },
            ))
        }
    };
    let mut config = ConnectionConfig::new(
        ConnectionId::truncating(ours.cid),
        ConnectionId::truncating(theirs.cid),
        theirs.ip,
        EthernetAddress(theirs.mac),
    );
    let ordering = ordering_of(ours)?;
    if ordering_of(theirs)? != ordering {
        return Err(format!(
            "connection manager: this end is {}, the peer's {}: both must be the same",
            ordering_name(ordering),
            ordering_name(ordering_of(theirs)?)
        ));
    }
    config.ordering = ordering;
    let protocol = protocol_of(ours)?;
    if protocol_of(theirs)? != protocol {
        return Err(format!(
            "connection manager: this end carries {}, the peer {}: both must be the same",
            protocol_name(protocol),
            protocol_name(protocol_of(theirs)?)
        ));
    }
    config.protocol = protocol;
    config.sequence = sequence;
    config.local_function = DestinationFunction::truncating(ours.function);
    config.remote_function = DestinationFunction::truncating(theirs.function);
    config.psp = psp;
    engine
        .add_connection(now, config)
        .map_err(|e| format!("connection manager: adding the connection: {e}"))
}

/// A port as the connection manager sees it: what it tells a peer in an
/// offer, and what it learns from the peer's.
pub trait OfferPort {
    /// The kernel UDP socket frames come in on, if the port is one (the
    /// offer's `udp`).
    fn local_udp(&self) -> Option<SocketAddr>;
    /// Learns the peer of `theirs` (whose control channel comes from
    /// `channel_peer`): the socket to forget it by, if the port keeps a
    /// peer table (a DPDK port sends by the frame's own addresses).
    ///
    /// # Errors
    ///
    /// The port cannot reach that peer (no UDP socket offered, an engine
    /// address another peer has).
    fn learn_peer(
        &mut self,
        theirs: &Offer,
        channel_peer: IpAddr,
    ) -> Result<Option<SocketAddr>, String>;
    /// Forgets the peer learnt as `socket`.
    fn forget_peer(&mut self, socket: SocketAddr);
}

impl OfferPort for UdpPort {
    fn local_udp(&self) -> Option<SocketAddr> {
        self.local_addr().ok()
    }

    fn learn_peer(
        &mut self,
        theirs: &Offer,
        channel_peer: IpAddr,
    ) -> Result<Option<SocketAddr>, String> {
        let socket = udp_socket(theirs, channel_peer).ok_or_else(|| {
            format!(
                "the {}'s offer names no UDP socket (it runs another port)",
                theirs.role
            )
        })?;
        self.add_peer(UdpPeer {
            socket,
            ip: theirs.ip,
            mac: EthernetAddress(theirs.mac),
        })?;
        Ok(Some(socket))
    }

    fn forget_peer(&mut self, socket: SocketAddr) {
        self.remove_peer(socket);
    }
}

/// A DPDK port keeps no peer table: frames go by their own addresses.
#[cfg(feature = "dpdk")]
impl OfferPort for falcon_dpdk::port::DpdkPort {
    fn local_udp(&self) -> Option<SocketAddr> {
        None
    }

    fn learn_peer(
        &mut self,
        _theirs: &Offer,
        _channel_peer: IpAddr,
    ) -> Result<Option<SocketAddr>, String> {
        Ok(None)
    }

    fn forget_peer(&mut self, _socket: SocketAddr) {}
}

/// The initiator's half of the exchange: sends `ours` on `channel` and
/// waits up to `timeout` for the target's offer.
///
/// # Errors
///
/// The channel failed, nothing came in time, or the target refused
/// (`the target refused the connection: REASON`) or answered with
/// something else than an offer.
pub fn exchange(channel: &mut Channel, ours: &Offer, timeout: Duration) -> Result<Offer, String> {
    channel.send(&Message::Offer(ours.clone()))?;
    match channel.recv(timeout)? {
        Message::Offer(theirs) => Ok(theirs),
        Message::Abort { reason } => Err(format!("the target refused the connection: {reason}")),
        other => Err(format!("expected the target's offer, got {other:?}")),
    }
}

/// How long [`Channel::send`] may wait for room in the socket before the
/// peer counts as gone: a target polls its channels between turns of its
/// datapath, which a stuck peer must not hold up for longer.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// One line of JSON each way over TCP.
#[derive(Debug)]
pub struct Channel {
    reader: BufReader<TcpStream>,
    line: String,
    peer: SocketAddr,
}

impl Channel {
    /// Waits up to `timeout` for one peer on `listener`.
    ///
    /// # Errors
    ///
    /// No peer came in time, or the socket failed; the message names the
    /// address.
    pub fn accept(listener: &TcpListener, timeout: Duration) -> Result<Channel, String> {
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("control {local}: {e}"))?;
        let deadline = Instant::now() + timeout;
        loop {
            match listener.accept() {
                Ok((stream, peer)) => return Channel::new(stream, peer),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(format!(
                            "control {local}: no initiator connected within {timeout:?}"
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(format!("control {local}: accept: {e}")),
            }
        }
    }

    /// Connects to the target's control address, retrying until `timeout`
    /// (the target may still be starting).
    ///
    /// # Errors
    ///
    /// Nobody listened in time; the message names the address.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> Result<Channel, String> {
        let deadline = Instant::now() + timeout;
        loop {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                Ok(stream) => return Channel::new(stream, addr),
                Err(e) if Instant::now() >= deadline => {
                    return Err(format!("control {addr}: no target within {timeout:?}: {e}"))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// A channel on a stream accepted from `peer` (by a listener the caller
    /// polls itself).
    ///
    /// # Errors
    ///
    /// The socket's options could not be set.
    pub fn from_stream(stream: TcpStream, peer: SocketAddr) -> Result<Channel, String> {
        Channel::new(stream, peer)
    }

    fn new(stream: TcpStream, peer: SocketAddr) -> Result<Channel, String> {
        stream
            .set_nodelay(true)
            .and_then(|()| stream.set_nonblocking(false))
            .map_err(|e| format!("control {peer}: {e}"))?;
        Ok(Channel {
            reader: BufReader::new(stream),
            line: String::new(),
            peer,
        })
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Sends one message.
    ///
    /// # Errors
    ///
    /// The peer is gone.
    pub fn send(&mut self, message: &Message) -> Result<(), String> {
        let mut line = serde_json::to_string(message).map_err(|e| e.to_string())?;
        line.push('\n');
        let stream = self.reader.get_mut();
        stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_write_timeout(Some(SEND_TIMEOUT)))
            .and_then(|()| stream.write_all(line.as_bytes()))
            .map_err(|e| format!("control {}: send: {e}", self.peer))
    }

    /// Waits up to `timeout` for one message.
    ///
    /// # Errors
    ///
    /// Nothing came in time, the peer closed the channel, or the line is
    /// not a message.
    pub fn recv(&mut self, timeout: Duration) -> Result<Message, String> {
        let stream = self.reader.get_ref();
        stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_read_timeout(Some(timeout)))
            .map_err(|e| format!("control {}: {e}", self.peer))?;
        match self.read_line() {
            Ok(Some(m)) => Ok(m),
            Ok(None) => Err(format!("control {}: nothing within {timeout:?}", self.peer)),
            Err(e) => Err(e),
        }
    }

    /// A message if a whole one has arrived, without waiting.
    ///
    /// # Errors
    ///
    /// The peer closed the channel, or the line is not a message.
    pub fn try_recv(&mut self) -> Result<Option<Message>, String> {
        self.reader
            .get_ref()
            .set_nonblocking(true)
            .map_err(|e| format!("control {}: {e}", self.peer))?;
        self.read_line()
    }

    /// A line read to its end (kept across calls while incomplete).
    fn read_line(&mut self) -> Result<Option<Message>, String> {
        match self.reader.read_line(&mut self.line) {
            Ok(0) => Err(format!(
                "control {}: the peer closed the channel",
                self.peer
            )),
            Ok(_) if self.line.ends_with('\n') => {
                let line = std::mem::take(&mut self.line);
                serde_json::from_str(&line)
                    .map(Some)
                    .map_err(|e| format!("control {}: not a message ({e}): {line}", self.peer))
            }
            Ok(_) => Ok(None),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(None),
            Err(e) => Err(format!("control {}: {e}", self.peer)),
        }
    }
}

#[cfg(test)]
mod tests {
    use falcon_core::api::{EngineConfig, PspConfig};
    use psp::{MasterKey, MasterKeys};

    use super::*;

    fn engine(side: u8) -> Engine {
        let keys = MasterKeys {
            k0: MasterKey::new([side; 32]),
            k1: MasterKey::new([!side; 32]),
        };
        let config = EngineConfig {
            local_ip: IpAddr::from([10, 0, 0, side]),
            local_mac: EthernetAddress([2, 0, 0, 0, 0, side]),
            psp: Some(PspConfig::new(keys)),
            ..EngineConfig::default()
        };
        Engine::new(config, Timestamp::from_micros(1)).expect("config")
    }

    fn local(role: &'static str, side: u8) -> Local {
        Local {
            role,
            cid: ConnectionId::truncating(u32::from(side) * 0x10),
            ip: IpAddr::from([10, 0, 0, side]),
            mac: EthernetAddress([2, 0, 0, 0, 0, side]),
            function: DestinationFunction::truncating(u32::from(side)),
            version: Version::Aes128Gcm,
            workload: "verify".into(),
            ordering: OrderingMode::Ordered,
        }
    }

    /// The exchange over a real TCP channel sets up a connection both
    /// engines accept, and a push crosses it (keys, SPIs, CIDs agree).
    #[test]
    fn offers_over_tcp_set_up_a_working_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let target = std::thread::spawn(move || {
            let mut channel = Channel::accept(&listener, Duration::from_secs(5)).unwrap();
            let Message::Offer(theirs) = channel.recv(Duration::from_secs(5)).unwrap() else {
                panic!("an offer first");
            };
            let mut b = engine(2);
            let ours = offer(&mut b, &local("target", 2), None).unwrap();
            channel.send(&Message::Offer(ours.clone())).unwrap();
            let handle = add_connection(Timestamp::from_micros(1), &mut b, &ours, &theirs).unwrap();
            (b, handle)
        });
        let mut a = engine(1);
        let ours = offer(&mut a, &local("initiator", 1), Some(initiator_sequence())).unwrap();
        let mut channel = Channel::connect(addr, Duration::from_secs(5)).unwrap();
        channel.send(&Message::Offer(ours.clone())).unwrap();
        let Message::Offer(theirs) = channel.recv(Duration::from_secs(5)).unwrap() else {
            panic!("an offer back");
        };
        let now = Timestamp::from_micros(1);
        let ca = add_connection(now, &mut a, &ours, &theirs).unwrap();
        let (mut b, _) = target.join().unwrap();
        a.submit(
            now,
            ca,
            falcon_core::api::Transaction::push(7, vec![9u8; 100]),
        )
        .unwrap();
        let mut buf = vec![0u8; a.max_frame_len()];
        let len = a.poll_transmit_into(now, &mut buf).expect("a frame");
        let received = b.handle_packet(now, falcon_core::api::FrameBuf::from_frame(&buf[..len], 0));
        assert_eq!(
            received.disposition,
            falcon_core::api::Disposition::Consumed
        );
        assert!(matches!(
            b.poll_event(),
            Some(falcon_core::api::UlpEvent::Request(_))
        ));
    }

    #[test]
    fn mismatches_are_named() {
        let mut a = engine(1);
        let ours = offer(&mut a, &local("initiator", 1), Some(initiator_sequence())).unwrap();
        let mut theirs = ours.clone();
        theirs.psp = None;
        let now = Timestamp::from_micros(1);
        let e = add_connection(now, &mut a, &ours, &theirs).unwrap_err();
        assert!(e.contains("PSP is on here and off at the peer"), "{e}");
        theirs.protocol = 99;
        let e = add_connection(now, &mut a, &ours, &theirs).unwrap_err();
        assert!(e.contains("protocol 99"), "{e}");
        let e = Channel::connect("127.0.0.1:9".parse().unwrap(), Duration::from_millis(50))
            .unwrap_err();
        assert!(e.contains("127.0.0.1:9"), "{e}");
    }
}
