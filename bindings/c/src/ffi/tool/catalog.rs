//! The variables the tool interface shows: rmca's MCA parameters as control variables, its
//! profiling counters as performance variables, grouped in one category per framework and
//! one per component. Indices are stable for the life of the process: variables and
//! categories are only ever appended (performance variables appear at `MPI_Init`, when the
//! PML and BTLs that own the counters exist).

use std::collections::HashMap;
use std::ffi::c_int;

use rmca::framework::params::{Level, ParamStore, ParamType, Value};
use rmca::RankProfile;

use crate::abi::Handle;

// Values of mpi.h's MPI_T enumerations and of the predefined datatypes used here.
pub const MPI_INT: Handle = 0x209;
pub const MPI_LONG_LONG: Handle = 0x20b;
pub const MPI_UNSIGNED_LONG_LONG: Handle = 0x20f;
pub const MPI_CHAR: Handle = 0x243;
pub const VERBOSITY_USER_BASIC: c_int = 0x09;
pub const VERBOSITY_TUNER_BASIC: c_int = 0x11;
pub const VERBOSITY_MPIDEV_BASIC: c_int = 0x21;
pub const SCOPE_READONLY: c_int = 2;
pub const SCOPE_LOCAL: c_int = 3;
pub const SCOPE_ALL_EQ: c_int = 7;
pub const PVAR_CLASS_LEVEL: c_int = 2;
pub const PVAR_CLASS_HIGHWATERMARK: c_int = 5;
pub const PVAR_CLASS_COUNTER: c_int = 7;

/// Parameters read before the MCA parameter store exists (by the runtime environment, from
/// its own environment variable): a write through the tool interface could never reach them.
const READ_BEFORE_PARAMS: &[&str] = &["rte_pmi_timeout"];

/// One control variable: an MCA parameter.
#[derive(Debug, Clone)]
pub struct Cvar {
    pub name: String,
    pub ty: ParamType,
    pub help: String,
    pub level: Level,
    /// `MPI_T_SCOPE_*`.
    pub scope: c_int,
    /// Index into [`Catalog::enums`] for parameters with a fixed set of words.
    pub enumtype: Option<usize>,
}

impl Cvar {
    /// The `MPI_T_VERBOSITY_*` of the parameter's level.
    pub fn verbosity(&self) -> c_int {
        match self.level {
            Level::Basic => VERBOSITY_USER_BASIC,
            Level::Tuning => VERBOSITY_TUNER_BASIC,
            Level::Dev => VERBOSITY_MPIDEV_BASIC,
        }
    }

    /// The MPI datatype a read yields and a write takes.
    pub fn datatype(&self) -> Handle {
        match &self.ty {
            ParamType::Bool | ParamType::Enum(_) => MPI_INT,
            ParamType::Int { min, max }
                if *min >= i64::from(c_int::MIN) && *max <= i64::from(c_int::MAX) =>
            {
                MPI_INT
            }
            ParamType::Int { .. } => MPI_LONG_LONG,
            ParamType::Size { .. } => MPI_UNSIGNED_LONG_LONG,
            ParamType::Str | ParamType::List => MPI_CHAR,
        }
    }

    /// Whether a write can ever take effect (before init).
    pub fn writable(&self) -> bool {
        self.scope != SCOPE_READONLY
    }
}

/// The value of a parameter as the tool interface passes it.
#[derive(Debug, Clone, PartialEq)]
pub enum CvarValue {
    Int(c_int),
    LongLong(i64),
    Unsigned(u64),
    Text(String),
}

/// `value` of `cvar` in its MPI datatype (enums as the index of their word).
pub fn to_tool(cvar: &Cvar, value: &Value) -> CvarValue {
    match (&cvar.ty, value) {
        (_, Value::Bool(b)) => CvarValue::Int(c_int::from(*b)),
        (ParamType::Enum(words), Value::Str(s)) => {
            CvarValue::Int(words.iter().position(|w| w == s).unwrap_or(0) as c_int)
        }
        (_, Value::Int(i)) if cvar.datatype() == MPI_INT => CvarValue::Int(*i as c_int),
        (_, Value::Int(i)) => CvarValue::LongLong(*i),
        (_, Value::Size(s)) => CvarValue::Unsigned(*s),
        (_, v) => CvarValue::Text(v.to_string()),
    }
}

/// The text that sets `cvar` to `value` (as on a command line), or why `value` is not valid.
pub fn from_tool(cvar: &Cvar, value: &CvarValue) -> Result<String, String> {
    match (&cvar.ty, value) {
        (ParamType::Enum(words), CvarValue::Int(i)) => usize::try_from(*i)
            .ok()
            .and_then(|i| words.get(i))
            .cloned()
            .ok_or_else(|| format!("{i} is not an item of the enumeration")),
        (_, CvarValue::Int(i)) => Ok(i.to_string()),
        (_, CvarValue::LongLong(i)) => Ok(i.to_string()),
        (_, CvarValue::Unsigned(u)) => Ok(u.to_string()),
        (_, CvarValue::Text(t)) => Ok(t.clone()),
    }
}

/// Where a performance variable's value comes from in a [`RankProfile`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Counter,
    MemoryCurrent,
    MemoryPeak,
    MemoryAllocations,
}

/// One performance variable: a profiling counter, or the memory a component holds.
#[derive(Debug, Clone)]
pub struct Pvar {
    pub name: String,
    /// `MPI_T_PVAR_CLASS_*`.
    pub class: c_int,
    pub desc: String,
    /// The key in the profile (counter name or memory owner).
    key: String,
    source: Source,
}

impl Pvar {
    /// Counters can be reset and written (per handle, as an offset from the running count);
    /// levels and peaks are what the runtime measures and cannot.
    pub fn readonly(&self) -> bool {
        self.class != PVAR_CLASS_COUNTER
    }

    /// The variable's value in `profile` (absent: the component is gone).
    pub fn value(&self, profile: &RankProfile) -> Option<u64> {
        match self.source {
            Source::Counter => profile.counters.get(&self.key).copied(),
            Source::MemoryCurrent => profile.memory.get(&self.key).map(|m| m.current),
            Source::MemoryPeak => profile.memory.get(&self.key).map(|m| m.peak),
            Source::MemoryAllocations => profile.memory.get(&self.key).map(|m| m.allocations),
        }
    }
}

/// A category: a framework (holding one subcategory per component) or a component (holding
/// its parameters and counters).
#[derive(Debug, Clone, Default)]
pub struct Category {
    pub name: String,
    pub desc: String,
    pub cvars: Vec<usize>,
    pub pvars: Vec<usize>,
    pub subcategories: Vec<usize>,
}

/// An enumeration: the words of an enumerated parameter, valued by their position.
#[derive(Debug, Clone)]
pub struct Enum {
    pub name: String,
    pub items: Vec<String>,
}

/// Every variable, category and enumeration shown so far.
#[derive(Debug, Default)]
pub struct Catalog {
    pub cvars: Vec<Cvar>,
    pub pvars: Vec<Pvar>,
    pub categories: Vec<Category>,
    pub enums: Vec<Enum>,
    /// Bumped whenever something is added (`MPI_T_category_changed`).
    pub updates: c_int,
    cvar_index: HashMap<String, usize>,
    pvar_index: HashMap<String, usize>,
    category_index: HashMap<String, usize>,
}

impl Catalog {
    /// Add the parameters of `store` not shown yet.
    pub fn add_params(&mut self, store: &ParamStore) {
        let before = self.cvars.len();
        for e in store.entries() {
            if self.cvar_index.contains_key(&e.spec.name) {
                continue;
            }
            let enumtype = match &e.spec.ty {
                ParamType::Enum(words) => {
                    self.enums.push(Enum {
                        name: e.spec.name.clone(),
                        items: words.clone(),
                    });
                    Some(self.enums.len() - 1)
                }
                _ => None,
            };
            let scope = if READ_BEFORE_PARAMS.contains(&e.spec.name.as_str()) {
                SCOPE_READONLY
            } else if e.spec.job_wide {
                SCOPE_ALL_EQ
            } else {
                SCOPE_LOCAL
            };
            let idx = self.cvars.len();
            self.cvars.push(Cvar {
                name: e.spec.name.clone(),
                ty: e.spec.ty.clone(),
                help: format!("{} (valid: {})", e.spec.help, e.spec.ty.valid_values()),
                level: e.spec.level,
                scope,
                enumtype,
            });
            self.cvar_index.insert(e.spec.name.clone(), idx);
            let cat = self.component_category(&e.spec.framework, &e.spec.component);
            self.categories[cat].cvars.push(idx);
        }
        if self.cvars.len() != before {
            self.updates += 1;
        }
    }

    /// Add the counters and memory owners of `profile` not shown yet.
    pub fn add_profile(&mut self, profile: &RankProfile) {
        let before = self.pvars.len();
        for name in profile.counters.keys() {
            // Most are counts; a maximum over peers (dr's round-trip time) is a peak, and a
            // measurement (ob1's bulk time estimates, shm's copy bandwidth) a level that goes
            // up and down.
            let what_part = name.rsplit('.').next().unwrap_or(name);
            let measured = what_part.starts_with("measured_")
                || ["_ns", "_us", "_mbps"]
                    .iter()
                    .any(|u| what_part.ends_with(u));
            let (class, what) = if name.ends_with("_max") || name.contains("_max_") {
                (PVAR_CLASS_HIGHWATERMARK, "largest value of")
            } else if measured {
                (PVAR_CLASS_LEVEL, "current estimate of")
            } else {
                (PVAR_CLASS_COUNTER, "count of")
            };
            let desc = format!(
                "Profiling counter {name} of this process ({what} {})",
                what_part.replace('_', " ")
            );
            self.add_pvar(name, name, Source::Counter, class, desc);
        }
        for owner in profile.memory.keys() {
            for (suffix, source, class, desc) in [
                (
                    "memory_current",
                    Source::MemoryCurrent,
                    PVAR_CLASS_LEVEL,
                    "bytes it holds",
                ),
                (
                    "memory_peak",
                    Source::MemoryPeak,
                    PVAR_CLASS_HIGHWATERMARK,
                    "most bytes it held",
                ),
                (
                    "memory_allocations",
                    Source::MemoryAllocations,
                    PVAR_CLASS_COUNTER,
                    "allocations it made",
                ),
            ] {
                let name = format!("{owner}.{suffix}");
                let desc = format!("Memory of {owner} in this process: {desc}");
                self.add_pvar(&name, owner, source, class, desc);
            }
        }
        if self.pvars.len() != before {
            self.updates += 1;
        }
    }

    fn add_pvar(&mut self, name: &str, key: &str, source: Source, class: c_int, desc: String) {
        if self.pvar_index.contains_key(name) {
            return;
        }
        let idx = self.pvars.len();
        self.pvars.push(Pvar {
            name: name.to_owned(),
            class,
            desc,
            key: key.to_owned(),
            source,
        });
        self.pvar_index.insert(name.to_owned(), idx);
        // Names are `<framework>.<component>.<what>`.
        let parts: Vec<&str> = name.split('.').collect();
        let cat = match parts.as_slice() {
            [fw, comp, _, ..] => self.component_category(fw, comp),
            [fw, ..] => self.framework_category(fw),
            [] => unreachable!("split yields at least one part"),
        };
        self.categories[cat].pvars.push(idx);
    }

    fn framework_category(&mut self, framework: &str) -> usize {
        self.category(framework, || format!("The {framework} framework"))
            .0
    }

    fn component_category(&mut self, framework: &str, component: &str) -> usize {
        let parent = self.framework_category(framework);
        let name = format!("{framework}_{component}");
        let (idx, new) = self.category(&name, || {
            if component == "base" {
                format!("Framework-wide settings of {framework}")
            } else {
                format!("The {component} component of the {framework} framework")
            }
        });
        if new {
            self.categories[parent].subcategories.push(idx);
        }
        idx
    }

    /// The category `name`, made with `desc()` if new; and whether it is new.
    fn category(&mut self, name: &str, desc: impl FnOnce() -> String) -> (usize, bool) {
        if let Some(&i) = self.category_index.get(name) {
            return (i, false);
        }
        self.categories.push(Category {
            name: name.to_owned(),
            desc: desc(),
            ..Category::default()
        });
        let i = self.categories.len() - 1;
        self.category_index.insert(name.to_owned(), i);
        (i, true)
    }

    pub fn cvar_index(&self, name: &str) -> Option<usize> {
        self.cvar_index.get(name).copied()
    }

    pub fn pvar_index(&self, name: &str) -> Option<usize> {
        self.pvar_index.get(name).copied()
    }

    pub fn category_index(&self, name: &str) -> Option<usize> {
        self.category_index.get(name).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmca::framework::params::{Param, ParamRegistrar, RawSources};
    use rmca::MemoryUse;

    fn store() -> ParamStore {
        let mut specs = Vec::new();
        let mut r = ParamRegistrar::new("btl", "shm", &mut specs);
        r.add(Param::size("fifo_size", 4096).help("FIFO bytes"));
        r.add(Param::enumeration("mode", "b", &["a", "b"]).level(Level::Dev));
        r.add(Param::bool("flag", true).job_wide());
        ParamStore::resolve(specs, &RawSources::default()).unwrap()
    }

    #[test]
    fn parameters_become_cvars_in_component_categories() {
        let mut c = Catalog::default();
        c.add_params(&store());
        let i = c.cvar_index("btl_shm_fifo_size").unwrap();
        assert_eq!(c.cvars[i].datatype(), MPI_UNSIGNED_LONG_LONG);
        let m = &c.cvars[c.cvar_index("btl_shm_mode").unwrap()];
        assert_eq!(
            (m.datatype(), m.verbosity()),
            (MPI_INT, VERBOSITY_MPIDEV_BASIC)
        );
        assert_eq!(c.enums[m.enumtype.unwrap()].items, ["a", "b"]);
        assert_eq!(to_tool(m, &Value::Str("b".into())), CvarValue::Int(1));
        assert_eq!(from_tool(m, &CvarValue::Int(0)).unwrap(), "a");
        assert!(from_tool(m, &CvarValue::Int(2)).is_err());
        assert_eq!(
            c.cvars[c.cvar_index("btl_shm_flag").unwrap()].scope,
            SCOPE_ALL_EQ
        );
        let shm = c.category_index("btl_shm").unwrap();
        assert_eq!(c.categories[shm].cvars.len(), 3);
        let btl = c.category_index("btl").unwrap();
        assert_eq!(c.categories[btl].subcategories, [shm]);
        // Adding the same parameters again changes nothing.
        let updates = c.updates;
        c.add_params(&store());
        assert_eq!((c.cvars.len(), c.updates), (3, updates));
    }

    #[test]
    fn counters_and_memory_become_pvars() {
        let mut c = Catalog::default();
        c.add_params(&store());
        let mut p = RankProfile::default();
        p.counters.insert("btl.shm.frags_sent".into(), 5);
        p.counters.insert("pml.dr.srtt_max_us".into(), 9);
        p.counters.insert("pml.ob1.bulk_shm_4096_get_ns".into(), 7);
        p.counters.insert("btl.shm.measured_copy_mbps".into(), 7);
        p.memory.insert(
            "btl.shm".into(),
            MemoryUse {
                current: 10,
                peak: 20,
                allocations: 2,
            },
        );
        c.add_profile(&p);
        let sent = &c.pvars[c.pvar_index("btl.shm.frags_sent").unwrap()];
        assert_eq!(
            (sent.class, sent.value(&p), sent.readonly()),
            (PVAR_CLASS_COUNTER, Some(5), false)
        );
        let srtt = &c.pvars[c.pvar_index("pml.dr.srtt_max_us").unwrap()];
        assert_eq!(srtt.class, PVAR_CLASS_HIGHWATERMARK);
        let peak = &c.pvars[c.pvar_index("btl.shm.memory_peak").unwrap()];
        assert_eq!((peak.value(&p), peak.readonly()), (Some(20), true));
        let shm = c.category_index("btl_shm").unwrap();
        assert_eq!(c.categories[shm].pvars.len(), 5);
        assert!(c.category_index("pml_dr").is_some());
        let bulk = &c.pvars[c.pvar_index("pml.ob1.bulk_shm_4096_get_ns").unwrap()];
        assert_eq!((bulk.class, bulk.readonly()), (PVAR_CLASS_LEVEL, true));
        let mbps = &c.pvars[c.pvar_index("btl.shm.measured_copy_mbps").unwrap()];
        assert_eq!(mbps.class, PVAR_CLASS_LEVEL);
        assert_eq!(c.pvars.len(), 7);
    }
}
