//! One GPU's evidence packet for a vendor (an RMA) or a repair ticket: identity, the verdict
//! as last recorded, the XID timeline with the catalog's names and NVIDIA's actions, ECC and
//! row-remap history, probe results against expected, slowdown episodes, NVLink errors, and
//! which findings NVIDIA's public documents send to field diagnostics or replacement.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `nic.rs` | One network adapter's evidence for a cable, transceiver or adapter replacement (`gpuwarden report --nic mlx5_0`): the adapter as last recorded (type,... |
//! | `probes.rs` | The probe history of one GPU in `gpuwarden report`: every probe the journal kept, oldest first, each test's sustained figure beside the GPU's own baseline... |
//! | `remediation.rs` | The report's "Remediation" section: each step automatic remediation ran on the GPU (from the `remediation` rows that carry an attempt) with its outcome,... |
//! <!-- /files -->

pub(crate) mod nic;
pub(crate) mod probes;
pub(crate) mod remediation;

use crate::journal::store::read::{self, Query, Row};
use crate::journal::writer::facts::{FindingFact, GpuFacts};
use rusqlite::Connection;
use serde::Serialize;

pub(crate) const XID_CATALOG: &str = "NVIDIA Xid Catalog, docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html";
pub(crate) const DCGM_DIAG: &str =
    "NVIDIA DCGM Diagnostics, docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html";

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Identity {
    pub name: String,
    pub uuid: String,
    pub serial: Option<String>,
    pub board_part_number: Option<String>,
    pub vbios: Option<String>,
    pub inforom_image: Option<String>,
    pub driver_version: String,
    pub pci_bus_id: String,
    pub host: Option<String>,
    /// Boots of this node the journal has seen: (boot id, first seen, Unix seconds).
    pub boots_seen: Vec<(String, f64)>,
}

/// What a finding calls for, and which public document says so.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Guidance {
    pub finding: String,
    pub advice: String,
    pub document: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub generated_at: f64,
    pub identity: Identity,
    /// The verdict when the journal last wrote this GPU's state.
    pub verdict: String,
    pub findings: Vec<FindingFact>,
    pub xids: Vec<Row>,
    /// The correctness canary's wrong results, with their evidence (what an RMA needs).
    pub sdc: Vec<Row>,
    /// The HBM pattern test's memory errors, with the failing offsets.
    pub memtest: Vec<Row>,
    /// The all-reduces across the node's GPUs that this GPU was in.
    pub collective: Vec<Row>,
    pub memory: Vec<Row>,
    pub probes: Vec<Row>,
    /// Every probe's figures against the GPU's own baseline at the time, oldest first.
    pub probe_history: Vec<crate::journal::report::probes::ProbeRow>,
    pub slowdowns: Vec<Row>,
    pub nvlink: Vec<Row>,
    /// The PCIe replay counter at first sight and at each start.
    pub pcie: Vec<Row>,
    pub health: Vec<Row>,
    /// What was advised (the remediation ladder's next steps), and an operator's clears with
    /// the validations they started: the repair's story.
    pub service: Vec<Row>,
    /// Lost and back, board swaps, inventory changes, persistence mode, the driver's
    /// recovery action.
    pub other: Vec<Row>,
    /// Each step automatic remediation ran, with its output, and the reboot marks.
    pub remediation: Vec<crate::journal::report::remediation::Step>,
    pub guidance: Vec<Guidance>,
}

/// The node's `collective` rows (they name no one GPU) whose run had `uuid` in it.
fn collective_rows(conn: &Connection, uuid: &str) -> rusqlite::Result<Vec<Row>> {
    let rows = read::events(
        conn,
        &Query {
            kinds: vec![crate::journal::event::Kind::Collective],
            limit: read::MAX_LIMIT,
            ..Default::default()
        },
    )?;
    Ok(rows
        .into_iter()
        .filter(|r| {
            r.details["run"]["uuids"]
                .as_array()
                .is_some_and(|uuids| uuids.iter().any(|u| u.as_str() == Some(uuid)))
        })
        .collect())
}

/// The report for `gpu`, from the whole retained history.
pub(crate) fn build(conn: &Connection, gpu: &GpuFacts, now: f64, baseline_probes: usize) -> rusqlite::Result<Report> {
    let rows = read::events(
        conn,
        &Query {
            gpus: vec![gpu.uuid.clone()],
            limit: read::MAX_LIMIT,
            ..Default::default()
        },
    )?;
    let of = |kinds: &[&str]| -> Vec<Row> {
        rows.iter()
            .filter(|r| kinds.contains(&r.kind.as_str()))
            .cloned()
            .collect()
    };
    let host = rows.iter().rev().map(|r| r.host.clone()).next();
    let xids = of(&["xid", "xid_storm"]);
    let memory = of(&["ecc", "row_remap"]);
    let probes = of(&["probe"]);
    let mut guidance = guidance(&xids, &probes);
    guidance.extend(from_the_table(gpu, &rows));
    Ok(Report {
        generated_at: now,
        identity: Identity {
            name: gpu.name.clone(),
            uuid: gpu.uuid.clone(),
            serial: gpu.serial.clone(),
            board_part_number: gpu.inventory.board_part_number.clone(),
            vbios: gpu.inventory.vbios.clone(),
            inforom_image: gpu.inventory.inforom_image.clone(),
            driver_version: gpu.driver_version.clone(),
            pci_bus_id: gpu.pci_bus_id.clone(),
            host,
            boots_seen: read::boots(conn)?,
        },
        verdict: gpu.verdict.clone(),
        findings: worst_first(&gpu.findings),
        xids,
        sdc: of(&["sdc"]),
        memtest: of(&["memtest"]),
        collective: collective_rows(conn, &gpu.uuid)?,
        memory,
        probe_history: crate::journal::report::probes::history(&probes, baseline_probes),
        probes,
        slowdowns: of(&["slowdown"]),
        nvlink: of(&["nvlink"]),
        pcie: of(&["pcie"]),
        health: of(&["health"]),
        service: of(&["remediation", "clear", "validation"])
            .into_iter()
            .filter(|r| !crate::journal::report::remediation::is_step(r))
            .collect(),
        other: of(&[
            "lost",
            "back",
            "board_swap",
            "inventory",
            "persistence",
            "recovery_action",
        ]),
        remediation: crate::journal::report::remediation::steps(&rows),
        guidance,
    })
}

/// The findings, unhealthy first, then degraded, then the rest, as `health` and the page
/// order them.
fn worst_first(findings: &[FindingFact]) -> Vec<FindingFact> {
    use crate::model::health::HealthState;
    // The words as the journal keeps them (a newer daemon's unknown word ranks last).
    let rank = |f: &FindingFact| {
        let state = HealthState::ALL.into_iter().find(|s| s.label() == f.severity);
        match state {
            Some(HealthState::Unhealthy) => 0,
            Some(HealthState::Degraded) => 1,
            _ => 2,
        }
    };
    let mut sorted = findings.to_vec();
    sorted.sort_by_key(rank);
    sorted
}

/// The findings NVIDIA's documents send to a reset, field diagnostics or the vendor.
fn guidance(xids: &[Row], probes: &[Row]) -> Vec<Guidance> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for row in xids.iter().filter(|r| r.is(crate::journal::event::Kind::Xid)) {
        let Some(code) = row.details.get("xid").and_then(|x| x.as_u64()) else {
            continue;
        };
        let Some(entry) = crate::xid::catalog::lookup(code as u32) else {
            continue;
        };
        // The codes whose catalog action is a reset, a node restart or a hardware workflow
        // (gpuwarden's fatal and critical, docs/health.md).
        let hardware = entry.severity >= crate::xid::catalog::Severity::Critical;
        if !hardware || !seen.insert(code) {
            continue;
        }
        out.push(Guidance {
            finding: format!("Xid {code} ({})", entry.name),
            advice: format!(
                "NVIDIA's immediate action: {}. {}. If it recurs after that, run field diagnostics \
                 (dcgmi diag -r 3, or NVIDIA's field diagnostic) and open a case with this report",
                entry.nvidia_action,
                entry.action()
            ),
            document: XID_CATALOG,
        });
    }
    // Only a probe that fell short of a throughput: a probe that failed on its correctness
    // canary or its memory test delivered its figures, and has its own advice below.
    let failed_probes = probes
        .iter()
        .filter_map(|r| serde_json::from_value::<crate::model::probe::ProbeReport>(r.details.clone()).ok())
        .filter(|report| !report.shortfalls().is_empty())
        .count();
    if failed_probes > 0 {
        out.push(Guidance {
            finding: format!("{failed_probes} probe(s) below the expected throughput"),
            advice: "confirm with DCGM's diagnostics (dcgmi diag -r 3: memory bandwidth, targeted stress and \
                     power) before a replacement"
                .into(),
            document: DCGM_DIAG,
        });
    }
    out
}

/// The findings the verdict recorded for the GPU, and wrong results or memory the journal
/// kept evidence of, each in its row's words of the one table (health/rules): what to do, the
/// ladder's step and the document that says so. XIDs are the catalog's, above.
fn from_the_table(gpu: &GpuFacts, rows: &[Row]) -> Vec<Guidance> {
    use crate::health::table::StepAdvice;
    use crate::model::health::RuleId;
    // The GPU's newest word of the canary: a suspicion, unless a later row lifted it.
    let unlifted_sdc = rows
        .iter()
        .filter(|r| r.kind == "sdc" && r.gpu_uuid.is_some())
        .max_by(|a, b| a.at.total_cmp(&b.at))
        .is_some_and(|r| r.details.get("suspect").is_some());
    let memtest = rows.iter().any(|r| r.kind == "memtest");
    let mut reasons: Vec<&str> = gpu.findings.iter().map(|f| f.reason.as_str()).collect();
    reasons.extend((gpu.remap_failed == Some(true)).then_some(RuleId::RowRemapFailed.label()));
    reasons.extend((gpu.remap_pending == Some(true)).then_some(RuleId::RowRemapPending.label()));
    reasons.extend(unlifted_sdc.then_some(RuleId::SdcSuspect.label()));
    reasons.extend(memtest.then_some(RuleId::HbmPatternErrors.label()));
    let mut seen = std::collections::BTreeSet::new();
    reasons
        .into_iter()
        .filter(|reason| seen.insert(*reason))
        .filter_map(|reason| crate::health::rules::named(RuleId::from_label(reason)?))
        // XIDs are the catalog's; a row with no step and nothing for the vendor (a notice,
        // a validation under way) has no advice to add.
        .filter(|rule| rule.step != StepAdvice::FromXid && rule.step != StepAdvice::None)
        .map(|rule| Guidance {
            finding: rule.reason.label().to_string(),
            advice: format!("{}; the next step is {}", rule.action, rule.step.doc()),
            document: rule.source,
        })
        .collect()
}

/// The report as Markdown, for a ticket.
pub(crate) fn markdown(report: &Report) -> String {
    let id = &report.identity;
    let mut out = format!(
        "# GPU evidence: {} serial {}\n\nGenerated {} on host {} by gpuwarden {}, from its health journal.\n\n",
        id.name,
        id.serial.as_deref().unwrap_or("unknown"),
        utc(report.generated_at),
        id.host.as_deref().unwrap_or("unknown"),
        env!("CARGO_PKG_VERSION")
    );
    let field = |name: &str, value: Option<&str>| format!("| {name} | {} |\n", value.unwrap_or("unknown"));
    out.push_str("| | |\n| --- | --- |\n");
    out.push_str(&field("UUID", Some(&id.uuid)));
    out.push_str(&field("serial", id.serial.as_deref()));
    out.push_str(&field("board part number", id.board_part_number.as_deref()));
    out.push_str(&field("VBIOS", id.vbios.as_deref()));
    out.push_str(&field("InfoROM image", id.inforom_image.as_deref()));
    out.push_str(&field("driver", Some(&id.driver_version)));
    out.push_str(&field("PCI bus id", Some(&id.pci_bus_id)));
    out.push_str(&field("host", id.host.as_deref()));
    out.push_str(&field("boots seen", Some(&id.boots_seen.len().to_string())));
    out.push_str(&format!("\n**Verdict** (as last recorded): {}\n\n", report.verdict));
    for f in &report.findings {
        out.push_str(&format!("- {} ({}): {}\n", f.reason, f.severity, f.message));
    }
    let sections: [(&str, &Vec<Row>); 12] = [
        ("XIDs", &report.xids),
        ("Wrong results (silent data corruption)", &report.sdc),
        ("HBM pattern errors", &report.memtest),
        ("The GPUs together (all-reduce)", &report.collective),
        ("ECC and row remapping", &report.memory),
        ("Probes (and probes that could not run)", &report.probes),
        ("Thermal and power-brake slowdowns", &report.slowdowns),
        ("NVLink", &report.nvlink),
        ("PCIe replays", &report.pcie),
        ("Health verdicts", &report.health),
        ("Advice, clears and validations", &report.service),
        ("Other", &report.other),
    ];
    for (title, rows) in sections {
        out.push_str(&format!("\n## {title}\n\n"));
        if rows.is_empty() {
            out.push_str("None recorded.\n");
            continue;
        }
        out.push_str("| time (UTC) | what |\n| --- | --- |\n");
        for r in rows {
            out.push_str(&format!("| {} | {} |\n", utc(r.at), r.summary.replace('|', "\\|")));
        }
    }
    out.push_str("\n## Remediation run (resets, reboot marks)\n\n");
    out.push_str(&crate::journal::report::remediation::markdown(&report.remediation));
    out.push_str("\n## Probe history\n\n");
    out.push_str(&crate::journal::report::probes::markdown(&report.probe_history));
    out.push_str("\n## What NVIDIA's documents say to do\n\n");
    if report.guidance.is_empty() {
        out.push_str("Nothing recorded that they send to field diagnostics or replacement.\n");
    }
    for g in &report.guidance {
        out.push_str(&format!("- **{}**: {} ({})\n", g.finding, g.advice, g.document));
    }
    out
}

/// Unix seconds as `2026-11-24T10:00:00Z`.
pub(crate) fn utc(at: f64) -> String {
    crate::model::utc_seconds(at)
}
