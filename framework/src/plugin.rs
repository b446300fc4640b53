//! Loading third-party components from shared libraries.
//!
//! A plugin is a `cdylib` named `librmca_<framework>_<name>.so`, found in the directories of the
//! `component_path` parameter, that exports [`DESCRIPTOR_SYMBOL`]: an `extern "C"` function
//! returning a pointer to a `#[repr(C)]` [`PluginDescriptor`]. Rust has no stable ABI, so the
//! trait objects behind the descriptor are only touched once every version field matched: the
//! plugin ABI version (the layout of the descriptor itself), the rustc that built it and the
//! framework API version, which covers every crate whose types cross the boundary (this crate's
//! version and source, and the exact versions of `tracing-core` and `bitflags`: see
//! [`FRAMEWORK_API_VERSION`]). A refusal names the file and the differing field or crate.
//!
//! Plugins are never unloaded: thread-local destructors and `dlclose` do not mix
//! (the library handle is leaked on purpose).
//!
//! Write a plugin with [`declare_plugin!`](crate::declare_plugin).
#![allow(unsafe_code)]

use std::ffi::{c_char, CStr};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::component::{ComponentRef, Framework};

/// Version of the [`PluginDescriptor`] layout. Bump on any change to it or to [`PluginVTable`].
pub const PLUGIN_ABI_VERSION: u32 = 1;

/// The framework API version a plugin must have been built against: this crate's version and
/// a fingerprint of its source (the traits a plugin implements are this crate's, and their
/// layout can change without a version bump), then `;crate=version` for every other crate whose
/// types cross the boundary (the host's `tracing_core::Dispatch`, `bitflags`-built flags), each
/// pinned exactly in this crate's Cargo.toml; e.g. `0.1.0+3f2a...;tracing-core=0.1.36;bitflags=2.13.2`.
pub const FRAMEWORK_API_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "+",
    env!("RMCA_FRAMEWORK_FINGERPRINT"),
    ";",
    env!("RMCA_FRAMEWORK_ABI_CRATES"),
    "\0"
);

/// The rustc that built this crate (captured by the build script).
pub const RUSTC_VERSION: &str = concat!(env!("RMCA_RUSTC_VERSION"), "\0");

/// The symbol every plugin exports.
pub const DESCRIPTOR_SYMBOL: &[u8] = b"rmca_plugin_descriptor\0";

/// Functions a plugin offers once its versions are accepted.
#[repr(C)]
pub struct PluginVTable {
    /// The component (only dereferenced after the version checks).
    pub component: extern "C" fn() -> *const ComponentRef,
    /// Hand the host's `tracing` dispatcher to the plugin's own copy of `tracing`.
    pub set_tracing_dispatch: extern "C" fn(dispatch: *const tracing_core::Dispatch),
}

/// What [`DESCRIPTOR_SYMBOL`] returns. Strings are NUL-terminated UTF-8 with static lifetime.
#[repr(C)]
pub struct PluginDescriptor {
    /// Must equal [`PLUGIN_ABI_VERSION`]; checked before any other field is read.
    pub abi_version: u32,
    /// `rustc --version` of the plugin's build.
    pub rustc_version: *const c_char,
    /// The framework crate version the plugin was built against.
    pub framework_api_version: *const c_char,
    /// `"btl"`, `"pml"`, `"mpool"` or `"rcache"`.
    pub framework: *const c_char,
    /// Component name; must match the file name.
    pub name: *const c_char,
    /// The component's own version.
    pub component_version: *const c_char,
    /// Entry points.
    pub vtable: *const PluginVTable,
}

/// Why a plugin was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PluginError {
    /// The file could not be loaded as a shared library.
    #[error("plugin {path}: cannot be loaded as a shared library: {reason}")]
    Load {
        /// File.
        path: PathBuf,
        /// Loader's message.
        reason: String,
    },
    /// The descriptor symbol is missing.
    #[error("plugin {path}: missing symbol 'rmca_plugin_descriptor' (not an rmca plugin, or built without declare_plugin!)")]
    MissingSymbol {
        /// File.
        path: PathBuf,
    },
    /// A descriptor field differs from what this host expects.
    #[error("plugin {path}: field '{field}' is '{found}', this host requires '{expected}'")]
    Mismatch {
        /// File.
        path: PathBuf,
        /// Which field.
        field: &'static str,
        /// The plugin's value.
        found: String,
        /// The host's value.
        expected: String,
    },
    /// The plugin was built against another version of a crate whose types cross the plugin
    /// boundary (rmca-framework itself, tracing-core, bitflags).
    #[error("plugin {path}: built against {krate} {found}, this host uses {krate} {expected}; its types cross the plugin boundary, so rebuild the plugin against this host's rmca-framework")]
    ApiMismatch {
        /// File.
        path: PathBuf,
        /// The crate whose version differs (`rmca-framework` for this crate's version or source).
        krate: String,
        /// The plugin's version of it.
        found: String,
        /// The host's.
        expected: String,
    },
    /// The descriptor is malformed (null pointers, bad UTF-8).
    #[error("plugin {path}: corrupt descriptor: {reason}")]
    Corrupt {
        /// File.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A directory of the component path could not be read.
    #[error("component_path directory {path}: {reason}")]
    Directory {
        /// Directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// A plugin found on disk, loaded or refused.
#[derive(Debug)]
pub struct PluginCandidate {
    /// The file.
    pub path: PathBuf,
    /// Framework from the file name.
    pub framework: Framework,
    /// Component name from the file name.
    pub name: String,
    /// The component, or why it was refused.
    pub result: Result<LoadedPlugin, PluginError>,
}

/// An accepted plugin.
#[derive(Clone, Copy, Debug)]
pub struct LoadedPlugin {
    /// The component.
    pub component: ComponentRef,
    /// Its version string.
    pub version: &'static str,
}

/// Parse `librmca_<framework>_<name>.so` into its parts.
pub fn parse_file_name(file_name: &str) -> Option<(Framework, String)> {
    let stem = file_name.strip_prefix("librmca_")?.strip_suffix(".so")?;
    let (fw, name) = stem.split_once('_')?;
    let fw = Framework::parse(fw)?;
    (!name.is_empty()).then(|| (fw, name.to_owned()))
}

/// Find and load every plugin in the `:`-separated directories of `path_list`.
pub fn discover(path_list: &str) -> (Vec<PluginCandidate>, Vec<PluginError>) {
    let mut found = Vec::new();
    let mut dir_errors = Vec::new();
    for dir in path_list.split(':').filter(|d| !d.is_empty()) {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                dir_errors.push(PluginError::Directory {
                    path: dir.into(),
                    reason: e.to_string(),
                });
                continue;
            }
        };
        let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for path in files {
            let Some((framework, name)) = path
                .file_name()
                .and_then(|f| f.to_str())
                .and_then(parse_file_name)
            else {
                continue;
            };
            let result = load(&path, framework, &name);
            if let Err(e) = &result {
                tracing::warn!("{e}");
            }
            found.push(PluginCandidate {
                path,
                framework,
                name,
                result,
            });
        }
    }
    (found, dir_errors)
}

fn cstr(path: &Path, field: &'static str, p: *const c_char) -> Result<&'static str, PluginError> {
    if p.is_null() {
        return Err(PluginError::Corrupt {
            path: path.into(),
            reason: format!("field '{field}' is null"),
        });
    }
    // SAFETY: the ABI version matched, so the descriptor has our layout and its string fields are
    // documented as static NUL-terminated strings; the library is never unloaded ('static holds).
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| PluginError::Corrupt {
        path: path.into(),
        reason: format!("field '{field}' is not UTF-8"),
    })
}

fn trim_nul(s: &'static str) -> &'static str {
    s.trim_end_matches('\0')
}

/// The parts of a framework API version: `("rmca-framework", "<version>+<fingerprint>")`, then
/// `(crate, version)` for every other crate it names; `None` if it is not of that shape.
fn api_parts(api: &str) -> Option<Vec<(&str, &str)>> {
    let mut parts = api.split(';');
    let own = parts.next().filter(|p| !p.is_empty() && !p.contains('='))?;
    let mut out = vec![("rmca-framework", own)];
    for p in parts {
        out.push(p.split_once('=')?);
    }
    Some(out)
}

/// The first crate whose version differs between two framework API versions that name the
/// same crates: `(crate, plugin's version, host's version)`.
pub fn api_difference(plugin: &str, host: &str) -> Option<(String, String, String)> {
    let (theirs, ours) = (api_parts(plugin)?, api_parts(host)?);
    let same_crates =
        theirs.len() == ours.len() && theirs.iter().zip(&ours).all(|((a, _), (b, _))| a == b);
    if !same_crates {
        return None;
    }
    theirs
        .iter()
        .zip(&ours)
        .find(|((_, a), (_, b))| a != b)
        .map(|((k, a), (_, b))| ((*k).to_owned(), (*a).to_owned(), (*b).to_owned()))
}

/// Load one plugin file and check its descriptor against this host.
pub fn load(path: &Path, framework: Framework, name: &str) -> Result<LoadedPlugin, PluginError> {
    // SAFETY: loading a library runs its initialisers; the component path is trusted
    // configuration, as for any MCA implementation (Open MPI dlopens its components alike).
    let lib = unsafe { libloading::Library::new(path) }.map_err(|e| PluginError::Load {
        path: path.into(),
        reason: e.to_string(),
    })?;
    let descriptor_fn = {
        // SAFETY: the symbol's type is fixed by the plugin ABI (version-checked just below before
        // anything but the first field is read).
        let sym: Result<libloading::Symbol<'_, extern "C" fn() -> *const PluginDescriptor>, _> =
            unsafe { lib.get(DESCRIPTOR_SYMBOL) };
        match sym {
            Ok(s) => *s,
            Err(_) => return Err(PluginError::MissingSymbol { path: path.into() }),
        }
    };
    // Never unload: TLS destructors and dlclose do not mix; keep the mapping for the process.
    std::mem::forget(lib);
    let desc_ptr = descriptor_fn();
    if desc_ptr.is_null() {
        return Err(PluginError::Corrupt {
            path: path.into(),
            reason: "descriptor function returned null".into(),
        });
    }
    // SAFETY: every layout version starts with a u32 ABI version, so reading it is valid for any
    // plugin that follows the protocol at all.
    let abi = unsafe { std::ptr::read(desc_ptr as *const u32) };
    if abi != PLUGIN_ABI_VERSION {
        return Err(PluginError::Mismatch {
            path: path.into(),
            field: "plugin ABI version",
            found: abi.to_string(),
            expected: PLUGIN_ABI_VERSION.to_string(),
        });
    }
    // SAFETY: the ABI version matched, so the pointee has exactly our PluginDescriptor layout.
    let d = unsafe { &*desc_ptr };
    let checks: [(&'static str, *const c_char, &'static str); 3] = [
        ("rustc version", d.rustc_version, trim_nul(RUSTC_VERSION)),
        (
            "framework API version",
            d.framework_api_version,
            trim_nul(FRAMEWORK_API_VERSION),
        ),
        ("framework", d.framework, framework.name()),
    ];
    for (field, ptr, expected) in checks {
        let found = cstr(path, field, ptr)?;
        if found != expected && field == "framework API version" {
            // Name the crate that differs when both sides list the same ones.
            if let Some((krate, found, expected)) = api_difference(found, expected) {
                return Err(PluginError::ApiMismatch {
                    path: path.into(),
                    krate,
                    found,
                    expected,
                });
            }
        }
        if found != expected {
            return Err(PluginError::Mismatch {
                path: path.into(),
                field,
                found: found.into(),
                expected: expected.into(),
            });
        }
    }
    let plugin_name = cstr(path, "name", d.name)?;
    if plugin_name != name {
        return Err(PluginError::Mismatch {
            path: path.into(),
            field: "name",
            found: plugin_name.into(),
            expected: format!("{name} (from the file name)"),
        });
    }
    let version = cstr(path, "component version", d.component_version)?;
    if d.vtable.is_null() {
        return Err(PluginError::Corrupt {
            path: path.into(),
            reason: "vtable is null".into(),
        });
    }
    // SAFETY: versions match, so the vtable has our layout and was built by declare_plugin!.
    let vtable = unsafe { &*d.vtable };
    let dispatch = tracing::dispatcher::get_default(|d| d.clone());
    (vtable.set_tracing_dispatch)(&dispatch);
    let comp_ptr = (vtable.component)();
    if comp_ptr.is_null() {
        return Err(PluginError::Corrupt {
            path: path.into(),
            reason: "component is null".into(),
        });
    }
    // SAFETY: same rustc and framework version, so ComponentRef has the same layout on both sides;
    // it points into the plugin's statics, which live forever since the library is never unloaded.
    let component = unsafe { *comp_ptr };
    if component.framework() != framework || component.component().meta().name != name {
        return Err(PluginError::Mismatch {
            path: path.into(),
            field: "component",
            found: format!("{:?}", component),
            expected: format!("{framework}:{name}"),
        });
    }
    Ok(LoadedPlugin { component, version })
}

/// Declare the descriptor of a plugin crate (`crate-type = ["cdylib"]`):
///
/// ```ignore
/// static MY_BTL: MyBtlComponent = MyBtlComponent;
/// rmca_framework::declare_plugin!(btl, "mybtl", ComponentRef::Btl(&MY_BTL));
/// ```
#[macro_export]
macro_rules! declare_plugin {
    ($framework:ident, $name:literal, $component:expr) => {
        static __RMCA_PLUGIN_COMPONENT: $crate::component::ComponentRef = $component;

        extern "C" fn __rmca_plugin_component() -> *const $crate::component::ComponentRef {
            &__RMCA_PLUGIN_COMPONENT
        }

        extern "C" fn __rmca_plugin_set_dispatch(
            dispatch: *const $crate::plugin::tracing::Dispatch,
        ) {
            if dispatch.is_null() {
                return;
            }
            // SAFETY: the host passes a pointer to a live Dispatch for the duration of the call,
            // after checking that both sides use the same rustc and framework versions.
            let d = unsafe { &*dispatch };
            let _ = $crate::plugin::tracing::dispatcher::set_global_default(d.clone());
            // A cloned Dispatch was registered with the host's callsites only: recompute this
            // copy's interest cache and max level from it (else they stay OFF and every event
            // of the plugin is dropped).
            $crate::plugin::tracing::callsite::rebuild_interest_cache();
        }

        static __RMCA_PLUGIN_VTABLE: $crate::plugin::PluginVTable = $crate::plugin::PluginVTable {
            component: __rmca_plugin_component,
            set_tracing_dispatch: __rmca_plugin_set_dispatch,
        };

        struct __RmcaDescriptor($crate::plugin::PluginDescriptor);
        // SAFETY: the descriptor only holds pointers to immutable statics.
        unsafe impl Sync for __RmcaDescriptor {}

        static __RMCA_PLUGIN_DESCRIPTOR: __RmcaDescriptor =
            __RmcaDescriptor($crate::plugin::PluginDescriptor {
                abi_version: $crate::plugin::PLUGIN_ABI_VERSION,
                rustc_version: $crate::plugin::RUSTC_VERSION.as_ptr() as *const ::std::ffi::c_char,
                framework_api_version: $crate::plugin::FRAMEWORK_API_VERSION.as_ptr()
                    as *const ::std::ffi::c_char,
                framework: concat!(stringify!($framework), "\0").as_ptr()
                    as *const ::std::ffi::c_char,
                name: concat!($name, "\0").as_ptr() as *const ::std::ffi::c_char,
                component_version: concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr()
                    as *const ::std::ffi::c_char,
                vtable: &__RMCA_PLUGIN_VTABLE,
            });

        /// The plugin's descriptor, read by the rmca host.
        #[no_mangle]
        pub extern "C" fn rmca_plugin_descriptor() -> *const $crate::plugin::PluginDescriptor {
            &__RMCA_PLUGIN_DESCRIPTOR.0
        }
    };
}

#[doc(hidden)]
pub use tracing;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        assert_eq!(
            parse_file_name("librmca_btl_tcp.so"),
            Some((Framework::Btl, "tcp".into()))
        );
        assert_eq!(
            parse_file_name("librmca_btl_my_net.so"),
            Some((Framework::Btl, "my_net".into()))
        );
        assert_eq!(parse_file_name("librmca_foo_tcp.so"), None);
        assert_eq!(parse_file_name("libother.so"), None);
        assert_eq!(parse_file_name("librmca_btl_.so"), None);
    }

    #[test]
    fn garbage_file_is_refused_with_its_name() {
        let dir = std::env::temp_dir().join(format!("rmca-plugin-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("librmca_btl_garbage.so");
        std::fs::write(&f, b"this is not an ELF file").unwrap();
        let (found, errs) = discover(dir.to_str().unwrap());
        assert!(errs.is_empty());
        assert_eq!(found.len(), 1);
        let err = found[0].result.as_ref().unwrap_err().to_string();
        assert!(
            err.contains("librmca_btl_garbage.so") && err.contains("cannot be loaded"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn api_version_names_every_crate_crossing_the_boundary() {
        let api = trim_nul(FRAMEWORK_API_VERSION);
        let parts = api_parts(api).expect("the host's API version parses");
        let names: Vec<&str> = parts.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            names,
            ["rmca-framework", "tracing-core", "bitflags"],
            "{api}"
        );
        assert!(parts[0]
            .1
            .starts_with(concat!(env!("CARGO_PKG_VERSION"), "+")));
        // The pinned versions are the ones this build links: check against the lock file.
        let lock = include_str!("../../Cargo.lock");
        for (krate, version) in &parts[1..] {
            let entry = format!("name = \"{krate}\"\nversion = \"{version}\"\n");
            assert!(
                lock.contains(&entry),
                "{krate} {version} is not in Cargo.lock"
            );
        }
    }

    #[test]
    fn api_difference_names_the_crate() {
        let host = "0.1.0+aa;tracing-core=0.1.36;bitflags=2.13.2";
        assert_eq!(api_difference(host, host), None);
        assert_eq!(
            api_difference("0.1.0+aa;tracing-core=0.1.35;bitflags=2.13.2", host),
            Some(("tracing-core".into(), "0.1.35".into(), "0.1.36".into()))
        );
        assert_eq!(
            api_difference("0.1.0+bb;tracing-core=0.1.36;bitflags=2.13.2", host),
            Some((
                "rmca-framework".into(),
                "0.1.0+bb".into(),
                "0.1.0+aa".into()
            ))
        );
        // Not the same list of crates (an older plugin, garbage): no crate to name.
        assert_eq!(api_difference("0.1.0+aa", host), None);
        assert_eq!(api_difference("0.0.0-elsewhere", host), None);
        assert_eq!(
            api_difference("0.1.0+aa;bitflags=2.13.2;tracing-core=0.1.36", host),
            None
        );
    }

    #[test]
    fn missing_directory_is_reported() {
        let (_, errs) = discover("/nonexistent/rmca/dir");
        assert!(errs[0].to_string().contains("/nonexistent/rmca/dir"));
    }
}
