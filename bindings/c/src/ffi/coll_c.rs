//! The large-count (`_c`) forms of the collectives: `MPI_Count` counts and `MPI_Aint`
//! displacements, sharing the implementation of the `int` forms (inner functions on `usize`
//! counts), plus the readers of count and displacement arrays of either width.
#![allow(non_snake_case)]

use std::ffi::c_int;

use crate::abi::*;
use crate::state::{MpiError, MpiResult};

/// A checked `MPI_Count` count.
pub(crate) fn count_c(n: MPI_Count, what: &str) -> MpiResult<usize> {
    usize::try_from(n).map_err(|_| {
        MpiError::new(
            MPI_ERR_COUNT,
            format!("{what} {n} is negative: counts are >= 0"),
        )
    })
}

/// An element of a count or displacement array: C `int` (the classic forms), `MPI_Count` or
/// `MPI_Aint` (the `_c` forms).
pub trait ArrayElem: Copy {
    fn wide(self) -> i64;
}

impl ArrayElem for c_int {
    fn wide(self) -> i64 {
        i64::from(self)
    }
}

impl ArrayElem for i64 {
    fn wide(self) -> i64 {
        self
    }
}

impl ArrayElem for isize {
    fn wide(self) -> i64 {
        self as i64
    }
}

/// `n` counts from a C array (NULL or a negative count: an error naming `side`).
///
/// # Safety
/// `p` holds `n` elements when non-null.
pub(crate) unsafe fn read_counts<T: ArrayElem>(
    p: *const T,
    n: usize,
    side: &str,
) -> MpiResult<Vec<usize>> {
    if p.is_null() && n > 0 {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            format!("the {side} counts array is NULL"),
        ));
    }
    (0..n)
        .map(|r| {
            // SAFETY: the caller's contract.
            let c = unsafe { p.add(r).read() }.wide();
            usize::try_from(c).map_err(|_| {
                MpiError::new(
                    MPI_ERR_COUNT,
                    format!("{side} count {c} of rank {r} is negative: counts are >= 0"),
                )
            })
        })
        .collect()
}

/// `n` displacements from a C array (NULL: an error naming `side`).
///
/// # Safety
/// `p` holds `n` elements when non-null.
pub(crate) unsafe fn read_displs<T: ArrayElem>(
    p: *const T,
    n: usize,
    side: &str,
) -> MpiResult<Vec<isize>> {
    if p.is_null() && n > 0 {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            format!("the {side} displacements array is NULL"),
        ));
    }
    (0..n)
        .map(|r| {
            // SAFETY: the caller's contract.
            let d = unsafe { p.add(r).read() }.wide();
            isize::try_from(d).map_err(|_| {
                MpiError::new(
                    MPI_ERR_ARG,
                    format!("{side} displacement {d} is out of range"),
                )
            })
        })
        .collect()
}

/// `n` datatype handles from a C array (NULL: an error naming `side`).
///
/// # Safety
/// `p` holds `n` handles when non-null.
pub(crate) unsafe fn read_types(p: *const Handle, n: usize, side: &str) -> MpiResult<Vec<Handle>> {
    if p.is_null() && n > 0 {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            format!("the {side} datatypes array is NULL"),
        ));
    }
    // SAFETY: the caller's contract.
    Ok((0..n).map(|r| unsafe { p.add(r).read() }).collect())
}
