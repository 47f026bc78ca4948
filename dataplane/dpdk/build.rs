//! Generates the DPDK bindings at build time, against the installed DPDK
//! 22.11 (`pkg-config libdpdk`), when the `dpdk` feature is on; without it
//! the crate is empty and nothing here runs.
//!
//! * bindgen over `csrc/wrapper.h`, allowlisted to DPDK's names, with
//!   `wrap_static_fns`: DPDK's fast path is `static inline` in its headers
//!   (`rte_eth_rx_burst`, `rte_pktmbuf_alloc`, the ring functions), and
//!   bindgen writes one extern C wrapper for each, which `cc` compiles
//!   here with DPDK's own cflags (mismatched `-march` between the two
//!   breaks the mbuf layout).
//! * `csrc/shim.c`: what bindgen cannot reach (`rte_errno` is a
//!   thread-local macro).
//! * Packed types bindgen cannot lay out (rust-bindgen#1538) are opaque.
//!
//! Linking is shared: Debian's EAL loads every PMD from its plugin
//! directory, so `--vdev net_null0` needs no link line; `rte_net_ring` is
//! linked for `rte_eth_from_rings`.

#[cfg(feature = "dpdk")]
fn main() {
    use std::path::PathBuf;

    println!("cargo:rerun-if-changed=csrc/wrapper.h");
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-changed=build.rs");

    let library = match pkg_config::Config::new()
        .atleast_version("22.11")
        .probe("libdpdk")
    {
        Ok(library) => library,
        Err(e) => {
            panic!(
                "falcon-dpdk: DPDK 22.11 not found through pkg-config ({e}).\n\
                 The `dpdk` feature needs Debian's libdpdk-dev, dpdk, pkg-config, clang and \
                 libclang-dev: run scripts/setup.sh, or build without `--features dpdk`."
            )
        }
    };
    // The cflags as pkg-config prints them: `-include rte_config.h`,
    // `-march=...` and the include paths, for bindgen and cc alike.
    let cflags = pkg_config_cflags();
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR set by cargo"));
    // The crate's directory: bindgen writes `#include "csrc/wrapper.h"` into
    // the wrappers it generates in OUT_DIR.
    let manifest = PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR set by cargo"),
    );
    let wrapper_h = manifest.join("csrc/wrapper.h");
    let wrappers = out.join("static_wrappers");

    let bindings = bindgen::Builder::default()
        .header(wrapper_h.to_string_lossy())
        .clang_args(&cflags)
        .allowlist_function("rte_.*|shim_.*")
        .allowlist_type("rte_.*")
        .allowlist_var("RTE_.*|RING_F_.*")
        .opaque_type("rte_arp_ipv4|rte_arp_hdr|rte_l2tpv2_combined_msg_hdr|rte_gtp_psc_generic_hdr")
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers)
        .clang_macro_fallback()
        .layout_tests(true)
        .derive_default(true)
        .generate_comments(false)
        .generate()
        .unwrap_or_else(|e| {
            panic!(
                "falcon-dpdk: bindgen failed on DPDK's headers ({e}); libclang comes with \
                 Debian's libclang-dev (scripts/setup.sh)"
            )
        });
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");

    let mut build = cc::Build::new();
    build
        .file(wrappers.with_extension("c"))
        .file("csrc/shim.c")
        .include(&manifest)
        .include(manifest.join("csrc"))
        .flag("-include")
        .flag(&wrapper_h)
        .opt_level(3)
        // One harmless warning in the generated wrappers
        // (`duplicate 'const'` in rte_is_aligned__extern).
        .warnings(false);
    for flag in &cflags {
        build.flag(flag);
    }
    build.compile("falcon_dpdk_shim");

    // rte_eth_from_rings lives in the net_ring PMD's own library.
    println!("cargo:rustc-link-lib=dylib=rte_net_ring");
    // pkg-config printed the rest (rte_ethdev, rte_mbuf, rte_eal, ...).
    let _ = library;
}

#[cfg(feature = "dpdk")]
fn pkg_config_cflags() -> Vec<String> {
    let output = std::process::Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .expect("pkg-config runs (it just found libdpdk)");
    // Word by word: `-include rte_config.h` stays two arguments in order.
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[cfg(not(feature = "dpdk"))]
fn main() {}
