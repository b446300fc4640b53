//! `rmca-rte-probe`: a small rank program for testing launchers (rmca-run, Hydra, Slurm).
//!
//! Every mode initialises the runtime environment, creates one shared-memory file named with
//! the job's prefix (to prove the launcher removes it, or the rank itself when the launcher
//! dies), publishes a business card and checks
//! every other rank's card, then does what the mode says:
//!
//! `--mode cards` (default) finalize and exit 0; `crash` rank `--who` dies of SIGSEGV;
//! `abort` rank `--who` calls abort with `--code`; `exit` rank `--who` exits with `--code`
//! without finalize; `no-finalize` rank `--who` exits 0 without finalize; `sleep` every rank
//! sleeps `--secs`; `print` writes a line to stdout and to stderr; `startup` prints init+fence
//! timing as JSON. In the failure modes every rank reports, a fence follows, then rank `--who`
//! fails and the others block in another fence, which only the launcher's
//! teardown ends. `--spawn-child` first starts a grandchild (this probe, sleeping) in the rank's
//! process group (`--mode idle`: sleep without init); `--ignore-term` ignores SIGTERM. `--marker` is ignored; tests put a unique
//! word there to find leftover processes in /proc. `--expect-slurm` checks rank, size, local
//! rank, node and node count against what Slurm told the task (`SLURM_PROCID`, ...).
#![deny(unsafe_code)]

use std::time::{Duration, Instant};

use rmca_rte::Rte;

#[derive(Debug)]
struct Args {
    mode: String,
    who: u32,
    code: i32,
    secs: u64,
    card_size: usize,
    spawn_child: bool,
    ignore_term: bool,
    expect_slurm: bool,
    marker: String,
}

fn parse() -> Args {
    let mut a = Args {
        mode: "cards".into(),
        who: 0,
        code: 1,
        secs: 300,
        card_size: 64,
        spawn_child: false,
        ignore_term: false,
        expect_slurm: false,
        marker: String::new(),
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        let next = |i: &mut usize| {
            *i += 1;
            v.get(*i).cloned().unwrap_or_default()
        };
        match v[i].as_str() {
            "--mode" => a.mode = next(&mut i),
            "--who" => a.who = next(&mut i).parse().unwrap_or(0),
            "--code" => a.code = next(&mut i).parse().unwrap_or(1),
            "--secs" => a.secs = next(&mut i).parse().unwrap_or(300),
            "--card-size" => a.card_size = next(&mut i).parse().unwrap_or(64),
            "--marker" => a.marker = next(&mut i),
            "--spawn-child" => a.spawn_child = true,
            "--ignore-term" => a.ignore_term = true,
            "--expect-slurm" => a.expect_slurm = true,
            other => {
                eprintln!("rmca-rte-probe: unknown argument {other:?}");
                std::process::exit(2);
            }
        }
        i += 1;
    }
    a
}

/// The card rank `r` publishes: deterministic, so every peer can check it byte for byte,
/// and mixed with the job secret, so a rank with a different secret fails the check.
fn card(r: u32, size: usize, secret: &[u8]) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(r * 7) as u8 ^ secret[i % secret.len()])
        .collect()
}

#[allow(unsafe_code)]
mod sig {
    /// Die of a genuine SIGSEGV (Rust's own SIGSEGV handler would otherwise catch the raise).
    pub fn segfault() -> ! {
        // SAFETY: restoring the default disposition and raising a signal at ourselves.
        unsafe {
            libc::signal(libc::SIGSEGV, libc::SIG_DFL);
            libc::raise(libc::SIGSEGV);
        }
        std::process::abort()
    }

    pub fn ignore_term() {
        // SAFETY: setting SIGTERM to SIG_IGN has no preconditions.
        unsafe {
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
        }
    }
}

/// Compare the runtime's view of this rank with Slurm's task variables.
fn check_against_slurm(rte: &Rte) {
    let var = |k: &str| -> u32 {
        std::env::var(k)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| fail(format!("Slurm variable {k} missing or not a number")))
    };
    let rank = rte.rank();
    let node = rte.node_id(rank).unwrap_or(u32::MAX);
    let local = rte.local_ranks().iter().position(|&r| r == rank);
    let ours = (rank, rte.size(), local, node, rte.node_count());
    let slurm = (
        var("SLURM_PROCID"),
        var("SLURM_STEP_NUM_TASKS"),
        Some(var("SLURM_LOCALID") as usize),
        var("SLURM_NODEID"),
        var("SLURM_STEP_NUM_NODES"),
    );
    if ours != slurm {
        fail(format!(
            "(rank, size, local rank, node, nodes) are {ours:?} but Slurm says {slurm:?}"
        ));
    }
    println!(
        "rank {rank}: matches slurm (local rank {}, node {node})",
        local.unwrap_or(0)
    );
}

fn fail(msg: String) -> ! {
    eprintln!("rmca-rte-probe: {msg}");
    std::process::exit(3)
}

fn main() {
    let a = parse();
    if a.ignore_term {
        sig::ignore_term();
    }
    if a.mode == "idle" {
        // A grandchild that only occupies a process slot.
        std::thread::sleep(Duration::from_secs(a.secs));
        return;
    }
    let t0 = Instant::now();
    let rte = Rte::init().unwrap_or_else(|e| fail(format!("init: {e}")));
    let t_init = t0.elapsed();
    let (rank, size) = (rte.rank(), rte.size());
    if a.expect_slurm {
        check_against_slurm(&rte);
    }

    if a.spawn_child {
        let exe = std::env::current_exe().unwrap_or_else(|e| fail(format!("current_exe: {e}")));
        // Not a rank: no PMI variables, so it runs as a singleton that only sleeps.
        let child = std::process::Command::new(exe)
            .args(["--mode", "idle", "--secs", "300", "--marker", &a.marker])
            .spawn();
        match child {
            Ok(c) => println!("grandchild pid {}", c.id()),
            Err(e) => fail(format!("spawn grandchild: {e}")),
        }
    }

    let shm = format!("/dev/shm/{}probe-{}-{rank}", rte.shm_prefix(), a.marker);
    // Removed by this rank if the launcher dies, else left for the launcher to remove. Held
    // until the process ends.
    let _registered = rmca_rte::lifeline::remove_on_launcher_death(std::path::Path::new(&shm))
        .unwrap_or_else(|e| fail(format!("{e}")));
    std::fs::write(&shm, b"probe").unwrap_or_else(|e| fail(format!("create {shm}: {e}")));
    println!("shm-created {shm}");

    let secret = rte.job_secret().to_vec();
    rte.modex_put("probe.card", &card(rank, a.card_size, &secret))
        .unwrap_or_else(|e| fail(format!("modex_put: {e}")));
    rte.modex_put("probe.node", &rte.node_id(rank).unwrap_or(0).to_le_bytes())
        .unwrap_or_else(|e| fail(format!("modex_put: {e}")));
    let t1 = Instant::now();
    rte.fence().unwrap_or_else(|e| fail(format!("fence: {e}")));
    let t_fence = t1.elapsed();
    for r in 0..size {
        let got = rte
            .modex_get(r, "probe.card")
            .unwrap_or_else(|e| fail(format!("modex_get({r}): {e}")));
        if got.as_deref() != Some(&card(r, a.card_size, &secret)[..]) {
            fail(format!("rank {rank}: card of rank {r} wrong or missing"));
        }
        let node = rte
            .modex_get(r, "probe.node")
            .unwrap_or_else(|e| fail(format!("modex_get({r}): {e}")));
        let want = rte.node_id(r).unwrap_or(0).to_le_bytes();
        if node.as_deref() != Some(&want[..]) {
            fail(format!("rank {rank}: rank {r} disagrees about its node"));
        }
    }
    if rte.modex_get(0, "probe.absent").ok().flatten().is_some() {
        fail("a key nobody published was found".into());
    }
    let local: Vec<String> = rte.local_ranks().iter().map(u32::to_string).collect();
    println!(
        "rank {rank} of {size}: cards ok, node {} local [{}] job {} launcher {:?} nodename {}",
        rte.node_id(rank).unwrap_or(0),
        local.join(","),
        rte.job_id(),
        rte.launcher(),
        rte.node_name(rte.node_id(rank).unwrap_or(0)).unwrap_or("?")
    );
    for (k, v) in rte.mca_params() {
        println!("rank {rank} mca {k}={v}");
    }

    let me = rank == a.who;
    let failure_mode = matches!(a.mode.as_str(), "crash" | "abort" | "exit" | "no-finalize");
    if failure_mode {
        // Every rank has reported (the line above) before one fails: otherwise a rank still
        // reading cards (remote lookups under PMIx) when the step is torn down printed
        // nothing, and the tests that count the lines failed now and then.
        rte.fence()
            .unwrap_or_else(|e| fail(format!("fence before the failure: {e}")));
    }
    let block_in_fence = |rte: &Rte| {
        // Peers of a failing rank wait here until the launcher ends the job.
        match rte.fence() {
            Ok(()) => fail("second fence completed although a rank left".into()),
            Err(e) => fail(format!("second fence: {e}")),
        }
    };
    match a.mode.as_str() {
        "cards" => {}
        "print" => {
            println!("stdout line from rank {rank}");
            eprintln!("stderr line from rank {rank}");
        }
        "startup" => {
            println!(
                "{{\"rank\":{rank},\"init_us\":{},\"fence_us\":{}}}",
                t_init.as_micros(),
                t_fence.as_micros()
            );
        }
        "crash" if me => sig::segfault(),
        "abort" if me => rte.abort(a.code, "probe abort"),
        "exit" if me => std::process::exit(a.code),
        "no-finalize" if me => std::process::exit(0),
        "crash" | "abort" | "exit" | "no-finalize" => block_in_fence(&rte),
        "sleep" => std::thread::sleep(Duration::from_secs(a.secs)),
        other => fail(format!("unknown mode {other:?}")),
    }
    rte.finalize()
        .unwrap_or_else(|e| fail(format!("finalize: {e}")));
}
