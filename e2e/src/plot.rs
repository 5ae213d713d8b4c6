//! Each system's crash-to-close as a picture: one row per system, one dot per cell with a kill,
//! coloured by class (a ring where the cell did not hold), on a shared seconds axis. A median
//! hides a second mode (the cells that waited out a claim's deadline); a strip of dots shows it.
//! Plain SVG written by hand, so the file regenerates byte for byte from the same cells and needs
//! no plotting library.

use std::fmt::Write as _;

use crate::cell::CellResult;
use crate::classes::CLASSES;

const WIDTH: f64 = 760.0;
const LEFT: f64 = 110.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 30.0;
const ROW: f64 = 34.0;
const BOTTOM: f64 = 60.0;

/// A colour per class, in [`CLASSES`] order (a palette that stays apart for the common kinds of
/// colour blindness).
const COLOURS: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#e69f00", "#56b4e9", "#cc79a7", "#999999", "#000000",
];

fn colour(class: &str) -> &'static str {
    CLASSES
        .iter()
        .position(|c| *c == class)
        .map_or(COLOURS[6], |i| COLOURS[i])
}

/// The SVG, or `None` when no cell has a crash-to-close.
pub fn svg(cells: &[CellResult]) -> Option<String> {
    let timed: Vec<(&CellResult, f64)> = cells
        .iter()
        .filter_map(|c| c.crash_to_close_s.map(|t| (c, t)))
        .collect();
    let max = timed.iter().map(|(_, t)| *t).fold(0.0_f64, f64::max);
    if timed.is_empty() {
        return None;
    }
    let mut systems: Vec<&str> = Vec::new();
    for (c, _) in &timed {
        if !systems.contains(&c.system.as_str()) {
            systems.push(&c.system);
        }
    }
    // Whole seconds, with room past the slowest cell.
    let axis_max = (max.ceil() + 1.0).max(2.0);
    let plot_w = WIDTH - LEFT - RIGHT;
    let x = |t: f64| LEFT + t / axis_max * plot_w;
    let height = TOP + ROW * systems.len() as f64 + BOTTOM;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(
        s,
        "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{LEFT}\" y=\"18\" \
         font-weight=\"bold\">Crash-to-close per cell (seconds from the kill to the workflow's \
         close)</text>"
    );
    let bottom = TOP + ROW * systems.len() as f64;
    let step = if axis_max > 60.0 {
        10.0
    } else if axis_max > 20.0 {
        5.0
    } else {
        1.0
    };
    let mut tick = 0.0;
    while tick <= axis_max {
        let tx = x(tick);
        let _ = writeln!(
            s,
            "<line x1=\"{tx:.1}\" y1=\"{TOP}\" x2=\"{tx:.1}\" y2=\"{bottom}\" stroke=\"#e5e5e5\"/>\
             <text x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{tick}</text>",
            bottom + 15.0
        );
        tick += step;
    }
    for (row, system) in systems.iter().enumerate() {
        let cy = TOP + ROW * (row as f64 + 0.5);
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{system}</text>",
            LEFT - 8.0,
            cy + 4.0
        );
        let mine = timed.iter().filter(|(c, _)| c.system == *system);
        for (i, (c, t)) in mine.enumerate() {
            // Spread the dots of one row over its height by their order, so equal times show
            // as a column of dots, not one.
            let dy = ((i % 5) as f64 - 2.0) * 4.5;
            let class = c.class.as_deref().unwrap_or("other");
            // A cell that did not hold is a ring: a fast wrong answer must not pass for a fast
            // right one.
            let paint = if c.held {
                format!("fill=\"{}\" fill-opacity=\"0.75\"", colour(class))
            } else {
                format!(
                    "fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"",
                    colour(class)
                )
            };
            let held = if c.held { "held" } else { "did not hold" };
            let _ = writeln!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" {paint}>\
                 <title>{} {} rep {}: {t:.2} s, {class}, {held}</title></circle>",
                x(*t),
                cy + dy,
                c.case,
                c.system,
                c.rep
            );
        }
    }
    let mut lx = LEFT;
    let ly = bottom + 38.0;
    for class in CLASSES {
        if !timed.iter().any(|(c, _)| c.class.as_deref() == Some(class)) {
            continue;
        }
        let _ = writeln!(
            s,
            "<circle cx=\"{lx:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{}\"/><text x=\"{:.1}\" \
             y=\"{ly:.1}\">{class}</text>",
            ly - 4.0,
            colour(class),
            lx + 8.0
        );
        lx += 30.0 + 7.5 * class.len() as f64;
    }
    if timed.iter().any(|(c, _)| !c.held) {
        let _ = writeln!(
            s,
            "<circle cx=\"{lx:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"none\" stroke=\"#333333\" \
             stroke-width=\"1.5\"/><text x=\"{:.1}\" y=\"{ly:.1}\">did not hold</text>",
            ly - 4.0,
            lx + 8.0
        );
    }
    s.push_str("</svg>\n");
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(system: &str, t: Option<f64>, class: &str) -> CellResult {
        CellResult {
            class: Some(class.into()),
            ..CellResult::for_tests(system, "crash_in_flight", t)
        }
    }

    #[test]
    fn every_timed_cell_is_one_dot_in_its_systems_row_coloured_by_class() {
        let cells = [
            cell("keyed", Some(3.5), "heartbeat"),
            cell("gated_t2", Some(10.6), "claim_deadline"),
            cell("gated_t2", Some(3.4), "heartbeat"),
            cell("gated_t2", None, "heartbeat"),
        ];
        let svg = svg(&cells).unwrap();
        assert_eq!(
            svg.matches("<circle cx").count() - 2,
            3,
            "3 dots + 2 in the legend"
        );
        assert!(svg.contains(">keyed</text>") && svg.contains(">gated_t2</text>"));
        assert!(
            svg.contains("fill=\"#d55e00\" fill-opacity"),
            "claim_deadline's colour"
        );
        assert!(
            svg.contains(">12</text>"),
            "the axis runs past the slowest cell"
        );
        assert_eq!(svg, super::svg(&cells).unwrap(), "same cells, same bytes");
    }

    #[test]
    fn no_timed_cell_draws_nothing() {
        assert_eq!(svg(&[cell("keyed", None, "heartbeat")]), None);
    }
}
