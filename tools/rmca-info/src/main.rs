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

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (settings, rest) = match cmdline_settings(&args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("rmca-info: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut opts = Options {
        components: false,
        params: None,
        parsable: false,
        level: Level::Dev,
    };
    let mut defaults_toml = false;
    let mut it = rest.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--all" | "-a" => {
                opts.components = true;
                opts.params = Some(("all".into(), "all".into()));
            }
            "--param" => {
                match (it.next(), it.next()) {
                    (Some(f), Some(c)) => opts.params = Some((f, c)),
                    _ => {
                        eprintln!("rmca-info: --param needs a framework and a component (or 'all')\n{USAGE}");
                        return ExitCode::from(2);
                    }
                }
            }
            "--parsable" | "--parseable" => opts.parsable = true,
            "--level" => match it.next().as_deref().and_then(Level::parse) {
                Some(l) => opts.level = l,
                None => {
                    eprintln!("rmca-info: --level needs one of basic, tuning, dev");
                    return ExitCode::from(2);
                }
            },
            "--defaults-toml" => defaults_toml = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("rmca-info: unknown option '{other}'\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
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
