//! Packet and request sequence numbers.
//!
//! Layer: wire types shared by the delivery and transaction sublayers. Owns
//! [`Psn`] (packet sequence number, one space per sliding window) and [`Rsn`]
//! (request sequence number, assigned by the transaction sublayer).
//!
//! OCP Falcon 0.9 §7.2 (p.26) and §9: both are 32-bit and wrap modulo 2^32.
//! Like TCP sequence numbers (RFC 793 §3.3, RFC 1982) they have **no total
//! order**: these types implement neither `Ord` nor `PartialOrd`, so a raw
//! `<` on sequence numbers does not compile. Compare with [`Psn::before`],
//! [`Psn::after`], [`Psn::distance`] and [`Psn::in_window`] instead.
//!
//! Two numbers exactly 2^31 apart are ambiguous (RFC 1982 §3.2 leaves the
//! comparison undefined); here each is [`before`](Psn::before) the other.
//! Falcon windows (receiver 64/128, transmitter ≤ 1024 in isekai) never come
//! close. Nothing in this module panics.

/// Declares a 32-bit wrapping sequence number newtype: `new`, `value`,
/// wrapping arithmetic, `distance`, `offset_from`, the modulo-2^32
/// comparisons (`before`, `after`, `in_window`, ...) and a `Display` of
/// `label value`; no `Ord`. Exported for the ULP crates' own sequence
/// numbers (RDMA's SN and RMSN).
#[macro_export]
macro_rules! sequence_number {
    ($(#[$attr:meta])* $name:ident, $label:literal) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(u32);

        impl $name {
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

            /// `self - n` modulo 2^32.
            #[must_use]
            pub const fn wrapping_sub(self, n: u32) -> Self {
                Self(self.0.wrapping_sub(n))
            }

            /// The next sequence number (`self + 1` modulo 2^32).
            #[must_use]
            pub const fn next(self) -> Self {
                self.wrapping_add(1)
            }

            /// How many increments take `self` to `later`, modulo 2^32
            /// (`later - self`). Zero when equal; `u32::MAX` when `later` is
            /// one behind.
            pub const fn distance(self, later: Self) -> u32 {
                later.0.wrapping_sub(self.0)
            }

            /// The signed offset of `self` from `other` (`self - other`
            /// interpreted in two's complement): negative when `self` is
            /// before `other`.
            pub const fn offset_from(self, other: Self) -> i32 {
                self.0.wrapping_sub(other.0) as i32
            }

            /// `self` comes strictly before `other` in modulo-2^32 order.
            pub const fn before(self, other: Self) -> bool {
                self.offset_from(other) < 0
            }

            /// `self` comes strictly after `other` in modulo-2^32 order.
            pub const fn after(self, other: Self) -> bool {
                other.before(self)
            }

            /// `self` is `other` or comes before it.
            pub const fn before_or_eq(self, other: Self) -> bool {
                self.0 == other.0 || self.before(other)
            }

            /// `self` is `other` or comes after it.
            pub const fn after_or_eq(self, other: Self) -> bool {
                self.0 == other.0 || self.after(other)
            }

            /// `self` lies in the window `[base, base + size)` modulo 2^32.
            pub const fn in_window(self, base: Self, size: u32) -> bool {
                base.distance(self) < size
            }

            /// The later of the two in modulo-2^32 order.
            #[must_use]
            pub const fn latest(self, other: Self) -> Self {
                if other.after(self) {
                    other
                } else {
                    self
                }
            }
        }

        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                ::core::write!(f, ::core::concat!($label, " {}"), self.0)
            }
        }
    };
}

sequence_number! {
    /// Packet Sequence Number: the position of a packet in one of a
    /// connection's two sliding windows (request window for Pull Requests,
    /// data window for Push Data, Pull Data and Resync; OCP Falcon 0.9 §7.2
    /// p.26). Also the type of the receiver's window base (BPSN) fields.
    Psn, "psn"
}

sequence_number! {
    /// Request Sequence Number: assigned per ULP request by the transaction
    /// sublayer and used to restore request order on ordered connections
    /// (OCP Falcon 0.9 §7.2 p.26, §8.4.1).
    Rsn, "rsn"
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A u64 position and a signed step that never reaches the ambiguous
    /// half-space distance. Positions cluster around multiples of 2^32 so
    /// the wrap is exercised.
    fn position_and_step() -> impl Strategy<Value = (u64, i64)> {
        let near_wrap = (1u64..64, -1000i64..1000).prop_map(|(k, d)| ((k << 32) as i64 + d) as u64);
        let anywhere = (1u64 << 32)..(1u64 << 48);
        let base = prop_oneof![near_wrap, anywhere];
        let step = prop_oneof![-2000i64..2000, -(1i64 << 31) + 1..(1i64 << 31)];
        (base, step)
    }

    proptest! {
        #[test]
        fn psn_matches_u64_oracle((base, step) in position_and_step()) {
            let later = (base as i64 + step) as u64;
            let a = Psn::new(base as u32);
            let b = Psn::new(later as u32);
            prop_assert_eq!(a.before(b), base < later);
            prop_assert_eq!(a.after(b), base > later);
            prop_assert_eq!(a.before_or_eq(b), base <= later);
            prop_assert_eq!(a.after_or_eq(b), base >= later);
            prop_assert_eq!(a.distance(b), (later.wrapping_sub(base)) as u32);
            prop_assert_eq!(i64::from(b.offset_from(a)), step);
            prop_assert_eq!(a.latest(b), Psn::new(base.max(later) as u32));
            if step >= 0 {
                prop_assert_eq!(a.wrapping_add(step as u32), b);
                prop_assert_eq!(b.wrapping_sub(step as u32), a);
                prop_assert!(b.in_window(a, step as u32 + 1));
                prop_assert!(!b.in_window(a, step as u32));
            }
        }

        #[test]
        fn rsn_matches_u64_oracle((base, step) in position_and_step()) {
            let later = (base as i64 + step) as u64;
            let a = Rsn::new(base as u32);
            let b = Rsn::new(later as u32);
            prop_assert_eq!(a.before(b), base < later);
            prop_assert_eq!(a.after(b), base > later);
            prop_assert_eq!(a.distance(b), (later.wrapping_sub(base)) as u32);
            prop_assert_eq!(i64::from(b.offset_from(a)), step);
        }
    }

    #[test]
    fn wrap_at_2_pow_32() {
        let last = Psn::new(u32::MAX);
        let first = last.next();
        assert_eq!(first, Psn::new(0));
        assert!(last.before(first));
        assert!(first.after(last));
        assert_eq!(last.distance(first), 1);
        assert_eq!(first.distance(last), u32::MAX);
        assert!(first.in_window(Psn::new(u32::MAX - 63), 128));
        assert!(!Psn::new(64).in_window(Psn::new(u32::MAX - 63), 128));
        assert_eq!(Rsn::new(5).wrapping_sub(6), Rsn::new(u32::MAX));
    }

    #[test]
    fn half_space_is_ambiguous_not_panicking() {
        let a = Psn::new(0);
        let b = Psn::new(1 << 31);
        assert!(a.before(b));
        assert!(b.before(a));
        assert_eq!(a.offset_from(b), i32::MIN);
    }

    #[test]
    fn display_names_the_space() {
        assert_eq!(Psn::new(7).to_string(), "psn 7");
        assert_eq!(Rsn::new(9).to_string(), "rsn 9");
    }
}
