//! The active messages of osc-am and their encoding: a kind byte, then fixed little-endian
//! fields, then the variable parts (layout runs, data) with their lengths. A message that does
//! not decode is dropped by the target with a warning (it cannot come from rmca).

use rmca_framework::osc::{AccOp, Elem, Layout, LockKind};

/// An error a target found in an operation, sent back to the origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// `MPI_ERR_RMA_RANGE` (true) or another argument error.
    pub range: bool,
    /// What was wrong.
    pub msg: String,
}

/// The bytes a put or an accumulate carries: owned by the message, either a vector of their
/// own (the origin's) or the tail of the buffer the message arrived in ([`Msg::decode_vec`]
/// keeps it there: a large accumulate is not copied out of its message before it is applied).
#[derive(Clone, Default)]
pub struct Payload {
    buf: Vec<u8>,
    start: usize,
}

impl Payload {
    /// The bytes as a vector of their own (no copy when they are one already).
    pub fn into_vec(mut self) -> Vec<u8> {
        if self.start > 0 {
            self.buf.drain(..self.start);
        }
        self.buf
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

impl From<Vec<u8>> for Payload {
    fn from(buf: Vec<u8>) -> Self {
        Self { buf, start: 0 }
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Payload {}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// One active message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Write `data` into `layout` at `addr`.
    Put {
        /// Target address.
        addr: u64,
        /// Where the bytes go.
        layout: Layout,
        /// The bytes.
        data: Payload,
    },
    /// Read `layout` at `addr`; the target answers [`Msg::Reply`] with `id`.
    Get {
        /// The origin's operation.
        id: u64,
        /// Target address.
        addr: u64,
        /// What to read.
        layout: Layout,
    },
    /// Accumulate; with `fetch` the target answers [`Msg::Reply`] with the old contents.
    Acc {
        /// The origin's operation (answered only when `fetch`).
        id: u64,
        /// Target address.
        addr: u64,
        /// Where.
        layout: Layout,
        /// Operation.
        op: AccOp,
        /// Element type.
        elem: Elem,
        /// Answer with the previous contents.
        fetch: bool,
        /// Origin data (empty for [`AccOp::NoOp`]).
        data: Payload,
    },
    /// Compare-and-swap of one element; answered with the old value.
    Cas {
        /// The origin's operation.
        id: u64,
        /// Target address.
        addr: u64,
        /// Element type.
        elem: Elem,
        /// Compared with the target.
        compare: Vec<u8>,
        /// Stored when equal.
        value: Vec<u8>,
    },
    /// The answer to a fetching operation: its data, or why the target refused it.
    Reply {
        /// The origin's operation.
        id: u64,
        /// Result.
        result: Result<Vec<u8>, Refusal>,
    },
    /// A non-fetching operation was refused (nothing was written).
    Refused(Refusal),
    /// The sender reached its fence (everything it sent before arrived first).
    Fence,
    /// [`Msg::Fence`] of a sender that sent no operation as a message since its last fence
    /// and whose every transfer is complete (a module that moves data by RDMA sends it
    /// behind its transfers to every peer): when every member's fence of a round is this
    /// one, nothing of the epoch is left to apply anywhere, and the round of
    /// [`Msg::Fenced`] is skipped.
    FenceQuiet,
    /// The sender saw every member's fence: everything aimed at it is applied.
    Fenced,
    /// The sender exposes its window to the receiver (`MPI_Win_post`).
    Post,
    /// The sender ended its access epoch to the receiver (`MPI_Win_complete`).
    Complete,
    /// Lock request.
    Lock(LockKind),
    /// Lock granted.
    Granted,
    /// Release the lock (everything sent before was applied first); answered by [`Msg::Ack`].
    Unlock,
    /// Answer [`Msg::Ack`] once everything sent before was applied.
    Flush,
    /// The answer to [`Msg::Unlock`] and [`Msg::Flush`].
    Ack,
    /// The sender is freeing the window.
    Free,
}

const PUT: u8 = 1;
const GET: u8 = 2;
const ACC: u8 = 3;
const CAS: u8 = 4;
const REPLY_OK: u8 = 5;
const REPLY_ERR: u8 = 6;
const REFUSED: u8 = 7;
const FENCE: u8 = 8;
const POST: u8 = 9;
const COMPLETE: u8 = 10;
const LOCK_SHARED: u8 = 11;
const LOCK_EXCL: u8 = 12;
const GRANTED: u8 = 13;
const UNLOCK: u8 = 14;
const FLUSH: u8 = 15;
const ACK: u8 = 16;
const FREE: u8 = 17;
const FENCED: u8 = 18;
const FENCE_QUIET: u8 = 19;

/// Every kind byte osc-am sends.
const KINDS: [u8; 19] = [
    PUT,
    GET,
    ACC,
    CAS,
    REPLY_OK,
    REPLY_ERR,
    REFUSED,
    FENCE,
    POST,
    COMPLETE,
    LOCK_SHARED,
    LOCK_EXCL,
    GRANTED,
    UNLOCK,
    FLUSH,
    ACK,
    FREE,
    FENCED,
    FENCE_QUIET,
];

/// Kind bytes osc-am never uses, left to the components whose own messages share a window's
/// channel with osc-am's (osc-rdma): [`Msg::decode`] refuses them, and no kind of osc-am
/// may be added among them (checked when this crate compiles).
pub const RESERVED_KINDS: std::ops::RangeInclusive<u8> = 0xC0..=0xFF;

/// osc-rdma's message carrying a member's registration (its memory's address and keys),
/// reserved here so that no message of osc-am can take its kind.
pub const RDMA_KEYS: u8 = 0xC0;

/// osc-rdma's message telling the members of a node where a member's lock word is
/// ([`crate::lockword`]), reserved likewise.
pub const RDMA_LOCK_WORD: u8 = 0xC1;

const _: () = {
    assert!(RDMA_KEYS >= *RESERVED_KINDS.start());
    assert!(RDMA_LOCK_WORD >= *RESERVED_KINDS.start() && RDMA_LOCK_WORD != RDMA_KEYS);
    let mut i = 0;
    while i < KINDS.len() {
        assert!(
            KINDS[i] < *RESERVED_KINDS.start(),
            "an osc-am kind among the reserved ones"
        );
        i += 1;
    }
};

/// Where an encoding goes: a vector, or the head room in front of a payload
/// ([`Msg::into_bytes`]).
trait Sink {
    fn put(&mut self, b: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
}

/// Bytes written from the start of a slice on.
struct At<'a> {
    b: &'a mut [u8],
    at: usize,
}

impl Sink for At<'_> {
    fn put(&mut self, b: &[u8]) {
        self.b[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
}

fn u64s(out: &mut impl Sink, v: u64) {
    out.put(&v.to_le_bytes());
}

fn bytes(out: &mut impl Sink, b: &[u8]) {
    u64s(out, b.len() as u64);
    out.put(b);
}

fn layout(out: &mut impl Sink, l: &Layout) {
    u64s(out, l.runs.len() as u64);
    for &(o, n) in &l.runs {
        u64s(out, o as u64);
        u64s(out, n);
    }
}

fn refusal(out: &mut impl Sink, r: &Refusal) {
    out.put(&[u8::from(r.range)]);
    bytes(out, r.msg.as_bytes());
}

impl Msg {
    /// Bytes of the encoded message.
    pub fn encoded_len(&self) -> usize {
        let layout = |l: &Layout| 8 + 16 * l.runs.len();
        let refusal = |r: &Refusal| 1 + 8 + r.msg.len();
        1 + match self {
            Msg::Put {
                layout: l, data, ..
            } => 8 + layout(l) + 8 + data.len(),
            Msg::Get { layout: l, .. } => 16 + layout(l),
            Msg::Acc {
                layout: l, data, ..
            } => 16 + 3 + layout(l) + 8 + data.len(),
            Msg::Cas { compare, value, .. } => 16 + 1 + 8 + compare.len() + 8 + value.len(),
            Msg::Reply { result: Ok(d), .. } => 8 + 8 + d.len(),
            Msg::Reply { result: Err(r), .. } => 8 + refusal(r),
            Msg::Refused(r) => refusal(r),
            _ => 0,
        }
    }

    /// The encoded message.
    pub fn encode(&self) -> Vec<u8> {
        // One allocation of the exact size: a message is encoded for every operation.
        let mut out = Vec::with_capacity(self.encoded_len());
        let data = self.payload();
        self.head(&mut out, data.map_or(0, |d| d.len()));
        if let Some(d) = data {
            out.extend_from_slice(d);
        }
        out
    }

    /// The encoded message, in the payload's own buffer when it was made with room for the
    /// head in front ([`Msg::with_room`]: the origin's data is then copied once, into the
    /// message, not a second time by the encoding); else [`Msg::encode`].
    pub fn into_bytes(mut self) -> Vec<u8> {
        let n = self.payload().map_or(0, |d| d.len());
        let head = self.encoded_len() - n;
        let buf = match self.payload_mut() {
            Some(p) if p.start == head => std::mem::take(&mut p.buf),
            _ => return self.encode(),
        };
        let mut buf = buf;
        self.head(&mut At { b: &mut buf, at: 0 }, n);
        buf
    }

    /// This put or accumulate with `data` as its payload, in a buffer with room for the
    /// message's head in front ([`Msg::into_bytes`] writes it there).
    pub fn with_room(mut self, data: &[u8]) -> Msg {
        if let Some(p) = self.payload_mut() {
            *p = Payload::default();
        }
        let head = self.encoded_len();
        if let Some(p) = self.payload_mut() {
            let mut buf = Vec::with_capacity(head + data.len());
            buf.resize(head, 0);
            buf.extend_from_slice(data);
            *p = Payload { buf, start: head };
        }
        self
    }

    fn payload(&self) -> Option<&Payload> {
        match self {
            Msg::Put { data, .. } | Msg::Acc { data, .. } => Some(data),
            _ => None,
        }
    }

    /// Everything but a put's or an accumulate's data (`data_len` bytes, written after).
    fn head(&self, out: &mut impl Sink, data_len: usize) {
        match self {
            Msg::Put {
                addr, layout: l, ..
            } => {
                out.put(&[PUT]);
                u64s(out, *addr);
                layout(out, l);
                u64s(out, data_len as u64);
            }
            Msg::Get {
                id,
                addr,
                layout: l,
            } => {
                out.put(&[GET]);
                u64s(out, *id);
                u64s(out, *addr);
                layout(out, l);
            }
            Msg::Acc {
                id,
                addr,
                layout: l,
                op,
                elem,
                fetch,
                ..
            } => {
                out.put(&[ACC]);
                u64s(out, *id);
                u64s(out, *addr);
                out.put(&[*op as u8, *elem as u8, u8::from(*fetch)]);
                layout(out, l);
                u64s(out, data_len as u64);
            }
            Msg::Cas {
                id,
                addr,
                elem,
                compare,
                value,
            } => {
                out.put(&[CAS]);
                u64s(out, *id);
                u64s(out, *addr);
                out.put(&[*elem as u8]);
                bytes(out, compare);
                bytes(out, value);
            }
            Msg::Reply { id, result } => match result {
                Ok(d) => {
                    out.put(&[REPLY_OK]);
                    u64s(out, *id);
                    bytes(out, d);
                }
                Err(r) => {
                    out.put(&[REPLY_ERR]);
                    u64s(out, *id);
                    refusal(out, r);
                }
            },
            Msg::Refused(r) => {
                out.put(&[REFUSED]);
                refusal(out, r);
            }
            Msg::Fence => out.put(&[FENCE]),
            Msg::FenceQuiet => out.put(&[FENCE_QUIET]),
            Msg::Fenced => out.put(&[FENCED]),
            Msg::Post => out.put(&[POST]),
            Msg::Complete => out.put(&[COMPLETE]),
            Msg::Lock(LockKind::Shared) => out.put(&[LOCK_SHARED]),
            Msg::Lock(LockKind::Exclusive) => out.put(&[LOCK_EXCL]),
            Msg::Granted => out.put(&[GRANTED]),
            Msg::Unlock => out.put(&[UNLOCK]),
            Msg::Flush => out.put(&[FLUSH]),
            Msg::Ack => out.put(&[ACK]),
            Msg::Free => out.put(&[FREE]),
        }
    }

    /// Decode a message (`None`: malformed).
    pub fn decode(b: &[u8]) -> Option<Msg> {
        let (mut m, payload) = Self::parse(b)?;
        if let Some(at) = payload {
            *m.payload_mut()? = b[at..].to_vec().into();
        }
        Some(m)
    }

    /// [`Msg::decode`] of a message received into `b`: the data of a put or an accumulate
    /// stays in `b` (no copy).
    pub fn decode_vec(b: Vec<u8>) -> Option<Msg> {
        let (mut m, payload) = Self::parse(&b)?;
        if let Some(start) = payload {
            *m.payload_mut()? = Payload { buf: b, start };
        }
        Some(m)
    }

    fn payload_mut(&mut self) -> Option<&mut Payload> {
        match self {
            Msg::Put { data, .. } | Msg::Acc { data, .. } => Some(data),
            _ => None,
        }
    }

    /// The message with an empty payload, and where its payload starts in `b` (the rest of
    /// `b`: a put's and an accumulate's data come last).
    fn parse(b: &[u8]) -> Option<(Msg, Option<usize>)> {
        let mut r = Reader { b, at: 0 };
        let kind = r.u8()?;
        let mut payload = None;
        let m = match kind {
            PUT => Msg::Put {
                addr: r.u64()?,
                layout: r.layout()?,
                data: {
                    payload = Some(r.tail()?);
                    Payload::default()
                },
            },
            GET => Msg::Get {
                id: r.u64()?,
                addr: r.u64()?,
                layout: r.layout()?,
            },
            ACC => {
                let id = r.u64()?;
                let addr = r.u64()?;
                let op = AccOp::from_u8(r.u8()?)?;
                let elem = Elem::from_u8(r.u8()?)?;
                let fetch = r.u8()? != 0;
                Msg::Acc {
                    id,
                    addr,
                    op,
                    elem,
                    fetch,
                    layout: r.layout()?,
                    data: {
                        payload = Some(r.tail()?);
                        Payload::default()
                    },
                }
            }
            CAS => Msg::Cas {
                id: r.u64()?,
                addr: r.u64()?,
                elem: Elem::from_u8(r.u8()?)?,
                compare: r.bytes()?,
                value: r.bytes()?,
            },
            REPLY_OK => Msg::Reply {
                id: r.u64()?,
                result: Ok(r.bytes()?),
            },
            REPLY_ERR => Msg::Reply {
                id: r.u64()?,
                result: Err(r.refusal()?),
            },
            REFUSED => Msg::Refused(r.refusal()?),
            FENCE => Msg::Fence,
            FENCE_QUIET => Msg::FenceQuiet,
            FENCED => Msg::Fenced,
            POST => Msg::Post,
            COMPLETE => Msg::Complete,
            LOCK_SHARED => Msg::Lock(LockKind::Shared),
            LOCK_EXCL => Msg::Lock(LockKind::Exclusive),
            GRANTED => Msg::Granted,
            UNLOCK => Msg::Unlock,
            FLUSH => Msg::Flush,
            ACK => Msg::Ack,
            FREE => Msg::Free,
            _ => return None,
        };
        (r.at == b.len()).then_some((m, payload))
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.b.get(self.at..end)?;
        self.at = end;
        Some(s)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = usize::try_from(self.u64()?).ok()?;
        Some(self.take(n)?.to_vec())
    }

    /// A length-prefixed field that must end the message: where its bytes start.
    fn tail(&mut self) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        let start = self.at;
        self.take(n)?;
        (self.at == self.b.len()).then_some(start)
    }

    fn layout(&mut self) -> Option<Layout> {
        let n = usize::try_from(self.u64()?).ok()?;
        // Each run takes 16 bytes: a count beyond what is left is malformed (and must not
        // reserve memory).
        if n > (self.b.len() - self.at) / 16 {
            return None;
        }
        let mut runs = Vec::with_capacity(n);
        for _ in 0..n {
            runs.push((self.u64()? as i64, self.u64()?));
        }
        Some(Layout { runs })
    }

    fn refusal(&mut self) -> Option<Refusal> {
        let range = self.u8()? != 0;
        let msg = String::from_utf8(self.bytes()?).ok()?;
        Some(Refusal { range, msg })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> Vec<Msg> {
        let l = Layout {
            runs: vec![(-4, 8), (16, 4)],
        };
        vec![
            Msg::Put {
                addr: 8,
                layout: l.clone(),
                data: vec![1; 12].into(),
            },
            Msg::Get {
                id: 3,
                addr: 0,
                layout: l.clone(),
            },
            Msg::Acc {
                id: 9,
                addr: 4,
                layout: l,
                op: AccOp::LXor,
                elem: Elem::U16,
                fetch: true,
                data: vec![2; 12].into(),
            },
            Msg::Cas {
                id: 1,
                addr: 0,
                elem: Elem::I64,
                compare: vec![0; 8],
                value: vec![1; 8],
            },
            Msg::Reply {
                id: 5,
                result: Ok(vec![7, 8]),
            },
            Msg::Reply {
                id: 6,
                result: Err(Refusal {
                    range: true,
                    msg: "out".into(),
                }),
            },
            Msg::Refused(Refusal {
                range: false,
                msg: "x".into(),
            }),
            Msg::Fence,
            Msg::FenceQuiet,
            Msg::Fenced,
            Msg::Post,
            Msg::Complete,
            Msg::Lock(LockKind::Shared),
            Msg::Lock(LockKind::Exclusive),
            Msg::Granted,
            Msg::Unlock,
            Msg::Flush,
            Msg::Ack,
            Msg::Free,
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in samples() {
            let e = m.encode();
            assert_eq!(e.len(), m.encoded_len(), "{m:?}");
            assert_eq!(
                e.capacity(),
                e.len(),
                "{m:?}: one allocation of the exact size"
            );
            assert_eq!(Msg::decode(&e), Some(m.clone()));
            assert_eq!(Msg::decode_vec(e), Some(m));
        }
    }

    #[test]
    fn a_received_payload_is_not_copied() {
        let m = Msg::Acc {
            id: 1,
            addr: 0,
            layout: Layout::contiguous(4),
            op: AccOp::Sum,
            elem: Elem::U8,
            fetch: false,
            data: vec![1, 2, 3, 4].into(),
        };
        let e = m.encode();
        let at = e.as_ptr() as usize + e.len() - 4;
        let Some(Msg::Acc { data, .. }) = Msg::decode_vec(e) else {
            panic!("decodes")
        };
        assert_eq!(
            data.as_ptr() as usize,
            at,
            "the data stays where it arrived"
        );
        assert_eq!(data.into_vec(), vec![1, 2, 3, 4]);
    }

    #[test]
    fn an_origins_payload_is_encoded_where_it_was_copied() {
        for m in samples() {
            let data = m.payload().map(|d| d.to_vec());
            let expect = m.encode();
            let roomy = match &data {
                Some(d) => m.clone().with_room(d),
                None => m.clone(),
            };
            assert_eq!(roomy, m, "the same message");
            let at = roomy.payload().map(|d| d.as_ptr() as usize);
            let e = roomy.into_bytes();
            assert_eq!(e, expect, "{m:?}: the same bytes as encode");
            if let (Some(at), Some(d)) = (at, &data) {
                assert_eq!(
                    e.as_ptr() as usize + e.len() - d.len(),
                    at,
                    "{m:?}: the data was not copied again"
                );
            }
            // Without the room, the same bytes (encoded).
            assert_eq!(m.clone().into_bytes(), expect);
        }
    }

    #[test]
    fn truncated_or_extended_messages_are_refused() {
        for m in samples() {
            let e = m.encode();
            for cut in 0..e.len() {
                assert_eq!(Msg::decode(&e[..cut]), None, "{m:?} cut at {cut}");
            }
            let mut longer = e.clone();
            longer.push(0);
            assert_eq!(Msg::decode(&longer), None);
            assert_eq!(Msg::decode_vec(longer), None);
        }
    }

    #[test]
    fn reserved_kinds_are_never_sent_nor_decoded() {
        for m in samples() {
            let k = m.encode()[0];
            assert!(
                !RESERVED_KINDS.contains(&k),
                "{m:?} uses reserved kind {k:#x}"
            );
            assert!(KINDS.contains(&k), "{m:?}: kind {k:#x} missing from KINDS");
        }
        for k in RESERVED_KINDS {
            assert_eq!(Msg::decode(&[k]), None);
            assert_eq!(Msg::decode(&[k, 1, 0xff]), None);
        }
        assert!(RESERVED_KINDS.contains(&RDMA_KEYS));
    }

    proptest! {
        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Msg::decode(&b);
            let _ = Msg::decode_vec(b);
        }
    }
}
