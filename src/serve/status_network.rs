//! The status page's network section: one row per InfiniBand or RoCE port, with its state,
//! rate, flaps, the error counters that are not 0, the GPUs behind its adapter, and the
//! findings about it. Shown only where the node has RDMA ports.

use crate::model::Snapshot;
use crate::serve::html::escape;
use std::fmt::Write;

/// Writes the section into `out`; nothing on a node without ports.
pub(crate) fn section(out: &mut String, snapshot: &Snapshot) {
    if snapshot.nics.devices.is_empty() {
        return;
    }
    out.push_str(
        "<h2>Network ports</h2><table class=\"gpus\"><thead><tr><th>Port</th><th>Health</th><th>State</th>\
         <th>Rate</th><th>Flaps (window)</th><th>Errors</th><th>GPUs behind it</th></tr></thead><tbody>",
    );
    for (device, port) in snapshot.nics.ports() {
        let subject = format!("{}/{}", device.name, port.port);
        let findings: Vec<&crate::model::health::Finding> = snapshot
            .node_findings
            .iter()
            .filter(|f| f.subject.as_deref() == Some(subject.as_str()))
            .collect();
        let state = findings
            .iter()
            .map(|f| f.severity)
            .max()
            .unwrap_or(crate::model::health::HealthState::Ok);
        let health = if findings.is_empty() {
            "ok".to_string()
        } else {
            findings
                .iter()
                .map(|f| {
                    format!(
                        "<span title=\"{}\">{}</span>",
                        escape(&f.message),
                        escape(f.reason.label())
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let errors: Vec<String> = port
            .counters
            .iter()
            .filter(|(name, value)| *value > 0 && *name != crate::model::nic::PortCounter::LinkDowned)
            .map(|(name, value)| format!("{name} {value}"))
            .collect();
        let near: Vec<String> = device
            .near_gpus
            .iter()
            .map(|bus| crate::model::gpu_at(&snapshot.devices, bus))
            .collect();
        let netdev = port
            .netdev
            .as_ref()
            .map(|n| format!(" ({})", escape(&n.name)))
            .unwrap_or_default();
        let _ = write!(
            out,
            "<tr class=\"{}\"><td>{} ({}){netdev}</td><td>{health}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            state.label(),
            escape(&subject),
            escape(&port.link_layer),
            escape(&port.states()),
            port.rate_gbps
                .map(|r| format!("{r} Gb/s"))
                .unwrap_or_else(|| "?".into()),
            port.trend.flaps.map(|n| n.to_string()).unwrap_or_else(|| "-".into()),
            if errors.is_empty() {
                "none".to_string()
            } else {
                escape(&errors.join(", "))
            },
            escape(&near.join(", ")),
        );
    }
    out.push_str("</tbody></table>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn each_port_is_a_row_with_its_findings_and_gpus_and_none_without_ports() {
        let (_dir, root) = crate::input::infiniband::fixture("ndr-ib");
        let port = std::fs::canonicalize(root.join("sys/class/infiniband/mlx5_1"))
            .unwrap()
            .join("ports/1");
        std::fs::write(port.join("rate"), "200 Gb/sec (4X HDR)\n").unwrap();
        std::fs::write(port.join("counters/symbol_error"), "77\n").unwrap();
        let places = crate::input::infiniband::gpu_places(&root);
        let mut snapshot = Snapshot {
            nics: Arc::new(crate::input::infiniband::read_nics(&root, &places)),
            ..Default::default()
        };
        crate::health::evaluate(&mut snapshot);
        let mut out = String::new();
        section(&mut out, &snapshot);
        assert_eq!(out.matches("<tr class=").count(), 4, "{out}");
        assert!(
            out.contains("<tr class=\"degraded\"><td>mlx5_1/1 (infiniband)</td>"),
            "{out}"
        );
        assert!(out.contains(">nic_rate_low</span>"), "{out}");
        assert!(out.contains("<td>200 Gb/s</td>"));
        assert!(
            out.contains("<td>symbol_error 77</td><td>GPU at 0000:2b:00.0</td>"),
            "{out}"
        );

        let mut empty = String::new();
        section(&mut empty, &Snapshot::default());
        assert!(empty.is_empty());
    }
}
