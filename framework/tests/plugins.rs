//! Plugin loading end to end: the real btl-tcp plugin (`plugins/btl-tcp`, a cdylib) is loaded
//! from a directory on `component_path`, listed, configured and used to move a message between
//! two in-process ranks, and between two processes (this test binary re-run as rank 1) until
//! rank 1 dies without a goodbye and is reported failed; C-built impostors are refused one
//! differing field at a time, and the job goes on without them unless the user asked for one by
//! name.
//!
//! Finding the plugin: `RMCA_BTL_TCP_PLUGIN=<path to librmca_btl_tcp.so>` is used as is when
//! set. Otherwise the test runs `$CARGO build -p rmca-btl-tcp --lib` into the target directory
//! and profile this test binary was built in (derived from its own path,
//! `<target>[/<triple>]/<profile>/deps/`, so `CARGO_TARGET_DIR`, `--release`, `--profile` and
//! `--target` are all followed), then takes `<target>[/<triple>]/<profile>/librmca_btl_tcp.so`:
//! the plugin is always as fresh as the test. The C cases need a C compiler (`$CC`, else `cc`;
//! Debian package gcc): without one they skip themselves with a message, or fail under
//! `RMCA_TESTS_REQUIRE=1` / `CI=true` ([`rmca_test_support::skip_or_fail`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rmca_framework::btl::{Btl, BtlEvents, CompletionToken, ModexRead, SendError, SendHint};
use rmca_framework::component::{ComponentRef, Framework, InitContext, Origin};
use rmca_framework::job::JobInfo;
use rmca_framework::memory::MemoryAccounting;
use rmca_framework::modex::{LocalModex, ModexWrite};
use rmca_framework::params::{ParamStore, RawSetting, RawSources, Source};
use rmca_framework::plugin::{
    PluginError, FRAMEWORK_API_VERSION, PLUGIN_ABI_VERSION, RUSTC_VERSION,
};
use rmca_framework::registry::{McaError, Registry};
use rmca_test_support::skip_or_fail;

const PLUGIN_FILE: &str = "librmca_btl_tcp.so";

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("rmca-plugins-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        Self(p)
    }
    fn path(&self) -> &Path {
        &self.0
    }
    fn as_str(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `(target dir, profile dir name, target triple if cross-compiled)` of this test binary.
fn build_layout() -> (PathBuf, String, Option<String>) {
    let exe = std::env::current_exe().expect("current_exe");
    // <target>[/<triple>]/<profile>/deps/<test binary>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary in <profile>/deps");
    let profile = profile_dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let above = profile_dir.parent().expect("profile dir has a parent");
    // Cargo marks the root of every target directory with CACHEDIR.TAG.
    if above.join("CACHEDIR.TAG").exists() {
        return (above.to_path_buf(), profile, None);
    }
    let triple = above.file_name().unwrap().to_string_lossy().into_owned();
    let root = above
        .parent()
        .expect("target dir above the triple dir")
        .to_path_buf();
    (root, profile, Some(triple))
}

/// The built btl-tcp plugin (built once per test process).
fn tcp_plugin() -> &'static Path {
    static PLUGIN: OnceLock<PathBuf> = OnceLock::new();
    PLUGIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("RMCA_BTL_TCP_PLUGIN") {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "RMCA_BTL_TCP_PLUGIN={} is not a file",
                p.display()
            );
            return p;
        }
        let (target_dir, profile, triple) = build_layout();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(&workspace)
            .args([
                "build",
                "--quiet",
                "-p",
                "rmca-btl-tcp",
                "--lib",
                "--target-dir",
            ])
            .arg(&target_dir);
        match profile.as_str() {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        if let Some(t) = &triple {
            cmd.args(["--target", t]);
        }
        let status = cmd
            .status()
            .unwrap_or_else(|e| panic!("running {cargo}: {e}"));
        assert!(status.success(), "{cmd:?} failed ({status})");
        let mut dir = target_dir;
        if let Some(t) = &triple {
            dir.push(t);
        }
        let p = dir.join(&profile).join(PLUGIN_FILE);
        assert!(
            p.is_file(),
            "{cmd:?} succeeded but {} does not exist",
            p.display()
        );
        p
    })
}

fn raw(settings: &[(&str, &str)]) -> RawSources {
    RawSources {
        settings: settings
            .iter()
            .map(|(n, v)| RawSetting {
                name: (*n).into(),
                value: (*v).into(),
                source: Source::CommandLine,
            })
            .collect(),
    }
}

#[derive(Default)]
struct Sink {
    got: Vec<(u32, u8, Vec<u8>)>,
    failed: Vec<(u32, String)>,
}

impl BtlEvents for Sink {
    fn recv(&mut self, peer: u32, tag: u8, data: &[u8]) {
        self.got.push((peer, tag, data.to_vec()));
    }
    fn rdma_complete(&mut self, _token: CompletionToken, _result: Result<(), SendError>) {}
    fn peer_failed(&mut self, peer: u32, reason: &str) {
        self.failed.push((peer, reason.to_owned()));
    }
}

fn job(rank: u32) -> JobInfo {
    JobInfo {
        rank,
        size: 2,
        job_id: format!("plugintest{}", std::process::id()),
        secret: b"plugin-test-secret".to_vec(),
        node_of: vec![0, 0],
        node_names: vec!["localhost".into()],
    }
}

#[test]
fn tcp_plugin_loads_lists_params_and_carries_messages() {
    let dir = TempDir::new("tcp");
    let so = dir.path().join(PLUGIN_FILE);
    std::fs::copy(tcp_plugin(), &so).expect("copy plugin");

    let sources = raw(&[
        ("component_path", dir.as_str()),
        ("btl_tcp_eager_limit", "2048"),
    ]);
    let reg = Registry::discover(&sources);
    assert!(reg.refused().is_empty(), "refused: {:?}", reg.refused());
    let tcp = reg.find(Framework::Btl, "tcp").expect("tcp is listed");
    assert_eq!(tcp.origin, Origin::Plugin(so.clone()));
    assert_eq!(tcp.meta().name, "tcp");

    // Its parameters are declared and settable like a built-in's.
    let specs = reg.param_specs();
    for name in [
        "btl_tcp_if_addr",
        "btl_tcp_eager_limit",
        "btl_tcp_max_send_size",
        "btl_tcp_max_pending",
    ] {
        assert!(
            specs.iter().any(|s| s.name == name),
            "{name} missing from param_specs"
        );
    }
    let params: ParamStore = reg.resolve(&sources).expect("resolve");
    assert_eq!(params.get_size("btl_tcp_eager_limit").unwrap(), 2048);

    // The default selector selects it.
    let btls = reg.select_btls(&params).expect("select_btls");
    let comp = btls
        .iter()
        .find(|b| b.meta().name == "tcp")
        .copied()
        .expect("tcp selected");
    let ComponentRef::Btl(same) = tcp.component else {
        panic!("tcp is not a BTL")
    };
    assert!(std::ptr::addr_eq(comp, same));

    // Two in-process ranks built from the plugin's component exchange a message.
    let modex = LocalModex::new();
    let mem = MemoryAccounting::new();
    let jobs = [job(0), job(1)];
    let mut modules: Vec<Box<dyn Btl>> = jobs
        .iter()
        .map(|j| {
            let mut w = modex.writer(j.rank);
            let mut ctx = InitContext::new(j, &params, &mem, &mut w);
            let mut m = comp.init(&mut ctx).expect("plugin init");
            assert_eq!(m.len(), 1);
            m.pop().unwrap()
        })
        .collect();
    assert!(
        modex.get(1, "btl.tcp").unwrap().is_some(),
        "rank 1 published its card"
    );
    for (m, j) in modules.iter_mut().zip(&jobs) {
        let reach = m.add_procs(&j.procs(), &modex).expect("add_procs");
        assert_eq!(
            reach,
            j.procs().iter().map(|p| !p.is_self).collect::<Vec<_>>()
        );
        assert_eq!(
            m.attributes().eager_limit,
            2048,
            "the plugin read the host's parameters"
        );
    }
    let payload: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    modules[0]
        .send(1, 0x40, b"hdr", &payload, SendHint::default())
        .expect("send");
    modules[1]
        .send(0, 0x41, &[], &[], SendHint::default())
        .expect("send 0 bytes");
    let (mut s0, mut s1) = (Sink::default(), Sink::default());
    let start = Instant::now();
    while s1.got.is_empty() || s0.got.is_empty() {
        modules[0].progress(&mut s0);
        modules[1].progress(&mut s1);
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no message through the plugin"
        );
    }
    let mut want = b"hdr".to_vec();
    want.extend_from_slice(&payload);
    assert_eq!(s1.got, vec![(0, 0x40, want)]);
    assert_eq!(s0.got, vec![(1, 0x41, vec![])]);
    assert!(s0.failed.is_empty() && s1.failed.is_empty());
    for m in &mut modules {
        m.finalize();
    }
}

/// The C compiler, or why there is none usable.
fn c_compiler() -> Result<String, String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    match Command::new(&cc).arg("--version").output() {
        Ok(o) if o.status.success() => Ok(cc),
        Ok(o) => Err(format!(
            "the C compiler does not work ('{cc} --version' failed: {}); set CC to a working one",
            o.status
        )),
        Err(e) => Err(format!(
            "no C compiler ('{cc}': {e}); install Debian package gcc or set CC"
        )),
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("plugin-fixtures")
        .join(name)
}

/// A C string literal for a `-D` definition.
fn c_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn host(s: &'static str) -> &'static str {
    s.trim_end_matches('\0')
}

/// The host's tracing-core version, as its framework API version names it.
fn host_tracing_core() -> &'static str {
    host(FRAMEWORK_API_VERSION)
        .split(';')
        .find_map(|p| p.strip_prefix("tracing-core="))
        .unwrap_or_else(|| {
            panic!(
                "the framework API version '{}' does not name the tracing-core version",
                host(FRAMEWORK_API_VERSION)
            )
        })
}

/// `api` with another tracing-core version, every other part the same.
fn other_tracing_core(api: &str) -> String {
    let theirs = api.replace(
        &format!("tracing-core={}", host_tracing_core()),
        "tracing-core=0.0.0-impostor",
    );
    assert_ne!(theirs, api);
    theirs
}

/// One impostor: the file's component name, its `-D` overrides, and what the refusal must say.
struct Case {
    name: &'static str,
    defines: Vec<(&'static str, String)>,
    source: &'static str,
    check: fn(&PluginError) -> bool,
    must_contain: Vec<String>,
}

fn cases() -> Vec<Case> {
    let abi = PLUGIN_ABI_VERSION.to_string();
    let wrong_abi = (PLUGIN_ABI_VERSION + 41).to_string();
    let d = |k: &'static str, v: String| (k, v);
    vec![
        Case {
            // Only the ABI version is valid to read from an unknown layout: the rest is NULL and
            // must not be looked at.
            name: "badabi",
            defines: vec![
                d("ABI_VERSION", wrong_abi.clone()),
                d("RUSTC_VERSION", "NULL".into()),
                d("FRAMEWORK_API_VERSION", "NULL".into()),
                d("FRAMEWORK", "NULL".into()),
                d("NAME", "NULL".into()),
                d("VTABLE", "NULL".into()),
            ],
            source: "descriptor.c",
            check: |e| {
                matches!(
                    e,
                    PluginError::Mismatch {
                        field: "plugin ABI version",
                        ..
                    }
                )
            },
            must_contain: vec![
                "plugin ABI version".into(),
                format!("'{wrong_abi}'"),
                format!("'{abi}'"),
            ],
        },
        Case {
            name: "badrustc",
            defines: vec![d(
                "RUSTC_VERSION",
                c_str("rustc 1.0.0 (a823ba5b 2015-05-13)"),
            )],
            source: "descriptor.c",
            check: |e| {
                matches!(
                    e,
                    PluginError::Mismatch {
                        field: "rustc version",
                        ..
                    }
                )
            },
            must_contain: vec![
                "rustc version".into(),
                "'rustc 1.0.0 (a823ba5b 2015-05-13)'".into(),
                format!("'{}'", host(RUSTC_VERSION)),
            ],
        },
        Case {
            name: "badapi",
            defines: vec![d("FRAMEWORK_API_VERSION", c_str("0.0.0-elsewhere"))],
            source: "descriptor.c",
            check: |e| {
                matches!(
                    e,
                    PluginError::Mismatch {
                        field: "framework API version",
                        ..
                    }
                )
            },
            must_contain: vec![
                "framework API version".into(),
                "'0.0.0-elsewhere'".into(),
                format!("'{}'", host(FRAMEWORK_API_VERSION)),
            ],
        },
        Case {
            // Everything the host has but the version of tracing-core, whose Dispatch the host
            // hands to the plugin: refused, naming the crate and both versions.
            name: "badtracing",
            defines: vec![d(
                "FRAMEWORK_API_VERSION",
                c_str(&other_tracing_core(host(FRAMEWORK_API_VERSION))),
            )],
            source: "descriptor.c",
            check: |e| matches!(e, PluginError::ApiMismatch { krate, .. } if krate == "tracing-core"),
            must_contain: vec![
                "built against tracing-core 0.0.0-impostor".into(),
                format!("this host uses tracing-core {}", host_tracing_core()),
                "rebuild the plugin".into(),
            ],
        },
        Case {
            name: "badfw",
            defines: vec![d("FRAMEWORK", c_str("pml"))],
            source: "descriptor.c",
            check: |e| {
                matches!(
                    e,
                    PluginError::Mismatch {
                        field: "framework",
                        ..
                    }
                )
            },
            must_contain: vec!["field 'framework'".into(), "'pml'".into(), "'btl'".into()],
        },
        Case {
            name: "badname",
            defines: vec![d("NAME", c_str("othername"))],
            source: "descriptor.c",
            check: |e| matches!(e, PluginError::Mismatch { field: "name", .. }),
            must_contain: vec![
                "field 'name'".into(),
                "'othername'".into(),
                "badname (from the file name)".into(),
            ],
        },
        Case {
            name: "nullrustc",
            defines: vec![d("RUSTC_VERSION", "NULL".into())],
            source: "descriptor.c",
            check: |e| matches!(e, PluginError::Corrupt { .. }),
            must_contain: vec![
                "corrupt descriptor".into(),
                "'rustc version' is null".into(),
            ],
        },
        Case {
            name: "nullvtable",
            defines: vec![d("VTABLE", "NULL".into())],
            source: "descriptor.c",
            check: |e| matches!(e, PluginError::Corrupt { .. }),
            must_contain: vec!["corrupt descriptor".into(), "vtable is null".into()],
        },
        Case {
            name: "nullcomp",
            defines: vec![],
            source: "descriptor.c",
            check: |e| matches!(e, PluginError::Corrupt { .. }),
            must_contain: vec!["corrupt descriptor".into(), "component is null".into()],
        },
        Case {
            name: "nosymbol",
            defines: vec![],
            source: "no_descriptor.c",
            check: |e| matches!(e, PluginError::MissingSymbol { .. }),
            must_contain: vec!["missing symbol 'rmca_plugin_descriptor'".into()],
        },
    ]
}

/// Build every impostor (plus a garbage file) into `dir`; without a C compiler, why not.
fn build_impostors(dir: &Path) -> Result<Vec<Case>, String> {
    let cc = c_compiler()?;
    let cases = cases();
    for case in &cases {
        let out = dir.join(format!("librmca_btl_{}.so", case.name));
        let mut cmd = Command::new(&cc);
        cmd.args(["-shared", "-fPIC", "-o"])
            .arg(&out)
            .arg(fixture(case.source));
        // The host's own values by default, so that each case differs in one field.
        let mut defines: Vec<(&str, String)> = vec![
            ("ABI_VERSION", PLUGIN_ABI_VERSION.to_string()),
            ("RUSTC_VERSION", c_str(host(RUSTC_VERSION))),
            ("FRAMEWORK_API_VERSION", c_str(host(FRAMEWORK_API_VERSION))),
            ("NAME", c_str(case.name)),
        ];
        for (k, v) in &case.defines {
            defines.retain(|(dk, _)| dk != k);
            defines.push((k, v.clone()));
        }
        for (k, v) in defines {
            cmd.arg(format!("-D{k}={v}"));
        }
        let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        assert!(
            o.status.success(),
            "{cmd:?} failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    std::fs::write(
        dir.join("librmca_btl_garbage.so"),
        b"#!/bin/sh\necho this is not an ELF shared object\n",
    )
    .expect("write garbage");
    Ok(cases)
}

#[test]
fn refused_plugins_name_the_file_and_the_differing_field() {
    let dir = TempDir::new("impostors");
    let cases = match build_impostors(dir.path()) {
        Ok(cases) => cases,
        Err(why) => {
            skip_or_fail(why);
            return;
        }
    };
    let mut reg = Registry::builtin();
    reg.load_plugins(dir.as_str());
    assert!(reg.path_errors().is_empty());
    assert_eq!(
        reg.refused().len(),
        cases.len() + 1,
        "every impostor and the garbage file are refused"
    );
    for case in &cases {
        let file = dir.path().join(format!("librmca_btl_{}.so", case.name));
        let cand = reg
            .refused()
            .iter()
            .find(|c| c.name == case.name)
            .unwrap_or_else(|| panic!("{} not among the refused", case.name));
        assert_eq!(cand.path, file);
        let err = cand.result.as_ref().expect_err("refused");
        assert!(
            (case.check)(err),
            "{}: unexpected error kind {err:?}",
            case.name
        );
        let msg = err.to_string();
        assert!(
            msg.contains(&file.display().to_string()),
            "{}: message does not name the file: {msg}",
            case.name
        );
        for needle in &case.must_contain {
            assert!(
                msg.contains(needle.as_str()),
                "{}: message lacks {needle:?}: {msg}",
                case.name
            );
        }
        assert!(
            reg.find(Framework::Btl, case.name).is_none(),
            "{} must not be usable",
            case.name
        );
    }
    let garbage = reg
        .refused()
        .iter()
        .find(|c| c.name == "garbage")
        .expect("garbage refused");
    let msg = garbage.result.as_ref().unwrap_err().to_string();
    assert!(
        matches!(garbage.result, Err(PluginError::Load { .. })),
        "{msg}"
    );
    assert!(
        msg.contains("librmca_btl_garbage.so")
            && msg.contains("cannot be loaded as a shared library"),
        "{msg}"
    );
}

#[test]
fn job_goes_on_without_refused_plugins_unless_one_is_requested() {
    let good = TempDir::new("good");
    std::fs::copy(tcp_plugin(), good.path().join(PLUGIN_FILE)).expect("copy plugin");
    let bad = TempDir::new("bad");
    let have_cc = match build_impostors(bad.path()) {
        Ok(_) => true,
        Err(why) => {
            skip_or_fail(format!("the impostor half of this test: {why}"));
            false
        }
    };
    if !have_cc {
        // Without a compiler the garbage file alone still exercises the refusal path.
        std::fs::write(bad.path().join("librmca_btl_badabi.so"), b"not a library").unwrap();
    }
    let path = format!("{}:{}", good.as_str(), bad.as_str());

    let builtin_names: Vec<String> = Registry::builtin()
        .components()
        .iter()
        .map(|c| format!("{:?}", c.component))
        .collect();
    let reg = Registry::discover(&raw(&[("component_path", &path)]));
    assert!(!reg.refused().is_empty());
    let listed: Vec<String> = reg
        .components()
        .iter()
        .map(|c| format!("{:?}", c.component))
        .collect();
    for b in &builtin_names {
        assert!(
            listed.contains(b),
            "built-in {b} lost after refusals: {listed:?}"
        );
    }
    assert!(listed.contains(&"btl:tcp".to_string()), "{listed:?}");

    // Default selectors: the refused plugins are skipped and the rest is selected.
    let params = reg
        .resolve(&raw(&[("component_path", &path)]))
        .expect("resolve");
    reg.check_selectors(&params)
        .expect("default selectors are fine");
    let btls = reg.select_btls(&params).expect("select_btls");
    let names: Vec<&str> = btls.iter().map(|b| b.meta().name).collect();
    assert_eq!(names, vec!["tcp"]);
    if reg.of(Framework::Mpool).next().is_some() {
        reg.select_one(&params, Framework::Mpool)
            .expect("mpool still selectable");
    }

    // Excluding a refused plugin is fine too.
    let params = reg
        .resolve(&raw(&[("component_path", &path), ("btl", "^badabi")]))
        .unwrap();
    assert_eq!(reg.select_btls(&params).unwrap().len(), 1);

    // Naming a refused plugin explicitly is an error that carries the refusal.
    let params = reg
        .resolve(&raw(&[("component_path", &path), ("btl", "tcp,badabi")]))
        .unwrap();
    let err = reg
        .select_btls(&params)
        .err()
        .expect("requesting a refused plugin must fail");
    let refusal = reg
        .refused()
        .iter()
        .find(|c| c.name == "badabi")
        .unwrap()
        .result
        .as_ref()
        .unwrap_err()
        .clone();
    match &err {
        McaError::RequestedPluginRefused {
            framework,
            name,
            origin,
            reason,
        } => {
            assert_eq!(*framework, Framework::Btl);
            assert_eq!(name, "badabi");
            assert_eq!(*origin, Source::CommandLine);
            assert_eq!(*reason, refusal);
        }
        other => panic!("expected RequestedPluginRefused, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("'badabi'") && msg.contains(&refusal.to_string()),
        "{msg}"
    );
    assert!(msg.contains("librmca_btl_badabi.so"), "{msg}");
    if have_cc {
        assert!(msg.contains("plugin ABI version"), "{msg}");
    }
}

/// Set in the child process of [`two_processes_talk_through_the_plugin`]: rank 0's card.
const CHILD_CARD_ENV: &str = "RMCA_PLUGIN_TEST_RANK0_CARD";
/// Set in the child: the directory holding the plugin.
const CHILD_DIR_ENV: &str = "RMCA_PLUGIN_TEST_DIR";
/// Fragments rank 0 sends and rank 1 echoes.
const ECHOES: usize = 50;

fn tcp_component(reg: &Registry) -> &'static dyn rmca_framework::btl::BtlComponent {
    match reg
        .find(Framework::Btl, "tcp")
        .expect("tcp plugin loaded")
        .component
    {
        ComponentRef::Btl(b) => b,
        other => panic!("tcp is {other:?}"),
    }
}

/// Rank 1, in its own process: echo `ECHOES` fragments, then vanish without finalize.
fn child_rank1(rank0_card: String, dir: String) {
    let sources = raw(&[("component_path", &dir)]);
    let reg = Registry::discover(&sources);
    let params = reg.resolve(&sources).expect("resolve");
    let modex = LocalModex::new();
    modex
        .writer(0)
        .put("btl.tcp", rank0_card.as_bytes())
        .expect("rank 0 card");
    let mem = MemoryAccounting::new();
    let me = job(1);
    let mut w = modex.writer(1);
    let mut ctx = InitContext::new(&me, &params, &mem, &mut w);
    let mut btl = tcp_component(&reg)
        .init(&mut ctx)
        .expect("init")
        .pop()
        .unwrap();
    let card = modex.get(1, "btl.tcp").unwrap().expect("own card");
    println!(
        "\nRMCA-CARD {}",
        String::from_utf8(card).expect("text card")
    );
    assert_eq!(
        btl.add_procs(&me.procs(), &modex).unwrap(),
        vec![true, false]
    );
    let mut sink = Sink::default();
    let start = Instant::now();
    let mut echoed = 0;
    // Echo ECHOES fragments; the next one is rank 0's sign that every echo arrived.
    while sink.got.len() <= ECHOES {
        btl.progress(&mut sink);
        while echoed < sink.got.len().min(ECHOES) {
            let (peer, tag, data) = &sink.got[echoed];
            btl.send(*peer, *tag, &[], data, SendHint::default())
                .expect("echo");
            echoed += 1;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "child: rank 0 went quiet"
        );
    }
    // Die as a crashed process would: no finalize, no goodbye.
    std::process::exit(0);
}

#[test]
fn two_processes_talk_through_the_plugin() {
    if let (Ok(card), Ok(dir)) = (std::env::var(CHILD_CARD_ENV), std::env::var(CHILD_DIR_ENV)) {
        return child_rank1(card, dir);
    }
    use std::io::BufRead;
    let dir = TempDir::new("procs");
    std::fs::copy(tcp_plugin(), dir.path().join(PLUGIN_FILE)).expect("copy plugin");
    let sources = raw(&[("component_path", dir.as_str())]);
    let reg = Registry::discover(&sources);
    let params = reg.resolve(&sources).expect("resolve");
    let modex = LocalModex::new();
    let mem = MemoryAccounting::new();
    let me = job(0);
    let mut w = modex.writer(0);
    let mut ctx = InitContext::new(&me, &params, &mem, &mut w);
    let mut btl = tcp_component(&reg)
        .init(&mut ctx)
        .expect("init")
        .pop()
        .unwrap();
    let card0 = String::from_utf8(modex.get(0, "btl.tcp").unwrap().unwrap()).unwrap();

    // Rank 1 is this test binary again, running only this test in child mode.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "two_processes_talk_through_the_plugin",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_CARD_ENV, &card0)
        .env(CHILD_DIR_ENV, dir.as_str())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn rank 1");
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let mut child = KillOnDrop(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            // libtest may have printed "test <name> ... " on the same line first.
            if let Some(at) = line.find("RMCA-CARD ") {
                let card = &line[at + "RMCA-CARD ".len()..];
                let _ = tx.send(card.to_owned());
            }
        }
    });
    let card1 = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("rank 1 published no card");
    modex.writer(1).put("btl.tcp", card1.as_bytes()).unwrap();
    assert_eq!(
        btl.add_procs(&me.procs(), &modex).unwrap(),
        vec![false, true]
    );

    let frags: Vec<Vec<u8>> = (0..ECHOES)
        .map(|i| (0..i * 997).map(|k| (k * 31 + i) as u8).collect())
        .collect();
    for (i, f) in frags.iter().enumerate() {
        btl.send(1, 0x40 + (i % 8) as u8, &[], f, SendHint::default())
            .expect("send");
    }
    let mut sink = Sink::default();
    let wait = |btl: &mut Box<dyn Btl>, sink: &mut Sink, done: &dyn Fn(&Sink) -> bool| {
        let start = Instant::now();
        while !done(sink) {
            btl.progress(sink);
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "got {} echoes, failures {:?}",
                sink.got.len(),
                sink.failed
            );
        }
    };
    wait(&mut btl, &mut sink, &|s| s.got.len() >= ECHOES);
    btl.send(1, 0x50, &[], b"fin", SendHint::default())
        .expect("send fin");
    wait(&mut btl, &mut sink, &|s| !s.failed.is_empty());
    let want: Vec<(u32, u8, Vec<u8>)> = frags
        .iter()
        .enumerate()
        .map(|(i, f)| (1, 0x40 + (i % 8) as u8, f.clone()))
        .collect();
    assert!(sink.got == want, "echoes differ from what was sent");
    // Rank 1 exited without saying goodbye: its path is reported failed, once.
    assert_eq!(sink.failed.len(), 1, "{:?}", sink.failed);
    assert_eq!(sink.failed[0].0, 1);
    let status = child.0.wait().expect("wait rank 1");
    assert!(status.success(), "rank 1 failed: {status}");
    btl.finalize();
}
