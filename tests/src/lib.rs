//! Helpers for the multi-process integration tests: locate the release binaries (building them
//! if needed) and run jobs under rmca-run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub mod c;
pub mod fortran;
pub mod plugin;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("workspace root")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// Build (once per test process) the release binaries and examples the jobs run, unless
/// `RMCA_TESTS_PREBUILT` is set.
fn ensure_built() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        // For developers who built the binaries themselves (e.g. part of the workspace only).
        if std::env::var_os("RMCA_TESTS_PREBUILT").is_some() {
            return;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(workspace_root())
            .args([
                "build",
                "--release",
                "--workspace",
                "--bins",
                "--examples",
                "--quiet",
            ])
            .status()
            .expect("run cargo build");
        assert!(status.success(), "building the release binaries failed");
    });
}

/// Path of a release binary (a `[[bin]]` of any workspace crate) or example.
pub fn release_bin(name: &str) -> PathBuf {
    ensure_built();
    let dir = target_dir().join("release");
    let p = dir.join(name);
    if p.exists() {
        return p;
    }
    let e = dir.join("examples").join(name);
    assert!(
        e.exists(),
        "no binary or example named {name} in {}",
        dir.display()
    );
    e
}

/// A job to run.
#[derive(Debug)]
pub struct Job<'a> {
    /// Number of ranks.
    pub ranks: usize,
    /// Binary or example name.
    pub program: &'a str,
    /// Program arguments.
    pub args: &'a [&'a str],
    /// `--mca` settings.
    pub mca: &'a [(&'a str, &'a str)],
    /// `--timeout` in seconds.
    pub timeout_s: u64,
}

/// What a job printed and how it ended.
#[derive(Debug)]
pub struct JobOutput {
    /// Exit code of rmca-run (None if killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl JobOutput {
    /// True when the job exited 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
    /// Both streams, for assertion messages.
    pub fn text(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Run a job under rmca-run and collect its output.
pub fn run_job(job: &Job<'_>) -> JobOutput {
    run_job_with(job, &[])
}

/// [`run_job`] with extra rmca-run options (e.g. `--keep-going`).
pub fn run_job_with(job: &Job<'_>, launcher_args: &[&str]) -> JobOutput {
    let mut cmd = Command::new(release_bin("rmca-run"));
    cmd.args(launcher_args);
    run_launcher(cmd, job)
}

/// Add `job` to the rmca-run command line `cmd` (its size, timeout, `--mca` settings and
/// program, with the caller's own `RMCA_MCA_*` variables removed), run it and collect its output.
fn run_launcher(mut cmd: Command, job: &Job<'_>) -> JobOutput {
    add_job(&mut cmd, job);
    collect(cmd.output().expect("spawn rmca-run"))
}

/// Add `job` to the rmca-run command line `cmd` (see [`run_launcher`]).
fn add_job(cmd: &mut Command, job: &Job<'_>) {
    cmd.arg("-n")
        .arg(job.ranks.to_string())
        .arg("--timeout")
        .arg(job.timeout_s.to_string());
    for (k, v) in job.mca {
        cmd.arg("--mca").arg(k).arg(v);
    }
    cmd.arg(release_bin(job.program)).args(job.args);
    for (k, _) in std::env::vars() {
        if k.starts_with("RMCA_MCA_") {
            cmd.env_remove(k);
        }
    }
    // `cargo test` puts target/debug/deps first on the library path: a C program would load
    // the debug build's libmpi_abi.so (of whatever revision last built it) instead of the
    // release library its rpath names.
    cmd.env_remove("LD_LIBRARY_PATH");
}

fn collect(out: std::process::Output) -> JobOutput {
    JobOutput {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Read, delete and parse the merged profile a job wrote with `--mca profile_json PATH`;
/// panics with the job's output (`out`) if it is missing or not JSON.
pub fn take_profile(path: &Path, out: &JobOutput) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no profile at {}: {e}\n{}", path.display(), out.text()));
    let _ = std::fs::remove_file(path);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("profile at {} is not JSON: {e}", path.display()))
}

/// The counter `name` of a merged profile (see [`take_profile`]); panics naming it if absent.
pub fn counter(profile: &serde_json::Value, name: &str) -> u64 {
    profile["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("profile has no counter {name}: {profile:#}"))
}

/// Why this machine cannot bring up rmca-impair's namespace nodes (bench/impaired-link.sh:
/// root and /dev/net/tun), if it cannot.
pub fn cannot_emulate() -> Option<String> {
    let uid = match Command::new("id").arg("-u").output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        Err(e) => return Some(format!("cannot run `id -u` to check for root: {e}")),
    };
    if uid != "0" {
        return Some("needs root (network namespaces and TUN devices)".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("needs /dev/net/tun".into());
    }
    None
}

/// Two network namespaces joined by a veth pair with a given MTU and random loss of UDP
/// packets (IP fragments included) in both directions, for jobs spanning "two nodes" of a
/// lossy link. Needs root and iproute2; the kernel needs veth, HTB, the pfifo qdisc and the
/// BPF classifier (no netem: the loss is a classic-BPF filter on `ld rand` sending the chosen
/// packets to a pfifo of limit 0, which drops everything it is given). Removed on drop.
#[derive(Debug)]
pub struct LossyLink {
    /// Namespace names ("node" names for `--hosts`).
    pub ns: [String; 2],
    /// Interface names, inside their namespace.
    pub dev: [String; 2],
    /// Addresses of the two ends.
    pub addr: [String; 2],
    /// A second, loss-free link between the same namespaces ([`LossyLink::with_second_link`]):
    /// interface names and addresses of its two ends.
    pub second: Option<([String; 2], [String; 2])>,
    /// The link whose address the launcher's PMI server listens on (0: the lossy one).
    pub pmi_link: usize,
    dir: PathBuf,
}

impl LossyLink {
    /// Creates the pair: MTU `mtu`, each UDP packet leaving either end dropped with probability
    /// `loss`, and `ipfrag_time` of both namespaces set to `ipfrag_time_s` seconds. `Err` says
    /// why it cannot be made here (not root, no iproute2, kernel features missing).
    pub fn new(mtu: u32, loss: f64, ipfrag_time_s: u32) -> Result<Self, String> {
        let run = |args: &[&str]| -> Result<(), String> {
            let out = Command::new(args[0])
                .args(&args[1..])
                .output()
                .map_err(|e| format!("{}: {e}", args[0]))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "`{}` failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        // Unique per process and per link within it (interface names stay within 15 bytes).
        static LINKS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = LINKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = (std::process::id() % 10_000) * 10 + n % 10;
        let names = Self {
            ns: [format!("rmcaLa{id}"), format!("rmcaLb{id}")],
            dev: [format!("rla{id}"), format!("rlb{id}")],
            addr: {
                let net = 10 + id % 200;
                [format!("10.{net}.88.1"), format!("10.{net}.88.2")]
            },
            second: None,
            pmi_link: 0,
            dir: std::env::temp_dir().join(format!("rmca-lossy-link-{id}")),
        };
        // Only once this namespace is ours may Drop remove what carries these names (another
        // process may hold them): a failure here must not run Drop.
        if let Err(e) = run(&["ip", "netns", "add", &names.ns[0]]) {
            std::mem::forget(names);
            return Err(e);
        }
        let link = names;
        run(&["ip", "netns", "add", &link.ns[1]])?;
        let mtu_s = mtu.to_string();
        run(&[
            "ip",
            "link",
            "add",
            &link.dev[0],
            "mtu",
            &mtu_s,
            "type",
            "veth",
            "peer",
            "name",
            &link.dev[1],
            "mtu",
            &mtu_s,
        ])?;
        // Loss as a classic BPF program (tc's bytecode syntax: count, then "code jt jf k"):
        // IPv4 (ethertype 0x0800), protocol UDP (17), then a random u32 below the threshold.
        // Returning -1 classifies into the filter's class (the dropping pfifo), 0 passes.
        let threshold = (loss.clamp(0.0, 1.0) * f64::from(u32::MAX)) as u32;
        let bytecode = format!(
            "8,40 0 0 12,21 0 5 2048,48 0 0 23,21 0 3 17,32 0 0 {rand},53 1 0 {threshold},6 0 0 4294967295,6 0 0 0",
            rand = 0xffff_f000u32 + 56 // SKF_AD_OFF + SKF_AD_RANDOM
        );
        for i in 0..2 {
            let (ns, dev) = (&link.ns[i], &link.dev[i]);
            run(&["ip", "link", "set", dev, "netns", ns])?;
            run(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}/24", link.addr[i]),
                "dev",
                dev,
            ])?;
            run(&["ip", "-n", ns, "link", "set", dev, "up"])?;
            run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
            let tc = |rest: &[&str]| {
                let mut a = vec!["tc", "-n", ns.as_str()];
                a.extend_from_slice(rest);
                run(&a)
            };
            tc(&[
                "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10",
            ])?;
            for class in ["1:10", "1:20"] {
                tc(&[
                    "class", "add", "dev", dev, "parent", "1:", "classid", class, "htb", "rate",
                    "10gbit", "quantum", "60000",
                ])?;
            }
            tc(&[
                "qdisc", "add", "dev", dev, "parent", "1:20", "handle", "20:", "pfifo", "limit",
                "0",
            ])?;
            tc(&[
                "filter", "add", "dev", dev, "parent", "1:", "bpf", "bytecode", &bytecode,
                "classid", "1:20",
            ])?;
            // Per namespace: how long an incomplete IP datagram's fragments are kept.
            run(&[
                "ip",
                "netns",
                "exec",
                ns,
                "sh",
                "-c",
                &format!("echo {ipfrag_time_s} > /proc/sys/net/ipv4/ipfrag_time"),
            ])?;
        }
        std::fs::create_dir_all(&link.dir).map_err(|e| e.to_string())?;
        link.bind(&[("btl_ud_if_addr", 0)])?;
        Ok(link)
    }

    /// Adds a second link between the two namespaces (MTU 1500, no loss), addresses
    /// `10.N.89.1` and `.2`, for jobs whose BTLs use different links.
    pub fn with_second_link(mut self) -> Result<Self, String> {
        let id = &self.dev[0][3..];
        let dev = [format!("rlc{id}"), format!("rld{id}")];
        let net: String = self.addr[0].split('.').nth(1).unwrap_or("10").to_owned();
        let addr = [format!("10.{net}.89.1"), format!("10.{net}.89.2")];
        let ip = |args: &[&str]| -> Result<(), String> {
            let out = Command::new("ip")
                .args(args)
                .output()
                .map_err(|e| format!("ip: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "`ip {}` failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        ip(&[
            "link", "add", &dev[0], "type", "veth", "peer", "name", &dev[1],
        ])?;
        for i in 0..2 {
            ip(&["link", "set", &dev[i], "netns", &self.ns[i]])?;
            ip(&[
                "-n",
                &self.ns[i],
                "addr",
                "add",
                &format!("{}/24", addr[i]),
                "dev",
                &dev[i],
            ])?;
            ip(&["-n", &self.ns[i], "link", "set", &dev[i], "up"])?;
        }
        self.second = Some((dev, addr));
        Ok(self)
    }

    /// The address of link `link` (0: the lossy one, 1: the second) on node `node`.
    pub fn link_addr(&self, link: usize, node: usize) -> &str {
        match (link, &self.second) {
            (0, _) => &self.addr[node],
            (1, Some((_, addr))) => &addr[node],
            _ => panic!("no link {link} (add the second with with_second_link)"),
        }
    }

    /// Each rank binds the parameters of `bindings` (e.g. `btl_rc_if_addr`) to its own end of
    /// the given link: one script per node sets them and runs the rank (the launch agent is
    /// `ip netns exec {node} sh DIR/{node}.sh {cmd}`).
    pub fn bind(&self, bindings: &[(&str, usize)]) -> Result<(), String> {
        for node in 0..2 {
            let mut script = String::new();
            for (param, link) in bindings {
                script.push_str(&format!(
                    "RMCA_MCA_{param}={}\nexport RMCA_MCA_{param}\n",
                    self.link_addr(*link, node)
                ));
            }
            script.push_str("exec \"$@\"\n");
            std::fs::write(self.dir.join(format!("{}.sh", self.ns[node])), script)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Sets link `link` down (`up` false: both ends, as a cable pulled) or up again.
    pub fn set_link(&self, link: usize, up: bool) {
        let devs = match (link, &self.second) {
            (0, _) => self.dev.clone(),
            (1, Some((dev, _))) => dev.clone(),
            _ => panic!("no link {link}"),
        };
        for (ns, dev) in self.ns.iter().zip(&devs) {
            let st = Command::new("ip")
                .args(["-n", ns, "link", "set", dev])
                .arg(if up { "up" } else { "down" })
                .status()
                .expect("run ip");
            assert!(st.success(), "setting link {link} of {ns} failed");
        }
    }

    /// Runs `job` with its ranks spread over the two namespaces (launcher in the first, PMI over
    /// the link's TCP, which the loss spares), each rank's `btl_ud_if_addr` set to its end.
    pub fn run_job(&self, job: &Job<'_>) -> JobOutput {
        run_launcher(self.launcher(), job)
    }

    /// [`LossyLink::run_job`], running `during` (e.g. a link failure) while the job runs.
    pub fn run_job_while(&self, job: &Job<'_>, during: impl FnOnce()) -> JobOutput {
        let mut cmd = self.launcher();
        add_job(&mut cmd, job);
        let child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn rmca-run");
        let waiter = std::thread::spawn(move || child.wait_with_output());
        during();
        collect(
            waiter
                .join()
                .expect("waiter thread")
                .expect("wait for rmca-run"),
        )
    }

    /// rmca-run in the first namespace, placing ranks on both.
    fn launcher(&self) -> Command {
        let hosts = format!("{},{}", self.ns[0], self.ns[1]);
        let agent = format!(
            "ip netns exec {{node}} sh {}/{{node}}.sh {{cmd}}",
            self.dir.display()
        );
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns[0]])
            .arg(release_bin("rmca-run"))
            .args([
                "--hosts",
                &hosts,
                "--launch-agent",
                &agent,
                "--pmi-addr",
                self.link_addr(self.pmi_link, 0),
            ]);
        cmd
    }

    /// A counter of the `Ip:` line of `/proc/net/snmp` in namespace `i` (e.g. `FragCreates`:
    /// IP fragments this node made; `ReasmFails`: reassemblies it gave up).
    pub fn ip_counter(&self, i: usize, name: &str) -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns[i], "cat", "/proc/net/snmp"])
            .output()
            .expect("read /proc/net/snmp");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut ip = text.lines().filter(|l| l.starts_with("Ip:"));
        let (names, values) = (ip.next().unwrap_or(""), ip.next().unwrap_or(""));
        names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or_else(|| panic!("no Ip counter {name} in {text}"))
    }

    /// Packets the loss dropped so far on end `i` (what its dropping pfifo was given).
    pub fn dropped(&self, i: usize) -> u64 {
        let out = Command::new("tc")
            .args([
                "-n",
                &self.ns[i],
                "-s",
                "qdisc",
                "show",
                "dev",
                &self.dev[i],
            ])
            .output()
            .expect("run tc");
        let text = String::from_utf8_lossy(&out.stdout);
        // "qdisc pfifo 20: parent 1:20 limit 0p\n Sent 0 bytes 0 pkt (dropped N, ..."
        text.split("qdisc pfifo 20:")
            .nth(1)
            .and_then(|s| s.split("dropped ").nth(1))
            .and_then(|s| s.split(',').next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pfifo drop count in {text}"))
    }
}

impl Drop for LossyLink {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end inside it (and with it the pair).
        for ns in &self.ns {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(std::process::Stdio::null())
                .status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.dev[0]])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
