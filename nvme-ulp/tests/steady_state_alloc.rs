//! Steady-state storage I/O allocates nothing: buffers come from pools and
//! move through the worker queues, namespaces reuse what they grew.
//!
//! Its own test binary, with one test, because the counting allocator sees
//! every thread of the process.

use std::time::{Duration, Instant};

use nvme_ulp::namespace::pi::protect;
use nvme_ulp::namespace::{
    BufferPool, CommandPi, FileOptions, Namespace, NamespaceConfig, Protection, RejectReason,
    Request, WorkerSpec, Workers,
};
use nvme_ulp::Status;
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

const BLOCKS: u64 = 64;
const NLB: u32 = 4;

/// Writes then reads `rounds` × every 4-block range of both SQIDs,
/// keeping up to 8 commands in flight.
fn run(
    workers: &mut Workers,
    data_pool: &mut BufferPool,
    metadata_pool: &mut BufferPool,
    rounds: u64,
) {
    let total = rounds * (BLOCKS / u64::from(NLB)) * 2 * 2;
    let (mut submitted, mut completed) = (0, 0);
    let start = Instant::now();
    while completed < total {
        assert!(start.elapsed() < Duration::from_secs(60));
        if let Some(completion) = workers.poll_completion() {
            assert_eq!(completion.status, Status::SUCCESS);
            data_pool.put(completion.data);
            metadata_pool.put(completion.metadata);
            completed += 1;
            continue;
        }
        if submitted == total || data_pool.available() == 0 || metadata_pool.available() == 0 {
            std::thread::yield_now();
            continue;
        }
        let (Some(data), Some(mut metadata)) = (data_pool.take(), metadata_pool.take()) else {
            continue;
        };
        let sqid = (submitted % 2) as u8;
        let slba = submitted / 4 % (BLOCKS / u64::from(NLB)) * u64::from(NLB);
        let pi = CommandPi {
            app_tag: 0x5A5A,
            ..CommandPi::type1(slba)
        };
        let request = if submitted / 2 % 2 == 0 {
            let format = NamespaceConfig::new(1, BLOCKS, 4096)
                .with_metadata(16, Protection::Verified)
                .validate()
                .expect("valid");
            protect(
                format.format(),
                &data,
                &mut metadata,
                pi.ref_tag,
                pi.app_tag,
            );
            Request::write(submitted, 1, slba, NLB, data, metadata)
        } else {
            Request::read(submitted, 1, slba, NLB, data, metadata)
        };
        match workers.submit(sqid, request.with_pi(pi)) {
            Ok(()) => submitted += 1,
            Err(rejected) => {
                assert_eq!(rejected.reason, RejectReason::Busy);
                data_pool.put(rejected.request.data);
                metadata_pool.put(rejected.request.metadata);
            }
        }
    }
}

#[test]
fn steady_state_io_allocates_nothing() {
    let dir = std::env::temp_dir().join(format!("nvme-ulp-alloc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = NamespaceConfig::new(1, BLOCKS, 4096).with_metadata(16, Protection::Verified);
    let ram = Namespace::ram(&config).unwrap();
    let file = Namespace::file(&config, dir.join("ns"), FileOptions::default()).unwrap();
    let mode = file.mode();
    let specs = vec![
        WorkerSpec::new(vec![0], vec![ram]),
        WorkerSpec::new(vec![1], vec![file]),
    ];
    let mut workers = Workers::spawn(specs, 4).unwrap();
    let mut data_pool = BufferPool::new(8, NLB as usize * 4096);
    let mut metadata_pool = BufferPool::new(8, NLB as usize * 16);

    // Warm-up: RAM chunks, the file store's scratch, then an idle spell so
    // that each worker blocks in its queue at least once. A thread's first
    // blocking wait on a std channel makes its wait context and the
    // channel's waiter list (144 bytes in two allocations, seen here when
    // a busy worker had only ever spun), once per thread and channel.
    run(&mut workers, &mut data_pool, &mut metadata_pool, 4);
    std::thread::sleep(Duration::from_millis(50));
    let region = Region::new(GLOBAL);
    run(&mut workers, &mut data_pool, &mut metadata_pool, 50);
    let change = region.change();
    drop(workers);
    std::fs::remove_dir_all(&dir).unwrap();

    assert_eq!(
        (change.allocations, change.reallocations),
        (0, 0),
        "3,200 commands on RAM and a {mode} file allocated {} bytes",
        change.bytes_allocated
    );
}
