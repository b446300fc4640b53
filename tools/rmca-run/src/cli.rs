//! Command line of `rmca-run`.

use std::time::Duration;

/// Everything `rmca-run` was asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Number of ranks.
    pub np: u32,
    /// `--mca name value` pairs, in order.
    pub mca: Vec<(String, String)>,
    /// Kill the job after this long.
    pub timeout: Option<Duration>,
    /// Prefix every output line with `[rank] `.
    pub tag_output: bool,
    /// A rank's death does not end the job (the survivors go on; fences then fail).
    pub keep_going: bool,
    /// Node names; ranks are placed in blocks over them. Empty: one local node.
    pub hosts: Vec<String>,
    /// Launch-agent template, e.g. `ip netns exec {node} {cmd}`.
    pub launch_agent: Option<String>,
    /// Address the TCP PMI server binds and advertises.
    pub pmi_addr: String,
    /// Use TCP (`PMI_PORT`) even for local ranks.
    pub force_tcp: bool,
    /// Time between SIGTERM and SIGKILL at teardown.
    pub term_grace: Duration,
    /// Where the ranks may run.
    pub bind: Binding,
    /// The program and its arguments.
    pub program: Vec<String>,
}

/// CPU binding of the ranks (`--bind-to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Binding {
    /// No `--bind-to` given: [`Binding::Core`] while the ranks fit the CPUs this launcher may
    /// use, else no binding; none under a launch agent or inside a Slurm job (they place the
    /// ranks). Open MPI's default, decided by [`resolve_binding`].
    #[default]
    Auto,
    /// Wherever the kernel schedules them.
    None,
    /// Each rank, with all its threads, on one CPU of the launcher's allowed set: rank r on the
    /// r-th allowed CPU.
    Core,
}

/// What [`resolve_binding`] decided for a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Rank r runs on CPU `cpus[r]` only.
    Bound(Vec<usize>),
    /// No binding, and why (for the launcher's log).
    Unbound(&'static str),
}

/// Where the launcher stands when it places ranks (facts gathered by the caller, so that the
/// decision is a pure function).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacementContext<'a> {
    /// The CPUs this launcher may use (its affinity mask), in increasing order.
    pub cpus: &'a [usize],
    /// Ranks are started by a launch agent on nodes whose CPUs this launcher does not know.
    pub launch_agent: bool,
    /// This launcher runs inside a Slurm job (`SLURM_JOB_ID` set): Slurm's cgroups and
    /// `--cpu-bind` own placement.
    pub under_slurm: bool,
}

/// Decide the binding of `np` ranks. `--bind-to core` is refused (with the count of CPUs) when
/// the ranks do not fit; the default binds only when they do, as Open MPI does (cores while
/// np <= CPUs), and leaves placement to a launch agent or to Slurm.
pub fn resolve_binding(
    bind: Binding,
    np: u32,
    ctx: PlacementContext<'_>,
) -> Result<Placement, String> {
    match bind {
        Binding::None => Ok(Placement::Unbound("--bind-to none")),
        Binding::Core => core_map(np, ctx.cpus).map(Placement::Bound),
        Binding::Auto if ctx.launch_agent => Ok(Placement::Unbound(
            "ranks start through a launch agent, which places them",
        )),
        Binding::Auto if ctx.under_slurm => Ok(Placement::Unbound(
            "inside a Slurm job (SLURM_JOB_ID), which places the ranks",
        )),
        Binding::Auto if np as usize > ctx.cpus.len() => Ok(Placement::Unbound(
            "more ranks than the CPUs this launcher may use (oversubscribed)",
        )),
        Binding::Auto => core_map(np, ctx.cpus).map(Placement::Bound),
    }
}

/// A bad command line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CliError {
    /// An option needs a value that is missing.
    #[error("option {0} needs a value")]
    MissingValue(String),
    /// A value could not be parsed.
    #[error("option {opt}: invalid value {value:?} ({expected})")]
    BadValue {
        /// The option.
        opt: String,
        /// The value given.
        value: String,
        /// What is valid.
        expected: String,
    },
    /// An option we do not know.
    #[error("unknown option {0:?} (see rmca-run --help)")]
    Unknown(String),
    /// No program given.
    #[error("no program to run (usage: rmca-run -n N [options] program [args...])")]
    NoProgram,
    /// `--help` was given.
    #[error("help requested")]
    Help,
}

/// Usage text.
pub const USAGE: &str = "\
usage: rmca-run -n N [options] program [args...]

  -n, -np, --np N          number of ranks (default 1)
  --mca NAME VALUE         set MCA parameter NAME in every rank (RMCA_MCA_NAME=VALUE); repeatable
  --timeout S              terminate the job after S seconds (exit status 124)
  --tag-output             prefix each output line with [rank]
  --keep-going             a rank that dies does not end the job: it is reported, the others go
                           on (to observe the loss, e.g. pml dr's peer timeout) and their PMI
                           fences fail instead of waiting for it; the job's status stays the
                           first failure (MPICH's -disable-auto-cleanup)
  --hosts A,B,...          node names; ranks are placed in blocks, node identity = name
  --launch-agent TEMPLATE  start each rank through TEMPLATE, with {node} and {cmd} substituted,
                           e.g. 'ip netns exec {node} {cmd}'; the PMI server is then reached over
                           TCP at --pmi-addr
  --pmi-addr IP            address of the TCP PMI server (default 127.0.0.1)
  --pmi-port               use TCP (PMI_PORT) even for local ranks
  --term-grace S           seconds between SIGTERM and SIGKILL at teardown (default 2)
  --bind-to core|none      core: bind each rank (all its threads) to one CPU, rank r to the
                           r-th CPU the launcher may use (its affinity mask); refused with more
                           ranks than CPUs and with --launch-agent; none: no binding. Default
                           (as Open MPI): core while the ranks fit those CPUs, else none; none
                           with --launch-agent or inside a Slurm job (SLURM_JOB_ID set), which
                           place the ranks themselves. RUST_LOG=info shows the decision
  -h, --help               this text

Exit status: 0 if every rank exited 0 after finalize; otherwise the first failing rank's exit
code, 128+signal for a rank killed by a signal, the code given to abort, 124 on --timeout.";

/// Longest duration accepted for `--timeout` and `--term-grace` (about 31 years): anything
/// longer means "never" in practice and would overflow the clock's arithmetic.
pub const MAX_SECONDS: f64 = 1e9;

/// Most ranks one launcher starts (each costs it a few descriptors and a process).
pub const MAX_RANKS: u32 = 1 << 20;

fn secs(opt: &str, v: &str) -> Result<Duration, CliError> {
    v.parse::<f64>()
        .ok()
        .filter(|s| (0.0..=MAX_SECONDS).contains(s))
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| CliError::BadValue {
            opt: opt.into(),
            value: v.into(),
            expected: format!("seconds, a number from 0 to {MAX_SECONDS:e}"),
        })
}

/// Parse arguments (without the program name). Options end at the first non-option word or `--`.
pub fn parse(args: &[String]) -> Result<Options, CliError> {
    let mut o = Options {
        np: 1,
        mca: Vec::new(),
        timeout: None,
        tag_output: false,
        keep_going: false,
        hosts: Vec::new(),
        launch_agent: None,
        pmi_addr: "127.0.0.1".into(),
        force_tcp: false,
        term_grace: Duration::from_secs(2),
        bind: Binding::Auto,
        program: Vec::new(),
    };
    let mut i = 0;
    let value = |i: &mut usize, opt: &str| -> Result<String, CliError> {
        *i += 1;
        args.get(*i)
            .cloned()
            .ok_or_else(|| CliError::MissingValue(opt.into()))
    };
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "-n" | "-np" | "--np" => {
                let v = value(&mut i, a)?;
                o.np = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_RANKS).contains(n))
                    .ok_or_else(|| CliError::BadValue {
                        opt: a.into(),
                        value: v.clone(),
                        expected: format!("a whole number from 1 to {MAX_RANKS}"),
                    })?;
            }
            "--mca" => {
                let name = value(&mut i, a)?;
                let val = value(&mut i, a)?;
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(CliError::BadValue {
                        opt: "--mca".into(),
                        value: name,
                        expected: "a parameter name of [A-Za-z0-9_], e.g. btl_ud_send_qps".into(),
                    });
                }
                o.mca.push((name, val));
            }
            "--timeout" => {
                let v = value(&mut i, a)?;
                o.timeout = Some(secs(a, &v)?);
            }
            "--term-grace" => {
                let v = value(&mut i, a)?;
                o.term_grace = secs(a, &v)?;
            }
            "--tag-output" => o.tag_output = true,
            "--keep-going" => o.keep_going = true,
            "--hosts" | "--host" => {
                let v = value(&mut i, a)?;
                o.hosts = v
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                if o.hosts.is_empty() {
                    return Err(CliError::BadValue {
                        opt: a.into(),
                        value: v,
                        expected: "a comma-separated list of node names".into(),
                    });
                }
            }
            "--launch-agent" => {
                let v = value(&mut i, a)?;
                if !v.split_whitespace().any(|t| t == "{cmd}") {
                    return Err(CliError::BadValue {
                        opt: a.into(),
                        value: v,
                        expected: "a template containing {cmd} as a separate word".into(),
                    });
                }
                o.launch_agent = Some(v);
            }
            "--pmi-addr" => {
                let v = value(&mut i, a)?;
                if v.parse::<std::net::IpAddr>().is_err() {
                    return Err(CliError::BadValue {
                        opt: a.into(),
                        value: v,
                        expected: "an IP address".into(),
                    });
                }
                o.pmi_addr = v;
            }
            "--pmi-port" => o.force_tcp = true,
            "--bind-to" => {
                let v = value(&mut i, a)?;
                o.bind = match v.as_str() {
                    "core" => Binding::Core,
                    "none" => Binding::None,
                    _ => {
                        return Err(CliError::BadValue {
                            opt: a.into(),
                            value: v,
                            expected: "core or none".into(),
                        })
                    }
                };
            }
            "-h" | "--help" => return Err(CliError::Help),
            "--" => {
                o.program = args[i + 1..].to_vec();
                break;
            }
            s if s.starts_with('-') => return Err(CliError::Unknown(s.into())),
            _ => {
                o.program = args[i..].to_vec();
                break;
            }
        }
        i += 1;
    }
    if o.program.is_empty() {
        return Err(CliError::NoProgram);
    }
    if o.launch_agent.is_some() && o.hosts.is_empty() {
        return Err(CliError::BadValue {
            opt: "--launch-agent".into(),
            value: o.launch_agent.clone().unwrap_or_default(),
            expected: "--hosts as well (the nodes to substitute for {node})".into(),
        });
    }
    if o.bind == Binding::Core && o.launch_agent.is_some() {
        return Err(CliError::BadValue {
            opt: "--bind-to".into(),
            value: "core".into(),
            expected: "none with --launch-agent (the agent starts the ranks on its node, whose CPUs this launcher does not know)".into(),
        });
    }
    Ok(o)
}

/// The CPU of each rank under `--bind-to core`: every rank runs on this machine (a launch agent
/// is refused with binding, and `--hosts` alone names nodes that all run here), so rank r gets
/// the r-th CPU this launcher may use. An error says how many there are.
pub fn core_map(np: u32, cpus: &[usize]) -> Result<Vec<usize>, String> {
    if np as usize > cpus.len() {
        return Err(format!(
            "--bind-to core: {np} ranks but this launcher may use only {} CPUs ({cpus:?}): run at most {} ranks or use --bind-to none",
            cpus.len(),
            cpus.len()
        ));
    }
    Ok(cpus[..np as usize].to_vec())
}

/// Node index of each rank: blocks of `ceil(np / nodes)` consecutive ranks per node.
pub fn block_map(np: u32, nodes: u32) -> Vec<u32> {
    let nodes = nodes.max(1);
    let per = np.div_ceil(nodes);
    (0..np).map(|r| (r / per).min(nodes - 1)).collect()
}

/// Expand the launch-agent template for one rank: `{node}` anywhere, `{cmd}` as a whole word
/// replaced by `cmd` (several words).
pub fn expand_agent(template: &str, node: &str, cmd: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for t in template.split_whitespace() {
        if t == "{cmd}" {
            out.extend(cmd.iter().cloned());
        } else {
            out.push(t.replace("{node}", node));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_full_command_line() {
        let o = parse(&a(
            "-n 4 --mca btl self,shm --mca pml ob1 --timeout 2.5 --tag-output --keep-going prog -x --y",
        ))
        .unwrap();
        assert_eq!(o.np, 4);
        assert_eq!(o.mca.len(), 2);
        assert_eq!(o.timeout, Some(Duration::from_millis(2500)));
        assert!(o.tag_output);
        assert!(o.keep_going);
        assert_eq!(o.program, a("prog -x --y"));
    }

    #[test]
    fn bind_to_core_takes_one_allowed_cpu_per_rank() {
        assert_eq!(parse(&a("p")).unwrap().bind, Binding::Auto);
        assert_eq!(parse(&a("--bind-to core p")).unwrap().bind, Binding::Core);
        assert_eq!(parse(&a("--bind-to none p")).unwrap().bind, Binding::None);
        let e = parse(&a("--bind-to socket p")).unwrap_err().to_string();
        assert!(e.contains("--bind-to") && e.contains("core or none"), "{e}");
        let e = parse(&a("--hosts a,b --launch-agent {cmd} --bind-to core p"));
        assert!(matches!(e, Err(CliError::BadValue { .. })));
        assert_eq!(core_map(3, &[2, 5, 7, 9]).unwrap(), [2, 5, 7]);
        let e = core_map(3, &[0, 1]).unwrap_err();
        assert!(
            e.contains("3 ranks") && e.contains("only 2 CPUs") && e.contains("--bind-to none"),
            "{e}"
        );
    }

    #[test]
    fn default_binding_binds_cores_while_ranks_fit_and_leaves_launchers_alone() {
        let cpus = [0, 1, 4];
        let here = PlacementContext {
            cpus: &cpus,
            launch_agent: false,
            under_slurm: false,
        };
        let r = |b, np, ctx| resolve_binding(b, np, ctx).unwrap();
        assert_eq!(r(Binding::Auto, 2, here), Placement::Bound(vec![0, 1]));
        assert_eq!(r(Binding::Auto, 3, here), Placement::Bound(vec![0, 1, 4]));
        assert!(
            matches!(r(Binding::Auto, 4, here), Placement::Unbound(w) if w.contains("oversubscribed"))
        );
        assert!(matches!(r(Binding::None, 2, here), Placement::Unbound(_)));
        let slurm = PlacementContext {
            under_slurm: true,
            ..here
        };
        assert!(matches!(r(Binding::Auto, 2, slurm), Placement::Unbound(w) if w.contains("Slurm")));
        // Asked for explicitly, binding happens inside a Slurm job too.
        assert_eq!(r(Binding::Core, 2, slurm), Placement::Bound(vec![0, 1]));
        let agent = PlacementContext {
            launch_agent: true,
            ..here
        };
        assert!(
            matches!(r(Binding::Auto, 1, agent), Placement::Unbound(w) if w.contains("launch agent"))
        );
        let e = resolve_binding(Binding::Core, 4, here).unwrap_err();
        assert!(e.contains("4 ranks") && e.contains("only 3 CPUs"), "{e}");
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(parse(&a("-n")), Err(CliError::MissingValue("-n".into())));
        assert!(matches!(
            parse(&a("-n 0 p")),
            Err(CliError::BadValue { .. })
        ));
        assert!(matches!(
            parse(&a("--mca a-b 1 p")),
            Err(CliError::BadValue { .. })
        ));
        assert_eq!(
            parse(&a("--bogus p")),
            Err(CliError::Unknown("--bogus".into()))
        );
        assert_eq!(parse(&a("-n 2")), Err(CliError::NoProgram));
        assert!(matches!(
            parse(&a("--launch-agent ssh p")),
            Err(CliError::BadValue { .. })
        ));
    }

    #[test]
    fn block_mapping_and_agent_expansion() {
        assert_eq!(block_map(5, 2), vec![0, 0, 0, 1, 1]);
        assert_eq!(block_map(2, 2), vec![0, 1]);
        assert_eq!(block_map(1, 3), vec![0]);
        assert_eq!(
            expand_agent("ip netns exec {node} {cmd}", "n1", &a("env A=1 prog x")),
            a("ip netns exec n1 env A=1 prog x")
        );
    }
}
