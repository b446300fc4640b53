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
//! ob1's own rendezvous (request ids, which never have it: see
//! [`ID_SPARE_BIT`](rmca_framework::slab::ID_SPARE_BIT)). The pieces held back by the depth,
//! or refused by a BTL for lack of resources, are issued when the transfer is tested.
//!
//! Transfers live in the framework's generational [`Slab`] (their tokens are its ids):
//! starting, completing and testing one is an index, not a hash lookup; the remote keys'
//! buffers of finished transfers are kept for the next ones, so a put of a window's bytes
//! allocates nothing once warm (a put and its test cost about 1,100 instructions with a
//! SipHash map and a cloned key per transfer and per piece).

use std::collections::HashMap;

use rmca_framework::bml::{Bml, BtlIndex};
use rmca_framework::btl::{
    BtlFlags, CompletionToken, MemAccess, Registration, RemoteSegment, SendError,
};
use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::{PmlError, RdmaKeys, RdmaToken, RequestId};
use rmca_framework::rank::Rank;
use rmca_framework::slab::{Slab, ID_SPARE_BIT};

use super::rendezvous::rdma_piece;
use super::Core;

/// Set in the completion token of every one-sided transfer (no request id has it).
pub(super) const TOKEN_BIT: u64 = ID_SPARE_BIT;

/// The one-sided RDMA state of an ob1 instance.
#[derive(Debug, Default)]
pub(crate) struct OscRdma {
    next_handle: u64,
    /// Transfers, by token.
    transfers: Slab<Transfer>,
    /// Remote-key buffers of finished transfers, for the next ones.
    spare_keys: Vec<Vec<u8>>,
    /// Registrations by handle: `(BTL, registration)` for each RDMA BTL.
    regs: HashMap<u64, Vec<(BtlIndex, Registration)>>,
    /// Transfers started (puts, gets) and their bytes, for the profile.
    pub(super) puts: u64,
    pub(super) gets: u64,
    pub(super) bytes: u64,
}

/// One transfer: what is left to issue, and the pieces in flight.
#[derive(Debug)]
struct Transfer {
    peer: Rank,
    btl: BtlIndex,
    get: bool,
    /// The local bytes not issued yet.
    local: UserBuf,
    /// Where they go: `addr` advances with each piece issued, `len` is set per piece.
    remote: RemoteSegment,
    in_flight: u32,
    error: Option<String>,
}

impl OscRdma {
    /// The live transfer `token` names (with or without [`TOKEN_BIT`]).
    #[inline]
    fn transfer(&mut self, token: u64) -> Option<&mut Transfer> {
        self.transfers.get_mut(RequestId(token & !TOKEN_BIT))
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
        // (Into a finished transfer's buffer: no allocation once one held a key this long.)
        let mut key = self.osc.spare_keys.pop().unwrap_or_default();
        key.extend_from_slice(remote_key);
        let token = self
            .osc
            .transfers
            .insert(Transfer {
                peer,
                btl,
                get,
                local,
                remote: RemoteSegment {
                    addr,
                    len: local.len(),
                    remote_key: key,
                },
                in_flight: 0,
                error: None,
            })
            .0;
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
        let t = self.osc.transfers.remove(RequestId(token))?;
        let (error, get, peer) = (t.error, t.get, t.peer);
        let mut key = t.remote.remote_key;
        key.clear();
        self.osc.spare_keys.push(key);
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
