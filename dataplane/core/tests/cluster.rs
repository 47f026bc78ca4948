//! Three engines on the public `testing` cluster, as a crate built on
//! falcon-core tests: a connection between every two nodes, 1 % loss on
//! every link, pushes and pulls of mixed sizes from every node, ordered and
//! unordered connections. Every transaction completes exactly once, with
//! its bytes verified (the cluster checks payloads, exactly-once and RSN
//! order on every event; this test also counts what came back).

use std::collections::BTreeSet;

use core::time::Duration;

use falcon_core::delivery::OrderingMode;
use falcon_core::testing::{Cluster, Faults, Setup};
use falcon_core::transaction::{CompletionStatus, TransactionKind};

/// Sizes from empty to near the largest payload of one packet (8876 bytes
/// with the default 9000-byte MTU).
const SIZES: [usize; 6] = [0, 1, 300, 1500, 4096, 8000];

fn three_engines_complete_everything_exactly_once(ordering: OrderingMode, seed: u64) {
    let mut cluster = Cluster::new(Setup {
        nodes: 3,
        ordering,
        faults: Faults {
            loss_ppm: Faults::percent(1),
            ..Faults::default()
        },
        seed,
        ..Setup::default()
    });
    // Every node: a push and a pull of every size on each of its
    // connections, then a random mix.
    let mut queued: Vec<Vec<BTreeSet<u64>>> = Vec::new();
    for node in 0..3 {
        assert_eq!(cluster.nodes[node].conns.len(), 2, "one to each peer");
        let mut tags = vec![BTreeSet::new(); 2];
        for (conn, tags) in tags.iter_mut().enumerate() {
            for len in SIZES {
                for kind in [TransactionKind::Push, TransactionKind::Pull] {
                    tags.insert(cluster.queue(node, conn, kind, len));
                }
            }
        }
        queued.push(tags);
    }
    for node in 0..3 {
        cluster.queue_random(node, 60, 5000);
    }
    let total: usize = (0..3)
        .map(|node| {
            cluster.nodes[node]
                .backlog
                .iter()
                .map(|b| b.len())
                .sum::<usize>()
        })
        .sum();
    assert_eq!(total, 3 * 2 * (2 * SIZES.len() + 60));

    cluster.run_to_completion(Duration::from_secs(2));

    assert_eq!(cluster.unfinished(), 0);
    let mut completed = 0;
    for (node, queued) in queued.iter().enumerate() {
        cluster.assert_all_ok(node);
        for (conn, queued) in queued.iter().enumerate() {
            let done = &cluster.nodes[node].completions[conn];
            let tags: BTreeSet<u64> = done.iter().map(|c| c.tag).collect();
            assert_eq!(
                tags.len(),
                done.len(),
                "node {node} conn {conn}: a tag twice"
            );
            assert!(queued.is_subset(&tags));
            let submitted = cluster.expected[node]
                .keys()
                .filter(|(c, _)| *c == conn)
                .count();
            assert_eq!(done.len(), submitted, "node {node} conn {conn}");
            assert!(done.iter().all(|c| c.status == CompletionStatus::Ack));
            // The peer delivered each push and pull exactly once.
            let (peer, peer_conn) = cluster.nodes[node].peers[conn].expect("peer");
            let delivered = &cluster.nodes[peer].deliveries[peer_conn];
            let distinct: BTreeSet<u32> = delivered.iter().map(|r| r.value()).collect();
            assert_eq!(distinct.len(), delivered.len());
            assert_eq!(delivered.len(), submitted);
            completed += done.len();
        }
        let stats = cluster.nodes[node].engine.stats();
        assert_eq!(stats.connection_errors, 0);
        assert_eq!(cluster.nodes[node].port.unroutable(), 0);
    }
    assert_eq!(completed, total);
    let lost: u64 = (0..3)
        .map(|node| cluster.nodes[node].port.stats().lost)
        .sum();
    assert!(lost > 0, "loss injected");
    let retransmissions: u64 = (0..3)
        .map(|node| cluster.nodes[node].engine.stats().retransmissions)
        .sum();
    assert!(retransmissions > 0, "loss recovered by retransmission");
}

#[test]
fn three_engines_ordered_under_loss() {
    three_engines_complete_everything_exactly_once(OrderingMode::Ordered, 3);
}

#[test]
fn three_engines_unordered_under_loss() {
    three_engines_complete_everything_exactly_once(OrderingMode::Unordered, 4);
}
