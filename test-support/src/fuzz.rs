//! A bounded fuzz driver for stable Rust: feeds a fuzz target's body random inputs, inputs
//! from the target's structure-aware generator, and libFuzzer-style mutations of both (and of
//! the cargo-fuzz corpus, when one exists), for a time or iteration budget.
//!
//! It has no coverage feedback (that needs nightly's sanitizer instrumentation, which
//! `cargo fuzz` adds); the target supplies the structure instead: its generator produces
//! valid packets with boundary field values, and its structure-aware mutation changes
//! whole fields of them and recomputes their checksums, so that mutations reach the code
//! behind the integrity checks.
//!
//! Environment (every value checked; a bad one fails the run naming the valid range):
//! - `RMCA_FUZZ_SECS`: time budget per target in seconds (default [`DEFAULT_SECS`]).
//! - `RMCA_FUZZ_ITERS`: stop after this many inputs even if time is left (default: no limit);
//!   given alone, the time budget is lifted so that a replay reaches the failing input.
//! - `RMCA_FUZZ_SEED`: RNG seed (decimal or `0x` hex; default: derived from the target name, so
//!   every run explores the same inputs first). The seed is printed and in every failure.
//! - `RMCA_FUZZ_INPUT_TIMEOUT_SECS`: one input running longer is a hang (default 20).
//!
//! A panic of the body is a failure: the input is written to the artifact directory, shown
//! in hex, and the run panics naming the seed and input number that reproduce it
//! (`RMCA_FUZZ_SEED=<seed> RMCA_FUZZ_ITERS=<n>`) and the `cargo fuzz run` command. A hang
//! aborts the process after writing the input the same way.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Time budget per target when `RMCA_FUZZ_SECS` is unset (a quick smoke run in `cargo test`).
pub const DEFAULT_SECS: f64 = 2.0;
/// Per-input hang limit when `RMCA_FUZZ_INPUT_TIMEOUT_SECS` is unset.
pub const DEFAULT_INPUT_TIMEOUT_SECS: f64 = 20.0;
/// Generated inputs kept as mutation sources next to the corpus (filled as they are made).
const POOL: usize = 256;
/// Generated up front, before the first input (generators may be slow: keep it small).
const POOL_START: usize = 8;
/// Most mutations stacked on one input (as libFuzzer's default).
const MAX_STACK: usize = 8;

/// SplitMix64: small, fast, and identical on every platform, so a seed reproduces its inputs.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`; `0` when `n` is 0.
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.next_u64() % n as u64) as usize
    }

    /// True one time in `n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// A random byte.
    pub fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.byte()).collect()
    }

    /// A value that often sits on a boundary: 0, 1, small, a power of two and its neighbours,
    /// the top of a narrower integer type, `u64::MAX` and friends, or random.
    pub fn interesting_u64(&mut self) -> u64 {
        match self.below(8) {
            0 => [0, 1, 2, 63, 64, 65, 255, 256][self.below(8)],
            1 => self.below(128) as u64,
            2 => {
                let p = 1u64 << self.below(64);
                [p - 1, p, p.wrapping_add(1)][self.below(3)]
            }
            3 => [
                u8::MAX as u64,
                u16::MAX as u64,
                u32::MAX as u64,
                i32::MAX as u64,
                i64::MAX as u64,
                u64::MAX,
                u64::MAX - 1,
                1 << 63,
            ][self.below(8)],
            _ => self.next_u64(),
        }
    }

    /// A random element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, s: &'a [T]) -> &'a T {
        &s[self.below(s.len())]
    }
}

/// How a target is fuzzed.
pub struct Target<'a> {
    /// The cargo-fuzz target name (used for the default seed and in messages).
    pub name: &'a str,
    /// The cargo-fuzz corpus directory of the target (`fuzz/corpus/<name>`): every file in it
    /// is run first and used as a mutation source. Ignored when absent.
    pub corpus_dir: Option<PathBuf>,
    /// Where a failing input is written.
    pub artifact_dir: PathBuf,
    /// Longest input fed to the body.
    pub max_len: usize,
    /// A fresh input with the target's structure (e.g. valid packets with boundary values).
    pub generate: &'a dyn Fn(&mut Rng) -> Vec<u8>,
    /// A structure-aware mutation, applied to about half of the inputs after the byte-level
    /// ones: e.g. set fields of the packets in the input to boundary values, then recompute
    /// their checksums (also repairing what the byte-level mutations broke). May do nothing.
    pub structured: &'a dyn Fn(&mut Rng, &mut Vec<u8>),
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Report {
    /// Inputs the body ran on.
    pub inputs: u64,
    /// Corpus files read.
    pub corpus_files: usize,
    /// The seed used.
    pub seed: u64,
    /// Time spent.
    pub elapsed: Duration,
}

/// The run's budget and seed, from the environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    /// Time budget.
    pub time: Duration,
    /// Input budget.
    pub iters: Option<u64>,
    /// RNG seed.
    pub seed: u64,
    /// Per-input hang limit.
    pub input_timeout: Duration,
}

fn secs_var(name: &str, value: Option<&str>, default: f64) -> Result<Duration, String> {
    let Some(v) = value else {
        return Ok(Duration::from_secs_f64(default));
    };
    match v.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && (0.0..=86_400.0).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!(
            "{name}={v:?} is invalid: valid values are seconds from 0 to 86400"
        )),
    }
}

/// FNV-1a, for the default seed and artifact names.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Budget {
    /// Parses the `RMCA_FUZZ_*` values (`None` when unset) for target `name`.
    pub fn parse(
        name: &str,
        secs: Option<&str>,
        iters: Option<&str>,
        seed: Option<&str>,
        input_timeout: Option<&str>,
    ) -> Result<Self, String> {
        // A replay names its input count: then the count decides, not the default time
        // budget (a crash found at input n after 15 s must come back at input n).
        let default_secs = if iters.is_some() {
            86_400.0
        } else {
            DEFAULT_SECS
        };
        let time = secs_var("RMCA_FUZZ_SECS", secs, default_secs)?;
        let input_timeout = secs_var(
            "RMCA_FUZZ_INPUT_TIMEOUT_SECS",
            input_timeout,
            DEFAULT_INPUT_TIMEOUT_SECS,
        )?;
        if input_timeout.is_zero() {
            return Err("RMCA_FUZZ_INPUT_TIMEOUT_SECS must be above 0".into());
        }
        let iters = iters
            .map(|v| {
                v.trim().parse::<u64>().map_err(|_| {
                    format!("RMCA_FUZZ_ITERS={v:?} is invalid: valid values are whole numbers")
                })
            })
            .transpose()?;
        let seed = match seed.map(str::trim) {
            None => fnv(name.as_bytes()),
            Some(v) => match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse::<u64>(),
            }
            .map_err(|_| {
                format!(
                    "RMCA_FUZZ_SEED={v:?} is invalid: valid values are 64-bit numbers \
                     (decimal or 0x hex)"
                )
            })?,
        };
        Ok(Self {
            time,
            iters,
            seed,
            input_timeout,
        })
    }

    /// [`Budget::parse`] of this process's environment.
    pub fn from_env(name: &str) -> Result<Self, String> {
        let var = |k: &str| std::env::var(k).ok();
        Self::parse(
            name,
            var("RMCA_FUZZ_SECS").as_deref(),
            var("RMCA_FUZZ_ITERS").as_deref(),
            var("RMCA_FUZZ_SEED").as_deref(),
            var("RMCA_FUZZ_INPUT_TIMEOUT_SECS").as_deref(),
        )
    }
}

/// One libFuzzer-style mutation of `data` in place; `other` is a second input to splice from.
pub fn mutate(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8], max_len: usize) {
    let len = data.len();
    match rng.below(12) {
        // Bit flip.
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        // Random byte.
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = rng.byte();
        }
        // A boundary byte.
        2 if len > 0 => {
            let i = rng.below(len);
            data[i] = *rng.pick(&[0, 1, 0x3f, 0x40, 0x7f, 0x80, 0xfe, 0xff]);
        }
        // A boundary 2/4/8-byte integer, either byte order.
        3 | 4 => {
            let w = *rng.pick(&[2usize, 4, 8]);
            if len >= w {
                let v = rng.interesting_u64();
                let at = rng.below(len - w + 1);
                let b = if rng.one_in(2) {
                    v.to_le_bytes()
                } else {
                    v.to_be_bytes()
                };
                let b = if rng.one_in(2) { &b[..w] } else { &b[8 - w..] };
                data[at..at + w].copy_from_slice(b);
            }
        }
        // Add or subtract a small delta to a 1/2/4/8-byte integer.
        5 => {
            let w = *rng.pick(&[1usize, 2, 4, 8]);
            if len >= w {
                let at = rng.below(len - w + 1);
                let mut b = [0u8; 8];
                let be = rng.one_in(2);
                if be {
                    b[8 - w..].copy_from_slice(&data[at..at + w]);
                } else {
                    b[..w].copy_from_slice(&data[at..at + w]);
                }
                let mut v = if be {
                    u64::from_be_bytes(b)
                } else {
                    u64::from_le_bytes(b)
                };
                let d = 1 + rng.below(35) as u64;
                v = if rng.one_in(2) {
                    v.wrapping_add(d)
                } else {
                    v.wrapping_sub(d)
                };
                if be {
                    data[at..at + w].copy_from_slice(&v.to_be_bytes()[8 - w..]);
                } else {
                    data[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
                }
            }
        }
        // Insert random bytes.
        6 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(16);
            let bytes = rng.bytes(n);
            data.splice(at..at, bytes);
        }
        // Delete a range.
        7 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(32));
            data.drain(at..at + n);
        }
        // Duplicate a range of itself somewhere.
        8 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(64));
            let chunk = data[at..at + n].to_vec();
            let to = rng.below(len + 1);
            data.splice(to..to, chunk);
        }
        // Truncate.
        9 if len > 0 => data.truncate(rng.below(len)),
        // Splice: our head, the other's tail.
        10 if !other.is_empty() => {
            let head = rng.below(len + 1);
            let tail = rng.below(other.len());
            data.truncate(head);
            data.extend_from_slice(&other[tail..]);
        }
        // Insert a chunk of the other input.
        11 if !other.is_empty() => {
            let from = rng.below(other.len());
            let n = 1 + rng.below((other.len() - from).min(128));
            let at = rng.below(len + 1);
            data.splice(at..at, other[from..from + n].iter().copied());
        }
        // The chosen mutation needs a longer input: append random bytes instead.
        _ => {
            let n = 1 + rng.below(8);
            let bytes = rng.bytes(n);
            data.extend(bytes);
        }
    }
    data.truncate(max_len);
}

fn hex(data: &[u8], limit: usize) -> String {
    let mut s: String = data
        .iter()
        .take(limit)
        .map(|b| format!("{b:02x}"))
        .collect();
    if data.len() > limit {
        s.push_str(&format!("... ({} bytes in all)", data.len()));
    }
    s
}

fn save(dir: &std::path::Path, kind: &str, data: &[u8]) -> String {
    let path = dir.join(format!("{kind}-{:016x}", fnv(data)));
    match std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, data)) {
        Ok(()) => path.display().to_string(),
        Err(e) => format!("(could not write {}: {e})", path.display()),
    }
}

fn read_corpus(dir: &std::path::Path, max_len: usize) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    // Sorted, so a seed replays the same inputs whatever order the directory lists them in.
    files.sort();
    files
        .into_iter()
        .filter_map(|p| std::fs::read(p).ok())
        .map(|mut d| {
            d.truncate(max_len);
            d
        })
        .collect()
}

/// The input running now and since when, for the hang watchdog.
struct Current {
    started: Option<Instant>,
    index: u64,
    input: Vec<u8>,
}

/// Fuzzes `body` as `target` describes, for the budget in the environment ([`Budget`]).
/// Panics if the body panics on an input; aborts the process if one input hangs.
pub fn run(target: &Target<'_>, body: &dyn Fn(&[u8])) -> Report {
    let budget = Budget::from_env(target.name).unwrap_or_else(|e| panic!("{e}"));
    run_with(target, &budget, body)
}

/// [`run`] with an explicit budget.
pub fn run_with(target: &Target<'_>, budget: &Budget, body: &dyn Fn(&[u8])) -> Report {
    let name = target.name;
    let seed = budget.seed;
    let start = Instant::now();
    let mut rng = Rng::new(seed);
    let corpus = target
        .corpus_dir
        .as_deref()
        .map(|d| read_corpus(d, target.max_len))
        .unwrap_or_default();
    let corpus_files = corpus.len();
    let mut pool: Vec<Vec<u8>> = (0..POOL_START)
        .map(|_| (target.generate)(&mut rng))
        .collect();

    let current = Arc::new(Mutex::new(Current {
        started: None,
        index: 0,
        input: Vec::new(),
    }));
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let (current, done) = (Arc::clone(&current), Arc::clone(&done));
        let (limit, dir, name) = (
            budget.input_timeout,
            target.artifact_dir.clone(),
            name.to_owned(),
        );
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                let c = current.lock().unwrap_or_else(|p| p.into_inner());
                if c.started.is_some_and(|t| t.elapsed() > limit) {
                    let file = save(&dir, "timeout", &c.input);
                    eprintln!(
                        "fuzz {name}: input {} ran longer than {limit:?} (a hang): seed {seed:#x} \
                         (RMCA_FUZZ_SEED={seed:#x} RMCA_FUZZ_ITERS={}), saved to {file}, \
                         input {}",
                        c.index,
                        c.index + 1,
                        hex(&c.input, 512)
                    );
                    // The body cannot be interrupted; ending the process is the only way out.
                    std::process::abort();
                }
            }
        })
    };

    let mut inputs = 0u64;
    let mut fail = None;
    let mut corpus_next = corpus.iter();
    loop {
        if budget.iters.is_some_and(|n| inputs >= n) {
            break;
        }
        // Every corpus file runs once whatever the budget (they are known-interesting inputs).
        let input = if let Some(c) = corpus_next.next() {
            c.clone()
        } else {
            if start.elapsed() >= budget.time {
                break;
            }
            let mut input = match rng.below(20) {
                0 => {
                    let n = if rng.one_in(4) {
                        rng.below(target.max_len + 1)
                    } else {
                        rng.below(65)
                    };
                    rng.bytes(n)
                }
                1..=7 => {
                    let fresh = (target.generate)(&mut rng);
                    // Fresh structured inputs also feed later mutations.
                    if pool.len() < POOL {
                        pool.push(fresh.clone());
                    } else {
                        let slot = rng.below(POOL);
                        pool[slot] = fresh.clone();
                    }
                    fresh
                }
                _ => {
                    let from_corpus = !corpus.is_empty() && rng.one_in(2);
                    if from_corpus {
                        rng.pick(&corpus).clone()
                    } else {
                        rng.pick(&pool).clone()
                    }
                }
            };
            if !rng.one_in(4) {
                for _ in 0..1 + rng.below(MAX_STACK) {
                    let other = if !corpus.is_empty() && rng.one_in(2) {
                        rng.pick(&corpus)
                    } else {
                        rng.pick(&pool)
                    };
                    mutate(&mut rng, &mut input, other, target.max_len);
                }
            }
            if rng.one_in(2) {
                (target.structured)(&mut rng, &mut input);
            }
            input.truncate(target.max_len);
            input
        };
        {
            let mut c = current.lock().unwrap_or_else(|p| p.into_inner());
            c.started = Some(Instant::now());
            c.index = inputs;
            c.input.clone_from(&input);
        }
        let r = catch_unwind(AssertUnwindSafe(|| body(&input)));
        current.lock().unwrap_or_else(|p| p.into_inner()).started = None;
        if let Err(p) = r {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "(non-string panic payload)".into());
            fail = Some((inputs, input, msg));
            break;
        }
        inputs += 1;
    }
    done.store(true, Ordering::Relaxed);
    let _ = watchdog.join();
    let elapsed = start.elapsed();
    if let Some((index, input, msg)) = fail {
        let file = save(&target.artifact_dir, "crash", &input);
        panic!(
            "fuzz {name}: the target panicked on input {index} ({} bytes): {msg}\n\
             seed {seed:#x}; reproduce with RMCA_FUZZ_SEED={seed:#x} RMCA_FUZZ_ITERS={}, or \
             `cargo fuzz run {name} {file}` (saved there)\ninput: {}",
            input.len(),
            index + 1,
            hex(&input, 1024)
        );
    }
    eprintln!(
        "fuzz {name}: {inputs} inputs in {elapsed:.1?} (seed {seed:#x}, {corpus_files} corpus \
         files), no failure"
    );
    Report {
        inputs,
        corpus_files,
        seed,
        elapsed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(iters: u64) -> Budget {
        Budget {
            time: Duration::from_secs(60),
            iters: Some(iters),
            seed: 7,
            input_timeout: Duration::from_secs(60),
        }
    }

    fn dir(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("rmca-fuzz-test-{}-{name}", std::process::id()))
    }

    #[test]
    fn budget_values_are_checked() {
        let b = Budget::parse("x", None, None, None, None).unwrap();
        assert_eq!(b.time, Duration::from_secs(2));
        // The reproduce line names only the seed and the input count: no time limit then.
        let replay = Budget::parse("x", None, Some("41310"), Some("0x1f"), None).unwrap();
        assert_eq!(replay.time, Duration::from_secs(86_400));
        assert_eq!(replay.iters, Some(41_310));
        assert_eq!(b.iters, None);
        assert_eq!(b.seed, fnv(b"x"));
        let b = Budget::parse("x", Some("0.5"), Some("10"), Some("0x1f"), Some("3")).unwrap();
        assert_eq!(
            (b.time, b.iters, b.seed, b.input_timeout),
            (
                Duration::from_millis(500),
                Some(10),
                31,
                Duration::from_secs(3)
            )
        );
        for (args, want) in [
            ((Some("-1"), None, None, None), "RMCA_FUZZ_SECS=\"-1\""),
            ((Some("1e300"), None, None, None), "RMCA_FUZZ_SECS"),
            ((Some("NaN"), None, None, None), "RMCA_FUZZ_SECS"),
            ((None, Some("ten"), None, None), "RMCA_FUZZ_ITERS=\"ten\""),
            ((None, None, Some("0xzz"), None), "RMCA_FUZZ_SEED=\"0xzz\""),
            (
                (None, None, None, Some("0")),
                "RMCA_FUZZ_INPUT_TIMEOUT_SECS",
            ),
        ] {
            let e = Budget::parse("x", args.0, args.1, args.2, args.3).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn mutations_stay_within_max_len_and_change_inputs() {
        let mut rng = Rng::new(1);
        let mut changed = 0;
        for _ in 0..10_000 {
            let (n, m) = (rng.below(40), rng.below(40));
            let mut d = rng.bytes(n);
            let before = d.clone();
            let other = rng.bytes(m);
            mutate(&mut rng, &mut d, &other, 48);
            assert!(d.len() <= 48);
            changed += usize::from(d != before);
        }
        assert!(changed > 9_000, "{changed}");
    }

    #[test]
    fn same_seed_same_inputs() {
        let collect = || {
            let seen = Mutex::new(Vec::new());
            let t = Target {
                name: "same",
                corpus_dir: None,
                artifact_dir: dir("same"),
                max_len: 64,
                generate: &|r: &mut Rng| r.bytes(8),
                structured: &|_: &mut Rng, _: &mut Vec<u8>| {},
            };
            let r = run_with(&t, &budget(500), &|d: &[u8]| {
                seen.lock().unwrap().push(d.to_vec())
            });
            assert_eq!(r.inputs, 500);
            seen.into_inner().unwrap()
        };
        assert_eq!(collect(), collect());
    }

    /// The driver finds a crash that needs a generated structure plus a mutation, reports it,
    /// and saves the input.
    #[test]
    fn a_panic_on_a_reachable_input_fails_the_run() {
        let artifacts = dir("crash");
        let t = Target {
            name: "crash",
            corpus_dir: None,
            artifact_dir: artifacts.clone(),
            max_len: 64,
            // Valid inputs start with a magic word; the body panics on one byte behind it.
            generate: &|r: &mut Rng| {
                let mut v = b"MAGC".to_vec();
                v.extend(r.bytes(4).iter().map(|b| b & 0x0f));
                v
            },
            structured: &|_: &mut Rng, _: &mut Vec<u8>| {},
        };
        let body = |d: &[u8]| {
            if d.len() >= 6 && &d[..4] == b"MAGC" && d[5] == 0xff {
                panic!("boom at the sixth byte");
            }
        };
        let r = catch_unwind(AssertUnwindSafe(|| run_with(&t, &budget(200_000), &body)));
        let msg = *r
            .expect_err("the crash must be found")
            .downcast::<String>()
            .unwrap();
        assert!(msg.contains("boom at the sixth byte"), "{msg}");
        assert!(msg.contains("RMCA_FUZZ_SEED=0x7"), "{msg}");
        let saved = std::fs::read_dir(&artifacts).unwrap().count();
        assert_eq!(saved, 1, "{msg}");
        let _ = std::fs::remove_dir_all(&artifacts);
    }

    #[test]
    fn corpus_files_run_first_even_with_no_time() {
        let corpus = dir("corpus");
        std::fs::create_dir_all(&corpus).unwrap();
        std::fs::write(corpus.join("a"), b"first").unwrap();
        std::fs::write(corpus.join("b"), b"second").unwrap();
        let seen = Mutex::new(Vec::new());
        let t = Target {
            name: "corpus",
            corpus_dir: Some(corpus.clone()),
            artifact_dir: dir("corpus-artifacts"),
            max_len: 64,
            generate: &|r: &mut Rng| r.bytes(3),
            structured: &|_: &mut Rng, _: &mut Vec<u8>| {},
        };
        let b = Budget {
            time: Duration::ZERO,
            ..budget(100)
        };
        let r = run_with(&t, &b, &|d: &[u8]| seen.lock().unwrap().push(d.to_vec()));
        assert_eq!(r.corpus_files, 2);
        assert_eq!(
            seen.into_inner().unwrap(),
            vec![b"first".to_vec(), b"second".to_vec()]
        );
        let _ = std::fs::remove_dir_all(&corpus);
    }
}
