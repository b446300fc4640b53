use rmca_framework::bml::Bml;
use rmca_framework::modex::LocalModex;

use super::*;

// SAFETY (lend, lend_mut): the memory lent stays borrowed here until the operation using it
// has completed (every caller waits for its operations before its buffers go).
#[allow(unsafe_code)]
fn lend(v: &[u8]) -> UserBuf {
    unsafe { UserBuf::from_slice(v) }
}
#[allow(unsafe_code)]
fn lend_mut(v: &mut [u8]) -> UserBuf {
    unsafe { UserBuf::from_mut_slice(v) }
}

#[derive(Default)]
struct Sink {
    frags: Vec<(Rank, BtlTag, Vec<u8>)>,
    rdma: Vec<(CompletionToken, Result<(), SendError>)>,
}

impl BtlEvents for Sink {
    fn recv(&mut self, peer: Rank, tag: BtlTag, data: &[u8]) {
        self.frags.push((peer, tag, data.to_vec()));
    }
    fn rdma_complete(&mut self, token: CompletionToken, result: Result<(), SendError>) {
        self.rdma.push((token, result));
    }
    fn peer_failed(&mut self, _peer: Rank, _reason: &str) {}
}

fn procs(me: Rank, n: u32) -> Vec<ProcInfo> {
    (0..n)
        .map(|r| ProcInfo {
            rank: r,
            node: 0,
            is_self: r == me,
        })
        .collect()
}

fn module(cfg: SelfConfig) -> BtlSelf {
    let mut b = BtlSelf::new(cfg);
    let reach = b.add_procs(&procs(1, 3), &LocalModex::new()).unwrap();
    assert_eq!(reach, vec![false, true, false]);
    b
}

#[test]
fn send_is_delivered_at_next_progress_not_during_send() {
    let mut b = module(SelfConfig::default());
    b.send(1, 0x10, b"hd", b"payload", SendHint::default())
        .unwrap();
    b.send(1, 0x11, b"", b"", SendHint::default()).unwrap();
    let mut sink = Sink::default();
    assert_eq!(b.progress(&mut sink), 2);
    assert_eq!(
        sink.frags,
        vec![(1, 0x10, b"hdpayload".to_vec()), (1, 0x11, vec![])]
    );
    assert_eq!(b.progress(&mut sink), 0);
}

#[test]
fn other_peers_and_oversized_fragments_are_refused() {
    let mut b = module(SelfConfig {
        max_send_size: 100,
        ..SelfConfig::default()
    });
    assert_eq!(
        b.send(0, 0x10, b"", b"x", SendHint::default()),
        Err(SendError::Unreachable(0))
    );
    assert_eq!(
        b.send(1, 0x10, &[0; 60], &[0; 41], SendHint::default()),
        Err(SendError::TooLarge { len: 101, max: 100 })
    );
}

#[test]
fn back_pressure_refuses_without_taking() {
    let mut b = module(SelfConfig {
        max_queued: 1,
        ..SelfConfig::default()
    });
    b.send(1, 0x10, b"", b"a", SendHint::default()).unwrap();
    assert_eq!(
        b.send(1, 0x10, b"", b"b", SendHint::default()),
        Err(SendError::WouldBlock)
    );
    let mut sink = Sink::default();
    b.progress(&mut sink);
    b.send(1, 0x10, b"", b"b", SendHint::default()).unwrap();
    b.progress(&mut sink);
    let got: Vec<Vec<u8>> = sink.frags.into_iter().map(|f| f.2).collect();
    assert_eq!(got, vec![b"a".to_vec(), b"b".to_vec()]);
}

#[test]
fn get_and_put_copy_within_registered_memory_only() {
    let mut b = module(SelfConfig::default());
    let src: Vec<u8> = (0..100u8).collect();
    let mut dst = vec![0u8; 40];
    let reg = b
        .register_mem(
            lend(&src),
            MemAccess {
                remote_read: true,
                remote_write: false,
            },
        )
        .unwrap();
    let seg = RemoteSegment {
        addr: src.as_ptr() as u64 + 10,
        len: 40,
        remote_key: reg.remote_key.clone(),
    };
    b.get(1, lend_mut(&mut dst), &seg, CompletionToken(7))
        .unwrap();
    // Write access was not granted: the put is refused (reported at completion).
    b.put(1, lend(&dst), &seg, CompletionToken(8)).unwrap();
    // A segment running past the registration is refused.
    let bad = RemoteSegment {
        addr: src.as_ptr() as u64 + 90,
        len: 40,
        remote_key: reg.remote_key.clone(),
    };
    b.get(1, lend_mut(&mut dst), &bad, CompletionToken(9))
        .unwrap();
    let mut sink = Sink::default();
    b.progress(&mut sink);
    assert_eq!(dst, (10..50u8).collect::<Vec<_>>());
    assert_eq!(sink.rdma[0], (CompletionToken(7), Ok(())));
    assert!(sink.rdma[1].1.is_err());
    assert!(sink.rdma[2].1.is_err());
    b.deregister_mem(&reg);
    let mut dst2 = vec![0u8; 4];
    b.get(1, lend_mut(&mut dst2), &seg.clone(), CompletionToken(10))
        .unwrap();
    b.progress(&mut sink);
    assert!(
        sink.rdma[3].1.is_err(),
        "deregistered memory is no longer readable"
    );

    let mut target = vec![0u8; 8];
    let reg = b
        .register_mem(
            lend_mut(&mut target),
            MemAccess {
                remote_read: false,
                remote_write: true,
            },
        )
        .unwrap();
    let seg = RemoteSegment {
        addr: target.as_ptr() as u64,
        len: 8,
        remote_key: reg.remote_key,
    };
    b.put(1, lend(&[1, 2, 3]), &seg, CompletionToken(11))
        .unwrap();
    b.progress(&mut sink);
    assert_eq!(sink.rdma[4], (CompletionToken(11), Ok(())));
    assert_eq!(&target[..4], &[1, 2, 3, 0]);
}

#[test]
fn bml_routes_self_through_btl_self() {
    let b: Box<dyn Btl> = Box::new(BtlSelf::new(SelfConfig::default()));
    let bml = Bml::build(vec![b], &procs(0, 1), &LocalModex::new()).unwrap();
    assert_eq!(bml.routes(0).eager.len(), 1);
    assert_eq!(bml.routes(0).rdma.len(), 1);
}

#[test]
fn params_are_registered_and_validated() {
    use rmca_framework::params::{RawSetting, RawSources, Source};
    let mut specs = Vec::new();
    SELF.register_params(&mut ParamRegistrar::new("btl", "self", &mut specs));
    let raw = |n: &str, v: &str| RawSources {
        settings: vec![RawSetting {
            name: n.into(),
            value: v.into(),
            source: Source::CommandLine,
        }],
    };
    let store = ParamStore::resolve(specs.clone(), &raw("btl_self_eager_limit", "1K")).unwrap();
    assert_eq!(SelfConfig::from_params(&store).unwrap().eager_limit, 1024);
    let store = ParamStore::resolve(specs, &raw("btl_self_eager_limit", "1G")).unwrap();
    let err = SelfConfig::from_params(&store).unwrap_err().to_string();
    assert!(err.contains("btl_self_max_send_size"), "{err}");
}
