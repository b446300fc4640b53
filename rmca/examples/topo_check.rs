//! Process topologies and neighbourhood collectives through the Rust API (`rmca::topo`):
//! Cartesian grids (periodic and not, a grid smaller than the world, sub-grids, dup keeping
//! the topology), a graph ring, distributed graphs from both constructors, and
//! `neighbor_allgather`/`neighbor_alltoall` on each, against what each neighbour must have
//! sent. Prints `OK`/`FAIL` per group and exits non-zero on any failure.
//!
//! `rmca-run -n 4 target/release/examples/topo_check`

use rmca::coll::Op;
use rmca::topo::{dims_create, Topology};
use rmca::Communicator;

mod common;
use common::Checker;

/// The value rank `r` sends to its destination number `i` (element `e` of the block).
fn val(r: usize, i: usize, e: usize) -> u32 {
    (r * 1000 + i * 10 + e + 1) as u32
}

/// What `neighbor_allgather` and `neighbor_alltoall` must deliver on `comm` (for a graph,
/// from the neighbour lists of every rank, known to every rank through an allgather), and
/// whether they do. Blocks of a missing neighbour stay at their initial `u32::MAX`.
fn exchange(c: &mut Checker, comm: &Communicator, what: &str) -> rmca::Result<()> {
    let cartesian = matches!(comm.topology(), Some(Topology::Cart(_)));
    const B: usize = 3;
    let (n, me) = (comm.size(), comm.rank());
    let nb = comm.neighbors()?;
    let (sources, dests) = (nb.sources, nb.destinations);
    // Every rank's destinations, padded to the largest degree (u64::MAX: none).
    let mut deg = [0u64];
    comm.allreduce(&[dests.len() as u64], &mut deg, Op::Max)?;
    let deg = deg[0] as usize;
    let mine: Vec<u64> = (0..deg)
        .map(|i| {
            dests
                .get(i)
                .copied()
                .flatten()
                .map_or(u64::MAX, |d| d as u64)
        })
        .collect();
    let mut all = vec![0u64; n * deg];
    comm.allgather(&mine, &mut all)?;
    // My block j comes from source s: the block s sent to its occ-th destination equal to me.
    let expect = |same: bool| -> Vec<u32> {
        let mut out = Vec::new();
        for (j, s) in sources.iter().enumerate() {
            let Some(s) = *s else {
                out.extend([u32::MAX; B]);
                continue;
            };
            // Cartesian: what the neighbour at -1 sent towards +1, and conversely, even when
            // both neighbours are one process (MPI 4.1); graphs: repeated edges in order.
            if cartesian {
                out.extend((0..B).map(|e| val(s, if same { 0 } else { j ^ 1 }, e)));
                continue;
            }
            let occ = sources[..j].iter().filter(|&&x| x == Some(s)).count();
            let i = (0..deg)
                .filter(|&i| all[s * deg + i] == me as u64)
                .nth(occ)
                .expect("the source lists me as a destination");
            out.extend((0..B).map(|e| val(s, if same { 0 } else { i }, e)));
        }
        out
    };
    let one: Vec<u32> = (0..B).map(|e| val(me, 0, e)).collect();
    let mut got = vec![u32::MAX; sources.len() * B];
    comm.neighbor_allgather(&one, &mut got)?;
    c.check(&format!("{what}: neighbor_allgather"), &got, &expect(true));
    let send: Vec<u32> = (0..dests.len() * B)
        .map(|k| val(me, k / B, k % B))
        .collect();
    let mut got = vec![u32::MAX; sources.len() * B];
    comm.neighbor_alltoall(&send, &mut got)?;
    c.check(&format!("{what}: neighbor_alltoall"), &got, &expect(false));
    Ok(())
}

fn main() {
    let universe = rmca::init().unwrap_or_else(|e| {
        eprintln!("topo_check: rmca init failed: {e}");
        std::process::exit(1)
    });
    let world = universe.world();
    let (n, me) = (world.size(), world.rank());
    if me == 0 {
        println!("topo_check: {n} ranks");
    }
    let mut c = Checker::new(world.clone());

    // A 2-D grid, periodic in its first dimension.
    let mut dims = [0, 0];
    dims_create(n, &mut dims).expect("dims_create");
    let grid = world
        .cart_create(&dims, &[true, false])
        .expect("cart_create")
        .expect("every rank is in the grid");
    let Some(Topology::Cart(cart)) = grid.topology() else {
        panic!("the grid has no Cartesian topology")
    };
    c.ok(
        "grid coordinates",
        cart.coords(me).unwrap() == [me / dims[1], me % dims[1]],
        format!("{:?}", cart.coords(me)),
    );
    let dup = grid.dup().expect("dup");
    c.ok(
        "dup keeps the topology",
        dup.topology() == grid.topology(),
        "",
    );
    let row = grid.cart_sub(&[false, true]).expect("cart_sub");
    c.ok("sub-grid size", row.size() == dims[1], row.size());
    exchange(&mut c, &grid, "grid").expect("grid exchange");
    exchange(&mut c, &dup, "dup of the grid").expect("dup exchange");
    exchange(&mut c, &row, "sub-grid").expect("sub-grid exchange");
    // A grid of all but the last rank.
    let part = world
        .cart_create(&[n.max(2) - 1], &[false])
        .expect("cart_create");
    c.ok(
        "a smaller grid leaves the last rank out",
        part.is_some() == (me + 1 < n || n == 1),
        me,
    );
    c.done("Cartesian topologies");

    // A graph ring.
    let index: Vec<usize> = (1..=n).map(|i| 2 * i).collect();
    let edges: Vec<usize> = (0..n)
        .flat_map(|i| [(i + n - 1) % n, (i + 1) % n])
        .collect();
    let ring = world
        .graph_create(&index, &edges)
        .expect("graph_create")
        .expect("every rank is a node");
    exchange(&mut c, &ring, "graph ring").expect("graph exchange");
    c.done("graph topology");

    // Distributed graphs: rank r gives the edges r+1 -> r and r -> r+2.
    let edges = [((me + 1) % n, me, 7), (me, (me + 2) % n, 9)];
    let dg = world
        .dist_graph_create(&edges, true)
        .expect("dist_graph_create");
    let Some(Topology::DistGraph(d)) = dg.topology() else {
        panic!("no distributed graph")
    };
    c.ok(
        "dist graph degrees",
        d.sources().len() == 2 && d.destinations().len() == 2 && d.weighted(),
        format!("{:?}", d),
    );
    exchange(&mut c, &dg, "distributed graph").expect("dist graph exchange");
    let (left, right) = ((me + n - 1) % n, (me + 1) % n);
    let adj = world
        .dist_graph_create_adjacent(&[left, me], Some(&[1, 2]), &[right, me], Some(&[3, 4]))
        .expect("dist_graph_create_adjacent");
    // Block 0 comes from the left neighbour (its block 0), block 1 from this rank itself.
    let mut got = [0u32; 2];
    adj.neighbor_alltoall(&[me as u32, 100 + me as u32], &mut got)
        .expect("adjacent exchange");
    c.check(
        "adjacent graph exchange",
        &got,
        &[left as u32, 100 + me as u32],
    );
    c.done("distributed graphs");

    // Without a topology, and bad arguments.
    let mut one = [0u32; 1];
    c.expect_err(
        "world has no topology",
        world.neighbor_allgather(&[1u32], &mut one),
    );
    c.expect_err("grid too large", world.cart_create(&[n + 1], &[false]));
    c.expect_err("graph edge out of range", world.graph_create(&[1], &[1]));
    c.done("argument errors");

    let mut total = [0u32; 2];
    world
        .allreduce(&[c.failures, c.cases], &mut total, Op::Sum)
        .expect("allreduce");
    if me == 0 {
        println!(
            "topo_check: {n} ranks, {} cases, {} failures",
            total[1], total[0]
        );
    }
    drop(universe);
    std::process::exit(if total[0] == 0 { 0 } else { 1 });
}
