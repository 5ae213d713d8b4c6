//! The "settled by" column: for an effect a person settled, who it was, what they found, and
//! whether their word could stand — signed by their own key in the directory as a member of the
//! settling group, naming the ambiguity the journal holds, written once no send could still land
//! and on a look taken after that. All of it is re-derived from the `SETTLED` record, which the
//! chain protects, against the directory, which it does not trust.

use crate::approval::Approvers;
use crate::core::Event;
use crate::core::settle::{self as rules, Finding, Settled};
use crate::core::state::landed_evidence;
use crate::journal::Record;
use crate::settle::Settlers;

use super::{Column, col};

const NAME: &str = "settled by";

pub(super) fn settled_by(
    history: &[Record],
    approvers: Option<&Approvers>,
    group: &str,
    accept_unchecked: bool,
) -> Column {
    let Some((i, s)) = history
        .iter()
        .enumerate()
        .find_map(|(i, r)| match &r.event {
            Event::Settled(s) => Some((i, s)),
            _ => None,
        })
    else {
        return col(NAME, None, "not settled by a person");
    };
    let said = said(s, history[i].at_ms);
    let before = &history[..i];
    let landed = landed_evidence(before.iter().map(|r| &r.event));
    let allowed = rules::window(before.iter().map(|r| (r.at_ms, &r.event))).and_then(|w| {
        rules::check(
            &history[i].key,
            &w,
            &before[w.index].hash,
            &s.statement,
            &landed,
            (history[i].at_ms, rules::MAX_SKEW_MS),
        )
    });
    if let Err(why) = allowed {
        return col(
            NAME,
            Some(false),
            format!("{said}, but it could not stand: {why}"),
        );
    }
    // An unchecked signature proves nothing: without the directory a settlement fails, as a
    // signed receipt checked without its key does, unless the caller accepts it unchecked.
    let Some(directory) = approvers else {
        return col(
            NAME,
            (!accept_unchecked).then_some(false),
            format!(
                "{said}; the signature was NOT checked: give the approver directory to check it"
            ),
        );
    };
    match (Settlers { directory, group }).check_record(s) {
        Ok(()) => col(
            NAME,
            Some(true),
            format!("{said}; signed by their key in the directory, a member of {group}"),
        ),
        Err(e) => col(NAME, Some(false), format!("{said}, but {e}")),
    }
}

fn said(s: &Settled, at_ms: i64) -> String {
    let st = &s.statement;
    let found = match &st.finding {
        Finding::Applied { reference } => format!("applied, as {reference}"),
        Finding::NotApplied => "not applied".to_owned(),
    };
    let note = if st.note.is_empty() {
        String::new()
    } else {
        format!(" ({})", st.note)
    };
    format!(
        "{} found it {found}{note}, looking at {}; recorded at {at_ms}",
        st.person, st.looked_ms
    )
}
