//! The job mapping directory as a source: read every [`READ_EVERY`] on a thread of its own
//! (a FIFO or a directory of a million files there stalls this thread, never a poll).

use super::Periodic;
use crate::attribution::jobs::{self, GpuKey};
use crate::config::settings::Settings;
use crate::service::logging::Outage;
use std::collections::BTreeMap;
use std::time::Duration;

/// A job starts or ends in seconds, and a stale attribution for a few seconds is harmless.
pub(crate) const READ_EVERY: Duration = Duration::from_secs(5);

/// Job ids per mapping file (by GPU index or UUID), as read; matched to GPUs when a snapshot
/// is put together.
pub(crate) type JobMap = BTreeMap<GpuKey, Vec<String>>;

#[derive(Default)]
pub(crate) struct JobFiles {
    /// Whether the directory could not be read last time (its warning is given).
    outage: Outage,
}

impl Periodic for JobFiles {
    type Value = JobMap;
    const NAME: &'static str = "source-jobs";

    fn every(&self, settings: &Settings) -> Option<Duration> {
        (!settings.config.hpc_jobs.mapping_dir.as_os_str().is_empty()).then_some(READ_EVERY)
    }

    fn read(&mut self, settings: &Settings) -> JobMap {
        jobs::read_logged(&settings.config.hpc_jobs.mapping_dir, &mut self.outage)
    }
}
