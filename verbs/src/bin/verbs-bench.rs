//! verbs-bench: soft-provider RC and UD latency and bandwidth next to raw TCP/UDP loopback
//! measured in the same run (the physical limit of this machine), as ratios.
//!
//! Both ends run in this process on two threads that busy-poll (the verbs CQs, or non-blocking
//! sockets for the raw peers), so the comparison is like for like. Each figure is the median of
//! `--runs` repetitions, printed with its min..max spread.
//!
//! usage: verbs-bench [--runs N] [--iters N] [--mib N] [--bind ADDR] [--json]

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use rmca_verbs::*;

struct Opts {
    runs: usize,
    iters: usize,
    mib: usize,
    bind: IpAddr,
    json: bool,
}

fn parse_args() -> std::result::Result<Opts, String> {
    let mut o = Opts {
        runs: 5,
        iters: 20_000,
        mib: 256,
        bind: "127.0.0.1".parse().expect("literal"),
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--runs" => o.runs = val("--runs")?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--iters" => {
                o.iters = val("--iters")?
                    .parse()
                    .map_err(|e| format!("--iters: {e}"))?
            }
            "--mib" => o.mib = val("--mib")?.parse().map_err(|e| format!("--mib: {e}"))?,
            "--bind" => o.bind = val("--bind")?.parse().map_err(|e| format!("--bind: {e}"))?,
            "--json" => o.json = true,
            "-h" | "--help" => {
                return Err(
                    "usage: verbs-bench [--runs N] [--iters N] [--mib N] [--bind ADDR] [--json]"
                        .into(),
                )
            }
            other => {
                return Err(format!(
                    "unknown argument {other} (valid: --runs --iters --mib --bind --json)"
                ))
            }
        }
    }
    if o.runs == 0 || o.iters == 0 || o.mib == 0 {
        return Err("--runs, --iters and --mib must be positive".into());
    }
    Ok(o)
}

const LAT_SIZE: usize = 8;
const RC_BW_MSG: usize = 1 << 20;
const UD_MSG: usize = 2048;

// ---------- raw sockets ----------

fn udp_pingpong(bind: IpAddr, iters: usize) -> f64 {
    let a = UdpSocket::bind((bind, 0)).unwrap();
    let b = UdpSocket::bind((bind, 0)).unwrap();
    a.connect(b.local_addr().unwrap()).unwrap();
    b.connect(a.local_addr().unwrap()).unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    let t = thread::spawn(move || {
        let mut buf = [0u8; 64];
        for _ in 0..iters {
            spin_recv_udp(&b, &mut buf);
            b.send(&buf[..LAT_SIZE]).unwrap();
        }
    });
    let mut buf = [0u8; 64];
    let t0 = Instant::now();
    for _ in 0..iters {
        a.send(&buf[..LAT_SIZE]).unwrap();
        spin_recv_udp(&a, &mut buf);
    }
    let el = t0.elapsed();
    t.join().unwrap();
    el.as_secs_f64() * 1e6 / iters as f64 / 2.0
}

fn spin_recv_udp(s: &UdpSocket, buf: &mut [u8]) -> usize {
    loop {
        match s.recv(buf) {
            Ok(n) => return n,
            Err(ref e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("udp recv: {e}"),
        }
    }
}

fn tcp_pair(bind: IpAddr) -> (TcpStream, TcpStream) {
    let l = TcpListener::bind((bind, 0)).unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    for s in [&a, &b] {
        s.set_nodelay(true).unwrap();
        s.set_nonblocking(true).unwrap();
    }
    (a, b)
}

fn spin_read_exact(s: &mut TcpStream, buf: &mut [u8]) {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => panic!("tcp closed"),
            Ok(n) => got += n,
            Err(ref e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("tcp read: {e}"),
        }
    }
}

fn spin_write_all(s: &mut TcpStream, buf: &[u8]) {
    let mut put = 0;
    while put < buf.len() {
        match s.write(&buf[put..]) {
            Ok(n) => put += n,
            Err(ref e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("tcp write: {e}"),
        }
    }
}

fn tcp_pingpong(bind: IpAddr, iters: usize) -> f64 {
    let (mut a, mut b) = tcp_pair(bind);
    let t = thread::spawn(move || {
        let mut buf = [0u8; LAT_SIZE];
        for _ in 0..iters {
            spin_read_exact(&mut b, &mut buf);
            spin_write_all(&mut b, &buf);
        }
    });
    let mut buf = [0u8; LAT_SIZE];
    let t0 = Instant::now();
    for _ in 0..iters {
        spin_write_all(&mut a, &buf);
        spin_read_exact(&mut a, &mut buf);
    }
    let el = t0.elapsed();
    t.join().unwrap();
    el.as_secs_f64() * 1e6 / iters as f64 / 2.0
}

fn tcp_bandwidth(bind: IpAddr, mib: usize) -> f64 {
    let (mut a, mut b) = tcp_pair(bind);
    let total = mib * (1 << 20);
    let t = thread::spawn(move || {
        let mut buf = vec![0u8; RC_BW_MSG];
        let mut got = 0;
        while got < total {
            spin_read_exact(&mut b, &mut buf);
            got += buf.len();
        }
        spin_write_all(&mut b, &[1]);
    });
    let buf = vec![7u8; RC_BW_MSG];
    let t0 = Instant::now();
    for _ in 0..total / RC_BW_MSG {
        spin_write_all(&mut a, &buf);
    }
    spin_read_exact(&mut a, &mut [0u8; 1]);
    let el = t0.elapsed();
    t.join().unwrap();
    total as f64 / el.as_secs_f64() / 1e9
}

/// Sender-side pacing shared by the two datagram bandwidth tests: at most WINDOW datagrams
/// beyond what the receiver reported (through memory, not the network); after a 1 ms stall
/// the missing ones are deemed lost and the window moves on.
const WINDOW: u64 = 64;

struct Pace {
    delivered: std::sync::atomic::AtomicU64,
    done: std::sync::atomic::AtomicBool,
}

fn pace_wait(p: &Pace, sent: u64, base: &mut u64, mut progress: impl FnMut()) {
    use std::sync::atomic::Ordering::Relaxed;
    let t = Instant::now();
    while sent - (*base).max(p.delivered.load(Relaxed)) >= WINDOW {
        progress();
        if t.elapsed() > Duration::from_millis(1) {
            *base = sent;
            return;
        }
    }
}

/// Raw UDP: UD_MSG-byte datagrams, windowed; delivered bytes / time.
fn udp_bandwidth(bind: IpAddr, mib: usize) -> f64 {
    use std::sync::atomic::Ordering::Relaxed;
    let a = UdpSocket::bind((bind, 0)).unwrap();
    let b = UdpSocket::bind((bind, 0)).unwrap();
    a.connect(b.local_addr().unwrap()).unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    let n = (mib * (1 << 20) / UD_MSG) as u64;
    let pace = std::sync::Arc::new(Pace {
        delivered: 0.into(),
        done: false.into(),
    });
    let p2 = pace.clone();
    let t = thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        let mut bytes = 0usize;
        while !p2.done.load(Relaxed) {
            if let Ok(k) = b.recv(&mut buf) {
                bytes += k;
                p2.delivered.fetch_add(1, Relaxed);
            }
        }
        bytes
    });
    let buf = vec![7u8; UD_MSG];
    let mut base = 0;
    let t0 = Instant::now();
    for sent in 0..n {
        pace_wait(&pace, sent, &mut base, || {});
        // Retry while the socket buffer is full; any other error is a lost datagram.
        while let Err(e) = a.send(&buf) {
            if e.kind() != ErrorKind::WouldBlock {
                break;
            }
        }
    }
    pace_wait(&pace, n + WINDOW - 1, &mut base, || {});
    let el = t0.elapsed();
    pace.done.store(true, Relaxed);
    let bytes = t.join().unwrap();
    bytes as f64 / el.as_secs_f64() / 1e9
}

// ---------- soft verbs ----------

const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);

struct End {
    _ctx: Context,
    _pd: Pd,
    cq: Cq,
    mr: Mr,
    qp: Qp,
}

fn end(bind: IpAddr, t: QpType, depth: u32) -> End {
    let ctx = Context::open(&ProviderConfig {
        soft: SoftConfig {
            bind_addr: bind,
            ..Default::default()
        },
        job_secret: b"verbs-bench".to_vec(),
        ..Default::default()
    })
    .unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(depth * 4).unwrap();
    let mr = pd.register(4 * RC_BW_MSG + 1024 * 4096, ACCESS).unwrap();
    let qp = pd
        .create_qp(QpInit {
            qp_type: t,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            caps: QpCaps {
                max_send_wr: depth,
                max_recv_wr: depth,
                ..Default::default()
            },
            qkey: 1,
        })
        .unwrap();
    End {
        _ctx: ctx,
        _pd: pd,
        cq,
        mr,
        qp,
    }
}

/// Two connected soft RC endpoints.
fn rc_ends(bind: IpAddr, depth: u32) -> (End, End) {
    let a = end(bind, QpType::Rc, depth);
    let b = end(bind, QpType::Rc, depth);
    let (aa, ba) = (a.qp.address(), b.qp.address());
    let p = RcParams::default();
    // The connecting side blocks in RTR until the other context's agent accepts.
    a.qp.connect(Some(&ba), &p).unwrap();
    b.qp.connect(Some(&aa), &p).unwrap();
    (a, b)
}

/// Busy-polls until a completion of kind `want`; completions of other kinds are dropped.
fn wait_one(cq: &Cq, want: WcOpcode) -> Wc {
    let mut w = [Wc::EMPTY; 1];
    loop {
        if cq.poll(&mut w).unwrap() == 1 {
            assert!(w[0].is_ok(), "{:?}", w[0]);
            if w[0].opcode == want {
                return w[0];
            }
        } else {
            std::hint::spin_loop();
        }
    }
}

fn post_recv_slot(e: &End, slot: usize, len: u32) {
    e.qp.post_recv(&RecvWr {
        wr_id: slot as u64,
        sges: &[e.mr.sge(slot * 4096, len).unwrap()],
    })
    .unwrap();
}

fn verbs_pingpong(a: End, b: End, iters: usize, ud: bool) -> f64 {
    let recv_len = if ud {
        (LAT_SIZE + UD_GRH_LEN) as u32
    } else {
        LAT_SIZE as u32
    };
    let (ah_ab, ah_ba) = if ud {
        a.qp.connect(None, &RcParams::default()).unwrap();
        b.qp.connect(None, &RcParams::default()).unwrap();
        (
            Some(a._pd.create_ah(&b.qp.address()).unwrap()),
            Some(b._pd.create_ah(&a.qp.address()).unwrap()),
        )
    } else {
        (None, None)
    };
    for i in 0..4 {
        post_recv_slot(&a, i, recv_len);
        post_recv_slot(&b, i, recv_len);
    }
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        for i in 0..iters {
            let w = wait_one(&b.cq, WcOpcode::Recv);
            post_recv_slot(&b, w.wr_id as usize, recv_len);
            // Every 16th send is signalled so slots are reclaimed; wait_one skips those
            // send completions while it looks for the next receive.
            send_small(&b, ah_ba.as_ref(), i as u64 % 16 == 15);
        }
        tx.send(b).unwrap();
    });
    let t0 = Instant::now();
    for i in 0..iters {
        send_small(&a, ah_ab.as_ref(), i as u64 % 16 == 15);
        let w = wait_one(&a.cq, WcOpcode::Recv);
        post_recv_slot(&a, w.wr_id as usize, recv_len);
    }
    let el = t0.elapsed();
    t.join().unwrap();
    drop(rx.recv());
    el.as_secs_f64() * 1e6 / iters as f64 / 2.0
}

fn send_small(e: &End, ah: Option<&Ah>, signaled: bool) {
    let sge = e.mr.sge(512 * 4096, LAT_SIZE as u32).unwrap();
    let wr = SendWr {
        wr_id: 0,
        op: SendOp::Send,
        sges: &[sge],
        signaled,
        inline: true,
        ud: ah.map(|ah| UdDest {
            ah,
            remote_qpn: ah.remote_qpn(),
            remote_qkey: 1,
        }),
    };
    loop {
        match e.qp.post_send(&wr) {
            Ok(()) => return,
            Err(Error::QueueFull { .. }) => {
                let _ = e.cq.poll(&mut []);
            }
            Err(err) => panic!("{err}"),
        }
    }
}

/// RC: 1 MiB sends with 4 outstanding, receiver reposts; delivered bytes / time.
fn rc_bandwidth(bind: IpAddr, mib: usize) -> f64 {
    let (a, b) = rc_ends(bind, 64);
    let n = mib * (1 << 20) / RC_BW_MSG;
    let window = 4usize;
    let t = thread::spawn(move || {
        let post = |slot: usize| {
            b.qp.post_recv(&RecvWr {
                wr_id: slot as u64,
                sges: &[b.mr.sge(slot * RC_BW_MSG, RC_BW_MSG as u32).unwrap()],
            })
            .unwrap()
        };
        for s in 0..window {
            post(s);
        }
        for _ in 0..n {
            let w = wait_one(&b.cq, WcOpcode::Recv);
            post(w.wr_id as usize);
        }
        b
    });
    let sge = a.mr.sge(0, RC_BW_MSG as u32).unwrap();
    let t0 = Instant::now();
    let mut inflight = 0;
    for _ in 0..n {
        if inflight == window {
            wait_one(&a.cq, WcOpcode::Send);
            inflight -= 1;
        }
        a.qp.post_send(&SendWr::send(0, &[sge])).unwrap();
        inflight += 1;
    }
    while inflight > 0 {
        wait_one(&a.cq, WcOpcode::Send);
        inflight -= 1;
    }
    let _b = t.join().unwrap();
    let el = t0.elapsed();
    (n * RC_BW_MSG) as f64 / el.as_secs_f64() / 1e9
}

/// Soft UD: like [`udp_bandwidth`], 256 receive WQEs kept posted.
fn ud_bandwidth(bind: IpAddr, mib: usize) -> f64 {
    use std::sync::atomic::Ordering::Relaxed;
    let a = end(bind, QpType::Ud, 512);
    let b = end(bind, QpType::Ud, 512);
    a.qp.connect(None, &RcParams::default()).unwrap();
    b.qp.connect(None, &RcParams::default()).unwrap();
    let ah = a._pd.create_ah(&b.qp.address()).unwrap();
    let n = (mib * (1 << 20) / UD_MSG) as u64;
    let rlen = (UD_MSG + UD_GRH_LEN) as u32;
    for s in 0..256 {
        post_recv_slot(&b, s, rlen);
    }
    let pace = std::sync::Arc::new(Pace {
        delivered: 0.into(),
        done: false.into(),
    });
    let p2 = pace.clone();
    let t = thread::spawn(move || {
        let mut bytes = 0usize;
        let mut wc = [Wc::EMPTY; 32];
        while !p2.done.load(Relaxed) {
            let k = b.cq.poll(&mut wc).unwrap();
            for w in &wc[..k] {
                bytes += w.byte_len as usize - UD_GRH_LEN;
                post_recv_slot(&b, w.wr_id as usize, rlen);
            }
            p2.delivered.fetch_add(k as u64, Relaxed);
        }
        (bytes, b)
    });
    let sge = a.mr.sge(600 * 4096, UD_MSG as u32).unwrap();
    let mut base = 0;
    let mut wc = [Wc::EMPTY; 32];
    let t0 = Instant::now();
    for sent in 0..n {
        pace_wait(&pace, sent, &mut base, || {
            let _ = a.cq.poll(&mut wc);
        });
        let wr = SendWr {
            wr_id: sent,
            op: SendOp::Send,
            sges: &[sge],
            signaled: sent % 32 == 31,
            inline: false,
            ud: Some(UdDest {
                ah: &ah,
                remote_qpn: ah.remote_qpn(),
                remote_qkey: 1,
            }),
        };
        loop {
            match a.qp.post_send(&wr) {
                Ok(()) => break,
                Err(Error::QueueFull { .. }) => {
                    let _ = a.cq.poll(&mut wc);
                }
                Err(e) => panic!("{e}"),
            }
        }
        if sent % 32 == 31 {
            let _ = a.cq.poll(&mut wc);
        }
    }
    pace_wait(&pace, n + WINDOW - 1, &mut base, || {
        let _ = a.cq.poll(&mut wc);
    });
    let el = t0.elapsed();
    pace.done.store(true, Relaxed);
    let (bytes, _b) = t.join().unwrap();
    bytes as f64 / el.as_secs_f64() / 1e9
}

// ---------- reporting ----------

struct Stat {
    median: f64,
    min: f64,
    max: f64,
}

fn measure(runs: usize, mut f: impl FnMut() -> f64) -> Stat {
    let mut v: Vec<f64> = (0..runs).map(|_| f()).collect();
    v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    Stat {
        median: v[v.len() / 2],
        min: v[0],
        max: v[v.len() - 1],
    }
}

fn main() {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let (bind, iters, mib, runs) = (o.bind, o.iters, o.mib, o.runs);
    let udp_lat = measure(runs, || udp_pingpong(bind, iters));
    let ud_lat = measure(runs, || {
        verbs_pingpong(
            end(bind, QpType::Ud, 64),
            end(bind, QpType::Ud, 64),
            iters,
            true,
        )
    });
    let tcp_lat = measure(runs, || tcp_pingpong(bind, iters));
    let rc_lat = measure(runs, || {
        let (a, b) = rc_ends(bind, 64);
        verbs_pingpong(a, b, iters, false)
    });
    let tcp_bw = measure(runs, || tcp_bandwidth(bind, mib));
    let rc_bw = measure(runs, || rc_bandwidth(bind, mib));
    let udp_bw = measure(runs, || udp_bandwidth(bind, mib / 4));
    let ud_bw = measure(runs, || ud_bandwidth(bind, mib / 4));

    let rows = [
        (
            "latency_8B_us",
            "soft UD",
            &ud_lat,
            "raw UDP",
            &udp_lat,
            ud_lat.median / udp_lat.median,
        ),
        (
            "latency_8B_us",
            "soft RC",
            &rc_lat,
            "raw TCP",
            &tcp_lat,
            rc_lat.median / tcp_lat.median,
        ),
        (
            "bandwidth_1MiB_GBps",
            "soft RC",
            &rc_bw,
            "raw TCP",
            &tcp_bw,
            rc_bw.median / tcp_bw.median,
        ),
        (
            "bandwidth_2KiB_GBps",
            "soft UD",
            &ud_bw,
            "raw UDP",
            &udp_bw,
            ud_bw.median / udp_bw.median,
        ),
    ];
    if o.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|(m, n, s, pn, p, r)| {
                serde_json::json!({
                    "metric": m, "transport": n, "median": s.median, "min": s.min, "max": s.max,
                    "peer": pn, "peer_median": p.median, "peer_min": p.min, "peer_max": p.max,
                    "ratio": r, "runs": runs, "iters": iters, "mib": mib,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        println!(
            "verbs-bench: medians of {runs} runs (min..max), both ends busy-polling in one process"
        );
        println!(
            "{:<22} {:<8} {:>24} {:<8} {:>24} {:>8}",
            "metric", "verbs", "median (min..max)", "peer", "median (min..max)", "ratio"
        );
        for (m, n, s, pn, p, r) in rows {
            println!(
                "{:<22} {:<8} {:>8.2} ({:>6.2}..{:>6.2}) {:<8} {:>8.2} ({:>6.2}..{:>6.2}) {:>8.2}",
                m, n, s.median, s.min, s.max, pn, p.median, p.min, p.max, r
            );
        }
        println!("ratio = verbs / peer (latency: lower is better; bandwidth: higher is better)");
    }
    let _ = SocketAddr::new(bind, 0);
}
