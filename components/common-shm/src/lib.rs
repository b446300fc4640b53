//! A POSIX shared-memory object agreed among the members of a group (a window's, a
//! communicator's): member 0 creates it under a fresh name, the others open it by the name it
//! broadcasts, every member maps it, and member 0 unlinks the name as soon as every member
//! said it mapped it, so nothing is left in `/dev/shm` however the job ends (the kernel frees
//! the memory when the last member unmaps it or dies). The agreement travels through the
//! caller's own collectives ([`Agreement`]); a failure on any member fails the creation on
//! every member. The only place osc-sm and coll-sm make these system calls. [`futex`] is the
//! one cross-process sleep and wake on a shared word (btl-shm's doorbell, coll-sm's flags).
#![allow(unsafe_code)]

pub mod futex;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of a segment name (NUL-terminated, so names are shorter).
pub const NAME_LEN: usize = 64;

/// The collectives a creation needs, over the group that shares the object.
pub trait Agreement {
    /// The caller's error (its transport failing).
    type Error;
    /// Broadcast `name` from member 0 to every member.
    fn bcast_name(&mut self, name: &mut [u8; NAME_LEN]) -> Result<(), Self::Error>;
    /// Is `ok` true on every member?
    fn all(&mut self, ok: bool) -> Result<bool, Self::Error>;
}

/// Why a creation failed.
#[derive(Debug)]
pub enum CreateError<E> {
    /// The agreement's own collective failed.
    Agreement(E),
    /// A system call failed here, or on another member (then the message says which step).
    Os(String),
}

/// One member's mapping of the object: `len` bytes at `base`, unmapped when dropped. Other
/// processes read and write it at any time: the owner's protocol says which bytes are whose.
#[derive(Debug)]
pub struct Mapping {
    base: *mut u8,
    len: usize,
}

impl Mapping {
    /// Nothing mapped (a member with no bytes to share).
    pub fn empty() -> Self {
        Self {
            base: std::ptr::null_mut(),
            len: 0,
        }
    }

    /// Create, map on every member and unlink a fresh zeroed object of `len` (> 0) bytes:
    /// collective over `agree`; `me` is this member's index (0 creates it); `owner` names the
    /// component and object in names and messages (e.g. "osc-sm", "window").
    pub fn create<A: Agreement>(
        agree: &mut A,
        me: usize,
        len: usize,
        owner: &str,
        object: &str,
    ) -> Result<Self, CreateError<A::Error>> {
        Self::create_with(agree, me, len, owner, object, |_| {})
    }

    /// [`create`](Self::create), running `init` on this member's fresh mapping before the
    /// final all-mapped agreement: what `init` writes (this member's own bytes, a pid say) is
    /// visible to every member once the creation returned, without a round of its own (the
    /// agreement's messages order it). Not run where this member could not map the object.
    pub fn create_with<A: Agreement>(
        agree: &mut A,
        me: usize,
        len: usize,
        owner: &str,
        object: &str,
        init: impl FnOnce(&Mapping),
    ) -> Result<Self, CreateError<A::Error>> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let os_error = |what: &str| {
            CreateError::Os(format!(
                "{owner}: {what} the {object}'s {len}-byte shared segment in /dev/shm: {}",
                std::io::Error::last_os_error()
            ))
        };
        let mut name = [0u8; NAME_LEN];
        let mut fd = -1;
        let mut err = None;
        if me == 0 {
            let n = format!(
                "/rmca-{owner}-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            );
            let n = &n.as_bytes()[..n.len().min(NAME_LEN - 1)];
            name[..n.len()].copy_from_slice(n);
            // SAFETY: `name` is NUL-terminated (at most NAME_LEN - 1 bytes written into zeros).
            fd = unsafe {
                libc::shm_open(
                    name.as_ptr().cast(),
                    libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                    0o600,
                )
            };
            let sized = fd >= 0
                && libc::off_t::try_from(len)
                    // SAFETY: `fd` is the object just created.
                    .is_ok_and(|l| unsafe { libc::ftruncate(fd, l) } == 0);
            if !sized {
                err = Some(os_error("creating"));
            }
        }
        match agree.all(me != 0 || err.is_none()) {
            Ok(true) => {}
            Ok(false) => {
                unlink_and_close(me, &name, fd);
                return Err(err.unwrap_or_else(|| {
                    CreateError::Os(format!(
                        "{owner}: member 0 could not create the {object}'s shared segment"
                    ))
                }));
            }
            Err(e) => {
                unlink_and_close(me, &name, fd);
                return Err(CreateError::Agreement(e));
            }
        }
        if let Err(e) = agree.bcast_name(&mut name) {
            unlink_and_close(me, &name, fd);
            return Err(CreateError::Agreement(e));
        }
        if me != 0 {
            // Member 0 wrote fewer than NAME_LEN bytes; a foreign or short broadcast still
            // leaves the last byte a terminator.
            name[NAME_LEN - 1] = 0;
            // SAFETY: `name` is NUL-terminated (its last byte is 0).
            fd = unsafe { libc::shm_open(name.as_ptr().cast(), libc::O_RDWR, 0) };
        }
        // The object is `len` bytes long (member 0 sized it).
        let mapping = (fd >= 0).then(|| Self::map_fd(fd, len)).flatten();
        let mapped = mapping.is_some();
        if !mapped {
            err = Some(os_error("mapping"));
        }
        if fd >= 0 {
            // SAFETY: the descriptor opened above; the mapping stays without it.
            unsafe { libc::close(fd) };
        }
        let mapping = mapping.unwrap_or_else(Self::empty);
        if mapped {
            init(&mapping);
        }
        // Every member must have mapped it before the name goes, and it goes whatever happens.
        let everyone = agree.all(mapped);
        unlink_and_close(me, &name, -1);
        match everyone {
            Ok(true) => Ok(mapping),
            Ok(false) => Err(err.unwrap_or_else(|| {
                CreateError::Os(format!(
                    "{owner}: a member could not map the {object}'s shared segment"
                ))
            })),
            Err(e) => Err(CreateError::Agreement(e)),
        }
    }

    /// The first mapped byte (null when nothing is mapped).
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Nothing mapped.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the mapping made in `create`, unmapped once; the owners' references into
            // it borrow the structure holding this mapping, so none outlives it.
            unsafe { libc::munmap(self.base.cast(), self.len) };
        }
    }
}

impl Mapping {
    /// Map a fresh zeroed object of `len` (> 0) bytes that this process makes alone, with no
    /// name anywhere (`memfd_create`): the descriptor returned lets the node's other
    /// processes map it too ([`Mapping::open_exported`], through `/proc/<pid>/fd/<fd>`, which
    /// needs the same permission as reading this process's memory, as CMA does). Nothing is
    /// left behind however the job ends: the kernel frees the memory with its last
    /// descriptor or mapping. `what` names the object in errors.
    pub fn create_exported(len: usize, what: &str) -> std::io::Result<(Self, OwnedFd)> {
        let err = |step: &str| {
            let e = std::io::Error::last_os_error();
            std::io::Error::new(e.kind(), format!("{what}: {step} a {len}-byte memfd: {e}"))
        };
        let name = b"rmca-exported\0";
        // SAFETY: a NUL-terminated name; the result is checked.
        let fd = unsafe { libc::memfd_create(name.as_ptr().cast(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(err("creating"));
        }
        // SAFETY: `fd` was just created by this process and is owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let sized = libc::off_t::try_from(len)
            // SAFETY: the descriptor just created.
            .is_ok_and(|l| unsafe { libc::ftruncate(fd.as_raw_fd(), l) } == 0);
        if !sized {
            return Err(err("sizing"));
        }
        let map = Self::map_fd(fd.as_raw_fd(), len).ok_or_else(|| err("mapping"))?;
        Ok((map, fd))
    }

    /// Map the `len` bytes of the object that process `pid` made with
    /// [`Mapping::create_exported`] and holds open as descriptor `fd`. The caller checks that
    /// `pid` names a process of this node and this pid namespace ([`node_token`]) and that
    /// the object is the one meant (a word the owner wrote in it): a stale or foreign pid
    /// opens something else, or nothing. Refused unless it is a regular file (a memfd is one)
    /// of at least `len` bytes.
    pub fn open_exported(pid: u32, fd: i32, len: usize) -> std::io::Result<Self> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
        let path = format!("/proc/{pid}/fd/{fd}");
        // Non-blocking: a foreign descriptor could be a FIFO, whose open would wait.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)?;
        let meta = file.metadata()?;
        let ft = meta.file_type();
        if !meta.is_file() || ft.is_fifo() || ft.is_socket() || meta.size() < len as u64 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{path} is not a shared object of {len} bytes"),
            ));
        }
        Self::map_fd(file.as_raw_fd(), len).ok_or_else(|| {
            let e = std::io::Error::last_os_error();
            std::io::Error::new(e.kind(), format!("mapping {path}: {e}"))
        })
    }

    fn map_fd(fd: i32, len: usize) -> Option<Self> {
        if len == 0 {
            return None;
        }
        // SAFETY: maps `len` bytes of the object (at least that long, checked by the
        // callers), shared; the result is checked against MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        (base != libc::MAP_FAILED).then(|| Self {
            base: base.cast(),
            len,
        })
    }

    /// The 8-byte word at `off` as an atomic (other processes update it at any time).
    ///
    /// # Panics
    /// Outside the mapping or not 8-byte aligned (callers place their words).
    pub fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        assert!(
            off.checked_add(8).is_some_and(|end| end <= self.len) && off.is_multiple_of(8),
            "word {off} outside a {}-byte mapping or misaligned",
            self.len
        );
        // SAFETY: in range and aligned (checked; the mapping is page-aligned); shared memory
        // is only ever reached as atomics at these offsets by the owners' protocol, and the
        // reference borrows the mapping, so it does not outlive it.
        unsafe { &*self.base.add(off).cast::<AtomicU64>() }
    }
}

/// This node and pid namespace, as a number: equal in two processes when a pid one of them
/// names means the same process to the other (so [`Mapping::open_exported`] may follow it).
/// The boot's id (random per boot) and the pid namespace's inode; 0 if unreadable (then no
/// process trusts another's pid: callers treat 0 as matching nothing).
pub fn node_token() -> u64 {
    static TOKEN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TOKEN.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id");
        let ns = std::fs::metadata("/proc/self/ns/pid");
        let (Ok(boot), Ok(ns)) = (boot, ns) else {
            return 0;
        };
        // FNV-1a over the id, the namespace's device and inode.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in boot
            .trim()
            .bytes()
            .chain(ns.dev().to_le_bytes())
            .chain(ns.ino().to_le_bytes())
        {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        h.max(1)
    })
}

/// Member 0 removes the name (a no-op on the others); `fd`, if open, is closed.
fn unlink_and_close(me: usize, name: &[u8; NAME_LEN], fd: i32) {
    if me == 0 && name[0] != 0 {
        // SAFETY: a NUL-terminated name this process created.
        unsafe { libc::shm_unlink(name.as_ptr().cast()) };
    }
    if fd >= 0 {
        // SAFETY: a descriptor this process opened and has not closed.
        unsafe { libc::close(fd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One member: the agreement is trivial.
    struct Alone;
    impl Agreement for Alone {
        type Error = ();
        fn bcast_name(&mut self, _: &mut [u8; NAME_LEN]) -> Result<(), ()> {
            Ok(())
        }
        fn all(&mut self, ok: bool) -> Result<bool, ()> {
            Ok(ok)
        }
    }

    /// A member whose collectives report another member's failure at the `fail_at`-th `all`
    /// (1: creating, 2: mapping).
    struct OthersFail {
        fail_at: u32,
        calls: u32,
    }
    impl Agreement for OthersFail {
        type Error = ();
        fn bcast_name(&mut self, _: &mut [u8; NAME_LEN]) -> Result<(), ()> {
            Ok(())
        }
        fn all(&mut self, ok: bool) -> Result<bool, ()> {
            self.calls += 1;
            Ok(ok && self.calls != self.fail_at)
        }
    }

    /// Names of `owner` left in /dev/shm by this process (each test has its own owner: the
    /// tests run at once in one process).
    fn leftovers(owner: &str) -> usize {
        let me = format!("rmca-{owner}-{}-", std::process::id());
        std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&me))
                    .count()
            })
            .unwrap_or(0)
    }

    #[test]
    fn maps_zeroed_memory_and_leaves_no_name() {
        let m = Mapping::create(&mut Alone, 0, 8192, "test-maps", "test").unwrap();
        assert_eq!(m.len(), 8192);
        // SAFETY: 8192 mapped bytes, this process's only reference.
        let bytes = unsafe { std::slice::from_raw_parts_mut(m.base(), m.len()) };
        assert!(bytes.iter().all(|&b| b == 0));
        bytes[8191] = 7;
        assert_eq!(
            leftovers("test-maps"),
            0,
            "the name is unlinked once everyone mapped"
        );
    }

    /// Counts the agreement's rounds (broadcasts and alls) and records, at the last one,
    /// whether the init hook had written its byte (`marked`: where, once it ran).
    struct Counting {
        rounds: u32,
        marked: std::rc::Rc<std::cell::Cell<*const u8>>,
        marked_before_last: bool,
    }
    impl Agreement for Counting {
        type Error = ();
        fn bcast_name(&mut self, _: &mut [u8; NAME_LEN]) -> Result<(), ()> {
            self.rounds += 1;
            Ok(())
        }
        fn all(&mut self, ok: bool) -> Result<bool, ()> {
            self.rounds += 1;
            let p = self.marked.get();
            if self.rounds == 3 && !p.is_null() {
                // SAFETY: the mapping's first byte, written by the hook before this round;
                // the mapping lives until `create_with` returns.
                self.marked_before_last = unsafe { p.read_volatile() } == 42;
            }
            Ok(ok)
        }
    }

    #[test]
    fn the_init_hook_writes_before_the_final_agreement_and_adds_no_round() {
        let marked = std::rc::Rc::new(std::cell::Cell::new(std::ptr::null()));
        let mut agree = Counting {
            rounds: 0,
            marked: marked.clone(),
            marked_before_last: false,
        };
        let m = Mapping::create_with(&mut agree, 0, 4096, "test-init", "test", |m| {
            // SAFETY: the first of the 4096 bytes just mapped, this process's only reference.
            unsafe { m.base().write(42) };
            marked.set(m.base().cast_const());
        })
        .unwrap();
        assert_eq!(marked.get(), m.base().cast_const());
        assert_eq!(
            agree.rounds, 3,
            "creating, the name, all mapped: no extra round"
        );
        assert!(
            agree.marked_before_last,
            "the hook ran after the final round"
        );
    }

    #[test]
    fn an_exported_object_is_mapped_again_through_its_descriptor() {
        let (a, fd) = Mapping::create_exported(4096, "test").unwrap();
        let b = Mapping::open_exported(std::process::id(), fd.as_raw_fd(), 4096).unwrap();
        assert_ne!(a.base(), b.base(), "two mappings");
        a.atomic_u64(8).store(0xfeed, Ordering::Relaxed);
        assert_eq!(
            b.atomic_u64(8).load(Ordering::Relaxed),
            0xfeed,
            "one object"
        );
        assert!(
            Mapping::open_exported(std::process::id(), fd.as_raw_fd(), 8192).is_err(),
            "shorter than asked"
        );
        // Standard input is no shared object (a tty, a pipe or /dev/null here).
        assert!(Mapping::open_exported(std::process::id(), 0, 4096).is_err());
        assert!(
            Mapping::open_exported(u32::MAX, 3, 4096).is_err(),
            "no such process"
        );
        assert_ne!(node_token(), 0);
        assert_eq!(node_token(), node_token());
    }

    #[test]
    #[should_panic(expected = "misaligned")]
    fn a_misaligned_word_is_refused() {
        let (a, _fd) = Mapping::create_exported(4096, "test").unwrap();
        let _ = a.atomic_u64(4);
    }

    #[test]
    fn a_failure_elsewhere_fails_here_and_unlinks() {
        for (fail_at, says) in [(1, "could not create"), (2, "could not map")] {
            let mut agree = OthersFail { fail_at, calls: 0 };
            let e = Mapping::create(&mut agree, 0, 4096, "test-fails", "test").unwrap_err();
            assert!(
                matches!(&e, CreateError::Os(m) if m.contains(says)),
                "{e:?}"
            );
            assert_eq!(leftovers("test-fails"), 0);
        }
    }
}
