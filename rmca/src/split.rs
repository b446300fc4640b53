//! The colours of [`crate::Communicator::split_with`] as the members exchange them, and the
//! decisions taken from that one exchange (no I/O: unit tested here).
//!
//! Each member contributes two words, (colour, key). A colour the caller could not accept
//! (the C interface's negative colours other than `MPI_UNDEFINED`) travels in the same
//! exchange, so every member sees it and refuses the split after the exchange, naming the
//! first member that passed one: nobody refuses alone while the others wait, and no second
//! exchange is needed to learn of it.

use crate::{Error, Result};

/// A member's colour in [`crate::Communicator::split_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitColor {
    /// Join the new communicator of this colour.
    Of(u32),
    /// Join none (`MPI_UNDEFINED`): the split returns `None` here.
    Undefined,
    /// A colour outside both (e.g. a negative C colour that is not `MPI_UNDEFINED`): every
    /// member refuses the split with [`Error::InvalidArgument`] naming the first member that
    /// passed one, after the split's exchange.
    Invalid(i32),
}

impl From<Option<u32>> for SplitColor {
    fn from(c: Option<u32>) -> Self {
        c.map_or(SplitColor::Undefined, SplitColor::Of)
    }
}

/// The word carrying no colour.
const UNDEFINED: i64 = -1;

impl SplitColor {
    /// The colour's word in the exchange: the colour, -1, or an invalid colour below
    /// `i64::MIN + 2^32` (apart from both).
    pub(crate) fn word(self) -> i64 {
        match self {
            SplitColor::Of(c) => i64::from(c),
            SplitColor::Undefined => UNDEFINED,
            SplitColor::Invalid(v) => i64::MIN + i64::from(v as u32),
        }
    }

    /// The colour of an exchanged word (any i64 decodes to something: a word no member
    /// could have sent is an invalid colour).
    pub(crate) fn of_word(w: i64) -> Self {
        if w >= 0 {
            u32::try_from(w).map_or(SplitColor::Invalid(-1), SplitColor::Of)
        } else if w == UNDEFINED {
            SplitColor::Undefined
        } else if w < i64::MIN + (1 << 32) {
            SplitColor::Invalid(((w - i64::MIN) as u32) as i32)
        } else {
            SplitColor::Invalid(w as i32)
        }
    }
}

/// The error every member returns when the exchanged `colors` (in rank order) hold an
/// invalid one: the first such rank and its colour. `which` names the group ("" within a
/// communicator; "local group's " / "remote group's " on an intercommunicator).
pub(crate) fn refuse_invalid(which: &str, colors: impl Iterator<Item = i64>) -> Result<()> {
    for (r, w) in colors.enumerate() {
        if let SplitColor::Invalid(v) = SplitColor::of_word(w) {
            return Err(Error::InvalidArgument(format!(
                "split: the {which}rank {r} passed color {v}, which is invalid (colors are >= 0, or MPI_UNDEFINED to take no part): every member refuses the split; the communicator is unchanged"
            )));
        }
    }
    Ok(())
}

/// The members of `color` given every member's (colour word, key) in rank order: their ranks
/// ordered by key, then by rank.
pub(crate) fn members_of(color: u32, table: impl Iterator<Item = (i64, i64)>) -> Vec<usize> {
    let mut m: Vec<(i64, usize)> = table
        .enumerate()
        .filter(|(_, (c, _))| *c == i64::from(color))
        .map(|(r, (_, k))| (k, r))
        .collect();
    m.sort_unstable();
    m.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_survive_the_exchange_words() {
        for c in [
            SplitColor::Of(0),
            SplitColor::Of(7),
            SplitColor::Of(u32::MAX),
            SplitColor::Undefined,
            SplitColor::Invalid(-1),
            SplitColor::Invalid(-5),
            SplitColor::Invalid(i32::MIN),
            SplitColor::Invalid(-32766),
        ] {
            assert_eq!(SplitColor::of_word(c.word()), c, "{c:?}");
        }
        assert_eq!(SplitColor::from(None), SplitColor::Undefined);
        assert_eq!(SplitColor::from(Some(3)), SplitColor::Of(3));
    }

    #[test]
    fn an_invalid_colour_is_refused_naming_its_first_member() {
        let words = [
            SplitColor::Of(1).word(),
            SplitColor::Undefined.word(),
            SplitColor::Invalid(-5).word(),
            SplitColor::Invalid(-9).word(),
        ];
        let e = refuse_invalid("", words.into_iter()).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("rank 2 passed color -5"), "{msg}");
        assert!(refuse_invalid("", words[..2].iter().copied()).is_ok());
    }

    #[test]
    fn members_are_ordered_by_key_then_rank() {
        let table = [(1, 5), (0, 0), (1, -2), (1, 5), (-1, 0)];
        assert_eq!(members_of(1, table.into_iter()), [2, 0, 3]);
        assert_eq!(members_of(0, table.into_iter()), [1]);
        assert!(members_of(9, table.into_iter()).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn any_word_decodes_to_a_colour_that_encodes_back_when_valid(w: i64) {
            match SplitColor::of_word(w) {
                SplitColor::Of(c) => proptest::prop_assert_eq!(i64::from(c), w),
                SplitColor::Undefined => proptest::prop_assert_eq!(w, -1),
                SplitColor::Invalid(_) => {}
            }
        }
    }
}
