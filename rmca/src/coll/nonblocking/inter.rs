//! Non-blocking collectives on intercommunicators (MPI-4.1 §6.2.2, §6.12): each is one
//! schedule over the processes of both groups, run by the same executor and progress rule as
//! the intra-communicator ones.
//!
//! A schedule's peers are numbered in a *merged* space: `0..L` are the ranks of the local
//! group (L processes; messages go over the local side's collective context, see
//! [`crate::Communicator::local_comm`]), `L..L+R` the ranks of the remote group (over the
//! intercommunicator's collective context). So the intra-communicator builders of
//! [`super::super::schedule`] serve unchanged for the steps inside a group, and the steps
//! between the groups are rounds addressing `L + j`. Every message of one collective, on
//! either context, carries the tag of the intercommunicator's next non-blocking sequence
//! number ([`super`]'s matching rule): the local side's contexts see no other non-blocking
//! traffic (its blocking steps use tags below [`super::NB_TAG_BASE`]), so several
//! outstanding collectives never take each other's messages.
//!
//! Algorithms (leader = local rank 0 of each group):
//! - barrier: local barrier, the leaders exchange an empty message, local barrier;
//! - bcast: the root sends to the remote leader, which broadcasts in its group;
//! - reduce: the remote group reduces to its leader (rank order), which sends to the root;
//! - allreduce: each group reduces to its leader, the leaders swap, each broadcasts;
//! - gather(v), scatter(v): the root and each remote process exchange their block directly;
//! - allgather(v), alltoall(v): every process exchanges with every remote process directly;
//! - reduce_scatter: each group reduces to its leader, the leaders swap, each leader sends
//!   every process of its group its chunk.

use std::ops::Range;
use std::rc::Rc;

use rmca_framework::btl::CommPattern;
use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::{RequestId, SendMode, SendStart};

use super::super::exec::Transport;
use super::super::schedule::{self, Buf, Comm, Local, Region, Round, Schedule};
use super::{check_bytes, lend, lend_mut, ByteReduction, Finish, Plan};
use crate::coll::{Op, Reducible};
use crate::intercomm::InterRoot;
use crate::{Communicator, Error, Request, Result, Scope, Src};

/// The transport of an intercommunicator collective: peer `p < L` is local rank `p` (over
/// the local side's collective context), peer `L + j` remote rank `j` (over the
/// intercommunicator's).
pub(crate) struct InterTransport<'a> {
    pub inter: &'a Communicator,
    pub local: &'a Communicator,
    pub tag: i32,
}

impl InterTransport<'_> {
    /// The communicator and rank of merged peer `p`.
    fn route(&self, p: usize) -> (&Communicator, usize) {
        let l = self.local.size();
        if p < l {
            (self.local, p)
        } else {
            (self.inter, p - l)
        }
    }
}

impl Transport for InterTransport<'_> {
    type Handle = RequestId;

    fn send(&mut self, peer: usize, buf: UserBuf) -> Result<Option<RequestId>> {
        let (c, r) = self.route(peer);
        let started = c.start_send_fast(
            buf,
            r,
            self.tag,
            c.coll_context(),
            SendMode::Standard,
            CommPattern::Collective,
        )?;
        Ok(match started {
            SendStart::Done => None,
            SendStart::Pending(id) => Some(id),
        })
    }

    fn recv(&mut self, peer: usize, buf: UserBuf) -> Result<RequestId> {
        let (c, r) = self.route(peer);
        c.start_recv(
            buf,
            Src::Rank(r),
            self.tag,
            c.coll_context(),
            CommPattern::Collective,
        )
    }

    fn test(&mut self, id: &RequestId) -> Option<Result<usize>> {
        // Only the byte count and the error matter: either communicator's `finish` gives them.
        match self.inter.shared().with(|rt| Ok(rt.pml.test(*id)?)) {
            Ok(None) => None,
            Ok(Some(st)) => Some(self.inter.finish(st).map(|s| s.bytes)),
            Err(e) => Some(Err(e)),
        }
    }

    fn wait(&mut self, id: &RequestId) -> Result<usize> {
        self.inter.wait_raw(*id).map(|s| s.bytes)
    }
}

fn work(range: Range<usize>) -> Region {
    Region {
        buf: Buf::Work,
        range,
    }
}

fn tmp(range: Range<usize>) -> Region {
    Region {
        buf: Buf::Tmp,
        range,
    }
}

fn input(range: Range<usize>) -> Region {
    Region {
        buf: Buf::Send,
        range,
    }
}

fn round(comms: Vec<Comm>, locals: Vec<Local>) -> Round {
    Round { comms, locals }
}

/// `parts` one after the other (the same buffers; scratch: the largest need).
fn chain(parts: impl IntoIterator<Item = Schedule>) -> Schedule {
    let mut s = Schedule::default();
    for p in parts {
        s.tmp_len = s.tmp_len.max(p.tmp_len);
        s.rounds.extend(
            p.rounds
                .into_iter()
                .filter(|r| !r.comms.is_empty() || !r.locals.is_empty()),
        );
    }
    s
}

fn rounds(rs: impl IntoIterator<Item = Round>) -> Schedule {
    chain([Schedule {
        tmp_len: 0,
        rounds: rs.into_iter().collect(),
    }])
}

// ---- the schedules, pure functions of the group sizes and this process's local rank ----

/// Barrier over both groups of sizes `l` (this one, where this process is `me`) and `r`.
pub(crate) fn barrier(l: usize, me: usize) -> Schedule {
    let e = || work(0..0);
    let swap = (me == 0).then(|| {
        round(
            vec![
                Comm::Recv {
                    peer: l,
                    region: e(),
                },
                Comm::Send {
                    peer: l,
                    region: e(),
                },
            ],
            vec![],
        )
    });
    chain([
        schedule::barrier_dissemination(l, me),
        rounds(swap),
        schedule::barrier_dissemination(l, me),
    ])
}

/// Broadcast of the `len` bytes of `Work`.
pub(crate) fn bcast(l: usize, me: usize, root: InterRoot, len: usize) -> Schedule {
    match root {
        InterRoot::Null => Schedule::default(),
        InterRoot::Root => rounds([round(
            vec![Comm::Send {
                peer: l,
                region: work(0..len),
            }],
            vec![],
        )]),
        InterRoot::Remote(r) => {
            let take = (me == 0).then(|| {
                round(
                    vec![Comm::Recv {
                        peer: l + r,
                        region: work(0..len),
                    }],
                    vec![],
                )
            });
            chain([rounds(take), schedule::bcast_binomial(l, me, 0, len)])
        }
    }
}

/// Reduction of the remote group's `len`-byte inputs into the root's `Work` (in the remote
/// group: `Send` is the input, `Work` private space of `len` bytes).
pub(crate) fn reduce(l: usize, me: usize, root: InterRoot, len: usize) -> Schedule {
    match root {
        InterRoot::Null => Schedule::default(),
        InterRoot::Root => rounds([round(
            vec![Comm::Recv {
                peer: l,
                region: work(0..len),
            }],
            vec![],
        )]),
        InterRoot::Remote(r) => {
            // Rank order: the binomial tree to rank 0 combines x0 op x1 op ... in order.
            let give = (me == 0).then(|| {
                round(
                    vec![Comm::Send {
                        peer: l + r,
                        region: work(0..len),
                    }],
                    vec![],
                )
            });
            chain([schedule::reduce_binomial(l, me, 0, len), rounds(give)])
        }
    }
}

/// Each group gets the reduction of the other's `len`-byte inputs (`Send`) in `Work`.
pub(crate) fn allreduce(l: usize, me: usize, len: usize) -> Schedule {
    let red = schedule::reduce_binomial(l, me, 0, len);
    let at = red.tmp_len;
    let swap = (me == 0).then(|| {
        round(
            vec![
                Comm::Recv {
                    peer: l,
                    region: tmp(at..at + len),
                },
                Comm::Send {
                    peer: l,
                    region: work(0..len),
                },
            ],
            vec![Local::Copy {
                src: tmp(at..at + len),
                dst: 0..len,
            }],
        )
    });
    let mut s = chain([red, rounds(swap), schedule::bcast_binomial(l, me, 0, len)]);
    if me == 0 {
        s.tmp_len = s.tmp_len.max(at + len);
    }
    s
}

/// Gatherv: the root receives remote rank j's block into `Work[regions[j]]`; the remote
/// group's processes send their `send_len` bytes of `Send`.
pub(crate) fn gatherv(
    l: usize,
    root: InterRoot,
    send_len: usize,
    regions: &[Range<usize>],
) -> Schedule {
    match root {
        InterRoot::Null => Schedule::default(),
        InterRoot::Root => rounds([round(
            regions
                .iter()
                .enumerate()
                .map(|(j, g)| Comm::Recv {
                    peer: l + j,
                    region: work(g.clone()),
                })
                .collect(),
            vec![],
        )]),
        InterRoot::Remote(r) => rounds([round(
            vec![Comm::Send {
                peer: l + r,
                region: input(0..send_len),
            }],
            vec![],
        )]),
    }
}

/// Scatterv: the root sends `Send[regions[j]]` to remote rank j; the remote group's
/// processes receive `recv_len` bytes into `Work`.
pub(crate) fn scatterv(
    l: usize,
    root: InterRoot,
    regions: &[Range<usize>],
    recv_len: usize,
) -> Schedule {
    match root {
        InterRoot::Null => Schedule::default(),
        InterRoot::Root => rounds([round(
            regions
                .iter()
                .enumerate()
                .map(|(j, g)| Comm::Send {
                    peer: l + j,
                    region: input(g.clone()),
                })
                .collect(),
            vec![],
        )]),
        InterRoot::Remote(r) => rounds([round(
            vec![Comm::Recv {
                peer: l + r,
                region: work(0..recv_len),
            }],
            vec![],
        )]),
    }
}

/// Alltoallv: `Send[sends[j]]` goes to remote rank j, whose block lands in `Work[recvs[j]]`
/// (allgatherv: every send region is the whole input).
pub(crate) fn alltoallv(l: usize, sends: &[Range<usize>], recvs: &[Range<usize>]) -> Schedule {
    let mut comms: Vec<Comm> = recvs
        .iter()
        .enumerate()
        .map(|(j, g)| Comm::Recv {
            peer: l + j,
            region: work(g.clone()),
        })
        .collect();
    comms.extend(sends.iter().enumerate().map(|(j, g)| Comm::Send {
        peer: l + j,
        region: input(g.clone()),
    }));
    rounds([round(comms, vec![])])
}

/// Reduce-scatter: each group's inputs (`Send`, `len` bytes) are reduced at its leader and
/// swapped with the other leader's, who sends local rank i its `chunks[i]` (the chunks tile
/// `len`, one per process of this group). `Work` is private space of `2 * len` bytes; this
/// process's chunk ends at `Work[`[`reduce_scatter_result`]`]`.
pub(crate) fn reduce_scatter(l: usize, me: usize, len: usize, chunks: &[Range<usize>]) -> Schedule {
    let red = schedule::reduce_binomial(l, me, 0, len);
    let out = if me == 0 {
        let swap = round(
            vec![
                Comm::Recv {
                    peer: l,
                    region: work(len..2 * len),
                },
                Comm::Send {
                    peer: l,
                    region: work(0..len),
                },
            ],
            vec![],
        );
        let deal = round(
            chunks
                .iter()
                .enumerate()
                .skip(1)
                .map(|(i, c)| Comm::Send {
                    peer: i,
                    region: work(len + c.start..len + c.end),
                })
                .collect(),
            vec![],
        );
        rounds([swap, deal])
    } else {
        rounds([round(
            vec![Comm::Recv {
                peer: 0,
                region: work(0..chunks[me].len()),
            }],
            vec![],
        )])
    };
    chain([red, out])
}

/// Where [`reduce_scatter`] leaves local rank `me`'s chunk in `Work`.
pub(crate) fn reduce_scatter_result(
    me: usize,
    len: usize,
    chunks: &[Range<usize>],
) -> Range<usize> {
    if me == 0 {
        len + chunks[0].start..len + chunks[0].end
    } else {
        0..chunks[me].len()
    }
}

// ---- the plans ----

fn inter_error(what: &str) -> Error {
    Error::CommKind(format!(
        "{what} is an intercommunicator collective, and this is an intra-communicator"
    ))
}

/// Refuse regions that are not one per remote process inside `len` bytes.
fn check_regions(what: &str, regions: &[Range<usize>], n: usize, len: usize) -> Result<()> {
    if regions.len() != n {
        return Err(Error::InvalidArgument(format!(
            "{what}: {} regions given, one per remote process ({n}) expected",
            regions.len()
        )));
    }
    if let Some(g) = regions.iter().find(|g| g.start > g.end || g.end > len) {
        return Err(Error::InvalidArgument(format!(
            "{what}: region {g:?} is outside the {len}-byte buffer"
        )));
    }
    Ok(())
}

/// A plan of an intercommunicator collective (see `launch_tagged`).
fn inter_plan(s: Schedule, work: UserBuf) -> Plan {
    let mut p = Plan::new(Rc::new(s), work);
    p.inter = true;
    p
}

impl Communicator {
    /// The local side and the remote rank a root names (checked).
    fn inter_parts(&self, what: &str, root: Option<InterRoot>) -> Result<&Communicator> {
        let local = self.local_comm().ok_or_else(|| inter_error(what))?;
        if let Some(InterRoot::Remote(r)) = root {
            if r >= self.size() {
                return Err(Error::BadRank {
                    rank: r,
                    size: self.size(),
                });
            }
        }
        Ok(local)
    }

    /// The plan of a barrier on an intercommunicator.
    pub(crate) fn inter_ibarrier_plan(&self) -> Result<Plan> {
        let local = self.inter_parts("ibarrier", None)?;
        let s = barrier(local.size(), local.rank());
        Ok(inter_plan(s, UserBuf::empty()))
    }

    /// The plan of a broadcast of `buf` on an intercommunicator (the root's is read, the
    /// remote group's written; ignored where `root` is [`InterRoot::Null`]).
    pub(crate) fn inter_ibcast_plan(&self, buf: UserBuf, root: InterRoot) -> Result<Plan> {
        let local = self.inter_parts("ibcast", Some(root))?;
        if root == InterRoot::Null {
            return Ok(inter_plan(Schedule::default(), UserBuf::empty()));
        }
        let s = bcast(local.size(), local.rank(), root, buf.len());
        let mut p = inter_plan(s, buf);
        if root == InterRoot::Root {
            p.result_bytes = 0;
        }
        Ok(p)
    }

    /// The plan of a reduction of the remote group's `send` into the root's `recv`.
    pub(crate) fn inter_ireduce_plan(
        &self,
        send: UserBuf,
        recv: Option<UserBuf>,
        op: ByteReduction,
        root: InterRoot,
    ) -> Result<Plan> {
        let local = self.inter_parts("ireduce", Some(root))?;
        let (l, me) = (local.size(), local.rank());
        match root {
            InterRoot::Null => Ok(inter_plan(Schedule::default(), UserBuf::empty())),
            InterRoot::Root => {
                let recv = recv.ok_or_else(|| {
                    Error::InvalidArgument("ireduce: the root must pass a receive buffer".into())
                })?;
                Ok(inter_plan(reduce(l, me, root, recv.len()), recv))
            }
            InterRoot::Remote(_) => {
                let len = send.len();
                if !len.is_multiple_of(op.elem.max(1)) {
                    return Err(Error::InvalidArgument(format!(
                        "ireduce: {len} B is not a whole number of {}-byte elements",
                        op.elem
                    )));
                }
                let s = reduce(l, me, root, len);
                let mut p = inter_plan(s, UserBuf::empty()).owning_work(vec![0u8; len]);
                p.send = send;
                p.reduce = Some(op.apply);
                p.result_bytes = 0;
                Ok(p)
            }
        }
    }

    /// The plan of an allreduce on an intercommunicator: `recv` gets the reduction of the
    /// remote group's inputs.
    pub(crate) fn inter_iallreduce_plan(
        &self,
        send: UserBuf,
        recv: UserBuf,
        op: ByteReduction,
    ) -> Result<Plan> {
        let local = self.inter_parts("iallreduce", None)?;
        check_bytes("iallreduce", "receive buffer", recv.len(), send.len())?;
        let s = allreduce(local.size(), local.rank(), send.len());
        let mut p = inter_plan(s, recv);
        p.send = send;
        p.reduce = Some(op.apply);
        Ok(p)
    }

    /// The plan of a gatherv on an intercommunicator: the root's `recv[regions[j]]` gets
    /// remote rank j's `send` (`recv`, `regions`: the root's).
    pub(crate) fn inter_igatherv_plan(
        &self,
        send: UserBuf,
        recv: Option<UserBuf>,
        regions: &[Range<usize>],
        root: InterRoot,
    ) -> Result<Plan> {
        let local = self.inter_parts("igatherv", Some(root))?;
        let l = local.size();
        match root {
            InterRoot::Root => {
                let recv = recv.ok_or_else(|| {
                    Error::InvalidArgument("igatherv: the root must pass a receive buffer".into())
                })?;
                check_regions("igatherv", regions, self.size(), recv.len())?;
                Ok(inter_plan(gatherv(l, root, 0, regions), recv))
            }
            _ => {
                let mut p = inter_plan(gatherv(l, root, send.len(), &[]), UserBuf::empty());
                p.send = send;
                Ok(p)
            }
        }
    }

    /// The plan of a scatterv on an intercommunicator: remote rank j's `recv` gets the
    /// root's `send[regions[j]]` (`send`, `regions`: the root's).
    pub(crate) fn inter_iscatterv_plan(
        &self,
        send: Option<UserBuf>,
        regions: &[Range<usize>],
        recv: UserBuf,
        root: InterRoot,
    ) -> Result<Plan> {
        let local = self.inter_parts("iscatterv", Some(root))?;
        let l = local.size();
        match root {
            InterRoot::Root => {
                let send = send.ok_or_else(|| {
                    Error::InvalidArgument("iscatterv: the root must pass a send buffer".into())
                })?;
                check_regions("iscatterv", regions, self.size(), send.len())?;
                let mut p = inter_plan(scatterv(l, root, regions, 0), UserBuf::empty());
                p.send = send;
                Ok(p)
            }
            InterRoot::Null => Ok(inter_plan(Schedule::default(), UserBuf::empty())),
            InterRoot::Remote(_) => {
                let s = scatterv(l, root, &[], recv.len());
                Ok(inter_plan(s, recv))
            }
        }
    }

    /// The plan of an alltoallv on an intercommunicator: `send[sends[j]]` goes to remote
    /// rank j, whose block lands in `recv[recvs[j]]` (an allgatherv: every send region is
    /// the whole `send`).
    pub(crate) fn inter_ialltoallv_plan(
        &self,
        send: UserBuf,
        sends: &[Range<usize>],
        recv: UserBuf,
        recvs: &[Range<usize>],
    ) -> Result<Plan> {
        let local = self.inter_parts("ialltoallv", None)?;
        check_regions("ialltoallv", sends, self.size(), send.len())?;
        check_regions("ialltoallv", recvs, self.size(), recv.len())?;
        let s = alltoallv(local.size(), sends, recvs);
        let mut p = inter_plan(s, recv);
        p.send = send;
        Ok(p)
    }

    /// The plan of a reduce_scatter on an intercommunicator: the remote group's inputs
    /// (`send`: tiled by `chunks`, one per process of THIS group in local rank order) are
    /// reduced, and this process's chunk lands in `recv`.
    pub(crate) fn inter_ireduce_scatter_plan(
        &self,
        send: UserBuf,
        recv: UserBuf,
        chunks: &[Range<usize>],
        op: ByteReduction,
    ) -> Result<Plan> {
        let local = self.inter_parts("ireduce_scatter", None)?;
        let (l, me) = (local.size(), local.rank());
        let len = send.len();
        let tiled = chunks.len() == l
            && chunks.first().is_none_or(|c| c.start == 0)
            && chunks.windows(2).all(|w| w[0].end == w[1].start)
            && chunks.last().is_none_or(|c| c.end == len);
        if !tiled {
            return Err(Error::InvalidArgument(format!(
                "ireduce_scatter: the chunks must tile the {len}-byte send buffer in local rank order, one per process of the local group ({l})"
            )));
        }
        check_bytes(
            "ireduce_scatter",
            "receive buffer",
            recv.len(),
            chunks[me].len(),
        )?;
        let s = reduce_scatter(l, me, len, chunks);
        let mut p = inter_plan(s, UserBuf::empty()).owning_work(vec![0u8; 2 * len]);
        p.send = send;
        p.reduce = Some(op.apply);
        p.finish = Finish::CopyOut {
            from: reduce_scatter_result(me, len, chunks),
            to: recv,
        };
        p.result_bytes = chunks[me].len();
        Ok(p)
    }
}

/// The non-blocking collectives of an intercommunicator, typed and scoped like the
/// intra-communicator ones ([`Communicator::ibcast`], ...): each group's data goes to, or
/// comes from, the other group (MPI-4.1 §6.2.2). A rooted one takes an [`InterRoot`]:
/// [`InterRoot::Root`] at the root, [`InterRoot::Null`] at the rest of its group,
/// [`InterRoot::Remote`] (the root's rank in the remote group) in the other group. Every
/// process of both groups starts them in the same order; they progress as the module's
/// progress rule says, each on a tag of its own.
///
/// ```no_run
/// # fn main() -> rmca::Result<()> {
/// # use rmca::{coll::Op, InterRoot};
/// let universe = rmca::init()?;
/// let world = universe.world();
/// let color = (world.rank() % 2) as u32;
/// let local = world.split(Some(color), 0)?.expect("a color");
/// let inter = local.intercomm_create(0, &world, 1 - color as usize, 0)?;
/// let (mine, mut theirs) = ([world.rank() as u64], [0u64]);
/// rmca::scope(|s| {
///     // Each process gets the sum over the other group.
///     let r = inter.inter_iallreduce(s, &mine, &mut theirs, Op::Sum)?;
///     r.wait().map(|_| ())
/// })?;
/// # Ok(())
/// # }
/// ```
impl Communicator {
    /// Start a barrier over both groups.
    pub fn inter_ibarrier<'s>(&self, scope: &'s Scope<'s, '_>) -> Result<Request<'s>> {
        Ok(self.start_plan(scope, self.inter_ibarrier_plan()?))
    }

    /// Start a broadcast from the root (it sends `buf`) to every process of the remote
    /// group (each receives into `buf`); `buf` is ignored at [`InterRoot::Null`].
    pub fn inter_ibcast<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut [T],
        root: InterRoot,
    ) -> Result<Request<'s>> {
        let buf = if root == InterRoot::Null {
            UserBuf::empty()
        } else {
            lend_mut(buf)
        };
        Ok(self.start_plan(scope, self.inter_ibcast_plan(buf, root)?))
    }

    /// Start a reduction of the remote group's `send` (in its rank order) into the root's
    /// `recv` (`send` is read in the remote group only, `recv` written at the root only).
    pub fn inter_ireduce<'s, T: Reducible>(
        &self,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: Option<&'s mut [T]>,
        op: Op,
        root: InterRoot,
    ) -> Result<Request<'s>> {
        let op = ByteReduction::new::<T, _>(op)?;
        let send = if matches!(root, InterRoot::Remote(_)) {
            lend(send)
        } else {
            UserBuf::empty()
        };
        let recv = recv.filter(|_| root == InterRoot::Root).map(lend_mut);
        Ok(self.start_plan(scope, self.inter_ireduce_plan(send, recv, op, root)?))
    }

    /// Start an allreduce: `recv` gets the reduction of the remote group's `send`s.
    pub fn inter_iallreduce<'s, T: Reducible>(
        &self,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: &'s mut [T],
        op: Op,
    ) -> Result<Request<'s>> {
        let op = ByteReduction::new::<T, _>(op)?;
        let plan = self.inter_iallreduce_plan(lend(send), lend_mut(recv), op)?;
        Ok(self.start_plan(scope, plan))
    }

    /// Start an allgather: `recv` gets the remote group's `send`s in remote rank order (a
    /// block is as long as the remote group's `send`).
    pub fn inter_iallgather<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: &'s mut [T],
    ) -> Result<Request<'s>> {
        let n = self.size();
        let block = std::mem::size_of_val(recv).checked_div(n).unwrap_or(0);
        if n > 0 && !std::mem::size_of_val(recv).is_multiple_of(n) {
            return Err(Error::InvalidArgument(format!(
                "inter_iallgather: the receive buffer must hold {n} equal blocks"
            )));
        }
        let sends = vec![0..std::mem::size_of_val(send); n];
        let recvs: Vec<Range<usize>> = (0..n).map(|j| j * block..(j + 1) * block).collect();
        let plan = self.inter_ialltoallv_plan(lend(send), &sends, lend_mut(recv), &recvs)?;
        Ok(self.start_plan(scope, plan))
    }

    /// Start an alltoall: block j of `send` goes to remote rank j, block j of `recv` comes
    /// from it (each buffer holds remote-size equal blocks).
    pub fn inter_ialltoall<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        send: &'s [T],
        recv: &'s mut [T],
    ) -> Result<Request<'s>> {
        let n = self.size();
        let (sl, rl) = (std::mem::size_of_val(send), std::mem::size_of_val(recv));
        if n > 0 && (!sl.is_multiple_of(n) || !rl.is_multiple_of(n)) {
            return Err(Error::InvalidArgument(format!(
                "inter_ialltoall: the send ({sl} B) and receive ({rl} B) buffers must each hold {n} equal blocks"
            )));
        }
        let blocks = |len: usize| -> Vec<Range<usize>> {
            let b = len.checked_div(n).unwrap_or(0);
            (0..n).map(|j| j * b..(j + 1) * b).collect()
        };
        let plan =
            self.inter_ialltoallv_plan(lend(send), &blocks(sl), lend_mut(recv), &blocks(rl))?;
        Ok(self.start_plan(scope, plan))
    }
}

#[cfg(test)]
mod tests;
