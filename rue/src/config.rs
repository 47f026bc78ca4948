//! Configuration errors shared by every algorithm's config struct.
//!
//! Layer: validation only. Each algorithm has a `…Config` struct with a
//! `validate()` that returns the first [`ConfigError`], naming the
//! algorithm and the field as the user writes it in `configs/` (e.g.
//! `swift.max_fcwnd`), so the application can point at the key.

use std::fmt;

/// A configuration value out of its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The algorithm or component (`swift`, `dcqcn`, `bypass`, `rue`, `admission`).
    pub algorithm: &'static str,
    /// The field, as named in the config struct.
    pub field: &'static str,
    /// What the value must satisfy.
    pub problem: &'static str,
}

impl ConfigError {
    /// A new error.
    pub const fn new(algorithm: &'static str, field: &'static str, problem: &'static str) -> Self {
        ConfigError {
            algorithm,
            field,
            problem,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}: {}", self.algorithm, self.field, self.problem)
    }
}

impl std::error::Error for ConfigError {}
