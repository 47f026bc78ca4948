//! RDMA over Falcon (OCP RDMA over Falcon 0.9): verbs semantics mapped onto
//! Falcon push and pull transactions. The wire headers ([`wire`]) exist;
//! the rest comes with the RDMA issue.
#![forbid(unsafe_code)]

pub mod seq;
pub mod wire;
