//! Groups (`MPI_Group_*`, `MPI_Comm_group`, `MPI_Comm_create`) over `rmca::Group`, and
//! cancelling requests (`MPI_Cancel`, `MPI_Test_cancelled`).
#![allow(non_snake_case)]

use std::ffi::c_int;

use rmca::{Comparison, Group};

use super::{call, communicator, put};
use crate::abi::*;
use crate::state::{self, CommEntry, Confined, MpiError, MpiResult, ReqState};
use rmca_mpi_export::export;

/// `MPI_GROUP_NULL` and `MPI_GROUP_EMPTY` (standard ABI values).
pub const MPI_GROUP_NULL: Handle = 0x108;
pub const MPI_GROUP_EMPTY: Handle = 0x109;
/// Handles of groups: this plus an index.
pub const GROUP_BASE: Handle = DYNAMIC_BASE * 5;
const MAX_GROUPS: usize = DYNAMIC_BASE;

/// The groups, by handle less [`GROUP_BASE`] (process-wide: see [`Confined`]).
static GROUPS: Confined<Vec<Option<Group>>> = Confined::new("groups");

fn bad_group(h: Handle) -> MpiError {
    let what = if h == MPI_GROUP_NULL {
        "MPI_GROUP_NULL".to_owned()
    } else {
        format!("{h:#x}")
    };
    MpiError::new(
        MPI_ERR_GROUP,
        format!("invalid group {what}: not MPI_GROUP_EMPTY or a group created and not freed"),
    )
}

/// The group behind `h`.
pub(crate) fn group(h: Handle) -> MpiResult<Group> {
    if h == MPI_GROUP_EMPTY {
        // The world's group with nobody in it: a group of this process's job.
        let world = communicator(MPI_COMM_WORLD)?;
        return Ok(world.group().incl(&[])?);
    }
    let i = h
        .checked_sub(GROUP_BASE)
        .filter(|&i| i < MAX_GROUPS)
        .ok_or_else(|| bad_group(h))?;
    GROUPS
        .with(|g| g.get(i).cloned().flatten())?
        .ok_or_else(|| bad_group(h))
}

/// Register `g` and store its handle at `out`.
pub(crate) fn add_group(g: Group, out: *mut Handle) -> MpiResult<()> {
    if out.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "the newgroup argument is NULL"));
    }
    if g.is_empty() {
        // An empty result is MPI_GROUP_EMPTY itself, as in MPICH and Open MPI (programs
        // compare the handle).
        // SAFETY: non-null (checked), the caller's handle.
        return unsafe { put(out, MPI_GROUP_EMPTY, "newgroup") };
    }
    let h = GROUPS.with(|t| {
        super::table_insert(t, g, (GROUP_BASE, MAX_GROUPS), "groups", "MPI_Group_free")
    })??;
    // SAFETY: non-null (checked), the caller's handle.
    unsafe { put(out, h, "newgroup") }
}

/// `n` ranks of a C array, each a rank of `g`, distinct.
///
/// # Safety
/// `ranks` holds `n` ints.
unsafe fn ranks_of(g: &Group, n: c_int, ranks: *const c_int) -> MpiResult<Vec<usize>> {
    let n = super::count(n, "rank count")?;
    if n > 0 && ranks.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "the ranks array is NULL"));
    }
    let mut seen = vec![false; g.size()];
    (0..n)
        .map(|i| {
            // SAFETY: the caller's contract.
            let r = unsafe { ranks.add(i).read() };
            match usize::try_from(r) {
                Ok(r) if r < g.size() && !seen[r] => {
                    seen[r] = true;
                    Ok(r)
                }
                Ok(r) if r < g.size() => Err(MpiError::new(
                    MPI_ERR_RANK,
                    format!("rank {r} appears twice: the ranks must be distinct"),
                )),
                _ => Err(MpiError::new(
                    MPI_ERR_RANK,
                    format!(
                        "rank {r} is not in the group (ranks 0..{})",
                        g.size().saturating_sub(1)
                    ),
                )),
            }
        })
        .collect()
}

/// `MPI_Comm_group`.
#[export]
pub unsafe extern "C" fn MPI_Comm_group(comm: Handle, group: *mut Handle) -> c_int {
    call("MPI_Comm_group", comm, || {
        add_group(communicator(comm)?.group(), group)
    })
}

/// `MPI_Group_size`.
#[export]
pub unsafe extern "C" fn MPI_Group_size(g: Handle, size: *mut c_int) -> c_int {
    call("MPI_Group_size", MPI_COMM_WORLD, || {
        let n = group(g)?.size();
        // SAFETY: the caller's int.
        unsafe { put(size, n as c_int, "size") }
    })
}

/// `MPI_Group_rank`: `MPI_UNDEFINED` when the caller is not a member.
#[export]
pub unsafe extern "C" fn MPI_Group_rank(g: Handle, rank: *mut c_int) -> c_int {
    call("MPI_Group_rank", MPI_COMM_WORLD, || {
        let r = group(g)?.rank().map_or(MPI_UNDEFINED, |r| r as c_int);
        // SAFETY: the caller's int.
        unsafe { put(rank, r, "rank") }
    })
}

/// `MPI_Group_incl`.
#[export]
pub unsafe extern "C" fn MPI_Group_incl(
    g: Handle,
    n: c_int,
    ranks: *const c_int,
    newgroup: *mut Handle,
) -> c_int {
    call("MPI_Group_incl", MPI_COMM_WORLD, || {
        let g = group(g)?;
        // SAFETY: MPI_Group_incl's contract: `n` ranks.
        let r = unsafe { ranks_of(&g, n, ranks)? };
        add_group(g.incl(&r)?, newgroup)
    })
}

/// `MPI_Group_excl`.
#[export]
pub unsafe extern "C" fn MPI_Group_excl(
    g: Handle,
    n: c_int,
    ranks: *const c_int,
    newgroup: *mut Handle,
) -> c_int {
    call("MPI_Group_excl", MPI_COMM_WORLD, || {
        let g = group(g)?;
        // SAFETY: MPI_Group_excl's contract: `n` ranks.
        let r = unsafe { ranks_of(&g, n, ranks)? };
        add_group(g.excl(&r)?, newgroup)
    })
}

macro_rules! set_op {
    ($name:ident, $method:ident) => {
        #[doc = concat!("`", stringify!($name), "`.")]
        #[export]
        pub unsafe extern "C" fn $name(
            group1: Handle,
            group2: Handle,
            newgroup: *mut Handle,
        ) -> c_int {
            call(stringify!($name), MPI_COMM_WORLD, || {
                let (a, b) = (group(group1)?, group(group2)?);
                add_group(a.$method(&b), newgroup)
            })
        }
    };
}

set_op!(MPI_Group_union, union);
set_op!(MPI_Group_intersection, intersection);
set_op!(MPI_Group_difference, difference);

/// `MPI_Group_translate_ranks`: `MPI_UNDEFINED` for a process not in `group2`,
/// `MPI_PROC_NULL` kept.
#[export]
pub unsafe extern "C" fn MPI_Group_translate_ranks(
    group1: Handle,
    n: c_int,
    ranks1: *const c_int,
    group2: Handle,
    ranks2: *mut c_int,
) -> c_int {
    call("MPI_Group_translate_ranks", MPI_COMM_WORLD, || {
        let (a, b) = (group(group1)?, group(group2)?);
        let count = super::count(n, "rank count")?;
        if count > 0 && (ranks1.is_null() || ranks2.is_null()) {
            return Err(MpiError::new(MPI_ERR_ARG, "a ranks array is NULL"));
        }
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            // SAFETY: MPI_Group_translate_ranks's contract: `n` ranks.
            let r = unsafe { ranks1.add(i).read() };
            if r == MPI_PROC_NULL {
                out.push(MPI_PROC_NULL);
                continue;
            }
            let r = usize::try_from(r)
                .ok()
                .filter(|&r| r < a.size())
                .ok_or_else(|| {
                    MpiError::new(
                        MPI_ERR_RANK,
                        format!(
                            "rank {r} is not in group1 (ranks 0..{})",
                            a.size().saturating_sub(1)
                        ),
                    )
                })?;
            let t = a.translate_ranks(&[r], &b)?[0];
            out.push(t.map_or(MPI_UNDEFINED, |t| t as c_int));
        }
        for (i, t) in out.into_iter().enumerate() {
            // SAFETY: as above, `n` ints to write.
            unsafe { ranks2.add(i).write(t) };
        }
        Ok(())
    })
}

fn comparison(c: Comparison) -> c_int {
    match c {
        Comparison::Identical => MPI_IDENT,
        Comparison::Congruent => MPI_CONGRUENT,
        Comparison::Similar => MPI_SIMILAR,
        Comparison::Unequal => MPI_UNEQUAL,
    }
}

/// `MPI_Group_compare`.
#[export]
pub unsafe extern "C" fn MPI_Group_compare(
    group1: Handle,
    group2: Handle,
    result: *mut c_int,
) -> c_int {
    call("MPI_Group_compare", MPI_COMM_WORLD, || {
        let r = comparison(group(group1)?.compare(&group(group2)?));
        // SAFETY: the caller's int.
        unsafe { put(result, r, "result") }
    })
}

/// `MPI_Group_free`: the handle becomes `MPI_GROUP_NULL` (`MPI_GROUP_EMPTY`, which calls
/// return for an empty group, too, and nothing is freed).
#[export]
pub unsafe extern "C" fn MPI_Group_free(g: *mut Handle) -> c_int {
    call("MPI_Group_free", MPI_COMM_WORLD, || {
        if g.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the group argument is NULL"));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { g.read() };
        if h == MPI_GROUP_EMPTY {
            // The result of a call that made an empty group: nothing to free (as MPICH).
            // SAFETY: as above.
            unsafe { g.write(MPI_GROUP_NULL) };
            return Ok(());
        }
        group(h)?;
        GROUPS.with(|t| t[h - GROUP_BASE] = None)?;
        // SAFETY: as above.
        unsafe { g.write(MPI_GROUP_NULL) };
        Ok(())
    })
}

/// `MPI_Comm_create`: collective over `comm`; members of `group` get the new communicator
/// (with `comm`'s error handler), the others `MPI_COMM_NULL`.
#[export]
pub unsafe extern "C" fn MPI_Comm_create(comm: Handle, g: Handle, newcomm: *mut Handle) -> c_int {
    call("MPI_Comm_create", comm, || {
        if newcomm.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the newcomm argument is NULL"));
        }
        let (c, errhandler) = state::with(|s| {
            let e = s.comm(comm)?;
            Ok((e.comm.clone(), e.errhandler))
        })?;
        let grp = group(g)?;
        let h = match c.create(&grp)? {
            None => MPI_COMM_NULL,
            Some(nc) => state::with(|s| {
                s.add_comm(CommEntry {
                    comm: nc,
                    errhandler,
                    name: String::new(),
                })
            })?,
        };
        // A communicator made from a session's keeps its buffered-send buffer's session.
        super::buffers::comm_derived(comm, h);
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { put(newcomm, h, "newcomm") }
    })
}

/// `MPI_Cancel`: a receive not yet matched, or a send still in the PML, is cancelled
/// (`MPI_Test_cancelled` on its status says which); the request must still be completed.
#[export]
pub unsafe extern "C" fn MPI_Cancel(request: *mut Handle) -> c_int {
    call("MPI_Cancel", MPI_COMM_WORLD, || {
        if request.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "the request argument is NULL"));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { request.read() };
        if h == MPI_REQUEST_NULL {
            return Err(MpiError::new(
                MPI_ERR_REQUEST,
                "MPI_Cancel on MPI_REQUEST_NULL",
            ));
        }
        state::with(|s| {
            let entry = s.request(h)?;
            let comm = entry.comm;
            if let ReqState::Active(r) = &mut entry.state {
                r.cancel().map_err(|e| MpiError::from(e).on(comm))?;
            }
            Ok(())
        })
    })
}

/// `MPI_Test_cancelled`.
#[export]
pub unsafe extern "C" fn MPI_Test_cancelled(status: *const MpiStatus, flag: *mut c_int) -> c_int {
    call("MPI_Test_cancelled", MPI_COMM_WORLD, || {
        if status.is_null() {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                "the status is NULL (MPI_STATUS_IGNORE cannot be queried)",
            ));
        }
        // SAFETY: non-null, the caller's status.
        let cancelled = unsafe { status.read() }.internal[2] != 0;
        // SAFETY: the caller's int.
        unsafe { put(flag, c_int::from(cancelled), "flag") }
    })
}

/// The ranks of `n` (first, last, stride) triplets of a C array, each a rank of `g`.
///
/// # Safety
/// `ranges` holds `n` triplets.
unsafe fn range_ranks(g: &Group, n: c_int, ranges: *const [c_int; 3]) -> MpiResult<Vec<usize>> {
    let n = super::count(n, "range count")?;
    if n > 0 && ranges.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "the ranges array is NULL"));
    }
    let size = g.size() as i64;
    let mut seen = vec![false; g.size()];
    let mut out = Vec::new();
    for i in 0..n {
        // SAFETY: the caller's contract.
        let [first, last, stride] = unsafe { ranges.add(i).read() }.map(i64::from);
        if stride == 0 {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!("range {i} ({first}, {last}, {stride}): the stride is 0"),
            ));
        }
        if (last - first) / stride < 0 {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!("range {i} ({first}, {last}, {stride}): the stride goes away from last"),
            ));
        }
        for r in [first, last] {
            if !(0..size).contains(&r) {
                return Err(MpiError::new(
                    MPI_ERR_RANK,
                    format!(
                        "range {i} ({first}, {last}, {stride}): rank {r} is not in the group (ranks 0..{})",
                        size - 1
                    ),
                ));
            }
        }
        let steps = (last - first) / stride;
        for k in 0..=steps {
            let r = (first + k * stride) as usize;
            if std::mem::replace(&mut seen[r], true) {
                return Err(MpiError::new(
                    MPI_ERR_RANK,
                    format!("range {i} ({first}, {last}, {stride}): rank {r} appears twice (the ranges must name distinct ranks)"),
                ));
            }
            out.push(r);
        }
    }
    Ok(out)
}

/// `MPI_Group_range_incl`: the ranks of (first, last, stride) triplets, in order.
#[export]
pub unsafe extern "C" fn MPI_Group_range_incl(
    g: Handle,
    n: c_int,
    ranges: *const [c_int; 3],
    newgroup: *mut Handle,
) -> c_int {
    call("MPI_Group_range_incl", MPI_COMM_WORLD, || {
        let g = group(g)?;
        // SAFETY: MPI_Group_range_incl's contract: `n` triplets.
        let r = unsafe { range_ranks(&g, n, ranges)? };
        add_group(g.incl(&r)?, newgroup)
    })
}

/// `MPI_Group_range_excl`: the group without the ranks of the triplets.
#[export]
pub unsafe extern "C" fn MPI_Group_range_excl(
    g: Handle,
    n: c_int,
    ranges: *const [c_int; 3],
    newgroup: *mut Handle,
) -> c_int {
    call("MPI_Group_range_excl", MPI_COMM_WORLD, || {
        let g = group(g)?;
        // SAFETY: MPI_Group_range_excl's contract: `n` triplets.
        let r = unsafe { range_ranks(&g, n, ranges)? };
        add_group(g.excl(&r)?, newgroup)
    })
}

/// `MPI_Comm_split_type` values (standard ABI).
const MPI_COMM_TYPE_SHARED: c_int = 221;
const MPI_COMM_TYPE_HW_UNGUIDED: c_int = 222;
const MPI_COMM_TYPE_HW_GUIDED: c_int = 223;
const MPI_COMM_TYPE_RESOURCE_GUIDED: c_int = 224;

/// The value of `key` in info `info` (`MPI_INFO_NULL`: none).
fn info_value(info: Handle, key: &str) -> MpiResult<Option<String>> {
    if info == MPI_INFO_NULL {
        return Ok(None);
    }
    Ok(super::info::entries_of(info)?
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v))
}

/// `MPI_Comm_split_type`: `MPI_COMM_TYPE_SHARED` splits by node; `HW_GUIDED` with
/// `mpi_hw_resource_type` = `mpi_shared_memory` likewise (another resource type:
/// `MPI_COMM_NULL`); `HW_UNGUIDED` gives the node's processes when they are fewer than the
/// communicator's, else `MPI_COMM_NULL`; `RESOURCE_GUIDED` with `mpi_hw_resource_type`
/// splits as `HW_GUIDED`, else with `mpi_pset_name` `mpi://WORLD` or `mpi://SELF` gives
/// those (another: `MPI_COMM_NULL`); `MPI_UNDEFINED`
/// leaves the caller out.
#[export]
pub unsafe extern "C" fn MPI_Comm_split_type(
    comm: Handle,
    split_type: c_int,
    key: c_int,
    info: Handle,
    newcomm: *mut Handle,
) -> c_int {
    call("MPI_Comm_split_type", comm, || {
        if newcomm.is_null() {
            return Err(super::null_argument("newcomm"));
        }
        let (c, errhandler) = super::inter::comm_entry(comm)?;
        enum How {
            Node,
            NodeIfSmaller,
            Color(Option<u32>),
        }
        let how = match split_type {
            MPI_UNDEFINED => How::Color(None),
            MPI_COMM_TYPE_SHARED => How::Node,
            MPI_COMM_TYPE_HW_UNGUIDED => How::NodeIfSmaller,
            MPI_COMM_TYPE_HW_GUIDED => match info_value(info, "mpi_hw_resource_type")?.as_deref() {
                Some("mpi_shared_memory") => How::Node,
                _ => How::Color(None),
            },
            // MPI 4.1 section 7.4.2: the hardware resource types of HW_GUIDED, or a process
            // set (MPICH looks at mpi_hw_resource_type first, as here).
            MPI_COMM_TYPE_RESOURCE_GUIDED => match (
                info_value(info, "mpi_hw_resource_type")?,
                info_value(info, "mpi_pset_name")?,
            ) {
                (Some(r), _) if r == "mpi_shared_memory" => How::Node,
                (Some(_), _) => How::Color(None),
                (None, Some(p)) if p.eq_ignore_ascii_case("mpi://WORLD") => How::Color(Some(0)),
                (None, Some(p)) if p.eq_ignore_ascii_case("mpi://SELF") => {
                    How::Color(Some(c.rank() as u32))
                }
                _ => How::Color(None),
            },
            t => {
                return Err(MpiError::new(
                    MPI_ERR_ARG,
                    format!("split_type {t} is invalid: MPI_COMM_TYPE_SHARED, MPI_COMM_TYPE_HW_GUIDED, MPI_COMM_TYPE_HW_UNGUIDED, MPI_COMM_TYPE_RESOURCE_GUIDED or MPI_UNDEFINED"),
                ))
            }
        };
        let part = match how {
            // On an intercommunicator: the parts of both groups on the same node (MPI 4.1).
            How::Node => c.split_node(key)?,
            How::NodeIfSmaller => c
                .split_node(key)?
                .filter(|p| p.local_size() < c.local_size()),
            How::Color(color) => c.split(color, key)?,
        };
        let h = match part {
            None => MPI_COMM_NULL,
            Some(p) => state::with(|s| {
                s.add_comm(CommEntry {
                    comm: p,
                    errhandler,
                    name: String::new(),
                })
            })?,
        };
        // A communicator made from a session's keeps its buffered-send buffer's session.
        super::buffers::comm_derived(comm, h);
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { put(newcomm, h, "newcomm") }
    })
}
