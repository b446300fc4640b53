//! Benchmark definitions shared by the driver and the worker.

/// A benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bench {
    /// One-way latency (half round trip), ranks 0 and 1.
    Latency,
    /// Unidirectional bandwidth, window of messages then an ack.
    Bw,
    /// Bidirectional bandwidth.
    Bibw,
    /// Message rate of pairs r -> r + n/2.
    Msgrate,
    /// First exchange with every peer, plus init time (and memory with `--mem`).
    Allconn,
    /// First exchange with the two ring neighbours only, plus init time (and memory).
    Ringconn,
    /// Barrier time.
    Barrier,
    /// Allreduce time (f32 sum).
    Allreduce,
    /// OSU 7's `osu_bw` loop exactly: one receive buffer for the window, `MPI_Waitall` with an
    /// array of statuses, a 1-byte reply (bw waits with statuses ignored and replies 0 bytes:
    /// applications and OSU write this loop, which a runtime must not be slower on).
    OsuBw,
    /// OSU 7's `osu_bibw` loop: both ranks post a window of receives and of sends, and wait for
    /// the sends and the receives in two `MPI_Waitall` calls with statuses.
    OsuBibw,
    /// OSU 7's `osu_mbw_mr` loop: the pairs of msgrate, each window as in osu_bw; aggregate
    /// MB/s.
    OsuMbwMr,
}

impl Bench {
    /// Every benchmark, in the order `all` runs them.
    pub const ALL: [Bench; 7] = [
        Bench::Latency,
        Bench::Bw,
        Bench::Bibw,
        Bench::Msgrate,
        Bench::Allconn,
        Bench::Barrier,
        Bench::Allreduce,
    ];

    /// Every benchmark the command line accepts (`all` leaves out ringconn and OSU's loops).
    pub const KNOWN: [Bench; 11] = [
        Bench::Latency,
        Bench::Bw,
        Bench::Bibw,
        Bench::Msgrate,
        Bench::Allconn,
        Bench::Ringconn,
        Bench::Barrier,
        Bench::Allreduce,
        Bench::OsuBw,
        Bench::OsuBibw,
        Bench::OsuMbwMr,
    ];

    /// Command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Bench::Latency => "latency",
            Bench::Bw => "bw",
            Bench::Bibw => "bibw",
            Bench::Msgrate => "msgrate",
            Bench::Allconn => "allconn",
            Bench::Ringconn => "ringconn",
            Bench::Barrier => "barrier",
            Bench::Allreduce => "allreduce",
            Bench::OsuBw => "osu_bw",
            Bench::OsuBibw => "osu_bibw",
            Bench::OsuMbwMr => "osu_mbw_mr",
        }
    }

    /// Parse a command-line name.
    pub fn parse(s: &str) -> Option<Bench> {
        Self::KNOWN.into_iter().find(|b| b.name() == s)
    }

    /// Names and units of the figures of each result line, in order.
    pub fn metrics(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Bench::Latency => &[("latency", "us")],
            Bench::Bw => &[("bandwidth", "MB/s")],
            Bench::Bibw => &[("bi-bandwidth", "MB/s")],
            Bench::Msgrate => &[("message rate", "Mmsg/s")],
            Bench::Allconn | Bench::Ringconn => &CONN_METRICS,
            Bench::Barrier => &[("barrier", "us")],
            Bench::Allreduce => &[("allreduce", "us")],
            Bench::OsuBw => &[("osu_bw bandwidth", "MB/s")],
            Bench::OsuBibw => &[("osu_bibw bi-bandwidth", "MB/s")],
            Bench::OsuMbwMr => &[("osu_mbw_mr bandwidth", "MB/s")],
        }
    }

    /// Is a larger figure better?
    pub fn higher_is_better(self) -> bool {
        self.is_point_to_point() && self != Bench::Latency
    }

    /// Does the benchmark measure point-to-point traffic between ranks (at least 2)?
    pub fn is_point_to_point(self) -> bool {
        matches!(
            self,
            Bench::Latency
                | Bench::Bw
                | Bench::Bibw
                | Bench::Msgrate
                | Bench::OsuBw
                | Bench::OsuBibw
                | Bench::OsuMbwMr
        )
    }

    /// Does the benchmark sweep message sizes?
    pub fn sweeps_sizes(self) -> bool {
        !matches!(self, Bench::Allconn | Bench::Ringconn | Bench::Barrier)
    }

    /// Is the benchmark measured per process count (`--procs`) rather than per size?
    pub fn sweeps_procs(self) -> bool {
        matches!(self, Bench::Allconn | Bench::Ringconn)
    }

    /// Is a larger value of metric `i` better?
    pub fn metric_higher_is_better(self, i: usize) -> bool {
        self.higher_is_better() && i == 0
    }
}

/// Figures of allconn and ringconn, in the order of their result line. The first two are always
/// measured; the memory figures with `--mem` (VmHWM/VmRSS of /proc/self/status just before
/// finalize, the largest over ranks; for rmca also the framework-accounted memory of the worst
/// rank from the profile and the RC connections per rank).
pub const CONN_METRICS: [(&str, &str); 6] = [
    ("connect", "us"),
    ("init", "us"),
    ("VmHWM", "MiB"),
    ("VmRSS", "MiB"),
    ("accounted", "KiB"),
    ("rc connections/rank", "n"),
];

/// Parameters handed from the driver to the worker (and to osu_like.c).
#[derive(Clone, Debug)]
pub struct Params {
    /// Smallest size (bytes).
    pub min: usize,
    /// Largest size (bytes).
    pub max: usize,
    /// Iterations for messages up to 8 KiB (fewer above, see [`iters_for`]).
    pub iters: usize,
    /// Messages in flight for bw, bibw, msgrate.
    pub window: usize,
    /// Bytes past a page boundary where the point-to-point send buffers start (the receive
    /// buffers start on one).
    pub misalign: usize,
}

/// Sizes swept: `min`, then doubling up to `max` (0 is followed by 1). Allreduce starts at 4 B
/// (one f32).
pub fn sizes(bench: Bench, min: usize, max: usize) -> Vec<usize> {
    let mut s = if bench == Bench::Allreduce {
        min.max(4)
    } else {
        min
    };
    let mut out = Vec::new();
    while s <= max {
        out.push(s);
        s = if s == 0 { 1 } else { s * 2 };
    }
    out
}

/// Timed iterations for `size` (same rule as osu_like.c): `iters` up to 8 KiB, then scaled
/// down with the size, at least 10.
pub fn iters_for(iters: usize, size: usize) -> usize {
    if size <= 8192 {
        iters
    } else {
        (iters * 8192 / size).max(10)
    }
}

/// Untimed warm-up iterations before the timed ones.
pub fn warmup_for(iters: usize) -> usize {
    iters / 10 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_double_from_zero() {
        assert_eq!(sizes(Bench::Latency, 0, 8), vec![0, 1, 2, 4, 8]);
        assert_eq!(sizes(Bench::Allreduce, 0, 16), vec![4, 8, 16]);
        assert_eq!(sizes(Bench::Bw, 3, 20), vec![3, 6, 12]);
        assert_eq!(sizes(Bench::Bw, 64, 8), Vec::<usize>::new());
    }

    #[test]
    fn iterations_scale_down_for_large_messages() {
        assert_eq!(iters_for(1000, 8192), 1000);
        assert_eq!(iters_for(1000, 16384), 500);
        assert_eq!(iters_for(1000, 4 << 20), 10);
        assert_eq!(warmup_for(1000), 101);
    }

    #[test]
    fn names_round_trip() {
        for b in Bench::KNOWN {
            assert_eq!(Bench::parse(b.name()), Some(b));
        }
        assert_eq!(Bench::parse("nope"), None);
    }
}
