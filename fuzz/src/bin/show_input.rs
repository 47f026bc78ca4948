//! Prints an `engine_rx_sealed` input as its steps, each frame's plaintext
//! parsed as a Falcon packet: for reading a crash or a corpus entry.
//!
//! `cargo run --manifest-path fuzz/Cargo.toml --bin show_input -- FILE...`

use std::process::ExitCode;

use falcon_core::wire::FalconRepr;
use falcon_fuzz::sealed::{decode, Step};

fn main() -> ExitCode {
    let mut status = ExitCode::SUCCESS;
    for path in std::env::args().skip(1) {
        let data = match std::fs::read(&path) {
            Ok(data) => data,
            Err(e) => {
                eprintln!("{path}: {e}");
                status = ExitCode::FAILURE;
                continue;
            }
        };
        let (ordering, steps) = decode(&data);
        println!("{path}: {ordering:?} connection, {} steps", steps.len());
        for step in steps {
            match step {
                Step::Frame { plaintext, via } => match FalconRepr::parse(&plaintext) {
                    Ok(repr) => println!("  frame {via:?}, {} bytes: {repr:?}", plaintext.len()),
                    Err(e) => println!(
                        "  frame {via:?}, {} bytes, no Falcon packet: {e:?}",
                        plaintext.len()
                    ),
                },
                step => println!("  {step:?}"),
            }
        }
    }
    status
}
