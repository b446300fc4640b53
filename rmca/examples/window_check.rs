//! Checks the typed one-sided API (`rmca::Window<T>`) across ranks, under whichever osc
//! component the MCA parameters select (osc-sm by default on one node; `--mca osc rdma`:
//! puts and gets by the BTLs' RDMA, gets written straight into the epoch's lent buffers;
//! under pml dr, osc-am's messages): fence epochs with puts to the right neighbour and gets
//! from the left one, accumulates from every rank, lock epochs with fetch-and-op and
//! compare-and-swap, lock_all with flush. Prints `OK`/`FAIL` per group and exits non-zero on
//! any failure:
//!
//! `rmca-run -n 3 --mca osc rdma target/release/examples/window_check`

use rmca::coll::Op;
use rmca::Window;

mod common;
use common::Checker;

/// Elements of each rank's window: past one page, so gets and puts are not all tiny.
const LEN: usize = 3000;

fn val(rank: usize, i: usize) -> u64 {
    (rank as u64) << 32 | i as u64
}

fn main() -> rmca::Result<()> {
    let universe = rmca::init()?;
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let right = (rank + 1) % size;
    let left = (rank + size - 1) % size;
    let mut c = Checker::new(world.clone());
    let win = Window::<u64>::allocate(&world, LEN)?;
    let component = win.component();

    // Fence: every rank fills its right neighbour's window, then reads its left one's.
    let mine: Vec<u64> = (0..LEN).map(|i| val(rank, i)).collect();
    win.fence(|e| e.put(&mine, right, 0))?;
    let mut got = vec![0u64; LEN];
    win.fence(|e| e.get(&mut got, left, 0))?;
    // The left neighbour's window holds what its own left neighbour put.
    let left2 = (rank + 2 * size - 2) % size;
    let want: Vec<u64> = (0..LEN).map(|i| val(left2, i)).collect();
    c.check("fence get of the left window", &got, &want);
    win.with_local(|m| {
        let want: Vec<u64> = (0..LEN).map(|i| val(left, i)).collect();
        c.check("fence put from the left", m, &want)
    });

    // Gets of parts at odd offsets, several in one epoch, each into its own lent buffer.
    let mut parts = [[0u64; 7]; 3];
    win.fence(|e| {
        for (k, p) in parts.iter_mut().enumerate() {
            e.get(p, left, 100 * k + 1)?;
        }
        Ok(())
    })?;
    for (k, p) in parts.iter().enumerate() {
        let want: Vec<u64> = (0..7).map(|i| val(left2, 100 * k + 1 + i)).collect();
        c.check("fence gets of parts", p, &want);
    }

    // Accumulates: every rank adds rank+1 to element 0..8 of rank 0.
    win.fence(|_| Ok(()))?;
    win.with_local(|m| m[..8].fill(0));
    win.fence(|e| e.accumulate(&[rank as u64 + 1; 8], 0, 0, Op::Sum))?;
    if rank == 0 {
        let total = (size * (size + 1) / 2) as u64;
        win.with_local(|m| c.check("accumulate sum at rank 0", &m[..8], &[total; 8]));
    }
    world.barrier()?;

    // Lock epochs: fetch-and-op on rank 0's element 10, one lock at a time; every rank sees a
    // distinct previous value.
    if rank == 0 {
        win.lock(0, true, |e| e.put(&[0], 0, 10))?;
    }
    world.barrier()?;
    let mut old = 0u64;
    win.lock(0, true, |e| e.fetch_and_op(1, &mut old, 0, 10, Op::Sum))?;
    let mut sorted = vec![0u64; size];
    world.allgather(&[old], &mut sorted)?;
    sorted.sort();
    c.check(
        "fetch_and_op previous values",
        &sorted,
        &(0..size as u64).collect::<Vec<_>>(),
    );

    // Compare-and-swap: only one rank swaps 0 -> rank+1 in element 11 of rank 0.
    if rank == 0 {
        win.lock(0, true, |e| e.put(&[0], 0, 11))?;
    }
    world.barrier()?;
    let mut was = u64::MAX;
    win.lock(0, false, |e| {
        e.compare_and_swap(rank as u64 + 1, 0, &mut was, 0, 11)
    })?;
    let mut swapped = [0u64];
    world.allreduce(&[u64::from(was == 0)], &mut swapped, Op::Sum)?;
    c.check("compare_and_swap winners", &swapped, &[1]);

    // lock_all with a flush: a get after the flush sees the put before it.
    world.barrier()?;
    let mut back = [0u64; 4];
    win.lock_all(|e| {
        e.put(&[rank as u64 + 7; 4], right, 20)?;
        e.flush()?;
        e.get(&mut back, right, 20)
    })?;
    c.check("lock_all put, flush, get", &back, &[rank as u64 + 7; 4]);
    world.barrier()?;

    world.barrier()?;
    c.done("window");
    println!(
        "window_check: {size} ranks, component {component}, {} failures",
        c.reported
    );
    let failed = c.reported;
    win.free()?;
    universe.finalize()?;
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}
