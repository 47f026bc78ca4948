//! One module per subcommand.

pub mod bench_psp;
pub mod pcap_decode;
pub mod pcap_sample;
pub mod psp_tool;
