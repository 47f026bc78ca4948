//! Printing to stdout for commands whose output is piped (`| head`): a
//! closed pipe ends the process quietly with success instead of a panic.

use std::io::{ErrorKind, Write};

/// Writes one line to stdout; exits 0 if the reader has gone away.
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.write_all(b"\n")) {
        if e.kind() == ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("falcon: error: stdout: {e}");
        std::process::exit(1);
    }
}

/// `println!` through [`line()`].
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}
