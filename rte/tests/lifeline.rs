//! The launcher-death handler in a real process: a child registers two files, unregisters one,
//! blocks the signal in its only thread of its own and computes; the signal rmca-run sends when
//! it dies must end it promptly, removing the registered file and only that one.
//!
//! `harness = false`: libtest's own threads would take the signal and hide a missing
//! `rmca-lifeline` thread.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rmca_rte::lifeline;

const ROLE: &str = "RMCA_LIFELINE_TEST_CHILD";

fn block_in_this_thread(sig: i32) {
    // SAFETY: sigset_t is plain data initialised by sigemptyset; only this thread's mask changes.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        assert_eq!(
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()),
            0
        );
    }
}

fn child(dir: &Path) -> ! {
    let sig = lifeline::launcher_death_signal();
    // The program blocks the signal before the runtime starts: threads it creates inherit that.
    block_in_this_thread(sig);
    lifeline::expect_launcher_death_signal(sig).expect("arm");
    let kept = dir.join("registered");
    let _keep = lifeline::remove_on_launcher_death(&kept).expect("register");
    std::fs::write(&kept, b"x").expect("create");
    let released = dir.join("released");
    let r = lifeline::remove_on_launcher_death(&released).expect("register");
    std::fs::write(&released, b"x").expect("create");
    drop(r);
    println!("ready");
    // A long computation that never makes a system call.
    let t0 = Instant::now();
    let mut x = 1u64;
    while t0.elapsed() < Duration::from_secs(60) {
        for _ in 0..1_000_000 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
    }
    std::process::exit(3)
}

fn main() {
    if let Some(dir) = std::env::var_os(ROLE) {
        child(Path::new(&dir));
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let dir = std::env::temp_dir().join(format!("rmca-lifeline-{}x{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = Command::new(std::env::current_exe().unwrap())
        .env(ROLE, &dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "child failed to start");
    let sig = lifeline::launcher_death_signal();
    // SAFETY: kill has no memory effects; the pid is our own child, not reaped yet.
    assert_eq!(unsafe { libc::kill(c.id() as i32, sig) }, 0);
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = c.kill();
            let _ = c.wait();
            panic!("the child did not die of signal {sig} (blocked in all its threads?)");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.signal(), Some(sig), "{status}");
    let file = |n: &str| -> PathBuf { dir.join(n) };
    assert!(!file("registered").exists(), "the registered file was left");
    assert!(
        file("released").exists(),
        "a file no longer registered was removed"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    println!("lifeline: ok");
}
