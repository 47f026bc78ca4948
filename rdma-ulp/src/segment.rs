//! Segmentation of verbs operations into Falcon transactions (RDMA-0.9
//! §6.7).
//!
//! Layer: RDMA ULP, pure arithmetic under the requester. Owns the split
//! rules: a SEND or WRITE is cut into payload-MTU pieces, First and Middle
//! exactly one MTU, Last at most one ([`push_piece`]); a READ is cut at the
//! MTU **and** at the boundaries of the requester's scatter entries,
//! because each pull's response lands in one entry named by the STETH
//! (VA and L_Key) of its request, so a pull never crosses an entry and a
//! First or Middle may be shorter than the MTU ([`read_piece`]). Never
//! allocates: a piece is computed from the message and a cursor when the
//! requester is ready to submit it, and the cursor moves only when Falcon
//! took it.
//!
//! The MTU counts payload bytes only (ulp.md §1.6, decision D4): headers
//! come on top. A zero-length message is one piece of zero bytes (an
//! "Only" packet), as in InfiniBand.

use crate::wire::Position;

/// One packet's share of a SEND or WRITE message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Its first byte's offset in the message.
    pub offset: u64,
    pub len: u32,
    pub position: Position,
}

/// The piece of a `message_len`-byte SEND or WRITE that starts at
/// `offset` (a multiple of `mtu` below `message_len`, or 0), or `None`
/// when `offset` is past the last piece.
pub const fn push_piece(message_len: u64, mtu: u32, offset: u64) -> Option<Piece> {
    let mtu = mtu as u64;
    if mtu == 0 || (offset >= message_len && !(offset == 0 && message_len == 0)) {
        return None;
    }
    let rest = message_len - offset;
    let len = if rest < mtu { rest } else { mtu };
    let first = offset == 0;
    let last = offset + len == message_len;
    let position = match (first, last) {
        (true, true) => Position::Only,
        (true, false) => Position::First,
        (false, false) => Position::Middle,
        (false, true) => Position::Last,
    };
    Some(Piece {
        offset,
        // In range: len ≤ mtu, a u32.
        len: len as u32,
        position,
    })
}

/// Packets a `message_len`-byte SEND or WRITE takes.
pub const fn push_piece_count(message_len: u64, mtu: u32) -> u64 {
    if message_len == 0 || mtu == 0 {
        return 1;
    }
    message_len.div_ceil(mtu as u64)
}

/// Where the next READ piece starts: a scatter entry, an offset in it, and
/// the message offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadCursor {
    pub sge: usize,
    pub sge_offset: u32,
    pub offset: u64,
}

/// One pull of a READ: `len` bytes of the message at `offset`, landing at
/// `sge_offset` of scatter entry `sge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPiece {
    pub offset: u64,
    pub len: u32,
    /// `None` for the one piece of a zero-length READ.
    pub sge: Option<usize>,
    pub sge_offset: u32,
    /// The message's first and last piece.
    pub first: bool,
    pub last: bool,
}

/// The READ piece at `cursor` over scatter entries of lengths `sges`, and
/// the cursor after it; `None` when the message is done.
pub fn read_piece(sges: &[u32], mtu: u32, cursor: ReadCursor) -> Option<(ReadPiece, ReadCursor)> {
    let total: u64 = sges.iter().map(|&l| u64::from(l)).sum();
    if mtu == 0 {
        return None;
    }
    if total == 0 {
        return (cursor.offset == 0 && cursor.sge == 0).then_some((
            ReadPiece {
                offset: 0,
                len: 0,
                sge: None,
                sge_offset: 0,
                first: true,
                last: true,
            },
            ReadCursor {
                sge: sges.len().max(1),
                sge_offset: 0,
                offset: 0,
            },
        ));
    }
    // Skip empty entries and an entry the cursor reached the end of.
    let mut sge = cursor.sge;
    let mut sge_offset = cursor.sge_offset;
    while sges.get(sge).is_some_and(|&len| sge_offset >= len) {
        sge += 1;
        sge_offset = 0;
    }
    let entry = *sges.get(sge)?;
    let len = (entry - sge_offset).min(mtu);
    let offset = cursor.offset;
    let next = ReadCursor {
        sge,
        sge_offset: sge_offset + len,
        offset: offset + u64::from(len),
    };
    Some((
        ReadPiece {
            offset,
            len,
            sge: Some(sge),
            sge_offset,
            first: offset == 0,
            last: next.offset == total,
        },
        next,
    ))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_send_of_two_and_a_half_mtus() {
        let pieces: Vec<Piece> = (0..)
            .map_while(|i| push_piece(2560, 1024, i * 1024))
            .collect();
        assert_eq!(
            pieces,
            [
                Piece {
                    offset: 0,
                    len: 1024,
                    position: Position::First
                },
                Piece {
                    offset: 1024,
                    len: 1024,
                    position: Position::Middle
                },
                Piece {
                    offset: 2048,
                    len: 512,
                    position: Position::Last
                },
            ]
        );
        assert_eq!(push_piece_count(2560, 1024), 3);
        assert_eq!(
            push_piece(0, 1024, 0),
            Some(Piece {
                offset: 0,
                len: 0,
                position: Position::Only
            })
        );
        assert_eq!(push_piece(0, 1024, 1024), None);
        assert_eq!(push_piece_count(0, 256), 1);
        assert_eq!(
            push_piece(4096, 4096, 0).map(|p| p.position),
            Some(Position::Only)
        );
    }

    /// RDMA-0.9 §6.7's example: one READ over five scatter entries becomes
    /// six pulls; the first entry gives two (one MTU and the rest), a
    /// two-MTU entry gives two full ones.
    #[test]
    fn the_spec_example_splits_at_entries_and_the_mtu() {
        let mtu = 1024;
        let sges = [1500, 300, 2048, 100, 700];
        let mut cursor = ReadCursor::default();
        let mut pieces = Vec::new();
        while let Some((piece, next)) = read_piece(&sges, mtu, cursor) {
            pieces.push((piece.sge, piece.sge_offset, piece.len));
            cursor = next;
        }
        assert_eq!(
            pieces,
            [
                (Some(0), 0, 1024),
                (Some(0), 1024, 476),
                (Some(1), 0, 300),
                (Some(2), 0, 1024),
                (Some(2), 1024, 1024),
                (Some(3), 0, 100),
                (Some(4), 0, 700),
            ]
        );
        let (only, next) = read_piece(&[], mtu, ReadCursor::default()).expect("one piece");
        assert_eq!(
            (only.len, only.sge, only.first, only.last),
            (0, None, true, true)
        );
        assert_eq!(read_piece(&[], mtu, next), None);
        assert_eq!(
            read_piece(&[0, 0], mtu, ReadCursor::default()).map(|p| p.0.len),
            Some(0)
        );
    }

    proptest! {
        /// Push pieces cover the message once, in order; all but the last
        /// are one MTU, none exceeds it.
        #[test]
        fn push_pieces_cover_the_message(len in 0u64..100_000, mtu_index in 0usize..5) {
            let mtu = crate::verbs::Mtu::ALL[mtu_index].bytes();
            let pieces: Vec<Piece> = (0..)
                .map_while(|i| push_piece(len, mtu, i * u64::from(mtu)))
                .collect();
            prop_assert_eq!(pieces.len() as u64, push_piece_count(len, mtu));
            let mut at = 0;
            for (i, piece) in pieces.iter().enumerate() {
                prop_assert_eq!(piece.offset, at);
                prop_assert!(piece.len <= mtu);
                let last = i + 1 == pieces.len();
                if !last {
                    prop_assert_eq!(piece.len, mtu);
                }
                prop_assert_eq!(piece.position.ends_message(), last);
                prop_assert_eq!(
                    matches!(piece.position, Position::First | Position::Only),
                    i == 0
                );
                at += u64::from(piece.len);
            }
            prop_assert_eq!(at, len);
        }

        /// READ pieces cover the message once, in order, never cross a
        /// scatter entry, never exceed the MTU; each lands where the
        /// message offset falls in the scatter list.
        #[test]
        fn read_pieces_cover_the_message_within_entries(
            sges in proptest::collection::vec(0u32..10_000, 0..8),
            mtu_index in 0usize..5,
        ) {
            let mtu = crate::verbs::Mtu::ALL[mtu_index].bytes();
            let total: u64 = sges.iter().map(|&l| u64::from(l)).sum();
            // The oracle: each message byte's entry and offset in it.
            let mut owner = Vec::new();
            for (i, &len) in sges.iter().enumerate() {
                owner.extend((0..len).map(|o| (i, o)));
            }
            let mut cursor = ReadCursor::default();
            let mut covered = 0u64;
            let mut count = 0;
            while let Some((piece, next)) = read_piece(&sges, mtu, cursor) {
                count += 1;
                prop_assert!(count <= owner.len() + 1, "terminates");
                prop_assert_eq!(piece.offset, covered);
                prop_assert!(piece.len <= mtu);
                prop_assert_eq!(piece.first, covered == 0);
                if total == 0 {
                    prop_assert_eq!(piece.len, 0);
                } else {
                    let sge = piece.sge.expect("an entry");
                    prop_assert!(piece.len > 0);
                    prop_assert!(piece.sge_offset + piece.len <= sges[sge], "within the entry");
                    prop_assert_eq!(owner[piece.offset as usize], (sge, piece.sge_offset));
                }
                covered += u64::from(piece.len);
                prop_assert_eq!(piece.last, covered == total);
                cursor = next;
            }
            prop_assert_eq!(covered, total);
            prop_assert!(count >= 1);
        }
    }
}
