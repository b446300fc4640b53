//! Receive-side classification, sans-IO: given a receive completion and its buffer, decide
//! whether the fragment is delivered (and from which rank, with which tag) or dropped (and why).
//! Nothing that fails a check reaches the PML.

use rmca_framework::rank::Rank;

use crate::header::{FragPacket, FragRepr, HeaderError, HEADER_LEN};

/// Why a datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Shorter than GRH + header, or a length the buffer cannot hold.
    Truncated,
    /// Not a btl-ud datagram of this version.
    Foreign,
    /// A btl-ud datagram of another job (job tag mismatch).
    WrongJob,
    /// No sender rank, or the rank/QP pair is not a known peer.
    UnknownSource,
    /// The completion reported an error.
    CompletionError,
}

/// The fields of a receive completion the classifier needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvMeta {
    /// Completion status was success.
    pub ok: bool,
    /// Bytes received including the GRH.
    pub byte_len: u32,
    /// Immediate data (the sender's rank).
    pub imm: Option<u32>,
    /// Source QP number.
    pub src_qp: u32,
}

/// Known senders: for each rank, the QP numbers its datagrams leave from.
#[derive(Debug, Default, Clone)]
pub struct PeerSources {
    qpns: Vec<Option<Vec<u32>>>,
}

impl PeerSources {
    /// Record `rank`'s send QP numbers.
    pub fn insert(&mut self, rank: Rank, mut qpns: Vec<u32>) {
        let r = rank as usize;
        if self.qpns.len() <= r {
            self.qpns.resize(r + 1, None);
        }
        qpns.sort_unstable();
        self.qpns[r] = Some(qpns);
    }
    /// Forget `rank`.
    pub fn remove(&mut self, rank: Rank) {
        if let Some(e) = self.qpns.get_mut(rank as usize) {
            *e = None;
        }
    }
    /// True when `rank` is known and `src_qp` is one of its send QPs.
    pub fn matches(&self, rank: Rank, src_qp: u32) -> bool {
        matches!(self.qpns.get(rank as usize), Some(Some(q)) if q.binary_search(&src_qp).is_ok())
    }
}

/// A fragment to deliver: sender, tag, and the byte range of the PML data inside the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Sender rank.
    pub peer: Rank,
    /// BTL tag.
    pub tag: u8,
    /// Range of the fragment (after GRH and header) within the receive buffer.
    pub range: std::ops::Range<usize>,
}

/// Classify one receive completion. `buf` is the whole receive buffer (GRH space first),
/// `grh` the bytes reserved in front of the datagram.
pub fn classify(
    meta: RecvMeta,
    buf: &[u8],
    grh: usize,
    job_tag: u16,
    peers: &PeerSources,
) -> Result<Delivery, DropReason> {
    if !meta.ok {
        return Err(DropReason::CompletionError);
    }
    let end = meta.byte_len as usize;
    if end > buf.len() || end < grh {
        return Err(DropReason::Truncated);
    }
    let pkt = match FragPacket::new_checked(&buf[grh..end]) {
        Ok(p) => p,
        Err(HeaderError::Truncated(_)) => return Err(DropReason::Truncated),
        Err(_) => return Err(DropReason::Foreign),
    };
    let repr = FragRepr::parse(&pkt).map_err(|_| DropReason::Foreign)?;
    if repr.job_tag != job_tag {
        return Err(DropReason::WrongJob);
    }
    let peer = meta.imm.ok_or(DropReason::UnknownSource)?;
    if !peers.matches(peer, meta.src_qp) {
        return Err(DropReason::UnknownSource);
    }
    Ok(Delivery {
        peer,
        tag: repr.tag,
        range: grh + HEADER_LEN..end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GRH: usize = 40;

    fn peers() -> PeerSources {
        let mut p = PeerSources::default();
        p.insert(1, vec![9, 7]);
        p
    }

    fn datagram(tag: u8, job: u16, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; GRH + HEADER_LEN];
        FragRepr { tag, job_tag: job }.emit(&mut b[GRH..]);
        b.extend_from_slice(payload);
        b
    }

    fn meta(len: usize) -> RecvMeta {
        RecvMeta {
            ok: true,
            byte_len: len as u32,
            imm: Some(1),
            src_qp: 7,
        }
    }

    #[test]
    fn delivers_valid_and_drops_each_kind() {
        let b = datagram(0x40, 0xabcd, b"hello");
        let d = classify(meta(b.len()), &b, GRH, 0xabcd, &peers()).unwrap();
        assert_eq!((d.peer, d.tag, &b[d.range]), (1, 0x40, &b"hello"[..]));
        // Zero-byte fragment.
        let e = datagram(1, 0xabcd, b"");
        assert!(classify(meta(e.len()), &e, GRH, 0xabcd, &peers())
            .unwrap()
            .range
            .is_empty());
        assert_eq!(
            classify(meta(b.len()), &b, GRH, 0x1234, &peers()),
            Err(DropReason::WrongJob)
        );
        assert_eq!(
            classify(meta(GRH + 3), &b, GRH, 0xabcd, &peers()),
            Err(DropReason::Truncated)
        );
        assert_eq!(
            classify(meta(b.len() + 1), &b, GRH, 0xabcd, &peers()),
            Err(DropReason::Truncated)
        );
        let mut m = meta(b.len());
        m.src_qp = 8;
        assert_eq!(
            classify(m, &b, GRH, 0xabcd, &peers()),
            Err(DropReason::UnknownSource)
        );
        m = meta(b.len());
        m.imm = None;
        assert_eq!(
            classify(m, &b, GRH, 0xabcd, &peers()),
            Err(DropReason::UnknownSource)
        );
        m = meta(b.len());
        m.imm = Some(u32::MAX);
        assert_eq!(
            classify(m, &b, GRH, 0xabcd, &peers()),
            Err(DropReason::UnknownSource)
        );
        let mut f = b.clone();
        f[GRH + 1] = 0x70;
        assert_eq!(
            classify(meta(f.len()), &f, GRH, 0xabcd, &peers()),
            Err(DropReason::Foreign)
        );
        m = meta(b.len());
        m.ok = false;
        assert_eq!(
            classify(m, &b, GRH, 0xabcd, &peers()),
            Err(DropReason::CompletionError)
        );
    }

    proptest! {
        /// Arbitrary buffers and completion fields never panic, and anything delivered passed
        /// every check.
        #[test]
        fn arbitrary_input_is_safe(buf in proptest::collection::vec(any::<u8>(), 0..128),
                                   len in 0u32..200, imm in proptest::option::of(0u32..4),
                                   src in 0u32..12, job in any::<u16>()) {
            let m = RecvMeta { ok: true, byte_len: len, imm, src_qp: src };
            if let Ok(d) = classify(m, &buf, GRH, job, &peers()) {
                prop_assert_eq!(d.peer, 1);
                prop_assert!(src == 7 || src == 9);
                prop_assert!(d.range.end <= buf.len());
                let p = FragPacket::new_checked(&buf[GRH..d.range.end]).unwrap();
                prop_assert_eq!(p.job_tag(), job);
            }
        }
    }
}
