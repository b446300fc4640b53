//! What the MPI tool information interface (`MPI_T`) reads and sets in rmca: MCA parameter
//! settings made before [`init`](crate::init), and, once running, the resolved parameters and
//! this process's profiling counters.

use std::sync::Mutex;

use rmca_framework::params::{ParamStore, RawSetting, Source};
use rmca_runtime::profile::RankProfile;

use crate::Universe;

/// Settings made through [`set_param_before_init`], in the order made.
static BEFORE_INIT: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Set MCA parameter `name` to `value` (its text, as on a command line) for the
/// [`init`](crate::init) to come in this process. It counts as a command-line setting of this
/// process (the highest precedence; a later setting of the same name wins). The name and value
/// are checked at init, with every other setting; it has no effect once the process runs.
pub fn set_param_before_init(name: &str, value: &str) {
    BEFORE_INIT
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((name.to_owned(), value.to_owned()));
}

/// The settings made by [`set_param_before_init`], as the raw settings init resolves.
pub fn params_set_before_init() -> Vec<RawSetting> {
    as_command_line(&BEFORE_INIT.lock().unwrap_or_else(|p| p.into_inner()))
}

fn as_command_line(settings: &[(String, String)]) -> Vec<RawSetting> {
    settings
        .iter()
        .map(|(name, value)| RawSetting {
            name: name.clone(),
            value: value.clone(),
            source: Source::CommandLine,
        })
        .collect()
}

impl Universe {
    /// A copy of the parameters the runtime resolved at init (what its components read);
    /// `None` once finalized.
    pub fn params(&self) -> Option<ParamStore> {
        self.shared.with(|rt| Ok(rt.params.clone())).ok()
    }

    /// This process's profile now: the PML's and BTLs' counters and the memory each component
    /// holds; `None` once finalized.
    pub fn profile(&self) -> Option<RankProfile> {
        self.shared.with(|rt| Ok(rt.profile())).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_before_init_keep_their_order_and_count_as_command_line() {
        let s = as_command_line(&[("pml".into(), "ob1".into()), ("pml".into(), "dr".into())]);
        assert_eq!(s.len(), 2);
        assert_eq!((s[1].name.as_str(), s[1].value.as_str()), ("pml", "dr"));
        assert!(s.iter().all(|r| r.source == Source::CommandLine));
    }
}
