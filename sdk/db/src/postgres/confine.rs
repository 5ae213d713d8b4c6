//! Whether the role a target connects as is confined: the substrate's functions are the line a
//! plan cannot cross only if the role, and every role it can become, has no other way in — and
//! no way to write what the server does not count. A superuser; a role that may create roles
//! (and so grant itself any other), stream replication, or reach the server's files; an owner of
//! the substrate, of an observed table or of its schema (who may turn triggers off or drop the
//! table); a role with any right on the substrate's tables or sequence, or `CREATE` in its
//! schema; one that may truncate or add triggers to an observed table, write a foreign table, or
//! set `session_replication_role` or `track_counts`: each could reach what a plan must not, and
//! each is found in the server's catalogs, read once per session, so a grant made after a target
//! opened is found by its next session. The catalogs are named with their schema, so no
//! `search_path` can put a look-alike in their place.

use super::session::Session;

/// The reasons the session's role is not confined, one per finding; empty when it is.
pub(crate) fn findings(
    session: &mut Session,
    schema: &str,
) -> Result<Vec<String>, postgres::Error> {
    let mut found: Vec<String> = session
        .query(
            "SELECT 'the server does not count the rows a transaction changes (track_counts is off); turn it on'
              WHERE pg_catalog.current_setting('track_counts') <> 'on'
             UNION ALL
             (WITH mine AS (
                 SELECT r.oid, r.rolname, r.rolsuper, r.rolcreaterole, r.rolreplication
                   FROM pg_catalog.pg_roles r
                  WHERE pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER')
             ), sub AS (
                 SELECT n.oid, n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = $1
             ), observed AS (
                 SELECT DISTINCT t.tgrelid AS rel FROM pg_catalog.pg_trigger t
                   JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
                  WHERE p.proname = 'record_change' AND p.pronamespace = (SELECT oid FROM sub)
             )
             SELECT pg_catalog.format('role %I is a superuser', m.rolname) FROM mine m WHERE m.rolsuper
             UNION ALL
             SELECT pg_catalog.format('role %I may create roles (and so grant itself any other)', m.rolname)
               FROM mine m WHERE m.rolcreaterole AND NOT m.rolsuper
             UNION ALL
             SELECT pg_catalog.format('role %I may stream replication (and so read every row)', m.rolname)
               FROM mine m WHERE m.rolreplication AND NOT m.rolsuper
             UNION ALL
             SELECT pg_catalog.format('role %I reaches the server''s files or programs', m.rolname)
               FROM mine m
              WHERE m.rolname IN ('pg_execute_server_program', 'pg_read_server_files', 'pg_write_server_files')
             UNION ALL
             SELECT pg_catalog.format('role %I owns the substrate''s schema', m.rolname)
               FROM mine m JOIN sub ON sub.nspowner = m.oid
             UNION ALL
             SELECT pg_catalog.format('role %I may create objects in the substrate''s schema', m.rolname)
               FROM mine m CROSS JOIN sub
              WHERE sub.nspowner <> m.oid AND NOT m.rolsuper
                AND pg_catalog.has_schema_privilege(m.oid, sub.oid, 'CREATE')
             UNION ALL
             SELECT pg_catalog.format('role %I owns %s', m.rolname, c.oid::pg_catalog.regclass)
               FROM mine m JOIN pg_catalog.pg_class c ON c.relowner = m.oid
              WHERE c.relnamespace = (SELECT oid FROM sub) OR c.oid IN (SELECT rel FROM observed)
             UNION ALL
             SELECT pg_catalog.format('role %I owns the schema of %s', m.rolname, c.oid::pg_catalog.regclass)
               FROM mine m JOIN pg_catalog.pg_namespace n ON n.nspowner = m.oid
               JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid
              WHERE c.oid IN (SELECT rel FROM observed) AND c.relowner <> m.oid
             UNION ALL
             SELECT pg_catalog.format('role %I owns the function %s', m.rolname, p.oid::pg_catalog.regprocedure)
               FROM mine m JOIN pg_catalog.pg_proc p ON p.proowner = m.oid
              WHERE p.pronamespace = (SELECT oid FROM sub)
             UNION ALL
             SELECT pg_catalog.format('role %I has rights on %s', m.rolname, c.oid::pg_catalog.regclass)
               FROM mine m CROSS JOIN pg_catalog.pg_class c
              WHERE c.relnamespace = (SELECT oid FROM sub) AND c.relowner <> m.oid AND NOT m.rolsuper
                AND ((c.relkind IN ('r', 'p')
                      AND (pg_catalog.has_table_privilege(m.oid, c.oid,
                               'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
                           OR pg_catalog.has_any_column_privilege(m.oid, c.oid,
                               'SELECT, INSERT, UPDATE, REFERENCES')))
                  OR (c.relkind = 'S'
                      AND pg_catalog.has_sequence_privilege(m.oid, c.oid, 'USAGE, SELECT, UPDATE')))
             UNION ALL
             SELECT pg_catalog.format('role %I may truncate or add triggers to %s', m.rolname, c.oid::pg_catalog.regclass)
               FROM mine m JOIN pg_catalog.pg_class c ON c.oid IN (SELECT rel FROM observed)
              WHERE c.relowner <> m.oid AND NOT m.rolsuper
                AND pg_catalog.has_table_privilege(m.oid, c.oid, 'TRUNCATE, TRIGGER')
             UNION ALL
             SELECT pg_catalog.format('role %I may write the foreign table %s (the server counts no row of it)', m.rolname, c.oid::pg_catalog.regclass)
               FROM mine m JOIN pg_catalog.pg_class c ON c.relkind = 'f'
              WHERE pg_catalog.has_table_privilege(m.oid, c.oid, 'INSERT, UPDATE, DELETE'))",
            &[&schema],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let version: i32 = session
        .query_one(
            "SELECT pg_catalog.current_setting('server_version_num')::pg_catalog.int4",
            &[],
        )?
        .get(0);
    // Before PostgreSQL 15 only a superuser may set either.
    if version >= 150_000 {
        found.extend(
            session
                .query(
                    "SELECT pg_catalog.format('role %I may set %s (%s)', r.rolname, p.name, p.why)
                       FROM pg_catalog.pg_roles r
                      CROSS JOIN (VALUES
                          ('session_replication_role', 'which turns triggers off'),
                          ('track_counts', 'which stops the server counting rows changed')
                      ) AS p (name, why)
                      WHERE pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER') AND NOT r.rolsuper
                        AND pg_catalog.has_parameter_privilege(r.oid, p.name, 'SET')",
                    &[],
                )?
                .iter()
                .map(|r| r.get::<_, String>(0)),
        );
    }
    Ok(found)
}

/// Whether the session's role may use the substrate in `schema` ([`super::install::allow`]),
/// and whether it is installed there at all: `(installed, allowed)`.
pub(crate) fn reachable(
    session: &mut Session,
    schema: &str,
) -> Result<(bool, bool), postgres::Error> {
    let row = session.query_one(
        "SELECT pg_catalog.count(*) = 9,
                coalesce(pg_catalog.bool_and(pg_catalog.has_function_privilege(p.oid, 'EXECUTE')), false)
                  AND coalesce(pg_catalog.bool_and(pg_catalog.has_schema_privilege(p.pronamespace, 'USAGE')), false)
           FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = $1
            AND p.proname || '/' || p.pronargs IN ('open/3', 'measured/1', 'spent/4', 'seal/6',
                                                   'unmediated/1', 'pending/3', 'delivered/4',
                                                   'claim/4', 'marked/1')",
        &[&schema],
    )?;
    Ok((row.get(0), row.get(1)))
}
