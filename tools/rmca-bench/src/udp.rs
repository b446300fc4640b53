//! Peer `udp`: a raw UDP ping-pong between two processes on 127.0.0.1 (this binary run as
//! `rmca-bench --udp-peer ...`), the floor under any UD path on this host: no protocol, no
//! copies beyond the kernel's, one datagram per chunk of at most [`CHUNK`] bytes.
//!
//! Both sides derive the same schedule from the same arguments (sizes, warm-up and timed
//! round trips per size, as the rmca worker does): the client sends a message (its chunks back
//! to back), the server waits for every chunk and answers with a message of the same size.
//! Both wait by polling a non-blocking socket (yielding after a spin streak, like rmca's wait
//! loop), so the figure compares transports, not wake-up policies. `latency` is half the round
//! trip; `bw` is the ping-pong bandwidth 2 x iterations x size / elapsed (1e6 B/s), the same
//! definition as fi_pingpong's `MB/sec` for rxd (one message in flight). A datagram lost (none
//! should be on loopback with the enlarged socket buffers) ends the pair after one second of
//! silence, and the size is reported missing.

use std::io::{BufRead, BufReader, ErrorKind};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::bench::{iters_for, sizes, warmup_for, Bench, Params};

/// Largest datagram payload the ping-pong sends (a message is split into chunks of this).
pub const CHUNK: usize = 65000;

/// Socket buffers asked for, so that a whole 4 MiB message fits in flight.
const SOCKET_BUFFER: usize = 16 << 20;

/// How long a side waits for a datagram before declaring the pair broken.
const SILENCE: Duration = Duration::from_secs(1);

/// Datagram lengths of one message of `size` bytes (an empty message is one empty datagram).
pub fn chunks(size: usize) -> impl Iterator<Item = usize> {
    let n = size.div_ceil(CHUNK).max(1);
    (0..n).map(move |i| (size - i * CHUNK).min(CHUNK))
}

/// The schedule both sides follow: `(size, warm-up round trips, timed round trips)`.
pub fn schedule(bench: Bench, p: &Params) -> Vec<(usize, usize, usize)> {
    sizes(bench, p.min, p.max)
        .into_iter()
        .map(|s| {
            let it = iters_for(p.iters, s);
            (s, warmup_for(it), it)
        })
        .collect()
}

/// Errors of one side of the ping-pong.
#[derive(Debug, thiserror::Error)]
pub enum UdpError {
    /// A socket call failed.
    #[error("udp ping-pong: {what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Nothing arrived for [`SILENCE`] (a datagram was lost, or the other side died).
    #[error("udp ping-pong: no datagram for {0:?} (lost datagram or dead peer)")]
    Silence(Duration),
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> UdpError {
    move |source| UdpError::Io { what, source }
}

/// A bound, non-blocking socket with large buffers.
pub fn socket() -> Result<UdpSocket, UdpError> {
    let s = UdpSocket::bind("127.0.0.1:0").map_err(io("bind"))?;
    s.set_nonblocking(true).map_err(io("non-blocking"))?;
    crate::affinity::grow_socket_buffers(&s, SOCKET_BUFFER);
    Ok(s)
}

/// Receives one message of `size` bytes (its chunks, at successive offsets) into `buf`,
/// polling.
fn recv_msg(s: &UdpSocket, buf: &mut [u8], size: usize) -> Result<(), UdpError> {
    let mut at = 0;
    for want in chunks(size) {
        let mut idle = 0u32;
        let mut since: Option<Instant> = None;
        loop {
            match s.recv(&mut buf[at..at + CHUNK.max(want)]) {
                Ok(n) if n == want => break,
                // A foreign or stray datagram: not ours, keep waiting.
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    idle += 1;
                    if idle > 256 {
                        std::thread::yield_now();
                        let t = *since.get_or_insert_with(Instant::now);
                        if t.elapsed() > SILENCE {
                            return Err(UdpError::Silence(SILENCE));
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(UdpError::Io {
                        what: "recv",
                        source: e,
                    })
                }
            }
        }
        at += want;
    }
    Ok(())
}

fn send_msg(s: &UdpSocket, buf: &[u8], size: usize) -> Result<(), UdpError> {
    let mut at = 0;
    for len in chunks(size) {
        let chunk = &buf[at..at + len];
        at += len;
        loop {
            match s.send(chunk) {
                Ok(_) => break,
                // The socket's send buffer is full: the receiver drains it.
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(UdpError::Io {
                        what: "send",
                        source: e,
                    })
                }
            }
        }
    }
    Ok(())
}

/// A buffer for the largest message of `plan` (plus a chunk of slack for receiving): each
/// message is sent from and received into memory of its own size, as the rmca worker's are,
/// not one cache-resident chunk over and over.
fn message_buffer(plan: &[(usize, usize, usize)]) -> Vec<u8> {
    let max = plan.iter().map(|p| p.0).max().unwrap_or(0);
    vec![0x5a; max + CHUNK]
}

/// The server side: learns the client from its hello, then answers every message of the
/// schedule with one of the same size.
pub fn serve(s: &UdpSocket, plan: &[(usize, usize, usize)]) -> Result<(), UdpError> {
    let mut buf = message_buffer(plan);
    let t0 = Instant::now();
    let from = loop {
        match s.recv_from(&mut buf) {
            Ok((_, a)) => break a,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if t0.elapsed() > SILENCE * 10 {
                    return Err(UdpError::Silence(SILENCE * 10));
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(UdpError::Io {
                    what: "recv_from",
                    source: e,
                })
            }
        }
    };
    s.connect(from).map_err(io("connect"))?;
    send_msg(s, &buf, 1)?;
    for &(size, warm, it) in plan {
        for _ in 0..warm + it {
            recv_msg(s, &mut buf, size)?;
            send_msg(s, &buf, size)?;
        }
    }
    Ok(())
}

/// The client side: runs the schedule against `server`; returns `(size, one-way us, MB/s)`.
pub fn client(
    s: &UdpSocket,
    server: SocketAddr,
    plan: &[(usize, usize, usize)],
) -> Result<Vec<(usize, f64, f64)>, UdpError> {
    s.connect(server).map_err(io("connect"))?;
    let mut buf = message_buffer(plan);
    // The hello names us to the server; its answer says it is ready.
    send_msg(s, &buf, 1)?;
    recv_msg(s, &mut buf, 1)?;
    let mut out = Vec::new();
    for &(size, warm, it) in plan {
        for _ in 0..warm {
            send_msg(s, &buf, size)?;
            recv_msg(s, &mut buf, size)?;
        }
        let t0 = Instant::now();
        for _ in 0..it {
            send_msg(s, &buf, size)?;
            recv_msg(s, &mut buf, size)?;
        }
        let dt = t0.elapsed().as_secs_f64();
        let rt = it as f64 * 2.0;
        out.push((size, dt * 1e6 / rt, rt * size as f64 / dt / 1e6));
    }
    Ok(out)
}

/// `--udp-peer server|client ...` in this binary: the two processes of the pair.
/// `server BENCH MIN MAX ITERS CORE` prints `port N` then serves;
/// `client BENCH MIN MAX ITERS CORE PORT` prints `result SIZE FIGURE` lines (latency in us or
/// bw in MB/s). CORE `-` leaves the process unbound.
pub fn peer_main(args: &[String]) -> Result<(), String> {
    let usage = "rmca-bench --udp-peer server|client BENCH MIN MAX ITERS CORE [PORT]";
    let bad = || format!("bad arguments {args:?}: {usage}");
    let role = args.first().ok_or_else(bad)?.as_str();
    let bench = args.get(1).and_then(|b| Bench::parse(b)).ok_or_else(bad)?;
    let n = |i: usize| args.get(i).and_then(|v| v.parse::<usize>().ok());
    let p = Params {
        min: n(2).ok_or_else(bad)?,
        max: n(3).ok_or_else(bad)?,
        iters: n(4).ok_or_else(bad)?.max(1),
        window: 1,
        misalign: 0,
    };
    if let Some(c) = n(5) {
        crate::affinity::pin_to_core(c);
    }
    let plan = schedule(bench, &p);
    let s = socket().map_err(|e| e.to_string())?;
    match role {
        "server" => {
            let port = s.local_addr().map_err(|e| e.to_string())?.port();
            println!("port {port}");
            use std::io::Write;
            std::io::stdout().flush().map_err(|e| e.to_string())?;
            serve(&s, &plan).map_err(|e| e.to_string())
        }
        "client" => {
            let port = n(6).and_then(|p| u16::try_from(p).ok()).ok_or_else(bad)?;
            let r = client(&s, SocketAddr::from(([127, 0, 0, 1], port)), &plan)
                .map_err(|e| e.to_string())?;
            for (size, lat, bw) in r {
                let v = if bench == Bench::Bw { bw } else { lat };
                println!("result {size} {v:.3}");
            }
            Ok(())
        }
        _ => Err(bad()),
    }
}

/// Runs one pair of `exe --udp-peer` processes (server on core 0, client on core 1 when
/// `bind`); returns the client's `(size, figures)` lines.
pub fn run(
    exe: &Path,
    bench: Bench,
    p: &Params,
    bind: bool,
    timeout: Duration,
) -> Result<Vec<(usize, Vec<f64>)>, String> {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let core = |r: usize| {
        if bind {
            (r % cores).to_string()
        } else {
            "-".into()
        }
    };
    let common = [
        bench.name().to_owned(),
        p.min.to_string(),
        p.max.to_string(),
        p.iters.to_string(),
    ];
    let mut server = Command::new(exe)
        .arg("--udp-peer")
        .arg("server")
        .args(&common)
        .arg(core(0))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the udp peer: {e}"))?;
    let mut line = String::new();
    let port = server
        .stdout
        .take()
        .map(|o| BufReader::new(o).read_line(&mut line))
        .and_then(|r| r.ok())
        .and_then(|_| line.trim().strip_prefix("port ")?.parse::<u16>().ok());
    let Some(port) = port else {
        let _ = server.kill();
        let out = server.wait_with_output().map_err(|e| e.to_string())?;
        return Err(format!(
            "udp peer server printed no port ({line:?}): {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    };
    let client = Command::new(exe)
        .arg("--udp-peer")
        .arg("client")
        .args(&common)
        .arg(core(1))
        .arg(port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let client = match client {
        Ok(c) => c,
        Err(e) => {
            let _ = server.kill();
            let _ = server.wait();
            return Err(format!("cannot start the udp peer client: {e}"));
        }
    };
    let (ok, out, err) = crate::peers::wait_output(client, timeout);
    let (_, _, serr) = crate::peers::wait_output(server, Duration::from_secs(5));
    let lines = crate::peers::parse_results(&out);
    if !ok {
        eprintln!(
            "rmca-bench: udp ping-pong failed (sizes after the last figure are missing): {}{}",
            err.trim(),
            serr.trim()
        );
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_split_into_full_chunks_then_the_rest() {
        assert_eq!(chunks(0).collect::<Vec<_>>(), vec![0]);
        assert_eq!(chunks(8).collect::<Vec<_>>(), vec![8]);
        assert_eq!(chunks(CHUNK).collect::<Vec<_>>(), vec![CHUNK]);
        assert_eq!(chunks(CHUNK + 1).collect::<Vec<_>>(), vec![CHUNK, 1]);
        let m: Vec<usize> = chunks(1 << 20).collect();
        assert_eq!(m.len(), 17);
        assert_eq!(m.iter().sum::<usize>(), 1 << 20);
    }

    #[test]
    fn the_schedule_is_the_workers() {
        let p = Params {
            min: 8,
            max: 32,
            iters: 100,
            window: 1,
            misalign: 0,
        };
        assert_eq!(
            schedule(Bench::Latency, &p),
            vec![(8, 11, 100), (16, 11, 100), (32, 11, 100)]
        );
    }

    #[test]
    fn a_pair_in_threads_measures_every_size() {
        let p = Params {
            min: 1024,
            max: 256 * 1024,
            iters: 20,
            window: 1,
            misalign: 0,
        };
        let plan = schedule(Bench::Latency, &p);
        let srv = socket().unwrap();
        let addr = srv.local_addr().unwrap();
        let plan2 = plan.clone();
        let t = std::thread::spawn(move || serve(&srv, &plan2));
        let r = client(&socket().unwrap(), addr, &plan).unwrap();
        t.join().unwrap().unwrap();
        assert_eq!(
            r.iter().map(|x| x.0).collect::<Vec<_>>(),
            plan.iter().map(|x| x.0).collect::<Vec<_>>()
        );
        assert!(r.iter().all(|x| x.1 > 0.0 && x.2 > 0.0), "{r:?}");
    }

    #[test]
    fn a_silent_server_is_an_error_not_a_hang() {
        let dead = socket().unwrap();
        let plan = [(8usize, 0usize, 1usize)];
        let e = client(&socket().unwrap(), dead.local_addr().unwrap(), &plan).unwrap_err();
        assert!(matches!(e, UdpError::Silence(_)), "{e}");
    }
}
