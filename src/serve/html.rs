//! HTML text escaping for the server-rendered pages (the status page and its charts).

/// `text` safe inside HTML text and attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Break opportunities in a page's body text: `<wbr>` after each `_` or `.` between a letter
/// or digit and a letter (`sw_thermal_<wbr>slowdown`, `probe.<wbr>schedule`), so a narrow column
/// wraps a label between its parts, never inside one (the CSS breaks no word). Tags and what
/// an `<svg>` holds are left as they are.
pub(crate) fn with_label_breaks(body: &str) -> String {
    let mut out = String::with_capacity(body.len() + body.len() / 16);
    let mut rest = body;
    while let Some(at) = rest.find(['<', '_', '.']) {
        let (text, tail) = rest.split_at(at);
        out.push_str(text);
        if tail.starts_with("<svg") {
            let end = tail.find("</svg>").map_or(tail.len(), |i| i + "</svg>".len());
            out.push_str(&tail[..end]);
            rest = &tail[end..];
        } else if tail.starts_with('<') {
            let end = tail.find('>').map_or(tail.len(), |i| i + 1);
            out.push_str(&tail[..end]);
            rest = &tail[end..];
        } else {
            // `_` or `.`: a break after it when a word follows (not inside a number: 1.5).
            let joined = out.chars().last().is_some_and(char::is_alphanumeric)
                && tail[1..].chars().next().is_some_and(char::is_alphabetic);
            out.push_str(&tail[..1]);
            if joined {
                out.push_str("<wbr>");
            }
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_break_between_their_parts_and_tags_are_untouched() {
        assert_eq!(
            with_label_breaks("<td class=\"a_b\">sw_thermal_slowdown (probe.schedule). 1.5 _x</td>"),
            "<td class=\"a_b\">sw_<wbr>thermal_<wbr>slowdown (probe.<wbr>schedule). 1.5 _x</td>"
        );
        assert_eq!(
            with_label_breaks("<svg><title>a_b</title></svg>c_d"),
            "<svg><title>a_b</title></svg>c_<wbr>d"
        );
    }
}
