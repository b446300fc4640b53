//! The job monitor: decides when the job fails, what to tell the user, when to escalate from
//! SIGTERM to SIGKILL and what the exit status is. A sans-IO state machine with explicit time;
//! the launcher feeds it process exits and PMI events and carries out its [`Action`]s.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How a rank's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Normal exit with a status code.
    Code(i32),
    /// Killed by a signal.
    Signal(i32),
}

/// What the launcher must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Print this line on stderr.
    Message(String),
    /// Send SIGTERM to the process groups of all live ranks.
    Terminate,
    /// Send SIGKILL to the process groups of all live ranks.
    Kill,
    /// Keep-going mode: this rank died and the job goes on without it; tell the PMI server so
    /// that fences fail instead of waiting for it.
    RankLost(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    Terminating { since: Instant, killed: bool },
}

#[derive(Debug, Clone, Default)]
struct RankInfo {
    pid: u32,
    initialized: bool,
    finalized: bool,
    pmi_closed: bool,
    exit: Option<Exit>,
    /// A clean exit without finalize seen; judged when the PMI connection closes or at this
    /// time, whichever comes first (the finalize message may still be in flight).
    judge_at: Option<Instant>,
}

/// How long a clean exit waits for its finalize to arrive before it counts as a crash.
pub const SETTLE: Duration = Duration::from_millis(500);

/// Exit status used when `--timeout` expires (as timeout(1)).
pub const TIMEOUT_STATUS: i32 = 124;

/// Tracks every rank and the job's fate.
#[derive(Debug)]
pub struct JobMonitor {
    ranks: Vec<RankInfo>,
    phase: Phase,
    status: Option<i32>,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    grace: Duration,
    actions: VecDeque<Action>,
    /// A rank's death does not end the job (`--keep-going`).
    keep_going: bool,
    /// Extra text for the timeout message (e.g. which ranks wait in a fence), set by the caller.
    pub timeout_detail: String,
}

/// Conventional name of a signal number.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => "unknown signal",
    }
}

impl JobMonitor {
    /// A job of `pids.len()` ranks started at `now`.
    pub fn new(pids: &[u32], timeout: Option<Duration>, grace: Duration, now: Instant) -> Self {
        Self {
            ranks: pids
                .iter()
                .map(|&pid| RankInfo {
                    pid,
                    ..Default::default()
                })
                .collect(),
            phase: Phase::Running,
            status: None,
            deadline: timeout.map(|t| now + t),
            timeout,
            grace,
            actions: VecDeque::new(),
            keep_going: false,
            timeout_detail: String::new(),
        }
    }

    /// Keep-going mode: a rank that dies (signal, non-zero exit, exit without finalize) is
    /// reported and its status kept for the job's exit, but the other ranks keep running, so
    /// that they can observe the loss themselves (pml dr's peer timeout). Aborts, `--timeout`
    /// and signals to the launcher still end the job.
    pub fn keep_going(mut self, on: bool) -> Self {
        self.keep_going = on;
        self
    }

    /// A rank is lost: the job ends, or in keep-going mode it is reported and the job goes on.
    fn rank_failed(&mut self, rank: usize, status: i32, msg: String, now: Instant) {
        if !self.keep_going {
            return self.fail(status, msg, now);
        }
        if self.phase != Phase::Running {
            return;
        }
        self.status.get_or_insert(status);
        self.actions.push_back(Action::Message(format!(
            "rmca-run: {msg}; the other ranks go on (--keep-going)"
        )));
        self.actions.push_back(Action::RankLost(rank as u32));
    }

    fn fail(&mut self, status: i32, msg: String, now: Instant) {
        if self.phase != Phase::Running {
            return;
        }
        // The job's status is its first failure: a rank already lost under --keep-going wins
        // over the timeout or abort that ends the job later.
        self.status.get_or_insert(status);
        self.actions.push_back(Action::Message(format!(
            "rmca-run: {msg}; terminating the job"
        )));
        self.phase = Phase::Terminating {
            since: now,
            killed: false,
        };
        self.actions.push_back(Action::Terminate);
    }

    /// A rank's PMI client completed init.
    pub fn handle_initialized(&mut self, rank: u32) {
        if let Some(r) = self.ranks.get_mut(rank as usize) {
            r.initialized = true;
        }
    }

    /// A rank called PMI finalize.
    pub fn handle_finalized(&mut self, rank: u32) {
        if let Some(r) = self.ranks.get_mut(rank as usize) {
            r.finalized = true;
            r.judge_at = None;
        }
    }

    /// A rank's PMI connection closed.
    pub fn handle_pmi_closed(&mut self, rank: u32, now: Instant) {
        if let Some(r) = self.ranks.get_mut(rank as usize) {
            r.pmi_closed = true;
            if r.judge_at.is_some() {
                r.judge_at = Some(now);
            }
        }
        self.handle_timeout(now);
    }

    /// A rank asked to abort the job.
    pub fn handle_abort(&mut self, rank: Option<u32>, code: i32, message: &str, now: Instant) {
        let who = match rank {
            Some(r) => format!("rank {r}"),
            None => "an unidentified PMI client".into(),
        };
        let status = if code == 0 { 1 } else { code };
        let msg = if message.is_empty() {
            format!("{who} called abort with exit code {code}")
        } else {
            format!("{who} called abort with exit code {code}: {message}")
        };
        self.fail(status, msg, now);
    }

    /// A rank could not be started.
    pub fn handle_spawn_failure(&mut self, rank: u32, err: &str, now: Instant) {
        if let Some(r) = self.ranks.get_mut(rank as usize) {
            r.exit = Some(Exit::Code(127));
        }
        self.fail(127, format!("cannot start rank {rank}: {err}"), now);
    }

    /// The launcher itself received `sig`.
    pub fn handle_signal(&mut self, sig: i32, now: Instant) {
        self.fail(
            128 + sig,
            format!("received {} ({sig})", signal_name(sig)),
            now,
        );
    }

    /// A rank's process ended.
    pub fn handle_exit(&mut self, rank: u32, exit: Exit, now: Instant) {
        let Some(r) = self.ranks.get_mut(rank as usize) else {
            return;
        };
        r.exit = Some(exit);
        let pid = r.pid;
        let index = rank as usize;
        match exit {
            Exit::Signal(s) => self.rank_failed(
                index,
                128 + s,
                format!(
                    "rank {rank} (pid {pid}) killed by signal {s} ({})",
                    signal_name(s)
                ),
                now,
            ),
            Exit::Code(c) if c != 0 => self.rank_failed(
                index,
                c,
                format!("rank {rank} (pid {pid}) exited with status {c}"),
                now,
            ),
            Exit::Code(_) => {
                if r.initialized && !r.finalized {
                    r.judge_at = Some(if r.pmi_closed { now } else { now + SETTLE });
                    self.handle_timeout(now);
                }
            }
        }
    }

    /// Let time pass: timeout, SIGKILL escalation, pending exit judgements.
    pub fn handle_timeout(&mut self, now: Instant) {
        for rank in 0..self.ranks.len() {
            let r = &mut self.ranks[rank];
            if let Some(t) = r.judge_at {
                if now >= t {
                    r.judge_at = None;
                    if !r.finalized {
                        let pid = r.pid;
                        self.rank_failed(
                            rank,
                            1,
                            format!("rank {rank} (pid {pid}) exited without calling finalize"),
                            now,
                        );
                    }
                }
            }
        }
        if let (Phase::Running, Some(d)) = (self.phase, self.deadline) {
            if now >= d && !self.is_done() {
                let running: Vec<String> = self
                    .ranks
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.exit.is_none())
                    .map(|(i, _)| i.to_string())
                    .collect();
                let secs = self.timeout.map(|t| t.as_secs_f64()).unwrap_or(0.0);
                let detail = std::mem::take(&mut self.timeout_detail);
                self.fail(
                    TIMEOUT_STATUS,
                    format!(
                        "job exceeded --timeout {secs} s (ranks still running: {}){detail}",
                        running.join(",")
                    ),
                    now,
                );
            }
        }
        if let Phase::Terminating { since, killed } = self.phase {
            if !killed && now >= since + self.grace && !self.is_done() {
                self.actions.push_back(Action::Kill);
                self.phase = Phase::Terminating {
                    since,
                    killed: true,
                };
            }
        }
    }

    /// When [`JobMonitor::handle_timeout`] next needs calling.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let judge = self.ranks.iter().filter_map(|r| r.judge_at).min();
        let phase = match self.phase {
            Phase::Running => self.deadline,
            Phase::Terminating { since, killed } => (!killed).then_some(since + self.grace),
        };
        [judge, phase].into_iter().flatten().min()
    }

    /// Next thing to do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Every rank has ended and no exit is waiting to be judged.
    pub fn is_done(&self) -> bool {
        self.ranks
            .iter()
            .all(|r| r.exit.is_some() && r.judge_at.is_none())
    }

    /// Whether the job is being torn down.
    pub fn is_terminating(&self) -> bool {
        self.phase != Phase::Running
    }

    /// Ranks whose process is still running.
    pub fn live_ranks(&self) -> Vec<u32> {
        (0..self.ranks.len() as u32)
            .filter(|r| self.ranks[*r as usize].exit.is_none())
            .collect()
    }

    /// The launcher's exit status.
    pub fn exit_status(&self) -> i32 {
        self.status.unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn drain(m: &mut JobMonitor) -> Vec<Action> {
        std::iter::from_fn(|| m.poll_action()).collect()
    }

    #[test]
    fn crash_terminates_then_kills_after_grace() {
        let t0 = Instant::now();
        let mut m = JobMonitor::new(&[10, 11, 12], None, Duration::from_secs(2), t0);
        m.handle_exit(2, Exit::Signal(11), t0);
        let a = drain(&mut m);
        assert_eq!(
            a[0],
            Action::Message(
                "rmca-run: rank 2 (pid 12) killed by signal 11 (SIGSEGV); terminating the job"
                    .into()
            )
        );
        assert_eq!(a[1], Action::Terminate);
        assert_eq!(m.poll_timeout(), Some(t0 + Duration::from_secs(2)));
        m.handle_timeout(t0 + Duration::from_secs(1));
        assert!(drain(&mut m).is_empty());
        m.handle_timeout(t0 + Duration::from_secs(2));
        assert_eq!(drain(&mut m), vec![Action::Kill]);
        // Ranks killed by the teardown do not change the status.
        m.handle_exit(0, Exit::Signal(15), t0 + Duration::from_secs(2));
        m.handle_exit(1, Exit::Signal(9), t0 + Duration::from_secs(2));
        assert!(m.is_done());
        assert_eq!(m.exit_status(), 139);
    }

    #[test]
    fn clean_exit_without_finalize_is_a_failure_after_settling() {
        let t0 = Instant::now();
        let mut m = JobMonitor::new(&[1, 2], None, Duration::from_secs(1), t0);
        m.handle_initialized(0);
        m.handle_initialized(1);
        m.handle_exit(0, Exit::Code(0), t0);
        assert!(!m.is_done());
        assert!(drain(&mut m).is_empty());
        // Finalize arriving late (after the exit) is still honoured.
        m.handle_finalized(0);
        m.handle_timeout(t0 + SETTLE);
        assert!(drain(&mut m).is_empty());
        // Rank 1 exits 0 without finalize; its connection closes.
        m.handle_exit(1, Exit::Code(0), t0);
        m.handle_pmi_closed(1, t0);
        let a = drain(&mut m);
        assert!(matches!(&a[0], Action::Message(s) if s.contains("without calling finalize")));
        assert_eq!(m.exit_status(), 1);
    }

    #[test]
    fn first_failure_wins_and_timeout_reports_running_ranks() {
        let t0 = Instant::now();
        let mut m = JobMonitor::new(
            &[1, 2, 3],
            Some(Duration::from_secs(5)),
            Duration::from_secs(1),
            t0,
        );
        m.handle_exit(0, Exit::Code(0), t0);
        m.handle_timeout(t0 + Duration::from_secs(5));
        let a = drain(&mut m);
        assert!(matches!(&a[0], Action::Message(s) if s.contains("ranks still running: 1,2")));
        m.handle_abort(Some(1), 9, "late", t0 + Duration::from_secs(6));
        m.handle_exit(1, Exit::Code(3), t0 + Duration::from_secs(6));
        assert_eq!(m.exit_status(), TIMEOUT_STATUS);
    }

    #[test]
    fn keep_going_reports_a_dead_rank_and_lets_the_others_finish() {
        let t0 = Instant::now();
        let mut m = JobMonitor::new(&[1, 2, 3], None, Duration::from_secs(1), t0).keep_going(true);
        for r in 0..3 {
            m.handle_initialized(r);
        }
        m.handle_exit(1, Exit::Signal(9), t0);
        let a = drain(&mut m);
        assert!(
            matches!(&a[0], Action::Message(s) if s.contains("rank 1 (pid 2) killed by signal 9") && s.contains("--keep-going")),
            "{a:?}"
        );
        assert_eq!(a[1], Action::RankLost(1));
        assert!(!a.contains(&Action::Terminate));
        assert!(!m.is_terminating());
        // The survivors see the loss and exit on their own.
        m.handle_exit(0, Exit::Code(3), t0);
        m.handle_finalized(2);
        m.handle_exit(2, Exit::Code(0), t0);
        assert_eq!(drain(&mut m), vec![
            Action::Message("rmca-run: rank 0 (pid 1) exited with status 3; the other ranks go on (--keep-going)".into()),
            Action::RankLost(0),
        ]);
        assert!(m.is_done());
        assert_eq!(
            m.exit_status(),
            137,
            "the first failure is the job's status"
        );
        // Aborts still end a keep-going job.
        let mut m = JobMonitor::new(&[1, 2], None, Duration::from_secs(1), t0).keep_going(true);
        m.handle_abort(Some(0), 4, "", t0);
        assert!(drain(&mut m).contains(&Action::Terminate));
    }

    #[test]
    fn keep_going_status_is_the_first_failure_even_when_a_timeout_ends_the_job() {
        let t0 = Instant::now();
        let mut m = JobMonitor::new(
            &[1, 2, 3],
            Some(Duration::from_secs(5)),
            Duration::from_secs(1),
            t0,
        )
        .keep_going(true);
        m.handle_exit(1, Exit::Code(3), t0);
        m.handle_timeout(t0 + Duration::from_secs(5));
        let a = drain(&mut m);
        assert!(a.contains(&Action::Terminate), "{a:?}");
        m.handle_exit(0, Exit::Signal(15), t0 + Duration::from_secs(5));
        m.handle_exit(2, Exit::Signal(15), t0 + Duration::from_secs(5));
        assert!(m.is_done());
        assert_eq!(m.exit_status(), 3, "the first failure is the job's status");
    }

    #[test]
    fn abort_status_is_its_code() {
        let t0 = Instant::now();
        let mut m = JobMonitor::new(&[1, 2], None, Duration::from_secs(1), t0);
        m.handle_abort(Some(1), 5, "probe abort", t0);
        let a = drain(&mut m);
        assert!(
            matches!(&a[0], Action::Message(s) if s.contains("rank 1 called abort with exit code 5: probe abort"))
        );
        assert_eq!(m.exit_status(), 5);
    }

    proptest! {
        /// Whatever happens, once every rank has exited the job is done, and a job with any
        /// signal death or non-zero exit never reports success.
        #[test]
        fn any_failure_yields_nonzero(exits in proptest::collection::vec((0u8..3, 1i32..20), 1..8)) {
            let t0 = Instant::now();
            let pids: Vec<u32> = (0..exits.len() as u32).collect();
            let mut m = JobMonitor::new(&pids, None, Duration::from_secs(1), t0);
            let mut any_fail = false;
            for (i, (kind, v)) in exits.iter().enumerate() {
                let e = match kind { 0 => Exit::Code(0), 1 => Exit::Code(*v), _ => Exit::Signal(*v) };
                any_fail |= e != Exit::Code(0);
                m.handle_exit(i as u32, e, t0);
            }
            m.handle_timeout(t0 + Duration::from_secs(10));
            prop_assert!(m.is_done());
            prop_assert_eq!(m.exit_status() != 0, any_fail);
        }
    }
}
