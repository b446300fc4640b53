//! One-sided communication (MPI-3 RMA): windows (`MPI_Win_create`, `_allocate`,
//! `_create_dynamic` with `_attach`/`_detach`, `_free`), the operations (`MPI_Put`, `MPI_Get`,
//! `MPI_Accumulate`, `MPI_Get_accumulate`, `MPI_Fetch_and_op`, `MPI_Compare_and_swap` and the
//! request-based `MPI_R*`), every synchronization, and the window's name, group, attributes,
//! info and error handler, over [`rmca::RawWindow`] (the `osc` framework's component: osc-am).
//!
//! Derived datatypes: the origin side is packed (or unpacked) here with the datatype engine;
//! the target side travels as the runs of bytes the target datatype covers (its typemap,
//! [`rmca::framework::osc::Layout`]), which the target checks against its memory before
//! writing anything. Results of fetching operations (`MPI_Get`, ...) land in the program's
//! buffer when the synchronization that completes them returns (or their request completes).
//! A module that reaches the target's memory itself (osc-sm, through
//! [`rmca::framework::osc::OscDirect`]) completes each operation within the call instead, on
//! the program's own buffers: no packed copy for a contiguous origin, no layout allocated for
//! a contiguous target type, the result written straight into the program's buffer.
//!
//! Errors go to the window's error handler (`MPI_ERRORS_ARE_FATAL` until set), with the RMA
//! classes: `MPI_ERR_RMA_RANGE` for memory outside the target's window,
//! `MPI_ERR_RMA_SYNC` for an operation or synchronization outside its epoch,
//! `MPI_ERR_LOCKTYPE`, `MPI_ERR_RMA_ATTACH`, `MPI_ERR_RMA_FLAVOR`, `MPI_ERR_WIN`.
#![allow(non_snake_case)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::rc::Rc;

use rmca::framework::buffer::UserBuf;
use rmca::framework::osc::{
    AccOp, DirectAtomics, DirectView, Elem, Layout, LentPath, LockKind, OscError, SyncCall,
};
use rmca::window::Flavor;
use rmca::RawWindow;

use super::types::Ty;
use super::{call, invoke, put, put_string, raise};
use crate::abi::*;
use crate::state::{self, Confined, ErrHandler, ErrhKind, MpiError, MpiResult, ReqEntry, ReqState};
use rmca_mpi_export::export;

use super::info::{MPI_ERR_INFO, MPI_ERR_WIN};

/// Handles of windows: this plus an index.
pub const WIN_BASE: Handle = DYNAMIC_BASE * 29;
const MAX_WINS: usize = DYNAMIC_BASE;

/// The values the predefined attributes point to (boxed: the program keeps the pointers).
struct Attrs {
    base: usize,
    size: isize,
    disp_unit: c_int,
    flavor: c_int,
    model: c_int,
}

/// A fetching operation's result waiting to land in the program's buffer.
/// Shared by the window (whose synchronizations land it) and the operation's request, if
/// any (whose completion lands it): whichever sees the result first writes it, once.
struct Landing {
    id: u64,
    ty: Ty,
    buf: usize,
    count: usize,
    /// Bytes landed, or the operation's error, once it completed.
    outcome: Option<Result<usize, OscError>>,
}

impl Landing {
    /// The outcome if the operation completed (landing its result now if not done yet).
    fn try_land(&mut self, w: &RawWindow) -> Option<Result<usize, OscError>> {
        if self.outcome.is_none() {
            let r = w.test_op(self.id)?;
            self.outcome = Some(match r {
                Ok(bytes) => {
                    // SAFETY: the program's result buffer, valid until the synchronization
                    // or request that completes the operation (MPI's contract): one of them
                    // is running now.
                    unsafe { self.ty.unpack(&bytes, self.buf as *mut c_void, self.count) };
                    Ok(bytes.len())
                }
                Err(rmca::Error::Rma(e)) => Err(e),
                Err(e) => Err(OscError::Transport(e.to_string())),
            });
        }
        self.outcome.clone()
    }
}

type SharedLanding = Rc<RefCell<Landing>>;

struct WinEntry {
    raw: Rc<RawWindow>,
    errhandler: ErrHandler,
    name: String,
    attrs: Box<Attrs>,
    info: Vec<(String, String)>,
    landings: Vec<SharedLanding>,
    /// The module's direct view (osc-sm: [`RawWindow::direct_view`]), asked once at
    /// creation: the small put, get and flush go through it with no call into the window.
    view: Option<Rc<DirectView>>,
    /// The module's lent path (osc-rdma: [`RawWindow::lent_path`]), asked once at
    /// creation: likewise for the small put, get and flush of a created window.
    lent: Option<Rc<dyn LentPath>>,
    /// The last group `MPI_Win_post` (0) and `MPI_Win_start` (1) named, with its window
    /// ranks ([`pscw_ranks`]): a program naming the same group every epoch (OSU's loops, a
    /// halo exchange) has it translated once.
    pscw_groups: [Option<(rmca::Group, Vec<usize>)>; 2],
}

/// The windows, by handle less [`WIN_BASE`] (process-wide: see [`Confined`]).
static WINS: Confined<Vec<Option<WinEntry>>> = Confined::new("windows");

fn bad_win(win: Handle) -> MpiError {
    MpiError::new(
        MPI_ERR_WIN,
        format!("invalid window {win:#x}: not one made by MPI_Win_create/_allocate/_create_dynamic and not freed"),
    )
}

fn index(win: Handle) -> Option<usize> {
    win.checked_sub(WIN_BASE).filter(|&i| i < MAX_WINS)
}

/// Run `f` on the entry of `win`.
fn with_win<R>(win: Handle, f: impl FnOnce(&mut WinEntry) -> MpiResult<R>) -> MpiResult<R> {
    state::with(|_| Ok(()))?;
    WINS.with(|t| {
        let e = index(win)
            .and_then(|i| t.get_mut(i))
            .and_then(Option::as_mut)
            .ok_or_else(|| bad_win(win))?;
        f(e)
    })?
}

/// The window behind `win`.
fn raw(win: Handle) -> MpiResult<Rc<RawWindow>> {
    with_win(win, |e| Ok(e.raw.clone()))
}

/// Run the body of window function `fname`: errors go to `win`'s error handler (to
/// `MPI_COMM_WORLD`'s when `win` is not a window).
fn call_win(fname: &'static str, win: Handle, f: impl FnOnce() -> MpiResult<()>) -> c_int {
    match super::caught(f) {
        Ok(()) => MPI_SUCCESS,
        Err(e) => {
            let handler = WINS
                .with(|t| {
                    index(win)
                        .and_then(|i| t.get(i))
                        .and_then(Option::as_ref)
                        .map(|e| e.errhandler)
                })
                .ok()
                .flatten();
            match handler {
                Some(h) => invoke(fname, h, win, e),
                None => raise(fname, MPI_COMM_WORLD, e),
            }
        }
    }
}

/// The MPI error of a one-sided refusal.
fn osc_error(e: OscError) -> MpiError {
    MpiError::new(class_of(&e), e.to_string())
}

/// The MPI error class of a one-sided refusal.
pub fn class_of(e: &OscError) -> c_int {
    match e {
        OscError::Range(_) => MPI_ERR_RMA_RANGE,
        OscError::Sync(_) => MPI_ERR_RMA_SYNC,
        OscError::Rank(_) => MPI_ERR_RANK,
        OscError::Op(_) => MPI_ERR_OP,
        OscError::Attach(_) => MPI_ERR_RMA_ATTACH,
        OscError::Arg(_) => MPI_ERR_ARG,
        OscError::Transport(_) => MPI_ERR_OTHER,
    }
}

/// The MPI error of an rmca error from a window call.
fn win_error(e: rmca::Error) -> MpiError {
    match e {
        rmca::Error::Rma(o) => osc_error(o),
        e => MpiError::from(e),
    }
}

// ---- creation and freeing ----

fn info_entries(info: Handle) -> MpiResult<Vec<(String, String)>> {
    super::info::entries_of(info).map_err(|e| MpiError::new(MPI_ERR_INFO, e.msg.clone()))
}

/// The memory a window is made over.
enum Mem {
    /// The program's (`MPI_Win_create`, empty for dynamic windows), at this `MPI_WIN_BASE`.
    Given(UserBuf, usize),
    /// Bytes the window allocates (`MPI_Win_allocate`, `_allocate_shared`: the flavor says).
    Alloc(usize),
}

/// Make a window on `comm` over `mem`; its base address (`MPI_WIN_BASE`).
fn make(
    comm: Handle,
    mem: Mem,
    disp_unit: isize,
    flavor: Flavor,
    info: Handle,
    win: *mut Handle,
) -> MpiResult<usize> {
    if win.is_null() {
        return Err(super::null_argument("win"));
    }
    let c = super::communicator(comm)?;
    let disp = usize::try_from(disp_unit)
        .ok()
        .filter(|&d| d > 0)
        .ok_or_else(|| {
            MpiError::new(
                MPI_ERR_ARG,
                format!("disp_unit {disp_unit} is not positive"),
            )
        })?;
    let info = info_entries(info)?;
    let no_locks = info
        .iter()
        .any(|(k, v)| k == "no_locks" && v.eq_ignore_ascii_case("true"));
    let (w, mem, base) = match mem {
        Mem::Given(m, base) => {
            // SAFETY: `m` is the program's window memory, valid until MPI_Win_free as MPI
            // requires of MPI_Win_create.
            let w = unsafe {
                RawWindow::create_with_host(&c, m, disp, flavor, no_locks, Some(host_acc))
            }
            .map_err(win_error)?;
            (w, m, base)
        }
        Mem::Alloc(len) => {
            let (w, m) = RawWindow::allocate(
                &c,
                len,
                disp,
                flavor == Flavor::Shared,
                no_locks,
                Some(host_acc),
            )
            .map_err(|e| match e {
                // A node-spanning communicator is the shared flavor's own error class.
                rmca::Error::Rma(OscError::Arg(m)) if flavor == Flavor::Shared => {
                    MpiError::new(MPI_ERR_RMA_SHARED, m)
                }
                e => win_error(e),
            })?;
            let base = if len == 0 { 0 } else { m.addr() };
            (w, m, base)
        }
    };
    let attrs = Box::new(Attrs {
        base,
        size: mem.len() as isize,
        disp_unit: c_int::try_from(disp_unit).unwrap_or(c_int::MAX),
        flavor: match flavor {
            Flavor::Create => MPI_WIN_FLAVOR_CREATE,
            Flavor::Allocate => MPI_WIN_FLAVOR_ALLOCATE,
            Flavor::Dynamic => MPI_WIN_FLAVOR_DYNAMIC,
            Flavor::Shared => MPI_WIN_FLAVOR_SHARED,
        },
        model: MPI_WIN_UNIFIED,
    });
    let entry = WinEntry {
        view: w.direct_view(),
        lent: w.lent_path(),
        raw: Rc::new(w),
        errhandler: ErrHandler::Fatal,
        name: String::new(),
        attrs,
        info,
        landings: Vec::new(),
        pscw_groups: [None, None],
    };
    let h = WINS.with(|t| {
        super::table_insert(t, entry, (WIN_BASE, MAX_WINS), "windows", "MPI_Win_free")
    })??;
    // SAFETY: non-null (checked), the caller's handle.
    unsafe { put(win, h, "win") }?;
    Ok(base)
}

fn size_arg(size: isize) -> MpiResult<usize> {
    usize::try_from(size)
        .map_err(|_| MpiError::new(MPI_ERR_ARG, format!("window size {size} is negative")))
}

/// `MPI_Win_create` and `_c`.
///
/// # Safety
/// MPI_Win_create's contract.
unsafe fn win_create(
    fname: &'static str,
    base: *mut c_void,
    size: isize,
    disp_unit: isize,
    info: Handle,
    comm: Handle,
    win: *mut Handle,
) -> c_int {
    call(fname, comm, || {
        let len = size_arg(size)?;
        if len > 0 && base.is_null() {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                "base is NULL with a non-empty window",
            ));
        }
        // SAFETY: MPI_Win_create's contract: `base` holds `size` bytes until MPI_Win_free.
        let mem = if len == 0 {
            UserBuf::empty()
        } else {
            unsafe { UserBuf::from_raw_parts_mut(base.cast(), len) }
        };
        make(
            comm,
            Mem::Given(mem, base as usize),
            disp_unit,
            Flavor::Create,
            info,
            win,
        )
        .map(|_| ())
    })
}

/// `MPI_Win_create`: a window over the program's memory.
#[export]
pub unsafe extern "C" fn MPI_Win_create(
    base: *mut c_void,
    size: MPI_Aint,
    disp_unit: c_int,
    info: Handle,
    comm: Handle,
    win: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        win_create(
            "MPI_Win_create",
            base,
            size,
            disp_unit as isize,
            info,
            comm,
            win,
        )
    }
}

/// `MPI_Win_create_c`: `MPI_Win_create` with an `MPI_Aint` displacement unit.
#[export]
pub unsafe extern "C" fn MPI_Win_create_c(
    base: *mut c_void,
    size: MPI_Aint,
    disp_unit: MPI_Aint,
    info: Handle,
    comm: Handle,
    win: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { win_create("MPI_Win_create_c", base, size, disp_unit, info, comm, win) }
}

/// `MPI_Win_allocate` and `_c`.
///
/// # Safety
/// MPI_Win_allocate's contract (`baseptr` is a `void **`).
unsafe fn win_allocate(
    fname: &'static str,
    size: isize,
    disp_unit: isize,
    info: Handle,
    comm: Handle,
    baseptr: *mut c_void,
    win: *mut Handle,
) -> c_int {
    call(fname, comm, || {
        let len = size_arg(size)?;
        if baseptr.is_null() {
            return Err(super::null_argument("baseptr"));
        }
        // The window owns the memory (osc-sm's segment, or a heap block) until MPI_Win_free.
        let p = make(
            comm,
            Mem::Alloc(len),
            disp_unit,
            Flavor::Allocate,
            info,
            win,
        )?;
        // SAFETY: MPI_Win_allocate's contract: `baseptr` points to a `void *`.
        unsafe { baseptr.cast::<*mut c_void>().write(p as *mut c_void) };
        Ok(())
    })
}

/// `MPI_Win_allocate`: a window over memory the library allocates.
#[export]
pub unsafe extern "C" fn MPI_Win_allocate(
    size: MPI_Aint,
    disp_unit: c_int,
    info: Handle,
    comm: Handle,
    baseptr: *mut c_void,
    win: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        win_allocate(
            "MPI_Win_allocate",
            size,
            disp_unit as isize,
            info,
            comm,
            baseptr,
            win,
        )
    }
}

/// `MPI_Win_allocate_c`.
#[export]
pub unsafe extern "C" fn MPI_Win_allocate_c(
    size: MPI_Aint,
    disp_unit: MPI_Aint,
    info: Handle,
    comm: Handle,
    baseptr: *mut c_void,
    win: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        win_allocate(
            "MPI_Win_allocate_c",
            size,
            disp_unit,
            info,
            comm,
            baseptr,
            win,
        )
    }
}

/// `MPI_Win_allocate_shared` and `_c`.
///
/// # Safety
/// MPI_Win_allocate_shared's contract (`baseptr` is a `void **`).
unsafe fn win_allocate_shared(
    fname: &'static str,
    size: isize,
    disp_unit: isize,
    info: Handle,
    comm: Handle,
    baseptr: *mut c_void,
    win: *mut Handle,
) -> c_int {
    call(fname, comm, || {
        let len = size_arg(size)?;
        if baseptr.is_null() || win.is_null() {
            return Err(super::null_argument(if win.is_null() {
                "win"
            } else {
                "baseptr"
            }));
        }
        let c = super::communicator(comm)?;
        if c.is_inter() {
            return Err(MpiError::new(
                MPI_ERR_COMM,
                "windows are made on intra-communicators only",
            ));
        }
        // One segment every member maps (osc-sm's, or mapped for osc-am when it is forced),
        // owned by the window until MPI_Win_free; refused if a member is on another node.
        let p = make(comm, Mem::Alloc(len), disp_unit, Flavor::Shared, info, win)?;
        // SAFETY: MPI_Win_allocate_shared's contract: `baseptr` points to a `void *`.
        unsafe { baseptr.cast::<*mut c_void>().write(p as *mut c_void) };
        Ok(())
    })
}

/// `MPI_Win_allocate_shared`: a window over a segment every member maps (all must share a
/// node): each reaches the others' memory by load and store (`MPI_Win_shared_query`).
#[export]
pub unsafe extern "C" fn MPI_Win_allocate_shared(
    size: MPI_Aint,
    disp_unit: c_int,
    info: Handle,
    comm: Handle,
    baseptr: *mut c_void,
    win: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        win_allocate_shared(
            "MPI_Win_allocate_shared",
            size,
            disp_unit as isize,
            info,
            comm,
            baseptr,
            win,
        )
    }
}

/// `MPI_Win_allocate_shared_c`.
#[export]
pub unsafe extern "C" fn MPI_Win_allocate_shared_c(
    size: MPI_Aint,
    disp_unit: MPI_Aint,
    info: Handle,
    comm: Handle,
    baseptr: *mut c_void,
    win: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        win_allocate_shared(
            "MPI_Win_allocate_shared_c",
            size,
            disp_unit,
            info,
            comm,
            baseptr,
            win,
        )
    }
}

/// `MPI_Win_shared_query` and `_c`: where member `rank`'s memory is mapped here, its size
/// and displacement unit (`MPI_PROC_NULL`: the first member with memory).
///
/// # Safety
/// The call's contract: `size` an `MPI_Aint`, `disp_unit` an int (`_c`: an `MPI_Aint`),
/// `baseptr` a `void **`.
unsafe fn shared_query(
    fname: &'static str,
    win: Handle,
    rank: c_int,
    size: *mut MPI_Aint,
    disp_unit: *mut c_void,
    wide: bool,
    baseptr: *mut c_void,
) -> c_int {
    call_win(fname, win, || {
        // Other flavors (MPI 4.1): only this process's memory is reachable by load and
        // store; the others' come back as size 0 and a NULL base.
        let (w, own) = with_win(win, |e| Ok((e.raw.clone(), e.attrs.base)))?;
        let me = w.communicator().rank();
        let n = w.communicator().size();
        let r = if rank == MPI_PROC_NULL {
            (0..n)
                .find(|&r| w.target(r).is_some_and(|t| t.size > 0))
                .unwrap_or(0)
        } else {
            usize::try_from(rank)
                .ok()
                .filter(|&r| r < n)
                .ok_or_else(|| {
                    MpiError::new(
                        MPI_ERR_RANK,
                        format!("rank {rank} is not in the window's group (size {n})"),
                    )
                })?
        };
        let t = w.target(r).unwrap_or_default();
        if size.is_null() || disp_unit.is_null() || baseptr.is_null() {
            return Err(super::null_argument("size, disp_unit or baseptr"));
        }
        let (p, size_of) = match w.shared_query(r) {
            // A member of no bytes has no memory to point to.
            Some((_, 0)) => (0, 0),
            Some((addr, size)) => (addr, size),
            None if r == me => (own, t.size),
            None => (0, 0),
        };
        // SAFETY: the call's contract for each out-argument (checked non-null).
        unsafe {
            size.write(size_of as MPI_Aint);
            if wide {
                disp_unit.cast::<MPI_Aint>().write(t.disp_unit as MPI_Aint);
            } else {
                disp_unit.cast::<c_int>().write(t.disp_unit as c_int);
            }
            baseptr.cast::<usize>().write(p);
        }
        Ok(())
    })
}

/// `MPI_Win_shared_query`.
#[export]
pub unsafe extern "C" fn MPI_Win_shared_query(
    win: Handle,
    rank: c_int,
    size: *mut MPI_Aint,
    disp_unit: *mut c_int,
    baseptr: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        shared_query(
            "MPI_Win_shared_query",
            win,
            rank,
            size,
            disp_unit.cast(),
            false,
            baseptr,
        )
    }
}

/// `MPI_Win_shared_query_c`.
#[export]
pub unsafe extern "C" fn MPI_Win_shared_query_c(
    win: Handle,
    rank: c_int,
    size: *mut MPI_Aint,
    disp_unit: *mut MPI_Aint,
    baseptr: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        shared_query(
            "MPI_Win_shared_query_c",
            win,
            rank,
            size,
            disp_unit.cast(),
            true,
            baseptr,
        )
    }
}

/// `MPI_Win_create_dynamic`: a window whose memory is attached later.
#[export]
pub unsafe extern "C" fn MPI_Win_create_dynamic(
    info: Handle,
    comm: Handle,
    win: *mut Handle,
) -> c_int {
    call("MPI_Win_create_dynamic", comm, || {
        make(
            comm,
            Mem::Given(UserBuf::empty(), 0),
            1,
            Flavor::Dynamic,
            info,
            win,
        )
        .map(|_| ())
    })
}

/// `MPI_Win_attach`: expose `size` bytes at `base` in a dynamic window.
#[export]
pub unsafe extern "C" fn MPI_Win_attach(win: Handle, base: *mut c_void, size: MPI_Aint) -> c_int {
    call_win("MPI_Win_attach", win, || {
        let w = raw(win)?;
        let len = size_arg(size)?;
        if w.flavor() != Flavor::Dynamic {
            return Err(MpiError::new(
                MPI_ERR_RMA_FLAVOR,
                "MPI_Win_attach on a window not made by MPI_Win_create_dynamic",
            ));
        }
        if base.is_null() && len > 0 {
            return Err(super::null_argument("base"));
        }
        if len == 0 {
            return Ok(());
        }
        // SAFETY: MPI_Win_attach's contract: the memory stays valid until detached.
        unsafe { w.attach(UserBuf::from_raw_parts_mut(base.cast(), len)) }.map_err(win_error)
    })
}

/// `MPI_Win_detach`.
#[export]
pub unsafe extern "C" fn MPI_Win_detach(win: Handle, base: *const c_void) -> c_int {
    call_win("MPI_Win_detach", win, || {
        let w = raw(win)?;
        if w.flavor() != Flavor::Dynamic {
            return Err(MpiError::new(
                MPI_ERR_RMA_FLAVOR,
                "MPI_Win_detach on a window not made by MPI_Win_create_dynamic",
            ));
        }
        w.detach(base as u64).map_err(win_error)
    })
}

/// `MPI_Win_free` (collective): ends the window once no member can reach it any more.
#[export]
pub unsafe extern "C" fn MPI_Win_free(win: *mut Handle) -> c_int {
    if win.is_null() {
        return call("MPI_Win_free", MPI_COMM_WORLD, || {
            Err(super::null_argument("win"))
        });
    }
    // SAFETY: non-null, the caller's handle.
    let h = unsafe { *win };
    call_win("MPI_Win_free", h, || {
        let w = raw(h)?;
        w.free().map_err(win_error)?;
        super::attr::delete_all(super::attr::Kind::Win, h)?;
        let entry = WINS.with(|t| t[index(h).expect("valid")].take())?;
        drop(entry);
        // SAFETY: as above.
        unsafe { win.write(MPI_WIN_NULL) };
        Ok(())
    })
}

// ---- operations ----

/// A checked count (`int` or `MPI_Count`).
fn count(n: i64, what: &str) -> MpiResult<usize> {
    usize::try_from(n).map_err(|_| {
        MpiError::new(
            MPI_ERR_COUNT,
            format!("{what} count {n} is negative: counts are >= 0"),
        )
    })
}

/// The target rank: `None` for `MPI_PROC_NULL` (the operation does nothing).
fn target_of(w: &RawWindow, rank: c_int) -> MpiResult<Option<usize>> {
    if rank == MPI_PROC_NULL {
        return Ok(None);
    }
    let size = w.communicator().size();
    usize::try_from(rank)
        .ok()
        .filter(|&r| r < size)
        .map(Some)
        .ok_or_else(|| {
            MpiError::new(
                MPI_ERR_RANK,
                format!("target rank {rank} is not in the window's group (size {size})"),
            )
        })
}

/// The runs `count` instances of `ty` cover at the target.
fn layout(ty: &Ty, count: usize) -> Layout {
    // A predefined type with no gap is one run: no datatype to build per operation.
    if let Ty::Predefined(_, t) = ty {
        if t.size as isize == t.extent as isize {
            return Layout::contiguous((t.size * count) as u64);
        }
    }
    let mut runs = Vec::new();
    ty.layout().for_each_run(count, |off, len| {
        runs.push((off as i64, len as u64));
        true
    });
    Layout { runs }
}

/// What issuing an operation led to.
enum Issued {
    /// Completed within the call (a module reaching the target's memory itself).
    Done,
    /// Operation `id`, with where its result lands (fetching operations).
    Id(u64, Option<(Ty, usize, usize)>),
}

/// Run `f` on the runs `count` instances of `ty` cover at the target: one run built on the
/// stack for a contiguous type (no allocation per operation), the typemap's otherwise.
fn with_runs<R>(ty: &Ty, count: usize, f: impl FnOnce(&[(i64, u64)]) -> R) -> R {
    match ty.run(count) {
        Some((_, 0)) => f(&[]),
        Some((off, len)) => f(&[(off as i64, len as u64)]),
        None => f(&layout(ty, count).runs),
    }
}

/// The origin's (or result's) `len` bytes against the target's `runs`: the same amount of
/// data, as matching type signatures give.
fn signatures_match(what: &str, len: usize, runs: &[(i64, u64)]) -> MpiResult<()> {
    let target: u64 = runs.iter().map(|&(_, l)| l).sum();
    if target != len as u64 {
        return Err(MpiError::new(
            MPI_ERR_TYPE,
            format!(
                "the {what} {len} bytes, the target datatype {target} (their type signatures must match)"
            ),
        ));
    }
    Ok(())
}

/// Do `data` and the `len` bytes at `buf` overlap?
fn overlaps(data: &[u8], buf: *mut c_void, len: usize) -> bool {
    let (a, b) = (data.as_ptr() as usize, buf as usize);
    !data.is_empty() && len > 0 && a < b.wrapping_add(len) && b < a + data.len()
}

/// Run `f` on the bytes of `n` elements of `ty` at `buf` (`len` of them): the program's
/// buffer itself when they are one run, else a staging buffer unpacked into it after `f`
/// succeeded.
///
/// # Safety
/// `buf` holds `n` elements of `ty`, writable and not otherwise accessed during the call.
unsafe fn into_buffer(
    ty: &Ty,
    buf: *mut c_void,
    n: usize,
    len: usize,
    f: impl FnOnce(&mut [u8]) -> Result<(), OscError>,
) -> Result<(), OscError> {
    // SAFETY: the caller's contract.
    unsafe { into_buffer_if(ty, buf, n, len, |o| Some(f(o))) }.unwrap_or(Ok(()))
}

/// An accumulate done within the call, given where its result goes (`None`: no result):
/// `None` when declined (nothing done).
type AtOnce<'a> = dyn FnMut(Option<&mut [u8]>) -> Option<Result<(), OscError>> + 'a;

/// [`into_buffer`] for an `f` that may decline (`None`: nothing done, nothing unpacked).
///
/// # Safety
/// As [`into_buffer`].
unsafe fn into_buffer_if(
    ty: &Ty,
    buf: *mut c_void,
    n: usize,
    len: usize,
    f: impl FnOnce(&mut [u8]) -> Option<Result<(), OscError>>,
) -> Option<Result<(), OscError>> {
    match ty.run(n) {
        // SAFETY: the caller's contract; the run is the elements' bytes.
        Some((off, l)) => {
            f(unsafe { super::bytes_mut(buf.cast::<u8>().wrapping_offset(off).cast(), l) })
        }
        None => {
            let mut staging = vec![0u8; len];
            let r = f(&mut staging)?;
            if r.is_ok() {
                // SAFETY: the caller's contract.
                unsafe { ty.unpack(&staging, buf, n) };
            }
            Some(r)
        }
    }
}

/// The target's arithmetic for the elements Rust has no number for (C `long double`, complex
/// products): the C library's own ([`super::op_long`]), the same the reductions run.
fn host_acc(op: AccOp, elem: Elem, target: &mut [u8], origin: &[u8]) -> bool {
    use super::op_long::Special;
    use rmca::coll::Op;
    let rop = match op {
        AccOp::Sum => Op::Sum,
        AccOp::Prod => Op::Prod,
        AccOp::Min => Op::Min,
        AccOp::Max => Op::Max,
        _ => return false,
    };
    let sp = match elem {
        Elem::LongDouble => Special::LongDouble(rop),
        Elem::LongDoubleComplex => Special::LongDoubleComplex(rop),
        Elem::ComplexF32 if rop == Op::Prod => Special::ComplexProd32,
        Elem::ComplexF64 if rop == Op::Prod => Special::ComplexProd64,
        _ => return false,
    };
    fn each<const N: usize>(sp: Special, target: &mut [u8], origin: &[u8]) {
        for (t, o) in target.chunks_exact_mut(N).zip(origin.chunks_exact(N)) {
            let r = sp.combine::<N>(
                t.try_into().expect("a whole element"),
                o.try_into().expect("a whole element"),
            );
            t.copy_from_slice(&r);
        }
    }
    match sp.size() {
        8 => each::<8>(sp, target, origin),
        16 => each::<16>(sp, target, origin),
        32 => each::<32>(sp, target, origin),
        _ => return false,
    }
    true
}

/// The accumulate operation and element type of `op` on `dt` (the origin datatype; the
/// target's must be built of the same predefined type).
fn acc_of(op: Handle, ty: &Ty, tty: &Ty) -> MpiResult<(AccOp, Elem)> {
    let base = ty.reduction_base()?;
    let tbase = tty.reduction_base()?;
    if base.name != tbase.name {
        return Err(MpiError::new(
            MPI_ERR_TYPE,
            format!(
                "the origin datatype is made of {}, the target's of {}: an accumulate needs the same predefined type",
                base.name, tbase.name
            ),
        ));
    }
    let elem = |e: crate::dtype::Elem| match e {
        crate::dtype::Elem::I8 => Elem::I8,
        crate::dtype::Elem::I16 => Elem::I16,
        crate::dtype::Elem::I32 => Elem::I32,
        crate::dtype::Elem::I64 => Elem::I64,
        crate::dtype::Elem::U8 => Elem::U8,
        crate::dtype::Elem::U16 => Elem::U16,
        crate::dtype::Elem::U32 => Elem::U32,
        crate::dtype::Elem::U64 => Elem::U64,
        crate::dtype::Elem::F32 => Elem::F32,
        crate::dtype::Elem::F64 => Elem::F64,
    };
    if op == MPI_REPLACE || op == MPI_NO_OP {
        let acc = if op == MPI_REPLACE {
            AccOp::Replace
        } else {
            AccOp::NoOp
        };
        return Ok((acc, base.elem.map_or(Elem::Byte, elem)));
    }
    if op == MPI_MINLOC || op == MPI_MAXLOC {
        use super::op::PairValue;
        let unsupported = || {
            MpiError::new(
                MPI_ERR_OP,
                format!("MPI_MINLOC/MPI_MAXLOC one-sided on {}: rmca supports MPI_SHORT_INT, MPI_2INT, MPI_LONG_INT, MPI_FLOAT_INT, MPI_DOUBLE_INT and MPI_LONG_DOUBLE_INT", base.name),
            )
        };
        return match super::op::reducer(op, op_dt(ty), ty)? {
            super::op::Reducer::Pair {
                max,
                value,
                index_at,
                size,
            } => {
                let e = match (value, index_at, size) {
                    (PairValue::I16, 2, 6) => Elem::PairI16,
                    (PairValue::I32, 4, 8) => Elem::PairI32,
                    (PairValue::I64, 8, 12) => Elem::PairI64,
                    (PairValue::F32, 4, 8) => Elem::PairF32,
                    (PairValue::F64, 8, 12) => Elem::PairF64,
                    (PairValue::LongDouble, 16, 20) => Elem::PairLongDouble,
                    _ => return Err(unsupported()),
                };
                Ok((if max { AccOp::MaxLoc } else { AccOp::MinLoc }, e))
            }
            _ => Err(unsupported()),
        };
    }
    use rmca::coll::Op;
    match super::op::reducer(op, op_dt(ty), ty)? {
        super::op::Reducer::Builtin(o, e) => Ok((
            rmca::window::accumulate_op(o).expect("MINLOC/MAXLOC handled above"),
            elem(e),
        )),
        super::op::Reducer::Special(sp) => {
            use super::op_long::Special;
            let acc = |o: Op| match o {
                Op::Sum => AccOp::Sum,
                Op::Prod => AccOp::Prod,
                Op::Min => AccOp::Min,
                _ => AccOp::Max,
            };
            Ok(match sp {
                Special::LongDouble(o) => (acc(o), Elem::LongDouble),
                Special::LongDoubleComplex(o) => (acc(o), Elem::LongDoubleComplex),
                Special::ComplexProd32 => (AccOp::Prod, Elem::ComplexF32),
                Special::ComplexProd64 => (AccOp::Prod, Elem::ComplexF64),
            })
        }
        _ => Err(MpiError::new(
            MPI_ERR_OP,
            "one-sided accumulates take predefined operations only (MPI 5.0 section 12.3.4)",
        )),
    }
}

/// The handle `reducer` wants for a user operation's datatype (unused for predefined ops).
fn op_dt(ty: &Ty) -> Handle {
    match ty {
        Ty::Predefined(h, _) => *h,
        Ty::Derived(_) => MPI_DATATYPE_NULL,
    }
}

/// Keep the landing of fetching operation `id` on `win`: the synchronization that completes
/// it (or its request) writes its result.
fn keep_landing(
    win: Handle,
    id: u64,
    dest: Option<(Ty, usize, usize)>,
) -> MpiResult<Option<SharedLanding>> {
    let Some((ty, buf, count)) = dest else {
        return Ok(None);
    };
    let l = Rc::new(RefCell::new(Landing {
        id,
        ty,
        buf,
        count,
        outcome: None,
    }));
    with_win(win, |e| {
        e.landings.push(l.clone());
        Ok(())
    })?;
    Ok(Some(l))
}

/// Write every completed fetching operation's result into its buffer.
fn land(win: Handle) -> MpiResult<()> {
    let (w, landings) = with_win(win, |e| {
        Ok((e.raw.clone(), std::mem::take(&mut e.landings)))
    })?;
    if landings.is_empty() {
        return Ok(());
    }
    let mut keep = Vec::new();
    let mut first_err = None;
    for l in landings {
        match l.borrow_mut().try_land(&w) {
            None => keep.push(l.clone()),
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                first_err.get_or_insert(osc_error(e));
            }
        }
    }
    with_win(win, |e| {
        keep.append(&mut e.landings);
        e.landings = keep;
        Ok(())
    })?;
    first_err.map_or(Ok(()), Err)
}

/// What a call asks of an operation.
enum Kind {
    Put,
    Get,
    Acc(Handle),
    GetAcc(Handle),
}

/// The request of a request-based operation: complete when its result landed (at once for
/// the operations without result: their data is copied when they start).
struct RmaRequest {
    /// The window itself: the request is polled inside request calls, which hold the
    /// library's state (no handle lookup is possible there).
    win: Rc<RawWindow>,
    id: u64,
    landing: Option<SharedLanding>,
}

impl std::fmt::Debug for RmaRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RmaRequest")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl rmca::raw::CustomOp for RmaRequest {
    fn poll(&mut self) -> Option<rmca::Result<rmca::Status>> {
        let outcome = match &self.landing {
            Some(l) => l.borrow_mut().try_land(&self.win)?,
            None => self
                .win
                .test_op(self.id)?
                .map(|b| b.len())
                .map_err(|e| match e {
                    rmca::Error::Rma(o) => o,
                    e => OscError::Transport(e.to_string()),
                }),
        };
        Some(
            outcome
                .map(|bytes| rmca::Status {
                    source: 0,
                    tag: MPI_ANY_TAG,
                    bytes,
                    cancelled: false,
                })
                .map_err(rmca::Error::Rma),
        )
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// The byte length of `n` elements of predefined datatype `dt`, when the fast path of
/// [`put_get_fast`] may take them as they are: a predefined datatype of one run, a
/// positive count, no overflow (`None` otherwise: the general path decides).
#[inline(always)]
fn predefined_bytes(n: i64, dt: Handle) -> Option<usize> {
    let size = crate::dtype::predefined_size(dt)?;
    let n = usize::try_from(n).ok().filter(|&n| n > 0)?;
    size.checked_mul(n).filter(|&l| l <= isize::MAX as usize)
}

/// The fast path of `MPI_Put` and `MPI_Get` (`get`): predefined datatypes on both sides
/// moving the same bytes (what the general path's checks reduce to for them), with one
/// lookup of the window, no datatype resolved, no layout built and no error-handler frame:
/// - a window with a direct view (osc-sm): one copy between the program's buffer and the
///   target's memory, once the view placed the bytes (an open access epoch, inside the
///   target's memory; what Open MPI's osc/sm put does, the epoch checked besides);
/// - a window with a lent path (osc-rdma on a member of its node): the program's buffer
///   queued there for the flush's CMA call, no call into the window;
/// - otherwise a window whose module is not direct: the buffer lent to the module as one
///   run ([`RawWindow::put_lent`], [`RawWindow::get_lent`]: osc-rdma queues it for CMA or
///   its BTLs).
///
/// A window with results waiting to land goes the general way (which keeps their order
/// with this call). False sends the call down the general path, which checks every
/// argument again and raises the error: whatever made this path refuse wrote nothing, so
/// the general path finds the target as the program left it.
///
/// # Safety
/// The MPI contract of `MPI_Put` / `MPI_Get`: `origin` holds `ocount` elements of `odt`
/// (for a get, writable and left to the operation until it completes locally).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn put_get_fast(
    get: bool,
    origin: *const c_void,
    ocount: i64,
    odt: Handle,
    target: c_int,
    disp: MPI_Aint,
    tcount: i64,
    tdt: Handle,
    win: Handle,
) -> bool {
    let Some((len, t)) = one_predefined_run(origin, ocount, odt, target, tcount, tdt) else {
        return false;
    };
    // What `state::with` checks (this thread may call, the library runs, no call of it is
    // under way below this one), without taking the state; the window table only read.
    if !state::installed() {
        return false;
    }
    let buf = || {
        if get {
            // SAFETY: the program's origin buffer of `len` bytes (not NULL: checked),
            // writable and left to the operation until it completes locally (MPI's contract
            // for `MPI_Get`), which the module waits for before it stops writing.
            unsafe { UserBuf::from_raw_parts_mut(origin as *mut u8, len) }
        } else {
            // SAFETY: the program's origin buffer of `len` bytes, valid and unwritten until
            // the operation completes locally (MPI's contract for `MPI_Put`), which the
            // module waits for before it stops reading.
            unsafe { UserBuf::from_raw_parts(origin.cast::<u8>(), len) }
        }
    };
    let w = {
        let Some(tab) = WINS.peek() else {
            return false;
        };
        let Some(e) = index(win).and_then(|i| tab.get(i)).and_then(Option::as_ref) else {
            return false;
        };
        if !e.landings.is_empty() {
            return false;
        }
        if let Some(v) = &e.view {
            let Some(at) = v.place(t, disp, len) else {
                return false;
            };
            // SAFETY: `at` is `len` bytes of member `t`'s memory, mapped in this process
            // while the window lives (the view's promise; the entry holding the view holds
            // the window), inside an open access epoch (checked by `place`); `origin` holds
            // `len` bytes (not NULL: checked), writable for a get, by the caller's contract.
            // They may overlap (an origin inside the window, erroneous but not to crash):
            // `copy` is a memmove. Other processes' accesses to those bytes are the
            // program's to order, as with any store to the window.
            unsafe {
                if get {
                    std::ptr::copy(at as *const u8, origin as *mut u8, len);
                } else {
                    std::ptr::copy(origin.cast::<u8>(), at as *mut u8, len);
                }
            }
            return true;
        }
        if let Some(l) = &e.lent {
            let taken = if get {
                l.get(t, disp, buf())
            } else {
                l.put(t, disp, buf())
            };
            if taken {
                return true;
            }
        }
        if e.raw.is_direct() {
            return false;
        }
        // Taken out of the table before the call into the window.
        e.raw.clone()
    };
    let runs = [(0i64, len as u64)];
    if get {
        matches!(w.get_lent(t, disp, &runs, buf()), Some(Ok(_)))
    } else {
        w.put_lent(t, disp, &runs, buf()).is_ok()
    }
}

/// What the put/get fast paths take: predefined datatypes moving the same bytes on both
/// sides (as `signatures_match` asks of the general path), an origin that is neither NULL
/// nor `MPI_IN_PLACE` (the general path's `check_buffer` errors) and a target that is a rank
/// (`MPI_PROC_NULL` and the other negative ones are the general path's): the bytes and the
/// target.
#[inline(always)]
fn one_predefined_run(
    origin: *const c_void,
    ocount: i64,
    odt: Handle,
    target: c_int,
    tcount: i64,
    tdt: Handle,
) -> Option<(usize, usize)> {
    let len = predefined_bytes(ocount, odt)?;
    if predefined_bytes(tcount, tdt) != Some(len) || (origin as usize) <= MPI_IN_PLACE {
        return None;
    }
    Some((len, usize::try_from(target).ok()?))
}

/// `f` on the direct view of window `win` (osc-sm), once the library runs (as
/// `with_win`), `win` is a window, it has a view and no results waiting to land (the
/// general path keeps their order with this call). False, and `f` not called, otherwise:
/// the general path then decides.
#[inline(always)]
fn with_view(win: Handle, f: impl FnOnce(&DirectView) -> bool) -> bool {
    with_entry(
        win,
        #[inline(always)]
        |e| match &e.view {
            Some(v) => f(v),
            None => false,
        },
    )
}

/// The part the accumulate fast paths share: `op(kernel, target, offset)` once the
/// library runs, `win` is a window with a direct view and no results waiting to land (as
/// [`with_view`]), the view placed the `len` bytes at `target`/`disp` (an open access
/// epoch, inside the target's memory) and the module lends its accumulate kernel there
/// ([`DirectView::atomics`]: osc-sm's lock words and CPU atomics, the same as its own
/// calls'): no call into the window, no borrow of it. False, and `op` not called,
/// otherwise: the general path then decides (`MPI_PROC_NULL`, bad ranks, displacements and
/// epochs are its errors).
#[inline(always)]
fn on_direct_target(
    win: Handle,
    target: c_int,
    disp: MPI_Aint,
    len: usize,
    op: impl FnOnce(&dyn DirectAtomics, usize, u64) -> bool,
) -> bool {
    let Ok(t) = usize::try_from(target) else {
        return false;
    };
    with_view(
        win,
        #[inline(always)]
        |v| match (v.offset(t, disp, len), v.atomics()) {
            (Some(off), Some(kernel)) => op(kernel, t, off),
            _ => false,
        },
    )
}

/// `MPI_CHAR`'s handle (MPI 5.0 ABI), which the reductions take as C's `char`.
const CHAR_HANDLE: Handle = 0x243;

/// The accumulate operation and element type `acc_of` gives predefined operation `op` on
/// predefined datatype `dt` (the same on every side), for the pairs the accumulate fast
/// path takes: the arithmetic, bitwise and logical operations, `MPI_REPLACE` and (fetching
/// only) `MPI_NO_OP`, on a datatype of one run with a Rust element type or on `MPI_CHAR`.
/// `None` for everything else (value-index pairs, `long double`, complex types, user
/// operations, an operation the datatype does not allow): the general path decides, and
/// raises the error if there is one. One load from [`ACC_DIRECT`], made at compile time.
#[inline(always)]
fn acc_direct_of(op: Handle, dt: Handle, fetch: bool) -> Option<(AccOp, Elem)> {
    if op == MPI_NO_OP && !fetch {
        return None;
    }
    *ACC_DIRECT
        .get(dt.wrapping_sub(ACC_DT_BASE))?
        .get(op.wrapping_sub(MPI_SUM))?
}

/// The first datatype handle of [`ACC_DIRECT`] (the predefined datatypes' range).
const ACC_DT_BASE: Handle = 0x200;
/// The operations of [`ACC_DIRECT`]: `MPI_SUM` to `MPI_NO_OP`.
const ACC_OPS: usize = MPI_NO_OP - MPI_SUM + 1;

/// [`acc_direct_of`] by datatype (less [`ACC_DT_BASE`]) and operation (less `MPI_SUM`),
/// `MPI_NO_OP` as fetching, from [`acc_direct_entry`].
static ACC_DIRECT: [[Option<(AccOp, Elem)>; ACC_OPS]; 0x100] = {
    let mut table = [[None; ACC_OPS]; 0x100];
    let mut dt = 0;
    while dt < table.len() {
        let mut op = 0;
        while op < ACC_OPS {
            table[dt][op] = acc_direct_entry(MPI_SUM + op, ACC_DT_BASE + dt);
            op += 1;
        }
        dt += 1;
    }
    table
};

/// One entry of [`ACC_DIRECT`] (at compile time): what `acc_of` resolves `op` on `dt` to,
/// when the fast path takes it.
const fn acc_direct_entry(op: Handle, dt: Handle) -> Option<(AccOp, Elem)> {
    use crate::dtype::{self, Class};
    let Some(t) = dtype::lookup(dt) else {
        return None;
    };
    // One run of bytes (not a padded pair).
    if t.size != t.extent {
        return None;
    }
    let elem = match t.elem {
        Some(e) => Some(match e {
            dtype::Elem::I8 => Elem::I8,
            dtype::Elem::I16 => Elem::I16,
            dtype::Elem::I32 => Elem::I32,
            dtype::Elem::I64 => Elem::I64,
            dtype::Elem::U8 => Elem::U8,
            dtype::Elem::U16 => Elem::U16,
            dtype::Elem::U32 => Elem::U32,
            dtype::Elem::U64 => Elem::U64,
            dtype::Elem::F32 => Elem::F32,
            dtype::Elem::F64 => Elem::F64,
        }),
        None => None,
    };
    let acc = match op {
        MPI_REPLACE | MPI_NO_OP => {
            let acc = if op == MPI_REPLACE {
                AccOp::Replace
            } else {
                AccOp::NoOp
            };
            return Some((
                acc,
                match elem {
                    Some(e) => e,
                    None => Elem::Byte,
                },
            ));
        }
        MPI_SUM => AccOp::Sum,
        MPI_PROD => AccOp::Prod,
        MPI_MIN => AccOp::Min,
        MPI_MAX => AccOp::Max,
        MPI_BAND => AccOp::BAnd,
        MPI_BOR => AccOp::BOr,
        MPI_BXOR => AccOp::BXor,
        MPI_LAND => AccOp::LAnd,
        MPI_LOR => AccOp::LOr,
        MPI_LXOR => AccOp::LXor,
        _ => return None,
    };
    let (e, class) = if dt == CHAR_HANDLE {
        // As `op::reducer`: MPI_CHAR is C's `char`, an integer to the reductions.
        let e = if std::ffi::c_char::MIN == 0 {
            Elem::U8
        } else {
            Elem::I8
        };
        (e, Class::Integer)
    } else {
        match elem {
            Some(e) => (e, t.class),
            None => return None,
        }
    };
    // `dtype::op_allowed` (MPI 5.0 section 6.9.2), as a constant.
    let allowed = match acc {
        AccOp::Min | AccOp::Max => matches!(class, Class::Integer | Class::Float),
        AccOp::Sum | AccOp::Prod => {
            matches!(class, Class::Integer | Class::Float | Class::Complex)
        }
        AccOp::LAnd | AccOp::LOr | AccOp::LXor => matches!(class, Class::Integer | Class::Logical),
        AccOp::BAnd | AccOp::BOr | AccOp::BXor => matches!(class, Class::Integer | Class::Byte),
        _ => false,
    };
    if allowed {
        Some((acc, e))
    } else {
        None
    }
}

/// The fast path of `MPI_Accumulate`, `MPI_Get_accumulate` (`result` not `None`) and
/// `MPI_Fetch_and_op`: one predefined datatype and count on every side (what the general
/// path's signature checks reduce to for them), an operation [`acc_direct_of`] takes, a
/// window whose module reaches the target's memory itself (osc-sm): the operation runs here
/// on the program's buffers through the module's kernel (its accumulate lock, or its CPU
/// atomics with `osc_sm_atomics`: the same as every other accumulate on the window, so
/// same-operation atomicity holds between the two paths), with no datatype resolved, no
/// origin packed and no layout built. False sends the call down the general path, which
/// checks every argument again and raises the error: the module checks the epoch, the
/// rank, the range and the operation before it writes a byte, so a refusal here leaves
/// the target (and the result buffer) as the program left them.
///
/// # Safety
/// The MPI contract of the call: `origin` holds `count` elements of `dt` (unless `op` is
/// `MPI_NO_OP`), `result` (if any) has room for as many, writable and not otherwise
/// accessed during the call.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn acc_direct(
    origin: *const c_void,
    ocount: i64,
    odt: Handle,
    result: Option<(*mut c_void, i64, Handle)>,
    target: c_int,
    disp: MPI_Aint,
    tcount: i64,
    tdt: Handle,
    op: Handle,
    win: Handle,
) -> bool {
    let Some(len) = predefined_bytes(tcount, tdt) else {
        return false;
    };
    // MPI_NO_OP ignores the origin (the general path does not look at it either).
    let noop = op == MPI_NO_OP && result.is_some();
    if !noop && (odt != tdt || ocount != tcount || (origin as usize) <= MPI_IN_PLACE) {
        return false;
    }
    let out = match result {
        // NULL and MPI_IN_PLACE are the general path's `check_buffer` errors; overlapping
        // origin and result buffers (erroneous) are the general path's to copy.
        Some((r, rcount, rdt)) => {
            if rdt != tdt || rcount != tcount || (r as usize) <= MPI_IN_PLACE {
                return false;
            }
            let (o, r0) = (origin as usize, r as usize);
            if !noop && o < r0.wrapping_add(len) && r0 < o.wrapping_add(len) {
                return false;
            }
            Some(r)
        }
        None => None,
    };
    let Some((acc, elem)) = acc_direct_of(op, tdt, result.is_some()) else {
        return false;
    };
    on_direct_target(
        win,
        target,
        disp,
        len,
        #[inline(always)]
        |kernel, t, off| {
            // SAFETY: the caller's contract: `origin` holds `len` bytes (not NULL: checked),
            // unwritten during the call; MPI_NO_OP reads none.
            let data = if noop {
                &[][..]
            } else {
                unsafe { super::bytes(origin, len) }
            };
            // SAFETY: the caller's contract: the result buffer holds `len` writable bytes (not
            // NULL: checked), apart from the origin's (checked), not otherwise accessed.
            let old = out.map(|r| unsafe { super::bytes_mut(r, len) });
            kernel.accumulate(t, off, len, acc, elem, data, old)
        },
    )
}

/// The fast path of `MPI_Compare_and_swap`: a predefined integer, logical or byte datatype
/// of 1, 2, 4 or 8 bytes, a window whose module reaches the target's memory itself
/// (osc-sm): the module's compare-and-swap (under its accumulate lock, or a CPU
/// compare-exchange with `osc_sm_atomics`, as on the general path) on the program's
/// buffers. False sends the call down the general path (any other datatype, a NULL
/// buffer, `MPI_PROC_NULL`, a refusal of the module, which writes nothing).
///
/// # Safety
/// The MPI contract of `MPI_Compare_and_swap`: one element of `dt` at each address, the
/// result's writable and not otherwise accessed during the call.
#[inline(always)]
unsafe fn cas_direct(
    origin: *const c_void,
    compare: *const c_void,
    result: *mut c_void,
    dt: Handle,
    target: c_int,
    disp: MPI_Aint,
    win: Handle,
) -> bool {
    let Some((size, elem)) = cas_elem(dt) else {
        return false;
    };
    if origin.is_null() || compare.is_null() || result.is_null() {
        return false;
    }
    // Copied (at most 8 bytes): the result may then alias them, as on the general path.
    // SAFETY: the contract: one element of `dt` (`size` bytes) at each address (not NULL:
    // checked).
    let (value, cmp) = unsafe { (load_element(origin, size), load_element(compare, size)) };
    on_direct_target(
        win,
        target,
        disp,
        size,
        #[inline(always)]
        |kernel, rank, off| {
            // SAFETY: the result element, writable (not NULL: checked), not otherwise accessed.
            let old = unsafe { super::bytes_mut(result, size) };
            kernel.compare_and_swap(rank, off, elem, &cmp[..size], &value[..size], old)
        },
    )
}

/// The element of a compare-and-swap's fast paths: `dt` a predefined datatype the general
/// path takes ([`cas_width`]: `MPI_CHAR`, which OSU's `osu_cas_latency` uses, included),
/// its size and the width compared (only equality matters). One load from [`CAS_ELEM`].
#[inline(always)]
fn cas_elem(dt: Handle) -> Option<(usize, Elem)> {
    let elem = (*CAS_ELEM.get(dt.wrapping_sub(ACC_DT_BASE))?)?;
    Some((elem.size(), elem))
}

/// [`cas_width`] of every predefined datatype, by handle less [`ACC_DT_BASE`], made at
/// compile time.
static CAS_ELEM: [Option<Elem>; 0x100] = {
    let mut table = [None; 0x100];
    let mut dt = 0;
    while dt < table.len() {
        if let Some(t) = crate::dtype::lookup(ACC_DT_BASE + dt) {
            table[dt] = cas_width(&t);
        }
        dt += 1;
    }
    table
};

/// The element a compare-and-swap compares on predefined datatype `t`, by width (only
/// equality matters): any predefined datatype of 1, 2, 4 or 8 bytes but the floating-point
/// and complex ones and the pairs (MPI 5.0 section 12.3.4 names integers, logicals and
/// bytes; characters are taken as their integers, as Open MPI and MPICH do). `None`: the
/// general path's `MPI_ERR_TYPE`. The one rule of the fast paths and the general path.
const fn cas_width(t: &crate::dtype::Datatype) -> Option<Elem> {
    use crate::dtype::Class;
    // Value-index pairs are no integers either (MPI 5.0 section 12.3.4).
    let pair = t.pair_layout().is_some()
        || matches!(
            t.name.as_bytes(),
            b"MPI_2INTEGER" | b"MPI_2REAL" | b"MPI_2DOUBLE_PRECISION"
        );
    if pair || matches!(t.class, Class::Float | Class::Complex) {
        return None;
    }
    match t.size {
        1 => Some(Elem::U8),
        2 => Some(Elem::U16),
        4 => Some(Elem::U32),
        8 => Some(Elem::U64),
        _ => None,
    }
}

/// The general path's first step for a compare-and-swap, as [`acc_at_once`] is the
/// accumulates': a datatype [`cas_elem`] takes, on a module that completes it within the
/// call ([`RawWindow::compare_and_swap_at_once`]: osc-rdma on a member of this node, or on
/// this process), straight to the module with the program's buffers, no datatype resolved.
/// `None`: not such a call (another datatype, a NULL buffer, `MPI_PROC_NULL` or a bad rank),
/// or the module did not take it (nothing done): the general path decides.
///
/// # Safety
/// The MPI contract of `MPI_Compare_and_swap`: one element of `dt` at each address, the
/// result's writable and not otherwise accessed during the call.
#[inline(always)]
unsafe fn cas_at_once(
    w: &RawWindow,
    origin: *const c_void,
    compare: *const c_void,
    result: *mut c_void,
    dt: Handle,
    target: c_int,
    disp: MPI_Aint,
) -> Option<MpiResult<()>> {
    let (size, elem) = cas_elem(dt)?;
    if origin.is_null() || compare.is_null() || result.is_null() {
        return None;
    }
    let t = target_of(w, target).ok()??;
    // Copied (at most 8 bytes): the result may then alias them, as on the general path.
    // SAFETY: the contract: one element of `dt` (`size` bytes) at each address (not NULL:
    // checked).
    let (value, cmp) = unsafe { (load_element(origin, size), load_element(compare, size)) };
    // SAFETY: the result element, writable (not NULL: checked), not otherwise accessed.
    let old = unsafe { super::bytes_mut(result, size) };
    w.compare_and_swap_at_once(t, disp, elem, &cmp[..size], &value[..size], old)
        .map(|r| r.map_err(osc_error))
}

/// The `size` (1, 2, 4 or 8; any other reads nothing) bytes at `p`, at the start of 8: a
/// load of that width, not a copy of a length known only at run time.
///
/// # Safety
/// `p` is readable for `size` bytes.
#[inline(always)]
unsafe fn load_element(p: *const c_void, size: usize) -> [u8; 8] {
    let mut out = [0u8; 8];
    // SAFETY: the caller's: `size` readable bytes at `p` (any alignment: unaligned reads).
    unsafe {
        match size {
            1 => out[..1].copy_from_slice(&p.cast::<[u8; 1]>().read_unaligned()),
            2 => out[..2].copy_from_slice(&p.cast::<[u8; 2]>().read_unaligned()),
            4 => out[..4].copy_from_slice(&p.cast::<[u8; 4]>().read_unaligned()),
            8 => out = p.cast::<[u8; 8]>().read_unaligned(),
            _ => {}
        }
    }
    out
}

/// The general path's first step for an accumulate of predefined datatypes (the same on
/// every side, as [`acc_direct`] takes them) on a module that completes it within the call
/// ([`RawWindow::accumulate_at_once`]: osc-rdma on a member of this node, or on this
/// process): straight to the module with the program's buffers, no datatype resolved, no
/// layout built, no staging. `None`: not such an operation, or the module did not take it
/// (nothing done): the general path decides.
///
/// # Safety
/// The MPI contract of the accumulate: `ocount` elements of `odt` at `origin`, the result's
/// (`result`) writable and not otherwise accessed during the call.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn acc_at_once(
    w: &RawWindow,
    origin: *const c_void,
    ocount: i64,
    odt: Handle,
    result: Option<(*mut c_void, i64, Handle)>,
    target: c_int,
    disp: MPI_Aint,
    tcount: i64,
    tdt: Handle,
    op: Handle,
) -> Option<MpiResult<()>> {
    let len = predefined_bytes(tcount, tdt)?;
    let noop = op == MPI_NO_OP && result.is_some();
    if !noop && (odt != tdt || ocount != tcount || (origin as usize) <= MPI_IN_PLACE) {
        return None;
    }
    let out = match result {
        Some((r, rcount, rdt)) => {
            let (o, r0) = (origin as usize, r as usize);
            if rdt != tdt
                || rcount != tcount
                || r0 <= MPI_IN_PLACE
                || (!noop && o < r0.wrapping_add(len) && r0 < o.wrapping_add(len))
            {
                return None;
            }
            Some(r)
        }
        None => None,
    };
    let (acc, elem) = acc_direct_of(op, tdt, result.is_some())?;
    // MPI_PROC_NULL and bad ranks: the general path's.
    let t = target_of(w, target).ok()??;
    // SAFETY: the caller's contract: `origin` holds `len` bytes (not NULL: checked),
    // unwritten during the call; MPI_NO_OP reads none.
    let data = if noop {
        &[][..]
    } else {
        unsafe { super::bytes(origin, len) }
    };
    // SAFETY: the caller's contract: the result buffer holds `len` writable bytes (not
    // NULL: checked), apart from the origin's (checked), not otherwise accessed.
    let old = out.map(|r| unsafe { super::bytes_mut(r, len) });
    let runs = [(0i64, len as u64)];
    w.accumulate_at_once(t, disp, &runs, acc, elem, data, old)
        .map(|r| r.map_err(osc_error))
}

/// Every RMA communication call: check, pack, issue; `request` makes it request-based.
///
/// # Safety
/// The MPI contract of the call named `fname`.
#[allow(clippy::too_many_arguments)]
unsafe fn rma(
    fname: &'static str,
    kind: Kind,
    origin: *const c_void,
    ocount: i64,
    odt: Handle,
    result: *mut c_void,
    rcount: i64,
    rdt: Handle,
    target: c_int,
    disp: MPI_Aint,
    tcount: i64,
    tdt: Handle,
    win: Handle,
    request: *mut Handle,
) -> c_int {
    call_win(fname, win, || {
        let w = raw(win)?;
        if let (Kind::Acc(op) | Kind::GetAcc(op), true) = (&kind, request.is_null()) {
            let res = matches!(kind, Kind::GetAcc(_)).then_some((result, rcount, rdt));
            // SAFETY: the caller's contract is the call's.
            let done = unsafe {
                acc_at_once(&w, origin, ocount, odt, res, target, disp, tcount, tdt, *op)
            };
            if let Some(r) = done {
                return r;
            }
        }
        let tn = count(tcount, "target")?;
        let tty = Ty::for_use(tdt)?;
        let nothing = || {
            if !request.is_null() {
                let h = super::info::completed_request(MPI_COMM_WORLD)?;
                // SAFETY: non-null, the caller's request.
                unsafe { request.write(h) };
            }
            Ok(())
        };
        let Some(t) = target_of(&w, target)? else {
            return nothing();
        };
        // An accumulate that moves no data does nothing, whatever its datatypes (MPICH and
        // Open MPI accept zero counts with any).
        if matches!(kind, Kind::Acc(_) | Kind::GetAcc(_)) && tty.packed_len(tn)? == 0 {
            count(ocount, "origin")?;
            count(rcount, "result")?;
            return nothing();
        }
        // A module that reaches the target's memory itself (osc-sm) completes the operation
        // here, on the program's buffers: `done` then, and nothing to land or keep.
        let issued = match kind {
            Kind::Put => {
                let n = count(ocount, "origin")?;
                let ty = Ty::for_use(odt)?;
                // SAFETY: the caller's contract.
                let data = unsafe { super::send_data_n(origin, n, &ty, "origin")? };
                // SAFETY: the origin buffer is the program's, unwritten during the call.
                let bytes = unsafe { data.bytes() };
                let contiguous = matches!(data, super::SendData::Direct(..));
                with_runs(&tty, tn, |runs| {
                    signatures_match("origin holds", bytes.len(), runs)?;
                    let addr = w.address(t, disp).map_err(win_error)?;
                    match w.direct(|d| d.put_now(t, addr, runs, bytes)) {
                        Some(r) => r.map(|()| Issued::Done).map_err(osc_error),
                        None => {
                            let id = if contiguous {
                                // A contiguous origin is lent, not packed: MPI leaves it
                                // valid and unwritten until the operation completes
                                // locally (its request, a flush_local or stronger), which
                                // is what the module waits for before it stops reading.
                                // SAFETY: that rule; the program's buffer of `bytes.len()`
                                // bytes.
                                let lent = unsafe { UserBuf::from_slice(bytes) };
                                w.put_lent(t, disp, runs, lent)
                            } else {
                                let l = Layout {
                                    runs: runs.to_vec(),
                                };
                                w.put(t, disp, &l, bytes.to_vec())
                            };
                            Ok(Issued::Id(id.map_err(win_error)?, None))
                        }
                    }
                })?
            }
            Kind::Get => {
                let n = count(ocount, "origin")?;
                let ty = Ty::for_use(odt)?;
                let want = ty.packed_len(n)?;
                super::check_buffer(origin, want, n, &ty, "origin")?;
                with_runs(&tty, tn, |runs| {
                    signatures_match("origin takes", want, runs)?;
                    let addr = w.address(t, disp).map_err(win_error)?;
                    let out = origin as *mut c_void;
                    // SAFETY: the program's origin buffer of `n` elements of `ty`, not
                    // otherwise accessed during the call (MPI's contract).
                    let direct = w.direct(|d| unsafe {
                        into_buffer(&ty, out, n, want, |o| d.get_now(t, addr, runs, o))
                    });
                    match direct {
                        Some(r) => r.map(|()| Issued::Done).map_err(osc_error),
                        None => {
                            // A contiguous origin is lent to a module that writes it itself
                            // (by RDMA): no result kept, nothing to land.
                            if let Some((off, len)) = ty.run(n) {
                                // SAFETY: MPI leaves the origin buffer (its `len` bytes at
                                // `off`) to the operation until it completes locally, which
                                // the module waits for before it stops writing.
                                let into = unsafe {
                                    UserBuf::from_raw_parts_mut(
                                        out.cast::<u8>().wrapping_offset(off),
                                        len,
                                    )
                                };
                                if let Some(r) = w.get_lent(t, disp, runs, into) {
                                    return Ok(Issued::Id(r.map_err(win_error)?, None));
                                }
                            }
                            let l = Layout {
                                runs: runs.to_vec(),
                            };
                            let id = w.get(t, disp, &l).map_err(win_error)?;
                            Ok(Issued::Id(id, Some((ty.clone(), origin as usize, n))))
                        }
                    }
                })?
            }
            Kind::Acc(op) | Kind::GetAcc(op) => {
                let fetch = matches!(kind, Kind::GetAcc(_));
                let noop = op == MPI_NO_OP && fetch;
                if op == MPI_NO_OP && !fetch {
                    return Err(MpiError::new(
                        MPI_ERR_OP,
                        "MPI_NO_OP is for the fetching accumulates (MPI_Get_accumulate, MPI_Fetch_and_op) only",
                    ));
                }
                let rty = if fetch { Some(Ty::for_use(rdt)?) } else { None };
                // The origin buffer is ignored by MPI_NO_OP; the result then takes the
                // target's type.
                let (data, acc, elem) = if noop {
                    let rty = rty.as_ref().expect("fetching");
                    let (acc, elem) = acc_of(op, rty, &tty)?;
                    (None, acc, elem)
                } else {
                    let n = count(ocount, "origin")?;
                    let ty = Ty::for_use(odt)?;
                    let (acc, elem) = acc_of(op, &ty, &tty)?;
                    // SAFETY: the caller's contract.
                    let data = unsafe { super::send_data_n(origin, n, &ty, "origin")? };
                    (Some(data), acc, elem)
                };
                // SAFETY: the origin buffer is the program's, unwritten during the call.
                let bytes = data.as_ref().map_or(&[][..], |d| unsafe { d.bytes() });
                let result_of = |runs: &[(i64, u64)]| -> MpiResult<Option<(Ty, usize)>> {
                    let Some(rty) = &rty else { return Ok(None) };
                    let rn = count(rcount, "result")?;
                    let want = rty.packed_len(rn)?;
                    super::check_buffer(result, want, rn, rty, "result")?;
                    signatures_match("result takes", want, runs)?;
                    Ok(Some((rty.clone(), rn)))
                };
                with_runs(&tty, tn, |runs| {
                    if !noop {
                        signatures_match("origin holds", bytes.len(), runs)?;
                    }
                    let res = result_of(runs)?;
                    let addr = w.address(t, disp).map_err(win_error)?;
                    // MPI forbids overlapping origin and result buffers; should a program
                    // overlap them anyway, the origin is read before the result is written.
                    let copy;
                    let bytes = match &res {
                        Some((rty, rn)) if overlaps(bytes, result, rty.packed_len(*rn)?) => {
                            copy = bytes.to_vec();
                            &copy[..]
                        }
                        _ => bytes,
                    };
                    // An operation done within the call writes its result straight into the
                    // program's buffer (staged and unpacked when not one run).
                    let at_once = |f: &mut AtOnce<'_>| {
                        match &res {
                            None => f(None),
                            // SAFETY: the program's result buffer of `rn` elements of `rty`,
                            // not otherwise accessed during the call (MPI's contract).
                            Some((rty, rn)) => unsafe {
                                let len = rty.packed_len(*rn).unwrap_or(0);
                                into_buffer_if(rty, result, *rn, len, |o| f(Some(o)))
                            },
                        }
                    };
                    // On a shared window (osc-sm) or by a module that applies it here
                    // (osc-rdma, on a member of this node): done, nothing to land.
                    let direct = w
                        .direct(|d| {
                            at_once(&mut |o| {
                                Some(d.accumulate_now(t, addr, runs, acc, elem, bytes, o))
                            })
                        })
                        .flatten()
                        .or_else(|| {
                            at_once(&mut |o| {
                                w.accumulate_at_once(t, disp, runs, acc, elem, bytes, o)
                            })
                        });
                    match direct {
                        Some(r) => r.map(|()| Issued::Done).map_err(osc_error),
                        None => {
                            // (Read before the call returns: copied into the message.)
                            let id = w
                                .accumulate_from(t, disp, runs, acc, elem, bytes, fetch)
                                .map_err(win_error)?;
                            Ok(Issued::Id(
                                id,
                                res.map(|(rty, rn)| (rty, result as usize, rn)),
                            ))
                        }
                    }
                })?
            }
        };
        let (id, landing) = match issued {
            Issued::Done => return nothing(),
            Issued::Id(id, landing) => (id, landing),
        };
        let landing = keep_landing(win, id, landing)?;
        if request.is_null() {
            return Ok(());
        }
        let comm = super::communicator(MPI_COMM_WORLD)?;
        let r = rmca::raw::custom(
            &comm,
            Box::new(RmaRequest {
                win: w,
                id,
                landing,
            }),
        );
        let h = state::with(|s| s.add_request(ReqEntry::new(MPI_COMM_WORLD, ReqState::Active(r))))?;
        // SAFETY: the caller's request (checked non-null).
        unsafe { request.write(h) };
        Ok(())
    })
}

macro_rules! rma_fns {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) => $rank:ident, $disp:ident, $win:ident, $kind:expr, $origin:expr, $ocount:expr, $odt:expr, $result:expr, $rcount:expr, $rdt:expr, $tcount:expr, $tdt:expr, $request:expr;)*) => {$(
        $(#[$doc])*
        #[export]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            // OSU's small puts and gets: no datatype resolved, no window handle cloned, and
            // not through `rma`'s large frame.
            let direct = match $kind {
                Kind::Put if $request.is_null() => Some(false),
                Kind::Get if $request.is_null() => Some(true),
                _ => None,
            };
            // No error-handler frame: nothing in there fails (a refusal is the general
            // path's) or panics (its only indexing is bounds-checked before).
            if let Some(get) = direct {
                // SAFETY: the caller's contract is the call's.
                if unsafe {
                    put_get_fast(
                        get, $origin, $ocount as i64, $odt, $rank, $disp, $tcount as i64,
                        $tdt, $win,
                    )
                } {
                    return MPI_SUCCESS;
                }
            }
            // OSU's small accumulates: the same, through the module's accumulate kernel.
            let acc = match $kind {
                Kind::Acc(op) if $request.is_null() => Some((op, None)),
                Kind::GetAcc(op) if $request.is_null() => {
                    Some((op, Some(($result, $rcount as i64, $rdt))))
                }
                _ => None,
            };
            if let Some((op, result)) = acc {
                let mut done = false;
                let rc = call_win(stringify!($name), $win, || {
                    // SAFETY: the caller's contract is the call's.
                    done = unsafe {
                        acc_direct(
                            $origin, $ocount as i64, $odt, result, $rank, $disp,
                            $tcount as i64, $tdt, op, $win,
                        )
                    };
                    Ok(())
                });
                if done || rc != MPI_SUCCESS {
                    return rc;
                }
            }
            // SAFETY: the caller's contract is the call's.
            unsafe {
                rma(
                    stringify!($name), $kind, $origin, $ocount as i64, $odt, $result,
                    $rcount as i64, $rdt, $rank, $disp, $tcount as i64, $tdt, $win,
                    $request,
                )
            }
        }
    )*};
}

const NO_REQ: *mut Handle = std::ptr::null_mut();
const NO_BUF: *mut c_void = std::ptr::null_mut();

rma_fns! {
    /// `MPI_Put`: write the origin's data into the target's window.
    MPI_Put(origin_addr: *const c_void, origin_count: c_int, origin_datatype: Handle, target_rank: c_int, target_disp: MPI_Aint, target_count: c_int, target_datatype: Handle, win: Handle)
        => target_rank, target_disp, win, Kind::Put, origin_addr, origin_count, origin_datatype, NO_BUF, 0, MPI_DATATYPE_NULL, target_count, target_datatype, NO_REQ;
    /// `MPI_Put_c`.
    MPI_Put_c(origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: Handle, target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count, target_datatype: Handle, win: Handle)
        => target_rank, target_disp, win, Kind::Put, origin_addr, origin_count, origin_datatype, NO_BUF, 0, MPI_DATATYPE_NULL, target_count, target_datatype, NO_REQ;
    /// `MPI_Get`: read the target's window into the origin buffer (filled when the epoch's
    /// synchronization completes it).
    MPI_Get(origin_addr: *mut c_void, origin_count: c_int, origin_datatype: Handle, target_rank: c_int, target_disp: MPI_Aint, target_count: c_int, target_datatype: Handle, win: Handle)
        => target_rank, target_disp, win, Kind::Get, origin_addr, origin_count, origin_datatype, NO_BUF, 0, MPI_DATATYPE_NULL, target_count, target_datatype, NO_REQ;
    /// `MPI_Get_c`.
    MPI_Get_c(origin_addr: *mut c_void, origin_count: MPI_Count, origin_datatype: Handle, target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count, target_datatype: Handle, win: Handle)
        => target_rank, target_disp, win, Kind::Get, origin_addr, origin_count, origin_datatype, NO_BUF, 0, MPI_DATATYPE_NULL, target_count, target_datatype, NO_REQ;
    /// `MPI_Accumulate`: combine the origin's data into the target's window.
    MPI_Accumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: Handle, target_rank: c_int, target_disp: MPI_Aint, target_count: c_int, target_datatype: Handle, op: Handle, win: Handle)
        => target_rank, target_disp, win, Kind::Acc(op), origin_addr, origin_count, origin_datatype, NO_BUF, 0, MPI_DATATYPE_NULL, target_count, target_datatype, NO_REQ;
    /// `MPI_Accumulate_c`.
    MPI_Accumulate_c(origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: Handle, target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count, target_datatype: Handle, op: Handle, win: Handle)
        => target_rank, target_disp, win, Kind::Acc(op), origin_addr, origin_count, origin_datatype, NO_BUF, 0, MPI_DATATYPE_NULL, target_count, target_datatype, NO_REQ;
    /// `MPI_Get_accumulate`: accumulate and fetch the target's previous contents.
    MPI_Get_accumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: Handle, result_addr: *mut c_void, result_count: c_int, result_datatype: Handle, target_rank: c_int, target_disp: MPI_Aint, target_count: c_int, target_datatype: Handle, op: Handle, win: Handle)
        => target_rank, target_disp, win, Kind::GetAcc(op), origin_addr, origin_count, origin_datatype, result_addr, result_count, result_datatype, target_count, target_datatype, NO_REQ;
    /// `MPI_Get_accumulate_c`.
    MPI_Get_accumulate_c(origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: Handle, result_addr: *mut c_void, result_count: MPI_Count, result_datatype: Handle, target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count, target_datatype: Handle, op: Handle, win: Handle)
        => target_rank, target_disp, win, Kind::GetAcc(op), origin_addr, origin_count, origin_datatype, result_addr, result_count, result_datatype, target_count, target_datatype, NO_REQ;
    /// `MPI_Rput`: `MPI_Put` with a request (complete at once: the data is copied).
    MPI_Rput(origin_addr: *const c_void, origin_count: c_int, origin_datatype: Handle, target_rank: c_int, target_disp: MPI_Aint, target_count: c_int, target_datatype: Handle, win: Handle, request: *mut Handle)
        => target_rank, target_disp, win, Kind::Put, origin_addr, origin_count, origin_datatype, NO_BUF, 0, MPI_DATATYPE_NULL, target_count, target_datatype, request;
    /// `MPI_Rput_c`.
    MPI_Rput_c(origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: Handle, target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count, target_datatype: Handle, win: Handle, request: *mut Handle)
        => target_rank, target_disp, win, Kind::Put, origin_addr, origin_count, origin_datatype, NO_BUF, 0, MPI_DATATYPE_NULL, target_count, target_datatype, request;
    /// `MPI_Rget`: `MPI_Get` whose request completes when the data arrived.
    MPI_Rget(origin_addr: *mut c_void, origin_count: c_int, origin_datatype: Handle, target_rank: c_int, target_disp: MPI_Aint, target_count: c_int, target_datatype: Handle, win: Handle, request: *mut Handle)
        => target_rank, target_disp, win, Kind::Get, origin_addr, origin_count, origin_datatype, NO_BUF, 0, MPI_DATATYPE_NULL, target_count, target_datatype, request;
    /// `MPI_Rget_c`.
    MPI_Rget_c(origin_addr: *mut c_void, origin_count: MPI_Count, origin_datatype: Handle, target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count, target_datatype: Handle, win: Handle, request: *mut Handle)
        => target_rank, target_disp, win, Kind::Get, origin_addr, origin_count, origin_datatype, NO_BUF, 0, MPI_DATATYPE_NULL, target_count, target_datatype, request;
    /// `MPI_Raccumulate`.
    MPI_Raccumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: Handle, target_rank: c_int, target_disp: MPI_Aint, target_count: c_int, target_datatype: Handle, op: Handle, win: Handle, request: *mut Handle)
        => target_rank, target_disp, win, Kind::Acc(op), origin_addr, origin_count, origin_datatype, NO_BUF, 0, MPI_DATATYPE_NULL, target_count, target_datatype, request;
    /// `MPI_Raccumulate_c`.
    MPI_Raccumulate_c(origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: Handle, target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count, target_datatype: Handle, op: Handle, win: Handle, request: *mut Handle)
        => target_rank, target_disp, win, Kind::Acc(op), origin_addr, origin_count, origin_datatype, NO_BUF, 0, MPI_DATATYPE_NULL, target_count, target_datatype, request;
    /// `MPI_Rget_accumulate`.
    MPI_Rget_accumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: Handle, result_addr: *mut c_void, result_count: c_int, result_datatype: Handle, target_rank: c_int, target_disp: MPI_Aint, target_count: c_int, target_datatype: Handle, op: Handle, win: Handle, request: *mut Handle)
        => target_rank, target_disp, win, Kind::GetAcc(op), origin_addr, origin_count, origin_datatype, result_addr, result_count, result_datatype, target_count, target_datatype, request;
    /// `MPI_Rget_accumulate_c`.
    MPI_Rget_accumulate_c(origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: Handle, result_addr: *mut c_void, result_count: MPI_Count, result_datatype: Handle, target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count, target_datatype: Handle, op: Handle, win: Handle, request: *mut Handle)
        => target_rank, target_disp, win, Kind::GetAcc(op), origin_addr, origin_count, origin_datatype, result_addr, result_count, result_datatype, target_count, target_datatype, request;
}

/// `MPI_Fetch_and_op`: one element of `datatype` combined with `op`, the previous value
/// fetched.
#[export]
pub unsafe extern "C" fn MPI_Fetch_and_op(
    origin_addr: *const c_void,
    result_addr: *mut c_void,
    datatype: Handle,
    target_rank: c_int,
    target_disp: MPI_Aint,
    op: Handle,
    win: Handle,
) -> c_int {
    let mut done = false;
    let rc = call_win("MPI_Fetch_and_op", win, || {
        // SAFETY: the caller's contract (one element in each buffer).
        done = unsafe {
            acc_direct(
                origin_addr,
                1,
                datatype,
                Some((result_addr, 1, datatype)),
                target_rank,
                target_disp,
                1,
                datatype,
                op,
                win,
            )
        };
        Ok(())
    });
    if done || rc != MPI_SUCCESS {
        return rc;
    }
    // SAFETY: the caller's contract (one element in each buffer).
    unsafe {
        rma(
            "MPI_Fetch_and_op",
            Kind::GetAcc(op),
            origin_addr,
            1,
            datatype,
            result_addr,
            1,
            datatype,
            target_rank,
            target_disp,
            1,
            datatype,
            win,
            NO_REQ,
        )
    }
}

/// `MPI_Compare_and_swap`: store the origin value if the target equals the compare value;
/// the previous value is fetched.
#[export]
pub unsafe extern "C" fn MPI_Compare_and_swap(
    origin_addr: *const c_void,
    compare_addr: *const c_void,
    result_addr: *mut c_void,
    datatype: Handle,
    target_rank: c_int,
    target_disp: MPI_Aint,
    win: Handle,
) -> c_int {
    call_win("MPI_Compare_and_swap", win, || {
        // SAFETY: the caller's contract.
        let direct = unsafe {
            cas_direct(
                origin_addr,
                compare_addr,
                result_addr,
                datatype,
                target_rank,
                target_disp,
                win,
            )
        };
        if direct {
            return Ok(());
        }
        let w = raw(win)?;
        // SAFETY: the caller's contract.
        let done = unsafe {
            cas_at_once(
                &w,
                origin_addr,
                compare_addr,
                result_addr,
                datatype,
                target_rank,
                target_disp,
            )
        };
        if let Some(r) = done {
            return r;
        }
        let ty = Ty::for_use(datatype)?;
        let base = ty.reduction_base().map_err(|_| {
            MpiError::new(
                MPI_ERR_TYPE,
                "MPI_Compare_and_swap takes a predefined datatype",
            )
        })?;
        let elem = match (&ty, cas_width(&base)) {
            (Ty::Predefined(..), Some(elem)) => elem,
            _ => {
                return Err(MpiError::new(
                    MPI_ERR_TYPE,
                    format!("MPI_Compare_and_swap takes a predefined integer, logical or byte datatype of 1, 2, 4 or 8 bytes, not {} ({} bytes)", base.name, base.size),
                ))
            }
        };
        let Some(t) = target_of(&w, target_rank)? else {
            return Ok(());
        };
        let size = elem.size();
        for (p, what) in [
            (origin_addr, "origin_addr"),
            (compare_addr, "compare_addr"),
            (result_addr.cast_const(), "result_addr"),
        ] {
            if p.is_null() {
                return Err(MpiError::new(MPI_ERR_BUFFER, format!("{what} is NULL")));
            }
        }
        // Copied (at most 8 bytes): the result may not then alias them.
        let (mut value, mut compare) = ([0u8; 8], [0u8; 8]);
        // SAFETY: the contract: one element of `datatype` at each address.
        unsafe {
            value[..size].copy_from_slice(super::bytes(origin_addr, size));
            compare[..size].copy_from_slice(super::bytes(compare_addr, size));
        }
        let (value, compare) = (&value[..size], &compare[..size]);
        let addr = w.address(t, target_disp).map_err(win_error)?;
        // SAFETY: the result element, writable and not otherwise accessed during the call.
        let old = unsafe { super::bytes_mut(result_addr.cast(), size) };
        if let Some(r) = w.direct(|d| d.compare_and_swap_now(t, addr, elem, compare, value, old)) {
            return r.map_err(osc_error);
        }
        if let Some(r) = w.compare_and_swap_at_once(t, target_disp, elem, compare, value, old) {
            return r.map_err(osc_error);
        }
        let id = w
            .compare_and_swap(t, target_disp, elem, compare.to_vec(), value.to_vec())
            .map_err(win_error)?;
        keep_landing(win, id, Some((ty, result_addr as usize, 1))).map(|_| ())
    })
}

// ---- synchronization ----

/// Run synchronization `call` on `win`, then land the results it completed.
fn sync(win: Handle, call: SyncCall) -> MpiResult<()> {
    let (w, pending) = with_win(win, |e| Ok((e.raw.clone(), !e.landings.is_empty())))?;
    sync_on(win, &w, pending, call)
}

/// [`sync`] on the window `w` of `win`; `pending`: results were waiting to land before it
/// (only operations add them, so none else can be there after it: no second lookup).
fn sync_on(win: Handle, w: &RawWindow, pending: bool, call: SyncCall) -> MpiResult<()> {
    let r = w.sync(call).map_err(win_error);
    let landed = if pending { land(win) } else { Ok(()) };
    r.and(landed)
}

/// Run the passive-target synchronization `call` makes of `rank`'s window rank; nothing for
/// `MPI_PROC_NULL` (MPI 5.0 section 12.5). One lookup of the window.
fn sync_at(win: Handle, rank: c_int, call: impl FnOnce(usize) -> SyncCall) -> MpiResult<()> {
    let (w, pending) = with_win(win, |e| Ok((e.raw.clone(), !e.landings.is_empty())))?;
    match target_of(&w, rank)? {
        Some(target) => sync_on(win, &w, pending, call(target)),
        None => Ok(()),
    }
}

/// The window ranks of the members of `group` for `MPI_Win_post` (`slot` 0) or
/// `MPI_Win_start` (1) on `win`: [`group_ranks`], kept per window and slot for the last group
/// (by its members, so whatever became of the handle since).
fn pscw_ranks(win: Handle, group: Handle, slot: usize) -> MpiResult<Vec<usize>> {
    // The window checked before the group, as ever (its error class first).
    with_win(win, |_| Ok(()))?;
    let g = super::group::group(group)?;
    let w = with_win(win, |e| {
        Ok(match &e.pscw_groups[slot] {
            Some((kept, ranks)) if *kept == g => Err(ranks.clone()),
            _ => Ok(e.raw.clone()),
        })
    })?;
    let w = match w {
        Err(ranks) => return Ok(ranks),
        Ok(w) => w,
    };
    let ranks = group_ranks(&w, &g)?;
    with_win(win, |e| {
        e.pscw_groups[slot] = Some((g, ranks.clone()));
        Ok(())
    })?;
    Ok(ranks)
}

/// The window ranks of the members of `g` (which must all be in the window's group).
fn group_ranks(w: &RawWindow, g: &rmca::Group) -> MpiResult<Vec<usize>> {
    let wg = w.communicator().group();
    let all: Vec<usize> = (0..g.size()).collect();
    let t = g.translate_ranks(&all, &wg).map_err(MpiError::from)?;
    t.into_iter()
        .map(|r| {
            r.ok_or_else(|| {
                MpiError::new(
                    MPI_ERR_GROUP,
                    "the group has a process outside the window's group",
                )
            })
        })
        .collect()
}

/// `MPI_Win_fence`: ends the fence epoch (every operation completes) and starts the next
/// unless `MPI_MODE_NOSUCCEED`.
#[export]
pub unsafe extern "C" fn MPI_Win_fence(assert: c_int, win: Handle) -> c_int {
    call_win("MPI_Win_fence", win, || {
        sync(
            win,
            SyncCall::Fence {
                succeed: assert & MPI_MODE_NOSUCCEED == 0,
            },
        )
    })
}

/// `MPI_Win_post`: expose the window to the origins of `group`.
#[export]
pub unsafe extern "C" fn MPI_Win_post(group: Handle, _assert: c_int, win: Handle) -> c_int {
    call_win("MPI_Win_post", win, || {
        let ranks = pscw_ranks(win, group, 0)?;
        sync(win, SyncCall::Post(ranks))
    })
}

/// `MPI_Win_start`: access the targets of `group` (waits for their posts).
#[export]
pub unsafe extern "C" fn MPI_Win_start(group: Handle, _assert: c_int, win: Handle) -> c_int {
    call_win("MPI_Win_start", win, || {
        let ranks = pscw_ranks(win, group, 1)?;
        sync(win, SyncCall::Start(ranks))
    })
}

/// `MPI_Win_complete`: end the access epoch of `MPI_Win_start`.
#[export]
pub unsafe extern "C" fn MPI_Win_complete(win: Handle) -> c_int {
    call_win("MPI_Win_complete", win, || sync(win, SyncCall::Complete))
}

/// `MPI_Win_wait`: end the exposure epoch of `MPI_Win_post` once every origin completed.
#[export]
pub unsafe extern "C" fn MPI_Win_wait(win: Handle) -> c_int {
    call_win("MPI_Win_wait", win, || sync(win, SyncCall::Wait))
}

/// `MPI_Win_test`: `MPI_Win_wait` if it would return now (`flag` true), else nothing.
#[export]
pub unsafe extern "C" fn MPI_Win_test(win: Handle, flag: *mut c_int) -> c_int {
    call_win("MPI_Win_test", win, || {
        if flag.is_null() {
            return Err(super::null_argument("flag"));
        }
        let done = raw(win)?.test_exposure().map_err(win_error)?;
        // SAFETY: the caller's int (checked non-null).
        unsafe { flag.write(c_int::from(done)) };
        Ok(())
    })
}

fn lock_kind(lock_type: c_int) -> MpiResult<LockKind> {
    match lock_type {
        MPI_LOCK_EXCLUSIVE => Ok(LockKind::Exclusive),
        MPI_LOCK_SHARED => Ok(LockKind::Shared),
        _ => Err(MpiError::new(
            MPI_ERR_LOCKTYPE,
            format!("lock type {lock_type} is neither MPI_LOCK_EXCLUSIVE nor MPI_LOCK_SHARED"),
        )),
    }
}

/// The fast path of `MPI_Win_lock` with one lookup of the window and no call into it, when
/// the lock is granted at once and nothing else is in the way: on a window with a direct
/// view (osc-sm), the module's lock taken through the view ([`DirectView::lock`]: one
/// atomic on the target's lock word); on a window with a lent path (osc-rdma's created
/// windows, a member of the node), the path's ([`LentPath::lock`]: the same atomic, the
/// module adopting the lock at its next call). False, nothing changed, sends the call down
/// the general path (a contended lock, which it waits for; a lock type that is neither,
/// `MPI_PROC_NULL`, a rank outside the group, a lock held already, another epoch open: its
/// errors).
#[inline(always)]
fn lock_direct(lock_type: c_int, rank: c_int, assert: c_int, win: Handle) -> bool {
    let kind = match lock_type {
        MPI_LOCK_EXCLUSIVE => LockKind::Exclusive,
        MPI_LOCK_SHARED => LockKind::Shared,
        _ => return false,
    };
    let Ok(t) = usize::try_from(rank) else {
        return false;
    };
    let nocheck = assert & MPI_MODE_NOCHECK != 0;
    with_entry(
        win,
        #[inline(always)]
        |e| match (&e.view, &e.lent) {
            (Some(v), _) => v.lock(t, kind, nocheck),
            (None, Some(l)) => l.lock(t, kind, nocheck),
            _ => false,
        },
    )
}

/// The fast path of `MPI_Win_unlock`, as [`lock_direct`]'s: the view's lock released
/// (every operation on `rank` complete already), or the lent path's (what it queued moved
/// first, [`LentPath::unlock`]). False, nothing changed: the general path decides.
#[inline(always)]
fn unlock_direct(rank: c_int, win: Handle) -> bool {
    let Ok(t) = usize::try_from(rank) else {
        return false;
    };
    with_entry(
        win,
        #[inline(always)]
        |e| match (&e.view, &e.lent) {
            (Some(v), _) => v.unlock(t),
            (None, Some(l)) => l.unlock(t),
            _ => false,
        },
    )
}

/// `f` on the entry of window `win`, once the library runs (as `with_win`), `win` is a
/// window and it has no results waiting to land (the general path keeps their order with
/// this call). What `state::with` checks (this thread may call, the library runs, no call
/// of it is under way below this one), without taking the state; the window table only
/// read.
///
/// The four fast synchronizations (lock, unlock, lock_all, unlock_all) each choose between
/// the view and the lent path in their own closure: one helper taking a closure per path
/// cost osc-sm's lock+put+unlock 48 more instructions (467 -> 515, callgrind).
#[inline(always)]
fn with_entry(win: Handle, f: impl FnOnce(&WinEntry) -> bool) -> bool {
    if !state::installed() {
        return false;
    }
    let Some(tab) = WINS.peek() else {
        return false;
    };
    match index(win).and_then(|i| tab.get(i)).and_then(Option::as_ref) {
        Some(e) if e.landings.is_empty() => f(e),
        _ => false,
    }
}

/// Lock calls taken by the fast paths (`MPI_Win_lock`, `MPI_Win_lock_all`), process-wide:
/// every [`FAST_LOCK_PROGRESS_EVERY`]th runs a progress pass ([`fast_lock_counted`]).
/// Relaxed load and store, not a read-modify-write: threads racing on it only lose counts.
static FAST_LOCKS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Fast-path lock calls per progress pass of the runtime. The fast path makes no call into
/// the window or the runtime, so a program spinning on lock/unlock alone (waiting for a flag
/// a peer sets once a message of this rank arrived) would progress nothing; MPI's progress
/// rule wants those calls to move point-to-point traffic. A pass costs about 900
/// instructions (osc-sm, ob1 over shm): under 1 per call at this rate, the counter 4-5; a
/// pass every 20 us or so of lock/unlock spinning.
const FAST_LOCK_PROGRESS_EVERY: u32 = 1024;

/// Count a lock the fast path took on `win` (valid: the fast path just used it), and run a
/// progress pass every [`FAST_LOCK_PROGRESS_EVERY`] of them.
#[inline(always)]
fn fast_lock_counted(win: Handle) {
    use std::sync::atomic::Ordering::Relaxed;
    let n = FAST_LOCKS.load(Relaxed).wrapping_add(1);
    FAST_LOCKS.store(n, Relaxed);
    if n.is_multiple_of(FAST_LOCK_PROGRESS_EVERY) {
        fast_lock_progress(win);
    }
}

/// The progress pass of [`fast_lock_counted`]: the runtime's and the window's, as
/// `MPI_Win_sync`'s. It cannot fail on a window the fast path just used; if the library
/// refuses the call (another call of it under way below this one), nothing is done.
#[cold]
#[inline(never)]
fn fast_lock_progress(win: Handle) {
    if let Err(e) = super::caught(|| {
        raw(win)?.progress();
        Ok(())
    }) {
        tracing::debug!(error = ?e, "MPI_Win_lock: no progress pass");
    }
}

/// The fast path of the passive-target synchronizations of one target (`MPI_Win_lock`,
/// `_unlock`, `_flush`, `_flush_local`) on a window without a direct view (osc-rdma's
/// created windows): `call` on window rank `rank`, run by the window with one lookup of it
/// (no state taken, no second lookup for results to land: there are none) when `rank` is
/// one of its members and the window has no results waiting to land. `None`, nothing done,
/// sends the call down the general path (`MPI_PROC_NULL`, a rank outside the group, results
/// to land, a direct view, the library not running); the window's errors go to its error
/// handler as the general path's do.
#[inline(always)]
fn sync_quick(
    fname: &'static str,
    rank: c_int,
    win: Handle,
    call: impl FnOnce(usize) -> SyncCall,
) -> Option<c_int> {
    let t = usize::try_from(rank).ok()?;
    if !state::installed() {
        return None;
    }
    let w = {
        let tab = WINS.peek()?;
        match index(win).and_then(|i| tab.get(i)).and_then(Option::as_ref) {
            Some(e) if e.view.is_none() && e.landings.is_empty() => e.raw.clone(),
            _ => return None,
        }
    };
    if t >= w.communicator().size() {
        return None;
    }
    Some(call_win(fname, win, || w.sync(call(t)).map_err(win_error)))
}

/// `MPI_Win_lock`: a passive-target epoch on `rank` (waits for the lock).
#[export]
pub unsafe extern "C" fn MPI_Win_lock(
    lock_type: c_int,
    rank: c_int,
    assert: c_int,
    win: Handle,
) -> c_int {
    if lock_direct(lock_type, rank, assert, win) {
        fast_lock_counted(win);
        return MPI_SUCCESS;
    }
    let kind = match lock_type {
        MPI_LOCK_EXCLUSIVE => Some(LockKind::Exclusive),
        MPI_LOCK_SHARED => Some(LockKind::Shared),
        _ => None,
    };
    if let Some(kind) = kind {
        let nocheck = assert & MPI_MODE_NOCHECK != 0;
        if let Some(rc) = sync_quick("MPI_Win_lock", rank, win, |target| SyncCall::Lock {
            kind,
            target,
            nocheck,
        }) {
            return rc;
        }
    }
    call_win("MPI_Win_lock", win, || {
        let kind = lock_kind(lock_type)?;
        sync_at(win, rank, |target| SyncCall::Lock {
            kind,
            target,
            nocheck: assert & MPI_MODE_NOCHECK != 0,
        })
    })
}

/// `MPI_Win_unlock`: end the epoch; every operation on `rank` completes.
#[export]
pub unsafe extern "C" fn MPI_Win_unlock(rank: c_int, win: Handle) -> c_int {
    // The fast path (the lock word released, every operation on `rank` complete); the
    // general path for the rest, and its errors.
    if unlock_direct(rank, win) {
        return MPI_SUCCESS;
    }
    if let Some(rc) = sync_quick("MPI_Win_unlock", rank, win, SyncCall::Unlock) {
        return rc;
    }
    call_win("MPI_Win_unlock", win, || {
        sync_at(win, rank, SyncCall::Unlock)
    })
}

/// `MPI_Win_lock_all`: a shared passive-target epoch on every member.
#[export]
pub unsafe extern "C" fn MPI_Win_lock_all(assert: c_int, win: Handle) -> c_int {
    // The fast path, as `MPI_Win_lock`'s: every shared lock granted at once through the view
    // (osc-sm) or the lent path (osc-rdma: [`LentPath::lock_all`]).
    let nocheck = assert & MPI_MODE_NOCHECK != 0;
    if with_entry(
        win,
        #[inline(always)]
        |e| match (&e.view, &e.lent) {
            (Some(v), _) => v.lock_all(nocheck),
            (None, Some(l)) => l.lock_all(nocheck),
            _ => false,
        },
    ) {
        fast_lock_counted(win);
        return MPI_SUCCESS;
    }
    call_win("MPI_Win_lock_all", win, || {
        sync(
            win,
            SyncCall::LockAll {
                nocheck: assert & MPI_MODE_NOCHECK != 0,
            },
        )
    })
}

/// `MPI_Win_unlock_all`.
#[export]
pub unsafe extern "C" fn MPI_Win_unlock_all(win: Handle) -> c_int {
    // (The lent path's: what it queued moved, every word given back.)
    if with_entry(
        win,
        #[inline(always)]
        |e| match (&e.view, &e.lent) {
            (Some(v), _) => v.unlock_all(),
            (None, Some(l)) => l.unlock_all(),
            _ => false,
        },
    ) {
        return MPI_SUCCESS;
    }
    call_win("MPI_Win_unlock_all", win, || sync(win, SyncCall::UnlockAll))
}

/// The fast path of `MPI_Win_flush`, `_flush_local` (`rank`) and their `_all` forms
/// (`None`), with one lookup of the window and no call into it (no error handler either:
/// nothing here can fail):
/// - on a window with a direct view (osc-sm): the view's flag for the module's epoch
///   check, then a memory fence;
/// - on a window with a lent path (osc-rdma), one target: what the path queued moved by
///   its CMA call, when the module has nothing else outstanding
///   ([`LentPath::flush`]; `local`, [`LentPath::flush_local`]: small puts copied aside
///   instead, moved by a later flush); every [`rmca::window::QUICK_PASS_EVERY`]th such
///   flush runs a progress pass after it ([`lent_flush_progress`]).
///
/// False sends the call down the general path (another module, results waiting to land,
/// no passive-target epoch, `MPI_PROC_NULL`, a rank outside the group, a window that is
/// not one, or the library not running), which checks again and raises the error.
#[inline(always)]
fn flush_direct(win: Handle, rank: Option<c_int>, local: bool) -> bool {
    let t = match rank.map(usize::try_from) {
        Some(Ok(t)) => Some(t),
        Some(Err(_)) => return false,
        None => None,
    };
    // What `with_view` checks, the lent path besides.
    if !state::installed() {
        return false;
    }
    let lent = {
        let Some(tab) = WINS.peek() else {
            return false;
        };
        let Some(e) = index(win).and_then(|i| tab.get(i)).and_then(Option::as_ref) else {
            return false;
        };
        if !e.landings.is_empty() {
            return false;
        }
        match (&e.view, &e.lent, t) {
            // The view's flag is the module's own check (an open passive-target epoch, no
            // synchronization in progress); every direct operation completed when issued,
            // so a fence orders them before what follows, as the module's flush does.
            // Local or not is the same here: complete at the origin is complete at the
            // target.
            (Some(v), _, _) => {
                if !v.may_flush(t) {
                    return false;
                }
                std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
                return true;
            }
            // Complete at the target once the CMA call returned; local: at the origin once
            // the puts are staged.
            (None, Some(l), Some(t)) if local => l.flush_local(t),
            (None, Some(l), Some(t)) => l.flush(t),
            _ => false,
        }
    };
    if lent {
        use std::sync::atomic::Ordering::Relaxed;
        let n = LENT_FLUSHES.load(Relaxed).wrapping_add(1);
        LENT_FLUSHES.store(n, Relaxed);
        if n.is_multiple_of(rmca::window::QUICK_PASS_EVERY) {
            lent_flush_progress(win);
        }
    }
    lent
}

/// Flushes finished on a window's lent path ([`flush_direct`]), process-wide: every
/// [`rmca::window::QUICK_PASS_EVERY`]th runs a progress pass. They make no call into the
/// runtime, so a program spinning on put and flush alone (waiting for a flag a peer sets
/// once a message of this rank arrived: `tests/c/win_flush_progress.c`) would progress
/// nothing; MPI's progress rule wants those calls to move point-to-point traffic. Relaxed
/// load and store, not a read-modify-write: threads racing on it only lose counts.
static LENT_FLUSHES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The progress pass of [`flush_direct`]'s lent flushes: the runtime's and the window's,
/// as `MPI_Win_sync`'s. It cannot fail on a window the fast path just used; if the library
/// refuses the call (another call of it under way below this one), nothing is done.
#[cold]
#[inline(never)]
fn lent_flush_progress(win: Handle) {
    if let Err(e) = super::caught(|| {
        raw(win)?.progress();
        Ok(())
    }) {
        tracing::debug!(error = ?e, "MPI_Win_flush: no progress pass");
    }
}

/// `MPI_Win_flush`: the operations on `rank` complete at the target.
#[export]
pub unsafe extern "C" fn MPI_Win_flush(rank: c_int, win: Handle) -> c_int {
    if flush_direct(win, Some(rank), false) {
        return MPI_SUCCESS;
    }
    if let Some(rc) = sync_quick("MPI_Win_flush", rank, win, |t| SyncCall::Flush(Some(t))) {
        return rc;
    }
    call_win("MPI_Win_flush", win, || {
        sync_at(win, rank, |t| SyncCall::Flush(Some(t)))
    })
}

/// `MPI_Win_flush_all`.
#[export]
pub unsafe extern "C" fn MPI_Win_flush_all(win: Handle) -> c_int {
    if flush_direct(win, None, false) {
        return MPI_SUCCESS;
    }
    call_win("MPI_Win_flush_all", win, || {
        sync(win, SyncCall::Flush(None))
    })
}

/// `MPI_Win_flush_local`: the operations on `rank` complete at the origin.
#[export]
pub unsafe extern "C" fn MPI_Win_flush_local(rank: c_int, win: Handle) -> c_int {
    if flush_direct(win, Some(rank), true) {
        return MPI_SUCCESS;
    }
    if let Some(rc) = sync_quick("MPI_Win_flush_local", rank, win, |t| {
        SyncCall::FlushLocal(Some(t))
    }) {
        return rc;
    }
    call_win("MPI_Win_flush_local", win, || {
        sync_at(win, rank, |t| SyncCall::FlushLocal(Some(t)))
    })
}

/// `MPI_Win_flush_local_all`.
#[export]
pub unsafe extern "C" fn MPI_Win_flush_local_all(win: Handle) -> c_int {
    if flush_direct(win, None, true) {
        return MPI_SUCCESS;
    }
    call_win("MPI_Win_flush_local_all", win, || {
        sync(win, SyncCall::FlushLocal(None))
    })
}

/// `MPI_Win_sync`: synchronize the public and private copies: one copy in the unified
/// model, so a memory barrier (and a progress pass, for the program that polls its window).
#[export]
pub unsafe extern "C" fn MPI_Win_sync(win: Handle) -> c_int {
    call_win("MPI_Win_sync", win, || {
        let w = raw(win)?;
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        w.progress();
        Ok(())
    })
}

// ---- name, group, attributes, info, error handler ----

/// `MPI_Win_get_group`: a group of the window's members.
#[export]
pub unsafe extern "C" fn MPI_Win_get_group(win: Handle, group: *mut Handle) -> c_int {
    call_win("MPI_Win_get_group", win, || {
        let g = raw(win)?.communicator().group();
        super::group::add_group(g, group)
    })
}

/// `MPI_Win_set_name`.
#[export]
pub unsafe extern "C" fn MPI_Win_set_name(win: Handle, win_name: *const c_char) -> c_int {
    call_win("MPI_Win_set_name", win, || {
        if win_name.is_null() {
            return Err(super::null_argument("win_name"));
        }
        // SAFETY: MPI_Win_set_name's contract: a NUL-terminated string.
        let mut name = unsafe { std::ffi::CStr::from_ptr(win_name) }
            .to_string_lossy()
            .into_owned();
        while name.len() > MPI_MAX_OBJECT_NAME - 1 {
            name.pop();
        }
        with_win(win, |e| {
            e.name = name;
            Ok(())
        })
    })
}

/// `MPI_Win_get_name`.
#[export]
pub unsafe extern "C" fn MPI_Win_get_name(
    win: Handle,
    win_name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    call_win("MPI_Win_get_name", win, || {
        // The null handle has its name, as in MPICH and Open MPI (mpi4py asks for it).
        let name = if win == MPI_WIN_NULL {
            "MPI_WIN_NULL".to_owned()
        } else {
            with_win(win, |e| Ok(e.name.clone()))?
        };
        // SAFETY: the contract: `win_name` holds MPI_MAX_OBJECT_NAME bytes.
        unsafe { put_string(win_name, MPI_MAX_OBJECT_NAME, resultlen, &name) }
    })
}

/// `MPI_Win_set_attr`.
#[export]
pub unsafe extern "C" fn MPI_Win_set_attr(
    win: Handle,
    win_keyval: c_int,
    attribute_val: *mut c_void,
) -> c_int {
    call_win("MPI_Win_set_attr", win, || {
        with_win(win, |_| Ok(()))?;
        if (MPI_WIN_BASE..=MPI_WIN_MODEL).contains(&win_keyval) {
            return Err(MpiError::new(
                MPI_ERR_KEYVAL,
                format!(
                    "keyval {win_keyval} is a predefined window attribute, which cannot be set"
                ),
            ));
        }
        super::attr::set(
            super::attr::Kind::Win,
            win,
            win_keyval,
            attribute_val as usize,
        )
    })
}

/// `MPI_Win_get_attr`: a keyval's value, or the predefined `MPI_WIN_BASE` (the base
/// address), `MPI_WIN_SIZE`, `MPI_WIN_DISP_UNIT`, `MPI_WIN_CREATE_FLAVOR` and
/// `MPI_WIN_MODEL` (pointers to their values).
#[export]
pub unsafe extern "C" fn MPI_Win_get_attr(
    win: Handle,
    win_keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    call_win("MPI_Win_get_attr", win, || {
        if attribute_val.is_null() || flag.is_null() {
            return Err(super::null_argument(if flag.is_null() {
                "flag"
            } else {
                "attribute_val"
            }));
        }
        let predefined = with_win(win, |e| {
            let a = &*e.attrs;
            Ok(match win_keyval {
                MPI_WIN_BASE => Some(a.base),
                MPI_WIN_SIZE => Some(&a.size as *const isize as usize),
                MPI_WIN_DISP_UNIT => Some(&a.disp_unit as *const c_int as usize),
                MPI_WIN_CREATE_FLAVOR => Some(&a.flavor as *const c_int as usize),
                MPI_WIN_MODEL => Some(&a.model as *const c_int as usize),
                _ => None,
            })
        })?;
        let v = match predefined {
            Some(v) => Some(v),
            None => super::attr::get(super::attr::Kind::Win, win, win_keyval)?,
        };
        // SAFETY: the contract: `attribute_val` is a `void **`, `flag` an int.
        unsafe {
            if let Some(v) = v {
                attribute_val.cast::<usize>().write(v);
            }
            flag.write(c_int::from(v.is_some()));
        }
        Ok(())
    })
}

/// `MPI_Win_delete_attr`.
#[export]
pub unsafe extern "C" fn MPI_Win_delete_attr(win: Handle, win_keyval: c_int) -> c_int {
    call_win("MPI_Win_delete_attr", win, || {
        with_win(win, |_| Ok(()))?;
        super::attr::delete(super::attr::Kind::Win, win, win_keyval)
    })
}

/// `MPI_Win_set_errhandler`.
#[export]
pub unsafe extern "C" fn MPI_Win_set_errhandler(win: Handle, errhandler: Handle) -> c_int {
    call_win("MPI_Win_set_errhandler", win, || {
        let h = state::errhandler_for(errhandler, ErrhKind::Win)?;
        with_win(win, |e| {
            e.errhandler = h;
            Ok(())
        })
    })
}

/// `MPI_Win_get_errhandler`.
#[export]
pub unsafe extern "C" fn MPI_Win_get_errhandler(win: Handle, errhandler: *mut Handle) -> c_int {
    call_win("MPI_Win_get_errhandler", win, || {
        let h = with_win(win, |e| Ok(e.errhandler))?;
        // SAFETY: the caller's handle.
        unsafe { put(errhandler, state::State::errhandler_handle(h), "errhandler") }
    })
}

/// `MPI_Win_call_errhandler`: run the window's error handler on `errorcode`.
#[export]
pub unsafe extern "C" fn MPI_Win_call_errhandler(win: Handle, errorcode: c_int) -> c_int {
    let handler = match with_win(win, |e| Ok(e.errhandler)) {
        Ok(h) => h,
        Err(e) => return raise("MPI_Win_call_errhandler", MPI_COMM_WORLD, e),
    };
    invoke(
        "MPI_Win_call_errhandler",
        handler,
        win,
        MpiError::new(errorcode, "raised by MPI_Win_call_errhandler"),
    );
    MPI_SUCCESS
}

/// The hints a window reports: those set, over rmca's defaults.
fn hints(set: &[(String, String)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = [
        ("no_locks", "false"),
        ("accumulate_ordering", "rar,raw,war,waw"),
        ("accumulate_ops", "same_op_no_op"),
        ("same_size", "false"),
        ("same_disp_unit", "false"),
        ("mpi_accumulate_granularity", "0"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    for (k, v) in set {
        match out.iter_mut().find(|(ok, _)| ok == k) {
            Some(e) => e.1 = v.clone(),
            None => out.push((k.clone(), v.clone())),
        }
    }
    out
}

/// `MPI_Win_get_info`: the hints in use (a new info object the program frees).
#[export]
pub unsafe extern "C" fn MPI_Win_get_info(win: Handle, info_used: *mut Handle) -> c_int {
    call_win("MPI_Win_get_info", win, || {
        if info_used.is_null() {
            return Err(super::null_argument("info_used"));
        }
        let entries = with_win(win, |e| Ok(hints(&e.info)))?;
        let h = super::info::new_info(entries)?;
        // SAFETY: the caller's handle (checked non-null).
        unsafe { info_used.write(h) };
        Ok(())
    })
}

/// `MPI_Win_set_info`: record hints (rmca's one component needs none of them).
#[export]
pub unsafe extern "C" fn MPI_Win_set_info(win: Handle, info: Handle) -> c_int {
    call_win("MPI_Win_set_info", win, || {
        let entries = info_entries(info)?;
        with_win(win, |e| {
            for (k, v) in entries {
                match e.info.iter_mut().find(|(ok, _)| *ok == k) {
                    Some(x) => x.1 = v,
                    None => e.info.push((k, v)),
                }
            }
            Ok(())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The accumulate fast path resolves an operation and a datatype to what the general
    /// path's `acc_of` gives, for every predefined datatype and operation it takes (and it
    /// takes the common ones), so the two paths never compute differently.
    #[test]
    fn the_fast_resolution_agrees_with_acc_of() {
        let mut taken = 0;
        for dt in 0x200..0x300 {
            let Ok(ty) = Ty::lookup(dt) else { continue };
            // 0x20 is MPI_OP_NULL; the predefined operations follow it.
            for op in 0x20..0x40 {
                for fetch in [false, true] {
                    if let Some(fast) = acc_direct_of(op, dt, fetch) {
                        taken += 1;
                        assert_eq!(acc_of(op, &ty, &ty).ok(), Some(fast), "{op:#x} on {dt:#x}");
                    }
                }
            }
        }
        assert!(
            taken > 300,
            "the fast path takes {taken} (operation, datatype) pairs"
        );
        for (op, dt) in [
            (MPI_SUM, 0x209),
            (MPI_SUM, CHAR_HANDLE),
            (MPI_REPLACE, 0x214),
        ] {
            assert!(acc_direct_of(op, dt, false).is_some(), "{op:#x} on {dt:#x}");
        }
        assert_eq!(
            acc_direct_of(MPI_NO_OP, 0x209, false),
            None,
            "MPI_NO_OP needs a fetch"
        );
        assert_eq!(
            acc_direct_of(MPI_MINLOC, 0x22b, false),
            None,
            "pairs: the general path"
        );
        assert_eq!(
            crate::dtype::lookup(CHAR_HANDLE).map(|t| t.name),
            Some("MPI_CHAR")
        );
    }

    /// The compare-and-swap fast paths take what the general path takes (`MPI_CHAR`, OSU's
    /// `osu_cas_latency` datatype, included), at the width the general path compares, and
    /// leave the rest to its `MPI_ERR_TYPE`.
    #[test]
    fn the_fast_compare_and_swap_takes_the_general_paths_datatypes() {
        for dt in 0x200..0x300 {
            let general = Ty::lookup(dt)
                .ok()
                .and_then(|ty| ty.reduction_base().ok())
                .and_then(|t| cas_width(&t));
            assert_eq!(cas_elem(dt).map(|(_, e)| e), general, "{dt:#x}");
            if let Some((size, elem)) = cas_elem(dt) {
                assert_eq!(Some(size), crate::dtype::predefined_size(dt), "{dt:#x}");
                assert_eq!(size, elem.size(), "{dt:#x}");
            }
        }
        // MPI_CHAR, MPI_INT, MPI_LONG, MPI_C_BOOL, MPI_BYTE, MPI_SHORT.
        for (dt, size) in [
            (CHAR_HANDLE, 1),
            (0x209, 4),
            (0x20a, 8),
            (0x238, 1),
            (0x247, 1),
            (0x208, 2),
        ] {
            assert_eq!(cas_elem(dt).map(|(s, _)| s), Some(size), "{dt:#x}");
        }
        // MPI_FLOAT, MPI_DOUBLE, MPI_2INT, MPI_LONG_DOUBLE, MPI_C_FLOAT_COMPLEX, MPI_2INTEGER,
        // no datatype.
        for dt in [0x210, 0x214, 0x22b, 0x220, 0x212, 0x232, 0x1000, 0] {
            assert_eq!(cas_elem(dt), None, "{dt:#x}");
        }
    }
}
