//! PSP key rotation on a running engine: the connection manager's steps of
//! OCP Falcon 0.9 §9.2.2.3 ("Key rotation by the CM", spec/falcon.md §7.5)
//! over the master-key rotation of the PSP spec (spec/psp.md §4).
//!
//! Layer: engine, control path only (never per packet). The receive side
//! of a node rotates: the node ([`crate::node`]) loads a fresh master key
//! into the inactive slot and makes it active, each of its engines takes
//! the node's keys into its SA database, and every connection gets a new
//! receive SPI from its shard's range under the new key; the new SA keys
//! travel to the peers (the CM's job; [`rekey_pair`](crate::engine::rekey_pair)
//! does it for two engines in one process), which then send with them.
//! Meanwhile packets still sealed with the previous SPI pass the SPI check
//! through AllowPrevGen. In order:
//!
//! 1. [`Node::begin_key_rotation`](crate::node::Node::begin_key_rotation)
//!    once for the node: new master key; AllowPrevGen = 1, CurGen + 1. Then
//!    on each engine [`Engine::follow_key_rotation`]: the same in its copy.
//!    [`Engine::begin_key_rotation`] does both for a node of one shard.
//! 2. [`Engine::rekey_receive`] per connection (or
//!    [`Engine::rekey_connections`] for all): PrevSPI = CurSPI, CurSPI = a
//!    fresh SPI of the new key, the connection's CurGen + 1, Remote Time
//!    re-seeded. Returns the SA the peer must send with.
//! 3. [`Engine::install_transmit_sa`] at the peer: it sends with the new SA
//!    from its next packet on (retransmissions included).
//! 4. [`Engine::retire_previous_spis`] (optional, a few RTTs later): PrevSPI
//!    = CurSPI, so the old SPI stops passing at once.
//! 5. [`Engine::end_key_rotation`]: AllowPrevGen = 0, before the next
//!    rotation. Refused while a connection still expects an SPI of the
//!    previous generation: its every packet would then fail the check. The
//!    node's rotation ends with its last engine's step 5; the node refuses
//!    the next one until then.
//!
//! A second rotation evicts the master key of two rotations ago: packets
//! sealed under it no longer authenticate (`psp_unknown_sa` or
//! `psp_auth_failed`), the PSP way to revoke keys (spec/psp.md §4).
//!
//! Remote Time at rotation (OCP Falcon 0.9 §9.2.2.2: "When the PSP keys are
//! rotated, the CM must update the remote time variable based on the
//! current estimate of the transmitter's time"; §9.2.1: "conservatively
//! older than the time of the remote transmitter"). Step 2 re-seeds it with
//! [`remote_time_estimate`]: the last authenticated IV plus the time elapsed
//! here since it arrived, less a clock-rate allowance. Our IVs are the
//! sender's picosecond clock on every SA, and a new TX SA continues its
//! predecessor's IV clock (`CachedTxSa::with_iv_clock`), so the estimate stays
//! below every IV the transmitter sends from now on: Remote Time only moves
//! forward (no replay window reopens) and on a busy connection barely moves.
//! On an idle one it catches up with the transmitter's clock, which is what
//! the spec's rule is for: without it Remote Time of a connection idle for
//! half the IV space (2^63 ps, 107 days) would fall behind by more than the
//! modulo comparison can tell, and every later packet would fail the replay
//! check.

use core::fmt;
use core::time::Duration;

use psp::{CachedTxSa, MasterKey, SaKey, Spi, SpiGeneration, TxSaConfig, Version};

use crate::engine::{ConnectionHandle, Engine};
use crate::node::SpiRefusal;
use crate::port::PacketBuf;
use crate::time::Timestamp;
use crate::transaction::DataSource;

/// The transmitter's clock is taken to advance at least 1 − 2^-10
/// (99.9 %) as fast as ours: ten times the ±100 ppm of common oscillators,
/// so the estimate stays "conservatively older" than its time (§9.2.1).
/// What this costs: a frame delayed by more than the replay margin plus
/// 2^-10 of the idle time before a rotation is refused as a replay, as it
/// would be on a busy connection.
const CLOCK_RATE_ALLOWANCE_SHIFT: u32 = 10;

/// The re-seeded Remote Time of a connection whose last authenticated IV
/// was `remote_time_ps` and that has received nothing for `idle` (OCP Falcon
/// 0.9 §9.2.2.2): `remote_time_ps` advanced by `idle` less the clock-rate
/// allowance, modulo 2^64. Exact up to an `idle` of 2^64 ps (213 days);
/// beyond that the advance saturates.
pub(crate) fn remote_time_estimate(remote_time_ps: u64, idle: Duration) -> u64 {
    let idle_ps = u64::try_from(idle.as_nanos())
        .unwrap_or(u64::MAX)
        .saturating_mul(1_000);
    remote_time_ps.wrapping_add(idle_ps - (idle_ps >> CLOCK_RATE_ALLOWANCE_SHIFT))
}

/// A key-rotation step that cannot be done, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotationError {
    /// The engine runs without PSP.
    PspOff,
    /// No such live connection.
    UnknownConnection,
    /// A rotation is still open (step 5 not done): the previous generation
    /// is still accepted, so a new one would strand its connections.
    RotationInProgress,
    /// `end_key_rotation` while this many connections still expect an SPI
    /// of the previous generation (step 2 not done for them).
    NotRekeyed(usize),
    /// The active master key has no SPI left.
    SpiExhausted,
    /// `rekey_receive` on a connection already at the current generation
    /// (rekeyed twice, or no rotation begun): its generation would run
    /// ahead of the node's and nothing would pass.
    AlreadyCurrent,
    /// The SA the peer handed over cannot be used (zero SPI).
    BadSa,
    /// The node rotated its master key and this engine has not followed
    /// ([`Engine::follow_key_rotation`]).
    Behind,
}

impl fmt::Display for RotationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RotationError::PspOff => write!(f, "PSP is off in this engine"),
            RotationError::UnknownConnection => write!(f, "no such connection"),
            RotationError::RotationInProgress => {
                write!(
                    f,
                    "the previous key rotation is not ended (AllowPrevGen is set)"
                )
            }
            RotationError::NotRekeyed(n) => write!(
                f,
                "{n} connection(s) still expect an SPI of the previous generation"
            ),
            RotationError::SpiExhausted => {
                write!(f, "SPI space of the active master key exhausted")
            }
            RotationError::AlreadyCurrent => write!(
                f,
                "the connection already expects an SPI of the current generation"
            ),
            RotationError::BadSa => write!(f, "the transmit SA cannot be built (zero SPI)"),
            RotationError::Behind => write!(
                f,
                "the node rotated its master key and this engine has not followed"
            ),
        }
    }
}

impl std::error::Error for RotationError {}

/// Step 2's output for one connection: the SA its peer must send with
/// (step 3 there: [`Engine::install_transmit_sa`]).
#[derive(Debug, Clone)]
pub struct NewReceiveSa {
    /// The connection rekeyed.
    pub connection: ConnectionHandle,
    /// Its new receive SPI.
    pub spi: Spi,
    /// The SA key the peer sends with (derived here from the node's
    /// master key).
    pub key: SaKey,
}

impl<B: PacketBuf, S: DataSource> Engine<B, S> {
    /// Step 1 on the node and at once on this engine:
    /// [`Node::begin_key_rotation`](crate::node::Node::begin_key_rotation)
    /// with `new_key` (it goes into the inactive master-key slot and becomes
    /// active; the key it replaces, active two rotations ago, is evicted),
    /// then [`follow_key_rotation`](Self::follow_key_rotation). All a node
    /// of one shard needs; the other shards of a larger node follow on
    /// their own lcores. Returns the new generation.
    ///
    /// # Errors
    ///
    /// [`RotationError::PspOff`], or [`RotationError::RotationInProgress`]
    /// if a shard of the node has not ended the previous rotation.
    pub fn begin_key_rotation(
        &mut self,
        new_key: MasterKey,
    ) -> Result<SpiGeneration, RotationError> {
        if self.psp.is_none() {
            return Err(RotationError::PspOff);
        }
        self.shard.node.begin_key_rotation(new_key)?;
        self.follow_key_rotation()
    }

    /// Step 1 on this engine after the node's
    /// ([`Node::begin_key_rotation`](crate::node::Node::begin_key_rotation)):
    /// its SA database takes the node's master keys (the contexts of an
    /// evicted key are purged), AllowPrevGen = 1 and CurGen is the node's.
    /// Its connections then need step 2 ([`connections_to_rekey`](Self::connections_to_rekey)).
    /// Nothing changes if the engine already follows the node's last
    /// rotation. Returns the generation.
    ///
    /// # Errors
    ///
    /// [`RotationError::PspOff`].
    pub fn follow_key_rotation(&mut self) -> Result<SpiGeneration, RotationError> {
        let psp = self.psp.as_mut().ok_or(RotationError::PspOff)?;
        let node = self
            .shard
            .node
            .shard_psp(self.shard.shard)
            .ok_or(RotationError::PspOff)?;
        let rotations = node.keys.rotations();
        if rotations != self.shard.rotations {
            psp.db.follow(&node.keys);
            psp.globals.cur_gen = node.globals.cur_gen;
            psp.globals.allow_prev_gen = node.globals.allow_prev_gen;
            self.shard.rotations = rotations;
            self.stats.key_rotations += 1;
        }
        Ok(psp.globals.cur_gen)
    }

    /// Step 2 for one connection at `now`: a fresh receive SPI from the
    /// active master key becomes its Current SPI (the old one its Previous
    /// SPI), its generation advances, and its Remote Time is re-seeded from
    /// the current estimate of the transmitter's time (see the module doc).
    /// Returns the SPI and key the peer must send with (step 3:
    /// [`install_transmit_sa`](Self::install_transmit_sa) there).
    ///
    /// # Errors
    ///
    /// [`RotationError::PspOff`], [`RotationError::UnknownConnection`],
    /// [`RotationError::AlreadyCurrent`] (begin the rotation first),
    /// [`RotationError::Behind`] (follow the node's first) or
    /// [`RotationError::SpiExhausted`].
    pub fn rekey_receive(
        &mut self,
        now: Timestamp,
        connection: ConnectionHandle,
        version: Version,
    ) -> Result<(Spi, SaKey), RotationError> {
        let slot = self
            .slot(connection)
            .ok_or(RotationError::UnknownConnection)?;
        let cur_gen = self
            .psp
            .as_ref()
            .ok_or(RotationError::PspOff)?
            .globals
            .cur_gen;
        let current = self
            .connections
            .value(slot as usize)
            .ok_or(RotationError::UnknownConnection)?
            .rx_security
            .as_ref()
            .ok_or(RotationError::PspOff)?
            .spi
            .cur_gen
            == cur_gen;
        if current {
            return Err(RotationError::AlreadyCurrent);
        }
        let (spi, key) = self
            .allocate_receive_spi(version)
            .map_err(|refusal| match refusal {
                SpiRefusal::PspOff => RotationError::PspOff,
                SpiRefusal::Behind => RotationError::Behind,
                SpiRefusal::Exhausted => RotationError::SpiExhausted,
            })?;
        let conn = self
            .connections
            .value_mut(slot as usize)
            .ok_or(RotationError::UnknownConnection)?;
        let security = conn.rx_security.as_mut().ok_or(RotationError::PspOff)?;
        security.spi.rotate(spi);
        // OCP Falcon 0.9 §9.2.2.2: at rotation the CM updates Remote Time
        // from the current estimate of the transmitter's time.
        let idle = now.saturating_duration_since(conn.remote_time_at);
        let estimate = remote_time_estimate(security.replay.remote_time_ps, idle);
        security.replay.reseed(estimate);
        conn.remote_time_at = now;
        Ok((spi, key))
    }

    /// Step 2 at `now` for every live connection still expecting an SPI of
    /// the previous generation ([`connections_to_rekey`](Self::connections_to_rekey)):
    /// what a runner calls on each engine after it followed the node's
    /// rotation. Returns the SAs for the peers (step 3 there), in the order
    /// of the connections' slots.
    ///
    /// # Errors
    ///
    /// The first [`RotationError`] of [`rekey_receive`](Self::rekey_receive);
    /// the connections before it are rekeyed (call again for the rest).
    pub fn rekey_connections(
        &mut self,
        now: Timestamp,
        version: Version,
    ) -> Result<Vec<NewReceiveSa>, RotationError> {
        self.connections_to_rekey()
            .into_iter()
            .map(|connection| {
                let (spi, key) = self.rekey_receive(now, connection, version)?;
                Ok(NewReceiveSa {
                    connection,
                    spi,
                    key,
                })
            })
            .collect()
    }

    /// Step 3 at the peer: sends on `connection` with (`spi`, `key`) from
    /// the next packet on. The new SA keeps the old one's virtualization
    /// cookie and continues its IV clock, so IVs stay strictly increasing
    /// on the connection.
    ///
    /// # Errors
    ///
    /// [`RotationError::PspOff`], [`RotationError::UnknownConnection`] or
    /// [`RotationError::BadSa`].
    pub fn install_transmit_sa(
        &mut self,
        connection: ConnectionHandle,
        spi: Spi,
        key: &SaKey,
    ) -> Result<(), RotationError> {
        let slot = self
            .slot(connection)
            .ok_or(RotationError::UnknownConnection)?;
        if self.psp.is_none() {
            return Err(RotationError::PspOff);
        }
        let conn = self
            .connections
            .value_mut(slot as usize)
            .ok_or(RotationError::UnknownConnection)?;
        let old = conn.tx_sa.as_ref().ok_or(RotationError::PspOff)?;
        let config = TxSaConfig {
            spi,
            ..old.config()
        };
        let clock = *old.iv_clock();
        let new = CachedTxSa::new(key, config)
            .map_err(|_| RotationError::BadSa)?
            .with_iv_clock(clock);
        // The old key's schedule goes now, not when CLOCK reaches it; the
        // new SA expands its own at its first seal.
        self.tx_contexts.forget(old);
        conn.tx_sa = Some(new);
        Ok(())
    }

    /// Step 4 (optional, once the peers send with the new SPIs): every
    /// connection forgets its Previous SPI.
    pub fn retire_previous_spis(&mut self) {
        for conn in self.connections.iter_mut().flatten() {
            if let Some(security) = conn.rx_security.as_mut() {
                security.spi.retire_previous();
            }
        }
    }

    /// Step 5: AllowPrevGen = 0; from now on only the current generation's
    /// SPIs pass this engine. The node's rotation ends once every shard's
    /// has.
    ///
    /// # Errors
    ///
    /// [`RotationError::PspOff`], [`RotationError::Behind`] (the node
    /// rotated since this engine followed), or
    /// [`RotationError::NotRekeyed`] while connections have not had step 2
    /// (nothing changes then).
    pub fn end_key_rotation(&mut self) -> Result<(), RotationError> {
        let stale = self.connections_to_rekey().len();
        let psp = self.psp.as_mut().ok_or(RotationError::PspOff)?;
        if stale > 0 {
            return Err(RotationError::NotRekeyed(stale));
        }
        self.shard
            .node
            .end_rotation(self.shard.shard, self.shard.rotations)?;
        psp.globals.end_rotation();
        Ok(())
    }

    /// Live connections whose receive SPI is not of the current generation:
    /// what step 2 has yet to cover.
    pub fn connections_to_rekey(&self) -> Vec<ConnectionHandle> {
        let Some(psp) = &self.psp else {
            return Vec::new();
        };
        self.connections
            .iter()
            .flatten()
            .filter(|conn| !conn.dead)
            .filter(|conn| {
                conn.rx_security
                    .as_ref()
                    .is_some_and(|s| s.spi.cur_gen != psp.globals.cur_gen)
            })
            .map(|conn| conn.handle)
            .collect()
    }

    /// The receiver-wide generation and whether the previous one is still
    /// accepted (`None` without PSP).
    pub fn key_generation(&self) -> Option<(SpiGeneration, bool)> {
        self.psp
            .as_ref()
            .map(|p| (p.globals.cur_gen, p.globals.allow_prev_gen))
    }
}

/// Steps 2 and 3 at `now` for two mirrored connections of engines in one
/// process, both directions: each side's new receive SA is installed at the
/// other. Each engine must have begun its rotation (step 1) first, or its
/// new SPIs come from the key already active.
///
/// # Errors
///
/// The first [`RotationError`] of either side.
pub fn rekey_pair<B: PacketBuf, S: DataSource>(
    now: Timestamp,
    a: &mut Engine<B, S>,
    b: &mut Engine<B, S>,
    (ha, hb): (ConnectionHandle, ConnectionHandle),
    version: Version,
) -> Result<(), RotationError> {
    let (spi_a, key_to_a) = a.rekey_receive(now, ha, version)?;
    b.install_transmit_sa(hb, spi_a, &key_to_a)?;
    let (spi_b, key_to_b) = b.rekey_receive(now, hb, version)?;
    a.install_transmit_sa(ha, spi_b, &key_to_b)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use psp::{ReplayCheck, RxDrop, SecurityGlobals};

    use super::*;

    /// The estimate stays below the time of a transmitter whose clock runs
    /// up to 2^-10 slower than ours, and is taken modulo 2^64.
    #[test]
    fn estimate_is_conservative_within_the_allowance_and_modular() {
        const DAY_PS: u64 = 86_400 * 1_000_000_000_000;
        let no_margin = SecurityGlobals {
            replay_margin_ps: 0,
            ..SecurityGlobals::default()
        };
        let r = 5_000_000_000_000;
        let estimate = remote_time_estimate(r, Duration::from_secs(86_400));
        assert_eq!(estimate - r, DAY_PS - DAY_PS / 1024);
        let replay = ReplayCheck::new(estimate);
        // A transmitter 500 ppm slow after a day of silence: its next IV
        // passes even with no margin. At 2000 ppm slow, beyond the
        // allowance, it would not.
        assert_eq!(
            replay.check(&no_margin, r + DAY_PS / 10_000 * 9_995),
            Ok(())
        );
        assert_eq!(
            replay.check(&no_margin, r + DAY_PS / 10_000 * 9_980),
            Err(RxDrop::Replay)
        );
        assert_eq!(
            remote_time_estimate(u64::MAX - 5, Duration::from_nanos(1)),
            994
        );
        assert_eq!(remote_time_estimate(7, Duration::ZERO), 7);
        assert_eq!(
            remote_time_estimate(0, Duration::MAX),
            u64::MAX - (u64::MAX >> 10)
        );
    }

    /// The engine's transmit context cache: each connection expands its
    /// key once, however many packets it sends; a rekey installs an SA
    /// that expands its own key (the peer opens its packets under the new
    /// SPI, so no packet went out under the old context); with fewer
    /// entries than sending connections, misses go on and traffic too.
    #[test]
    fn tx_contexts_expand_once_per_sa_and_rekey_replaces_them() {
        use crate::engine::{connect, EngineConfig, PairSpec, PspConfig};
        use crate::ids::ConnectionId;
        use crate::port::FrameBuf;
        use crate::transaction::{Transaction, UlpEvent};
        use crate::wire::EthernetAddress;
        use psp::{MasterKey, MasterKeys};

        let config = |ip: &str, mac: u8, k: u8, tx_contexts| EngineConfig {
            local_ip: ip.parse().expect("literal address"),
            local_mac: EthernetAddress([2, 0, 0, 0, 0, mac]),
            psp: Some(PspConfig::new(MasterKeys {
                k0: MasterKey::new([k; 32]),
                k1: MasterKey::new([k + 1; 32]),
            })),
            tx_contexts,
            ..EngineConfig::default()
        };
        // Pushes `n` transactions on each connection of `a` to `b`; the
        // completions seen at `a`.
        let exchange = |now: &mut Timestamp,
                        a: &mut Engine,
                        b: &mut Engine,
                        conns: &[ConnectionHandle],
                        n: u64| {
            for &c in conns {
                for i in 0..n {
                    a.submit(*now, c, Transaction::push(i, vec![7; 100]))
                        .expect("submit");
                }
            }
            let mut buf = vec![0u8; a.max_frame_len()];
            let mut completions = 0;
            for _ in 0..200 {
                for a_sends in [true, false] {
                    let (from, to) = if a_sends {
                        (&mut *a, &mut *b)
                    } else {
                        (&mut *b, &mut *a)
                    };
                    from.handle_timeout(*now);
                    while let Some(len) = from.poll_transmit_into(*now, &mut buf) {
                        let _ = to.handle_packet(*now, FrameBuf::from_frame(&buf[..len], 0));
                    }
                }
                while let Some(event) = b.poll_event() {
                    if let UlpEvent::Request(r) = event {
                        let c = r.connection;
                        b.ulp_ack(*now, c, r.rsn).expect("ack");
                    }
                }
                while let Some(event) = a.poll_event() {
                    completions += u64::from(matches!(event, UlpEvent::Completion(_)));
                }
                *now = *now + Duration::from_micros(20);
            }
            completions
        };

        let mut now = Timestamp::from_micros(1);
        let mut a: Engine = Engine::new(config("10.0.0.1", 1, 1, 2), now).expect("config");
        let mut b: Engine = Engine::new(config("10.0.0.2", 2, 5, 8), now).expect("config");
        let pairs: Vec<_> = (1..=3)
            .map(|i| {
                let spec = PairSpec {
                    a_cid: ConnectionId::truncating(i),
                    b_cid: ConnectionId::truncating(100 + i),
                    ..PairSpec::default()
                };
                connect(now, &mut a, &mut b, &spec).expect("connect")
            })
            .collect();
        let (conns_a, conns_b): (Vec<_>, Vec<_>) = pairs.iter().copied().unzip();

        // One connection sending: one expansion at each end.
        assert_eq!(exchange(&mut now, &mut a, &mut b, &conns_a[..1], 20), 20);
        assert_eq!(a.stats().tx_context_misses, 1);
        assert_eq!(b.stats().tx_context_misses, 1);

        // Rekeyed: one more expansion each, and B opens A's packets under
        // the new SPI (B drops nothing).
        a.begin_key_rotation(MasterKey::new([0x40; 32]))
            .expect("begin");
        b.begin_key_rotation(MasterKey::new([0x50; 32]))
            .expect("begin");
        rekey_pair(now, &mut a, &mut b, pairs[0], Version::Aes256Gcm).expect("rekey");
        assert_eq!(exchange(&mut now, &mut a, &mut b, &conns_a[..1], 20), 20);
        assert_eq!(a.stats().tx_context_misses, 2);
        assert_eq!(b.stats().tx_context_misses, 2);
        assert_eq!(b.stats().drops.total(), 0);
        assert_eq!(a.stats().drops.total(), 0);

        // Three connections through A's two entries: still complete.
        assert_eq!(exchange(&mut now, &mut a, &mut b, &conns_a, 20), 60);
        assert!(a.stats().tx_context_misses > 4);
        assert_eq!(b.stats().tx_context_misses, 4, "B's 8 entries hold all");
        let _ = conns_b;
    }
}
