//! What the health stage remembers of each network port between reads: how often it went
//! down within `network.flap_window`, and how its error counters grew within the last hour
//! (the same one-sample-a-minute windows as the GPUs' error rates, health/rates.rs).
//!
//! A flap is counted from the port's `link_downed` counter, which the adapter keeps, so a
//! down and up between two reads (10 s apart) is not missed; a port without that counter
//! counts the downs seen between reads. A counter that goes backwards (the adapter was reset,
//! the driver reloaded) starts its window again: never a negative rate.

use super::rates::Window;
use crate::model::health::Clears;
use crate::model::nic::{NicScan, NicTrend, PortCounter};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Downs remembered per port: a port that flaps thousands of times costs no more.
const MAX_DOWNS: usize = 1000;
/// The annotated scan is made again at least this often while the scan does not change, so
/// old flaps leave the window.
const REFRESH: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct PortMemory {
    /// When each down was seen, oldest first.
    downs: VecDeque<Instant>,
    last_link_downed: Option<u64>,
    last_up: Option<bool>,
    /// Times its trend was made: the first knows nothing of flaps yet (a one-shot `check`).
    looks: u64,
    /// The operator's last clear of its adapter (`nic:<device>`) it counts from.
    cleared: Option<f64>,
    link_downed: Window,
    local_link_integrity_errors: Window,
    symbol_error: Window,
}

/// By (device, port).
#[derive(Debug, Default)]
pub(crate) struct NicTrendTracker {
    ports: HashMap<(String, u32), PortMemory>,
    /// The scan last noted (its version) and the annotated copy made from it, and when.
    noted: Option<(u64, Arc<NicScan>, Instant)>,
    /// The adapters' clears the annotated copy was made with.
    clears_noted: Vec<(String, f64)>,
}

impl NicTrendTracker {
    /// The scan with each port's trend written in. A new scan (`version` moved) is noted;
    /// the same one is annotated again only every [`REFRESH`], so the rest of the time this
    /// is the copy of an `Arc`.
    ///
    /// An operator's clear of an adapter (`clears`, under `nic:<device>`) starts its ports'
    /// flaps and error growth afresh, as a new cable or transceiver should.
    pub(crate) fn annotate(
        &mut self,
        scan: &Arc<NicScan>,
        version: u64,
        flap_window: Duration,
        clears: &Clears,
        now: Instant,
    ) -> Arc<NicScan> {
        let nic_clears: Vec<(String, f64)> = clears
            .iter()
            .filter_map(|(key, clear)| Some((super::clear_nic::device_of(key)?.to_string(), clear.at)))
            .collect();
        if let Some((seen, annotated, at)) = &self.noted
            && *seen == version
            && now.saturating_duration_since(*at) < REFRESH
            && nic_clears == self.clears_noted
        {
            return annotated.clone();
        }
        let new_read = self.noted.as_ref().is_none_or(|(seen, _, _)| *seen != version);
        let mut out = (**scan).clone();
        self.ports
            .retain(|(device, port), _| scan.ports().any(|(d, p)| d.name == *device && p.port == *port));
        for device in &mut out.devices {
            let cleared = nic_clears.iter().find(|(d, _)| *d == device.name).map(|(_, at)| *at);
            for port in &mut device.ports {
                let memory = self.ports.entry((device.name.clone(), port.port)).or_default();
                if cleared != memory.cleared {
                    // Counted from the clear: what the old cable did no longer counts.
                    *memory = PortMemory {
                        last_link_downed: port.counter(PortCounter::LinkDowned),
                        last_up: port.up(),
                        looks: memory.looks,
                        cleared,
                        ..Default::default()
                    };
                }
                if new_read {
                    memory.note_read(port.counter(PortCounter::LinkDowned), port.up(), now);
                }
                port.trend = memory.trend(port, flap_window, now);
            }
        }
        let out = Arc::new(out);
        self.noted = Some((version, out.clone(), now));
        self.clears_noted = nic_clears;
        out
    }
}

impl PortMemory {
    /// A new read: the downs since the last one.
    fn note_read(&mut self, link_downed: Option<u64>, up: Option<bool>, now: Instant) {
        let downs = match (link_downed, self.last_link_downed) {
            (Some(value), Some(last)) if value >= last => value - last,
            // The first read, or the counter went backwards (a reset): nothing counted.
            (Some(_), _) => 0,
            (None, _) => u64::from(self.last_up == Some(false) && up == Some(true)),
        };
        for _ in 0..downs.min(MAX_DOWNS as u64) {
            if self.downs.len() == MAX_DOWNS {
                self.downs.pop_front();
            }
            self.downs.push_back(now);
        }
        self.last_link_downed = link_downed;
        self.last_up = up;
    }

    fn trend(&mut self, port: &crate::model::nic::NicPort, flap_window: Duration, now: Instant) -> NicTrend {
        while self
            .downs
            .front()
            .is_some_and(|at| now.saturating_duration_since(*at) > flap_window)
        {
            self.downs.pop_front();
        }
        let grew = |window: &mut Window, counter| port.counter(counter).map(|value| window.note(value, now));
        self.looks += 1;
        NicTrend {
            flaps: (self.looks >= 2).then_some(self.downs.len() as u64),
            link_downed: grew(&mut self.link_downed, PortCounter::LinkDowned),
            local_link_integrity_errors: grew(
                &mut self.local_link_integrity_errors,
                PortCounter::LocalLinkIntegrityErrors,
            ),
            symbol_error: grew(&mut self.symbol_error, PortCounter::SymbolError),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::nic::{NicDevice, NicPort};

    fn scan(link_downed: u64, symbol_error: u64, up: bool) -> Arc<NicScan> {
        let (state, phys) = if up {
            ((4, "ACTIVE".into()), (5, "LinkUp".into()))
        } else {
            ((1, "DOWN".into()), (2, "Polling".into()))
        };
        Arc::new(NicScan {
            devices: vec![NicDevice {
                name: "mlx5_0".into(),
                ports: vec![NicPort {
                    port: 1,
                    link_layer: "infiniband".into(),
                    state: Some(state),
                    phys_state: Some(phys),
                    counters: vec![
                        (PortCounter::LinkDowned, link_downed),
                        (PortCounter::SymbolError, symbol_error),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        })
    }

    const WINDOW: Duration = Duration::from_secs(600);

    #[test]
    fn downs_between_reads_are_counted_from_the_counter_and_leave_the_window() {
        let mut tracker = NicTrendTracker::default();
        let t0 = Instant::now();
        let trend = |t: &mut NicTrendTracker, s: &Arc<NicScan>, v: u64, at: Duration| {
            t.annotate(s, v, WINDOW, &Clears::new(), t0 + at).devices[0].ports[0].trend
        };
        // At start the counter holds downs from before: not flaps.
        assert_eq!(trend(&mut tracker, &scan(5, 0, true), 1, Duration::ZERO).flaps, None);
        assert_eq!(
            trend(&mut tracker, &scan(5, 0, true), 2, Duration::from_secs(10)).flaps,
            Some(0)
        );
        // Three downs and ups between two reads: the port looks up at both.
        let t = trend(&mut tracker, &scan(8, 0, true), 3, Duration::from_secs(20));
        assert_eq!(t.flaps, Some(3));
        assert_eq!(t.link_downed.map(|g| g.errors), Some(3));
        // Eleven minutes later, with no new read, they have left the flap window (but not
        // the hour of link_downed growth).
        let t = trend(&mut tracker, &scan(8, 0, true), 3, Duration::from_secs(20 + 660));
        assert_eq!(t.flaps, Some(0));
        assert_eq!(t.link_downed.map(|g| g.errors), Some(3));
    }

    #[test]
    fn a_counter_that_goes_backwards_is_a_reset_not_a_negative_rate() {
        let mut tracker = NicTrendTracker::default();
        let t0 = Instant::now();
        tracker.annotate(&scan(10, 500, true), 1, WINDOW, &Clears::new(), t0);
        let t = tracker
            .annotate(
                &scan(0, 3, true),
                2,
                WINDOW,
                &Clears::new(),
                t0 + Duration::from_secs(70),
            )
            .devices[0]
            .ports[0]
            .trend;
        assert_eq!(t.flaps, Some(0));
        assert_eq!(t.symbol_error.map(|g| g.errors), Some(0));
        let t = tracker
            .annotate(
                &scan(0, 203, true),
                3,
                WINDOW,
                &Clears::new(),
                t0 + Duration::from_secs(140),
            )
            .devices[0]
            .ports[0]
            .trend;
        assert_eq!(t.symbol_error.map(|g| g.errors), Some(200));
    }

    #[test]
    fn without_a_counter_a_down_then_up_between_reads_is_a_flap() {
        let mut tracker = NicTrendTracker::default();
        let t0 = Instant::now();
        let bare = |up: bool| {
            let mut s = (*scan(0, 0, up)).clone();
            s.devices[0].ports[0].counters.clear();
            Arc::new(s)
        };
        tracker.annotate(&bare(true), 1, WINDOW, &Clears::new(), t0);
        tracker.annotate(&bare(false), 2, WINDOW, &Clears::new(), t0 + Duration::from_secs(10));
        let t = tracker
            .annotate(&bare(true), 3, WINDOW, &Clears::new(), t0 + Duration::from_secs(20))
            .devices[0]
            .ports[0]
            .trend;
        assert_eq!(t.flaps, Some(1));
        assert_eq!(t.link_downed, None);
    }

    #[test]
    fn an_operators_clear_of_the_adapter_counts_its_ports_afresh() {
        let mut tracker = NicTrendTracker::default();
        let t0 = Instant::now();
        let none = Clears::new();
        tracker.annotate(&scan(1, 0, true), 1, WINDOW, &none, t0);
        let t = tracker.annotate(&scan(4, 500, true), 2, WINDOW, &none, t0 + Duration::from_secs(70));
        let trend = t.devices[0].ports[0].trend;
        assert_eq!(
            (trend.flaps, trend.symbol_error.map(|g| g.errors)),
            (Some(3), Some(500))
        );
        let mut clears = Clears::new();
        clears.insert(
            crate::health::clear_nic::key("mlx5_0"),
            crate::model::health::Clear {
                at: 1.0e9,
                reason: "new cable".into(),
                by: "uid 0".into(),
            },
        );
        // The same scan, a second later: the clear alone makes it count afresh.
        let t = tracker.annotate(&scan(4, 500, true), 2, WINDOW, &clears, t0 + Duration::from_secs(71));
        let trend = t.devices[0].ports[0].trend;
        assert_eq!(trend.flaps, Some(0));
        assert_eq!(trend.symbol_error.map(|g| g.errors), Some(0));
        let t = tracker.annotate(&scan(5, 510, true), 3, WINDOW, &clears, t0 + Duration::from_secs(140));
        let trend = t.devices[0].ports[0].trend;
        assert_eq!((trend.flaps, trend.symbol_error.map(|g| g.errors)), (Some(1), Some(10)));
    }

    #[test]
    fn an_unchanged_scan_is_not_copied_again_within_the_refresh() {
        let mut tracker = NicTrendTracker::default();
        let t0 = Instant::now();
        let s = scan(1, 0, true);
        let a = tracker.annotate(&s, 1, WINDOW, &Clears::new(), t0);
        let b = tracker.annotate(&s, 1, WINDOW, &Clears::new(), t0 + Duration::from_secs(1));
        assert!(Arc::ptr_eq(&a, &b));
        let c = tracker.annotate(&s, 1, WINDOW, &Clears::new(), t0 + REFRESH);
        assert!(!Arc::ptr_eq(&a, &c));
    }
}
