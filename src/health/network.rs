//! The network ports' rules (docs/health.md, "Network ports"): rows of the same shape as the
//! GPUs' (rules/), judged per port over the snapshot's scan and its trends
//! (health/nic_trends.rs), and one rule over the node's count of ports. Their findings are the
//! node's, each with the port as its subject, so debounce, hold and the verdict treat them as
//! they treat a GPU's; the message names the GPUs behind the adapter, whose jobs it hurts.

use super::table::{Check, Hit, PortSeen, Rule, StepAdvice};
use crate::model::health::RuleId;
use crate::model::health::{Finding, HealthState};
use crate::model::nic::{NicDevice, NicPort, NicScan, PortCounter};
use crate::model::{DeviceSnapshot, Snapshot};
use HealthState::{Degraded, Unhealthy};

fn port_down(seen: &PortSeen) -> Option<Hit> {
    let port = seen.port;
    if port.up() == Some(false) {
        return Some(
            format!(
                "the port is {} (not ACTIVE/LinkUp; `ibstat {}`)",
                port.states(),
                seen.device.name
            )
            .into(),
        );
    }
    let netdev = port.netdev.as_ref()?;
    let state = netdev.operstate.as_ref()?;
    (!state.is_up()).then(|| {
        format!(
            "its interface {} is {} (`ip link show {}`)",
            netdev.name,
            state.as_str(),
            netdev.name
        )
        .into()
    })
}

fn rate_low(seen: &PortSeen) -> Option<Hit> {
    let (rate, expected) = (seen.port.rate_gbps?, seen.expected_rate?);
    (seen.port.up() == Some(true) && rate < expected).then(|| {
        format!(
            "runs at {rate} Gb/s, below the {expected} Gb/s expected (network.expected_rate_gbps, or the node's \
             fastest {} port): a lane down or a cable of the wrong kind",
            seen.port.link_layer
        )
        .into()
    })
}

fn flapping(seen: &PortSeen) -> Option<Hit> {
    let flaps = seen.port.trend.flaps?;
    let window = seen.limits.flap_window;
    // Whether the port is up or down at this sample: a flapping port is down half the time,
    // and its finding holds through those phases while the flaps are in their window (the
    // alert NicPortDegraded waits 5 minutes on it).
    (seen.limits.flaps > 0 && flaps >= u64::from(seen.limits.flaps)).then(|| {
        format!(
            "went down {flaps} times in the last {} min (network.flaps is {}): the link is unstable",
            window.as_secs().div_ceil(60),
            seen.limits.flaps
        )
        .into()
    })
}

fn link_errors(seen: &PortSeen) -> Option<Hit> {
    let trend = &seen.port.trend;
    let grew: Vec<String> = [
        (PortCounter::LinkDowned, trend.link_downed),
        (PortCounter::LocalLinkIntegrityErrors, trend.local_link_integrity_errors),
    ]
    .into_iter()
    .filter_map(|(name, growth)| {
        let g = growth.filter(|g| g.errors > 0)?;
        Some(format!(
            "{name} +{} in {} min",
            g.errors,
            g.over.as_secs().div_ceil(60).max(1)
        ))
    })
    .collect();
    (!grew.is_empty()).then(|| {
        format!(
            "link errors grew ({}): the link retrained or lost integrity",
            grew.join(", ")
        )
        .into()
    })
}

fn symbol_errors(seen: &PortSeen) -> Option<Hit> {
    let limit = seen.limits.symbol_errors_per_hour;
    let growth = seen.port.trend.symbol_error.filter(|g| g.errors > limit)?;
    Some(
        format!(
            "{} symbol errors in the last {} min (network.symbol_errors_per_hour is {limit}): the bit error rate is \
             above 10^-12",
            growth.errors,
            growth.over.as_secs().div_ceil(60).max(1)
        )
        .into(),
    )
}

fn pcie_narrowed(seen: &PortSeen) -> Option<Hit> {
    let pcie = &seen.device.pcie;
    (seen.first_port && pcie.narrowed()).then(|| {
        format!(
            "the adapter's PCIe link runs at x{} of x{}",
            pcie.width.unwrap_or(0),
            pcie.max_width.unwrap_or(0)
        )
        .into()
    })
}

/// The rules about one port, in the order they are looked at. Flapping comes first: a
/// flapping port is down at some samples, and a down port ends the look.
pub(crate) const PORT_RULES: &[Rule] = &[
    Rule {
        reason: RuleId::NicPortFlapping,
        severity: Degraded,
        worse_when: None,
        when: "a port went down `network.flaps` times (3) within `network.flap_window` (10 min), counted from `link_downed`; held while the flaps are in the window, at its down samples too (so `NicPortDegraded` fires on a port that keeps flapping)",
        action: "check the cable, transceiver and switch port, then the adapter's firmware",
        ends: false,
        dcgm: None,
        step: StepAdvice::None,
        source: "the port's state and counters in sysfs (InfiniBand's PortInfo and PerfMgt counters)",
        check: Check::Port(flapping),
    },
    Rule {
        reason: RuleId::NicPortDown,
        severity: Unhealthy,
        worse_when: None,
        when: "an InfiniBand or RoCE port is not ACTIVE/LinkUp, or a RoCE port's interface is not up (`nic_port_up`, alert `NicPortDown`), for 30 s without a break (its default debounce; shorter downs are flaps)",
        action: "check the cable, the transceiver and the switch port",
        ends: true,
        dcgm: None,
        step: StepAdvice::None,
        source: "the port's state and counters in sysfs (InfiniBand's PortInfo and PerfMgt counters)",
        check: Check::Port(port_down),
    },
    Rule {
        reason: RuleId::NicRateLow,
        severity: Degraded,
        worse_when: None,
        when: "an up port runs below `network.expected_rate_gbps` for its link layer (default: the highest rate among the node's ports of that layer)",
        action: "reseat or replace the cable; check the switch port's speed",
        ends: false,
        dcgm: None,
        step: StepAdvice::None,
        source: "the port's state and counters in sysfs (InfiniBand's PortInfo and PerfMgt counters)",
        check: Check::Port(rate_low),
    },
    Rule {
        reason: RuleId::NicLinkErrors,
        severity: Degraded,
        worse_when: None,
        when: "a port's `link_downed` or `local_link_integrity_errors` grew within the last hour",
        action: "watch for flaps and symbol errors; check the cable and transceiver",
        ends: false,
        dcgm: None,
        step: StepAdvice::None,
        source: "the port's state and counters in sysfs (InfiniBand's PortInfo and PerfMgt counters)",
        check: Check::Port(link_errors),
    },
    Rule {
        reason: RuleId::NicSymbolErrors,
        severity: Degraded,
        worse_when: None,
        when: "more than `network.symbol_errors_per_hour` (120) symbol errors on a port within the last hour: a bit error rate above 10^-12",
        action: "clean or replace the cable or transceiver",
        ends: false,
        dcgm: None,
        step: StepAdvice::None,
        source: "the port's state and counters in sysfs (InfiniBand's PortInfo and PerfMgt counters)",
        check: Check::Port(symbol_errors),
    },
    Rule {
        reason: RuleId::NicPcieNarrowed,
        severity: Degraded,
        worse_when: None,
        when: "an RDMA adapter's own PCIe link trained to fewer lanes than it has (`nic_pcie_link_width_lanes`)",
        action: "reseat the adapter, check the riser and slot",
        ends: false,
        dcgm: None,
        step: StepAdvice::None,
        source: "the port's state and counters in sysfs (InfiniBand's PortInfo and PerfMgt counters)",
        check: Check::Port(pcie_narrowed),
    },
];

/// The node's rule over its ports (its check is [`findings`]'s).
pub(crate) const PORTS_MISSING: Rule = Rule {
    reason: RuleId::NicPortsMissing,
    severity: Unhealthy,
    worse_when: None,
    when: "fewer ports ACTIVE/LinkUp than `network.expected_ports` (unset: not checked)",
    action: "find the missing adapter or port (`ibstat`, `lspci | grep Mellanox`); reseat, or check the driver",
    ends: false,
    dcgm: None,
    step: StepAdvice::None,
    source: "the port's state and counters in sysfs (InfiniBand's PortInfo and PerfMgt counters)",
    check: Check::Device(|_| None),
};

/// The node's findings about its network ports.
pub(crate) fn findings(snapshot: &Snapshot) -> Vec<Finding> {
    let scan: &NicScan = &snapshot.nics;
    let limits = &snapshot.health_limits.network;
    let judged = || scan.ports().filter(|(d, _)| !limits.ignore.contains(&d.name));
    // The fastest port of each link layer, once: what a port without an operator's rate is
    // judged against.
    let mut fastest: std::collections::BTreeMap<&str, f64> = std::collections::BTreeMap::new();
    for (_, port) in judged() {
        if let Some(rate) = port.rate_gbps {
            let max = fastest.entry(port.link_layer.as_str()).or_insert(rate);
            *max = max.max(rate);
        }
    }
    let mut out = Vec::new();
    for (device, port) in judged() {
        let seen = PortSeen {
            device,
            port,
            limits,
            expected_rate: limits
                .expected_rate
                .get(&port.link_layer)
                .or_else(|| fastest.get(port.link_layer.as_str()).copied()),
            first_port: device.ports.first().is_some_and(|p| p.port == port.port),
        };
        for rule in PORT_RULES {
            let Check::Port(check) = rule.check else {
                continue;
            };
            let Some(hit) = check(&seen) else {
                continue;
            };
            out.push(Finding {
                reason: rule.reason.into(),
                severity: hit.severity.unwrap_or(rule.severity),
                message: format!(
                    "{}: {}",
                    name_port(device, port, &snapshot.devices),
                    rule.message(&hit, None)
                ),
                subject: Some(format!("{}/{}", device.name, port.port)),
            });
            if rule.ends {
                break;
            }
        }
    }
    if let Some(expected) = limits.expected_ports {
        let up = judged().filter(|(_, p)| p.up() == Some(true)).count();
        if up < expected as usize {
            out.push(Finding {
                reason: PORTS_MISSING.reason.into(),
                severity: PORTS_MISSING.severity,
                message: PORTS_MISSING.message(
                    &format!(
                        "{up} network port(s) ACTIVE/LinkUp of the {expected} expected (network.expected_ports); {} \
                         seen in all",
                        judged().count()
                    )
                    .into(),
                    None,
                ),
                subject: None,
            });
        }
    }
    out
}

/// "mlx5_0 port 1 (infiniband, 0000:1a:00.0; GPU 0 behind the same switch)".
fn name_port(device: &NicDevice, port: &NicPort, gpus: &[DeviceSnapshot]) -> String {
    let near: Vec<String> = device
        .near_gpus
        .iter()
        .map(|bus| crate::model::gpu_at(gpus, bus))
        .collect();
    let near = match near.len() {
        0 => String::new(),
        1 => format!("; {} behind the same switch, its jobs' traffic", near[0]),
        _ => format!("; {} behind the same switch, their jobs' traffic", near.join(", ")),
    };
    let pci = device
        .pci_bus_id
        .as_deref()
        .map(|p| format!(", {p}"))
        .unwrap_or_default();
    format!("{} port {} ({}{pci}{near})", device.name, port.port, port.link_layer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::health::{Growth, NetworkLimits};
    use crate::model::nic::{Netdev, NicPcie, NicTrend};
    use std::sync::Arc;
    use std::time::Duration;

    fn port(n: u32, layer: &str, rate: f64) -> NicPort {
        NicPort {
            port: n,
            link_layer: layer.into(),
            state: Some((4, "ACTIVE".into())),
            phys_state: Some((5, "LinkUp".into())),
            rate_gbps: Some(rate),
            trend: NicTrend {
                flaps: Some(0),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn adapter(name: &str, port: NicPort) -> NicDevice {
        NicDevice {
            name: name.into(),
            pci_bus_id: Some("0000:1a:00.0".into()),
            pcie: NicPcie {
                width: Some(16),
                max_width: Some(16),
                ..Default::default()
            },
            near_gpus: vec!["0000:19:00.0".into()],
            ports: vec![port],
            ..Default::default()
        }
    }

    /// A node of four NDR ports and one GPU (index 0, at 0000:19:00.0), with `change` made
    /// to the scan and the limits.
    fn judged(change: impl FnOnce(&mut NicScan, &mut NetworkLimits)) -> Vec<Finding> {
        let mut scan = NicScan {
            devices: (0..4)
                .map(|i| adapter(&format!("mlx5_{i}"), port(1, "infiniband", 400.0)))
                .collect(),
        };
        let mut limits = NetworkLimits {
            flaps: 3,
            flap_window: Duration::from_secs(600),
            symbol_errors_per_hour: 120,
            ..Default::default()
        };
        change(&mut scan, &mut limits);
        let mut snapshot = Snapshot {
            devices: vec![DeviceSnapshot::for_test(
                0,
                crate::model::Vendor::Nvidia,
                "0000:19:00.0",
                Default::default(),
            )],
            nics: Arc::new(scan),
            ..Default::default()
        };
        snapshot.health_limits.network = limits;
        findings(&snapshot)
    }

    fn reasons(found: &[Finding]) -> Vec<(&'static str, Option<&str>)> {
        found.iter().map(|f| (f.reason.label(), f.subject.as_deref())).collect()
    }

    #[test]
    fn healthy_ports_make_no_finding() {
        assert!(judged(|_, _| {}).is_empty());
    }

    #[test]
    fn a_down_port_is_unhealthy_names_its_gpus_and_is_judged_no_further() {
        let found = judged(|scan, _| {
            let p = &mut scan.devices[2].ports[0];
            p.state = Some((1, "DOWN".into()));
            p.phys_state = Some((3, "Disabled".into()));
            p.rate_gbps = Some(10.0);
        });
        assert_eq!(reasons(&found), [("nic_port_down", Some("mlx5_2/1"))]);
        assert_eq!(found[0].severity, HealthState::Unhealthy);
        assert!(found[0].message.contains("DOWN/Disabled"), "{}", found[0].message);
        assert!(
            found[0].message.contains("GPU 0 behind the same switch"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn a_roce_interface_that_is_down_is_a_down_port() {
        let found = judged(|scan, _| {
            let mut p = port(1, "ethernet", 200.0);
            p.netdev = Some(Netdev {
                name: "ens1f0np0".into(),
                operstate: Some(crate::model::nic::OperState::parse("lowerlayerdown")),
                ..Default::default()
            });
            scan.devices.push(adapter("mlx5_4", p));
        });
        assert_eq!(reasons(&found), [("nic_port_down", Some("mlx5_4/1"))]);
        assert!(found[0].message.contains("ens1f0np0 is lowerlayerdown"));
    }

    #[test]
    fn a_slow_port_is_judged_against_the_fastest_of_its_layer_or_the_operators_rate() {
        let slow = |scan: &mut NicScan| scan.devices[1].ports[0].rate_gbps = Some(200.0);
        assert_eq!(
            reasons(&judged(|scan, _| slow(scan))),
            [("nic_rate_low", Some("mlx5_1/1"))]
        );
        // An Ethernet port at 200 is not judged against the InfiniBand ports' 400.
        assert!(judged(|scan, _| scan.devices.push(adapter("mlx5_4", port(1, "ethernet", 200.0)))).is_empty());
        // All four at 200 where the operator expects 400: all four.
        let all = judged(|scan, limits| {
            scan.devices.iter_mut().for_each(|d| d.ports[0].rate_gbps = Some(200.0));
            limits.expected_rate.infiniband = Some(400.0);
        });
        assert_eq!(all.len(), 4);
        assert!(
            all[0].message.contains("200 Gb/s, below the 400 Gb/s"),
            "{}",
            all[0].message
        );
    }

    #[test]
    fn three_downs_in_the_window_are_flapping() {
        let flaps = |n: u64| {
            judged(|scan, _| scan.devices[0].ports[0].trend.flaps = Some(n))
                .iter()
                .map(|f| f.reason.label())
                .collect::<Vec<_>>()
        };
        assert_eq!(flaps(2), Vec::<&str>::new());
        assert_eq!(flaps(3), ["nic_port_flapping"]);
        // Before a second read nothing is known of flaps.
        assert!(judged(|scan, _| scan.devices[0].ports[0].trend.flaps = None).is_empty());
        // Sampled in a down phase, the flapping port is still flapping (and down besides;
        // the debouncer holds nic_port_down back for its 30 s): the finding does not blink.
        let down_phase = judged(|scan, _| {
            let port = &mut scan.devices[0].ports[0];
            port.trend.flaps = Some(5);
            port.state = Some((1, "DOWN".into()));
            port.phys_state = Some((2, "Polling".into()));
        });
        let reasons: Vec<&str> = down_phase.iter().map(|f| f.reason.label()).collect();
        assert_eq!(reasons, ["nic_port_flapping", "nic_port_down"]);
    }

    #[test]
    fn growing_link_errors_and_symbol_errors_past_the_limit_are_degraded() {
        let hour = Duration::from_secs(3600);
        let grew = |errors| Some(Growth { errors, over: hour });
        let found = judged(|scan, _| {
            scan.devices[0].ports[0].trend.local_link_integrity_errors = grew(2);
            scan.devices[1].ports[0].trend.symbol_error = grew(120);
            scan.devices[2].ports[0].trend.symbol_error = grew(121);
            scan.devices[3].ports[0].trend.link_downed = grew(0);
        });
        assert_eq!(
            reasons(&found),
            [
                ("nic_link_errors", Some("mlx5_0/1")),
                ("nic_symbol_errors", Some("mlx5_2/1"))
            ]
        );
        assert!(found[0].message.contains("local_link_integrity_errors +2 in 60 min"));
        assert!(found[1].message.contains("121 symbol errors"));
    }

    #[test]
    fn a_narrowed_adapter_link_is_degraded_and_counted_once_per_adapter() {
        let found = judged(|scan, _| {
            scan.devices[0].pcie.width = Some(8);
            scan.devices[0].ports.push(port(2, "infiniband", 400.0));
        });
        assert_eq!(reasons(&found), [("nic_pcie_narrowed", Some("mlx5_0/1"))]);
        assert!(found[0].message.contains("x8 of x16"));
    }

    #[test]
    fn too_few_up_ports_is_unhealthy_and_ignored_adapters_are_not_judged() {
        let found = judged(|scan, limits| {
            limits.expected_ports = Some(4);
            scan.devices[3].ports[0].state = Some((1, "DOWN".into()));
        });
        assert_eq!(
            reasons(&found),
            [("nic_port_down", Some("mlx5_3/1")), ("nic_ports_missing", None)]
        );
        assert!(
            found[1]
                .message
                .starts_with("3 network port(s) ACTIVE/LinkUp of the 4 expected")
        );
        let found = judged(|scan, limits| {
            limits.expected_ports = Some(3);
            limits.ignore = vec!["mlx5_3".into()];
            scan.devices[3].ports[0].state = Some((1, "DOWN".into()));
        });
        assert!(found.is_empty(), "{found:?}");
    }
}
