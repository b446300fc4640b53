//! Intercommunicators (MPI-4.1 §7.6) and communicators made from a group by its members
//! alone (`MPI_Comm_create_group`, `MPI_Comm_create_from_group`).
//!
//! An intercommunicator is a [`Communicator`] whose rank space (`group`) is the REMOTE group:
//! point-to-point calls translate a destination through it and a received message's world
//! rank back through it exactly as on an intra-communicator, so the per-message paths need
//! no test of the communicator's kind. Its local side ([`InterPart::local`]) is an
//! intra-communicator of the local group with a context of its own; intercommunicator
//! collectives run as local collectives on it plus messages between the two groups on the
//! intercommunicator's collective context (leader = local rank 0 of each group).
//!
//! Context ids: an intercommunicator takes two, agreed on by both groups (`crate::context_id`:
//! each round ANDs the masks within each group, the leaders swap the results): the first
//! for its own traffic, the second for its local side. Everything a leader reads from the
//! other group (a group, a table, a round) is received into room for what the call can
//! take and checked before use: a malformed or foreign message is a typed error
//! ([`AgreementError`]) on every process of the group, never an allocation of a size the
//! peer chose.

use rmca_framework::btl::CommPattern;
use rmca_framework::pml::ContextId;
use rmca_framework::rank::Rank;

use crate::coll::Op;
use crate::comm::{CommInner, Communicator};
use crate::context_id::{bounded, check_ranks, AgreementError, Lease};
use crate::group::{Comparison, Group};
use crate::{Error, Result, Src};

/// Context-id slots reserved for the agreement step of communicators made by a group's
/// members alone (no parent communicator to agree on). Ordinary ids stay below them.
const BOOTSTRAP_SLOTS: u32 = 4096;
/// The first reserved context id (even: point-to-point; +1 collectives).
pub(crate) const BOOTSTRAP_BASE: ContextId = ContextId::MAX - 2 * BOOTSTRAP_SLOTS - 1;

/// The local side of an intercommunicator.
pub(crate) struct InterPart {
    /// The local group as an intra-communicator (a context of its own).
    pub(crate) local: Communicator,
}

/// The root argument of a rooted intercommunicator collective (`MPI_Bcast`, `MPI_Reduce`,
/// `MPI_Gather`, `MPI_Scatter` on an intercommunicator).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterRoot {
    /// This process is the root (`MPI_ROOT`): it gives or takes the data of the other group.
    Root,
    /// Another process of this group is the root (`MPI_PROC_NULL`): nothing to do.
    Null,
    /// The root is this rank of the remote group.
    Remote(usize),
}

// Tags of the traffic between the groups, on the intercommunicator's collective context
// (intra-communicator collectives are refused there, so nothing else uses it).
const TAG_SWAP: i32 = 1;
const TAG_BARRIER: i32 = 2;
const TAG_ROOTED: i32 = 3;
const TAG_ALLTOALL: i32 = 4;

fn kind_error(what: &str) -> Error {
    Error::CommKind(format!(
        "{what} is defined on intercommunicators only, and this is an intra-communicator"
    ))
}

/// FNV-1a of `bytes`, continuing from `h`.
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The first tag of the constructors' messages between leaders on the peer communicator's
/// collective context: above the blocking collectives' tags, below partitioned
/// communication's band (`crate::raw::PARTITIONED_TAG_BASE`) and the non-blocking
/// collectives'.
const CTOR_TAG_BASE: i32 = 1 << 28;

/// The tag on the peer's collective context of `MPI_Intercomm_create`'s `tag`.
fn ctor_tag(tag: i32) -> i32 {
    CTOR_TAG_BASE | (tag & (CTOR_TAG_BASE - 1))
}

/// A receive of at most `max` words refused as too long becomes the typed error naming it.
fn refused_length(e: Error, what: &'static str, max: usize) -> Error {
    use rmca_framework::pml::StatusError;
    match e {
        Error::Status {
            error: StatusError::Truncated { message_len, .. },
            ..
        } => AgreementError::BadLength {
            what,
            got: message_len as u64,
            max: (max * 8) as u64,
            why: "bytes: what the call asked for",
        }
        .into(),
        e => e,
    }
}

/// The leader's part of `MPI_Intercomm_create`: swap (local context, group) with the remote
/// leader over `peer`'s collective context. `group` is `None` when this group refused the
/// call (bad or inconsistent arguments): the header then says so and nothing more is sent,
/// and the remote leader, told, fails its group too instead of waiting for this one.
///
/// In three steps, the same on both leaders whatever either finds, so neither leaves a
/// message behind or waits for one that never comes: headers `[accepted, context, size]`;
/// if both accepted, the groups; then each leader's verdict on what it received. The remote
/// group is received into room for the whole job (its length from the message, never from
/// a count the peer sent), then checked: 1 to `job` world ranks, each in range and once.
fn exchange_group(
    peer: &Communicator,
    remote_leader: usize,
    tag: i32,
    context: ContextId,
    group: Option<&[Rank]>,
    job: u64,
) -> Result<(u64, Vec<Rank>)> {
    let what = "intercomm_create: the remote group";
    let header = "intercomm_create: the remote leader's header";
    if remote_leader >= peer.size() {
        // Nobody to tell: the remote group cannot be reached from here.
        return Err(Error::BadRank {
            rank: remote_leader,
            size: peer.size(),
        });
    }
    let mine = [
        u64::from(group.is_some()),
        u64::from(context),
        group.map_or(0, |g| g.len() as u64),
    ];
    let mut head = [0u64; 3];
    let st = peer.sendrecv_bytes(
        (bytemuck::cast_slice(&mine), remote_leader, tag),
        (
            bytemuck::cast_slice_mut(&mut head),
            Src::Rank(remote_leader),
            tag,
        ),
        peer.coll_context(),
        CommPattern::Collective,
    );
    // A malformed header comes from a process not running this protocol: nothing keeps it
    // in step, so the error is returned at once.
    let st = st.map_err(|e| refused_length(e, header, 3))?;
    if st.bytes != 24 {
        return Err(AgreementError::BadLength {
            what: header,
            got: st.bytes as u64,
            max: 24,
            why: "bytes: the accepted flag, the remote context and group size, exactly",
        }
        .into());
    }
    let Some(group) = group else {
        return Err(Error::InvalidArgument(
            "intercomm_create: this group refused the call (the remote group was told)".into(),
        ));
    };
    if head[0] != 1 {
        return Err(Error::InvalidArgument(
            "intercomm_create: the remote group refused the call (a bad or inconsistent local_leader or tag there; its processes' errors name it)".into(),
        ));
    }
    let mut remote = vec![0 as Rank; job as usize];
    let got = peer.sendrecv_bytes(
        (bytemuck::cast_slice(group), remote_leader, tag),
        (
            bytemuck::cast_slice_mut(&mut remote),
            Src::Rank(remote_leader),
            tag,
        ),
        peer.coll_context(),
        CommPattern::Collective,
    );
    let checked = got
        .map_err(|e| refused_length(e, what, (job as usize).div_ceil(2)))
        .and_then(|st| {
            let n = st.bytes / std::mem::size_of::<Rank>();
            if n == 0 || head[2] != n as u64 {
                return Err(AgreementError::BadLength {
                    what,
                    got: head[2],
                    max: job,
                    why: "processes: the header's count must be the members sent, at least 1",
                }
                .into());
            }
            remote.truncate(n);
            let wide: Vec<u64> = remote.iter().map(|&w| u64::from(w)).collect();
            check_ranks(what, &wide, job)?;
            if head[1] > u64::from(ContextId::MAX) {
                return Err(AgreementError::BadLength {
                    what: "intercomm_create: the remote leader's context",
                    got: head[1],
                    max: u64::from(ContextId::MAX),
                    why: "a context id",
                }
                .into());
            }
            Ok((head[1], remote))
        });
    // The verdicts: a leader that refused the other's group makes both groups fail.
    let verdict = swap_words(
        peer,
        remote_leader,
        tag,
        peer.coll_context(),
        &[u64::from(checked.is_ok())],
    );
    let got = checked?;
    match verdict?[..] {
        [1] => Ok(got),
        _ => Err(Error::InvalidArgument(
            "intercomm_create: the remote leader refused the group this one sent (its error names why)".into(),
        )),
    }
}

/// The leader's part of a constructor's agreement round between two groups: swap `words`
/// with the remote leader over `peer` on `context`; exactly as many come back.
fn swap_words(
    peer: &Communicator,
    remote_leader: usize,
    tag: i32,
    context: ContextId,
    words: &[u64],
) -> Result<Vec<u64>> {
    let what = "intercomm_create: an agreement round";
    let mut theirs = vec![0u64; words.len()];
    let st = peer
        .sendrecv_bytes(
            (bytemuck::cast_slice(words), remote_leader, tag),
            (
                bytemuck::cast_slice_mut(&mut theirs),
                Src::Rank(remote_leader),
                tag,
            ),
            context,
            CommPattern::Collective,
        )
        .map_err(|e| refused_length(e, what, words.len()))?;
    if st.bytes != words.len() * 8 {
        return Err(AgreementError::BadLength {
            what,
            got: st.bytes as u64,
            max: (words.len() * 8) as u64,
            why: "bytes: one round's words, exactly",
        }
        .into());
    }
    Ok(theirs)
}

/// The `local_leader` and `tag` a group's processes passed to `intercomm_create`, as their
/// ranges over the group: one allreduce (maximum) of each value and of its complement
/// gives both ends, and all passed the same iff they meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CreateArgs {
    ll_min: u64,
    ll_max: u64,
    tag_min: u32,
    tag_max: u32,
}

impl CreateArgs {
    /// This process's contribution to the allreduce (maximum).
    fn words(local_leader: usize, tag: i32) -> [u64; 4] {
        let (ll, t) = (local_leader as u64, u64::from(tag as u32));
        [ll, !ll, t, !t]
    }

    /// The ranges from the allreduce's maxima.
    fn from_maxima(m: [u64; 4]) -> Self {
        Self {
            ll_min: !m[1],
            ll_max: m[0],
            tag_min: !m[3] as u32,
            tag_max: m[2] as u32,
        }
    }

    /// This process's error, if the group refuses the call: its own bad argument, else the
    /// group's disagreement (every process of the group gets one, as the ranges are the same
    /// on each).
    fn refusal(&self, local_leader: usize, tag: i32, size: usize) -> Option<Error> {
        if local_leader >= size {
            return Some(Error::BadRank {
                rank: local_leader,
                size,
            });
        }
        if tag < 0 {
            return Some(Error::BadTag(tag));
        }
        if self.ll_min != self.ll_max || self.tag_min != self.tag_max {
            let (a, b) = (self.tag_min as i32, self.tag_max as i32);
            return Some(Error::InvalidArgument(format!(
                "intercomm_create: the processes of the local group passed different arguments (local_leader from {} to {}, tag from {} to {}); each must pass the same",
                self.ll_min,
                self.ll_max,
                a.min(b),
                a.max(b)
            )));
        }
        None
    }

    /// Whether this process, in a group that refused, tells the remote leader (so the other
    /// group fails too instead of waiting for this one): the process at the lowest
    /// local_leader passed, if it named itself. `peer` and `remote_leader` are significant
    /// at the leader only (MPI-4.1 §7.6.2): a process that passed another leader, or none in
    /// range, may hold anything there, even a process of its own group. It needs a tag it
    /// could use too. At most one process of a group tells.
    fn tells_remote(&self, local_leader: usize, tag: i32, rank: usize) -> bool {
        local_leader as u64 == self.ll_min && local_leader == rank && tag >= 0
    }
}

impl Communicator {
    /// Is this an intercommunicator (`MPI_Comm_test_inter`)?
    #[inline]
    pub fn is_inter(&self) -> bool {
        self.inner.inter.is_some()
    }

    /// The local group of an intercommunicator as an intra-communicator of its own (`None`
    /// for an intra-communicator).
    pub fn local_comm(&self) -> Option<&Communicator> {
        self.inner.inter.as_ref().map(|i| &i.local)
    }

    fn local(&self, what: &str) -> Result<&Communicator> {
        self.local_comm().ok_or_else(|| kind_error(what))
    }

    /// Size of the local group: [`Communicator::size`] for an intra-communicator (on an
    /// intercommunicator, `size` is the remote group's, the ranks point-to-point addresses).
    pub fn local_size(&self) -> usize {
        self.local_comm().map_or(self.size(), Communicator::size)
    }

    /// Size of the remote group of an intercommunicator (`MPI_Comm_remote_size`).
    pub fn remote_size(&self) -> Option<usize> {
        self.is_inter().then(|| self.inner.group.len())
    }

    /// The remote group of an intercommunicator (`MPI_Comm_remote_group`).
    pub fn remote_group(&self) -> Option<Group> {
        let me = self.local_comm()?.world_rank(self.rank()).ok()?;
        Some(Group::from_world_ranks(self.inner.group.to_vec(), me))
    }

    /// Refuse an intra-communicator collective on an intercommunicator.
    #[inline]
    pub(crate) fn refuse_inter(&self, what: &str) -> Result<()> {
        if self.is_inter() {
            return Err(Error::CommKind(format!(
                "{what} is not available on an intercommunicator (its collectives are the inter_* methods and rmca::raw::inter_*; scan and exscan are not defined there)"
            )));
        }
        Ok(())
    }

    /// An intercommunicator from its local group's `local`, its process ranks, the remote
    /// group and the two agreed context ids (its own, its local side's).
    fn make_inter(
        &self,
        local: Box<[Rank]>,
        rank: usize,
        remote: Box<[Rank]>,
        mut leases: Vec<Lease>,
    ) -> Result<Communicator> {
        let (Some(local_lease), Some(lease)) = (leases.pop(), leases.pop()) else {
            return Err(Error::InvalidArgument(
                "internal: an intercommunicator needs two agreed context ids".into(),
            ));
        };
        let shared = self.inner.shared.clone();
        let local = Communicator::new(
            CommInner::intra(shared.clone(), local_lease.context(), local, rank)
                .leased(local_lease),
        );
        Ok(Communicator::new(
            CommInner::intra(shared, lease.context(), remote, rank)
                .with_local(local)
                .leased(lease),
        ))
    }

    /// Processes of the job (the bound of every group a peer describes).
    fn job_size(&self) -> Result<u64> {
        self.shared().with(|rt| Ok(u64::from(rt.job.size)))
    }

    /// An intercommunicator between this communicator's processes (the local group) and
    /// those of another, disjoint group (`MPI_Intercomm_create`). Collective over both
    /// groups: `local_leader` (a rank of `self`) and the other group's leader exchange the
    /// groups over `peer` (where the other leader is `remote_leader`) with `tag`. The
    /// leaders' messages travel on `peer`'s collective context (in a band of tags no
    /// collective uses), so no receive or probe of the program on `peer` can take them,
    /// and everything read from the other leader is checked before it is used.
    ///
    /// Every process of a group must pass the same `local_leader` and `tag`: the group
    /// agrees on them first, and a bad or inconsistent one is an error on all of its
    /// processes and, when a process named itself the leader, on the other group's too
    /// (told by it, rather than left waiting for this group). A group with no process that
    /// named itself (every one passed a `local_leader` out of range), a leader's negative
    /// tag, or a `remote_leader` outside `peer`, cannot reach the other group: MPI makes
    /// `peer` and `remote_leader` significant at the leader only.
    pub fn intercomm_create(
        &self,
        local_leader: usize,
        peer: &Communicator,
        remote_leader: usize,
        tag: i32,
    ) -> Result<Communicator> {
        self.refuse_inter("Communicator::intercomm_create (as the local communicator)")?;
        let job = self.job_size()?;
        // Every process of the group must pass the same local_leader and tag (MPI-4.1
        // §7.6.2): agreed first among the group, so a bad or inconsistent argument is an
        // error on every process, never one process returning while the rest wait.
        let mut agreed = [0u64; 4];
        self.allreduce(&CreateArgs::words(local_leader, tag), &mut agreed, Op::Max)?;
        let args = CreateArgs::from_maxima(agreed);
        if let Some(e) = args.refusal(local_leader, tag, self.size()) {
            if args.tells_remote(local_leader, tag, self.rank()) {
                let told = exchange_group(
                    peer,
                    remote_leader,
                    ctor_tag(tag),
                    self.inner.context,
                    None,
                    job,
                );
                if let Err(x) = told {
                    tracing::debug!(
                        "intercomm_create: telling the remote leader of the refusal: {x}"
                    );
                }
            }
            return Err(e);
        }
        let ctag = ctor_tag(tag);
        let leader = self.rank() == local_leader;
        // The leader reads the other group; every process gets it or the same error.
        let got = if leader {
            exchange_group(
                peer,
                remote_leader,
                ctag,
                self.inner.context,
                Some(&self.inner.group),
                job,
            )
        } else {
            Ok((0, Vec::new()))
        };
        let (remote_context, remote) = self.spread_from_leader(local_leader, got)?;
        if let Some(w) = remote.iter().find(|w| self.inner.group.contains(w)) {
            return Err(Error::InvalidArgument(format!(
                "intercomm_create: world rank {w} is in both groups (the groups must be disjoint)"
            )));
        }
        // Both groups agree on two ids; the key (the pair of local contexts) is the same in
        // both.
        let (a, b) = (u64::from(self.inner.context), remote_context);
        let key = (a.min(b) << 32) | a.max(b);
        let leases = self.agree_contexts(self.size() + remote.len(), key, 2, true, |words| {
            let mut and = vec![0u64; words.len()];
            self.allreduce(words, &mut and, Op::BitAnd)?;
            let got = if leader {
                swap_words(peer, remote_leader, ctag, peer.coll_context(), &and)
            } else {
                Ok(Vec::new())
            };
            let theirs = self.words_from_leader(local_leader, got, and.len())?;
            and.iter_mut().zip(&theirs).for_each(|(x, y)| *x &= y);
            Ok(and)
        })?;
        self.make_inter(self.inner.group.clone(), self.rank(), remote.into(), leases)
    }

    /// Hand the leader's `got` (the remote group's local context and members) to every
    /// process of this group: the value, or the same error on each.
    fn spread_from_leader(
        &self,
        leader: usize,
        got: Result<(u64, Vec<Rank>)>,
    ) -> Result<(u64, Vec<Rank>)> {
        let failed = got.is_err();
        // [failed, remote context, remote size]
        let mut head = match &got {
            Ok((ctx, g)) => [0, *ctx, g.len() as u64],
            Err(_) => [1, 0, 0],
        };
        self.bcast(&mut head, leader)?;
        if self.rank() == leader {
            let (ctx, mut g) = got?;
            self.bcast(&mut g, leader)?;
            return Ok((ctx, g));
        }
        debug_assert!(!failed);
        if head[0] != 0 {
            return Err(Error::InvalidArgument(
                "intercomm_create: the local leader's exchange with the remote leader failed (its error names why)".into(),
            ));
        }
        // Checked by the leader against the job's size already; bounded again here, as
        // every count that comes in a message is.
        let n = bounded(
            "intercomm_create: the remote group's size",
            head[2],
            self.job_size()?,
            "the job's processes",
        )?;
        let mut g = vec![0 as Rank; n];
        self.bcast(&mut g, leader)?;
        Ok((head[1], g))
    }

    /// Hand the leader's `got` (`len` words from the remote group) to every process of this
    /// group, or the same error on each.
    fn words_from_leader(
        &self,
        leader: usize,
        got: Result<Vec<u64>>,
        len: usize,
    ) -> Result<Vec<u64>> {
        let mut ok = [u64::from(got.is_ok())];
        self.bcast(&mut ok, leader)?;
        if self.rank() == leader {
            let mut w = got?;
            self.bcast(&mut w, leader)?;
            return Ok(w);
        }
        if ok[0] == 0 {
            return Err(Error::InvalidArgument(
                "a constructor's exchange between the groups failed at the local leader (its error names why)".into(),
            ));
        }
        let mut w = vec![0u64; len];
        self.bcast(&mut w, leader)?;
        Ok(w)
    }

    /// The leaders exchange `mine` (the leader's) over the intercommunicator and every
    /// process of the local group gets the remote leader's: at most `max` words (the
    /// receive has room for `max`; a longer message is refused, not allocated).
    fn leader_swap(&self, mine: &[u64], max: usize, what: &'static str) -> Result<Vec<u64>> {
        let local = self.local("leader exchange")?;
        let got = if local.rank() == 0 {
            let mut theirs = vec![0u64; max];
            self.sendrecv_bytes(
                (bytemuck::cast_slice(mine), 0, TAG_SWAP),
                (
                    bytemuck::cast_slice_mut(&mut theirs),
                    Src::Rank(0),
                    TAG_SWAP,
                ),
                self.coll_context(),
                CommPattern::Collective,
            )
            .map_err(|e| refused_length(e, what, max))
            .and_then(|st| {
                if st.bytes % 8 != 0 {
                    return Err(AgreementError::BadLength {
                        what,
                        got: st.bytes as u64,
                        max: (max * 8) as u64,
                        why: "bytes: not a whole number of 8-byte words",
                    }
                    .into());
                }
                theirs.truncate(st.bytes / 8);
                Ok(theirs)
            })
        } else {
            Ok(Vec::new())
        };
        // [ok, words]
        let mut head = match &got {
            Ok(w) => [1, w.len() as u64],
            Err(_) => [0, 0],
        };
        local.bcast(&mut head, 0)?;
        if local.rank() == 0 {
            let mut w = got?;
            local.bcast(&mut w, 0)?;
            return Ok(w);
        }
        if head[0] == 0 {
            return Err(Error::InvalidArgument(format!(
                "{what}: the local leader's exchange with the remote group failed (its error names why)"
            )));
        }
        let n = bounded(what, head[1], max as u64, "what the call asked for")?;
        let mut w = vec![0u64; n];
        local.bcast(&mut w, 0)?;
        Ok(w)
    }

    /// Settle a step between the groups: `mine` is this group's verdict on what it received
    /// (the same on each of its processes: they checked the same words). The leaders swap
    /// the verdicts, so a group that refused makes the other fail too, and both stay in
    /// step: neither goes on to a later round (a context agreement) waiting for a group
    /// that has returned.
    fn settle<T>(&self, mine: Result<T>, what: &'static str) -> Result<T> {
        let theirs = self.leader_swap(&[u64::from(mine.is_ok())], 1, what);
        let v = mine?;
        match theirs?[..] {
            [1] => Ok(v),
            _ => Err(Error::InvalidArgument(format!(
                "{what}: the remote group refused what this group sent (its processes' errors name why)"
            ))),
        }
    }

    /// Context ids agreed by both groups of this intercommunicator (`want` of them; none
    /// taken unless `member`).
    fn inter_contexts(&self, want: usize, member: bool) -> Result<Vec<Lease>> {
        let local = self.local("agreement")?;
        self.agree_contexts(
            local.size() + self.size(),
            u64::from(self.inner.context),
            want,
            member,
            |words| {
                let mut and = vec![0u64; words.len()];
                local.allreduce(words, &mut and, Op::BitAnd)?;
                let theirs = self.leader_swap(&and, and.len(), "context-id agreement round")?;
                if theirs.len() != and.len() {
                    return Err(crate::context_id::AgreementError::BadRound {
                        got: theirs.len(),
                        want: and.len(),
                    }
                    .into());
                }
                and.iter_mut().zip(&theirs).for_each(|(x, y)| *x &= y);
                Ok(and)
            },
        )
    }

    /// `dup` of an intercommunicator: the same groups, new contexts.
    pub(crate) fn inter_dup(&self) -> Result<Communicator> {
        let local = self.local("dup")?.clone();
        let leases = self.inter_contexts(2, true)?;
        self.make_inter(
            local.inner.group.clone(),
            local.rank(),
            self.inner.group.clone(),
            leases,
        )
    }

    /// `split` of an intercommunicator: an intercommunicator between the processes of each
    /// group with the same color (`None` when the caller has no color, or when the other
    /// group has nobody of its color).
    pub(crate) fn inter_split(
        &self,
        color: crate::SplitColor,
        key: i32,
    ) -> Result<Option<Communicator>> {
        let local = self.local("split")?.clone();
        let mine = [color.word(), i64::from(key)];
        let mut all = vec![[0i64; 2]; local.size()];
        crate::coll::allgather_into(&local, &mine, bytemuck::cast_slice_mut(&mut all))?;
        let table: Vec<u64> = all.iter().flatten().map(|&v| v as u64).collect();
        // (color, key) of each remote process: exactly that many words.
        let what = "intercommunicator split: the remote group's colors";
        let theirs = self
            .leader_swap(&table, 2 * self.size(), what)
            .and_then(|theirs| {
                if theirs.len() != 2 * self.size() {
                    return Err(AgreementError::BadLength {
                        what,
                        got: theirs.len() as u64,
                        max: 2 * self.size() as u64,
                        why: "two words per process of the remote group, exactly",
                    }
                    .into());
                }
                Ok(theirs)
            });
        let theirs = self.settle(theirs, what)?;
        // Both groups saw both tables: an invalid colour on either side is refused by all.
        crate::split::refuse_invalid("local group's ", all.iter().map(|e| e[0]))?;
        crate::split::refuse_invalid(
            "remote group's ",
            theirs.chunks_exact(2).map(|e| e[0] as i64),
        )?;
        let color = match color {
            crate::SplitColor::Of(c) => Some(c),
            _ => None,
        };
        let lm = color.map(|c| crate::split::members_of(c, all.iter().map(|e| (e[0], e[1]))));
        let rm = color.map(|c| {
            crate::split::members_of(
                c,
                theirs.chunks_exact(2).map(|e| (e[0] as i64, e[1] as i64)),
            )
        });
        let member = rm.as_ref().is_some_and(|rm| !rm.is_empty());
        let leases = self.inter_contexts(2, member)?;
        let (Some(lm), Some(rm)) = (lm, rm) else {
            return Ok(None);
        };
        if !member {
            return Ok(None);
        }
        let rank = lm
            .iter()
            .position(|&r| r == local.rank())
            .expect("caller is a member of its color");
        let lg: Vec<Rank> = lm.iter().map(|&r| local.inner.group[r]).collect();
        let rg: Vec<Rank> = rm.iter().map(|&r| self.inner.group[r]).collect();
        self.make_inter(lg.into(), rank, rg.into(), leases)
            .map(Some)
    }

    /// `create` on an intercommunicator: each group passes a subgroup of its own; members get
    /// the intercommunicator between the two subgroups (`None` for the others, and for all
    /// when either subgroup is empty).
    pub(crate) fn inter_create(&self, group: &Group) -> Result<Option<Communicator>> {
        let local = self.local("create")?.clone();
        let members = group.world_ranks();
        // Every process of the local group must pass the same group: agreed among them (the
        // maxima of a hash and of its complement are equal everywhere iff the hashes are).
        let words: Vec<u8> = members.iter().flat_map(|w| w.to_le_bytes()).collect();
        let h = fnv(0xcbf2_9ce4_8422_2325, &words);
        let mut agreed = [0u64; 2];
        local.allreduce(&[h, !h], &mut agreed, Op::Max)?;
        let refusal = if agreed[0] != !agreed[1] {
            Some(Error::InvalidArgument(
                "Communicator::create on an intercommunicator: the processes of the local group passed different groups; each must pass the same".into(),
            ))
        } else {
            members
                .iter()
                .find(|w| !local.inner.group.contains(w))
                .map(|w| {
                    Error::InvalidArgument(format!(
                        "Communicator::create on an intercommunicator: world rank {w} of the group is not in the local group"
                    ))
                })
        };
        // [1, members...], or [0] for a group refused here: the remote group learns of the
        // refusal and fails too, rather than wait in the agreement below for this group.
        let mut table = vec![u64::from(refusal.is_none())];
        if refusal.is_none() {
            table.extend(members.iter().map(|&w| u64::from(w)));
        }
        let what = "intercommunicator create: the remote subgroup";
        let checked = self
            .leader_swap(&table, 1 + self.size(), what)
            .and_then(|theirs| {
                if let Some(e) = refusal {
                    return Err(e);
                }
                let Some((&1, theirs)) = theirs.split_first() else {
                    return Err(Error::InvalidArgument(format!(
                        "{what}: the remote group's processes refused the group they passed (inconsistent, or not a subgroup of their local group)"
                    )));
                };
                // A subgroup of the remote group, each process once.
                check_ranks(what, theirs, self.job_size()?)?;
                if let Some(&w) = theirs
                    .iter()
                    .find(|&&w| !self.inner.group.contains(&(w as Rank)))
                {
                    return Err(Error::InvalidArgument(format!(
                        "{what}: world rank {w} is not in the remote group"
                    )));
                }
                Ok(theirs.to_vec())
            });
        let theirs = self.settle(checked, what)?;
        let member = group.rank().is_some() && !theirs.is_empty();
        let leases = self.inter_contexts(2, member)?;
        let (Some(rank), true) = (group.rank(), member) else {
            return Ok(None);
        };
        let remote: Vec<Rank> = theirs.iter().map(|&w| w as Rank).collect();
        self.make_inter(members.into(), rank, remote.into(), leases)
            .map(Some)
    }

    /// `compare` where either side is an intercommunicator: unequal to an
    /// intra-communicator; else both groups compared.
    pub(crate) fn inter_compare(&self, other: &Communicator) -> Comparison {
        let (Some(a), Some(b)) = (self.local_comm(), other.local_comm()) else {
            return Comparison::Unequal;
        };
        if self.inner.context == other.inner.context {
            return Comparison::Identical;
        }
        let l = a.group().compare(&b.group());
        let r = self
            .remote_group()
            .zip(other.remote_group())
            .map_or(Comparison::Unequal, |(x, y)| x.compare(&y));
        use Comparison::*;
        match (l, r) {
            (Identical, Identical) => Congruent,
            (Identical | Similar, Identical | Similar) => Similar,
            _ => Unequal,
        }
    }

    /// An intra-communicator of both groups of an intercommunicator
    /// (`MPI_Intercomm_merge`): the group that passed `high = false` first; when both
    /// passed the same, the group whose leader has the lower world rank. Collective over
    /// both groups (every process of a group passes the same `high`).
    pub fn intercomm_merge(&self, high: bool) -> Result<Communicator> {
        let local = self.local("Communicator::intercomm_merge")?.clone();
        let what = "intercomm_merge: the remote group's high flag";
        let theirs =
            self.leader_swap(&[u64::from(high)], 1, what)
                .and_then(|theirs| match theirs[..] {
                    [h] => Ok(h != 0),
                    _ => Err(AgreementError::BadLength {
                        what,
                        got: theirs.len() as u64,
                        max: 1,
                        why: "one word, exactly",
                    }
                    .into()),
                });
        let remote_high = self.settle(theirs, what)?;
        let local_first = if high != remote_high {
            !high
        } else {
            local.inner.group[0] < self.inner.group[0]
        };
        let (first, second) = if local_first {
            (&local.inner.group, &self.inner.group)
        } else {
            (&self.inner.group, &local.inner.group)
        };
        let group: Vec<Rank> = first.iter().chain(second.iter()).copied().collect();
        let rank = if local_first {
            local.rank()
        } else {
            self.inner.group.len() + local.rank()
        };
        let lease = self.inter_contexts(1, true)?.pop().expect("one id agreed");
        Ok(Communicator::new(
            CommInner::intra(
                self.inner.shared.clone(),
                lease.context(),
                group.into(),
                rank,
            )
            .leased(lease),
        ))
    }

    /// A communicator of the members of `group` made by them alone
    /// (`MPI_Comm_create_group`, `MPI_Comm_create_from_group`): collective over the group's
    /// members only, which must all pass the same group and `tag`; the group must be a
    /// subset of `self` (any communicator of the job for `create_from_group`: pass the
    /// world), and the caller a member. Calls with different tags may run at the same time
    /// on overlapping groups.
    pub fn create_group(&self, group: &Group, tag: &str) -> Result<Communicator> {
        self.refuse_inter("Communicator::create_group")?;
        let members = group.world_ranks();
        if let Some(w) = members.iter().find(|w| !self.inner.group.contains(w)) {
            return Err(Error::InvalidArgument(format!(
                "create_group: world rank {w} of the group is not in this communicator"
            )));
        }
        let rank = group.rank().ok_or_else(|| {
            Error::InvalidArgument(
                "create_group: the calling process is not a member of the group (only members call it)".into(),
            )
        })?;
        let temp = self.bootstrap(members.into(), rank, &[tag.as_bytes()]);
        // The same on every member: the bootstrap context and the tag.
        let key = (u64::from(temp.inner.context) << 32)
            | (fnv(0xcbf2_9ce4_8422_2325, tag.as_bytes()) & 0xffff_ffff);
        let lease = self
            .agree_contexts(members.len(), key, 1, true, |words| {
                let mut and = vec![0u64; words.len()];
                temp.allreduce(words, &mut and, Op::BitAnd)?;
                Ok(and)
            })?
            .pop()
            .expect("one id agreed");
        Ok(Communicator::new(
            CommInner::intra(
                self.inner.shared.clone(),
                lease.context(),
                members.into(),
                rank,
            )
            .leased(lease),
        ))
    }

    /// A communicator of `group` (this process at `rank`) on one of the reserved bootstrap
    /// contexts, chosen by a hash of `self`'s context and `keys`: the agreement step of a
    /// communicator made without a parent collective.
    fn bootstrap(&self, group: Box<[Rank]>, rank: usize, keys: &[&[u8]]) -> Communicator {
        let mut h = fnv(0xcbf2_9ce4_8422_2325, &self.inner.context.to_le_bytes());
        for k in keys {
            h = fnv(h, k);
            h = fnv(h, &[0]);
        }
        let slot = (h % u64::from(BOOTSTRAP_SLOTS)) as ContextId;
        Communicator::new(CommInner::intra(
            self.inner.shared.clone(),
            BOOTSTRAP_BASE + 2 * slot,
            group,
            rank,
        ))
    }

    /// An intercommunicator between `local` and `remote`, two disjoint groups of this
    /// communicator's processes (pass the world), made by their members alone
    /// (`MPI_Intercomm_create_from_groups`): each process passes its group as `local`, the
    /// other as `remote`, the leaders' ranks in each, and the same `tag`.
    pub fn intercomm_from_groups(
        &self,
        local: &Group,
        local_leader: usize,
        remote: &Group,
        remote_leader: usize,
        tag: &str,
    ) -> Result<Communicator> {
        self.refuse_inter("Communicator::intercomm_from_groups")?;
        let rank = local.rank().ok_or_else(|| {
            Error::InvalidArgument(
                "intercomm_from_groups: the calling process is not in the local group".into(),
            )
        })?;
        let leader_world = *remote
            .world_ranks()
            .get(remote_leader)
            .ok_or(Error::BadRank {
                rank: remote_leader,
                size: remote.size(),
            })?;
        for w in local.world_ranks().iter().chain(remote.world_ranks()) {
            if !self.inner.group.contains(w) {
                return Err(Error::InvalidArgument(format!(
                    "intercomm_from_groups: world rank {w} is not in this communicator"
                )));
            }
        }
        let local_temp = self.bootstrap(local.world_ranks().into(), rank, &[tag.as_bytes()]);
        // The leaders talk through the whole communicator on the same bootstrap context
        // (its point-to-point half; the local steps use the collective half).
        let peer_rank = self
            .inner
            .group
            .iter()
            .position(|&w| w == leader_world)
            .expect("checked above");
        let peer = Communicator::new(CommInner::intra(
            self.inner.shared.clone(),
            local_temp.inner.context,
            self.inner.group.clone(),
            self.rank(),
        ));
        local_temp.intercomm_create(local_leader, &peer, peer_rank, 0)
    }

    // ---- intercommunicator collectives ----

    /// `barrier` on an intercommunicator: returns once every process of both groups
    /// entered it.
    pub fn inter_barrier(&self) -> Result<()> {
        let local = self.local("inter_barrier")?;
        local.barrier()?;
        if local.rank() == 0 {
            self.sendrecv_bytes(
                (&[], 0, TAG_BARRIER),
                (&mut [], Src::Rank(0), TAG_BARRIER),
                self.coll_context(),
                CommPattern::Collective,
            )?;
        }
        local.barrier()
    }

    fn check_remote(&self, r: usize) -> Result<()> {
        if r >= self.size() {
            return Err(Error::BadRank {
                rank: r,
                size: self.size(),
            });
        }
        Ok(())
    }

    /// Send `data` to rank `to` of the remote group on the intercommunicator's collective
    /// context: a building block of intercommunicator collectives written outside rmca
    /// (with [`Communicator::coll_recv_remote`] and [`Communicator::local_comm`]).
    pub fn coll_send_remote(&self, data: &[u8], to: usize) -> Result<()> {
        self.local("coll_send_remote")?;
        self.send_bytes(
            data,
            to,
            TAG_ROOTED,
            self.coll_context(),
            CommPattern::Collective,
        )
    }

    /// Receive into `buf` from rank `from` of the remote group (the other half of
    /// [`Communicator::coll_send_remote`]).
    pub fn coll_recv_remote(&self, buf: &mut [u8], from: usize) -> Result<()> {
        self.local("coll_recv_remote")?;
        self.recv_bytes(
            buf,
            Src::Rank(from),
            TAG_ROOTED,
            self.coll_context(),
            CommPattern::Collective,
        )
        .map(|_| ())
    }

    /// The local leaders (local rank 0) exchange `send` for the remote leader's `recv`;
    /// other processes do nothing.
    pub fn leader_exchange(&self, send: &[u8], recv: &mut [u8]) -> Result<()> {
        let local = self.local("leader_exchange")?;
        if local.rank() == 0 {
            self.sendrecv_bytes(
                (send, 0, TAG_SWAP),
                (recv, Src::Rank(0), TAG_SWAP),
                self.coll_context(),
                CommPattern::Collective,
            )?;
        }
        Ok(())
    }

    /// `bcast` on an intercommunicator: the root ([`InterRoot::Root`]) gives `buf` to every
    /// process of the remote group, which name it [`InterRoot::Remote`]; the root's group
    /// but the root passes [`InterRoot::Null`].
    pub fn inter_bcast(&self, buf: &mut [u8], root: InterRoot) -> Result<()> {
        let local = self.local("inter_bcast")?;
        match root {
            InterRoot::Null => Ok(()),
            InterRoot::Root => self.coll_send_remote(buf, 0),
            InterRoot::Remote(r) => {
                self.check_remote(r)?;
                if local.rank() == 0 {
                    self.coll_recv_remote(buf, r)?;
                }
                local.bcast(buf, 0)
            }
        }
    }

    /// `gather` on an intercommunicator: the root receives the remote group's blocks (in
    /// remote rank order) into `recv`; the remote group's processes send `send`.
    pub fn inter_gather(
        &self,
        send: &[u8],
        recv: Option<&mut [u8]>,
        root: InterRoot,
    ) -> Result<()> {
        self.local("inter_gather")?;
        match root {
            InterRoot::Null => Ok(()),
            InterRoot::Root => {
                let recv = recv.ok_or_else(|| {
                    Error::InvalidArgument("inter_gather: the root needs a receive buffer".into())
                })?;
                let n = self.size();
                let block = recv.len().checked_div(n).unwrap_or(0);
                for i in 0..n {
                    self.coll_recv_remote(&mut recv[i * block..(i + 1) * block], i)?;
                }
                Ok(())
            }
            InterRoot::Remote(r) => {
                self.check_remote(r)?;
                self.coll_send_remote(send, r)
            }
        }
    }

    /// `scatter` on an intercommunicator: the root sends block `i` of `send` to remote rank
    /// `i`; the remote group's processes receive theirs into `recv`.
    pub fn inter_scatter(
        &self,
        send: Option<&[u8]>,
        recv: &mut [u8],
        root: InterRoot,
    ) -> Result<()> {
        self.local("inter_scatter")?;
        match root {
            InterRoot::Null => Ok(()),
            InterRoot::Root => {
                let send = send.ok_or_else(|| {
                    Error::InvalidArgument("inter_scatter: the root needs a send buffer".into())
                })?;
                let n = self.size();
                let block = send.len().checked_div(n).unwrap_or(0);
                for i in 0..n {
                    self.coll_send_remote(&send[i * block..(i + 1) * block], i)?;
                }
                Ok(())
            }
            InterRoot::Remote(r) => {
                self.check_remote(r)?;
                self.coll_recv_remote(recv, r)
            }
        }
    }

    /// `allgather` on an intercommunicator: every process gets the remote group's blocks
    /// (`recv` holds remote-size blocks of the remote group's send length).
    pub fn inter_allgather(&self, send: &[u8], recv: &mut [u8]) -> Result<()> {
        // The blocks of the two groups may differ in length (each group's send matches the
        // other's receive): `recv` holds the remote group's blocks.
        let local = self.local("inter_allgather")?;
        let block = send.len();
        let mut mine = vec![
            0u8;
            if local.rank() == 0 {
                block * local.size()
            } else {
                0
            }
        ];
        local.gather(send, (local.rank() == 0).then_some(&mut mine[..]), 0)?;
        self.leader_exchange(&mine, recv)?;
        local.bcast(recv, 0)
    }

    /// `alltoall` on an intercommunicator: block `j` of `send` goes to remote rank `j`,
    /// block `j` of `recv` comes from it (both hold remote-size blocks; a send block is as
    /// long as the remote group's receive blocks, not necessarily as this one's).
    pub fn inter_alltoall(&self, send: &[u8], recv: &mut [u8]) -> Result<()> {
        self.local("inter_alltoall")?;
        let n = self.size();
        if n == 0 {
            return Ok(());
        }
        if !send.len().is_multiple_of(n) || !recv.len().is_multiple_of(n) {
            return Err(Error::InvalidArgument(format!(
                "inter_alltoall: send ({} B) and receive ({} B) buffers must each hold {n} equal blocks",
                send.len(),
                recv.len()
            )));
        }
        let (sb, rb) = (send.len() / n, recv.len() / n);
        let sregions: Vec<_> = (0..n).map(|j| j * sb..(j + 1) * sb).collect();
        let rregions: Vec<_> = (0..n).map(|j| j * rb..(j + 1) * rb).collect();
        self.inter_alltoallv(send, &sregions, recv, &rregions)
    }

    /// `alltoallv` on an intercommunicator, in bytes: `send[sregions[j]]` goes to remote rank
    /// `j` and `recv[rregions[j]]` comes from it (one region per remote rank; send regions
    /// may overlap, receive regions must not).
    pub fn inter_alltoallv(
        &self,
        send: &[u8],
        sregions: &[std::ops::Range<usize>],
        recv: &mut [u8],
        rregions: &[std::ops::Range<usize>],
    ) -> Result<()> {
        let local = self.local("inter_alltoallv")?;
        let n = self.size();
        let fits = |regions: &[std::ops::Range<usize>], len: usize| {
            regions.len() == n && regions.iter().all(|r| r.start <= r.end && r.end <= len)
        };
        if !fits(sregions, send.len()) || !fits(rregions, recv.len()) {
            return Err(Error::InvalidArgument(format!(
                "inter_alltoallv: {n} regions inside the send ({} B) and receive ({} B) buffers are needed",
                send.len(),
                recv.len()
            )));
        }
        let ctx = self.coll_context();
        let pattern = CommPattern::Collective;
        let sends = |c: &Communicator| -> Result<()> {
            for (j, r) in sregions.iter().enumerate() {
                c.send_bytes(&send[r.clone()], j, TAG_ALLTOALL, ctx, pattern)?;
            }
            Ok(())
        };
        // One group sends all its blocks in remote rank order while the other receives in
        // that order, then the other way round: no cycle of processes waiting on each other.
        if local.inner.group[0] < self.inner.group[0] {
            sends(self)?;
        }
        for (j, r) in rregions.iter().enumerate() {
            self.recv_bytes(
                &mut recv[r.clone()],
                Src::Rank(j),
                TAG_ALLTOALL,
                ctx,
                pattern,
            )?;
        }
        if local.inner.group[0] > self.inner.group[0] {
            sends(self)?;
        }
        Ok(())
    }
}

/// A split of an intra-communicator by the node its processes run on
/// (`MPI_Comm_split_type` with `MPI_COMM_TYPE_SHARED`).
impl Communicator {
    /// The processes of this communicator on the caller's node, ordered by `key` then rank
    /// (`MPI_COMM_TYPE_SHARED`). Collective.
    pub fn split_shared(&self, key: i32) -> Result<Communicator> {
        self.refuse_inter("Communicator::split_shared")?;
        let me = self.world_rank(self.rank())?;
        let node = self.shared().with(|rt| Ok(rt.job.node_of[me as usize]))?;
        Ok(self
            .split(Some(node), key)?
            .expect("a process with a color is in its part"))
    }

    /// [`Communicator::split_shared`] on either kind of communicator: on an
    /// intercommunicator each group splits by node, and the result is the intercommunicator
    /// between the caller's part and the remote group's processes on the same node (`None`
    /// when there are none; MPI-4.1 §7.4.2, as MPICH does it). Collective.
    pub fn split_node(&self, key: i32) -> Result<Option<Communicator>> {
        let local = self.local_comm().unwrap_or(self);
        let me = local.world_rank(local.rank())?;
        let node = self.shared().with(|rt| Ok(rt.job.node_of[me as usize]))?;
        self.split(Some(node), key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What every process of a group of `args.len()` gets from the agreement: the ranges
    /// (the allreduce's maxima) and, per process, its refusal and whether it tells.
    fn agree(args: &[(usize, i32)]) -> (CreateArgs, Vec<(Option<Error>, bool)>) {
        let mut m = [0u64; 4];
        for &(ll, t) in args {
            for (x, w) in m.iter_mut().zip(CreateArgs::words(ll, t)) {
                *x = (*x).max(w);
            }
        }
        let a = CreateArgs::from_maxima(m);
        let each = args
            .iter()
            .enumerate()
            .map(|(rank, &(ll, t))| {
                // As `intercomm_create` asks: only a process whose group refused tells.
                let e = a.refusal(ll, t, args.len());
                let tells = e.is_some() && a.tells_remote(ll, t, rank);
                (e, tells)
            })
            .collect();
        (a, each)
    }

    #[test]
    fn the_same_valid_arguments_pass_and_nobody_tells() {
        let (a, each) = agree(&[(1, 7), (1, 7), (1, 7)]);
        assert_eq!((a.ll_min, a.ll_max, a.tag_min, a.tag_max), (1, 1, 7, 7));
        assert!(each.iter().all(|(e, t)| e.is_none() && !t));
    }

    #[test]
    fn one_bad_local_leader_fails_the_group_and_the_leader_tells() {
        let (_, each) = agree(&[(0, 7), (5, 7), (0, 7)]);
        assert!(matches!(
            each[1].0,
            Some(Error::BadRank { rank: 5, size: 3 })
        ));
        assert!(matches!(each[0].0, Some(Error::InvalidArgument(_))));
        assert!(matches!(each[2].0, Some(Error::InvalidArgument(_))));
        assert_eq!(
            each.iter().map(|e| e.1).collect::<Vec<_>>(),
            [true, false, false]
        );
    }

    #[test]
    fn a_negative_tag_fails_the_group_and_a_leader_with_one_cannot_tell() {
        let (a, each) = agree(&[(0, 7), (0, -3)]);
        assert_eq!((a.tag_min as i32, a.tag_max as i32), (7, -3));
        assert!(matches!(each[1].0, Some(Error::BadTag(-3))));
        assert!(each[0].1, "the leader's own tag is valid: it tells");
        let (_, each) = agree(&[(0, -3), (0, -3)]);
        assert!(each
            .iter()
            .all(|(e, t)| matches!(e, Some(Error::BadTag(-3))) && !t));
    }

    #[test]
    fn no_process_naming_itself_means_nobody_tells() {
        // Every local_leader out of range: no leader, peer/remote_leader not significant.
        let (_, each) = agree(&[(2, 7), (2, 7)]);
        assert!(each.iter().all(|(e, t)| e.is_some() && !t));
        // Rank 1 names rank 0, rank 0 names rank 1: the lowest (0) did not name itself.
        let (_, each) = agree(&[(1, 7), (0, 7)]);
        assert!(each.iter().all(|(e, t)| e.is_some() && !t));
    }

    proptest! {
        /// Whatever a group passes: either every process proceeds or every one gets an
        /// error, all proceed exactly when all passed the same valid arguments, and at most
        /// one process tells the remote group (the one at the lowest local_leader, which
        /// named itself).
        #[test]
        fn the_group_refuses_together_and_at_most_one_tells(
            args in proptest::collection::vec((0usize..5, -2i32..3), 1..6)
        ) {
            let n = args.len();
            let (a, each) = agree(&args);
            let refused = each.iter().filter(|e| e.0.is_some()).count();
            prop_assert!(refused == 0 || refused == n);
            let same = args.iter().all(|x| *x == args[0]);
            let valid = args[0].0 < n && args[0].1 >= 0;
            prop_assert_eq!(refused == 0, same && valid);
            let tellers: Vec<usize> = (0..n).filter(|&r| each[r].1).collect();
            prop_assert!(tellers.len() <= 1);
            if refused == 0 {
                prop_assert!(tellers.is_empty());
            }
            for &r in &tellers {
                prop_assert_eq!(r as u64, a.ll_min);
                prop_assert_eq!(args[r].0, r);
            }
        }
    }
}
