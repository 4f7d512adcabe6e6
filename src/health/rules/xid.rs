//! The XID rows: fatal and critical XIDs as the operator's policy counts them.

use super::*;

/// "Xid 79 (GPU has fallen off the bus) x2, last at ...: <NVIDIA's action>".
pub(super) fn describe_xid(x: &XidCount) -> String {
    let when = humantime::format_rfc3339_seconds(x.last_seen);
    match catalog::lookup(x.xid) {
        Some(e) => format!(
            "Xid {} ({}) x{}, last at {when}: {}",
            x.xid,
            e.name,
            x.count,
            e.action()
        ),
        None => format!("Xid {} x{}, last at {when}", x.code(), x.count),
    }
}

pub(super) fn xid_fatal(seen: &Seen) -> Option<Hit> {
    let fatal = seen
        .xids
        .iter()
        .filter(|x| x.severity == Severity::Fatal && seen.after_clear(x.last_seen));
    listed(fatal.map(describe_xid).collect(), |xids| {
        Hit::said(format!("fatal XID since boot: {xids}"), None)
    })
}

pub(super) fn xid_critical(seen: &Seen) -> Option<Hit> {
    let recent = |x: &&XidCount| {
        seen.now
            .duration_since(x.last_seen)
            .map(|age| age <= seen.limits.critical_hold)
            .unwrap_or(true)
    };
    let critical = seen
        .xids
        .iter()
        .filter(|x| x.severity == Severity::Critical && seen.after_clear(x.last_seen))
        .filter(recent);
    listed(critical.map(describe_xid).collect(), |xids| {
        Hit::said(format!("critical XID: {xids}"), None)
    })
}
