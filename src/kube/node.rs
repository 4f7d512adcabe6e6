//! The verdict on the node's own Node object (docs/health.md, "Kubernetes"): a condition that
//! follows it (True is a problem, node-problem-detector's convention) and the `NoSchedule`
//! taint `gpuwarden/unhealthy` while it is unhealthy, under the same guard rails as the Slurm
//! drain: no more than `max_tainted` nodes carry gpuwarden's taint at once, counted from the
//! API; no other taint and no cordon is ever touched; the taint goes only when the verdict is
//! no longer unhealthy, which after a fault means after a clear and a passed validation.
//!
//! What to write is pure ([`wants`], [`condition_patch`], [`taint_patch`], [`guard`],
//! [`lost_the_race`]); [`apply`] reads the node and writes what differs. Every write of the
//! taints is a JSON patch that first tests the resourceVersion it was computed from, so an
//! admin's taint added a moment before is never overwritten: the patch fails and is redone.

use super::client::{ApiError, Client, escape};
use crate::config::KubeNode;
use crate::health::verdict::{NodeVerdict, VerdictState};
use hyper::Method;
use serde::Deserialize;
use serde_json::{Value, json};

/// gpuwarden's own taint key: the only taint it adds or removes.
pub(crate) const TAINT_KEY: &str = "gpuwarden/unhealthy";
/// The most of a condition's message: the first line and each finding, cut here.
const MAX_MESSAGE: usize = 1024;
/// The most pages of a node list read to count the fleet (500 nodes a page).
const MAX_PAGES: usize = 100;

/// What the node's objects should say for a verdict.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Wants {
    /// The condition: `True` while the verdict is unhealthy or the node's validation runs.
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
    /// The taint's value (the first unhealthy reason) while one is wanted.
    pub taint: Option<String>,
}

/// What the node should say; `None` while the verdict is unknown (before the first poll):
/// nothing is written then, so a restart does not flap the condition.
pub(crate) fn wants(verdict: &NodeVerdict) -> Option<Wants> {
    let text = crate::health::cli::text(verdict);
    let message: String = cut(text.trim_end(), MAX_MESSAGE);
    let first_reason = || {
        verdict
            .at(crate::health::verdict::Level::Unhealthy)
            .next()
            .map_or_else(|| "unhealthy".to_string(), |(_, f)| label_value(&f.reason))
    };
    let (status, reason, taint) = match verdict.state {
        VerdictState::Unknown => return None,
        VerdictState::Unhealthy => ("True", "GpuUnhealthy", Some(first_reason())),
        VerdictState::Validating => ("True", "GpuValidating", Some("validating".to_string())),
        VerdictState::Ok | VerdictState::Degraded => ("False", "GpusHealthy", None),
    };
    Some(Wants {
        status,
        reason,
        message,
        taint,
    })
}

/// `text` cut to at most `max` bytes on a character boundary.
fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// A reason as a label value: at most 63 of letters, digits, `-`, `_`, `.`, starting and
/// ending with a letter or digit.
pub(super) fn label_value(reason: &str) -> String {
    let kept: String = reason
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    let kept = kept.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if kept.is_empty() {
        "unhealthy".into()
    } else {
        kept.to_string()
    }
}

/// The parts of a Node gpuwarden reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Node {
    pub metadata: Meta,
    #[serde(default)]
    pub spec: Spec,
    #[serde(default)]
    pub status: Status,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Meta {
    #[serde(default)]
    pub name: String,
    #[serde(default, rename = "resourceVersion")]
    pub resource_version: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Spec {
    /// Kept as the API wrote them: a patch gives back every other taint unchanged.
    #[serde(default)]
    pub taints: Vec<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Status {
    #[serde(default)]
    pub conditions: Vec<Value>,
}

impl Node {
    /// gpuwarden's taint on it, if any.
    pub(crate) fn our_taint(&self) -> Option<&Value> {
        self.spec.taints.iter().find(|t| is_ours(t))
    }
}

fn is_ours(taint: &Value) -> bool {
    taint.get("key").and_then(Value::as_str) == Some(TAINT_KEY)
}

/// The strategic-merge patch of `nodes/{name}/status` that makes the condition say `wants`;
/// `None` when it already does and `heartbeat` is false. Its transition time stays while its
/// status does.
pub(crate) fn condition_patch(
    node: &Node,
    condition: &str,
    wants: &Wants,
    now: &str,
    heartbeat: bool,
) -> Option<Value> {
    let current = node
        .status
        .conditions
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(condition));
    let field = |name: &str| current.and_then(|c| c.get(name)).and_then(Value::as_str);
    let same = field("status") == Some(wants.status)
        && field("reason") == Some(wants.reason)
        && field("message") == Some(wants.message.as_str());
    if same && !heartbeat {
        return None;
    }
    let transition = match field("status") {
        Some(status) if status == wants.status => field("lastTransitionTime").unwrap_or(now),
        _ => now,
    };
    Some(json!({"status": {"conditions": [{
        "type": condition,
        "status": wants.status,
        "reason": wants.reason,
        "message": wants.message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": transition,
    }]}}))
}

/// The JSON patch that puts gpuwarden's taint on (with `value`) or takes it off (`None`),
/// every other taint as it is; `None` when the node already has it so. It tests the node's
/// resourceVersion first: a node changed since it was read refuses the patch (409/422).
pub(crate) fn taint_patch(node: &Node, value: Option<&str>, now: &str) -> Option<Value> {
    let current = node.our_taint();
    let unchanged = match (current, value) {
        (None, None) => true,
        (Some(t), Some(v)) => t.get("value").and_then(Value::as_str) == Some(v),
        _ => false,
    };
    if unchanged {
        return None;
    }
    let mut taints: Vec<Value> = node.spec.taints.iter().filter(|t| !is_ours(t)).cloned().collect();
    if let Some(value) = value {
        // A changed value keeps the time it was first added: the cap's order is by it.
        let added = current
            .and_then(|t| t.get("timeAdded"))
            .and_then(Value::as_str)
            .unwrap_or(now);
        taints.push(json!({"key": TAINT_KEY, "value": value, "effect": "NoSchedule", "timeAdded": added}));
    }
    Some(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": node.metadata.resource_version},
        {"op": "add", "path": "/spec/taints", "value": taints},
    ]))
}

/// Why the taint was not put on: the cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    pub tainted: usize,
    pub fleet: usize,
    pub max: usize,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} nodes already tainted by gpuwarden (kubernetes.node.max_tainted {})",
            self.tainted, self.fleet, self.max
        )
    }
}

/// Whether `me` may take the taint: fewer than `max` other nodes of the fleet carry it.
pub(crate) fn guard(fleet: &[Node], me: &str, max: usize) -> Result<(), Refused> {
    let tainted = fleet
        .iter()
        .filter(|n| n.metadata.name != me && n.our_taint().is_some())
        .count();
    if tainted >= max {
        return Err(Refused {
            tainted,
            fleet: fleet.len(),
            max,
        });
    }
    Ok(())
}

/// After tainting: whether `me` is past the cap, two nodes having counted at once. The nodes
/// with the taint are ordered by when it was added, then by name, the same order on every
/// node; those after the first `max` take theirs off again.
pub(crate) fn lost_the_race(fleet: &[Node], me: &str, max: usize) -> bool {
    let mut tainted: Vec<(String, &str)> = fleet
        .iter()
        .filter_map(|n| {
            let added = n.our_taint()?.get("timeAdded").and_then(Value::as_str).unwrap_or("");
            Some((added.to_string(), n.metadata.name.as_str()))
        })
        .collect();
    tainted.sort();
    tainted
        .iter()
        .position(|(_, name)| *name == me)
        .is_some_and(|place| place >= max)
}

/// What one pass over the node did.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Applied {
    /// The cap held the taint back: why.
    pub refused: Option<Refused>,
    /// The fleet as the cap counted it, when a taint was considered: nodes carrying
    /// gpuwarden's taint (this one included once it has it), the fleet, the cap.
    pub counted: Option<Refused>,
}

/// Reads the node and writes what differs from `wants`: the condition (always, when
/// `heartbeat`), then the taint under the cap.
pub(crate) async fn apply(
    client: &Client,
    settings: &KubeNode,
    name: &str,
    wants: &Wants,
    heartbeat: bool,
) -> Result<Applied, ApiError> {
    let path = format!("/api/v1/nodes/{}", escape(name));
    let mut node: Node = client.get(&path).await?;
    let now = crate::model::utc_seconds(crate::model::unix_now());
    if let Some(patch) = condition_patch(&node, &settings.condition, wants, &now, heartbeat) {
        client
            .write(
                Method::PATCH,
                &format!("{path}/status"),
                "application/strategic-merge-patch+json",
                &patch,
            )
            .await?;
        // The status write moved the node's resourceVersion, which the taint's patch tests.
        node = client.get(&path).await?;
    }
    let want_taint = if settings.taint { wants.taint.as_deref() } else { None };
    let mut applied = Applied::default();
    if taint_patch(&node, want_taint, &now).is_none() {
        return Ok(applied);
    }
    let adding = node.our_taint().is_none() && want_taint.is_some();
    if !adding {
        set_taint(client, &path, want_taint, &now, node).await?;
        return Ok(applied);
    }
    let fleet = list_fleet(client, &settings.fleet_selector).await?;
    let max = settings.max_tainted.of(fleet.len());
    if let Err(refused) = guard(&fleet, name, max) {
        applied.counted = Some(refused.clone());
        applied.refused = Some(refused);
        return Ok(applied);
    }
    set_taint(client, &path, want_taint, &now, node).await?;
    let fleet = list_fleet(client, &settings.fleet_selector).await?;
    applied.counted = Some(Refused {
        tainted: fleet.iter().filter(|n| n.our_taint().is_some()).count(),
        fleet: fleet.len(),
        max,
    });
    if lost_the_race(&fleet, name, max) {
        // Another node took the last place a moment before: give it back.
        let node: Node = client.get(&path).await?;
        set_taint(client, &path, None, &now, node).await?;
        let tainted = fleet
            .iter()
            .filter(|n| n.our_taint().is_some())
            .count()
            .saturating_sub(1);
        applied.refused = Some(Refused {
            tainted,
            fleet: fleet.len(),
            max,
        });
        applied.counted = applied.refused.clone();
    }
    Ok(applied)
}

/// Makes gpuwarden's taint on the node `value` (None: off), every other taint as it is. A
/// node changed since it was read (someone's taint a moment before: the patch's test of the
/// resourceVersion fails, 409 or 422) is read again and the patch made anew, three tries.
async fn set_taint(
    client: &Client,
    path: &str,
    value: Option<&str>,
    now: &str,
    mut node: Node,
) -> Result<(), ApiError> {
    use hyper::StatusCode;
    for attempt in 0..3 {
        let Some(patch) = taint_patch(&node, value, now) else {
            return Ok(());
        };
        match client
            .write(Method::PATCH, path, "application/json-patch+json", &patch)
            .await
        {
            Err(e)
                if attempt < 2
                    && matches!(
                        e.status(),
                        Some(StatusCode::CONFLICT | StatusCode::UNPROCESSABLE_ENTITY)
                    ) =>
            {
                node = client.get(path).await?;
            }
            other => return other,
        }
    }
    Ok(())
}

#[derive(Deserialize)]
struct NodeList {
    #[serde(default)]
    items: Vec<Node>,
    #[serde(default)]
    metadata: ListMeta,
}

#[derive(Default, Deserialize)]
struct ListMeta {
    #[serde(default, rename = "continue")]
    next: Option<String>,
}

/// The nodes `fleet_selector` selects, a page of 500 at a time.
async fn list_fleet(client: &Client, selector: &str) -> Result<Vec<Node>, ApiError> {
    let mut nodes = Vec::new();
    let mut next: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut path = "/api/v1/nodes?limit=500".to_string();
        if !selector.is_empty() {
            path.push_str(&format!("&labelSelector={}", escape(selector)));
        }
        if let Some(token) = &next {
            path.push_str(&format!("&continue={}", escape(token)));
        }
        let page: NodeList = client.get(&path).await?;
        nodes.extend(page.items.into_iter().map(|mut n| {
            n.status = Status::default();
            n
        }));
        next = page.metadata.next.filter(|t| !t.is_empty());
        if next.is_none() {
            break;
        }
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::verdict::{FindingView, GpuVerdict, Level};
    use crate::model::health::HealthState;

    fn verdict(state: VerdictState, reason: Option<&str>) -> NodeVerdict {
        NodeVerdict {
            state,
            summary: "8 GPU(s): 1 unhealthy, 0 degraded".into(),
            gpus: vec![GpuVerdict {
                index: 0,
                uuid: "GPU-0".into(),
                pci_bus_id: "0000:19:00.0".into(),
                name: "H100".into(),
                serial: None,
                state: if reason.is_some() {
                    HealthState::Unhealthy
                } else {
                    HealthState::Ok
                },
                findings: reason
                    .map(|r| FindingView {
                        reason: r.into(),
                        severity: Level::Unhealthy,
                        message: "fatal XID".into(),
                        subject: None,
                    })
                    .into_iter()
                    .collect(),
                next_step: None,
                held_back: None,
            }],
            node_findings: vec![],
            generation: 3,
            validating: None,
        }
    }

    fn node(taints: Value, conditions: Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1", "resourceVersion": "42"},
            "spec": {"taints": taints}, "status": {"conditions": conditions}}))
        .unwrap()
    }

    #[test]
    fn the_condition_and_taint_follow_the_verdict_and_nothing_is_said_before_the_first_poll() {
        assert_eq!(wants(&verdict(VerdictState::Unknown, None)), None);
        let bad = wants(&verdict(VerdictState::Unhealthy, Some("xid_fatal"))).unwrap();
        assert_eq!(
            (bad.status, bad.reason, bad.taint.as_deref()),
            ("True", "GpuUnhealthy", Some("xid_fatal"))
        );
        assert!(bad.message.starts_with("unhealthy: GPU 0 xid_fatal"), "{}", bad.message);
        let good = wants(&verdict(VerdictState::Ok, None)).unwrap();
        assert_eq!((good.status, good.reason, good.taint), ("False", "GpusHealthy", None));
        let odd = wants(&verdict(VerdictState::Unhealthy, Some("custom:my rule/ä"))).unwrap();
        assert_eq!(odd.taint.as_deref(), Some("custom_my_rule"));
    }

    #[test]
    fn the_condition_keeps_its_transition_time_while_its_status_stays() {
        let bad = wants(&verdict(VerdictState::Unhealthy, Some("xid_fatal"))).unwrap();
        let n = node(
            json!([]),
            json!([{"type": "GpuUnhealthy", "status": "True", "reason": "GpuUnhealthy",
            "message": "old", "lastTransitionTime": "2026-01-01T00:00:00Z"}]),
        );
        let patch = condition_patch(&n, "GpuUnhealthy", &bad, "2026-12-06T00:00:00Z", false).unwrap();
        let c = &patch["status"]["conditions"][0];
        assert_eq!(c["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(c["lastHeartbeatTime"], "2026-12-06T00:00:00Z");
        let same = node(json!([]), json!([c.clone()]));
        assert_eq!(condition_patch(&same, "GpuUnhealthy", &bad, "later", false), None);
        assert!(condition_patch(&same, "GpuUnhealthy", &bad, "later", true).is_some());
        let good = wants(&verdict(VerdictState::Ok, None)).unwrap();
        let flipped = condition_patch(&same, "GpuUnhealthy", &good, "later", false).unwrap();
        assert_eq!(flipped["status"]["conditions"][0]["lastTransitionTime"], "later");
    }

    #[test]
    fn the_taint_patch_keeps_every_other_taint_and_tests_the_version_it_read() {
        let admin = json!({"key": "gpuwarden/unhealthy-not", "effect": "NoSchedule"});
        let other = json!({"key": "maintenance", "value": "rack4", "effect": "NoExecute"});
        let n = node(json!([admin, other]), json!([]));
        let patch = taint_patch(&n, Some("xid_fatal"), "t1").unwrap();
        assert_eq!(
            patch[0],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "42"})
        );
        let taints = patch[1]["value"].as_array().unwrap();
        assert_eq!(taints[..2], [admin.clone(), other.clone()]);
        assert_eq!(
            taints[2],
            json!({"key": TAINT_KEY, "value": "xid_fatal", "effect": "NoSchedule", "timeAdded": "t1"})
        );
        let tainted = node(patch[1]["value"].clone(), json!([]));
        assert_eq!(taint_patch(&tainted, Some("xid_fatal"), "t2"), None);
        let renamed = taint_patch(&tainted, Some("gpu_lost"), "t2").unwrap();
        assert_eq!(renamed[1]["value"][2]["timeAdded"], "t1");
        let lifted = taint_patch(&tainted, None, "t3").unwrap();
        assert_eq!(lifted[1]["value"], json!([admin, other]));
        assert_eq!(taint_patch(&n, None, "t3"), None);
    }

    #[test]
    fn the_cap_counts_other_nodes_and_the_later_of_two_at_once_gives_way() {
        let fleet_node = |name: &str, added: Option<&str>| {
            let taints = added.map_or(
                json!([]),
                |a| json!([{"key": TAINT_KEY, "value": "x", "effect": "NoSchedule", "timeAdded": a}]),
            );
            let mut n = node(taints, json!([]));
            n.metadata.name = name.into();
            n
        };
        let fleet = [
            fleet_node("a", Some("t1")),
            fleet_node("b", Some("t2")),
            fleet_node("c", None),
        ];
        assert_eq!(
            guard(&fleet, "c", 2),
            Err(Refused {
                tainted: 2,
                fleet: 3,
                max: 2
            })
        );
        assert_eq!(guard(&fleet, "c", 3), Ok(()));
        assert_eq!(guard(&fleet, "b", 2), Ok(()), "its own taint is not counted against it");
        let raced = [
            fleet_node("a", Some("t1")),
            fleet_node("c", Some("t2")),
            fleet_node("b", Some("t2")),
        ];
        assert!(lost_the_race(&raced, "c", 2) && !lost_the_race(&raced, "b", 2) && !lost_the_race(&raced, "a", 2));
        assert!(!lost_the_race(&raced, "c", 3));
    }
}
