//! Run-time choice of how a rendezvous message's bulk travels when the sender offers both: read
//! by the receiver (RGET, e.g. CMA on one node) or copied through the sender's fragments (the
//! copy pipeline, e.g. shm's streamed rings).
//!
//! Which one is faster depends on the size and on the machine's state: on a virtual machine the
//! time to move a cache line between cores can change from one boot to the next, and with it the
//! size at which a kernel copy beats two user copies through a ring ("Figures formerly quoted in
//! code" in `git show c0ea37f:bench/RESULTS.md`). A threshold measured once is wrong on the
//! next boot, so the receiver
//! measures both as it goes, per power-of-two size class, and takes the faster, trying the other
//! one now and then so that a change is noticed.
//!
//! What is measured is a message's *service time*: from when its transfer could start (its
//! rendezvous matched, or the previous bulk transfer finished, whichever is later) to its
//! completion, per byte. With one message at a time that is its latency; with a window of
//! messages in flight it is the time between two completions, the inverse of the bandwidth.
//! A way is judged by the median of its last [`RUN_LEN`] service times. On a machine shared with
//! other work a process is now and then descheduled for a time slice (milliseconds) while one
//! of its messages is in flight: a mean, even a running one, then takes one such message for
//! the way's cost and sends the following runs the slower way until the stall has decayed
//! ("128 KiB: the chooser judged by its stalls" in `git show c0ea37f:bench/RESULTS.md`); the
//! median ignores up to 7 stalled messages in 16.
//!
//! This module is sans-IO: the caller passes the times.

/// How the bulk of a rendezvous message travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bulk {
    /// The receiver reads the sender's buffer (RGET).
    Get,
    /// The sender sends fragments the receiver copies (ACK, then FRAGs).
    Copy,
}

impl Bulk {
    fn index(self) -> usize {
        match self {
            Bulk::Get => 0,
            Bulk::Copy => 1,
        }
    }

    fn other(self) -> Bulk {
        match self {
            Bulk::Get => Bulk::Copy,
            Bulk::Copy => Bulk::Get,
        }
    }
}

/// Size classes: 2^0 .. 2^63 bytes, one per power of two.
const CLASSES: usize = 64;
/// Messages of a class that go the same way in a row. Choosing per message mixed reads and
/// copies within a bandwidth window, where each slowed the other down (the receiver busy with a
/// read does not drain the rings, a sender helping a read does not stream), and the service
/// times measured neither: the mix was slower than either way alone.
pub const RUN_LEN: u32 = 16;
/// Once both ways are measured, one run in this many goes the slower way, to notice a change.
pub const EXPLORE_EVERY: u32 = 16;
/// Samples kept per way and size class, the newest: one run's worth, so that one run of a way
/// replaces what was known of it (a change of mood is followed within a run).
const KEPT: usize = RUN_LEN as usize;

#[derive(Clone, Copy, Debug)]
struct Class {
    /// The newest [`KEPT`] service times per way (index [`Bulk::index`]), nanoseconds per
    /// byte, a ring written at `next`.
    recent: [[f64; KEPT]; 2],
    next: [u8; 2],
    samples: [u32; 2],
    /// Runs started, per way.
    runs: [u32; 2],
    /// The way of the current run and the messages left in it.
    current: Bulk,
    left: u32,
}

impl Default for Class {
    fn default() -> Self {
        Self {
            recent: [[0.0; KEPT]; 2],
            next: [0; 2],
            samples: [0; 2],
            runs: [0; 2],
            current: Bulk::Get,
            left: 0,
        }
    }
}

/// The per-size-class estimates and the choice (see the module documentation).
#[derive(Clone, Debug)]
pub struct BulkChooser {
    classes: Box<[Class; CLASSES]>,
}

impl Default for BulkChooser {
    fn default() -> Self {
        Self::new()
    }
}

fn class_of(len: usize) -> usize {
    (usize::BITS - 1 - len.max(1).leading_zeros()) as usize
}

impl Class {
    /// The median of the kept samples of way `i` (ns per byte), if any.
    fn estimate(&self, i: usize) -> Option<f64> {
        let n = (self.samples[i] as usize).min(KEPT);
        if n == 0 {
            return None;
        }
        let mut v = self.recent[i];
        let v = &mut v[..n];
        v.sort_unstable_by(f64::total_cmp);
        Some(if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        })
    }
}

impl BulkChooser {
    /// No measurement yet.
    pub fn new() -> Self {
        Self {
            classes: Box::new([Class::default(); CLASSES]),
        }
    }

    /// How a message of `len` bytes should travel. Ways go in runs of [`RUN_LEN`] messages:
    /// one run of each first (the read first), then the way with the lower estimate, and the
    /// other one run in [`EXPLORE_EVERY`]. Until both ways have samples (completions lag the
    /// choices) the current way goes on.
    pub fn choose(&mut self, len: usize) -> Bulk {
        let c = &mut self.classes[class_of(len)];
        if c.left == 0 {
            let way = if c.runs[0] == 0 {
                Bulk::Get
            } else if c.runs[1] == 0 {
                Bulk::Copy
            } else if let (Some(get), Some(copy)) = (c.estimate(0), c.estimate(1)) {
                let best = if get <= copy { Bulk::Get } else { Bulk::Copy };
                let total = c.runs[0].wrapping_add(c.runs[1]);
                if total.is_multiple_of(EXPLORE_EVERY) {
                    best.other()
                } else {
                    best
                }
            } else {
                c.current
            };
            c.runs[way.index()] = c.runs[way.index()].saturating_add(1);
            c.current = way;
            c.left = RUN_LEN;
        }
        c.left -= 1;
        c.current
    }

    /// A message of `len` bytes that went `how` took `service_ns` nanoseconds (see the module
    /// documentation). Empty messages and zero times carry no information and are ignored.
    pub fn record(&mut self, len: usize, how: Bulk, service_ns: u64) {
        if len == 0 || service_ns == 0 {
            return;
        }
        let per_byte = service_ns as f64 / len as f64;
        let c = &mut self.classes[class_of(len)];
        let i = how.index();
        c.recent[i][usize::from(c.next[i])] = per_byte;
        c.next[i] = (c.next[i] + 1) % KEPT as u8;
        c.samples[i] = c.samples[i].saturating_add(1);
    }

    /// The measured size classes: for each, its smallest size and the estimated service time
    /// of a message of that size by a read and by the copy pipeline (ns), where measured.
    /// What the profile reports, so that a user can see why a size goes the way it goes.
    pub fn measured(&self) -> impl Iterator<Item = (usize, Option<f64>, Option<f64>)> + '_ {
        self.classes.iter().enumerate().filter_map(|(k, c)| {
            let len = 1usize << k;
            let ns = |i: usize| c.estimate(i).map(|e| e * len as f64);
            (c.samples != [0, 0]).then(|| (len, ns(0), ns(1)))
        })
    }

    /// The current estimate of `how` for messages of `len` bytes (ns per byte), if measured.
    pub fn estimate(&self, len: usize, how: Bulk) -> Option<f64> {
        self.classes[class_of(len)].estimate(how.index())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `n` choices for `len` with the given service times per way; returns the choices.
    fn run(ch: &mut BulkChooser, len: usize, n: usize, get_ns: u64, copy_ns: u64) -> Vec<Bulk> {
        (0..n)
            .map(|_| {
                let how = ch.choose(len);
                ch.record(
                    len,
                    how,
                    match how {
                        Bulk::Get => get_ns,
                        Bulk::Copy => copy_ns,
                    },
                );
                how
            })
            .collect()
    }

    fn count(v: &[Bulk], b: Bulk) -> usize {
        v.iter().filter(|&&x| x == b).count()
    }

    #[test]
    fn the_measured_classes_are_reported_as_times_at_their_smallest_size() {
        let mut ch = BulkChooser::new();
        assert_eq!(ch.measured().count(), 0);
        ch.record(100 << 10, Bulk::Get, 100 << 10); // 1 ns per byte, class 64 KiB
        ch.record(200 << 10, Bulk::Copy, 400 << 10); // 2 ns per byte, class 128 KiB
        let m: Vec<_> = ch.measured().collect();
        assert_eq!(
            m,
            [
                (64 << 10, Some(65536.0), None),
                (128 << 10, None, Some(262144.0))
            ]
        );
    }

    #[test]
    fn both_ways_are_measured_in_runs_before_either_is_trusted() {
        let mut ch = BulkChooser::new();
        let n = RUN_LEN as usize;
        let first = run(&mut ch, 256 << 10, 2 * n, 100, 50);
        assert!(first[..n].iter().all(|&b| b == Bulk::Get), "{first:?}");
        assert!(first[n..].iter().all(|&b| b == Bulk::Copy), "{first:?}");
    }

    #[test]
    fn a_way_is_kept_until_both_have_completions() {
        let mut ch = BulkChooser::new();
        let n = RUN_LEN as usize;
        // Choices without completions (a window still in flight): Get, then Copy, then Copy.
        let v: Vec<Bulk> = (0..3 * n).map(|_| ch.choose(100_000)).collect();
        assert_eq!(count(&v[..n], Bulk::Get), n);
        assert_eq!(count(&v[n..], Bulk::Copy), 2 * n);
    }

    #[test]
    fn the_faster_way_wins_and_the_other_is_tried_now_and_then() {
        let mut ch = BulkChooser::new();
        let n = RUN_LEN as usize;
        let e = EXPLORE_EVERY as usize;
        run(&mut ch, 128 << 10, 2 * n, 30_000, 10_000);
        let next = run(&mut ch, 128 << 10, 4 * e * n, 30_000, 10_000);
        assert_eq!(
            count(&next, Bulk::Get),
            4 * n,
            "copy is 3x faster: one run in {e} reads"
        );
        // Another size class learns on its own: there the read is faster.
        run(&mut ch, 2 << 20, 2 * n, 100_000, 400_000);
        let big = run(&mut ch, 2 << 20, e * n, 100_000, 400_000);
        assert!(count(&big, Bulk::Get) >= (e - 1) * n);
        assert!(ch.estimate(128 << 10, Bulk::Copy) < ch.estimate(128 << 10, Bulk::Get));
    }

    #[test]
    fn a_change_of_mood_is_followed() {
        let mut ch = BulkChooser::new();
        let n = RUN_LEN as usize;
        let e = EXPLORE_EVERY as usize;
        run(&mut ch, 512 << 10, 4 * e * n, 40_000, 20_000);
        assert!(ch.estimate(512 << 10, Bulk::Copy) < ch.estimate(512 << 10, Bulk::Get));
        // The copy pipeline gets four times slower (slow cache-line handoffs): the run that
        // goes on sees it, and the read takes over.
        let after = run(&mut ch, 512 << 10, 4 * e * n, 40_000, 80_000);
        let tail = &after[after.len() - e * n..];
        assert!(count(tail, Bulk::Get) >= (e - 1) * n, "{tail:?}");
    }

    #[test]
    fn sizes_fall_in_power_of_two_classes() {
        assert_eq!(class_of(0), 0);
        assert_eq!(class_of(1), 0);
        assert_eq!(class_of(65_536), 16);
        assert_eq!(class_of(131_071), 16);
        assert_eq!(class_of(usize::MAX), 63);
        let mut ch = BulkChooser::new();
        ch.record(0, Bulk::Get, 5);
        ch.record(10, Bulk::Get, 0);
        assert_eq!(ch.estimate(10, Bulk::Get), None);
        ch.record(100, Bulk::Copy, 50);
        assert_eq!(ch.estimate(127, Bulk::Copy), Some(0.5));
    }

    /// Service time of the `k`-th message of a way that takes `ns`, when every `every`-th
    /// message of it stalls for `stall_ns` (its process was descheduled for a time slice).
    fn stalled(k: &mut u64, ns: u64, every: u64, stall_ns: u64) -> u64 {
        *k += 1;
        if (*k).is_multiple_of(every) {
            stall_ns
        } else {
            ns
        }
    }

    /// Messages of the run-up (one run of each way) and of the exploring runs excepted, the
    /// number that went `way`, and how many were counted.
    fn steady(v: &[Bulk], way: Bulk) -> (usize, usize) {
        let n = RUN_LEN as usize;
        let runs: Vec<&[Bulk]> = v.chunks(n).skip(2).collect();
        let kept = runs.len() - runs.len().div_ceil(EXPLORE_EVERY as usize);
        let went = runs.iter().filter(|r| r.iter().all(|&b| b == way)).count();
        (went.min(kept), kept)
    }

    #[test]
    fn rare_stalls_of_the_faster_way_do_not_hide_it() {
        // 128 KiB: the copy pipeline 10 us, a read 15 us; one copy in 20 stalls 30 ms.
        let (len, mut k) = (128 << 10, 0);
        let mut ch = BulkChooser::new();
        let v: Vec<Bulk> = (0..64 * RUN_LEN)
            .map(|_| {
                let how = ch.choose(len);
                let ns = match how {
                    Bulk::Get => 15_000,
                    Bulk::Copy => stalled(&mut k, 10_000, 20, 30_000_000),
                };
                ch.record(len, how, ns);
                how
            })
            .collect();
        let (went, kept) = steady(&v, Bulk::Copy);
        assert_eq!(went, kept, "{v:?}");
    }

    #[test]
    fn stalls_of_both_ways_do_not_decide() {
        // The read is the faster way (12 us against 16); both stall, one message in 13 and
        // in 11, for 5-30 ms.
        let (len, mut kg, mut kc) = (128 << 10, 0, 0);
        let mut ch = BulkChooser::new();
        let v: Vec<Bulk> = (0..64 * RUN_LEN)
            .map(|i| {
                let how = ch.choose(len);
                let stall = 5_000_000 + 1_000_000 * u64::from(i % 26);
                let ns = match how {
                    Bulk::Get => stalled(&mut kg, 12_000, 13, stall),
                    Bulk::Copy => stalled(&mut kc, 16_000, 11, stall),
                };
                ch.record(len, how, ns);
                how
            })
            .collect();
        let (went, kept) = steady(&v, Bulk::Get);
        assert_eq!(went, kept, "{v:?}");
    }

    proptest::proptest! {
        /// Whatever the speeds, and wherever up to 7 of each run's 16 messages stall and for
        /// however long, every run but the run-up and the exploring ones goes the faster way.
        #[test]
        fn up_to_seven_stalls_in_a_run_never_decide(
            fast_ns in 1_000u64..1_000_000,
            slower_pct in 105u64..400,
            get_is_faster: bool,
            stalls in proptest::collection::vec(
                proptest::collection::vec((0usize..KEPT, 1u64..50_000_000), 0..=7),
                40,
            ),
        ) {
            let len = 256 << 10;
            let slow_ns = fast_ns * slower_pct / 100;
            let (get_ns, copy_ns) = if get_is_faster { (fast_ns, slow_ns) } else { (slow_ns, fast_ns) };
            let mut ch = BulkChooser::new();
            let mut v = Vec::new();
            for run in &stalls {
                for i in 0..KEPT {
                    let how = ch.choose(len);
                    let base = if how == Bulk::Get { get_ns } else { copy_ns };
                    let extra = run.iter().filter(|s| s.0 == i).map(|s| s.1).sum::<u64>();
                    ch.record(len, how, base + extra);
                    v.push(how);
                }
            }
            let faster = if get_is_faster { Bulk::Get } else { Bulk::Copy };
            let (went, kept) = steady(&v, faster);
            proptest::prop_assert_eq!(went, kept);
        }
    }
}
