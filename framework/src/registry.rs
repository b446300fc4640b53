//! The component registry and selection.
//!
//! Opening the MCA base happens in this order, because plugins register parameters too:
//! 1. gather raw settings from every source ([`RawSources`]);
//! 2. find built-in components (`inventory`) and plugins (on `component_path`);
//! 3. collect every parameter declaration and resolve the raw settings against them;
//! 4. check the selectors (`pml`, `btl`, `mpool`, `rcache`, `osc`, `coll`) against the available names.

use std::collections::BTreeSet;

use thiserror::Error;

use crate::btl::BtlComponent;
use crate::component::{BuiltinComponent, ComponentRef, Framework, Origin, RegisteredComponent};
use crate::params::{
    Level, Param, ParamError, ParamRegistrar, ParamSpec, ParamStore, RawSources, Selector, Source,
};
use crate::plugin::{self, PluginCandidate, PluginError};
use crate::pml::PmlComponent;

/// Errors opening the MCA base or selecting components.
#[derive(Debug, Error)]
pub enum McaError {
    /// One or more parameter errors (each names its culprit and source).
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
    Params(Vec<ParamError>),
    /// The user asked for a component whose plugin was refused.
    #[error("{framework} component '{name}' was requested by '{framework}' (set by {origin}) but its plugin was refused: {reason}")]
    RequestedPluginRefused {
        /// Framework.
        framework: Framework,
        /// Name.
        name: String,
        /// Where the selector was set.
        origin: Source,
        /// The refusal.
        reason: PluginError,
    },
    /// No component of a framework is usable.
    #[error("no {framework} component available: {reason}")]
    NoneAvailable {
        /// Framework.
        framework: Framework,
        /// Why.
        reason: String,
    },
}

impl From<ParamError> for McaError {
    fn from(e: ParamError) -> Self {
        McaError::Params(vec![e])
    }
}

/// Every component this process knows, and the plugins it refused.
#[derive(Debug, Default)]
pub struct Registry {
    components: Vec<RegisteredComponent>,
    refused: Vec<PluginCandidate>,
    path_errors: Vec<PluginError>,
}

/// Register the MCA base's own parameters (selectors, plugin path, profile).
pub fn register_base_params(specs: &mut Vec<ParamSpec>) {
    let mut r = ParamRegistrar::new("mca", "base", specs);
    r.add_global(Param::string("pml", "").help(
        "PML to use (one name, e.g. 'dr'); empty: the highest-priority PML. Every rank must agree.",
    ));
    r.add_global(Param::string("btl", "").help(
        "BTLs to use: a list ('ud,shm,self') or '^' and a list to exclude ('^rc'); empty: every BTL that initialises. Remember 'self' when listing.",
    ));
    r.add_global(
        Param::string("mpool", "").help("Memory pool component (empty: the highest-priority one)."),
    );
    r.add_global(
        Param::string("rcache", "")
            .help("Registration cache component (empty: the highest-priority one)."),
    );
    r.add_global(Param::string("osc", "").help(
        "One-sided (window) components allowed: a list ('am') or '^' and a list to exclude; empty: the highest-priority one that can serve each window.",
    ));
    r.add_global(Param::string("coll", "").help(
        "Collective components allowed: a list ('base,hier') or '^' and a list to exclude ('^hier'); empty: all. Each communicator stacks those that serve it, highest priority first; an operation falls through to the next component when one does not provide it. Every rank must agree.",
    ).job_wide());
    r.add_global(Param::string("component_path", "").help(
        "Colon-separated directories searched for plugins named librmca_<framework>_<name>.so",
    ));
    r.add_global(
        Param::int("rte_pmi_timeout", 600)
            .range(1, 86_400)
            .help("Seconds a rank waits for the launcher's PMI server to answer before giving up (read by the runtime environment)")
            .level(Level::Tuning),
    );
    r.add_global(Param::bool("profile", false).help(
        "Count messages and bytes by size class, unexpected messages, buffers and peak memory per component, and print a merged summary at finalize",
    ));
    r.add_global(
        Param::string("profile_json", "")
            .help("With profile: also write the merged summary as JSON to this file")
            .level(Level::Tuning),
    );
    crate::progress::register_params(r.into_specs());
}

/// Parameters the MCA base declares for every BTL component (Open MPI's `btl_base` ones), so
/// that a user can change how the BML ranks a transport without the component's help.
fn register_btl_base_params(r: &mut ParamRegistrar<'_>) {
    r.add(
        Param::int("exclusivity", -1)
            .range(-1, i64::from(u32::MAX))
            .help("Override of this BTL's exclusivity: for each peer only the BTLs of the highest exclusivity that reach it are used (self 65536, shm 32768, rc/ud 1024, tcp 256). -1 keeps the component's own")
            .level(Level::Tuning),
    );
}

/// The `btl_<name>_exclusivity` override of a BTL component, if set (see
/// [`Bml::build_with_exclusivity`](crate::bml::Bml::build_with_exclusivity)).
pub fn btl_exclusivity_override(params: &ParamStore, component: &str) -> Option<u32> {
    params
        .get_int(&format!("btl_{component}_exclusivity"))
        .ok()
        .and_then(|v| u32::try_from(v).ok())
}

impl Registry {
    /// The built-in components plus the plugins found on the `component_path` of `raw`.
    pub fn discover(raw: &RawSources) -> Self {
        let mut reg = Self::builtin();
        if let Some(path) = raw.peek("component_path") {
            reg.load_plugins(&path.value.clone());
        }
        reg
    }

    /// Only the built-in components.
    pub fn builtin() -> Self {
        let mut components: Vec<RegisteredComponent> = inventory::iter::<BuiltinComponent>
            .into_iter()
            .map(|b| RegisteredComponent {
                component: b.component,
                origin: Origin::Builtin,
            })
            .collect();
        components.sort_by_key(|c| (c.component.framework(), c.meta().name));
        Self {
            components,
            refused: Vec::new(),
            path_errors: Vec::new(),
        }
    }

    /// Load the plugins of a `:`-separated directory list. A plugin with the name of an already
    /// known component is refused (built-ins win, deterministically).
    pub fn load_plugins(&mut self, path_list: &str) {
        let (found, errors) = plugin::discover(path_list);
        self.path_errors.extend(errors);
        for cand in found {
            match &cand.result {
                Ok(p) => {
                    if self.find(cand.framework, &cand.name).is_some() {
                        tracing::warn!(path = %cand.path.display(), "plugin ignored: a component {}:{} already exists", cand.framework, cand.name);
                        continue;
                    }
                    self.components.push(RegisteredComponent {
                        component: p.component,
                        origin: Origin::Plugin(cand.path.clone()),
                    });
                }
                Err(_) => self.refused.push(cand),
            }
        }
        self.components
            .sort_by_key(|c| (c.component.framework(), c.meta().name));
    }

    /// Every known component.
    pub fn components(&self) -> &[RegisteredComponent] {
        &self.components
    }

    /// Components of one framework.
    pub fn of(&self, framework: Framework) -> impl Iterator<Item = &RegisteredComponent> {
        self.components
            .iter()
            .filter(move |c| c.component.framework() == framework)
    }

    /// One component.
    pub fn find(&self, framework: Framework, name: &str) -> Option<&RegisteredComponent> {
        self.of(framework).find(|c| c.meta().name == name)
    }

    /// Plugins found but refused.
    pub fn refused(&self) -> &[PluginCandidate] {
        &self.refused
    }

    /// Unreadable directories of the component path.
    pub fn path_errors(&self) -> &[PluginError] {
        &self.path_errors
    }

    /// The declarations of every parameter: the base's and every component's.
    pub fn param_specs(&self) -> Vec<ParamSpec> {
        let mut specs = Vec::new();
        register_base_params(&mut specs);
        for c in &self.components {
            let meta = c.meta();
            let framework = c.component.framework();
            let mut r = ParamRegistrar::new(framework.name(), meta.name, &mut specs);
            if framework == Framework::Btl {
                register_btl_base_params(&mut r);
            }
            c.component.component().register_params(&mut r);
        }
        specs
    }

    /// Resolve `raw` against every declared parameter.
    pub fn resolve(&self, raw: &RawSources) -> Result<ParamStore, McaError> {
        ParamStore::resolve(self.param_specs(), raw).map_err(McaError::Params)
    }

    /// The parsed selector of `framework`, checked against the available names. Naming a
    /// refused plugin explicitly is an error carrying the refusal.
    pub fn selector(
        &self,
        params: &ParamStore,
        framework: Framework,
    ) -> Result<Selector, McaError> {
        let entry = params.entry(framework.name())?;
        let text = entry.value.to_string();
        let mut names: BTreeSet<&str> = self.of(framework).map(|c| c.meta().name).collect();
        let refused: Vec<&PluginCandidate> = self
            .refused
            .iter()
            .filter(|c| c.framework == framework)
            .collect();
        names.extend(refused.iter().map(|c| c.name.as_str()));
        let available: Vec<&str> = names.into_iter().collect();
        let sel = Selector::parse(framework.name(), &text, &entry.source, &available)?;
        for cand in refused {
            if sel.explicitly_includes(&cand.name) {
                let reason = cand
                    .result
                    .as_ref()
                    .err()
                    .cloned()
                    .expect("refused plugins carry an error");
                return Err(McaError::RequestedPluginRefused {
                    framework,
                    name: cand.name.clone(),
                    origin: entry.source.clone(),
                    reason,
                });
            }
        }
        Ok(sel)
    }

    /// Check every selector (the launcher and tools call this up front for early errors).
    pub fn check_selectors(&self, params: &ParamStore) -> Result<(), McaError> {
        for fw in Framework::ALL {
            self.selector(params, fw)?;
        }
        Ok(())
    }

    /// The allowed BTL components, in the include list's order (or registry order).
    pub fn select_btls(
        &self,
        params: &ParamStore,
    ) -> Result<Vec<&'static dyn BtlComponent>, McaError> {
        let sel = self.selector(params, Framework::Btl)?;
        let mut out: Vec<(usize, &'static dyn BtlComponent)> = Vec::new();
        for c in self.of(Framework::Btl) {
            let name = c.meta().name;
            if !sel.allows(name) {
                continue;
            }
            let order = match &sel {
                Selector::Include(list) => {
                    list.iter().position(|n| n == name).unwrap_or(usize::MAX)
                }
                _ => out.len(),
            };
            if let ComponentRef::Btl(b) = c.component {
                out.push((order, b));
            }
        }
        out.sort_by_key(|(o, _)| *o);
        Ok(out.into_iter().map(|(_, b)| b).collect())
    }

    /// The PML to use: the highest-priority allowed one (ties broken by name for determinism).
    pub fn select_pml(&self, params: &ParamStore) -> Result<&'static dyn PmlComponent, McaError> {
        let sel = self.selector(params, Framework::Pml)?;
        let mut best: Option<(i32, &'static str, &'static dyn PmlComponent)> = None;
        for c in self.of(Framework::Pml) {
            let ComponentRef::Pml(p) = c.component else {
                continue;
            };
            let name = c.meta().name;
            if !sel.allows(name) {
                continue;
            }
            let prio = p.priority(params);
            if best.is_none_or(|(bp, bn, _)| prio > bp || (prio == bp && name < bn)) {
                best = Some((prio, name, p));
            }
        }
        best.map(|(_, _, p)| p)
            .ok_or_else(|| McaError::NoneAvailable {
                framework: Framework::Pml,
                reason: match sel {
                    Selector::All => "no PML component is built in or loaded".into(),
                    _ => "the 'pml' selector excludes every PML".into(),
                },
            })
    }

    /// The OSC component of a window of shape `config`: the highest-priority allowed one
    /// that can serve it (ties broken by name).
    pub fn select_osc(
        &self,
        params: &ParamStore,
        config: &crate::osc::WinConfig,
    ) -> Result<&'static dyn crate::osc::OscComponent, McaError> {
        let sel = self.selector(params, Framework::Osc)?;
        let mut best: Option<(i32, &'static str, &'static dyn crate::osc::OscComponent)> = None;
        for c in self.of(Framework::Osc) {
            let ComponentRef::Osc(o) = c.component else {
                continue;
            };
            let name = c.meta().name;
            if !sel.allows(name) || !o.query(config, params) {
                continue;
            }
            let prio = o.priority(params);
            if best.is_none_or(|(bp, bn, _)| prio > bp || (prio == bp && name < bn)) {
                best = Some((prio, name, o));
            }
        }
        best.map(|(_, _, o)| o)
            .ok_or_else(|| McaError::NoneAvailable {
                framework: Framework::Osc,
                reason: "no allowed OSC component can serve this window (see --mca osc)".into(),
            })
    }

    /// The coll stack of a communicator of shape `shape`: a module of every allowed component
    /// that serves it, highest priority first (ties broken by name). An error when none does.
    pub fn select_coll(
        &self,
        params: &ParamStore,
        shape: &crate::coll::CommShape,
    ) -> Result<crate::coll::CollStack, McaError> {
        let sel = self.selector(params, Framework::Coll)?;
        let mut found = Vec::new();
        for c in self.of(Framework::Coll) {
            let ComponentRef::Coll(k) = c.component else {
                continue;
            };
            let name = c.meta().name;
            if !sel.allows(name) {
                continue;
            }
            if let Some(m) = k.query(shape, params) {
                found.push((k.priority(params), name, m));
            }
        }
        if found.is_empty() {
            return Err(McaError::NoneAvailable {
                framework: Framework::Coll,
                reason: format!(
                    "no allowed coll component serves this communicator ({} members; see --mca coll)",
                    shape.size()
                ),
            });
        }
        found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        Ok(crate::coll::CollStack::new(
            found.into_iter().map(|(_, n, m)| (n, m)).collect(),
        ))
    }

    /// The component of a single-choice framework (mpool, rcache): the selected name, or the
    /// first available.
    pub fn select_one(
        &self,
        params: &ParamStore,
        framework: Framework,
    ) -> Result<ComponentRef, McaError> {
        let sel = self.selector(params, framework)?;
        self.of(framework)
            .find(|c| sel.allows(c.meta().name))
            .map(|c| c.component)
            .ok_or_else(|| McaError::NoneAvailable {
                framework,
                reason: format!("the '{framework}' selector excludes every component"),
            })
    }
}
