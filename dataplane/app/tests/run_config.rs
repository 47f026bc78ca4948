//! `falcon run --config`: the node configurations in configs/ are valid,
//! and a bad one is refused before DPDK starts, exit 2, with the file, the
//! line and the dotted key of the problem (issue #26, item 1). No DPDK
//! needed: the checks run first, with or without the `dpdk` feature.

mod common;
use common::{falcon, stderr, Scratch};

/// A good configuration to break one key of.
const GOOD: &str = r#"[eal]
args = ["--no-huge", "--vdev=net_ring0"]

[node]
ip = "10.0.0.1"

[port]
device = "net_ring0"

[lcores]
main = 0
datapath = [0]

[[peers]]
name = "b"
ip = "10.0.0.2"
mac = "02:00:00:00:00:02"
control = "127.0.0.1:7000"

[[connections]]
peer = "self"
role = "initiator"

[[connections]]
peer = "b"
role = "initiator"
count = 2
"#;

/// `falcon run --config` on `text` with `--check`: its exit code and stderr.
fn check(text: &str) -> (Option<i32>, String) {
    let scratch = Scratch::new("run-config", &format!("{:x}", fxhash(text)));
    let path = scratch.file("node.toml", text);
    let out = falcon(&["run", "--config", &path, "--check"]);
    (out.status.code(), stderr(&out))
}

fn fxhash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Exit 2 and a message that starts `FILE:LINE: \`KEY\`: ` and says `what`.
fn refused(text: &str, line: usize, key: &str, what: &str) {
    let (code, err) = check(text);
    assert_eq!(code, Some(2), "{err}");
    let prefix = format!("node.toml:{line}: `{key}`: ");
    assert!(err.contains(&prefix), "expected `{prefix}` in: {err}");
    assert!(err.contains(what), "expected `{what}` in: {err}");
}

#[test]
fn the_good_configuration_and_every_example_in_configs_check() {
    let (code, err) = check(GOOD);
    assert_eq!(code, Some(0), "{err}");
    // A peer's MAC comes in its offers: the file may leave it out.
    let (code, err) = check(&GOOD.replace("mac = \"02:00:00:00:00:02\"\n", ""));
    assert_eq!(code, Some(0), "{err}");
    let root = common::repo_root().join("configs");
    let mut examples = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !(name.starts_with("run-") && name.ends_with(".toml")) {
            continue;
        }
        examples += 1;
        let out = falcon(&["run", "--config", path.to_str().unwrap(), "--check"]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let plan = String::from_utf8_lossy(&out.stdout);
        assert!(
            plan.contains("valid") && plan.contains("--lcores="),
            "{name}: {plan}"
        );
    }
    assert!(
        examples >= 4,
        "the loopback, the pair and the pktgen node: {examples}"
    );
}

#[test]
fn a_misspelt_key_is_named_with_its_line() {
    refused(
        &GOOD.replace("device = \"net_ring0\"", "devcie = \"net_ring0\""),
        8,
        "port.devcie",
        "unknown field",
    );
    // In an array of tables: which entry.
    refused(
        &GOOD.replace("count = 2", "cuont = 2"),
        27,
        "connections[1].cuont",
        "unknown field",
    );
}

#[test]
fn a_bad_value_is_named_with_its_line() {
    refused(
        &GOOD.replace("ip = \"10.0.0.1\"", "ip = \"10.0.0.300\""),
        5,
        "node.ip",
        "invalid",
    );
    refused(
        &GOOD.replace("count = 2", "count = 0"),
        27,
        "connections[1].count",
        "at least 1",
    );
    refused(
        &GOOD.replace(
            "role = \"initiator\"\n\n[[connections]]",
            "role = \"server\"\n\n[[connections]]",
        ),
        22,
        "connections[0].role",
        "unknown variant",
    );
    refused(
        &GOOD.replace("count = 2", "count = 2\nrate_gbps = -1.0"),
        28,
        "connections[1].rate_gbps",
        "0.001..=1000",
    );
    refused(
        &GOOD.replace("datapath = [0]", "datapath = []"),
        12,
        "lcores.datapath",
        "at least one CPU",
    );
    refused(
        &GOOD.replace("datapath = [0]", "datapath = [4096]"),
        12,
        "lcores.datapath",
        "CPU 4096",
    );
}

#[test]
fn an_unknown_port_or_peer_is_named() {
    refused(
        &GOOD.replace("device = \"net_ring0\"", "device = \"net_ring7\""),
        8,
        "port.device",
        "no `--vdev=net_ring7` in eal.args",
    );
    refused(
        &GOOD.replace("peer = \"b\"", "peer = \"c\""),
        25,
        "connections[1].peer",
        "no peer named `c`",
    );
    // An initiator to a peer with no connection manager to offer to.
    refused(
        &GOOD.replace("control = \"127.0.0.1:7000\"\n", ""),
        24,
        "connections[1].peer",
        "peers[0].control",
    );
}

#[test]
fn lcores_and_the_file_prefix_come_from_their_own_keys() {
    refused(
        &GOOD.replace(
            "args = [\"--no-huge\",",
            "args = [\"-l\", \"0-1\", \"--no-huge\",",
        ),
        2,
        "eal.args",
        "[lcores]",
    );
}
