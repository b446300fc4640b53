//! Ping-pong latency of btl-ud (soft provider by default) against raw UDP loopback sockets,
//! measured in the same run, two threads busy-polling. Prints a table and one JSON line.
//!
//! `cargo run --release -p rmca-btl-ud --example ud_pingpong -- [iterations] [runs]`
//! Set `RMCA_MCA_btl_ud_provider=rdma` (with `--features rdma`) to measure real verbs.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use rmca_btl_ud::UD;
use rmca_framework::btl::{Btl, BtlComponent, BtlEvents, CompletionToken, SendError, SendHint};
use rmca_framework::component::{Component, InitContext};
use rmca_framework::job::JobInfo;
use rmca_framework::memory::MemoryAccounting;
use rmca_framework::modex::{LocalModex, ModexWrite};
use rmca_framework::params::{ParamRegistrar, ParamStore, RawSources};

#[derive(Default)]
struct Count(usize);
impl BtlEvents for Count {
    fn recv(&mut self, _peer: u32, _tag: u8, _data: &[u8]) {
        self.0 += 1;
    }
    fn rdma_complete(&mut self, _t: CompletionToken, _r: Result<(), SendError>) {}
    fn peer_failed(&mut self, _peer: u32, _reason: &str) {}
}

fn job(rank: u32) -> JobInfo {
    JobInfo::single_node(rank, 2, &format!("bench{}", std::process::id()))
}

fn modules() -> (Box<dyn Btl>, Box<dyn Btl>) {
    let mut specs = Vec::new();
    UD.register_params(&mut ParamRegistrar::new("btl", "ud", &mut specs));
    let raw = RawSources::from_parts(None, None, false, std::env::vars().collect(), vec![])
        .expect("params");
    let params = ParamStore::resolve(specs, &raw).expect("btl_ud parameters");
    let modex = LocalModex::new();
    let mem = MemoryAccounting::new();
    let mut v: Vec<Box<dyn Btl>> = (0..2)
        .map(|r| {
            let j = job(r);
            let mut w = modex.writer(r);
            let mut ctx = InitContext::new(&j, &params, &mem, &mut w as &mut dyn ModexWrite);
            UD.init(&mut ctx).expect("btl-ud init").remove(0)
        })
        .collect();
    for (r, b) in v.iter_mut().enumerate() {
        b.add_procs(&job(r as u32).procs(), &modex)
            .expect("add_procs");
        // As the BML does when it routes the peer over ud: the pools take their full size.
        b.peers_routed(&[0, 1]);
    }
    let b = v.pop().expect("two");
    (v.pop().expect("two"), b)
}

/// One side of a ping-pong: returns round-trip times (only on the initiator) and losses.
fn btl_side(mut b: Box<dyn Btl>, me: u32, size: usize, iters: usize) -> (Vec<f64>, usize) {
    let peer = 1 - me;
    let payload = vec![0x5a; size];
    let mut ev = Count::default();
    let mut rtts = Vec::with_capacity(iters);
    let mut lost = 0;
    for _ in 0..iters {
        if me == 0 {
            let t = Instant::now();
            b.send(peer, 0x40, &[], &payload, SendHint::default())
                .expect("send");
            let want = ev.0 + 1;
            while ev.0 < want {
                b.progress(&mut ev);
                if t.elapsed() > Duration::from_secs(1) {
                    // Lost (UD is unreliable) or this thread was starved of CPU for a second:
                    // count and move on; the drop counters printed at the end tell which.
                    lost += 1;
                    break;
                }
            }
            rtts.push(t.elapsed().as_secs_f64() * 1e6);
        } else {
            let want = ev.0 + 1;
            let t = Instant::now();
            while ev.0 < want && t.elapsed() < Duration::from_secs(2) {
                b.progress(&mut ev);
            }
            b.send(peer, 0x40, &[], &payload, SendHint::default())
                .expect("send");
        }
    }
    // Let the last reply leave.
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(5) {
        b.progress(&mut ev);
    }
    let c = b.counters();
    let drops: Vec<(String, u64)> = c
        .into_iter()
        .filter(|(k, v)| k.starts_with("drops") && *v > 0)
        .collect();
    if !drops.is_empty() {
        eprintln!("rank {me}: {drops:?}");
    }
    (rtts, lost)
}

fn udp_side(sock: UdpSocket, me: u32, size: usize, iters: usize) -> Vec<f64> {
    sock.set_nonblocking(true).expect("nonblocking");
    let buf = vec![0x5a; size.max(1)];
    let mut rx = vec![0u8; 65536];
    let mut rtts = Vec::with_capacity(iters);
    let recv = |rx: &mut [u8]| {
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(200) {
            if sock.recv(rx).is_ok() {
                return true;
            }
        }
        false
    };
    for _ in 0..iters {
        if me == 0 {
            let t = Instant::now();
            sock.send(&buf).expect("udp send");
            recv(&mut rx);
            rtts.push(t.elapsed().as_secs_f64() * 1e6);
        } else {
            recv(&mut rx);
            sock.send(&buf).expect("udp send");
        }
    }
    rtts
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let iters: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let runs: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
    let probe = modules();
    let max = probe.0.attributes().max_send_size;
    drop(probe);
    let sizes: Vec<usize> = [8, 256, 1024, max]
        .into_iter()
        .filter(|&s| s <= max)
        .collect();
    let mut json = Vec::new();
    println!(
        "{:>6} {:>14} {:>14} {:>8} {:>6}",
        "bytes", "btl-ud us", "udp us", "ratio", "timeouts"
    );
    for &size in &sizes {
        let mut ud_runs = Vec::new();
        let mut udp_runs = Vec::new();
        let mut lost_total = 0;
        for _ in 0..runs {
            let (a, b) = modules();
            let hb = std::thread::spawn(move || btl_side(b, 1, size, iters));
            let (rtts, lost) = btl_side(a, 0, size, iters);
            hb.join().expect("peer thread");
            lost_total += lost;
            ud_runs.push(median(rtts) / 2.0);

            let s0 = UdpSocket::bind("127.0.0.1:0").expect("bind");
            let s1 = UdpSocket::bind("127.0.0.1:0").expect("bind");
            s0.connect(s1.local_addr().expect("addr")).expect("connect");
            s1.connect(s0.local_addr().expect("addr")).expect("connect");
            let hu = std::thread::spawn(move || udp_side(s1, 1, size, iters));
            let rtts = udp_side(s0, 0, size, iters);
            hu.join().expect("peer thread");
            udp_runs.push(median(rtts) / 2.0);
        }
        let (ud, udp) = (median(ud_runs.clone()), median(udp_runs.clone()));
        let spread = |v: &[f64]| {
            let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = v.iter().cloned().fold(0.0, f64::max);
            (lo, hi)
        };
        println!(
            "{size:>6} {ud:>14.2} {udp:>14.2} {:>8.2} {lost_total:>8}",
            ud / udp
        );
        let (ulo, uhi) = spread(&ud_runs);
        let (plo, phi) = spread(&udp_runs);
        json.push(format!(
            "{{\"bytes\":{size},\"btl_ud_one_way_us\":{ud:.3},\"btl_ud_min\":{ulo:.3},\"btl_ud_max\":{uhi:.3},\"udp_one_way_us\":{udp:.3},\"udp_min\":{plo:.3},\"udp_max\":{phi:.3},\"ratio\":{:.3},\"timeouts\":{lost_total}}}",
            ud / udp
        ));
    }
    let provider = std::env::var("RMCA_MCA_btl_ud_provider").unwrap_or_else(|_| "auto".into());
    println!(
        "{{\"bench\":\"btl-ud pingpong\",\"provider\":\"{provider}\",\"mtu\":{},\"iterations\":{iters},\"runs\":{runs},\"results\":[{}]}}",
        max + 4,
        json.join(",")
    );
}
