//! NVMe over Falcon (OCP NVMe over Falcon 0.9): NVMe commands mapped onto
//! Falcon push and pull transactions, with target backends. Not yet built:
//! placeholder crate until the NVMe issue.
#![forbid(unsafe_code)]
