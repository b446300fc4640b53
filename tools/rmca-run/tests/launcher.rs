//! End-to-end tests of rmca-run with the `rmca-rte-probe` rank program.
//!
//! Every job runs under a watchdog (the test fails instead of hanging) and every failure test
//! checks that no probe process (found by its unique `--marker` in /proc) and no shared-memory
//! file of the job remain.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rmca_test_support::skip_or_fail;

const RUN: &str = env!("CARGO_BIN_EXE_rmca-run");
const PROBE: &str = env!("CARGO_BIN_EXE_rmca-rte-probe");
/// Upper bound for any job in these tests; reaching it is a failure (a hang), not a timing check.
const WATCHDOG: Duration = Duration::from_secs(120);

fn marker(name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "mk{}{}x{}",
        name,
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

fn wait_bounded(mut c: Child) -> Output {
    let t0 = Instant::now();
    loop {
        if let Ok(Some(_)) = c.try_wait() {
            return c.wait_with_output().expect("collect output");
        }
        if t0.elapsed() > WATCHDOG {
            let _ = c.kill();
            let out = c.wait_with_output().expect("collect output");
            panic!(
                "job hung; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Job {
    status: i32,
    stdout: String,
    stderr: String,
}

fn run_cmd(cmd: &mut Command) -> Job {
    let c = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let out = wait_bounded(c);
    Job {
        status: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn rmca_run(launcher_args: &[&str], probe_args: &[&str]) -> Job {
    let mut cmd = Command::new(RUN);
    cmd.args(launcher_args).arg(PROBE).args(probe_args);
    run_cmd(&mut cmd)
}

/// Pids of live processes with `m` as one of their arguments.
fn procs_with(m: &str) -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cl) = std::fs::read(e.path().join("cmdline")) {
            if cl.split(|b| *b == 0).any(|a| a == m.as_bytes()) {
                v.push(pid);
            }
        }
    }
    v
}

/// Shared-memory files the probe created with this marker.
fn shm_with(m: &str) -> Vec<String> {
    let pat = format!("-probe-{m}-");
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(&pat))
                .collect()
        })
        .unwrap_or_default()
}

/// Signal delivery to killed process groups is asynchronous: give the kernel a bounded moment.
fn assert_no_leftovers(m: &str, job: &Job) {
    let t0 = Instant::now();
    while !procs_with(m).is_empty() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        procs_with(m).is_empty(),
        "leftover processes {:?}; stderr:\n{}",
        procs_with(m),
        job.stderr
    );
    assert!(
        shm_with(m).is_empty(),
        "leftover shm files {:?}",
        shm_with(m)
    );
}

fn count(s: &str, pat: &str) -> usize {
    s.lines().filter(|l| l.contains(pat)).count()
}

#[test]
fn business_cards_for_1_2_4_8_ranks() {
    for n in [1u32, 2, 4, 8] {
        let m = marker("cards");
        let ns = n.to_string();
        let job = rmca_run(&["-n", &ns], &["--marker", &m]);
        assert_eq!(job.status, 0, "n={n} stderr:\n{}", job.stderr);
        assert_eq!(count(&job.stdout, "cards ok"), n as usize, "{}", job.stdout);
        // Each rank created a file; the launcher removed all of them.
        assert_eq!(count(&job.stdout, "shm-created"), n as usize);
        assert_no_leftovers(&m, &job);
    }
}

#[test]
fn chunked_cards_over_tcp_pmi_with_two_nodes() {
    let m = marker("tcp");
    // 5000-byte cards need several 1 KiB KVS values each.
    let job = rmca_run(
        &["-n", "4", "--pmi-port", "--hosts", "a,b"],
        &["--marker", &m, "--card-size", "5000"],
    );
    assert_eq!(job.status, 0, "stderr:\n{}", job.stderr);
    assert_eq!(count(&job.stdout, "cards ok"), 4);
    assert!(job
        .stdout
        .contains("rank 1 of 4: cards ok, node 0 local [0,1]"));
    assert!(job
        .stdout
        .contains("rank 3 of 4: cards ok, node 1 local [2,3]"));
    assert!(job
        .stdout
        .lines()
        .any(|l| l.starts_with("rank 3 of 4") && l.ends_with("nodename b")));
    assert!(job
        .stdout
        .lines()
        .any(|l| l.starts_with("rank 0 of 4") && l.ends_with("nodename a")));
    assert_no_leftovers(&m, &job);
}

#[test]
fn stdout_and_stderr_are_forwarded_with_and_without_tags() {
    let m = marker("out");
    let job = rmca_run(
        &["-n", "2", "--tag-output"],
        &["--marker", &m, "--mode", "print"],
    );
    assert_eq!(job.status, 0, "{}", job.stderr);
    assert!(job
        .stdout
        .lines()
        .any(|l| l == "[0] stdout line from rank 0"));
    assert!(job
        .stdout
        .lines()
        .any(|l| l == "[1] stdout line from rank 1"));
    assert!(job
        .stderr
        .lines()
        .any(|l| l == "[1] stderr line from rank 1"));
    assert!(!job.stdout.contains("stderr line"));
    let job = rmca_run(&["-n", "2"], &["--marker", &m, "--mode", "print"]);
    assert!(job.stdout.lines().any(|l| l == "stdout line from rank 1"));
    assert!(job.stderr.lines().any(|l| l == "stderr line from rank 0"));
}

#[test]
fn mca_parameters_reach_every_rank() {
    let m = marker("mca");
    let job = rmca_run(
        &["-n", "3", "--mca", "btl", "self,shm", "--mca", "pml", "ob1"],
        &["--marker", &m],
    );
    assert_eq!(job.status, 0, "{}", job.stderr);
    for r in 0..3 {
        assert!(job.stdout.contains(&format!("rank {r} mca btl=self,shm")));
        assert!(job.stdout.contains(&format!("rank {r} mca pml=ob1")));
    }
}

#[test]
fn exit_code_of_failing_rank_is_propagated() {
    let m = marker("exit");
    let job = rmca_run(
        &["-n", "3"],
        &[
            "--marker",
            &m,
            "--mode",
            "exit",
            "--who",
            "1",
            "--code",
            "7",
            "--spawn-child",
        ],
    );
    assert_eq!(job.status, 7, "{}", job.stderr);
    assert!(
        job.stderr.contains("rmca-run: rank 1 (pid "),
        "{}",
        job.stderr
    );
    assert!(job
        .stderr
        .contains("exited with status 7; terminating the job"));
    assert_no_leftovers(&m, &job);
}

#[test]
fn crashing_rank_tears_the_job_down() {
    let m = marker("crash");
    let job = rmca_run(
        &["-n", "4"],
        &[
            "--marker",
            &m,
            "--mode",
            "crash",
            "--who",
            "2",
            "--spawn-child",
        ],
    );
    assert_eq!(job.status, 128 + 11, "{}", job.stderr);
    assert!(
        job.stderr
            .contains("killed by signal 11 (SIGSEGV); terminating the job"),
        "{}",
        job.stderr
    );
    assert!(job.stderr.contains("rmca-run: rank 2 (pid "));
    assert_eq!(count(&job.stdout, "shm-created"), 4);
    assert_no_leftovers(&m, &job);
}

#[test]
fn aborting_rank_tears_the_job_down() {
    let m = marker("abort");
    let job = rmca_run(
        &["-n", "3"],
        &[
            "--marker",
            &m,
            "--mode",
            "abort",
            "--who",
            "1",
            "--code",
            "5",
            "--spawn-child",
        ],
    );
    assert_eq!(job.status, 5, "{}", job.stderr);
    assert!(job.stderr.contains(
        "rmca-run: rank 1 called abort with exit code 5: probe abort; terminating the job"
    ));
    assert_no_leftovers(&m, &job);
}

#[test]
fn timed_out_job_is_killed_even_if_it_ignores_sigterm() {
    let m = marker("tmo");
    let job = rmca_run(
        &["-n", "2", "--timeout", "2", "--term-grace", "1"],
        &[
            "--marker",
            &m,
            "--mode",
            "sleep",
            "--ignore-term",
            "--spawn-child",
        ],
    );
    assert_eq!(job.status, 124, "{}", job.stderr);
    assert!(job
        .stderr
        .contains("job exceeded --timeout 2 s (ranks still running: 0,1)"));
    assert_no_leftovers(&m, &job);
}

#[test]
fn clean_exit_without_finalize_is_a_failure() {
    let m = marker("nofin");
    let job = rmca_run(
        &["-n", "2"],
        &["--marker", &m, "--mode", "no-finalize", "--who", "0"],
    );
    assert_eq!(job.status, 1, "{}", job.stderr);
    assert!(job.stderr.contains("exited without calling finalize"));
    assert_no_leftovers(&m, &job);
}

#[test]
fn launcher_terminated_by_signal_cleans_up() {
    let m = marker("sigterm");
    let mut c = Command::new(RUN)
        .args(["-n", "2", "--term-grace", "1", PROBE, "--marker", &m])
        .args(["--mode", "sleep", "--spawn-child"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_lines(&mut c, "cards ok", 2);
    // SAFETY-free: kill(1) the launcher with SIGTERM.
    let st = Command::new("kill")
        .args(["-TERM", &c.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = wait_bounded(c);
    let job = Job {
        status: out.status.code().unwrap_or(-1),
        stdout: String::new(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_eq!(job.status, 128 + 15, "{}", job.stderr);
    assert!(job.stderr.contains("received SIGTERM"));
    assert_no_leftovers(&m, &job);
}

/// Context switches of the launcher's main thread so far (its task id is its pid).
fn main_thread_switches(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/status"))
        .expect("the launcher's main thread is alive");
    status
        .lines()
        .filter(|l| l.starts_with("voluntary_ctxt_switches:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

#[test]
fn an_idle_job_does_not_wake_the_launcher() {
    // While ranks sleep nothing happens: no output, no PMI, no deadline (no --timeout). The
    // main thread must then stay blocked, not wake up on a poll interval to look for signals.
    let m = marker("idle");
    let mut c = Command::new(RUN)
        .args([
            "-n", "2", PROBE, "--marker", &m, "--mode", "sleep", "--secs", "4",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_lines(&mut c, "cards ok", 2);
    // Let the wake-ups of init (PMI, output lines, settling) pass.
    std::thread::sleep(Duration::from_millis(300));
    let before = main_thread_switches(c.id());
    std::thread::sleep(Duration::from_millis(2000));
    let woke = main_thread_switches(c.id()) - before;
    // A 100 ms poll interval shows as about 20 here; an event-driven loop as none.
    assert!(
        woke <= 4,
        "the launcher's main thread woke {woke} times in 2 s of an idle job"
    );
    let out = wait_bounded(c);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn ranks_die_when_the_launcher_is_killed() {
    let m = marker("sigkill");
    let mut c = Command::new(RUN)
        .args(["-n", "2", PROBE, "--marker", &m, "--mode", "sleep"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_lines(&mut c, "cards ok", 2);
    assert_eq!(shm_with(&m).len(), 2, "each rank created its file");
    c.kill().unwrap();
    let _ = c.wait();
    // The launcher's death signal ends the sleeping ranks; each removes the file it created,
    // since nobody else is left to.
    let job = Job {
        status: -1,
        stdout: String::new(),
        stderr: String::new(),
    };
    assert_no_leftovers(&m, &job);
}

#[test]
fn bad_command_lines_and_missing_programs_fail_clearly() {
    let job = run_cmd(Command::new(RUN).args(["-n", "0", "true"]));
    assert_eq!(job.status, 2);
    assert!(job.stderr.contains("option -n: invalid value \"0\""));
    let job = run_cmd(Command::new(RUN).args(["-n", "2", "/nonexistent/rmca-prog"]));
    assert_eq!(job.status, 127, "{}", job.stderr);
    assert!(job.stderr.contains("cannot start rank 0"));
    // A program that never speaks PMI and exits 0 is a successful job.
    let job = run_cmd(Command::new(RUN).args(["-n", "2", "true"]));
    assert_eq!(job.status, 0, "{}", job.stderr);
}

/// "Cpus_allowed_list" of a /proc status text.
fn allowed_list(status: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

/// CPUs in a "0-2,5" list.
fn cpu_list(s: &str) -> Vec<usize> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .flat_map(|p| match p.split_once('-') {
            Some((a, b)) => a.parse().unwrap()..=b.parse().unwrap(),
            None => p.parse().unwrap()..=p.parse().unwrap(),
        })
        .collect()
}

#[test]
fn bind_to_core_puts_each_rank_and_its_threads_on_its_own_cpu() {
    let mine = cpu_list(&allowed_list(
        &std::fs::read_to_string("/proc/self/status").unwrap(),
    ));
    let n = mine.len().min(2);
    // A thread the rank starts (here a background job's process, started the same way: it
    // inherits the affinity) is reported next to the rank's own.
    let report =
        "grep Cpus_allowed_list: /proc/self/status & wait; grep Cpus_allowed_list: /proc/$$/status";
    let job = run_cmd(Command::new(RUN).args([
        "-n",
        &n.to_string(),
        "--bind-to",
        "core",
        "--tag-output",
        "sh",
        "-c",
        report,
    ]));
    assert_eq!(job.status, 0, "{}", job.stderr);
    for (rank, cpu) in mine.iter().take(n).enumerate() {
        let lines: Vec<&str> = job
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("[{rank}] ")))
            .collect();
        assert_eq!(lines.len(), 2, "{}", job.stdout);
        for l in lines {
            assert_eq!(
                cpu_list(&allowed_list(l)),
                [*cpu],
                "rank {rank}: {}",
                job.stdout
            );
        }
    }
    // Unbound when asked: every rank may run on every CPU the launcher may.
    let job = run_cmd(Command::new(RUN).args(["-n", "1", "--bind-to", "none", "sh", "-c", report]));
    assert_eq!(job.status, 0, "{}", job.stderr);
    for l in job.stdout.lines() {
        assert_eq!(cpu_list(&allowed_list(l)), mine, "{}", job.stdout);
    }
    // More ranks than CPUs: refused before anything starts, saying why and what to do.
    let too_many = (mine.len() + 1).to_string();
    let job = run_cmd(Command::new(RUN).args(["-n", &too_many, "--bind-to", "core", "true"]));
    assert_eq!(job.status, 2, "{}", job.stderr);
    assert!(
        job.stderr.contains(&format!("{too_many} ranks")) && job.stderr.contains("--bind-to none"),
        "{}",
        job.stderr
    );
    let job = run_cmd(Command::new(RUN).args(["--bind-to", "socket", "true"]));
    assert_eq!(job.status, 2);
    assert!(job.stderr.contains("core or none"), "{}", job.stderr);
}

#[test]
fn ranks_are_bound_by_default_while_they_fit_the_cpus() {
    let mine = cpu_list(&allowed_list(
        &std::fs::read_to_string("/proc/self/status").unwrap(),
    ));
    let report = "grep Cpus_allowed_list: /proc/self/status; echo cpus=$RMCA_NODE_CPUS";
    // As many ranks as CPUs (at most 4): rank r on the r-th, said in the launcher's log.
    let n = mine.len().min(4);
    let job = run_cmd(
        Command::new(RUN)
            .env("RUST_LOG", "info")
            .env_remove("SLURM_JOB_ID")
            .args(["-n", &n.to_string(), "--tag-output", "sh", "-c", report]),
    );
    assert_eq!(job.status, 0, "{}", job.stderr);
    assert!(
        job.stderr.contains("ranks bound to cores"),
        "{}",
        job.stderr
    );
    for (rank, cpu) in mine.iter().take(n).enumerate() {
        let mut lines = job
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("[{rank}] ")));
        let l = lines.next().unwrap_or_default();
        assert_eq!(
            cpu_list(&allowed_list(l)),
            [*cpu],
            "rank {rank}: {}",
            job.stdout
        );
        // The ranks learn how many CPUs the node's ranks share (their wait policy).
        assert_eq!(lines.next(), Some(format!("cpus={}", mine.len()).as_str()));
    }
    // One rank more than CPUs: no binding, and the log says why.
    let over = (mine.len() + 1).to_string();
    let job = run_cmd(
        Command::new(RUN)
            .env("RUST_LOG", "info")
            .env_remove("SLURM_JOB_ID")
            .args(["-n", &over, "sh", "-c", report]),
    );
    assert_eq!(job.status, 0, "{}", job.stderr);
    assert!(
        job.stderr.contains("ranks not bound") && job.stderr.contains("oversubscribed"),
        "{}",
        job.stderr
    );
    let unbound = job
        .stdout
        .lines()
        .filter(|l| l.starts_with("Cpus_allowed_list:"));
    assert_eq!(unbound.clone().count(), mine.len() + 1, "{}", job.stdout);
    for l in unbound {
        assert_eq!(cpu_list(&allowed_list(l)), mine, "{}", job.stdout);
    }
    // Inside a Slurm job, placement is Slurm's.
    let job = run_cmd(
        Command::new(RUN)
            .env("RUST_LOG", "info")
            .env("SLURM_JOB_ID", "1")
            .args(["-n", "1", "sh", "-c", report]),
    );
    assert_eq!(job.status, 0, "{}", job.stderr);
    assert!(job.stderr.contains("Slurm"), "{}", job.stderr);
    let l = job.stdout.lines().next().unwrap_or_default();
    assert_eq!(cpu_list(&allowed_list(l)), mine, "{}", job.stdout);
}

/// Read the child's stdout until `n` lines contain `pat` (bounded by the watchdog).
fn wait_for_lines(c: &mut Child, pat: &str, n: usize) {
    let out = c.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let pat = pat.to_string();
    std::thread::spawn(move || {
        let mut seen = 0;
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if l.contains(&pat) {
                seen += 1;
                if seen == n {
                    let _ = tx.send(());
                }
            }
        }
    });
    rx.recv_timeout(WATCHDOG)
        .expect("ranks never reported ready");
}

fn which(p: &str) -> Option<String> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(p))
            .find(|f| f.is_file())
            .map(|f| f.to_string_lossy().into_owned())
    })
}

#[test]
fn same_probe_runs_under_mpich_hydra_pmi1_and_pmi2() {
    let Some(hydra) = which("mpiexec.hydra") else {
        skip_or_fail("mpiexec.hydra is not installed (Debian package mpich)");
        return;
    };
    for (pmi, n) in [("pmi1", 4u32), ("pmi2", 2)] {
        let m = marker("hydra");
        let job = run_cmd(
            Command::new(&hydra)
                .args([
                    "-n",
                    &n.to_string(),
                    PROBE,
                    "--marker",
                    &m,
                    "--card-size",
                    "3000",
                ])
                .env("RMCA_PMI", pmi),
        );
        // Hydra does not know our shm naming: remove the probe's files ourselves.
        for f in shm_with(&m) {
            let _ = std::fs::remove_file(Path::new("/dev/shm").join(f));
        }
        assert_eq!(job.status, 0, "{pmi}: {}\n{}", job.stdout, job.stderr);
        assert_eq!(count(&job.stdout, "cards ok"), n as usize, "{}", job.stdout);
        let want = if pmi == "pmi1" {
            "launcher Pmi1"
        } else {
            "launcher Pmi2"
        };
        assert_eq!(count(&job.stdout, want), n as usize);
    }
}

struct Netns(Vec<String>);

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting a namespace also deletes the veth end inside it.
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

#[test]
fn job_spans_two_network_namespaces_through_the_launch_agent() {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        skip_or_fail("needs root to create network namespaces");
        return;
    }
    if which("ip").is_none() {
        skip_or_fail("ip is not installed (Debian package iproute2)");
        return;
    }
    let id = std::process::id() % 100_000;
    let (a, b) = (format!("rmcaA{id}"), format!("rmcaB{id}"));
    let (va, vb) = (format!("rva{id}"), format!("rvb{id}"));
    if !ip(&["netns", "add", &a]) {
        skip_or_fail(format!(
            "`ip netns add {a}` failed: network namespaces are not available here (a container \
             without CAP_SYS_ADMIN?)"
        ));
        return;
    }
    let _guard = Netns(vec![a.clone(), b.clone()]);
    // A private /24 inside our own namespaces; no traffic leaves them.
    let net = 10 + id % 200;
    let (ipa, ipb) = (format!("10.{net}.77.1"), format!("10.{net}.77.2"));
    assert!(ip(&["netns", "add", &b]));
    assert!(ip(&[
        "link", "add", &va, "type", "veth", "peer", "name", &vb
    ]));
    assert!(ip(&["link", "set", &va, "netns", &a]));
    assert!(ip(&["link", "set", &vb, "netns", &b]));
    assert!(ip(&[
        "-n",
        &a,
        "addr",
        "add",
        &format!("{ipa}/24"),
        "dev",
        &va
    ]));
    assert!(ip(&[
        "-n",
        &b,
        "addr",
        "add",
        &format!("{ipb}/24"),
        "dev",
        &vb
    ]));
    for (ns, dev) in [(&a, &va), (&b, &vb)] {
        assert!(ip(&["-n", ns, "link", "set", dev, "up"]));
        assert!(ip(&["-n", ns, "link", "set", "lo", "up"]));
    }
    let m = marker("netns");
    let hosts = format!("{a},{b}");
    // The launcher itself runs in namespace A; the rank on B reaches its PMI server over veth.
    let job = run_cmd(
        Command::new("ip")
            .args(["netns", "exec", &a, RUN, "-n", "2", "--hosts", &hosts])
            .args([
                "--launch-agent",
                "ip netns exec {node} {cmd}",
                "--pmi-addr",
                &ipa,
            ])
            .args(["--timeout", "60", PROBE, "--marker", &m]),
    );
    assert_eq!(job.status, 0, "{}\n{}", job.stdout, job.stderr);
    assert!(
        job.stdout
            .contains("rank 0 of 2: cards ok, node 0 local [0]"),
        "{}",
        job.stdout
    );
    assert!(
        job.stdout
            .contains("rank 1 of 2: cards ok, node 1 local [1]"),
        "{}",
        job.stdout
    );
    assert_no_leftovers(&m, &job);
}

#[test]
fn variables_of_an_enclosing_job_are_not_inherited() {
    let m = marker("nested");
    let job = run_cmd(
        Command::new(RUN)
            .args(["-n", "2", "--pmi-port", PROBE, "--marker", &m])
            .env("PMI_FD", "3")
            .env("PMI_PORT", "127.0.0.1:1")
            .env("RMCA_JOB_SECRET", "00")
            .env("SLURM_MPI_TYPE", "pmi2"),
    );
    assert_eq!(job.status, 0, "{}", job.stderr);
    assert_eq!(count(&job.stdout, "launcher RmcaRun"), 2);
    assert_no_leftovers(&m, &job);
    // Nor a PMIx server's (rmca-run inside `srun --mpi=pmix`).
    let job = run_cmd(
        Command::new(RUN)
            .args(["-n", "1", "env"])
            .env("PMIX_NAMESPACE", "slurm.pmix.1.0")
            .env("PMIX_RANK", "0")
            .env("PMIX_SERVER_URI41", "pmix-server.1;tcp4://127.0.0.1:1"),
    );
    assert_eq!(job.status, 0, "{}", job.stderr);
    assert!(job.stdout.contains("RMCA_JOB_ID="), "{}", job.stdout);
    assert_eq!(count(&job.stdout, "PMIX_"), 0, "{}", job.stdout);
}

#[test]
fn absurd_values_and_limits_are_errors_not_panics() {
    for args in [
        &["--timeout", "1e20", "true"][..],
        &["--term-grace", "1e300", "true"],
        &["-n", "4294967295", "true"],
        &["--timeout", "-1", "true"],
    ] {
        let job = run_cmd(Command::new(RUN).args(args));
        assert_eq!(job.status, 2, "{args:?}: {}", job.stderr);
        assert!(
            job.stderr.contains("invalid value"),
            "{args:?}: {}",
            job.stderr
        );
        assert!(!job.stderr.contains("panicked"), "{args:?}: {}", job.stderr);
    }
    // More ranks than the launcher has descriptors for: said before anything starts.
    let job = run_cmd(Command::new("prlimit").args(["--nofile=64:64", RUN, "-n", "1000", "true"]));
    assert_eq!(job.status, 2, "{}", job.stderr);
    assert!(
        job.stderr.contains("-n 1000 needs about") && job.stderr.contains("ulimit -n"),
        "{}",
        job.stderr
    );
    // Many ranks are a matter of descriptors, not of threads per rank.
    let job = run_cmd(Command::new(RUN).args(["-n", "400", "true"]));
    assert_eq!(job.status, 0, "{}", job.stderr);
}

#[test]
fn a_flood_of_idle_and_garbage_pmi_clients_does_not_keep_ranks_out() {
    use std::io::Write;
    use std::net::TcpStream;
    // The launcher gets few descriptors: before unauthenticated clients were bounded, holding
    // more idle connections than that starved the ranks (and the accept loop spun on EMFILE).
    let m = marker("flood");
    let dir = std::env::temp_dir().join(format!("rmca-flood-{m}"));
    std::fs::create_dir_all(&dir).unwrap();
    let port_file = dir.join("port");
    let script = format!(
        "echo \"$PMI_PORT\" > {}.$PMI_ID; sleep 2; exec {PROBE} --marker {m}",
        port_file.display()
    );
    let child = Command::new("prlimit")
        .args([
            "--nofile=200:200",
            RUN,
            "-n",
            "2",
            "--pmi-port",
            "--timeout",
            "60",
        ])
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let port_of_rank0 = port_file.with_extension("0");
    let t0 = Instant::now();
    let port = loop {
        if let Ok(p) = std::fs::read_to_string(&port_of_rank0) {
            if p.trim().contains(':') {
                break p.trim().to_string();
            }
        }
        assert!(t0.elapsed() < WATCHDOG, "the ranks never started");
        std::thread::sleep(Duration::from_millis(10));
    };
    // Hold 400 idle connections and 40 that send garbage, while the ranks connect.
    let mut held = Vec::new();
    for i in 0..440 {
        if let Ok(mut s) = TcpStream::connect(&port) {
            if i % 11 == 0 {
                let _ = s.write_all(b"cmd=\xff\xfe garbage without end");
            }
            held.push(s);
        }
    }
    let out = wait_bounded(child);
    drop(held);
    let _ = std::fs::remove_dir_all(&dir);
    let job = Job {
        status: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_eq!(job.status, 0, "{}", job.stderr);
    assert_eq!(count(&job.stdout, "cards ok"), 2, "{}", job.stdout);
    assert_no_leftovers(&m, &job);
}

/// Every `/proc/<pid>/cmdline` and `/proc/<pid>/environ` that holds `needle`.
fn procs_exposing(needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if e.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        for f in ["cmdline", "environ"] {
            if let Ok(b) = std::fs::read(e.path().join(f)) {
                if b.windows(needle.len()).any(|w| w == needle) {
                    found.push(format!("{}/{f}", e.path().display()));
                }
            }
        }
    }
    found
}

#[test]
fn pmi_tokens_never_appear_in_a_command_line_or_environment() {
    // A slow launch agent: its command line (and the rank's) stays visible for a while.
    let m = marker("token");
    let dir = std::env::temp_dir().join(format!("rmca-token-{m}"));
    std::fs::create_dir_all(&dir).unwrap();
    let agent = dir.join("slow-agent");
    std::fs::write(&agent, "#!/bin/sh\nsleep 0.5\nexec \"$@\"\n").unwrap();
    let mut perm = std::fs::metadata(&agent).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&agent, perm).unwrap();
    let template = format!("{} {{cmd}}", agent.display());
    let child = Command::new(RUN)
        .args(["-n", "3", "--hosts", "a,b", "--launch-agent", &template])
        .args([PROBE, "--marker", &m, "--mode", "sleep", "--secs", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut exposed = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(1500) {
        exposed.extend(procs_exposing(b"RMCA_PMI_TOKEN="));
    }
    let out = wait_bounded(child);
    let _ = std::fs::remove_dir_all(&dir);
    let job = Job {
        status: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_eq!(job.status, 0, "{}", job.stderr);
    assert_eq!(count(&job.stdout, "cards ok"), 3, "{}", job.stdout);
    exposed.dedup();
    assert!(
        exposed.is_empty(),
        "the PMI token was exposed in {exposed:?}"
    );
    assert_no_leftovers(&m, &job);
}
