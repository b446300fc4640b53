//! Reduction operations: the predefined ones on their element types (and `MPI_CHAR`, as an
//! integer, as MPICH and Open MPI allow; `long double` and complex products in
//! [`super::op_long`]), `MPI_MINLOC` and `MPI_MAXLOC` on the C value-index
//! pair types (with the C struct padding, `MPI_LONG_DOUBLE_INT` included), and user operations
//! (`MPI_Op_create`, `MPI_Op_create_c`), run by every reducing collective through [`reduce`]
//! and by `MPI_Reduce_local`. A user function is called on whole runs of elements (`len`
//! elements at once, as MPI intends), whatever the size of an element.
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};

use bytemuck::Pod;
use rmca::coll::{Op, Reducible, Reduction, UserOp};
use rmca::raw::RawReduction;

use super::coll::{apart, in_place, reduce_recv, reduce_send};
use super::op_long::Special;
use super::types::Ty;
use super::{call, put};
use crate::abi::*;
use crate::dtype::{self, Elem};
use crate::state::{self, Confined, MpiError, MpiResult};
use rmca_mpi_export::export;

/// `MPI_User_function`.
pub type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut Handle);

/// `MPI_User_function_c` (`MPI_Op_create_c`): the element count is an `MPI_Count`.
pub type UserFnC = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut MPI_Count, *mut Handle);

/// The function of a user operation, of either form.
#[derive(Clone, Copy)]
pub enum AnyUserFn {
    Int(UserFn),
    Count(UserFnC),
}

impl AnyUserFn {
    /// `inout[i] = input[i] op inout[i]` for `len` elements of `dt`, in the program's layout.
    ///
    /// # Safety
    /// `input` and `inout` hold `len` elements of `dt` (one per extent).
    unsafe fn call(self, input: *mut u8, inout: *mut u8, len: usize, dt: Handle) {
        let mut dt = dt;
        // SAFETY: the function the program registered, on the caller's buffers.
        unsafe {
            match self {
                AnyUserFn::Int(f) => {
                    // The caller cuts runs to at most c_int::MAX elements.
                    let mut n = len as c_int;
                    f(input.cast(), inout.cast(), &mut n, &mut dt);
                }
                AnyUserFn::Count(f) => {
                    let mut n = len as MPI_Count;
                    f(input.cast(), inout.cast(), &mut n, &mut dt);
                }
            }
        }
    }
}

/// Handles of user operations: this plus an index.
pub const OP_BASE: Handle = DYNAMIC_BASE * 4;
const MAX_OPS: usize = DYNAMIC_BASE;

#[derive(Clone, Copy)]
struct UserOpEntry {
    f: AnyUserFn,
    commutative: bool,
}

/// The user operations, by handle less [`OP_BASE`] (process-wide: see [`Confined`]).
static OPS: Confined<Vec<Option<UserOpEntry>>> = Confined::new("user operations");

/// The value of a value-index pair type; the index is a C `int` at `index_at`.
#[derive(Clone, Copy, Debug)]
pub enum PairValue {
    I16,
    I32,
    I64,
    F32,
    F64,
    /// C `long double` (x87 extended precision in 16 bytes on x86, IEEE binary128 elsewhere).
    LongDouble,
}

/// How a reduction combines elements.
#[derive(Clone, Copy)]
pub enum Reducer {
    /// A predefined operation on packed elements of a predefined type.
    Builtin(Op, Elem),
    /// `MPI_MINLOC` / `MPI_MAXLOC` on packed pairs of `size` bytes.
    Pair {
        max: bool,
        value: PairValue,
        index_at: usize,
        size: usize,
    },
    /// A predefined operation on packed elements of a type Rust has no number for
    /// (`long double`, complex products), computed by [`super::op_long`].
    Special(Special),
    /// A user function on elements of `extent` bytes in the program's own layout.
    User {
        f: AnyUserFn,
        commutative: bool,
        dt: Handle,
        extent: usize,
    },
}

impl Reducer {
    /// Does it work on the program's layout (one element per datatype extent) rather than
    /// on packed data?
    pub fn raw_layout(&self) -> bool {
        matches!(self, Reducer::User { .. })
    }
}

fn op_error(msg: impl Into<String>) -> MpiError {
    MpiError::new(MPI_ERR_OP, msg)
}

/// The reducer of `op` over `dt` (resolved as `ty`).
pub fn reducer(op: Handle, dt: Handle, ty: &Ty) -> MpiResult<Reducer> {
    if let Some(e) = user_op(op)? {
        let extent = ty.raw_extent()?;
        return Ok(Reducer::User {
            f: e.f,
            commutative: e.commutative,
            dt,
            extent,
        });
    }
    let info = dtype::lookup_op(op).ok_or_else(|| {
        op_error(format!(
            "invalid operation {op:#x}: not a predefined operation or one created by MPI_Op_create and not freed"
        ))
    })?;
    let t = ty.reduction_base()?;
    if op == MPI_MINLOC || op == MPI_MAXLOC {
        let (value, index_at) = match t.name {
            "MPI_2INT" | "MPI_2INTEGER" => (PairValue::I32, 4),
            "MPI_FLOAT_INT" | "MPI_2REAL" => (PairValue::F32, 4),
            "MPI_DOUBLE_INT" => (PairValue::F64, 8),
            "MPI_2DOUBLE_PRECISION" => (PairValue::F64, 8),
            "MPI_LONG_INT" => (PairValue::I64, 8),
            // Packed pairs carry no padding (the index follows the value at once).
            "MPI_SHORT_INT" => (PairValue::I16, 2),
            "MPI_LONG_DOUBLE_INT" => (PairValue::LongDouble, 16),
            _ => {
                return Err(op_error(format!(
                    "{} is not defined on {}: use a value-index pair type (MPI_2INT, MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT, MPI_SHORT_INT, MPI_LONG_DOUBLE_INT, MPI_2REAL, MPI_2DOUBLE_PRECISION, MPI_2INTEGER)",
                    info.name, t.name
                )))
            }
        };
        return Ok(Reducer::Pair {
            max: op == MPI_MAXLOC,
            value,
            index_at,
            size: t.size,
        });
    }
    let Some(rop) = info.op else {
        return Err(op_error(format!(
            "{} is not a reduction rmca implements (MPI_REPLACE and MPI_NO_OP are for one-sided accumulates)",
            info.name
        )));
    };
    // MPI_CHAR is a C integer to MPICH and Open MPI, whose reductions accept it (OSU's
    // reduction benchmarks sum MPI_CHAR); its signedness is C's `char`'s.
    if t.name == "MPI_CHAR" && dtype::op_allowed(rop, dtype::Class::Integer) {
        let elem = if std::ffi::c_char::MIN == 0 {
            Elem::U8
        } else {
            Elem::I8
        };
        return Ok(Reducer::Builtin(rop, elem));
    }
    if let Some(s) = Special::of(rop, &t) {
        return Ok(Reducer::Special(s));
    }
    match t.elem {
        Some(elem) if dtype::op_allowed(rop, t.class) => Ok(Reducer::Builtin(rop, elem)),
        // A sum of complex numbers is the sums of their real and imaginary parts: the
        // buffer as twice as many reals (products are `Special`).
        _ if t.class == dtype::Class::Complex && rop == Op::Sum && t.size == 8 => {
            Ok(Reducer::Builtin(rop, Elem::F32))
        }
        _ if t.class == dtype::Class::Complex && rop == Op::Sum && t.size == 16 => {
            Ok(Reducer::Builtin(rop, Elem::F64))
        }
        _ if t.class == dtype::Class::Complex && dtype::op_allowed(rop, t.class) => {
            Err(op_error(format!(
                "{} on {}: rmca reduces the float, double and long double complex types only (not half- or quad-precision ones)",
                info.name, t.name
            )))
        }
        _ => Err(op_error(format!(
            "{} is not defined on {} (MPI 5.0 section 6.9.2)",
            info.name, t.name
        ))),
    }
}

/// The datatype and reducer of a reduction of `n` elements of `dt` with `op`: as
/// [`Ty::for_use`] and [`reducer`], except that `MPI_DATATYPE_NULL` with no element is an
/// empty reduction of bytes (the operation still checked: a valid handle of a reduction),
/// as collectives accept it wherever nothing moves (see `coll::side_type`).
pub fn reduction_of(op: Handle, dt: Handle, n: usize) -> MpiResult<(Ty, Reducer)> {
    if dt != MPI_DATATYPE_NULL || n > 0 {
        let ty = Ty::for_use(dt)?;
        let r = reducer(op, dt, &ty)?;
        return Ok((ty, r));
    }
    let ty = Ty::for_message(dt, 0)?;
    if let Some(e) = user_op(op)? {
        let r = Reducer::User {
            f: e.f,
            commutative: e.commutative,
            // Never called: no element.
            dt,
            extent: 1,
        };
        return Ok((ty, r));
    }
    match dtype::lookup_op(op) {
        // No element is combined: any reduction on bytes does.
        Some(info) if info.op.is_some() => Ok((ty, Reducer::Builtin(Op::Sum, Elem::U8))),
        Some(info) => Err(op_error(format!(
            "{} is not a reduction (MPI_REPLACE and MPI_NO_OP are for one-sided accumulates)",
            info.name
        ))),
        None => Err(op_error(format!(
            "invalid operation {op:#x}: not a predefined operation or one created by MPI_Op_create and not freed"
        ))),
    }
}

/// The user operation behind `op`, if it is one (an error for a freed or garbage one in
/// the user range).
fn user_op(op: Handle) -> MpiResult<Option<UserOpEntry>> {
    let Some(i) = op.checked_sub(OP_BASE).filter(|&i| i < MAX_OPS) else {
        return Ok(None);
    };
    OPS.with(|o| o.get(i).copied().flatten())?
        .map(Some)
        .ok_or_else(|| {
            op_error(format!(
                "invalid operation {op:#x}: a user operation that was freed or never created"
            ))
        })
}

/// Which reducing collective to run.
#[derive(Clone, Copy)]
pub enum Coll<'a> {
    Allreduce,
    /// At the root `recv` is given; elsewhere it is `None`.
    Reduce(usize),
    Scan,
    Exscan,
    ReduceScatterBlock,
    /// Elements (of the reducer's element) per rank.
    ReduceScatter(&'a [usize]),
}

/// `bytes` as elements of `T`: borrowed when aligned, else copied.
fn typed<T: Pod>(bytes: &[u8]) -> std::borrow::Cow<'_, [T]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => {
            let mut v = vec![T::zeroed(); bytes.len() / size_of::<T>()];
            bytemuck::cast_slice_mut(&mut v).copy_from_slice(bytes);
            std::borrow::Cow::Owned(v)
        }
    }
}

/// Run `f` on `out` viewed as elements of `T` (through an aligned copy if it is not aligned).
fn with_typed_mut<T: Pod, R>(out: &mut [u8], f: impl FnOnce(&mut [T]) -> R) -> R {
    match bytemuck::try_cast_slice_mut(out) {
        Ok(s) => f(s),
        Err(_) => {
            let mut v = vec![T::zeroed(); out.len() / size_of::<T>()];
            let r = f(&mut v);
            out.copy_from_slice(bytemuck::cast_slice(&v));
            r
        }
    }
}

fn run_with<T: Pod>(
    c: &rmca::Communicator,
    coll: Coll<'_>,
    send: &[u8],
    recv: Option<&mut [u8]>,
    op: impl Reduction<T>,
) -> rmca::Result<()> {
    let send = typed::<T>(send);
    let Some(recv) = recv else {
        let Coll::Reduce(root) = coll else {
            return Err(rmca::Error::InvalidArgument(
                "a receive buffer is required".into(),
            ));
        };
        return c.reduce(&send, None, op, root);
    };
    with_typed_mut::<T, _>(recv, |r| match coll {
        Coll::Allreduce => c.allreduce(&send, r, op),
        Coll::Reduce(root) => c.reduce(&send, Some(r), op, root),
        Coll::Scan => c.scan(&send, r, op),
        Coll::Exscan => c.exscan(&send, r, op),
        Coll::ReduceScatterBlock => c.reduce_scatter_block(&send, r, op),
        Coll::ReduceScatter(counts) => c.reduce_scatter(&send, r, counts, op),
    })
}

fn run_builtin<T: Reducible>(
    c: &rmca::Communicator,
    coll: Coll<'_>,
    send: &[u8],
    recv: Option<&mut [u8]>,
    op: Op,
) -> rmca::Result<()> {
    run_with::<T>(c, coll, send, recv, op)
}

fn pair_value(value: PairValue, b: &[u8]) -> f64 {
    // Every value type but i64 converts to f64 exactly; i64 is compared separately.
    match value {
        PairValue::I16 => f64::from(i16::from_ne_bytes([b[0], b[1]])),
        PairValue::I32 => f64::from(i32::from_ne_bytes(b[..4].try_into().expect("4 bytes"))),
        PairValue::F32 => f64::from(f32::from_ne_bytes(b[..4].try_into().expect("4 bytes"))),
        PairValue::F64 => f64::from_ne_bytes(b[..8].try_into().expect("8 bytes")),
        PairValue::I64 => i64::from_ne_bytes(b[..8].try_into().expect("8 bytes")) as f64,
        // Compared by `long_double_cmp`, never converted.
        PairValue::LongDouble => f64::NAN,
    }
}

/// `a` compared with `b`, C `long double`s (the one-sided kernels' comparison, so a
/// reduction and an accumulate agree).
pub(super) fn long_double_cmp(a: &[u8], b: &[u8]) -> Option<std::cmp::Ordering> {
    rmca::framework::osc::long_double_cmp(a, b)
}

/// `a` compared with `b` by value.
fn pair_cmp(value: PairValue, a: &[u8], b: &[u8]) -> Option<std::cmp::Ordering> {
    if let PairValue::LongDouble = value {
        return long_double_cmp(a, b);
    }
    if let PairValue::I64 = value {
        let v = |x: &[u8]| i64::from_ne_bytes(x[..8].try_into().expect("8 bytes"));
        return Some(v(a).cmp(&v(b)));
    }
    pair_value(value, a).partial_cmp(&pair_value(value, b))
}

/// MINLOC/MAXLOC of two C pairs (`a` from the lower ranks): the better value wins; on a
/// tie, the value with the lower index.
fn pair_combine<const N: usize>(
    max: bool,
    value: PairValue,
    index_at: usize,
    a: [u8; N],
    b: [u8; N],
) -> [u8; N] {
    use std::cmp::Ordering::{Greater, Less};
    let better = if max { Greater } else { Less };
    let index =
        |x: &[u8; N]| i32::from_ne_bytes(x[index_at..index_at + 4].try_into().expect("4 bytes"));
    match pair_cmp(value, &a, &b) {
        Some(o) if o == better => a,
        Some(o) if o == better.reverse() => b,
        _ => {
            let mut out = a;
            let i = index(&a).min(index(&b));
            out[index_at..index_at + 4].copy_from_slice(&i.to_ne_bytes());
            out
        }
    }
}

/// MINLOC/MAXLOC on pairs of `N` bytes, as a combining function.
fn pair_fn<const N: usize>(
    max: bool,
    value: PairValue,
    index_at: usize,
) -> impl Fn([u8; N], [u8; N]) -> [u8; N] + Copy + 'static {
    move |a: [u8; N], b: [u8; N]| pair_combine(max, value, index_at, a, b)
}

/// The step of user operation `f` over whole runs of elements of `extent` bytes of `dt`
/// (see [`RawReduction::from_fn`]): the program's function is called once per run (`len`
/// elements at once), with `invec` the left operand (from lower ranks) and `inoutvec` the
/// right one, which it overwrites with the result.
fn user_step(
    f: AnyUserFn,
    dt: Handle,
    extent: usize,
) -> impl Fn(&mut [u8], &[u8], Option<&[u8]>, bool) + 'static {
    move |dst: &mut [u8], src: &[u8], acc: Option<&[u8]>, src_first: bool| {
        // The function writes inoutvec and may not write invec; both are library memory or
        // the result buffer here. Where the right operand is not `dst`, it is copied there
        // first; the left one is copied out (invec may be memory other ranks read, a
        // coll-sm slot, which a function that wrote it anyway must not spoil), into the
        // thread's reused scratch rather than a fresh allocation per step.
        let mut left = LEFT
            .try_with(|l| std::mem::take(&mut *l.borrow_mut()))
            .unwrap_or_default();
        left.clear();
        match (acc, src_first) {
            // dst = src op dst
            (None, true) => left.extend_from_slice(src),
            // dst = dst op src
            (None, false) => {
                left.extend_from_slice(dst);
                dst.copy_from_slice(src);
            }
            // dst = src op acc
            (Some(acc), true) => {
                left.extend_from_slice(src);
                dst.copy_from_slice(acc);
            }
            // dst = acc op src
            (Some(acc), false) => {
                left.extend_from_slice(acc);
                dst.copy_from_slice(src);
            }
        }
        let elems = dst.len() / extent;
        // Runs an int can count (MPI_User_function's len), cut at whole elements.
        let piece = match f {
            AnyUserFn::Int(_) => (c_int::MAX as usize).max(1),
            AnyUserFn::Count(_) => usize::MAX,
        };
        let mut done = 0;
        while done < elems {
            let k = (elems - done).min(piece);
            let at = done * extent;
            // SAFETY: `left` and `dst` hold `elems` elements of `dt` in the program's layout
            // (the reduction moves whole extents); the function reads `k` from each.
            unsafe { f.call(left.as_mut_ptr().add(at), dst.as_mut_ptr().add(at), k, dt) };
            done += k;
        }
        // Kept while small (a reduction within the function took its own meanwhile).
        if left.capacity() <= LEFT_KEPT {
            let _ = LEFT.try_with(|l| *l.borrow_mut() = left);
        }
    }
}

/// The largest left-operand scratch a thread keeps between reduction steps (bytes).
const LEFT_KEPT: usize = 64 << 10;

thread_local! {
    /// The left operand of a user operation's step (see [`user_step`]), reused.
    static LEFT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn run_sized<const N: usize>(
    c: &rmca::Communicator,
    coll: Coll<'_>,
    send: &[u8],
    recv: Option<&mut [u8]>,
    r: Reducer,
) -> rmca::Result<()>
where
    [u8; N]: Pod,
{
    match r {
        Reducer::Pair {
            max,
            value,
            index_at,
            ..
        } => {
            let f = pair_fn::<N>(max, value, index_at);
            run_with::<[u8; N]>(c, coll, send, recv, UserOp::commutative(f))
        }
        // Sums, products, maxima and minima: commutative (bit for bit: IEEE sums and
        // products are).
        Reducer::Special(s) => {
            let f = move |a: [u8; N], b: [u8; N]| s.combine(a, b);
            run_with::<[u8; N]>(c, coll, send, recv, UserOp::commutative(f))
        }
        Reducer::User { .. } | Reducer::Builtin(..) => {
            unreachable!("only MINLOC/MAXLOC and special reductions run on sized elements")
        }
    }
}

/// Run `f` on elements of the sizes the value-index types have (with their C padding) and
/// the special reductions' (8, 16, 32).
macro_rules! pair_sized {
    ($r:expr, $f:ident, $($arg:expr),*) => {
        match element_size(&$r) {
            4 => $f::<4>($($arg),*),
            6 => $f::<6>($($arg),*),
            8 => $f::<8>($($arg),*),
            12 => $f::<12>($($arg),*),
            16 => $f::<16>($($arg),*),
            20 => $f::<20>($($arg),*),
            24 => $f::<24>($($arg),*),
            32 => $f::<32>($($arg),*),
            n => Err(rmca::Error::InvalidArgument(format!(
                "MINLOC/MAXLOC on a {n}-byte pair type"
            ))),
        }
    };
}

/// [`run_sized`]'s reduction, for the non-blocking collectives.
fn raw_sized<const N: usize>(r: Reducer) -> rmca::Result<RawReduction>
where
    [u8; N]: Pod,
{
    match r {
        Reducer::Pair {
            max,
            value,
            index_at,
            ..
        } => {
            RawReduction::new::<[u8; N], _>(UserOp::commutative(pair_fn::<N>(max, value, index_at)))
        }
        Reducer::Special(s) => {
            RawReduction::new::<[u8; N], _>(UserOp::commutative(move |a: [u8; N], b: [u8; N]| {
                s.combine(a, b)
            }))
        }
        Reducer::User { .. } | Reducer::Builtin(..) => Err(rmca::Error::InvalidArgument(
            "internal: only MINLOC/MAXLOC and special reductions run on sized elements".into(),
        )),
    }
}

/// The reduction `r` erased to bytes, for the non-blocking collectives (the same element
/// functions the blocking ones run).
pub fn raw_reduction(r: Reducer) -> MpiResult<RawReduction> {
    match r {
        Reducer::Builtin(op, elem) => {
            macro_rules! go {
                ($($e:ident => $t:ty),*) => {
                    match elem { $(Elem::$e => RawReduction::new::<$t, Op>(op),)* }
                };
            }
            Ok(
                go!(I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8, U16 => u16,
                U32 => u32, U64 => u64, F32 => f32, F64 => f64)?,
            )
        }
        Reducer::User {
            f,
            commutative,
            dt,
            extent,
        } => {
            if extent == 0 {
                return Err(MpiError::new(
                    MPI_ERR_TYPE,
                    "a user operation on a datatype of extent 0",
                ));
            }
            Ok(RawReduction::from_fn(
                extent,
                commutative,
                user_step(f, dt, extent),
            )?)
        }
        Reducer::Pair { .. } | Reducer::Special(_) => Ok(pair_sized!(r, raw_sized, r)?),
    }
}

/// Bytes of one element of the reducer.
pub fn element_size(r: &Reducer) -> usize {
    match r {
        Reducer::Builtin(_, e) => match e {
            Elem::I8 | Elem::U8 => 1,
            Elem::I16 | Elem::U16 => 2,
            Elem::I32 | Elem::U32 | Elem::F32 => 4,
            Elem::I64 | Elem::U64 | Elem::F64 => 8,
        },
        Reducer::Pair { size, .. } => *size,
        Reducer::Special(s) => s.size(),
        Reducer::User { extent, .. } => *extent,
    }
}

/// Run reducing collective `coll` with reducer `r` over `send` into `recv`.
pub fn reduce(
    c: &rmca::Communicator,
    coll: Coll<'_>,
    send: &[u8],
    recv: Option<&mut [u8]>,
    r: Reducer,
) -> MpiResult<()> {
    match r {
        Reducer::Builtin(op, elem) => {
            macro_rules! go {
                ($($e:ident => $t:ty),*) => {
                    match elem { $(Elem::$e => run_builtin::<$t>(c, coll, send, recv, op),)* }
                };
            }
            go!(I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8, U16 => u16, U32 => u32,
                U64 => u64, F32 => f32, F64 => f64)?;
        }
        Reducer::Pair { .. } | Reducer::Special(_) => {
            pair_sized!(r, run_sized, c, coll, send, recv, r)?
        }
        // A user function works on whole runs of bytes: the non-blocking collective (the
        // same schedules), run to its end.
        Reducer::User { .. } => reduce_bytes(c, coll, send, recv, r)?,
    }
    Ok(())
}

/// The first `want` bytes of a reduction's receive buffer (an error if it holds fewer).
fn result_part(recv: Option<&mut [u8]>, want: usize) -> MpiResult<&mut [u8]> {
    let have = recv.as_ref().map_or(0, |b| b.len());
    match recv {
        Some(b) if b.len() >= want => Ok(&mut b[..want]),
        None if want == 0 => Ok(&mut []),
        _ => Err(MpiError::new(
            MPI_ERR_BUFFER,
            format!("the receive buffer holds {have} B, the reduction's result {want} B"),
        )),
    }
}

/// [`reduce`] on whole runs of bytes (user operations): the blocking byte-level
/// collectives, which take the communicator's direct collectives first (coll-sm on one
/// node) as the predefined operations do; the prefix reductions, which have no direct form,
/// through the non-blocking ones, waited for.
fn reduce_bytes(
    c: &rmca::Communicator,
    coll: Coll<'_>,
    send: &[u8],
    recv: Option<&mut [u8]>,
    r: Reducer,
) -> MpiResult<()> {
    let op = raw_reduction(r)?;
    let elem = element_size(&r);
    let len = send.len();
    match coll {
        Coll::Allreduce => rmca::raw::allreduce(c, send, result_part(recv, len)?, &op)?,
        Coll::Reduce(root) => {
            let recv = if c.rank() == root {
                Some(result_part(recv, len)?)
            } else {
                None
            };
            rmca::raw::reduce(c, send, recv, &op, root)?
        }
        Coll::Scan | Coll::Exscan => {
            let out = result_part(recv, len)?;
            // SAFETY: `send` and `out` are borrowed for this call, which waits for the
            // request.
            let req = unsafe {
                let exclusive = matches!(coll, Coll::Exscan);
                rmca::raw::iscan(c, send.as_ptr(), out.as_mut_ptr(), len, op, exclusive)?
            };
            req.wait()?;
        }
        Coll::ReduceScatterBlock => {
            let n = c.size();
            let counts = vec![len / n.max(1); n];
            let out = result_part(recv, counts[c.rank()])?;
            rmca::raw::reduce_scatter(c, send, out, &counts, &op, true)?
        }
        Coll::ReduceScatter(elems) => {
            let counts: Vec<usize> = elems.iter().map(|&k| k * elem).collect();
            let out = result_part(recv, counts.get(c.rank()).copied().unwrap_or(0))?;
            rmca::raw::reduce_scatter(c, send, out, &counts, &op, false)?
        }
    }
    Ok(())
}

/// Register a user operation; its handle at `op`.
fn op_create(f: Option<AnyUserFn>, commute: c_int, op: *mut Handle) -> MpiResult<()> {
    state::with(|_| Ok(()))?;
    let f = f.ok_or_else(|| MpiError::new(MPI_ERR_ARG, "the user function is NULL"))?;
    if op.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "the op argument is NULL"));
    }
    let entry = UserOpEntry {
        f,
        commutative: commute != 0,
    };
    let h = OPS.with(|o| {
        super::table_insert(
            o,
            entry,
            (OP_BASE, MAX_OPS),
            "user operations",
            "MPI_Op_free",
        )
    })??;
    // SAFETY: non-null, the caller's handle.
    unsafe { put(op, h, "op") }
}

/// `MPI_Op_create`.
#[export]
pub unsafe extern "C" fn MPI_Op_create(
    user_fn: Option<UserFn>,
    commute: c_int,
    op: *mut Handle,
) -> c_int {
    call("MPI_Op_create", MPI_COMM_WORLD, || {
        op_create(user_fn.map(AnyUserFn::Int), commute, op)
    })
}

/// `MPI_Op_create_c`: a user operation whose function takes an `MPI_Count` length.
#[export]
pub unsafe extern "C" fn MPI_Op_create_c(
    user_fn: Option<UserFnC>,
    commute: c_int,
    op: *mut Handle,
) -> c_int {
    call("MPI_Op_create_c", MPI_COMM_WORLD, || {
        op_create(user_fn.map(AnyUserFn::Count), commute, op)
    })
}

/// `inoutbuf = inbuf op inoutbuf` for `count` elements of `dt`, locally.
///
/// # Safety
/// Both buffers hold `count` elements of `dt`.
unsafe fn reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: usize,
    dt: Handle,
    op: Handle,
) -> MpiResult<()> {
    state::with(|_| Ok(()))?;
    let ty = Ty::for_use(dt)?;
    let r = reducer(op, dt, &ty)?;
    if in_place(inbuf) || in_place(inoutbuf) {
        return Err(MpiError::new(
            MPI_ERR_BUFFER,
            "MPI_Reduce_local takes no MPI_IN_PLACE",
        ));
    }
    let mut out = reduce_recv(&r, inoutbuf, count, &ty)?;
    // SAFETY: the caller's contract.
    unsafe {
        let input = reduce_send(&r, inbuf, count, &ty)?;
        apart(&input, &out, "MPI_Reduce_local")?;
        out.load()?;
        raw_reduction(r)?.apply_local(out.bytes_mut(), input.bytes())?;
        out.finish(out.len());
    }
    Ok(())
}

/// `MPI_Reduce_local`.
#[export]
pub unsafe extern "C" fn MPI_Reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: c_int,
    dt: Handle,
    op: Handle,
) -> c_int {
    call("MPI_Reduce_local", MPI_COMM_WORLD, || {
        let n = super::count(count, "count")?;
        // SAFETY: MPI_Reduce_local's contract.
        unsafe { reduce_local(inbuf, inoutbuf, n, dt, op) }
    })
}

/// `MPI_Reduce_local_c`.
#[export]
pub unsafe extern "C" fn MPI_Reduce_local_c(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: MPI_Count,
    dt: Handle,
    op: Handle,
) -> c_int {
    call("MPI_Reduce_local_c", MPI_COMM_WORLD, || {
        let n = super::coll_c::count_c(count, "count")?;
        // SAFETY: MPI_Reduce_local_c's contract.
        unsafe { reduce_local(inbuf, inoutbuf, n, dt, op) }
    })
}

/// `MPI_Op_free`: the handle becomes `MPI_OP_NULL`.
#[export]
pub unsafe extern "C" fn MPI_Op_free(op: *mut Handle) -> c_int {
    call("MPI_Op_free", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        if op.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the op argument is NULL"));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { op.read() };
        if dtype::lookup_op(h).is_some() {
            return Err(op_error("predefined operations cannot be freed"));
        }
        user_op(h)?.ok_or_else(|| {
            op_error(format!(
                "invalid operation {h:#x}: not one created by MPI_Op_create"
            ))
        })?;
        OPS.with(|o| o[h - OP_BASE] = None)?;
        // SAFETY: as above.
        unsafe { op.write(MPI_OP_NULL) };
        Ok(())
    })
}

/// `MPI_Op_commutative`.
#[export]
pub unsafe extern "C" fn MPI_Op_commutative(op: Handle, commute: *mut c_int) -> c_int {
    call("MPI_Op_commutative", MPI_COMM_WORLD, || {
        let c = match user_op(op)? {
            Some(e) => e.commutative,
            None if dtype::lookup_op(op).is_some() => true,
            None => return Err(op_error(format!("invalid operation {op:#x}"))),
        };
        // SAFETY: the caller's int.
        unsafe { put(commute, c_int::from(c), "commute") }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of a C `long double` holding `x` (exact for the values used).
    fn long_double(x: f64) -> [u8; 16] {
        let mut out = [0u8; 16];
        if cfg!(any(target_arch = "x86", target_arch = "x86_64")) {
            // x87 extended from the f64's fields (normal numbers and zero).
            let bits = x.to_bits();
            let sign = (bits >> 63) as u16;
            let exp = ((bits >> 52) & 0x7ff) as u16;
            let frac = bits & ((1 << 52) - 1);
            let (e, m) = if exp == 0 {
                (0, 0)
            } else {
                // Rebias from f64's 1023 to the x87 format's 16383 (added first: no underflow).
                (exp + (16383 - 1023), (1u64 << 63) | (frac << 11))
            };
            out[..8].copy_from_slice(&m.to_ne_bytes());
            out[8..10].copy_from_slice(&((sign << 15) | e).to_ne_bytes());
        } else {
            let bits = x.to_bits();
            let sign = u128::from(bits >> 63);
            let exp = u128::from((bits >> 52) & 0x7ff);
            let frac = u128::from(bits & ((1 << 52) - 1));
            let e = if exp == 0 { 0 } else { exp + (16383 - 1023) };
            let v = (sign << 127) | (e << 112) | (frac << 60);
            out.copy_from_slice(&v.to_ne_bytes());
        }
        out
    }

    #[test]
    fn long_double_order() {
        use std::cmp::Ordering::*;
        let v = [-3.5, -1.0, -0.0, 0.0, 0.25, 1.0, 1.0 + f64::EPSILON, 1e300];
        for (i, &a) in v.iter().enumerate() {
            for (j, &b) in v.iter().enumerate() {
                let want = if a == b { Equal } else { i.cmp(&j) };
                assert_eq!(
                    long_double_cmp(&long_double(a), &long_double(b)),
                    Some(want),
                    "{a} vs {b}"
                );
            }
        }
    }

    /// 2x2 matrix product on `len` matrices of i64: inout = in x inout.
    unsafe extern "C" fn matmul(a: *mut c_void, b: *mut c_void, len: *mut c_int, _: *mut Handle) {
        // SAFETY: the test passes `len` matrices at each pointer.
        unsafe {
            for k in 0..*len as usize {
                let x = std::slice::from_raw_parts(a.cast::<i64>().add(4 * k), 4).to_vec();
                let y = std::slice::from_raw_parts_mut(b.cast::<i64>().add(4 * k), 4);
                let r = [
                    x[0] * y[0] + x[1] * y[2],
                    x[0] * y[1] + x[1] * y[3],
                    x[2] * y[0] + x[3] * y[2],
                    x[2] * y[1] + x[3] * y[3],
                ];
                y.copy_from_slice(&r);
            }
        }
    }

    fn product(a: [i64; 4], b: [i64; 4]) -> [i64; 4] {
        [
            a[0] * b[0] + a[1] * b[2],
            a[0] * b[1] + a[1] * b[3],
            a[2] * b[0] + a[3] * b[2],
            a[2] * b[1] + a[3] * b[3],
        ]
    }

    /// The user step keeps the operand order of every form the executor asks for, on whole
    /// runs of elements.
    #[test]
    fn user_step_operand_order() {
        let step = user_step(AnyUserFn::Int(matmul), 0, 32);
        let (a, b, c) = ([1, 2, 3, 4], [0, 1, 1, 0], [2, 0, 1, 1]);
        let bytes = |m: [i64; 4]| bytemuck::cast::<[i64; 4], [u8; 32]>(m).to_vec();
        let value = |v: &[u8]| bytemuck::pod_read_unaligned::<[i64; 4]>(v);
        // dst = src op dst, and dst op src.
        let mut d = bytes(b);
        step(&mut d, &bytes(a), None, true);
        assert_eq!(value(&d), product(a, b));
        let mut d = bytes(a);
        step(&mut d, &bytes(b), None, false);
        assert_eq!(value(&d), product(a, b));
        // dst = src op acc, and acc op src.
        let mut d = bytes(c);
        step(&mut d, &bytes(a), Some(&bytes(b)), true);
        assert_eq!(value(&d), product(a, b));
        step(&mut d, &bytes(a), Some(&bytes(b)), false);
        assert_eq!(value(&d), product(b, a));
        // Two elements in one call.
        let mut d = [bytes(b), bytes(c)].concat();
        step(&mut d, &[bytes(a), bytes(a)].concat(), None, true);
        assert_eq!(value(&d[32..]), product(a, c));
    }
}
