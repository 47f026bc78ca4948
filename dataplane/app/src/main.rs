//! The `falcon` binary.
#![forbid(unsafe_code)]

fn main() {}
