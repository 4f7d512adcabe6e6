//! The journal's rows about a GPU's service as Kubernetes Events on the node (`kubectl describe
//! node` lists them): a verdict change with its findings, a clear, a validation, the next step
//! advised, a board swapped, a GPU lost or back or missing from the bus. Each event is named
//! after its row, so a row posted twice (at least once means that can happen: an API server
//! that took it and then timed out, a restart before the cursor moved) is refused as
//! AlreadyExists the second time and counts as delivered: nothing is doubled.

use crate::journal::event::Kind;
use crate::journal::store::read::Row;
use serde_json::{Value, json};

/// The most of an event's message.
const MAX_MESSAGE: usize = 1024;

/// The Event for `row` on `node`, in namespace `default` as the kubelet's are; `None` for a
/// row of a kind that says nothing about a GPU's service (a probe's numbers, an inventory).
pub(crate) fn event(row: &Row, node: &str) -> Option<Value> {
    let (reason, warning) = reason(row)?;
    let at = crate::model::utc_seconds(row.at.max(0.0));
    let gpu = match (&row.pci_bus_id, &row.gpu_uuid) {
        (Some(pci), Some(uuid)) => format!("GPU {pci} ({uuid}): "),
        (None, Some(uuid)) => format!("GPU {uuid}: "),
        (Some(pci), None) => format!("GPU {pci}: "),
        (None, None) => String::new(),
    };
    let mut message = format!("{gpu}{}", row.summary);
    for finding in row.details["findings"].as_array().into_iter().flatten() {
        if let (Some(reason), Some(said)) = (finding["reason"].as_str(), finding["message"].as_str()) {
            message.push_str(&format!("; {reason}: {said}"));
        }
    }
    Some(json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name(row, node), "namespace": "default"},
        // The kubelet's and node-problem-detector's form: the node's name as its UID.
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
        "reason": reason,
        "message": cut(&crate::input::printable(&message), MAX_MESSAGE),
        "type": if warning { "Warning" } else { "Normal" },
        "source": {"component": "gpuwarden", "host": node},
        "reportingComponent": "gpuwarden",
        "reportingInstance": node,
        "firstTimestamp": at,
        "lastTimestamp": at,
        "count": 1,
    }))
}

/// The Event's reason and whether it is a warning.
fn reason(row: &Row) -> Option<(&'static str, bool)> {
    let kind = Kind::from_name(&row.kind)?;
    Some(match kind {
        Kind::Health => match row.details["to"].as_str() {
            Some("unhealthy") => ("GpuUnhealthy", true),
            Some("degraded") => ("GpuDegraded", true),
            _ => ("GpuHealthy", false),
        },
        Kind::Clear => ("GpuCleared", false),
        Kind::Validation => match row.details["state"].as_str() {
            Some("failed") => ("GpuValidationFailed", true),
            Some("passed") => ("GpuValidationPassed", false),
            _ => ("GpuValidation", false),
        },
        Kind::Remediation => ("GpuRemediation", true),
        Kind::BoardSwap => ("GpuBoardSwapped", false),
        Kind::Lost => ("GpuLost", true),
        Kind::Back => ("GpuBack", false),
        Kind::PciMissing => ("GpuMissing", true),
        _ => return None,
    })
}

/// `NODE.gpuwarden.<time µs hex>.<row id>`: one name per row, also across a journal started
/// anew (its ids begin again, its times do not); a digest of the node where that is too long.
pub(crate) fn name(row: &Row, node: &str) -> String {
    let micros = (row.at.max(0.0) * 1e6).round() as u64;
    let name = format!("{node}.gpuwarden.{micros:x}.{}", row.id.max(0));
    if name.len() <= 253 {
        return name;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, node.as_bytes());
    let short: String = digest.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("gpuwarden.{short}.{micros:x}.{}", row.id.max(0))
}

fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str, summary: &str, details: Value) -> Row {
        Row {
            id: 17,
            at: 1_764_979_200.5,
            boot_id: "b".into(),
            host: "h".into(),
            kind: kind.into(),
            gpu_uuid: Some("GPU-5f2c".into()),
            serial: None,
            pci_bus_id: Some("0000:19:00.0".into()),
            summary: summary.into(),
            details,
        }
    }

    #[test]
    fn a_verdict_change_is_a_warning_with_its_findings_and_a_repair_is_normal() {
        let down = row(
            "health",
            "ok -> unhealthy: xid_fatal",
            json!({"from": "ok", "to": "unhealthy", "findings": [{"reason": "xid_fatal", "message": "fatal XID 79; drain and reboot"}]}),
        );
        let e = event(&down, "gpu-node-1").unwrap();
        assert_eq!(
            (e["reason"].as_str(), e["type"].as_str()),
            (Some("GpuUnhealthy"), Some("Warning"))
        );
        assert_eq!(
            e["message"],
            "GPU 0000:19:00.0 (GPU-5f2c): ok -> unhealthy: xid_fatal; xid_fatal: fatal XID 79; drain and reboot"
        );
        assert_eq!(e["involvedObject"]["name"], "gpu-node-1");
        assert_eq!(
            e["metadata"]["name"],
            format!("gpu-node-1.gpuwarden.{:x}.17", 1_764_979_200_500_000u64)
        );
        let passed = row("validation", "validation passed: probe", json!({"state": "passed"}));
        assert_eq!(event(&passed, "n").unwrap()["type"], "Normal");
        assert_eq!(event(&row("probe", "probe passed", json!({})), "n"), None);
        assert_eq!(event(&row("from_a_newer_daemon", "x", json!({})), "n"), None);
    }

    #[test]
    fn names_are_the_apis_and_a_message_is_bounded() {
        let long = row("clear", &"x".repeat(5000), json!({}));
        let e = event(&long, &"n".repeat(250)).unwrap();
        assert!(e["metadata"]["name"].as_str().unwrap().len() <= 253);
        assert!(e["message"].as_str().unwrap().len() <= MAX_MESSAGE);
    }
}
