//! The connection protocol as sans-IO state machines: [`Inbound`] turns the bytes read from an
//! accepted connection into events, [`Outbound`] turns fragments into the bytes to write. Neither
//! touches a socket or a clock: the module feeds them what it read, writes what they hand out,
//! and passes the time in explicitly, so every path (split reads, hostile bytes, a silent
//! client) is tested without the network.

use std::time::{Duration, Instant};

use rmca_framework::btl::tags;
use rmca_framework::rank::Rank;
use thiserror::Error;

use crate::wire::{
    FramePacket, FrameRepr, HelloPacket, HelloRepr, WireError, FRAME_HEADER_LEN, HELLO_HEADER_LEN,
};

/// Tag of the frame a sender writes before closing on purpose, so that the receiver can tell a
/// clean shutdown from a crash. Internal: never delivered upward.
pub const TAG_BYE: u8 = tags::BTL_INTERNAL_BASE;

/// Smallest read window offered to the socket.
const MIN_READ: usize = 64 * 1024;

/// Why an inbound connection was dropped.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum InboundError {
    /// The hello could not be parsed (foreign client, other version).
    #[error("bad hello: {0}")]
    BadHello(WireError),
    /// The hello carried another job's secret.
    #[error("hello from claimed rank {claimed_rank} carries another job's secret")]
    WrongSecret {
        /// The rank the connector claimed.
        claimed_rank: u32,
    },
    /// The hello claims a rank outside the job, or ours.
    #[error("hello claims rank {rank}, not a peer in a job of {job_size} (this is rank {me})")]
    BadRank {
        /// Claimed rank.
        rank: u32,
        /// Job size.
        job_size: u32,
        /// Our rank.
        me: Rank,
    },
    /// The hello was meant for another rank (the connector used a stale or wrong card).
    #[error("hello from rank {from} is addressed to rank {to}, but this is rank {me}")]
    Misdirected {
        /// The connector.
        from: u32,
        /// The rank it meant to reach.
        to: u32,
        /// Our rank.
        me: Rank,
    },
    /// No complete hello before the deadline.
    #[error("no hello within {0:?}")]
    HandshakeTimeout(Duration),
    /// A frame longer than this receiver accepts.
    #[error("frame of {len} bytes from rank {peer} exceeds the limit of {max}")]
    FrameTooLarge {
        /// Sender.
        peer: Rank,
        /// Announced length.
        len: u32,
        /// Limit.
        max: usize,
    },
    /// A frame with a reserved tag this version does not know.
    #[error("frame from rank {peer} with reserved tag {tag:#04x}")]
    ReservedTag {
        /// Sender.
        peer: Rank,
        /// Tag.
        tag: u8,
    },
    /// Data after the goodbye frame.
    #[error("rank {0} sent data after saying goodbye")]
    DataAfterBye(Rank),
    /// The stream ended without a goodbye (peer crashed or the path broke).
    #[error("connection from rank {peer} closed without goodbye{}", if *.partial { " in the middle of a frame" } else { "" })]
    UnexpectedEof {
        /// Sender.
        peer: Rank,
        /// Whether a partial frame was pending.
        partial: bool,
    },
    /// The stream ended before a complete hello.
    #[error("connection closed before its hello")]
    EofBeforeHello,
}

impl InboundError {
    /// The peer this error is about, once its hello was accepted (errors before that are
    /// strangers' and must not fail a peer).
    pub fn peer(&self) -> Option<Rank> {
        match self {
            InboundError::FrameTooLarge { peer, .. }
            | InboundError::ReservedTag { peer, .. }
            | InboundError::UnexpectedEof { peer, .. } => Some(*peer),
            InboundError::DataAfterBye(peer) => Some(*peer),
            _ => None,
        }
    }
}

/// What an [`Inbound`] accepts.
#[derive(Debug, Clone)]
pub struct InboundLimits {
    /// This process's rank.
    pub me: Rank,
    /// Ranks in the job.
    pub job_size: u32,
    /// The job's secret a hello must carry.
    pub secret: Vec<u8>,
    /// Longest frame payload accepted.
    pub max_frame: usize,
    /// Time allowed from accept to a complete hello.
    pub handshake_timeout: Duration,
}

/// An event of an inbound connection.
#[derive(Debug, PartialEq, Eq)]
pub enum InEvent<'a> {
    /// The hello was accepted: the connection carries `peer`'s fragments.
    Hello {
        /// The connector.
        peer: Rank,
    },
    /// A fragment.
    Frame {
        /// Sender.
        peer: Rank,
        /// BTL tag.
        tag: u8,
        /// Bytes (valid until the next call on the [`Inbound`]).
        data: &'a [u8],
    },
    /// The peer announced a clean close.
    Bye {
        /// Sender.
        peer: Rank,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InState {
    AwaitHello { deadline: Instant },
    Open { peer: Rank, bye: bool },
    Failed,
}

/// The receiving side of one accepted connection.
#[derive(Debug)]
pub struct Inbound {
    limits: std::sync::Arc<InboundLimits>,
    state: InState,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Inbound {
    /// A connection accepted at `now`.
    pub fn new(limits: std::sync::Arc<InboundLimits>, now: Instant) -> Self {
        let deadline = now + limits.handshake_timeout;
        Self {
            limits,
            state: InState::AwaitHello { deadline },
            buf: Vec::new(),
            start: 0,
            end: 0,
        }
    }

    /// The peer, once the hello was accepted.
    pub fn peer(&self) -> Option<Rank> {
        match self.state {
            InState::Open { peer, .. } => Some(peer),
            _ => None,
        }
    }

    /// Bytes of buffer held (for memory accounting).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Space to read into; call [`Inbound::commit`] with the bytes read. The window always fits
    /// at least the rest of the frame being received, so a frame never needs two buffers.
    pub fn read_buf(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        let pending = self.end - self.start;
        let need = self.bytes_needed().max(MIN_READ);
        if self.buf.len() - self.end < need {
            // Move the partial item to the front first; grow only if that is not enough.
            self.buf.copy_within(self.start..self.end, 0);
            self.start = 0;
            self.end = pending;
            if self.buf.len() < pending + need {
                self.buf.resize(pending + need, 0);
            }
        }
        &mut self.buf[self.end..]
    }

    /// Record that `n` bytes were read into the window of [`Inbound::read_buf`].
    pub fn commit(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// Bytes still missing for the item at the front of the buffer (0 when unknown).
    fn bytes_needed(&self) -> usize {
        let have = &self.buf[self.start..self.end];
        let need = match self.state {
            InState::AwaitHello { .. } => match HelloPacket::new_checked(have) {
                Err(WireError::Truncated { need, .. }) => need,
                _ => HELLO_HEADER_LEN,
            },
            _ => match FramePacket::new_checked(have) {
                Err(WireError::Truncated { need, .. })
                    if need <= FRAME_HEADER_LEN + self.limits.max_frame =>
                {
                    need
                }
                _ => FRAME_HEADER_LEN,
            },
        };
        need.saturating_sub(have.len())
    }

    /// The next event from the bytes committed so far, `Ok(None)` when more bytes are needed.
    /// After an error the connection must be closed (later calls return `Ok(None)`).
    pub fn poll_event(&mut self) -> Result<Option<InEvent<'_>>, InboundError> {
        match self.state {
            InState::Failed => Ok(None),
            InState::AwaitHello { .. } => self.poll_hello(),
            InState::Open { peer, bye } => self.poll_frame(peer, bye),
        }
    }

    fn fail<T>(&mut self, e: InboundError) -> Result<T, InboundError> {
        self.state = InState::Failed;
        Err(e)
    }

    fn poll_hello(&mut self) -> Result<Option<InEvent<'_>>, InboundError> {
        let have = &self.buf[self.start..self.end];
        let packet = match HelloPacket::new_checked(have) {
            Ok(p) => p,
            Err(WireError::Truncated { .. }) => {
                // Reject a stranger as soon as its first bytes show it, not at the timeout.
                let n = have.len().min(4);
                if have[..n] != crate::wire::MAGIC[..n] {
                    let mut m = [0u8; 4];
                    m[..n].copy_from_slice(&have[..n]);
                    return self.fail(InboundError::BadHello(WireError::BadMagic(m)));
                }
                return Ok(None);
            }
            Err(e) => return self.fail(InboundError::BadHello(e)),
        };
        let total = packet.total_len();
        let (rank, to, secret_ok) = match HelloRepr::parse(&packet) {
            Ok(h) => (h.rank, h.to, ct_eq(h.secret, &self.limits.secret)),
            Err(e) => return self.fail(InboundError::BadHello(e)),
        };
        if !secret_ok {
            return self.fail(InboundError::WrongSecret { claimed_rank: rank });
        }
        if rank >= self.limits.job_size || rank == self.limits.me {
            let (job_size, me) = (self.limits.job_size, self.limits.me);
            return self.fail(InboundError::BadRank { rank, job_size, me });
        }
        if to != self.limits.me {
            let me = self.limits.me;
            return self.fail(InboundError::Misdirected { from: rank, to, me });
        }
        self.start += total;
        self.state = InState::Open {
            peer: rank,
            bye: false,
        };
        Ok(Some(InEvent::Hello { peer: rank }))
    }

    fn poll_frame(&mut self, peer: Rank, bye: bool) -> Result<Option<InEvent<'_>>, InboundError> {
        let have = &self.buf[self.start..self.end];
        if have.is_empty() {
            return Ok(None);
        }
        if bye {
            return self.fail(InboundError::DataAfterBye(peer));
        }
        let packet = FramePacket::new_unchecked(have);
        let repr = match FrameRepr::parse(&packet) {
            Ok(r) => r,
            Err(_) => return Ok(None), // header incomplete
        };
        if repr.len as usize > self.limits.max_frame {
            return self.fail(InboundError::FrameTooLarge {
                peer,
                len: repr.len,
                max: self.limits.max_frame,
            });
        }
        if packet.check_len().is_err() {
            return Ok(None);
        }
        let total = packet.total_len();
        let range = self.start + FRAME_HEADER_LEN..self.start + total;
        self.start += total;
        if repr.tag >= tags::BTL_INTERNAL_BASE {
            if repr.tag == TAG_BYE && repr.len == 0 {
                self.state = InState::Open { peer, bye: true };
                return Ok(Some(InEvent::Bye { peer }));
            }
            return self.fail(InboundError::ReservedTag {
                peer,
                tag: repr.tag,
            });
        }
        Ok(Some(InEvent::Frame {
            peer,
            tag: repr.tag,
            data: &self.buf[range],
        }))
    }

    /// The stream ended. `Ok(Some(peer))` for a clean close after a goodbye.
    pub fn handle_eof(&mut self) -> Result<Option<Rank>, InboundError> {
        let partial = self.end > self.start;
        match self.state {
            InState::Failed => Ok(None),
            InState::AwaitHello { .. } => self.fail(InboundError::EofBeforeHello),
            InState::Open { peer, bye: true } if !partial => Ok(Some(peer)),
            InState::Open { peer, .. } => self.fail(InboundError::UnexpectedEof { peer, partial }),
        }
    }

    /// When [`Inbound::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            InState::AwaitHello { deadline } => Some(deadline),
            _ => None,
        }
    }

    /// Let time pass: a connection still without a hello at its deadline is refused.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), InboundError> {
        match self.state {
            InState::AwaitHello { deadline } if now >= deadline => {
                let t = self.limits.handshake_timeout;
                self.fail(InboundError::HandshakeTimeout(t))
            }
            _ => Ok(()),
        }
    }
}

/// Compare secrets without an early exit, so that timing does not reveal a prefix.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a fragment was not queued on an [`Outbound`].
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum QueueError {
    /// The pending bytes would exceed the configured cap; nothing was taken.
    #[error("{pending} bytes already pending, cap is {cap}")]
    Full {
        /// Bytes pending.
        pending: usize,
        /// The cap.
        cap: usize,
    },
    /// A goodbye was already queued.
    #[error("connection is closing")]
    Closing,
}

/// The sending side of one connection: a byte queue that starts with our hello.
#[derive(Debug)]
pub struct Outbound {
    buf: Vec<u8>,
    start: usize,
    cap: usize,
    closing: bool,
}

impl Outbound {
    /// A connection that first introduces us with `hello`; `cap` bounds the pending bytes
    /// (0 = unbounded; a frame is always accepted into an empty queue, so any frame can pass).
    pub fn new(hello: &HelloRepr<'_>, cap: usize) -> Self {
        let mut buf = vec![0u8; hello.buffer_len()];
        hello.emit(&mut HelloPacket::new_unchecked(&mut buf[..]));
        Self {
            buf,
            start: 0,
            cap,
            closing: false,
        }
    }

    /// Bytes waiting to be written.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Bytes of buffer held (for memory accounting).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Queue one fragment (`header` then `payload`, delivered as one buffer), copying it.
    pub fn queue(&mut self, tag: u8, header: &[u8], payload: &[u8]) -> Result<(), QueueError> {
        if self.closing {
            return Err(QueueError::Closing);
        }
        let len = header.len() + payload.len();
        let pending = self.pending();
        if self.cap != 0 && pending > 0 && pending + FRAME_HEADER_LEN + len > self.cap {
            return Err(QueueError::Full {
                pending,
                cap: self.cap,
            });
        }
        self.compact();
        let repr = FrameRepr {
            tag,
            len: len as u32,
        };
        self.buf.extend_from_slice(&repr.emit_header());
        self.buf.extend_from_slice(header);
        self.buf.extend_from_slice(payload);
        Ok(())
    }

    /// Queue the goodbye; nothing can be queued after it.
    pub fn queue_bye(&mut self) {
        if !self.closing {
            self.compact();
            self.buf.extend_from_slice(
                &FrameRepr {
                    tag: TAG_BYE,
                    len: 0,
                }
                .emit_header(),
            );
            self.closing = true;
        }
    }

    /// Drop consumed bytes once they dominate the buffer (amortised O(1) per byte).
    fn compact(&mut self) {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start >= 64 * 1024 && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }

    /// The bytes to write next, if any.
    pub fn poll_transmit(&self) -> Option<&[u8]> {
        (self.start < self.buf.len()).then(|| &self.buf[self.start..])
    }

    /// Record that `n` bytes of [`Outbound::poll_transmit`] were written.
    pub fn advance(&mut self, n: usize) {
        self.start = (self.start + n).min(self.buf.len());
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    const SECRET: &[u8] = b"job-secret";

    fn limits(max_frame: usize) -> Arc<InboundLimits> {
        Arc::new(InboundLimits {
            me: 1,
            job_size: 4,
            secret: SECRET.to_vec(),
            max_frame,
            handshake_timeout: Duration::from_secs(5),
        })
    }

    /// Everything an Outbound would write for `frags`, with an optional goodbye.
    fn stream(rank: u32, secret: &[u8], frags: &[(u8, Vec<u8>, Vec<u8>)], bye: bool) -> Vec<u8> {
        stream_to(rank, 1, secret, frags, bye)
    }

    fn stream_to(
        rank: u32,
        to: u32,
        secret: &[u8],
        frags: &[(u8, Vec<u8>, Vec<u8>)],
        bye: bool,
    ) -> Vec<u8> {
        let mut out = Outbound::new(&HelloRepr { rank, to, secret }, 0);
        for (tag, h, p) in frags {
            out.queue(*tag, h, p).unwrap();
        }
        if bye {
            out.queue_bye();
        }
        let bytes = out.poll_transmit().unwrap_or_default().to_vec();
        out.advance(bytes.len());
        assert_eq!(out.pending(), 0);
        bytes
    }

    #[derive(Debug, PartialEq, Eq)]
    enum Owned {
        Hello(Rank),
        Frame(Rank, u8, Vec<u8>),
        Bye(Rank),
    }

    /// Feed `bytes` in chunks of the given sizes and collect events until an error.
    fn feed(
        inb: &mut Inbound,
        bytes: &[u8],
        chunks: &[usize],
    ) -> (Vec<Owned>, Option<InboundError>) {
        let mut evs = Vec::new();
        let mut pos = 0;
        let mut ci = 0;
        while pos < bytes.len() {
            let want = chunks.get(ci).copied().unwrap_or(usize::MAX).max(1);
            ci += 1;
            let win = inb.read_buf();
            let n = want.min(win.len()).min(bytes.len() - pos);
            win[..n].copy_from_slice(&bytes[pos..pos + n]);
            inb.commit(n);
            pos += n;
            loop {
                match inb.poll_event() {
                    Ok(Some(InEvent::Hello { peer })) => evs.push(Owned::Hello(peer)),
                    Ok(Some(InEvent::Frame { peer, tag, data })) => {
                        evs.push(Owned::Frame(peer, tag, data.to_vec()))
                    }
                    Ok(Some(InEvent::Bye { peer })) => evs.push(Owned::Bye(peer)),
                    Ok(None) => break,
                    Err(e) => return (evs, Some(e)),
                }
            }
        }
        (evs, None)
    }

    #[test]
    fn hello_frames_and_bye() {
        let frags = vec![
            (0x40, b"h".to_vec(), b"payload".to_vec()),
            (0x41, vec![], vec![]),
        ];
        let bytes = stream(2, SECRET, &frags, true);
        let mut inb = Inbound::new(limits(1024), Instant::now());
        let (evs, err) = feed(&mut inb, &bytes, &[]);
        assert_eq!(err, None);
        assert_eq!(
            evs,
            vec![
                Owned::Hello(2),
                Owned::Frame(2, 0x40, b"hpayload".to_vec()),
                Owned::Frame(2, 0x41, vec![]),
                Owned::Bye(2)
            ]
        );
        assert_eq!(inb.handle_eof(), Ok(Some(2)));
    }

    #[test]
    fn wrong_secret_is_refused() {
        let bytes = stream(2, b"other-job!", &[], false);
        let mut inb = Inbound::new(limits(1024), Instant::now());
        let (evs, err) = feed(&mut inb, &bytes, &[]);
        assert!(evs.is_empty());
        assert_eq!(err, Some(InboundError::WrongSecret { claimed_rank: 2 }));
        assert_eq!(err.unwrap().peer(), None, "a stranger must not fail a peer");
    }

    #[test]
    fn bad_ranks_are_refused() {
        for rank in [1, 4, u32::MAX] {
            let bytes = stream(rank, SECRET, &[], false);
            let mut inb = Inbound::new(limits(1024), Instant::now());
            let (_, err) = feed(&mut inb, &bytes, &[]);
            assert!(
                matches!(err, Some(InboundError::BadRank { .. })),
                "{rank}: {err:?}"
            );
        }
    }

    #[test]
    fn misdirected_hello_is_refused() {
        let bytes = stream_to(2, 3, SECRET, &[(0x40, vec![], b"x".to_vec())], false);
        let mut inb = Inbound::new(limits(1024), Instant::now());
        let (evs, err) = feed(&mut inb, &bytes, &[]);
        assert!(evs.is_empty());
        assert_eq!(
            err,
            Some(InboundError::Misdirected {
                from: 2,
                to: 3,
                me: 1
            })
        );
    }

    #[test]
    fn stranger_is_refused_on_first_byte() {
        let mut inb = Inbound::new(limits(1024), Instant::now());
        let (_, err) = feed(&mut inb, b"GET / HTTP/1.1\r\n", &[1]);
        assert!(
            matches!(err, Some(InboundError::BadHello(WireError::BadMagic(_)))),
            "{err:?}"
        );
    }

    #[test]
    fn silent_client_times_out() {
        let t0 = Instant::now();
        let mut inb = Inbound::new(limits(1024), t0);
        let deadline = inb.poll_timeout().unwrap();
        assert_eq!(deadline, t0 + Duration::from_secs(5));
        assert_eq!(inb.handle_timeout(t0 + Duration::from_secs(4)), Ok(()));
        assert_eq!(
            inb.handle_timeout(deadline),
            Err(InboundError::HandshakeTimeout(Duration::from_secs(5)))
        );
        let bytes = stream(2, SECRET, &[], false);
        let mut inb = Inbound::new(limits(1024), t0);
        feed(&mut inb, &bytes, &[]);
        assert_eq!(inb.poll_timeout(), None, "no deadline once open");
    }

    #[test]
    fn oversized_frame_and_reserved_tag_fail_the_peer() {
        let bytes = stream(3, SECRET, &[(0x40, vec![0; 2000], vec![])], false);
        let mut inb = Inbound::new(limits(1024), Instant::now());
        let (_, err) = feed(&mut inb, &bytes, &[]);
        assert_eq!(
            err,
            Some(InboundError::FrameTooLarge {
                peer: 3,
                len: 2000,
                max: 1024
            })
        );
        let bytes = stream(3, SECRET, &[(0xF7, vec![], vec![])], false);
        let mut inb = Inbound::new(limits(1024), Instant::now());
        let (_, err) = feed(&mut inb, &bytes, &[]);
        assert_eq!(err.as_ref().and_then(InboundError::peer), Some(3));
    }

    #[test]
    fn eof_without_bye_is_a_failure() {
        let bytes = stream(0, SECRET, &[(0x40, vec![], b"abc".to_vec())], false);
        let mut inb = Inbound::new(limits(1024), Instant::now());
        let (_, err) = feed(&mut inb, &bytes[..bytes.len() - 1], &[]);
        assert_eq!(err, None);
        assert_eq!(
            inb.handle_eof(),
            Err(InboundError::UnexpectedEof {
                peer: 0,
                partial: true
            })
        );
        let mut inb = Inbound::new(limits(1024), Instant::now());
        assert_eq!(inb.handle_eof(), Err(InboundError::EofBeforeHello));
    }

    #[test]
    fn cap_refuses_without_taking() {
        let mut out = Outbound::new(
            &HelloRepr {
                rank: 0,
                to: 1,
                secret: SECRET,
            },
            100,
        );
        let before = out.pending();
        out.queue(0x40, &[], &[0; 50]).unwrap();
        let err = out.queue(0x40, &[], &[0; 50]).unwrap_err();
        assert!(matches!(err, QueueError::Full { .. }));
        assert_eq!(out.pending(), before + 55);
        let n = out.pending();
        out.advance(n);
        out.queue(0x40, &[], &[0; 500])
            .expect("an empty queue takes any frame");
        out.queue_bye();
        assert_eq!(out.queue(0x40, &[], &[]), Err(QueueError::Closing));
    }

    fn frag() -> impl Strategy<Value = (u8, Vec<u8>, Vec<u8>)> {
        (
            0u8..tags::BTL_INTERNAL_BASE,
            proptest::collection::vec(any::<u8>(), 0..16),
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..8),
                proptest::collection::vec(any::<u8>(), 0..3000),
            ],
        )
    }

    proptest! {
        /// However the stream is cut into reads, the same fragments come out in order.
        #[test]
        fn any_split_delivers_in_order(
            frags in proptest::collection::vec(frag(), 0..20),
            chunks in proptest::collection::vec(1usize..4000, 0..64),
        ) {
            let bytes = stream(2, SECRET, &frags, true);
            let mut inb = Inbound::new(limits(4096), Instant::now());
            let (evs, err) = feed(&mut inb, &bytes, &chunks);
            prop_assert_eq!(err, None);
            let mut want = vec![Owned::Hello(2)];
            for (tag, h, p) in &frags {
                let mut d = h.clone();
                d.extend_from_slice(p);
                want.push(Owned::Frame(2, *tag, d));
            }
            want.push(Owned::Bye(2));
            prop_assert_eq!(evs, want);
            prop_assert_eq!(inb.handle_eof(), Ok(Some(2)));
        }

        /// Garbage, before or after a valid hello, never panics and never grows the buffer
        /// past one maximal frame.
        #[test]
        fn garbage_never_panics(
            valid_hello in any::<bool>(),
            garbage in proptest::collection::vec(any::<u8>(), 0..2000),
            chunks in proptest::collection::vec(1usize..500, 0..16),
        ) {
            let mut bytes = if valid_hello { stream(2, SECRET, &[], false) } else { Vec::new() };
            bytes.extend_from_slice(&garbage);
            let mut inb = Inbound::new(limits(1024), Instant::now());
            let _ = feed(&mut inb, &bytes, &chunks);
            let _ = inb.handle_eof();
            prop_assert!(inb.capacity() <= 2 * (MIN_READ + 1024 + FRAME_HEADER_LEN));
        }
    }
}
