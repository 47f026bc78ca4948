//! Tests of [`super::Namespace`] over both backends: round trips, PI,
//! ranges, injected faults, and a property test against a `BTreeMap`
//! oracle of blocks.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use proptest::prelude::*;

use super::pi::protect;
use super::testing::TempDir;
use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Ram,
    FileDirect,
    FileBuffered,
}

const BACKENDS: [Backend; 3] = [Backend::Ram, Backend::FileDirect, Backend::FileBuffered];

/// A namespace and the directory holding its file, if any.
struct Fixture {
    namespace: Namespace,
    _dir: Option<TempDir>,
}

fn open(backend: Backend, config: &NamespaceConfig) -> Fixture {
    let (namespace, dir) = match backend {
        Backend::Ram => (Namespace::ram(config).unwrap(), None),
        Backend::FileDirect | Backend::FileBuffered => {
            let dir = TempDir::new("namespace");
            let options = FileOptions {
                try_direct: backend == Backend::FileDirect,
            };
            let namespace = Namespace::file(config, dir.path().join("ns"), options).unwrap();
            (namespace, Some(dir))
        }
    };
    Fixture {
        namespace,
        _dir: dir,
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn config(lba_size: u32, metadata_size: u32, protection: Protection) -> NamespaceConfig {
    NamespaceConfig::new(1, 64, lba_size).with_metadata(metadata_size, protection)
}

fn read(
    namespace: &mut Namespace,
    slba: u64,
    nlb: u32,
    pi: &CommandPi,
) -> Result<(Vec<u8>, Vec<u8>), Status> {
    let format = *namespace.format();
    let mut data = vec![0; nlb as usize * format.lba_size()];
    let mut metadata = vec![0; nlb as usize * format.metadata_size()];
    namespace.read(slba, nlb, pi, &mut data, &mut metadata)?;
    Ok((data, metadata))
}

#[test]
fn round_trips_on_every_backend_and_format() {
    for backend in BACKENDS {
        for lba_size in [512, 4096] {
            for (metadata_size, protection) in [
                (0, Protection::Off),
                (8, Protection::Off),
                (16, Protection::Opaque),
                (8, Protection::Verified),
                (16, Protection::Verified),
            ] {
                let config = config(lba_size, metadata_size, protection);
                let mut fixture = open(backend, &config);
                let namespace = &mut fixture.namespace;
                let format = *namespace.format();
                let what = format!("{backend:?} {lba_size}+{metadata_size} {protection}");
                let data = pattern(4 * format.lba_size(), 1);
                let mut metadata = pattern(4 * format.metadata_size(), 2);
                protect(format.format(), &data, &mut metadata, 10, 10);
                let pi = CommandPi::type1(10);
                namespace
                    .write(10, 4, &pi, &data, &metadata, true)
                    .expect(&what);
                assert_eq!(read(namespace, 10, 4, &pi), Ok((data, metadata)), "{what}");
                // Never-written neighbours read as zeroes with erased PI.
                let (zeroes, erased) = read(namespace, 14, 2, &CommandPi::type1(14)).expect(&what);
                assert!(zeroes.iter().all(|&byte| byte == 0), "{what}");
                let mut expected = vec![0; 2 * format.metadata_size()];
                format.fill_erased_metadata(&mut expected);
                assert_eq!(erased, expected, "{what}");
                namespace.flush().expect(&what);
                assert_eq!(namespace.stats().reads, 2);
                assert_eq!(namespace.stats().blocks_written, 4);
            }
        }
    }
}

#[test]
fn modes_name_the_backend() {
    let config = config(512, 0, Protection::Off);
    assert_eq!(
        open(Backend::Ram, &config).namespace.mode(),
        StorageMode::Ram
    );
    assert_eq!(
        open(Backend::FileBuffered, &config).namespace.mode(),
        StorageMode::FileBuffered
    );
    assert_eq!(StorageMode::FileDirect.to_string(), "file (O_DIRECT)");
}

#[test]
fn out_of_range_and_bad_buffers_are_statuses() {
    for backend in BACKENDS {
        let mut fixture = open(backend, &config(512, 8, Protection::Off));
        let namespace = &mut fixture.namespace;
        let none = CommandPi::NONE;
        let (data, metadata) = (vec![1; 2 * 512], vec![1; 16]);
        for slba in [63, 64, 1 << 40, u64::MAX - 1, u64::MAX] {
            assert_eq!(
                namespace.write(slba, 2, &none, &data, &metadata, false),
                Err(Status::LBA_OUT_OF_RANGE),
                "{backend:?} write at {slba}"
            );
            assert_eq!(
                namespace.read(slba, 2, &none, &mut [0; 1024], &mut [0; 16]),
                Err(Status::LBA_OUT_OF_RANGE)
            );
            assert_eq!(
                namespace.write_zeroes(slba, 2),
                Err(Status::LBA_OUT_OF_RANGE)
            );
            assert_eq!(namespace.deallocate(slba, 2), Err(Status::LBA_OUT_OF_RANGE));
        }
        assert_eq!(
            namespace.write(0, u32::MAX, &none, &data, &metadata, false),
            Err(Status::LBA_OUT_OF_RANGE)
        );
        assert_eq!(
            namespace.write(0, 3, &none, &data, &metadata, false),
            Err(Status::INVALID_FIELD),
            "data for 2 blocks, nlb 3"
        );
        assert_eq!(
            namespace.write(0, 2, &none, &data, &metadata[..8], false),
            Err(Status::INVALID_FIELD),
            "metadata for 1 block"
        );
        assert_eq!(
            namespace.read(0, 0, &none, &mut [], &mut []),
            Err(Status::INVALID_FIELD)
        );
        assert_eq!(namespace.stats().invalid, 24);
        // Nothing reached the store.
        assert_eq!(
            read(namespace, 0, 2, &none),
            Ok((vec![0; 1024], vec![0; 16]))
        );
    }
}

/// The verified format every PI test uses: 4 KiB blocks, 16 bytes of
/// metadata, PI in the last 8.
fn verified(backend: Backend) -> Fixture {
    open(backend, &config(4096, 16, Protection::Verified))
}

/// Block data and metadata with correct PI for `slba` (ulp.md §3.7 tags).
fn protected(format: &NamespaceFormat, slba: u64, nlb: u32, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let data = pattern(nlb as usize * format.lba_size(), seed);
    let mut metadata = pattern(nlb as usize * format.metadata_size(), seed + 1);
    protect(
        format.format(),
        &data,
        &mut metadata,
        slba as u32,
        slba as u16,
    );
    (data, metadata)
}

#[test]
fn verified_writes_refuse_bad_pi_and_write_nothing() {
    for backend in BACKENDS {
        let mut fixture = verified(backend);
        let namespace = &mut fixture.namespace;
        let format = *namespace.format();
        let pi = CommandPi::type1(20);
        let (old_data, old_metadata) = protected(&format, 20, 2, 1);
        namespace
            .write(20, 2, &pi, &old_data, &old_metadata, false)
            .unwrap();
        let (data, metadata) = protected(&format, 20, 2, 7);

        let mut bad_guard = data.clone();
        bad_guard[4096 + 100] ^= 0x01;
        let mut bad_app = metadata.clone();
        bad_app[16 + 8 + 2] ^= 0x80; // block 1's application tag
        let mut bad_ref = metadata.clone();
        bad_ref[8 + 4] ^= 0x10; // block 0's reference tag
        let cases = [
            (&bad_guard, &metadata, Status::GUARD_CHECK),
            (&data, &bad_app, Status::APP_TAG_CHECK),
            (&data, &bad_ref, Status::REF_TAG_CHECK),
        ];
        for (data, metadata, status) in cases {
            assert_eq!(
                namespace.write(20, 2, &pi, data, metadata, false),
                Err(status),
                "{backend:?}"
            );
            assert_eq!(
                read(namespace, 20, 2, &pi),
                Ok((old_data.clone(), old_metadata.clone())),
                "{backend:?}: nothing written after {status}"
            );
        }
        // The wrong LBA: reference tag made for block 21 written at 20.
        let shifted = pattern(4096, 3);
        let mut shifted_metadata = vec![0; 16];
        protect(format.format(), &shifted, &mut shifted_metadata, 21, 20);
        assert_eq!(
            namespace.write(
                20,
                1,
                &CommandPi::type1(20),
                &shifted,
                &shifted_metadata,
                false
            ),
            Err(Status::REF_TAG_CHECK)
        );
        assert_eq!(namespace.stats().pi_errors, 4);
        // The correct PI is accepted.
        namespace
            .write(20, 2, &pi, &data, &metadata, false)
            .unwrap();
        assert_eq!(read(namespace, 20, 2, &pi), Ok((data, metadata)));
    }
}

#[test]
fn verified_reads_check_the_stored_pi() {
    for backend in BACKENDS {
        let mut fixture = verified(backend);
        let namespace = &mut fixture.namespace;
        let format = *namespace.format();
        // PRCHK = 0: the host asks for no check, so bad PI is stored.
        let (data, mut metadata) = protected(&format, 30, 1, 5);
        metadata[8 + 2] ^= 1;
        let unchecked = CommandPi {
            prinfo: PrInfo::NONE,
            ..CommandPi::type1(30)
        };
        namespace
            .write(30, 1, &unchecked, &data, &metadata, false)
            .unwrap();
        assert_eq!(
            read(namespace, 30, 1, &CommandPi::type1(30)),
            Err(Status::APP_TAG_CHECK),
            "{backend:?}"
        );
        assert_eq!(read(namespace, 30, 1, &unchecked), Ok((data, metadata)));
        // A read expecting another LBA's reference tag.
        let (good, good_metadata) = protected(&format, 31, 1, 6);
        namespace
            .write(31, 1, &CommandPi::type1(31), &good, &good_metadata, false)
            .unwrap();
        let wrong_ref = CommandPi {
            ref_tag: 99,
            ..CommandPi::type1(31)
        };
        assert_eq!(
            read(namespace, 31, 1, &wrong_ref),
            Err(Status::REF_TAG_CHECK)
        );
        // PRACT is not supported: every nCMD carries PRACT = 0.
        let pract = CommandPi {
            prinfo: PrInfo::CHECK_ALL.union(PrInfo::PRACT),
            ..CommandPi::type1(31)
        };
        assert_eq!(read(namespace, 31, 1, &pract), Err(Status::INVALID_FIELD));
    }
}

/// Bit rot in the data file under a verified namespace reads back as a
/// guard check error.
#[test]
fn corrupted_file_block_fails_its_guard() {
    let dir = TempDir::new("bitrot");
    let path = dir.path().join("ns");
    let config = config(4096, 16, Protection::Verified);
    let mut namespace = Namespace::file(&config, &path, FileOptions::default()).unwrap();
    let format = *namespace.format();
    let (data, metadata) = protected(&format, 3, 2, 9);
    let pi = CommandPi::type1(3);
    namespace.write(3, 2, &pi, &data, &metadata, true).unwrap();
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&[data[4096 + 5] ^ 0x20], 4 * 4096 + 5)
        .unwrap();
    file.sync_data().unwrap();
    assert_eq!(read(&mut namespace, 3, 2, &pi), Err(Status::GUARD_CHECK));
    assert_eq!(
        read(&mut namespace, 3, 1, &pi),
        Ok((data[..4096].to_vec(), metadata[..16].to_vec())),
        "the intact block still reads"
    );
}

#[test]
fn opaque_namespaces_store_anything() {
    for backend in BACKENDS {
        let mut fixture = open(backend, &config(512, 16, Protection::Opaque));
        let namespace = &mut fixture.namespace;
        let data = pattern(3 * 512, 11);
        let metadata = pattern(3 * 16, 12);
        let pi = CommandPi::type1(5);
        assert_eq!(
            pi::verify(namespace.format().format(), &data, &metadata, &pi),
            Err(Status::GUARD_CHECK),
            "the metadata is not valid PI"
        );
        namespace.write(5, 3, &pi, &data, &metadata, false).unwrap();
        assert_eq!(
            read(namespace, 5, 3, &pi),
            Ok((data, metadata)),
            "{backend:?}"
        );
    }
}

#[test]
fn injected_faults_fail_their_range_only() {
    for backend in BACKENDS {
        let mut fixture = open(backend, &config(512, 0, Protection::Off));
        let namespace = &mut fixture.namespace;
        let none = CommandPi::NONE;
        namespace.write(8, 1, &none, &[3; 512], &[], false).unwrap();
        namespace.faults_mut().add(FaultRule::unreadable(8..9));
        namespace
            .faults_mut()
            .add(FaultRule::unwritable(16..32).times(1));
        assert_eq!(read(namespace, 7, 2, &none), Err(Status::UNRECOVERED_READ));
        assert_eq!(read(namespace, 9, 1, &none), Ok((vec![0; 512], vec![])));
        assert_eq!(
            namespace.write(31, 2, &none, &[4; 1024], &[], false),
            Err(Status::WRITE_FAULT)
        );
        assert_eq!(read(namespace, 31, 2, &none), Ok((vec![0; 1024], vec![])));
        namespace
            .write(31, 2, &none, &[4; 1024], &[], false)
            .unwrap();
        assert_eq!(read(namespace, 31, 2, &none), Ok((vec![4; 1024], vec![])));
        assert_eq!(namespace.stats().media_errors, 2);
        assert_eq!(namespace.faults().injected(), 2);
    }
}

/// One step of the oracle test.
#[derive(Debug, Clone)]
enum Step {
    Write { slba: u64, nlb: u32, seed: u64 },
    Read { slba: u64, nlb: u32 },
    WriteZeroes { slba: u64, nlb: u32 },
    Deallocate { slba: u64, nlb: u32 },
    Flush,
}

fn steps(blocks: u64) -> impl Strategy<Value = Vec<Step>> {
    // Ranges run a little past the end, and zeroing can cover whole RAM
    // chunks (128 blocks of 512 B, 16 of 4 KiB).
    let slba = 0..blocks + 4;
    let step = prop_oneof![
        4 => (slba.clone(), 0..24u32, any::<u64>())
            .prop_map(|(slba, nlb, seed)| Step::Write { slba, nlb, seed }),
        4 => (slba.clone(), 0..24u32).prop_map(|(slba, nlb)| Step::Read { slba, nlb }),
        1 => (slba.clone(), 0..200u32).prop_map(|(slba, nlb)| Step::WriteZeroes { slba, nlb }),
        1 => (slba, 0..200u32).prop_map(|(slba, nlb)| Step::Deallocate { slba, nlb }),
        1 => Just(Step::Flush),
    ];
    proptest::collection::vec(step, 1..40)
}

fn format_choice() -> impl Strategy<Value = (u32, u32, Protection)> {
    (
        prop_oneof![Just(512u32), Just(4096u32)],
        prop_oneof![
            Just((0u32, Protection::Off)),
            Just((8, Protection::Off)),
            Just((16, Protection::Opaque)),
            Just((8, Protection::Verified)),
            Just((16, Protection::Verified)),
        ],
    )
        .prop_map(|(lba, (metadata, protection))| (lba, metadata, protection))
}

/// The PI fields of every oracle command at `slba`: reference tags from
/// the LBA, one application tag for all. (ulp.md §3.7's application tag,
/// the low 16 bits of the command's SLBA, would fail a read spanning
/// blocks written by commands with another SLBA.)
fn oracle_pi(slba: u64) -> CommandPi {
    CommandPi {
        app_tag: 0x1234,
        ..CommandPi::type1(slba)
    }
}

/// Runs `steps` on a namespace and on a `BTreeMap` of written blocks;
/// every status and every block read must agree. Writes carry correct PI
/// for their LBA, reads expect it, so a verified namespace must pass too.
fn check_against_oracle(namespace: &mut Namespace, steps: &[Step]) -> Result<(), TestCaseError> {
    let format = *namespace.format();
    let (lba_size, metadata_size) = (format.lba_size(), format.metadata_size());
    let mut erased = vec![0; metadata_size];
    format.fill_erased_metadata(&mut erased);
    let mut oracle: BTreeMap<u64, (Vec<u8>, Vec<u8>)> = BTreeMap::new();
    let expected_status = |slba: u64, nlb: u32| {
        if nlb == 0 {
            Err(Status::INVALID_FIELD)
        } else if slba + u64::from(nlb) > format.blocks() {
            Err(Status::LBA_OUT_OF_RANGE)
        } else {
            Ok(())
        }
    };
    for step in steps {
        match *step {
            Step::Write { slba, nlb, seed } => {
                let data = pattern(nlb as usize * lba_size, seed);
                let mut metadata = pattern(nlb as usize * metadata_size, !seed);
                let pi = oracle_pi(slba);
                protect(
                    format.format(),
                    &data,
                    &mut metadata,
                    pi.ref_tag,
                    pi.app_tag,
                );
                let result = namespace.write(slba, nlb, &pi, &data, &metadata, false);
                let expected = expected_status(slba, nlb);
                prop_assert_eq!(result, expected, "{:?}", step);
                if expected.is_ok() {
                    for index in 0..nlb as usize {
                        oracle.insert(
                            slba + index as u64,
                            (
                                data[index * lba_size..][..lba_size].to_vec(),
                                metadata[index * metadata_size..][..metadata_size].to_vec(),
                            ),
                        );
                    }
                }
            }
            Step::Read { slba, nlb } => {
                let mut data = vec![0xA5; nlb as usize * lba_size];
                let mut metadata = vec![0xA5; nlb as usize * metadata_size];
                let result = namespace.read(slba, nlb, &oracle_pi(slba), &mut data, &mut metadata);
                let expected = expected_status(slba, nlb);
                prop_assert_eq!(result, expected, "{:?}", step);
                if expected.is_ok() {
                    for index in 0..nlb as usize {
                        let lba = slba + index as u64;
                        let got_data = &data[index * lba_size..][..lba_size];
                        let got_metadata = &metadata[index * metadata_size..][..metadata_size];
                        match oracle.get(&lba) {
                            Some((want_data, want_metadata)) => {
                                prop_assert_eq!(got_data, &want_data[..], "data of {}", lba);
                                prop_assert_eq!(got_metadata, &want_metadata[..], "md of {}", lba);
                            }
                            None => {
                                prop_assert!(got_data.iter().all(|&b| b == 0), "data of {}", lba);
                                prop_assert_eq!(got_metadata, &erased[..], "md of {}", lba);
                            }
                        }
                    }
                }
            }
            Step::WriteZeroes { slba, nlb } | Step::Deallocate { slba, nlb } => {
                let result = if matches!(step, Step::WriteZeroes { .. }) {
                    namespace.write_zeroes(slba, nlb)
                } else {
                    namespace.deallocate(slba, nlb)
                };
                let expected = expected_status(slba, nlb);
                prop_assert_eq!(result, expected, "{:?}", step);
                if expected.is_ok() {
                    oracle.retain(|&lba, _| lba < slba || lba >= slba + u64::from(nlb));
                }
            }
            Step::Flush => prop_assert_eq!(namespace.flush(), Ok(())),
        }
    }
    Ok(())
}

/// Namespaces of 300 blocks of 512 B (RAM chunks end at 128 and 256) or
/// 40 blocks of 4 KiB (chunks end at 16 and 32).
fn oracle_config((lba_size, metadata_size, protection): (u32, u32, Protection)) -> NamespaceConfig {
    let blocks = if lba_size == 512 { 300 } else { 40 };
    NamespaceConfig::new(1, blocks, lba_size).with_metadata(metadata_size, protection)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn ram_matches_the_oracle(
        (format, steps) in format_choice().prop_flat_map(|format| {
            let blocks = oracle_config(format).blocks;
            (Just(format), steps(blocks))
        })
    ) {
        let mut fixture = open(Backend::Ram, &oracle_config(format));
        check_against_oracle(&mut fixture.namespace, &steps)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn file_matches_the_oracle(
        direct in any::<bool>(),
        (format, steps) in format_choice().prop_flat_map(|format| {
            let blocks = oracle_config(format).blocks;
            (Just(format), steps(blocks))
        })
    ) {
        let backend = if direct { Backend::FileDirect } else { Backend::FileBuffered };
        let mut fixture = open(backend, &oracle_config(format));
        check_against_oracle(&mut fixture.namespace, &steps)?;
    }
}
