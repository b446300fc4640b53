//! The configurations measured: rmca through rmca-run, and the peers (bench/osu_like.c built
//! with Debian's Open MPI and MPICH).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::bench::{Bench, Params};

/// Peers known to `--vs`.
pub const DEFAULT: [&str; 3] = ["ompi-vader", "ompi-ucx", "mpich"];

/// The peer benchmark source, embedded so that the binary works from any directory.
const OSU_LIKE_C: &str = include_str!("../../../bench/osu_like.c");

enum Kind {
    Rmca {
        rmca_run: PathBuf,
        exe: PathBuf,
        mca: Vec<(String, String)>,
    },
    OpenMpi {
        bin: PathBuf,
        mca: &'static [&'static str],
    },
    Mpich {
        bin: PathBuf,
    },
}

/// One implementation to measure.
pub struct Config {
    /// Name in tables and JSON.
    pub name: String,
    kind: Kind,
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

/// Compile osu_like.c with `mpicc` into `dir` (once per source change).
fn build_peer(dir: &Path, mpicc: &str, suffix: &str) -> Result<PathBuf, String> {
    which(mpicc).ok_or_else(|| {
        format!("{mpicc} not found (install the peers with scripts/install-deps.sh --bench)")
    })?;
    let dir = dir.join("rmca-bench-peers");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let src = dir.join("osu_like.c");
    if std::fs::read_to_string(&src).ok().as_deref() != Some(OSU_LIKE_C) {
        std::fs::write(&src, OSU_LIKE_C)
            .map_err(|e| format!("cannot write {}: {e}", src.display()))?;
    }
    let bin = dir.join(format!("osu_like.{suffix}"));
    let fresh = match (
        std::fs::metadata(&bin).and_then(|m| m.modified()),
        std::fs::metadata(&src).and_then(|m| m.modified()),
    ) {
        (Ok(b), Ok(s)) => b >= s,
        _ => false,
    };
    if !fresh {
        let out = Command::new(mpicc)
            .args(["-O2", "-o"])
            .arg(&bin)
            .arg(&src)
            .output()
            .map_err(|e| format!("cannot run {mpicc}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{mpicc} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(bin)
}

impl Config {
    /// rmca, launched by the rmca-run next to this binary.
    pub fn rmca(dir: &Path, exe: &Path, mca: &[(String, String)]) -> Result<Config, String> {
        let rmca_run = dir.join("rmca-run");
        if !rmca_run.is_file() {
            return Err(format!(
                "{} not found: build it with `cargo build --release -p rmca-run`",
                rmca_run.display()
            ));
        }
        Ok(Config {
            name: "rmca".into(),
            kind: Kind::Rmca {
                rmca_run,
                exe: exe.to_path_buf(),
                mca: mca.to_vec(),
            },
        })
    }

    /// A peer by name (see [`DEFAULT`]).
    pub fn peer(name: &str, dir: &Path) -> Result<Config, String> {
        let kind = match name {
            "ompi-vader" => Kind::OpenMpi {
                bin: build_peer(dir, "mpicc.openmpi", "openmpi")?,
                mca: &["pml", "ob1", "btl", "self,vader"],
            },
            "ompi-ucx" => Kind::OpenMpi {
                bin: build_peer(dir, "mpicc.openmpi", "openmpi")?,
                mca: &["pml", "ucx", "pml_ucx_tls", "any", "pml_ucx_devices", "any"],
            },
            "mpich" => Kind::Mpich {
                bin: build_peer(dir, "mpicc.mpich", "mpich")?,
            },
            other => return Err(format!("unknown peer '{other}'")),
        };
        if matches!(kind, Kind::OpenMpi { .. }) && which("mpirun.openmpi").is_none() {
            return Err("mpirun.openmpi not found".into());
        }
        if matches!(kind, Kind::Mpich { .. }) && which("mpiexec.mpich").is_none() {
            return Err("mpiexec.mpich not found".into());
        }
        Ok(Config {
            name: name.into(),
            kind,
        })
    }

    /// Run one job; returns the (size, figures) result lines of rank 0.
    pub fn run(
        &self,
        bench: Bench,
        p: &Params,
        ranks: usize,
        bind: bool,
        timeout_s: u64,
    ) -> Result<Vec<(usize, Vec<f64>)>, String> {
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        let bench_args = [
            bench.name().to_owned(),
            p.min.to_string(),
            p.max.to_string(),
            p.iters.to_string(),
            p.window.to_string(),
        ];
        let mut cmd = match &self.kind {
            Kind::Rmca { rmca_run, exe, mca } => {
                let mut c = Command::new(rmca_run);
                c.arg("-n")
                    .arg(ranks.to_string())
                    .arg("--timeout")
                    .arg(timeout_s.to_string());
                for (k, v) in mca {
                    c.arg("--mca").arg(k).arg(v);
                }
                c.arg(exe).arg("--worker").args(&bench_args);
                if !bind {
                    c.arg("--no-bind");
                }
                c
            }
            Kind::OpenMpi { bin, mca } => {
                let mut c = Command::new("mpirun.openmpi");
                c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
                c.arg("-np").arg(ranks.to_string());
                if bind && ranks <= cores {
                    c.args(["--bind-to", "core"]);
                } else {
                    c.args(["--bind-to", "none", "--oversubscribe"]);
                }
                for kv in mca.chunks(2) {
                    c.arg("--mca").args(kv);
                }
                c.arg(bin).args(&bench_args);
                c
            }
            Kind::Mpich { bin } => {
                let mut c = Command::new("mpiexec.mpich");
                c.arg("-n").arg(ranks.to_string());
                if bind && ranks <= cores {
                    c.args(["-bind-to", "core"]);
                }
                c.arg(bin).args(&bench_args);
                c
            }
        };
        for (k, _) in std::env::vars() {
            // The user's own RMCA_MCA_* settings would leak into rmca only; keep runs explicit.
            if k.starts_with("RMCA_MCA_") {
                cmd.env_remove(k);
            }
        }
        let (ok, stdout, stderr) = run_with_timeout(cmd, Duration::from_secs(timeout_s + 30))?;
        if !ok {
            return Err(format!(
                "{} {} failed:\n{stdout}{stderr}",
                self.name,
                bench.name()
            ));
        }
        let lines = parse_results(&stdout);
        if lines.is_empty() {
            return Err(format!(
                "{} {} printed no results:\n{stdout}{stderr}",
                self.name,
                bench.name()
            ));
        }
        Ok(lines)
    }
}

/// `result SIZE V1 [V2 ...]` lines; anything else (launcher chatter) is ignored.
pub fn parse_results(out: &str) -> Vec<(usize, Vec<f64>)> {
    out.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            if w.next()? != "result" {
                return None;
            }
            let size = w.next()?.parse().ok()?;
            let figures: Option<Vec<f64>> = w.map(|x| x.parse().ok()).collect();
            figures.filter(|f| !f.is_empty()).map(|f| (size, f))
        })
        .collect()
}

fn run_with_timeout(mut cmd: Command, limit: Duration) -> Result<(bool, String, String), String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    let mut so = child.stdout.take().ok_or("no stdout")?;
    let mut se = child.stderr.take().ok_or("no stderr")?;
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(st);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (out, err) = (
        t_out.join().unwrap_or_default(),
        t_err.join().unwrap_or_default(),
    );
    match status {
        Some(st) => Ok((st.success(), out, err)),
        None => Err(format!(
            "{cmd:?} did not finish within {} s",
            limit.as_secs()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_are_picked_from_launcher_chatter() {
        let out = "Warning: something\nresult 0 1.5\nresult 8 2.25 9\nresult x 1\nresult 16\nbye\n";
        assert_eq!(
            parse_results(out),
            vec![(0, vec![1.5]), (8, vec![2.25, 9.0])]
        );
    }

    #[test]
    fn embedded_source_is_the_peer_benchmark() {
        assert!(OSU_LIKE_C.contains("MPI_Init") && OSU_LIKE_C.contains("result %ld"));
    }
}
