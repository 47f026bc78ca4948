//! The configuration files of the reference PSP tools (google/psp
//! `psp_encrypt` / `psp_decrypt`), so `falcon psp encrypt|decrypt` take the
//! very same inputs and their outputs can be compared byte for byte.
//!
//! The format is a sequence of whitespace-separated tokens (the reference
//! reads it with `fscanf`):
//!
//! ```text
//! 34 44 8a ... (32 hex bytes)   master key 0
//! 56 39 52 ... (32 hex bytes)   master key 1
//! 9A345678                      SPI (hex; its MSB selects the master key)   } encrypt
//! transport | tunnel            encapsulation mode                          } only
//! aes-gcm-128 | aes-gcm-256     crypto algorithm                            }
//! 1                             transport-mode crypt offset (4-byte units)  }
//! 6                             IPv4 tunnel-mode crypt offset               }
//! 11                            IPv6 tunnel-mode crypt offset               }
//! vc | no-vc                    include a virtualization cookie             }
//! ```
//!
//! A decrypt file holds only the two master keys. Every error names the
//! file, the line and the value being read. As an extension, `#` starts a
//! comment that runs to the end of the line (the commented examples in
//! `configs/psp/`); files without comments stay readable by the reference.

use std::path::Path;

use crate::error::{AppError, Result};

/// PSP encapsulation mode of the reference tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encap {
    /// PSP between the outer IP header and the original L4 header.
    Transport,
    /// PSP in front of the whole original IP packet, behind a new outer IP/UDP.
    Tunnel,
}

/// AEAD of the SA: PSP header versions 0 and 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    AesGcm128,
    AesGcm256,
}

/// The two 256-bit master keys (both files start with them).
pub struct MasterKeyBytes {
    pub k0: [u8; 32],
    pub k1: [u8; 32],
}

/// Everything `psp_encrypt` reads from its configuration file.
pub struct EncryptConfig {
    pub keys: MasterKeyBytes,
    pub spi: u32,
    pub encap: Encap,
    pub algorithm: Algorithm,
    /// Crypt offsets in 4-byte units: transport, IPv4 tunnel, IPv6 tunnel.
    pub transport_crypt_offset: u8,
    pub ipv4_tunnel_crypt_offset: u8,
    pub ipv6_tunnel_crypt_offset: u8,
    pub include_vc: bool,
}

/// Largest crypt offset the 6-bit header field holds. The reference accepts
/// 64 (`PSP_CRYPT_OFFSET_MAX`) and then writes 0x40 into the header byte,
/// which sets a reserved bit; we reject it instead.
pub const MAX_CRYPT_OFFSET: u8 = 63;

/// Reads a `psp_encrypt` configuration file.
pub fn read_encrypt(path: &Path) -> Result<EncryptConfig> {
    let text = std::fs::read_to_string(path).map_err(|e| AppError::io(path, e))?;
    parse_encrypt(path, &text)
}

/// Reads a `psp_decrypt` configuration file (two master keys; anything after
/// them, such as the rest of an encrypt file, is ignored as the reference does).
pub fn read_decrypt(path: &Path) -> Result<MasterKeyBytes> {
    let text = std::fs::read_to_string(path).map_err(|e| AppError::io(path, e))?;
    parse_decrypt(path, &text)
}

/// Parses the text of a `psp_decrypt` configuration file; `path` names it
/// in errors.
pub fn parse_decrypt(path: &Path, text: &str) -> Result<MasterKeyBytes> {
    let mut tokens = Tokens::new(path, text);
    read_master_keys(&mut tokens)
}

/// `configs/psp/decrypt.cfg`, built into the binary: the PSP specification's
/// example master keys ("Examples of key derivation"), the default of the
/// tools that need keys, so they run from any directory. The file stays the
/// one source of the bytes.
pub const EXAMPLE_DECRYPT_CFG: &str = include_str!("../../../configs/psp/decrypt.cfg");

/// How [`example_keys`] names the built-in file in errors.
pub const EXAMPLE_DECRYPT_CFG_NAME: &str = "configs/psp/decrypt.cfg (built in)";

/// The PSP specification's example master keys, from
/// [`EXAMPLE_DECRYPT_CFG`].
///
/// # Errors
///
/// Only if the built-in file does not parse (a build from a broken tree;
/// a test guards it).
pub fn example_keys() -> Result<MasterKeyBytes> {
    parse_decrypt(Path::new(EXAMPLE_DECRYPT_CFG_NAME), EXAMPLE_DECRYPT_CFG)
}

/// The master keys in `path`, or the built-in example keys without one.
///
/// # Errors
///
/// The file cannot be read or does not parse (named, with the line).
pub fn decrypt_keys_or_example(path: Option<&Path>) -> Result<MasterKeyBytes> {
    match path {
        Some(path) => read_decrypt(path),
        None => example_keys(),
    }
}

/// Parses the text of a `psp_encrypt` configuration file.
pub fn parse_encrypt(path: &Path, text: &str) -> Result<EncryptConfig> {
    let mut t = Tokens::new(path, text);
    let keys = read_master_keys(&mut t)?;

    let (line, tok) = t.next("spi")?;
    let spi = u32::from_str_radix(tok, 16)
        .map_err(|_| t.error(line, "spi", format!("`{tok}` is not a 32-bit hex value")))?;
    // PSP spec "Security Parameters Index": the low 31 bits must not be zero.
    if spi & 0x7fff_ffff == 0 {
        return Err(t.error(
            line,
            "spi",
            format!("{spi:08X}: the low 31 bits must not be zero"),
        ));
    }

    let (line, tok) = t.next("encap mode")?;
    let encap = match tok {
        "transport" => Encap::Transport,
        "tunnel" => Encap::Tunnel,
        _ => {
            return Err(t.error(
                line,
                "encap mode",
                format!("`{tok}`: expected `transport` or `tunnel`"),
            ))
        }
    };

    let (line, tok) = t.next("crypto algorithm")?;
    let algorithm = match tok {
        "aes-gcm-128" => Algorithm::AesGcm128,
        "aes-gcm-256" => Algorithm::AesGcm256,
        _ => {
            return Err(t.error(
                line,
                "crypto algorithm",
                format!("`{tok}`: expected `aes-gcm-128` or `aes-gcm-256`"),
            ))
        }
    };

    let transport_crypt_offset = read_crypt_offset(&mut t, "transport crypt offset")?;
    let ipv4_tunnel_crypt_offset = read_crypt_offset(&mut t, "ipv4 tunnel crypt offset")?;
    let ipv6_tunnel_crypt_offset = read_crypt_offset(&mut t, "ipv6 tunnel crypt offset")?;

    let (line, tok) = t.next("vc")?;
    let include_vc = match tok {
        "vc" => true,
        "no-vc" => false,
        _ => return Err(t.error(line, "vc", format!("`{tok}`: expected `vc` or `no-vc`"))),
    };

    Ok(EncryptConfig {
        keys,
        spi,
        encap,
        algorithm,
        transport_crypt_offset,
        ipv4_tunnel_crypt_offset,
        ipv6_tunnel_crypt_offset,
        include_vc,
    })
}

fn read_master_keys(t: &mut Tokens<'_>) -> Result<MasterKeyBytes> {
    Ok(MasterKeyBytes {
        k0: read_key(t, "master key 0")?,
        k1: read_key(t, "master key 1")?,
    })
}

fn read_key(t: &mut Tokens<'_>, what: &str) -> Result<[u8; 32]> {
    let mut key = [0u8; 32];
    for (i, byte) in key.iter_mut().enumerate() {
        let (line, tok) = t.next(what)?;
        *byte = parse_hex_byte(tok).ok_or_else(|| {
            t.error(
                line,
                what,
                format!("byte {i}: `{tok}` is not a hex byte (32 hex bytes expected)"),
            )
        })?;
    }
    Ok(key)
}

/// `%hhx` accepts one or two hex digits, optionally prefixed by 0x.
fn parse_hex_byte(tok: &str) -> Option<u8> {
    let digits = tok
        .strip_prefix("0x")
        .or_else(|| tok.strip_prefix("0X"))
        .unwrap_or(tok);
    if digits.is_empty() || digits.len() > 2 {
        return None;
    }
    u8::from_str_radix(digits, 16).ok()
}

fn read_crypt_offset(t: &mut Tokens<'_>, what: &str) -> Result<u8> {
    let (line, tok) = t.next(what)?;
    let value: u8 = tok
        .parse()
        .map_err(|_| t.error(line, what, format!("`{tok}` is not a non-negative integer")))?;
    if value > MAX_CRYPT_OFFSET {
        return Err(t.error(
            line,
            what,
            format!("{value} units of 4 bytes: the header field holds at most {MAX_CRYPT_OFFSET}"),
        ));
    }
    Ok(value)
}

/// Whitespace-separated tokens with their 1-based line numbers.
struct Tokens<'a> {
    path: &'a Path,
    iter: Box<dyn Iterator<Item = (usize, &'a str)> + 'a>,
    last_line: usize,
}

impl<'a> Tokens<'a> {
    fn new(path: &'a Path, text: &'a str) -> Self {
        let iter = text
            .lines()
            .enumerate()
            .map(|(n, line)| (n, line.split('#').next().unwrap_or("")))
            .flat_map(|(n, line)| line.split_whitespace().map(move |tok| (n + 1, tok)));
        Tokens {
            path,
            iter: Box::new(iter),
            last_line: 1,
        }
    }

    fn next(&mut self, what: &str) -> Result<(usize, &'a str)> {
        match self.iter.next() {
            Some((line, tok)) => {
                self.last_line = line;
                Ok((line, tok))
            }
            None => Err(self.error(self.last_line, what, "missing: the file ends before it")),
        }
    }

    fn error(&self, line: usize, key: &str, problem: impl Into<String>) -> AppError {
        AppError::config(self.path, Some(line), key, problem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VC_CFG: &str = "34 44 8a 06 42 92 60 1b 11 a0 97 8f 56 a2 d3 4c f3 fc 35 ed e1 a6 bc 04 f8 db 3e 52 43 a2 b0 ca\n\
56 39 52 56 5d 3a 78 ae 77 3e c1 b7 79 f2 f2 d9 9f 4a 7f 53 a6 fb b9 b0 7d 5b 71 f3 93 64 d7 39\n\
9A345678\ntransport\naes-gcm-128\n3\n8\n13\nvc\n";

    fn parse(text: &str) -> Result<EncryptConfig> {
        parse_encrypt(Path::new("test.cfg"), text)
    }

    #[test]
    fn reference_vc_config_parses() {
        let cfg = parse(VC_CFG).unwrap();
        assert_eq!(cfg.keys.k0[0], 0x34);
        assert_eq!(cfg.keys.k0[31], 0xca);
        assert_eq!(cfg.keys.k1[0], 0x56);
        assert_eq!(cfg.keys.k1[31], 0x39);
        assert_eq!(cfg.spi, 0x9A34_5678);
        assert_eq!(cfg.encap, Encap::Transport);
        assert_eq!(cfg.algorithm, Algorithm::AesGcm128);
        assert_eq!(
            (
                cfg.transport_crypt_offset,
                cfg.ipv4_tunnel_crypt_offset,
                cfg.ipv6_tunnel_crypt_offset
            ),
            (3, 8, 13)
        );
        assert!(cfg.include_vc);
    }

    /// The built-in keys are the file's, and they are the PSP
    /// specification's example keys: SPI 0x12345678, version 0, derives
    /// its known answer (spec/psp.md §6.1).
    #[test]
    fn built_in_example_keys_are_the_config_file_and_the_spec_vector() {
        let built_in = example_keys().unwrap();
        let sa_key = crate::cmd::psp_tool::master_keys(&built_in)
            .derive(psp::Spi(0x1234_5678), psp::Version::Aes128Gcm);
        assert_eq!(
            hex::encode(sa_key.as_bytes()),
            "96c22dc799198090b74b70ae468e4e30"
        );
        let file = read_decrypt(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/psp/decrypt.cfg"),
        )
        .unwrap();
        assert_eq!((built_in.k0, built_in.k1), (file.k0, file.k1));
        let vc = parse(VC_CFG).unwrap();
        assert_eq!((built_in.k0, built_in.k1), (vc.keys.k0, vc.keys.k1));
        assert!(decrypt_keys_or_example(None).is_ok());
        let missing = decrypt_keys_or_example(Some(Path::new("no/such/keys.cfg")));
        assert!(missing
            .err()
            .unwrap()
            .to_string()
            .contains("no/such/keys.cfg"));
    }

    #[test]
    fn comments_are_ignored() {
        let commented = VC_CFG.replace(
            "9A345678\n",
            "9A345678 # SPI: MSB set, so master key 1\n# a whole-line comment\n",
        );
        let cfg = parse(&commented).unwrap();
        assert_eq!(cfg.spi, 0x9A34_5678);
        assert!(cfg.include_vc);
    }

    #[test]
    fn errors_name_key_and_line() {
        let bad = VC_CFG.replace("aes-gcm-128", "aes-gcm-192");
        let msg = parse(&bad).err().unwrap().to_string();
        assert_eq!(msg, "test.cfg:5: `crypto algorithm`: `aes-gcm-192`: expected `aes-gcm-128` or `aes-gcm-256`");

        let truncated: String = VC_CFG.lines().take(4).collect::<Vec<_>>().join("\n");
        let msg = parse(&truncated).err().unwrap().to_string();
        assert!(msg.contains("`crypto algorithm`: missing"), "{msg}");

        let bad_key = VC_CFG.replacen("8a", "zz", 1);
        let msg = parse(&bad_key).err().unwrap().to_string();
        assert!(
            msg.starts_with("test.cfg:1: `master key 0`: byte 2"),
            "{msg}"
        );

        let big_offset = VC_CFG.replace("\n13\n", "\n64\n");
        let msg = parse(&big_offset).err().unwrap().to_string();
        assert!(msg.contains("`ipv6 tunnel crypt offset`"), "{msg}");

        let zero_spi = VC_CFG.replace("9A345678", "80000000");
        let err = parse(&zero_spi).err().unwrap();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("`spi`"));
    }
}
