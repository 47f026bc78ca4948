//! Declarative macros for wire-level value types (`bounded_uint!` is
//! exported for the ULP crates, the others are crate-internal).
//!
//! Layer: support for [`crate::wire`], [`crate::ids`] and [`crate::seq`]. Owns
//! the two shapes every numeric header field takes here: a code enum whose
//! unassigned values parse to `Unknown(n)` (smoltcp's `enum_with_unknown!`), and
//! a bounded unsigned newtype for sub-byte or 24-bit fields. Generated code
//! never panics.

/// Declares a `Copy` enum for a numeric protocol field. Unassigned values map
/// to `Unknown(n)` so that parsing never fails on a code alone (policy decides
/// later); `From` converts both ways and round-trips every value.
///
/// `Unknown(n)` where `n` is an assigned code is not canonical: `From<raw>`
/// never produces it, and `u8::from` maps it back to `n`.
macro_rules! enum_with_unknown {
    (
        $(#[$enum_attr:meta])*
        pub enum $name:ident($ty:ty) {
            $(
                $(#[$variant_attr:meta])*
                $variant:ident = $value:literal
            ),+ $(,)?
        }
    ) => {
        $(#[$enum_attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $(
                $(#[$variant_attr])*
                $variant,
            )+
            /// A value the specification leaves reserved or unassigned.
            Unknown($ty),
        }

        impl ::core::convert::From<$ty> for $name {
            fn from(value: $ty) -> Self {
                match value {
                    $( $value => $name::$variant, )+
                    other => $name::Unknown(other),
                }
            }
        }

        impl ::core::convert::From<$name> for $ty {
            fn from(value: $name) -> Self {
                match value {
                    $( $name::$variant => $value, )+
                    $name::Unknown(other) => other,
                }
            }
        }
    };
}

/// Declares a `Copy` newtype over an unsigned integer that holds at most
/// `bits` bits, with a validated constructor (`new`), wire-decoding
/// (`truncating`) and clamping (`saturating`) constructors, `value()`, and
/// `TryFrom`/`From`/`Display`. Exported for the ULP crates' wire fields;
/// attributes given before `pub struct` go on the type (an extra
/// `#[derive(PartialOrd, Ord)]` where the field has an order).
///
/// ```
/// falcon_core::bounded_uint! {
///     /// A 24-bit wire field.
///     #[derive(PartialOrd, Ord)]
///     pub struct Qpn(u32, bits = 24, what = "QPN");
/// }
/// assert!(Qpn::new(1 << 24).is_err());
/// assert_eq!(Qpn::truncating(0x0100_0002).value(), 2);
/// assert!(Qpn::new(1).unwrap() < Qpn::MAX);
/// ```
#[macro_export]
macro_rules! bounded_uint {
    (
        $(#[$attr:meta])*
        pub struct $name:ident($ty:ty, bits = $bits:literal, what = $what:literal);
    ) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name($ty);

        impl $name {
            /// Width of the field on the wire, in bits.
            pub const BITS: u32 = $bits;
            /// The largest value the field holds.
            pub const MAX: Self = Self(((1u64 << $bits) - 1) as $ty);
            /// Zero.
            pub const ZERO: Self = Self(0);

            /// Returns the value if it fits in the field.
            ///
            /// # Errors
            ///
            /// [`RangeError`](crate::error::RangeError) if `value > MAX`.
            pub const fn new(value: $ty) -> Result<Self, $crate::error::RangeError> {
                if value > Self::MAX.0 {
                    return Err($crate::error::RangeError {
                        what: $what,
                        value: value as u64,
                        max: Self::MAX.0 as u64,
                    });
                }
                Ok(Self(value))
            }

            /// Keeps the low bits that fit (reduction modulo 2^BITS), as a
            /// decoder reading a masked wire field does.
            pub const fn truncating(value: $ty) -> Self {
                Self(value & Self::MAX.0)
            }

            /// Clamps to `MAX`.
            pub const fn saturating(value: $ty) -> Self {
                if value > Self::MAX.0 {
                    Self::MAX
                } else {
                    Self(value)
                }
            }

            /// The value.
            pub const fn value(self) -> $ty {
                self.0
            }
        }

        impl ::core::convert::TryFrom<$ty> for $name {
            type Error = $crate::error::RangeError;

            fn try_from(value: $ty) -> Result<Self, Self::Error> {
                Self::new(value)
            }
        }

        impl ::core::convert::From<$name> for $ty {
            fn from(value: $name) -> Self {
                value.0
            }
        }

        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                ::core::fmt::Display::fmt(&self.0, f)
            }
        }
    };
}
