//! Blocking PMI-1 / PMI-2 client: the I/O edge around [`crate::wire`].
//!
//! Every read has a deadline and EOF is an error, so a rank whose launcher died gets
//! [`RteError::ServerClosed`] or [`RteError::Timeout`] instead of hanging.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::wire::{Framer, OwnedMessage, WireVersion};
use crate::RteError;

/// The socket to the PMI server.
#[derive(Debug)]
pub(crate) enum Transport {
    /// `PMI_FD`: an inherited stream socket.
    Fd(UnixStream),
    /// `PMI_PORT`: a TCP connection.
    Tcp(TcpStream),
}

impl Transport {
    fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Transport::Fd(s) => s.set_read_timeout(t),
            Transport::Tcp(s) => s.set_read_timeout(t),
        }
    }
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Transport::Fd(s) => s.read(buf),
            Transport::Tcp(s) => s.read(buf),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Transport::Fd(s) => s.write_all(buf),
            Transport::Tcp(s) => s.write_all(buf),
        }
    }
}

/// PMI protocol generation spoken after init.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmiVersion {
    /// PMI-1 (`simple_pmi`, Hydra, rmca-run).
    V1,
    /// PMI-2 (Slurm `--mpi=pmi2`, Hydra).
    V2,
}

/// A connected, initialised PMI client.
#[derive(Debug)]
pub(crate) struct PmiClient {
    t: Transport,
    framer: Framer,
    version: PmiVersion,
    /// Per-request reply deadline; `None` waits forever (EOF still ends the wait).
    timeout: Option<Duration>,
}

impl PmiClient {
    pub(crate) fn new(t: Transport, version: PmiVersion, timeout: Option<Duration>) -> Self {
        Self {
            t,
            framer: Framer::new(),
            version,
            timeout,
        }
    }

    pub(crate) fn version(&self) -> PmiVersion {
        self.version
    }

    fn wire(&self) -> WireVersion {
        match self.version {
            PmiVersion::V1 => WireVersion::V1,
            PmiVersion::V2 => WireVersion::V2,
        }
    }

    pub(crate) fn send(&mut self, m: &OwnedMessage, wire: WireVersion) -> Result<(), RteError> {
        self.t
            .write_all(&m.encode(wire))
            .map_err(|e| io_err(&m.cmd, e))
    }

    /// Read the next message from the server.
    pub(crate) fn recv(&mut self, op: &str) -> Result<OwnedMessage, RteError> {
        let deadline = self.timeout.map(|t| Instant::now() + t);
        let mut buf = [0u8; 4096];
        loop {
            if let Some(fr) = self.framer.next_frame() {
                let fr = fr.map_err(|e| RteError::Protocol(format!("{op}: {e}")))?;
                let m = fr
                    .parse()
                    .map_err(|e| RteError::Protocol(format!("{op}: {e}")))?;
                return Ok(m.into_owned());
            }
            let remaining = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(RteError::Timeout {
                            op: op.to_string(),
                            secs: self.timeout.map(|t| t.as_secs_f64()).unwrap_or(0.0),
                        });
                    }
                    Some(d - now)
                }
                None => None,
            };
            self.t
                .set_read_timeout(remaining)
                .map_err(|e| io_err(op, e))?;
            match self.t.read(&mut buf) {
                Ok(0) => return Err(RteError::ServerClosed(op.to_string())),
                Ok(n) => self.framer.push(&buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    continue
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_err(op, e)),
            }
        }
    }

    /// Send `m` in the session's framing and wait for the reply named `expect`.
    pub(crate) fn request(
        &mut self,
        m: OwnedMessage,
        expect: &str,
    ) -> Result<OwnedMessage, RteError> {
        let wire = self.wire();
        self.request_wire(m, expect, wire)
    }

    pub(crate) fn request_wire(
        &mut self,
        m: OwnedMessage,
        expect: &str,
        wire: WireVersion,
    ) -> Result<OwnedMessage, RteError> {
        self.send(&m, wire)?;
        let r = self.recv(&m.cmd)?;
        if r.cmd != expect {
            return Err(RteError::Protocol(format!(
                "sent {}, expected {expect}, got {}",
                m.cmd, r.cmd
            )));
        }
        Ok(r)
    }

    /// `PMI_PORT` handshake: identify with `PMI_ID`, learn rank and size.
    pub(crate) fn initack(
        &mut self,
        pmiid: u32,
        token: Option<&str>,
    ) -> Result<(u32, u32), RteError> {
        let mut msg = OwnedMessage::new("initack").with("pmiid", pmiid);
        if let Some(t) = token {
            msg = msg.with("token", t);
        }
        self.request_wire(msg, "initack", WireVersion::V1)?;
        let (mut rank, mut size) = (None, None);
        while rank.is_none() || size.is_none() {
            let m = self.recv("initack")?;
            if m.cmd != "set" {
                return Err(RteError::Protocol(format!("expected set, got {}", m.cmd)));
            }
            if let Some(v) = m.get("rank") {
                rank = v.parse().ok();
            }
            if let Some(v) = m.get("size") {
                size = v.parse().ok();
            }
        }
        // The server also sends `set debug=`; consume it so it is not taken as a reply.
        let m = self.recv("initack")?;
        if m.cmd != "set" {
            return Err(RteError::Protocol(format!(
                "expected set debug, got {}",
                m.cmd
            )));
        }
        Ok((rank.unwrap_or(0), size.unwrap_or(1)))
    }

    /// `init` in PMI-1 framing for either version.
    pub(crate) fn init(&mut self) -> Result<(), RteError> {
        let (v, sub) = match self.version {
            PmiVersion::V1 => (1, 1),
            PmiVersion::V2 => (2, 0),
        };
        let r = self.request_wire(
            OwnedMessage::new("init")
                .with("pmi_version", v)
                .with("pmi_subversion", sub),
            "response_to_init",
            WireVersion::V1,
        )?;
        if r.get("rc").and_then(|x| x.parse::<i64>().ok()).unwrap_or(0) != 0 {
            return Err(RteError::Protocol(format!(
                "server refused PMI-{v}: {}",
                r.get("msg").unwrap_or("no message")
            )));
        }
        Ok(())
    }

    /// Store `key=value` in the job's KVS.
    pub(crate) fn put(&mut self, kvsname: &str, key: &str, value: &str) -> Result<(), RteError> {
        let r = match self.version {
            PmiVersion::V1 => self.request(
                OwnedMessage::new("put")
                    .with("kvsname", kvsname)
                    .with("key", key)
                    .with("value", value),
                "put_result",
            )?,
            PmiVersion::V2 => self.request(
                OwnedMessage::new("kvs-put")
                    .with("key", key)
                    .with("value", value),
                "kvs-put-response",
            )?,
        };
        check_rc(&r, "put")
    }

    /// Look `key` up; `None` when absent.
    pub(crate) fn get(
        &mut self,
        kvsname: &str,
        key: &str,
        src: Option<u32>,
    ) -> Result<Option<String>, RteError> {
        match self.version {
            PmiVersion::V1 => {
                let r = self.request(
                    OwnedMessage::new("get")
                        .with("kvsname", kvsname)
                        .with("key", key),
                    "get_result",
                )?;
                // Hydra answers a missing key with rc=-1; anything else is found.
                if r.get("rc").and_then(|x| x.parse::<i64>().ok()).unwrap_or(0) != 0
                    || r.get("found") == Some("FALSE")
                {
                    return Ok(None);
                }
                Ok(r.get("value").map(str::to_string))
            }
            PmiVersion::V2 => {
                let mut m = OwnedMessage::new("kvs-get").with("jobid", kvsname);
                if let Some(s) = src {
                    m = m.with("srcid", s);
                }
                let r = self.request(m.with("key", key), "kvs-get-response")?;
                check_rc(&r, "kvs-get")?;
                if r.get("found") != Some("TRUE") {
                    return Ok(None);
                }
                Ok(r.get("value").map(str::to_string))
            }
        }
    }

    /// The KVS barrier (PMI-1 `barrier_in`, PMI-2 `kvs-fence`).
    pub(crate) fn barrier(&mut self) -> Result<(), RteError> {
        let r = match self.version {
            PmiVersion::V1 => self.request(OwnedMessage::new("barrier_in"), "barrier_out")?,
            PmiVersion::V2 => self.request(OwnedMessage::new("kvs-fence"), "kvs-fence-response")?,
        };
        check_rc(&r, "barrier")
    }

    pub(crate) fn finalize(&mut self) -> Result<(), RteError> {
        match self.version {
            PmiVersion::V1 => self.request(OwnedMessage::new("finalize"), "finalize_ack")?,
            PmiVersion::V2 => self.request(OwnedMessage::new("finalize"), "finalize-response")?,
        };
        Ok(())
    }

    /// Ask the launcher to abort the job. No reply is defined; the caller then waits for EOF.
    pub(crate) fn abort(&mut self, code: i32, msg: &str) -> Result<(), RteError> {
        let m = match self.version {
            PmiVersion::V1 => OwnedMessage::new("abort")
                .with("exitcode", code)
                .with("message", msg),
            // PMI-2's key is `isworld` (MPICH's ISWORLD_KEY, read by Slurm's mpi/pmi2): an
            // unknown key leaves the abort a local one, and Slurm then never ends the step.
            PmiVersion::V2 => OwnedMessage::new("abort")
                .with("isworld", "TRUE")
                .with("msg", msg.replace(';', ",")),
        };
        let wire = self.wire();
        self.send(&m, wire)
    }

    pub(crate) fn set_timeout(&mut self, t: Option<Duration>) {
        self.timeout = t;
    }
}

fn check_rc(r: &OwnedMessage, op: &str) -> Result<(), RteError> {
    let rc: i64 = r.get("rc").and_then(|x| x.parse().ok()).unwrap_or(0);
    if rc != 0 {
        return Err(RteError::Protocol(format!(
            "{op} failed (rc={rc}): {}",
            r.get("msg")
                .or_else(|| r.get("errmsg"))
                .unwrap_or("no message")
        )));
    }
    Ok(())
}

fn io_err(op: &str, e: std::io::Error) -> RteError {
    RteError::Io {
        op: op.to_string(),
        source: e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pmi2_abort_asks_for_a_world_abort_with_the_protocol_key() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let mut c = PmiClient::new(Transport::Fd(ours), PmiVersion::V2, None);
        c.abort(7, "bad; thing").unwrap();
        drop(c);
        let mut sent = String::new();
        let mut theirs = theirs;
        theirs.read_to_string(&mut sent).unwrap();
        // Slurm's mpi/pmi2 and Hydra read `isworld`; `;` separates pairs on the wire.
        assert!(sent.contains("cmd=abort;isworld=TRUE;"), "{sent}");
        assert!(sent.contains("msg=bad, thing;"), "{sent}");
    }
}
