//! Peer `rxd`: libfabric's reliable datagrams over UDP (`fi_pingpong -p "udp;ofi_rxd" -e rdm`,
//! Debian libfabric-bin), server and client on 127.0.0.1 pinned to cores 0 and 1 like ranks 0
//! and 1.
//!
//! fi_pingpong (libfabric util/pingpong.c) runs one message in flight: `usec/xfer` is the
//! elapsed time over 2 x iterations, i.e. the one-way latency, and `MB/sec` is
//! 2 x iterations x size / elapsed (1e6 B/s), a ping-pong bandwidth (not a windowed one). It
//! has no warm-up, so its first exchange (rxd's connection set-up) is inside the timing: the
//! iteration counts are kept large enough to amortize it.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One fi_pingpong result line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PingPong {
    /// Message size, bytes.
    pub size: usize,
    /// Iterations (round trips).
    pub iters: u64,
    /// One-way latency, us.
    pub usec_per_xfer: f64,
    /// Ping-pong bandwidth, MB/s (1e6 B/s).
    pub mb_per_sec: f64,
}

/// `8`, `1k`, `1.5k`, `4m`, `2g` as printed by fi_pingpong's size_str / cnt_str (k, m, g are
/// 1024-based for sizes).
fn parse_size_str(s: &str) -> Option<usize> {
    let (num, mul) = match s.as_bytes().last()? {
        b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' => (&s[..s.len() - 1], 1 << 20),
        b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v >= 0.0).then(|| (v * mul as f64).round() as usize)
}

/// `1000`, `10k`, `2m` (cnt_str: 1000-based, truncated).
fn parse_count_str(s: &str) -> Option<u64> {
    let s = s.trim_start_matches(['=', '+', '-']);
    let (num, mul) = match s.as_bytes().last()? {
        b'k' => (&s[..s.len() - 1], 1000),
        b'm' => (&s[..s.len() - 1], 1_000_000),
        b'b' => (&s[..s.len() - 1], 1_000_000_000),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mul)
}

/// The result lines of fi_pingpong's output:
/// `bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec`, e.g.
/// `8       1k      =1k      15k         3.41s      0.00    1705.37       0.00`.
/// Header, error and debug lines are ignored; a line whose figures do not parse is skipped.
pub fn parse_output(out: &str) -> Vec<PingPong> {
    out.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() != 8 || !w[4].ends_with('s') {
                return None;
            }
            let size = parse_size_str(w[0])?;
            let iters = parse_count_str(w[1])?;
            let mb_per_sec: f64 = w[5].parse().ok()?;
            let usec_per_xfer: f64 = w[6].parse().ok()?;
            (usec_per_xfer.is_finite() && usec_per_xfer > 0.0 && mb_per_sec.is_finite()).then_some(
                PingPong {
                    size,
                    iters,
                    usec_per_xfer,
                    mb_per_sec,
                },
            )
        })
        .collect()
}

/// Is a TCP socket listening on `port`? From the text of /proc/net/tcp (local address
/// `HEXIP:HEXPORT`, state `0A` = LISTEN).
pub fn listening_in(proc_net_tcp: &str, port: u16) -> bool {
    proc_net_tcp.lines().skip(1).any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.len() > 3
            && w[3] == "0A"
            && w[1]
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                == Some(port)
    })
}

fn listening(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f)
            .map(|t| listening_in(&t, port))
            .unwrap_or(false)
    })
}

/// A free TCP port for fi_pingpong's control connection.
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// Is fi_pingpong installed?
pub fn available() -> bool {
    Command::new("fi_pingpong")
        .arg("-h")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

fn pinned(core: Option<usize>) -> Command {
    match core {
        Some(c) => {
            let mut cmd = Command::new("taskset");
            cmd.arg("-c").arg(c.to_string()).arg("fi_pingpong");
            cmd
        }
        None => Command::new("fi_pingpong"),
    }
}

/// Run one fi_pingpong pair for `size` with `iters` round trips. `Ok(None)` when fi_pingpong
/// ran but printed no figure for that size (the size is then reported missing).
pub fn run(
    size: usize,
    iters: usize,
    bind: bool,
    timeout: Duration,
) -> Result<Option<PingPong>, String> {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let core = |r: usize| bind.then_some(r % cores);
    let port = free_port()?;
    let common = |c: &mut Command| {
        c.args(["-p", "udp;ofi_rxd", "-e", "rdm", "-I"])
            .arg(iters.to_string())
            .arg("-S")
            .arg(size.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    };
    let mut server = pinned(core(0));
    common(&mut server);
    server.arg("-B").arg(port.to_string());
    let mut server = server
        .spawn()
        .map_err(|e| format!("cannot start fi_pingpong: {e}"))?;
    // The server accepts one control connection: wait for it to listen instead of probing it.
    let t0 = Instant::now();
    while !listening(port) {
        if t0.elapsed() > Duration::from_secs(10) || server.try_wait().ok().flatten().is_some() {
            let _ = server.kill();
            let out = server.wait_with_output().map_err(|e| e.to_string())?;
            return Err(format!(
                "fi_pingpong server did not listen on port {port}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut client = pinned(core(1));
    common(&mut client);
    client.arg("-P").arg(port.to_string()).arg("127.0.0.1");
    let client = client
        .spawn()
        .map_err(|e| format!("cannot start fi_pingpong client: {e}"));
    let client = match client {
        Ok(c) => c,
        Err(e) => {
            let _ = server.kill();
            let _ = server.wait();
            return Err(e);
        }
    };
    let (ok, out, err) = crate::peers::wait_output(client, timeout);
    // The server ends by itself after the client's finalize message; make sure it does.
    let (_, _, serr) = crate::peers::wait_output(server, Duration::from_secs(5));
    let found = parse_output(&out).into_iter().find(|p| p.size == size);
    match (ok, found) {
        (_, Some(p)) => Ok(Some(p)),
        (true, None) => Ok(None),
        (false, None) => {
            eprintln!(
                "rmca-bench: rxd size {size} failed (reported missing): {}{}{}",
                out.trim(),
                err.trim(),
                serr.trim()
            );
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pingpong_lines_are_parsed() {
        let out =
            "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n\
            8       1k      =1k      15k         3.41s      0.00    1705.37       0.00\n\
            1.5k    10k     =10k     29m         0.20s    150.00      10.24       0.10\n\
            1m      100     =100     200m        0.51s   2659.00     394.35       0.00\n\
            [error] util/pingpong.c:568 : ctrl/read: no data or remote connection closed\n\
            64      10      =10      1.2k        0.03s      0.05    nan       0.00\n";
        let p = parse_output(out);
        assert_eq!(p.len(), 3, "{p:?}");
        assert_eq!(
            p[0],
            PingPong {
                size: 8,
                iters: 1000,
                usec_per_xfer: 1705.37,
                mb_per_sec: 0.0
            }
        );
        assert_eq!((p[1].size, p[1].iters), (1536, 10_000));
        assert_eq!((p[2].size, p[2].iters), (1 << 20, 100));
        assert_eq!(p[2].mb_per_sec, 2659.0);
    }

    #[test]
    fn garbage_is_not_a_figure() {
        assert!(parse_output("").is_empty());
        assert!(parse_output("fi_getinfo(): -61 (No data available)\n").is_empty());
        assert!(parse_output("x 1k =1k 15k 3.41s 0.00 1.0 0.00\n").is_empty());
        assert!(parse_output("8 1k =1k 15k 3.41 0.00 1.0 0.00\n").is_empty());
        assert_eq!(parse_size_str("4m"), Some(4 << 20));
        assert_eq!(parse_size_str("-1"), None);
        assert_eq!(parse_count_str("+3k"), Some(3000));
    }

    #[test]
    fn listening_sockets_are_found_in_proc_net_tcp() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
           0: 00000000:B9E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n\
           1: 0100007F:B9E9 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1\n";
        assert!(listening_in(t, 0xB9E8));
        // Established, not listening.
        assert!(!listening_in(t, 0xB9E9));
        assert!(!listening_in(t, 80));
        assert!(!listening_in("garbage\n", 80));
    }

    #[test]
    fn a_listener_of_this_process_is_seen() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(listening(port));
        drop(l);
    }
}
