//! The benchmark side that runs inside each rank (`rmca-bench --worker ...` under rmca-run).
//! Methodology and output format are those of bench/osu_like.c, line for line.

use std::time::Instant;

use rmca::coll::Op;
use rmca::{Communicator, Request};

use crate::bench::{iters_for, sizes, warmup_for, Bench, Params};
use crate::memstat;

/// Run `bench` in this rank; rank 0 prints `result SIZE VALUE [VALUE2 ...]` lines. With `mem`,
/// allconn and ringconn add the memory figures (see [`crate::bench::CONN_METRICS`]).
pub fn run(bench: Bench, p: &Params, bind: bool, mem: bool) -> Result<(), String> {
    let universe = rmca::init().map_err(|e| format!("rmca init: {e}"))?;
    let world = universe.world();
    let core = core_to_pin(
        world.rank(),
        crate::affinity::allowed_cpus(),
        crate::affinity::online_cpus(),
    );
    if let Some(core) = core.filter(|_| bind) {
        if !crate::affinity::pin_to_core(core) {
            eprintln!(
                "rmca-bench: rank {} could not be bound to core {core}",
                world.rank()
            );
        }
    }
    if std::env::var_os(crate::nodes::WHERE_ENV).is_some() {
        // The launcher forwards every rank's output: rmca-bench checks the placement.
        let ns = std::fs::read_link("/proc/self/ns/net")
            .map_or_else(|_| "unknown".to_owned(), |l| l.display().to_string());
        println!("where {} {ns}", world.rank());
    }
    let init_us = universe.init_time().as_secs_f64() * 1e6;
    let e = |e: rmca::Error| e.to_string();
    match bench {
        Bench::Allconn | Bench::Ringconn => {
            let figures = connect(&world, init_us, bench == Bench::Ringconn, mem).map_err(e)?;
            // Finalize here: with `--mca profile 1` rank 0 gets the merged profile back.
            let profile = universe.finalize().map_err(e)?;
            if let Some(mut f) = figures {
                if mem {
                    let prof = profile.as_ref();
                    f.push(
                        prof.and_then(rmca::JobProfile::accounted_peak_max)
                            .map_or(f64::NAN, |b| b as f64 / 1024.0),
                    );
                    f.push(
                        prof.and_then(|p| p.counter_per_rank("btl.rc.connections"))
                            .unwrap_or(f64::NAN),
                    );
                }
                let cells: Vec<String> = f
                    .iter()
                    .map(|v| {
                        if v.is_nan() {
                            "-".to_owned()
                        } else {
                            format!("{v:.3}")
                        }
                    })
                    .collect();
                println!("result 0 {}", cells.join(" "));
            }
            return Ok(());
        }
        Bench::Barrier => barrier(&world, p.iters).map_err(e)?,
        _ => {
            for size in sizes(bench, p.min, p.max) {
                let it = iters_for(p.iters, size);
                let value = match bench {
                    Bench::Latency => latency(&world, size, it, p.misalign),
                    Bench::Bw => window(&world, size, it, p, false),
                    Bench::Msgrate => window(&world, size, it, p, true),
                    Bench::Bibw => bibw(&world, size, it, p),
                    Bench::OsuBw => osu_window(&world, size, it, p, false),
                    Bench::OsuMbwMr => osu_window(&world, size, it, p, true),
                    Bench::OsuBibw => osu_bibw(&world, size, it, p),
                    Bench::Allreduce => allreduce(&world, size, it),
                    Bench::Allconn | Bench::Ringconn | Bench::Barrier => {
                        unreachable!("handled above")
                    }
                }
                .map_err(e)?;
                if world.rank() == 0 {
                    println!("result {size} {value:.6e}");
                }
            }
        }
    }
    drop(universe);
    Ok(())
}

type R<T> = Result<T, rmca::Error>;

fn latency(w: &Communicator, size: usize, it: usize, misalign: usize) -> R<f64> {
    let sbuf = PageBuf::at_offset(size, b'a', misalign);
    let mut rbuf = PageBuf::new(size, 0u8);
    let warm = warmup_for(it);
    w.barrier()?;
    let mut t0 = Instant::now();
    if w.rank() < 2 && w.size() >= 2 {
        for i in 0..warm + it {
            if i == warm {
                t0 = Instant::now();
            }
            if w.rank() == 0 {
                w.send(&sbuf, 1, 1)?;
                w.recv(&mut rbuf, 1, 1)?;
            } else {
                w.recv(&mut rbuf, 0, 1)?;
                w.send(&sbuf, 0, 1)?;
            }
        }
    }
    Ok(t0.elapsed().as_secs_f64() * 1e6 / (2 * it) as f64)
}

/// bw (ranks 0 -> 1) or msgrate (pairs r -> r + n/2): `window` messages in flight, then an ack.
fn window(w: &Communicator, size: usize, it: usize, p: &Params, msgrate: bool) -> R<f64> {
    let (window, misalign) = (p.window, p.misalign);
    let (n, me) = (w.size(), w.rank());
    let pairs = (n / 2).max(1);
    let (active, sender) = if msgrate {
        (me < 2 * pairs, me < pairs)
    } else {
        (me < 2, me == 0)
    };
    let peer = if msgrate {
        if sender {
            me + pairs
        } else {
            me.wrapping_sub(pairs)
        }
    } else {
        1 - me.min(1)
    };
    let sbuf = PageBuf::at_offset(size, b'a', misalign);
    // One receive buffer per window slot (Rust cannot alias them; osu_like.c does the same).
    let mut rbuf = PageBuf::new(size * window, 0u8);
    let warm = warmup_for(it);
    w.barrier()?;
    let mut t0 = Instant::now();
    if active && n >= 2 {
        for i in 0..warm + it {
            if i == warm {
                t0 = Instant::now();
            }
            // Like osu_like.c: a request array of the window's size, statuses ignored; one
            // request scope per window (the receive slots are lent again each round).
            if sender {
                rmca::scope(|s| {
                    let mut reqs = Vec::with_capacity(window);
                    for _ in 0..window {
                        reqs.push(w.isend(s, &sbuf, peer, 2)?);
                    }
                    Request::complete_all(reqs)
                })?;
                w.recv::<u8>(&mut [], peer, 3)?;
            } else {
                rmca::scope(|s| {
                    let mut reqs = Vec::with_capacity(window);
                    for c in rbuf_chunks(&mut rbuf, size, window) {
                        reqs.push(w.irecv(s, c, peer, 2)?);
                    }
                    Request::complete_all(reqs)
                })?;
                w.send::<u8>(&[], peer, 3)?;
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok(if msgrate {
        pairs as f64 * (window * it) as f64 / secs / 1e6
    } else {
        (size * window * it) as f64 / secs / 1e6
    })
}

/// `window` disjoint receive slots of `size` bytes (zero-sized slots for 0-byte messages).
fn rbuf_chunks(buf: &mut [u8], size: usize, window: usize) -> impl Iterator<Item = &mut [u8]> {
    let mut rest = buf;
    (0..window).map(move |_| {
        let (a, b) = std::mem::take(&mut rest).split_at_mut(size);
        rest = b;
        a
    })
}

fn bibw(w: &Communicator, size: usize, it: usize, p: &Params) -> R<f64> {
    let (window, misalign) = (p.window, p.misalign);
    let sbuf = PageBuf::at_offset(size, b'a', misalign);
    let mut rbuf = PageBuf::new(size * window, 0u8);
    let warm = warmup_for(it);
    w.barrier()?;
    let mut t0 = Instant::now();
    if w.rank() < 2 && w.size() >= 2 {
        let peer = 1 - w.rank();
        for i in 0..warm + it {
            if i == warm {
                t0 = Instant::now();
            }
            rmca::scope(|s| {
                let mut reqs = Vec::with_capacity(2 * window);
                for c in rbuf_chunks(&mut rbuf, size, window) {
                    reqs.push(w.irecv(s, c, peer, 4)?);
                }
                for _ in 0..window {
                    reqs.push(w.isend(s, &sbuf, peer, 4)?);
                }
                Request::complete_all(reqs)
            })?;
        }
    }
    Ok((2 * size * window * it) as f64 / t0.elapsed().as_secs_f64() / 1e6)
}

/// OSU's osu_bw (`mbw_mr`: osu_mbw_mr over the pairs of msgrate): the window's requests
/// completed with their statuses ([`Request::wait_all`]), then a 1-byte reply. Aggregate MB/s.
/// The receives have a slot each (safe Rust lends a buffer to one receive at a time; OSU
/// gives them all one buffer).
fn osu_window(w: &Communicator, size: usize, it: usize, p: &Params, mbw_mr: bool) -> R<f64> {
    let (window, misalign) = (p.window, p.misalign);
    let (n, me) = (w.size(), w.rank());
    let pairs = if mbw_mr { (n / 2).max(1) } else { 1 };
    let (active, sender) = (me < 2 * pairs, me < pairs);
    let peer = if sender {
        me + pairs
    } else {
        me.wrapping_sub(pairs)
    };
    let sbuf = PageBuf::at_offset(size, b'a', misalign);
    let mut rbuf = PageBuf::new(size * window, 0u8);
    let mut reply = [0u8; 1];
    let warm = warmup_for(it);
    w.barrier()?;
    let mut t0 = Instant::now();
    if active && n >= 2 {
        for i in 0..warm + it {
            if i == warm {
                t0 = Instant::now();
            }
            if sender {
                rmca::scope(|s| {
                    let mut reqs = Vec::with_capacity(window);
                    for _ in 0..window {
                        reqs.push(w.isend(s, &sbuf, peer, 100)?);
                    }
                    Request::wait_all(reqs).map(drop)
                })?;
                w.recv(&mut reply, peer, 101)?;
            } else {
                rmca::scope(|s| {
                    let mut reqs = Vec::with_capacity(window);
                    for c in rbuf_chunks(&mut rbuf, size, window) {
                        reqs.push(w.irecv(s, c, peer, 100)?);
                    }
                    Request::wait_all(reqs).map(drop)
                })?;
                w.send(&reply, peer, 101)?;
            }
        }
    }
    Ok((pairs * size * window * it) as f64 / t0.elapsed().as_secs_f64() / 1e6)
}

/// OSU's osu_bibw: a window of receives and one of sends on both ranks, the sends and the
/// receives completed with their statuses by two calls (rank 0 sends first, rank 1 receives
/// first, as OSU orders them).
fn osu_bibw(w: &Communicator, size: usize, it: usize, p: &Params) -> R<f64> {
    let (window, misalign) = (p.window, p.misalign);
    let sbuf = PageBuf::at_offset(size, b'a', misalign);
    let mut rbuf = PageBuf::new(size * window, 0u8);
    let warm = warmup_for(it);
    w.barrier()?;
    let mut t0 = Instant::now();
    if w.rank() < 2 && w.size() >= 2 {
        let peer = 1 - w.rank();
        for i in 0..warm + it {
            if i == warm {
                t0 = Instant::now();
            }
            rmca::scope(|s| {
                let mut recvs = Vec::with_capacity(window);
                for c in rbuf_chunks(&mut rbuf, size, window) {
                    recvs.push(w.irecv(s, c, peer, 10)?);
                }
                let mut sends = Vec::with_capacity(window);
                for _ in 0..window {
                    sends.push(w.isend(s, &sbuf, peer, 10)?);
                }
                if w.rank() == 0 {
                    Request::wait_all(sends)?;
                    Request::wait_all(recvs).map(drop)
                } else {
                    Request::wait_all(recvs)?;
                    Request::wait_all(sends).map(drop)
                }
            })?;
        }
    }
    Ok((2 * size * window * it) as f64 / t0.elapsed().as_secs_f64() / 1e6)
}

fn allreduce(w: &Communicator, size: usize, it: usize) -> R<f64> {
    let count = size / 4;
    let send = PageBuf::new(count, 1.0f32);
    let mut recv = PageBuf::new(count, 0.0f32);
    let warm = warmup_for(it);
    w.barrier()?;
    let mut t0 = Instant::now();
    for i in 0..warm + it {
        if i == warm {
            t0 = Instant::now();
        }
        w.allreduce(&send, &mut recv, Op::Sum)?;
    }
    avg_over_ranks(w, t0.elapsed().as_secs_f64() * 1e6 / it as f64)
}

fn avg_over_ranks(w: &Communicator, mine: f64) -> R<f64> {
    let mut sum = [0.0f64];
    w.reduce(&[mine], (w.rank() == 0).then_some(&mut sum[..]), Op::Sum, 0)?;
    Ok(sum[0] / w.size() as f64)
}

fn barrier(w: &Communicator, it: usize) -> R<()> {
    let warm = warmup_for(it);
    let mut t0 = Instant::now();
    for i in 0..warm + it {
        if i == warm {
            t0 = Instant::now();
        }
        w.barrier()?;
    }
    let v = avg_over_ranks(w, t0.elapsed().as_secs_f64() * 1e6 / it as f64)?;
    if w.rank() == 0 {
        println!("result 0 {v:.6e}");
    }
    Ok(())
}

/// First 0-byte exchange with every peer in ring order (or, for `ring`, with the two ring
/// neighbours only), right after init (no barrier before: connection set-up is what is
/// measured), and the init time; maxima over ranks. With `mem`, VmHWM and VmRSS (MiB) just
/// before finalize, maxima over ranks. Rank 0 gets the figures.
fn connect(w: &Communicator, init_us: f64, ring: bool, mem: bool) -> R<Option<Vec<f64>>> {
    let (n, me) = (w.size(), w.rank());
    let t0 = Instant::now();
    let steps = if ring { (n - 1).min(1) } else { n - 1 };
    for k in 1..=steps {
        w.sendrecv::<u8, u8>(&[], (me + k) % n, 5, &mut [], (me + n - k) % n, 5)?;
    }
    if ring && n > 2 {
        // The other direction, so that each rank has talked to both neighbours.
        w.sendrecv::<u8, u8>(&[], (me + n - 1) % n, 5, &mut [], (me + 1) % n, 5)?;
    }
    let mut mine = vec![t0.elapsed().as_secs_f64() * 1e6, init_us];
    if mem {
        let vm = memstat::current();
        // -1 marks "not readable" (the maximum stays -1 only if no rank could read it).
        let mib = |f: fn(&memstat::Vm) -> u64| vm.as_ref().map_or(-1.0, |v| f(v) as f64 / 1024.0);
        mine.push(mib(|v| v.hwm_kib));
        mine.push(mib(|v| v.rss_kib));
    }
    let mut worst = vec![0.0f64; mine.len()];
    w.reduce(&mine, (me == 0).then_some(&mut worst[..]), Op::Max, 0)?;
    Ok((me == 0).then(|| {
        worst
            .into_iter()
            .map(|v| if v < 0.0 { f64::NAN } else { v })
            .collect()
    }))
}

/// A buffer that starts on a page boundary (or a chosen offset past one), as the OSU benchmarks
/// (and `osu_like.c`) allocate theirs. Where a buffer starts matters for large messages: the
/// kernel's copy behind single-copy transfers runs at about 2/3 of its speed when source and
/// destination are 16 bytes apart in their alignment (`--misalign 16`; "Buffer alignment" in
/// `git show c0ea37f:bench/RESULTS.md`).
/// Heap buffers land wherever the allocator's history puts them, so without this the figures
/// would measure that history.
struct PageBuf<T> {
    raw: Vec<T>,
    start: usize,
    len: usize,
}

impl<T: Copy> PageBuf<T> {
    const PAGE: usize = 4096;

    fn new(len: usize, fill: T) -> Self {
        Self::at_offset(len, fill, 0)
    }

    /// `offset` elements past a page boundary (`offset` below a page).
    fn at_offset(len: usize, fill: T, offset: usize) -> Self {
        let spare = Self::PAGE / std::mem::size_of::<T>().max(1);
        let raw = vec![fill; len + 2 * spare];
        // In elements; a page is a whole number of them for the element types used here.
        let start = raw.as_ptr().align_offset(Self::PAGE).min(spare) + offset.min(spare);
        Self { raw, start, len }
    }
}

impl<T> std::ops::Deref for PageBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.raw[self.start..self.start + self.len]
    }
}

impl<T> std::ops::DerefMut for PageBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

/// The core rank `rank` pins itself to: `rank % online` cores, unless the launcher already bound
/// it to one CPU (`allowed == Some(1)`; rmca-run binds by default), which it keeps. Counting the
/// CPUs of the mask instead of the machine's would put every bound rank on core 0.
fn core_to_pin(rank: usize, allowed: Option<usize>, online: usize) -> Option<usize> {
    (allowed != Some(1)).then(|| rank % online.max(1))
}

#[cfg(test)]
mod tests {
    use super::core_to_pin;

    #[test]
    fn a_rank_the_launcher_bound_keeps_its_core() {
        assert_eq!(core_to_pin(1, Some(1), 2), None);
        assert_eq!(core_to_pin(0, Some(1), 2), None);
    }

    #[test]
    fn unbound_ranks_spread_over_the_machine() {
        assert_eq!(core_to_pin(0, Some(2), 2), Some(0));
        assert_eq!(core_to_pin(1, Some(2), 2), Some(1));
        assert_eq!(core_to_pin(3, None, 2), Some(1));
        assert_eq!(core_to_pin(5, Some(8), 4), Some(1));
    }
}
