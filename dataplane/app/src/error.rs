//! Errors of the `falcon` binary and the exit codes they map to.
//!
//! Exit code 2 means the user handed over something unusable (a missing or
//! malformed file, a bad configuration value, a bad flag); exit code 1 means
//! the job ran and failed (a packet that did not verify, a bar not met).
//! Every message names the file, and the key or line where one applies.

use std::fmt;
use std::path::{Path, PathBuf};

/// What went wrong, with enough context for the user to fix it.
#[derive(Debug)]
pub enum AppError {
    /// A file could not be opened, read or written.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A configuration file has a missing or invalid value.
    Config {
        path: PathBuf,
        line: Option<usize>,
        key: String,
        problem: String,
    },
    /// A pcap file is not readable as pcap.
    Pcap { path: PathBuf, problem: String },
    /// A command-line value is out of range.
    Usage(String),
    /// The job ran but its result is wrong (verification or processing failed).
    Failed(String),
}

impl AppError {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        AppError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn config(path: &Path, line: Option<usize>, key: &str, problem: impl Into<String>) -> Self {
        AppError::Config {
            path: path.to_path_buf(),
            line,
            key: key.to_string(),
            problem: problem.into(),
        }
    }

    pub fn pcap(path: &Path, problem: impl fmt::Display) -> Self {
        AppError::Pcap {
            path: path.to_path_buf(),
            problem: problem.to_string(),
        }
    }

    /// Process exit code: 2 for bad input handed over by the user, 1 for failures.
    pub fn exit_code(&self) -> i32 {
        match self {
            AppError::Failed(_) => 1,
            _ => 2,
        }
    }
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            AppError::Config {
                path,
                line,
                key,
                problem,
            } => {
                write!(f, "{}", path.display())?;
                if let Some(line) = line {
                    write!(f, ":{line}")?;
                }
                // A syntax error before any key names no key.
                if !key.is_empty() {
                    write!(f, ": `{key}`")?;
                }
                write!(f, ": {problem}")
            }
            AppError::Pcap { path, problem } => {
                write!(f, "{}: not a usable pcap file: {problem}", path.display())
            }
            AppError::Usage(msg) => write!(f, "{msg}"),
            AppError::Failed(msg) => write!(f, "{msg}"),
        }
    }
}

impl std::error::Error for AppError {}

pub type Result<T> = std::result::Result<T, AppError>;
