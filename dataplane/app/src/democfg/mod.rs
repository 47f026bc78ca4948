//! The configuration of `falcon demo`: the embedded default, a TOML file
//! (`--config`), then the flags given on the command line, in that order.
//!
//! Layer: application configuration; reads one file, never the engine's
//! state. Owns [`EffectiveConfig`] (the merged values and where each came
//! from) and the error rules of DESIGN §4: a bad file is exit 2 with the
//! file, the line and the dotted key (`delivery.tx_window`); a value the
//! engine refuses names the key in the file, or the flag that set it. The
//! schema is in [`schema`], the conversion to engine configs in [`build`],
//! key and line lookup in the text in [`locate`].

pub mod build;
pub mod locate;
pub mod schema;

use std::path::{Path, PathBuf};

use falcon_core::engine::ConfigError;

pub use build::{NvmeWorkload, RdmaWorkload, Setup, Workload};
pub use schema::DemoConfig;

use crate::cli::DemoArgs;
use crate::error::{AppError, Result};

/// The configuration a demo run uses, and where its values came from.
#[derive(Debug, Clone)]
pub struct EffectiveConfig {
    pub config: DemoConfig,
    origin: Origin,
}

/// Where the values came from, to name them in errors.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// The `--config` file and its text.
    file: Option<(PathBuf, String)>,
    /// Keys set by a flag: (key, flag).
    flags: Vec<(&'static str, &'static str)>,
}

impl EffectiveConfig {
    /// The embedded default, then `--config`, then the flags given.
    ///
    /// # Errors
    ///
    /// The file cannot be read or does not parse ([`AppError`], exit 2).
    pub fn resolve(args: &DemoArgs) -> Result<Self> {
        let (mut config, mut origin) = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| AppError::io(path, e))?;
                let config = parse(path, &text)?;
                (config, Origin::file(path, &text))
            }
            None => (DemoConfig::default(), Origin::default()),
        };
        let w = &mut config.workload;
        let f = &mut config.faults;
        let mut set = |key, flag, given: bool| {
            if given {
                origin.flags.push((key, flag));
            }
        };
        set(
            "workload.transactions",
            "--transactions",
            args.transactions.is_some(),
        );
        set("workload.depth", "--depth", args.depth.is_some());
        set(
            "workload.push_fraction",
            "--push-fraction",
            args.push_fraction.is_some(),
        );
        set("workload.seed", "--seed", args.seed.is_some());
        set("workload.timeout_s", "--timeout", args.timeout.is_some());
        set("faults.loss", "--loss", args.loss.is_some());
        set("faults.reorder", "--reorder", args.reorder.is_some());
        set("faults.duplicate", "--duplicate", args.duplicate.is_some());
        set("faults.corrupt", "--corrupt", args.corrupt.is_some());
        set("target_ulp.rnr", "--rnr", args.rnr.is_some());
        set(
            "target_ulp.rnr_timeout_ms",
            "--rnr-timeout-ms",
            args.rnr_timeout_ms.is_some(),
        );
        set("target_ulp.cie", "--cie", args.cie.is_some());
        set("rue.placement", "--rue-thread", args.rue_thread);
        set(
            "nvme.commands",
            "--nvme-commands",
            args.nvme_commands.is_some(),
        );
        set("nvme.enabled", "--no-nvme", args.no_nvme);
        set("rdma.operations", "--rdma-ops", args.rdma_ops.is_some());
        set("rdma.enabled", "--no-rdma", args.no_rdma);
        set(
            "psp.rotate_every_transactions",
            "--rotate-keys-every",
            args.rotate_keys_every.is_some(),
        );
        w.transactions = args.transactions.unwrap_or(w.transactions);
        w.depth = args.depth.unwrap_or(w.depth);
        w.push_fraction = args.push_fraction.unwrap_or(w.push_fraction);
        w.seed = args.seed.unwrap_or(w.seed);
        w.timeout_s = args.timeout.unwrap_or(w.timeout_s);
        f.loss = args.loss.unwrap_or(f.loss);
        f.reorder = args.reorder.unwrap_or(f.reorder);
        f.duplicate = args.duplicate.unwrap_or(f.duplicate);
        f.corrupt = args.corrupt.unwrap_or(f.corrupt);
        let u = &mut config.target_ulp;
        u.rnr = args.rnr.unwrap_or(u.rnr);
        u.rnr_timeout_ms = args.rnr_timeout_ms.unwrap_or(u.rnr_timeout_ms);
        u.cie = args.cie.unwrap_or(u.cie);
        if let Some(n) = args.rotate_keys_every {
            config.psp.rotate_every_transactions = n;
        }
        if args.rue_thread {
            config.rue.placement = schema::RuePlacement::Thread;
        }
        if let Some(n) = args.nvme_commands {
            config.nvme.commands = n;
        }
        if args.no_nvme {
            config.nvme.enabled = false;
        }
        if let Some(n) = args.rdma_ops {
            config.rdma.operations = n;
        }
        if args.no_rdma {
            config.rdma.enabled = false;
        }
        Ok(EffectiveConfig { config, origin })
    }

    /// Checks every value and builds what the demo runs.
    ///
    /// # Errors
    ///
    /// The first value out of range, by flag or file key (exit 2).
    pub fn setup(&self) -> Result<Setup> {
        build::setup(&self.config, &self.origin)
    }

    /// An error the engine returned while the demo set up, with the key.
    pub fn engine_error(&self, e: ConfigError) -> AppError {
        self.origin.engine_error(e)
    }

    /// The configuration as a TOML file (`--print-config`).
    ///
    /// # Errors
    ///
    /// A value TOML cannot hold (an integer above 2^63 − 1, from a flag).
    pub fn to_toml(&self) -> Result<String> {
        let body = toml::to_string_pretty(&self.config).map_err(|e| {
            AppError::Usage(format!(
                "--print-config: {e} (TOML integers are at most 2^63 - 1)"
            ))
        })?;
        let source = match &self.origin.file {
            Some((path, _)) => format!("{} and the embedded default", path.display()),
            None => "the embedded default".into(),
        };
        let flags: Vec<&str> = self.origin.flags.iter().map(|(_, flag)| *flag).collect();
        let flags = if flags.is_empty() {
            String::new()
        } else {
            format!(", overridden by {}", flags.join(" "))
        };
        Ok(format!(
            "# falcon demo: effective configuration ({source}{flags}).\n# Keys, units and spec sections: configs/demo.toml.\n\n{body}"
        ))
    }
}

/// Parses the text of a demo configuration file.
///
/// # Errors
///
/// A syntax error, an unknown key or a value of the wrong type: exit 2
/// with the file, the line and the dotted key.
pub fn parse(path: &Path, text: &str) -> Result<DemoConfig> {
    toml::from_str(text).map_err(|e| {
        let line = e.span().map(|span| locate::line_at(text, span.start));
        let key = line
            .map(|line| locate::key_at(text, line))
            .unwrap_or_default();
        AppError::config(path, line, &key, e.message().trim())
    })
}

/// Reads a demo configuration file.
///
/// # Errors
///
/// As [`parse`], or the file cannot be read.
pub fn load(path: &Path) -> Result<DemoConfig> {
    let text = std::fs::read_to_string(path).map_err(|e| AppError::io(path, e))?;
    parse(path, &text)
}

impl Origin {
    /// Values from `path` with this text, no flags.
    pub fn file(path: impl Into<PathBuf>, text: &str) -> Self {
        Origin {
            file: Some((path.into(), text.to_string())),
            flags: Vec::new(),
        }
    }

    /// A value of `key` is unusable: names the flag that set it, or the
    /// file, the key and its line.
    pub fn error(&self, key: &str, problem: impl Into<String>) -> AppError {
        let problem = problem.into();
        if let Some((_, flag)) = self.flags.iter().find(|(k, _)| *k == key) {
            return AppError::Usage(format!("{flag} {problem}"));
        }
        match &self.file {
            Some((path, text)) => AppError::config(path, locate::line_of(text, key), key, problem),
            // Only a broken embedded default gets here (tests keep it valid).
            None => AppError::Usage(format!("embedded default `{key}`: {problem}")),
        }
    }

    /// An engine `ConfigError`, with its field mapped to the file's key.
    pub fn engine_error(&self, e: ConfigError) -> AppError {
        self.error(&build::key_of_engine_field(e.field), e.problem)
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::cli::Cli;

    fn args() -> DemoArgs {
        DemoArgs::default()
    }

    #[test]
    fn an_empty_file_is_the_default_and_print_config_reads_back() {
        assert_eq!(
            parse(Path::new("x.toml"), "").unwrap(),
            DemoConfig::default()
        );
        let effective = EffectiveConfig::resolve(&args()).unwrap();
        let printed = effective.to_toml().unwrap();
        assert_eq!(
            parse(Path::new("x.toml"), &printed).unwrap(),
            DemoConfig::default()
        );
        assert!(
            printed.starts_with("# falcon demo: effective configuration (the embedded default).")
        );
    }

    #[test]
    fn parse_errors_name_file_line_and_key() {
        let msg = parse(Path::new("f.toml"), "[delivery]\n\ntx_windw = 3\n")
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("f.toml:3: `delivery.tx_windw`: unknown field"),
            "{msg}"
        );
        let msg = parse(Path::new("f.toml"), "[delivery]\ntx_window = \"big\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("f.toml:2: `delivery.tx_window`: invalid type"),
            "{msg}"
        );
        let msg = parse(Path::new("f.toml"), "[delivry]\n")
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("f.toml:1: `delivry`: unknown field"),
            "{msg}"
        );
        let msg = parse(Path::new("f.toml"), "[psp]\nversion = \"aes-gcm-192\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("f.toml:2: `psp.version`: unknown variant"),
            "{msg}"
        );
        let msg = parse(Path::new("f.toml"), "[initiator]\nmac = \"02:00\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("f.toml:2: `initiator.mac`: `02:00` is not a MAC"),
            "{msg}"
        );
        let msg = parse(Path::new("f.toml"), "[workload]\ndepth = -1\n")
            .unwrap_err()
            .to_string();
        assert!(msg.starts_with("f.toml:2: `workload.depth`"), "{msg}");
        let msg = parse(Path::new("f.toml"), "[faults\nloss = 1\n")
            .unwrap_err()
            .to_string();
        assert!(msg.starts_with("f.toml:1: "), "{msg}");
        assert_eq!(parse(Path::new("f.toml"), "x").unwrap_err().exit_code(), 2);
    }

    #[test]
    fn flags_override_the_file_and_are_named_in_errors() {
        let origin = Origin::file("d.toml", "[faults]\nloss = 0.9\n");
        let err = origin.error("faults.loss", "must be between 0 and 0.5, got 0.9");
        assert_eq!(
            err.to_string(),
            "d.toml:2: `faults.loss`: must be between 0 and 0.5, got 0.9"
        );
        let effective = EffectiveConfig::resolve(&DemoArgs {
            loss: Some(0.7),
            seed: Some(9),
            ..args()
        })
        .unwrap();
        assert_eq!(effective.config.faults.loss, 0.7);
        assert_eq!(effective.config.workload.seed, 9);
        let err = effective.setup().unwrap_err();
        assert_eq!(err.to_string(), "--loss must be between 0 and 0.5, got 0.7");
        assert!(effective
            .to_toml()
            .unwrap()
            .contains("overridden by --seed --loss"));
    }

    /// The flags' help states the embedded default: keep it true.
    #[test]
    fn flag_help_states_the_embedded_default() {
        let d = DemoConfig::default();
        let command = Cli::command();
        let demo = command.find_subcommand("demo").unwrap();
        for (flag, key, default) in [
            (
                "transactions",
                "workload.transactions",
                d.workload.transactions.to_string(),
            ),
            ("depth", "workload.depth", d.workload.depth.to_string()),
            (
                "push_fraction",
                "workload.push_fraction",
                d.workload.push_fraction.to_string(),
            ),
            ("seed", "workload.seed", d.workload.seed.to_string()),
            (
                "timeout",
                "workload.timeout_s",
                d.workload.timeout_s.to_string(),
            ),
            ("loss", "faults.loss", d.faults.loss.to_string()),
            ("reorder", "faults.reorder", d.faults.reorder.to_string()),
            (
                "duplicate",
                "faults.duplicate",
                d.faults.duplicate.to_string(),
            ),
            ("corrupt", "faults.corrupt", d.faults.corrupt.to_string()),
            ("rnr", "target_ulp.rnr", d.target_ulp.rnr.to_string()),
            (
                "rnr_timeout_ms",
                "target_ulp.rnr_timeout_ms",
                d.target_ulp.rnr_timeout_ms.to_string(),
            ),
            ("cie", "target_ulp.cie", d.target_ulp.cie.to_string()),
            (
                "nvme_commands",
                "nvme.commands",
                d.nvme.commands.to_string(),
            ),
            ("rdma_ops", "rdma.operations", d.rdma.operations.to_string()),
        ] {
            let arg = demo.get_arguments().find(|a| a.get_id() == flag).unwrap();
            let help = arg.get_help().unwrap().to_string();
            assert!(
                help.contains(&format!("[{key}, default {default}]")),
                "--{flag}: {help}"
            );
        }
    }
}
