//! Ping-pong latency and streaming bandwidth of btl-tcp between two threads over loopback,
//! measured in the same run as the same exchange over plain `std::net::TcpStream`s (busy-polled,
//! `TCP_NODELAY`, the same 5-byte frame header), and printed as ratios.
//!
//! ```text
//! cargo run --release -p rmca-btl-tcp --example tcp_pingpong -- [--iters N] [--runs R] [--json FILE]
//! ```
//!
//! Figures move with where the host places the threads: compare the ratio, quote medians with
//! their spread (min..max over runs).

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::Instant;

use rmca_btl_tcp::TCP;
use rmca_framework::btl::{Btl, BtlComponent, BtlEvents, CompletionToken, SendError, SendHint};
use rmca_framework::component::{Component, InitContext};
use rmca_framework::job::JobInfo;
use rmca_framework::memory::MemoryAccounting;
use rmca_framework::modex::LocalModex;
use rmca_framework::params::{ParamRegistrar, ParamStore, RawSources};

const TAG: u8 = 0x40;
const STREAM_FRAG: usize = 64 * 1024;

#[derive(Default)]
struct Count {
    n: usize,
    bytes: usize,
}

impl BtlEvents for Count {
    fn recv(&mut self, _peer: u32, _tag: u8, data: &[u8]) {
        self.n += 1;
        self.bytes += data.len();
    }
    fn rdma_complete(&mut self, _t: CompletionToken, _r: Result<(), SendError>) {}
    fn peer_failed(&mut self, peer: u32, reason: &str) {
        panic!("peer {peer} failed: {reason}");
    }
}

fn pair() -> (Box<dyn Btl>, Box<dyn Btl>) {
    let mut specs = Vec::new();
    TCP.register_params(&mut ParamRegistrar::new("btl", "tcp", &mut specs));
    let params = ParamStore::resolve(specs, &RawSources::default()).expect("params");
    let modex = LocalModex::new();
    let mem = MemoryAccounting::new();
    let jobs: Vec<JobInfo> = (0..2)
        .map(|rank| JobInfo {
            rank,
            size: 2,
            job_id: "bench".into(),
            secret: b"bench".to_vec(),
            node_of: vec![0, 0],
            node_names: vec!["localhost".into()],
        })
        .collect();
    let mut mods: Vec<Box<dyn Btl>> = jobs
        .iter()
        .map(|j| {
            let mut w = modex.writer(j.rank);
            let mut ctx = InitContext::new(j, &params, &mem, &mut w);
            TCP.init(&mut ctx).expect("init").pop().expect("one module")
        })
        .collect();
    for (m, j) in mods.iter_mut().zip(&jobs) {
        m.add_procs(&j.procs(), &modex).expect("add_procs");
    }
    let b = mods.pop().unwrap();
    let a = mods.pop().unwrap();
    (a, b)
}

fn send(m: &mut dyn Btl, peer: u32, data: &[u8]) {
    loop {
        match m.send(peer, TAG, &[], data, SendHint::default()) {
            Ok(()) => return,
            Err(SendError::WouldBlock) => {
                m.progress(&mut Count::default());
            }
            Err(e) => panic!("send: {e}"),
        }
    }
}

fn wait(m: &mut dyn Btl, c: &mut Count, n: usize) {
    while c.n < n {
        m.progress(c);
    }
}

/// One-way latency (ns) of `iters` round trips of `size` bytes through btl-tcp.
fn rmca_latency(size: usize, iters: usize) -> f64 {
    let (mut a, mut b) = pair();
    let data = vec![1u8; size];
    let total = iters + iters / 10;
    let echo = thread::spawn(move || {
        let data = vec![2u8; size];
        let mut c = Count::default();
        for i in 0..total {
            wait(b.as_mut(), &mut c, i + 1);
            send(b.as_mut(), 0, &data);
        }
        // Keep progressing until rank 0 is done, so the last reply leaves.
        for _ in 0..1000 {
            b.progress(&mut c);
        }
        b.finalize();
    });
    let mut c = Count::default();
    let mut start = Instant::now();
    for i in 0..total {
        if i == iters / 10 {
            start = Instant::now(); // after warm-up
        }
        send(a.as_mut(), 1, &data);
        wait(a.as_mut(), &mut c, i + 1);
    }
    let ns = start.elapsed().as_nanos() as f64 / (2 * iters) as f64;
    a.finalize();
    echo.join().expect("echo thread");
    ns
}

/// Bandwidth (GB/s) of `frags` fragments of 64 KiB streamed one way, acknowledged once.
fn rmca_bandwidth(frags: usize) -> f64 {
    let (mut a, mut b) = pair();
    let sink = thread::spawn(move || {
        let mut c = Count::default();
        wait(b.as_mut(), &mut c, frags);
        send(b.as_mut(), 0, &[0]);
        for _ in 0..1000 {
            b.progress(&mut c);
        }
        b.finalize();
    });
    let data = vec![3u8; STREAM_FRAG];
    let start = Instant::now();
    for _ in 0..frags {
        send(a.as_mut(), 1, &data);
    }
    let mut c = Count::default();
    wait(a.as_mut(), &mut c, 1);
    let secs = start.elapsed().as_secs_f64();
    a.finalize();
    sink.join().expect("sink thread");
    (frags * STREAM_FRAG) as f64 / secs / 1e9
}

fn raw_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    for s in [&a, &b] {
        s.set_nodelay(true).unwrap();
        s.set_nonblocking(true).unwrap();
    }
    (a, b)
}

fn raw_write(s: &mut TcpStream, mut buf: &[u8]) {
    while !buf.is_empty() {
        match s.write(buf) {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("write: {e}"),
        }
    }
}

fn raw_read(s: &mut TcpStream, mut buf: &mut [u8]) {
    while !buf.is_empty() {
        match s.read(buf) {
            Ok(0) => panic!("eof"),
            Ok(n) => buf = &mut buf[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// A frame like btl-tcp's: 5-byte header then the payload, written in one call.
fn raw_frame(size: usize) -> Vec<u8> {
    let mut f = vec![TAG];
    f.extend_from_slice(&(size as u32).to_le_bytes());
    f.resize(5 + size, 1);
    f
}

fn raw_latency(size: usize, iters: usize) -> f64 {
    let (mut a, mut b) = raw_pair();
    let total = iters + iters / 10;
    let echo = thread::spawn(move || {
        let mut buf = raw_frame(size);
        for _ in 0..total {
            raw_read(&mut b, &mut buf);
            raw_write(&mut b, &buf);
        }
    });
    let frame = raw_frame(size);
    let mut buf = frame.clone();
    let mut start = Instant::now();
    for i in 0..total {
        if i == iters / 10 {
            start = Instant::now();
        }
        raw_write(&mut a, &frame);
        raw_read(&mut a, &mut buf);
    }
    let ns = start.elapsed().as_nanos() as f64 / (2 * iters) as f64;
    echo.join().expect("echo thread");
    ns
}

fn raw_bandwidth(frags: usize) -> f64 {
    let (mut a, mut b) = raw_pair();
    let sink = thread::spawn(move || {
        let mut buf = raw_frame(STREAM_FRAG);
        for _ in 0..frags {
            raw_read(&mut b, &mut buf);
        }
        raw_write(&mut b, &[0]);
    });
    let frame = raw_frame(STREAM_FRAG);
    let start = Instant::now();
    for _ in 0..frags {
        raw_write(&mut a, &frame);
    }
    raw_read(&mut a, &mut [0]);
    let secs = start.elapsed().as_secs_f64();
    sink.join().expect("sink thread");
    (frags * STREAM_FRAG) as f64 / secs / 1e9
}

/// Median, min and max.
fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let mut iters = 2000usize;
    let mut runs = 5usize;
    let mut json_path = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--iters" => iters = val().parse().expect("--iters N"),
            "--runs" => runs = val().parse().expect("--runs R"),
            "--json" => json_path = Some(val()),
            other => {
                eprintln!("unknown argument {other}; usage: tcp_pingpong [--iters N] [--runs R] [--json FILE]");
                std::process::exit(2);
            }
        }
    }
    let runs = runs.max(1);
    let frags = 2000usize;
    let mut rows = Vec::new();
    println!("btl-tcp vs raw TCP loopback, {runs} runs, medians (min..max)");
    println!(
        "{:<22} {:>22} {:>22} {:>8}",
        "measure", "btl-tcp", "raw tcp", "ratio"
    );
    for size in [8usize, 1024, 65536] {
        let mut r = Vec::new();
        let mut p = Vec::new();
        for _ in 0..runs {
            // Alternate so that drift of the host affects both alike.
            r.push(rmca_latency(size, iters) / 1000.0);
            p.push(raw_latency(size, iters) / 1000.0);
        }
        rows.push((format!("latency_{size}B_us"), stats(r), stats(p)));
    }
    let mut r = Vec::new();
    let mut p = Vec::new();
    for _ in 0..runs {
        r.push(rmca_bandwidth(frags));
        p.push(raw_bandwidth(frags));
    }
    rows.push(("bandwidth_64KiB_GBps".to_string(), stats(r), stats(p)));
    let mut json = Vec::new();
    for (name, (rm, rlo, rhi), (pm, plo, phi)) in &rows {
        println!(
            "{name:<22} {:>22} {:>22} {:>8.2}",
            format!("{rm:.2} ({rlo:.2}..{rhi:.2})"),
            format!("{pm:.2} ({plo:.2}..{phi:.2})"),
            rm / pm
        );
        json.push(format!(
            "{{\"measure\":\"{name}\",\"btl_tcp\":{{\"median\":{rm},\"min\":{rlo},\"max\":{rhi}}},\"raw_tcp\":{{\"median\":{pm},\"min\":{plo},\"max\":{phi}}},\"ratio\":{}}}",
            rm / pm
        ));
    }
    let doc = format!(
        "{{\"bench\":\"tcp_pingpong\",\"iters\":{iters},\"runs\":{runs},\"results\":[{}]}}",
        json.join(",")
    );
    println!("{doc}");
    if let Some(p) = json_path {
        std::fs::write(&p, &doc).unwrap_or_else(|e| panic!("writing {p}: {e}"));
    }
}
