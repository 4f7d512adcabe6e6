//! The status page at `/`, as served and as a browser renders it.

use crate::common;

use common::*;
use std::process::Command;

/// The demo with a lost GPU and XIDs: every kind of row the page can show.
fn busy_daemon() -> Daemon {
    let d = Daemon::start(&edit_device(DEMO_SCENARIO, 7, |dev| format!("{dev}    lost: true\n")));
    d.log_kernel(include_str!("../../config/demo-kernel-log.txt"));
    d.scrape_until("XIDs counted and GPU 7 down", |m| {
        m.find("gpu_xid_errors_total", &[]).len() == 4 && m.value("gpu_up", &[("gpu", "7")]) == Some(0.0)
    });
    d
}

/// Headless Chromium (CHROMIUM: another build of it; Ubuntu's chromium package is a snap)
/// with a window of `window` (older builds opened none narrower than 500 px; the layout tests
/// measure in a frame of the width), its own profile, `extra`
/// (`--dump-dom`, `--screenshot=FILE`), on `url`.
fn chromium(profile: &std::path::Path, window: (u32, u32), extra: &[&str], url: &str) -> std::process::Output {
    Command::new(std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into()))
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--window-size={},{}", window.0, window.1))
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("chromium is needed for this test: apt-get install chromium")
}

#[test]
fn the_page_shows_every_gpu_with_health_temperature_reasons_and_xids() {
    let d = busy_daemon();
    let page = d.get("/", &[]);
    assert_eq!(page.status, 200);
    assert!(page.header("content-type").is_some_and(|t| t.starts_with("text/html")));
    let html = page.page_text();
    assert_eq!(html.matches("<tr><td><b>").count(), 8, "{html}");
    assert!(html.contains("<meta http-equiv=\"refresh\" content=\"5\">"));
    assert!(!html.contains("<script"), "no JavaScript");
    // GPU 2: hot, both thermal reasons, degraded.
    // By GPU index (the rows come worst first).
    let row = |i: usize| {
        html.split("<tr><td><b>")
            .find(|r| r.starts_with(&format!("{i}</b>")))
            .unwrap_or_else(|| panic!("no row for GPU {i}"))
            .split("</tr>")
            .next()
            .unwrap()
            .to_string()
    };
    let gpu2 = row(2);
    // Activity (GPM), NVLink and the fabric; GPU 3's MIG devices.
    assert!(
        gpu2.contains("SM 91%") && gpu2.contains("tensor 70%") && gpu2.contains("NVLink 18/18 up"),
        "{gpu2}"
    );
    assert!(gpu2.contains("fabric completed"), "{gpu2}");
    assert!(row(3).contains("MIG: 3g.71gb, 2g.35gb, 1g.18gb"), "{}", row(3));
    assert!(row(5).contains("NVLink 18/18 up<br><small>2058 errors"), "{}", row(5));
    assert!(
        gpu2.contains("class=\"hot\">88 C") && gpu2.contains("slowdown at 89 C"),
        "{gpu2}"
    );
    assert!(
        gpu2.contains("hw_thermal_slowdown") && gpu2.contains("state degraded"),
        "{gpu2}"
    );
    assert!(gpu2.contains("Xid 13"), "{gpu2}");
    // GPU 5: a critical XID.
    let gpu5 = row(5);
    assert!(gpu5.contains("Xid 94") && gpu5.contains("critical"), "{gpu5}");
    // GPU 7: lost.
    let gpu7 = row(7);
    assert!(
        gpu7.contains("state unhealthy") && gpu7.contains("fallen off the bus"),
        "{gpu7}"
    );
    // GPU 0: healthy.
    assert!(row(0).contains("state ok"));
}

#[test]
fn headless_chromium_renders_the_page() {
    let d = busy_daemon();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://{}/", d.addr);
    let chromium = |extra: &[&str]| chromium(&dir.path().join("profile"), (1400, 900), extra, &url);
    let dom = chromium(&["--dump-dom"]);
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("gpuwarden on"), "{dom}");
    assert_eq!(dom.matches("<tr><td><b>").count(), 8, "the browser sees all eight GPUs");
    let shot = dir.path().join("status.png");
    chromium(&[&format!("--screenshot={}", shot.display())]);
    let png = std::fs::read(&shot).expect("a screenshot");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // Width and height from the IHDR chunk.
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((width, height), (1400, 900));
    assert!(
        png.len() > 20_000,
        "a page with content, not a blank one ({} bytes)",
        png.len()
    );
}

/// `GET /api/v1/history`: a GPU's metric over the last hour (a point every 10 s; the first at
/// start), gaps as null; clear 400s and 404s.
#[test]
fn the_history_api_answers_a_gpus_trend() {
    let d = Daemon::start(DEMO_SCENARIO);
    let m = d.scrape_until("the first poll", |m| m.value("gpu_up", &[("gpu", "0")]) == Some(1.0));
    let temperature = m
        .value("gpu_temperature_celsius", &[("gpu", "0"), ("sensor", "gpu")])
        .unwrap();
    let series = until_ok("GPU 0's history", std::time::Duration::from_secs(15), || {
        let response = d.get("/api/v1/history?gpu=0&metric=gpu_temperature_celsius", &[]);
        match response.status {
            200 => serde_json::from_str::<serde_json::Value>(&response.text()).map_err(|e| e.to_string()),
            _ => Err(response.text()),
        }
    });
    assert_eq!(series["gpu"], 0);
    assert_eq!(series["step_seconds"], 10);
    let points = series["points"].as_array().unwrap();
    assert!(!points.is_empty());
    assert_eq!(points.last().unwrap()[1].as_f64(), Some(temperature), "{series}");
    let by_uuid = d.get(
        "/api/v1/history?gpu=GPU-5f2c7a1e-0000-4d6b-9a0c-000000000000&metric=gpu_power_watts&range=1d",
        &[],
    );
    assert_eq!(by_uuid.status, 200, "{}", by_uuid.text());
    let bad = d.get("/api/v1/history?gpu=0&metric=gpu_nonsense", &[]);
    assert_eq!(bad.status, 400);
    assert!(
        bad.text().contains("gpu_temperature_celsius"),
        "names what there is: {}",
        bad.text()
    );
    assert_eq!(d.get("/api/v1/history?metric=gpu_power_watts", &[]).status, 400);
    assert_eq!(
        d.get("/api/v1/history?gpu=0&metric=gpu_power_watts&range=1y", &[])
            .status,
        400
    );
    assert_eq!(d.get("/api/v1/history?gpu=42&metric=gpu_power_watts", &[]).status, 404);
}

/// The page reads at a laptop's 1366 px (nothing wider than the window) and at a phone's 390
/// px (one card per GPU, no table header, still nothing wider than the window), as headless
/// Chromium lays it out. The page has no script of its own: the test saves it with a small
/// one that measures the layout, and shows it in a frame of the width to test (older headless
/// Chromium builds opened no window under 500 px); the frame posts what it measured to the title.
#[test]
fn the_page_fits_a_laptop_and_a_phone() {
    let d = busy_daemon();
    let dir = tempfile::tempdir().unwrap();
    let page = d
        .get("/", &[])
        .text()
        .replace("<meta http-equiv=\"refresh\" content=\"5\">", "");
    let probe = "<script>addEventListener('load',()=>{const e=document.documentElement;\
        const head=getComputedStyle(document.querySelector('table.gpus thead')).display;\
        const broken=[];document.querySelectorAll('td,.summary').forEach(el=>{const w=document.createTreeWalker(el,NodeFilter.SHOW_TEXT);let n;\
        while((n=w.nextNode())){const re=/[A-Za-z]{3,}/g;let m;while((m=re.exec(n.data))){const r=document.createRange();\
        r.setStart(n,m.index);r.setEnd(n,m.index+m[0].length);if(new Set([...r.getClientRects()].map(x=>Math.round(x.top))).size>1)broken.push(m[0]);}}});\
        parent.postMessage('layout '+e.scrollWidth+' '+innerWidth+' '+head+' '+document.querySelectorAll('svg.spark').length+' '+broken.length+' '+broken.slice(0,3).join(','),'*');});</script>";
    std::fs::write(
        dir.path().join("page.html"),
        page.replace("</body>", &format!("{probe}</body>")),
    )
    .unwrap();
    for (width, height, header) in [(1366, 900, "table-header-group"), (390, 844, "none")] {
        let frame = dir.path().join(format!("frame-{width}.html"));
        std::fs::write(
            &frame,
            format!(
                "<html><head><title>waiting</title></head><body style=\"margin:0\">\
                 <iframe src=\"page.html\" style=\"border:0;width:{width}px;height:{height}px\"></iframe>\
                 <script>addEventListener('message',e=>{{document.title=e.data}})</script></body></html>"
            ),
        )
        .unwrap();
        let window = (width.max(500), height);
        let url = format!("file://{}", frame.display());
        let out = chromium(
            &dir.path().join(format!("profile-{width}")),
            window,
            &["--virtual-time-budget=3000", "--dump-dom"],
            &url,
        );
        let dom = String::from_utf8_lossy(&out.stdout);
        let title = dom
            .split("<title>")
            .nth(1)
            .and_then(|t| t.split("</title>").next())
            .unwrap_or_default()
            .to_string();
        let fields: Vec<&str> = title.split_whitespace().collect();
        assert_eq!(fields.first(), Some(&"layout"), "{width} px: {title:?}");
        let (scroll, inner): (u32, u32) = (fields[1].parse().unwrap(), fields[2].parse().unwrap());
        assert_eq!(inner, width, "{title}");
        assert!(scroll <= inner, "{width} px: the page is {scroll} px wide, cut off");
        assert_eq!(fields[3], header, "{width} px: {title}");
        assert_eq!(fields[4], "40", "five charts for each of eight GPUs: {title}");
        // No word is split across lines (`sw_thermal_slo wdown`, `(probe.sched ule)`): a label
        // wraps between its parts (after `_` or `.`), where the page gives it room to.
        assert_eq!(fields[5], "0", "{width} px: words broken mid-word: {title}");
        // And a screenshot of it, as a person at that width sees it.
        let shot = dir.path().join(format!("page-{width}.png"));
        let out = chromium(
            &dir.path().join(format!("shot-{width}")),
            window,
            &[&format!("--screenshot={}", shot.display())],
            &url,
        );
        let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("{e}: {out:?}"));
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let shot_width = u32::from_be_bytes(png[16..20].try_into().unwrap());
        assert_eq!(shot_width, width.max(500));
        assert!(png.len() > 20_000, "a page with content ({} bytes)", png.len());
    }
}

/// Worst first: on the demo (whose network has a slow and a flapping port) with GPU 0 fallen
/// off the bus, the page opens with the summary naming GPU 0 and its next step, no banner
/// repeats it, GPU 0's row comes first with its next step on it, the ports come after the
/// GPUs, and at a phone's 390 px the first GPU card starts on the first screen (844 px).
/// Failed on 2026-11-28: two degraded NIC banners opened the page above unhealthy GPU 0,
/// whose card started three-quarters of the way down the first screen.
#[test]
fn the_worst_comes_first_and_the_first_card_is_on_a_phones_first_screen() {
    let tmp = tempfile::tempdir().unwrap();
    let mut demo =
        Daemon::spawn_command_with_env(&["run", "--demo", "--listen", "127.0.0.1:0"], &[("TMPDIR", tmp.path())]);
    let inject = Command::new(BIN)
        .args(["demo", "inject", "--gpu", "0", "--xid", "79"])
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    assert!(inject.status.success(), "{inject:?}");
    // The port findings too (the slow port at once; the flapping one within the minute).
    let page = eventually(
        "GPU 0 unhealthy on the page, and a port finding",
        std::time::Duration::from_secs(30),
        || {
            let page = demo.get("/", &[]).page_text();
            (page.contains("xid_fatal") && page.contains("nic_rate_low")).then_some(page)
        },
    );
    let at = |needle: &str| page.find(needle).unwrap_or_else(|| panic!("no {needle:?} on the page"));
    let summary = at("<div class=\"summary unhealthy\">");
    let table = at("<table class=\"gpus\">");
    assert!(summary < table, "the summary opens the page");
    assert!(!page[..summary].contains("mlx5"), "no port banner above the summary");
    let worst = &page[summary..table];
    assert!(worst.contains("worst: <b>GPU 0 xid_fatal</b>"), "{worst}");
    // The next step stands on a line of its own, not in small grey text.
    assert!(
        worst.contains("<div class=\"next\">Next step: <b>reboot_required"),
        "{worst}"
    );
    assert!(worst.contains("network port(s) with findings (below)"), "{worst}");
    assert!(
        !worst.contains("nic_rate_low"),
        "the ports are told below, not repeated: {worst}"
    );
    // The first row is GPU 0's, with its next step.
    let first_row = page[table..].split("<tr>").nth(2).unwrap();
    assert!(first_row.starts_with("<td><b>0</b>"), "{first_row}");
    assert!(
        first_row.contains("<div class=\"next\">next step: <b>reboot_required"),
        "{first_row}"
    );
    assert!(at("<h2>Network ports</h2>") > table, "the ports after the GPUs");

    // At 390 px, as headless Chromium lays it out: where the first GPU card starts.
    let dir = tempfile::tempdir().unwrap();
    let probe = "<script>addEventListener('load',()=>{const r=document.querySelector('table.gpus tbody tr');\
        const n=getComputedStyle(document.querySelector('.summary .next'));\
        const b=getComputedStyle(document.body);\
        parent.postMessage('first '+Math.round(r.getBoundingClientRect().top)+' next '+n.fontSize+' '+n.fontWeight+' '+n.color.replace(/ /g,'')+' body '+b.fontSize,'*');});</script>";
    std::fs::write(
        dir.path().join("page.html"),
        page.replace("<meta http-equiv=\"refresh\" content=\"5\">", "")
            .replace("</body>", &format!("{probe}</body>")),
    )
    .unwrap();
    let frame = dir.path().join("frame.html");
    std::fs::write(
        &frame,
        "<html><head><title>waiting</title></head><body style=\"margin:0\">\
         <iframe src=\"page.html\" style=\"border:0;width:390px;height:844px\"></iframe>\
         <script>addEventListener('message',e=>{document.title=e.data})</script></body></html>",
    )
    .unwrap();
    let out = chromium(
        &dir.path().join("profile"),
        (500, 844),
        &["--virtual-time-budget=3000", "--dump-dom"],
        &format!("file://{}", frame.display()),
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    let title = dom
        .split("<title>")
        .nth(1)
        .and_then(|t| t.split("</title>").next())
        .unwrap_or_default();
    // "first TOP next SIZE WEIGHT COLOR body SIZE"
    let words: Vec<&str> = title.split(' ').collect();
    let top: u32 = (words.first() == Some(&"first"))
        .then(|| words.get(1).and_then(|t| t.parse().ok()))
        .flatten()
        .unwrap_or_else(|| panic!("{title:?}"));
    let px = |w: Option<&&str>| w.and_then(|w| w.trim_end_matches("px").parse::<f64>().ok());
    let (next_size, body_size) = (px(words.get(3)), px(words.get(7)));
    assert!(
        next_size.is_some() && next_size >= body_size,
        "the summary's next step is smaller than the text around it: {title:?}"
    );
    assert!(
        words.get(4).and_then(|w| w.parse::<u32>().ok()) >= Some(600) && words.get(5) != Some(&"rgb(102,102,102)"),
        "the summary's next step is not bold, or grey: {title:?}"
    );
    assert!(
        top < 844 - 100,
        "the first GPU card starts at {top} px of 844: not on the first screen"
    );
    demo.signal(15);
    assert_eq!(demo.child.wait().unwrap().code(), Some(0));
}
