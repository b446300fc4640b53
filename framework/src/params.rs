//! MCA parameters: typed, documented, with a default, and set from layered sources.
//!
//! Precedence, lowest to highest (DESIGN.md §2): built-in default < system file (the repo's
//! `mca-params.toml`) < user file (`$RMCA_PARAM_FILE` or `~/.rmca/mca-params.toml`) < environment
//! (`RMCA_MCA_<name>`) < command line (`--mca name value`).
//!
//! Unlike Open MPI, a name nobody registered is an error, not silently ignored: every setting is
//! checked against the registered parameters once all components (plugins included) registered,
//! and the error names the culprit, where it came from, what is valid and the nearest name.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// How much a user must know before touching a parameter (Open MPI's info levels, simplified).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Everyday selection and sizing.
    Basic,
    /// Performance tuning.
    Tuning,
    /// Developer and debugging knobs.
    Dev,
}

impl Level {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Basic => "basic",
            Level::Tuning => "tuning",
            Level::Dev => "dev",
        }
    }
    /// Parse a level name.
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "basic" => Some(Level::Basic),
            "tuning" => Some(Level::Tuning),
            "dev" => Some(Level::Dev),
            _ => None,
        }
    }
}

/// The type of a parameter, with its constraints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamType {
    /// `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`).
    Bool,
    /// A signed integer within `min..=max`.
    Int {
        /// Smallest valid value.
        min: i64,
        /// Largest valid value.
        max: i64,
    },
    /// A byte count, written with an optional `K`, `M` or `G` suffix (powers of 1024).
    Size {
        /// Smallest valid value.
        min: u64,
        /// Largest valid value.
        max: u64,
    },
    /// Free text.
    Str,
    /// One of a fixed set of words.
    Enum(Vec<String>),
    /// A comma-separated list of words.
    List,
}

impl ParamType {
    /// Short name for listings.
    pub fn name(&self) -> &'static str {
        match self {
            ParamType::Bool => "bool",
            ParamType::Int { .. } => "int",
            ParamType::Size { .. } => "size",
            ParamType::Str => "string",
            ParamType::Enum(_) => "enum",
            ParamType::List => "list",
        }
    }

    /// What values are valid, in words (used by listings and error messages).
    pub fn valid_values(&self) -> String {
        match self {
            ParamType::Bool => "true or false".into(),
            ParamType::Int { min, max } => format!("an integer in {min}..={max}"),
            ParamType::Size { min, max } => format!(
                "a size in {}..={} (bytes, or with a K, M or G suffix)",
                format_size(*min),
                format_size(*max)
            ),
            ParamType::Str => "any text".into(),
            ParamType::Enum(words) => format!("one of {}", words.join(", ")),
            ParamType::List => "a comma-separated list".into(),
        }
    }
}

/// A parameter value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// Boolean.
    Bool(bool),
    /// Integer.
    Int(i64),
    /// Byte count.
    Size(u64),
    /// Text (also enum values).
    Str(String),
    /// List of words.
    List(Vec<String>),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Size(s) => f.write_str(&format_size(*s)),
            Value::Str(s) => f.write_str(s),
            Value::List(l) => f.write_str(&l.join(",")),
        }
    }
}

/// Render a byte count with the largest exact K/M/G suffix.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (unit, suffix) in UNITS {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{}", bytes / unit, suffix);
        }
    }
    bytes.to_string()
}

/// Where a parameter's current value came from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// The registered default.
    Default,
    /// The system file (`mca-params.toml` shipped with rmca).
    SystemFile {
        /// File path.
        path: PathBuf,
        /// 1-based line.
        line: usize,
    },
    /// The user's file.
    UserFile {
        /// File path.
        path: PathBuf,
        /// 1-based line.
        line: usize,
    },
    /// An environment variable.
    Env {
        /// Variable name, e.g. `RMCA_MCA_btl_ud_send_qps`.
        var: String,
    },
    /// A `--mca name value` flag.
    CommandLine,
}

impl Source {
    /// Rank in the precedence order (higher wins).
    pub fn precedence(&self) -> u8 {
        match self {
            Source::Default => 0,
            Source::SystemFile { .. } => 1,
            Source::UserFile { .. } => 2,
            Source::Env { .. } => 3,
            Source::CommandLine => 4,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::SystemFile { path, line } => write!(f, "system file {}:{line}", path.display()),
            Source::UserFile { path, line } => write!(f, "user file {}:{line}", path.display()),
            Source::Env { var } => write!(f, "environment variable {var}"),
            Source::CommandLine => f.write_str("command line (--mca)"),
        }
    }
}

/// The declaration of one parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamSpec {
    /// Full name, `<framework>_<component>_<param>` (or a bare framework-level name).
    pub name: String,
    /// Framework it belongs to (`"btl"`, `"pml"`, or `"mca"` for the base).
    pub framework: String,
    /// Component it belongs to (`"base"` for framework-wide parameters).
    pub component: String,
    /// Type and constraints.
    pub ty: ParamType,
    /// Built-in default.
    pub default: Value,
    /// One-paragraph help.
    pub help: String,
    /// Who should touch it.
    pub level: Level,
    /// Every rank of a job must use the same value (a protocol constant both ends assume):
    /// checked through the modex at init, see [`ParamStore::job_wide_settings`].
    pub job_wide: bool,
}

/// Builder for a [`ParamSpec`] registered through a [`ParamRegistrar`].
#[derive(Clone, Debug)]
pub struct Param {
    local: String,
    ty: ParamType,
    default: Value,
    help: String,
    level: Level,
    job_wide: bool,
}

impl Param {
    fn new(local: &str, ty: ParamType, default: Value) -> Self {
        Self {
            local: local.to_owned(),
            ty,
            default,
            help: String::new(),
            level: Level::Basic,
            job_wide: false,
        }
    }
    /// A boolean parameter.
    pub fn bool(name: &str, default: bool) -> Self {
        Self::new(name, ParamType::Bool, Value::Bool(default))
    }
    /// An integer parameter (any `i64` until [`Param::range`] narrows it).
    pub fn int(name: &str, default: i64) -> Self {
        Self::new(
            name,
            ParamType::Int {
                min: i64::MIN,
                max: i64::MAX,
            },
            Value::Int(default),
        )
    }
    /// A byte-count parameter.
    pub fn size(name: &str, default: u64) -> Self {
        Self::new(
            name,
            ParamType::Size {
                min: 0,
                max: u64::MAX,
            },
            Value::Size(default),
        )
    }
    /// A text parameter.
    pub fn string(name: &str, default: &str) -> Self {
        Self::new(name, ParamType::Str, Value::Str(default.to_owned()))
    }
    /// An enumerated parameter; `default` must be one of `values`.
    pub fn enumeration(name: &str, default: &str, values: &[&str]) -> Self {
        let words = values.iter().map(|s| (*s).to_owned()).collect();
        Self::new(name, ParamType::Enum(words), Value::Str(default.to_owned()))
    }
    /// A list parameter.
    pub fn list(name: &str, default: &[&str]) -> Self {
        let items = default.iter().map(|s| (*s).to_owned()).collect();
        Self::new(name, ParamType::List, Value::List(items))
    }
    /// Constrain an int or size parameter to `min..=max`.
    pub fn range(mut self, min: i64, max: i64) -> Self {
        match &mut self.ty {
            ParamType::Int { min: lo, max: hi } => {
                *lo = min;
                *hi = max;
            }
            ParamType::Size { min: lo, max: hi } => {
                *lo = min.max(0) as u64;
                *hi = max.max(0) as u64;
            }
            _ => {}
        }
        self
    }
    /// Help text.
    pub fn help(mut self, help: &str) -> Self {
        self.help = help.to_owned();
        self
    }
    /// Level (default [`Level::Basic`]).
    pub fn level(mut self, level: Level) -> Self {
        self.level = level;
        self
    }
    /// Every rank must use the same value: a rank started with a different one fails init
    /// with an error naming the parameter, the ranks and both values, instead of
    /// misinterpreting its peers' packets.
    pub fn job_wide(mut self) -> Self {
        self.job_wide = true;
        self
    }
}

/// Collects the parameters of one component, prefixing their names.
#[derive(Debug)]
pub struct ParamRegistrar<'a> {
    framework: String,
    component: String,
    specs: &'a mut Vec<ParamSpec>,
}

impl<'a> ParamRegistrar<'a> {
    /// A registrar for `framework`/`component` appending to `specs`.
    pub fn new(framework: &str, component: &str, specs: &'a mut Vec<ParamSpec>) -> Self {
        Self {
            framework: framework.to_owned(),
            component: component.to_owned(),
            specs,
        }
    }

    /// The declarations collected so far (to hand to a registrar of another framework).
    pub fn specs_mut(&mut self) -> &mut Vec<ParamSpec> {
        self.specs
    }

    /// Give back the underlying declaration list.
    pub fn into_specs(self) -> &'a mut Vec<ParamSpec> {
        self.specs
    }

    /// Register `param` as `<framework>_<component>_<name>`.
    pub fn add(&mut self, param: Param) {
        let name = format!("{}_{}_{}", self.framework, self.component, param.local);
        self.add_named(name, param);
    }

    /// Register `param` under its bare name (framework-level parameters such as `btl`).
    pub fn add_global(&mut self, param: Param) {
        let name = param.local.clone();
        self.add_named(name, param);
    }

    fn add_named(&mut self, name: String, param: Param) {
        debug_assert!(
            parse_value(&param.ty, &param.default.to_string()).is_ok()
                || matches!(param.ty, ParamType::List),
            "default of {name} does not satisfy its own type"
        );
        self.specs.push(ParamSpec {
            name,
            framework: self.framework.clone(),
            component: self.component.clone(),
            ty: param.ty,
            default: param.default,
            help: param.help,
            level: param.level,
            job_wide: param.job_wide,
        });
    }
}

/// A setting before validation: a name, its text, and where it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawSetting {
    /// Parameter name as written.
    pub name: String,
    /// Value as text.
    pub value: String,
    /// Where it came from.
    pub source: Source,
}

/// Errors about parameters. Every variant names the culprit and where it was set.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ParamError {
    /// A setting names no registered parameter.
    #[error("unknown MCA parameter '{name}' (set by {origin}){}", suggestion_text(.suggestion))]
    UnknownParam {
        /// The name as written.
        name: String,
        /// Where.
        origin: Source,
        /// Nearest registered name, if any is close.
        suggestion: Option<String>,
    },
    /// A value does not fit its parameter's type.
    #[error(
        "invalid value '{value}' for MCA parameter '{name}' (set by {origin}): expected {expected}"
    )]
    BadValue {
        /// Parameter.
        name: String,
        /// Value as written.
        value: String,
        /// Where.
        origin: Source,
        /// What would be valid.
        expected: String,
    },
    /// A file could not be read or parsed.
    #[error("cannot read MCA parameter file {path}: {reason}")]
    File {
        /// File.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A component selector names a component that does not exist.
    #[error("unknown {framework} component '{name}' in '{framework}' selector (set by {origin}); valid components: {valid}{}", suggestion_text(.suggestion))]
    UnknownComponent {
        /// Framework selector.
        framework: String,
        /// Name as written.
        name: String,
        /// Where.
        origin: Source,
        /// Comma-separated list of valid names.
        valid: String,
        /// Nearest name.
        suggestion: Option<String>,
    },
    /// A selector mixes included and excluded names.
    #[error("'{framework}' selector '{value}' (set by {origin}) mixes included and excluded (^) components; use either a list of names or '^' followed by names to exclude")]
    MixedSelector {
        /// Framework.
        framework: String,
        /// Value.
        value: String,
        /// Where.
        origin: Source,
    },
    /// A parameter was registered twice.
    #[error("MCA parameter '{0}' is registered twice")]
    Duplicate(String),
    /// Asked for a parameter that nobody registered (a programming error in a component).
    #[error("MCA parameter '{0}' is not registered")]
    NotRegistered(String),
}

fn suggestion_text(s: &Option<String>) -> String {
    match s {
        Some(n) => format!("; did you mean '{n}'?"),
        None => String::new(),
    }
}

/// The closest of `candidates` to `word`, if close enough to be a plausible typo.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let d = edit_distance(word, c);
        if best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    let (d, c) = best?;
    // A third of the length (at least 2) tolerates one or two slips without matching nonsense.
    let tolerance = (word.len().max(c.len()) / 3).max(2);
    (d <= tolerance).then(|| c.to_owned())
}

/// Damerau-Levenshtein (optimal string alignment) distance.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// Parse `text` as a value of type `ty`; the error string says what was expected.
pub fn parse_value(ty: &ParamType, text: &str) -> Result<Value, String> {
    let t = text.trim();
    match ty {
        ParamType::Bool => match t.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(Value::Bool(true)),
            "false" | "0" | "no" | "off" => Ok(Value::Bool(false)),
            _ => Err(ty.valid_values()),
        },
        ParamType::Int { min, max } => {
            let v: i64 = t.parse().map_err(|_| ty.valid_values())?;
            if v < *min || v > *max {
                return Err(ty.valid_values());
            }
            Ok(Value::Int(v))
        }
        ParamType::Size { min, max } => {
            let v = parse_size(t).ok_or_else(|| ty.valid_values())?;
            if v < *min || v > *max {
                return Err(ty.valid_values());
            }
            Ok(Value::Size(v))
        }
        ParamType::Str => Ok(Value::Str(t.to_owned())),
        ParamType::Enum(words) => {
            if words.iter().any(|w| w == t) {
                Ok(Value::Str(t.to_owned()))
            } else {
                let hint = nearest(t, words.iter().map(String::as_str))
                    .map(|n| format!(" (did you mean '{n}'?)"))
                    .unwrap_or_default();
                Err(format!("{}{hint}", ty.valid_values()))
            }
        }
        ParamType::List => Ok(Value::List(split_list(t))),
    }
}

/// Split a comma-separated list, trimming blanks and dropping empty items.
pub fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Parse `64K`, `2M`, `1G`, `4096` (also `KiB`/`KB` spellings, case-insensitive).
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let mult: u64 = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Read a TOML parameter file into raw settings. Keys are flat parameter names; values are
/// strings, integers, booleans or arrays of strings (lists).
pub fn read_param_file(path: &Path, system: bool) -> Result<Vec<RawSetting>, ParamError> {
    let text = std::fs::read_to_string(path).map_err(|e| ParamError::File {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    parse_param_file(&text, path, system)
}

/// Parse the text of a parameter file (see [`read_param_file`]).
pub fn parse_param_file(
    text: &str,
    path: &Path,
    system: bool,
) -> Result<Vec<RawSetting>, ParamError> {
    // Spanned keys: the parser says where each key is, for messages naming its line.
    let table: std::collections::BTreeMap<toml::Spanned<String>, toml::Value> =
        toml::from_str(text).map_err(|e: toml::de::Error| ParamError::File {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    let mut out = Vec::new();
    for (key, value) in table {
        let line = 1 + text[..key.span().start].matches('\n').count();
        let key = key.into_inner();
        let source = if system {
            Source::SystemFile {
                path: path.to_owned(),
                line,
            }
        } else {
            Source::UserFile {
                path: path.to_owned(),
                line,
            }
        };
        let text_value = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    toml::Value::String(s) => Ok(s.clone()),
                    other => Ok(other.to_string()),
                })
                .collect::<Result<Vec<_>, ParamError>>()?
                .join(","),
            other => {
                return Err(ParamError::File {
                    path: path.to_owned(),
                    reason: format!(
                        "line {line}: '{key}' has a {} value; parameters take a string, integer, boolean or array of strings (files are flat: no [sections])",
                        other.type_str()
                    ),
                })
            }
        };
        out.push(RawSetting {
            name: key,
            value: text_value,
            source,
        });
    }
    out.sort_by_key(|s| match &s.source {
        Source::SystemFile { line, .. } | Source::UserFile { line, .. } => *line,
        _ => 0,
    });
    Ok(out)
}

/// Environment variable prefix for parameters.
pub const ENV_PREFIX: &str = "RMCA_MCA_";

/// Collect `RMCA_MCA_<name>` settings from an environment listing.
pub fn env_settings(vars: impl IntoIterator<Item = (String, String)>) -> Vec<RawSetting> {
    let mut out: Vec<RawSetting> = vars
        .into_iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix(ENV_PREFIX)?.to_owned();
            Some(RawSetting {
                name,
                value: v,
                source: Source::Env { var: k },
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Parse `--mca name value` pairs out of an argument list, returning the settings and the
/// remaining arguments. A dangling `--mca` is an error naming what is missing.
pub fn cmdline_settings(args: &[String]) -> Result<(Vec<RawSetting>, Vec<String>), String> {
    let mut settings = Vec::new();
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--mca" || a == "-mca" {
            let name = it
                .next()
                .ok_or("--mca needs a parameter name and a value")?;
            let value = it
                .next()
                .ok_or_else(|| format!("--mca {name} needs a value"))?;
            settings.push(RawSetting {
                name: name.clone(),
                value: value.clone(),
                source: Source::CommandLine,
            });
        } else {
            rest.push(a.clone());
        }
    }
    Ok((settings, rest))
}

/// The unvalidated settings from every source, in precedence order.
#[derive(Clone, Debug, Default)]
pub struct RawSources {
    /// Settings, lowest precedence first.
    pub settings: Vec<RawSetting>,
}

/// Environment variable naming the user parameter file.
pub const USER_FILE_ENV: &str = "RMCA_PARAM_FILE";
/// Environment variable overriding the system parameter file's location.
pub const SYSTEM_FILE_ENV: &str = "RMCA_SYSTEM_PARAM_FILE";
/// Environment variable through which the launcher forwards `--mca` flags to ranks: one
/// `name=value` per line. Kept apart from `RMCA_MCA_*` so that command-line settings keep their
/// higher precedence and their source.
pub const CMDLINE_ENV: &str = "RMCA_MCA_CMDLINE";

/// Where the system file is by default: the `mca-params.toml` at the root of the source tree
/// this build came from.
pub fn default_system_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("mca-params.toml")
}

/// Encode settings for [`CMDLINE_ENV`].
pub fn encode_cmdline(settings: &[(String, String)]) -> String {
    settings.iter().map(|(n, v)| format!("{n}={v}\n")).collect()
}

impl RawSources {
    /// Gather settings from the process: system file, user file, environment, and `cmdline`
    /// (settings parsed from this process's own flags, plus any forwarded by the launcher).
    pub fn gather(cmdline: Vec<RawSetting>) -> Result<Self, ParamError> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        let system = std::env::var_os(SYSTEM_FILE_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(default_system_file);
        let user = std::env::var_os(USER_FILE_ENV)
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .map(|h| PathBuf::from(h).join(".rmca").join("mca-params.toml"))
            });
        let explicit_user = std::env::var_os(USER_FILE_ENV).is_some();
        Self::from_parts(Some(&system), user.as_deref(), explicit_user, env, cmdline)
    }

    /// Gather from explicit parts (testable without touching the process environment).
    /// A missing default file is skipped; a missing user file named explicitly is an error.
    pub fn from_parts(
        system_file: Option<&Path>,
        user_file: Option<&Path>,
        user_file_required: bool,
        env: Vec<(String, String)>,
        mut cmdline: Vec<RawSetting>,
    ) -> Result<Self, ParamError> {
        let mut settings = Vec::new();
        if let Some(p) = system_file.filter(|p| p.exists()) {
            settings.extend(read_param_file(p, true)?);
        }
        if let Some(p) = user_file {
            if p.exists() || user_file_required {
                settings.extend(read_param_file(p, false)?);
            }
        }
        let forwarded = env
            .iter()
            .find(|(k, _)| k == CMDLINE_ENV)
            .map(|(_, v)| v.clone());
        let mut fwd: Vec<RawSetting> = forwarded
            .as_deref()
            .unwrap_or("")
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(n, v)| RawSetting {
                name: n.to_owned(),
                value: v.to_owned(),
                source: Source::CommandLine,
            })
            .collect();
        // The launcher also exports forwarded flags as RMCA_MCA_<name> (for tools that only read
        // the environment); those copies are the command-line setting, not a second one.
        let from_env = env_settings(env.into_iter().filter(|(k, _)| k != CMDLINE_ENV))
            .into_iter()
            .filter(|e| !fwd.iter().any(|f| f.name == e.name && f.value == e.value));
        settings.extend(from_env);
        // The rank's own flags come after the launcher's so they win.
        fwd.append(&mut cmdline);
        cmdline = fwd;
        settings.extend(cmdline);
        Ok(Self { settings })
    }

    /// The highest-precedence raw text for `name`, before validation (used before plugins load,
    /// e.g. for `component_path`).
    pub fn peek(&self, name: &str) -> Option<&RawSetting> {
        self.settings
            .iter()
            .filter(|s| s.name == name)
            .max_by_key(|s| s.source.precedence())
    }
}

/// A registered parameter with its resolved value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamEntry {
    /// Declaration.
    pub spec: ParamSpec,
    /// Current value.
    pub value: Value,
    /// Where the value came from.
    pub source: Source,
}

/// Compare this rank's [job-wide settings](ParamStore::job_wide_settings) with the other
/// ranks': one line per parameter that differs, naming it, this rank's value and every rank
/// that has another value (a parameter a rank does not know counts as `<unset>`).
pub fn job_wide_disagreements(me: u32, mine: &str, theirs: &[(u32, String)]) -> Vec<String> {
    fn parse(text: &str) -> BTreeMap<&str, &str> {
        text.lines().filter_map(|l| l.split_once('=')).collect()
    }
    let mine_map = parse(mine);
    let mut names: Vec<&str> = mine_map.keys().copied().collect();
    let parsed: Vec<(u32, BTreeMap<&str, &str>)> =
        theirs.iter().map(|(r, t)| (*r, parse(t))).collect();
    for (_, m) in &parsed {
        names.extend(m.keys().copied());
    }
    names.sort_unstable();
    names.dedup();
    let mut out = Vec::new();
    for name in names {
        let own = mine_map.get(name).copied().unwrap_or("<unset>");
        let others: Vec<String> = parsed
            .iter()
            .filter_map(|(r, m)| {
                let v = m.get(name).copied().unwrap_or("<unset>");
                (v != own).then(|| format!("rank {r} has {v}"))
            })
            .collect();
        if !others.is_empty() {
            out.push(format!(
                "{name}: rank {me} has {own}, {}",
                others.join(", ")
            ));
        }
    }
    out
}

/// Every registered parameter with its value: what components read at init.
#[derive(Clone, Debug, Default)]
pub struct ParamStore {
    entries: BTreeMap<String, ParamEntry>,
}

impl ParamStore {
    /// Resolve `specs` against `raw`: apply every setting in precedence order, rejecting unknown
    /// names and ill-typed values. All errors are returned, not just the first.
    pub fn resolve(specs: Vec<ParamSpec>, raw: &RawSources) -> Result<Self, Vec<ParamError>> {
        let mut entries = BTreeMap::new();
        let mut errors = Vec::new();
        for spec in specs {
            if entries.contains_key(&spec.name) {
                errors.push(ParamError::Duplicate(spec.name.clone()));
                continue;
            }
            let value = spec.default.clone();
            entries.insert(
                spec.name.clone(),
                ParamEntry {
                    spec,
                    value,
                    source: Source::Default,
                },
            );
        }
        let mut ordered: Vec<&RawSetting> = raw.settings.iter().collect();
        ordered.sort_by_key(|s| s.source.precedence()); // stable: keeps file order within a source
        for s in ordered {
            match entries.get_mut(&s.name) {
                None => {
                    let suggestion = nearest(&s.name, raw_names(&entries));
                    errors.push(ParamError::UnknownParam {
                        name: s.name.clone(),
                        origin: s.source.clone(),
                        suggestion,
                    });
                }
                Some(e) => match parse_value(&e.spec.ty, &s.value) {
                    Ok(v) => {
                        e.value = v;
                        e.source = s.source.clone();
                    }
                    Err(expected) => errors.push(ParamError::BadValue {
                        name: s.name.clone(),
                        value: s.value.clone(),
                        origin: s.source.clone(),
                        expected,
                    }),
                },
            }
        }
        if errors.is_empty() {
            Ok(Self { entries })
        } else {
            Err(errors)
        }
    }

    /// Resolve `specs` with `settings` (full parameter names and values, taken as if each
    /// were set in the environment), reading no file and not the process's environment: the
    /// store a component's own tests build from its registration.
    pub fn with_settings(
        specs: Vec<ParamSpec>,
        settings: &[(&str, &str)],
    ) -> Result<Self, Vec<ParamError>> {
        let env = settings
            .iter()
            .map(|(name, value)| (format!("RMCA_MCA_{name}"), (*value).to_owned()))
            .collect();
        let raw = RawSources::from_parts(None, None, false, env, vec![]).map_err(|e| vec![e])?;
        Self::resolve(specs, &raw)
    }

    /// All entries, sorted by name.
    pub fn entries(&self) -> impl Iterator<Item = &ParamEntry> {
        self.entries.values()
    }

    /// The values of the [job-wide](Param::job_wide) parameters, one `name=value` per line in
    /// name order: what a rank publishes so that the others can check they agree.
    pub fn job_wide_settings(&self) -> String {
        self.entries
            .values()
            .filter(|e| e.spec.job_wide)
            .map(|e| format!("{}={}\n", e.spec.name, e.value))
            .collect()
    }

    /// One entry.
    pub fn entry(&self, name: &str) -> Result<&ParamEntry, ParamError> {
        self.entries
            .get(name)
            .ok_or_else(|| ParamError::NotRegistered(name.to_owned()))
    }

    /// A boolean parameter's value.
    pub fn get_bool(&self, name: &str) -> Result<bool, ParamError> {
        match &self.entry(name)?.value {
            Value::Bool(b) => Ok(*b),
            _ => Err(ParamError::NotRegistered(format!("{name} (as bool)"))),
        }
    }

    /// An integer parameter's value.
    pub fn get_int(&self, name: &str) -> Result<i64, ParamError> {
        match &self.entry(name)?.value {
            Value::Int(i) => Ok(*i),
            _ => Err(ParamError::NotRegistered(format!("{name} (as int)"))),
        }
    }

    /// A size parameter's value in bytes.
    pub fn get_size(&self, name: &str) -> Result<u64, ParamError> {
        match &self.entry(name)?.value {
            Value::Size(s) => Ok(*s),
            Value::Int(i) if *i >= 0 => Ok(*i as u64),
            _ => Err(ParamError::NotRegistered(format!("{name} (as size)"))),
        }
    }

    /// A string or enum parameter's value.
    pub fn get_str(&self, name: &str) -> Result<&str, ParamError> {
        match &self.entry(name)?.value {
            Value::Str(s) => Ok(s),
            _ => Err(ParamError::NotRegistered(format!("{name} (as string)"))),
        }
    }

    /// A list parameter's value.
    pub fn get_list(&self, name: &str) -> Result<&[String], ParamError> {
        match &self.entry(name)?.value {
            Value::List(l) => Ok(l),
            _ => Err(ParamError::NotRegistered(format!("{name} (as list)"))),
        }
    }
}

fn raw_names(entries: &BTreeMap<String, ParamEntry>) -> impl Iterator<Item = &str> {
    entries.keys().map(String::as_str)
}

/// A parsed component selector (`btl = "ud,shm,self"` or `"^rc"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selector {
    /// Every available component.
    All,
    /// Only these, in this order.
    Include(Vec<String>),
    /// Every available component but these.
    Exclude(Vec<String>),
}

impl Selector {
    /// Parse and check a selector's text against the available component names.
    pub fn parse(
        framework: &str,
        text: &str,
        source: &Source,
        available: &[&str],
    ) -> Result<Self, ParamError> {
        let items = split_list(text);
        if items.is_empty() {
            return Ok(Selector::All);
        }
        let excluded = items.iter().filter(|i| i.starts_with('^')).count();
        // Open MPI's syntax: a single leading '^' negates the whole list.
        let negate_all = items[0].starts_with('^') && excluded == 1;
        if excluded > 0 && !negate_all && excluded != items.len() {
            return Err(ParamError::MixedSelector {
                framework: framework.to_owned(),
                value: text.to_owned(),
                origin: source.clone(),
            });
        }
        let names: Vec<String> = items
            .iter()
            .map(|i| i.trim_start_matches('^').to_owned())
            .collect();
        for n in &names {
            if !available.contains(&n.as_str()) {
                return Err(ParamError::UnknownComponent {
                    framework: framework.to_owned(),
                    name: n.clone(),
                    origin: source.clone(),
                    valid: available.join(", "),
                    suggestion: nearest(n, available.iter().copied()),
                });
            }
        }
        Ok(if excluded > 0 {
            Selector::Exclude(names)
        } else {
            Selector::Include(names)
        })
    }

    /// Whether `name` is allowed.
    pub fn allows(&self, name: &str) -> bool {
        match self {
            Selector::All => true,
            Selector::Include(n) => n.iter().any(|x| x == name),
            Selector::Exclude(n) => !n.iter().any(|x| x == name),
        }
    }

    /// True when the user named `name` explicitly in an include list.
    pub fn explicitly_includes(&self, name: &str) -> bool {
        matches!(self, Selector::Include(n) if n.iter().any(|x| x == name))
    }
}

#[cfg(test)]
mod tests;
