//! Context ids of the blocking communicator constructors (`dup`, `split`, `create`,
//! `create_group`, `intercomm_create`, `intercomm_merge` and the intercommunicator forms):
//! agreed by a bitwise AND of the members' masks of free ids, safe when several agreements
//! interleave on one process (`MPI_THREAD_MULTIPLE`: threads create communicators from
//! different parents at once, each blocked agreement handing the process lock over).
//!
//! Each process keeps a mask of [`SLOTS`] free ids (slot `s` is context `2 + 2s`, with
//! `2 + 2s + 1` for its collectives; the world has 0 and 1). An agreement runs rounds; in
//! each, every member contributes a flag word and a part of its mask, and one allreduce ANDs
//! them. An agreement may contribute its process's mask only while it *holds* it, so two
//! agreements of one process never both see a free id as theirs; an agreement that cannot
//! hold it contributes zeros (flag 0), and all members then retry. When the flag survived
//! the AND, the lowest common bits are the new ids on every member.
//!
//! The protocol of MPICH's `contextid.c` (facts, own code):
//!
//! 1. The first round is *eager*: it uses a small part of the mask ([`EAGER_WORDS`]), held
//!    by at most one agreement of the process at a time, whoever comes. A program with one
//!    constructor at a time finishes here, in one allreduce.
//! 2. Otherwise the agreement registers as pending with its *key* (its parent's context,
//!    the same number on every member) and runs *main* rounds on the rest of the mask, which
//!    only the pending agreement with the lowest key may hold. The first round is also a
//!    barrier: every member has entered the call before anyone registers, so the lowest
//!    pending agreement of the job has all its members running rounds, holds the mask on
//!    each, and finishes: no livelock; and no member waits for the mask while a process it
//!    needs is stuck behind an agreement it has not reached (the deadlock MPICH's comment
//!    draws, which a lock taken in the first round would cause).
//! 3. A process that takes no id (a non-member of `create`, `split` without a color)
//!    contributes all ones and the flag, holds nothing and claims nothing.
//!
//! Ids are given back when the communicator that owns them is dropped ([`Lease`]), so a
//! process may make any number of communicators over its life, with at most [`SLOTS`] alive
//! at once. [`ContextIds`] is the protocol without I/O (unit- and property-tested below, on
//! simulated processes and threads); `Communicator::agree_contexts` drives it.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;

use rmca_framework::pml::ContextId;

/// Free-id slots of a process (communicators from the blocking constructors alive at once).
pub(crate) const SLOTS: usize = 4096;
/// Words of the mask.
const WORDS: usize = SLOTS / 64;
/// Words of the mask the eager first round uses (128 ids).
pub(crate) const EAGER_WORDS: usize = 2;
/// Words at the end of the mask no round uses: the ids of communicators of one process
/// ([`ContextIds::take_local`]), so that those never wait for the rounds of others.
pub(crate) const LOCAL_WORDS: usize = 2;
/// The context id of slot 0.
const FIRST: ContextId = 2;

/// The context id of `slot`.
pub(crate) fn context_of(slot: usize) -> ContextId {
    FIRST + 2 * slot as ContextId
}

/// The slot of context id `context`, if it is one of the mask's.
fn slot_of(context: ContextId) -> Option<usize> {
    let s = context.checked_sub(FIRST)?;
    (s % 2 == 0 && (s / 2) < SLOTS as ContextId).then_some((s / 2) as usize)
}

/// The highest context id the mask gives (its collective neighbour included).
#[cfg(test)]
pub(crate) const LAST_CONTEXT: ContextId = FIRST + 2 * SLOTS as ContextId - 1;

/// What went wrong agreeing on a new communicator's context, or reading what a peer sent
/// during a constructor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgreementError {
    /// Every member contributed its whole mask and no id is free on all of them.
    #[error("no context id is free on every process of the parent communicator: a process holds at most {slots} communicators made by dup/split/create/intercomm calls at once (free the ones no longer used)")]
    Exhausted {
        /// Slots per process.
        slots: usize,
    },
    /// A peer sent a count or length above what the call allows.
    #[error("{what}: a peer sent {got} where at most {max} is valid ({why}); the message is refused, nothing was allocated for it")]
    BadLength {
        /// The call and field.
        what: &'static str,
        /// The value received.
        got: u64,
        /// The largest valid value.
        max: u64,
        /// Where the bound comes from.
        why: &'static str,
    },
    /// A peer sent a world rank the job does not have, or one twice.
    #[error(
        "{what}: a peer sent world rank {rank}, which is {why} (the job has {size} processes)"
    )]
    BadRank {
        /// The call and field.
        what: &'static str,
        /// The value received.
        rank: u64,
        /// Job size.
        size: u64,
        /// Out of range, or a duplicate.
        why: &'static str,
    },
    /// A reduced round of the wrong length (an internal error).
    #[error("context-id agreement: a reduced round has {got} words, {want} expected")]
    BadRound {
        /// Words received.
        got: usize,
        /// Words expected.
        want: usize,
    },
}

/// Check a count `got` a peer sent against `max`; the typed error otherwise.
pub(crate) fn bounded(
    what: &'static str,
    got: u64,
    max: u64,
    why: &'static str,
) -> Result<usize, AgreementError> {
    if got > max {
        return Err(AgreementError::BadLength {
            what,
            got,
            max,
            why,
        });
    }
    Ok(got as usize)
}

/// Check world ranks a peer sent: each below `size`, none twice.
pub(crate) fn check_ranks(
    what: &'static str,
    ranks: &[u64],
    size: u64,
) -> Result<(), AgreementError> {
    let mut seen = BTreeSet::new();
    for &r in ranks {
        let why = if r >= size {
            "out of range"
        } else if !seen.insert(r) {
            "a duplicate"
        } else {
            continue;
        };
        return Err(AgreementError::BadRank {
            what,
            rank: r,
            size,
            why,
        });
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Eager,
    Main,
}

/// What an agreement needs next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The bitwise AND of these words over every member.
    Round(Vec<u64>),
    /// The ids are agreed: this process's (empty when it takes none).
    Agreed(Vec<ContextId>),
}

/// One agreement in progress on this process.
#[derive(Debug)]
pub(crate) struct Agreement {
    key: u64,
    ticket: u64,
    want: usize,
    member: bool,
    phase: Phase,
    holds: bool,
    registered: bool,
    rounds: u32,
}

impl Agreement {
    /// Rounds run so far.
    pub(crate) fn rounds(&self) -> u32 {
        self.rounds
    }
}

/// The process's free context ids and the agreements running on it.
#[derive(Debug)]
pub(crate) struct ContextIds {
    /// Bit set: the slot is free.
    free: [u64; WORDS],
    eager_in_use: bool,
    main_in_use: bool,
    /// Agreements past their first round: (key, ticket), lowest first.
    pending: BTreeSet<(u64, u64)>,
    next_ticket: u64,
}

impl Default for ContextIds {
    fn default() -> Self {
        Self {
            free: [u64::MAX; WORDS],
            eager_in_use: false,
            main_in_use: false,
            pending: BTreeSet::new(),
            next_ticket: 0,
        }
    }
}

impl ContextIds {
    /// Start an agreement on `want` ids (1 or 2) over a parent whose members all pass the
    /// same `key`; `member`: this process joins the new communicator (takes ids). Returns
    /// the agreement and its first round.
    pub(crate) fn begin(&mut self, key: u64, want: usize, member: bool) -> (Agreement, Vec<u64>) {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let mut a = Agreement {
            key,
            ticket,
            want,
            member,
            phase: Phase::Eager,
            holds: false,
            registered: false,
            rounds: 0,
        };
        let words = self.contribution(&mut a);
        (a, words)
    }

    fn words_of(phase: Phase) -> std::ops::Range<usize> {
        match phase {
            Phase::Eager => 0..EAGER_WORDS,
            Phase::Main => EAGER_WORDS..WORDS - LOCAL_WORDS,
        }
    }

    /// This process's part of the next round of `a` (takes the mask when `a` may).
    fn contribution(&mut self, a: &mut Agreement) -> Vec<u64> {
        let range = Self::words_of(a.phase);
        let mut out = Vec::with_capacity(1 + range.len());
        if !a.member {
            out.push(1);
            out.extend(range.map(|_| u64::MAX));
            return out;
        }
        let may = match a.phase {
            Phase::Eager => !self.eager_in_use,
            Phase::Main => !self.main_in_use && self.pending.first() == Some(&(a.key, a.ticket)),
        };
        if may {
            match a.phase {
                Phase::Eager => self.eager_in_use = true,
                Phase::Main => self.main_in_use = true,
            }
            a.holds = true;
            out.push(1);
            out.extend_from_slice(&self.free[range]);
        } else {
            out.push(0);
            out.extend(range.map(|_| 0));
        }
        out
    }

    fn let_go(&mut self, a: &mut Agreement) {
        if a.holds {
            match a.phase {
                Phase::Eager => self.eager_in_use = false,
                Phase::Main => self.main_in_use = false,
            }
            a.holds = false;
        }
    }

    fn unregister(&mut self, a: &mut Agreement) {
        if a.registered {
            self.pending.remove(&(a.key, a.ticket));
            a.registered = false;
        }
    }

    /// The AND of the round asked for last: the next round, or the ids.
    pub(crate) fn on_reduced(
        &mut self,
        a: &mut Agreement,
        result: &[u64],
    ) -> Result<Step, AgreementError> {
        let range = Self::words_of(a.phase);
        if result.len() != 1 + range.len() {
            self.abandon(a);
            return Err(AgreementError::BadRound {
                got: result.len(),
                want: 1 + range.len(),
            });
        }
        a.rounds += 1;
        self.let_go(a);
        if result[0] & 1 == 1 {
            let mut slots = Vec::with_capacity(a.want);
            'words: for (i, &w) in result[1..].iter().enumerate() {
                let mut w = w;
                while w != 0 {
                    let bit = w.trailing_zeros() as usize;
                    w &= w - 1;
                    slots.push((range.start + i) * 64 + bit);
                    if slots.len() == a.want {
                        break 'words;
                    }
                }
            }
            if slots.len() == a.want {
                self.unregister(a);
                if !a.member {
                    return Ok(Step::Agreed(Vec::new()));
                }
                for &s in &slots {
                    // Free here: this agreement held the words it contributed.
                    debug_assert!(self.free[s / 64] & (1 << (s % 64)) != 0);
                    self.free[s / 64] &= !(1u64 << (s % 64));
                }
                return Ok(Step::Agreed(slots.into_iter().map(context_of).collect()));
            }
            if a.phase == Phase::Main {
                // Every member gave its whole main mask: truly nothing in common.
                self.unregister(a);
                return Err(AgreementError::Exhausted { slots: SLOTS });
            }
        }
        if a.phase == Phase::Eager {
            a.phase = Phase::Main;
            if a.member {
                self.pending.insert((a.key, a.ticket));
                a.registered = true;
            }
        }
        Ok(Step::Round(self.contribution(a)))
    }

    /// `want` ids for a communicator whose parent has this process alone (a dup of
    /// `MPI_COMM_SELF`): no collective, taken at once from the words no round holds now
    /// (the local words first, which no round ever uses). `None` when every free id is in
    /// a held part: try again after the holders' rounds. Such a dup must not wait for other
    /// agreements: programs make them under locks of their own (MPICH's
    /// comm_create_group_threads dups `MPI_COMM_SELF` holding a mutex its other threads
    /// need before their next collective constructor).
    pub(crate) fn take_local(&mut self, want: usize) -> Option<Vec<ContextId>> {
        let mut words: Vec<usize> = (WORDS - LOCAL_WORDS..WORDS).collect();
        if !self.eager_in_use {
            words.extend(0..EAGER_WORDS);
        }
        if !self.main_in_use {
            words.extend(EAGER_WORDS..WORDS - LOCAL_WORDS);
        }
        let mut slots = Vec::with_capacity(want);
        'words: for w in words {
            let mut bits = self.free[w];
            while bits != 0 {
                let bit = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                slots.push(w * 64 + bit);
                if slots.len() == want {
                    break 'words;
                }
            }
        }
        if slots.len() < want {
            return None;
        }
        for &s in &slots {
            self.free[s / 64] &= !(1u64 << (s % 64));
        }
        Some(slots.into_iter().map(context_of).collect())
    }

    /// No id is free at all (for a local agreement that found none: an error rather than
    /// a wait).
    pub(crate) fn all_used(&self) -> bool {
        self.free.iter().all(|&w| w == 0)
    }

    /// Give up `a` (its round failed): release what it holds.
    pub(crate) fn abandon(&mut self, a: &mut Agreement) {
        self.let_go(a);
        self.unregister(a);
    }

    /// Give `context` back (its communicator is gone).
    pub(crate) fn release(&mut self, context: ContextId) {
        if let Some(s) = slot_of(context) {
            debug_assert!(
                self.free[s / 64] & (1 << (s % 64)) == 0,
                "context {context} released twice"
            );
            self.free[s / 64] |= 1u64 << (s % 64);
        }
    }

    /// Ids in use on this process.
    #[cfg(test)]
    fn in_use(&self) -> usize {
        self.free.iter().map(|w| w.count_zeros() as usize).sum()
    }
}

/// The ownership of one agreed context id: gives it back when dropped (with the
/// communicator that holds it).
pub(crate) struct Lease {
    ids: Rc<RefCell<ContextIds>>,
    context: ContextId,
}

impl Lease {
    /// Own `context` of `ids`.
    pub(crate) fn new(ids: Rc<RefCell<ContextIds>>, context: ContextId) -> Self {
        Self { ids, context }
    }

    /// The leased id.
    pub(crate) fn context(&self) -> ContextId {
        self.context
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Borrowed only inside `begin`/`on_reduced`, which drop no communicator.
        match self.ids.try_borrow_mut() {
            Ok(mut ids) => ids.release(self.context),
            Err(_) => tracing::warn!(
                context = self.context,
                "a context id could not be given back (its table was busy): it stays used"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Run one agreement over `n` single-threaded processes in lockstep.
    fn agree_all(
        procs: &mut [ContextIds],
        key: u64,
        want: usize,
        members: &[bool],
    ) -> Vec<Vec<ContextId>> {
        let mut ag: Vec<Agreement> = Vec::new();
        let mut rounds: Vec<Vec<u64>> = Vec::new();
        for (p, &m) in procs.iter_mut().zip(members) {
            let (a, r) = p.begin(key, want, m);
            ag.push(a);
            rounds.push(r);
        }
        loop {
            let and = rounds.iter().skip(1).fold(rounds[0].clone(), |acc, r| {
                acc.iter().zip(r).map(|(x, y)| x & y).collect()
            });
            let mut done = Vec::new();
            for (i, p) in procs.iter_mut().enumerate() {
                match p.on_reduced(&mut ag[i], &and).unwrap() {
                    Step::Round(r) => rounds[i] = r,
                    Step::Agreed(ids) => done.push(ids),
                }
            }
            if done.len() == procs.len() {
                return done;
            }
            assert!(
                done.is_empty(),
                "members disagree on the end of the agreement"
            );
        }
    }

    #[test]
    fn one_at_a_time_takes_one_round_and_the_lowest_common_id() {
        let mut procs = [ContextIds::default(), ContextIds::default()];
        // Process 1 already uses slot 0.
        procs[1].free[0] &= !1;
        let ids = agree_all(&mut procs, 7, 1, &[true, true]);
        assert_eq!(ids, vec![vec![context_of(1)], vec![context_of(1)]]);
        assert_eq!(context_of(1), 4);
    }

    #[test]
    fn non_members_take_nothing_and_released_ids_come_back() {
        let mut procs = vec![
            ContextIds::default(),
            ContextIds::default(),
            ContextIds::default(),
        ];
        let ids = agree_all(&mut procs, 0, 2, &[true, false, true]);
        assert_eq!(ids[1], Vec::<ContextId>::new());
        assert_eq!(ids[0], vec![2, 4]);
        assert_eq!(procs[1].in_use(), 0);
        assert_eq!(procs[0].in_use(), 2);
        procs[0].release(2);
        procs[2].release(2);
        let again = agree_all(&mut procs, 0, 1, &[true, true, true]);
        assert_eq!(again[0], vec![2]);
    }

    #[test]
    fn past_the_eager_words_the_main_mask_is_used() {
        let mut procs = [ContextIds::default(), ContextIds::default()];
        for p in &mut procs {
            for w in 0..EAGER_WORDS {
                p.free[w] = 0;
            }
        }
        let ids = agree_all(&mut procs, 0, 1, &[true, true]);
        assert_eq!(ids[0], vec![context_of(EAGER_WORDS * 64)]);
    }

    #[test]
    fn exhaustion_is_an_error_on_every_member() {
        let mut procs = [ContextIds::default(), ContextIds::default()];
        procs[0].free = [0xAAAA_AAAA_AAAA_AAAA; WORDS];
        procs[1].free = [0x5555_5555_5555_5555; WORDS];
        let (mut a0, r0) = procs[0].begin(0, 1, true);
        let (mut a1, r1) = procs[1].begin(0, 1, true);
        let and: Vec<u64> = r0.iter().zip(&r1).map(|(x, y)| x & y).collect();
        let Step::Round(r0) = procs[0].on_reduced(&mut a0, &and).unwrap() else {
            panic!()
        };
        let Step::Round(r1) = procs[1].on_reduced(&mut a1, &and).unwrap() else {
            panic!()
        };
        let and: Vec<u64> = r0.iter().zip(&r1).map(|(x, y)| x & y).collect();
        for (p, a) in procs.iter_mut().zip([&mut a0, &mut a1]) {
            assert_eq!(
                p.on_reduced(a, &and),
                Err(AgreementError::Exhausted { slots: SLOTS })
            );
            assert!(p.pending.is_empty() && !p.main_in_use && !p.eager_in_use);
        }
    }

    #[test]
    fn a_malformed_round_is_refused_and_releases_the_mask() {
        let mut p = ContextIds::default();
        let (mut a, r) = p.begin(0, 1, true);
        assert_eq!(r.len(), 1 + EAGER_WORDS);
        assert!(p.eager_in_use);
        let err = p.on_reduced(&mut a, &[1; 5]).unwrap_err();
        assert_eq!(
            err,
            AgreementError::BadRound {
                got: 5,
                want: 1 + EAGER_WORDS
            }
        );
        assert!(!p.eager_in_use);
    }

    #[test]
    fn a_local_agreement_never_takes_what_a_round_holds() {
        let mut p = ContextIds::default();
        // A round holds the eager words; the main ones are held too.
        let (mut a, eager) = p.begin(1, 1, true);
        p.main_in_use = true;
        let local = p.take_local(1).unwrap();
        assert_eq!(local, vec![context_of((WORDS - LOCAL_WORDS) * 64)]);
        // The round's result may pick any bit it contributed: still free.
        assert_eq!(
            p.on_reduced(&mut a, &eager).unwrap(),
            Step::Agreed(vec![context_of(0)])
        );
        p.main_in_use = false;
        // Local words used up: a local agreement takes from the parts nobody holds.
        for w in WORDS - LOCAL_WORDS..WORDS {
            p.free[w] = 0;
        }
        assert_eq!(p.take_local(1).unwrap(), vec![context_of(1)]);
        let (_held, _) = p.begin(2, 1, true);
        p.main_in_use = true;
        assert_eq!(p.take_local(1), None, "everything free is held");
        assert!(!p.all_used());
    }

    #[test]
    fn bounds_name_what_was_wrong() {
        let e = bounded(
            "intercomm_create: remote group size",
            1 << 33,
            4,
            "the job's size",
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("8589934592") && msg.contains("at most 4"),
            "{msg}"
        );
        assert_eq!(bounded("x", 4, 4, "y"), Ok(4));
        assert!(check_ranks("x", &[0, 3, 1], 4).is_ok());
        assert!(matches!(
            check_ranks("x", &[0, 4], 4),
            Err(AgreementError::BadRank { rank: 4, .. })
        ));
        assert!(matches!(
            check_ranks("x", &[2, 2], 4),
            Err(AgreementError::BadRank {
                why: "a duplicate",
                ..
            })
        ));
    }

    #[test]
    fn slots_and_contexts_correspond() {
        assert_eq!(slot_of(context_of(0)), Some(0));
        assert_eq!(slot_of(context_of(SLOTS - 1)), Some(SLOTS - 1));
        assert_eq!(context_of(SLOTS - 1) + 1, LAST_CONTEXT);
        assert_eq!(slot_of(3), None);
        assert_eq!(slot_of(0), None);
        assert_eq!(slot_of(LAST_CONTEXT + 1), None);
        const { assert!(LAST_CONTEXT < crate::idup::NB_CONTEXT_BASE) };
        const { assert!(LAST_CONTEXT < crate::intercomm::BOOTSTRAP_BASE) };
    }

    // ---- simulated processes and threads ----

    /// Per agreement, per round: (process, words) contributed so far.
    type Contributions = Vec<Vec<Vec<(usize, Vec<u64>)>>>;

    /// One agreement of the simulated job: its parent's members, its key, ids wanted, and
    /// which members take ids.
    #[derive(Clone, Debug)]
    struct Spec {
        /// The parent's key (distinct per agreement, in no relation to the program order).
        key: u64,
        members: Vec<usize>,
        takes: Vec<bool>,
        want: usize,
    }

    #[derive(Debug)]
    enum Th {
        /// About to start the program's next agreement.
        Idle,
        /// Contributed to round `round` of the agreement, waiting for its result.
        Waiting { spec: usize, round: usize },
    }

    /// A valid program: agreements in a global order; each process gives each of its
    /// agreements to one of its threads, which runs them in that order (so no agreement
    /// waits on another in a cycle: the lowest unfinished one is at the head of each of its
    /// members' threads). Events run in an order drawn by `choices`. Returns the ids each
    /// (process, agreement) got.
    fn simulate(
        procs: usize,
        specs: &[Spec],
        threads_of: &[Vec<usize>],
        choices: &[u32],
        free_after: bool,
    ) -> Vec<Vec<Option<Vec<ContextId>>>> {
        let mut ids: Vec<ContextIds> = (0..procs).map(|_| ContextIds::default()).collect();
        // program[p][t]: agreements of process p's thread t, in order.
        let nthreads = threads_of.iter().flatten().max().map_or(1, |m| m + 1);
        let mut program: Vec<Vec<std::collections::VecDeque<usize>>> =
            vec![vec![Default::default(); nthreads]; procs];
        for (k, s) in specs.iter().enumerate() {
            for (j, &p) in s.members.iter().enumerate() {
                program[p][threads_of[k][j] % nthreads].push_back(k);
            }
        }
        let mut state: Vec<Vec<Th>> = (0..procs)
            .map(|_| (0..nthreads).map(|_| Th::Idle).collect())
            .collect();
        let mut agreements: Vec<Vec<Option<Agreement>>> = (0..procs)
            .map(|_| (0..specs.len()).map(|_| None).collect())
            .collect();
        // contributions[k][round]: (process, words) so far.
        let mut contrib: Contributions = vec![Vec::new(); specs.len()];
        let mut got: Vec<Vec<Option<Vec<ContextId>>>> = vec![vec![None; specs.len()]; procs];
        // Live ids per process, with their agreement.
        let mut live: Vec<std::collections::HashMap<ContextId, usize>> =
            vec![Default::default(); procs];
        // A random scheduler seeded by `choices`: every enabled thread runs again soon. A
        // cyclic pick of a few positions could starve one thread forever while the others
        // retry their rounds, which neither the OS nor the library's FIFO lock does.
        let seed = choices
            .iter()
            .fold(0u64, |h, &c| rmca_framework::rng::mix64(h ^ u64::from(c)));
        let mut rng = rmca_framework::rng::SplitMix64::new(seed);
        let mut steps = 0usize;
        loop {
            steps += 1;
            assert!(steps < 200_000, "no progress: livelock or deadlock");
            // Enabled events: (process, thread).
            let mut enabled = Vec::new();
            for p in 0..procs {
                for t in 0..nthreads {
                    match state[p][t] {
                        Th::Idle if !program[p][t].is_empty() => enabled.push((p, t)),
                        Th::Waiting { spec, round } => {
                            let full = contrib[spec].get(round).map_or(0, Vec::len);
                            if full == specs[spec].members.len() {
                                enabled.push((p, t));
                            }
                        }
                        Th::Idle => {}
                    }
                }
            }
            if enabled.is_empty() {
                let unfinished = program.iter().flatten().any(|q| !q.is_empty())
                    || state
                        .iter()
                        .flatten()
                        .any(|s| matches!(s, Th::Waiting { .. }));
                assert!(!unfinished, "deadlock");
                return got;
            }
            let (p, t) = enabled[rng.below(enabled.len() as u64) as usize];
            let push = |contrib: &mut Contributions, k: usize, round: usize, w: Vec<u64>| {
                if contrib[k].len() <= round {
                    contrib[k].resize(round + 1, Vec::new());
                }
                contrib[k][round].push((p, w));
            };
            match state[p][t] {
                Th::Idle => {
                    let k = program[p][t].pop_front().unwrap();
                    let j = specs[k].members.iter().position(|&m| m == p).unwrap();
                    let (a, w) = ids[p].begin(specs[k].key, specs[k].want, specs[k].takes[j]);
                    agreements[p][k] = Some(a);
                    push(&mut contrib, k, 0, w);
                    state[p][t] = Th::Waiting { spec: k, round: 0 };
                }
                Th::Waiting { spec: k, round } => {
                    let all = &contrib[k][round];
                    let mut and = all[0].1.clone();
                    for (_, w) in &all[1..] {
                        assert_eq!(w.len(), and.len(), "members in different phases");
                        for (x, y) in and.iter_mut().zip(w) {
                            *x &= y;
                        }
                    }
                    let a = agreements[p][k].as_mut().unwrap();
                    match ids[p].on_reduced(a, &and).unwrap() {
                        Step::Round(w) => {
                            push(&mut contrib, k, round + 1, w);
                            state[p][t] = Th::Waiting {
                                spec: k,
                                round: round + 1,
                            };
                        }
                        Step::Agreed(got_ids) => {
                            for &id in &got_ids {
                                if let Some(other) = live[p].insert(id, k) {
                                    panic!("process {p}: context {id} given to agreements {other} and {k}");
                                }
                            }
                            // Freed at once or kept: both orders of reuse are exercised.
                            if free_after && k % 2 == 0 {
                                for &id in &got_ids {
                                    live[p].remove(&id);
                                    ids[p].release(id);
                                }
                            }
                            got[p][k] = Some(got_ids);
                            state[p][t] = Th::Idle;
                        }
                    }
                }
            }
        }
    }

    fn arb_job() -> impl Strategy<Value = (usize, Vec<Spec>, Vec<Vec<usize>>, Vec<u32>, bool)> {
        (2usize..5).prop_flat_map(|procs| {
            let spec = (
                proptest::collection::vec(any::<bool>(), procs),
                proptest::collection::vec(any::<bool>(), procs),
                1usize..3,
            )
                .prop_map(move |(inn, takes, want)| {
                    let mut members: Vec<usize> = (0..procs).filter(|&p| inn[p]).collect();
                    if members.is_empty() {
                        members.push(0);
                    }
                    let takes = members.iter().map(|&p| takes[p]).collect();
                    Spec {
                        key: 0,
                        members,
                        takes,
                        want,
                    }
                });
            (
                Just(procs),
                (proptest::collection::vec(spec, 1..8), any::<u64>()).prop_map(
                    |(mut specs, salt)| {
                        // Distinct keys in an order unrelated to the program's.
                        for (k, s) in specs.iter_mut().enumerate() {
                            s.key = k as u64 ^ salt;
                        }
                        specs
                    },
                ),
                proptest::collection::vec(proptest::collection::vec(0usize..3, procs), 8),
                proptest::collection::vec(any::<u32>(), 1..64),
                any::<bool>(),
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Any interleaving of any valid program: every agreement finishes (no deadlock, no
        /// livelock within the step bound), its members that take ids get the same ones,
        /// and no process ever holds one id for two live communicators.
        #[test]
        fn interleaved_agreements_are_safe_and_finish(
            (procs, specs, threads, choices, free_after) in arb_job()
        ) {
            let got = simulate(procs, &specs, &threads, &choices, free_after);
            for (k, s) in specs.iter().enumerate() {
                let mut agreed: Option<&Vec<ContextId>> = None;
                for (j, &p) in s.members.iter().enumerate() {
                    let ids = got[p][k].as_ref().expect("finished");
                    if s.takes[j] {
                        prop_assert_eq!(ids.len(), s.want);
                        if let Some(a) = agreed {
                            prop_assert_eq!(a, ids);
                        }
                        agreed = Some(ids);
                    } else {
                        prop_assert!(ids.is_empty());
                    }
                }
            }
        }
    }

    /// MPICH's deadlock picture: process 0 runs dup(C2) then dup(C0) on thread 0 and dup(C1)
    /// on thread 1; process 1 runs dup(C0) on thread 0 and dup(C2) then dup(C1) on thread 1;
    /// C2 has the highest key. Every order of events finishes.
    #[test]
    fn the_crossed_threads_of_mpichs_comment_finish() {
        let dup = |key| Spec {
            key,
            members: vec![0, 1],
            takes: vec![true, true],
            want: 1,
        };
        // In program order: C2, C0, C1.
        let specs = vec![dup(2), dup(0), dup(1)];
        // threads[k][j]: the thread of process j running agreement k.
        let threads = vec![vec![0, 1], vec![0, 0], vec![1, 1]];
        for seed in 0..200u32 {
            let choices: Vec<u32> = (0..32)
                .map(|i| seed.wrapping_mul(2_654_435_761).rotate_left(i))
                .collect();
            simulate(2, &specs, &threads, &choices, false);
        }
    }
}
