//! The RDMA-over-Falcon sequence numbers: the RBTH's [`Sn`] and the SETH's
//! [`Rmsn`].
//!
//! Layer: wire values shared with the queue pairs built on top. Owns the two
//! newtypes, made by falcon-core's `sequence_number!` (the macro of its
//! `Psn` and `Rsn`), and their first values. Both are 32-bit and wrap
//! (RDMA-0.9 §8.2, §8.3.2); like Falcon's `Psn` and `Rsn` they have **no
//! total order**, so neither implements `Ord` or `PartialOrd` and a raw `<`
//! on them does not compile. Compare with `before`, `after` and `distance`.
//! Two numbers exactly 2^31 apart are each `before` the other (RFC 1982
//! §3.2 leaves that case undefined). Nothing here panics.

falcon_core::sequence_number! {
    /// RBTH Sequence Number (RDMA-0.9 §8.2): one per packet on a Falcon
    /// connection, from 1; a response carries its request's SN.
    Sn, "SN"
}

falcon_core::sequence_number! {
    /// SETH Request Message Sequence Number (RDMA-0.9 §8.3.2), from 1. An
    /// initiator keeps two: one for Send and Write with Immediate (its low
    /// 8 bits name the RQ WQE the target consumes), one for Read and Atomic
    /// requests (it names the responder's IRRQ entry).
    Rmsn, "RMSN"
}

impl Sn {
    /// The first SN on a Falcon connection (RDMA-0.9 §8.2).
    pub const FIRST: Sn = Sn::new(1);
}

impl Rmsn {
    /// The first RMSN of each counter (RDMA-0.9 §8.3.2).
    pub const FIRST: Rmsn = Rmsn::new(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_wraps() {
        let last = Sn::new(u32::MAX);
        assert_eq!(last.next(), Sn::new(0));
        assert!(last.before(Sn::new(0)));
        assert!(Sn::new(0).after(last));
        assert_eq!(last.distance(Sn::FIRST), 2);
        assert!(!Sn::FIRST.before(Sn::FIRST));
        assert!(Rmsn::new(5).before(Rmsn::new(6)));
        assert!(Rmsn::new(0x8000_0000).before(Rmsn::new(0)));
        assert!(Rmsn::new(0).before(Rmsn::new(0x8000_0000)));
        assert_eq!(format!("{}", Rmsn::FIRST), "RMSN 1");
    }
}
