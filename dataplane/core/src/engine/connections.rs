//! The engine's connections: setup, lookup, close and failure.
//!
//! Layer: engine. Implements [`Engine::allocate_spi`],
//! [`Engine::add_connection`] (a slot and its generation, the CID table,
//! both sublayers, the frame template, PSP SAs, the RUE state),
//! [`Engine::connection`], [`Engine::close`], the per-connection settings
//! ([`Engine::set_isolation_alpha`], [`Engine::set_xlr_filter`],
//! [`Engine::set_rate_cap`]), the
//! slot lookups every other part uses, the transaction sublayer's
//! contexts, and the death of a connection (every transaction completes
//! with kCmplDeadConn, every resource returns).

use crate::delivery::{CcState, ConnectionParams, DeliveryConnection, XlrFilter};
use crate::ids::ConnectionId;
use crate::port::PacketBuf;
use crate::resources::Alpha;
use crate::time::Timestamp;
use crate::transaction::{Ctx, DataSource, Initiator, Shared, Target, UlpCommandError};
use crate::wire::{Dscp, Ecn, FrameRepr, FrameTemplate, IpFields, UdpChecksum};
use psp::{CachedTxSa, RxSecurity, SaKey, Spi, SpiCheck, TxSaConfig, Version};
use rue::{CcResult, Profiles};

use super::{conn_in, ConfigError, Connection, ConnectionConfig, ConnectionHandle, Engine};

impl<B: PacketBuf, S: DataSource> Engine<B, S> {
    /// A fresh receive SPI of this engine's shard from the node's active
    /// master key, and the SA key the peer must send with (PSP: the
    /// receiver picks the SPI; the CM carries both to the peer).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if PSP is off, the node rotated its key and this
    /// engine has not followed, or the shard's SPI space is exhausted.
    pub fn allocate_spi(&mut self, version: Version) -> Result<(Spi, SaKey), ConfigError> {
        self.allocate_receive_spi(version)
            .map_err(ConfigError::from)
    }

    /// Sets up a connection (the connection manager's job, DESIGN.md §4).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the field: a CID already in use, no free
    /// slot, an address family other than the engine's, PSP state missing,
    /// an invalid field.
    pub fn add_connection(
        &mut self,
        now: Timestamp,
        config: ConnectionConfig,
    ) -> Result<ConnectionHandle, ConfigError> {
        config.validate()?;
        self.check_shard(&config)?;
        if self.by_cid.get(config.local_cid).is_some() {
            return Err(ConfigError::new(
                "local_cid",
                "already used by another connection",
            ));
        }
        let Some(slot) = self.free_slots.pop() else {
            return Err(ConfigError::new(
                "max_connections",
                "every connection slot is in use",
            ));
        };
        let result = self.build_connection(now, slot, config);
        match result {
            Ok(connection) => {
                let handle = connection.handle;
                self.by_cid.insert(connection.local_cid, handle.index);
                self.stats.record_windows(
                    connection.delivery.cc_state().fcwnd,
                    connection.delivery.cc_state().ncwnd,
                );
                self.connections[slot as usize] = Some(connection);
                if let Some(rue) = &mut self.rue {
                    rue.rue.reset_connection(slot);
                }
                Ok(handle)
            }
            Err(e) => {
                self.free_slots.push(slot);
                Err(e)
            }
        }
    }

    /// The connection whose local CID is `cid`.
    pub fn connection(&self, cid: ConnectionId) -> Option<ConnectionHandle> {
        let slot = self.by_cid.get(cid)?;
        self.connections.value(slot as usize).map(|c| c.handle)
    }

    /// Closes a connection: every transaction not completed completes with
    /// kCmplDeadConn, its resources return, its CID and slot are freed.
    pub fn close(&mut self, now: Timestamp, connection: ConnectionHandle) {
        let Some(slot) = self.slot(connection) else {
            return;
        };
        self.kill(slot, now);
        if let Some(conn) = self.connections[slot as usize].take() {
            self.by_cid.remove(conn.local_cid);
            if let Some(sa) = &conn.tx_sa {
                self.tx_contexts.forget(sa);
            }
        }
        self.generations[slot as usize] = self.generations[slot as usize].wrapping_add(1);
        self.free_slots.push(slot);
        self.finish(now);
    }

    /// Sets a connection's dynamic-threshold factor (its share of the
    /// network-request regions, see `crate::resources`). The rev 0.9 RUE
    /// result has no field for it; a RUE policy or the CM calls this.
    pub fn set_isolation_alpha(&mut self, connection: ConnectionHandle, alpha: Alpha) {
        if let Some(conn) = self.conn_mut(connection) {
            conn.account.alpha = Alpha(alpha.0.max(1));
        }
    }

    /// Sets a connection's rate cap, bit/s (`None`: none; see
    /// [`ConnectionConfig::rate_cap`]). Applies from the next packet; the
    /// packets sent before do not hold it back.
    ///
    /// # Errors
    ///
    /// [`ConfigError`]: `rate_cap` out of range, or no such connection
    /// (`connection`).
    pub fn set_rate_cap(
        &mut self,
        connection: ConnectionHandle,
        rate_cap: Option<u64>,
    ) -> Result<(), ConfigError> {
        super::config::validate_rate_cap(rate_cap)?;
        let granularity = self.pacing.granularity();
        let slot = self
            .slot(connection)
            .ok_or(ConfigError::new("connection", "no such connection"))?;
        let conn = conn_in(&mut self.connections, slot);
        conn.delivery.set_rate_cap(rate_cap, granularity);
        // A packet held by the old cap may go now.
        self.data_ring.activate(slot, &mut conn.on_data_ring);
        Ok(())
    }

    /// Sets a connection's xLR drop filter ([`XlrFilter`]: OCP Falcon 0.9
    /// §11, off by default). Returns whether the connection exists. Queued
    /// requests meet the filter when they are sent.
    pub fn set_xlr_filter(&mut self, connection: ConnectionHandle, filter: XlrFilter) -> bool {
        let Some(slot) = self.slot(connection) else {
            return false;
        };
        let Some(conn) = self.connections.value_mut(slot as usize) else {
            return false;
        };
        conn.delivery.set_xlr_filter(filter);
        self.data_ring.activate(slot, &mut conn.on_data_ring);
        true
    }

    pub(super) fn slots_reserve(&mut self, max: u32) {
        self.connections.grow_to(max as usize);
        self.generations.resize(max as usize, 0);
        self.free_slots = (0..max).rev().collect();
    }

    pub(super) fn build_connection(
        &mut self,
        now: Timestamp,
        slot: u32,
        config: ConnectionConfig,
    ) -> Result<Connection<B, S>, ConfigError> {
        let handle = ConnectionHandle {
            index: slot,
            generation: self.generations[slot as usize],
        };
        let delivery_config = config
            .delivery
            .clone()
            .unwrap_or_else(|| self.default_delivery.clone());
        let ip = match (self.local_ip, config.remote_ip) {
            (core::net::IpAddr::V4(src), core::net::IpAddr::V4(dst)) => IpFields::V4 {
                src,
                dst,
                ttl: delivery_config.initial_ttl,
                dscp: Dscp::ZERO,
                ecn: Ecn::Ect0,
                ident: 0,
                dont_fragment: true,
            },
            (core::net::IpAddr::V6(src), core::net::IpAddr::V6(dst)) => IpFields::V6 {
                src,
                dst,
                hop_limit: delivery_config.initial_ttl,
                dscp: Dscp::ZERO,
                ecn: Ecn::Ect0,
                flow_label: crate::wire::FlowLabel::truncating(config.seed as u32),
            },
            _ => {
                return Err(ConfigError::new(
                    "remote_ip",
                    "must be of the engine's address family",
                ))
            }
        };
        let frame = FrameRepr {
            destination: config.remote_mac,
            source: self.local_mac,
            vlan: None,
            ip,
            src_port: config.udp_source_port,
            dst_port: self.udp_port,
            udp_checksum: UdpChecksum::Zero,
        };
        let (tx_sa, rx_security) = match (&self.psp, &config.psp) {
            (None, _) => (None, None),
            (Some(_), None) => {
                return Err(ConfigError::new(
                    "psp",
                    "the engine runs PSP: the connection needs its SAs",
                ))
            }
            (Some(_), Some(c)) => {
                let tx = CachedTxSa::new(&c.tx_key, TxSaConfig::falcon(c.tx_spi, c.tx_vc))
                    .map_err(|_| ConfigError::new("psp.tx_key", "cannot build the TX SA"))?;
                let rx = RxSecurity::new(
                    SpiCheck::new(c.rx_spi, c.rx_generation),
                    c.pcid,
                    psp::ReplayCheck::new(c.remote_time_ps),
                );
                (Some(tx), Some(rx))
            }
        };
        let s = config.sequence;
        let params = ConnectionParams {
            // The RUE state table is indexed densely by slot (after the
            // external RUE's id base), not by the 24-bit wire CID.
            connection_id: ConnectionId::truncating(self.rue_id_base() + slot),
            peer_connection_id: config.remote_cid,
            destination_function: config.remote_function,
            protocol: config.protocol,
            ordering: config.ordering,
            tx_request_psn: s.tx_request_psn,
            tx_data_psn: s.tx_data_psn,
            rx_request_psn: s.rx_request_psn,
            rx_data_psn: s.rx_data_psn,
            seed: config.seed,
        };
        let cc = initial_cc_state(slot, config.rue_profile, &delivery_config, now);
        let mut delivery = DeliveryConnection::with_cc_state(&delivery_config, params, cc);
        delivery.set_rue_instance(handle.generation);
        delivery.set_rate_cap(config.rate_cap, self.pacing.granularity());
        let mut account =
            self.shared
                .resources
                .open_account(config.credits, config.function, config.host);
        if let Some(alpha) = config.isolation_alpha {
            account.alpha = alpha;
        }
        Ok(Connection {
            handle,
            local_cid: config.local_cid,
            local_function: config.local_function,
            delivery,
            initiator: Initiator::new(
                config.ordering,
                s.tx_rsn,
                self.shared.config.transaction_timeout,
            ),
            target: Target::new(config.ordering, s.rx_rsn, self.shared.config.target_timeout),
            account,
            frame: FrameTemplate::new(frame),
            tx_sa,
            rx_security,
            remote_time_at: now,
            armed: None,
            unarmed: false,
            departure: None,
            on_data_ring: false,
            on_ack_ring: false,
            dead: false,
            rue_listed: false,
        })
    }

    pub(super) fn slot(&self, handle: ConnectionHandle) -> Option<u32> {
        let live = self
            .connections
            .value(handle.index as usize)
            .is_some_and(|c| c.handle == handle);
        live.then_some(handle.index)
    }

    pub(super) fn live_slot(&self, handle: ConnectionHandle) -> Result<u32, UlpCommandError> {
        let slot = self
            .slot(handle)
            .ok_or(UlpCommandError::UnknownConnection)?;
        match self.connections.value(slot as usize) {
            Some(conn) if !conn.dead => Ok(slot),
            _ => Err(UlpCommandError::ConnectionNotAlive),
        }
    }

    pub(super) fn conn_mut(&mut self, handle: ConnectionHandle) -> Option<&mut Connection<B, S>> {
        let slot = self.slot(handle)?;
        self.connections.value_mut(slot as usize)
    }

    /// A fatal error or a close: every transaction completes with
    /// kCmplDeadConn and every resource returns.
    pub(super) fn kill(&mut self, slot: u32, now: Timestamp) {
        let conn = conn_in(&mut self.connections, slot);
        if conn.dead {
            return;
        }
        conn.dead = true;
        {
            let (initiator, mut ctx) = conn.initiator_ctx(now, &mut self.shared);
            initiator.fail_all(&mut ctx);
        }
        let conn = conn_in(&mut self.connections, slot);
        let (target, mut ctx) = conn.target_ctx(now, &mut self.shared);
        target.fail_all(&mut ctx);
        let conn = conn_in(&mut self.connections, slot);
        self.data_ring.remove(slot, &mut conn.on_data_ring);
        self.ack_ring.remove(slot, &mut conn.on_ack_ring);
    }
}

impl<B: PacketBuf, S: DataSource> Connection<B, S> {
    pub(super) fn initiator_ctx<'a>(
        &'a mut self,
        now: Timestamp,
        shared: &'a mut Shared<B, S>,
    ) -> (&'a mut Initiator<B, S>, Ctx<'a, B, S>) {
        (
            &mut self.initiator,
            Ctx {
                now,
                connection: self.handle,
                delivery: &mut self.delivery,
                account: &mut self.account,
                shared,
            },
        )
    }

    pub(super) fn target_ctx<'a>(
        &'a mut self,
        now: Timestamp,
        shared: &'a mut Shared<B, S>,
    ) -> (&'a mut Target<B, S>, Ctx<'a, B, S>) {
        (
            &mut self.target,
            Ctx {
                now,
                connection: self.handle,
                delivery: &mut self.delivery,
                account: &mut self.account,
                shared,
            },
        )
    }
}

/// The CC state a connection starts from: the RUE's initial result
/// (`rue::CcResult::initial`, isekai's defaults: RTT and delay state
/// 25 µs, markers at now) with the profile index, and the configured
/// initial fcwnd, ncwnd and RTO.
pub(super) fn initial_cc_state(
    slot: u32,
    profile: u8,
    config: &crate::delivery::DeliveryConfig,
    now: Timestamp,
) -> CcState {
    let initial = CcResult::initial(slot, Profiles::base_delay_field(profile), now.time24());
    let from_config = CcState::from_config(config);
    CcState {
        fcwnd: from_config.fcwnd,
        ncwnd: from_config.ncwnd,
        inter_packet_gap: initial.inter_packet_gap,
        retransmit_timeout: from_config.retransmit_timeout,
        cc_metadata: initial.cc_metadata,
        event_queue_select: initial.event_queue_select,
        delay_select: initial.delay_select,
        fabric_window_time_marker: initial.fabric_window_time_marker,
        nic_window_time_marker: initial.nic_window_time_marker,
        ncwnd_direction: initial.ncwnd_direction,
        base_delay_target: initial.base_delay_target,
        delay_state: initial.delay_state,
        rtt_state: initial.rtt_state,
        cc_opaque: initial.cc_opaque,
    }
}
