//! The connections of a node configuration, set up on the node's shards:
//! each end placed on a shard, its connection id from that shard's range,
//! its SPI and key from the node, and its ULP role on the shard's
//! [`ShardUlp`].
//!
//! Layer: application, control path (before the lcores start). A `self`
//! connection's two ends are both here, on different shards when there
//! are several (so their frames cross between lcores); a remote peer's
//! connections go through the connection manager's control channel
//! ([`crate::cm`]): this node offers to peers it initiates to, and
//! answers the offers of peers it serves, in the order of the file.

use std::net::TcpListener;
use std::time::Duration;

use falcon_core::api::{ConnectionId, Engine, EthernetAddress, PacketBuf, Steering, Timestamp};
use psp::Version;

use super::shard::{End, ShardUlp};
use crate::cm::{self, Channel, Local, Message, Offer};
use crate::cmd::node::workload::{Initiator, Pattern, Target, Workload};
use crate::error::{AppError, Result};
use crate::runcfg::schema::{Role, RunWorkload};
use crate::runcfg::{Plan, PlannedConnection};

/// How long setup waits for a peer.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

/// A peer's control channel, kept for the end of the run.
pub struct PeerChannel {
    /// Index into `plan.peers`.
    pub peer: usize,
    pub channel: Channel,
    /// This node initiates on it (it says when it is done) or serves.
    pub initiating: bool,
    /// Connections set up over it.
    pub connections: usize,
}

/// What setup made.
pub struct Wiring {
    pub ulps: Vec<ShardUlp>,
    pub channels: Vec<PeerChannel>,
}

/// The workload's pattern: the largest size any connection moves.
pub fn pattern(plan: &Plan) -> Pattern {
    Pattern::new(plan.connections.iter().map(|c| c.size).max().unwrap_or(1))
}

fn workload(c: &PlannedConnection) -> Workload {
    match c.workload {
        RunWorkload::Verify => Workload::Verify {
            transactions: c.transactions,
        },
        RunWorkload::Bulk => Workload::Bulk,
        RunWorkload::Rr => Workload::Rr,
        RunWorkload::RrPull => Workload::RrPull,
    }
}

fn workload_name(w: RunWorkload) -> &'static str {
    match w {
        RunWorkload::Verify => "verify",
        RunWorkload::Bulk => "bulk",
        RunWorkload::Rr => "rr",
        RunWorkload::RrPull => "rr-pull",
    }
}

/// Hands out shards and connection ids.
struct Placement {
    steering: Steering,
    /// The next connection id number of each shard.
    next: Vec<u32>,
    /// The next shard round robin.
    turn: u16,
}

impl Placement {
    fn new(steering: Steering) -> Self {
        Placement {
            steering,
            next: vec![1; usize::from(steering.shards())],
            turn: 0,
        }
    }

    /// The next shard round robin.
    fn next_shard(&mut self) -> u16 {
        let shard = self.turn;
        self.turn = (self.turn + 1) % self.steering.shards();
        shard
    }

    /// A fresh id of `shard`.
    fn cid(&mut self, shard: u16) -> Result<ConnectionId> {
        let n = &mut self.next[usize::from(shard)];
        let cid = self
            .steering
            .cid(shard, *n)
            .ok_or_else(|| AppError::Failed(format!("shard {shard} has no connection id left")))?;
        *n += 1;
        Ok(cid)
    }

    /// Where a connection end goes: its fixed id's shard, or the next.
    fn place(&mut self, fixed: Option<ConnectionId>) -> Result<(u16, ConnectionId)> {
        match fixed {
            Some(cid) => {
                let shard = self.steering.shard_of_cid(cid).ok_or_else(|| {
                    AppError::Failed(format!("connection id {} belongs to no shard", cid.value()))
                })?;
                Ok((shard, cid))
            }
            None => {
                let shard = self.next_shard();
                Ok((shard, self.cid(shard)?))
            }
        }
    }
}

/// The connection's rate cap, if it has one (its initiator end paces).
fn cap<B: PacketBuf, S: falcon_core::api::DataSource>(
    engine: &mut Engine<B, S>,
    h: falcon_core::api::ConnectionHandle,
    c: &PlannedConnection,
) -> Result<()> {
    if c.rate_cap_bps.is_some() {
        engine
            .set_rate_cap(h, c.rate_cap_bps)
            .map_err(|e| AppError::Failed(format!("connections[{}].rate_gbps: {e}", c.entry)))?;
    }
    Ok(())
}

/// Sets up every connection of `plan` on `engines` (one per shard).
///
/// # Errors
///
/// A peer did not answer, refused, or offered what does not fit; an
/// engine refused a connection.
pub fn set_up<B: PacketBuf + std::fmt::Debug>(
    now: Timestamp,
    plan: &Plan,
    engines: &mut [Engine<B, Pattern>],
    steering: Steering,
    mac: EthernetAddress,
    version: Version,
) -> Result<Wiring> {
    let pattern = pattern(plan);
    let mut ulps: Vec<ShardUlp> = engines.iter().map(|_| ShardUlp::default()).collect();
    let mut channels: Vec<PeerChannel> = Vec::new();
    let mut placement = Placement::new(steering);
    let failed = |e: String| AppError::Failed(e);
    let local = |c: &PlannedConnection, role: Role, cid: ConnectionId| Local {
        role: match role {
            Role::Initiator => "initiator",
            Role::Target => "target",
        },
        cid,
        ip: plan.ip,
        mac,
        function: plan.function,
        version,
        workload: workload_name(c.workload).to_string(),
        ordering: c.ordering,
    };
    let initiator = |h, c: &PlannedConnection| {
        End::Initiator(Box::new(Initiator::new(
            h,
            workload(c),
            pattern.clone(),
            c.size,
            c.inflight,
        )))
    };
    let listener = match plan.control {
        Some(addr)
            if plan
                .connections
                .iter()
                .any(|c| c.peer.is_some() && c.role == Role::Target) =>
        {
            Some(TcpListener::bind(addr).map_err(|e| {
                AppError::Failed(format!("node.control {addr}: cannot listen: {e}"))
            })?)
        }
        _ => None,
    };
    // Offers that came with a peer's channel before their connection's turn.
    let mut pending: Vec<(usize, Offer)> = Vec::new();
    for c in &plan.connections {
        match (c.peer, c.role) {
            (None, _) => {
                // Both ends here: the initiator's shard, then the next.
                let (si, ci) = placement.place(c.cid)?;
                let st = (si + 1) % steering.shards();
                let ct = placement.cid(st)?;
                let ours = cm::offer(
                    &mut engines[usize::from(si)],
                    &local(c, Role::Initiator, ci),
                    Some(cm::initiator_sequence()),
                )
                .map_err(failed)?;
                let theirs = cm::offer(
                    &mut engines[usize::from(st)],
                    &local(c, Role::Target, ct),
                    None,
                )
                .map_err(failed)?;
                let hi = cm::add_connection(now, &mut engines[usize::from(si)], &ours, &theirs)
                    .map_err(failed)?;
                let ht = cm::add_connection(now, &mut engines[usize::from(st)], &theirs, &ours)
                    .map_err(failed)?;
                cap(&mut engines[usize::from(si)], hi, c)?;
                ulps[usize::from(si)].add(hi, initiator(hi, c));
                ulps[usize::from(st)].add(ht, End::Target(Box::new(Target::new(pattern.clone()))));
            }
            (Some(p), Role::Initiator) => {
                let peer = &plan.peers[p];
                let at = match channels.iter().position(|ch| ch.peer == p && ch.initiating) {
                    Some(at) => at,
                    None => {
                        // Invariant: the plan refuses an initiator whose peer has no control address.
                        let addr = peer.control.expect("checked: peers[].control");
                        let channel = Channel::connect(addr, SETUP_TIMEOUT)
                            .map_err(|e| failed(format!("peer `{}` at {addr}: {e}", peer.name)))?;
                        channels.push(PeerChannel {
                            peer: p,
                            channel,
                            initiating: true,
                            connections: 0,
                        });
                        channels.len() - 1
                    }
                };
                let (shard, cid) = placement.place(c.cid)?;
                let engine = &mut engines[usize::from(shard)];
                let ours = cm::offer(
                    engine,
                    &local(c, Role::Initiator, cid),
                    Some(cm::initiator_sequence()),
                )
                .map_err(failed)?;
                let ch = &mut channels[at];
                ch.channel
                    .send(&Message::Offer(ours.clone()))
                    .map_err(failed)?;
                let theirs = match ch.channel.recv(SETUP_TIMEOUT).map_err(failed)? {
                    Message::Offer(o) => o,
                    Message::Abort { reason } => {
                        return Err(failed(format!(
                            "peer `{}` refused a connection: {reason}",
                            peer.name
                        )))
                    }
                    other => {
                        return Err(failed(format!(
                            "peer `{}`: expected an offer, got {other:?}",
                            peer.name
                        )))
                    }
                };
                let h = cm::add_connection(now, engine, &ours, &theirs).map_err(failed)?;
                cap(engine, h, c)?;
                ch.connections += 1;
                ulps[usize::from(shard)].add(h, initiator(h, c));
            }
            (Some(p), Role::Target) => {
                let peer = &plan.peers[p];
                // This peer's channel: accept until it has come (other
                // peers' channels that come first wait with their offer).
                let at = loop {
                    if let Some(at) = channels
                        .iter()
                        .position(|ch| ch.peer == p && !ch.initiating)
                    {
                        break at;
                    }
                    // Invariant: the plan refuses a target role without node.control.
                    let listener = listener.as_ref().expect("checked: node.control");
                    let mut channel = Channel::accept(listener, SETUP_TIMEOUT)
                        .map_err(|e| failed(format!("waiting for peer `{}`: {e}", peer.name)))?;
                    let first = match channel.recv(SETUP_TIMEOUT).map_err(failed)? {
                        Message::Offer(o) => o,
                        other => {
                            return Err(failed(format!(
                                "a peer's first message: expected an offer, got {other:?}"
                            )))
                        }
                    };
                    let Some(from) = plan.peers.iter().position(|q| q.ip == first.ip) else {
                        let reason = format!("no [[peers]] entry has ip {}", first.ip);
                        let _ = channel.send(&Message::Abort {
                            reason: reason.clone(),
                        });
                        return Err(failed(format!(
                            "an offer from {}: {reason}",
                            channel.peer()
                        )));
                    };
                    pending.push((from, first));
                    channels.push(PeerChannel {
                        peer: from,
                        channel,
                        initiating: false,
                        connections: 0,
                    });
                };
                let theirs = match pending.iter().position(|(q, _)| *q == p) {
                    Some(i) => pending.remove(i).1,
                    None => match channels[at].channel.recv(SETUP_TIMEOUT).map_err(failed)? {
                        Message::Offer(o) => o,
                        other => {
                            return Err(failed(format!(
                                "peer `{}`: expected its next offer (connections[{}] wants {}), got {other:?}",
                                peer.name, c.entry, c.index + 1
                            )))
                        }
                    },
                };
                let (shard, cid) = placement.place(c.cid)?;
                let engine = &mut engines[usize::from(shard)];
                let ours = cm::offer(engine, &local(c, Role::Target, cid), None).map_err(failed)?;
                let ch = &mut channels[at];
                let h = match cm::add_connection(now, engine, &ours, &theirs) {
                    Ok(h) => h,
                    Err(e) => {
                        let _ = ch.channel.send(&Message::Abort { reason: e.clone() });
                        return Err(failed(e));
                    }
                };
                ch.channel.send(&Message::Offer(ours)).map_err(failed)?;
                ch.connections += 1;
                ulps[usize::from(shard)]
                    .add(h, End::Target(Box::new(Target::new(pattern.clone()))));
            }
        }
    }
    Ok(Wiring { ulps, channels })
}
