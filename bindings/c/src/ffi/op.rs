//! Reduction operations: the predefined ones on their element types, `MPI_MINLOC` and
//! `MPI_MAXLOC` on the C value-index pair types (with the C struct padding), and user
//! operations (`MPI_Op_create`), run by every reducing collective through [`reduce`].
#![allow(non_snake_case)]

use std::cell::RefCell;
use std::ffi::{c_int, c_void};

use bytemuck::Pod;
use rmca::coll::{Op, Reducible, Reduction, UserOp};
use rmca::raw::RawReduction;

use super::types::Ty;
use super::{call, put};
use crate::abi::*;
use crate::dtype::{self, Elem};
use crate::state::{self, MpiError, MpiResult};
use rmca_mpi_export::export;

/// `MPI_User_function`.
pub type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut Handle);

/// Handles of user operations: this plus an index.
pub const OP_BASE: Handle = DYNAMIC_BASE * 4;
const MAX_OPS: usize = DYNAMIC_BASE;

#[derive(Clone, Copy)]
struct UserOpEntry {
    f: UserFn,
    commutative: bool,
}

thread_local! {
    static OPS: RefCell<Vec<Option<UserOpEntry>>> = const { RefCell::new(Vec::new()) };
}

/// The value of a value-index pair type; the index is a C `int` at `index_at`.
#[derive(Clone, Copy, Debug)]
pub enum PairValue {
    I16,
    I32,
    I64,
    F32,
    F64,
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
    /// A user function on elements of `extent` bytes in the program's own layout.
    User {
        f: UserFn,
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
            "MPI_SHORT_INT" => (PairValue::I16, 4),
            _ => {
                return Err(op_error(format!(
                    "{} is not defined on {}: use a value-index pair type (MPI_2INT, MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT, MPI_SHORT_INT, MPI_2REAL, MPI_2DOUBLE_PRECISION, MPI_2INTEGER; MPI_LONG_DOUBLE_INT is not implemented)",
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
    match t.elem {
        Some(elem) if dtype::op_allowed(rop, t.class) => Ok(Reducer::Builtin(rop, elem)),
        _ if t.class == dtype::Class::Complex && dtype::op_allowed(rop, t.class) => {
            Err(op_error(format!(
                "{} on {}: complex reductions are not implemented by rmca yet",
                info.name, t.name
            )))
        }
        _ => Err(op_error(format!(
            "{} is not defined on {} (MPI 5.0 section 6.9.2)",
            info.name, t.name
        ))),
    }
}

/// The user operation behind `op`, if it is one (an error for a freed or garbage one in
/// the user range).
fn user_op(op: Handle) -> MpiResult<Option<UserOpEntry>> {
    let Some(i) = op.checked_sub(OP_BASE).filter(|&i| i < MAX_OPS) else {
        return Ok(None);
    };
    OPS.with(|o| o.borrow().get(i).copied().flatten())
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
    }
}

/// `a` compared with `b` by value.
fn pair_cmp(value: PairValue, a: &[u8], b: &[u8]) -> Option<std::cmp::Ordering> {
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

/// The program's `MPI_User_function` on one element of `N` bytes of `dt`, as a combining
/// function (`a` from lower ranks).
fn user_fn<const N: usize>(
    f: UserFn,
    dt: Handle,
) -> impl Fn([u8; N], [u8; N]) -> [u8; N] + Copy + 'static {
    move |mut a: [u8; N], mut b: [u8; N]| {
        let (mut len, mut dt) = (1 as c_int, dt);
        // SAFETY: `f` is the MPI_User_function the program registered; it combines
        // `len` (1) elements of `dt` at invec (`a`, from lower ranks) into inoutvec
        // (`b`), both one element of the datatype's extent in the program's layout.
        unsafe {
            f(
                a.as_mut_ptr().cast(),
                b.as_mut_ptr().cast(),
                &mut len,
                &mut dt,
            )
        };
        b
    }
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
        Reducer::User {
            f, commutative, dt, ..
        } => {
            let g = user_fn::<N>(f, dt);
            if commutative {
                run_with::<[u8; N]>(c, coll, send, recv, UserOp::commutative(g))
            } else {
                run_with::<[u8; N]>(c, coll, send, recv, UserOp::non_commutative(g))
            }
        }
        Reducer::Builtin(..) => unreachable!("builtin reductions run on their element type"),
    }
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
        Reducer::User {
            f, commutative, dt, ..
        } => {
            let g = user_fn::<N>(f, dt);
            if commutative {
                RawReduction::new::<[u8; N], _>(UserOp::commutative(g))
            } else {
                RawReduction::new::<[u8; N], _>(UserOp::non_commutative(g))
            }
        }
        Reducer::Builtin(op, _) => Err(rmca::Error::InvalidArgument(format!(
            "internal: {op:?} runs on its element type"
        ))),
    }
}

/// The reduction `r` erased to bytes, for the non-blocking collectives (the same element
/// functions the blocking ones run).
pub fn raw_reduction(r: Reducer) -> MpiResult<RawReduction> {
    if let Reducer::Builtin(op, elem) = r {
        macro_rules! go {
            ($($e:ident => $t:ty),*) => {
                match elem { $(Elem::$e => RawReduction::new::<$t, Op>(op),)* }
            };
        }
        return Ok(
            go!(I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8, U16 => u16,
            U32 => u32, U64 => u64, F32 => f32, F64 => f64)?,
        );
    }
    macro_rules! sized {
        ($($n:literal)*) => {
            match element_size(&r) {
                $($n => Ok(raw_sized::<$n>(r)?),)*
                n => Err(MpiError::new(
                    MPI_ERR_TYPE,
                    format!("a reduction with a user operation or MINLOC/MAXLOC on elements of {n} B: rmca reduces elements of 1 to {MAX_USER_ELEMENT} B"),
                )),
            }
        };
    }
    sized!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
        32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60
        61 62 63 64)
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
        Reducer::User { extent, .. } => *extent,
    }
}

/// The largest element a user operation may reduce (a fixed-size copy per element).
pub const MAX_USER_ELEMENT: usize = 64;

/// Run reducing collective `coll` with reducer `r` over `send` into `recv`.
pub fn reduce(
    c: &rmca::Communicator,
    coll: Coll<'_>,
    send: &[u8],
    recv: Option<&mut [u8]>,
    r: Reducer,
) -> MpiResult<()> {
    if let Reducer::Builtin(op, elem) = r {
        macro_rules! go {
            ($($e:ident => $t:ty),*) => {
                match elem { $(Elem::$e => run_builtin::<$t>(c, coll, send, recv, op),)* }
            };
        }
        go!(I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8, U16 => u16, U32 => u32,
            U64 => u64, F32 => f32, F64 => f64)?;
        return Ok(());
    }
    macro_rules! sized {
        ($($n:literal)*) => {
            match element_size(&r) {
                $($n => run_sized::<$n>(c, coll, send, recv, r)?,)*
                n => {
                    return Err(MpiError::new(
                        MPI_ERR_TYPE,
                        format!("a reduction with a user operation or MINLOC/MAXLOC on elements of {n} B: rmca reduces elements of 1 to {MAX_USER_ELEMENT} B"),
                    ))
                }
            }
        };
    }
    sized!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
        32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60
        61 62 63 64);
    Ok(())
}

/// `MPI_Op_create`.
#[export]
pub unsafe extern "C" fn MPI_Op_create(
    user_fn: Option<UserFn>,
    commute: c_int,
    op: *mut Handle,
) -> c_int {
    call("MPI_Op_create", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        let f = user_fn.ok_or_else(|| MpiError::new(MPI_ERR_ARG, "the user function is NULL"))?;
        if op.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the op argument is NULL"));
        }
        let entry = UserOpEntry {
            f,
            commutative: commute != 0,
        };
        let h = OPS.with(|o| {
            super::table_insert(
                &mut o.borrow_mut(),
                entry,
                (OP_BASE, MAX_OPS),
                "user operations",
                "MPI_Op_free",
            )
        })?;
        // SAFETY: non-null, the caller's handle.
        unsafe { put(op, h, "op") }
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
        OPS.with(|o| o.borrow_mut()[h - OP_BASE] = None);
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
