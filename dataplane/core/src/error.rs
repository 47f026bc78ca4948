//! A value too wide for the field it is meant for.
//!
//! Layer: shared by the identifier types ([`crate::ids`]) and the wire
//! formats. Owns [`RangeError`], returned by constructors that check a
//! value against its field's width. Depends on no other module of the
//! crate; it never allocates and never panics: a small `Copy` value.

use core::fmt;

/// A value does not fit in the field it is meant for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeError {
    /// The field, e.g. "connection id".
    pub what: &'static str,
    /// The rejected value.
    pub value: u64,
    /// The largest value the field holds.
    pub max: u64,
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} out of range (max {})",
            self.what, self.value, self.max
        )
    }
}

impl std::error::Error for RangeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_the_field_and_its_range() {
        let e = RangeError {
            what: "connection id",
            value: 1 << 24,
            max: (1 << 24) - 1,
        };
        assert_eq!(
            e.to_string(),
            "connection id 16777216 out of range (max 16777215)"
        );
    }
}
