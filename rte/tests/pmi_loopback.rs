//! The PMI client (`Rte`) against the sans-IO server, in one process over socketpairs: the
//! Hydra-style path (secret and host names through the KVS), PMI-2, and the failure semantics
//! (deadline on a fence that cannot complete, EOF when the server goes away).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::IntoRawFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::thread;

use rmca_rte::server::{Maxes, PmiServer, ServerConfig, UntrustedLimit};
use rmca_rte::{Launcher, Rte, RteError};

/// Serve `size` ranks over socketpairs until every connection closes. Returns the client ends.
fn serve(size: u32) -> (Vec<UnixStream>, thread::JoinHandle<u64>) {
    serve_with(size, Vec::new())
}

fn serve_with(
    size: u32,
    preload: Vec<(String, String)>,
) -> (Vec<UnixStream>, thread::JoinHandle<u64>) {
    let (tx, rx) = mpsc::channel::<(u64, Option<Vec<u8>>)>();
    let mut ours = HashMap::new();
    let mut theirs = Vec::new();
    let mut server = PmiServer::new(ServerConfig {
        size,
        kvsname: "kvs_loop".into(),
        maxes: Maxes::default(),
        preload,
        tokens: None,
        untrusted_limit: UntrustedLimit::for_job(size),
    });
    for r in 0..size {
        let (a, b) = UnixStream::pair().unwrap();
        let mut rd = a.try_clone().unwrap();
        let tx = tx.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match rd.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send((r as u64, None));
                        return;
                    }
                    Ok(n) => {
                        let _ = tx.send((r as u64, Some(buf[..n].to_vec())));
                    }
                }
            }
        });
        server.connect(r as u64, Some(r));
        ours.insert(r as u64, a);
        theirs.push(b);
    }
    drop(tx);
    let h = thread::spawn(move || {
        let mut open = size;
        while open > 0 {
            let Ok((c, data)) = rx.recv() else { break };
            match data {
                Some(d) => server.handle_input(c, &d),
                None => {
                    server.disconnect(c);
                    open -= 1;
                }
            }
            while let Some((c, b)) = server.poll_transmit() {
                if let Some(s) = ours.get_mut(&c) {
                    let _ = s.write_all(&b);
                }
            }
            while server.poll_event().is_some() {}
        }
        server.dropped()
    });
    (theirs, h)
}

fn rank_env(fd: i32, rank: u32, size: u32, extra: &[(&str, &str)]) -> HashMap<String, String> {
    let mut m: HashMap<String, String> = [
        ("PMI_FD".to_string(), fd.to_string()),
        ("PMI_RANK".to_string(), rank.to_string()),
        ("PMI_SIZE".to_string(), size.to_string()),
    ]
    .into_iter()
    .collect();
    for (k, v) in extra {
        m.insert(k.to_string(), v.to_string());
    }
    m
}

fn init(env: HashMap<String, String>) -> Result<Rte, RteError> {
    let vars: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    Rte::init_from(&|k: &str| env.get(k).cloned(), &vars)
}

fn full_job(size: u32, extra: &'static [(&'static str, &'static str)], want: Launcher) {
    let (ends, server) = serve(size);
    let mut ranks = Vec::new();
    for (r, end) in ends.into_iter().enumerate() {
        let fd = end.into_raw_fd();
        ranks.push(thread::spawn(move || {
            let rte = init(rank_env(fd, r as u32, size, extra)).unwrap();
            assert_eq!(rte.launcher(), want);
            // A card larger than one KVS value, with every byte value.
            let card: Vec<u8> = (0..2500u32)
                .map(|i| (i as u8).wrapping_add(r as u8))
                .collect();
            rte.modex_put("test.card", &card).unwrap();
            rte.fence().unwrap();
            for p in 0..size {
                let want: Vec<u8> = (0..2500u32)
                    .map(|i| (i as u8).wrapping_add(p as u8))
                    .collect();
                assert_eq!(rte.modex_get(p, "test.card").unwrap(), Some(want));
            }
            assert_eq!(rte.modex_get(0, "test.none").unwrap(), None);
            let out = (
                rte.job_id().to_string(),
                rte.job_secret().to_vec(),
                rte.local_ranks().to_vec(),
            );
            rte.finalize().unwrap();
            out
        }));
    }
    let results: Vec<_> = ranks.into_iter().map(|h| h.join().unwrap()).collect();
    // Same job id and secret everywhere (rank 0 drew the secret); one node (same host name).
    for r in &results {
        assert_eq!(r.0, results[0].0);
        assert_eq!(r.1, results[0].1);
        assert!(r.1.len() >= 16);
        assert_eq!(r.2, (0..size).collect::<Vec<_>>());
    }
    assert_eq!(server.join().unwrap(), 0, "server dropped messages");
}

#[test]
fn hydra_style_pmi1_job_shares_secret_and_cards() {
    full_job(3, &[], Launcher::Pmi1);
}

#[test]
fn pmi2_job_shares_secret_and_cards() {
    full_job(3, &[("RMCA_PMI", "pmi2")], Launcher::Pmi2);
}

#[test]
fn fence_with_a_missing_rank_fails_within_the_deadline() {
    // Rank 1 of 2 never starts; rank 0 must get an error, not hang.
    let (mut ends, server) = serve(2);
    let other = ends.pop().unwrap();
    let fd = ends.pop().unwrap().into_raw_fd();
    let rte = init(rank_env(
        fd,
        0,
        2,
        &[
            ("RMCA_JOB_ID", "loop1"),
            ("RMCA_JOB_SECRET", "00112233445566778899aabbccddeeff"),
            ("RMCA_MCA_rte_pmi_timeout", "0.3"),
        ],
    ))
    .unwrap();
    assert_eq!(rte.launcher(), Launcher::RmcaRun);
    assert_eq!(rte.shm_prefix(), "rmca-loop1-");
    match rte.fence() {
        Err(RteError::Timeout { op, .. }) => assert_eq!(op, "barrier_in"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    drop(other);
    drop(rte);
    assert_eq!(server.join().unwrap(), 0);
}

#[test]
fn server_gone_is_reported_as_closed() {
    let (a, b) = UnixStream::pair().unwrap();
    drop(a);
    let err = init(rank_env(b.into_raw_fd(), 0, 1, &[])).unwrap_err();
    assert!(
        matches!(err, RteError::ServerClosed(_) | RteError::Io { .. }),
        "{err}"
    );
}

#[test]
fn bad_pmi_fd_is_an_error_not_ub() {
    let err = init(rank_env(987_654, 0, 1, &[])).unwrap_err();
    assert!(err.to_string().contains("PMI_FD"), "{err}");
    let err = init(rank_env(0, 0, 1, &[("PMI_FD", "x")])).unwrap_err();
    assert!(err.to_string().contains("file descriptor number"), "{err}");
}

#[test]
fn rmca_run_environment_is_validated() {
    let (ends, _server) = serve(1);
    let fd = ends.into_iter().next().unwrap().into_raw_fd();
    let err = init(rank_env(
        fd,
        0,
        1,
        &[("RMCA_JOB_ID", "ok"), ("RMCA_JOB_SECRET", "abcd")],
    ))
    .unwrap_err();
    assert!(err.to_string().contains("at least 16 bytes"), "{err}");
    // The launcher's death signal: a number, and one the rank can handle (not SIGKILL).
    for (bad, why) in [("x", "expected a signal number"), ("9", "real-time signal")] {
        let err = init(rank_env(
            -1,
            0,
            1,
            &[("RMCA_JOB_ID", "ok"), ("RMCA_LAUNCHER_DEATH_SIGNAL", bad)],
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("RMCA_LAUNCHER_DEATH_SIGNAL") && err.contains(why),
            "{err}"
        );
    }
}

#[test]
fn secret_can_come_from_the_launchers_kvs() {
    let secret: Vec<u8> = (0..32).collect();
    let preload = rmca_rte::encoding::encode_chunks(rmca_rte::SECRET_KEY, &secret, 1024);
    let (ends, _server) = serve_with(1, preload);
    let fd = ends.into_iter().next().unwrap().into_raw_fd();
    let rte = init(rank_env(fd, 0, 1, &[("RMCA_JOB_ID", "kvs1")])).unwrap();
    assert_eq!(rte.job_secret(), &secret[..]);
    rte.finalize().unwrap();
}
