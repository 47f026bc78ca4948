//! One module per subcommand.

pub mod bench_core;
pub mod bench_loop;
pub mod bench_pipeline;
pub mod bench_psp;
pub mod bench_rue;
pub mod bench_scale;
pub mod bench_udp;
pub mod demo;
pub mod nbd_gateway;
pub mod node;
pub mod nvme_io;
pub mod nvme_perf;
pub mod nvme_target;
pub mod pcap_decode;
pub mod pcap_sample;
pub mod pipeline_falcon;
pub mod pipeline_lcores;
pub mod pktgen;
pub mod psp_tool;
pub mod rdma_perf;
pub mod run;
mod slices;
// Used by the DPDK benchmarks; built and tested without DPDK too.
#[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
mod spin_barrier;
