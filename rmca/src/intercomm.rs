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
//! Context ids: an intercommunicator takes two consecutive pairs, agreed on by both groups
//! (the largest lowest-free id of all their processes): the first for its own traffic, the
//! second for its local side.

use rmca_framework::btl::CommPattern;
use rmca_framework::pml::ContextId;
use rmca_framework::rank::Rank;

use crate::coll::Op;
use crate::comm::{CommInner, Communicator};
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

fn is_identity(group: &[Rank]) -> bool {
    group.iter().enumerate().all(|(i, &w)| w as usize == i)
}

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
    /// group and the agreed lowest free context id.
    fn make_inter(
        &self,
        local: Box<[Rank]>,
        rank: usize,
        remote: Box<[Rank]>,
        agreed: u64,
    ) -> Result<Communicator> {
        let context = self.claim_context(agreed)?;
        let local_context = self.claim_context(agreed + 2)?;
        let shared = self.inner.shared.clone();
        let local = Communicator::new(CommInner {
            rank_index: Default::default(),
            shared: shared.clone(),
            context: local_context,
            identity: is_identity(&local),
            group: local,
            rank,
            coll: Default::default(),
            inter: None,
        });
        Ok(Communicator::new(CommInner {
            rank_index: Default::default(),
            shared,
            context,
            identity: is_identity(&remote),
            group: remote,
            rank,
            coll: Default::default(),
            inter: Some(Box::new(InterPart { local })),
        }))
    }

    /// An intercommunicator between this communicator's processes (the local group) and
    /// those of another, disjoint group (`MPI_Intercomm_create`). Collective over both
    /// groups: `local_leader` (a rank of `self`) and the other group's leader exchange the
    /// groups over `peer` (where the other leader is `remote_leader`) with `tag`.
    pub fn intercomm_create(
        &self,
        local_leader: usize,
        peer: &Communicator,
        remote_leader: usize,
        tag: i32,
    ) -> Result<Communicator> {
        self.refuse_inter("Communicator::intercomm_create (as the local communicator)")?;
        if local_leader >= self.size() {
            return Err(Error::BadRank {
                rank: local_leader,
                size: self.size(),
            });
        }
        let mut lmax = [0u64];
        self.allreduce(&[self.free_context()], &mut lmax, Op::Max)?;
        // [lowest free context of the remote group, its size]
        let mut head = [0u64; 2];
        let mut remote: Vec<Rank> = Vec::new();
        if self.rank() == local_leader {
            let mine = [lmax[0], self.size() as u64];
            peer.sendrecv(&mine, remote_leader, tag, &mut head, remote_leader, tag)?;
            remote = vec![0; head[1] as usize];
            peer.sendrecv(
                &self.inner.group[..],
                remote_leader,
                tag,
                &mut remote,
                remote_leader,
                tag,
            )?;
        }
        self.bcast(&mut head, local_leader)?;
        remote.resize(head[1] as usize, 0);
        self.bcast(&mut remote, local_leader)?;
        if let Some(w) = remote.iter().find(|w| self.inner.group.contains(w)) {
            return Err(Error::InvalidArgument(format!(
                "intercomm_create: world rank {w} is in both groups (the groups must be disjoint)"
            )));
        }
        self.make_inter(
            self.inner.group.clone(),
            self.rank(),
            remote.into(),
            lmax[0].max(head[0]),
        )
    }

    /// The local leaders exchange `mine` (the leader's) over the intercommunicator and
    /// every process of the local group gets the remote leader's.
    fn leader_swap(&self, mine: &[u64]) -> Result<Vec<u64>> {
        let local = self.local("leader exchange")?;
        let mut len = [0u64];
        let mut theirs = Vec::new();
        if local.rank() == 0 {
            let ctx = self.coll_context();
            self.sendrecv_bytes(
                (bytemuck::bytes_of(&(mine.len() as u64)), 0, TAG_SWAP),
                (bytemuck::cast_slice_mut(&mut len), Src::Rank(0), TAG_SWAP),
                ctx,
                CommPattern::Collective,
            )?;
            theirs = vec![0u64; len[0] as usize];
            self.sendrecv_bytes(
                (bytemuck::cast_slice(mine), 0, TAG_SWAP),
                (
                    bytemuck::cast_slice_mut(&mut theirs),
                    Src::Rank(0),
                    TAG_SWAP,
                ),
                ctx,
                CommPattern::Collective,
            )?;
        }
        local.bcast(&mut len, 0)?;
        theirs.resize(len[0] as usize, 0);
        local.bcast(&mut theirs, 0)?;
        Ok(theirs)
    }

    /// The lowest context id free on every process of both groups, and the remote leader's
    /// `extra`.
    fn inter_agree(&self, extra: &[u64]) -> Result<(u64, Vec<u64>)> {
        let local = self.local("agreement")?;
        let mut lmax = [0u64];
        local.allreduce(&[self.free_context()], &mut lmax, Op::Max)?;
        let mut mine = vec![lmax[0]];
        mine.extend_from_slice(extra);
        let theirs = self.leader_swap(&mine)?;
        Ok((lmax[0].max(theirs[0]), theirs[1..].to_vec()))
    }

    /// `dup` of an intercommunicator: the same groups, new contexts.
    pub(crate) fn inter_dup(&self) -> Result<Communicator> {
        let local = self.local("dup")?.clone();
        let (agreed, _) = self.inter_agree(&[])?;
        self.make_inter(
            local.inner.group.clone(),
            local.rank(),
            self.inner.group.clone(),
            agreed,
        )
    }

    /// `split` of an intercommunicator: an intercommunicator between the processes of each
    /// group with the same color (`None` when the caller has no color, or when the other
    /// group has nobody of its color).
    pub(crate) fn inter_split(&self, color: Option<u32>, key: i32) -> Result<Option<Communicator>> {
        let local = self.local("split")?.clone();
        let mine = [color.map_or(-1i64, i64::from), i64::from(key)];
        let mut all = vec![[0i64; 2]; local.size()];
        crate::coll::allgather_into(&local, &mine, bytemuck::cast_slice_mut(&mut all))?;
        let table: Vec<u64> = all.iter().flatten().map(|&v| v as u64).collect();
        let (agreed, theirs) = self.inter_agree(&table)?;
        let Some(color) = color else { return Ok(None) };
        let members = |entries: &mut dyn Iterator<Item = (i64, i64)>| -> Vec<usize> {
            let mut m: Vec<(i64, usize)> = entries
                .enumerate()
                .filter(|(_, (c, _))| *c == i64::from(color))
                .map(|(r, (_, k))| (k, r))
                .collect();
            m.sort();
            m.into_iter().map(|(_, r)| r).collect()
        };
        let lm = members(&mut all.iter().map(|e| (e[0], e[1])));
        let rm = members(&mut theirs.chunks_exact(2).map(|e| (e[0] as i64, e[1] as i64)));
        if rm.is_empty() {
            return Ok(None);
        }
        let rank = lm
            .iter()
            .position(|&r| r == local.rank())
            .expect("caller is a member of its color");
        let lg: Vec<Rank> = lm.iter().map(|&r| local.inner.group[r]).collect();
        let rg: Vec<Rank> = rm.iter().map(|&r| self.inner.group[r]).collect();
        self.make_inter(lg.into(), rank, rg.into(), agreed)
            .map(Some)
    }

    /// `create` on an intercommunicator: each group passes a subgroup of its own; members get
    /// the intercommunicator between the two subgroups (`None` for the others, and for all
    /// when either subgroup is empty).
    pub(crate) fn inter_create(&self, group: &Group) -> Result<Option<Communicator>> {
        let local = self.local("create")?.clone();
        let members = group.world_ranks();
        if let Some(w) = members.iter().find(|w| !local.inner.group.contains(w)) {
            return Err(Error::InvalidArgument(format!(
                "Communicator::create on an intercommunicator: world rank {w} of the group is not in the local group"
            )));
        }
        let table: Vec<u64> = members.iter().map(|&w| u64::from(w)).collect();
        let (agreed, theirs) = self.inter_agree(&table)?;
        let Some(rank) = group.rank() else {
            return Ok(None);
        };
        if theirs.is_empty() {
            return Ok(None);
        }
        let remote: Vec<Rank> = theirs.iter().map(|&w| w as Rank).collect();
        self.make_inter(members.into(), rank, remote.into(), agreed)
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
        let (agreed, theirs) = self.inter_agree(&[u64::from(high)])?;
        let remote_high = theirs.first().is_some_and(|&h| h != 0);
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
        let context = self.claim_context(agreed)?;
        Ok(Communicator::new(CommInner {
            rank_index: Default::default(),
            shared: self.inner.shared.clone(),
            context,
            identity: is_identity(&group),
            group: group.into(),
            rank,
            coll: Default::default(),
            inter: None,
        }))
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
        let mut agreed = [0u64];
        temp.allreduce(&[self.free_context()], &mut agreed, Op::Max)?;
        let context = self.claim_context(agreed[0])?;
        Ok(Communicator::new(CommInner {
            rank_index: Default::default(),
            shared: self.inner.shared.clone(),
            context,
            identity: is_identity(members),
            group: members.into(),
            rank,
            coll: Default::default(),
            inter: None,
        }))
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
        Communicator::new(CommInner {
            rank_index: Default::default(),
            shared: self.inner.shared.clone(),
            context: BOOTSTRAP_BASE + 2 * slot,
            identity: is_identity(&group),
            group,
            rank,
            coll: Default::default(),
            inter: None,
        })
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
        let peer = Communicator::new(CommInner {
            rank_index: Default::default(),
            shared: self.inner.shared.clone(),
            context: local_temp.inner.context,
            identity: self.inner.identity,
            group: self.inner.group.clone(),
            rank: self.rank(),
            coll: Default::default(),
            inter: None,
        });
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
