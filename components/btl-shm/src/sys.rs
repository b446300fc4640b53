//! The operating-system edge: shared-memory segment files and their mappings, and cross-memory
//! attach (CMA, `process_vm_readv`/`process_vm_writev`). Every `unsafe` of the crate outside the
//! ring itself is here.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use rmca_framework::buffer::UserBuf;

use crate::ring::{RingMem, LINE};

/// Directory holding the job's segment files (the naming contract with the launcher).
pub const SHM_DIR: &str = "/dev/shm";

/// A shared-memory file mapped read-write into this process.
#[derive(Debug)]
pub struct Mapping {
    base: NonNull<u8>,
    len: usize,
    path: PathBuf,
    /// True for the creator, who removes the file.
    owner: bool,
    unlinked: bool,
    /// The creator's registration of the file for removal if the launcher dies, held while the
    /// file is linked.
    on_launcher_death: Option<rmca_rte::lifeline::RemoveOnDeath>,
}

// SAFETY: the mapping is plain memory valid until Drop; all concurrent access to it goes
// through the ring protocol and atomics.
unsafe impl Send for Mapping {}

fn io_err(op: impl Into<String>, source: io::Error) -> (String, io::Error) {
    (op.into(), source)
}

/// An error of a system call, with what was being done.
pub type SysError = (String, io::Error);

impl Mapping {
    /// Create `path` exclusively with mode 0600, size it to `len` zero bytes and map it. The
    /// file is removed if the launcher dies before [`Mapping::unlink`] (or Drop) removes it.
    pub fn create(path: &Path, len: usize) -> Result<Self, SysError> {
        // Registered before it exists: a dying launcher finds it in the table at any point.
        let guard = rmca_rte::lifeline::remove_on_launcher_death(path).map_err(|e| {
            io_err(
                format!(
                    "register {} for removal if the launcher dies",
                    path.display()
                ),
                io::Error::other(e.to_string()),
            )
        })?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true) // O_CREAT | O_EXCL: never adopt someone else's file
            .mode(0o600)
            .open(path)
            .map_err(|e| io_err(format!("create {}", path.display()), e))?;
        let mut m = Self::map(&file, path, len, true)?;
        m.on_launcher_death = Some(guard);
        // Size after the mapping object exists so that a failure below still unlinks the file.
        if let Err(e) = file.set_len(len as u64) {
            m.unlink();
            return Err(io_err(format!("size {} to {len} bytes", path.display()), e));
        }
        Ok(m)
    }

    /// Map an existing segment of exactly `len` bytes created by a peer.
    pub fn open(path: &Path, len: usize) -> Result<Self, SysError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| io_err(format!("open {}", path.display()), e))?;
        let actual = file
            .metadata()
            .map_err(|e| io_err(format!("stat {}", path.display()), e))?
            .len();
        // A mapping longer than the file raises SIGBUS on access: refuse before mapping.
        if actual != len as u64 {
            return Err(io_err(
                format!("open {}", path.display()),
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("file has {actual} bytes, expected {len}"),
                ),
            ));
        }
        Self::map(&file, path, len, false)
    }

    fn map(file: &File, path: &Path, len: usize, owner: bool) -> Result<Self, SysError> {
        // SAFETY: a fresh shared mapping of a file we hold open; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            if owner {
                let _ = std::fs::remove_file(path);
            }
            return Err(io_err(format!("mmap {} ({len} bytes)", path.display()), e));
        }
        let base = NonNull::new(ptr.cast::<u8>()).expect("mmap returned null without MAP_FAILED");
        Ok(Self {
            base,
            len,
            path: path.to_owned(),
            owner,
            unlinked: !owner,
            on_launcher_death: None,
        })
    }

    /// Start of the mapping.
    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty mapping (never, in practice: segments have a header).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file is still in the file system (owner only).
    pub fn is_linked(&self) -> bool {
        !self.unlinked
    }

    /// Copy `bytes` to `offset`: only for setting up a header before anyone else maps the file.
    pub fn write_at(&mut self, offset: usize, bytes: &[u8]) {
        assert!(
            offset + bytes.len() <= self.len,
            "write_at out of the mapping"
        );
        // SAFETY: in bounds (asserted); &mut self and the caller's contract (before publication)
        // mean no one reads these bytes concurrently.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base().add(offset), bytes.len())
        }
    }

    /// Copy `len` bytes from `offset` (a racy snapshot is fine for validation: plain bytes).
    pub fn read_at(&self, offset: usize, len: usize) -> Vec<u8> {
        assert!(offset + len <= self.len, "read_at out of the mapping");
        let mut out = vec![0u8; len];
        // SAFETY: in bounds; the bytes are plain data (any value is valid).
        unsafe { std::ptr::copy_nonoverlapping(self.base().add(offset), out.as_mut_ptr(), len) }
        out
    }

    /// A 32-bit atomic at `offset` (4-aligned, inside the mapping).
    pub fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        assert!(
            offset.is_multiple_of(4) && offset + 4 <= self.len,
            "atomic_u32 out of the mapping"
        );
        // SAFETY: aligned and in bounds (asserted, and the base is page aligned); the word lives
        // as long as &self; every process accesses it atomically.
        unsafe { &*self.base().add(offset).cast::<AtomicU32>() }
    }

    /// The five words of a cooperative-copy slot at `offset` (8-aligned, inside the mapping).
    pub fn slot_words(&self, offset: usize) -> &[AtomicU64; 5] {
        assert!(
            offset.is_multiple_of(8) && offset + 40 <= self.len,
            "slot_words out of the mapping"
        );
        // SAFETY: aligned and in bounds (asserted, the base is page aligned); the words live as
        // long as &self; every process accesses them atomically only.
        unsafe { &*self.base().add(offset).cast::<[AtomicU64; 5]>() }
    }

    /// The ring whose consumer head is at `head` and whose `lines` data lines start at `data`
    /// (offsets in this mapping), or `None` if out of bounds or misaligned.
    pub fn ring(&self, head: usize, data: usize, lines: usize) -> Option<RingMem> {
        let end = lines.checked_mul(LINE)?.checked_add(data)?;
        if head.checked_add(8)? > self.len || end > self.len {
            return None;
        }
        // SAFETY: both ranges are inside the mapping (checked above). The creator zero-filled the
        // segment (ftruncate). The owner of the `Mapping` keeps it alive while the ring is used
        // (the module drops its producers and consumers before the mappings) and uses one
        // producer and one consumer per ring (one ring per sender).
        unsafe { RingMem::new(self.base().add(head), self.base().add(data), lines) }
    }

    /// Fault in, writable, the pages covering `len` bytes from `offset` (clipped to the
    /// mapping) without changing their contents (`MADV_POPULATE_WRITE`, Linux 5.14+), so that
    /// the first records written there take no page fault. Returns how many bytes were
    /// populated (0 when the kernel lacks the call: the pages then fault on first use, as
    /// before).
    pub fn populate_write(&self, offset: usize, len: usize) -> usize {
        let start = offset / 4096 * 4096;
        let end = offset
            .saturating_add(len)
            .min(self.len)
            .next_multiple_of(4096)
            .min(self.len);
        if start >= end {
            return 0;
        }
        // SAFETY: [start, end) lies inside our mapping (clipped above, page-aligned: the base
        // is); MADV_POPULATE_WRITE only prefaults page tables, it never changes the memory's
        // contents, so concurrent readers and writers in other processes are unaffected.
        let r = unsafe {
            libc::madvise(
                self.base().add(start).cast(),
                end - start,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if r == 0 {
            end - start
        } else {
            tracing::debug!(error = %io::Error::last_os_error(), "MADV_POPULATE_WRITE refused");
            0
        }
    }

    /// Remove the file (the mapping stays valid). Errors other than "already gone" are logged.
    pub fn unlink(&mut self) {
        if self.unlinked {
            return;
        }
        self.unlinked = true;
        match std::fs::remove_file(&self.path) {
            Ok(()) => tracing::debug!(path = %self.path.display(), "shm segment unlinked"),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot unlink shm segment")
            }
        }
        // Only now: the name must stay registered for as long as it may exist.
        self.on_launcher_death = None;
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.owner {
            self.unlink();
        }
        // SAFETY: base/len came from a successful mmap; rings built on it are dropped before
        // (the module drops its producers/consumers first, see ShmBtl's field order).
        unsafe {
            libc::munmap(self.base().cast(), self.len);
        }
    }
}

/// Let any process of ours attach with CMA even under Yama `ptrace_scope` 1 (siblings forked by
/// a launcher are not each other's descendants). Open MPI's vader does the same. Scope 2 and 3
/// still forbid it; the peer probe then fails and the GET flag is dropped.
pub fn allow_ptrace_by_any() {
    // SAFETY: prctl with integer arguments changes no memory; failure (no Yama) is harmless.
    unsafe {
        libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0);
    }
}

/// Read `len` bytes at `remote_addr` in process `pid` into `local`.
///
/// # Safety
/// `local..local+len` must be valid for writes and not accessed by anyone else during the call.
pub unsafe fn cma_read(pid: i32, local: *mut u8, remote_addr: u64, len: usize) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let liov = libc::iovec {
            iov_base: local.add(done).cast(),
            iov_len: len - done,
        };
        let riov = libc::iovec {
            iov_base: (remote_addr as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: the caller guarantees the local range; the kernel checks the remote one.
        let n = libc::process_vm_readv(pid, &liov, 1, &riov, 1, 0);
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "process_vm_readv transferred nothing",
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// Write `len` bytes from `local` to `remote_addr` in process `pid`.
///
/// # Safety
/// `local..local+len` must be valid for reads during the call.
pub unsafe fn cma_write(
    pid: i32,
    local: *const u8,
    remote_addr: u64,
    len: usize,
) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let liov = libc::iovec {
            iov_base: local.add(done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let riov = libc::iovec {
            iov_base: (remote_addr as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: the caller guarantees the local range; the kernel checks the remote one.
        let n = libc::process_vm_writev(pid, &liov, 1, &riov, 1, 0);
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "process_vm_writev transferred nothing",
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// Read `local.len()` bytes at `remote_addr` in `pid` into `local` (single copy).
pub fn cma_get(pid: i32, local: &UserBuf, remote_addr: u64) -> io::Result<()> {
    assert!(local.is_writable(), "cma_get into a read-only UserBuf");
    // SAFETY: UserBuf's contract: the region is valid for writes and not accessed by anyone
    // else until the request owning it completes, which is after this synchronous call.
    unsafe { cma_read(pid, local.as_ptr(), remote_addr, local.len()) }
}

/// Write `local` to `remote_addr` in `pid` (single copy).
pub fn cma_put(pid: i32, local: &UserBuf, remote_addr: u64) -> io::Result<()> {
    // SAFETY: UserBuf's contract: the region is valid for reads until its request completes.
    unsafe { cma_write(pid, local.as_ptr(), remote_addr, local.len()) }
}

/// Write `len` bytes of this process's memory at `local_addr` to `remote_addr` in `pid`: the
/// helper's side of a cooperative copy, whose addresses come from the receiver's slot.
pub fn cma_write_own(pid: i32, local_addr: u64, remote_addr: u64, len: usize) -> io::Result<()> {
    // SAFETY: no Rust reference to the local range is made; the kernel reads it with
    // copy_from_user, so an address that is not mapped here is EFAULT, not a fault of this
    // process. The range is the sender's buffer of a pending send, which nothing writes until
    // the receiver's FIN (the send's completion) after this copy was accounted for.
    unsafe { cma_write(pid, local_addr as usize as *const u8, remote_addr, len) }
}

/// Read the 8-byte word at `addr` in `pid` with CMA (the permission probe).
pub fn cma_read_word(pid: i32, addr: u64) -> io::Result<u64> {
    let mut word = 0u64;
    // SAFETY: `word` is a local 8-byte buffer we own exclusively during the call.
    unsafe { cma_read(pid, (&mut word as *mut u64).cast(), addr, 8)? };
    Ok(word)
}

/// Bind the calling thread to one CPU (benchmarks pin ranks to cores).
pub fn bind_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data, zero-initialised is an empty set; CPU_SET bounds-checks
    // against the set size (it ignores out-of-range CPUs, which the kernel then rejects).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Watches whether a peer process still exists: a pidfd (immune to pid reuse) where the kernel
/// has them (Linux 5.3+), else `kill(pid, 0)`.
#[derive(Debug)]
pub struct ProcessWatch {
    pid: i32,
    pidfd: Option<std::os::fd::OwnedFd>,
}

impl ProcessWatch {
    /// Start watching `pid`. Never fails: without a pidfd it falls back to signals.
    pub fn new(pid: i32) -> Self {
        // SAFETY: pidfd_open takes two integers and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let pidfd = (fd >= 0).then(|| {
            use std::os::fd::FromRawFd;
            // SAFETY: the syscall just returned this fd to us; nobody else owns it.
            unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) }
        });
        Self { pid, pidfd }
    }

    /// True once the process has exited (a zombie counts as exited).
    pub fn exited(&self) -> bool {
        match &self.pidfd {
            Some(fd) => {
                let mut p = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd, zero timeout.
                let n = unsafe { libc::poll(&mut p, 1, 0) };
                n > 0 && p.revents & libc::POLLIN != 0
            }
            None => {
                // SAFETY: signal 0 only checks for existence and permission.
                let r = unsafe { libc::kill(self.pid, 0) };
                r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
            }
        }
    }
}

// The cross-process futex (shared with coll-sm): sleep on a doorbell word, wake its owner.
pub use rmca_common_shm::futex::{wait as futex_wait, wake as futex_wake};

/// A process's doorbell word, mapped on its own: the first page of the process's segment, a
/// second mapping of the same file, so that the progress engine can hold it ([`Arc`] of an
/// idle waiter) for as long as it likes, independently of the module and its rings.
///
/// [`Arc`]: std::sync::Arc
#[derive(Debug)]
pub struct DoorbellPage {
    base: NonNull<u8>,
    offset: usize,
}

// SAFETY: the page is mapped until Drop; the only access to it is atomic (the word).
unsafe impl Send for DoorbellPage {}
// SAFETY: as above: shared references only ever reach the word through atomic operations.
unsafe impl Sync for DoorbellPage {}

impl DoorbellPage {
    /// Map the first page of the segment file at `path` (still linked: right after
    /// [`Mapping::create`]); the word is at `offset` (4-aligned, inside the page).
    pub fn open(path: &Path, offset: usize) -> Result<Self, SysError> {
        assert!(
            offset.is_multiple_of(4) && offset + 4 <= PAGE,
            "doorbell out of the first page"
        );
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| io_err(format!("open {} (doorbell)", path.display()), e))?;
        let len = file
            .metadata()
            .map_err(|e| io_err(format!("stat {}", path.display()), e))?
            .len();
        if len < PAGE as u64 {
            return Err(io_err(
                format!("map the doorbell of {}", path.display()),
                io::Error::new(io::ErrorKind::InvalidData, format!("file has {len} bytes")),
            ));
        }
        // SAFETY: a fresh shared mapping of one page of a file we hold open, at least a page
        // long (checked), so no access through it can fault; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io_err(
                format!("mmap the doorbell of {}", path.display()),
                e,
            ));
        }
        let base = NonNull::new(ptr.cast::<u8>()).expect("mmap returned null without MAP_FAILED");
        Ok(Self { base, offset })
    }

    /// The doorbell word.
    pub fn word(&self) -> &AtomicU32 {
        // SAFETY: aligned and inside the page (checked in open); mapped until Drop, which
        // &self outlives; every process accesses it atomically.
        unsafe { &*self.base.as_ptr().add(self.offset).cast::<AtomicU32>() }
    }
}

impl Drop for DoorbellPage {
    fn drop(&mut self) {
        // SAFETY: base came from a successful mmap of PAGE bytes; references to the word
        // borrow self, so none outlives this.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), PAGE);
        }
    }
}

/// Page size the doorbell mapping assumes (the segment header is page-aligned to it).
const PAGE: usize = 4096;

/// Minor page faults the calling thread has taken so far (`getrusage(RUSAGE_THREAD)`; 0 if
/// the call fails), to check that ring memory was faulted in ahead of use.
pub fn thread_minor_faults() -> u64 {
    // SAFETY: rusage is plain data (zeroed is valid); the kernel writes only into it.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut u) != 0 {
            return 0;
        }
        u.ru_minflt as u64
    }
}

/// This process's id, as the kernel's CMA calls want it.
pub fn pid() -> i32 {
    std::process::id() as i32
}

/// The CPUs this process may run on (its affinity mask).
fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data (zeroed: empty); sched_getaffinity writes at most its
    // size; CPU_ISSET reads inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// A cache line of its own for the ping-pong word.
#[repr(align(128))]
struct Padded(AtomicU64);

/// Round trips per timed batch of the handoff measurement.
const BATCH: u64 = 32;

/// How much longer than its budget a measurement may run while it has fewer than
/// [`MIN_BATCHES`] batches: on a loaded node the two threads may not share the CPUs for the
/// whole budget, and a measurement a few milliseconds late beats none.
const PATIENCE: u32 = 10;
/// Batches without which a handoff time is no measurement.
const MIN_BATCHES: u32 = 8;
/// Jobs whose costs the lock file of [`measure_costs_once_per_job`] remembers.
const COSTS_RECORDS_KEPT: usize = 16;

/// The costs [`measure_costs`] finds, measured once per job and node: the local ranks of a
/// job take turns on a lock file of the user's in [`SHM_DIR`], the first measures and leaves
/// the result there under `job_key` (next to those of the last few jobs), the others read it.
/// Measurements that ran side by side would time each other's spinning threads (unbound ranks
/// all pin theirs to the same two CPUs), and N ranks measuring cost N times the time. Threads
/// of one process take turns too.
/// When the lock file cannot be used (another user's file in its place, no `/dev/shm`), this
/// process measures alone.
/// `measure` is the measurement ([`measure_costs`] but in tests).
pub fn measure_costs_once_per_job(
    job_key: &str,
    measure: impl FnOnce() -> Option<crate::tune::Costs>,
) -> Option<crate::tune::Costs> {
    static IN_PROCESS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = IN_PROCESS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut file) = costs_file() else {
        return measure();
    };
    // SAFETY: flock on a descriptor we own; released when `file` is closed.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return measure();
    }
    let mut text = String::new();
    if io::Read::read_to_string(&mut file, &mut text).is_err() {
        text.clear();
    }
    if let Some(c) = text.lines().find_map(|l| parse_costs_record(l, job_key)) {
        return Some(c);
    }
    let measured = measure()?;
    let out = with_costs_record(&text, job_key, &measured);
    // A failed write only means the next rank measures again.
    let _ = file
        .set_len(0)
        .and_then(|()| std::os::unix::fs::FileExt::write_all_at(&file, out.as_bytes(), 0));
    Some(measured)
}

/// Our lock file for [`measure_costs_once_per_job`], if it is a regular file of ours (a name
/// in a shared directory could have been put there by another user).
fn costs_file() -> Option<File> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let path = costs_file_path();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .ok()?;
    let meta = file.metadata().ok()?;
    (meta.is_file() && meta.uid() == uid && meta.mode() & 0o077 == 0).then_some(file)
}

fn costs_file_path() -> PathBuf {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    Path::new(SHM_DIR).join(format!("rmca-shm-costs.{uid}"))
}

/// The lock file's text `text` with `costs` recorded for `job_key` after the records already
/// there, of which the newest [`COSTS_RECORDS_KEPT`] - 1 are kept (several jobs may start side
/// by side, and a job's later ranks must still find its record).
fn with_costs_record(text: &str, job_key: &str, costs: &crate::tune::Costs) -> String {
    // Transfers not measured are written as zeros (no measurement gives a zero rate).
    let t = costs.transfers.map_or([0.0; 4], |t| {
        [
            t.cached.write_bytes_per_ns,
            t.cached.read_bytes_per_ns,
            t.nontemporal.write_bytes_per_ns,
            t.nontemporal.read_bytes_per_ns,
        ]
    });
    let new = format!(
        "{job_key} {} {} {} {} {} {}",
        costs.handoff_ns, costs.copy_bytes_per_ns, t[0], t[1], t[2], t[3]
    );
    let mut records: Vec<&str> = text.lines().collect();
    records.push(&new);
    let keep = records.len().saturating_sub(COSTS_RECORDS_KEPT);
    records[keep..].join("\n") + "\n"
}

/// The costs recorded in `text` for `job_key` (`"<job_key> <handoff ns> <copy bytes/ns>
/// <cached write> <cached read> <non-temporal write> <non-temporal read>"`, rates in bytes/ns,
/// zeros for transfers not measured); `None` for another job's record or anything malformed
/// (one line of the lock file).
fn parse_costs_record(text: &str, job_key: &str) -> Option<crate::tune::Costs> {
    use crate::tune::{Transfer, Transfers};
    let mut words = text.trim_end().split(' ');
    if words.next()? != job_key {
        return None;
    }
    let mut v = [0f64; 6];
    for x in &mut v {
        *x = words.next()?.parse().ok()?;
    }
    let sane = |v: f64| v.is_finite() && v > 0.0;
    if words.next().is_some() || !sane(v[0]) || !sane(v[1]) {
        return None;
    }
    let transfers = match v[2..] {
        [0.0, 0.0, 0.0, 0.0] => None,
        [cw, cr, nw, nr] if [cw, cr, nw, nr].into_iter().all(sane) => Some(Transfers {
            cached: Transfer {
                write_bytes_per_ns: cw,
                read_bytes_per_ns: cr,
            },
            nontemporal: Transfer {
                write_bytes_per_ns: nw,
                read_bytes_per_ns: nr,
            },
        }),
        _ => return None,
    };
    Some(crate::tune::Costs {
        handoff_ns: v[0],
        copy_bytes_per_ns: v[1],
        transfers,
    })
}

/// Spin until `word` holds `want` (true), or until the other thread of a measurement gave up
/// (`stop`) or `give_up` passed (false, and `stop` is set for the other thread).
fn spin_until(
    word: &AtomicU64,
    want: u64,
    stop: &std::sync::atomic::AtomicBool,
    give_up: std::time::Instant,
) -> bool {
    use std::sync::atomic::Ordering;
    let mut spins = 0u32;
    loop {
        if word.load(Ordering::Acquire) == want {
            return true;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024)
            && (stop.load(Ordering::Relaxed) || std::time::Instant::now() > give_up)
        {
            stop.store(true, Ordering::Relaxed);
            return false;
        }
        std::hint::spin_loop();
    }
}

/// Measure what [`crate::tune`] needs: the one-way time of a cache-line handoff between two
/// threads pinned to two CPUs of our affinity mask (the least of up to 64 batches of 32 round
/// trips, so that batches where a thread was descheduled do not count), and the rate of a
/// 16 KiB cache-resident copy. Spends about `budget`, up to ten times more while it has
/// fewer than eight batches (`PATIENCE`, `MIN_BATCHES`). `None` when this process may run on
/// one CPU only, or when the threads never ran side by side for enough batches.
pub fn measure_costs(budget: std::time::Duration) -> Option<crate::tune::Costs> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;
    let cpus = allowed_cpus().ok()?;
    if cpus.len() < 2 {
        return None;
    }
    let (cpu_a, cpu_b) = (cpus[0], cpus[1]);
    let word = Padded(AtomicU64::new(0));
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let deadline = start + budget;
    let give_up = start + budget * PATIENCE;
    let wait = |want: u64| spin_until(&word.0, want, &stop, give_up);
    let best = std::thread::scope(|s| {
        let echo = s.spawn(|| {
            if bind_to_cpu(cpu_b).is_err() {
                stop.store(true, Ordering::Relaxed);
                return;
            }
            let mut i = 0u64;
            while wait(2 * i + 1) {
                word.0.store(2 * i + 2, Ordering::Release);
                i += 1;
            }
        });
        let timer = s.spawn(|| {
            if bind_to_cpu(cpu_a).is_err() {
                stop.store(true, Ordering::Relaxed);
                return None;
            }
            let mut best = f64::INFINITY;
            let mut batches = 0;
            let mut i = 0u64;
            'batches: while batches < 64 {
                let now = Instant::now();
                if now >= give_up || (now >= deadline && batches >= MIN_BATCHES) {
                    break;
                }
                let t0 = Instant::now();
                for _ in 0..BATCH {
                    word.0.store(2 * i + 1, Ordering::Release);
                    if !wait(2 * i + 2) {
                        break 'batches;
                    }
                    i += 1;
                }
                best = best.min(t0.elapsed().as_nanos() as f64 / (2 * BATCH) as f64);
                batches += 1;
            }
            stop.store(true, Ordering::Relaxed);
            (batches >= MIN_BATCHES).then_some(best)
        });
        let best = timer.join().ok().flatten();
        let _ = echo.join();
        best
    })?;
    // The copy: 16 KiB, cache-resident (the second and later copies), the least of 16.
    // Source and destination 64-byte aligned and half a page apart, as the ring's copies are
    // (aligned payloads): on the AMD EPYC VM, `rep movsb` runs ~35x slower when the
    // destination is 1-31 bytes past the source modulo 4 KiB (two separate heap blocks can
    // be exactly that).
    const COPY: usize = 16 * 1024;
    let mut buf = vec![1u8; 2 * COPY + 4096 + LINE];
    let at = buf.as_ptr().align_offset(LINE);
    let (src, dst) = buf[at..].split_at_mut(COPY + 2048);
    let (src, dst) = (&src[..COPY], &mut dst[..COPY]);
    let mut copy_ns = f64::INFINITY;
    for _ in 0..16 {
        let t0 = Instant::now();
        dst.copy_from_slice(std::hint::black_box(src));
        std::hint::black_box(&mut *dst);
        copy_ns = copy_ns.min(t0.elapsed().as_nanos() as f64);
    }
    Some(crate::tune::Costs {
        handoff_ns: best,
        copy_bytes_per_ns: COPY as f64 / copy_ns.max(1.0),
        transfers: measure_transfers(cpu_a, cpu_b, give_up),
    })
}

/// Bytes of a block of [`measure_transfers`]: a streamed eager fragment's payload.
const TRANSFER_BLOCK: usize = 64 * 1024;
/// Blocks written each way by [`measure_transfers`].
const TRANSFER_REPS: usize = 16;
/// Blocks the writer cycles through, so that each block it writes was last read by the
/// reader (as a ring's lines are), and both fit the caches.
const TRANSFER_SLOTS: usize = 4;

/// Memory two threads of [`measure_transfers`] take turns on.
struct Turns(*mut u8);
// SAFETY: the pointer is only dereferenced by the thread whose turn the flag says it is.
unsafe impl Sync for Turns {}

impl Turns {
    /// The block at byte `offset` (a method, so that closures capture the `Sync` wrapper
    /// rather than its pointer field).
    fn block(&self, offset: usize) -> *mut u8 {
        self.0.wrapping_add(offset)
    }
}

/// Time blocks moved from `cpu_a` to `cpu_b` the way a ring moves streamed records (the writer
/// writes a block the reader read before, the reader copies it out), with ordinary and with
/// non-temporal stores, interleaved; the median of [`TRANSFER_REPS`] of each side of each way
/// (a block where a thread was descheduled is an outlier, not the median). `None` when the two
/// threads did not run side by side before `give_up`, or non-temporal stores do not exist here.
fn measure_transfers(
    cpu_a: usize,
    cpu_b: usize,
    give_up: std::time::Instant,
) -> Option<crate::tune::Transfers> {
    use crate::tune::{Transfer, Transfers};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;
    if !crate::ring::NONTEMPORAL_STORES {
        return None;
    }
    let mut memory = vec![0u8; TRANSFER_SLOTS * TRANSFER_BLOCK + LINE];
    let at = memory.as_ptr().align_offset(LINE);
    let area = Turns(memory[at..].as_mut_ptr());
    let source = vec![1u8; TRANSFER_BLOCK];
    let mut sink = vec![0u8; TRANSFER_BLOCK];
    let turn = Padded(AtomicU64::new(0));
    let stop = AtomicBool::new(false);
    let wait = |want: u64| spin_until(&turn.0, want, &stop, give_up);
    let rounds = 2 * TRANSFER_REPS as u64;
    let (writes, reads) = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut ns = Vec::with_capacity(rounds as usize);
            if bind_to_cpu(cpu_a).is_err() {
                stop.store(true, Ordering::Relaxed);
                return ns;
            }
            for k in 0..rounds {
                if !wait(2 * k) {
                    break;
                }
                let block = (k as usize % TRANSFER_SLOTS) * TRANSFER_BLOCK;
                let t0 = Instant::now();
                // SAFETY: the block lies in `area` and is ours until we pass the turn on.
                unsafe {
                    let dst = area.block(block);
                    if k % 2 == 1 {
                        crate::ring::copy_nontemporal(source.as_ptr(), dst, TRANSFER_BLOCK);
                        crate::ring::nontemporal_fence();
                    } else {
                        std::ptr::copy_nonoverlapping(source.as_ptr(), dst, TRANSFER_BLOCK);
                    }
                }
                ns.push(t0.elapsed().as_nanos() as f64);
                turn.0.store(2 * k + 1, Ordering::Release);
            }
            ns
        });
        let reader = s.spawn(|| {
            let mut ns = Vec::with_capacity(rounds as usize);
            if bind_to_cpu(cpu_b).is_err() {
                stop.store(true, Ordering::Relaxed);
                return ns;
            }
            for k in 0..rounds {
                if !wait(2 * k + 1) {
                    break;
                }
                let block = (k as usize % TRANSFER_SLOTS) * TRANSFER_BLOCK;
                let t0 = Instant::now();
                // SAFETY: the writer is done with the block until we pass the turn on.
                let src = unsafe { std::slice::from_raw_parts(area.block(block), TRANSFER_BLOCK) };
                sink.copy_from_slice(std::hint::black_box(src));
                std::hint::black_box(&mut sink);
                ns.push(t0.elapsed().as_nanos() as f64);
                turn.0.store(2 * k + 2, Ordering::Release);
            }
            ns
        });
        (
            writer.join().unwrap_or_default(),
            reader.join().unwrap_or_default(),
        )
    });
    if writes.len() < rounds as usize || reads.len() < rounds as usize {
        return None;
    }
    // Round k went the non-temporal way when k is odd.
    let median_rate = |ns: &[f64], nontemporal: usize| {
        let mut way: Vec<f64> = ns.iter().skip(nontemporal).step_by(2).copied().collect();
        way.sort_by(f64::total_cmp);
        TRANSFER_BLOCK as f64 / way[way.len() / 2].max(1.0)
    };
    let way = |nontemporal| Transfer {
        write_bytes_per_ns: median_rate(&writes, nontemporal),
        read_bytes_per_ns: median_rate(&reads, nontemporal),
    };
    Some(Transfers {
        cached: way(0),
        nontemporal: way(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::{Consumer, Producer, PushError};

    fn unique_path(tag: &str) -> PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        PathBuf::from(SHM_DIR).join(format!("rmca-unittest{}-{nanos}-{tag}", std::process::id()))
    }

    #[test]
    fn a_costs_record_is_only_read_for_its_own_job() {
        let c = parse_costs_record("rmca-j1- 61.5 70.25 0 0 0 0\n", "rmca-j1-").unwrap();
        assert_eq!((c.handoff_ns, c.copy_bytes_per_ns), (61.5, 70.25));
        assert_eq!(c.transfers, None);
        let c = parse_costs_record("rmca-j1- 61.5 70.25 4 10.5 20 11\n", "rmca-j1-").unwrap();
        let t = c.transfers.unwrap();
        assert_eq!(
            (t.cached.write_bytes_per_ns, t.cached.read_bytes_per_ns),
            (4.0, 10.5)
        );
        assert_eq!(
            (
                t.nontemporal.write_bytes_per_ns,
                t.nontemporal.read_bytes_per_ns
            ),
            (20.0, 11.0)
        );
        for (text, why) in [
            ("rmca-j1- 61.5 70.25 0 0 0 0", "another job's record"),
            (
                "rmca-j10- 61.5 70.25 0 0 0 0",
                "a job whose key starts with ours",
            ),
            ("rmca-j2- 61.5", "a truncated record"),
            ("rmca-j2- 61.5 70.25", "a record of before the transfers"),
            ("rmca-j2- 61.5 70.25 0 0 0 0 1", "a longer one"),
            ("rmca-j2- NaN 70.25 0 0 0 0", "not a number"),
            ("rmca-j2- 0 70.25 0 0 0 0", "a zero handoff"),
            ("rmca-j2- 61.5 -1 0 0 0 0", "a negative rate"),
            ("rmca-j2- 61.5 70.25 4 0 20 11", "a transfer half measured"),
            ("rmca-j2- 61.5 70.25 4 10.5 20 inf", "an infinite rate"),
            ("", "an empty file"),
        ] {
            assert!(parse_costs_record(text, "rmca-j2-").is_none(), "{why}");
        }
    }

    /// The lock file keeps the newest records, a job's own among them, and each is read back.
    #[test]
    fn the_costs_file_keeps_the_newest_records() {
        let costs = |handoff_ns| crate::tune::Costs {
            handoff_ns,
            copy_bytes_per_ns: 2.5,
            transfers: None,
        };
        let mut text = String::new();
        for job in 0..COSTS_RECORDS_KEPT + 4 {
            text = with_costs_record(&text, &format!("rmca-j{job}-"), &costs(job as f64 + 1.0));
        }
        assert_eq!(text.lines().count(), COSTS_RECORDS_KEPT);
        let find = |job: usize| {
            text.lines()
                .find_map(|l| parse_costs_record(l, &format!("rmca-j{job}-")))
        };
        for job in 0..4 {
            assert!(find(job).is_none(), "the oldest record {job} was dropped");
        }
        for job in 4..COSTS_RECORDS_KEPT + 4 {
            assert_eq!(find(job).map(|c| c.handoff_ns), Some(job as f64 + 1.0));
        }
    }

    /// The second rank of a job reads what the first measured; a failed measurement is not
    /// recorded, so the next rank tries again.
    #[test]
    fn costs_are_measured_once_per_job() {
        let transfers = Some(crate::tune::Transfers {
            cached: crate::tune::Transfer {
                write_bytes_per_ns: 4.25,
                read_bytes_per_ns: 10.5,
            },
            nontemporal: crate::tune::Transfer {
                write_bytes_per_ns: 20.75,
                read_bytes_per_ns: 11.0,
            },
        });
        let costs = |handoff_ns| crate::tune::Costs {
            handoff_ns,
            copy_bytes_per_ns: 70.5,
            transfers,
        };
        let key = format!("rmca-unittest{}-costs-", std::process::id());
        let first = measure_costs_once_per_job(&key, || Some(costs(61.25))).unwrap();
        assert_eq!(first.handoff_ns, 61.25);
        let again = measure_costs_once_per_job(&key, || panic!("measured twice")).unwrap();
        assert_eq!((again.handoff_ns, again.copy_bytes_per_ns), (61.25, 70.5));
        assert_eq!(
            again.transfers, transfers,
            "the transfers went through the file"
        );

        let failing = format!("{key}failing-");
        assert!(measure_costs_once_per_job(&failing, || None).is_none());
        let retried = measure_costs_once_per_job(&failing, || Some(costs(90.0))).unwrap();
        assert_eq!(retried.handoff_ns, 90.0);
        // Both jobs' records are kept.
        let text = std::fs::read_to_string(costs_file_path()).unwrap();
        for k in [&key, &failing] {
            assert!(
                text.lines().any(|l| l.starts_with(&format!("{k} "))),
                "{text}"
            );
        }
    }

    /// The measurement itself, given time: a handoff and a copy rate no machine is far from.
    #[test]
    fn the_costs_measure_on_two_cpus() {
        if allowed_cpus().unwrap().len() < 2 {
            return rmca_test_support::skip_or_fail("the cost measurement needs two CPUs");
        }
        let c = measure_costs(std::time::Duration::from_millis(100))
            .expect("the two threads ran side by side for 8 batches within a second");
        assert!(c.handoff_ns > 1.0 && c.handoff_ns < 100_000.0, "{c:?}");
        assert!(c.copy_bytes_per_ns > 0.1, "{c:?}");
        // Both ways of moving a block measured (x86-64), at rates of memory, not of a stall.
        if crate::ring::NONTEMPORAL_STORES {
            let t = c.transfers.expect("blocks moved both ways");
            for way in [t.cached, t.nontemporal] {
                assert!(way.rate().is_some_and(|r| r > 0.1 && r < 1000.0), "{t:?}");
            }
        }
    }

    #[test]
    fn process_watch_sees_exit() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let watch = ProcessWatch::new(child.id() as i32);
        assert!(!watch.exited());
        child.wait().unwrap();
        assert!(watch.exited());
        assert!(!ProcessWatch::new(pid()).exited());
    }

    #[test]
    fn create_is_exclusive_private_and_removed_on_drop() {
        use std::os::unix::fs::PermissionsExt;
        let path = unique_path("excl");
        let m = Mapping::create(&path, 8192).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(
            Mapping::create(&path, 8192).is_err(),
            "O_EXCL must refuse an existing file"
        );
        assert!(
            Mapping::open(&path, 4096).is_err(),
            "size mismatch must be refused before mmap"
        );
        drop(m);
        assert!(!path.exists());
    }

    /// Two threads, two separate mappings of one real /dev/shm segment (as two processes would
    /// see it): every record arrives once, in order, intact, through many wraps and full rings;
    /// records from 1000 bytes are streamed in 256-byte chunks.
    #[test]
    fn two_threads_over_a_real_segment() {
        const LINES: usize = 256; // 16 KiB: wraps and back-pressure happen constantly
        const COUNT: u64 = 40_000;
        let path = unique_path("stress");
        let len = 4096 + LINES * LINE;
        let a = Mapping::create(&path, len).unwrap();
        let b = Mapping::open(&path, len).unwrap();
        let tx_mem = a.ring(0, 4096, LINES).unwrap();
        let rx_mem = b.ring(0, 4096, LINES).unwrap();
        let size_of = |i: u64| ((i * 7919) % 3000) as usize;
        let byte = |i: u64, k: usize| (i as usize ^ k.wrapping_mul(13)) as u8;

        let consumer = std::thread::spawn(move || {
            let _keep = b;
            let mut c = Consumer::new(rx_mem, 1 << 20);
            let mut next = 0u64;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
            while next < COUNT {
                let mut ok = true;
                let got = c
                    .pop_with(|tag, data| {
                        ok = tag == next as u8
                            && data.len() == size_of(next)
                            && data.iter().enumerate().all(|(k, &v)| v == byte(next, k));
                    })
                    .expect("ring corrupted");
                if got {
                    assert!(ok, "record {next} damaged");
                    next += 1;
                    if next.is_multiple_of(16) {
                        c.publish();
                    }
                } else {
                    c.publish();
                    assert!(std::time::Instant::now() < deadline, "stalled at {next}");
                    std::thread::yield_now(); // CI's 2 cores are shared with the producer
                }
            }
            c.publish();
            next
        });
        let mut p = Producer::new(tx_mem, 1 << 20);
        p.set_streaming(1000, 256);
        let mut full = 0u64;
        for i in 0..COUNT {
            let data: Vec<u8> = (0..size_of(i)).map(|k| byte(i, k)).collect();
            let (h, pl) = data.split_at(data.len().min(24));
            loop {
                match p.push(i as u8, h, pl) {
                    Ok(()) => break,
                    Err(PushError::Full) => {
                        full += 1;
                        std::thread::yield_now();
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        assert_eq!(consumer.join().unwrap(), COUNT);
        assert!(full > 0, "the test must exercise back-pressure");
        drop(a);
        assert!(!path.exists());
    }
}
