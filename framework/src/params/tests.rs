use std::path::{Path, PathBuf};

use super::*;

fn specs() -> Vec<ParamSpec> {
    let mut v = Vec::new();
    let mut r = ParamRegistrar::new("btl", "ud", &mut v);
    r.add(Param::int("send_qps", 4).range(1, 64).help("send QPs"));
    r.add(Param::size("mtu", 2048).range(256, 65536));
    r.add(Param::bool("inline", true));
    r.add(Param::enumeration(
        "mode",
        "rr",
        &["rr", "binding", "striping"],
    ));
    r.add(Param::list("devices", &["rxe0"]));
    r.add(Param::string("label", "x"));
    v
}

struct Tmp(PathBuf);
impl Tmp {
    fn new(tag: &str, text: &str) -> Self {
        let p = std::env::temp_dir().join(format!("rmca-params-{}-{tag}.toml", std::process::id()));
        std::fs::write(&p, text).unwrap();
        Tmp(p)
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn cli(name: &str, value: &str) -> RawSetting {
    RawSetting {
        name: name.into(),
        value: value.into(),
        source: Source::CommandLine,
    }
}

fn env(name: &str, value: &str) -> (String, String) {
    (format!("RMCA_MCA_{name}"), value.into())
}

/// Which source sets `btl_ud_send_qps`, with one value per layer present.
fn winner(system: Option<&str>, user: Option<&str>, e: Option<&str>, c: Option<&str>) -> (i64, u8) {
    let sys = system.map(|v| Tmp::new("sys", &format!("# comment\nbtl_ud_send_qps = {v}\n")));
    let usr = user.map(|v| Tmp::new("usr", &format!("btl_ud_send_qps = {v}\n")));
    let envs = e
        .map(|v| vec![env("btl_ud_send_qps", v)])
        .unwrap_or_default();
    let cl = c
        .map(|v| vec![cli("btl_ud_send_qps", v)])
        .unwrap_or_default();
    let raw = RawSources::from_parts(
        sys.as_ref().map(|t| t.0.as_path()),
        usr.as_ref().map(|t| t.0.as_path()),
        false,
        envs,
        cl,
    )
    .unwrap();
    let store = ParamStore::resolve(specs(), &raw).unwrap();
    let e = store.entry("btl_ud_send_qps").unwrap();
    (
        store.get_int("btl_ud_send_qps").unwrap(),
        e.source.precedence(),
    )
}

#[test]
fn default_when_nothing_set() {
    assert_eq!(winner(None, None, None, None), (4, 0));
}

#[test]
fn every_precedence_pair() {
    // Layers in increasing precedence; for each pair (lo, hi) the higher one wins, whichever
    // other layers are absent.
    let vals = ["11", "12", "13", "14"];
    for lo in 0..4 {
        for hi in lo + 1..4 {
            let mut set: [Option<&str>; 4] = [None; 4];
            set[lo] = Some(vals[lo]);
            set[hi] = Some(vals[hi]);
            let (v, p) = winner(set[0], set[1], set[2], set[3]);
            assert_eq!(v, 11 + hi as i64, "layer {hi} must beat layer {lo}");
            assert_eq!(p as usize, hi + 1);
        }
        // A single layer beats the default.
        let mut set: [Option<&str>; 4] = [None; 4];
        set[lo] = Some(vals[lo]);
        assert_eq!(winner(set[0], set[1], set[2], set[3]).0, 11 + lo as i64);
    }
    // All four at once: the command line wins.
    assert_eq!(
        winner(Some("11"), Some("12"), Some("13"), Some("14")),
        (14, 4)
    );
}

#[test]
fn source_reports_file_and_line() {
    let t = Tmp::new(
        "line",
        "\n\n# the qps\nbtl_ud_send_qps = 8\nbtl_ud_inline = false\n",
    );
    let raw = RawSources::from_parts(None, Some(&t.0), true, vec![], vec![]).unwrap();
    let store = ParamStore::resolve(specs(), &raw).unwrap();
    let e = store.entry("btl_ud_send_qps").unwrap();
    assert_eq!(
        e.source,
        Source::UserFile {
            path: t.0.clone(),
            line: 4
        }
    );
    assert!(e.source.to_string().ends_with(":4"), "{}", e.source);
    assert!(!store.get_bool("btl_ud_inline").unwrap());
}

#[test]
fn launcher_forwarded_flags_are_command_line_and_beat_env() {
    let envs = vec![
        env("btl_ud_send_qps", "5"),
        (
            CMDLINE_ENV.into(),
            encode_cmdline(&[("btl_ud_send_qps".into(), "9".into())]),
        ),
    ];
    let raw = RawSources::from_parts(None, None, false, envs, vec![]).unwrap();
    let store = ParamStore::resolve(specs(), &raw).unwrap();
    let e = store.entry("btl_ud_send_qps").unwrap();
    assert_eq!(
        (store.get_int("btl_ud_send_qps").unwrap(), &e.source),
        (9, &Source::CommandLine)
    );
}

#[test]
fn a_forwarded_flag_exported_to_the_environment_too_is_one_setting() {
    let envs = vec![
        env("btl_ud_sendqps", "9"),
        (CMDLINE_ENV.into(), "btl_ud_sendqps=9\n".into()),
    ];
    let raw = RawSources::from_parts(None, None, false, envs, vec![]).unwrap();
    let errs = errors(raw);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0]
            .to_string()
            .contains("(set by command line (--mca))"),
        "{}",
        errs[0]
    );
}

fn errors(raw: RawSources) -> Vec<ParamError> {
    ParamStore::resolve(specs(), &raw).unwrap_err()
}

#[test]
fn unknown_name_from_env_names_var_and_suggests() {
    let raw = RawSources::from_parts(None, None, false, vec![env("btl_ud_send_qp", "2")], vec![])
        .unwrap();
    let msg = errors(raw)[0].to_string();
    assert!(
        msg.contains("unknown MCA parameter 'btl_ud_send_qp'"),
        "{msg}"
    );
    assert!(
        msg.contains("environment variable RMCA_MCA_btl_ud_send_qp"),
        "{msg}"
    );
    assert!(msg.contains("did you mean 'btl_ud_send_qps'?"), "{msg}");
}

#[test]
fn unknown_name_from_file_names_file_and_line() {
    let t = Tmp::new("unk", "btl_ud_inline = true\nbtl_ud_mut = 1024\n");
    let raw = RawSources::from_parts(Some(&t.0), None, false, vec![], vec![]).unwrap();
    let msg = errors(raw)[0].to_string();
    assert!(
        msg.contains(&format!("system file {}:2", t.0.display())),
        "{msg}"
    );
    assert!(msg.contains("did you mean 'btl_ud_mtu'?"), "{msg}");
}

#[test]
fn unknown_name_far_from_everything_has_no_suggestion() {
    let raw = RawSources::from_parts(
        None,
        None,
        false,
        vec![],
        vec![cli("zzzz_completely_else", "1")],
    )
    .unwrap();
    let msg = errors(raw)[0].to_string();
    assert!(
        msg.contains("command line (--mca)") && !msg.contains("did you mean"),
        "{msg}"
    );
}

#[test]
fn ill_typed_values_say_what_is_valid() {
    let cases = [
        ("btl_ud_send_qps", "0", "an integer in 1..=64"),
        ("btl_ud_send_qps", "four", "an integer in 1..=64"),
        ("btl_ud_mtu", "1T", "a size in 256..=64K"),
        ("btl_ud_mtu", "128", "a size in 256..=64K"),
        ("btl_ud_inline", "maybe", "true or false"),
        (
            "btl_ud_mode",
            "bindng",
            "one of rr, binding, striping (did you mean 'binding'?)",
        ),
    ];
    for (name, value, expected) in cases {
        let raw =
            RawSources::from_parts(None, None, false, vec![], vec![cli(name, value)]).unwrap();
        let msg = errors(raw)[0].to_string();
        assert!(
            msg.contains(&format!(
                "invalid value '{value}' for MCA parameter '{name}'"
            )),
            "{msg}"
        );
        assert!(msg.contains("(set by command line (--mca))"), "{msg}");
        assert!(msg.contains(expected), "{msg} should contain {expected}");
    }
}

#[test]
fn all_errors_are_reported_together() {
    let raw = RawSources::from_parts(
        None,
        None,
        false,
        vec![env("btl_ud_inline", "x")],
        vec![cli("nope", "1")],
    )
    .unwrap();
    assert_eq!(errors(raw).len(), 2);
}

#[test]
fn sizes_and_lists_parse() {
    assert_eq!(parse_size("64K"), Some(65536));
    assert_eq!(parse_size("2m"), Some(2 << 20));
    assert_eq!(parse_size("1GiB"), Some(1 << 30));
    assert_eq!(parse_size("12"), Some(12));
    assert_eq!(parse_size("K"), None);
    assert_eq!(parse_size("-1"), None);
    assert_eq!(
        parse_size("99999999999999999G"),
        None,
        "overflow is an error, not a wrap"
    );
    assert_eq!(format_size(65536), "64K");
    assert_eq!(format_size(1000), "1000");
    let raw = RawSources::from_parts(
        None,
        None,
        false,
        vec![],
        vec![cli("btl_ud_devices", " a, b ,,c ")],
    )
    .unwrap();
    let s = ParamStore::resolve(specs(), &raw).unwrap();
    assert_eq!(s.get_list("btl_ud_devices").unwrap(), ["a", "b", "c"]);
}

#[test]
fn file_arrays_become_lists_and_tables_are_refused() {
    let t = Tmp::new("arr", "btl_ud_devices = [\"mlx5_0\", \"mlx5_1\"]\n");
    let raw = RawSources::from_parts(None, Some(&t.0), true, vec![], vec![]).unwrap();
    let s = ParamStore::resolve(specs(), &raw).unwrap();
    assert_eq!(s.get_list("btl_ud_devices").unwrap(), ["mlx5_0", "mlx5_1"]);
    let bad = parse_param_file("[btl]\nud = 1\n", Path::new("f.toml"), false)
        .unwrap_err()
        .to_string();
    assert!(
        bad.contains("f.toml") && bad.contains("no [sections]"),
        "{bad}"
    );
    let syntax = parse_param_file("btl_ud_mtu = = 3\n", Path::new("g.toml"), false)
        .unwrap_err()
        .to_string();
    assert!(syntax.contains("g.toml"), "{syntax}");
}

#[test]
fn missing_explicit_user_file_is_an_error() {
    let err = RawSources::from_parts(
        None,
        Some(Path::new("/nonexistent/rmca.toml")),
        true,
        vec![],
        vec![],
    )
    .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/rmca.toml"));
    // The implicit ~/.rmca file may be absent.
    assert!(RawSources::from_parts(
        None,
        Some(Path::new("/nonexistent/rmca.toml")),
        false,
        vec![],
        vec![]
    )
    .is_ok());
}

#[test]
fn dangling_mca_flag_is_an_error() {
    let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(cmdline_settings(&args(&["--mca", "btl"]))
        .unwrap_err()
        .contains("--mca btl needs a value"));
    let (s, rest) = cmdline_settings(&args(&["-n", "2", "--mca", "btl", "self", "prog"])).unwrap();
    assert_eq!((s.len(), rest), (1, args(&["-n", "2", "prog"])));
}

#[test]
fn selectors() {
    let avail = ["self", "shm", "ud", "rc"];
    let src = Source::CommandLine;
    assert_eq!(
        Selector::parse("btl", "", &src, &avail).unwrap(),
        Selector::All
    );
    let inc = Selector::parse("btl", "ud,self", &src, &avail).unwrap();
    assert!(inc.allows("ud") && !inc.allows("shm") && inc.explicitly_includes("self"));
    let exc = Selector::parse("btl", "^rc,ud", &src, &avail).unwrap();
    assert!(!exc.allows("rc") && !exc.allows("ud") && exc.allows("shm"));
    assert_eq!(
        Selector::parse("btl", "^rc,^ud", &src, &avail).unwrap(),
        exc
    );
    let mixed = Selector::parse("btl", "ud,^rc", &src, &avail)
        .unwrap_err()
        .to_string();
    assert!(mixed.contains("mixes included and excluded"), "{mixed}");
    let unk = Selector::parse("btl", "ud,sefl", &src, &avail)
        .unwrap_err()
        .to_string();
    assert!(unk.contains("unknown btl component 'sefl'"), "{unk}");
    assert!(unk.contains("valid components: self, shm, ud, rc"), "{unk}");
    assert!(unk.contains("did you mean 'self'?"), "{unk}");
}

#[test]
fn edit_distance_handles_transpositions() {
    assert_eq!(edit_distance("sefl", "self"), 1);
    assert_eq!(edit_distance("", "abc"), 3);
    assert_eq!(
        nearest("btl_ud_sendqps", ["btl_ud_send_qps", "btl_rc_send_wqes"]),
        Some("btl_ud_send_qps".into())
    );
}

#[test]
fn duplicate_registration_is_an_error() {
    let mut v = specs();
    v.push(v[0].clone());
    let errs = ParamStore::resolve(v, &RawSources::default()).unwrap_err();
    assert_eq!(errs, vec![ParamError::Duplicate("btl_ud_send_qps".into())]);
}

#[test]
fn job_wide_settings_list_only_job_wide_parameters() {
    let mut specs = Vec::new();
    let mut r = ParamRegistrar::new("pml", "xx", &mut specs);
    r.add(Param::int("vfrag", 8).job_wide());
    r.add(Param::int("window", 4));
    r.add(Param::string("mode", "fast").job_wide());
    let raw = RawSources::from_parts(
        None,
        None,
        false,
        vec![("RMCA_MCA_pml_xx_vfrag".into(), "16".into())],
        vec![],
    )
    .unwrap();
    let store = ParamStore::resolve(specs, &raw).unwrap();
    assert_eq!(
        store.job_wide_settings(),
        "pml_xx_mode=fast\npml_xx_vfrag=16\n"
    );
}

#[test]
fn job_wide_disagreements_name_parameter_ranks_and_values() {
    let mine = "a=1\nb=x\n";
    let same = (1, mine.to_owned());
    assert!(job_wide_disagreements(0, mine, std::slice::from_ref(&same)).is_empty());
    let theirs = [same, (2, "a=2\nb=x\n".to_owned()), (3, "a=1\n".to_owned())];
    assert_eq!(
        job_wide_disagreements(0, mine, &theirs),
        [
            "a: rank 0 has 1, rank 2 has 2".to_owned(),
            "b: rank 0 has x, rank 3 has <unset>".to_owned()
        ]
    );
}

#[test]
fn settings_name_the_line_their_key_is_on() {
    // A key's name also appears earlier, inside a multi-line string: the setting's line is
    // where the parser found the key, not the first line that looks like it.
    let text =
        "# rmca parameters\nbtl_ud_devices = \"\"\"\nbtl = \"x\"\n\"\"\"\n\n\"btl\" = \"tcp\"\n";
    let raw = parse_param_file(text, Path::new("f.toml"), false).unwrap();
    let line_of = |name: &str| match &raw.iter().find(|s| s.name == name).unwrap().source {
        Source::UserFile { line, .. } => *line,
        other => panic!("{other:?}"),
    };
    assert_eq!(line_of("btl_ud_devices"), 2);
    assert_eq!(line_of("btl"), 6);
}
