//! The page's two pictures, drawn on the server as SVG: no script draws them, nothing is fetched
//! from elsewhere, so they live under the page's content security policy as they are. Every
//! number drawn is also in a `<title>` (a tooltip, and what a screen reader reads), and every
//! text written is escaped.

use std::fmt::Write as _;

use interlock::core::Status;

use super::board::{Buckets, Percentiles};

const W: i64 = 720;
const H: i64 = 240;
const LEFT: i64 = 56;
const RIGHT: i64 = 12;
const TOP: i64 = 28;
const BOTTOM: i64 = 28;

/// Each status's colour, in [`Status::ALL`]'s order.
const COLOURS: [&str; 7] = [
    "#9e9e9e", // proposed
    "#1e88e5", // in flight
    "#43a047", // committed
    "#fb8c00", // refused
    "#6d4c41", // failed
    "#e53935", // ambiguous
    "#8e24aa", // applied twice
];

/// Text made safe to write inside SVG (and the HTML around it).
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// A time of day in UTC, to the second: `HH:MM:SS`.
pub fn clock(ms: i64) -> String {
    let s = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// A date and time in UTC, to the second: `YYYY-MM-DD HH:MM:SS`.
pub fn datetime(ms: i64) -> String {
    // Days since 1970-01-01 to a civil date (the proleptic Gregorian calendar).
    let z = ms.div_euclid(86_400_000) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {}", clock(ms))
}

fn open(out: &mut String, id: &str, label: &str) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" id="{id}" class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="{}"><title>{}</title>"#,
        esc(label),
        esc(label)
    );
    let _ = write!(
        out,
        r##"<rect x="0" y="0" width="{W}" height="{H}" fill="#fafafa"/>"##
    );
}

/// The axes, the largest value on the y axis, and the first and last bucket's times.
fn axes(out: &mut String, b: &Buckets, y_max: &str) {
    let (x0, y0, x1) = (LEFT, H - BOTTOM, W - RIGHT);
    let _ = write!(
        out,
        r##"<path d="M{x0} {TOP} V{y0} H{x1}" stroke="#555" fill="none"/><text x="{}" y="{}" font-size="11" text-anchor="end">{}</text><text x="{}" y="{y0}" font-size="11" text-anchor="end">0</text><text x="{x0}" y="{}" font-size="11">{}</text><text x="{x1}" y="{}" font-size="11" text-anchor="end">{} UTC</text>"##,
        x0 - 4,
        TOP + 4,
        esc(y_max),
        x0 - 4,
        H - 8,
        clock(b.start_ms),
        H - 8,
        clock(b.start_of(b.n.saturating_sub(1)) + b.width_ms),
    );
}

/// The x position of bucket `i`'s left edge, and a bucket's width in the picture.
fn slot(b: &Buckets, i: usize) -> (f64, f64) {
    let w = (W - LEFT - RIGHT) as f64 / b.n.max(1) as f64;
    (LEFT as f64 + w * i as f64, w)
}

fn empty(out: &mut String, what: &str) {
    let _ = write!(
        out,
        r##"<text x="{}" y="{}" font-size="14" text-anchor="middle" fill="#777">{}</text>"##,
        W / 2,
        H / 2,
        esc(what)
    );
}

/// Effects per outcome over time: one stacked bar per bucket, a legend above.
pub fn outcomes(b: &Buckets, counts: &[[u64; 7]]) -> String {
    let mut out = String::new();
    open(
        &mut out,
        "outcomes",
        "Effects per outcome, by the time of their last record",
    );
    let max = counts
        .iter()
        .map(|c| c.iter().sum::<u64>())
        .max()
        .unwrap_or(0);
    axes(&mut out, b, &max.to_string());
    for (s, (status, colour)) in Status::ALL.iter().zip(COLOURS).enumerate() {
        let x = LEFT + 8 + 92 * i64::try_from(s).unwrap_or(0);
        let _ = write!(
            out,
            r#"<rect x="{x}" y="8" width="10" height="10" fill="{colour}"/><text x="{}" y="17" font-size="10">{}</text>"#,
            x + 13,
            status.label()
        );
    }
    if max == 0 {
        empty(&mut out, "no effect ended in this span");
    }
    let scale = (H - TOP - BOTTOM) as f64 / max.max(1) as f64;
    for (i, c) in counts.iter().enumerate().take(b.n) {
        let (x, w) = slot(b, i);
        let mut y = (H - BOTTOM) as f64;
        for ((n, status), colour) in c.iter().zip(Status::ALL).zip(COLOURS) {
            if *n == 0 {
                continue;
            }
            let h = *n as f64 * scale;
            y -= h;
            let _ = write!(
                out,
                r#"<rect class="bar" x="{:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" fill="{colour}"><title>{}–{}: {} {n}</title></rect>"#,
                x + w * 0.1,
                w * 0.8,
                clock(b.start_of(i)),
                clock(b.start_of(i) + b.width_ms),
                status.label(),
            );
        }
    }
    out.push_str("</svg>");
    out
}

/// A line of the latency chart: its name, colour, and the percentile it draws.
type Line = (&'static str, &'static str, fn(&Percentiles) -> i64);

/// Send latency's median, 90th and 99th percentiles per bucket: a line each, a point per bucket
/// that had sends.
pub fn latency(b: &Buckets, per: &[Option<Percentiles>]) -> String {
    let mut out = String::new();
    open(
        &mut out,
        "latency",
        "Send latency percentiles (ms), by the time of the dispatch",
    );
    let max = per.iter().flatten().map(|p| p.p99).max().unwrap_or(0);
    axes(&mut out, b, &format!("{max} ms"));
    let lines: [Line; 3] = [
        ("p50", "#1e88e5", |p| p.p50),
        ("p90", "#fb8c00", |p| p.p90),
        ("p99", "#e53935", |p| p.p99),
    ];
    for (k, (name, colour, _)) in lines.iter().enumerate() {
        let x = LEFT + 8 + 60 * i64::try_from(k).unwrap_or(0);
        let _ = write!(
            out,
            r#"<rect x="{x}" y="8" width="10" height="10" fill="{colour}"/><text x="{}" y="17" font-size="10">{name}</text>"#,
            x + 13
        );
    }
    if max == 0 && per.iter().all(Option::is_none) {
        empty(&mut out, "no send was answered in this span");
    }
    let scale = (H - TOP - BOTTOM) as f64 / max.max(1) as f64;
    for (name, colour, of) in lines {
        let points: Vec<(f64, f64, i64, usize)> = per
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let p = p.as_ref()?;
                let (x, w) = slot(b, i);
                Some((
                    x + w / 2.0,
                    (H - BOTTOM) as f64 - of(p) as f64 * scale,
                    of(p),
                    i,
                ))
            })
            .collect();
        if points.len() > 1 {
            let path: Vec<String> = points
                .iter()
                .map(|(x, y, ..)| format!("{x:.1},{y:.1}"))
                .collect();
            let _ = write!(
                out,
                r#"<polyline class="line" points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
                path.join(" ")
            );
        }
        for (x, y, v, i) in points {
            let n = per[i].map_or(0, |p| p.n);
            let _ = write!(
                out,
                r#"<circle class="point" cx="{x:.1}" cy="{y:.1}" r="3" fill="{colour}"><title>{}: {name} {v} ms of {n} sends</title></circle>"#,
                clock(b.start_of(i)),
            );
        }
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buckets() -> Buckets {
        Buckets {
            start_ms: 0,
            width_ms: 1_000,
            n: 3,
        }
    }

    #[test]
    fn every_count_is_a_bar_segment_with_its_number_and_nothing_else_is() {
        let mut c = vec![[0u64; 7]; 3];
        c[0][2] = 4; // committed
        c[0][5] = 1; // ambiguous
        c[2][6] = 2; // applied twice
        let svg = outcomes(&buckets(), &c);
        assert_eq!(svg.matches(r#"class="bar""#).count(), 3);
        assert!(svg.contains("00:00:00–00:00:01: COMMITTED 4"), "{svg}");
        assert!(svg.contains("00:00:00–00:00:01: AMBIGUOUS 1"));
        assert!(svg.contains("00:00:02–00:00:03: APPLIED_TWICE 2"));
        assert!(!svg.contains("no effect ended"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(!svg.contains("<script") && !svg.contains("href"));
        // The tallest bar (5) spans the plot's height.
        let empty = outcomes(&buckets(), &[[0; 7]; 3]);
        assert!(empty.contains("no effect ended in this span"));
        assert_eq!(empty.matches(r#"class="bar""#).count(), 0);
    }

    #[test]
    fn latency_draws_a_point_per_percentile_per_bucket_with_sends() {
        let p = |v| {
            Some(Percentiles {
                p50: v,
                p90: v * 2,
                p99: v * 3,
                n: 10,
            })
        };
        let svg = latency(&buckets(), &[p(10), None, p(20)]);
        assert_eq!(svg.matches(r#"class="point""#).count(), 6);
        assert_eq!(svg.matches(r#"class="line""#).count(), 3);
        assert!(svg.contains("00:00:02: p99 60 ms of 10 sends"), "{svg}");
        assert!(
            svg.contains(">60 ms<"),
            "the y axis's top is the largest p99"
        );
        let none = latency(&buckets(), &[None, None, None]);
        assert!(none.contains("no send was answered"));
    }

    #[test]
    fn text_is_escaped_and_times_are_utc_clock_times() {
        assert_eq!(
            esc(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(clock(0), "00:00:00");
        assert_eq!(clock(86_399_000), "23:59:59");
        assert_eq!(clock(86_400_000 + 3_723_000), "01:02:03");
        assert_eq!(clock(-1_000), "23:59:59");
        assert_eq!(datetime(0), "1970-01-01 00:00:00");
        assert_eq!(datetime(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(datetime(1_796_119_350_000), "2026-12-01 10:02:30");
        assert_eq!(datetime(-1_000), "1969-12-31 23:59:59");
    }
}
