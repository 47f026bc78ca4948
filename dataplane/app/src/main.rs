//! The `falcon` command: parses the command line and maps errors to exit
//! codes (2: unusable input such as a bad file or configuration value,
//! 1: the job ran and failed).
#![forbid(unsafe_code)]

use clap::Parser;

fn main() {
    let cli = falcon::cli::Cli::parse();
    if let Err(e) = falcon::run(cli) {
        eprintln!("falcon: error: {e}");
        std::process::exit(e.exit_code());
    }
}
