//! The side that runs inside each of the two ranks (`rmca-faults --worker ...` under rmca-run):
//! per message size a stamped ping-pong (latency samples) and a windowed stream from rank 0 to
//! rank 1 (goodput), every message checked on arrival (see [`crate::check`]). Rank 0 prints one
//! `faults-result JSON` line.

use std::time::Instant;

use rmca::{Communicator, Request};

use crate::check::{stamp, Delivery};
use crate::stats::{cdf, quantile};

/// What the worker is asked to do.
#[derive(Debug, Clone)]
pub struct WorkerParams {
    /// Message sizes (each at least [`crate::check::MIN_SIZE`]).
    pub sizes: Vec<usize>,
    /// Ping-pongs per size up to 4 KiB (scaled down above, at least 50).
    pub lat_iters: usize,
    /// Bytes streamed per size for goodput (at least 16 messages, at most 4000).
    pub bw_bytes: usize,
    /// Messages in flight in the stream.
    pub window: usize,
    /// Seed of the message contents.
    pub seed: u64,
}

type R<T> = Result<T, rmca::Error>;

/// Runs the worker in this rank.
pub fn run(p: &WorkerParams) -> Result<(), String> {
    let universe = rmca::init().map_err(|e| format!("rmca init: {e}"))?;
    let world = universe.world();
    if world.size() != 2 {
        return Err(format!("needs exactly 2 ranks, not {}", world.size()));
    }
    let e = |e: rmca::Error| e.to_string();
    let me = world.rank();
    let mut delivery = Delivery::default();
    // Sequence numbers of the 0 -> 1 direction; rank 1 echoes them back in the ping-pong.
    let mut seq = 0u64;
    let mut results = Vec::new();
    let mut messages = 0u64;
    for &size in &p.sizes {
        let it = if size <= 4096 {
            p.lat_iters
        } else {
            (p.lat_iters * 4096 / size).max(50)
        };
        world.barrier().map_err(e)?;
        let lat = pingpong(&world, size, it, p.seed, &mut seq, &mut delivery).map_err(e)?;
        let count = (p.bw_bytes / size).clamp(16, 4000);
        world.barrier().map_err(e)?;
        let secs = stream(
            &world,
            size,
            count,
            p.window,
            p.seed,
            &mut seq,
            &mut delivery,
        )
        .map_err(e)?;
        messages += 2 * it as u64 + count as u64 + (count / p.window.max(1)) as u64 + 1;
        if me == 0 {
            let mut sorted = lat;
            sorted.sort_by(f64::total_cmp);
            results.push(serde_json::json!({
                "size": size,
                "lat_iters": it,
                "p50_us": quantile(&sorted, 0.5),
                "p99_us": quantile(&sorted, 0.99),
                "p999_us": quantile(&sorted, 0.999),
                "max_us": quantile(&sorted, 1.0),
                "cdf": cdf(&sorted, 101),
                "stream_messages": count,
                "goodput_mbs": (size * count) as f64 / secs / 1e6,
            }));
        }
    }
    // Rank 1's findings join rank 0's.
    let mine = [
        delivery.checked,
        delivery.duplicate,
        delivery.out_of_order,
        delivery.corrupt,
    ];
    if me == 1 {
        world.send(&mine, 0, 9).map_err(e)?;
    } else {
        let mut theirs = [0u64; 4];
        world.recv(&mut theirs, 1, 9).map_err(e)?;
        delivery.add(&Delivery {
            checked: theirs[0],
            duplicate: theirs[1],
            out_of_order: theirs[2],
            corrupt: theirs[3],
        });
        let out = serde_json::json!({
            "sizes": results,
            "delivery": delivery,
            "messages": messages,
        });
        println!("faults-result {out}");
    }
    universe.finalize().map_err(e)?;
    Ok(())
}

/// `it` stamped round trips of `size` bytes; rank 0 returns the one-way latencies (µs).
fn pingpong(
    w: &Communicator,
    size: usize,
    it: usize,
    seed: u64,
    seq: &mut u64,
    d: &mut Delivery,
) -> R<Vec<f64>> {
    let mut sbuf = vec![0u8; size];
    let mut rbuf = vec![0u8; size];
    let mut lat = Vec::with_capacity(it);
    for _ in 0..it {
        if w.rank() == 0 {
            stamp(&mut sbuf, seed, *seq);
            let t = Instant::now();
            w.send(&sbuf, 1, 1)?;
            w.recv(&mut rbuf, 1, 2)?;
            lat.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
            d.check(&rbuf, seed, *seq);
        } else {
            w.recv(&mut rbuf, 0, 1)?;
            d.check(&rbuf, seed, *seq);
            w.send(&rbuf, 0, 2)?;
        }
        *seq += 1;
    }
    Ok(lat)
}

/// `count` stamped messages from rank 0 to rank 1, `window` in flight, then a 0-byte
/// acknowledgement; the seconds it took (rank 0's clock).
fn stream(
    w: &Communicator,
    size: usize,
    count: usize,
    window: usize,
    seed: u64,
    seq: &mut u64,
    d: &mut Delivery,
) -> R<f64> {
    let window = window.max(1);
    let mut buf = vec![0u8; size * window];
    let t = Instant::now();
    let mut sent = 0;
    while sent < count {
        let n = window.min(count - sent);
        if w.rank() == 0 {
            for (i, c) in buf.chunks_mut(size).take(n).enumerate() {
                stamp(c, seed, *seq + i as u64);
            }
            rmca::scope(|s| {
                let mut reqs = Vec::with_capacity(n);
                for c in buf.chunks(size).take(n) {
                    reqs.push(w.isend(s, c, 1, 3)?);
                }
                Request::complete_all(reqs)
            })?;
        } else {
            rmca::scope(|s| {
                let mut reqs = Vec::with_capacity(n);
                for c in buf.chunks_mut(size).take(n) {
                    reqs.push(w.irecv(s, c, 0, 3)?);
                }
                Request::complete_all(reqs)
            })?;
            // Receives posted in order match in order (MPI's non-overtaking rule), so slot i
            // must hold message seq + i.
            for (i, c) in buf.chunks(size).take(n).enumerate() {
                d.check(c, seed, *seq + i as u64);
            }
        }
        *seq += n as u64;
        sent += n;
    }
    if w.rank() == 0 {
        w.recv::<u8>(&mut [], 1, 4)?;
    } else {
        w.send::<u8>(&[], 0, 4)?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// What the worker does in a kill sweep (`--worker --kill-run S`).
#[derive(Debug, Clone)]
pub struct KillParams {
    /// Message size of the ping-pong.
    pub size: usize,
    /// Seconds of ping-pong in all; the driver changes the link during them.
    pub run_s: f64,
    /// Seed of the message contents.
    pub seed: u64,
}

/// A silence longer than this between two round trips is recorded as a gap.
const GAP_NS: u64 = 10_000_000;

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The ping-pong of a kill sweep: rank 0 prints `faults-streaming` once traffic flows, then
/// runs stamped round trips for `run_s` seconds, recording every gap of more than 10 ms
/// between two completions (unix ns, the host clock the emulator's change is stamped with),
/// and prints `faults-kill JSON`: the gaps, the round trips, and the error that ended them if
/// one did (then the process exits at once: the job is broken). Rank 1 echoes until a message
/// of sequence u64::MAX; on an error it waits to be killed, so that rank 0's report is not
/// cut short by the launcher tearing the job down.
pub fn run_kill(p: &KillParams) -> Result<(), String> {
    use std::io::Write;
    let universe = rmca::init().map_err(|e| format!("rmca init: {e}"))?;
    let world = universe.world();
    if world.size() != 2 {
        return Err(format!("needs exactly 2 ranks, not {}", world.size()));
    }
    let size = p.size.max(crate::check::MIN_SIZE);
    let (mut sbuf, mut rbuf) = (vec![0u8; size], vec![0u8; size]);
    let mut d = Delivery::default();
    let e = |e: rmca::Error| e.to_string();
    world.barrier().map_err(e)?;
    if world.rank() == 1 {
        loop {
            let r = world
                .recv(&mut rbuf, 0, 1)
                .and_then(|_| world.send(&rbuf, 0, 2));
            if let Err(err) = r {
                eprintln!("rmca-faults worker: rank 1: {err}");
                std::thread::sleep(std::time::Duration::from_secs(60));
                std::process::exit(1);
            }
            // What rank 1 received goes back as it is: rank 0 checks both legs at once.
            if rbuf[..8] == u64::MAX.to_le_bytes() {
                break;
            }
        }
    } else {
        println!("faults-streaming {}", unix_ns());
        let _ = std::io::stdout().flush();
        let start = Instant::now();
        let (mut seq, mut last) = (0u64, unix_ns());
        let first = last;
        let mut gaps: Vec<(u64, u64)> = Vec::new();
        let mut error = None;
        while start.elapsed().as_secs_f64() < p.run_s {
            stamp(&mut sbuf, p.seed, seq);
            let r = world
                .send(&sbuf, 1, 1)
                .and_then(|_| world.recv(&mut rbuf, 1, 2));
            let now = unix_ns();
            if let Err(err) = r {
                error = Some((now, err.to_string()));
                break;
            }
            d.check(&rbuf, p.seed, seq);
            if now - last > GAP_NS {
                gaps.push((last, now));
            }
            last = now;
            seq += 1;
        }
        let out = serde_json::json!({
            "first_ns": first,
            "last_ok_ns": last,
            "round_trips": seq,
            "gaps": gaps,
            "error_ns": error.as_ref().map(|e| e.0),
            "error": error.as_ref().map(|e| e.1.clone()),
            "delivery": d,
        });
        println!("faults-kill {out}");
        let _ = std::io::stdout().flush();
        if error.is_some() {
            std::process::exit(3);
        }
        stamp(&mut sbuf, p.seed, u64::MAX);
        sbuf[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        world.send(&sbuf, 1, 1).map_err(e)?;
        world.recv(&mut rbuf, 1, 2).map_err(e)?;
    }
    universe.finalize().map_err(e)?;
    Ok(())
}
