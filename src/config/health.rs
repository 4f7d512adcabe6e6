//! `health`: the operator's policy over the rules (docs/health.md, "Policy"): XID severities,
//! per-rule debounce and hold, error-rate limits, the temperature margin. Reloadable: the
//! next snapshot is judged by it.

use super::*;
use crate::model::health::RuleId;

/// The operator's health policy (docs/health.md, "Policy"). Reloadable.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Health {
    /// XID severities over NVIDIA's catalog: `{48: fatal, 45: ignore}`, with `all` for every
    /// code not listed.
    #[serde(deserialize_with = "xid_severity")]
    pub xid_severity: crate::model::xid::XidPolicy,
    /// Per rule (by its reason): how long its condition must hold before the finding is
    /// raised, and how long it must be clear before the finding clears.
    #[serde(deserialize_with = "rule_policies")]
    pub rules: std::collections::BTreeMap<RuleId, RulePolicy>,
    /// A GPU within this many degrees C of its slowdown temperature is degraded
    /// (`temperature_near_slowdown`); unset: no such finding (the alert still warns at 5 C).
    #[serde(deserialize_with = "temperature_margin")]
    pub temperature_margin_c: Option<f64>,
    /// Per error counter: more errors than this within the last hour make a GPU degraded
    /// (`ecc_corrected_rate`, `nvlink_error_rate`, `pcie_replay_rate`); unset: no such finding.
    #[serde(deserialize_with = "error_rates")]
    pub error_rates: crate::model::health::ErrorRateLimits,
    /// A GPU cleared of an unhealthy finding, or a new board found in a slot, must pass a
    /// probe before the verdict lets its node back into service (`validating`, docs/health.md
    /// "Return to service"). On by default.
    pub validate_after_clear: bool,
    /// The operator's own rules, CEL expressions (docs/health.md, "Rules as code"); after
    /// a load, with those of `custom_rules_dir` after them.
    pub custom_rules: Vec<super::CustomRule>,
    /// A directory whose `*.yaml` files each hold `rules:` and a list of rules; "": none.
    pub custom_rules_dir: PathBuf,
}

impl Default for Health {
    fn default() -> Health {
        Health {
            xid_severity: Default::default(),
            rules: default_rule_policies(),
            temperature_margin_c: None,
            error_rates: Default::default(),
            validate_after_clear: true,
            custom_rules: Vec::new(),
            custom_rules_dir: PathBuf::new(),
        }
    }
}

/// `health.error_rates`: each limit a whole number of errors an hour.
pub(super) fn error_rates<'de, D: Deserializer<'de>>(d: D) -> Result<crate::model::health::ErrorRateLimits, D::Error> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Written {
        #[serde(default)]
        ecc_corrected: Option<serde_json::Value>,
        #[serde(default)]
        nvlink: Option<serde_json::Value>,
        #[serde(default)]
        pcie_replay: Option<serde_json::Value>,
    }
    fn count<E: serde::de::Error>(key: &str, value: Option<serde_json::Value>) -> Result<Option<u64>, E> {
        let Some(value) = value else {
            return Ok(None);
        };
        value.as_u64().map(Some).ok_or_else(|| {
            E::custom(format!(
                "health.error_rates.{key} is {value}; write a whole number of errors an hour (0 or more)"
            ))
        })
    }
    let written = Written::deserialize(d)?;
    Ok(crate::model::health::ErrorRateLimits {
        ecc_corrected: count("ecc_corrected", written.ecc_corrected)?,
        nvlink: count("nvlink", written.nvlink)?,
        pcie_replay: count("pcie_replay", written.pcie_replay)?,
    })
}

pub(super) fn temperature_margin<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let margin = f64::deserialize(d)?;
    if !(0.0..=50.0).contains(&margin) {
        return Err(serde::de::Error::custom(format!(
            "health.temperature_margin_c is {margin}; write 0 to 50 degrees C"
        )));
    }
    Ok(Some(margin))
}

/// One rule's debounce and hold (docs/health.md, "Debounce and hold").
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RulePolicy {
    /// The condition must be seen this many polls in a row (a number) or this long (a
    /// duration) before its finding is raised; 1 (the default): at once.
    #[serde(deserialize_with = "debounce")]
    pub debounce: Debounce,
    /// Once raised, the finding stays until its condition has been clear this long.
    #[serde(deserialize_with = "rule_hold")]
    pub hold: Duration,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Debounce {
    #[default]
    None,
    Polls(u32),
    For(Duration),
}

impl Debounce {
    /// How long the condition must have held, given the poll interval: N polls in a row are
    /// N - 1 intervals from the first to the last.
    pub fn span(self, poll_interval: Duration) -> Duration {
        match self {
            Debounce::None => Duration::ZERO,
            Debounce::Polls(n) => poll_interval.saturating_mul(n.saturating_sub(1)),
            Debounce::For(d) => d,
        }
    }
}

pub(super) fn debounce<'de, D: Deserializer<'de>>(d: D) -> Result<Debounce, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = Debounce;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a number of polls (3) or a duration (30s)")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Debounce, E> {
            match u32::try_from(v) {
                Ok(n) if (1..=10_000).contains(&n) => Ok(Debounce::Polls(n)),
                _ => Err(E::custom(format!(
                    "debounce {v} polls: write 1 to 10000 polls, or a duration (30s)"
                ))),
            }
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Debounce, E> {
            u64::try_from(v)
                .map_err(|_| {
                    E::custom(format!(
                        "debounce {v} polls: write 1 to 10000 polls, or a duration (30s)"
                    ))
                })
                .and_then(|v| self.visit_u64(v))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Debounce, E> {
            let d = humantime::parse_duration(v.trim()).map_err(|e| {
                E::custom(format!(
                    "{v:?} is not a debounce ({e}); write a number of polls (3) or a duration (30s)"
                ))
            })?;
            if d > Duration::from_secs(24 * 3600) {
                return Err(E::custom(format!("debounce {v} is over a day; write at most 24h")));
            }
            Ok(Debounce::For(d))
        }
    }
    d.deserialize_any(V)
}

/// A rule's name as a key of `health.rules`: one of the rules' reasons.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct RuleName(RuleId);

impl<'de> Deserialize<'de> for RuleName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RuleName, D::Error> {
        let name = String::deserialize(d)?;
        // `RuleId` is the one list of names; each row of the rule table carries one.
        RuleId::from_label(&name).map(RuleName).ok_or_else(|| {
            let names: Vec<&str> = RuleId::ALL.iter().map(|rule| rule.label()).collect();
            serde::de::Error::custom(format!("no health rule {name:?}; the rules are {}", names.join(", ")))
        })
    }
}

pub(super) fn rule_policies<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<std::collections::BTreeMap<RuleId, RulePolicy>, D::Error> {
    let written = std::collections::BTreeMap::<RuleName, RulePolicy>::deserialize(d)?;
    let mut policies = default_rule_policies();
    policies.extend(written.into_iter().map(|(k, v)| (k.0, v)));
    Ok(policies)
}

/// How long a network port must stay down before `nic_port_down` makes the node unhealthy,
/// unless `health.rules.nic_port_down` says otherwise. A port that goes down and comes back
/// within it is a flap: counted by `link_downed` and judged by `nic_port_flapping` (3 in 10
/// minutes: degraded), never a drain that the next check lifts again. 30 s is about how long
/// NCCL's InfiniBand transport retries a lost path before a job fails (NCCL_IB_TIMEOUT 20,
/// NCCL_IB_RETRY_CNT 7: 7 x 4.096 us x 2^20, 30 s): a port down longer fails jobs. gpud calls
/// a port down for 4 minutes a drop; gpuwarden drains sooner, since its drain is lifted by the
/// next check once the port is back.
pub const NIC_PORT_DOWN_DEBOUNCE: Duration = Duration::from_secs(30);

/// The policies that hold for a rule the operator wrote none for (`health.rules`).
pub fn default_rule_policies() -> std::collections::BTreeMap<RuleId, RulePolicy> {
    [(
        RuleId::NicPortDown,
        RulePolicy {
            debounce: Debounce::For(NIC_PORT_DOWN_DEBOUNCE),
            hold: Duration::ZERO,
        },
    )]
    .into()
}

/// An XID code, or `all`, as a key of `health.xid_severity`.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum XidKey {
    All,
    Code(u32),
}

impl<'de> Deserialize<'de> for XidKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<XidKey, D::Error> {
        struct Key;
        impl serde::de::Visitor<'_> for Key {
            type Value = XidKey;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an XID code (1 to 65535) or `all`")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<XidKey, E> {
                match u32::try_from(v) {
                    Ok(code) if (1..=65535).contains(&code) => Ok(XidKey::Code(code)),
                    _ => Err(E::custom(format!(
                        "XID code {v} is out of range; XID codes are 1 to 65535"
                    ))),
                }
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<XidKey, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom(format!("XID code {v} is out of range; XID codes are 1 to 65535")))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<XidKey, E> {
                match v.trim() {
                    "all" => Ok(XidKey::All),
                    digits => match digits.parse::<u64>() {
                        Ok(n) => self.visit_u64(n),
                        Err(_) => Err(E::custom(format!(
                            "{v:?} is not an XID code; write a number (48) or `all`"
                        ))),
                    },
                }
            }
        }
        d.deserialize_any(Key)
    }
}

/// A severity as the operator writes it.
#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum SeverityName {
    Fatal,
    Critical,
    Warning,
    /// Counted (metrics, journal) with severity `info`; never a finding.
    Ignore,
}

/// `health.xid_severity` as written, every key once: `{48: fatal, "48": ignore}` names one
/// code twice, and which one wins would be a guess, so it is refused.
pub(super) struct XidSeverities(Vec<(XidKey, SeverityName)>);

impl<'de> Deserialize<'de> for XidSeverities {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<XidSeverities, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = XidSeverities;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of XID codes (or `all`) to fatal, critical, warning or ignore")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<XidSeverities, A::Error> {
                let mut entries: Vec<(XidKey, SeverityName)> = Vec::new();
                while let Some(key) = map.next_key::<XidKey>()? {
                    if entries.iter().any(|(seen, _)| *seen == key) {
                        let named = match key {
                            XidKey::All => "`all`".to_string(),
                            XidKey::Code(code) => format!("XID {code}"),
                        };
                        return Err(serde::de::Error::custom(format!(
                            "{named} is given twice in health.xid_severity (48 and \"48\" are one code); keep one"
                        )));
                    }
                    let value = map.next_value::<SeverityName>()?;
                    entries.push((key, value));
                }
                Ok(XidSeverities(entries))
            }
        }
        d.deserialize_map(Entries)
    }
}

pub(super) fn xid_severity<'de, D: Deserializer<'de>>(d: D) -> Result<crate::model::xid::XidPolicy, D::Error> {
    use crate::model::xid::Severity;
    let written = XidSeverities::deserialize(d)?.0;
    let mut policy = crate::model::xid::XidPolicy::default();
    for (key, name) in written {
        let severity = match name {
            SeverityName::Fatal => Severity::Fatal,
            SeverityName::Critical => Severity::Critical,
            SeverityName::Warning => Severity::Warning,
            SeverityName::Ignore => Severity::Info,
        };
        match key {
            XidKey::All => policy.all = Some(severity),
            XidKey::Code(code) => {
                policy.codes.insert(code, severity);
            }
        }
    }
    Ok(policy)
}
