//! Process topologies and the neighbourhood collectives that run over them.
//!
//! A communicator may carry a *topology* (MPI's virtual topologies): a Cartesian grid
//! ([`Cart`], made by [`Communicator::cart_create`] and [`Communicator::cart_sub`]), a graph
//! known to every process ([`Graph`], [`Communicator::graph_create`]) or a distributed graph
//! of which each process knows its own edges ([`DistGraph`],
//! [`Communicator::dist_graph_create_adjacent`] and [`Communicator::dist_graph_create`]).
//! The topology is fixed when the communicator is made, and [`Communicator::dup`] keeps it;
//! [`Communicator::topology`] reads it. Ranks are never reordered.
//!
//! The neighbourhood collectives ([`Communicator::neighbor_allgather`],
//! [`Communicator::neighbor_alltoall`], and over raw memory [`crate::raw::ineighbor`]) exchange
//! one block with each neighbour, in MPI's neighbour order ([`Topology::neighbors`]):
//! - Cartesian: for each dimension, the neighbour at -1 then the one at +1 (those of
//!   [`Cart::shift`] by 1); a missing neighbour at a non-periodic end (`None`, MPI's
//!   `MPI_PROC_NULL`) takes no part, and its receive block is left untouched;
//! - graph: the neighbours of [`Graph::neighbors`], both as sources and destinations;
//! - distributed graph: the sources and the destinations given at creation.
//!
//! They run as one round of point-to-point transfers on the communicator's collective context
//! (never matching user messages), started like the non-blocking collectives: the blocking
//! forms start one and wait for it. Where a peer appears more than once, the blocks are sent
//! in [`Neighbors::send_order`], so that in a Cartesian grid the block sent towards +1 of a
//! dimension arrives as the receiver's block from -1 even when both neighbours are one
//! process (a periodic dimension of extent 1 or 2, as MPI 4.1 specifies and MPICH does), and
//! repeated graph edges match in list order.
//!
//! [`dims_create`] is MPI's `MPI_Dims_create`: the most balanced grid of a process count.
//!
//! ```no_run
//! # fn main() -> rmca::Result<()> {
//! let universe = rmca::init()?;
//! let world = universe.world();
//! let mut dims = [0, 0];
//! rmca::topo::dims_create(world.size(), &mut dims)?;
//! let grid = world.cart_create(&dims, &[true, true])?.expect("every rank is in the grid");
//! // One value from each of the four neighbours (-x, +x, -y, +y).
//! let mut got = [0u32; 4];
//! grid.neighbor_allgather(&[grid.rank() as u32], &mut got)?;
//! # Ok(())
//! # }
//! ```

use std::ops::Range;
use std::rc::Rc;

use rmca_framework::buffer::UserBuf;

use crate::coll::nonblocking::Plan;
use crate::coll::schedule::{Buf, Comm, Region, Round, Schedule};
use crate::coll::CollCache;
use crate::{Communicator, Error, Result};

/// A communicator's process topology.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topology {
    /// A Cartesian grid.
    Cart(Cart),
    /// A graph every process knows whole.
    Graph(Graph),
    /// A distributed graph: this process's own edges.
    DistGraph(DistGraph),
}

fn invalid(msg: String) -> Error {
    Error::InvalidArgument(msg)
}

/// A Cartesian grid of processes: rank r sits at the coordinates of r in row-major order
/// (the last dimension varies fastest), as in MPI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cart {
    dims: Vec<usize>,
    periods: Vec<bool>,
}

impl Cart {
    /// A grid of `dims` processes per dimension, periodic (wrapping around) where `periods`
    /// says so. Every extent is at least 1; zero dimensions make a grid of one process.
    pub fn new(dims: &[usize], periods: &[bool]) -> Result<Self> {
        if dims.len() != periods.len() {
            return Err(invalid(format!(
                "Cartesian topology: {} dimensions but {} periodicity flags",
                dims.len(),
                periods.len()
            )));
        }
        if let Some(d) = dims.iter().position(|&d| d == 0) {
            return Err(invalid(format!(
                "Cartesian topology: dimension {d} has extent 0 (extents are >= 1)"
            )));
        }
        let c = Self {
            dims: dims.to_vec(),
            periods: periods.to_vec(),
        };
        c.checked_size()?;
        Ok(c)
    }

    fn checked_size(&self) -> Result<usize> {
        self.dims
            .iter()
            .try_fold(1usize, |p, &d| p.checked_mul(d))
            .ok_or_else(|| invalid("Cartesian topology: the grid size overflows".into()))
    }

    /// Processes per dimension.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Which dimensions wrap around.
    pub fn periods(&self) -> &[bool] {
        &self.periods
    }

    /// Number of dimensions.
    pub fn ndims(&self) -> usize {
        self.dims.len()
    }

    /// Processes in the grid.
    pub fn size(&self) -> usize {
        self.dims.iter().product()
    }

    /// The coordinates of `rank` (`MPI_Cart_coords`).
    pub fn coords(&self, rank: usize) -> Result<Vec<usize>> {
        if rank >= self.size() {
            return Err(Error::BadRank {
                rank,
                size: self.size(),
            });
        }
        let mut rest = rank;
        let mut c = vec![0; self.dims.len()];
        for (i, &d) in self.dims.iter().enumerate().rev() {
            c[i] = rest % d;
            rest /= d;
        }
        Ok(c)
    }

    /// The rank at `coords` (`MPI_Cart_rank`): periodic dimensions wrap around; a coordinate
    /// outside a non-periodic dimension is an error.
    pub fn rank(&self, coords: &[i64]) -> Result<usize> {
        if coords.len() != self.dims.len() {
            return Err(invalid(format!(
                "Cartesian topology: {} coordinates for {} dimensions",
                coords.len(),
                self.dims.len()
            )));
        }
        let mut r = 0usize;
        for (i, (&c, &d)) in coords.iter().zip(&self.dims).enumerate() {
            let c = self.wrap(i, c).ok_or_else(|| {
                invalid(format!(
                    "coordinate {c} of non-periodic dimension {i} is outside 0..{d}"
                ))
            })?;
            r = r * d + c;
        }
        Ok(r)
    }

    /// Coordinate `c` of dimension `i` in range: wrapped if periodic, `None` if outside a
    /// non-periodic one.
    fn wrap(&self, i: usize, c: i64) -> Option<usize> {
        let d = self.dims[i] as i64;
        if self.periods[i] {
            Some(c.rem_euclid(d) as usize)
        } else {
            (0..d).contains(&c).then_some(c as usize)
        }
    }

    /// The ranks `rank` receives from and sends to in a shift by `disp` along `dim`
    /// (`MPI_Cart_shift`): (source, destination), `None` past a non-periodic end.
    pub fn shift(
        &self,
        rank: usize,
        dim: usize,
        disp: i64,
    ) -> Result<(Option<usize>, Option<usize>)> {
        if dim >= self.dims.len() {
            return Err(invalid(format!(
                "shift direction {dim} is not a dimension of the {}-dimensional grid",
                self.dims.len()
            )));
        }
        let me = self.coords(rank)?;
        let at = |delta: i64| -> Option<usize> {
            let c = (me[dim] as i64).checked_add(delta)?;
            let c = self.wrap(dim, c)?;
            let mut coords: Vec<i64> = me.iter().map(|&x| x as i64).collect();
            coords[dim] = c as i64;
            self.rank(&coords).ok()
        };
        Ok((disp.checked_neg().and_then(&at), at(disp)))
    }

    /// The grid of the dimensions `remain` keeps (`MPI_Cart_sub`).
    pub fn sub(&self, remain: &[bool]) -> Result<Cart> {
        if remain.len() != self.dims.len() {
            return Err(invalid(format!(
                "Cartesian sub-grid: {} flags for {} dimensions",
                remain.len(),
                self.dims.len()
            )));
        }
        fn keep<T: Copy>(v: &[T], remain: &[bool]) -> Vec<T> {
            v.iter()
                .zip(remain)
                .filter(|(_, &k)| k)
                .map(|(x, _)| *x)
                .collect()
        }
        Ok(Cart {
            dims: keep(&self.dims, remain),
            periods: keep(&self.periods, remain),
        })
    }

    /// The neighbours of `rank` in MPI's order: per dimension, -1 then +1.
    fn neighbors(&self, rank: usize) -> Vec<Option<usize>> {
        (0..self.dims.len())
            .flat_map(|d| {
                let (s, t) = self.shift(rank, d, 1).unwrap_or((None, None));
                [s, t]
            })
            .collect()
    }
}

/// A graph every process knows whole (`MPI_Graph_create`): node i's neighbours are
/// `edges[index[i-1]..index[i]]` (MPI's cumulative `index`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Graph {
    index: Vec<usize>,
    edges: Vec<usize>,
}

impl Graph {
    /// The graph of `index.len()` nodes with MPI's cumulative `index` and `edges` (nodes
    /// `0..index.len()`).
    pub fn new(index: &[usize], edges: &[usize]) -> Result<Self> {
        if let Some(i) = index.windows(2).position(|w| w[0] > w[1]) {
            return Err(invalid(format!(
                "graph index is decreasing at {}: {} > {}",
                i,
                index[i],
                index[i + 1]
            )));
        }
        let total = index.last().copied().unwrap_or(0);
        if total != edges.len() {
            return Err(invalid(format!(
                "graph index ends at {total} edges, but {} edges are given",
                edges.len()
            )));
        }
        if let Some(e) = edges.iter().find(|&&e| e >= index.len()) {
            return Err(invalid(format!(
                "graph edge to node {e}: the graph has nodes 0..{}",
                index.len()
            )));
        }
        Ok(Self {
            index: index.to_vec(),
            edges: edges.to_vec(),
        })
    }

    /// Nodes.
    pub fn nnodes(&self) -> usize {
        self.index.len()
    }

    /// MPI's cumulative index.
    pub fn index(&self) -> &[usize] {
        &self.index
    }

    /// Every node's neighbours, node after node.
    pub fn edges(&self) -> &[usize] {
        &self.edges
    }

    /// The neighbours of `node` (`MPI_Graph_neighbors`).
    pub fn neighbors(&self, node: usize) -> Result<&[usize]> {
        if node >= self.index.len() {
            return Err(Error::BadRank {
                rank: node,
                size: self.index.len(),
            });
        }
        let start = if node == 0 { 0 } else { self.index[node - 1] };
        Ok(&self.edges[start..self.index[node]])
    }
}

/// This process's edges of a distributed graph: where it receives from (sources) and sends
/// to (destinations), each with a weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistGraph {
    sources: Vec<usize>,
    source_weights: Vec<i32>,
    destinations: Vec<usize>,
    destination_weights: Vec<i32>,
    weighted: bool,
}

impl DistGraph {
    /// Sources (in-neighbours), in order.
    pub fn sources(&self) -> &[usize] {
        &self.sources
    }

    /// Their weights (zeros when unweighted).
    pub fn source_weights(&self) -> &[i32] {
        &self.source_weights
    }

    /// Destinations (out-neighbours), in order.
    pub fn destinations(&self) -> &[usize] {
        &self.destinations
    }

    /// Their weights (zeros when unweighted).
    pub fn destination_weights(&self) -> &[i32] {
        &self.destination_weights
    }

    /// Were weights given at creation?
    pub fn weighted(&self) -> bool {
        self.weighted
    }
}

/// A process's neighbours in MPI's order; `None` is a missing Cartesian neighbour (MPI's
/// `MPI_PROC_NULL`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Neighbors {
    /// Where the neighbourhood collectives receive from, block after block.
    pub sources: Vec<Option<usize>>,
    /// Where they send to.
    pub destinations: Vec<Option<usize>>,
    /// The neighbours are a Cartesian grid's (see [`Neighbors::send_order`]).
    cartesian: bool,
}

impl Neighbors {
    /// The order in which the blocks for the destinations are sent, so that a peer listed
    /// several times receives each block in the right place: messages between two processes
    /// match in the order they were sent and received. Graphs match repeated edges in list
    /// order. In a Cartesian grid a peer repeats only along a periodic dimension of extent 1
    /// or 2, where MPI (4.1) wants the block sent towards +1 to arrive as the receiver's
    /// block from -1 and conversely: the receives are posted -1 first, so the +1 block of each
    /// dimension is sent before the -1 block.
    pub fn send_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.destinations.len()).collect();
        if self.cartesian {
            for pair in order.chunks_exact_mut(2) {
                pair.swap(0, 1);
            }
        }
        order
    }
}

impl Topology {
    /// The neighbours of `rank`. A distributed graph knows the calling process's edges only:
    /// `rank` must be its rank.
    pub fn neighbors(&self, rank: usize) -> Result<Neighbors> {
        let both = |n: Vec<Option<usize>>, cartesian| Neighbors {
            sources: n.clone(),
            destinations: n,
            cartesian,
        };
        Ok(match self {
            Topology::Cart(c) => both(c.neighbors(rank), true),
            Topology::Graph(g) => {
                both(g.neighbors(rank)?.iter().map(|&r| Some(r)).collect(), false)
            }
            Topology::DistGraph(d) => Neighbors {
                sources: d.sources.iter().map(|&r| Some(r)).collect(),
                destinations: d.destinations.iter().map(|&r| Some(r)).collect(),
                cartesian: false,
            },
        })
    }
}

/// Fill the zero entries of `dims` with a balanced grid of `nnodes` processes
/// (`MPI_Dims_create`): the free extents multiply, with the nonzero (fixed) ones, to
/// `nnodes`, are non-increasing, and are the ones MPICH chooses (its search for the least
/// spread between the largest and smallest extent, after prime factors larger than the square
/// root of what remains are given dimensions of their own; the same tie-breaking, so that
/// programs see the grids they see with MPICH). An error when the fixed extents do not
/// divide `nnodes`, or all are fixed and their product is not `nnodes`.
pub fn dims_create(nnodes: usize, dims: &mut [usize]) -> Result<()> {
    let fixed: usize = dims
        .iter()
        .filter(|&&d| d > 0)
        .try_fold(1usize, |p, &d| p.checked_mul(d))
        .ok_or_else(|| invalid("dims_create: the fixed extents overflow".into()))?;
    let free = dims.iter().filter(|&&d| d == 0).count();
    if nnodes == 0 || !nnodes.is_multiple_of(fixed) || (free == 0 && fixed != nnodes) {
        return Err(invalid(format!(
            "dims_create: {nnodes} processes cannot be arranged with the fixed extents {dims:?}"
        )));
    }
    let mut chosen = balanced(nnodes / fixed, free).into_iter();
    for d in dims.iter_mut().filter(|d| **d == 0) {
        *d = chosen.next().expect("one extent per free dimension");
    }
    Ok(())
}

/// Prime factors of `n` with their multiplicities, ascending.
fn factor(mut n: usize) -> Vec<(usize, u32)> {
    let mut f = Vec::new();
    let mut p = 2;
    while p * p <= n {
        if n.is_multiple_of(p) {
            let mut c = 0;
            while n.is_multiple_of(p) {
                n /= p;
                c += 1;
            }
            f.push((p, c));
        }
        p += 1;
    }
    if n > 1 {
        f.push((n, 1));
    }
    f
}

/// `k` non-increasing extents multiplying to `m`, as MPICH's `MPI_Dims_create` picks them.
fn balanced(mut m: usize, k: usize) -> Vec<usize> {
    if k <= 1 {
        return vec![m; k];
    }
    let mut f = factor(m);
    let mut primes: u32 = f.iter().map(|&(_, c)| c).sum();
    let mut chosen = Vec::with_capacity(k);
    // A prime above the square root of what is left gets a dimension of its own (the
    // smallest prime never does, and one dimension is always left).
    while f.len() > 1 && chosen.len() < k - 1 {
        let (p, c) = *f.last().expect("non-empty");
        if c != 1 || p * p <= m {
            break;
        }
        chosen.push(p);
        f.pop();
        m /= p;
        primes -= 1;
    }
    let left = k - chosen.len();
    // Few enough primes: one per dimension, largest first, then ones.
    if primes as usize <= left {
        for &(p, c) in f.iter().rev() {
            chosen.extend(std::iter::repeat_n(p, c as usize));
        }
        chosen.resize(k, 1);
        return chosen;
    }
    if left == 1 {
        chosen.push(m);
        return chosen;
    }
    // A power of one prime: dealt round robin.
    if let [(p, c)] = f[..] {
        let mut rest = vec![1; left];
        for i in 0..c as usize {
            rest[i % left] *= p;
        }
        chosen.extend(rest);
        return chosen;
    }
    // Every multiplicity a multiple of the dimensions left: all extents equal.
    if f.iter().all(|&(_, c)| (c as usize).is_multiple_of(left)) {
        let v = f
            .iter()
            .map(|&(p, c)| p.pow(c / left as u32))
            .product::<usize>();
        chosen.extend(std::iter::repeat_n(v, left));
        return chosen;
    }
    // The general case: a first guess (the primes dealt, largest first, to the first
    // dimension that stays non-increasing), improved by a search over the divisors.
    let mut divs = vec![1usize];
    for &(p, c) in &f {
        divs = divs
            .iter()
            .flat_map(|&d| (0..=c).map(move |e| d * p.pow(e)))
            .collect();
    }
    divs.retain(|&d| d != 1 && d != m);
    divs.sort_unstable();
    let mut guess = vec![1; left];
    let mut next = 0;
    for &(p, c) in f.iter().rev() {
        for _ in 0..c {
            if next < left {
                guess[next] = p;
                next += 1;
            } else {
                let at = (1..left)
                    .rev()
                    .find(|&i| guess[i] * p <= guess[i - 1])
                    .unwrap_or(0);
                guess[at] *= p;
            }
        }
    }
    // MPICH measures the first guess's balance from the first free dimension (a large prime
    // if one was set apart) to the last.
    let first = chosen.first().copied().unwrap_or(guess[0]);
    let mut search = Search {
        nd: left,
        tried: vec![0; left],
        balance: first as i64 - guess[left - 1] as i64,
        best: guess,
    };
    search.tried[left - 1] = divs[0];
    search.run(m, left - 1, &divs);
    chosen.extend(search.best);
    chosen
}

/// MPICH's search for the most balanced extents (after Träff and Lübbe, EuroMPI'15): the
/// extents are chosen from the last (smallest) up, from divisors in increasing order,
/// pruned when they cannot beat the best balance found (largest minus smallest extent);
/// a candidate at least as balanced replaces the best.
struct Search {
    /// Extents to choose.
    nd: usize,
    /// The extents of the candidate being built (`tried[idx+1..]` are set).
    tried: Vec<usize>,
    best: Vec<usize>,
    balance: i64,
}

impl Search {
    /// Choose extents `0..=idx` multiplying to `n` from `divs` (ascending divisors of `n`).
    fn run(&mut self, n: usize, idx: usize, divs: &[usize]) {
        let min = self.tried[self.nd - 1] as i64;
        // The pruning bound is the balance when this level started, as in MPICH.
        let bound = self.balance;
        if idx > 1 {
            for (k, &f) in divs.iter().enumerate() {
                if idx < self.nd - 1 && f as i64 - min > bound {
                    break;
                }
                let q = n / f;
                let mut next = Vec::new();
                let smallest = if q.is_multiple_of(f) {
                    next.push(f);
                    f
                } else if let Some(&d) = divs.get(k + 1) {
                    d
                } else {
                    break;
                };
                if idx < self.nd - 1 && smallest as i64 - min > bound {
                    break;
                }
                // The idx extents still to choose are each at least `smallest`.
                let mut product = smallest.saturating_mul(smallest);
                let mut more = idx - 1;
                while more > 0 && product <= q {
                    product = product.saturating_mul(smallest);
                    more -= 1;
                }
                if more > 0 {
                    break;
                }
                self.tried[idx] = f;
                for &d in &divs[k + 1..] {
                    if d.saturating_mul(d) > q {
                        break;
                    }
                    if q.is_multiple_of(d) {
                        next.push(d);
                    }
                }
                if !next.is_empty() {
                    self.run(q, idx - 1, &next);
                }
            }
        } else if idx == 1 {
            // The last two: the divisor pair closest to each other.
            let mut k = 1;
            while k < divs.len() && n / divs[k] >= divs[k] {
                k += 1;
            }
            let f = divs[k - 1];
            let q = n / f;
            if q < f {
                return;
            }
            let test = if self.nd == 2 {
                q as i64 - f as i64
            } else {
                q as i64 - min
            };
            if test <= bound {
                self.best[2..].copy_from_slice(&self.tried[2..]);
                self.best[0] = q;
                self.best[1] = f;
                self.balance = q as i64 - min;
            }
        } else if n as i64 - min <= bound {
            self.best[1..].copy_from_slice(&self.tried[1..]);
            self.best[0] = n;
            self.balance = n as i64 - min;
        }
    }
}

impl CollCache {
    /// A fresh cache for a dup of this communicator: the topology carried over.
    pub(crate) fn inherited(&self) -> CollCache {
        let c = CollCache::default();
        if let Some(t) = self.topo.get() {
            let _ = c.topo.set(t.clone());
        }
        c
    }
}

impl Communicator {
    /// The communicator's topology, if it has one.
    pub fn topology(&self) -> Option<&Topology> {
        self.coll_cache().topo.get().map(|t| &**t)
    }

    /// Refuse an intercommunicator: topologies are defined on intra-communicators only.
    fn intra_only(&self, what: &str) -> Result<()> {
        if self.is_inter() {
            return Err(Error::CommKind(format!(
                "{what}: process topologies are defined on intra-communicators only"
            )));
        }
        Ok(())
    }

    /// `self` (a communicator just made) with topology `t`.
    fn with_topology(self, t: Topology) -> Communicator {
        let _ = self.coll_cache().topo.set(Rc::new(t));
        self
    }

    /// A communicator of the first `dims` product ranks with a Cartesian topology
    /// (`MPI_Cart_create`, ranks kept): `None` at the other ranks. Collective: every member
    /// passes the same grid.
    pub fn cart_create(&self, dims: &[usize], periods: &[bool]) -> Result<Option<Communicator>> {
        self.intra_only("cart_create")?;
        let cart = Cart::new(dims, periods)?;
        if cart.size() > self.size() {
            return Err(invalid(format!(
                "cart_create: a grid of {} processes does not fit in {} ranks",
                cart.size(),
                self.size()
            )));
        }
        let member = self.rank() < cart.size();
        Ok(self
            .split(member.then_some(0), 0)?
            .map(|c| c.with_topology(Topology::Cart(cart))))
    }

    /// The sub-grids of this Cartesian communicator that keep the dimensions `remain` says
    /// (`MPI_Cart_sub`): the processes that differ only in those coordinates form one.
    /// Collective.
    pub fn cart_sub(&self, remain: &[bool]) -> Result<Communicator> {
        let Some(Topology::Cart(cart)) = self.topology() else {
            return Err(invalid(
                "cart_sub: the communicator has no Cartesian topology".into(),
            ));
        };
        let sub = cart.sub(remain)?;
        let coords = cart.coords(self.rank())?;
        // The color: this process's coordinates in the dropped dimensions, as a rank.
        let mut color = 0usize;
        for ((&c, &d), &k) in coords.iter().zip(&cart.dims).zip(remain) {
            if !k {
                color = color * d + c;
            }
        }
        let color =
            u32::try_from(color).map_err(|_| invalid("cart_sub: too many sub-grids".into()))?;
        let c = self
            .split(Some(color), self.rank() as i32)?
            .expect("every process has a color");
        Ok(c.with_topology(Topology::Cart(sub)))
    }

    /// A communicator of the first `index.len()` ranks with a graph topology
    /// (`MPI_Graph_create`, ranks kept): `None` at the other ranks. Collective: every member
    /// passes the same graph.
    pub fn graph_create(&self, index: &[usize], edges: &[usize]) -> Result<Option<Communicator>> {
        self.intra_only("graph_create")?;
        let g = Graph::new(index, edges)?;
        if g.nnodes() > self.size() {
            return Err(invalid(format!(
                "graph_create: a graph of {} nodes does not fit in {} ranks",
                g.nnodes(),
                self.size()
            )));
        }
        let member = self.rank() < g.nnodes();
        Ok(self
            .split(member.then_some(0), 0)?
            .map(|c| c.with_topology(Topology::Graph(g))))
    }

    /// A communicator of the same processes with a distributed graph of which this process
    /// gives its own edges (`MPI_Dist_graph_create_adjacent`): it receives from `sources` and
    /// sends to `destinations`, with weights if given (both or neither). Collective.
    pub fn dist_graph_create_adjacent(
        &self,
        sources: &[usize],
        source_weights: Option<&[i32]>,
        destinations: &[usize],
        destination_weights: Option<&[i32]>,
    ) -> Result<Communicator> {
        self.intra_only("dist_graph_create_adjacent")?;
        let n = self.size();
        if let Some(&r) = sources.iter().chain(destinations).find(|&&r| r >= n) {
            return Err(Error::BadRank { rank: r, size: n });
        }
        let weights = |w: Option<&[i32]>, len: usize, what: &str| -> Result<Vec<i32>> {
            match w {
                None => Ok(vec![0; len]),
                Some(w) if w.len() == len => Ok(w.to_vec()),
                Some(w) => Err(invalid(format!(
                    "dist_graph_create_adjacent: {} {what} weights for {len} {what}s",
                    w.len()
                ))),
            }
        };
        let d = DistGraph {
            source_weights: weights(source_weights, sources.len(), "source")?,
            destination_weights: weights(destination_weights, destinations.len(), "destination")?,
            sources: sources.to_vec(),
            destinations: destinations.to_vec(),
            weighted: source_weights.is_some() || destination_weights.is_some(),
        };
        Ok(self.dup()?.with_topology(Topology::DistGraph(d)))
    }

    /// A communicator of the same processes with the distributed graph whose edges
    /// (source, destination, weight) the processes give, any process any edge
    /// (`MPI_Dist_graph_create`): each learns its own sources and destinations, ordered by
    /// the rank that gave the edge, then as that rank listed them. `weighted`: whether
    /// weights were given (else they are ignored). Collective.
    pub fn dist_graph_create(
        &self,
        edges: &[(usize, usize, i32)],
        weighted: bool,
    ) -> Result<Communicator> {
        self.intra_only("dist_graph_create")?;
        let n = self.size();
        if let Some(&(s, d, _)) = edges.iter().find(|&&(s, d, _)| s >= n || d >= n) {
            return Err(Error::BadRank {
                rank: s.max(d),
                size: n,
            });
        }
        // To each rank, its out-edges as (0, destination, weight) and its in-edges as
        // (1, source, weight), in the order given.
        let mut to: Vec<Vec<[i64; 3]>> = vec![Vec::new(); n];
        for &(s, d, w) in edges {
            to[s].push([0, d as i64, i64::from(w)]);
            to[d].push([1, s as i64, i64::from(w)]);
        }
        let counts: Vec<u64> = to.iter().map(|v| v.len() as u64).collect();
        let mut incoming = vec![0u64; n];
        self.alltoall(&counts, &mut incoming)?;
        let send: Vec<[i64; 3]> = to.concat();
        let displs = |c: &[usize]| -> Vec<usize> {
            c.iter()
                .scan(0, |acc, &x| {
                    let at = *acc;
                    *acc += x;
                    Some(at)
                })
                .collect()
        };
        let (scounts, rcounts): (Vec<usize>, Vec<usize>) = counts
            .iter()
            .zip(&incoming)
            .map(|(&s, &r)| (s as usize * 3, r as usize * 3))
            .unzip();
        let mut recv = vec![[0i64; 3]; rcounts.iter().sum::<usize>() / 3];
        self.alltoallv(
            bytemuck::cast_slice::<[i64; 3], i64>(&send),
            &scounts,
            &displs(&scounts),
            bytemuck::cast_slice_mut::<[i64; 3], i64>(&mut recv),
            &rcounts,
            &displs(&rcounts),
        )?;
        let mut d = DistGraph {
            sources: Vec::new(),
            source_weights: Vec::new(),
            destinations: Vec::new(),
            destination_weights: Vec::new(),
            weighted,
        };
        for [kind, peer, w] in recv {
            let w = if weighted { w as i32 } else { 0 };
            if kind == 0 {
                d.destinations.push(peer as usize);
                d.destination_weights.push(w);
            } else {
                d.sources.push(peer as usize);
                d.source_weights.push(w);
            }
        }
        Ok(self.dup()?.with_topology(Topology::DistGraph(d)))
    }

    /// This process's neighbours (see [`Topology::neighbors`]); an error without a topology.
    pub fn neighbors(&self) -> Result<Neighbors> {
        self.topology()
            .ok_or_else(|| invalid("the communicator has no topology".into()))?
            .neighbors(self.rank())
    }

    /// Send `send` to every destination and receive one block of `send.len()` elements from
    /// each source into `recv` (as many blocks as sources, in order; a missing Cartesian
    /// neighbour's block is left untouched). Collective over the neighbourhood.
    pub fn neighbor_allgather<T: bytemuck::Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let nb = self.neighbors()?;
        let sources = &nb.sources;
        let block = std::mem::size_of_val(send);
        check_blocks("neighbor_allgather", recv.len(), sources.len() * send.len())?;
        let sends: Vec<_> = (nb.send_order().into_iter())
            .map(|i| (nb.destinations[i], 0..block))
            .collect();
        let recvs: Vec<_> = (sources.iter().enumerate())
            .map(|(i, &p)| (p, i * block..(i + 1) * block))
            .collect();
        self.neighbor_exchange(
            bytemuck::cast_slice(send),
            &sends,
            bytemuck::cast_slice_mut(recv),
            &recvs,
        )
    }

    /// Send block i of `send` (one block per destination, of `send.len() / destinations`
    /// elements) to destination i, and receive block j of `recv` from source j. Collective
    /// over the neighbourhood.
    pub fn neighbor_alltoall<T: bytemuck::Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let nb = self.neighbors()?;
        let (sources, destinations) = (&nb.sources, &nb.destinations);
        let block = match destinations.len() {
            0 => recv.len() / sources.len().max(1),
            n => send.len() / n,
        };
        check_blocks("neighbor_alltoall", send.len(), destinations.len() * block)?;
        check_blocks("neighbor_alltoall", recv.len(), sources.len() * block)?;
        let b = block * std::mem::size_of::<T>();
        let block_of = |peers: &[Option<usize>], i: usize| (peers[i], i * b..(i + 1) * b);
        let sends: Vec<_> = (nb.send_order().into_iter())
            .map(|i| block_of(destinations, i))
            .collect();
        let recvs: Vec<_> = (0..sources.len()).map(|j| block_of(sources, j)).collect();
        self.neighbor_exchange(
            bytemuck::cast_slice(send),
            &sends,
            bytemuck::cast_slice_mut(recv),
            &recvs,
        )
    }

    /// Send `send[range]` to each (peer, range) of `sends` and receive each (peer, range) of
    /// `recvs` into `recv[range]`; `None` peers take no part. Blocking.
    #[allow(unsafe_code)]
    fn neighbor_exchange(
        &self,
        send: &[u8],
        sends: &[(Option<usize>, Range<usize>)],
        recv: &mut [u8],
        recvs: &[(Option<usize>, Range<usize>)],
    ) -> Result<()> {
        // SAFETY: both buffers are borrowed until this call returns, after the collective
        // completed (waited for below).
        let (sv, rv) = unsafe { (UserBuf::from_slice(send), UserBuf::from_mut_slice(recv)) };
        let plan = self.neighbor_plan(sv, sends, rv, recvs)?;
        let id = self.launch(plan);
        self.shared().wait_collective(id).map(|_| ())
    }

    /// The plan of a neighbourhood exchange: `send[range]` to each (peer, range) of `sends`,
    /// each (peer, range) of `recvs` received into `recv[range]` (disjoint), in order;
    /// `None` peers skipped.
    pub(crate) fn neighbor_plan(
        &self,
        send: UserBuf,
        sends: &[(Option<usize>, Range<usize>)],
        recv: UserBuf,
        recvs: &[(Option<usize>, Range<usize>)],
    ) -> Result<Plan> {
        let n = self.size();
        let mut comms = Vec::with_capacity(sends.len() + recvs.len());
        let mut received: Vec<Range<usize>> = Vec::new();
        for (peer, range) in recvs {
            let Some(peer) = *peer else { continue };
            check_region("receive", peer, n, range, recv.len())?;
            received.push(range.clone());
            comms.push(Comm::Recv {
                peer,
                region: Region {
                    buf: Buf::Work,
                    range: range.clone(),
                },
            });
        }
        received.retain(|r| !r.is_empty());
        received.sort_by_key(|r| r.start);
        if received.windows(2).any(|w| w[0].end > w[1].start) {
            return Err(invalid(
                "neighbourhood collective: the receive blocks overlap".into(),
            ));
        }
        for (peer, range) in sends {
            let Some(peer) = *peer else { continue };
            check_region("send", peer, n, range, send.len())?;
            comms.push(Comm::Send {
                peer,
                region: Region {
                    buf: Buf::Send,
                    range: range.clone(),
                },
            });
        }
        let sched = Schedule {
            tmp_len: 0,
            rounds: vec![Round {
                comms,
                locals: Vec::new(),
            }],
        };
        let mut plan = Plan::new(Rc::new(sched), recv);
        plan.send = send;
        Ok(plan)
    }
}

fn check_blocks(what: &str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(invalid(format!(
            "{what}: a buffer holds {got} elements, the neighbourhood needs {want}"
        )))
    }
}

fn check_region(what: &str, peer: usize, n: usize, r: &Range<usize>, len: usize) -> Result<()> {
    if peer >= n {
        return Err(Error::BadRank {
            rank: peer,
            size: n,
        });
    }
    if r.start > r.end || r.end > len {
        return Err(invalid(format!(
            "neighbourhood collective: {what} block {r:?} is outside the {len}-byte buffer"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(n: usize, mut d: Vec<usize>) -> Result<Vec<usize>> {
        dims_create(n, &mut d).map(|()| d)
    }

    #[test]
    fn dims_create_balances_as_mpich_does() {
        assert_eq!(dims(6, vec![0, 0]).unwrap(), [3, 2]);
        assert_eq!(dims(7, vec![0, 0]).unwrap(), [7, 1]);
        assert_eq!(dims(12, vec![0, 0, 0]).unwrap(), [3, 2, 2]);
        assert_eq!(dims(16, vec![0, 0]).unwrap(), [4, 4]);
        assert_eq!(dims(60, vec![0, 0]).unwrap(), [10, 6]);
        assert_eq!(dims(24, vec![0, 0, 0]).unwrap(), [4, 3, 2]);
        assert_eq!(dims(1, vec![0, 0, 0]).unwrap(), [1, 1, 1]);
        assert_eq!(dims(1, vec![]).unwrap(), Vec::<usize>::new());
        // Fixed extents are kept; the rest share what they leave.
        assert_eq!(dims(12, vec![0, 3, 0]).unwrap(), [2, 3, 2]);
        assert_eq!(dims(8, vec![2, 0]).unwrap(), [2, 4]);
        assert_eq!(dims(6, vec![2, 3]).unwrap(), [2, 3]);
        assert!(dims(10, vec![3, 0]).is_err());
        assert!(dims(6, vec![2, 2]).is_err());
        assert!(dims(0, vec![0]).is_err());
        // Where several grids are as balanced, MPICH's choice (cases of MPICH's dims5 test).
        assert_eq!(dims(72, vec![0, 0]).unwrap(), [9, 8]);
        assert_eq!(dims(18576, vec![0; 4]).unwrap(), [43, 9, 8, 6]);
        assert_eq!(dims(712656, vec![0; 5]).unwrap(), [101, 14, 9, 8, 7]);
        assert_eq!(dims(117936, vec![0; 5]).unwrap(), [14, 13, 9, 9, 8]);
        assert_eq!(dims(228072, vec![0; 3]).unwrap(), [86, 52, 51]);
        // A large prime power stays quick and balanced.
        assert_eq!(dims(1 << 20, vec![0, 0, 0, 0]).unwrap(), [32, 32, 32, 32]);
    }

    #[test]
    fn cart_coords_ranks_and_shifts() {
        let c = Cart::new(&[3, 2], &[true, false]).unwrap();
        assert_eq!(c.size(), 6);
        for r in 0..6 {
            let xy: Vec<i64> = c.coords(r).unwrap().iter().map(|&x| x as i64).collect();
            assert_eq!(c.rank(&xy).unwrap(), r);
        }
        assert_eq!(c.coords(3).unwrap(), [1, 1]);
        // Periodic wrap in dimension 0, none in dimension 1.
        assert_eq!(c.rank(&[-1, 0]).unwrap(), 4);
        assert_eq!(c.rank(&[3, 1]).unwrap(), 1);
        assert!(c.rank(&[0, 2]).is_err());
        assert!(c.coords(6).is_err());
        assert_eq!(c.shift(0, 0, 1).unwrap(), (Some(4), Some(2)));
        assert_eq!(c.shift(0, 1, 1).unwrap(), (None, Some(1)));
        assert_eq!(c.shift(1, 1, 1).unwrap(), (Some(0), None));
        assert_eq!(c.shift(1, 1, -1).unwrap(), (None, Some(0)));
        assert!(c.shift(0, 2, 1).is_err());
        assert_eq!(c.neighbors(0), [Some(4), Some(2), None, Some(1)]);
        let s = c.sub(&[false, true]).unwrap();
        assert_eq!((s.dims(), s.periods()), (&[2][..], &[false][..]));
    }

    #[test]
    fn cartesian_blocks_go_plus_one_first() {
        // A periodic ring of 2: both neighbours are the other process.
        let t = Topology::Cart(Cart::new(&[2, 3], &[true, false]).unwrap());
        let nb = t.neighbors(0).unwrap();
        assert_eq!(nb.sources, [Some(3), Some(3), None, Some(1)]);
        assert_eq!(nb.send_order(), [1, 0, 3, 2]);
        let g = Topology::Graph(Graph::new(&[2, 4], &[1, 1, 0, 0]).unwrap());
        assert_eq!(g.neighbors(0).unwrap().send_order(), [0, 1]);
    }

    #[test]
    fn graph_neighbours_follow_the_index() {
        let g = Graph::new(&[2, 3, 4], &[1, 2, 0, 0]).unwrap();
        assert_eq!(g.neighbors(0).unwrap(), [1, 2]);
        assert_eq!(g.neighbors(1).unwrap(), [0]);
        assert_eq!(g.neighbors(2).unwrap(), [0]);
        assert!(g.neighbors(3).is_err());
        assert!(Graph::new(&[2, 1], &[0, 1]).is_err());
        assert!(Graph::new(&[1], &[1]).is_err());
        assert!(Graph::new(&[1, 3], &[1]).is_err());
        let t = Topology::Graph(g);
        assert_eq!(t.neighbors(0).unwrap().destinations, [Some(1), Some(2)]);
    }
}
