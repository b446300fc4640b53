//! `rmca-info`: components and MCA parameters of this build. See `rmca-info --help`.
// McaError carries the culprit's source by value; configuration-time only.
#![allow(clippy::result_large_err)]

use std::process::ExitCode;

use rmca_framework::params::{cmdline_settings, Level, RawSources};
use rmca_framework::registry::Registry;
use rmca_info::{render_components, render_defaults_toml, render_params, select_entries, Options};

const USAGE: &str =
    "usage: rmca-info [--all] [--param <framework|all> <component|all>] [--parsable]
                 [--level basic|tuning|dev] [--mca <name> <value>]... [--defaults-toml]

  (no option)        list every component (built-in and plugins) with version and origin
  --param FW COMP    print the parameters of a component (or 'all') with value, source, type,
                     valid values, level and help; FW is pml, btl, mpool, rcache, mca or all
  --all              components and every parameter
  --parsable         one key:value line per fact, for scripts
  --level L          only parameters up to level L (default: all levels)
  --mca NAME VALUE   set a parameter as a job would (shows its effect and source)
  --defaults-toml    print the documented-defaults file shipped as mca-params.toml";

/// What the command line asks for.
struct Request {
    opts: Options,
    defaults_toml: bool,
    settings: Vec<rmca_framework::params::RawSetting>,
}

/// Parse the command line; `Ok(None)` for `--help`.
fn parse(args: Vec<String>) -> Result<Option<Request>, String> {
    use lexopt::prelude::*;
    let mut req = Request {
        opts: Options {
            components: false,
            params: None,
            parsable: false,
            level: Level::Dev,
        },
        defaults_toml: false,
        settings: Vec::new(),
    };
    // `--mca NAME VALUE` (and Open MPI's `-mca`) as every rmca tool reads them: a value may
    // start with '-' (a negative number).
    let (settings, rest) = cmdline_settings(&args)?;
    req.settings = settings;
    let mut p = lexopt::Parser::from_args(rest);
    let text = |v: std::ffi::OsString, what: &str| {
        v.into_string()
            .map_err(|v| format!("{what}: {v:?} is not valid UTF-8"))
    };
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            Short('a') | Long("all") => {
                req.opts.components = true;
                req.opts.params = Some(("all".into(), "all".into()));
            }
            Long("param") => {
                let need = |_| "--param needs a framework and a component (or 'all')".to_owned();
                let f = text(p.value().map_err(need)?, "--param")?;
                let c = text(p.value().map_err(need)?, "--param")?;
                req.opts.params = Some((f, c));
            }
            Long("parsable") | Long("parseable") => req.opts.parsable = true,
            Long("level") => {
                let v = text(p.value().map_err(|e| e.to_string())?, "--level")?;
                req.opts.level = Level::parse(&v)
                    .ok_or_else(|| format!("--level '{v}': valid levels are basic, tuning, dev"))?;
            }
            Long("defaults-toml") => req.defaults_toml = true,
            Short('h') | Long("help") => return Ok(None),
            other => return Err(other.unexpected().to_string()),
        }
    }
    Ok(Some(req))
}

fn main() -> ExitCode {
    let Request {
        mut opts,
        defaults_toml,
        settings,
    } = match parse(std::env::args().skip(1).collect()) {
        Ok(Some(r)) => r,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("rmca-info: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if opts.params.is_none() && !defaults_toml {
        opts.components = true;
    }
    rmca::link_builtin_components();
    let raw = match RawSources::gather(settings) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rmca-info: {e}");
            return ExitCode::from(1);
        }
    };
    let reg = Registry::discover(&raw);
    if defaults_toml {
        print!("{}", render_defaults_toml(&reg.param_specs()));
        return ExitCode::SUCCESS;
    }
    let store = match reg
        .resolve(&raw)
        .and_then(|s| reg.check_selectors(&s).map(|_| s))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rmca-info: {e}");
            return ExitCode::from(1);
        }
    };
    if opts.components {
        if !opts.parsable {
            println!(
                "rmca {} (framework API {})",
                env!("CARGO_PKG_VERSION"),
                rmca_framework::plugin::FRAMEWORK_API_VERSION.trim_end_matches('\0')
            );
            println!("Components:");
        }
        print!("{}", render_components(&reg, opts.parsable));
    }
    if let Some((fw, comp)) = &opts.params {
        match select_entries(&reg, &store, fw, comp, opts.level) {
            Ok(entries) => {
                if !opts.parsable {
                    println!("Parameters ({fw} {comp}):");
                }
                print!("{}", render_params(&entries, opts.parsable));
            }
            Err(e) => {
                eprintln!("rmca-info: {e}");
                return ExitCode::from(1);
            }
        }
    }
    ExitCode::SUCCESS
}
