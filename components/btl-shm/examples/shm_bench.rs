//! Raw btl-shm micro-benchmark between two processes (the binary re-runs itself as rank 1),
//! ranks bound to CPUs 0 and 1. Prints ping-pong latency, 8 B message rate, streaming bandwidth
//! through the rings (copy-in/copy-out) and 1 MiB transfers by CMA get with an ob1-style
//! rendezvous (RTS fragment, get, FIN fragment), each as the median of several runs with the
//! spread, then one JSON line. Compare with `bench/mpi_bench.c` run in the same session
//! (`bench/compare.sh` does both).
//!
//! `cargo run --release -p rmca-btl-shm --example shm_bench [-- --quick]`

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rmca_btl_shm::{sys, SHM};
use rmca_framework::btl::{
    Btl, BtlComponent, BtlEvents, BtlFlags, CompletionToken, MemAccess, ModexRead, RemoteSegment,
    SendError, SendHint,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::component::{Component, InitContext};
use rmca_framework::job::JobInfo;
use rmca_framework::memory::MemoryAccounting;
use rmca_framework::modex::{ModexError, ModexWrite};
use rmca_framework::params::{ParamRegistrar, ParamStore, RawSources};
use rmca_framework::rank::Rank;

// SAFETY (lend, lend_mut): the memory lent stays borrowed here until the operation using it
// has completed (every caller waits for its operations before its buffers go).
fn lend(v: &[u8]) -> UserBuf {
    unsafe { UserBuf::from_slice(v) }
}
fn lend_mut(v: &mut [u8]) -> UserBuf {
    unsafe { UserBuf::from_mut_slice(v) }
}

const ROLE_ENV: &str = "RMCA_SHM_BENCH_CHILD";
const DIR_ENV: &str = "RMCA_SHM_BENCH_DIR";
const JOB_ENV: &str = "RMCA_SHM_BENCH_JOB";
const TAG: u8 = 0x40;
const TAG_ACK: u8 = 0x41;
const TAG_BARRIER: u8 = 0x42;
const MIB: usize = 1 << 20;

struct FileModex {
    dir: PathBuf,
    rank: Rank,
}

impl ModexWrite for FileModex {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), ModexError> {
        let tmp = self.dir.join(format!("{}.{key}.tmp", self.rank));
        std::fs::write(&tmp, value).map_err(|e| ModexError::Rte(e.to_string()))?;
        std::fs::rename(&tmp, self.dir.join(format!("{}.{key}", self.rank)))
            .map_err(|e| ModexError::Rte(e.to_string()))
    }
}

impl ModexRead for FileModex {
    fn get(&self, rank: Rank, key: &str) -> Result<Option<Vec<u8>>, ModexError> {
        let path = self.dir.join(format!("{rank}.{key}"));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match std::fs::read(&path) {
                Ok(b) => return Ok(Some(b)),
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
                Err(e) => return Err(ModexError::Rte(format!("{}: {e}", path.display()))),
            }
        }
    }
}

/// Counts fragments and keeps the first 16 bytes of the last one.
#[derive(Default)]
struct Ev {
    got: u64,
    acks: u64,
    barriers: u64,
    last: [u8; 16],
    rdma: u64,
    /// When not empty, data fragments are copied in here (wrapping), as a PML's receive would.
    sink: Vec<u8>,
    sink_off: usize,
}

impl BtlEvents for Ev {
    #[inline]
    fn recv(&mut self, _peer: Rank, tag: u8, data: &[u8]) {
        if tag == TAG_ACK {
            self.acks += 1;
            return;
        }
        if tag == TAG_BARRIER {
            self.barriers += 1;
            return;
        }
        self.got += 1;
        let n = data.len().min(16);
        self.last[..n].copy_from_slice(&data[..n]);
        if !self.sink.is_empty() && data.len() > 16 {
            if self.sink_off + data.len() > self.sink.len() {
                self.sink_off = 0;
            }
            self.sink[self.sink_off..self.sink_off + data.len()].copy_from_slice(data);
            self.sink_off += data.len();
        }
    }
    fn rdma_complete(&mut self, _token: CompletionToken, result: Result<(), SendError>) {
        result.expect("CMA get failed");
        self.rdma += 1;
    }
    fn peer_failed(&mut self, peer: Rank, reason: &str) {
        panic!("peer {peer} failed: {reason}");
    }
}

struct Rank0or1 {
    btl: Box<dyn Btl>,
    ev: Ev,
    peer: Rank,
    generation: u64,
}

impl Rank0or1 {
    #[inline]
    fn send(&mut self, tag: u8, header: &[u8], payload: &[u8]) {
        loop {
            match self
                .btl
                .send(self.peer, tag, header, payload, SendHint::default())
            {
                Ok(()) => return,
                Err(SendError::WouldBlock) => {
                    self.btl.progress(&mut self.ev);
                }
                Err(e) => panic!("send: {e}"),
            }
        }
    }
    #[inline]
    fn wait_got(&mut self, n: u64) {
        while self.ev.got < n {
            self.btl.progress(&mut self.ev);
        }
    }
    fn wait_acks(&mut self, n: u64) {
        while self.ev.acks < n {
            self.btl.progress(&mut self.ev);
        }
    }
    /// Both ranks meet here. Counted by generation: the peer may leave the barrier and enter
    /// the next one before we have even seen its first message.
    fn barrier(&mut self) {
        self.generation += 1;
        self.send(TAG_BARRIER, &[], &[]);
        while self.ev.barriers < self.generation {
            self.btl.progress(&mut self.ev);
        }
    }
}

fn setup(rank: Rank, dir: &Path, job_id: &str) -> Rank0or1 {
    let job = JobInfo {
        rank,
        size: 2,
        job_id: job_id.to_owned(),
        secret: job_id.as_bytes().to_vec(),
        node_of: vec![0, 0],
        node_names: vec!["n0".into()],
    };
    let mut specs = Vec::new();
    SHM.register_params(&mut ParamRegistrar::new("btl", "shm", &mut specs));
    // Honour RMCA_MCA_btl_shm_* from the environment so sizes can be tuned from the shell.
    let env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("RMCA_MCA_btl_shm_"))
        .collect();
    let params = ParamStore::resolve(
        specs,
        &RawSources::from_parts(None, None, false, env, vec![]).unwrap(),
    )
    .unwrap_or_else(|e| panic!("parameters: {e:?}"));
    let mem = MemoryAccounting::new();
    let mut modex = FileModex {
        dir: dir.to_owned(),
        rank,
    };
    let mut btls = {
        let mut ctx = InitContext::new(&job, &params, &mem, &mut modex);
        SHM.init(&mut ctx).expect("init")
    };
    let mut btl = btls.pop().expect("one module");
    btl.add_procs(&job.procs(), &modex).expect("add_procs");
    Rank0or1 {
        btl,
        ev: Ev::default(),
        peer: 1 - rank,
        generation: 0,
    }
}

#[derive(Clone, Copy)]
struct Stat {
    median: f64,
    min: f64,
    max: f64,
}

fn stat(mut v: Vec<f64>) -> Stat {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Stat {
        median: v[v.len() / 2],
        min: v[0],
        max: v[v.len() - 1],
    }
}

fn json(s: Stat) -> String {
    format!(
        "{{\"median\":{:.4},\"min\":{:.4},\"max\":{:.4}}}",
        s.median, s.min, s.max
    )
}

fn run(rank: Rank, dir: &Path, job_id: &str, quick: bool) {
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if ncpu >= 2 {
        if let Err(e) = sys::bind_to_cpu(rank as usize) {
            eprintln!("rank {rank}: cannot bind to CPU {rank}: {e}");
        }
    }
    let mut r = setup(rank, dir, job_id);
    let runs = if quick { 3 } else { 7 };
    let scale: usize = std::env::args()
        .skip_while(|a| a != "--scale")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 10 } else { 1 });
    let max_send = r.btl.attributes().max_send_size;
    let mut results: Vec<(String, Stat, &str)> = Vec::new();
    r.barrier();

    let phase = |name: &str| {
        if rank == 0 {
            eprintln!("[shm_bench] {name}");
        }
    };
    phase("latency");
    // 1. Ping-pong latency (one way = round trip / 2).
    for &size in &[8usize, 56, 1024, 4096] {
        let iters = 100_000 / scale as u64;
        let payload = vec![1u8; size];
        let mut samples = Vec::new();
        for run_no in 0..=runs {
            // Read the count before the barrier: the peer may send right after it.
            let base = r.ev.got;
            r.barrier();
            let t0 = Instant::now();
            for i in 0..iters {
                if rank == 0 {
                    r.send(TAG, &[], &payload);
                    r.wait_got(base + i + 1);
                } else {
                    r.wait_got(base + i + 1);
                    r.send(TAG, &[], &payload);
                }
            }
            let us = t0.elapsed().as_secs_f64() * 1e6 / iters as f64 / 2.0;
            if run_no > 0 {
                samples.push(us); // run 0 warms up
            }
        }
        results.push((format!("latency_{size}B_us"), stat(samples), "us one way"));
    }

    phase("message rate");
    // 2. Message rate, 8 B fragments streamed, one ack at the end.
    {
        let n = 1_000_000 / scale as u64;
        let mut samples = Vec::new();
        for run_no in 0..=runs {
            // Read the count before the barrier: the peer may send right after it.
            let base = r.ev.got;
            r.barrier();
            let t0 = Instant::now();
            if rank == 0 {
                let acks = r.ev.acks;
                for _ in 0..n {
                    r.send(TAG, &[], &[0u8; 8]);
                }
                r.wait_acks(acks + 1);
            } else {
                r.wait_got(base + n);
                r.send(TAG_ACK, &[], &[]);
            }
            if run_no > 0 {
                samples.push(n as f64 / t0.elapsed().as_secs_f64() / 1e6);
            }
        }
        results.push((
            "msgrate_8B_Mps".into(),
            stat(samples),
            "million fragments/s",
        ));
    }

    for &msg in &[MIB, 8 * MIB] {
        let label = format!("{}MiB", msg / MIB);
        let msgs = ((200 * MIB / msg) / scale).max(2) as u64;
        phase(&format!("bandwidth {label} (rings)"));
        // 3. Through the rings: messages cut in max_send_size fragments; the receiver copies
        //    each fragment into its message buffer (copy-in/copy-out, as a PML would).
        {
            let frags_per_msg = msg.div_ceil(max_send) as u64;
            let data = vec![7u8; max_send];
            r.ev.sink = vec![0u8; msg];
            let mut samples = Vec::new();
            for run_no in 0..=runs {
                let base = r.ev.got;
                r.barrier();
                let t0 = Instant::now();
                if rank == 0 {
                    let acks = r.ev.acks;
                    for _ in 0..msgs {
                        let mut left = msg;
                        while left > 0 {
                            let n = left.min(max_send);
                            r.send(TAG, &[], &data[..n]);
                            left -= n;
                        }
                    }
                    r.wait_acks(acks + 1);
                } else {
                    r.wait_got(base + msgs * frags_per_msg);
                    r.send(TAG_ACK, &[], &[]);
                }
                if run_no > 0 {
                    samples.push((msgs as usize * msg) as f64 / t0.elapsed().as_secs_f64() / 1e9);
                }
            }
            assert!(
                rank == 0 || r.ev.sink.iter().all(|&b| b == 7),
                "copy path delivered wrong bytes"
            );
            r.ev.sink = Vec::new();
            results.push((
                format!("bw_copy_{label}_GBps"),
                stat(samples),
                "GB/s (rings, copy in + copy out)",
            ));
        }

        // 4. By rendezvous + CMA get, window of 16 messages (OSU bw style). Rank 0 sends.
        if r.btl.attributes().flags.contains(BtlFlags::GET) {
            phase(&format!("bandwidth {label} (CMA)"));
            let window = 16u64;
            let windows = msgs.div_ceil(window);
            let src = vec![3u8; msg];
            let mut dst = vec![0u8; msg];
            let reg = r
                .btl
                .register_mem(
                    lend(&src),
                    MemAccess {
                        remote_read: true,
                        remote_write: false,
                    },
                )
                .unwrap();
            let mut samples = Vec::new();
            for run_no in 0..=runs {
                let base = r.ev.got;
                r.barrier();
                let t0 = Instant::now();
                for w in 0..windows {
                    if rank == 0 {
                        for _ in 0..window {
                            r.send(TAG, &(src.as_ptr() as u64).to_le_bytes(), &reg.remote_key);
                        }
                        r.wait_got(base + (w + 1) * window); // FINs
                    } else {
                        for i in 0..window {
                            r.wait_got(base + w * window + i + 1);
                            let addr = u64::from_le_bytes(r.ev.last[..8].try_into().unwrap());
                            let key = r.ev.last[8..16].to_vec();
                            let seg = RemoteSegment {
                                addr,
                                len: msg,
                                remote_key: key,
                            };
                            let before = r.ev.rdma;
                            r.btl
                                .get(0, lend_mut(&mut dst), &seg, CompletionToken(i))
                                .unwrap();
                            while r.ev.rdma == before {
                                r.btl.progress(&mut r.ev);
                            }
                            r.send(TAG, &[], &[0u8; 8]); // FIN
                        }
                    }
                }
                if run_no > 0 {
                    samples.push(
                        (windows * window) as f64 * msg as f64 / t0.elapsed().as_secs_f64() / 1e9,
                    );
                }
            }
            assert!(
                rank == 0 || dst.iter().all(|&b| b == 3),
                "CMA delivered wrong bytes"
            );
            results.push((
                format!("bw_cma_get_{label}_GBps"),
                stat(samples),
                "GB/s (RTS + CMA get + FIN)",
            ));
        } else if rank == 0 {
            println!("CMA not permitted here: no single-copy figure");
        }
    }
    r.barrier();

    if rank == 0 {
        println!(
            "btl-shm raw BTL, 2 processes, {} runs each (median [min..max])",
            runs
        );
        for (name, s, unit) in &results {
            println!(
                "  {name:<24} {:>9.4} [{:.4}..{:.4}] {unit}",
                s.median, s.min, s.max
            );
        }
        let fields: Vec<String> = results
            .iter()
            .map(|(n, s, _)| format!("\"{n}\":{}", json(*s)))
            .collect();
        println!(
            "{{\"bench\":\"btl-shm\",\"runs\":{runs},{}}}",
            fields.join(",")
        );
    }
    r.btl.finalize();
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    if std::env::var_os(ROLE_ENV).is_some() {
        let dir = PathBuf::from(std::env::var(DIR_ENV).unwrap());
        run(1, &dir, &std::env::var(JOB_ENV).unwrap(), quick);
        return;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let job_id = format!("b{}x{nanos}", std::process::id());
    let dir = std::env::temp_dir().join(format!("rmca-shm-bench-{job_id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(std::env::args().skip(1))
        .env(ROLE_ENV, "1")
        .env(DIR_ENV, &dir)
        .env(JOB_ENV, &job_id)
        .spawn()
        .unwrap();
    run(0, &dir, &job_id, quick);
    let status = child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "rank 1 failed: {status}");
}
