//! The BML (BTL multiplexing layer): per peer, which BTLs reach it and which carry what.
//!
//! After every BTL answered `add_procs`, the BML keeps, for each peer, only the BTLs of the
//! highest exclusivity that reach it (self > shm > networks), then orders them:
//! - `eager`: by latency, lowest first (small messages go on `eager[0]`);
//! - `send`: every BTL with a weight proportional to its bandwidth (pipelined copy traffic);
//! - `rdma`: the BTLs offering PUT or GET, weighted by bandwidth (large-message RDMA).

use std::fmt;

use thiserror::Error;

use crate::btl::{
    Btl, BtlEvents, BtlFlags, BtlTag, CompletionToken, ModexRead, Placement, SendError,
};
use crate::rank::{ProcInfo, Rank};

/// Index of a BTL module inside the BML.
pub type BtlIndex = usize;

/// A BTL used for one peer, with its share of the traffic.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Route {
    /// Which module.
    pub btl: BtlIndex,
    /// Fraction of large-message bytes it should carry (sums to 1 within a list).
    pub weight: f64,
}

/// The BTLs that serve one peer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PeerRoutes {
    /// For eager traffic, lowest latency first.
    pub eager: Vec<Route>,
    /// For send traffic, highest bandwidth first.
    pub send: Vec<Route>,
    /// For RDMA, highest bandwidth first.
    pub rdma: Vec<Route>,
}

/// Errors building the BML.
#[derive(Debug, Error)]
pub enum BmlError {
    /// Some peers are reachable by no BTL.
    #[error("{0}")]
    Unreachable(String),
    /// A BTL failed in add_procs.
    #[error("btl {btl}: add_procs failed: {source}")]
    AddProcs {
        /// The BTL's component name.
        btl: String,
        /// Cause.
        #[source]
        source: crate::btl::BtlError,
    },
}

/// The sink of BTL events, with the index of the BTL that produced each one.
pub trait BmlEvents {
    /// See [`BtlEvents::recv`].
    fn recv(&mut self, btl: BtlIndex, peer: Rank, tag: BtlTag, data: &[u8]);
    /// See [`BtlEvents::recv_begin`].
    fn recv_begin(
        &mut self,
        _btl: BtlIndex,
        _peer: Rank,
        _tag: BtlTag,
        _head: &[u8],
        _len: usize,
    ) -> Option<Placement> {
        None
    }
    /// See [`BtlEvents::recv_placed`].
    fn recv_placed(
        &mut self,
        _btl: BtlIndex,
        _token: CompletionToken,
        _result: Result<usize, SendError>,
    ) {
    }
    /// See [`BtlEvents::rdma_complete`].
    fn rdma_complete(
        &mut self,
        btl: BtlIndex,
        token: CompletionToken,
        result: Result<(), SendError>,
    );
    /// See [`BtlEvents::send_complete`].
    fn send_complete(&mut self, _btl: BtlIndex, _token: CompletionToken) {}
    /// See [`BtlEvents::peer_failed`].
    fn peer_failed(&mut self, btl: BtlIndex, peer: Rank, reason: &str);
    /// See [`BtlEvents::wants_more`].
    fn wants_more(&self) -> bool {
        true
    }
}

/// Adds the BTL index to a BTL's events. Generic over the sink so that a BTL's one dynamic call
/// per event lands in code that calls the PML's handler directly (inlined), not through a
/// second dynamic call.
struct Indexed<'a, E: BmlEvents + ?Sized> {
    btl: BtlIndex,
    inner: &'a mut E,
}

impl<E: BmlEvents + ?Sized> BtlEvents for Indexed<'_, E> {
    fn recv(&mut self, peer: Rank, tag: BtlTag, data: &[u8]) {
        self.inner.recv(self.btl, peer, tag, data)
    }
    fn recv_begin(
        &mut self,
        peer: Rank,
        tag: BtlTag,
        head: &[u8],
        len: usize,
    ) -> Option<Placement> {
        self.inner.recv_begin(self.btl, peer, tag, head, len)
    }
    fn recv_placed(&mut self, token: CompletionToken, result: Result<usize, SendError>) {
        self.inner.recv_placed(self.btl, token, result)
    }
    fn rdma_complete(&mut self, token: CompletionToken, result: Result<(), SendError>) {
        self.inner.rdma_complete(self.btl, token, result)
    }
    fn send_complete(&mut self, token: CompletionToken) {
        self.inner.send_complete(self.btl, token)
    }
    fn peer_failed(&mut self, peer: Rank, reason: &str) {
        self.inner.peer_failed(self.btl, peer, reason)
    }
    #[inline]
    fn wants_more(&self) -> bool {
        self.inner.wants_more()
    }
}

/// The BTL modules of a process and the routes to every peer.
pub struct Bml {
    btls: Vec<Box<dyn Btl>>,
    routes: Vec<PeerRoutes>,
    me: Rank,
}

impl fmt::Debug for Bml {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.btls.iter().map(|b| b.component_name()).collect();
        f.debug_struct("Bml")
            .field("btls", &names)
            .field("routes", &self.routes)
            .finish()
    }
}

impl Bml {
    /// Ask every BTL which peers it reaches and build the routes. Every peer must be reached
    /// by at least one BTL; otherwise the error names each unreachable peer and the BTLs tried.
    pub fn build(
        btls: Vec<Box<dyn Btl>>,
        procs: &[ProcInfo],
        modex: &dyn ModexRead,
    ) -> Result<Self, BmlError> {
        Self::build_with_exclusivity(btls, procs, modex, &[])
    }

    /// [`Bml::build`] with the exclusivity of some modules overridden: `overrides[b]`, when
    /// present and `Some`, replaces module `b`'s own (the `btl_<name>_exclusivity` parameters),
    /// so that e.g. two network BTLs, or shm and a network, both serve one peer.
    pub fn build_with_exclusivity(
        mut btls: Vec<Box<dyn Btl>>,
        procs: &[ProcInfo],
        modex: &dyn ModexRead,
        overrides: &[Option<u32>],
    ) -> Result<Self, BmlError> {
        let exclusivity_of = |btls: &[Box<dyn Btl>], b: BtlIndex| {
            overrides
                .get(b)
                .copied()
                .flatten()
                .unwrap_or_else(|| btls[b].attributes().exclusivity)
        };
        let me = procs
            .iter()
            .find(|p| p.is_self)
            .map(|p| p.rank)
            .unwrap_or(0);
        let mut reach = Vec::with_capacity(btls.len());
        for b in btls.iter_mut() {
            let r = b
                .add_procs(procs, modex)
                .map_err(|source| BmlError::AddProcs {
                    btl: b.component_name().to_owned(),
                    source,
                })?;
            reach.push(r);
        }
        let mut routes = vec![PeerRoutes::default(); procs.len()];
        let mut unreachable = Vec::new();
        for (i, p) in procs.iter().enumerate() {
            let candidates: Vec<BtlIndex> = (0..btls.len())
                .filter(|&b| reach[b].get(i).copied().unwrap_or(false))
                .collect();
            let Some(best) = candidates.iter().map(|&b| exclusivity_of(&btls, b)).max() else {
                unreachable.push(p.rank);
                continue;
            };
            let chosen: Vec<BtlIndex> = candidates
                .into_iter()
                .filter(|&b| exclusivity_of(&btls, b) == best)
                .collect();
            routes[p.rank as usize] = Self::plan(&btls, &chosen);
        }
        // A module that serves no peer (e.g. a network BTL when every peer is on this node)
        // would only cost polling time on every progress pass: finalize it and drop it.
        let used: Vec<bool> = (0..btls.len())
            .map(|b| {
                routes.iter().any(|r| {
                    r.eager
                        .iter()
                        .chain(&r.send)
                        .chain(&r.rdma)
                        .any(|x| x.btl == b)
                })
            })
            .collect();
        if unreachable.is_empty() && used.iter().any(|u| !u) {
            let mut remap = vec![usize::MAX; btls.len()];
            let mut kept = Vec::with_capacity(btls.len());
            for (i, mut b) in btls.into_iter().enumerate() {
                if used[i] {
                    remap[i] = kept.len();
                    kept.push(b);
                } else {
                    tracing::debug!(
                        btl = b.component_name(),
                        "btl reaches no peer through the chosen routes; released"
                    );
                    b.finalize();
                }
            }
            btls = kept;
            for r in &mut routes {
                for x in r
                    .eager
                    .iter_mut()
                    .chain(r.send.iter_mut())
                    .chain(r.rdma.iter_mut())
                {
                    x.btl = remap[x.btl];
                }
            }
        }
        if !unreachable.is_empty() {
            let tried: Vec<&str> = btls.iter().map(|b| b.component_name()).collect();
            let tried = if tried.is_empty() {
                "none".to_owned()
            } else {
                tried.join(", ")
            };
            let missing_self = unreachable.contains(&me) && !tried.contains("self");
            return Err(BmlError::Unreachable(format!(
                "rank {me} cannot reach rank(s) {}: no BTL reaches them (BTLs tried: {tried}){}",
                unreachable
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if missing_self {
                    "; a process reaching itself needs 'self' in the btl list"
                } else {
                    ""
                }
            )));
        }
        // Tell each module the peers it carries traffic for, so that it can size its
        // resources for them (e.g. btl-ud grows its receive pool only now).
        for (b, btl) in btls.iter_mut().enumerate() {
            let peers: Vec<Rank> = routes
                .iter()
                .enumerate()
                .filter(|(_, r)| {
                    r.eager
                        .iter()
                        .chain(&r.send)
                        .chain(&r.rdma)
                        .any(|x| x.btl == b)
                })
                .map(|(p, _)| p as Rank)
                .collect();
            btl.peers_routed(&peers);
        }
        Ok(Self { btls, routes, me })
    }

    fn plan(btls: &[Box<dyn Btl>], chosen: &[BtlIndex]) -> PeerRoutes {
        let weighted = |list: Vec<BtlIndex>| -> Vec<Route> {
            let total: f64 = list
                .iter()
                .map(|&b| f64::from(btls[b].attributes().bandwidth_mbps.max(1)))
                .sum();
            let mut v: Vec<Route> = list
                .iter()
                .map(|&b| Route {
                    btl: b,
                    weight: f64::from(btls[b].attributes().bandwidth_mbps.max(1)) / total,
                })
                .collect();
            v.sort_by(|a, b| b.weight.total_cmp(&a.weight));
            v
        };
        let mut eager: Vec<Route> = chosen
            .iter()
            .map(|&b| Route {
                btl: b,
                weight: 1.0,
            })
            .collect();
        eager.sort_by_key(|r| btls[r.btl].attributes().latency_ns);
        let rdma: Vec<BtlIndex> = chosen
            .iter()
            .copied()
            .filter(|&b| {
                btls[b]
                    .attributes()
                    .flags
                    .intersects(BtlFlags::PUT | BtlFlags::GET)
            })
            .collect();
        PeerRoutes {
            eager,
            send: weighted(chosen.to_vec()),
            rdma: weighted(rdma),
        }
    }

    /// This process's rank.
    pub fn my_rank(&self) -> Rank {
        self.me
    }

    /// Number of peers (the job size).
    pub fn peer_count(&self) -> usize {
        self.routes.len()
    }

    /// The routes to `peer`.
    pub fn routes(&self, peer: Rank) -> &PeerRoutes {
        &self.routes[peer as usize]
    }

    /// Drop a BTL from a peer's routes (it failed for that peer). Returns false if no route is left.
    pub fn remove_route(&mut self, peer: Rank, btl: BtlIndex) -> bool {
        let r = &mut self.routes[peer as usize];
        r.eager.retain(|x| x.btl != btl);
        r.send.retain(|x| x.btl != btl);
        r.rdma.retain(|x| x.btl != btl);
        for list in [&mut r.send, &mut r.rdma] {
            let total: f64 = list.iter().map(|x| x.weight).sum();
            if total > 0.0 {
                list.iter_mut().for_each(|x| x.weight /= total);
            }
        }
        !r.eager.is_empty()
    }

    /// The component names of the BTLs on any route to `peer` (eager order first, each once).
    pub fn route_names(&self, peer: Rank) -> Vec<String> {
        let r = self.routes(peer);
        let mut names: Vec<String> = Vec::new();
        for x in r.eager.iter().chain(&r.send).chain(&r.rdma) {
            let name = self.btls[x.btl].component_name();
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
        names
    }

    /// Number of BTL modules.
    pub fn btl_count(&self) -> usize {
        self.btls.len()
    }

    /// One BTL module.
    pub fn btl(&mut self, index: BtlIndex) -> &mut dyn Btl {
        self.btls[index].as_mut()
    }

    /// One BTL module, shared.
    pub fn btl_ref(&self, index: BtlIndex) -> &dyn Btl {
        self.btls[index].as_ref()
    }

    /// Progress every BTL, delivering events tagged with the BTL's index.
    #[inline]
    pub fn progress<E: BmlEvents + ?Sized>(&mut self, events: &mut E) -> usize {
        // Runs on every pass of every wait loop: one adapter for all BTLs, re-indexed in place.
        let mut sink = Indexed {
            btl: 0,
            inner: events,
        };
        let mut n = 0;
        for b in self.btls.iter_mut() {
            n += b.progress(&mut sink);
            sink.btl += 1;
        }
        n
    }

    /// Counters of every BTL, prefixed with the component name.
    pub fn counters(&self) -> Vec<(String, u64)> {
        self.btls
            .iter()
            .flat_map(|b| {
                let name = b.component_name().to_owned();
                b.counters()
                    .into_iter()
                    .map(move |(k, v)| (format!("btl.{name}.{k}"), v))
            })
            .collect()
    }

    /// Finalize every BTL.
    pub fn finalize(&mut self) {
        for b in &mut self.btls {
            b.finalize();
        }
    }
}
