//! Lines of an all-facility syslog file (/var/log/syslog, /var/log/messages): another
//! program's line tells a kernel log from a file any local user can write a kernel-looking
//! line into (`logger -t kernel`); xid/kmsg.rs refuses such a file (docs/health.md, "Where
//! XIDs are read").

use super::parse::is_iso_time;

/// The tag of a syslog line that another program wrote (`Nov 22 02:50:00 ws Xorg[1234]: ...`,
/// `2026-11-22T02:42:00+00:00 host sshd[9]: ...`): a file that holds such lines gathers every
/// facility (/var/log/syslog, /var/log/messages), and any local user can write a
/// kernel-looking line into it with `logger -t kernel`. None for the kernel's own lines and
/// for anything that is not a syslog line.
pub(crate) fn other_programs_syslog_tag(line: &str) -> Option<&str> {
    let (before, _) = line.split_once(": ")?;
    let mut words = before.split(' ').filter(|w| !w.is_empty());
    let first = words.next()?;
    let stamped = is_iso_time(first)
        || (MONTHS.contains(&first)
            && words.next().is_some_and(|day| day.parse::<u8>().is_ok())
            && words
                .next()
                .is_some_and(|time| time.len() == 8 && time.as_bytes()[2] == b':'));
    if !stamped {
        return None;
    }
    let tag = before.rsplit(' ').next()?;
    let name = tag.split('[').next().unwrap_or(tag);
    (!name.is_empty() && name != "kernel" && before.split(' ').filter(|w| !w.is_empty()).count() >= 3).then_some(tag)
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_programs_syslog_line_is_told_from_the_kernels() {
        for (line, tag) in [
            (
                "Nov 22 02:50:00 ws Xorg[1234]: X Error of failed request",
                Some("Xorg[1234]"),
            ),
            (
                "2026-11-22T02:42:00.123456+00:00 gpu-node-07 sshd[9]: Accepted publickey",
                Some("sshd[9]"),
            ),
            ("Dec  6 03:00:00 node CRON[77]: (root) CMD (x)", Some("CRON[77]")),
            (
                "Nov 22 02:40:01 gpu-node-07 kernel: NVRM: Xid (PCI:0000:bb:00): 119, x",
                None,
            ),
            ("Dec  6 03:00:00 node kernel: [ 1.0] evil[1]: segfault", None),
            ("[ 1936.510073] NVRM: Xid (PCI:0000:5d:00): 13, pid=1, name=a: b", None),
            ("3,1022,4012345678,-;NVRM: Xid (PCI:0000:3b:00): 79, x: y", None),
            ("kern  :warn  : [  512.123456] NVRM: Xid", None),
            ("MESSAGE=NVRM: Xid (PCI:0000:3b:00): 79, a: b", None),
        ] {
            assert_eq!(other_programs_syslog_tag(line), tag, "{line}");
        }
    }
}
