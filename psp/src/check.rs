//! Receive-side security checks of OCP Falcon 0.9 §9.2.2 (spec/falcon.md
//! §5.4, §7.5): SPI check with key rotation, PCID check, replay protection.
//!
//! Owns the check *state* as plain values the Falcon connection embeds
//! ([`RxSecurity`], per connection) and the receiver-wide variables
//! ([`SecurityGlobals`]), plus the CM's rotation steps. It never sees a
//! connection table, never reads a clock, and runs only on authenticated
//! packets: [`RxSecurity::accept`] takes an [`Opened`], which exists only
//! after the ICV verified (the IV and SPI are trustworthy only then,
//! spec/psp.md §2).
//!
//! A packet failing any of these checks must be dropped **without
//! generating an ACK or a NACK** (OCP Falcon 0.9 §9.2.2.2, §9.2.2.3); an SPI
//! check failure should also be signalled to the CM. The caller (the Falcon
//! packet-delivery layer) must honour this.

use crate::error::RxDrop;
use crate::header::Spi;
use crate::seal::Opened;

/// Default replay-protection margin: 1 ms in ps (DESIGN §4; the spec leaves
/// the value to the CM, OCP Falcon 0.9 §9.2.1).
pub const DEFAULT_REPLAY_MARGIN_PS: u64 = 1_000_000_000;

/// A PSP key generation number (OCP Falcon 0.9 §9.2.1 "Current SPI
/// Generation"). Arithmetic wraps: the spec's `curSPIGen - 1` is modular.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SpiGeneration(pub u32);

impl SpiGeneration {
    /// The next generation (wrapping).
    pub const fn next(self) -> SpiGeneration {
        SpiGeneration(self.0.wrapping_add(1))
    }

    /// The previous generation (wrapping).
    pub const fn prev(self) -> SpiGeneration {
        SpiGeneration(self.0.wrapping_sub(1))
    }
}

/// Receiver-wide security variables (OCP Falcon 0.9 §9.2.1, "global across
/// all connections").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecurityGlobals {
    /// Global Current SPI Generation.
    pub cur_gen: SpiGeneration,
    /// Allow Previous SPI Generation.
    pub allow_prev_gen: bool,
    /// PCID Match Enable.
    pub pcid_match_enable: bool,
    /// Replay Protection Margin in ps.
    pub replay_margin_ps: u64,
}

impl Default for SecurityGlobals {
    fn default() -> SecurityGlobals {
        SecurityGlobals {
            cur_gen: SpiGeneration(0),
            allow_prev_gen: false,
            pcid_match_enable: false,
            replay_margin_ps: DEFAULT_REPLAY_MARGIN_PS,
        }
    }
}

impl SecurityGlobals {
    /// CM rotation step 1 (OCP Falcon 0.9 §9.2.2.3): allow the previous
    /// generation and increment the current one.
    pub fn begin_rotation(&mut self) {
        self.allow_prev_gen = true;
        self.cur_gen = self.cur_gen.next();
    }

    /// CM rotation step 5: before the next rotation, stop accepting the
    /// previous generation.
    pub fn end_rotation(&mut self) {
        self.allow_prev_gen = false;
    }
}

/// Per-connection SPI variables (OCP Falcon 0.9 §9.2.1): Current SPI,
/// Previous SPI, Current SPI Generation. `cur_spi == Spi(0)` means the
/// connection is not configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpiCheck {
    /// The SPI the connection's peer currently sends with.
    pub cur_spi: Spi,
    /// The SPI before the last rotation (0 = none).
    pub prev_spi: Spi,
    /// Generation of `cur_spi`.
    pub cur_gen: SpiGeneration,
}

impl SpiCheck {
    /// A configured connection. The spec initialises Previous SPI to the
    /// current SPI (OCP Falcon 0.9 §9.2.1).
    pub const fn new(spi: Spi, cur_gen: SpiGeneration) -> SpiCheck {
        SpiCheck {
            cur_spi: spi,
            prev_spi: spi,
            cur_gen,
        }
    }

    /// CM rotation step 2, per connection: PrevSPI = CurSPI, CurSPI = new,
    /// CurGen++.
    pub fn rotate(&mut self, new_spi: Spi) {
        self.prev_spi = self.cur_spi;
        self.cur_spi = new_spi;
        self.cur_gen = self.cur_gen.next();
    }

    /// CM rotation step 4 (optional), after a few RTTs: forget the previous
    /// SPI (PrevSPI = CurSPI).
    pub fn retire_previous(&mut self) {
        self.prev_spi = self.cur_spi;
    }

    /// The SPI part of `PacketPassesSPICheck` (OCP Falcon 0.9 §9.2.2.3
    /// pseudocode; spec/falcon.md §7.5), without the PCID term:
    /// `curMatch || prevSameGenMatch || prevPrevGenMatch`.
    pub fn check(&self, g: &SecurityGlobals, spi: Spi) -> Result<(), RxDrop> {
        // "SPI = 0 means connection is not configured".
        if self.cur_spi == Spi(0) {
            return Err(RxDrop::SpiUnconfigured);
        }
        let prev_gen = g.cur_gen.prev();
        let cur_gen_ok =
            self.cur_gen == g.cur_gen || (g.allow_prev_gen && self.cur_gen == prev_gen);
        let cur_match = spi == self.cur_spi && cur_gen_ok;
        let same_key = self.cur_spi.key_selector() == self.prev_spi.key_selector();
        let prev_is = spi == self.prev_spi && self.prev_spi != Spi(0);
        // Equal MSBs: the previous SPI is of the current SPI's generation.
        let prev_same_gen = same_key && prev_is && cur_gen_ok;
        // Different MSBs: the previous SPI is one generation older. The
        // pseudocode's `connection.curSPIGen - 1 == prevSpiGen` (with
        // prevSpiGen = global.curSPIGen - 1) reduces to conn.CurGen ==
        // global.CurGen; written as in the spec.
        let prev_prev_gen =
            !same_key && g.allow_prev_gen && prev_is && self.cur_gen.prev() == prev_gen;
        if cur_match || prev_same_gen || prev_prev_gen {
            Ok(())
        } else {
            Err(RxDrop::SpiMismatch)
        }
    }
}

/// The PCID term of the SPI check (OCP Falcon 0.9 §9.2.2.3 `pcidMatches`).
///
/// Decision: the 64-bit PCID is carried as the whole 8-byte VC, compared
/// as one big-endian u64 (OCP Falcon 0.9 §9.2.1: "The PCID is carried in the
/// virtualization cookie (VC) field"; the Security Token / Virtualization
/// Key split of some dissectors is not used). With matching enabled, a
/// packet without a VC fails.
pub fn check_pcid(g: &SecurityGlobals, pcid: u64, vc: Option<u64>) -> Result<(), RxDrop> {
    if !g.pcid_match_enable || vc == Some(pcid) {
        Ok(())
    } else {
        Err(RxDrop::PcidMismatch)
    }
}

/// Per-connection replay state (OCP Falcon 0.9 §9.2.2.2): the receiver's
/// estimate of the sender's time, in ps.
///
/// Check only the IV of a packet whose ICV verified (an unauthenticated IV
/// could push Remote Time forward and lock the connection out). A packet
/// that fails must be dropped with no ACK and no NACK: the caller enforces
/// this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplayCheck {
    /// Remote Time: the largest authenticated IV seen (modulo 2^64).
    pub remote_time_ps: u64,
}

impl ReplayCheck {
    /// The CM initialises Remote Time "conservatively older than the time
    /// of the remote transmitter" (OCP Falcon 0.9 §9.2.1).
    pub const fn new(remote_time_ps: u64) -> ReplayCheck {
        ReplayCheck { remote_time_ps }
    }

    /// Re-seed at key rotation (OCP Falcon 0.9 §9.2.2.2: "the CM must update
    /// the remote time variable based on the current estimate of the
    /// transmitter's time").
    pub fn reseed(&mut self, remote_time_ps: u64) {
        self.remote_time_ps = remote_time_ps;
    }

    /// Accept iff `(RemoteTime − margin) < IV` in modulo-2^64 arithmetic.
    ///
    /// Followed the OCP text (§9.2.2.2, "is less than … using modulo
    /// arithmetic"): an IV exactly equal to `RemoteTime − margin` fails. The
    /// brief's note said "IV < RemoteTime − margin fails", which would
    /// accept the boundary. Modulo comparison: the signed distance must be
    /// positive, so IVs more than 2^63 ps (≈ 107 days) ahead also fail.
    pub fn check(&self, g: &SecurityGlobals, iv: u64) -> Result<(), RxDrop> {
        let floor = self.remote_time_ps.wrapping_sub(g.replay_margin_ps);
        if (iv.wrapping_sub(floor) as i64) > 0 {
            Ok(())
        } else {
            Err(RxDrop::Replay)
        }
    }

    /// RemoteTime = max(RemoteTime, IV), modulo 2^64. Call only for packets
    /// that passed every check.
    pub fn advance(&mut self, iv: u64) {
        if (iv.wrapping_sub(self.remote_time_ps) as i64) > 0 {
            self.remote_time_ps = iv;
        }
    }
}

/// All per-connection security state of OCP Falcon 0.9 §9.2.1, to embed in
/// the Falcon connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RxSecurity {
    /// SPI check variables.
    pub spi: SpiCheck,
    /// The connection's PSP Connection ID (compared with the VC).
    pub pcid: u64,
    /// Replay protection state.
    pub replay: ReplayCheck,
}

impl RxSecurity {
    /// A configured connection.
    pub const fn new(spi: SpiCheck, pcid: u64, replay: ReplayCheck) -> RxSecurity {
        RxSecurity { spi, pcid, replay }
    }

    /// Run the connection checks on an authenticated packet, then advance
    /// Remote Time. Order: SPI, PCID, replay (the DESIGN §3 order; the spec
    /// numbers replay before SPI, but the order only changes which counter a
    /// doubly-bad packet lands in). State changes only if every check
    /// passes, so a packet of another SA cannot move this connection's
    /// Remote Time.
    ///
    /// On `Err` the caller must drop the packet and send no ACK and no NACK
    /// (OCP Falcon 0.9 §9.2.2.2–3), and should signal the CM for SPI errors.
    pub fn accept(&mut self, g: &SecurityGlobals, opened: &Opened<'_>) -> Result<(), RxDrop> {
        self.accept_fields(g, opened.spi(), opened.iv(), opened.vc())
    }

    /// [`accept`](Self::accept) on header fields the caller extracted from
    /// an authenticated packet. Never call it with fields of a packet whose
    /// ICV did not verify.
    pub fn accept_fields(
        &mut self,
        g: &SecurityGlobals,
        spi: Spi,
        iv: u64,
        vc: Option<u64>,
    ) -> Result<(), RxDrop> {
        self.spi.check(g, spi)?;
        check_pcid(g, self.pcid, vc)?;
        self.replay.check(g, iv)?;
        self.replay.advance(iv);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: Spi = Spi(0x0000_0010); // key 0
    const NEW: Spi = Spi(0x8000_0020); // key 1
    const NEW_SAME_KEY: Spi = Spi(0x0000_0030); // key 0

    fn globals(gen: u32, allow_prev: bool) -> SecurityGlobals {
        SecurityGlobals {
            cur_gen: SpiGeneration(gen),
            allow_prev_gen: allow_prev,
            ..SecurityGlobals::default()
        }
    }

    #[test]
    fn current_spi_matches() {
        let g = globals(5, false);
        let c = SpiCheck::new(OLD, SpiGeneration(5));
        assert_eq!(c.check(&g, OLD), Ok(()));
        assert_eq!(c.check(&g, NEW), Err(RxDrop::SpiMismatch));
        // The key-selector bit is part of the SPI.
        assert_eq!(c.check(&g, Spi(OLD.0 | 1 << 31)), Err(RxDrop::SpiMismatch));
    }

    #[test]
    fn unconfigured_connection_fails() {
        let g = globals(0, true);
        let c = SpiCheck::default();
        assert_eq!(c.check(&g, Spi(0)), Err(RxDrop::SpiUnconfigured));
        assert_eq!(c.check(&g, OLD), Err(RxDrop::SpiUnconfigured));
    }

    #[test]
    fn generation_mismatch_fails() {
        let c = SpiCheck::new(OLD, SpiGeneration(3));
        // Connection two generations behind: fails even with allow_prev.
        assert_eq!(c.check(&globals(5, true), OLD), Err(RxDrop::SpiMismatch));
        // One behind: only while the previous generation is allowed.
        assert_eq!(c.check(&globals(4, true), OLD), Ok(()));
        assert_eq!(c.check(&globals(4, false), OLD), Err(RxDrop::SpiMismatch));
        // Connection ahead of the global generation: fails.
        assert_eq!(c.check(&globals(2, true), OLD), Err(RxDrop::SpiMismatch));
    }

    #[test]
    fn rotation_to_other_key_accepts_prev_prev_gen_until_end() {
        let mut g = globals(7, false);
        let mut c = SpiCheck::new(OLD, SpiGeneration(7));
        g.begin_rotation();
        assert_eq!((g.cur_gen, g.allow_prev_gen), (SpiGeneration(8), true));
        // Before the CM reaches this connection: its generation is the
        // previous one, still allowed.
        assert_eq!(c.check(&g, OLD), Ok(()));
        c.rotate(NEW);
        assert_eq!(
            (c.cur_spi, c.prev_spi, c.cur_gen),
            (NEW, OLD, SpiGeneration(8))
        );
        assert_eq!(c.check(&g, NEW), Ok(()), "current");
        assert_eq!(c.check(&g, OLD), Ok(()), "previous, previous generation");
        assert_eq!(c.check(&g, Spi(0x99)), Err(RxDrop::SpiMismatch));
        // allow_prev_gen off: the old-key SPI is refused.
        g.end_rotation();
        assert_eq!(c.check(&g, OLD), Err(RxDrop::SpiMismatch));
        assert_eq!(c.check(&g, NEW), Ok(()));
    }

    #[test]
    fn rotation_within_same_key_accepts_prev_same_gen() {
        let mut g = globals(1, false);
        let mut c = SpiCheck::new(OLD, SpiGeneration(1));
        g.begin_rotation();
        c.rotate(NEW_SAME_KEY);
        assert_eq!(c.check(&g, OLD), Ok(()), "prev, same generation");
        // Same-key previous SPI does not depend on allow_prev_gen.
        g.end_rotation();
        assert_eq!(c.check(&g, OLD), Ok(()));
        // Retiring the previous SPI stops it.
        c.retire_previous();
        assert_eq!(c.prev_spi, NEW_SAME_KEY);
        assert_eq!(c.check(&g, OLD), Err(RxDrop::SpiMismatch));
        assert_eq!(c.check(&g, NEW_SAME_KEY), Ok(()));
    }

    #[test]
    fn zero_prev_spi_never_matches() {
        let g = globals(1, true);
        let c = SpiCheck {
            cur_spi: NEW,
            prev_spi: Spi(0),
            cur_gen: SpiGeneration(1),
        };
        assert_eq!(c.check(&g, Spi(0)), Err(RxDrop::SpiMismatch));
    }

    #[test]
    fn generation_arithmetic_wraps() {
        let mut g = globals(u32::MAX, false);
        let mut c = SpiCheck::new(OLD, SpiGeneration(u32::MAX));
        g.begin_rotation();
        assert_eq!(g.cur_gen, SpiGeneration(0));
        assert_eq!(c.check(&g, OLD), Ok(()), "conn at MAX = global 0 - 1");
        c.rotate(NEW);
        assert_eq!(c.cur_gen, SpiGeneration(0));
        assert_eq!(c.check(&g, NEW), Ok(()));
        assert_eq!(c.check(&g, OLD), Ok(()));
        assert_eq!(SpiGeneration(0).prev(), SpiGeneration(u32::MAX));
    }

    /// `PacketPassesSPICheck` transcribed line by line from OCP Falcon 0.9
    /// §9.2.2.3 (ocp/falcon-transport-rev0.9.txt p.68), without the PCID
    /// term, as an oracle.
    fn spec_pseudocode(
        cur_spi: u32,
        prev_spi: u32,
        cur_spi_gen: u32,
        global_cur_spi_gen: u32,
        allow_prev_spi_gen: bool,
        hdr_spi: u32,
    ) -> bool {
        let msb = |spi: u32| spi >> 31;
        if cur_spi == 0 {
            return false;
        }
        let prev_spi_gen = global_cur_spi_gen.wrapping_sub(1);
        let cur_spi_gen_matches = if allow_prev_spi_gen {
            cur_spi_gen == global_cur_spi_gen || cur_spi_gen == prev_spi_gen
        } else {
            cur_spi_gen == global_cur_spi_gen
        };
        let cur_spi_matches = cur_spi == hdr_spi && cur_spi_gen_matches;
        let prev_spi_same_gen_matches = msb(cur_spi) == msb(prev_spi)
            && (prev_spi == hdr_spi && prev_spi != 0)
            && cur_spi_gen_matches;
        let prev_spi_prev_gen_matches = msb(cur_spi) != msb(prev_spi)
            && allow_prev_spi_gen
            && (prev_spi == hdr_spi && prev_spi != 0)
            && cur_spi_gen.wrapping_sub(1) == prev_spi_gen;
        cur_spi_matches || prev_spi_same_gen_matches || prev_spi_prev_gen_matches
    }

    #[test]
    fn spi_check_equals_the_spec_pseudocode_exhaustively() {
        let spis = [0, 0x10, 0x20, 0x8000_0010, 0x8000_0020];
        let gens = [0, 1, 2, u32::MAX];
        for cur in spis {
            for prev in spis {
                for cur_gen in gens {
                    for global_gen in gens {
                        for allow in [false, true] {
                            for hdr in spis {
                                let c = SpiCheck {
                                    cur_spi: Spi(cur),
                                    prev_spi: Spi(prev),
                                    cur_gen: SpiGeneration(cur_gen),
                                };
                                let g = globals(global_gen, allow);
                                let expect =
                                    spec_pseudocode(cur, prev, cur_gen, global_gen, allow, hdr);
                                assert_eq!(
                                    c.check(&g, Spi(hdr)).is_ok(),
                                    expect,
                                    "{c:?} global {global_gen} allow {allow} hdr {hdr:#x}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn pcid_check() {
        let mut g = SecurityGlobals::default();
        assert_eq!(check_pcid(&g, 7, None), Ok(()), "disabled");
        assert_eq!(check_pcid(&g, 7, Some(8)), Ok(()), "disabled");
        g.pcid_match_enable = true;
        assert_eq!(check_pcid(&g, 7, Some(7)), Ok(()));
        assert_eq!(check_pcid(&g, 7, Some(8)), Err(RxDrop::PcidMismatch));
        assert_eq!(check_pcid(&g, 7, None), Err(RxDrop::PcidMismatch));
        assert_eq!(check_pcid(&g, 0, None), Err(RxDrop::PcidMismatch));
    }

    #[test]
    fn replay_margin_and_advance() {
        let g = SecurityGlobals::default();
        let ms = DEFAULT_REPLAY_MARGIN_PS;
        let mut r = ReplayCheck::new(10 * ms);
        assert_eq!(r.check(&g, 10 * ms + 1), Ok(()), "newer");
        assert_eq!(r.check(&g, 10 * ms), Ok(()), "equal to remote time");
        assert_eq!(r.check(&g, 9 * ms + 1), Ok(()), "inside margin");
        assert_eq!(
            r.check(&g, 9 * ms),
            Err(RxDrop::Replay),
            "boundary (OCP: strict)"
        );
        assert_eq!(r.check(&g, 9 * ms - 1), Err(RxDrop::Replay), "older");
        r.advance(12 * ms);
        assert_eq!(r.remote_time_ps, 12 * ms);
        r.advance(11 * ms); // reordered packet: remote time stays
        assert_eq!(r.remote_time_ps, 12 * ms);
        assert_eq!(r.check(&g, 10 * ms), Err(RxDrop::Replay));
        assert_eq!(r.check(&g, 11 * ms + 5), Ok(()));
        r.reseed(0);
        assert_eq!(r.remote_time_ps, 0);
    }

    #[test]
    fn replay_is_modular() {
        let g = SecurityGlobals::default();
        let ms = DEFAULT_REPLAY_MARGIN_PS;
        // Remote time just past a 64-bit wrap; IV just before it.
        let r = ReplayCheck::new(5);
        assert_eq!(
            r.check(&g, u64::MAX - 10),
            Ok(()),
            "within margin across wrap"
        );
        assert_eq!(r.check(&g, u64::MAX - 2 * ms), Err(RxDrop::Replay));
        let mut r = ReplayCheck::new(u64::MAX - 3);
        r.advance(2);
        assert_eq!(r.remote_time_ps, 2, "advances across the wrap");
    }

    #[test]
    fn accept_runs_all_checks_and_advances_only_on_success() {
        let mut g = SecurityGlobals {
            pcid_match_enable: true,
            ..SecurityGlobals::default()
        };
        let ms = DEFAULT_REPLAY_MARGIN_PS;
        let mut s = RxSecurity::new(
            SpiCheck::new(OLD, SpiGeneration(0)),
            77,
            ReplayCheck::new(5 * ms),
        );
        assert_eq!(s.accept_fields(&g, OLD, 6 * ms, Some(77)), Ok(()));
        assert_eq!(s.replay.remote_time_ps, 6 * ms);
        assert_eq!(
            s.accept_fields(&g, NEW, 50 * ms, Some(77)),
            Err(RxDrop::SpiMismatch)
        );
        assert_eq!(
            s.accept_fields(&g, OLD, 50 * ms, Some(78)),
            Err(RxDrop::PcidMismatch)
        );
        assert_eq!(
            s.accept_fields(&g, OLD, 50 * ms, None),
            Err(RxDrop::PcidMismatch)
        );
        assert_eq!(
            s.replay.remote_time_ps,
            6 * ms,
            "failed packets do not advance"
        );
        assert_eq!(
            s.accept_fields(&g, OLD, 4 * ms, Some(77)),
            Err(RxDrop::Replay)
        );
        g.pcid_match_enable = false;
        assert_eq!(s.accept_fields(&g, OLD, 7 * ms, None), Ok(()));
        assert_eq!(s.replay.remote_time_ps, 7 * ms);
        let mut unconfigured = RxSecurity::default();
        assert_eq!(
            unconfigured.accept_fields(&g, OLD, 1, None),
            Err(RxDrop::SpiUnconfigured)
        );
    }
}
