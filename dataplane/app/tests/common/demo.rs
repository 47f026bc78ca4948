//! Running `falcon demo` from the tests and reading its `--json` report.

use serde_json::Value;

use super::{falcon, stderr};

/// `falcon demo ARGS…`: the exit status, stdout and stderr.
pub fn demo(args: &[&str]) -> (bool, String, String) {
    let mut all = vec!["demo"];
    all.extend_from_slice(args);
    let o = falcon(&all);
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr(&o),
    )
}

/// `falcon demo --json ARGS…`: the exit status and the report.
pub fn demo_json(args: &[&str]) -> (bool, Value) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (ok, stdout, err) = demo(&all);
    let report = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    (ok, report)
}

/// `v[key]` as an integer; panics naming the key.
pub fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// `v[key]` as a number; panics naming the key.
pub fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"))
}
