//! Process topologies: `MPI_Dims_create`, the Cartesian (`MPI_Cart_*`), graph
//! (`MPI_Graph_*`) and distributed-graph (`MPI_Dist_graph_*`) constructors and queries, and
//! `MPI_Topo_test`, over [`rmca::topo`]. The topology lives in the rmca communicator, so
//! `MPI_Comm_dup` keeps it and `MPI_Comm_free` drops it. `reorder` is accepted and ignored
//! (ranks are kept), as is the info argument.
#![allow(non_snake_case)]

use std::ffi::c_int;

use rmca::topo::{Cart, Topology};

use super::{call, communicator, put};
use crate::abi::*;
use crate::state::{self, CommEntry, MpiError, MpiResult};
use rmca_mpi_export::export;

/// `MPI_UNWEIGHTED` and `MPI_WEIGHTS_EMPTY` (mpi.h: `(int *)10` and `(int *)11`).
pub(crate) const UNWEIGHTED: usize = 10;
pub(crate) const WEIGHTS_EMPTY: usize = 11;
/// `MPI_Topo_test`'s answers (mpi.h).
const MPI_CART: c_int = 211;
const MPI_GRAPH: c_int = 212;
const MPI_DIST_GRAPH: c_int = 213;

fn err(class: c_int, msg: impl Into<String>) -> MpiError {
    MpiError::new(class, msg)
}

/// Read `n` ints of a C array (checked non-null when `n` > 0).
///
/// # Safety
/// `p` holds `n` ints.
pub(crate) unsafe fn ints(p: *const c_int, n: usize, what: &str) -> MpiResult<Vec<c_int>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(err(MPI_ERR_ARG, format!("the {what} array is NULL")));
    }
    // SAFETY: the caller's contract; non-null checked.
    Ok(unsafe { std::slice::from_raw_parts(p, n) }.to_vec())
}

/// Write `v` into the C array `p` (checked non-null when there is something to write).
///
/// # Safety
/// `p` holds room for `v.len()` ints.
unsafe fn write_ints(p: *mut c_int, v: &[c_int], what: &str) -> MpiResult<()> {
    if v.is_empty() {
        return Ok(());
    }
    if p.is_null() {
        return Err(err(MPI_ERR_ARG, format!("the {what} array is NULL")));
    }
    // SAFETY: the caller's contract; non-null checked.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), p, v.len()) };
    Ok(())
}

fn nonneg(n: c_int, class: c_int, what: &str) -> MpiResult<usize> {
    usize::try_from(n).map_err(|_| err(class, format!("{what} {n} is negative")))
}

/// The topology of communicator `comm` (an error without one).
pub(crate) fn topology(comm: Handle) -> MpiResult<(rmca::Communicator, Topology)> {
    let c = communicator(comm)?;
    let t = c.topology().cloned().ok_or_else(|| {
        err(
            MPI_ERR_TOPOLOGY,
            "the communicator has no process topology (make one with MPI_Cart_create, MPI_Graph_create or MPI_Dist_graph_create)",
        )
    })?;
    Ok((c, t))
}

fn cart_of(comm: Handle) -> MpiResult<(rmca::Communicator, Cart)> {
    match topology(comm)? {
        (c, Topology::Cart(cart)) => Ok((c, cart)),
        _ => Err(err(
            MPI_ERR_TOPOLOGY,
            "the communicator's topology is not Cartesian",
        )),
    }
}

fn graph_of(comm: Handle) -> MpiResult<(rmca::Communicator, rmca::topo::Graph)> {
    match topology(comm)? {
        (c, Topology::Graph(g)) => Ok((c, g)),
        _ => Err(err(
            MPI_ERR_TOPOLOGY,
            "the communicator's topology is not a graph",
        )),
    }
}

fn dist_graph_of(comm: Handle) -> MpiResult<rmca::topo::DistGraph> {
    match topology(comm)?.1 {
        Topology::DistGraph(d) => Ok(d),
        _ => Err(err(
            MPI_ERR_TOPOLOGY,
            "the communicator's topology is not a distributed graph",
        )),
    }
}

/// Register communicator `c` (made from `old`, whose error handler it inherits) and store
/// its handle at `out` (`MPI_COMM_NULL` for `None`).
///
/// # Safety
/// `out` is valid for a write of a handle (checked non-null by the caller).
unsafe fn put_comm(old: Handle, c: Option<rmca::Communicator>, out: *mut Handle) -> MpiResult<()> {
    let h = match c {
        None => MPI_COMM_NULL,
        Some(comm) => state::with(|s| {
            let errhandler = s.comm(old)?.errhandler;
            s.add_comm(CommEntry {
                comm,
                errhandler,
                name: String::new(),
            })
        })?,
    };
    // A communicator made from a session's keeps its buffered-send buffer's session.
    super::buffers::comm_derived(old, h);
    // SAFETY: the caller's contract.
    unsafe { put(out, h, "newcomm") }
}

/// Dimensions and periods of a Cartesian grid given by C arrays.
///
/// # Safety
/// `dims` and `periods` hold `ndims` ints.
unsafe fn grid(ndims: c_int, dims: *const c_int, periods: *const c_int) -> MpiResult<Cart> {
    let n = nonneg(ndims, MPI_ERR_DIMS, "ndims")?;
    // SAFETY: the caller's contract.
    let (d, p) = unsafe { (ints(dims, n, "dims")?, ints(periods, n, "periods")?) };
    let d = d
        .iter()
        .enumerate()
        .map(|(i, &x)| match usize::try_from(x) {
            Ok(x) if x > 0 => Ok(x),
            _ => Err(err(
                MPI_ERR_DIMS,
                format!("dims[{i}] = {x}: every extent of a Cartesian grid is >= 1"),
            )),
        })
        .collect::<MpiResult<Vec<usize>>>()?;
    let p: Vec<bool> = p.iter().map(|&x| x != 0).collect();
    Cart::new(&d, &p).map_err(|e| err(MPI_ERR_DIMS, e.to_string()))
}

/// `MPI_Dims_create`: the most balanced grid of `nnodes` processes, nonzero entries kept.
#[export]
pub unsafe extern "C" fn MPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> c_int {
    call("MPI_Dims_create", MPI_COMM_WORLD, || {
        state::with(|_| Ok(()))?;
        let n = nonneg(ndims, MPI_ERR_DIMS, "ndims")?;
        let nodes = match usize::try_from(nnodes) {
            Ok(x) if x > 0 => x,
            _ => return Err(err(MPI_ERR_ARG, format!("nnodes {nnodes} is not positive"))),
        };
        // SAFETY: MPI_Dims_create's contract: `dims` holds `ndims` ints.
        let given = unsafe { ints(dims, n, "dims")? };
        let mut d = given
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                usize::try_from(x).map_err(|_| {
                    err(
                        MPI_ERR_DIMS,
                        format!("dims[{i}] = {x} is negative (0: to choose)"),
                    )
                })
            })
            .collect::<MpiResult<Vec<usize>>>()?;
        rmca::topo::dims_create(nodes, &mut d).map_err(|e| err(MPI_ERR_DIMS, e.to_string()))?;
        let out: Vec<c_int> = d.iter().map(|&x| x as c_int).collect();
        // SAFETY: as above.
        unsafe { write_ints(dims, &out, "dims") }
    })
}

/// `MPI_Cart_create`: the first dims-product ranks get the grid (ranks kept), the others
/// `MPI_COMM_NULL`.
#[export]
pub unsafe extern "C" fn MPI_Cart_create(
    comm_old: Handle,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    _reorder: c_int,
    comm_cart: *mut Handle,
) -> c_int {
    call("MPI_Cart_create", comm_old, || {
        let c = communicator(comm_old)?;
        if comm_cart.is_null() {
            return Err(err(MPI_ERR_ARG, "the comm_cart argument is NULL"));
        }
        // SAFETY: MPI_Cart_create's contract: `ndims` dims and periods.
        let cart = unsafe { grid(ndims, dims, periods)? };
        if cart.size() > c.size() {
            return Err(err(
                MPI_ERR_ARG,
                format!(
                    "a grid of {} processes does not fit in the communicator's {}",
                    cart.size(),
                    c.size()
                ),
            ));
        }
        let new = c.cart_create(cart.dims(), cart.periods())?;
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { put_comm(comm_old, new, comm_cart) }
    })
}

/// `MPI_Cartdim_get`.
#[export]
pub unsafe extern "C" fn MPI_Cartdim_get(comm: Handle, ndims: *mut c_int) -> c_int {
    call("MPI_Cartdim_get", comm, || {
        let (_, cart) = cart_of(comm)?;
        // SAFETY: the caller's int.
        unsafe { put(ndims, cart.ndims() as c_int, "ndims") }
    })
}

/// `MPI_Cart_get`: extents, periods and this process's coordinates.
#[export]
pub unsafe extern "C" fn MPI_Cart_get(
    comm: Handle,
    maxdims: c_int,
    dims: *mut c_int,
    periods: *mut c_int,
    coords: *mut c_int,
) -> c_int {
    call("MPI_Cart_get", comm, || {
        let (c, cart) = cart_of(comm)?;
        let max = nonneg(maxdims, MPI_ERR_ARG, "maxdims")?;
        if max < cart.ndims() {
            return Err(err(
                MPI_ERR_ARG,
                format!(
                    "maxdims {max} is less than the grid's {} dimensions",
                    cart.ndims()
                ),
            ));
        }
        let d: Vec<c_int> = cart.dims().iter().map(|&x| x as c_int).collect();
        let p: Vec<c_int> = cart.periods().iter().map(|&x| c_int::from(x)).collect();
        let me: Vec<c_int> = cart.coords(c.rank())?.iter().map(|&x| x as c_int).collect();
        // SAFETY: MPI_Cart_get's contract: each array holds `maxdims` >= ndims ints.
        unsafe {
            write_ints(dims, &d, "dims")?;
            write_ints(periods, &p, "periods")?;
            write_ints(coords, &me, "coords")
        }
    })
}

/// `MPI_Cart_rank`: periodic dimensions wrap; outside a non-periodic one is `MPI_ERR_ARG`
/// (as MPICH and Open MPI).
#[export]
pub unsafe extern "C" fn MPI_Cart_rank(
    comm: Handle,
    coords: *const c_int,
    rank: *mut c_int,
) -> c_int {
    call("MPI_Cart_rank", comm, || {
        let (_, cart) = cart_of(comm)?;
        // SAFETY: MPI_Cart_rank's contract: `coords` holds ndims ints.
        let at = unsafe { ints(coords, cart.ndims(), "coords")? };
        let at: Vec<i64> = at.iter().map(|&x| i64::from(x)).collect();
        let r = cart
            .rank(&at)
            .map_err(|e| err(MPI_ERR_ARG, e.to_string()))?;
        // SAFETY: the caller's int.
        unsafe { put(rank, r as c_int, "rank") }
    })
}

/// `MPI_Cart_coords`.
#[export]
pub unsafe extern "C" fn MPI_Cart_coords(
    comm: Handle,
    rank: c_int,
    maxdims: c_int,
    coords: *mut c_int,
) -> c_int {
    call("MPI_Cart_coords", comm, || {
        let (_, cart) = cart_of(comm)?;
        let r = match usize::try_from(rank) {
            Ok(r) if r < cart.size() => r,
            _ => {
                return Err(err(
                    MPI_ERR_RANK,
                    format!(
                        "rank {rank} is not in the grid of {} processes",
                        cart.size()
                    ),
                ))
            }
        };
        let max = nonneg(maxdims, MPI_ERR_ARG, "maxdims")?;
        if max < cart.ndims() {
            return Err(err(
                MPI_ERR_ARG,
                format!(
                    "maxdims {max} is less than the grid's {} dimensions",
                    cart.ndims()
                ),
            ));
        }
        let at: Vec<c_int> = cart.coords(r)?.iter().map(|&x| x as c_int).collect();
        // SAFETY: MPI_Cart_coords' contract: `coords` holds `maxdims` ints.
        unsafe { write_ints(coords, &at, "coords") }
    })
}

/// `MPI_Cart_shift`: `MPI_PROC_NULL` past a non-periodic end.
#[export]
pub unsafe extern "C" fn MPI_Cart_shift(
    comm: Handle,
    direction: c_int,
    disp: c_int,
    rank_source: *mut c_int,
    rank_dest: *mut c_int,
) -> c_int {
    call("MPI_Cart_shift", comm, || {
        let (c, cart) = cart_of(comm)?;
        if cart.ndims() == 0 {
            return Err(err(
                MPI_ERR_TOPOLOGY,
                "the grid has no dimension to shift along",
            ));
        }
        let dim = match usize::try_from(direction) {
            Ok(d) if d < cart.ndims() => d,
            _ => {
                return Err(err(
                    MPI_ERR_ARG,
                    format!(
                        "direction {direction} is not a dimension of the {}-dimensional grid",
                        cart.ndims()
                    ),
                ))
            }
        };
        let (s, d) = cart.shift(c.rank(), dim, i64::from(disp))?;
        let or_null = |r: Option<usize>| r.map_or(MPI_PROC_NULL, |r| r as c_int);
        // SAFETY: the caller's ints.
        unsafe {
            put(rank_source, or_null(s), "rank_source")?;
            put(rank_dest, or_null(d), "rank_dest")
        }
    })
}

/// `MPI_Cart_sub`.
#[export]
pub unsafe extern "C" fn MPI_Cart_sub(
    comm: Handle,
    remain_dims: *const c_int,
    newcomm: *mut Handle,
) -> c_int {
    call("MPI_Cart_sub", comm, || {
        let (c, cart) = cart_of(comm)?;
        if newcomm.is_null() {
            return Err(err(MPI_ERR_ARG, "the newcomm argument is NULL"));
        }
        // SAFETY: MPI_Cart_sub's contract: `remain_dims` holds ndims ints.
        let keep = unsafe { ints(remain_dims, cart.ndims(), "remain_dims")? };
        let keep: Vec<bool> = keep.iter().map(|&x| x != 0).collect();
        let sub = c.cart_sub(&keep)?;
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { put_comm(comm, Some(sub), newcomm) }
    })
}

/// `MPI_Cart_map`: ranks are kept, so the caller's rank if inside the grid, else
/// `MPI_UNDEFINED`.
#[export]
pub unsafe extern "C" fn MPI_Cart_map(
    comm: Handle,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    call("MPI_Cart_map", comm, || {
        let c = communicator(comm)?;
        // SAFETY: MPI_Cart_map's contract: `ndims` dims and periods.
        let cart = unsafe { grid(ndims, dims, periods)? };
        if cart.size() > c.size() {
            return Err(err(
                MPI_ERR_DIMS,
                format!(
                    "a grid of {} processes does not fit in the communicator's {}",
                    cart.size(),
                    c.size()
                ),
            ));
        }
        let r = if c.rank() < cart.size() {
            c.rank() as c_int
        } else {
            MPI_UNDEFINED
        };
        // SAFETY: the caller's int.
        unsafe { put(newrank, r, "newrank") }
    })
}

/// A graph given by MPI's C arrays, checked with MPI's classes.
///
/// # Safety
/// `index` holds `nnodes` ints, `edges` index[nnodes-1] ints.
unsafe fn graph_arrays(
    nnodes: usize,
    index: *const c_int,
    edges: *const c_int,
) -> MpiResult<rmca::topo::Graph> {
    // SAFETY: the caller's contract.
    let idx = unsafe { ints(index, nnodes, "index")? };
    let idx = idx
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            usize::try_from(x)
                .map_err(|_| err(MPI_ERR_ARG, format!("index[{i}] = {x} is negative")))
        })
        .collect::<MpiResult<Vec<usize>>>()?;
    let total = idx.last().copied().unwrap_or(0);
    // SAFETY: the caller's contract.
    let e = unsafe { ints(edges, total, "edges")? };
    let e = e
        .iter()
        .map(|&x| usize::try_from(x).unwrap_or(usize::MAX))
        .collect::<Vec<usize>>();
    rmca::topo::Graph::new(&idx, &e).map_err(|x| err(MPI_ERR_ARG, x.to_string()))
}

/// `MPI_Graph_create`: the first `nnodes` ranks get the graph (ranks kept), the others
/// `MPI_COMM_NULL`.
#[export]
pub unsafe extern "C" fn MPI_Graph_create(
    comm_old: Handle,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    _reorder: c_int,
    comm_graph: *mut Handle,
) -> c_int {
    call("MPI_Graph_create", comm_old, || {
        let c = communicator(comm_old)?;
        if comm_graph.is_null() {
            return Err(err(MPI_ERR_ARG, "the comm_graph argument is NULL"));
        }
        let n = nonneg(nnodes, MPI_ERR_ARG, "nnodes")?;
        if n > c.size() {
            return Err(err(
                MPI_ERR_ARG,
                format!(
                    "a graph of {n} nodes does not fit in the communicator's {} ranks",
                    c.size()
                ),
            ));
        }
        // SAFETY: MPI_Graph_create's contract.
        let g = unsafe { graph_arrays(n, index, edges)? };
        let new = if n == 0 {
            None
        } else {
            c.graph_create(g.index(), g.edges())?
        };
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { put_comm(comm_old, new, comm_graph) }
    })
}

/// `MPI_Graphdims_get`.
#[export]
pub unsafe extern "C" fn MPI_Graphdims_get(
    comm: Handle,
    nnodes: *mut c_int,
    nedges: *mut c_int,
) -> c_int {
    call("MPI_Graphdims_get", comm, || {
        let (_, g) = graph_of(comm)?;
        // SAFETY: the caller's ints.
        unsafe {
            put(nnodes, g.nnodes() as c_int, "nnodes")?;
            put(nedges, g.edges().len() as c_int, "nedges")
        }
    })
}

/// `MPI_Graph_get`.
#[export]
pub unsafe extern "C" fn MPI_Graph_get(
    comm: Handle,
    maxindex: c_int,
    maxedges: c_int,
    index: *mut c_int,
    edges: *mut c_int,
) -> c_int {
    call("MPI_Graph_get", comm, || {
        let (_, g) = graph_of(comm)?;
        let mi = nonneg(maxindex, MPI_ERR_ARG, "maxindex")?;
        let me = nonneg(maxedges, MPI_ERR_ARG, "maxedges")?;
        if mi < g.nnodes() || me < g.edges().len() {
            return Err(err(
                MPI_ERR_ARG,
                format!(
                    "maxindex {mi} / maxedges {me} are less than the graph's {} nodes / {} edges",
                    g.nnodes(),
                    g.edges().len()
                ),
            ));
        }
        let i: Vec<c_int> = g.index().iter().map(|&x| x as c_int).collect();
        let e: Vec<c_int> = g.edges().iter().map(|&x| x as c_int).collect();
        // SAFETY: MPI_Graph_get's contract: room for maxindex and maxedges ints.
        unsafe {
            write_ints(index, &i, "index")?;
            write_ints(edges, &e, "edges")
        }
    })
}

fn graph_node(g: &rmca::topo::Graph, rank: c_int) -> MpiResult<&[usize]> {
    usize::try_from(rank)
        .ok()
        .and_then(|r| g.neighbors(r).ok())
        .ok_or_else(|| {
            err(
                MPI_ERR_RANK,
                format!(
                    "rank {rank} is not a node of the graph of {} nodes",
                    g.nnodes()
                ),
            )
        })
}

/// `MPI_Graph_neighbors_count`.
#[export]
pub unsafe extern "C" fn MPI_Graph_neighbors_count(
    comm: Handle,
    rank: c_int,
    nneighbors: *mut c_int,
) -> c_int {
    call("MPI_Graph_neighbors_count", comm, || {
        let (_, g) = graph_of(comm)?;
        let n = graph_node(&g, rank)?.len();
        // SAFETY: the caller's int.
        unsafe { put(nneighbors, n as c_int, "nneighbors") }
    })
}

/// `MPI_Graph_neighbors`.
#[export]
pub unsafe extern "C" fn MPI_Graph_neighbors(
    comm: Handle,
    rank: c_int,
    maxneighbors: c_int,
    neighbors: *mut c_int,
) -> c_int {
    call("MPI_Graph_neighbors", comm, || {
        let (_, g) = graph_of(comm)?;
        let nb: Vec<c_int> = graph_node(&g, rank)?.iter().map(|&x| x as c_int).collect();
        let max = nonneg(maxneighbors, MPI_ERR_ARG, "maxneighbors")?;
        if max < nb.len() {
            return Err(err(
                MPI_ERR_ARG,
                format!(
                    "maxneighbors {max} is less than the node's {} neighbours",
                    nb.len()
                ),
            ));
        }
        // SAFETY: MPI_Graph_neighbors' contract: room for maxneighbors ints.
        unsafe { write_ints(neighbors, &nb, "neighbors") }
    })
}

/// `MPI_Graph_map`: ranks are kept, so the caller's rank if a node, else `MPI_UNDEFINED`.
#[export]
pub unsafe extern "C" fn MPI_Graph_map(
    comm: Handle,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    call("MPI_Graph_map", comm, || {
        let c = communicator(comm)?;
        let n = nonneg(nnodes, MPI_ERR_ARG, "nnodes")?;
        if n > c.size() {
            return Err(err(
                MPI_ERR_ARG,
                format!(
                    "a graph of {n} nodes does not fit in the communicator's {} ranks",
                    c.size()
                ),
            ));
        }
        // SAFETY: MPI_Graph_map's contract.
        unsafe { graph_arrays(n, index, edges)? };
        let r = if c.rank() < n {
            c.rank() as c_int
        } else {
            MPI_UNDEFINED
        };
        // SAFETY: the caller's int.
        unsafe { put(newrank, r, "newrank") }
    })
}

/// Ranks of a neighbour list, checked against the communicator's size.
fn ranks(v: &[c_int], size: usize, what: &str) -> MpiResult<Vec<usize>> {
    v.iter()
        .map(|&r| match usize::try_from(r) {
            Ok(r) if r < size => Ok(r),
            _ => Err(err(
                MPI_ERR_RANK,
                format!("{what} rank {r} is not in the communicator of {size} ranks"),
            )),
        })
        .collect()
}

/// Weights of `n` edges at `w`: `None` for `MPI_UNWEIGHTED`.
///
/// # Safety
/// `w` is `MPI_UNWEIGHTED`, `MPI_WEIGHTS_EMPTY` (with `n` = 0), or holds `n` ints.
unsafe fn weights(w: *const c_int, n: usize, what: &str) -> MpiResult<Option<Vec<c_int>>> {
    match w as usize {
        UNWEIGHTED => Ok(None),
        WEIGHTS_EMPTY if n == 0 => Ok(Some(Vec::new())),
        WEIGHTS_EMPTY => Err(err(
            MPI_ERR_ARG,
            format!("MPI_WEIGHTS_EMPTY given for {n} {what} weights"),
        )),
        // SAFETY: the caller's contract.
        _ => unsafe { ints(w, n, what).map(Some) },
    }
}

/// `MPI_Dist_graph_create_adjacent`: this process's sources and destinations, weighted or
/// not (`MPI_UNWEIGHTED`).
#[export]
pub unsafe extern "C" fn MPI_Dist_graph_create_adjacent(
    comm_old: Handle,
    indegree: c_int,
    sources: *const c_int,
    sourceweights: *const c_int,
    outdegree: c_int,
    destinations: *const c_int,
    destweights: *const c_int,
    _info: Handle,
    _reorder: c_int,
    comm_dist_graph: *mut Handle,
) -> c_int {
    call("MPI_Dist_graph_create_adjacent", comm_old, || {
        let c = communicator(comm_old)?;
        if comm_dist_graph.is_null() {
            return Err(err(MPI_ERR_ARG, "the comm_dist_graph argument is NULL"));
        }
        let ni = nonneg(indegree, MPI_ERR_ARG, "indegree")?;
        let no = nonneg(outdegree, MPI_ERR_ARG, "outdegree")?;
        // SAFETY: MPI_Dist_graph_create_adjacent's contract: the arrays hold indegree and
        // outdegree ints (weights: or a sentinel).
        let (s, sw, d, dw) = unsafe {
            (
                ints(sources, ni, "sources")?,
                weights(sourceweights, ni, "source")?,
                ints(destinations, no, "destinations")?,
                weights(destweights, no, "destination")?,
            )
        };
        if sw.is_some() != dw.is_some() && ni > 0 && no > 0 {
            return Err(err(
                MPI_ERR_TOPOLOGY,
                "MPI_UNWEIGHTED must be given for both weight arrays or neither",
            ));
        }
        let s = ranks(&s, c.size(), "source")?;
        let d = ranks(&d, c.size(), "destination")?;
        let new = c.dist_graph_create_adjacent(&s, sw.as_deref(), &d, dw.as_deref())?;
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { put_comm(comm_old, Some(new), comm_dist_graph) }
    })
}

/// `MPI_Dist_graph_create`: edges given by any process, redistributed so that each learns
/// its own.
#[export]
pub unsafe extern "C" fn MPI_Dist_graph_create(
    comm_old: Handle,
    n: c_int,
    sources: *const c_int,
    degrees: *const c_int,
    destinations: *const c_int,
    weights_: *const c_int,
    _info: Handle,
    _reorder: c_int,
    comm_dist_graph: *mut Handle,
) -> c_int {
    call("MPI_Dist_graph_create", comm_old, || {
        let c = communicator(comm_old)?;
        if comm_dist_graph.is_null() {
            return Err(err(MPI_ERR_ARG, "the comm_dist_graph argument is NULL"));
        }
        let n = nonneg(n, MPI_ERR_ARG, "n")?;
        // SAFETY: MPI_Dist_graph_create's contract: n sources and degrees, sum(degrees)
        // destinations and weights (or a sentinel).
        let (s, deg) = unsafe { (ints(sources, n, "sources")?, ints(degrees, n, "degrees")?) };
        let deg = deg
            .iter()
            .map(|&x| nonneg(x, MPI_ERR_ARG, "degree"))
            .collect::<MpiResult<Vec<usize>>>()?;
        let total: usize = deg.iter().sum();
        // SAFETY: as above.
        let (d, w) = unsafe {
            (
                ints(destinations, total, "destinations")?,
                weights(weights_, total, "edge")?,
            )
        };
        let s = ranks(&s, c.size(), "source")?;
        let d = ranks(&d, c.size(), "destination")?;
        let mut edges = Vec::with_capacity(total);
        let mut k = 0;
        for (i, &src) in s.iter().enumerate() {
            for _ in 0..deg[i] {
                edges.push((src, d[k], w.as_ref().map_or(0, |w| w[k])));
                k += 1;
            }
        }
        let new = c.dist_graph_create(&edges, w.is_some())?;
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { put_comm(comm_old, Some(new), comm_dist_graph) }
    })
}

/// `MPI_Dist_graph_neighbors_count`.
#[export]
pub unsafe extern "C" fn MPI_Dist_graph_neighbors_count(
    comm: Handle,
    indegree: *mut c_int,
    outdegree: *mut c_int,
    weighted: *mut c_int,
) -> c_int {
    call("MPI_Dist_graph_neighbors_count", comm, || {
        let d = dist_graph_of(comm)?;
        // SAFETY: the caller's ints.
        unsafe {
            put(indegree, d.sources().len() as c_int, "indegree")?;
            put(outdegree, d.destinations().len() as c_int, "outdegree")?;
            put(weighted, c_int::from(d.weighted()), "weighted")
        }
    })
}

/// `MPI_Dist_graph_neighbors`: weights written unless `MPI_UNWEIGHTED` is given for them.
#[export]
pub unsafe extern "C" fn MPI_Dist_graph_neighbors(
    comm: Handle,
    maxindegree: c_int,
    sources: *mut c_int,
    sourceweights: *mut c_int,
    maxoutdegree: c_int,
    destinations: *mut c_int,
    destweights: *mut c_int,
) -> c_int {
    call("MPI_Dist_graph_neighbors", comm, || {
        let d = dist_graph_of(comm)?;
        let mi = nonneg(maxindegree, MPI_ERR_ARG, "maxindegree")?;
        let mo = nonneg(maxoutdegree, MPI_ERR_ARG, "maxoutdegree")?;
        if mi < d.sources().len() || mo < d.destinations().len() {
            return Err(err(
                MPI_ERR_ARG,
                format!(
                    "maxindegree {mi} / maxoutdegree {mo} are less than the {} sources / {} destinations",
                    d.sources().len(),
                    d.destinations().len()
                ),
            ));
        }
        let v = |x: &[usize]| -> Vec<c_int> { x.iter().map(|&r| r as c_int).collect() };
        let skip = |p: *mut c_int| matches!(p as usize, UNWEIGHTED | WEIGHTS_EMPTY);
        // SAFETY: MPI_Dist_graph_neighbors' contract: room for maxindegree and maxoutdegree
        // ints in each array given.
        unsafe {
            write_ints(sources, &v(d.sources()), "sources")?;
            write_ints(destinations, &v(d.destinations()), "destinations")?;
            if !skip(sourceweights) && d.weighted() {
                write_ints(sourceweights, d.source_weights(), "sourceweights")?;
            }
            if !skip(destweights) && d.weighted() {
                write_ints(destweights, d.destination_weights(), "destweights")?;
            }
        }
        Ok(())
    })
}

/// `MPI_Topo_test`: `MPI_CART`, `MPI_GRAPH`, `MPI_DIST_GRAPH` or `MPI_UNDEFINED`.
#[export]
pub unsafe extern "C" fn MPI_Topo_test(comm: Handle, status: *mut c_int) -> c_int {
    call("MPI_Topo_test", comm, || {
        let c = communicator(comm)?;
        let kind = match c.topology() {
            None => MPI_UNDEFINED,
            Some(Topology::Cart(_)) => MPI_CART,
            Some(Topology::Graph(_)) => MPI_GRAPH,
            Some(Topology::DistGraph(_)) => MPI_DIST_GRAPH,
        };
        // SAFETY: the caller's int.
        unsafe { put(status, kind, "status") }
    })
}
