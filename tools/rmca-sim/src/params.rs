//! The components' own configurations, read from `--mca` settings through the components' own
//! parameter registration and checking code (the same code a job runs at init), so that the
//! simulator is configured exactly as a job is.

use rmca_btl_rc::RcConfig;
use rmca_btl_ud::UdConfig;
use rmca_framework::component::Component;
use rmca_framework::params::{ParamRegistrar, ParamStore, RawSetting, RawSources, Source};
use rmca_pml_dr::DrConfig;

use crate::SimError;

/// pml-dr, btl-ud and btl-rc configurations.
#[derive(Debug, Clone)]
pub struct Components {
    /// pml-dr's protocol parameters (`pml_dr_*`).
    pub dr: DrConfig,
    /// btl-ud's (`btl_ud_*`).
    pub ud: UdConfig,
    /// btl-rc's (`btl_rc_*`).
    pub rc: RcConfig,
}

impl Components {
    /// Resolves `(name, value)` settings (as `--mca name value`) against the parameters of
    /// pml-dr, btl-ud and btl-rc; every other name is refused, naming it.
    pub fn from_mca(settings: &[(String, String)]) -> Result<Self, SimError> {
        let mut specs = Vec::new();
        rmca_pml_dr::DR.register_params(&mut ParamRegistrar::new("pml", "dr", &mut specs));
        rmca_btl_ud::config::register(&mut ParamRegistrar::new("btl", "ud", &mut specs));
        rmca_btl_rc::config::register(&mut ParamRegistrar::new("btl", "rc", &mut specs));
        let known: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        for (name, _) in settings {
            if !known.iter().any(|k| k == name) {
                return Err(SimError::Invalid {
                    what: "--mca".into(),
                    value: name.clone(),
                    valid: "a pml_dr_*, btl_ud_* or btl_rc_* parameter (rmca-info lists them)"
                        .into(),
                });
            }
        }
        let cmdline = settings
            .iter()
            .map(|(name, value)| RawSetting {
                name: name.clone(),
                value: value.clone(),
                source: Source::CommandLine,
            })
            .collect();
        let raw = RawSources::from_parts(None, None, false, vec![], cmdline)
            .map_err(|e| SimError::Param(e.to_string()))?;
        let store = ParamStore::resolve(specs, &raw).map_err(|errs| {
            SimError::Param(
                errs.iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        })?;
        let dr =
            rmca_pml_dr::config_from_params(&store).map_err(|e| SimError::Param(e.to_string()))?;
        let ud = UdConfig::from_params(&store, 0).map_err(|e| SimError::Param(e.to_string()))?;
        let rc = RcConfig::from_params(&store, 0).map_err(|e| SimError::Param(e.to_string()))?;
        Ok(Self { dr, ud, rc })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_components_defaults() {
        let c = Components::from_mca(&[]).unwrap();
        assert_eq!(c.dr, DrConfig::default());
        assert_eq!(c.ud.send_qps, 4);
    }

    #[test]
    fn settings_reach_the_configs_and_bad_ones_are_named() {
        let s = |n: &str, v: &str| (n.to_owned(), v.to_owned());
        let c = Components::from_mca(&[
            s("pml_dr_window", "8"),
            s("btl_rc_receive_queues", "S,256,64"),
        ])
        .unwrap();
        assert_eq!(c.dr.window, 8);
        assert!(c.rc.recv.shared().is_some());
        let e = Components::from_mca(&[s("pml_dr_window", "0")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("pml_dr_window"), "{e}");
        let e = Components::from_mca(&[s("btl_tcp_x", "1")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("btl_tcp_x") && e.contains("pml_dr_*"), "{e}");
    }
}
