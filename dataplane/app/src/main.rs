//! The `falcon` command: parses the command line and maps errors to exit
//! codes (2: unusable input such as a bad file or configuration value,
//! 1: the job ran and failed, 141: the reader of stdout closed it early).
#![forbid(unsafe_code)]

use clap::Parser;

fn main() {
    exit_quietly_on_broken_pipe();
    let cli = falcon::cli::Cli::parse();
    if let Err(e) = falcon::run(cli) {
        eprintln!("falcon: error: {e}");
        std::process::exit(e.exit_code());
    }
}

/// `falcon bench core | head` closes stdout early, and the next `println!`
/// panics with "failed printing to stdout: Broken pipe" (Rust ignores
/// SIGPIPE). The reader has all it wanted, so that is no failure of the
/// job: exit at once with no message and the status a shell tool killed by
/// SIGPIPE has (128 + 13). Every other panic goes to the default hook.
fn exit_quietly_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}
