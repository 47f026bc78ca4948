//! `falcon nvme-target` on a DPDK ethdev (`[port] kind = "dpdk"`).
//!
//! Layer: application. Not built yet: the configuration is checked, and
//! the run says what is missing.

use super::report::Report;
use crate::cli::NvmeTargetArgs;
use crate::error::{AppError, Result};
use crate::nvmecfg::Plan;

pub fn run(args: &NvmeTargetArgs, _plan: &Plan) -> Result<Report> {
    Err(AppError::Usage(format!(
        "{}: port.kind = \"dpdk\" is not served yet; use kind = \"udp\"",
        args.config.display()
    )))
}
