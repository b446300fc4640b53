//! Test harness: an in-memory BTL pair between two ob1 instances living in one process, with
//! configurable limits and flags, WouldBlock injection, reordering and path failure.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rmca_btl_self::{BtlSelf, SelfConfig};
use rmca_framework::bml::Bml;
use rmca_framework::btl::{
    exclusivity, Btl, BtlAttributes, BtlError, BtlEvents, BtlFlags, BtlTag, CompletionToken,
    MemAccess, ModexRead, Placement, Registration, RemoteSegment, SendError, SendHint,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::modex::LocalModex;
use rmca_framework::pml::{Pml, RecvArgs, RequestId, SendArgs, SendMode, Source, Status, TagSel};
use rmca_framework::rank::{ProcInfo, Rank};
use rmca_pml_ob1::{Ob1, Ob1Config};

// SAFETY (lend, lend_mut): the memory lent stays borrowed here until the operation using it
// has completed (every caller waits for its operations before its buffers go).
pub fn lend(v: &[u8]) -> UserBuf {
    unsafe { UserBuf::from_slice(v) }
}
pub fn lend_mut(v: &mut [u8]) -> UserBuf {
    unsafe { UserBuf::from_mut_slice(v) }
}

/// One rail of the in-memory link.
#[derive(Clone, Debug)]
pub struct MemConfig {
    pub eager_limit: usize,
    pub max_send_size: usize,
    pub flags: BtlFlags,
    pub bandwidth_mbps: u32,
    pub latency_ns: u32,
    /// Refuse every n-th send with WouldBlock (0 = never).
    pub would_block_every: u64,
    /// Deliver each progress batch in a seeded random order.
    pub reorder: bool,
    pub rdma_frag: usize,
    /// The BTL's `pipeline_frag_size`.
    pub pipeline_frag: usize,
    /// Fragments of at least this many bytes (0: none) are offered with `recv_begin` and
    /// their first 64 bytes; when taken, the rest is written in place one progress call
    /// later (as btl-shm does while the sender is still writing).
    pub place_from: usize,
}

impl Default for MemConfig {
    fn default() -> Self {
        Self {
            eager_limit: 4096,
            max_send_size: 64 * 1024,
            flags: BtlFlags::SEND,
            bandwidth_mbps: 10_000,
            latency_ns: 1000,
            would_block_every: 0,
            reorder: false,
            rdma_frag: 1 << 20,
            pipeline_frag: usize::MAX,
            place_from: 0,
        }
    }
}

/// State shared by the two ends of one rail.
#[derive(Default)]
pub struct Link {
    /// `inbound[r]`: fragments travelling to rank r.
    inbound: [VecDeque<(BtlTag, Vec<u8>)>; 2],
    regs: HashMap<u64, (usize, usize)>,
    next_reg: u64,
    pub frags: [u64; 2],
    pub bytes: [u64; 2],
    pub gets: u64,
    /// `sent[r]`: the first 64 bytes of every fragment sent to rank r.
    pub sent: [Vec<Vec<u8>>; 2],
}

#[derive(Clone, Default)]
pub struct LinkHandle {
    pub link: Arc<Mutex<Link>>,
    pub broken: Arc<AtomicBool>,
    /// Every send and get refused with WouldBlock while set (a full ring).
    pub full: Arc<AtomicBool>,
    pub sends: Arc<AtomicU64>,
}

impl LinkHandle {
    /// Put raw bytes on the wire towards `to`.
    pub fn inject(&self, to: Rank, tag: BtlTag, bytes: &[u8]) {
        self.link.lock().unwrap().inbound[to as usize].push_back((tag, bytes.to_vec()));
    }
    pub fn frags_to(&self, r: Rank) -> u64 {
        self.link.lock().unwrap().frags[r as usize]
    }
    pub fn gets(&self) -> u64 {
        self.link.lock().unwrap().gets
    }
}

pub struct MemBtl {
    me: Rank,
    peer: Rank,
    attrs: BtlAttributes,
    cfg: MemConfig,
    h: LinkHandle,
    count: u64,
    completions: VecDeque<(CompletionToken, Result<(), SendError>)>,
    rng: StdRng,
    reported: bool,
    /// A fragment taken by the PML: where its rest goes, and the rest.
    placing: Option<(Placement, Vec<u8>)>,
}

impl MemBtl {
    pub fn new(me: Rank, cfg: MemConfig, h: LinkHandle) -> Self {
        let attrs = BtlAttributes {
            eager_limit: cfg.eager_limit,
            rndv_eager_limit: cfg.eager_limit,
            max_send_size: cfg.max_send_size,
            pipeline_frag_size: cfg.pipeline_frag,
            rdma_pipeline_frag_size: cfg.rdma_frag,
            exclusivity: exclusivity::SHARED_MEMORY,
            latency_ns: cfg.latency_ns,
            bandwidth_mbps: cfg.bandwidth_mbps,
            flags: cfg.flags,
            ..BtlAttributes::default()
        };
        Self {
            me,
            peer: 1 - me,
            attrs,
            cfg,
            h,
            count: 0,
            completions: VecDeque::new(),
            rng: StdRng::seed_from_u64(u64::from(me) + 7),
            reported: false,
            placing: None,
        }
    }

    /// A get (`get`) or put: checked against the flags, the peer and the other rank's
    /// registration, done at once, its completion queued for the next progress.
    fn rdma(
        &mut self,
        get: bool,
        peer: Rank,
        local: UserBuf,
        remote: &RemoteSegment,
        token: CompletionToken,
    ) -> Result<(), SendError> {
        let (flag, name) = if get {
            (BtlFlags::GET, "get")
        } else {
            (BtlFlags::PUT, "put")
        };
        if !self.cfg.flags.contains(flag) {
            return Err(SendError::Unsupported(name));
        }
        if peer != self.peer {
            return Err(SendError::Unreachable(peer));
        }
        self.count += 1;
        if self.cfg.would_block_every != 0 && self.count.is_multiple_of(self.cfg.would_block_every)
        {
            return Err(SendError::WouldBlock);
        }
        let key = u64::from_le_bytes(
            remote
                .remote_key
                .as_slice()
                .try_into()
                .map_err(|_| SendError::Unsupported("key"))?,
        );
        let mut l = self.h.link.lock().unwrap();
        let ok = l.regs.get(&key).is_some_and(|&(addr, len)| {
            let a = remote.addr as usize;
            a >= addr && a + remote.len <= addr + len && local.len() <= remote.len
        });
        let result = if !ok {
            Err(SendError::Unsupported("bad remote segment"))
        } else if get {
            // SAFETY: the segment lies inside a buffer the other simulated rank registered and
            // keeps alive until its send completes (after our FIN); both ranks share this process.
            let src = unsafe { UserBuf::from_raw_parts(remote.addr as *const u8, local.len()) };
            local.write_at(0, src.as_slice());
            l.gets += 1;
            Ok(())
        } else {
            // SAFETY: the segment lies inside a buffer the other simulated rank registered and
            // keeps alive while it is registered; both ranks share this process.
            let dst = unsafe { UserBuf::from_raw_parts_mut(remote.addr as *mut u8, local.len()) };
            dst.write_at(0, local.as_slice());
            Ok(())
        };
        self.completions.push_back((token, result));
        Ok(())
    }
}

impl Btl for MemBtl {
    fn component_name(&self) -> &str {
        "mem"
    }
    fn attributes(&self) -> &BtlAttributes {
        &self.attrs
    }
    fn add_procs(
        &mut self,
        procs: &[ProcInfo],
        _modex: &dyn ModexRead,
    ) -> Result<Vec<bool>, BtlError> {
        Ok(procs.iter().map(|p| p.rank == self.peer).collect())
    }
    fn send(
        &mut self,
        peer: Rank,
        tag: BtlTag,
        header: &[u8],
        payload: &[u8],
        _hint: SendHint,
    ) -> Result<(), SendError> {
        if peer != self.peer {
            return Err(SendError::Unreachable(peer));
        }
        if self.h.broken.load(Ordering::Relaxed) {
            return Err(SendError::PeerFailed {
                peer,
                reason: "link cut by the test".into(),
            });
        }
        let len = header.len() + payload.len();
        if len > self.cfg.max_send_size {
            return Err(SendError::TooLarge {
                len,
                max: self.cfg.max_send_size,
            });
        }
        self.count += 1;
        if self.h.full.load(Ordering::Relaxed)
            || (self.cfg.would_block_every != 0
                && self.count.is_multiple_of(self.cfg.would_block_every))
        {
            return Err(SendError::WouldBlock);
        }
        let mut v = Vec::with_capacity(len);
        v.extend_from_slice(header);
        v.extend_from_slice(payload);
        let mut l = self.h.link.lock().unwrap();
        l.frags[peer as usize] += 1;
        l.bytes[peer as usize] += len as u64;
        l.sent[peer as usize].push(v[..len.min(64)].to_vec());
        l.inbound[peer as usize].push_back((tag, v));
        self.h.sends.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn register_mem(&mut self, buf: UserBuf, _access: MemAccess) -> Result<Registration, BtlError> {
        let mut l = self.h.link.lock().unwrap();
        l.next_reg += 1;
        let h = l.next_reg;
        l.regs.insert(h, (buf.addr(), buf.len()));
        Ok(Registration {
            handle: h,
            remote_key: h.to_le_bytes().to_vec(),
        })
    }
    fn deregister_mem(&mut self, registration: &Registration) {
        self.h
            .link
            .lock()
            .unwrap()
            .regs
            .remove(&registration.handle);
    }
    fn get(
        &mut self,
        peer: Rank,
        local: UserBuf,
        remote: &RemoteSegment,
        token: CompletionToken,
    ) -> Result<(), SendError> {
        self.rdma(true, peer, local, remote, token)
    }
    fn put(
        &mut self,
        peer: Rank,
        local: UserBuf,
        remote: &RemoteSegment,
        token: CompletionToken,
    ) -> Result<(), SendError> {
        self.rdma(false, peer, local, remote, token)
    }
    fn progress(&mut self, events: &mut dyn BtlEvents) -> usize {
        if self.h.broken.load(Ordering::Relaxed) {
            if !self.reported {
                self.reported = true;
                events.peer_failed(self.peer, "link cut by the test");
                // A placement in progress ends on the next call: the PML must not complete
                // its receive before that.
                return 0;
            }
            if let Some((pl, _)) = self.placing.take() {
                let reason = "link cut by the test".to_owned();
                let peer = self.peer;
                events.recv_placed(pl.token, Err(SendError::PeerFailed { peer, reason }));
                return 1;
            }
            return 0;
        }
        let mut n = 0;
        if let Some((pl, rest)) = self.placing.take() {
            let k = rest.len().min(pl.dst.len());
            pl.dst.write_at(0, &rest[..k]);
            events.recv_placed(pl.token, Ok(k));
            n += 1;
        }
        while let Some((t, r)) = self.completions.pop_front() {
            events.rdma_complete(t, r);
            n += 1;
        }
        let mut batch: Vec<(BtlTag, Vec<u8>)> = {
            let mut l = self.h.link.lock().unwrap();
            l.inbound[self.me as usize].drain(..).collect()
        };
        if self.cfg.reorder {
            batch.shuffle(&mut self.rng);
        }
        let mut batch = batch.into_iter();
        for (tag, data) in batch.by_ref() {
            n += 1;
            if self.cfg.place_from > 0 && data.len() >= self.cfg.place_from.max(64) {
                if let Some(pl) = events.recv_begin(self.peer, tag, &data[..64], data.len()) {
                    // The rest arrives later; nothing behind it overtakes it.
                    self.placing = Some((pl, data[64..].to_vec()));
                    break;
                }
            }
            events.recv(self.peer, tag, &data);
            if !events.wants_more() {
                break;
            }
        }
        // What the PML did not want now stays first in line.
        let mut l = self.h.link.lock().unwrap();
        for f in batch.rev() {
            l.inbound[self.me as usize].push_front(f);
        }
        n
    }
}

fn procs(me: Rank) -> Vec<ProcInfo> {
    (0..2)
        .map(|r| ProcInfo {
            rank: r,
            node: 0,
            is_self: r == me,
        })
        .collect()
}

/// Two ob1 instances (ranks 0 and 1) joined by one in-memory BTL per rail, plus btl-self each.
pub fn pair(rails: &[MemConfig], cfg: Ob1Config) -> (Ob1, Ob1, Vec<LinkHandle>) {
    let handles: Vec<LinkHandle> = rails.iter().map(|_| LinkHandle::default()).collect();
    let make = |me: Rank| {
        let mut btls: Vec<Box<dyn Btl>> = vec![Box::new(BtlSelf::new(SelfConfig::default()))];
        for (c, h) in rails.iter().zip(&handles) {
            btls.push(Box::new(MemBtl::new(me, c.clone(), h.clone())));
        }
        // Traffic counters on, as with `--mca profile 1`: tests read them.
        Ob1::new(
            Bml::build(btls, &procs(me), &LocalModex::new()).unwrap(),
            cfg.clone(),
        )
        .with_traffic_counters(true)
    };
    let a = make(0);
    let b = make(1);
    (a, b, handles)
}

/// Progress both until `done` holds; panics after a bounded number of rounds (never hangs).
pub fn drive(a: &mut Ob1, b: &mut Ob1, mut done: impl FnMut(&mut Ob1, &mut Ob1) -> bool) {
    for _ in 0..5_000_000 {
        if done(a, b) {
            return;
        }
        a.progress();
        b.progress();
    }
    panic!("no completion after 5M progress rounds");
}

/// Which of the two instances a request belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

/// Wait for every request, returning statuses in order. Progress runs in bursts proportional
/// to the number of pending requests, so that testing them all stays a small share of the work.
pub fn wait_all(a: &mut Ob1, b: &mut Ob1, reqs: &[(Side, RequestId)]) -> Vec<Status> {
    let mut out: Vec<Option<Status>> = vec![None; reqs.len()];
    let mut pending: Vec<usize> = (0..reqs.len()).collect();
    for _ in 0..5_000_000 {
        pending.retain(|&i| {
            let (side, id) = reqs[i];
            let p = if side == Side::A { &mut *a } else { &mut *b };
            match p.test(id).unwrap() {
                Some(s) => {
                    out[i] = Some(s);
                    false
                }
                None => true,
            }
        });
        if pending.is_empty() {
            return out.into_iter().map(Option::unwrap).collect();
        }
        for _ in 0..1 + pending.len() / 64 {
            a.progress();
            b.progress();
        }
    }
    panic!("{} requests never completed", pending.len());
}

pub fn send(p: &mut Ob1, buf: &[u8], dest: Rank, tag: i32, context: u32) -> RequestId {
    p.isend(SendArgs {
        buf: lend(buf),
        dest,
        tag,
        context,
        mode: SendMode::Standard,
        pattern: Default::default(),
    })
    .unwrap()
}

pub fn ssend(p: &mut Ob1, buf: &[u8], dest: Rank, tag: i32, context: u32) -> RequestId {
    p.isend(SendArgs {
        buf: lend(buf),
        dest,
        tag,
        context,
        mode: SendMode::Synchronous,
        pattern: Default::default(),
    })
    .unwrap()
}

pub fn recv(p: &mut Ob1, buf: &mut [u8], source: Source, tag: TagSel, context: u32) -> RequestId {
    p.irecv(RecvArgs {
        buf: lend_mut(buf),
        source,
        tag,
        context,
        pattern: Default::default(),
    })
    .unwrap()
}

/// A recognisable byte pattern.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8))
        .collect()
}

pub fn counter(p: &Ob1, name: &str) -> u64 {
    p.counters()
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no counter {name}"))
}
