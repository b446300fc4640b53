//! The stream chunk and the stores of streamed records, chosen from costs measured at init
//! instead of figures measured once.
//!
//! A streamed record is written in chunks, each made visible by a progress store that moves a
//! cache line from the producer's core to the consumer's (a *handoff*). More chunks overlap the
//! two copies better; each costs a handoff. With `n = len / c` chunks of `c` bytes the record
//! takes about `n x handoff + c / rate` (the handoffs, plus the last chunk, which the consumer
//! copies after the producer), least at `c = sqrt(len x handoff x rate)`. The handoff moves
//! between ~50 and ~280 ns on the 2-vCPU VM from one boot (or period) to the next, and the copy
//! rate moves with it, so both are measured when the module starts ([`crate::sys`] does the
//! timing; this module only computes).
//!
//! Chunks are powers of two (the nearest to the ideal, on a log scale) between [`MIN_CHUNK`]
//! and [`MAX_CHUNK`]. The floor is measured, not modelled: below 16 KiB glibc 2.36 copies with
//! a vector loop instead of `rep movsb`, and 8 KiB chunks were 4-15% slower than 16 KiB ones
//! from 16 KiB to 1 MiB even with fast handoffs ("ob1 + shm medium messages: stream chunks"
//! in `git show c0ea37f:bench/RESULTS.md`).
//!
//! Whether the cores share a cache moves too, every 0.25-1 s (the host moves the VM's two
//! vCPUs between L3 domains), and decides how a streamed record is best written: through the
//! producer's cache when they share one, with non-temporal stores to memory when they do not
//! (at init [`Transfers::prefer_nontemporal`], from blocks moved both ways between two
//! threads; then [`StoreChooser`], from the producer's copy times as the records go). Same job, forced each way, when they did not (handoff ~215 ns): 8-64 KiB bandwidth
//! 3.2-5.6 GB/s through the cache against 7.2-9.6 with non-temporal stores, 64 KiB ping-pong
//! 21.7 against 9.9 us; when they did, 64 KiB ping-pong 3.6-4.4 against 8.3-10.6 us
//! ("ob1 + shm when the cores share no cache" in `git show c0ea37f:bench/RESULTS.md`).

/// Smallest chunk chosen.
pub const MIN_CHUNK: usize = 16 * 1024;
/// Largest chunk chosen (a 64 KiB eager fragment goes in one; a 128 KiB one, with
/// `btl_shm_eager_limit` raised, still in two).
pub const MAX_CHUNK: usize = 64 * 1024;

/// Costs measured at init.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Costs {
    /// One-way time to move a written cache line to the other core (ns).
    pub handoff_ns: f64,
    /// Bytes per ns of a cache-resident copy of a chunk's size.
    pub copy_bytes_per_ns: f64,
    /// Blocks moved from one core to the other, written both ways (`None`: not measured).
    pub transfers: Option<Transfers>,
}

/// One way of moving a block through shared memory from a writer's core to a reader's, as a
/// ring moves a streamed record: the writer writes lines that the reader last read, then the
/// reader copies them out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transfer {
    /// Bytes per ns of the writer's copy in.
    pub write_bytes_per_ns: f64,
    /// Bytes per ns of the reader's copy out.
    pub read_bytes_per_ns: f64,
}

impl Transfer {
    /// Bytes per ns of the slower side: records streamed back to back move no faster (the
    /// two copies of one record overlap chunk by chunk). `None` for figures no measurement
    /// gives (not finite or not positive).
    pub fn rate(&self) -> Option<f64> {
        let (w, r) = (self.write_bytes_per_ns, self.read_bytes_per_ns);
        let ok = |v: f64| v.is_finite() && v > 0.0;
        (ok(w) && ok(r)).then(|| w.min(r))
    }
}

/// A block moved through the writer's cache, and with non-temporal stores to memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transfers {
    /// Ordinary stores: the reader pulls the lines from the writer's cache.
    pub cached: Transfer,
    /// Non-temporal stores: the reader reads the lines from memory.
    pub nontemporal: Transfer,
}

/// How much faster the non-temporal way must measure before it is chosen. A measured block
/// understates what the cached way gains in a stream (the reader's copy of a chunk overlaps
/// the writer's next; 64 KiB windows ran at ~20 GB/s when the cores share a cache, against
/// ~12 GB/s for a block's write alone), so near-ties stay cached. The moods seen on the VM are
/// far apart: cached 11-22 GB/s write and 27-35 read against non-temporal 20-25 and 11-14 when
/// the cores share a cache; cached 4-9 write and 10-12 read against 18-23 and 10-15 when not.
pub const NONTEMPORAL_GAIN: f64 = 1.25;

impl Transfers {
    /// Whether streamed payloads should go to memory rather than through the writer's cache.
    pub fn prefer_nontemporal(&self) -> bool {
        match (self.cached.rate(), self.nontemporal.rate()) {
            (Some(c), Some(n)) => n >= c * NONTEMPORAL_GAIN,
            _ => false,
        }
    }
}

impl Costs {
    /// A handoff expressed in bytes of copying (what a chunk boundary costs), or `None` for
    /// figures no measurement gives (not finite, not positive, or absurd).
    pub fn handoff_bytes(&self) -> Option<u64> {
        let ok = |v: f64, max: f64| v.is_finite() && v > 0.0 && v < max;
        if !ok(self.handoff_ns, 100_000.0) || !ok(self.copy_bytes_per_ns, 10_000.0) {
            return None;
        }
        Some((self.handoff_ns * self.copy_bytes_per_ns).round().max(1.0) as u64)
    }
}

/// The chunk of a `len`-byte streamed record when a handoff costs `handoff_bytes` of copying.
pub fn chunk_for(len: usize, handoff_bytes: u64) -> usize {
    let ideal = (len as f64 * handoff_bytes as f64).sqrt();
    if ideal.is_nan() || ideal < MIN_CHUNK as f64 {
        return MIN_CHUNK;
    }
    if ideal >= MAX_CHUNK as f64 {
        return MAX_CHUNK;
    }
    // The power of two nearest on a log scale: below it, or twice it from sqrt(2) times it.
    let below = 1usize << (usize::BITS - 1 - (ideal as usize).leading_zeros());
    let chunk = if ideal >= below as f64 * std::f64::consts::SQRT_2 {
        below * 2
    } else {
        below
    };
    chunk.clamp(MIN_CHUNK, MAX_CHUNK)
}

/// How a record is to be written, from [`StoreChooser::plan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StorePlan {
    /// With non-temporal stores.
    pub nontemporal: bool,
    /// Time the copy and give it to [`StoreChooser::record`].
    pub timed: bool,
}

/// The last few copy rates (bytes per ns) of one way of writing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Rates {
    last: [f64; Rates::KEPT],
    len: usize,
    next: usize,
}

impl Rates {
    const KEPT: usize = 4;

    fn push(&mut self, rate: f64) {
        self.last[self.next] = rate;
        self.next = (self.next + 1) % Self::KEPT;
        self.len = (self.len + 1).min(Self::KEPT);
    }

    /// The median of those kept (the mean of the middle two of an even count): one copy
    /// stretched by a deschedule does not move it.
    fn median(&self) -> Option<f64> {
        let mut v = self.last;
        let v = &mut v[..self.len];
        v.sort_by(f64::total_cmp);
        match self.len {
            0 => None,
            n if n % 2 == 1 => Some(v[n / 2]),
            n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
        }
    }
}

/// Chooses, as a ring's records go, how their streamed payloads are written
/// (`btl_shm_stream_stores = auto`). The cores' mood flips every 0.25-1 s on the VM (the
/// host moves its vCPUs between cache domains), so a choice made once at init is wrong for
/// much of a job.
///
/// Through the cache, the producer's copy-in of a 32-64 KiB record runs at 8-25 GB/s when
/// the cores share a cache and at 3-5 GB/s when they do not (each ring line the consumer
/// read last must first be taken back from its cache); with non-temporal stores at 13-19
/// GB/s either way ("ob1 + shm when the cores share no cache" in
/// `git show c0ea37f:bench/RESULTS.md`). So while
/// writing through the cache, the chooser times one record in [`StoreChooser::TIME_EVERY`]
/// and goes non-temporal when the median of the last four cached rates falls below
/// [`StoreChooser::SLOW_CACHED`] of the non-temporal one. Non-temporal writes say nothing of
/// the mood (nor does a cached write among them: its lines come from memory, not from the
/// consumer), so after [`StoreChooser::RETRY_NS`] the chooser goes back through the cache and
/// judges again, once a lap's worth of records ([`StoreChooser::WARMUP`]) has brought the
/// ring's lines back into the caches. In the slow mood that costs a few dozen records at the
/// slow rate every retry (~3% of the time); when the mood turns, it is noticed within one.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreChooser {
    nontemporal: bool,
    /// Records of at least [`StoreChooser::SAMPLE_MIN`] bytes planned, and since the last
    /// change of way.
    records: u64,
    since_switch: u64,
    /// When the records went non-temporal (ns, the caller's clock), and the last plan's time.
    nontemporal_since: u64,
    now: u64,
    /// Records shorter than [`StoreChooser::SAMPLE_MIN`] planned.
    short_records: u64,
    cached: Rates,
    nt: Rates,
    switches: u64,
}

impl StoreChooser {
    /// One record in this many is timed.
    pub const TIME_EVERY: u64 = 8;
    /// While no non-temporal rate is known, one record in this many is written that way.
    pub const PROBE_EVERY: u64 = 64;
    /// Cached writes slower than this fraction of non-temporal ones mean the cores share no
    /// cache (ratios of the medians in jobs: 0.5-1.5 when they do, 0.2-0.35 when they do not).
    pub const SLOW_CACHED: f64 = 0.4;
    /// Records shorter than this are neither timed nor probes, and do not count towards
    /// either cadence; they are written the way the longer ones are (and go back through the
    /// cache at a retry: without longer records to judge by they then stay there). The rates depend on the
    /// record's length and the traffic: a few KiB take too little time to time, a
    /// non-temporal record's store fence weighs on short ones, and ob1's 16 KiB rendezvous
    /// fragments, written while the receiver copies the one before, copy in at 8-14 GB/s
    /// through the cache even when the cores share one (where either way moves them equally
    /// fast). Eager records of 32-64 KiB give the clean signal.
    pub const SAMPLE_MIN: usize = 32 * 1024;
    /// Records shorter than this always go through the cache: in the slow mood non-temporal
    /// stores gain little there (4 KiB: bandwidth 1.25x, ping-pong alike), and in the fast one
    /// they cost up to half (4 KiB bandwidth 6-7 against 7-14 GB/s, ping-pong 1.5 against
    /// 0.7 us), which a wrong guess (the mood at init, until the first retry) would pay.
    pub const NONTEMPORAL_MIN: usize = 8 * 1024;
    /// How long records go non-temporally before the cache is tried again.
    pub const RETRY_NS: u64 = 25_000_000;
    /// Records written through the cache after a change before their copy times count (a
    /// 512 KiB ring's lap of 32 KiB records).
    pub const WARMUP: u64 = 16;

    /// A chooser starting with `nontemporal` (the init measurement's choice), knowing the
    /// non-temporal copy-in rate `nt_rate` (bytes per ns, the writer's) if it was measured.
    pub fn new(nontemporal: bool, nt_rate: Option<f64>) -> Self {
        let mut nt = Rates::default();
        if let Some(r) = nt_rate.filter(|r| r.is_finite() && *r > 0.0) {
            nt.push(r);
        }
        Self {
            nontemporal,
            records: 0,
            since_switch: 0,
            nontemporal_since: 0,
            now: 0,
            short_records: 0,
            cached: Rates::default(),
            nt,
            switches: 0,
        }
    }

    /// Whether [`StoreChooser::plan`] needs the time for a record of `len` bytes: for every
    /// long one, and while writing non-temporally for one short one in
    /// [`StoreChooser::TIME_EVERY`] (the retry is due for them too).
    pub fn wants_clock(&self, len: usize) -> bool {
        len >= Self::SAMPLE_MIN
            || (self.nontemporal && self.short_records.is_multiple_of(Self::TIME_EVERY))
    }

    /// How to write the next streamed record, of `len` bytes, at `now_ns` (ignored, and may
    /// be 0, when [`StoreChooser::wants_clock`] said no).
    pub fn plan(&mut self, len: usize, now_ns: u64) -> StorePlan {
        let clock = self.wants_clock(len);
        if clock {
            self.now = now_ns;
            if self.nontemporal && now_ns.saturating_sub(self.nontemporal_since) >= Self::RETRY_NS {
                self.switch(false);
            }
        }
        if len < Self::SAMPLE_MIN {
            self.short_records += 1;
            return StorePlan {
                nontemporal: self.nontemporal && len >= Self::NONTEMPORAL_MIN,
                timed: false,
            };
        }
        self.records += 1;
        self.since_switch += 1;
        if !self.nontemporal && self.nt.len == 0 && self.records.is_multiple_of(Self::PROBE_EVERY) {
            return StorePlan {
                nontemporal: true,
                timed: true,
            };
        }
        // Right after a warm-up, every record is timed until the judgement has its samples.
        let judging =
            !self.nontemporal && self.since_switch > Self::WARMUP && self.cached.len < Rates::KEPT;
        StorePlan {
            nontemporal: self.nontemporal,
            timed: judging || self.records.is_multiple_of(Self::TIME_EVERY),
        }
    }

    /// A timed record of `bytes` written `nontemporal` or not took `ns`.
    pub fn record(&mut self, nontemporal: bool, bytes: usize, ns: u64) {
        if bytes < Self::SAMPLE_MIN || ns == 0 {
            return;
        }
        let rate = bytes as f64 / ns as f64;
        if nontemporal {
            self.nt.push(rate);
            return;
        }
        if self.nontemporal || self.since_switch <= Self::WARMUP {
            return;
        }
        self.cached.push(rate);
        if self.cached.len < Rates::KEPT - 1 {
            return;
        }
        if let (Some(c), Some(n)) = (self.cached.median(), self.nt.median()) {
            if c < n * Self::SLOW_CACHED {
                self.switch(true);
            }
        }
    }

    fn switch(&mut self, nontemporal: bool) {
        self.nontemporal = nontemporal;
        self.since_switch = 0;
        self.cached = Rates::default();
        if nontemporal {
            self.nontemporal_since = self.now;
        }
        self.switches += 1;
    }

    /// Whether records are written non-temporally now (probes aside).
    pub fn nontemporal(&self) -> bool {
        self.nontemporal
    }

    /// Changes of way so far (retries of the cache included).
    pub fn switches(&self) -> u64 {
        self.switches
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn costs(handoff_ns: f64, rate: f64) -> u64 {
        Costs {
            handoff_ns,
            copy_bytes_per_ns: rate,
            transfers: None,
        }
        .handoff_bytes()
        .unwrap()
    }

    /// The figures of the two moods seen on the VM: with fast handoffs the chunk stays at the
    /// 16 KiB that measured best there; with slow ones a shm eager fragment (64 KiB) goes in
    /// two chunks instead of four.
    #[test]
    fn the_two_moods() {
        // (A 16 KiB copy measured 70-78 bytes per ns there.)
        let fast = costs(55.0, 75.0);
        let slow = costs(280.0, 75.0);
        for len in [4096, 16_448, 32_768, 65_600] {
            assert_eq!(chunk_for(len, fast), MIN_CHUNK, "fast, {len} B");
        }
        assert_eq!(chunk_for(16_448, slow), MIN_CHUNK);
        assert_eq!(chunk_for(65_600, slow), 32 * 1024);
        assert_eq!(chunk_for(1 << 20, slow), MAX_CHUNK);
    }

    #[test]
    fn nearest_power_of_two_on_a_log_scale() {
        // ideal = sqrt(len x h): 16 KiB x sqrt(2) is the boundary between 16 and 32 KiB.
        let h = 4096;
        let boundary = (16_384.0f64 * std::f64::consts::SQRT_2).powi(2) / h as f64;
        assert_eq!(chunk_for(boundary as usize - 64, h), 16_384);
        assert_eq!(chunk_for(boundary as usize + 64, h), 32_768);
    }

    #[test]
    fn measurements_that_are_no_measurement() {
        for (h, r) in [
            (0.0, 10.0),
            (-1.0, 10.0),
            (f64::NAN, 10.0),
            (50.0, f64::INFINITY),
            (1e9, 10.0),
            (50.0, 0.0),
        ] {
            let c = Costs {
                handoff_ns: h,
                copy_bytes_per_ns: r,
                transfers: None,
            };
            assert_eq!(c.handoff_bytes(), None, "{c:?}");
        }
    }

    fn transfers(cached: (f64, f64), nontemporal: (f64, f64)) -> Transfers {
        let t = |(w, r)| Transfer {
            write_bytes_per_ns: w,
            read_bytes_per_ns: r,
        };
        Transfers {
            cached: t(cached),
            nontemporal: t(nontemporal),
        }
    }

    /// Medians measured on the VM (bytes per ns = GB/s) in each of its moods.
    #[test]
    fn stores_bypass_the_cache_only_when_the_cores_share_none() {
        // Shared cache (handoff ~35-40 ns).
        for (cached, nt) in [((11.6, 28.7), (22.1, 11.3)), ((14.4, 32.9), (21.5, 11.7))] {
            assert!(
                !transfers(cached, nt).prefer_nontemporal(),
                "{cached:?} {nt:?}"
            );
        }
        // No shared cache (handoff ~190-220 ns).
        for (cached, nt) in [((4.0, 10.8), (18.5, 11.1)), ((5.7, 10.4), (23.2, 12.1))] {
            assert!(
                transfers(cached, nt).prefer_nontemporal(),
                "{cached:?} {nt:?}"
            );
        }
        // A near tie stays cached.
        assert!(!transfers((9.0, 12.0), (20.0, 10.5)).prefer_nontemporal());
    }

    #[test]
    fn transfers_that_are_no_measurement_stay_cached() {
        for (cached, nt) in [
            ((0.0, 10.0), (20.0, 10.0)),
            ((f64::NAN, 10.0), (20.0, 10.0)),
            ((5.0, 10.0), (f64::NAN, 10.0)),
            ((5.0, 10.0), (f64::INFINITY, f64::INFINITY)),
        ] {
            assert!(
                !transfers(cached, nt).prefer_nontemporal(),
                "{cached:?} {nt:?}"
            );
        }
    }

    /// Copy-in rates (bytes per ns) of 64 KiB records: (cached, non-temporal).
    const SHARED_CACHE: (f64, f64) = (14.0, 16.0);
    const NO_SHARED_CACHE: (f64, f64) = (4.0, 16.0);
    /// What a cached copy into lines last written non-temporally runs at (they come from
    /// memory, in either mood).
    const FROM_MEMORY: f64 = 5.0;

    /// A producer writing 64 KiB records every `gap_ns` in a mood, its chooser and clock.
    struct Sim {
        c: StoreChooser,
        now: u64,
        /// Records written through the cache since the last non-temporal one.
        cached_run: u64,
    }

    impl Sim {
        fn new(start_nontemporal: bool) -> Self {
            Self {
                c: StoreChooser::new(start_nontemporal, Some(16.0)),
                now: 0,
                cached_run: 0,
            }
        }

        /// Run `n` records `gap_ns` apart; returns how many went non-temporally.
        fn drive(&mut self, n: u64, gap_ns: u64, mood: (f64, f64)) -> u64 {
            let mut nt = 0;
            for _ in 0..n {
                self.now += gap_ns;
                let p = self.c.plan(65_536, self.now);
                if p.nontemporal {
                    nt += 1;
                    self.cached_run = 0;
                } else {
                    self.cached_run += 1;
                }
                let rate = match (p.nontemporal, self.cached_run) {
                    (true, _) => mood.1,
                    // The first lap after non-temporal ones reads its lines from memory.
                    (false, 1..=8) => FROM_MEMORY,
                    (false, _) => mood.0,
                };
                if p.timed {
                    self.c
                        .record(p.nontemporal, 65_536, (65_536.0 / rate) as u64);
                }
            }
            nt
        }
    }

    #[test]
    fn stores_follow_the_mood_at_run_time() {
        let mut s = Sim::new(false);
        assert_eq!(
            s.drive(500, 10_000, SHARED_CACHE),
            0,
            "cached while the cache is shared"
        );
        // The cores stop sharing a cache: a few timed records later the stores bypass it.
        s.drive(4 * StoreChooser::TIME_EVERY, 10_000, NO_SHARED_CACHE);
        assert!(s.c.nontemporal());
        // While they do not, the chooser retries the cache every RETRY_NS and comes back:
        // most records go to memory.
        let n = 20 * StoreChooser::RETRY_NS / 10_000;
        let nt = s.drive(n, 10_000, NO_SHARED_CACHE);
        assert!(nt > n * 9 / 10, "{nt} of {n}");
        // They share one again: within a retry the records are cached again, and stay so.
        s.drive(StoreChooser::RETRY_NS / 10_000 + 100, 10_000, SHARED_CACHE);
        assert!(!s.c.nontemporal());
        assert_eq!(s.drive(5000, 10_000, SHARED_CACHE), 0);
    }

    #[test]
    fn a_wrong_start_is_corrected() {
        // Measured slow at init, the cache shared when the records come.
        let mut s = Sim::new(true);
        s.drive(StoreChooser::RETRY_NS / 10_000 + 100, 10_000, SHARED_CACHE);
        assert!(!s.c.nontemporal());
        // Measured fast at init, no cache shared.
        let mut s = Sim::new(false);
        s.drive(
            StoreChooser::WARMUP + 4 * StoreChooser::TIME_EVERY,
            10_000,
            NO_SHARED_CACHE,
        );
        assert!(s.c.nontemporal());
    }

    #[test]
    fn one_stretched_copy_does_not_switch() {
        let mut s = Sim::new(false);
        s.drive(500, 10_000, SHARED_CACHE);
        // A copy 100x too slow (the producer was descheduled), of either way.
        s.c.record(false, 65_536, 65_536 * 100);
        s.c.record(true, 65_536, 65_536 * 100);
        assert!(!s.c.nontemporal());
        assert_eq!(s.c.switches(), 0);
        assert_eq!(s.drive(500, 10_000, SHARED_CACHE), 0);
    }

    #[test]
    fn without_a_measured_reference_the_chooser_probes_for_one() {
        let mut c = StoreChooser::new(false, None);
        let mut nt = 0;
        // Cached copies are timed from the start; the probe comes at PROBE_EVERY, and the
        // next timed cached copy decides.
        for i in 0..StoreChooser::PROBE_EVERY + StoreChooser::TIME_EVERY {
            let p = c.plan(65_536, i * 10_000);
            nt += u64::from(p.nontemporal);
            if p.timed {
                let rate = if p.nontemporal { 16.0 } else { 4.0 };
                c.record(p.nontemporal, 65_536, (65_536.0 / rate) as u64);
            }
        }
        assert_eq!(nt, 1, "one non-temporal probe");
        assert!(c.nontemporal(), "and the slow cached copies then tell");
        // Nonsense samples are ignored, and short records neither timed nor counted.
        let before = c.clone();
        c.record(true, 0, 10);
        c.record(false, 65_536, 0);
        c.record(false, 4096, 4096);
        let mut c2 = c.clone();
        for _ in 0..4 * StoreChooser::PROBE_EVERY {
            let p = c.plan(StoreChooser::SAMPLE_MIN - 1, 0);
            assert_eq!(
                p,
                StorePlan {
                    nontemporal: true,
                    timed: false
                }
            );
            // Below NONTEMPORAL_MIN, always through the cache.
            let p = c.plan(StoreChooser::NONTEMPORAL_MIN - 1, 0);
            assert!(!p.nontemporal && !p.timed);
        }
        assert_eq!(
            (c.nontemporal(), c.switches()),
            (before.nontemporal(), before.switches())
        );
        // Short records alone still go back through the cache when the retry is due.
        let due = c2.nontemporal_since + StoreChooser::RETRY_NS;
        for i in 0..2 * StoreChooser::TIME_EVERY {
            c2.plan(StoreChooser::SAMPLE_MIN - 1, due + i);
        }
        assert!(!c2.nontemporal());
    }

    proptest! {
        /// Whatever the moods and however long each lasts, after a retry period and a little
        /// of one mood the chooser writes the faster way, and it changes way no more often
        /// than the moods change plus its retries.
        #[test]
        fn the_choice_settles_on_the_faster_way(moods in proptest::collection::vec((any::<bool>(), 1u64..8000), 1..12), start in any::<bool>()) {
            let mut s = Sim::new(start);
            let gap = 10_000;
            let settle = StoreChooser::RETRY_NS / gap + StoreChooser::WARMUP + 4 * StoreChooser::TIME_EVERY;
            let mut changes = 0;
            let mut last = None;
            let mut total = 0;
            for (shared, n) in moods {
                if last.is_some_and(|l| l != shared) {
                    changes += 1;
                }
                last = Some(shared);
                total += n;
                let mood = if shared { SHARED_CACHE } else { NO_SHARED_CACHE };
                s.drive(n.min(settle), gap, mood);
                if n > settle {
                    // Settled: cached throughout while the cache is shared; otherwise
                    // non-temporal but for the retries (a few dozen records per RETRY_NS).
                    let rest = n - settle;
                    let nt = s.drive(rest, gap, mood);
                    if shared {
                        prop_assert_eq!(nt, 0);
                    } else {
                        prop_assert!(nt >= rest.saturating_sub((rest * gap / StoreChooser::RETRY_NS + 1) * 40), "{} of {}", nt, rest);
                    }
                }
            }
            let retries = total * gap / StoreChooser::RETRY_NS + 1;
            prop_assert!(s.c.switches() <= 2 * (changes + retries) + 1, "{} switches, {} changes", s.c.switches(), changes);
        }
    }

    proptest! {
        /// Always a power of two in bounds, never smaller for longer records or dearer handoffs.
        #[test]
        fn bounded_power_of_two_and_monotone(len in 1usize..(1 << 30), h in 1u64..1_000_000, more in 0usize..(1 << 20), dearer in 0u64..100_000) {
            let c = chunk_for(len, h);
            prop_assert!(c.is_power_of_two() && (MIN_CHUNK..=MAX_CHUNK).contains(&c));
            prop_assert!(chunk_for(len + more, h) >= c);
            prop_assert!(chunk_for(len, h + dearer) >= c);
        }
    }
}
