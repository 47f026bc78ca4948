//! The `falcon` binary's library: command line, offline tools, benchmarks.
//!
//! Layer: the application on top of the protocol crates. It may read
//! clocks, files and the environment; the crates it drives (`falcon-core`,
//! `psp`, `rue`) may not. `main.rs` only parses the command line and maps
//! errors to exit codes; everything testable lives here.
#![forbid(unsafe_code)]

pub mod cli;
pub mod cm;
pub mod cmd;
pub mod democfg;
pub mod error;
pub mod memory;
pub mod metrics;
pub mod nbd;
pub mod nvme;
pub mod nvmecfg;
pub mod output;
pub mod pcapio;
pub mod rdma;
pub mod refcfg;
pub mod runcfg;
pub mod udp;

use cli::{BenchCommand, Cli, Command, PcapCommand, PspCommand};
use error::Result;

/// Runs one command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Demo(args) => {
            let effective = democfg::EffectiveConfig::resolve(&args)?;
            if args.print_config {
                // Checked first, so what is printed would run.
                effective.setup()?;
                print!("{}", effective.to_toml()?);
                return Ok(());
            }
            let report = cmd::demo::run(&effective, args.json)?;
            if args.json {
                println!("{}", serde_json::to_string(&report).unwrap_or_default());
            } else {
                cmd::demo::print_text(&report);
            }
            if report.ok {
                Ok(())
            } else {
                Err(error::AppError::Failed(format!(
                    "demo: {} failures; first: {}",
                    report.failures,
                    report
                        .failure_reasons
                        .first()
                        .map(String::as_str)
                        .unwrap_or("incomplete run")
                )))
            }
        }
        Command::Bench(BenchCommand::Udp(args)) => {
            let report = cmd::bench_udp::run(&args)?;
            node_outcome(&report, args.json)
        }
        Command::Node(args) => {
            let report = cmd::node::run(&args)?;
            node_outcome(&report, args.json)
        }
        Command::Run(args) => cmd::run::main(&args),
        Command::NbdGateway(args) => cmd::nbd_gateway::main(&args),
        Command::NvmePerf(args) => cmd::nvme_perf::main(&args),
        Command::NvmeTarget(args) => cmd::nvme_target::main(&args),
        Command::RdmaPerf(args) => cmd::rdma_perf::main(&args),
        Command::Pktgen(args) => {
            let report = cmd::pktgen::run(&args)?;
            cmd::pktgen::outcome(&report, args.json)
        }
        Command::Psp(PspCommand::Encrypt(args)) => cmd::psp_tool::encrypt(&args).map(drop),
        Command::Psp(PspCommand::Decrypt(args)) => cmd::psp_tool::decrypt(&args).map(drop),
        Command::Pcap(PcapCommand::Decode(args)) => cmd::pcap_decode::run(&args).map(drop),
        Command::Pcap(PcapCommand::Sample(args)) => {
            let keys = refcfg::decrypt_keys_or_example(args.keys.as_deref())?;
            let keys = cmd::psp_tool::master_keys(&keys);
            let n = cmd::pcap_sample::write(&args.output, &keys, psp::Backend::Ring)?;
            println!("wrote {n} Falcon packets to {}", args.output.display());
            Ok(())
        }
        Command::Bench(BenchCommand::Psp(args)) => {
            let report = cmd::bench_psp::run(&args)?;
            if args.json {
                println!("{}", serde_json::to_string(&report).unwrap_or_default());
            } else {
                cmd::bench_psp::print_text(&report);
            }
            Ok(())
        }
        Command::Bench(BenchCommand::Core(args)) if args.profile.is_some() => {
            let profile = args.profile.unwrap_or(cmd::bench_loop::Profile::Push64Psp);
            if args.transactions == 0 {
                return Err(error::AppError::Usage(
                    "--transactions must be positive".into(),
                ));
            }
            let report = cmd::bench_loop::profile(profile, args.transactions, args.shape())?;
            if args.json {
                println!("{}", serde_json::to_string(&report).unwrap_or_default());
            } else {
                cmd::bench_loop::print_profile(&report);
            }
            Ok(())
        }
        Command::Bench(BenchCommand::Core(args)) => {
            let report = cmd::bench_core::run(&args)?;
            if args.json {
                println!("{}", serde_json::to_string(&report).unwrap_or_default());
            } else {
                cmd::bench_core::print_text(&report);
            }
            Ok(())
        }
        Command::Bench(BenchCommand::Pipeline(args)) => {
            let report = cmd::bench_pipeline::run(&args)?;
            if args.json {
                println!("{}", serde_json::to_string(&report).unwrap_or_default());
            } else {
                cmd::bench_pipeline::print_text(&report);
            }
            Ok(())
        }
        Command::Bench(BenchCommand::Scale(args)) => {
            let report = cmd::bench_scale::run(&args)?;
            if args.json {
                println!("{}", serde_json::to_string(&report).unwrap_or_default());
            } else {
                cmd::bench_scale::print_text(&report);
            }
            Ok(())
        }
        Command::Bench(BenchCommand::Rue(args)) => {
            let report = cmd::bench_rue::run(&args)?;
            if args.json {
                println!("{}", serde_json::to_string(&report).unwrap_or_default());
            } else {
                cmd::bench_rue::print_text(&report);
            }
            Ok(())
        }
    }
}

/// Prints a node's summary; an error (exit 1) if it failed.
fn node_outcome(report: &cmd::node::Report, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(report).unwrap_or_default());
    } else {
        cmd::node::print_text(report);
    }
    if report.ok {
        Ok(())
    } else {
        Err(error::AppError::Failed(format!(
            "node {}: {} failures; first: {}",
            report.role,
            report.failures,
            report.first_failure.as_deref().unwrap_or("none named")
        )))
    }
}
