//! Small inline SVG charts for the status page: a GPU's last hour of one reading, with a
//! dashed reference (its slowdown threshold, its power limit) and the journal's events on the
//! same time axis. Plain SVG in the page: no script, nothing fetched.

use crate::serve::history::Series;
use std::fmt::Write;

/// Drawing size, in CSS pixels.
const WIDTH: f64 = 160.0;
const HEIGHT: f64 = 34.0;

/// An event to mark on the time axis: when (Unix seconds), its CSS class (`xid`, `health`,
/// `probe`) and a tooltip.
pub(crate) struct Marker {
    pub at: f64,
    pub class: &'static str,
    pub title: String,
}

/// One chart: `lines` (each a series with its CSS class), an optional horizontal
/// `reference` value, the y range's floor (`None`: from the data), and `markers`.
pub(crate) struct Chart<'a> {
    pub lines: Vec<(&'a Series, &'static str)>,
    pub reference: Option<f64>,
    pub floor: Option<f64>,
    /// The highest value the axis must show at least (1 for ratios).
    pub ceiling: Option<f64>,
    pub markers: &'a [Marker],
    /// What it shows, for the tooltip and screen readers.
    pub title: String,
}

fn values<'a>(series: &'a [(&'a Series, &'static str)]) -> impl Iterator<Item = f64> + 'a {
    series.iter().flat_map(|(s, _)| s.points.iter().filter_map(|(_, v)| *v))
}

/// The chart as an `<svg>` element over the window `[start, end]` (Unix seconds).
pub(crate) fn render(chart: &Chart, start: f64, end: f64) -> String {
    let mut out = String::new();
    let span = (end - start).max(1.0);
    let has_data = values(&chart.lines).next().is_some();
    let mut low = values(&chart.lines).fold(f64::INFINITY, f64::min);
    let mut high = values(&chart.lines).fold(f64::NEG_INFINITY, f64::max);
    if let Some(reference) = chart.reference {
        high = high.max(reference);
        low = low.min(reference);
    }
    if let Some(floor) = chart.floor {
        low = low.min(floor);
    }
    if let Some(ceiling) = chart.ceiling {
        high = high.max(ceiling);
    }
    let _ = write!(
        out,
        "<svg class=\"spark\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\"><title>{}</title>",
        crate::serve::html::escape(&chart.title)
    );
    if !has_data || !low.is_finite() || !high.is_finite() {
        let _ = write!(
            out,
            "<text x=\"4\" y=\"{}\" class=\"none\">no data</text></svg>",
            HEIGHT / 2.0 + 4.0
        );
        return out;
    }
    if high - low < 1e-9 {
        high = low + 1.0;
    }
    let x = |t: f64| ((t - start) / span * WIDTH).clamp(0.0, WIDTH);
    // 2 px of margin top and bottom.
    let y = |v: f64| HEIGHT - 2.0 - (v - low) / (high - low) * (HEIGHT - 4.0);
    if let Some(reference) = chart.reference {
        let _ = write!(
            out,
            "<line class=\"ref\" x1=\"0\" x2=\"{WIDTH}\" y1=\"{0:.1}\" y2=\"{0:.1}\"/>",
            y(reference)
        );
    }
    for marker in chart.markers.iter().filter(|m| m.at >= start && m.at <= end) {
        let _ = write!(
            out,
            "<line class=\"mark {}\" x1=\"{1:.1}\" x2=\"{1:.1}\" y1=\"0\" y2=\"{HEIGHT}\"><title>{2}</title></line>",
            marker.class,
            x(marker.at),
            crate::serve::html::escape(&marker.title)
        );
    }
    for (series, class) in &chart.lines {
        // A gap (no reading) breaks the line: never drawn across as if it were there.
        let mut segment = String::new();
        let flush = |segment: &mut String, out: &mut String| {
            if segment.trim().contains(' ') {
                let _ = write!(out, "<polyline class=\"{class}\" points=\"{}\"/>", segment.trim());
            } else if !segment.is_empty() {
                // A lone point: a dot.
                let mut xy = segment.trim().split(',');
                let (px, py) = (xy.next().unwrap_or("0"), xy.next().unwrap_or("0"));
                let _ = write!(out, "<circle class=\"{class}\" cx=\"{px}\" cy=\"{py}\" r=\"1.2\"/>");
            }
            segment.clear();
        };
        for (t, v) in &series.points {
            match v {
                Some(v) if *t >= start => {
                    let _ = write!(segment, "{:.1},{:.1} ", x(*t), y(*v));
                }
                _ => flush(&mut segment, &mut out),
            }
        }
        flush(&mut segment, &mut out);
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: Vec<(f64, Option<f64>)>) -> Series {
        Series {
            gpu: 0,
            uuid: "GPU-0".into(),
            metric: "gpu_temperature_celsius",
            meaning: "",
            step_seconds: 10,
            points,
        }
    }

    #[test]
    fn a_gap_breaks_the_line_and_markers_sit_on_the_time_axis() {
        let s = series(vec![
            (0.0, Some(40.0)),
            (10.0, Some(50.0)),
            (20.0, None),
            (30.0, Some(60.0)),
            (40.0, Some(62.0)),
        ]);
        let markers = [Marker {
            at: 20.0,
            class: "xid",
            title: "Xid <79>".into(),
        }];
        let svg = render(
            &Chart {
                lines: vec![(&s, "a")],
                reference: Some(89.0),
                floor: None,
                ceiling: None,
                markers: &markers,
                title: "temperature".into(),
            },
            0.0,
            40.0,
        );
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        assert!(svg.contains("class=\"ref\""), "{svg}");
        assert!(svg.contains("class=\"mark xid\" x1=\"80.0\""), "{svg}");
        assert!(svg.contains("Xid &lt;79&gt;"), "escaped: {svg}");
        let empty = series(vec![(0.0, None)]);
        let svg = render(
            &Chart {
                lines: vec![(&empty, "a")],
                reference: None,
                floor: Some(0.0),
                ceiling: None,
                markers: &[],
                title: "x".into(),
            },
            0.0,
            40.0,
        );
        assert!(svg.contains("no data"), "{svg}");
        // One point is a dot, not a line of one point.
        let one = series(vec![(40.0, Some(3.0))]);
        let svg = render(
            &Chart {
                lines: vec![(&one, "a")],
                reference: None,
                floor: Some(0.0),
                ceiling: Some(1.0),
                markers: &[],
                title: "x".into(),
            },
            0.0,
            40.0,
        );
        assert!(svg.contains("<circle") && !svg.contains("<polyline"), "{svg}");
    }
}
