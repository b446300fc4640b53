//! Test-only helpers shared by the rmca crates (a dev-dependency, never linked into a program).
//!
//! - [`skip_or_fail`]: a test that cannot run here (a missing package, no root, a provider it
//!   does not apply to) either prints `SKIPPED: ...` and returns, or, when the environment
//!   demands that every test runs (`RMCA_TESTS_REQUIRE=1`, set by `scripts/test.sh`, or
//!   `CI=true`), fails naming what is missing. A green CI run therefore means every test ran.
//! - [`fuzz`]: runs a fuzz target's body on stable Rust for a bounded time with random and
//!   mutated inputs, so the test script exercises the cargo-fuzz targets without nightly.
//! - [`netns`]: a fresh network namespace with a veth pair of a chosen MTU.
//! - [`slurm`]: a private Slurm, one node or a cluster of namespace nodes on a bridge.
//! - [`alloc_count`]: a counting global allocator, for tests that a warm path allocates nothing.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod alloc_count;
pub mod fuzz;
pub mod netns;
pub mod slurm;

use std::fmt::Display;

/// Set to `1` to make every test that cannot run fail instead of skipping itself.
pub const REQUIRE_VAR: &str = "RMCA_TESTS_REQUIRE";

/// Which setting demands that every test runs, if any: `RMCA_TESTS_REQUIRE=1` or `CI=true`
/// (also `CI=1`). `require` and `ci` are the variables' values (`None` when unset).
///
/// Errors on a value of `RMCA_TESTS_REQUIRE` other than `1`, `0` or empty, naming the valid
/// ones (a typo must not silently turn the requirement off).
pub fn requirement(require: Option<&str>, ci: Option<&str>) -> Result<Option<String>, String> {
    match require.map(str::trim) {
        Some("1") => return Ok(Some(format!("{REQUIRE_VAR}=1"))),
        None | Some("0") | Some("") => {}
        Some(other) => {
            return Err(format!(
                "{REQUIRE_VAR}={other:?} is invalid: valid values are 1 (every test must run) \
                 and 0 or unset (a test that cannot run skips itself)"
            ))
        }
    }
    // CI is not ours to validate: anything but true/1 (e.g. "false") leaves it off.
    Ok(ci
        .map(str::trim)
        .filter(|v| v.eq_ignore_ascii_case("true") || *v == "1")
        .map(|v| format!("CI={v}")))
}

/// [`requirement`] for this process's environment. Panics on an invalid `RMCA_TESTS_REQUIRE`.
pub fn required_by() -> Option<String> {
    let var = |name: &str| match std::env::var(name) {
        Ok(v) => Some(v),
        Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(v)) => {
            panic!("{name}={v:?} is not UTF-8: valid values are 1, 0 or unset")
        }
    };
    requirement(var(REQUIRE_VAR).as_deref(), var("CI").as_deref()).unwrap_or_else(|e| panic!("{e}"))
}

/// The current test cannot run here, because of `reason` (which should name what is missing
/// and how to get it: the Debian package, the privilege or the setting).
///
/// When [`required_by`] says every test must run, panics with the reason (the test fails);
/// otherwise prints `SKIPPED: <test>: <reason>` to stderr and returns, and the caller returns
/// from the test.
#[track_caller]
pub fn skip_or_fail(reason: impl Display) {
    // libtest names each test's thread after the test.
    let current = std::thread::current();
    let test = current.name().unwrap_or("this test");
    if let Some(by) = required_by() {
        panic!(
            "{test} cannot run here: {reason}\n({by}: a test that cannot run fails instead of \
             passing; provide what is missing, or run without {REQUIRE_VAR}=1 and CI=true to \
             let it skip itself)"
        );
    }
    eprintln!("SKIPPED: {test}: {reason}");
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    #[test]
    fn requirement_comes_from_either_variable() {
        assert_eq!(requirement(None, None), Ok(None));
        assert_eq!(requirement(Some("0"), None), Ok(None));
        assert_eq!(requirement(Some(""), Some("false")), Ok(None));
        assert_eq!(
            requirement(Some("1"), None),
            Ok(Some("RMCA_TESTS_REQUIRE=1".into()))
        );
        assert_eq!(requirement(None, Some("true")), Ok(Some("CI=true".into())));
        assert_eq!(requirement(None, Some("TRUE")), Ok(Some("CI=TRUE".into())));
        assert_eq!(requirement(Some("0"), Some("1")), Ok(Some("CI=1".into())));
        let e = requirement(Some("yes"), None).unwrap_err();
        assert!(
            e.contains("\"yes\"") && e.contains("valid values are 1"),
            "{e}"
        );
    }

    #[test]
    fn skip_fails_only_when_required() {
        // The child: this same test, run by the parent below with a chosen environment.
        if std::env::var_os("RMCA_TEST_SUPPORT_CHILD").is_some() {
            skip_or_fail("needs the frobnicator (Debian package frob)");
            return;
        }
        let exe = std::env::current_exe().expect("current_exe");
        let run = |vars: &[(&str, &str)]| {
            let mut c = Command::new(&exe);
            c.args([
                "--exact",
                "tests::skip_fails_only_when_required",
                "--nocapture",
            ])
            .env("RMCA_TEST_SUPPORT_CHILD", "1")
            .env_remove(REQUIRE_VAR)
            .env_remove("CI");
            for (k, v) in vars {
                c.env(k, v);
            }
            let o = c.output().expect("run the test binary");
            let text = String::from_utf8_lossy(&o.stdout).into_owned()
                + &String::from_utf8_lossy(&o.stderr);
            (o.status.success(), text)
        };
        let (ok, text) = run(&[]);
        assert!(ok, "{text}");
        assert!(
            text.contains("SKIPPED: tests::skip_fails_only_when_required: needs the frobnicator"),
            "{text}"
        );
        for vars in [
            &[(REQUIRE_VAR, "1")][..],
            &[("CI", "true")],
            &[(REQUIRE_VAR, "0"), ("CI", "true")],
        ] {
            let (ok, text) = run(vars);
            assert!(!ok, "{vars:?}: must fail\n{text}");
            assert!(
                text.contains("cannot run here: needs the frobnicator (Debian package frob)"),
                "{vars:?}: {text}"
            );
            assert!(!text.contains("SKIPPED"), "{vars:?}: {text}");
        }
        let (ok, text) = run(&[(REQUIRE_VAR, "yes")]);
        assert!(!ok && text.contains("valid values are 1"), "{text}");
    }
}
