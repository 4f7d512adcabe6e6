//! The HPC job mapping directory (`hpc_jobs.mapping_dir`), in dcgm-exporter's layout: one file
//! per GPU, named by the GPU's index (as `nvidia-smi` and `gpu="N"` number NVIDIA GPUs) or by
//! its UUID, each line a job id running on it. A batch scheduler's prolog appends the job id
//! to the files of the GPUs it gives a job, its epilog removes it (deploy/slurm/).
//!
//! Everything read is bounded (files, lines, line length), since the directory is written by
//! other programs: a job id is at most [`MAX_JOB_ID`] bytes and a GPU carries at most
//! [`MAX_JOBS_PER_GPU`] of them.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// Longest job id kept (Slurm's are numbers, array jobs `123_4`, hetjobs `123+1`).
pub const MAX_JOB_ID: usize = 256;
/// Most jobs kept per GPU (time-sliced or MPS-shared GPUs run several).
pub const MAX_JOBS_PER_GPU: usize = 64;
/// Most files read: more GPUs than any node has.
const MAX_FILES: usize = 256;
/// Largest file read.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Which GPU a mapping file is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum GpuKey {
    /// The file name is a number: the GPU's index (NVIDIA's numbering, as dcgm-exporter uses).
    Index(u32),
    /// The file name is a GPU UUID (`GPU-...`, `AMD-...`).
    Uuid(String),
}

/// Job ids per GPU, read from the mapping directory. A directory that does not exist (no
/// job running since boot, with a prolog that creates it) is no jobs; one that cannot be
/// read is an error, to log.
pub fn read(dir: &Path) -> std::io::Result<BTreeMap<GpuKey, Vec<String>>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(e),
    };
    let mut jobs = BTreeMap::new();
    for entry in entries.filter_map(Result::ok).take(MAX_FILES) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let key = match name.parse::<u32>() {
            Ok(index) => GpuKey::Index(index),
            Err(_) if name.starts_with("GPU-") || name.starts_with("AMD-") => GpuKey::Uuid(name),
            // Editors' and the prolog's temporary files, anything else: not a GPU.
            Err(_) => continue,
        };
        let Ok(file) = std::fs::File::open(entry.path()) else {
            continue;
        };
        let mut ids: Vec<String> = Vec::new();
        for line in BufReader::new(file.take(MAX_FILE_BYTES))
            .split(b'\n')
            .map_while(Result::ok)
        {
            let id = String::from_utf8_lossy(&line).trim().to_string();
            if id.is_empty() || id.len() > MAX_JOB_ID || ids.contains(&id) {
                continue;
            }
            ids.push(id);
            if ids.len() == MAX_JOBS_PER_GPU {
                break;
            }
        }
        if !ids.is_empty() {
            jobs.insert(key, ids);
        }
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_by_index_or_uuid_with_one_job_per_line() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write("0", "1234\n");
        write("1", "1234\n5678_3\n\n1234\n"); // two jobs share GPU 1; a blank line; a repeat
        write("2", ""); // the epilog cleared it
        write("GPU-5f2c7a1e-0000-4d6b-9a0c-000000000007", "777+1\n");
        write(".0.swp", "not a GPU");
        write("3", &format!("{}\n42\n", "x".repeat(MAX_JOB_ID + 1)));
        let jobs = read(dir.path()).unwrap();
        assert_eq!(jobs[&GpuKey::Index(0)], vec!["1234"]);
        assert_eq!(jobs[&GpuKey::Index(1)], vec!["1234", "5678_3"]);
        assert!(!jobs.contains_key(&GpuKey::Index(2)));
        assert_eq!(jobs[&GpuKey::Index(3)], vec!["42"], "an over-long id is skipped");
        assert_eq!(
            jobs[&GpuKey::Uuid("GPU-5f2c7a1e-0000-4d6b-9a0c-000000000007".into())],
            vec!["777+1"]
        );
        assert_eq!(jobs.len(), 4);
        assert!(read(&dir.path().join("missing")).unwrap().is_empty());
    }

    #[test]
    fn a_gpu_keeps_at_most_so_many_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let many: String = (0..1000).map(|i| format!("{i}\n")).collect();
        std::fs::write(dir.path().join("0"), many).unwrap();
        assert_eq!(read(dir.path()).unwrap()[&GpuKey::Index(0)].len(), MAX_JOBS_PER_GPU);
    }
}
