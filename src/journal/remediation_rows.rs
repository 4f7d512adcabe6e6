//! The journal's `remediation` rows: each unhealthy GPU's next remediation step
//! (`remediation.mode: advise`, health/ladder.rs) when it first appears or changes, so the
//! report shows what gpuwarden advised and when. A restart states the advice again.

use super::event::{Event, GpuRef, Kind};
use crate::model::Snapshot;
use crate::model::health::NextStep;
use serde_json::json;
use std::collections::BTreeMap;

/// What the journal last wrote of every GPU's next step.
#[derive(Debug, Default)]
pub struct RemediationRows {
    seen: BTreeMap<String, NextStep>,
}

impl RemediationRows {
    /// The rows for the next steps that appeared or changed since the last look.
    pub fn look(&mut self, snapshot: &Snapshot, now: f64) -> Vec<Event> {
        let mut rows = Vec::new();
        for d in &snapshot.devices {
            let uuid = &d.identity.uuid;
            match &d.health.next_step {
                Some(next) if self.seen.get(uuid) != Some(next) => {
                    let command = next.command.as_ref().map(|c| format!(" (`{c}`)")).unwrap_or_default();
                    rows.push(Event::new(
                        now,
                        Kind::Remediation,
                        Some(GpuRef {
                            uuid: uuid.clone(),
                            serial: d.identity.serial.clone(),
                            pci_bus_id: d.identity.pci_bus_id.clone(),
                            index: Some(d.identity.index),
                        }),
                        format!("next step advised: {}{command}: {}", next.step, next.why),
                        json!({"advice": next}),
                    ));
                    self.seen.insert(uuid.clone(), next.clone());
                }
                Some(_) => {}
                None => {
                    self.seen.remove(uuid);
                }
            }
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeviceSnapshot, Vendor};

    #[test]
    fn a_row_when_the_advice_appears_or_changes_and_none_while_it_holds() {
        let mut gpu = DeviceSnapshot::for_test(0, Vendor::Nvidia, "0000:19:00.0", Default::default());
        let reset = NextStep {
            step: "gpu_reset".into(),
            why: "the driver asks for a GPU reset (recovery action)".into(),
            command: Some("nvidia-smi --gpu-reset -i 0000:19:00.0".into()),
        };
        gpu.health.next_step = Some(reset.clone());
        let mut snapshot = Snapshot {
            devices: vec![gpu],
            ..Default::default()
        };
        let mut rows = RemediationRows::default();
        let first = rows.look(&snapshot, 1.0);
        assert_eq!(first.len(), 1);
        assert!(
            first[0]
                .summary
                .starts_with("next step advised: gpu_reset (`nvidia-smi --gpu-reset -i 0000:19:00.0`)")
        );
        assert!(rows.look(&snapshot, 2.0).is_empty(), "the same advice");
        snapshot.devices[0].health.next_step = Some(NextStep {
            step: "reboot_required".into(),
            why: "the driver asks for a node reboot (recovery action)".into(),
            command: None,
        });
        assert_eq!(
            rows.look(&snapshot, 3.0)[0].details["advice"]["step"],
            "reboot_required"
        );
        snapshot.devices[0].health.next_step = None;
        assert!(rows.look(&snapshot, 4.0).is_empty());
        snapshot.devices[0].health.next_step = Some(reset);
        assert_eq!(rows.look(&snapshot, 5.0).len(), 1, "advised again after it had gone");
    }
}
