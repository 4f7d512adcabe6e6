//! Giving back the pages of gpuwarden's own code that only start-up ran.
//!
//! Start-up runs code the daemon never runs again: argument and config parsing, backend
//! discovery, the journal's first look. The kernel maps the binary's code in 64 KiB stretches
//! around each page first run ("fault-around"), so after start-up about 5 MiB of the binary
//! stays resident, much of it cold. Once the daemon has settled, [`page_out_own_code`] asks the
//! kernel to reclaim the binary's read-only mappings (`MADV_PAGEOUT`, Linux 5.4+): the pages
//! leave this process and, where nothing else maps them, the page cache; what the steady
//! state runs is read back in at its next use (a few hundred page faults over the next polls,
//! from the page cache or the local disk). One `madvise` a minute after start, and on an H200
//! the binary's resident code went from 6.9 MiB to 4.1 MiB, the daemon from 9.3 to 5.8 MiB
//! over a C loop of the same NVML calls (docs/performance.md, "Less machinery"). A
//! linker-script layout of the steady code, which made the pages read back hold less else,
//! gave 1.5 MiB more and was removed (issue #56): it cost every change more than that.
//!
//! Only the binary's own file mappings that are not writable: nothing of the heap, the
//! stacks or the libraries (NVML's pages are NVML's). Older kernels answer EINVAL, and it is
//! a no-op there.

use std::time::Duration;

/// How long after start-up (or a reload) the daemon waits before paging out: its first
/// rounds of every tier, the journal's first batches and the first scrapes have run by then.
pub(crate) const SETTLE: Duration = Duration::from_secs(60);

/// What was asked of the kernel: mappings and bytes, or why nothing was.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct PagedOut {
    pub mappings: usize,
    pub bytes: u64,
}

/// The binary's own read-only file mappings in `maps` (the text of /proc/self/maps):
/// (start, length) of each.
fn own_read_only_mappings(maps: &str, exe: &str) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (range, perms) = (fields.first()?, fields.get(1)?);
            // The path is the rest of the line: "/usr/bin/gpuwarden (deleted)" after an upgrade.
            let path = fields.get(5..)?.join(" ");
            if path != exe || perms.contains('w') {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            (end > start).then_some((start, end - start))
        })
        .collect()
}

/// Asks the kernel to reclaim the binary's read-only mappings; what it asked, or the error.
pub(crate) fn page_out_own_code() -> std::io::Result<PagedOut> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    // Our own maps file: the kernel's, bounded by the process's mappings (a few hundred).
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let mut done = PagedOut::default();
    for (start, len) in own_read_only_mappings(&maps, &exe.to_string_lossy()) {
        // No read-ahead on the faults that follow: a page the steady state runs is read back
        // alone, not with the 128 KiB around it that fault-around would then map too.
        // SAFETY: the range is one of this process's own mappings, read from /proc/self/maps;
        // MADV_RANDOM is a hint about reads, and MADV_PAGEOUT only drops clean file-backed
        // pages, which are read back on use, so no memory the program relies on changes.
        let rc = unsafe {
            libc::madvise(start as *mut libc::c_void, len, libc::MADV_RANDOM);
            libc::madvise(start as *mut libc::c_void, len, libc::MADV_PAGEOUT)
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        done.mappings += 1;
        done.bytes += len as u64;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_binarys_own_read_only_mappings_are_taken() {
        let maps = "\
55d0a0000000-55d0a0100000 r--p 00000000 08:01 123 /usr/bin/gpuwarden
55d0a0100000-55d0a0600000 r-xp 00100000 08:01 123 /usr/bin/gpuwarden
55d0a0600000-55d0a0700000 r--p 00600000 08:01 123 /usr/bin/gpuwarden
55d0a0700000-55d0a0710000 rw-p 00700000 08:01 123 /usr/bin/gpuwarden
55d0a0710000-55d0a0800000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000100000 r-xp 00000000 08:01 456 /usr/lib/libnvidia-ml.so.1
7f0000100000-7f0000200000 r-xp 00000000 08:01 789 /usr/bin/gpuwarden (deleted)
garbage line
";
        assert_eq!(
            own_read_only_mappings(maps, "/usr/bin/gpuwarden"),
            [
                (0x55d0a0000000, 0x100000),
                (0x55d0a0100000, 0x500000),
                (0x55d0a0600000, 0x100000)
            ]
        );
    }

    #[test]
    fn paging_out_our_own_code_leaves_it_running() {
        // Whatever the kernel says (EINVAL before 5.4), the code goes on running after it.
        let before = page_out_own_code();
        assert_eq!(own_read_only_mappings("", "x"), []);
        if let Ok(done) = before {
            assert!(done.mappings >= 1, "{done:?}");
        }
    }
}
