//! The configuration of `falcon nvme-target --config F` (issue #27, item
//! 4): the node, its port, the engine tables, the target ULP, the
//! namespaces it exports and the storage workers that own them.
//!
//! Layer: application configuration; reads one file, opens no namespace
//! and starts no port. [`load`] parses it ([`schema`]) and checks it
//! ([`check`]) into a [`Plan`], so that every mistake is found before the
//! target starts, each error naming the file, the line and the dotted key
//! (`namespaces[1].lba_size`), exit 2 (DESIGN §4). The namespaces are the
//! control plane's export of ulp.md §3.9: "Target NSID → block device,
//! LBA size 512/4096, metadata 0/8/16, Target SQID → worker queue".

pub mod check;
pub mod schema;

use std::path::Path;

pub use check::{Plan, PlannedBacking, PlannedNamespace, PlannedWorker, PortPlan};
pub use schema::NvmeTargetConfig;

use crate::democfg::locate;
use crate::democfg::Origin;
use crate::error::{AppError, Result};

/// Parses `text` (the contents of `path`).
///
/// # Errors
///
/// [`AppError::Config`] with the line and key of the first problem.
pub fn parse(path: &Path, text: &str) -> Result<NvmeTargetConfig> {
    toml::from_str(text).map_err(|e| {
        let line = e.span().map(|span| locate::line_at(text, span.start));
        let key = line
            .map(|line| locate::key_at(text, line))
            .unwrap_or_default();
        AppError::config(path, line, &key, e.message().trim())
    })
}

/// Reads, parses and checks an nvme-target configuration.
///
/// # Errors
///
/// The file cannot be read, does not parse, or a value is unusable (each
/// naming the file, line and key).
pub fn load(path: &Path) -> Result<Plan> {
    let text = std::fs::read_to_string(path).map_err(|e| AppError::io(path, e))?;
    plan_text(path, &text)
}

/// Parses and checks `text` as the file `path`.
///
/// # Errors
///
/// As [`load`].
pub fn plan_text(path: &Path, text: &str) -> Result<Plan> {
    let config = parse(path, text)?;
    check::plan(&config, &Origin::file(path, text))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    const MINIMAL: &str = r#"
[node]
ip = "10.0.0.2"
control = "127.0.0.1:4420"

[port]
kind = "udp"
bind = "127.0.0.1:4421"

[[namespaces]]
nsid = 1
backing = "ram"
size = "64M"
"#;

    fn plan(text: &str) -> Result<Plan> {
        plan_text(Path::new("t.toml"), text)
    }

    fn error(text: &str) -> String {
        plan(text).unwrap_err().to_string()
    }

    /// The shipped example loads: UDP, a RAM and a file namespace, one
    /// worker on SQID 0, the loopback's timeouts.
    #[test]
    fn the_example_config_loads() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../configs/nvme-target.toml");
        let plan = load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(plan.port, PortPlan::Udp { .. }), "{:?}", plan.port);
        assert!(plan.psp.is_some());
        assert_eq!(plan.namespaces.len(), 2);
        assert_eq!(plan.namespaces[0].backing, PlannedBacking::Ram);
        assert!(matches!(
            plan.namespaces[1].backing,
            PlannedBacking::File { .. }
        ));
        assert_eq!(plan.workers.len(), 1);
        assert_eq!(plan.workers[0].sqids, vec![0]);
        assert_eq!(plan.workers[0].nsids, vec![1, 2]);
        // A retransmit timeout for processes that lose their CPU for a
        // scheduler slice, not a NIC's millisecond.
        assert!(plan.delivery.initial_rto >= std::time::Duration::from_millis(5));
    }

    #[test]
    fn a_minimal_file_takes_the_defaults() {
        let plan = plan(MINIMAL).unwrap();
        assert_eq!(plan.namespaces[0].config.blocks, (64 << 20) / 512);
        assert_eq!(plan.namespaces[0].sqid, 0);
        assert_eq!(plan.target, nvme_ulp::target::TargetConfig::default());
    }

    /// Parse errors and check errors alike name the file, the line and
    /// the key.
    #[test]
    fn errors_name_file_line_and_key() {
        let e = error(&format!("{MINIMAL}lba_size = 1024\n"));
        assert!(
            e.starts_with("t.toml:14: `namespaces[0].lba_size`: "),
            "{e}"
        );
        let e = error(&format!("{MINIMAL}colour = 1\n"));
        assert!(
            e.starts_with("t.toml:14: `namespaces[0].colour`: unknown field"),
            "{e}"
        );
        let e = error(&MINIMAL.replace("size = \"64M\"", "size = \"64Q\""));
        assert!(e.starts_with("t.toml:13: `namespaces[0].size`: "), "{e}");
        assert!(e.contains("unknown unit"), "{e}");
        let e = error(&MINIMAL.replace("bind = \"127.0.0.1:4421\"", ""));
        assert!(e.starts_with("t.toml:7: `port.kind`: "), "{e}");
        let e = error(&format!(
            "{MINIMAL}\n[[namespaces]]\nnsid = 1\nbacking = \"ram\"\nsize = 4096\n"
        ));
        assert!(
            e.starts_with("t.toml:16: `namespaces[1].nsid`: namespace 1 is exported twice"),
            "{e}"
        );
        let e = error(&format!(
            "{MINIMAL}metadata = 0\nprotection = \"verified\"\n"
        ));
        assert!(
            e.starts_with("t.toml:15: `namespaces[0].protection`"),
            "{e}"
        );
        let e = error(&format!("{MINIMAL}size = 1000\n").replace("size = \"64M\"\n", ""));
        assert!(
            e.contains("`namespaces[0].size`: 1000 bytes is not a whole number"),
            "{e}"
        );
        let e = error(&format!("{MINIMAL}\n[target]\nrnr_timeout_us = 1\n"));
        assert!(e.starts_with("t.toml:16: `target.rnr_timeout_us`"), "{e}");
        let e = error(&format!("{MINIMAL}\n[delivery]\ntx_window = 0\n"));
        assert!(e.starts_with("t.toml:16: `delivery.tx_window`"), "{e}");
    }

    #[test]
    fn file_namespaces_need_a_path_and_a_size_to_be_created() {
        let file = MINIMAL.replace("backing = \"ram\"", "backing = \"file\"");
        let e = error(&file);
        assert!(
            e.contains("`namespaces[0].backing`: a file namespace needs a path"),
            "{e}"
        );
        let missing = std::env::temp_dir().join(format!("falcon-nvmecfg-{}", std::process::id()));
        let _ = std::fs::remove_file(&missing);
        let with_path = file.replace(
            "size = \"64M\"",
            &format!("path = \"{}\"", missing.display()),
        );
        let e = error(&with_path);
        assert!(e.contains("does not exist: a size is needed"), "{e}");
        // An existing file's size wins over `size`.
        std::fs::write(&missing, vec![0u8; 8192]).unwrap();
        let p = plan(&format!("{with_path}size = \"1M\"\n")).unwrap();
        assert_eq!(p.namespaces[0].config.blocks, 16);
        assert!(matches!(
            p.namespaces[0].backing,
            PlannedBacking::File {
                existing: Some(8192),
                ..
            }
        ));
        std::fs::write(&missing, vec![0u8; 1000]).unwrap();
        let e = error(&with_path);
        assert!(e.contains("`namespaces[0].path`: 1000 bytes"), "{e}");
        let _ = std::fs::remove_file(&missing);
    }

    #[test]
    fn workers_place_every_namespace_once() {
        let two =
            format!("{MINIMAL}\n[[namespaces]]\nnsid = 7\nbacking = \"ram\"\nsize = \"1M\"\n");
        let p = plan(&format!(
            "{two}\n[[workers]]\nsqids = [0]\nnamespaces = [1]\n\n[[workers]]\nsqids = [3, 4]\nnamespaces = [7]\n"
        ))
        .unwrap();
        assert_eq!(p.workers.len(), 2);
        assert_eq!((p.namespaces[0].sqid, p.namespaces[1].sqid), (0, 3));
        let e = error(&format!(
            "{two}\n[[workers]]\nsqids = [0]\nnamespaces = [1]\n"
        ));
        assert!(
            e.contains("`namespaces[1].nsid`: namespace 7 is on no [[workers]] entry"),
            "{e}"
        );
        let e = error(&format!(
            "{two}\n[[workers]]\nsqids = [0]\nnamespaces = [1, 7]\n\n[[workers]]\nsqids = [0]\nnamespaces = []\n"
        ));
        assert!(
            e.contains("`workers[1].sqids`: SQID 0 is served by another worker"),
            "{e}"
        );
        let e = error(&format!(
            "{two}\n[[workers]]\nsqids = [0]\nnamespaces = [1, 7, 9]\n"
        ));
        assert!(
            e.contains("`workers[0].namespaces`: namespace 9 is not one"),
            "{e}"
        );
    }

    #[test]
    fn port_keys_of_the_other_kind_are_refused() {
        let e = error(&MINIMAL.replace(
            "bind = \"127.0.0.1:4421\"",
            "bind = \"127.0.0.1:4421\"\ndevice = \"net_memif0\"",
        ));
        assert!(
            e.contains("`port.device`: is not a key of kind = \"udp\""),
            "{e}"
        );
        let dpdk = MINIMAL.replace(
            "kind = \"udp\"\nbind = \"127.0.0.1:4421\"",
            "kind = \"dpdk\"\ndevice = \"net_memif0\"",
        );
        let e = error(&dpdk);
        assert!(e.contains("`port.device`: no `--vdev=net_memif0`"), "{e}");
        let dpdk = dpdk.replace(
            "device = \"net_memif0\"",
            "device = \"net_memif0\"\neal_args = [\"--vdev=net_memif0,role=server\"]",
        );
        let e = error(&dpdk);
        assert!(
            e.contains("`node.core`: kind = \"dpdk\" needs node.core"),
            "{e}"
        );
        let p = plan(&dpdk.replace("[port]", "core = 0\n\n[port]")).unwrap();
        assert!(matches!(
            p.port,
            PortPlan::Dpdk {
                max_frame: 4352,
                ..
            }
        ));
    }
}
