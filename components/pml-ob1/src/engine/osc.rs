//! One-sided RDMA for osc-rdma ([`Pml::rdma_put`](rmca_framework::pml::Pml::rdma_put) and
//! the rest): a window's memory registered with the RDMA BTLs that reach its members, and
//! puts/gets of a window's bytes straight into or out of a peer's registered memory.
//!
//! A transfer is split into the BTL's largest single put/get
//! ([`BtlAttributes::rdma_pipeline_frag_size`](rmca_framework::btl::BtlAttributes)), with at
//! most the rendezvous' pipeline depth of pieces in flight (`pml_ob1_send_pipeline_depth` for
//! a put, `_recv_pipeline_depth` for a get: the same [`rdma_piece`] as a receive's RGET
//! reads), so one large put cannot fill a BTL; every piece carries the transfer's token with
//! [`TOKEN_BIT`] set, which is how [`Core::on_rdma_complete`] tells them from the gets of
//! ob1's own rendezvous (request ids, far below that bit). The pieces held back by the depth,
//! or refused by a BTL for lack of resources, are issued when the transfer is tested.
//!
//! Transfers live in a slab, named by their slot and the slot's generation: starting,
//! completing and testing one is an index, not a hash lookup, and a slot keeps its key
//! buffer for the next transfer, so a put of a window's bytes allocates nothing once the
//! slab is warm (a put and its test cost about 1,100 instructions with a SipHash map and a
//! cloned key per transfer and per piece).

use std::collections::HashMap;

use rmca_framework::bml::{Bml, BtlIndex};
use rmca_framework::btl::{
    BtlFlags, CompletionToken, MemAccess, Registration, RemoteSegment, SendError,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::{PmlError, RdmaKeys, RdmaToken};
use rmca_framework::rank::Rank;

use super::rendezvous::rdma_piece;
use super::Core;

/// Set in the completion token of every one-sided transfer.
pub(super) const TOKEN_BIT: u64 = 1 << 63;

/// The slot bits of a token (the rest, below [`TOKEN_BIT`], is the slot's generation).
const SLOT_BITS: u32 = 32;
/// Generations wrap within these bits, so a token never reaches [`TOKEN_BIT`].
const GEN_MASK: u64 = (TOKEN_BIT >> SLOT_BITS) - 1;

/// The one-sided RDMA state of an ob1 instance.
#[derive(Debug, Default)]
pub(crate) struct OscRdma {
    next_handle: u64,
    /// Transfers by slot (a token's low bits); `free` lists the slots not in use.
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Registrations by handle: `(BTL, registration)` for each RDMA BTL.
    regs: HashMap<u64, Vec<(BtlIndex, Registration)>>,
    /// Transfers started (puts, gets) and their bytes, for the profile.
    pub(super) puts: u64,
    pub(super) gets: u64,
    pub(super) bytes: u64,
}

/// A slot of the slab: its transfer while `live`, and the generation that names it (bumped
/// when the transfer is reported, so its token no longer finds the slot).
#[derive(Debug)]
struct Slot {
    gen: u64,
    live: bool,
    t: Transfer,
}

/// One transfer: what is left to issue, and the pieces in flight.
#[derive(Debug)]
struct Transfer {
    peer: Rank,
    btl: BtlIndex,
    get: bool,
    /// The local bytes not issued yet.
    local: UserBuf,
    /// Where they go: `addr` advances with each piece issued, `len` is set per piece, and
    /// the key's buffer stays with the slot for its next transfer.
    remote: RemoteSegment,
    in_flight: u32,
    error: Option<String>,
}

impl OscRdma {
    /// The live transfer `token` names (with or without [`TOKEN_BIT`]).
    fn transfer(&mut self, token: u64) -> Option<&mut Transfer> {
        let token = token & !TOKEN_BIT;
        let slot = (token & ((1 << SLOT_BITS) - 1)) as usize;
        let s = self.slots.get_mut(slot)?;
        (s.live && s.gen == token >> SLOT_BITS).then_some(&mut s.t)
    }

    /// A free slot (a new one when none is), marked live: its index and its token. (A slot
    /// index fits its 32 bits: four billion transfers in flight would not fit in memory.)
    fn occupy(&mut self) -> (usize, RdmaToken) {
        let slot = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.slots.push(Slot {
                    gen: 0,
                    live: false,
                    t: Transfer {
                        peer: 0,
                        btl: 0,
                        get: false,
                        local: UserBuf::empty(),
                        remote: RemoteSegment {
                            addr: 0,
                            len: 0,
                            remote_key: Vec::new(),
                        },
                        in_flight: 0,
                        error: None,
                    },
                });
                self.slots.len() - 1
            }
        };
        let s = &mut self.slots[slot];
        s.live = true;
        (slot, (s.gen << SLOT_BITS) | slot as u64)
    }

    /// A piece of a transfer completed (`token` with [`TOKEN_BIT`]).
    pub(super) fn complete(&mut self, token: u64, result: Result<(), SendError>) {
        let Some(t) = self.transfer(token) else {
            tracing::debug!(token, "ob1: completion of an unknown one-sided transfer");
            return;
        };
        t.in_flight = t.in_flight.saturating_sub(1);
        if let Err(e) = result {
            t.error.get_or_insert_with(|| e.to_string());
        }
    }

    /// Registrations still held (released at finalize).
    pub(super) fn take_registrations(&mut self) -> Vec<(BtlIndex, Registration)> {
        self.regs.drain().flat_map(|(_, r)| r).collect()
    }
}

impl Core {
    /// Does a BTL offering put and one offering get reach `peer`?
    pub(super) fn osc_rdma_reaches(&self, peer: Rank) -> bool {
        let Some(r) = self.routes.get(peer as usize) else {
            return false;
        };
        if self.dead[peer as usize] {
            return false;
        }
        let offers = |f: BtlFlags| r.rdma.iter().any(|rt| self.attrs[rt.btl].flags.contains(f));
        offers(BtlFlags::PUT) && offers(BtlFlags::GET)
    }

    /// Register `mem` with every RDMA BTL that reaches one of `peers`.
    pub(super) fn osc_rdma_register(
        &mut self,
        bml: &mut Bml,
        mem: UserBuf,
        peers: &[Rank],
    ) -> Result<(u64, RdmaKeys), PmlError> {
        let mut btls: Vec<BtlIndex> = Vec::new();
        for &p in peers {
            let Some(r) = self.routes.get(p as usize) else {
                return Err(PmlError::BadRank {
                    rank: p,
                    size: self.routes.len() as u32,
                });
            };
            for rt in &r.rdma {
                if !btls.contains(&rt.btl) {
                    btls.push(rt.btl);
                }
            }
        }
        let access = MemAccess {
            remote_read: true,
            remote_write: true,
        };
        let mut regs = Vec::with_capacity(btls.len());
        let mut keys = RdmaKeys::default();
        for b in btls {
            match bml.btl(b).register_mem(mem, access) {
                Ok(reg) => {
                    keys.keys
                        .push((self.names[b].clone(), reg.remote_key.clone()));
                    regs.push((b, reg));
                }
                Err(e) => {
                    tracing::debug!(%e, btl = b, "ob1: window registration failed on this BTL")
                }
            }
        }
        self.osc.next_handle += 1;
        let handle = self.osc.next_handle;
        self.osc.regs.insert(handle, regs);
        Ok((handle, keys))
    }

    /// Release registration `handle`.
    pub(super) fn osc_rdma_deregister(&mut self, bml: &mut Bml, handle: u64) {
        for (b, reg) in self.osc.regs.remove(&handle).unwrap_or_default() {
            bml.btl(b).deregister_mem(&reg);
        }
    }

    /// Start a put (`get` false) or a get of `local` at `addr` of `peer`.
    pub(super) fn osc_rdma_start(
        &mut self,
        bml: &mut Bml,
        peer: Rank,
        local: UserBuf,
        keys: &RdmaKeys,
        addr: u64,
        get: bool,
    ) -> Result<RdmaToken, PmlError> {
        let Some(r) = self.routes.get(peer as usize) else {
            return Err(PmlError::BadRank {
                rank: peer,
                size: self.routes.len() as u32,
            });
        };
        if self.dead[peer as usize] {
            return Err(PmlError::Unreachable(format!("rank {peer} failed earlier")));
        }
        let need = if get { BtlFlags::GET } else { BtlFlags::PUT };
        // The fastest BTL of the peer's RDMA routes that offers the operation and that the
        // peer registered its memory with.
        let chosen = r.rdma.iter().find_map(|rt| {
            if !self.attrs[rt.btl].flags.contains(need) {
                return None;
            }
            let name = &self.names[rt.btl];
            keys.keys
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, k)| (rt.btl, k.as_slice()))
        });
        let Some((btl, remote_key)) = chosen else {
            let have: Vec<&str> = keys.keys.iter().map(|(n, _)| n.as_str()).collect();
            return Err(PmlError::Unreachable(format!(
                "no BTL reaching rank {peer} offers RDMA {} with a key it registered (its keys: {have:?})",
                if get { "get" } else { "put" }
            )));
        };
        if get {
            self.osc.gets += 1;
        } else {
            self.osc.puts += 1;
        }
        self.osc.bytes += local.len() as u64;
        let (slot, token) = self.osc.occupy();
        let t = &mut self.osc.slots[slot].t;
        t.peer = peer;
        t.btl = btl;
        t.get = get;
        t.local = local;
        t.remote.addr = addr;
        t.remote.len = local.len();
        // (Into the slot's own buffer: no allocation once it held a key this long.)
        t.remote.remote_key.clear();
        t.remote.remote_key.extend_from_slice(remote_key);
        t.in_flight = 0;
        t.error = None;
        self.osc_rdma_issue(bml, token);
        Ok(token)
    }

    /// Issue the pieces of transfer `token` the BTL takes now.
    fn osc_rdma_issue(&mut self, bml: &mut Bml, token: RdmaToken) {
        let Some(t) = self.osc.transfer(token) else {
            return;
        };
        let frag = self.attrs[t.btl].rdma_pipeline_frag_size;
        let depth = if t.get {
            self.cfg.recv_pipeline_depth
        } else {
            self.cfg.send_pipeline_depth
        };
        while t.error.is_none() {
            let Some(n) = rdma_piece(t.local.len(), t.in_flight as usize, depth, frag) else {
                break;
            };
            let piece = t.local.slice(0, n);
            // The transfer's own segment, cut to the piece: the key is not copied.
            t.remote.len = n;
            let ct = CompletionToken(token | TOKEN_BIT);
            let btl = bml.btl(t.btl);
            let r = if t.get {
                btl.get(t.peer, piece, &t.remote, ct)
            } else {
                btl.put(t.peer, piece, &t.remote, ct)
            };
            match r {
                Ok(()) => {
                    t.in_flight += 1;
                    t.local = t.local.slice(n, t.local.len() - n);
                    t.remote.addr = t.remote.addr.wrapping_add(n as u64);
                }
                Err(SendError::WouldBlock) => {
                    self.stats.would_block += 1;
                    break;
                }
                Err(e) => {
                    t.error = Some(e.to_string());
                }
            }
        }
    }

    /// Has transfer `token` finished? Issues what the BTL refused before.
    pub(super) fn osc_rdma_test(
        &mut self,
        bml: &mut Bml,
        token: RdmaToken,
    ) -> Option<Result<(), PmlError>> {
        let Some(t) = self.osc.transfer(token) else {
            return Some(Err(PmlError::Other(format!(
                "unknown one-sided RDMA transfer {token}"
            ))));
        };
        if !t.local.is_empty() && t.error.is_none() {
            self.osc_rdma_issue(bml, token);
        }
        let t = self.osc.transfer(token)?;
        // A transfer that failed is reported once no piece of it is in flight (the BTL may
        // still read or write its buffer until then).
        if t.in_flight > 0 || (t.error.is_none() && !t.local.is_empty()) {
            return None;
        }
        let error = t.error.take();
        let (get, peer) = (t.get, t.peer);
        let slot = (token & ((1 << SLOT_BITS) - 1)) as usize;
        let s = &mut self.osc.slots[slot];
        s.live = false;
        s.gen = (s.gen + 1) & GEN_MASK;
        s.t.local = UserBuf::empty();
        self.osc.free.push(slot as u32);
        Some(match error {
            None => Ok(()),
            Some(e) => Err(PmlError::Other(format!(
                "one-sided RDMA {} with rank {} failed: {e}",
                if get { "get" } else { "put" },
                peer
            ))),
        })
    }
}
