//! Stress: every rank sends a seeded stream of mixed-size messages to every other rank and
//! verifies every byte, the size, the tag and the order of everything it receives.
//!
//! `rmca-run -n 3 target/release/examples/stress [--seed S] [--messages N] [--max-size B]
//! [--batch W]`
//!
//! - `--messages N`: messages sent by the whole job (default 100000), split evenly over the
//!   ordered pairs of ranks.
//! - `--max-size B`: largest message in bytes (default 8 MiB; suffixes k, m, g accepted). Every
//!   stream carries one message of exactly this size and one of 0 bytes; sizes are skewed small
//!   (about 97% ≤ 1 KiB, 3% up to 64 KiB, 1 in 20000 between max/8 and max).
//! - `--batch W`: messages per stream and round (default 64).
//!
//! The plan is a pure function of (seed, src, dst, index): size, tag, how it is sent (blocking,
//! synchronous, non-blocking) and received (tagged or ANY_TAG, blocking or not), and every byte
//! (content = f(seed, src, dst, index, offset)), so the receiver knows exactly what to expect.
//! Per stream the receives are posted in index order, which makes MPI's non-overtaking rule
//! pin each receive to exactly one message even with ANY_TAG: a message received out of order
//! shows as a wrong tag, size or content.
//!
//! Prints one line per rank, `messages=N bytes=B errors=E` (received and verified, followed by
//! `rank=R sent=S seconds=T`) before finalizing, and exits 1 if E > 0 or a call failed, 3 if
//! finalize failed.

use rmca::framework::rng::mix64;
use std::process::exit;
use std::time::Instant;

use rmca::{Communicator, Request, ANY_TAG};

/// Key of message `idx` of the stream src -> dst.
fn msg_key(seed: u64, src: usize, dst: usize, idx: u64) -> u64 {
    mix64(mix64(mix64(seed ^ 0x5354_5245_5353) ^ ((src as u64) << 32 | dst as u64)) ^ idx)
}

/// The 8 content bytes at word `w` of the message with key `key`.
fn content_word(key: u64, w: u64) -> [u8; 8] {
    mix64(key ^ w.wrapping_mul(0xd6e8_feb8_6659_fd93)).to_le_bytes()
}

fn fill(key: u64, buf: &mut [u8]) {
    for (w, chunk) in buf.chunks_mut(8).enumerate() {
        let bytes = content_word(key, w as u64);
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

/// Offset of the first wrong byte, if any.
fn first_mismatch(key: u64, buf: &[u8]) -> Option<usize> {
    for (w, chunk) in buf.chunks(8).enumerate() {
        let bytes = content_word(key, w as u64);
        if chunk != &bytes[..chunk.len()] {
            let i = chunk
                .iter()
                .zip(bytes.iter())
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Some(w * 8 + i);
        }
    }
    None
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SendHow {
    Blocking,
    Synchronous,
    NonBlocking,
    NonBlockingSync,
}

/// Everything both ends know about one message.
#[derive(Clone, Copy, Debug)]
struct Plan {
    key: u64,
    len: usize,
    tag: i32,
    send: SendHow,
    any_tag: bool,
}

fn plan(seed: u64, src: usize, dst: usize, idx: u64, count: u64, max: usize) -> Plan {
    let key = msg_key(seed, src, dst, idx);
    let h = mix64(key ^ 0x706c_616e);
    let r = h % 20_000;
    let pick = |lo: usize, hi: usize| -> usize {
        let hi = hi.min(max);
        let lo = lo.min(hi);
        lo + ((h >> 20) % (hi - lo + 1) as u64) as usize
    };
    let len = if idx == 0 {
        0
    } else if idx == count / 2 {
        max
    } else if r == 0 {
        pick(max / 8, max)
    } else if r < 600 {
        pick(1024, 64 << 10)
    } else if r < 800 {
        0
    } else {
        pick(1, 1024)
    };
    let s = (h >> 44) % 100;
    let send = match s {
        0..=14 => SendHow::Blocking,
        15..=16 => SendHow::Synchronous,
        17..=19 => SendHow::NonBlockingSync,
        _ => SendHow::NonBlocking,
    };
    Plan {
        key,
        len,
        tag: ((h >> 8) % 1000) as i32,
        send,
        any_tag: (h >> 56) % 10 < 3,
    }
}

struct Args {
    seed: u64,
    messages: u64,
    max_size: usize,
    batch: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        seed: 1,
        messages: 100_000,
        max_size: 8 << 20,
        batch: 64,
    };
    let mut it = std::env::args().skip(1);
    while let Some(opt) = it.next() {
        let mut val = |what: &str| {
            it.next()
                .ok_or_else(|| format!("{opt} needs a value ({what})"))
        };
        match opt.as_str() {
            "--seed" => {
                let v = val("an unsigned integer")?;
                a.seed = v
                    .parse()
                    .map_err(|_| format!("--seed {v:?}: expected an unsigned integer"))?;
            }
            "--messages" => {
                let v = val("a message count")?;
                a.messages = v
                    .parse()
                    .map_err(|_| format!("--messages {v:?}: expected an unsigned integer"))?;
            }
            "--max-size" => {
                let v = val("bytes")?;
                a.max_size = rmca::framework::params::parse_size(&v)
                    .filter(|&b| b <= 1 << 30)
                    .ok_or_else(|| {
                        format!(
                        "--max-size {v:?}: expected bytes from 0 to 1g (suffix k, m or g allowed)"
                    )
                    })? as usize;
            }
            "--batch" => {
                let v = val("messages per round")?;
                a.batch = v
                    .parse()
                    .ok()
                    .filter(|&b| b > 0)
                    .ok_or_else(|| format!("--batch {v:?}: expected a positive integer"))?;
            }
            _ => {
                return Err(format!(
                    "unknown argument {opt:?} (valid: --seed, --messages, --max-size, --batch)"
                ))
            }
        }
    }
    Ok(a)
}

/// Messages in the stream src -> dst: the job total spread evenly over the ordered pairs.
fn stream_len(total: u64, n: usize, src: usize, dst: usize) -> u64 {
    let pairs = (n * (n - 1)) as u64;
    let pair = (src * (n - 1) + if dst > src { dst - 1 } else { dst }) as u64;
    total / pairs + u64::from(pair < total % pairs)
}

struct Tally {
    rank: usize,
    messages: u64,
    bytes: u64,
    errors: u64,
    sent: u64,
    start: Instant,
}

impl Tally {
    fn line(&self) -> String {
        format!(
            "messages={} bytes={} errors={} rank={} sent={} seconds={:.3}",
            self.messages,
            self.bytes,
            self.errors,
            self.rank,
            self.sent,
            self.start.elapsed().as_secs_f64()
        )
    }

    fn error(&mut self, what: String) {
        self.errors += 1;
        if self.errors <= 10 {
            eprintln!("stress: rank {}: {what}", self.rank);
        }
    }

    /// A call failed: outstanding requests cannot be trusted, so report and leave.
    fn fatal(mut self, what: String) -> ! {
        self.error(what);
        println!("{}", self.line());
        exit(1)
    }
}

/// One receive of the current round.
struct Entry {
    peer: usize,
    idx: u64,
    plan: Plan,
    /// Received by a blocking call after the round's sends (else a pre-posted irecv).
    blocking: bool,
}

fn check(t: &mut Tally, e: &Entry, st: &rmca::Status, buf: &[u8]) {
    t.messages += 1;
    t.bytes += st.bytes as u64;
    let p = &e.plan;
    if st.source != e.peer || st.tag != p.tag || st.bytes != p.len {
        t.error(format!(
            "message {} from {}: got source {} tag {} len {}, expected source {} tag {} len {}",
            e.idx, e.peer, st.source, st.tag, st.bytes, e.peer, p.tag, p.len
        ));
        return;
    }
    if let Some(off) = first_mismatch(p.key, &buf[..st.bytes]) {
        t.error(format!(
            "message {} from {} ({} bytes): wrong byte at offset {off}",
            e.idx, e.peer, p.len
        ));
    }
}

fn round(world: &Communicator, a: &Args, t: &mut Tally, round: u64) -> Result<(), String> {
    let (me, n) = (world.rank(), world.size());
    let lo = round * a.batch;
    // Receives: per peer, in index order; the last 0..2 of each stream are blocking receives.
    let mut entries = Vec::new();
    for peer in (0..n).filter(|&p| p != me) {
        let count = stream_len(a.messages, n, peer, me);
        let hi = count.min(lo + a.batch);
        let tail = mix64(a.seed ^ round ^ (peer as u64) << 40) % 3;
        for idx in lo..hi {
            entries.push(Entry {
                peer,
                idx,
                plan: plan(a.seed, peer, me, idx, count, a.max_size),
                blocking: idx + tail >= hi,
            });
        }
    }
    // 8 spare bytes: a message longer than planned shows as a wrong length, not truncation.
    let mut bufs: Vec<Vec<u8>> = entries.iter().map(|e| vec![0u8; e.plan.len + 8]).collect();
    let mut statuses: Vec<Option<rmca::Status>> = vec![None; entries.len()];
    // The messages to send, made before the scope that lends them.
    let mut out = Vec::new();
    for peer in (0..n).filter(|&p| p != me) {
        let count = stream_len(a.messages, n, me, peer);
        let hi = count.min(lo + a.batch);
        let tail = mix64(a.seed ^ round ^ (me as u64) << 40) % 3;
        for idx in lo..hi {
            let p = plan(a.seed, me, peer, idx, count, a.max_size);
            let mut buf = vec![0u8; p.len];
            fill(p.key, &mut buf);
            out.push((peer, idx, p, idx + tail >= hi, buf));
        }
    }
    rmca::scope(|s| -> Result<(), String> {
        let mut recvs: Vec<(usize, Request<'_>)> = Vec::new();
        let mut tail: Vec<(usize, &mut Vec<u8>)> = Vec::new();
        for (i, (e, buf)) in entries.iter().zip(bufs.iter_mut()).enumerate() {
            if e.blocking {
                tail.push((i, buf));
            } else {
                let tag = if e.plan.any_tag { ANY_TAG } else { e.plan.tag };
                let r = world
                    .irecv(s, buf.as_mut_slice(), e.peer, tag)
                    .map_err(|err| format!("irecv message {} from {}: {err}", e.idx, e.peer))?;
                recvs.push((i, r));
            }
        }

        // Sends. A blocking send only targets a message its receiver pre-posts (it posts them
        // before sending anything), so no two ranks can wait on each other's blocking sends.
        let mut sends: Vec<Request<'_>> = Vec::new();
        for (peer, idx, p, to_tail, buf) in &out {
            let how = match (p.send, to_tail) {
                (SendHow::Blocking | SendHow::Synchronous, true) => SendHow::NonBlocking,
                (h, _) => h,
            };
            let res = match how {
                SendHow::Blocking => world.send(buf.as_slice(), *peer, p.tag),
                SendHow::Synchronous => world.ssend(buf.as_slice(), *peer, p.tag),
                SendHow::NonBlocking => world
                    .isend(s, buf.as_slice(), *peer, p.tag)
                    .map(|r| sends.push(r)),
                SendHow::NonBlockingSync => world
                    .issend(s, buf.as_slice(), *peer, p.tag)
                    .map(|r| sends.push(r)),
            };
            res.map_err(|err| format!("send ({how:?}) message {idx} to {peer}: {err}"))?;
            t.sent += 1;
        }

        for (i, buf) in tail {
            let e = &entries[i];
            let tag = if e.plan.any_tag { ANY_TAG } else { e.plan.tag };
            let st = world
                .recv(buf.as_mut_slice(), e.peer, tag)
                .map_err(|err| format!("recv message {} from {}: {err}", e.idx, e.peer))?;
            statuses[i] = Some(st);
        }
        // Completion in whatever order the network delivers: wait_any on the receives.
        let mut ids: Vec<usize> = recvs.iter().map(|(i, _)| *i).collect();
        let mut reqs: Vec<Request<'_>> = recvs.into_iter().map(|(_, r)| r).collect();
        while !reqs.is_empty() {
            let (k, st) = Request::wait_any(&mut reqs).map_err(|err| format!("irecv: {err}"))?;
            statuses[ids.remove(k)] = Some(st);
        }
        Request::wait_all(sends).map_err(|err| format!("isend: {err}"))?;
        Ok(())
    })?;
    for ((e, buf), st) in entries.iter().zip(&bufs).zip(&statuses) {
        let st = st.as_ref().expect("every receive completed");
        check(t, e, st, buf);
    }
    Ok(())
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("stress: {e}");
        exit(2)
    });
    let universe = rmca::init().unwrap_or_else(|e| {
        eprintln!("stress: rmca init failed: {e}");
        exit(1)
    });
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());
    let mut t = Tally {
        rank: me,
        messages: 0,
        bytes: 0,
        errors: 0,
        sent: 0,
        start: Instant::now(),
    };
    if n > 1 {
        let longest = (0..n)
            .flat_map(|s| (0..n).filter(move |&d| d != s).map(move |d| (s, d)))
            .map(|(s, d)| stream_len(args.messages, n, s, d))
            .max()
            .unwrap_or(0);
        let rounds = longest.div_ceil(args.batch);
        for r in 0..rounds {
            if let Err(e) = round(&world, &args, &mut t, r) {
                t.fatal(e);
            }
        }
    }
    // Every byte is verified by now: report before finalize, whose own failure (a peer that
    // left without acknowledging the last fragments) is a separate, clearly named error.
    println!("{}", t.line());
    let _ = std::io::Write::flush(&mut std::io::stdout());
    if let Err(e) = universe.finalize() {
        eprintln!("stress: rank {me}: finalize failed: {e}");
        exit(3);
    }
    if t.errors > 0 {
        exit(1);
    }
}
