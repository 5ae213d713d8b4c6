//! Whether the role a target connects as is confined: the substrate's functions are the line a
//! plan cannot cross only if the role, and every role it can become, has no other way in. A
//! superuser, an owner of the substrate or of an observed table (who may turn its triggers off),
//! a role granted rights on the substrate's tables, one that may truncate or add triggers to an
//! observed table, set `session_replication_role` (which silences triggers) or create roles
//! (and so grant itself any of these) could reach what a plan must not. Each is found in the
//! server's catalogs, read once per session, so a grant made after a target opened is found by
//! its next session.

use super::session::Session;

/// The reasons the session's role is not confined, one per finding; empty when it is.
pub(crate) fn findings(
    session: &mut Session,
    schema: &str,
) -> Result<Vec<String>, postgres::Error> {
    let mut found: Vec<String> = session
        .query(
            "WITH mine AS (
                 SELECT r.oid, r.rolname, r.rolsuper, r.rolcreaterole FROM pg_roles r
                  WHERE pg_has_role(session_user, r.oid, 'MEMBER')
             ), sub AS (
                 SELECT n.oid, n.nspowner FROM pg_namespace n WHERE n.nspname = $1
             ), observed AS (
                 SELECT DISTINCT t.tgrelid AS rel FROM pg_trigger t
                   JOIN pg_proc p ON p.oid = t.tgfoid
                  WHERE p.proname = 'record_change' AND p.pronamespace = (SELECT oid FROM sub)
             )
             SELECT format('role %I is a superuser', m.rolname) FROM mine m WHERE m.rolsuper
             UNION ALL
             SELECT format('role %I may create roles (and so grant itself any other)', m.rolname)
               FROM mine m WHERE m.rolcreaterole AND NOT m.rolsuper
             UNION ALL
             SELECT format('role %I owns the substrate''s schema', m.rolname)
               FROM mine m JOIN sub ON sub.nspowner = m.oid
             UNION ALL
             SELECT format('role %I owns %s', m.rolname, c.oid::regclass)
               FROM mine m JOIN pg_class c ON c.relowner = m.oid
              WHERE c.relnamespace = (SELECT oid FROM sub) OR c.oid IN (SELECT rel FROM observed)
             UNION ALL
             SELECT format('role %I owns the function %s', m.rolname, p.oid::regprocedure)
               FROM mine m JOIN pg_proc p ON p.proowner = m.oid
              WHERE p.pronamespace = (SELECT oid FROM sub)
             UNION ALL
             SELECT format('role %I has rights on %s', m.rolname, c.oid::regclass)
               FROM mine m CROSS JOIN pg_class c
              WHERE c.relnamespace = (SELECT oid FROM sub) AND c.relkind IN ('r', 'p')
                AND c.relowner <> m.oid AND NOT m.rolsuper
                AND has_table_privilege(m.oid, c.oid,
                        'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
             UNION ALL
             SELECT format('role %I may truncate or add triggers to %s', m.rolname, c.oid::regclass)
               FROM mine m JOIN pg_class c ON c.oid IN (SELECT rel FROM observed)
              WHERE c.relowner <> m.oid AND NOT m.rolsuper
                AND has_table_privilege(m.oid, c.oid, 'TRUNCATE, TRIGGER')",
            &[&schema],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let version: i32 = session
        .query_one("SELECT current_setting('server_version_num')::int", &[])?
        .get(0);
    // Before PostgreSQL 15 only a superuser may set it.
    if version >= 150_000 {
        found.extend(
            session
                .query(
                    "SELECT format('role %I may set session_replication_role (which turns triggers off)', r.rolname)
                       FROM pg_roles r
                      WHERE pg_has_role(session_user, r.oid, 'MEMBER') AND NOT r.rolsuper
                        AND has_parameter_privilege(r.oid, 'session_replication_role', 'SET')",
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
        "SELECT count(*) = 4,
                coalesce(bool_and(has_function_privilege(p.oid, 'EXECUTE')), false)
                  AND coalesce(bool_and(has_schema_privilege(p.pronamespace, 'USAGE')), false)
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = $1 AND p.proname IN ('open', 'measured', 'seal', 'unmediated')",
        &[&schema],
    )?;
    Ok((row.get(0), row.get(1)))
}
