//! Point-to-point calls and collectives on [`Datatype`] layouts.
//!
//! A layout whose instances form one run of bytes is handed to the PML in place, exactly as
//! the plain calls do (no copy on either side). Any other layout is packed into one scratch
//! buffer which the PML then sends, and received into one that is unpacked once complete:
//! the PML's send arguments carry a single contiguous [`UserBuf`], so there is no seam yet
//! through which a BTL could gather the segments straight from the user's buffer.

use std::cell::Cell;

use rmca_framework::btl::CommPattern;
use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::{ContextId, SendMode, StatusError};

use super::{count_staged, Datatype, DatatypeError};
use crate::coll::{Op, Reducible};
use crate::{Communicator, Dest, Error, Request, Result, Scope, Src, Status};

/// Scratch buffers larger than this are freed after use instead of kept for the next call.
const KEEP_SCRATCH_MAX: usize = 16 << 20;
/// Scratch buffers kept per thread.
const KEEP_SCRATCH_COUNT: usize = 4;

thread_local! {
    /// Scratch buffers of finished typed calls, reused by the next ones.
    static SCRATCH: Cell<Vec<Vec<u8>>> = const { Cell::new(Vec::new()) };
}

/// A scratch buffer of at least `len` bytes (contents unspecified), or an error when there
/// is no memory for it (a send of many overlapping instances can ask for any size).
fn take_scratch(len: usize) -> Result<Vec<u8>, DatatypeError> {
    let mut v = SCRATCH.with(|s| {
        let mut pool = s.take();
        let v = pool.pop();
        s.set(pool);
        v.unwrap_or_default()
    });
    if v.len() < len {
        v.try_reserve_exact(len - v.len())
            .map_err(|_| DatatypeError::Allocation { bytes: len })?;
        v.resize(len, 0);
    }
    Ok(v)
}

fn give_scratch(v: Vec<u8>) {
    if v.capacity() > KEEP_SCRATCH_MAX {
        return;
    }
    SCRATCH.with(|s| {
        let mut pool = s.take();
        if pool.len() < KEEP_SCRATCH_COUNT {
            pool.push(v);
        }
        s.set(pool);
    });
}

/// Run `f` on a scratch buffer of exactly `len` bytes.
fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
    let mut v = take_scratch(len)?;
    let r = f(&mut v[..len]);
    give_scratch(v);
    r
}

/// Bytes written by a receive that ended with `outcome` (a truncated one wrote some).
fn received(outcome: &Result<Status>) -> usize {
    match outcome {
        Ok(st) => st.bytes,
        Err(Error::Status {
            error: StatusError::Truncated { received, .. },
            ..
        }) => *received,
        Err(_) => 0,
    }
}

/// Run `f` on the bytes `count` instances of `dtype` in `bytes` pack to: the buffer's own
/// run when the layout is one, else a packed scratch copy.
fn with_send_view<R>(
    bytes: &[u8],
    count: usize,
    dtype: &Datatype,
    f: impl FnOnce(&[u8]) -> Result<R>,
) -> Result<R> {
    dtype.check_bounds(count, bytes.len())?;
    if let Some((start, len)) = dtype.contiguous_run(count) {
        let start = start.max(0) as usize;
        return f(&bytes[start..start + len]);
    }
    let need = dtype.pack_size(count)?;
    with_scratch(need, |s| {
        dtype.pack_unchecked(bytes, count, s);
        count_staged(need);
        f(s)
    })
}

/// Run `f` on where `count` instances of `dtype` in `bytes` are received: the buffer's own
/// run when the layout is one, else a scratch buffer unpacked into `bytes` afterwards (as
/// far as `f` says it was filled).
fn with_recv_view(
    bytes: &mut [u8],
    count: usize,
    dtype: &Datatype,
    f: impl FnOnce(&mut [u8]) -> Result<Status>,
) -> Result<Status> {
    dtype.check_bounds(count, bytes.len())?;
    dtype.check_no_overlap(count)?;
    if let Some((start, len)) = dtype.contiguous_run(count) {
        let start = start.max(0) as usize;
        return f(&mut bytes[start..start + len]);
    }
    let need = dtype.pack_size(count)?;
    with_scratch(need, |s| {
        let outcome = f(s);
        let got = received(&outcome).min(need);
        dtype.unpack_unchecked(&s[..got], bytes, count);
        count_staged(got);
        outcome
    })
}

/// A collective's status for [`with_recv_view`]: the whole view was filled.
fn filled(rank: usize, len: usize) -> Status {
    Status::sent(rank, 0, len)
}

/// Check that both sides of a collective move the same bytes per block.
fn same_signature(what: &'static str, send: usize, recv: usize) -> Result<()> {
    if send != recv {
        return Err(DatatypeError::SignatureMismatch { what, send, recv }.into());
    }
    Ok(())
}

fn instances(what: &'static str, n: usize, count: usize) -> Result<usize> {
    n.checked_mul(count).ok_or_else(|| {
        DatatypeError::Overflow {
            constructor: what,
            what: "size × count",
        }
        .into()
    })
}

/// A non-blocking typed operation (see [`Communicator::isend_typed`] and
/// [`Communicator::irecv_typed`]). Like a [`Request`], it lives in a [`Scope`] and waits when
/// dropped unfinished; a receive through a scratch buffer is unpacked into the user's buffer
/// when it completes (by [`TypedRequest::wait`], a successful [`TypedRequest::test`], or the
/// drop). Forgetting it leaves the transfer to the scope's end and the data unpacked nowhere.
#[must_use = "a request must be waited on (dropping it waits)"]
pub struct TypedRequest<'s> {
    /// The PML's request (`None` once it completed).
    inner: Option<Request<'s>>,
    /// The packed bytes the PML reads (send) or writes (receive); empty when the user's
    /// buffer was lent in place. Freed only after `inner` completed.
    scratch: Vec<u8>,
    /// Where a receive through `scratch` is unpacked.
    unpack: Option<Unpack<'s>>,
}

struct Unpack<'s> {
    bytes: &'s mut [u8],
    count: usize,
    dtype: Datatype,
}

impl std::fmt::Debug for TypedRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedRequest")
            .field("inner", &self.inner)
            .field("staged", &!self.scratch.is_empty())
            .finish()
    }
}

impl<'s> TypedRequest<'s> {
    fn in_place(inner: Request<'s>) -> Self {
        Self {
            inner: Some(inner),
            scratch: Vec::new(),
            unpack: None,
        }
    }

    /// Block until the operation completes (and its data is unpacked).
    pub fn wait(mut self) -> Result<Status> {
        let inner = self
            .inner
            .take()
            .ok_or_else(|| Error::InvalidArgument("typed request already completed".into()))?;
        let outcome = inner.wait();
        self.finish(outcome)
    }

    /// Has the operation completed? `Some` returns its outcome, the data unpacked (after
    /// which the request is spent).
    pub fn test(&mut self) -> Option<Result<Status>> {
        let outcome = self.inner.as_mut()?.test()?;
        self.inner = None;
        Some(self.finish(outcome))
    }

    /// Wait for every request (each unpacked as it completes); statuses in order. The first
    /// error is returned after all requests completed.
    pub fn wait_all(requests: Vec<TypedRequest<'s>>) -> Result<Vec<Status>> {
        let mut out = Vec::with_capacity(requests.len());
        let mut first_err = None;
        for r in requests {
            match r.wait() {
                Ok(st) => out.push(st),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(out), Err)
    }

    /// The PML request completed with `outcome`: unpack what a receive got.
    fn finish(&mut self, outcome: Result<Status>) -> Result<Status> {
        if let Some(u) = self.unpack.take() {
            let got = received(&outcome).min(self.scratch.len());
            u.dtype
                .unpack_unchecked(&self.scratch[..got], u.bytes, u.count);
            count_staged(got);
        }
        outcome
    }
}

impl Drop for TypedRequest<'_> {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            // The PML may still use `scratch`: complete first, free after.
            let outcome = inner.wait();
            if let Err(e) = self.finish(outcome) {
                tracing::debug!("typed request dropped with error: {e}");
            }
        }
        if !self.scratch.is_empty() {
            give_scratch(std::mem::take(&mut self.scratch));
        }
    }
}

impl Communicator {
    /// The point-to-point context (collectives use the next one, see `coll_context`).
    fn p2p_context(&self) -> ContextId {
        self.coll_context() - 1
    }

    /// Blocking send of `count` instances of `dtype` laid out in `buf` (offsets are bytes
    /// from `buf`'s start). A layout that is one run of bytes goes out in place; others are
    /// packed first. The layout is checked against `buf` before anything is sent.
    ///
    /// ```no_run
    /// # fn main() -> rmca::Result<()> {
    /// use rmca::Datatype;
    /// let universe = rmca::init()?;
    /// let world = universe.world();
    /// // Send column 2 of a 4 × 4 row-major matrix; receive it as a contiguous row.
    /// let column = Datatype::vector(4, 1, 4, &Datatype::of::<f64>())?;
    /// if world.rank() == 0 {
    ///     let matrix = [1.0f64; 16];
    ///     world.send_typed(&matrix[2..], 1, &column, 1, 0)?;
    /// } else if world.rank() == 1 {
    ///     let mut row = [0.0f64; 4];
    ///     world.recv(&mut row, 0, 0)?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn send_typed<T: bytemuck::Pod>(
        &self,
        buf: &[T],
        count: usize,
        dtype: &Datatype,
        dest: impl Into<Dest>,
        tag: i32,
    ) -> Result<()> {
        let dest = dest.into();
        with_send_view(bytemuck::cast_slice(buf), count, dtype, |view| {
            self.send(view, dest, tag)
        })
    }

    /// Blocking receive into `count` instances of `dtype` laid out in `buf`. The sender's
    /// layout may differ: only the sequence of bytes matters (MPI's type signature). A
    /// shorter message fills the first instances (the status says how many bytes); a longer
    /// one fills all and returns the truncation error. The layout must not name a byte
    /// twice.
    pub fn recv_typed<T: bytemuck::Pod>(
        &self,
        buf: &mut [T],
        count: usize,
        dtype: &Datatype,
        source: impl Into<Src>,
        tag: i32,
    ) -> Result<Status> {
        let source = source.into();
        with_recv_view(bytemuck::cast_slice_mut(buf), count, dtype, |view| {
            self.recv(view, source, tag)
        })
    }

    /// [`Communicator::sendrecv`] with layouts: send `count` instances of a type from the
    /// first buffer to `dest` and receive into the second from `source`, deadlock-free.
    /// Either side may be [`crate::PROC_NULL`].
    pub fn sendrecv_typed<S: bytemuck::Pod, R: bytemuck::Pod>(
        &self,
        (send, scount, sdtype): (&[S], usize, &Datatype),
        dest: impl Into<Dest>,
        send_tag: i32,
        (recv, rcount, rdtype): (&mut [R], usize, &Datatype),
        source: impl Into<Src>,
        recv_tag: i32,
    ) -> Result<Status> {
        let (dest, source) = (dest.into(), source.into());
        with_send_view(bytemuck::cast_slice(send), scount, sdtype, |view| {
            with_recv_view(bytemuck::cast_slice_mut(recv), rcount, rdtype, |rview| {
                self.sendrecv(view, dest, send_tag, rview, source, recv_tag)
            })
        })
    }

    /// Non-blocking [`Communicator::send_typed`]; `buf` stays borrowed until the end of
    /// `scope`.
    #[allow(unsafe_code)]
    pub fn isend_typed<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s [T],
        count: usize,
        dtype: &Datatype,
        dest: impl Into<Dest>,
        tag: i32,
    ) -> Result<TypedRequest<'s>> {
        let bytes: &'s [u8] = bytemuck::cast_slice(buf);
        dtype.check_bounds(count, bytes.len())?;
        if let Some((start, len)) = dtype.contiguous_run(count) {
            let start = start.max(0) as usize;
            let r = self.isend(scope, &bytes[start..start + len], dest, tag)?;
            return Ok(TypedRequest::in_place(r));
        }
        let dest = match dest.into() {
            Dest::Rank(r) => r,
            Dest::Null => return Ok(TypedRequest::in_place(Request::done(Status::PROC_NULL))),
            Dest::Negative(r) => return Err(Error::NegativeRank(r)),
        };
        let need = dtype.pack_size(count)?;
        let mut scratch = take_scratch(need)?;
        scratch.truncate(need);
        dtype.pack_unchecked(bytes, count, &mut scratch);
        count_staged(need);
        // SAFETY: the scratch's heap block belongs to the TypedRequest returned below, which
        // frees it only after the PML request completed (its Drop waits first), or never if
        // the request is forgotten (the scope then waits for the PML request). Nothing
        // writes the scratch meanwhile. On an error below nothing was lent.
        let lent = unsafe { UserBuf::from_slice(&scratch) };
        let id = self.start_send(
            lent,
            dest,
            tag,
            self.p2p_context(),
            SendMode::Standard,
            CommPattern::NonBlocking,
        )?;
        Ok(TypedRequest {
            inner: Some(scope.pending(self, id)),
            scratch,
            unpack: None,
        })
    }

    /// Non-blocking [`Communicator::recv_typed`]; `buf` stays borrowed until the end of
    /// `scope`, and a layout received through a scratch buffer is unpacked into it when the
    /// request completes.
    #[allow(unsafe_code)]
    pub fn irecv_typed<'s, T: bytemuck::Pod>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut [T],
        count: usize,
        dtype: &Datatype,
        source: impl Into<Src>,
        tag: i32,
    ) -> Result<TypedRequest<'s>> {
        let bytes: &'s mut [u8] = bytemuck::cast_slice_mut(buf);
        dtype.check_bounds(count, bytes.len())?;
        dtype.check_no_overlap(count)?;
        if let Some((start, len)) = dtype.contiguous_run(count) {
            let start = start.max(0) as usize;
            let r = self.irecv(scope, &mut bytes[start..start + len], source, tag)?;
            return Ok(TypedRequest::in_place(r));
        }
        let source = source.into();
        match source {
            Src::Null => {
                // Still checks the tag, as the plain receive does.
                let r = self.irecv::<u8>(scope, &mut [], source, tag)?;
                return Ok(TypedRequest::in_place(r));
            }
            Src::Negative(r) => return Err(Error::NegativeRank(r)),
            Src::Any | Src::Rank(_) => {}
        }
        let need = dtype.pack_size(count)?;
        let mut scratch = take_scratch(need)?;
        scratch.truncate(need);
        // SAFETY: as in `isend_typed`: the scratch is freed only after the PML request
        // completed, or leaked with a forgotten request; nothing else touches it meanwhile.
        let lent = unsafe { UserBuf::from_mut_slice(&mut scratch) };
        let id = self.start_recv(
            lent,
            source,
            tag,
            self.p2p_context(),
            CommPattern::NonBlocking,
        )?;
        Ok(TypedRequest {
            inner: Some(scope.pending(self, id)),
            scratch,
            unpack: Some(Unpack {
                bytes,
                count,
                dtype: dtype.clone(),
            }),
        })
    }

    // ---- collectives ----

    /// [`Communicator::bcast`] of `count` instances of `dtype` laid out in `buf`. Every
    /// member may use its own layout, as long as the bytes add up to the same.
    pub fn bcast_typed<T: bytemuck::Pod>(
        &self,
        buf: &mut [T],
        count: usize,
        dtype: &Datatype,
        root: usize,
    ) -> Result<()> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        if self.rank() == root {
            // The root's layout is only read: in place when it is one run, else packed.
            dtype.check_bounds(count, bytes.len())?;
            if let Some((start, len)) = dtype.contiguous_run(count) {
                let start = start.max(0) as usize;
                return self.bcast(&mut bytes[start..start + len], root);
            }
            let need = dtype.pack_size(count)?;
            return with_scratch(need, |s| {
                dtype.pack_unchecked(bytes, count, s);
                count_staged(need);
                self.bcast(s, root)
            });
        }
        with_recv_view(bytes, count, dtype, |view| {
            self.bcast(view, root)?;
            Ok(filled(root, view.len()))
        })
        .map(|_| ())
    }

    /// [`Communicator::reduce`] over `count` instances of `dtype` laid out in `send` (and,
    /// at the root, in `recv`, required there and ignored elsewhere): the elements the
    /// layout names are reduced element by element. The layout must consist of whole `T`s.
    pub fn reduce_typed<T: Reducible>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        count: usize,
        dtype: &Datatype,
        op: Op,
        root: usize,
    ) -> Result<()> {
        self.reduce_layout(
            send,
            recv,
            count,
            dtype,
            |s, r| self.reduce(s, r, op, root),
            self.rank() == root,
            "reduce_typed",
        )
    }

    /// [`Communicator::allreduce`] over `count` instances of `dtype` laid out in `send` and
    /// `recv` (the same layout on both sides, as in MPI): the elements the layout names are
    /// reduced element by element, and only those of `recv` are written. The layout must
    /// consist of whole `T`s.
    pub fn allreduce_typed<T: Reducible>(
        &self,
        send: &[T],
        recv: &mut [T],
        count: usize,
        dtype: &Datatype,
        op: Op,
    ) -> Result<()> {
        self.reduce_layout(
            send,
            Some(recv),
            count,
            dtype,
            |s, r| match r {
                Some(r) => self.allreduce(s, r, op),
                None => Err(Error::InvalidArgument(
                    "allreduce_typed: internal: no receive buffer".into(),
                )),
            },
            true,
            "allreduce_typed",
        )
    }

    /// Run the reduction `run` on the elements `count` instances of `dtype` name in `send`
    /// and, where `needs_recv`, `recv`: in place when the layout is one run, else on
    /// packed copies, the result unpacked into `recv`.
    #[allow(clippy::too_many_arguments)]
    fn reduce_layout<T: Reducible>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        count: usize,
        dtype: &Datatype,
        run: impl FnOnce(&[T], Option<&mut [T]>) -> Result<()>,
        needs_recv: bool,
        what: &'static str,
    ) -> Result<()> {
        let elem = std::mem::size_of::<T>();
        dtype.check_whole_elements(elem)?;
        dtype.check_bounds(count, std::mem::size_of_val(send))?;
        let recv = match (needs_recv, recv) {
            (false, _) => None,
            (true, Some(r)) => {
                dtype.check_bounds(count, std::mem::size_of_val(r))?;
                dtype.check_no_overlap(count)?;
                Some(r)
            }
            (true, None) => {
                return Err(Error::InvalidArgument(format!(
                    "{what}: the root must pass a receive buffer"
                )))
            }
        };
        let elem = elem.max(1);
        if let Some((start, len)) = dtype.contiguous_run(count) {
            let run_of = (start.max(0) as usize / elem)..((start.max(0) as usize + len) / elem);
            return run(&send[run_of.clone()], recv.map(|r| &mut r[run_of]));
        }
        let bytes = dtype.pack_size(count)?;
        let elems = bytes / elem;
        let zeroed = || -> Result<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(elems)
                .map_err(|_| DatatypeError::Allocation { bytes })?;
            v.resize(elems, T::zeroed());
            Ok(v)
        };
        let mut packed = zeroed()?;
        dtype.pack_unchecked(
            bytemuck::cast_slice(send),
            count,
            bytemuck::cast_slice_mut(&mut packed),
        );
        count_staged(bytes);
        let Some(recv) = recv else {
            return run(&packed, None);
        };
        let mut result = zeroed()?;
        run(&packed, Some(&mut result))?;
        dtype.unpack_unchecked(
            bytemuck::cast_slice(&result),
            bytemuck::cast_slice_mut(recv),
            count,
        );
        count_staged(bytes);
        Ok(())
    }

    /// [`Communicator::gather`] with layouts: `scount` instances of `sdtype` from every
    /// member, into `rcount` instances of `rdtype` per member at the root (member `r`'s
    /// block starts `r × rcount` instances in). `recv` is required at the root and ignored
    /// elsewhere; `scount × sdtype.size()` must equal `rcount × rdtype.size()`.
    pub fn gather_typed<S: bytemuck::Pod, R: bytemuck::Pod>(
        &self,
        send: &[S],
        scount: usize,
        sdtype: &Datatype,
        recv: Option<(&mut [R], usize, &Datatype)>,
        root: usize,
    ) -> Result<()> {
        let n = self.size();
        with_send_view(bytemuck::cast_slice(send), scount, sdtype, |view| {
            if self.rank() != root {
                return self.gather(view, None, root);
            }
            let (rbuf, rcount, rdtype) = recv.ok_or_else(|| {
                Error::InvalidArgument("gather_typed: the root must pass a receive buffer".into())
            })?;
            same_signature("gather_typed", view.len(), rdtype.pack_size(rcount)?)?;
            let total = instances("gather_typed", n, rcount)?;
            with_recv_view(bytemuck::cast_slice_mut(rbuf), total, rdtype, |rview| {
                self.gather(view, Some(&mut *rview), root)?;
                Ok(filled(root, rview.len()))
            })
            .map(|_| ())
        })
    }

    /// [`Communicator::scatter`] with layouts: the root's `send` holds `scount` instances of
    /// `sdtype` per member (member `r`'s block starts `r × scount` instances in); every
    /// member receives into `rcount` instances of `rdtype`. `send` is required at the root
    /// and ignored elsewhere.
    pub fn scatter_typed<S: bytemuck::Pod, R: bytemuck::Pod>(
        &self,
        send: Option<(&[S], usize, &Datatype)>,
        recv: &mut [R],
        rcount: usize,
        rdtype: &Datatype,
        root: usize,
    ) -> Result<()> {
        let n = self.size();
        with_recv_view(bytemuck::cast_slice_mut(recv), rcount, rdtype, |rview| {
            if self.rank() != root {
                self.scatter(None, &mut *rview, root)?;
                return Ok(filled(root, rview.len()));
            }
            let (sbuf, scount, sdtype) = send.ok_or_else(|| {
                Error::InvalidArgument("scatter_typed: the root must pass a send buffer".into())
            })?;
            same_signature("scatter_typed", sdtype.pack_size(scount)?, rview.len())?;
            let total = instances("scatter_typed", n, scount)?;
            with_send_view(bytemuck::cast_slice(sbuf), total, sdtype, |view| {
                self.scatter(Some(view), &mut *rview, root)
            })?;
            Ok(filled(root, rview.len()))
        })
        .map(|_| ())
    }

    /// [`Communicator::allgather`] with layouts: `scount` instances of `sdtype` from every
    /// member into `rcount` instances of `rdtype` per member at every member.
    pub fn allgather_typed<S: bytemuck::Pod, R: bytemuck::Pod>(
        &self,
        send: &[S],
        scount: usize,
        sdtype: &Datatype,
        recv: &mut [R],
        rcount: usize,
        rdtype: &Datatype,
    ) -> Result<()> {
        same_signature(
            "allgather_typed",
            sdtype.pack_size(scount)?,
            rdtype.pack_size(rcount)?,
        )?;
        let total = instances("allgather_typed", self.size(), rcount)?;
        with_send_view(bytemuck::cast_slice(send), scount, sdtype, |view| {
            with_recv_view(bytemuck::cast_slice_mut(recv), total, rdtype, |rview| {
                self.allgather(view, &mut *rview)?;
                Ok(filled(self.rank(), rview.len()))
            })
            .map(|_| ())
        })
    }

    /// [`Communicator::alltoall`] with layouts: `send` holds `scount` instances of `sdtype`
    /// for each member in rank order, `recv` gets `rcount` instances of `rdtype` from each.
    pub fn alltoall_typed<S: bytemuck::Pod, R: bytemuck::Pod>(
        &self,
        send: &[S],
        scount: usize,
        sdtype: &Datatype,
        recv: &mut [R],
        rcount: usize,
        rdtype: &Datatype,
    ) -> Result<()> {
        same_signature(
            "alltoall_typed",
            sdtype.pack_size(scount)?,
            rdtype.pack_size(rcount)?,
        )?;
        let n = self.size();
        let stotal = instances("alltoall_typed", n, scount)?;
        let rtotal = instances("alltoall_typed", n, rcount)?;
        with_send_view(bytemuck::cast_slice(send), stotal, sdtype, |view| {
            with_recv_view(bytemuck::cast_slice_mut(recv), rtotal, rdtype, |rview| {
                self.alltoall(view, &mut *rview)?;
                Ok(filled(self.rank(), rview.len()))
            })
            .map(|_| ())
        })
    }
}
