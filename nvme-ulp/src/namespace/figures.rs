//! Measured costs of the storage path, for the record (not assertions):
//! `cargo test --release -p nvme-ulp figures -- --ignored --nocapture`.
//! Single-block (4 KiB) commands, one at a time, 0.5 s each. On a shared
//! 2-core machine the worker figures mostly measure thread wake-ups and
//! the other load.

use std::time::{Duration, Instant};

use super::pi::{crc16_t10dif, protect};
use super::testing::TempDir;
use super::*;

/// Runs `op` for about `budget` and returns calls per second.
fn rate(budget: Duration, mut op: impl FnMut(u64)) -> f64 {
    let start = Instant::now();
    let mut calls = 0;
    while start.elapsed() < budget {
        for _ in 0..64 {
            op(calls);
            calls += 1;
        }
    }
    calls as f64 / start.elapsed().as_secs_f64()
}

const BUDGET: Duration = Duration::from_millis(500);
const BLOCKS: u64 = 4096;

fn namespace_figures(name: &str, mut namespace: Namespace, fua: bool) {
    let format = *namespace.format();
    let (lba_size, metadata_size) = (format.lba_size(), format.metadata_size());
    let mut data = IoBuffer::zeroed(lba_size);
    let mut metadata = IoBuffer::zeroed(metadata_size);
    let writes = rate(BUDGET, |i| {
        let slba = i % BLOCKS;
        data[..8].copy_from_slice(&i.to_le_bytes());
        protect(format.format(), &data, &mut metadata, slba as u32, 0);
        let pi = CommandPi {
            app_tag: 0,
            ..CommandPi::type1(slba)
        };
        namespace
            .write(slba, 1, &pi, &data, &metadata, fua)
            .expect("write");
    });
    // After FUA writes few blocks are written: reads would hit holes.
    let budget = if fua { Duration::ZERO } else { BUDGET };
    let reads = rate(budget, |i| {
        let slba = i * 7 % BLOCKS;
        let pi = CommandPi {
            app_tag: 0,
            ..CommandPi::type1(slba)
        };
        namespace
            .read(slba, 1, &pi, &mut data, &mut metadata)
            .expect("read");
    });
    let reads = if fua {
        "-".to_string()
    } else {
        format!("{reads:.0}")
    };
    println!(
        "{name:<34} {writes:>9.0} writes/s {reads:>9} reads/s ({})",
        namespace.mode()
    );
}

#[test]
#[ignore = "measurement; run in release"]
fn figures() {
    let block = vec![0x5A; 4096];
    let crcs = rate(BUDGET, |_| {
        std::hint::black_box(crc16_t10dif(std::hint::black_box(&block)));
    });
    println!(
        "crc16_t10dif 4 KiB                 {:>9.0} blocks/s = {:.0} MB/s",
        crcs,
        crcs * 4096.0 / 1e6
    );

    let plain = NamespaceConfig::new(1, BLOCKS, 4096);
    let verified = plain.with_metadata(16, Protection::Verified);
    namespace_figures("ram 4 KiB", Namespace::ram(&plain).unwrap(), false);
    namespace_figures(
        "ram 4 KiB + PI verified",
        Namespace::ram(&verified).unwrap(),
        false,
    );
    for (dir, place) in [
        (TempDir::new("figures"), "/tmp"),
        (TempDir::in_target("figures"), "/work"),
    ] {
        for (try_direct, fua) in [(true, false), (false, false), (true, true)] {
            let options = FileOptions { try_direct };
            let path = dir.path().join(format!("ns-{try_direct}-{fua}"));
            let namespace = Namespace::file(&verified, path, options).unwrap();
            let name = format!("file {place} PI{}", if fua { " FUA" } else { "" });
            namespace_figures(&name, namespace, fua);
        }
    }

    // Submit → worker → poll, one 4 KiB RAM write at a time and 16 deep.
    for depth in [1, 16] {
        let namespace = Namespace::ram(&plain).unwrap();
        let mut workers =
            Workers::spawn(vec![WorkerSpec::new(vec![0], vec![namespace])], depth).unwrap();
        let mut pool = BufferPool::new(depth, 4096);
        let mut done = 0u64;
        let start = Instant::now();
        let mut tag = 0;
        while start.elapsed() < BUDGET {
            while let Some(buffer) = pool.take() {
                let request = Request::write(tag, 1, tag % BLOCKS, 1, buffer, IoBuffer::new());
                match workers.submit(0, request) {
                    Ok(()) => tag += 1,
                    Err(rejected) => {
                        pool.put(rejected.request.data);
                        break;
                    }
                }
            }
            while let Some(completion) = workers.poll_completion() {
                pool.put(completion.data);
                done += 1;
            }
        }
        let per_second = done as f64 / start.elapsed().as_secs_f64();
        println!("workers ram 4 KiB writes, depth {depth:<2}    {per_second:>9.0} commands/s");
    }
}
