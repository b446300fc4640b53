//! btl-self: a rank sending to itself.
//!
//! Reaches only the calling process ([`ProcInfo::is_self`]), with the highest exclusivity, so a
//! send to oneself never touches shared memory or a network. [`Btl::send`] copies the fragment
//! into a local queue (buffers are recycled, so the steady state allocates nothing) and the
//! fragment is delivered at the next [`Btl::progress`], never re-entrantly during the send.
//! GET and PUT are plain copies within the process, allowed only on memory registered with
//! [`Btl::register_mem`] with the matching access right, so a bad descriptor is refused instead
//! of touching arbitrary memory.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod rdma;

use std::collections::VecDeque;
use std::sync::Arc;

use rmca_framework::btl::{
    exclusivity, Btl, BtlAttributes, BtlComponent, BtlError, BtlEvents, BtlFlags, BtlTag,
    CompletionToken, MemAccess, MemoryUsage, ModexRead, Registration, RemoteSegment, SendError,
    SendHint,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::component::{Component, ComponentMeta, InitContext};
use rmca_framework::memory::MemoryCounter;
use rmca_framework::params::{Level, Param, ParamRegistrar, ParamStore};
use rmca_framework::rank::{ProcInfo, Rank};

use crate::rdma::Regions;

/// The btl-self component.
#[derive(Debug, Default)]
pub struct SelfComponent;

/// The component instance registered with the framework.
pub static SELF: SelfComponent = SelfComponent;

rmca_framework::builtin_component!(Btl, SELF);

/// Configuration of a [`BtlSelf`] module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelfConfig {
    /// Largest eager fragment (header included).
    pub eager_limit: usize,
    /// Largest fragment accepted by `send`.
    pub max_send_size: usize,
    /// Queued fragments beyond which `send` answers `WouldBlock` (0 = unbounded).
    pub max_queued: usize,
}

impl Default for SelfConfig {
    fn default() -> Self {
        Self {
            eager_limit: 64 * 1024,
            max_send_size: 256 * 1024,
            max_queued: 0,
        }
    }
}

impl SelfConfig {
    /// Read the `btl_self_*` parameters.
    pub fn from_params(params: &ParamStore) -> Result<Self, BtlError> {
        let size = |n: &str| -> Result<usize, BtlError> {
            let v = params
                .get_size(n)
                .map_err(|e| BtlError::Other(e.to_string()))?;
            usize::try_from(v)
                .map_err(|_| BtlError::Other(format!("{n}={v} does not fit in memory")))
        };
        let max_queued = params
            .get_int("btl_self_max_queued")
            .map_err(|e| BtlError::Other(e.to_string()))?;
        let cfg = Self {
            eager_limit: size("btl_self_eager_limit")?,
            max_send_size: size("btl_self_max_send_size")?,
            max_queued: usize::try_from(max_queued).unwrap_or(0),
        };
        if cfg.eager_limit > cfg.max_send_size {
            return Err(BtlError::Other(format!(
                "btl_self_eager_limit ({}) must not exceed btl_self_max_send_size ({})",
                cfg.eager_limit, cfg.max_send_size
            )));
        }
        Ok(cfg)
    }
}

impl Component for SelfComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "self",
            version: env!("CARGO_PKG_VERSION"),
            description: "a rank sending to itself (local queue, memcpy RDMA)",
        }
    }

    fn register_params(&self, params: &mut ParamRegistrar<'_>) {
        let d = SelfConfig::default();
        params.add(
            Param::size("eager_limit", d.eager_limit as u64)
                .range(64, i64::MAX)
                .help("Largest fragment (PML header included) a rank sends to itself eagerly; larger messages use the rendezvous protocol with a memcpy GET.")
                .level(Level::Tuning),
        );
        params.add(
            Param::size("max_send_size", d.max_send_size as u64)
                .range(64, i64::MAX)
                .help("Largest fragment btl-self accepts in one send.")
                .level(Level::Tuning),
        );
        params.add(
            Param::int("max_queued", 0)
                .range(0, i64::MAX)
                .help("Fragments queued before sends are refused with WouldBlock until the next progress (0 = unbounded). For testing back-pressure.")
                .level(Level::Dev),
        );
    }
}

impl BtlComponent for SelfComponent {
    fn init(&self, ctx: &mut InitContext<'_>) -> Result<Vec<Box<dyn Btl>>, BtlError> {
        let cfg = SelfConfig::from_params(ctx.params)?;
        let mut btl = BtlSelf::new(cfg);
        btl.memory = Some(ctx.memory.counter("btl.self"));
        Ok(vec![Box::new(btl)])
    }
}

/// The btl-self module.
pub struct BtlSelf {
    attrs: BtlAttributes,
    cfg: SelfConfig,
    me: Option<Rank>,
    queue: VecDeque<(BtlTag, Vec<u8>)>,
    pool: Vec<Vec<u8>>,
    completions: VecDeque<(CompletionToken, Result<(), SendError>)>,
    regions: Regions,
    held_bytes: usize,
    peak_bytes: usize,
    memory: Option<Arc<MemoryCounter>>,
    counters: Counters,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    sends: u64,
    send_bytes: u64,
    would_block: u64,
    delivered: u64,
    gets: u64,
    puts: u64,
    rdma_bytes: u64,
    rdma_refused: u64,
}

impl std::fmt::Debug for BtlSelf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BtlSelf")
            .field("me", &self.me)
            .field("queued", &self.queue.len())
            .finish()
    }
}

impl BtlSelf {
    /// Deliver what was queued before this call (the body of [`Btl::progress`]).
    #[inline(never)]
    fn deliver(&mut self, events: &mut dyn BtlEvents) -> usize {
        let Some(me) = self.me else { return 0 };
        let mut n = 0;
        // Only what was queued before this call: a fragment sent from inside a callback waits
        // for the next progress, so progress is bounded.
        for _ in 0..self.completions.len() {
            let Some((token, result)) = self.completions.pop_front() else {
                break;
            };
            events.rdma_complete(token, result);
            n += 1;
        }
        for _ in 0..self.queue.len() {
            let Some((tag, buf)) = self.queue.pop_front() else {
                break;
            };
            events.recv(me, tag, &buf);
            self.counters.delivered += 1;
            self.pool.push(buf);
            n += 1;
        }
        n
    }

    /// A module with `cfg`.
    pub fn new(cfg: SelfConfig) -> Self {
        let attrs = BtlAttributes {
            eager_limit: cfg.eager_limit,
            rndv_eager_limit: cfg.eager_limit,
            max_send_size: cfg.max_send_size,
            pipeline_frag_size: usize::MAX,
            rdma_pipeline_send_length: 0,
            rdma_pipeline_frag_size: usize::MAX,
            min_rdma_pipeline_size: 0,
            exclusivity: exclusivity::SELF,
            latency_ns: 1,
            bandwidth_mbps: 1_000_000,
            flags: BtlFlags::SEND | BtlFlags::PUT | BtlFlags::GET,
        };
        Self {
            attrs,
            cfg,
            me: None,
            queue: VecDeque::new(),
            pool: Vec::new(),
            completions: VecDeque::new(),
            regions: Regions::default(),
            held_bytes: 0,
            peak_bytes: 0,
            memory: None,
            counters: Counters::default(),
        }
    }

    fn check_peer(&self, peer: Rank) -> Result<(), SendError> {
        if self.me == Some(peer) {
            Ok(())
        } else {
            Err(SendError::Unreachable(peer))
        }
    }

    fn grow(&mut self, bytes: usize) {
        self.held_bytes += bytes;
        self.peak_bytes = self.peak_bytes.max(self.held_bytes);
        if let Some(m) = &self.memory {
            m.alloc(bytes);
        }
    }
}

impl Btl for BtlSelf {
    fn component_name(&self) -> &str {
        "self"
    }

    fn attributes(&self) -> &BtlAttributes {
        &self.attrs
    }

    fn add_procs(
        &mut self,
        procs: &[ProcInfo],
        _modex: &dyn ModexRead,
    ) -> Result<Vec<bool>, BtlError> {
        if let Some(p) = procs.iter().find(|p| p.is_self) {
            self.me = Some(p.rank);
        }
        Ok(procs.iter().map(|p| p.is_self).collect())
    }

    fn send(
        &mut self,
        peer: Rank,
        tag: BtlTag,
        header: &[u8],
        payload: &[u8],
        _hint: SendHint,
    ) -> Result<(), SendError> {
        self.check_peer(peer)?;
        let len = header.len() + payload.len();
        if len > self.cfg.max_send_size {
            return Err(SendError::TooLarge {
                len,
                max: self.cfg.max_send_size,
            });
        }
        if self.cfg.max_queued != 0 && self.queue.len() >= self.cfg.max_queued {
            self.counters.would_block += 1;
            return Err(SendError::WouldBlock);
        }
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        let before = buf.capacity();
        buf.extend_from_slice(header);
        buf.extend_from_slice(payload);
        if buf.capacity() > before {
            self.grow(buf.capacity() - before);
        }
        self.queue.push_back((tag, buf));
        self.counters.sends += 1;
        self.counters.send_bytes += len as u64;
        Ok(())
    }

    fn register_mem(&mut self, buf: UserBuf, access: MemAccess) -> Result<Registration, BtlError> {
        let handle = self.regions.insert(buf, access);
        Ok(Registration {
            handle,
            remote_key: {
                let mut key = Vec::with_capacity(8);
                rmca_framework::wire::Writer::new(&mut key).u64(handle);
                key
            },
        })
    }

    fn deregister_mem(&mut self, registration: &Registration) {
        self.regions.remove(registration.handle);
    }

    fn put(
        &mut self,
        peer: Rank,
        local: UserBuf,
        remote: &RemoteSegment,
        token: CompletionToken,
    ) -> Result<(), SendError> {
        self.check_peer(peer)?;
        let result = self.regions.put(local, remote);
        if result.is_err() {
            self.counters.rdma_refused += 1;
        } else {
            self.counters.puts += 1;
            self.counters.rdma_bytes += local.len() as u64;
        }
        self.completions.push_back((token, result));
        Ok(())
    }

    fn get(
        &mut self,
        peer: Rank,
        local: UserBuf,
        remote: &RemoteSegment,
        token: CompletionToken,
    ) -> Result<(), SendError> {
        self.check_peer(peer)?;
        let result = self.regions.get(local, remote);
        if result.is_err() {
            self.counters.rdma_refused += 1;
        } else {
            self.counters.gets += 1;
            self.counters.rdma_bytes += local.len() as u64;
        }
        self.completions.push_back((token, result));
        Ok(())
    }

    #[inline]
    fn progress(&mut self, events: &mut dyn BtlEvents) -> usize {
        // Polled on every pass of every wait loop, almost always with nothing to do: keep that
        // check free of the delivery loop's register saves.
        if self.queue.is_empty() && self.completions.is_empty() {
            return 0;
        }
        self.deliver(events)
    }

    fn memory_usage(&self) -> MemoryUsage {
        MemoryUsage {
            current: self.held_bytes,
            peak: self.peak_bytes,
        }
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let c = self.counters;
        [
            ("sends", c.sends),
            ("send_bytes", c.send_bytes),
            ("would_block", c.would_block),
            ("delivered", c.delivered),
            ("gets", c.gets),
            ("puts", c.puts),
            ("rdma_bytes", c.rdma_bytes),
            ("rdma_refused", c.rdma_refused),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    fn finalize(&mut self) {
        self.queue.clear();
        if let Some(m) = &self.memory {
            m.free(self.held_bytes);
        }
        self.pool.clear();
        self.held_bytes = 0;
    }
}

#[cfg(test)]
mod tests;
