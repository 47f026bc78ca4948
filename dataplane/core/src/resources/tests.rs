//! Tests of the resource accounting: the spec's credit tables, each level
//! of refusal, the HoL zones and dynamic thresholds, and a property test of
//! reserve/release against a plain oracle.

use proptest::prelude::*;

use super::*;

fn config() -> ResourceConfig {
    ResourceConfig {
        cell_size: 100,
        ..ResourceConfig::tiny(10, 100)
    }
}

#[test]
fn demands_follow_the_spec_tables() {
    // §8.2.3 table: L = 250 bytes, N = 100 → ceil = 3.
    let push = Demand::push(250, 100);
    assert_eq!(
        Credit::ALL.map(|c| push.get(c)),
        [1, 3, 1, 0, 0, 0, 0, 0],
        "Push Data: ReqPktTx 1, ReqBufTx ceil(L/N), ReqPktRx 1"
    );
    let pull = Demand::pull_request(20, 250, 100);
    assert_eq!(Credit::ALL.map(|c| pull.get(c)), [1, 1, 1, 3, 0, 0, 0, 0]);
    let data = Demand::pull_data(250, 100);
    assert_eq!(Credit::ALL.map(|c| data.get(c)), [0, 0, 0, 0, 1, 3, 0, 0]);
    // §8.2.4 table.
    let net_push = Demand::network_push(250, 100);
    assert_eq!(
        Credit::ALL.map(|c| net_push.get(c)),
        [0, 0, 0, 0, 0, 0, 1, 3]
    );
    let net_pull = Demand::network_pull_request();
    assert_eq!(
        Credit::ALL.map(|c| net_pull.get(c)),
        [0, 0, 0, 0, 0, 0, 1, 1]
    );
    assert_eq!(push.tx_part().get(Credit::ReqBufTx), 3);
    assert_eq!(push.tx_part().get(Credit::ReqPktRx), 0);
    assert_eq!(push.rx_part().get(Credit::ReqPktRx), 1);
    assert!(Demand::ZERO.is_zero());
    assert_eq!(Demand::cells(0, 100), 0);
}

#[test]
fn ulp_reservations_stop_at_each_level() {
    let mut resources = Resources::new(ResourceConfig {
        per_function: CreditLimits::uniform(10, 30),
        ..config()
    });
    let mut a = resources.open_account(Some(CreditLimits::uniform(3, 1000)), 0, 0);
    let mut b = resources.open_account(None, 0, 0);
    let push = Demand::push(100, 100);
    for _ in 0..3 {
        resources.reserve_ulp(&mut a, &push).unwrap();
    }
    assert_eq!(
        resources.reserve_ulp(&mut a, &push),
        Err(Shortage {
            credit: Credit::ReqPktTx,
            level: Level::Connection
        })
    );
    assert!(!resources.ulp_fits(&a, &push));
    // b shares function 0, limited to 30 buffer cells: 3 used by a.
    let big = Demand::push(2_800, 100);
    assert_eq!(
        resources.reserve_ulp(&mut b, &big),
        Err(Shortage {
            credit: Credit::ReqBufTx,
            level: Level::Function
        })
    );
    assert_eq!(resources.used(Credit::ReqBufTx), 3, "nothing half-reserved");
    resources.release(&mut a, &push);
    assert!(resources.ulp_fits(&a, &push));
    assert_eq!(a.credits.used(Credit::ReqPktTx), 2);
}

#[test]
fn oversubscribed_connections_meet_the_global_counter() {
    let mut resources = Resources::new(config());
    let mut accounts: Vec<Account> = (0..3)
        .map(|_| resources.open_account(Some(CreditLimits::uniform(8, 100)), 0, 0))
        .collect();
    let one = Demand::push(1, 100);
    let mut granted = 0;
    for i in 0..30 {
        if resources.reserve_ulp(&mut accounts[i % 3], &one).is_ok() {
            granted += 1;
        }
    }
    // 3 × 8 credits promised, 10 packets in the pool.
    assert_eq!(granted, 10);
    assert_eq!(resources.used(Credit::ReqPktTx), 10);
}

#[test]
fn red_zone_admits_only_head_of_line() {
    let mut resources = Resources::new(ResourceConfig {
        green_zone_percent: 50,
        per_connection: CreditLimits::UNLIMITED,
        isolation_alpha: Alpha(u16::MAX),
        ..config()
    });
    let mut a = resources.open_account(None, 0, 0);
    let one = Demand::network_pull_request();
    for _ in 0..5 {
        resources.reserve_network(&mut a, &one, false).unwrap();
    }
    assert_eq!(
        resources.reserve_network(&mut a, &one, false),
        Err(Shortage {
            credit: Credit::NetReqPktRx,
            level: Level::RedZone
        })
    );
    for _ in 0..5 {
        resources.reserve_network(&mut a, &one, true).unwrap();
    }
    assert_eq!(
        resources.reserve_network(&mut a, &one, true),
        Err(Shortage {
            credit: Credit::NetReqPktRx,
            level: Level::Global
        }),
        "HoL still stops at the hard capacity"
    );
}

#[test]
fn dynamic_threshold_isolates_connections() {
    let mut resources = Resources::new(ResourceConfig {
        green_zone_percent: 100,
        per_connection: CreditLimits::UNLIMITED,
        ..config()
    });
    let mut slow = resources.open_account(None, 0, 0);
    let mut fast = resources.open_account(None, 0, 0);
    slow.alpha = Alpha::ONE;
    let one = Demand::network_pull_request();
    let mut slow_held = 0;
    while resources.reserve_network(&mut slow, &one, false).is_ok() {
        slow_held += 1;
    }
    // α = 1 over 10 packets: held ≤ 10 − held → 5.
    assert_eq!(slow_held, 5);
    assert_eq!(
        resources.reserve_network(&mut slow, &one, false),
        Err(Shortage {
            credit: Credit::NetReqPktRx,
            level: Level::DynamicThreshold
        })
    );
    // The other connection still gets room.
    assert!(resources.reserve_network(&mut fast, &one, false).is_ok());
    assert!(
        resources.reserve_network(&mut slow, &one, true).is_ok(),
        "HoL bypasses"
    );
}

#[derive(Debug, Clone)]
enum Op {
    Ulp {
        account: usize,
        len: usize,
        pull: bool,
    },
    Network {
        account: usize,
        len: usize,
        hol: bool,
    },
    Release {
        index: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..3, 0usize..800, any::<bool>()).prop_map(|(account, len, pull)| Op::Ulp {
            account,
            len,
            pull
        }),
        (0usize..3, 0usize..800, any::<bool>()).prop_map(|(account, len, hol)| Op::Network {
            account,
            len,
            hol
        }),
        any::<usize>().prop_map(|index| Op::Release { index }),
    ]
}

proptest! {
    /// Reserve/release against an oracle that sums the outstanding demands:
    /// the global and per-account counters equal the oracle's sums, never
    /// exceed their capacity, and return to zero when all is released.
    #[test]
    fn accounting_matches_the_sum_of_outstanding_demands(ops in proptest::collection::vec(op(), 1..200)) {
        let config = ResourceConfig {
            green_zone_percent: 80,
            ..config()
        };
        let mut resources = Resources::new(config);
        let mut accounts: Vec<Account> = (0..3).map(|i| resources.open_account(None, i % 2, 0)).collect();
        let mut outstanding: Vec<(usize, Demand)> = Vec::new();
        for op in ops {
            match op {
                Op::Ulp { account, len, pull } => {
                    let demand = if pull {
                        Demand::pull_request(8, len, config.cell_size)
                    } else {
                        Demand::push(len, config.cell_size)
                    };
                    if resources.reserve_ulp(&mut accounts[account], &demand).is_ok() {
                        outstanding.push((account, demand));
                    }
                }
                Op::Network { account, len, hol } => {
                    let demand = Demand::network_push(len, config.cell_size);
                    if resources.reserve_network(&mut accounts[account], &demand, hol).is_ok() {
                        outstanding.push((account, demand));
                    }
                }
                Op::Release { index } => {
                    if !outstanding.is_empty() {
                        let (account, demand) = outstanding.swap_remove(index % outstanding.len());
                        resources.release(&mut accounts[account], &demand);
                    }
                }
            }
            for credit in Credit::ALL {
                let total: u32 = outstanding.iter().map(|(_, d)| d.get(credit)).sum();
                prop_assert_eq!(resources.used(credit), total);
                prop_assert!(total <= config.capacity(credit));
                for (i, account) in accounts.iter().enumerate() {
                    let mine: u32 = outstanding.iter().filter(|(a, _)| *a == i).map(|(_, d)| d.get(credit)).sum();
                    prop_assert_eq!(account.credits.used(credit), mine);
                }
            }
        }
        for (account, demand) in outstanding.drain(..) {
            resources.release(&mut accounts[account], &demand);
        }
        for credit in Credit::ALL {
            prop_assert_eq!(resources.used(credit), 0);
        }
    }
}

proptest! {
    /// The one-pass check of `reserve_ulp` (functions and hosts unlimited)
    /// accepts exactly what the level-by-level checks accept, at limits and
    /// capacities up to `u32::MAX`, where a sum wraps.
    #[test]
    fn ulp_fast_path_agrees_with_the_level_checks(
        limit in prop_oneof![Just(u32::MAX), Just(u32::MAX - 1), 1u32..64],
        capacity in prop_oneof![Just(u32::MAX), 1u32..64],
        pushes in proptest::collection::vec(
            (0usize..3, prop_oneof![Just(u32::MAX as usize), Just(1usize << 31), 0usize..5000]),
            1..40,
        ),
    ) {
        let capacities = TxPool { ulp_request: capacity, ulp_data: capacity };
        // One-byte cells: a push of u32::MAX bytes holds u32::MAX cells, so
        // two of them wrap a u32 sum.
        let config = ResourceConfig {
            cell_size: 1,
            tx_packet: capacities,
            tx_buffer: capacities,
            rx_packet: RxPool { ulp_request: capacity, network_request: capacity },
            rx_buffer: RxPool { ulp_request: capacity, network_request: capacity },
            per_connection: CreditLimits::all(limit),
            ..ResourceConfig::default()
        };
        let mut resources = Resources::new(config);
        let mut accounts: Vec<Account> = (0..3).map(|_| resources.open_account(None, 0, 0)).collect();
        for (account, len) in pushes {
            let demand = Demand::push(len, config.cell_size);
            let expected = resources
                .check_entities(&accounts[account], &demand, ULP_CREDITS)
                .and_then(|()| resources.check_global(&demand, ULP_CREDITS, Level::Global, &resources.capacity));
            prop_assert_eq!(resources.reserve_ulp(&mut accounts[account], &demand), expected);
        }
    }
}

/// `Resources::cells` is `Demand::cells` with the pool's cell size,
/// power of two or not (and 0, which counts as 1).
#[test]
fn cells_match_demand_cells() {
    for cell_size in [0, 1, 2, 3, 64, 100, 256, 1000, 4096, u16::MAX] {
        let resources = Resources::new(ResourceConfig {
            cell_size,
            ..ResourceConfig::default()
        });
        for len in (0..5000).chain([65_535, 65_536, 1 << 20]) {
            assert_eq!(
                resources.cells(len),
                Demand::cells(len, cell_size),
                "cell size {cell_size}, {len} bytes"
            );
        }
    }
}

#[test]
fn counter_keeps_its_limits_once_and_gives_them_back() {
    let limits = CreditLimits::from_array([1, 2, 3, 4, 5, 6, 7, u32::MAX]);
    assert_eq!(limits.to_array(), [1, 2, 3, 4, 5, 6, 7, u32::MAX]);
    let counter = CreditCounter::new(limits);
    assert_eq!(counter.limits(), limits);
    for credit in Credit::ALL {
        assert_eq!(counter.available(credit), limits.get(credit));
    }
    assert_eq!(core::mem::size_of::<CreditCounter>(), 64);
}
