//! `falcon psp encrypt|decrypt`: the google/psp reference tools' jobs, with
//! their flags and configuration files, producing byte-identical pcaps.
//!
//! Where we differ, it is on purpose and stated in `--help` and below:
//! * a packet the reference would abort on (too large, malformed) is skipped
//!   with its reason, and the run goes on; every skip is reported;
//! * decrypt verifies every ICV, also for an empty encrypted region (the
//!   reference skips that check), goes on after a failed packet and exits 1
//!   at the end if any packet failed, so one bad packet does not hide the
//!   rest of the capture.

use std::collections::BTreeMap;

use psp::reference::{self, EncapParams, ReferenceError};
use psp::{AeadContext, Backend, MasterKey, MasterKeys, SaDatabase, SealError, Spi, Version};

use crate::cli::{BackendArg, DecryptArgs, EncryptArgs};
use crate::error::{AppError, Result};
use crate::pcapio::{self, Frame};
use crate::refcfg::{self, Algorithm, Encap, MasterKeyBytes};

/// First IV of a run: the reference counts packets from 1 (`PSP_INITIAL_IV`).
const INITIAL_IV: u64 = 1;

/// Bit 7 of the crypt-offset byte: reserved, authenticated; the reference's
/// `-e` sets it after sealing to force an authentication failure.
const RESERVED_BIT7: u8 = 0x80;

pub fn backend(arg: BackendArg) -> Backend {
    match arg {
        BackendArg::Ring => Backend::Ring,
        BackendArg::Rustcrypto => Backend::RustCrypto,
    }
}

pub fn master_keys(bytes: &MasterKeyBytes) -> MasterKeys {
    MasterKeys {
        k0: MasterKey::new(bytes.k0),
        k1: MasterKey::new(bytes.k1),
    }
}

/// Outcome of a run: packets written and packets skipped, by reason.
#[derive(Debug, Default)]
pub struct Summary {
    pub written: usize,
    pub skipped: BTreeMap<String, usize>,
    pub failed: BTreeMap<String, usize>,
}

impl Summary {
    fn count(map: &mut BTreeMap<String, usize>, reason: String) {
        *map.entry(reason).or_default() += 1;
    }

    fn describe(map: &BTreeMap<String, usize>) -> String {
        map.iter()
            .map(|(reason, n)| format!("{n} {reason}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `falcon psp encrypt`.
pub fn encrypt(args: &EncryptArgs) -> Result<Summary> {
    let cfg = refcfg::read_encrypt(&args.config)?;
    let version = match cfg.algorithm {
        Algorithm::AesGcm128 => Version::Aes128Gcm,
        Algorithm::AesGcm256 => Version::Aes256Gcm,
    };
    let spi = Spi(cfg.spi);
    let key = master_keys(&cfg.keys).derive(spi, version);
    if args.verbose {
        println!(
            "SPI: {:08x}  version: {version:?}  encap: {:?}  vc: {}",
            cfg.spi, cfg.encap, cfg.include_vc
        );
        println!(
            "crypt offsets (4-byte units): transport {}, ipv4 tunnel {}, ipv6 tunnel {}",
            cfg.transport_crypt_offset, cfg.ipv4_tunnel_crypt_offset, cfg.ipv6_tunnel_crypt_offset
        );
        println!("derived key: {}", hex::encode(key.as_bytes()));
    }
    let aead = AeadContext::new(backend(args.backend), &key);
    let frames = pcapio::read_all(&args.input)?;
    let mut out = pcapio::Writer::create(&args.output)?;
    let mut summary = Summary::default();
    let mut iv = INITIAL_IV;

    for (index, frame) in frames.iter().enumerate() {
        let crypt_offset = match (cfg.encap, ip_version(&frame.data)) {
            (Encap::Transport, _) => cfg.transport_crypt_offset,
            (Encap::Tunnel, Some(6)) => cfg.ipv6_tunnel_crypt_offset,
            (Encap::Tunnel, _) => cfg.ipv4_tunnel_crypt_offset,
        };
        let params = EncapParams {
            spi,
            iv,
            crypt_offset,
            vc: cfg.include_vc.then_some(0),
        };
        let sealed = match cfg.encap {
            Encap::Transport => reference::transport_encap(&frame.data, &aead, &params),
            Encap::Tunnel => reference::tunnel_encap(&frame.data, &aead, &params),
        };
        match sealed {
            Ok(mut data) => {
                if args.force_error {
                    if let Some(at) = psp_offset(&data) {
                        data[at + 2] |= RESERVED_BIT7;
                    }
                }
                out.write(&Frame {
                    timestamp: frame.timestamp,
                    data,
                })?;
                summary.written += 1;
                // The reference draws an IV only for packets it encrypts.
                iv += 1;
            }
            Err(e) => {
                let reason = skip_reason(&e);
                eprintln!("packet {}: skipped: {e}", index + 1);
                Summary::count(&mut summary.skipped, reason);
            }
        }
    }
    out.finish()?;
    let skipped: usize = summary.skipped.values().sum();
    println!(
        "encrypted {} packets in {}, skipped {skipped} packets",
        summary.written,
        args.output.display()
    );
    if skipped > 0 {
        println!("skipped: {}", Summary::describe(&summary.skipped));
    }
    Ok(summary)
}

/// `falcon psp decrypt`. Returns an error (exit 1) after writing every good
/// packet when any PSP packet failed to authenticate or parse.
pub fn decrypt(args: &DecryptArgs) -> Result<Summary> {
    let keys = master_keys(&refcfg::read_decrypt(&args.config)?);
    let mut db = SaDatabase::new(backend(args.backend), keys, 4096);
    let frames = pcapio::read_all(&args.input)?;
    let mut out = pcapio::Writer::create(&args.output)?;
    let mut summary = Summary::default();

    for (index, frame) in frames.iter().enumerate() {
        match reference::decap(&frame.data, &mut db) {
            Ok(clear) => {
                if args.verbose {
                    let h = &clear.header;
                    println!(
                        "packet {}: SPI {:08x} version {:?} IV {:016x} {:?} mode",
                        index + 1,
                        h.spi.0,
                        h.version,
                        h.iv,
                        clear.mode
                    );
                }
                out.write(&Frame {
                    timestamp: frame.timestamp,
                    data: clear.frame,
                })?;
                summary.written += 1;
            }
            Err(e @ (ReferenceError::NotIp | ReferenceError::NotPsp)) => {
                eprintln!("packet {}: skipped: {e}", index + 1);
                Summary::count(&mut summary.skipped, skip_reason(&e));
            }
            Err(e) => {
                eprintln!("packet {}: FAILED: {e}", index + 1);
                Summary::count(&mut summary.failed, skip_reason(&e));
            }
        }
    }
    out.finish()?;
    let skipped: usize = summary.skipped.values().sum();
    println!(
        "decrypted {} packets in {}, skipped {skipped} packets",
        summary.written,
        args.output.display()
    );
    if skipped > 0 {
        println!("skipped: {}", Summary::describe(&summary.skipped));
    }
    if !summary.failed.is_empty() {
        return Err(AppError::Failed(format!(
            "psp decryption failed for {} packets: {}",
            summary.failed.values().sum::<usize>(),
            Summary::describe(&summary.failed)
        )));
    }
    Ok(summary)
}

/// Stable snake_case name of why a frame was not (de)capsulated.
fn skip_reason(e: &ReferenceError) -> String {
    match e {
        ReferenceError::NotIp => "not_ip".into(),
        ReferenceError::NotPsp => "not_psp".into(),
        ReferenceError::Malformed(_) => "malformed".into(),
        ReferenceError::UnsupportedTransport => "unsupported_transport".into(),
        ReferenceError::TooLarge => "too_large".into(),
        ReferenceError::Seal(SealError::CryptOffsetBeyondPayload) => {
            "crypt_offset_beyond_payload".into()
        }
        ReferenceError::Seal(SealError::CryptOffsetInsideExtension) => {
            "crypt_offset_inside_vc".into()
        }
        ReferenceError::Seal(_) => "seal_error".into(),
        ReferenceError::Drop(reason) => reason.name().into(),
    }
}

/// IP version of an Ethernet frame, when it is IP.
fn ip_version(frame: &[u8]) -> Option<u8> {
    match frame.get(12..14)? {
        [0x08, 0x00] => Some(4),
        [0x86, 0xdd] => Some(6),
        _ => None,
    }
}

/// Offset of the PSP header in a frame this tool just built (Ethernet, outer
/// IPv4 or IPv6, UDP).
fn psp_offset(frame: &[u8]) -> Option<usize> {
    const ETH: usize = 14;
    const UDP: usize = 8;
    let ip_len = match ip_version(frame)? {
        4 => usize::from(frame.get(ETH)? & 0x0f) * 4,
        _ => 40,
    };
    let at = ETH + ip_len + UDP;
    (frame.len() > at + 2).then_some(at)
}
