//! rmca-info end to end: the binary as a user runs it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Run rmca-info with a clean MCA environment plus `env`.
fn info(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rmca-info"));
    cmd.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("RMCA_") {
            cmd.env_remove(k);
        }
    }
    // No user file from the developer's home.
    cmd.env("HOME", std::env::temp_dir().join("rmca-info-test-home"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn temp_file(tag: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("rmca-info-{}-{tag}.toml", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn lists_builtin_components_with_version_and_origin() {
    let o = info(&[], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for c in ["btl: self", "btl: shm", "mpool: default", "rcache: lru"] {
        assert!(out.contains(c), "missing {c} in\n{out}");
    }
    assert!(out.contains("built-in"));
    let p = stdout(&info(&["--parsable"], &[]));
    assert!(
        p.lines().any(|l| l == "mca:btl:self:origin:built-in"),
        "{p}"
    );
    assert!(
        p.lines().any(|l| l.starts_with("mca:btl:shm:version:")),
        "{p}"
    );
}

#[test]
fn param_listing_shows_value_source_type_range_and_help() {
    let out = stdout(&info(&["--param", "rcache", "lru"], &[]));
    assert!(out.contains("rcache_lru_max_entries = 1024"), "{out}");
    assert!(out.contains("source: default"), "{out}");
    assert!(
        out.contains("type: int, an integer in 0..=16777216; level: tuning"),
        "{out}"
    );
    assert!(out.contains("Registrations kept per BTL module"), "{out}");
}

#[test]
fn every_source_is_reported() {
    let sys = temp_file("sys", "rcache_lru_max_entries = 7\n");
    let user = temp_file("user", "\n\nrcache_lru_max_entries = 8\n");
    let sys_s = sys.to_str().unwrap();
    let user_s = user.to_str().unwrap();
    let q = |args: &[&str], env: &[(&str, &str)]| {
        let mut a = vec!["--param", "rcache", "lru", "--parsable"];
        a.extend_from_slice(args);
        stdout(&info(&a, env))
    };
    let only_sys = q(&[], &[("RMCA_SYSTEM_PARAM_FILE", sys_s)]);
    assert!(
        only_sys.contains(":value:7\n")
            && only_sys.contains(&format!(":source:system file {sys_s}:1\n")),
        "{only_sys}"
    );
    let user_too = q(
        &[],
        &[
            ("RMCA_SYSTEM_PARAM_FILE", sys_s),
            ("RMCA_PARAM_FILE", user_s),
        ],
    );
    assert!(
        user_too.contains(":value:8\n")
            && user_too.contains(&format!(":source:user file {user_s}:3\n")),
        "{user_too}"
    );
    let env = q(
        &[],
        &[
            ("RMCA_PARAM_FILE", user_s),
            ("RMCA_MCA_rcache_lru_max_entries", "9"),
        ],
    );
    assert!(
        env.contains(":value:9\n")
            && env.contains(":source:environment variable RMCA_MCA_rcache_lru_max_entries\n"),
        "{env}"
    );
    let cli = q(
        &["--mca", "rcache_lru_max_entries", "10"],
        &[("RMCA_MCA_rcache_lru_max_entries", "9")],
    );
    assert!(
        cli.contains(":value:10\n") && cli.contains(":source:command line (--mca)\n"),
        "{cli}"
    );
    std::fs::remove_file(sys).unwrap();
    std::fs::remove_file(user).unwrap();
}

#[test]
fn unknown_parameter_is_an_error_with_suggestion() {
    let o = info(&[], &[("RMCA_MCA_rcache_lru_max_entrie", "3")]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("unknown MCA parameter 'rcache_lru_max_entrie'"),
        "{e}"
    );
    assert!(
        e.contains("environment variable RMCA_MCA_rcache_lru_max_entrie"),
        "{e}"
    );
    assert!(e.contains("did you mean 'rcache_lru_max_entries'?"), "{e}");
}

#[test]
fn bad_value_names_source_and_valid_range() {
    let o = info(&["--mca", "rcache_lru_max_entries", "-5"], &[]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("invalid value '-5' for MCA parameter 'rcache_lru_max_entries' (set by command line (--mca)): expected an integer in 0..=16777216"), "{e}");
}

#[test]
fn unknown_component_in_selector_lists_valid_ones() {
    let o = info(&["--mca", "btl", "shm,sefl"], &[]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("unknown btl component 'sefl'"), "{e}");
    assert!(e.contains("did you mean 'self'?"), "{e}");
    assert!(e.contains("valid components:") && e.contains("shm"), "{e}");
    let mixed = stderr(&info(&["--mca", "btl", "shm,^self"], &[]));
    assert!(mixed.contains("mixes included and excluded"), "{mixed}");
}

#[test]
fn unknown_names_in_param_query_are_errors() {
    let e = stderr(&info(&["--param", "btll", "all"], &[]));
    assert!(e.contains("unknown framework 'btll'"), "{e}");
    let e = stderr(&info(&["--param", "btl", "shn"], &[]));
    assert!(
        e.contains("unknown btl component 'shn'") && e.contains("did you mean 'shm'?"),
        "{e}"
    );
}

#[test]
fn level_filter_hides_higher_levels_only_when_asked() {
    let all = stdout(&info(&["--param", "all", "all"], &[]));
    let basic = stdout(&info(&["--param", "all", "all", "--level", "basic"], &[]));
    assert!(all.contains("rcache_lru_max_entries"));
    assert!(
        !basic.contains("rcache_lru_max_entries"),
        "tuning parameter shown at level basic"
    );
    assert!(basic.contains("component_path"));
}

#[test]
fn shipped_mca_params_toml_documents_every_parameter() {
    let shipped = std::fs::read_to_string(repo_root().join("mca-params.toml")).unwrap();
    let generated = stdout(&info(&["--defaults-toml"], &[]));
    assert!(
        shipped == generated,
        "mca-params.toml is out of date: regenerate with `cargo run -p rmca-info -- --defaults-toml > mca-params.toml`"
    );
    // And it parses as the system file: every line commented, so nothing is set.
    let o = info(
        &["--param", "all", "all", "--parsable"],
        &[(
            "RMCA_SYSTEM_PARAM_FILE",
            repo_root().join("mca-params.toml").to_str().unwrap(),
        )],
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn options_take_both_spellings_and_bad_ones_name_what_is_valid() {
    // Open MPI's `-mca`, and `--opt=value` as well as `--opt value`.
    let o = info(
        &[
            "-mca",
            "btl_ud_mtu",
            "1024",
            "--level=basic",
            "--param",
            "btl",
            "ud",
            "--parsable",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.contains("btl_ud_mtu:source:command line"), "{out}");
    assert!(
        !out.contains("btl_ud_qkey"),
        "a dev-level parameter under --level basic: {out}"
    );
    let o = info(&["--level", "expert"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("valid levels are basic, tuning, dev"),
        "{}",
        stderr(&o)
    );
    let o = info(&["--frobnicate"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--frobnicate"), "{}", stderr(&o));
}
