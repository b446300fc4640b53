//! `rmca-startup-bench [--ranks N] [--reps R]`: startup time of an N-rank job.
//!
//! Runs `rmca-rte-probe --mode startup` R times under `rmca-run` and, when installed, under
//! MPICH's `mpiexec.hydra` (same probe, PMI-1), and prints per launcher the median, min and max
//! of (a) the wall time from launch to exit of the whole job and (b) the slowest rank's
//! `Rte::init` + first fence; then the rmca-run/Hydra ratios of the medians, and one JSON line.
//! Figures are measured here and now; nothing is asserted.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

struct Sample {
    wall_us: f64,
    init_fence_us: f64,
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    let med = if v.is_empty() {
        f64::NAN
    } else if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    (
        med,
        v.first().copied().unwrap_or(f64::NAN),
        v.last().copied().unwrap_or(f64::NAN),
    )
}

fn json_field(line: &str, key: &str) -> Option<f64> {
    let pat = format!("\"{key}\":");
    let i = line.find(&pat)? + pat.len();
    let rest = &line[i..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].trim().parse().ok()
}

fn run_once(launcher: &[String], probe: &str, ranks: u32) -> Result<Sample, String> {
    let t0 = Instant::now();
    let out = Command::new(&launcher[0])
        .args(&launcher[1..])
        .args(["-n", &ranks.to_string(), probe, "--mode", "startup"])
        .args(["--marker", "startup-bench"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", launcher[0]))?;
    let wall = t0.elapsed();
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            launcher[0],
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut worst = 0.0f64;
    let mut n = 0;
    for l in text.lines().filter(|l| l.starts_with("{\"rank\"")) {
        let i = json_field(l, "init_us").ok_or("bad probe output")?;
        let f = json_field(l, "fence_us").ok_or("bad probe output")?;
        worst = worst.max(i + f);
        n += 1;
    }
    if n != ranks {
        return Err(format!("expected {ranks} timing lines, got {n}"));
    }
    // Probes under Hydra leave their shm files (Hydra does not know our naming).
    if let Ok(d) = std::fs::read_dir("/dev/shm") {
        for e in d.flatten() {
            if e.file_name()
                .to_string_lossy()
                .contains("-probe-startup-bench-")
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    Ok(Sample {
        wall_us: wall.as_secs_f64() * 1e6,
        init_fence_us: worst,
    })
}

fn which(p: &str) -> Option<String> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(p))
            .find(|f| f.is_file())
            .map(|f| f.to_string_lossy().into_owned())
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut ranks = 8u32;
    let mut reps = 10usize;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--ranks" => {
                i += 1;
                ranks = args.get(i).and_then(|v| v.parse().ok()).unwrap_or(8);
            }
            "--reps" => {
                i += 1;
                reps = args.get(i).and_then(|v| v.parse().ok()).unwrap_or(10);
            }
            other => {
                eprintln!("usage: rmca-startup-bench [--ranks N] [--reps R] (got {other:?})");
                std::process::exit(2);
            }
        }
        i += 1;
    }
    let dir: PathBuf = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(PathBuf::from))
        .unwrap_or_default();
    let run = dir.join("rmca-run").to_string_lossy().into_owned();
    let probe = dir.join("rmca-rte-probe").to_string_lossy().into_owned();
    let mut launchers: Vec<(&str, Vec<String>)> = vec![("rmca-run", vec![run])];
    if let Some(h) = which("mpiexec.hydra") {
        launchers.push(("hydra", vec![h]));
    } else {
        eprintln!("note: mpiexec.hydra not installed; no Hydra comparison");
    }
    let mut results = Vec::new();
    // Interleave launchers per repetition so both see the same machine noise.
    let mut samples: Vec<Vec<Sample>> = launchers.iter().map(|_| Vec::new()).collect();
    for _ in 0..reps {
        for (k, (name, l)) in launchers.iter().enumerate() {
            match run_once(l, &probe, ranks) {
                Ok(s) => samples[k].push(s),
                Err(e) => eprintln!("{name}: {e}"),
            }
        }
    }
    println!("startup of a {ranks}-rank job, {reps} repetitions (microseconds)");
    println!(
        "{:<10} {:>12} {:>12} {:>12} {:>14} {:>12} {:>12}",
        "launcher", "wall med", "wall min", "wall max", "init+fence med", "min", "max"
    );
    for (k, (name, _)) in launchers.iter().enumerate() {
        let w = stats(samples[k].iter().map(|s| s.wall_us).collect());
        let f = stats(samples[k].iter().map(|s| s.init_fence_us).collect());
        println!(
            "{:<10} {:>12.0} {:>12.0} {:>12.0} {:>14.0} {:>12.0} {:>12.0}",
            name, w.0, w.1, w.2, f.0, f.1, f.2
        );
        results.push((name.to_string(), samples[k].len(), w, f));
    }
    println!(
        "note: under Hydra, Rte::init includes one extra fence (rank 0's secret and the host \
         names go through the KVS); under rmca-run the launcher passes them directly"
    );
    let mut ratio_json = String::new();
    if results.len() == 2 {
        let rw = results[0].2 .0 / results[1].2 .0;
        let rf = results[0].3 .0 / results[1].3 .0;
        println!("ratio rmca-run/hydra: wall {rw:.2}, init+fence {rf:.2}");
        ratio_json = format!(",\"ratio_wall\":{rw:.3},\"ratio_init_fence\":{rf:.3}");
    }
    let entries: Vec<String> = results
        .iter()
        .map(|(n, cnt, w, f)| {
            format!(
                "{{\"launcher\":\"{n}\",\"samples\":{cnt},\"wall_us\":{{\"median\":{:.0},\"min\":{:.0},\"max\":{:.0}}},\"init_fence_us\":{{\"median\":{:.0},\"min\":{:.0},\"max\":{:.0}}}}}",
                w.0, w.1, w.2, f.0, f.1, f.2
            )
        })
        .collect();
    println!(
        "JSON {{\"bench\":\"startup\",\"ranks\":{ranks},\"reps\":{reps},\"results\":[{}]{ratio_json}}}",
        entries.join(",")
    );
}
