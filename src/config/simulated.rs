//! gpuwarden's simulated vendor libraries (tests/sim-nvml, tests/sim-rocm-smi) invent their
//! GPUs from a scenario file. Named by mistake in `library_path` on a real node they would
//! serve a fleet of invented readings, so what loads a vendor library (the daemon at start and
//! on reload, `check`, `probe`, `config check`) refuses one unless a simulation is asked for:
//! the scenario's environment variable is set (`--demo` sets it; the tests, the load scripts
//! and the release check set it). Commands that only read the journal or ask the daemon
//! (`health`, `events`, `report`) load no library and do not look. A simulated library says
//! what it is: it exports [`MARKER`].

use super::*;

/// The symbol every simulated library exports.
pub(super) const MARKER: &[u8] = b"gpuwarden_simulated_library\0";

impl Config {
    /// Refuses a simulated library in `nvml.library_path` or `amd.rocm_smi.library_path`
    /// where no simulation scenario is given. `file`: the config it came from, read again to
    /// say the line and column of the setting.
    pub fn refuse_unasked_simulation(&self, file: Option<&Path>) -> Result<(), ConfigError> {
        let libraries = [
            (
                self.nvml.enabled,
                "nvml",
                &self.nvml.library_path,
                "nvml.library_path",
                "GPUWARDEN_SIM_NVML_SCENARIO",
            ),
            (
                self.amd.enabled && self.amd.rocm_smi.enabled,
                "amd",
                &self.amd.rocm_smi.library_path,
                "amd.rocm_smi.library_path",
                "GPUWARDEN_SIM_ROCM_SMI_SCENARIO",
            ),
        ];
        for (enabled, section, path, what, scenario) in libraries {
            if !enabled || std::env::var_os(scenario).is_some() || !is_simulated(path) {
                continue;
            }
            let text = file.and_then(|f| read_config_file(f, "config file").ok());
            let place = text.as_deref().and_then(|text| {
                super::trusted::value_position(text, "library_path", path)
                    .or_else(|| key_position(text, section, "library_path"))
            });
            return Err(ConfigError {
                file: file.map_or_else(|| PathBuf::from("(built-in settings)"), Path::to_path_buf),
                line: place.map(|(line, _)| line),
                column: place.map(|(_, column)| column),
                message: format!(
                    "{what} {} is gpuwarden's simulated library (the demo's and the tests'): it invents its GPUs. \
                     Name the driver's library (the default), or run the demo with `gpuwarden run --demo`",
                    path.display()
                ),
                snippet: None,
            });
        }
        Ok(())
    }

    /// [`Config::load`] for a command that loads the vendor libraries it names: a simulated
    /// one is refused as [`Config::refuse_unasked_simulation`] says.
    pub fn load_to_run(file: &Path) -> Result<Config, ConfigError> {
        let config = Config::load(file)?;
        config.refuse_unasked_simulation(Some(file))?;
        Ok(config)
    }
}

/// Whether the library at `path` (a path, or a name the loader searches) is a simulated one.
/// One that cannot be loaded is not: the backend says why when it tries.
pub(super) fn is_simulated(path: &Path) -> bool {
    // SAFETY: loading a library runs its initialisers; this is the library the daemon loads
    // at start anyway, named by the root-owned config and checked by input::trust first.
    let Ok(library) = (unsafe { libloading::Library::new(path.as_os_str()) }) else {
        return false;
    };
    // SAFETY: only whether the symbol exists is asked; it is never called.
    unsafe { library.get::<unsafe extern "C" fn()>(MARKER) }.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_that_does_not_load_is_not_simulated() {
        assert!(!is_simulated(Path::new("/nonexistent/libnvidia-ml.so.1")));
        assert!(
            !is_simulated(Path::new("libc.so.6")),
            "a real library without the marker"
        );
    }
}
