//! In-process tests: modules of simulated ranks built through the component, as the framework
//! builds them, talking over real loopback sockets.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rmca_framework::btl::{
    Btl, BtlComponent, BtlError, BtlEvents, CompletionToken, ModexRead, SendError, SendHint,
};
use rmca_framework::component::{Component, InitContext};
use rmca_framework::job::JobInfo;
use rmca_framework::memory::MemoryAccounting;
use rmca_framework::modex::{LocalModex, ModexWrite};
use rmca_framework::params::{ParamRegistrar, ParamStore, RawSetting, RawSources, Source};
use rmca_framework::rank::Rank;

use super::*;

/// Bound on any wait in these tests: only reached when something is broken.
const WAIT: Duration = Duration::from_secs(20);

#[derive(Default)]
struct Sink {
    got: Vec<(Rank, u8, Vec<u8>)>,
    failed: Vec<(Rank, String)>,
}

impl BtlEvents for Sink {
    fn recv(&mut self, peer: Rank, tag: u8, data: &[u8]) {
        self.got.push((peer, tag, data.to_vec()));
    }
    fn rdma_complete(&mut self, _token: CompletionToken, _result: Result<(), SendError>) {}
    fn peer_failed(&mut self, peer: Rank, reason: &str) {
        self.failed.push((peer, reason.to_owned()));
    }
}

fn params(settings: &[(&str, &str)]) -> ParamStore {
    let mut specs = Vec::new();
    TCP.register_params(&mut ParamRegistrar::new("btl", "tcp", &mut specs));
    let raw = RawSources {
        settings: settings
            .iter()
            .map(|(n, v)| RawSetting {
                name: (*n).into(),
                value: (*v).into(),
                source: Source::CommandLine,
            })
            .collect(),
    };
    ParamStore::resolve(specs, &raw).expect("valid settings")
}

fn job(rank: Rank, size: u32, secret: &[u8]) -> JobInfo {
    JobInfo {
        rank,
        size,
        job_id: "tcptest".into(),
        secret: secret.to_vec(),
        node_of: vec![0; size as usize],
        node_names: vec!["localhost".into()],
    }
}

/// Init rank `rank` of a job through the component, publishing into `modex`.
fn init(job: &JobInfo, params: &ParamStore, modex: &LocalModex) -> Box<dyn Btl> {
    let mem = MemoryAccounting::new();
    let mut w = modex.writer(job.rank);
    let mut ctx = InitContext::new(job, params, &mem, &mut w);
    let mut btls = TCP.init(&mut ctx).expect("init");
    assert_eq!(btls.len(), 1);
    btls.pop().unwrap()
}

/// Two ranks of one job, connected through `add_procs`.
fn pair(settings: &[(&str, &str)]) -> (Box<dyn Btl>, Box<dyn Btl>, LocalModex) {
    let p = params(settings);
    let modex = LocalModex::new();
    let jobs = [job(0, 2, b"secret-A"), job(1, 2, b"secret-A")];
    let mut a = init(&jobs[0], &p, &modex);
    let mut b = init(&jobs[1], &p, &modex);
    assert_eq!(
        a.add_procs(&jobs[0].procs(), &modex).unwrap(),
        vec![false, true]
    );
    assert_eq!(
        b.add_procs(&jobs[1].procs(), &modex).unwrap(),
        vec![true, false]
    );
    (a, b, modex)
}

/// Progress both until `done` holds for the receiver's sink.
fn pump(
    a: &mut dyn Btl,
    b: &mut dyn Btl,
    sa: &mut Sink,
    sb: &mut Sink,
    done: impl Fn(&dyn Btl, &dyn Btl, &Sink, &Sink) -> bool,
) {
    let start = Instant::now();
    while !done(a, b, sa, sb) {
        a.progress(sa);
        b.progress(sb);
        assert!(
            start.elapsed() < WAIT,
            "no progress: a got {} b got {}",
            sa.got.len(),
            sb.got.len()
        );
        std::thread::yield_now();
    }
}

fn counter(btl: &dyn Btl, name: &str) -> u64 {
    btl.counters()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .expect(name)
}

#[test]
fn attributes_follow_params() {
    let (a, _b, modex) = pair(&[
        ("btl_tcp_eager_limit", "1024"),
        ("btl_tcp_max_send_size", "4096"),
    ]);
    let at = a.attributes();
    assert_eq!((at.eager_limit, at.max_send_size), (1024, 4096));
    assert_eq!(at.exclusivity, rmca_framework::btl::exclusivity::DEFAULT);
    assert_eq!(at.flags, rmca_framework::btl::BtlFlags::SEND);
    let card = modex
        .get(0, card::MODEX_KEY)
        .unwrap()
        .expect("rank 0 published a card");
    assert!(card::Card::decode(&card).unwrap().addr.ip().is_loopback());
}

#[test]
fn many_fragments_of_all_sizes_arrive_in_order_both_ways() {
    let (mut a, mut b, _m) = pair(&[]);
    let max = a.attributes().max_send_size;
    let sizes = [0usize, 1, 7, 64, 1000, 4096, 65_535, 65_536, max - 16, max];
    let mut want_b = Vec::new();
    let mut want_a = Vec::new();
    for round in 0..20u32 {
        for (i, &size) in sizes.iter().enumerate() {
            let hdr_len = size.min(16);
            let data: Vec<u8> = (0..size)
                .map(|k| (k as u32 ^ round ^ i as u32) as u8)
                .collect();
            let tag = 0x40 + (i as u8);
            a.send(
                1,
                tag,
                &data[..hdr_len],
                &data[hdr_len..],
                SendHint::default(),
            )
            .unwrap();
            want_b.push((0, tag, data.clone()));
            b.send(
                0,
                tag + 1,
                &data[..hdr_len],
                &data[hdr_len..],
                SendHint::default(),
            )
            .unwrap();
            want_a.push((1, tag + 1, data));
        }
    }
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let n = want_b.len();
    pump(a.as_mut(), b.as_mut(), &mut sa, &mut sb, |_, _, sa, sb| {
        sa.got.len() >= n && sb.got.len() >= n
    });
    assert!(
        sb.got == want_b,
        "rank 1 received fragments out of order or corrupted"
    );
    assert!(
        sa.got == want_a,
        "rank 0 received fragments out of order or corrupted"
    );
    assert!(sa.failed.is_empty() && sb.failed.is_empty());
    assert_eq!(
        counter(a.as_ref(), "connects"),
        1,
        "one sending connection per ordered pair"
    );
    assert_eq!(counter(b.as_ref(), "accepts"), 1);
    assert!(a.memory_usage().peak > 0);
}

#[test]
fn send_checks_size_tag_and_reachability() {
    let (mut a, _b, _m) = pair(&[
        ("btl_tcp_max_send_size", "1000"),
        ("btl_tcp_eager_limit", "500"),
    ]);
    let big = vec![0u8; 1001];
    assert_eq!(
        a.send(1, 0x40, &[], &big, SendHint::default()),
        Err(SendError::TooLarge {
            len: 1001,
            max: 1000
        })
    );
    assert!(matches!(
        a.send(1, 0xF0, &[], &[], SendHint::default()),
        Err(SendError::Unsupported(_))
    ));
    assert_eq!(
        a.send(0, 0x40, &[], &[], SendHint::default()),
        Err(SendError::Unreachable(0))
    );
    assert_eq!(
        a.send(7, 0x40, &[], &[], SendHint::default()),
        Err(SendError::Unreachable(7))
    );
}

#[test]
fn pending_cap_gives_would_block_then_drains() {
    let (mut a, mut b, _m) = pair(&[("btl_tcp_max_pending", "100000")]);
    let frag = vec![7u8; 60_000];
    let mut sent = 0usize;
    let mut blocked = false;
    // The kernel absorbs a few MB of loopback buffers; keep sending without progressing the
    // receiver until the cap bites.
    for _ in 0..10_000 {
        match a.send(1, 0x40, &[], &frag, SendHint::default()) {
            Ok(()) => sent += 1,
            Err(SendError::WouldBlock) => {
                blocked = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        blocked,
        "the cap never produced WouldBlock after {sent} sends"
    );
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    pump(a.as_mut(), b.as_mut(), &mut sa, &mut sb, |_, _, _, sb| {
        sb.got.len() == sent
    });
    assert!(counter(a.as_ref(), "would_block") >= 1);
    a.send(1, 0x40, &[], &frag, SendHint::default())
        .expect("room again after progress");
    pump(a.as_mut(), b.as_mut(), &mut sa, &mut sb, |_, _, _, sb| {
        sb.got.len() == sent + 1
    });
}

#[test]
fn wrong_job_secret_is_rejected_and_counted() {
    let p = params(&[]);
    let modex = LocalModex::new();
    let ja = job(1, 2, b"secret-A");
    let mut a1 = init(&ja, &p, &modex);
    // Rank 0 of another job, given job A's card for rank 1 (a stale or misrouted card).
    let other = LocalModex::new();
    let jb = job(0, 2, b"secret-B");
    let mut b0 = init(&jb, &p, &other);
    let card = modex.get(1, card::MODEX_KEY).unwrap().unwrap();
    other.writer(1).put(card::MODEX_KEY, &card).unwrap();
    assert_eq!(
        b0.add_procs(&jb.procs(), &other).unwrap(),
        vec![false, true]
    );
    b0.send(1, 0x40, b"hdr", b"intruder", SendHint::default())
        .unwrap();
    let (mut s_a, mut s_b) = (Sink::default(), Sink::default());
    pump(
        a1.as_mut(),
        b0.as_mut(),
        &mut s_a,
        &mut s_b,
        |a1, _, _, _| counter(a1, "rejected_secret") == 1,
    );
    // Nothing from the other job is delivered, and no peer of job A is failed because of it.
    for _ in 0..100 {
        a1.progress(&mut s_a);
    }
    assert!(
        s_a.got.is_empty(),
        "a fragment from another job was delivered"
    );
    assert!(
        s_a.failed.is_empty(),
        "a stranger failed a peer: {:?}",
        s_a.failed
    );
}

#[test]
fn stranger_bytes_are_refused_without_harm() {
    let (mut a, mut b, modex) = pair(&[]);
    let addr = card::Card::decode(&modex.get(1, card::MODEX_KEY).unwrap().unwrap())
        .unwrap()
        .addr;
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    pump(a.as_mut(), b.as_mut(), &mut sa, &mut sb, |_, b, _, _| {
        counter(b, "rejected_hello") == 1
    });
    // The real peer still gets through.
    a.send(1, 0x40, &[], b"ok", SendHint::default()).unwrap();
    pump(a.as_mut(), b.as_mut(), &mut sa, &mut sb, |_, _, _, sb| {
        sb.got.len() == 1
    });
    assert!(sb.failed.is_empty());
}

#[test]
fn second_connection_claiming_a_connected_rank_is_refused() {
    let (mut a, mut b, modex) = pair(&[]);
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    a.send(1, 0x40, &[], b"one", SendHint::default()).unwrap();
    pump(a.as_mut(), b.as_mut(), &mut sa, &mut sb, |_, _, _, sb| {
        sb.got.len() == 1
    });
    let addr = card::Card::decode(&modex.get(1, card::MODEX_KEY).unwrap().unwrap())
        .unwrap()
        .addr;
    let hello = wire::HelloRepr {
        rank: 0,
        to: 1,
        secret: b"secret-A",
    };
    let mut bytes = vec![0u8; hello.buffer_len()];
    hello.emit(&mut wire::HelloPacket::new_unchecked(&mut bytes[..]));
    // Twice: the first refusal must not forget that rank 0 is still connected.
    let mut impostors = Vec::new();
    for k in 1..=2 {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&bytes).unwrap();
        impostors.push(s);
        pump(a.as_mut(), b.as_mut(), &mut sa, &mut sb, |_, b, _, _| {
            counter(b, "rejected_duplicate") == k
        });
    }
    a.send(1, 0x40, &[], b"two", SendHint::default()).unwrap();
    pump(a.as_mut(), b.as_mut(), &mut sa, &mut sb, |_, _, _, sb| {
        sb.got.len() == 2
    });
    assert_eq!(sb.got[1].2, b"two");
    assert!(sb.failed.is_empty());
}

#[test]
fn crash_is_peer_failed_but_finalize_is_clean() {
    // Clean: rank 0 finalizes after sending; rank 1 gets everything and no failure.
    let (mut a, mut b, _m) = pair(&[]);
    a.send(1, 0x40, &[], b"last words", SendHint::default())
        .unwrap();
    a.finalize();
    let mut sb = Sink::default();
    let start = Instant::now();
    while counter(b.as_ref(), "clean_closes") == 0 {
        b.progress(&mut sb);
        assert!(start.elapsed() < WAIT);
    }
    assert_eq!(sb.got, vec![(0, 0x40, b"last words".to_vec())]);
    assert!(sb.failed.is_empty(), "{:?}", sb.failed);

    // Crash: rank 0's module vanishes without finalize; rank 1 reports the peer failed.
    let (mut a, mut b, _m) = pair(&[]);
    a.send(1, 0x40, &[], b"hello", SendHint::default()).unwrap();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    pump(a.as_mut(), b.as_mut(), &mut sa, &mut sb, |_, _, _, sb| {
        sb.got.len() == 1
    });
    drop(a);
    let start = Instant::now();
    while sb.failed.is_empty() {
        b.progress(&mut sb);
        assert!(start.elapsed() < WAIT);
    }
    assert_eq!(sb.failed[0].0, 0);
    assert!(
        sb.failed[0].1.contains("without goodbye"),
        "{}",
        sb.failed[0].1
    );
}

#[test]
fn deleted_peer_is_forgotten_in_both_directions() {
    let (mut a, mut b, _m) = pair(&[]);
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    a.send(1, 0x40, &[], b"x", SendHint::default()).unwrap();
    pump(a.as_mut(), b.as_mut(), &mut sa, &mut sb, |_, _, _, sb| {
        sb.got.len() == 1
    });
    b.del_procs(&[0]);
    assert_eq!(
        b.send(0, 0x40, &[], b"y", SendHint::default()),
        Err(SendError::Unreachable(0))
    );
    drop(a); // would be a failure of rank 0, had rank 1 not forgotten it
    for _ in 0..200 {
        b.progress(&mut sb);
    }
    assert!(sb.failed.is_empty(), "{:?}", sb.failed);
}

#[test]
fn send_to_dead_listener_fails_the_peer() {
    let p = params(&[("btl_tcp_connect_timeout", "2000")]);
    let modex = LocalModex::new();
    let j0 = job(0, 2, b"s");
    let j1 = job(1, 2, b"s");
    let mut a = init(&j0, &p, &modex);
    let b = init(&j1, &p, &modex);
    a.add_procs(&j0.procs(), &modex).unwrap();
    drop(b); // its listener is closed: connecting is refused
             // The send is taken (the connect runs in the background); the failure comes from progress.
    a.send(1, 0x40, &[], b"x", SendHint::default()).unwrap();
    let mut sa = Sink::default();
    let start = Instant::now();
    while sa.failed.is_empty() {
        a.progress(&mut sa);
        assert!(start.elapsed() < WAIT, "connect failure never reported");
    }
    assert_eq!(sa.failed.len(), 1);
    assert_eq!(sa.failed[0].0, 1);
    assert!(
        sa.failed[0].1.contains("connecting to"),
        "{}",
        sa.failed[0].1
    );
    assert!(matches!(
        a.send(1, 0x40, &[], b"x", SendHint::default()),
        Err(SendError::PeerFailed { .. })
    ));
}

#[test]
fn bad_card_is_an_error_naming_the_rank() {
    let p = params(&[]);
    let modex = LocalModex::new();
    let j0 = job(0, 3, b"s");
    let mut a = init(&j0, &p, &modex);
    modex
        .writer(1)
        .put(card::MODEX_KEY, b"v1 not-an-address")
        .unwrap();
    let err = a.add_procs(&j0.procs(), &modex).unwrap_err();
    assert!(matches!(err, BtlError::BadCard { rank: 1, .. }), "{err}");
    assert!(err.to_string().contains("rank 1"), "{err}");
}

#[test]
fn loopback_card_of_another_node_is_unreachable() {
    let p = params(&[]);
    let modex = LocalModex::new();
    let mut j0 = job(0, 2, b"s");
    j0.node_of = vec![0, 1];
    j0.node_names = vec!["a".into(), "b".into()];
    let mut j1 = j0.clone();
    j1.rank = 1;
    let mut a = init(&j0, &p, &modex);
    let _b = init(&j1, &p, &modex);
    assert_eq!(
        a.add_procs(&j0.procs(), &modex).unwrap(),
        vec![false, false]
    );
}

#[test]
fn missing_card_means_unreachable() {
    let p = params(&[]);
    let modex = LocalModex::new();
    let j0 = job(0, 3, b"s");
    let mut a = init(&j0, &p, &modex);
    let _b = init(&job(2, 3, b"s"), &p, &modex);
    assert_eq!(
        a.add_procs(&j0.procs(), &modex).unwrap(),
        vec![false, false, true]
    );
}

#[test]
fn bad_params_name_the_parameter() {
    let mem = MemoryAccounting::new();
    let modex = LocalModex::new();
    let j = job(0, 1, b"s");
    for (settings, needle) in [
        (vec![("btl_tcp_if_addr", "eth0")], "btl_tcp_if_addr"),
        (vec![("btl_tcp_if_addr", "0.0.0.0")], "btl_tcp_if_addr"),
        (
            vec![
                ("btl_tcp_eager_limit", "8192"),
                ("btl_tcp_max_send_size", "4096"),
            ],
            "btl_tcp_eager_limit",
        ),
        (vec![("btl_tcp_port_range", "10")], "btl_tcp_port_min"),
    ] {
        let p = params(&settings);
        let mut w = modex.writer(0);
        let mut ctx = InitContext::new(&j, &p, &mem, &mut w);
        let err = TCP.init(&mut ctx).err().expect("init must fail");
        assert!(err.to_string().contains(needle), "{settings:?}: {err}");
    }
}

#[test]
fn port_range_is_honoured() {
    // Find a free port, then ask for it explicitly.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let p = params(&[("btl_tcp_port_min", &port.to_string())]);
    let modex = LocalModex::new();
    let _a = match std::panic::catch_unwind(|| init(&job(0, 1, b"s"), &p, &modex)) {
        Ok(a) => a,
        // Another process grabbed the port in between: nothing to check.
        Err(_) => return,
    };
    let card = card::Card::decode(&modex.get(0, card::MODEX_KEY).unwrap().unwrap()).unwrap();
    assert_eq!(card.addr.port(), port);
}
