//! RDMA over Falcon (OCP RDMA over Falcon 0.9): verbs semantics mapped onto
//! Falcon push and pull transactions. Not yet built: placeholder crate until
//! the RDMA issue.
#![forbid(unsafe_code)]
