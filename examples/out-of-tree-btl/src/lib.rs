//! btl-uds: a BTL over Unix datagram sockets, for ranks of one node. It is the example of an
//! out-of-tree plugin (see CONTRIBUTING.md at the repository root): a `cdylib` built against
//! `rmca-framework`, exporting its descriptor with [`rmca_framework::declare_plugin!`], loaded
//! by `rmca-run --mca component_path DIR --mca btl uds,self`.
//!
//! Each module binds a socket in the abstract namespace, named after the job and the rank, and
//! publishes the name as its business card. A fragment is one datagram: `[job tag u32]
//! [sender rank u32][btl tag u8]` then the fragment's bytes. Unix datagrams are reliable and
//! ordered on Linux; a full receive queue makes `send` answer `WouldBlock` having taken
//! nothing. Datagrams from another job, or whose source is not the rank they claim, are
//! dropped and counted.
#![deny(unsafe_code)]
#![warn(missing_docs)]

use std::io::ErrorKind;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use rmca_framework::btl::{
    exclusivity, Btl, BtlAttributes, BtlComponent, BtlError, BtlEvents, BtlFlags, BtlTag,
    ModexRead, SendError, SendHint,
};
use rmca_framework::component::{Component, ComponentMeta, InitContext};
use rmca_framework::params::{Level, Param, ParamRegistrar};
use rmca_framework::rank::{ProcInfo, Rank};

/// Modex key of the business card (the socket's abstract name).
pub const MODEX_KEY: &str = "btl.uds";
/// Bytes before a fragment in each datagram.
const HEADER_LEN: usize = 9;
/// Datagrams read per `progress` call at most, so one busy peer cannot hold the caller.
const RECV_BATCH: usize = 64;

/// The btl-uds component.
#[derive(Debug)]
pub struct UdsComponent;

/// The component instance the plugin descriptor hands to the host.
pub static UDS: UdsComponent = UdsComponent;

// The descriptor's vtable is `extern "C"` and the macro's `unsafe impl Sync` carries its own
// SAFETY comment: allowed in this module only.
#[allow(unsafe_code)]
mod plugin {
    use super::UDS;
    use rmca_framework::component::ComponentRef;
    rmca_framework::declare_plugin!(btl, "uds", ComponentRef::Btl(&UDS));
}

impl Component for UdsComponent {
    fn meta(&self) -> ComponentMeta {
        ComponentMeta {
            name: "uds",
            version: env!("CARGO_PKG_VERSION"),
            description: "Unix datagram sockets between the ranks of one node (an out-of-tree plugin example)",
        }
    }

    fn register_params(&self, p: &mut ParamRegistrar<'_>) {
        p.add(
            Param::int("max_send_size", 64 * 1024)
                .level(Level::Tuning)
                .help(
                    "Largest fragment in bytes (header included), 1 to 200000: one datagram each",
                ),
        );
    }
}

impl BtlComponent for UdsComponent {
    fn init(&self, ctx: &mut InitContext<'_>) -> Result<Vec<Box<dyn Btl>>, BtlError> {
        let max = ctx
            .params
            .get_int("btl_uds_max_send_size")
            .map_err(|e| BtlError::Other(e.to_string()))?;
        // A datagram must fit the default socket buffers (about 208 KiB).
        if !(1..=200_000).contains(&max) {
            return Err(BtlError::Other(format!(
                "btl_uds_max_send_size {max} is out of range: expected 1 to 200000"
            )));
        }
        let name = format!("rmca-uds-{}-{}", ctx.job.job_id, ctx.job.rank);
        let addr = SocketAddr::from_abstract_name(name.as_bytes())
            .map_err(|e| BtlError::Other(format!("btl-uds: socket name {name}: {e}")))?;
        let sock = UnixDatagram::bind_addr(&addr)
            .map_err(|e| BtlError::Other(format!("btl-uds: bind {name}: {e}")))?;
        sock.set_nonblocking(true)
            .map_err(|e| BtlError::Other(format!("btl-uds: non-blocking socket: {e}")))?;
        ctx.modex_put(MODEX_KEY, name.as_bytes())
            .map_err(|e| BtlError::Other(format!("btl-uds: publishing the card: {e}")))?;
        let attrs = BtlAttributes {
            eager_limit: (max as usize).min(4096),
            rndv_eager_limit: (max as usize).min(4096),
            max_send_size: max as usize,
            exclusivity: exclusivity::DEFAULT,
            latency_ns: 10_000,
            bandwidth_mbps: 10_000,
            flags: BtlFlags::SEND,
            ..BtlAttributes::default()
        };
        Ok(vec![Box::new(UdsBtl {
            sock,
            rank: ctx.job.rank,
            job_tag: job_tag(&ctx.job.secret),
            peers: Vec::new(),
            attrs,
            buf: vec![0; HEADER_LEN + max as usize],
            failed: Vec::new(),
            stats: Stats::default(),
        })])
    }
}

/// FNV-1a of the job secret: datagrams of other jobs are dropped.
fn job_tag(secret: &[u8]) -> u32 {
    secret.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

#[derive(Debug, Default)]
struct Stats {
    sent: u64,
    received: u64,
    would_block: u64,
    dropped: u64,
}

/// One btl-uds module: one socket.
#[derive(Debug)]
pub struct UdsBtl {
    sock: UnixDatagram,
    rank: Rank,
    job_tag: u32,
    /// Abstract socket name of every reachable peer, by rank.
    peers: Vec<Option<Vec<u8>>>,
    attrs: BtlAttributes,
    /// One datagram: sends are assembled and receives land here.
    buf: Vec<u8>,
    /// Peers whose socket went away, to report from `progress`.
    failed: Vec<(Rank, String)>,
    stats: Stats,
}

impl UdsBtl {
    fn peer_name(&self, peer: Rank) -> Option<&[u8]> {
        self.peers.get(peer as usize)?.as_deref()
    }
}

impl Btl for UdsBtl {
    fn component_name(&self) -> &str {
        "uds"
    }

    fn attributes(&self) -> &BtlAttributes {
        &self.attrs
    }

    fn add_procs(
        &mut self,
        procs: &[ProcInfo],
        modex: &dyn ModexRead,
    ) -> Result<Vec<bool>, BtlError> {
        let my_node = procs.iter().find(|p| p.is_self).map(|p| p.node);
        let mut reach = Vec::with_capacity(procs.len());
        for p in procs {
            // Abstract sockets exist per network namespace: only ranks of this node.
            let card = if p.is_self || Some(p.node) != my_node {
                None
            } else {
                modex
                    .get(p.rank, MODEX_KEY)
                    .map_err(|e| BtlError::Other(format!("btl-uds: modex: {e}")))?
            };
            if self.peers.len() <= p.rank as usize {
                self.peers.resize(p.rank as usize + 1, None);
            }
            reach.push(card.is_some());
            self.peers[p.rank as usize] = card;
        }
        Ok(reach)
    }

    fn del_procs(&mut self, ranks: &[Rank]) {
        for &r in ranks {
            if let Some(p) = self.peers.get_mut(r as usize) {
                *p = None;
            }
        }
    }

    fn send(
        &mut self,
        peer: Rank,
        tag: BtlTag,
        header: &[u8],
        payload: &[u8],
        _hint: SendHint,
    ) -> Result<(), SendError> {
        let len = header.len() + payload.len();
        if len > self.attrs.max_send_size {
            return Err(SendError::TooLarge {
                len,
                max: self.attrs.max_send_size,
            });
        }
        let Some(name) = self.peer_name(peer) else {
            return Err(SendError::Unreachable(peer));
        };
        let addr = SocketAddr::from_abstract_name(name).map_err(|e| SendError::PeerFailed {
            peer,
            reason: format!("card: {e}"),
        })?;
        let frame = &mut self.buf[..HEADER_LEN + len];
        frame[..4].copy_from_slice(&self.job_tag.to_le_bytes());
        frame[4..8].copy_from_slice(&self.rank.to_le_bytes());
        frame[8] = tag;
        frame[HEADER_LEN..HEADER_LEN + header.len()].copy_from_slice(header);
        frame[HEADER_LEN + header.len()..].copy_from_slice(payload);
        match self.sock.send_to_addr(frame, &addr) {
            Ok(_) => {
                self.stats.sent += 1;
                Ok(())
            }
            // The peer's receive queue is full: nothing was taken.
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                self.stats.would_block += 1;
                Err(SendError::WouldBlock)
            }
            Err(e) => {
                let reason = format!("send: {e}");
                tracing::warn!(peer, %reason, "btl-uds: path to peer failed");
                self.peers[peer as usize] = None;
                self.failed.push((peer, reason.clone()));
                Err(SendError::PeerFailed { peer, reason })
            }
        }
    }

    fn progress(&mut self, events: &mut dyn BtlEvents) -> usize {
        let mut n = 0;
        for (peer, reason) in self.failed.drain(..) {
            events.peer_failed(peer, &reason);
            n += 1;
        }
        for _ in 0..RECV_BATCH {
            if !events.wants_more() {
                break;
            }
            let (len, from) = match self.sock.recv_from(&mut self.buf) {
                Ok(r) => r,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!(error = %e, "btl-uds: receive");
                    break;
                }
            };
            let frame = &self.buf[..len];
            let valid = len >= HEADER_LEN && frame[..4] == self.job_tag.to_le_bytes();
            let src = if valid {
                u32::from_le_bytes(frame[4..8].try_into().expect("4 bytes"))
            } else {
                Rank::MAX
            };
            // The datagram's source address must be the socket of the rank it claims.
            let genuine = valid
                && self
                    .peer_name(src)
                    .is_some_and(|name| from.as_abstract_name() == Some(name));
            if !genuine {
                self.stats.dropped += 1;
                continue;
            }
            self.stats.received += 1;
            events.recv(src, frame[8], &frame[HEADER_LEN..]);
            n += 1;
        }
        n
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let s = &self.stats;
        [
            ("fragments_sent", s.sent),
            ("fragments_received", s.received),
            ("sends_would_block", s.would_block),
            ("datagrams_dropped", s.dropped),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}
