//! Writes the seed corpus of the `engine_rx_sealed` fuzz target
//! (`falcon_fuzz::seeds`) into `fuzz/seeds/engine_rx_sealed/`, one file per
//! seed, after checking that each reaches the engine without a drop
//! (`falcon_fuzz::seeds::check`).
//! Files no seed names any more are removed.
//!
//! `cargo run --manifest-path fuzz/Cargo.toml --bin seed_corpus`

use std::collections::BTreeSet;
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/engine_rx_sealed");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("{}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let seeds = falcon_fuzz::seeds::all();
    let mut names = BTreeSet::new();
    for (name, input) in &seeds {
        if let Err(e) = falcon_fuzz::seeds::check(input) {
            eprintln!("seed {name} does not reach the engine whole: {e}");
            return ExitCode::FAILURE;
        }
        if let Err(e) = std::fs::write(dir.join(name), input) {
            eprintln!("{name}: {e}");
            return ExitCode::FAILURE;
        }
        names.insert(name.as_str());
    }
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let stale = entry
                .file_name()
                .to_str()
                .is_some_and(|n| !names.contains(n));
            if stale {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    println!("{} seeds in {}", seeds.len(), dir.display());
    ExitCode::SUCCESS
}
