//! What a plan's SQL may look like, judged before anything reaches a database: one statement
//! (a second one after a `;` could end the stage's transaction), of the kind its place allows
//! (rows changed by `INSERT`, `UPDATE` or `DELETE`; facts read by `SELECT`), with parameters by
//! name only (a positional one binds by order, and a reordered list then binds quietly wrong).
//! The scan knows string literals, quoted names and comments, so a `;` or `?` inside them is
//! text, not syntax. The database's own parser has the last word: each statement is also
//! prepared alone, and a tail after it is refused there too.

use std::collections::BTreeSet;

/// Why a statement's text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// Nothing but blanks and comments.
    #[error("the statement is empty")]
    Empty,
    /// More than one statement.
    #[error(
        "more than one statement: text follows the `;` at byte {at}; give each statement its own entry in the plan"
    )]
    Several {
        /// Byte offset of the `;`.
        at: usize,
    },
    /// A statement of a kind this place does not take.
    #[error("a {found} statement cannot be {place}; only {allowed} can")]
    Kind {
        /// The statement's first word, upper-cased.
        found: String,
        /// Where it was given.
        place: &'static str,
        /// What that place takes.
        allowed: &'static str,
    },
    /// A positional parameter.
    #[error(
        "positional parameter `{found}` at byte {at}: name every parameter (`:amount`) so each value binds by name"
    )]
    Positional {
        /// The placeholder as written.
        found: String,
        /// Byte offset.
        at: usize,
    },
    /// A name of the substrate's own (`interlock…`): a plan works on the team's tables only.
    #[error(
        "`{found}` at byte {at} names the substrate's own tables or settings; a plan may only work on the team's tables"
    )]
    Reserved {
        /// The name as written.
        found: String,
        /// Byte offset.
        at: usize,
    },
    /// A comment opened inside another (PostgreSQL nests them, SQLite does not).
    #[error(
        "a comment opens inside another at byte {at}; nested comments read differently in different databases"
    )]
    NestedComment {
        /// Byte offset of the inner `/*`.
        at: usize,
    },
    /// `OR REPLACE`: the rows it removes are not seen by triggers in every configuration.
    #[error(
        "`OR REPLACE` at byte {at}: the rows a replace removes can escape measurement; update or delete them in statements of their own"
    )]
    Replace {
        /// Byte offset of `OR`.
        at: usize,
    },
    /// A form one of the two databases reads differently from the other, or from this scan:
    /// escape strings (`E'…'`), Unicode escapes (`U&"…"`), brackets.
    #[error("{what} at byte {at}: {why}")]
    Dialect {
        /// The form.
        what: &'static str,
        /// Byte offset.
        at: usize,
        /// What to write instead.
        why: &'static str,
    },
    /// A string, quoted name or comment never closed.
    #[error("unterminated {what} starting at byte {at}")]
    Unterminated {
        /// What was left open.
        what: &'static str,
        /// Byte offset.
        at: usize,
    },
}

/// Where a statement is used, and which kinds it takes there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A change the plan makes.
    Change,
    /// A fact the plan reads and expects unchanged.
    Premise,
}

impl Place {
    fn allows(self, word: &str) -> bool {
        match self {
            Place::Change => matches!(word, "INSERT" | "UPDATE" | "DELETE"),
            Place::Premise => word == "SELECT",
        }
    }

    fn describe(self) -> (&'static str, &'static str) {
        match self {
            Place::Change => ("a plan's change", "INSERT, UPDATE and DELETE"),
            Place::Premise => ("a premise", "SELECT"),
        }
    }
}

/// The named parameters of one statement of the given place (`:name`), in order of first use.
pub fn check(sql: &str, place: Place) -> Result<Vec<String>, ShapeError> {
    scan(sql, place).map(|(names, _)| names)
}

/// The statement with each `:name` written `$n` (PostgreSQL's placeholders; one number per
/// name, numbered in order of first use), and the names in that order.
pub fn numbered(sql: &str, place: Place) -> Result<(String, Vec<String>), ShapeError> {
    let (names, spans) = scan(sql, place)?;
    let mut out = String::with_capacity(sql.len());
    let mut at = 0;
    for (start, end) in spans {
        out.push_str(&sql[at..start]);
        let name = &sql[start + 1..end];
        let n = names.iter().position(|x| x == name).unwrap_or(0) + 1;
        out.push_str(&format!("${n}"));
        at = end;
    }
    out.push_str(&sql[at..]);
    Ok((out, names))
}

/// Where each `:name` stands, from its colon to the end of the name.
type Spans = Vec<(usize, usize)>;

/// The names in order of first use, and where each `:name` stands.
fn scan(sql: &str, place: Place) -> Result<(Vec<String>, Spans), ShapeError> {
    let b = sql.as_bytes();
    let mut names: Vec<String> = Vec::new();
    let mut spans = Vec::new();
    let mut seen = BTreeSet::new();
    let mut first_word: Option<String> = None;
    let mut previous_word: Option<String> = None;
    let mut previous_at = 0;
    let mut end: Option<usize> = None;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if let Some(at) = end {
            // After the `;` only blanks and comments may follow.
            match c {
                c if c.is_ascii_whitespace() => i += 1,
                b'-' if b.get(i + 1) == Some(&b'-') => i = line_end(b, i),
                b'/' if b.get(i + 1) == Some(&b'*') => i = comment_end(b, i)?,
                _ => return Err(ShapeError::Several { at }),
            }
            continue;
        }
        match c {
            b'\'' => i = quoted_end(b, i)?,
            b'"' | b'`' => {
                let end = quoted_end(b, i)?;
                reserved(&sql[i..end], i)?;
                i = end;
            }
            b'[' => {
                return Err(ShapeError::Dialect {
                    what: "a bracket",
                    at: i,
                    why: "SQLite reads it as a quoted name, PostgreSQL as a subscript; quote names with \"…\"",
                });
            }
            b'-' if b.get(i + 1) == Some(&b'-') => i = line_end(b, i),
            b'/' if b.get(i + 1) == Some(&b'*') => i = comment_end(b, i)?,
            b';' => {
                end = Some(i);
                i += 1;
            }
            b'?' => {
                let j = digits_end(b, i + 1);
                return Err(ShapeError::Positional {
                    found: sql[i..j].to_owned(),
                    at: i,
                });
            }
            b'$' | b'@' => {
                let j = word_end(b, i + 1);
                return Err(ShapeError::Positional {
                    found: sql[i..j.max(i + 1)].to_owned(),
                    at: i,
                });
            }
            b':' if b.get(i + 1) == Some(&b':') => i += 2, // a PostgreSQL cast
            b':' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                let j = digits_end(b, i + 1);
                return Err(ShapeError::Positional {
                    found: sql[i..j].to_owned(),
                    at: i,
                });
            }
            b':' if b.get(i + 1).is_some_and(|&n| is_word_start(n)) => {
                let j = word_end(b, i + 1);
                let name = sql[i + 1..j].to_owned();
                spans.push((i, j));
                if seen.insert(name.clone()) {
                    names.push(name);
                }
                i = j;
            }
            c if is_word_start(c) => {
                let j = word_end(b, i);
                let word = sql[i..j].to_ascii_uppercase();
                match (word.as_str(), b.get(j)) {
                    ("E", Some(b'\'')) => {
                        return Err(ShapeError::Dialect {
                            what: "an escape string",
                            at: i,
                            why: "its backslashes are read differently; write the text as a plain '…' string",
                        });
                    }
                    ("U", Some(b'&')) => {
                        return Err(ShapeError::Dialect {
                            what: "a Unicode escape",
                            at: i,
                            why: "write the name or text plainly",
                        });
                    }
                    _ => {}
                }
                reserved(&word, i)?;
                if word == "REPLACE" && previous_word.as_deref() == Some("OR") {
                    return Err(ShapeError::Replace { at: previous_at });
                }
                if first_word.is_none() {
                    first_word = Some(word.clone());
                }
                previous_at = i;
                previous_word = Some(word);
                i = j;
            }
            _ => i += 1,
        }
    }
    let word = first_word.ok_or(ShapeError::Empty)?;
    if !place.allows(&word) {
        let (place_name, allowed) = place.describe();
        return Err(ShapeError::Kind {
            found: word,
            place: place_name,
            allowed,
        });
    }
    Ok((names, spans))
}

fn is_word_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn word_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
        i += 1;
    }
    i
}

fn digits_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    i
}

fn line_end(b: &[u8], i: usize) -> usize {
    b[i..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(b.len(), |p| i + p + 1)
}

fn comment_end(b: &[u8], i: usize) -> Result<usize, ShapeError> {
    let end = b[i + 2..]
        .windows(2)
        .position(|w| w == b"*/")
        .map(|p| i + 2 + p + 2)
        .ok_or(ShapeError::Unterminated {
            what: "comment",
            at: i,
        })?;
    match b[i + 2..end - 2].windows(2).position(|w| w == b"/*") {
        Some(p) => Err(ShapeError::NestedComment { at: i + 2 + p }),
        None => Ok(end),
    }
}

/// Refuse a name of the substrate's (`interlock…`, in any case, quoted or not).
fn reserved(name: &str, at: usize) -> Result<(), ShapeError> {
    if name.to_ascii_lowercase().contains("interlock") {
        return Err(ShapeError::Reserved {
            found: name.to_owned(),
            at,
        });
    }
    Ok(())
}

/// The end of a quoted run opened at `i`, where the quote doubled stands for itself.
fn quoted_end(b: &[u8], i: usize) -> Result<usize, ShapeError> {
    let q = b[i];
    let what = if q == b'\'' { "string" } else { "quoted name" };
    let mut j = i + 1;
    while j < b.len() {
        if b[j] == q {
            if b.get(j + 1) == Some(&q) {
                j += 2;
                continue;
            }
            return Ok(j + 1);
        }
        j += 1;
    }
    Err(ShapeError::Unterminated { what, at: i })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_with_named_parameters_passes_and_lists_them_once() {
        let names = check(
            "UPDATE orders SET status = 'cancelled', note = :note WHERE id = :id AND note <> :note",
            Place::Change,
        )
        .unwrap();
        assert_eq!(names, vec!["note", "id"]);
    }

    #[test]
    fn a_smuggled_commit_or_second_statement_is_refused() {
        for sql in [
            "UPDATE orders SET status = 'x' WHERE id = :id; COMMIT",
            "UPDATE orders SET status = 'x' WHERE id = :id;COMMIT;",
            "DELETE FROM t WHERE id = :id; /* c */ DROP TABLE t",
        ] {
            assert!(
                matches!(check(sql, Place::Change), Err(ShapeError::Several { .. })),
                "{sql}"
            );
        }
        // A trailing `;`, blanks and comments are one statement.
        check("DELETE FROM t WHERE id = :id; -- done\n  ", Place::Change).unwrap();
    }

    #[test]
    fn ddl_transaction_control_and_reads_are_not_changes() {
        for (sql, word) in [
            ("DROP TABLE orders", "DROP"),
            ("CREATE TABLE x (a INT)", "CREATE"),
            ("ALTER TABLE orders ADD COLUMN y INT", "ALTER"),
            ("COMMIT", "COMMIT"),
            ("BEGIN", "BEGIN"),
            ("PRAGMA foreign_keys = OFF", "PRAGMA"),
            ("ATTACH DATABASE 'x' AS y", "ATTACH"),
            ("SELECT 1", "SELECT"),
            ("/* UPDATE */ VACUUM", "VACUUM"),
        ] {
            match check(sql, Place::Change) {
                Err(ShapeError::Kind { found, .. }) => assert_eq!(found, word, "{sql}"),
                other => panic!("{sql}: {other:?}"),
            }
        }
        assert!(matches!(
            check("UPDATE t SET a = 1", Place::Premise),
            Err(ShapeError::Kind { .. })
        ));
    }

    #[test]
    fn positional_parameters_of_every_dialect_are_refused() {
        for (sql, found) in [
            ("UPDATE t SET a = ? WHERE id = :id", "?"),
            ("UPDATE t SET a = ?2", "?2"),
            ("UPDATE t SET a = $1", "$1"),
            ("UPDATE t SET a = @a", "@a"),
            ("UPDATE t SET a = $a", "$a"),
        ] {
            match check(sql, Place::Change) {
                Err(ShapeError::Positional { found: f, .. }) => assert_eq!(f, found, "{sql}"),
                other => panic!("{sql}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_substrates_tables_nested_comments_and_or_replace_are_refused() {
        for sql in [
            "DELETE FROM interlock_changes WHERE 1 = 1",
            "DELETE FROM \"Interlock_Markers\"",
            "UPDATE t SET a = 1 WHERE id IN (SELECT key FROM interlock_db.markers)",
            "UPDATE t SET a = current_setting('x') FROM `interlock_stage`",
        ] {
            assert!(
                matches!(check(sql, Place::Change), Err(ShapeError::Reserved { .. })),
                "{sql}"
            );
        }
        assert!(matches!(
            check("/* /* */ UPDATE x */ COMMIT", Place::Change),
            Err(ShapeError::NestedComment { .. })
        ));
        assert!(matches!(
            check("INSERT OR REPLACE INTO t (a) VALUES (:a)", Place::Change),
            Err(ShapeError::Replace { .. })
        ));
        assert!(matches!(
            check("UPDATE t SET a = :1", Place::Change),
            Err(ShapeError::Positional { .. })
        ));
        for sql in [
            "UPDATE t SET a = E'\\'' WHERE id = :id",
            "DELETE FROM U&\"\\0069nterlock_db\".markers",
            "UPDATE t SET a = b[1] WHERE id = :id",
        ] {
            assert!(
                matches!(check(sql, Place::Change), Err(ShapeError::Dialect { .. })),
                "{sql}"
            );
        }
        // A string may say anything.
        check(
            "UPDATE t SET note = 'interlock /* or replace' WHERE id = :id",
            Place::Change,
        )
        .unwrap();
    }

    #[test]
    fn postgres_placeholders_number_each_name_once_and_leave_casts_and_strings_alone() {
        let (sql, names) = numbered(
            "UPDATE t SET a = :x::int, note = ':y' WHERE id = :id AND b = :x",
            Place::Change,
        )
        .unwrap();
        assert_eq!(
            sql,
            "UPDATE t SET a = $1::int, note = ':y' WHERE id = $2 AND b = $1"
        );
        assert_eq!(names, vec!["x", "id"]);
    }

    #[test]
    fn punctuation_inside_strings_names_and_comments_is_text() {
        let names = check(
            "UPDATE \"odd;name\" SET note = 'a; b? c :d $1', \"x?\" = 1 -- ; ?\nWHERE id = :id AND v = x::int",
            Place::Change,
        )
        .unwrap();
        assert_eq!(names, vec!["id"]);
        assert!(matches!(
            check("UPDATE t SET a = 'open", Place::Change),
            Err(ShapeError::Unterminated { what: "string", .. })
        ));
        assert!(matches!(
            check("  -- nothing\n", Place::Change),
            Err(ShapeError::Empty)
        ));
    }
}
