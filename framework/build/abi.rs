//! The crates other than this one whose types cross the plugin boundary, and the exact versions
//! `Cargo.toml` pins them to. Shared by the build script (which puts them into
//! `FRAMEWORK_API_VERSION`) and the crate's unit tests.
//!
//! A plugin is a separate build with its own copy of every crate it links: the host hands it a
//! `tracing_core::Dispatch` (whose `Subscriber` vtable the plugin then calls) and values of
//! framework types built from `bitflags` (`BtlFlags` in `BtlAttributes`), so both sides must
//! use the very same versions. Cargo guarantees the version a build uses only for an exact
//! (`=x.y.z`) requirement, hence the pins.

/// Crates whose types cross the plugin boundary (besides rmca-framework itself and std).
pub const ABI_CRATES: &[&str] = &["tracing-core", "bitflags"];

/// The `=x.y.z` pin of every crate of `crates` in the `[dependencies]` of `manifest` (the text
/// of a Cargo.toml), as `(crate, "x.y.z")`; an error names a crate that is missing or not
/// pinned exactly. Reads the forms `name = "=1"`, `name = { version = "=1", .. }` and a
/// `[dependencies.name]` table with `version = "=1"`.
pub fn pinned_versions(manifest: &str, crates: &[&str]) -> Result<Vec<(String, String)>, String> {
    let mut found: Vec<(String, String)> = Vec::new();
    let mut section = String::new();
    for line in manifest.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            section = line
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_owned();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let (key, value) = (key.trim().trim_matches('"'), value.trim());
        let (name, requirement) = if section == "dependencies" {
            if value.starts_with('{') {
                (key, inline_field(value, "version"))
            } else {
                (key, quoted(value))
            }
        } else if let Some(name) = section.strip_prefix("dependencies.") {
            if key != "version" {
                continue;
            }
            (name.trim_matches('"'), quoted(value))
        } else {
            continue;
        };
        if crates.contains(&name) {
            found.push((name.to_owned(), requirement.unwrap_or_default()));
        }
    }
    crates
        .iter()
        .map(|&name| {
            let requirement = found
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, r)| r.as_str())
                .ok_or_else(|| {
                    format!("Cargo.toml [dependencies] lacks '{name}', whose types cross the plugin boundary: add it pinned as {name} = \"=x.y.z\"")
                })?;
            let version = requirement
                .strip_prefix('=')
                .map(str::trim)
                .filter(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '+'))
                .ok_or_else(|| {
                    format!("Cargo.toml pins '{name}' as '{requirement}': its types cross the plugin boundary, so it must be one exact version, \"=x.y.z\"")
                })?;
            Ok((name.to_owned(), version.to_owned()))
        })
        .collect()
}

/// The contents of the first double-quoted string of `s`.
fn quoted(s: &str) -> Option<String> {
    let rest = s.split_once('"')?.1;
    Some(rest.split_once('"')?.0.to_owned())
}

/// The quoted value of `field` in an inline table `{ a = "x", field = "y" }`.
fn inline_field(table: &str, field: &str) -> Option<String> {
    table
        .trim_matches(|c| c == '{' || c == '}')
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| k.trim() == field)
        .and_then(|(_, v)| quoted(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_form_of_pin() {
        let manifest = r#"
[package]
version = "0.1.0"

[dependencies]
tracing-core = "=0.1.36" # crosses the boundary
bitflags = { version = "=2.13.2", default-features = false }
thiserror.workspace = true

[dependencies.other]
version = "=1.2.3"

[dev-dependencies]
proptest = "=1.0.0"
"#;
        assert_eq!(
            pinned_versions(manifest, &["tracing-core", "bitflags", "other"]).unwrap(),
            vec![
                ("tracing-core".to_owned(), "0.1.36".to_owned()),
                ("bitflags".to_owned(), "2.13.2".to_owned()),
                ("other".to_owned(), "1.2.3".to_owned()),
            ]
        );
    }

    #[test]
    fn a_missing_or_loose_pin_is_an_error_naming_the_crate() {
        let loose = "[dependencies]\ntracing-core = \"0.1\"\n";
        let e = pinned_versions(loose, &["tracing-core"]).unwrap_err();
        assert!(
            e.contains("'tracing-core'") && e.contains("\"=x.y.z\""),
            "{e}"
        );
        let workspace = "[dependencies]\ntracing-core.workspace = true\n";
        assert!(pinned_versions(workspace, &["tracing-core"]).is_err());
        let dev_only = "[dev-dependencies]\ntracing-core = \"=0.1.36\"\n";
        let e = pinned_versions(dev_only, &["tracing-core"]).unwrap_err();
        assert!(e.contains("lacks 'tracing-core'"), "{e}");
    }

    #[test]
    fn this_crate_pins_every_abi_crate() {
        let manifest = include_str!("../Cargo.toml");
        let pins = pinned_versions(manifest, ABI_CRATES).unwrap();
        assert_eq!(pins.len(), ABI_CRATES.len());
    }
}
