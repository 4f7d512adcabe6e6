//! XID families: counts per GPU and code, and the XID sources' own series.

use super::{Family, Kind, Read};
use crate::model::unix_seconds;

pub(crate) const FAMILIES: &[Family] = &[
    Family {
        name: "gpu_xid_errors",
        kind: Kind::Counter,
        unit: "",
        help: "XID errors by code and severity, from NVML events and the kernel log, each event counted once; codes beyond a GPU's 64th distinct one are counted as xid=\"other\" with the highest severity among them.",
        labels: &["xid", "severity"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            for x in snapshot.xid.for_bus(&d.identity.pci_bus_id) {
                s.labelled(&[&x.code(), x.severity.label()], x.count as f64);
            }
        }),
    },
    Family {
        name: "gpu_xid_last_seen_timestamp_seconds",
        kind: Kind::Gauge,
        unit: "seconds",
        help: "Unix time an XID code was last seen on the GPU.",
        labels: &["xid"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            for x in snapshot.xid.for_bus(&d.identity.pci_bus_id) {
                s.labelled(&[&x.code()], unix_seconds(x.last_seen));
            }
        }),
    },
    Family {
        name: "gpu_nvswitch_sxid_errors",
        kind: Kind::Counter,
        unit: "",
        help: "NVSwitch errors (SXIDs) from the kernel log, by switch (N of nvidia-nvswitchN), its PCI address, code and the severity the driver gave (fatal, non_fatal); a node series (no gpu label). A fatal one makes the node unhealthy (NvswitchSxidFatal).",
        labels: &["switch", "pci_bus_id", "sxid", "severity"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            for x in &snapshot.xid.sxids {
                s.labelled(
                    &[&x.switch.to_string(), &x.pci_bus_id, &x.sxid.to_string(), x.severity()],
                    x.count as f64,
                );
            }
        }),
    },
    Family {
        name: "gpu_mig_xid_errors",
        kind: Kind::Counter,
        unit: "",
        help: "XID errors a GPU in MIG mode attributed to one of its GPU instances, by instance, code and severity; each is also in gpu_xid_errors_total.",
        labels: &["gpu_instance", "xid", "severity"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            for ((bus, instance), counts) in &snapshot.xid.by_instance {
                if *bus == d.identity.pci_bus_id {
                    for x in counts {
                        s.labelled(&[&instance.to_string(), &x.code(), x.severity.label()], x.count as f64);
                    }
                }
            }
        }),
    },
    Family {
        name: "gpuwarden_xid_source_up",
        kind: Kind::Gauge,
        unit: "",
        help: "1 while an XID source (kernel_log, nvml_events) is being read.",
        labels: &["source"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            for (source, up) in &snapshot.xid.sources {
                s.labelled(&[source], super::one_if(*up));
            }
        }),
    },
    Family {
        name: "gpuwarden_xid_reports",
        kind: Kind::Counter,
        unit: "",
        help: "XID reports received from each source, before the same event from two sources is merged.",
        labels: &["source"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            for (source, n) in &snapshot.xid.reports {
                s.labelled(&[source], *n as f64);
            }
        }),
    },
    Family {
        name: "gpuwarden_xid_unattributed",
        kind: Kind::Counter,
        unit: "",
        help: "XIDs on a PCI bus id that matches no GPU the backends enumerated (NVML down, or a GPU it cannot see); an empty pci_bus_id (no label, to Prometheus) when the report named no GPU.",
        labels: &["pci_bus_id", "xid", "severity"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            for (bus, counts) in &snapshot.xid.by_bus {
                if snapshot.devices.iter().any(|d| &d.identity.pci_bus_id == bus) {
                    continue;
                }
                for x in counts {
                    s.labelled(&[bus, &x.code(), x.severity.label()], x.count as f64);
                }
            }
        }),
    },
    Family {
        name: "gpuwarden_xid_dropped",
        kind: Kind::Counter,
        unit: "",
        help: "XID reports not counted because they name a PCI address that is no enumerated GPU when the XID store already holds its limit of such addresses (32).",
        labels: &[],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            if snapshot.xid.dropped > 0 {
                s.value(snapshot.xid.dropped as f64)
            }
        }),
    },
];
