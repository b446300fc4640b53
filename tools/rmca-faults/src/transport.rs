//! The transports a sweep compares: a base transport (which PML and BTLs, or a peer
//! implementation) plus MCA settings, written `[LABEL:]BASE[NAME=VALUE,...]` on the command
//! line, e.g. `dr+ud[pml_dr_window=8]` or `w8:dr+ud[pml_dr_window=8,pml_dr_ack_hold_us=0]`.
//! Parsing is pure and unit-tested; [`check_settings`] resolves the settings through the
//! components' own parameter registration (as a job's init would), so a misspelt name or a
//! bad value is refused before any node is made.

use rmca_framework::params::{RawSetting, RawSources, Source};
use rmca_framework::registry::Registry;

/// How a base transport's jobs are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// rmca-run with the worker of this tool (`rmca-faults --worker`).
    Rmca,
    /// Open MPI's mpirun with bench/faults/peer.c built by `mpicc.openmpi`.
    OpenMpi,
    /// MPICH's mpiexec with bench/faults/peer.c built by `mpicc.mpich`.
    Mpich,
    /// libfabric's `fi_pingpong` over `udp;ofi_rxd` (latency only).
    Rxd,
}

/// A base transport: its name, how it runs, the `--mca` settings that select it and what it is.
pub struct Base {
    /// The name in `--transports`.
    pub name: &'static str,
    /// How its jobs run.
    pub runner: Runner,
    /// The `--mca` settings that select it (rmca) or that mpirun gets (Open MPI).
    pub mca: &'static [(&'static str, &'static str)],
    /// One line for `--help`.
    pub help: &'static str,
    /// The BTLs bench/impaired-link.sh binds to the clean control network instead of the
    /// impaired one (RMCA_IMPAIR_CLEAN), e.g. "rc": a second path that survives a link kill.
    pub clean: &'static str,
}

/// Every base transport.
pub const BASES: &[Base] = &[
    Base {
        name: "dr+ud",
        runner: Runner::Rmca,
        mca: &[
            ("pml", "dr"),
            ("btl", "ud,self"),
            ("btl_ud_provider", "soft"),
        ],
        help: "pml dr over btl ud (soft provider: UDP)",
        clean: "",
    },
    Base {
        name: "dr+rc",
        runner: Runner::Rmca,
        mca: &[
            ("pml", "dr"),
            ("btl", "rc,self"),
            ("btl_rc_provider", "soft"),
        ],
        help: "pml dr over btl rc (soft provider: TCP)",
        clean: "",
    },
    Base {
        name: "ob1+rc",
        runner: Runner::Rmca,
        mca: &[
            ("pml", "ob1"),
            ("btl", "rc,self"),
            ("btl_rc_provider", "soft"),
        ],
        help: "pml ob1 over btl rc (soft RC's own reliability: TCP)",
        clean: "",
    },
    // Friedley07's third configuration: ob1 over ud measures the cost of dr's reliability on
    // a loss-free link. ob1 never recovers a loss: not a default, and at a lossy point it
    // hangs until the timeout (or delivers corruption, which the sweep reports).
    Base {
        name: "ob1+ud",
        runner: Runner::Rmca,
        mca: &[
            ("pml", "ob1"),
            ("btl", "ud,self"),
            ("btl_ud_provider", "soft"),
            ("pml_ob1_unreliable_btls", "true"),
        ],
        help: "pml ob1 over btl ud, no reliability (loss-free points only)",
        clean: "",
    },
    // Two BTLs to the peer: dr sends on ud (over the impaired link) and fails over to rc,
    // which bench/impaired-link.sh binds to the clean control network (RMCA_IMPAIR_CLEAN).
    Base {
        name: "dr+ud+rc",
        runner: Runner::Rmca,
        mca: &[
            ("pml", "dr"),
            ("btl", "ud,rc,self"),
            ("btl_ud_provider", "soft"),
            ("btl_rc_provider", "soft"),
            ("btl_rc_latency", "1000000"),
        ],
        help: "pml dr over ud (impaired link), failing over to rc on the clean network",
        clean: "rc",
    },
    Base {
        name: "ompi+tcp",
        runner: Runner::OpenMpi,
        mca: &[("pml", "ob1"), ("btl", "tcp,self")],
        help: "Open MPI, pml ob1 over btl tcp (bench/faults/peer.c)",
        clean: "",
    },
    Base {
        name: "mpich",
        runner: Runner::Mpich,
        mca: &[],
        help: "MPICH over the impaired interface (bench/faults/peer.c)",
        clean: "",
    },
    Base {
        name: "rxd",
        runner: Runner::Rxd,
        mca: &[],
        help: "libfabric's fi_pingpong over udp;ofi_rxd (mean latency; refused unless its\n                                  datagrams are seen crossing the link)",
        clean: "",
    },
];

/// The BTLs a base `PML+BTL` of any other PML may name, with the settings selecting them
/// (soft verbs provider, as the fixed bases).
const ANY_PML_BTLS: &[(&str, &[(&str, &str)])] = &[
    ("ud", &[("btl", "ud,self"), ("btl_ud_provider", "soft")]),
    ("rc", &[("btl", "rc,self"), ("btl_rc_provider", "soft")]),
];

/// A base `PML+ud` or `PML+rc` naming a PML that no fixed base names: any PML the runtime can
/// select, built in or a plugin found on `component_path` (whether it exists is for
/// [`check_settings`] to say, through the registry, as a job's init would). Its `--mca`
/// settings, or None if `name` is not of that form.
fn any_pml(name: &str) -> Option<Vec<(String, String)>> {
    let (pml, btl) = name.split_once('+')?;
    let valid = !pml.is_empty()
        && pml
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    let (_, settings) = ANY_PML_BTLS.iter().find(|(b, _)| *b == btl)?;
    valid.then(|| {
        std::iter::once(("pml".to_owned(), pml.to_owned()))
            .chain(settings.iter().map(|(k, v)| (k.to_string(), v.to_string())))
            .collect()
    })
}

/// One compared transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transport {
    /// What tables, JSON and plots call it: LABEL, else the spec as written.
    pub label: String,
    /// The spec as written on the command line (for the reproduce line).
    pub spec: String,
    /// The base transport's name (one of [`BASES`], or `PML+ud` / `PML+rc`).
    pub base: String,
    /// The `--mca` settings of the base.
    pub base_mca: Vec<(String, String)>,
    /// How its jobs run.
    pub runner: Runner,
    /// The settings of the spec alone (after the base's).
    pub extra: Vec<(String, String)>,
    /// The base's BTLs bound to the clean network (see [`Base::clean`]).
    pub clean: &'static str,
}

impl Transport {
    /// Every `--mca` setting of its jobs: the base's, then the spec's.
    pub fn mca(&self) -> Vec<(String, String)> {
        self.base_mca
            .iter()
            .chain(self.extra.iter())
            .cloned()
            .collect()
    }

    /// The PML of an rmca transport (None for the peers): the prefix of its profile counters
    /// (`pml.NAME.retransmissions`, ...).
    pub fn pml(&self) -> Option<&str> {
        self.base_mca
            .iter()
            .find(|(k, _)| k == "pml")
            .map(|(_, v)| v.as_str())
    }

    /// The label made safe as part of a file name.
    pub fn file_label(&self) -> String {
        self.label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "+-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }
}

fn base(name: &str) -> Option<&'static Base> {
    BASES.iter().find(|b| b.name == name)
}

fn base_names() -> String {
    let fixed = BASES.iter().map(|b| b.name).collect::<Vec<_>>().join(", ");
    format!("{fixed}, or PML+ud / PML+rc for any other PML (a plugin: [component_path=DIR])")
}

/// The `--help` lines listing the bases.
pub fn help() -> String {
    BASES
        .iter()
        .map(|b| format!("                        {:<9} {}", b.name, b.help))
        .chain(std::iter::once(
            "                        PML+ud    any other PML the runtime can select, over ud (or\n\
             \x20                         PML+rc: rc), e.g. a plugin's: sw+ud[component_path=DIR]"
                .to_owned(),
        ))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Splits `--transports` at the commas outside brackets.
fn split_top(s: &str) -> Result<Vec<&str>, String> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!(
                "--transports '{s}': brackets must pair, one level deep (BASE[NAME=VALUE,...])"
            ));
        }
    }
    if depth != 0 {
        return Err(format!("--transports '{s}': a '[' is not closed"));
    }
    out.push(&s[start..]);
    Ok(out)
}

/// Parses one `[LABEL:]BASE[NAME=VALUE,...]`. A piece between commas with no '=' continues
/// the value before it, so that values holding commas pass (`btl_rc_receive_queues=S,256,64`).
pub fn parse_one(spec: &str) -> Result<Transport, String> {
    let form = "[LABEL:]BASE[NAME=VALUE,...]";
    let bad = |why: String| {
        format!(
            "transport '{spec}': {why}; the form is {form}, BASE one of {}",
            base_names()
        )
    };
    let spec = spec.trim();
    let (head, settings) = match spec.find('[') {
        Some(i) => {
            let rest = &spec[i + 1..];
            let inner = rest
                .strip_suffix(']')
                .ok_or_else(|| bad("text after ']'".into()))?;
            (&spec[..i], Some(inner))
        }
        None => (spec, None),
    };
    let (label, name) = match head.split_once(':') {
        Some((l, n)) => {
            if l.is_empty()
                || !l
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-_.".contains(c))
            {
                return Err(bad(format!(
                    "label '{l}' must be letters, digits, '+', '-', '_' or '.'"
                )));
            }
            (Some(l.to_owned()), n)
        }
        None => (None, head),
    };
    let (base_name, base_mca, runner, clean) = match base(name) {
        Some(b) => (
            b.name.to_owned(),
            b.mca
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            b.runner,
            b.clean,
        ),
        None => match any_pml(name) {
            Some(mca) => (name.to_owned(), mca, Runner::Rmca, ""),
            None => return Err(bad(format!("unknown base transport '{name}'"))),
        },
    };
    let mut extra: Vec<(String, String)> = Vec::new();
    if let Some(inner) = settings {
        if inner.trim().is_empty() {
            return Err(bad("empty brackets".into()));
        }
        for piece in inner.split(',') {
            match piece.split_once('=') {
                Some((k, v)) => {
                    let k = k.trim();
                    if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                        return Err(bad(format!("'{k}' is not a parameter name")));
                    }
                    if extra.iter().any(|(n, _)| n == k) {
                        return Err(bad(format!("{k} is set twice")));
                    }
                    if k == "pml" || k == "btl" {
                        return Err(bad(format!(
                            "{k} is chosen by BASE, not set (choose another BASE)"
                        )));
                    }
                    extra.push((k.to_owned(), v.trim().to_owned()));
                }
                None => match extra.last_mut() {
                    Some((_, v)) => {
                        v.push(',');
                        v.push_str(piece.trim());
                    }
                    None => return Err(bad(format!("'{piece}' is not NAME=VALUE"))),
                },
            }
        }
        if runner != Runner::Rmca {
            return Err(bad(format!(
                "{name} is a peer implementation: settings apply to rmca's transports only"
            )));
        }
    }
    Ok(Transport {
        label: label.unwrap_or_else(|| spec.to_owned()),
        spec: spec.to_owned(),
        base: base_name,
        base_mca,
        runner,
        extra,
        clean,
    })
}

/// Parses `--transports`: labels must differ.
pub fn parse_list(s: &str) -> Result<Vec<Transport>, String> {
    let mut out: Vec<Transport> = Vec::new();
    for one in split_top(s)? {
        let t = parse_one(one)?;
        if out.iter().any(|o| o.label == t.label) {
            return Err(format!(
                "--transports: '{}' appears twice (give variants different LABEL:)",
                t.label
            ));
        }
        out.push(t);
    }
    Ok(out)
}

/// Resolves an rmca transport's settings as a job's init would: every name must be a
/// parameter of a component of this build, every value valid for it, and pml dr's parameters
/// consistent with each other.
pub fn check_settings(t: &Transport) -> Result<(), String> {
    resolve(t).map(|_| ())
}

/// The values of the timeouts that decide how fast a dead link or peer is noticed, as the
/// job's components will read them (`name: value` of every pml_dr_* parameter that bounds
/// detection or failover; for other transports, what their BTL relies on).
pub fn configured_timeouts(
    t: &Transport,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let mut m = serde_json::Map::new();
    let Some(store) = resolve(t)? else {
        return Ok(m);
    };
    if t.mca().iter().any(|(k, v)| k == "pml" && v == "dr") {
        for name in [
            "pml_dr_peer_timeout",
            "pml_dr_btl_retries",
            "pml_dr_btl_fail_silence",
            "pml_dr_rto_min_us",
            "pml_dr_rto_max_us",
        ] {
            if let Ok(v) = store.get_int(name) {
                m.insert(name.into(), v.into());
            }
        }
    } else if t.base.ends_with("+rc") {
        // Soft RC is TCP: a dead link is noticed when TCP gives up retransmitting.
        if let Ok(v) = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_retries2") {
            m.insert(
                "tcp_retries2".into(),
                v.trim().parse::<i64>().unwrap_or(-1).into(),
            );
        }
    }
    Ok(m)
}

/// The parameter store an rmca transport's job will resolve (None for the peers).
fn resolve(t: &Transport) -> Result<Option<rmca_framework::params::ParamStore>, String> {
    if t.runner != Runner::Rmca {
        return Ok(None);
    }
    rmca::link_builtin_components();
    let mca = t.mca();
    let cmdline = mca
        .iter()
        .map(|(name, value)| RawSetting {
            name: name.clone(),
            value: value.clone(),
            source: Source::CommandLine,
        })
        .collect();
    let e = |x: String| format!("transport '{}': {x}", t.spec);
    let raw =
        RawSources::from_parts(None, None, false, vec![], cmdline).map_err(|x| e(x.to_string()))?;
    let reg = Registry::discover(&raw);
    let store = reg.resolve(&raw).map_err(|x| e(x.to_string()))?;
    reg.check_selectors(&store).map_err(|x| e(x.to_string()))?;
    if mca.iter().any(|(k, v)| k == "pml" && v == "dr") {
        rmca_pml_dr::config_from_params(&store).map_err(|x| e(x.to_string()))?;
    }
    Ok(Some(store))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_with_settings_and_labels() {
        let t = parse_list("dr+ud,w8:dr+ud[pml_dr_window=8,btl_rc_receive_queues=S,256,64],mpich")
            .unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!((t[0].label.as_str(), t[0].extra.len()), ("dr+ud", 0));
        assert_eq!(t[1].label, "w8");
        assert_eq!(
            t[1].extra,
            vec![
                ("pml_dr_window".into(), "8".into()),
                ("btl_rc_receive_queues".into(), "S,256,64".into())
            ]
        );
        assert_eq!(t[1].mca()[0], ("pml".into(), "dr".into()));
        assert_eq!(t[2].runner, Runner::Mpich);
        let u = parse_one("dr+ud[pml_dr_window=8]").unwrap();
        assert_eq!(u.label, "dr+ud[pml_dr_window=8]");
        assert_eq!(u.file_label(), "dr+ud_pml_dr_window_8_");
    }

    #[test]
    fn bad_specs_are_refused_naming_what_is_valid() {
        for (bad, want) in [
            ("tcp", "unknown base transport 'tcp'"),
            ("dr+ud[pml_dr_window=8", "not closed"),
            ("dr+ud[a=[1]]", "one level deep"),
            ("dr+ud[]", "empty brackets"),
            ("dr+ud[8]", "'8' is not NAME=VALUE"),
            ("dr+ud[pml=ob1]", "chosen by BASE"),
            ("dr+ud[pml_dr_window=8,pml_dr_window=4]", "set twice"),
            ("mpich[x=1]", "peer implementation"),
            ("a b:dr+ud", "label 'a b'"),
            ("dr+ud[pml_dr_window=8]x", "text after ']'"),
            ("dr+ud,dr+ud", "appears twice"),
        ] {
            let e = parse_list(bad).expect_err(bad);
            assert!(e.contains(want), "{bad}: {e}");
            if want.starts_with("unknown") {
                assert!(e.contains("dr+ud, dr+rc, ob1+rc"), "{e}");
            }
        }
    }

    #[test]
    fn any_other_pml_is_a_base_over_ud_or_rc() {
        let t = parse_one("sw:sw+ud[component_path=/opt/pmls,pml_sw_window=8]").unwrap();
        assert_eq!((t.label.as_str(), t.base.as_str()), ("sw", "sw+ud"));
        assert_eq!(t.runner, Runner::Rmca);
        assert_eq!(t.pml(), Some("sw"));
        let mca = t.mca();
        assert_eq!(mca[0], ("pml".into(), "sw".into()));
        assert!(mca.contains(&("btl".into(), "ud,self".into())), "{mca:?}");
        assert!(mca.contains(&("component_path".into(), "/opt/pmls".into())));
        let r = parse_one("x2+rc").unwrap();
        assert!(r.mca().contains(&("btl".into(), "rc,self".into())));
        // The fixed bases keep their own settings (ob1+ud allows unreliable BTLs).
        let o = parse_one("ob1+ud").unwrap();
        assert!(o.mca().iter().any(|(k, _)| k == "pml_ob1_unreliable_btls"));
        assert_eq!(parse_one("mpich").unwrap().pml(), None);
        for bad in ["sw+tcp", "Sw+ud", "+ud", "sw+"] {
            let e = parse_one(bad).expect_err(bad);
            assert!(
                e.contains("unknown base transport") && e.contains("PML+ud"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_pml_the_runtime_cannot_select_is_refused_by_the_registry() {
        let e = check_settings(&parse_one("nosuch+ud").unwrap()).expect_err("nosuch");
        assert!(e.contains("nosuch") && e.contains("ob1"), "{e}");
        // A component_path that does not exist is the registry's error too.
        let e = check_settings(&parse_one("sw+ud[component_path=/nonexistent/rmca]").unwrap())
            .expect_err("no plugin");
        assert!(e.contains("sw"), "{e}");
    }

    #[test]
    fn settings_are_checked_by_the_components_own_code() {
        let ok = parse_one("dr+ud[pml_dr_window=8]").unwrap();
        check_settings(&ok).unwrap();
        let c =
            configured_timeouts(&parse_one("dr+ud[pml_dr_peer_timeout=3000]").unwrap()).unwrap();
        assert_eq!(c["pml_dr_peer_timeout"], 3000);
        assert!(c.contains_key("pml_dr_btl_fail_silence"), "{c:?}");
        for (spec, want) in [
            (
                "dr+ud[pml_dr_windw=8]",
                "unknown MCA parameter 'pml_dr_windw'",
            ),
            ("dr+ud[pml_dr_window=0]", "pml_dr_window"),
            ("dr+ud[pml_dr_window=many]", "expected an integer"),
        ] {
            let e = check_settings(&parse_one(spec).unwrap()).expect_err(spec);
            assert!(e.contains(want) && e.contains(spec), "{spec}: {e}");
        }
    }
}
