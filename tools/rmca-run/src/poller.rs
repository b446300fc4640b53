//! The launcher's I/O threads, whatever the job's size: one poller over every PMI connection,
//! the TCP PMI listener and every rank's output pipes, one reaper of exited ranks and one
//! reader of the signal self-pipe. Each reports on its own channel; they only move bytes, and
//! the main thread, waiting on all channels and its next deadline in one `select!`, decides.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use rmca_rte::server::ConnId;

use crate::monitor::Exit;
use crate::sys;

/// What the poller reports to the main thread.
pub enum Ev {
    /// Bytes from a PMI connection.
    PmiData(ConnId, Vec<u8>),
    /// A PMI connection closed (or failed).
    PmiEof(ConnId),
    /// A TCP PMI client was accepted as `ConnId`; the stream is the main thread's writing end.
    Accepted(ConnId, TcpStream),
    /// One output pipe reached its end.
    OutputDone,
}

/// What a watched descriptor carries.
pub enum Source {
    /// A PMI connection.
    Pmi(ConnId),
    /// A rank's stdout or stderr, forwarded line by line.
    Output {
        /// The rank, for `--tag-output`.
        rank: u32,
        /// Forward to the launcher's stderr rather than stdout.
        to_stderr: bool,
    },
}

struct Watched {
    file: File,
    source: Source,
    /// Output bytes after the last newline, held until the line is complete.
    partial: Vec<u8>,
}

/// A line longer than this is forwarded in pieces rather than held.
const MAX_HELD_LINE: usize = 64 * 1024;
/// How long the listener rests when the launcher is out of descriptors.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The poller's configuration.
pub struct Poller {
    watched: Vec<Watched>,
    listener: Option<TcpListener>,
    next_tcp: ConnId,
    tag_output: bool,
}

impl Poller {
    /// A poller forwarding output with `[rank] ` tags when `tag_output`; TCP clients get
    /// connection ids from `first_tcp_conn` on.
    pub fn new(listener: Option<TcpListener>, first_tcp_conn: ConnId, tag_output: bool) -> Self {
        Self {
            watched: Vec::new(),
            listener,
            next_tcp: first_tcp_conn,
            tag_output,
        }
    }

    /// Watch `fd` (read side) for `source`.
    pub fn watch(&mut self, fd: impl Into<OwnedFd>, source: Source) {
        self.watched.push(Watched {
            file: File::from(fd.into()),
            source,
            partial: Vec::new(),
        });
    }

    /// Start the poller thread.
    pub fn spawn(mut self, tx: Sender<Ev>) -> io::Result<()> {
        if let Some(l) = &self.listener {
            l.set_nonblocking(true)?;
        }
        thread::Builder::new()
            .name("rmca-run-io".into())
            .spawn(move || self.run(&tx))
            .map(|_| ())
    }

    fn run(&mut self, tx: &Sender<Ev>) {
        let mut buf = vec![0u8; 16 * 1024];
        let mut listener_rests_until: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let listening =
                self.listener.is_some() && listener_rests_until.is_none_or(|t| now >= t);
            let mut fds: Vec<_> = self.watched.iter().map(|w| w.file.as_raw_fd()).collect();
            if listening {
                fds.push(self.listener.as_ref().expect("listening").as_raw_fd());
            }
            if fds.is_empty() && self.listener.is_none() {
                return;
            }
            let timeout = listener_rests_until.map(|t| t.saturating_duration_since(now));
            let ready = match sys::poll_readable(&fds, timeout) {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(error = %e, "rmca-run: poll failed");
                    thread::sleep(ACCEPT_BACKOFF);
                    continue;
                }
            };
            // Back to front, so that removing a closed descriptor keeps the indices valid.
            let polled = self.watched.len().min(ready.len());
            for i in (0..polled).rev() {
                if !ready[i] {
                    continue;
                }
                let n = match self.watched[i].file.read(&mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(_) => 0,
                };
                if n == 0 {
                    let w = self.watched.swap_remove(i);
                    if self.closed(w, tx).is_err() {
                        return;
                    }
                } else if self.data(i, &buf[..n], tx).is_err() {
                    return;
                }
            }
            // Accept after reading: new clients extend `watched` beyond what was polled.
            if listening && ready[fds.len() - 1] {
                listener_rests_until = self.accept_all(tx);
            } else if listener_rests_until.is_some_and(|t| Instant::now() >= t) {
                listener_rests_until = None;
            }
        }
    }

    /// Accept every waiting client; returns when the listener should rest (out of descriptors).
    fn accept_all(&mut self, tx: &Sender<Ev>) -> Option<Instant> {
        loop {
            let accepted = self.listener.as_ref().expect("accepting").accept();
            match accepted {
                Ok((s, _)) => {
                    // Replies are written by the main thread in blocking mode.
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_nodelay(true);
                    let Ok(writer) = s.try_clone() else {
                        continue;
                    };
                    let conn = self.next_tcp;
                    self.next_tcp += 1;
                    self.watch(s, Source::Pmi(conn));
                    if tx.send(Ev::Accepted(conn, writer)).is_err() {
                        return None;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Out of descriptors or memory: the pending client stays queued, and polling
                // the listener again at once would only spin.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    ) =>
                {
                    tracing::warn!(error = %e, "rmca-run: cannot accept a PMI client now; backing off");
                    return Some(Instant::now() + ACCEPT_BACKOFF);
                }
                // The client gave up before we accepted it, or similar: next one.
                Err(_) => {}
            }
        }
    }

    fn data(&mut self, i: usize, bytes: &[u8], tx: &Sender<Ev>) -> Result<(), ()> {
        let tag_output = self.tag_output;
        let w = &mut self.watched[i];
        match w.source {
            Source::Pmi(conn) => tx.send(Ev::PmiData(conn, bytes.to_vec())).map_err(|_| ()),
            Source::Output { rank, to_stderr } => {
                w.partial.extend_from_slice(bytes);
                let complete = match w.partial.iter().rposition(|&b| b == b'\n') {
                    Some(last) => last + 1,
                    None if w.partial.len() >= MAX_HELD_LINE => w.partial.len(),
                    None => return Ok(()),
                };
                let rest = w.partial.split_off(complete);
                forward_lines(&w.partial, rank, tag_output, to_stderr);
                w.partial = rest;
                Ok(())
            }
        }
    }

    fn closed(&mut self, w: Watched, tx: &Sender<Ev>) -> Result<(), ()> {
        match w.source {
            Source::Pmi(conn) => tx.send(Ev::PmiEof(conn)).map_err(|_| ()),
            Source::Output { rank, to_stderr } => {
                if !w.partial.is_empty() {
                    forward_lines(&w.partial, rank, self.tag_output, to_stderr);
                }
                tx.send(Ev::OutputDone).map_err(|_| ())
            }
        }
    }
}

/// Write whole lines under one lock, so that ranks' lines never interleave.
fn forward_lines(bytes: &[u8], rank: u32, tag: bool, to_stderr: bool) {
    let mut out = Vec::with_capacity(bytes.len() + 16);
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        if tag {
            out.extend_from_slice(format!("[{rank}] ").as_bytes());
        }
        out.extend_from_slice(line);
    }
    let _ = if to_stderr {
        std::io::stderr().lock().write_all(&out)
    } else {
        let mut o = std::io::stdout().lock();
        o.write_all(&out).and_then(|_| o.flush())
    };
}

/// Start the reaper: it reports each exited rank (rank, how it ended) after killing what is
/// left of its process group (the zombie holds the group id until reaped, so the group cannot
/// be a reused one). It ends, dropping `tx`, when the launcher has no child left.
pub fn spawn_reaper(rank_of_pid: HashMap<u32, u32>, tx: Sender<(u32, Exit)>) -> io::Result<()> {
    thread::Builder::new()
        .name("rmca-run-reaper".into())
        .spawn(move || loop {
            match sys::wait_any_exit_nowait() {
                Ok(Some((pid, exit))) => {
                    sys::kill_group(pid, libc::SIGKILL);
                    sys::reap(pid);
                    if let Some(&rank) = rank_of_pid.get(&pid) {
                        if tx.send((rank, exit)).is_err() {
                            return;
                        }
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::error!(error = %e, "rmca-run: waiting for ranks failed");
                    return;
                }
            }
        })
        .map(|_| ())
}

/// Start the reader of the signal self-pipe ([`sys::catch_termination_signals`]): each byte is
/// a signal number, sent on `tx`.
pub fn spawn_signal_reader(mut pipe: File, tx: Sender<i32>) -> io::Result<()> {
    thread::Builder::new()
        .name("rmca-run-signals".into())
        .spawn(move || {
            let mut buf = [0u8; 16];
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        for &sig in &buf[..n] {
                            if tx.send(i32::from(sig)).is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        tracing::error!(error = %e, "rmca-run: reading the signal pipe failed");
                        return;
                    }
                }
            }
        })
        .map(|_| ())
}
