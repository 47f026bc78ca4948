//! The node configuration of `falcon run --config F` (issue #26, item 1).
//!
//! Layer: application configuration; reads one file, never starts DPDK.
//! [`load`] parses it ([`schema`]) and checks it ([`check`]) into a
//! [`Plan`], so that every mistake is found before the EAL starts, each
//! error naming the file, the line and the dotted key
//! (`connections[1].peer`), exit 2 (DESIGN §4). What can only be known
//! with DPDK up (whether the device exists, how many queues it has) is
//! checked when the port starts, and named the same way.

pub mod check;
pub mod schema;

use std::path::Path;

pub use check::{Plan, PlannedConnection, PlannedPeer};
pub use schema::RunConfig;

use crate::democfg::locate;
use crate::democfg::Origin;
use crate::error::{AppError, Result};

/// Parses `text` (the contents of `path`).
///
/// # Errors
///
/// [`AppError::Config`] with the line and key of the first problem.
pub fn parse(path: &Path, text: &str) -> Result<RunConfig> {
    toml::from_str(text).map_err(|e| {
        let line = e.span().map(|span| locate::line_at(text, span.start));
        let key = line
            .map(|line| locate::key_at(text, line))
            .unwrap_or_default();
        AppError::config(path, line, &key, e.message().trim())
    })
}

/// Reads, parses and checks a node configuration.
///
/// # Errors
///
/// The file cannot be read, does not parse, or a value is unusable (each
/// naming the file, line and key).
pub fn load(path: &Path) -> Result<Plan> {
    let text = std::fs::read_to_string(path).map_err(|e| AppError::io(path, e))?;
    let config = parse(path, &text)?;
    check::plan(&config, &Origin::file(path, &text))
}
