//! The RDMA-over-Falcon sequence numbers: the RBTH's [`Sn`] and the SETH's
//! [`Rmsn`].
//!
//! Layer: wire values shared with the queue pairs built on top. Owns the two
//! newtypes and their modulo-2^32 comparison. Both are 32-bit and wrap
//! (RDMA-0.9 §8.2, §8.3.2); like Falcon's `Psn` and `Rsn` they have **no
//! total order**, so neither implements `Ord` or `PartialOrd` and a raw `<`
//! on them does not compile. Compare with `before`, `after` and `distance`.
//! Two numbers exactly 2^31 apart are each `before` the other (RFC 1982
//! §3.2 leaves that case undefined). Nothing here panics.

use core::fmt;

macro_rules! sequence_number {
    ($(#[$attr:meta])* $name:ident, $label:literal) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(u32);

        impl $name {
            /// The first value a sender uses (1, RDMA-0.9 §8.2 and §8.3.2).
            pub const FIRST: Self = Self(1);

            /// Wraps a raw wire value.
            pub const fn new(value: u32) -> Self {
                Self(value)
            }

            /// The raw wire value. Do not compare raw values for order.
            pub const fn value(self) -> u32 {
                self.0
            }

            /// `self + n` modulo 2^32.
            #[must_use]
            pub const fn wrapping_add(self, n: u32) -> Self {
                Self(self.0.wrapping_add(n))
            }

            /// The next number (`self + 1` modulo 2^32).
            #[must_use]
            pub const fn next(self) -> Self {
                self.wrapping_add(1)
            }

            /// How many increments take `self` to `later` (`later - self`
            /// modulo 2^32).
            pub const fn distance(self, later: Self) -> u32 {
                later.0.wrapping_sub(self.0)
            }

            /// `self` comes strictly before `other` in modulo-2^32 order.
            pub const fn before(self, other: Self) -> bool {
                (self.0.wrapping_sub(other.0) as i32) < 0
            }

            /// `self` comes strictly after `other` in modulo-2^32 order.
            pub const fn after(self, other: Self) -> bool {
                other.before(self)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($label, " {}"), self.0)
            }
        }
    };
}

sequence_number! {
    /// RBTH Sequence Number (RDMA-0.9 §8.2): one per packet on a Falcon
    /// connection, from 1; a response carries its request's SN.
    Sn, "SN"
}

sequence_number! {
    /// SETH Request Message Sequence Number (RDMA-0.9 §8.3.2), from 1. An
    /// initiator keeps two: one for Send and Write with Immediate (its low
    /// 8 bits name the RQ WQE the target consumes), one for Read and Atomic
    /// requests (it names the responder's IRRQ entry).
    Rmsn, "RMSN"
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
