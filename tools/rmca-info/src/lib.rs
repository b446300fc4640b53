//! rmca-info: lists the components known to this build (built-in and plugins) and every MCA
//! parameter with its current value and where that value came from — like `ompi_info`, but no
//! parameter is hidden behind a level unless `--level` asks for it.
//!
//! The rendering lives in this library so that it can be snapshot-tested; `main.rs` only parses
//! arguments and prints.

use std::fmt::Write as _;

use rmca_framework::component::{Framework, Origin};
use rmca_framework::params::{Level, ParamEntry, ParamSpec, ParamStore, ParamType, Value};
use rmca_framework::registry::Registry;

/// What to print.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// List the components.
    pub components: bool,
    /// Print the parameters of `(framework, component or "all")`.
    pub params: Option<(String, String)>,
    /// One `key:value` line per fact.
    pub parsable: bool,
    /// Highest level of parameters shown.
    pub level: Level,
}

/// Errors of argument interpretation.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InfoError {
    /// Unknown framework in `--param`.
    #[error(
        "unknown framework '{0}'; valid frameworks: mca, pml, btl, mpool, rcache, osc, coll, all"
    )]
    UnknownFramework(String),
    /// Unknown component in `--param`.
    #[error("unknown {framework} component '{name}'; valid: {valid}{hint}")]
    UnknownComponent {
        /// Framework.
        framework: String,
        /// Name.
        name: String,
        /// Valid names.
        valid: String,
        /// "; did you mean ..." or empty.
        hint: String,
    },
}

fn origin_text(o: &Origin) -> String {
    o.to_string()
}

/// Render the component list.
pub fn render_components(reg: &Registry, parsable: bool) -> String {
    let mut out = String::new();
    for c in reg.components() {
        let m = c.meta();
        let fw = c.component.framework();
        if parsable {
            let _ = writeln!(out, "mca:{fw}:{}:version:{}", m.name, m.version);
            let _ = writeln!(out, "mca:{fw}:{}:origin:{}", m.name, origin_text(&c.origin));
            let _ = writeln!(out, "mca:{fw}:{}:description:{}", m.name, m.description);
        } else {
            let _ = writeln!(
                out,
                "  {:>6} {:<8} v{:<8} {:<10} {}",
                format!("{fw}:"),
                m.name,
                m.version,
                match &c.origin {
                    Origin::Builtin => "built-in".to_owned(),
                    Origin::Plugin(_) => "plugin".to_owned(),
                },
                m.description
            );
            if let Origin::Plugin(p) = &c.origin {
                let _ = writeln!(out, "  {:>6} {:<8} from {}", "", "", p.display());
            }
        }
    }
    for r in reg.refused() {
        let reason = r
            .result
            .as_ref()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        if parsable {
            let _ = writeln!(out, "mca:{}:{}:refused:{}", r.framework, r.name, reason);
        } else {
            let _ = writeln!(out, "  refused {}:{}: {}", r.framework, r.name, reason);
        }
    }
    for e in reg.path_errors() {
        if parsable {
            let _ = writeln!(out, "mca:path_error:{e}");
        } else {
            let _ = writeln!(out, "  warning: {e}");
        }
    }
    out
}

fn valid_text(ty: &ParamType) -> String {
    ty.valid_values()
}

/// Which entries `--param fw comp` selects, checking the names.
pub fn select_entries<'a>(
    reg: &Registry,
    store: &'a ParamStore,
    framework: &str,
    component: &str,
    level: Level,
) -> Result<Vec<&'a ParamEntry>, InfoError> {
    let fw_ok = framework == "all" || framework == "mca" || Framework::parse(framework).is_some();
    if !fw_ok {
        return Err(InfoError::UnknownFramework(framework.to_owned()));
    }
    if component != "all" && framework != "all" {
        let names: Vec<&str> = if framework == "mca" {
            vec!["base"]
        } else {
            let fw = Framework::parse(framework).expect("checked above");
            let mut n: Vec<&str> = reg.of(fw).map(|c| c.meta().name).collect();
            // The framework's own parameters ("base"), unless a component has that name.
            if !n.contains(&"base") {
                n.push("base");
            }
            n
        };
        if !names.contains(&component) {
            let hint = rmca_framework::params::nearest(component, names.iter().copied())
                .map(|n| format!("; did you mean '{n}'?"))
                .unwrap_or_default();
            return Err(InfoError::UnknownComponent {
                framework: framework.to_owned(),
                name: component.to_owned(),
                valid: names.join(", "),
                hint,
            });
        }
    }
    Ok(store
        .entries()
        .filter(|e| e.spec.level <= level)
        .filter(|e| framework == "all" || e.spec.framework == framework)
        .filter(|e| component == "all" || e.spec.component == component)
        .collect())
}

/// Render parameters.
pub fn render_params(entries: &[&ParamEntry], parsable: bool) -> String {
    let mut out = String::new();
    for e in entries {
        let s = &e.spec;
        if parsable {
            let p = format!("mca:{}:{}:param:{}", s.framework, s.component, s.name);
            let _ = writeln!(out, "{p}:value:{}", e.value);
            let _ = writeln!(out, "{p}:source:{}", e.source);
            let _ = writeln!(out, "{p}:type:{}", s.ty.name());
            let _ = writeln!(out, "{p}:valid:{}", valid_text(&s.ty));
            let _ = writeln!(out, "{p}:default:{}", s.default);
            let _ = writeln!(out, "{p}:level:{}", s.level.as_str());
            let _ = writeln!(out, "{p}:job_wide:{}", s.job_wide);
            let _ = writeln!(out, "{p}:help:{}", s.help);
        } else {
            let changed = if e.value != s.default {
                format!(" (default {})", s.default)
            } else {
                String::new()
            };
            let _ = writeln!(out, "  {} = {}{}", s.name, display_value(&e.value), changed);
            let _ = writeln!(out, "      source: {}", e.source);
            let _ = writeln!(
                out,
                "      type: {}, {}; level: {}{}",
                s.ty.name(),
                valid_text(&s.ty),
                s.level.as_str(),
                job_wide_note(s)
            );
            if !s.help.is_empty() {
                let _ = writeln!(out, "      {}", s.help);
            }
        }
    }
    out
}

fn job_wide_note(s: &ParamSpec) -> &'static str {
    if s.job_wide {
        "; the same on every rank"
    } else {
        ""
    }
}

fn display_value(v: &Value) -> String {
    match v {
        Value::Str(s) if s.is_empty() => "\"\"".into(),
        other => other.to_string(),
    }
}

/// Render a TOML file documenting every parameter with its default commented out: the
/// repository's `mca-params.toml` is this output (a test keeps them in sync).
pub fn render_defaults_toml(specs: &[ParamSpec]) -> String {
    let mut specs: Vec<&ParamSpec> = specs.iter().collect();
    specs.sort_by(|a, b| {
        (&a.framework, &a.component, &a.name).cmp(&(&b.framework, &b.component, &b.name))
    });
    let mut out = String::from(
        "# rmca system-wide MCA parameters.\n\
         #\n\
         # Every parameter of the default build is listed with its built-in default, commented out.\n\
         # Uncomment a line to change the default for every job built from this tree; a user file\n\
         # ($RMCA_PARAM_FILE or ~/.rmca/mca-params.toml), RMCA_MCA_<name> environment variables and\n\
         # `--mca name value` flags override it, in that order. Unknown names are errors.\n\
         # Regenerate with: rmca-info --defaults-toml > mca-params.toml\n",
    );
    let mut last = (String::new(), String::new());
    for s in specs {
        if (s.framework.clone(), s.component.clone()) != last {
            let _ = write!(out, "\n# ---- {} {} ----\n", s.framework, s.component);
            last = (s.framework.clone(), s.component.clone());
        }
        let _ = writeln!(
            out,
            "\n# {} [{}; {}; level {}{}]",
            s.help,
            s.ty.name(),
            valid_text(&s.ty),
            s.level.as_str(),
            job_wide_note(s)
        );
        let value = match &s.default {
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::List(l) => format!(
                "[{}]",
                l.iter()
                    .map(|x| format!("{x:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            other => format!("{:?}", other.to_string()),
        };
        let _ = writeln!(out, "# {} = {}", s.name, value);
    }
    out
}
