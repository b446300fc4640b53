//! Process groups (MPI-3.1 §6.3): ordered sets of processes, built from a communicator with
//! [`crate::Communicator::group`] and turned into one with [`crate::Communicator::create`].
//!
//! A group is a plain value (the world ranks of its members, in group-rank order, and the
//! caller's own world rank): every operation here is local and pure.

use std::collections::HashSet;
use std::rc::Rc;

use rmca_framework::rank::Rank;

use crate::{Error, Result};

/// How two groups or two communicators relate (`MPI_Group_compare`, `MPI_Comm_compare`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    /// The same group, or the same communicator (one matching space).
    Identical,
    /// Communicators only: the same members in the same order, distinct matching spaces.
    Congruent,
    /// The same members in a different order.
    Similar,
    /// Different members.
    Unequal,
}

/// An ordered set of processes of the job (`MPI_Group`). Cheap to clone.
#[derive(Clone, PartialEq, Eq)]
pub struct Group {
    /// World rank of each group rank.
    members: Rc<[Rank]>,
    /// The world rank of the process holding this group (for [`Group::rank`]).
    me: Rank,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("members", &self.members)
            .field("rank", &self.rank())
            .finish()
    }
}

impl Group {
    /// The group of `members` (world ranks, in group-rank order) seen by world rank `me`.
    pub(crate) fn from_world_ranks(members: impl Into<Rc<[Rank]>>, me: Rank) -> Self {
        Self {
            members: members.into(),
            me,
        }
    }

    /// World rank of each member, in group-rank order.
    pub(crate) fn world_ranks(&self) -> &[Rank] {
        &self.members
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// The caller's rank in the group, `None` if it is not a member (`MPI_UNDEFINED`).
    pub fn rank(&self) -> Option<usize> {
        self.members.iter().position(|&w| w == self.me)
    }

    /// Is the group empty (`MPI_GROUP_EMPTY`)?
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    fn with_members(&self, members: Vec<Rank>) -> Self {
        Self::from_world_ranks(members, self.me)
    }

    /// Check that `ranks` are distinct ranks of this group (`what` names the call).
    fn check_ranks(&self, ranks: &[usize], what: &str) -> Result<()> {
        let mut seen = vec![false; self.size()];
        for &r in ranks {
            let Some(s) = seen.get_mut(r) else {
                return Err(Error::InvalidArgument(format!(
                    "{what}: rank {r} is not in the group (size {})",
                    self.size()
                )));
            };
            if std::mem::replace(s, true) {
                return Err(Error::InvalidArgument(format!(
                    "{what}: rank {r} is listed twice (ranks must be distinct)"
                )));
            }
        }
        Ok(())
    }

    /// The group of the members at `ranks`, in that order (`MPI_Group_incl`). The ranks must
    /// be distinct ranks of this group.
    pub fn incl(&self, ranks: &[usize]) -> Result<Group> {
        self.check_ranks(ranks, "Group::incl")?;
        Ok(self.with_members(ranks.iter().map(|&r| self.members[r]).collect()))
    }

    /// The group without the members at `ranks`, the others in their order
    /// (`MPI_Group_excl`). The ranks must be distinct ranks of this group.
    pub fn excl(&self, ranks: &[usize]) -> Result<Group> {
        self.check_ranks(ranks, "Group::excl")?;
        let drop: HashSet<usize> = ranks.iter().copied().collect();
        Ok(self.with_members(
            (0..self.size())
                .filter(|r| !drop.contains(r))
                .map(|r| self.members[r])
                .collect(),
        ))
    }

    /// The members of `self`, then those of `other` not in `self`, each in their group's
    /// order (`MPI_Group_union`).
    pub fn union(&self, other: &Group) -> Group {
        let mine: HashSet<Rank> = self.members.iter().copied().collect();
        let mut members = self.members.to_vec();
        members.extend(other.members.iter().filter(|w| !mine.contains(w)));
        self.with_members(members)
    }

    /// The members of `self` that are in `other`, in `self`'s order
    /// (`MPI_Group_intersection`).
    pub fn intersection(&self, other: &Group) -> Group {
        let theirs: HashSet<Rank> = other.members.iter().copied().collect();
        self.with_members(
            self.members
                .iter()
                .copied()
                .filter(|w| theirs.contains(w))
                .collect(),
        )
    }

    /// The members of `self` that are not in `other`, in `self`'s order
    /// (`MPI_Group_difference`).
    pub fn difference(&self, other: &Group) -> Group {
        let theirs: HashSet<Rank> = other.members.iter().copied().collect();
        self.with_members(
            self.members
                .iter()
                .copied()
                .filter(|w| !theirs.contains(w))
                .collect(),
        )
    }

    /// The rank in `other` of each member of `self` at `ranks`: `None` where that process is
    /// not in `other` (`MPI_Group_translate_ranks`, `MPI_UNDEFINED`).
    pub fn translate_ranks(&self, ranks: &[usize], other: &Group) -> Result<Vec<Option<usize>>> {
        ranks
            .iter()
            .map(|&r| {
                let w = self.members.get(r).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "Group::translate_ranks: rank {r} is not in the group (size {})",
                        self.size()
                    ))
                })?;
                Ok(other.members.iter().position(|x| x == w))
            })
            .collect()
    }

    /// [`Comparison::Identical`] for the same members in the same order,
    /// [`Comparison::Similar`] for the same members in another order, else
    /// [`Comparison::Unequal`] (`MPI_Group_compare`).
    pub fn compare(&self, other: &Group) -> Comparison {
        if self.members == other.members {
            return Comparison::Identical;
        }
        if self.size() != other.size() {
            return Comparison::Unequal;
        }
        let mine: HashSet<Rank> = self.members.iter().copied().collect();
        if other.members.iter().all(|w| mine.contains(w)) {
            Comparison::Similar
        } else {
            Comparison::Unequal
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn group(members: &[Rank]) -> Group {
        Group::from_world_ranks(members.to_vec(), 0)
    }

    /// Distinct world ranks below 16, in random order.
    fn members() -> impl Strategy<Value = Vec<Rank>> {
        proptest::sample::subsequence((0..16).collect::<Vec<Rank>>(), 0..=16).prop_shuffle()
    }

    proptest! {
        #[test]
        fn set_operations_match_a_naive_model(a in members(), b in members()) {
            let (ga, gb) = (group(&a), group(&b));
            let mut union = a.clone();
            for w in &b {
                if !a.contains(w) {
                    union.push(*w);
                }
            }
            prop_assert_eq!(ga.union(&gb).world_ranks().to_vec(), union);
            let inter: Vec<Rank> = a.iter().copied().filter(|w| b.contains(w)).collect();
            prop_assert_eq!(ga.intersection(&gb).world_ranks().to_vec(), inter);
            let diff: Vec<Rank> = a.iter().copied().filter(|w| !b.contains(w)).collect();
            prop_assert_eq!(ga.difference(&gb).world_ranks().to_vec(), diff);
            let (mut sa, mut sb) = (a.clone(), b.clone());
            sa.sort_unstable();
            sb.sort_unstable();
            let expected = if a == b {
                Comparison::Identical
            } else if sa == sb {
                Comparison::Similar
            } else {
                Comparison::Unequal
            };
            prop_assert_eq!(ga.compare(&gb), expected);
            let all: Vec<usize> = (0..a.len()).collect();
            let translated = ga.translate_ranks(&all, &gb).unwrap();
            for (r, t) in translated.into_iter().enumerate() {
                prop_assert_eq!(t, b.iter().position(|&w| w == a[r]));
            }
        }

        #[test]
        fn incl_and_excl_pick_and_drop_ranks(a in members(), picks in members()) {
            let g = group(&a);
            let picks: Vec<usize> = picks.into_iter().map(|p| p as usize).filter(|&p| p < a.len()).collect();
            let inc = g.incl(&picks).unwrap();
            let expected: Vec<Rank> = picks.iter().map(|&p| a[p]).collect();
            prop_assert_eq!(inc.world_ranks(), &expected[..]);
            let exc = g.excl(&picks).unwrap();
            let kept: Vec<Rank> = (0..a.len()).filter(|r| !picks.contains(r)).map(|r| a[r]).collect();
            prop_assert_eq!(exc.world_ranks(), &kept[..]);
            // Together they hold every member once.
            let mut both: Vec<Rank> = inc.union(&exc).world_ranks().to_vec();
            both.sort_unstable();
            let mut sorted = a.clone();
            sorted.sort_unstable();
            prop_assert_eq!(both, sorted);
        }
    }

    #[test]
    fn rank_is_the_callers_position_or_none() {
        let g = Group::from_world_ranks(vec![5, 3, 9], 3);
        assert_eq!(g.rank(), Some(1));
        assert_eq!(g.excl(&[1]).unwrap().rank(), None);
        assert_eq!(g.size(), 3);
        assert!(g.incl(&[]).unwrap().is_empty());
    }

    #[test]
    fn bad_ranks_are_refused_with_what_is_valid() {
        let g = group(&[4, 2, 7]);
        let e = g.incl(&[0, 3]).unwrap_err().to_string();
        assert!(e.contains("rank 3") && e.contains("size 3"), "{e}");
        let e = g.excl(&[1, 1]).unwrap_err().to_string();
        assert!(e.contains("twice"), "{e}");
        assert!(g.translate_ranks(&[3], &g).is_err());
    }
}
