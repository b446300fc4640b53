//! The lock words of a window's members on this node ([`rmca_osc_am::lockword`]): each
//! member keeps its own in a small shared object of its own making, with no name
//! ([`Mapping::create_exported`]), and tells every member where it is (its pid, the
//! object's descriptor, its node and a random cookie written in the object) in one message
//! sent before its keys. A member of the same node and pid namespace maps the object
//! through `/proc/<pid>/fd/<fd>` (as CMA reaches the pid's memory) and checks the cookie;
//! from then on its lock and unlock of that member are atomics on the word. Members of other
//! nodes, or any that cannot map it, keep the messages (the target takes its word for them).
//!
//! The same object holds the member's accumulate word ([`rmca_osc_am::lockword::acc_lock`]):
//! an origin that maps it applies its accumulates to that member itself, by CMA under the
//! word ([`crate::direct`]), and the member holds it while it applies the ones that come as
//! messages.
//!
//! After its first page the object holds one slot per origin rank ([`crate::slot`]): an
//! origin posts an accumulate of one run there and the member applies it in its progress
//! (384 bytes a slot, pages the kernel provides only once an origin writes its slot).
//!
//! The rest of the first page holds post/start/complete/wait's counters ([`Page::post`],
//! [`Own::posts`]): per window rank up to [`PSCW_MAX`], how many times that rank posted
//! to this member, and how many times it completed an access epoch to it. Each only grows
//! (a poster or origin adds one, this member compares it with what it took), so they are
//! never reset and an epoch's count cannot be mistaken for another's.
//!
//! Only windows over memory given at creation use words (not dynamic ones, whose operations
//! all go as messages the target must apply: there a word held across the round trip costs
//! more under contention than the message protocol, which grants, applies and releases
//! within one progress of the target's).
//!
//! Nothing is created collectively and nothing is left behind: the kernel frees an object
//! with its last mapping. A member that dies holding a word leaves it held (as a target
//! keeps the lock of a dead origin that took it by message): the others wait for it until
//! the launcher ends the job.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use rmca_common_shm::{node_token, Mapping};
use rmca_framework::wire::{Reader, Writer};
use rmca_osc_am::lockword::LockWord;

/// The message's kind byte (reserved by osc-am's wire module).
pub const KIND: u8 = rmca_osc_am::wire::RDMA_LOCK_WORD;

/// Bytes of the object's first page (the lock word at 0, the cookie at 8, the accumulate
/// word at 64: a cache line of its own, since origins spin on it while the lock word is held;
/// the slots' pending count at 128, which the member reads at each progress), then the
/// slots.
const LEN: usize = 4096;
const WORD: usize = 0;
const COOKIE: usize = 8;
const ACC: usize = 64;
const PENDING: usize = 128;
/// The counters of posts (one u64 per window rank) and of completes, in the first page.
const POSTS: usize = 256;
const COMPLETES: usize = POSTS + PSCW_MAX * 8;

/// Window ranks above this many post and complete by messages (the first page holds the
/// counters of this many).
pub const PSCW_MAX: usize = 224;
const _: () = assert!(COMPLETES + PSCW_MAX * 8 <= LEN);

/// Windows of more ranks have no slots (the object would span more than 390 KB of address
/// space in each member of the node that maps it).
pub const MAX_SLOTS: usize = 1024;

/// The slots of an object made for `slots` origins (none above [`MAX_SLOTS`]).
fn area(slots: usize) -> crate::slot::Area {
    crate::slot::Area {
        pending: PENDING / 8,
        first: LEN / 8,
        slots: if slots <= MAX_SLOTS { slots } else { 0 },
    }
}

/// The object's words, for the slots' protocol.
impl crate::slot::Cells for Mapping {
    fn cell(&self, i: usize) -> &AtomicU64 {
        self.atomic_u64(i * 8)
    }
}

/// A lock word in a mapped object (this member's or another's), kept mapped while the
/// engine uses it.
#[derive(Debug)]
pub struct SegWord(Rc<Mapping>);

impl LockWord for SegWord {
    fn word(&self) -> &AtomicU64 {
        self.0.atomic_u64(WORD)
    }
}

/// The accumulate word in a mapped object.
#[derive(Debug)]
pub struct SegAccWord(Rc<Mapping>);

impl LockWord for SegAccWord {
    fn word(&self) -> &AtomicU64 {
        self.0.atomic_u64(ACC)
    }
}

/// Another member's object, mapped: its lock word, its accumulate word, and the pid whose
/// memory CMA reaches.
#[derive(Debug)]
pub struct Page {
    map: Rc<Mapping>,
    pid: u32,
    area: crate::slot::Area,
}

impl Page {
    /// The member's lock word.
    pub fn lock_word(&self) -> SegWord {
        SegWord(self.map.clone())
    }

    /// The member's accumulate word.
    pub fn acc_word(&self) -> &AtomicU64 {
        self.map.atomic_u64(ACC)
    }

    /// The member's pid (of this pid namespace: its object was reached through it).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The member's slots ([`crate::slot`]) and the words they are in.
    pub fn slots(&self) -> (&Mapping, crate::slot::Area) {
        (&self.map, self.area)
    }

    /// The member's count of posts by window rank `me`, which `me` adds one to for each
    /// `MPI_Win_post` naming the member (`None`: `me` is above [`PSCW_MAX`]).
    pub fn post(&self, me: usize) -> Option<&AtomicU64> {
        (me < PSCW_MAX).then(|| self.map.atomic_u64(POSTS + me * 8))
    }

    /// The member's count of access epochs window rank `me` completed to it
    /// (`MPI_Win_complete`), as [`Page::post`].
    pub fn complete(&self, me: usize) -> Option<&AtomicU64> {
        (me < PSCW_MAX).then(|| self.map.atomic_u64(COMPLETES + me * 8))
    }
}

/// Where a member's word is, as its message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Announce {
    /// The member's [`node_token`].
    pub node: u64,
    /// The member's pid.
    pub pid: u32,
    /// The object's descriptor in that process.
    pub fd: i32,
    /// The random word the member wrote in the object.
    pub cookie: u64,
    /// Its slots (one per origin rank, after the first page; 0: none).
    pub slots: u32,
}

impl Announce {
    /// The message.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(29);
        Writer::new(&mut out)
            .u8(KIND)
            .u64(self.node)
            .u32(self.pid)
            .i32(self.fd)
            .u64(self.cookie)
            .u32(self.slots);
        out
    }

    /// Read a message (`None`: not one, or truncated).
    pub fn decode(b: &[u8]) -> Option<Self> {
        let mut r = Reader::new(b);
        if r.u8().ok()? != KIND {
            return None;
        }
        Some(Self {
            node: r.u64().ok()?,
            pid: r.u32().ok()?,
            fd: r.i32().ok()?,
            cookie: r.u64().ok()?,
            slots: r.u32().ok()?,
        })
    }
}

/// This member's own word: the object (whose descriptor the others open while it lives)
/// and what the message says.
#[derive(Debug)]
pub struct Own {
    map: Rc<Mapping>,
    _fd: OwnedFd,
    announce: Announce,
}

impl Own {
    /// A fresh free word, and slots for `slots` origin ranks (none above [`MAX_SLOTS`])
    /// (`None`, logged, if the system refuses: messages then serve every lock of this
    /// member).
    pub fn create(slots: usize) -> Option<Self> {
        let node = node_token();
        if node == 0 {
            return None;
        }
        let area = area(slots);
        let (map, fd) = match Mapping::create_exported(area.words() * 8, "osc-rdma lock word") {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!("osc-rdma: no lock word ({e}): locks go by messages");
                return None;
            }
        };
        let mut h = RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        let cookie = h.finish() | 1;
        map.atomic_u64(COOKIE).store(cookie, Ordering::Release);
        let announce = Announce {
            node,
            pid: std::process::id(),
            fd: fd.as_raw_fd(),
            cookie,
            slots: area.slots as u32,
        };
        Some(Self {
            map: Rc::new(map),
            _fd: fd,
            announce,
        })
    }

    /// The word, for this member's engine.
    pub fn word(&self) -> SegWord {
        SegWord(self.map.clone())
    }

    /// The accumulate word, for this member's engine.
    pub fn acc_word(&self) -> SegAccWord {
        SegAccWord(self.map.clone())
    }

    /// The message telling the node's members where it is.
    pub fn announce(&self) -> Announce {
        self.announce
    }

    /// How many times window rank `from` posted to this member (0 for ranks above
    /// [`PSCW_MAX`], which post by message).
    pub fn posts(&self, from: usize) -> u64 {
        self.count(POSTS, from)
    }

    /// How many access epochs window rank `from` completed to this member, as
    /// [`Own::posts`].
    pub fn completes(&self, from: usize) -> u64 {
        self.count(COMPLETES, from)
    }

    /// The counter of window rank `from` in the array at `at` (0 above [`PSCW_MAX`]).
    fn count(&self, at: usize, from: usize) -> u64 {
        if from < PSCW_MAX {
            self.map.atomic_u64(at + from * 8).load(Ordering::Acquire)
        } else {
            0
        }
    }

    /// This member's slots, which it serves ([`crate::slot::serve`]), and its accumulate
    /// word, which it holds meanwhile.
    pub fn slots(&self) -> (&Mapping, crate::slot::Area, &AtomicU64) {
        (
            &self.map,
            area(self.announce.slots as usize),
            self.map.atomic_u64(ACC),
        )
    }
}

/// Map the object a member announced, if it is of this node and pid namespace and the object
/// mapped holds its cookie (`None` otherwise: messages serve that member's locks and
/// accumulates).
pub fn open(a: &Announce) -> Option<Page> {
    if a.node != node_token() || a.node == 0 {
        return None;
    }
    let area = area(a.slots as usize);
    if area.slots != a.slots as usize {
        return None;
    }
    let map = match Mapping::open_exported(a.pid, a.fd, area.words() * 8) {
        Ok(m) => m,
        Err(e) => {
            tracing::debug!(
                pid = a.pid,
                "osc-rdma: a member's lock word is out of reach ({e})"
            );
            return None;
        }
    };
    if map.atomic_u64(COOKIE).load(Ordering::Acquire) != a.cookie {
        tracing::debug!(pid = a.pid, "osc-rdma: not the member's lock word (cookie)");
        return None;
    }
    Some(Page {
        map: Rc::new(map),
        pid: a.pid,
        area,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_announced_is_mapped_by_a_member_of_the_node_only() {
        let own = Own::create(3).expect("memfd here");
        let a = own.announce();
        assert_eq!(Announce::decode(&a.encode()), Some(a));
        assert_eq!(Announce::decode(&a.encode()[..20]), None, "truncated");
        let theirs = open(&a).expect("same process, same node");
        theirs.lock_word().word().store(5, Ordering::Relaxed);
        assert_eq!(own.word().word().load(Ordering::Relaxed), 5, "one word");
        theirs.acc_word().store(1, Ordering::Relaxed);
        assert_eq!(own.acc_word().word().load(Ordering::Relaxed), 1);
        assert_eq!(own.word().word().load(Ordering::Relaxed), 5, "two words");
        assert_eq!(theirs.pid(), std::process::id());
        assert!(
            open(&Announce {
                node: a.node ^ 1,
                ..a
            })
            .is_none(),
            "another node"
        );
        assert!(
            open(&Announce {
                cookie: a.cookie ^ 2,
                ..a
            })
            .is_none(),
            "another object"
        );
        assert!(open(&Announce { fd: 0, ..a }).is_none(), "not an object");
        // Slots: the member's and the origin's views are one object; more slots than the
        // object holds cannot be mapped.
        let (cells, area, _) = own.slots();
        assert_eq!(area.slots, 3);
        let (theirs_cells, theirs_area) = theirs.slots();
        assert_eq!(theirs_area, area);
        use crate::slot::Cells;
        theirs_cells
            .cell(area.first + 2 * crate::slot::STRIDE + 9)
            .store(11, Ordering::Relaxed);
        assert_eq!(
            cells
                .cell(area.first + 2 * crate::slot::STRIDE + 9)
                .load(Ordering::Relaxed),
            11
        );
        // Post and complete counters: what another member adds in its view, this one reads
        // in its own, per poster; none above PSCW_MAX.
        theirs.post(2).unwrap().fetch_add(1, Ordering::Release);
        theirs.post(2).unwrap().fetch_add(1, Ordering::Release);
        theirs.complete(2).unwrap().fetch_add(1, Ordering::Release);
        theirs
            .complete(PSCW_MAX - 1)
            .unwrap()
            .fetch_add(7, Ordering::Release);
        assert_eq!((own.posts(2), own.completes(2)), (2, 1));
        assert_eq!((own.posts(1), own.completes(1), own.posts(3)), (0, 0, 0));
        assert_eq!(own.completes(PSCW_MAX - 1), 7);
        assert!(theirs.post(PSCW_MAX).is_none() && theirs.complete(PSCW_MAX).is_none());
        assert_eq!((own.posts(PSCW_MAX), own.completes(PSCW_MAX)), (0, 0));
        assert_eq!(
            own.word().word().load(Ordering::Relaxed),
            5,
            "the lock word unmoved"
        );
        assert!(
            open(&Announce { slots: 4, ..a }).is_none(),
            "longer than the object"
        );
        assert!(
            open(&Announce {
                slots: MAX_SLOTS as u32 + 1,
                ..a
            })
            .is_none(),
            "more slots than any object has"
        );
    }
}
