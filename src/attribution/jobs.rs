//! The HPC job mapping directory (`hpc_jobs.mapping_dir`), in dcgm-exporter's layout: one file
//! per GPU, named by the GPU's index (as `nvidia-smi` and `gpu="N"` number NVIDIA GPUs) or by
//! its UUID, each line a job id running on it. A batch scheduler's prolog appends the job id
//! to the files of the GPUs it gives a job, its epilog removes it (deploy/slurm/).
//!
//! The directory is written by other programs, and job scripts may write there too, so it is
//! read through [`crate::input`]: a directory that others may write is refused, no link is
//! followed, a FIFO or device is skipped without blocking, names that are not a GPU's are
//! filtered out before the bound on files applies (so stray files never hide real ones), and
//! every file, line and id is bounded. A job id is at most [`MAX_JOB_ID`] bytes of printable
//! text and a GPU carries at most [`MAX_JOBS_PER_GPU`] of them.

use super::AttributionError;
use crate::input::{self, Input, Links, Reason, Skips};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Longest job id kept (Slurm's are numbers; other schedulers' are short words).
pub(crate) const MAX_JOB_ID: usize = 256;
/// Most jobs kept per GPU (time-sliced or MPS-shared GPUs run several).
pub(crate) const MAX_JOBS_PER_GPU: usize = 64;
/// Most GPU files read: more GPUs than any node has.
const MAX_FILES: usize = 256;
/// Most directory entries looked at in one read: a bound on the time a directory holding
/// millions of stray files can take (a pass over 100,000 names takes a few milliseconds).
const MAX_SCANNED: usize = 1_000_000;
/// Largest file read.
const MAX_FILE_BYTES: usize = 64 * 1024;
/// Longest UUID file name (`GPU-` and 36 characters; AMD's are shorter).
const MAX_UUID: usize = 96;

/// Which GPU a mapping file is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum GpuKey {
    /// The file name is a number: the GPU's index (NVIDIA's numbering, as dcgm-exporter uses).
    Index(u32),
    /// The file name is a GPU UUID (`GPU-...`, `AMD-...`).
    Uuid(String),
}

impl GpuKey {
    /// The GPU a file name stands for: a number written as `nvidia-smi` writes it (no sign,
    /// no leading zero: `01` and `+1` are not GPU 1), or a UUID of letters, digits and dashes.
    pub fn from_file_name(name: &str) -> Option<GpuKey> {
        if let Ok(index) = name.parse::<u32>() {
            return (index.to_string() == name).then_some(GpuKey::Index(index));
        }
        let uuid = (name.starts_with("GPU-") || name.starts_with("AMD-"))
            && name.len() <= MAX_UUID
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        uuid.then(|| GpuKey::Uuid(name.to_string()))
    }
}

/// Job ids per GPU, read from the mapping directory. A directory that does not exist (no
/// job running since boot, with a prolog that creates it) is no jobs; one that cannot be
/// read, or that others may write, is an error that says what to fix. What was skipped on
/// the way goes into `skips`.
pub(crate) fn read(dir: &Path, skips: &mut Skips) -> Result<BTreeMap<GpuKey, Vec<String>>, AttributionError> {
    let meta = match std::fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => return Err(read_error(dir, source)),
    };
    check_ownership(dir, &meta)?;
    let files = input::list_dir(dir, MAX_FILES, MAX_SCANNED, skips, GpuKey::from_file_name)
        .map_err(|source| read_error(dir, source))?;
    let mut jobs = BTreeMap::new();
    for (key, path) in files {
        let text = match input::read_text(&path, MAX_FILE_BYTES, Links::Refuse) {
            Ok(text) => text,
            Err(refused) => {
                // Gone between the listing and the read: the epilog's rename.
                refused.record(skips);
                continue;
            }
        };
        if text.truncated {
            skips.add(Reason::TooLarge, path.display());
        }
        let ids = job_ids(&text.text, &path, skips);
        if !ids.is_empty() {
            jobs.insert(key, ids);
        }
    }
    Ok(jobs)
}

/// The job ids of one file: one per line, blank lines and repeats left out; an id with
/// control characters (a link to a binary file once put raw NULs into a label) or longer
/// than [`MAX_JOB_ID`] is skipped and counted.
fn job_ids(text: &str, path: &Path, skips: &mut Skips) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for line in text.lines() {
        let id = line.trim();
        if id.is_empty() || ids.iter().any(|known| known == id) {
            continue;
        }
        if id.len() > MAX_JOB_ID || id.chars().any(char::is_control) {
            skips.add(Reason::InvalidValue, format!("a job id in {}", path.display()));
            continue;
        }
        if ids.len() == MAX_JOBS_PER_GPU {
            skips.add(
                Reason::TooMany,
                format!("jobs in {} (more than {MAX_JOBS_PER_GPU})", path.display()),
            );
            break;
        }
        ids.push(id.to_string());
    }
    ids
}

/// Refuses a directory that someone other than root or gpuwarden's own user may write: any
/// user could then claim any GPU for any job, or replace the prolog's files. Group- or
/// world-writable is fine with the sticky bit (as /tmp), where users cannot replace each
/// other's files.
fn check_ownership(dir: &Path, meta: &std::fs::Metadata) -> Result<(), AttributionError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != 0 && meta.uid() != me {
        return Err(AttributionError::MappingDirOwner {
            dir: dir.to_path_buf(),
            owner: meta.uid(),
            me,
        });
    }
    let mode = meta.mode();
    let writable_by_others = mode & 0o022 != 0;
    let sticky = mode & 0o1000 != 0;
    if writable_by_others && !sticky {
        return Err(AttributionError::MappingDirWritable {
            dir: dir.to_path_buf(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

fn read_error(dir: &Path, source: std::io::Error) -> AttributionError {
    AttributionError::Read {
        what: "hpc_jobs.mapping_dir",
        path: dir.to_path_buf(),
        source,
    }
}

/// Reads the directory for the publisher: the jobs, or none (and one warning, then one line
/// when it can be read again) when it cannot be read.
pub(crate) fn read_logged(dir: &Path, outage: &mut crate::service::logging::Outage) -> BTreeMap<GpuKey, Vec<String>> {
    let mut skips = Skips::new(Input::JobMapping);
    match read(dir, &mut skips) {
        Ok(jobs) => {
            outage.recovered(format!("hpc_jobs.mapping_dir {} can be read again", dir.display()));
            jobs
        }
        Err(e) => {
            // No stale attribution: without the directory, no jobs are shown.
            outage.failed(format!("{e}; no job attribution until it can be read"));
            BTreeMap::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn read_dir(dir: &Path) -> (BTreeMap<GpuKey, Vec<String>>, Skips) {
        let mut skips = Skips::new(Input::JobMapping);
        let jobs = read(dir, &mut skips).unwrap();
        (jobs, skips)
    }

    #[test]
    fn files_by_index_or_uuid_with_one_job_per_line() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write("0", "1234\n");
        write("1", "1234\n5678\n\n1234\n"); // two jobs share GPU 1; a blank line; a repeat
        write("2", ""); // the epilog cleared it
        write("GPU-5f2c7a1e-0000-4d6b-9a0c-000000000007", "777\n");
        write(".0.swp", "not a GPU");
        write("3", &format!("{}\n42\n", "x".repeat(MAX_JOB_ID + 1)));
        let (jobs, skips) = read_dir(dir.path());
        assert_eq!(jobs[&GpuKey::Index(0)], vec!["1234"]);
        assert_eq!(jobs[&GpuKey::Index(1)], vec!["1234", "5678"]);
        assert!(!jobs.contains_key(&GpuKey::Index(2)));
        assert_eq!(jobs[&GpuKey::Index(3)], vec!["42"], "an over-long id is skipped");
        assert_eq!(skips.count(Reason::InvalidValue), 1);
        assert_eq!(skips.count(Reason::Name), 1, "the editor's swap file");
        assert_eq!(
            jobs[&GpuKey::Uuid("GPU-5f2c7a1e-0000-4d6b-9a0c-000000000007".into())],
            vec!["777"]
        );
        assert_eq!(jobs.len(), 4);
        assert!(read_dir(&dir.path().join("missing")).0.is_empty());
    }

    #[test]
    fn a_gpu_keeps_at_most_so_many_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let many: String = (0..1000).map(|i| format!("{i}\n")).collect();
        std::fs::write(dir.path().join("0"), many).unwrap();
        let (jobs, skips) = read_dir(dir.path());
        assert_eq!(jobs[&GpuKey::Index(0)].len(), MAX_JOBS_PER_GPU);
        assert_eq!(skips.count(Reason::TooMany), 1);
    }

    #[test]
    fn only_numbers_as_nvidia_smi_writes_them_are_indices() {
        assert_eq!(GpuKey::from_file_name("0"), Some(GpuKey::Index(0)));
        assert_eq!(GpuKey::from_file_name("17"), Some(GpuKey::Index(17)));
        for name in [
            "01",
            "+1",
            "-1",
            " 1",
            "1 ",
            "1.new",
            ".1",
            "GPU-../etc",
            "GPU-a b",
            "nvidia0",
        ] {
            assert_eq!(GpuKey::from_file_name(name), None, "{name:?}");
        }
    }

    /// A FIFO, a link to a secret and hundreds of stray files: the real jobs are read, the
    /// rest is skipped and counted, nothing blocks, nothing of the secret is read.
    #[test]
    fn hostile_entries_are_skipped_and_real_jobs_kept() {
        let dir = tempfile::tempdir().unwrap();
        for gpu in 0..8 {
            std::fs::write(dir.path().join(gpu.to_string()), format!("{}\n", 1000 + gpu)).unwrap();
        }
        for i in 0..500 {
            std::fs::write(dir.path().join(format!("{i}.new")), "999\n").unwrap();
            std::fs::write(dir.path().join(format!(".hidden{i}")), "999\n").unwrap();
        }
        let secret = dir.path().join("..secret");
        std::fs::write(&secret, "root:$6$hash\n").unwrap();
        std::os::unix::fs::symlink(&secret, dir.path().join("8")).unwrap();
        crate::input::make_fifo(&dir.path().join("9"));
        std::fs::write(dir.path().join("10"), b"12\x00\x01\n\xff\xfe77\n").unwrap();
        let started = std::time::Instant::now();
        let (jobs, skips) = read_dir(dir.path());
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        for gpu in 0..8u32 {
            assert_eq!(jobs[&GpuKey::Index(gpu)], vec![(1000 + gpu).to_string()]);
        }
        assert!(!jobs.contains_key(&GpuKey::Index(8)), "the link is not followed");
        assert!(!jobs.contains_key(&GpuKey::Index(9)), "the FIFO is not read");
        assert_eq!(
            jobs[&GpuKey::Index(10)],
            vec!["\u{fffd}\u{fffd}77"],
            "lossy, control characters refused"
        );
        assert_eq!(skips.count(Reason::Symlink), 1);
        assert_eq!(skips.count(Reason::NotRegularFile), 1);
        assert_eq!(skips.count(Reason::Name), 1001);
        assert_eq!(skips.count(Reason::InvalidValue), 1);
    }

    #[test]
    fn a_directory_others_may_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("0"), "1\n").unwrap();
        for (mode, refused) in [
            (0o755, false),
            (0o775, true),
            (0o757, true),
            (0o1777, false),
            (0o700, false),
        ] {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let result = read(dir.path(), &mut Skips::new(Input::JobMapping));
            assert_eq!(result.is_err(), refused, "mode {mode:o}: {result:?}");
            if let Err(e) = result {
                assert!(e.to_string().contains("chmod go-w"), "{e}");
            }
        }
    }
}
