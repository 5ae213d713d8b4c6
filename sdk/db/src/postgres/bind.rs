//! A plan's JSON values bound to a prepared statement's parameters. PostgreSQL infers each
//! parameter's type from where it stands (`credit + $1` is an integer), and the client sends
//! values in that type's binary form, so each value is converted to the type the server asked
//! for — or refused, naming the parameter, the type and the cast that would take it. Nothing is
//! guessed: a fraction for an integer, or text for a number, is refused, not rounded or parsed.

use std::error::Error;

use bytes::BytesMut;
use postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use serde_json::Value;

/// SQL NULL, for a parameter of any type.
#[derive(Debug)]
struct Null;

impl ToSql for Null {
    fn to_sql(&self, _: &Type, _: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        Ok(IsNull::Yes)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// `value`, converted for a parameter of type `ty`; `Err` says why it cannot be.
pub(crate) fn value_for(value: &Value, ty: &Type) -> Result<Box<dyn ToSql + Sync>, String> {
    let int = |v: &Value| v.as_i64().ok_or("a whole number");
    let out: Box<dyn ToSql + Sync> = match (value, ty) {
        (Value::Null, _) => Box::new(Null),
        (Value::Bool(b), &Type::BOOL) => Box::new(*b),
        (Value::Number(_), &Type::INT2) => {
            let n = int(value)?;
            Box::new(i16::try_from(n).map_err(|_| "a number that fits smallint")?)
        }
        (Value::Number(_), &Type::INT4) => {
            let n = int(value)?;
            Box::new(i32::try_from(n).map_err(|_| "a number that fits integer")?)
        }
        (Value::Number(_), &Type::INT8) => Box::new(int(value)?),
        (Value::Number(n), &Type::FLOAT8) => Box::new(n.as_f64().ok_or("a number")?),
        (Value::String(s), &Type::TEXT | &Type::VARCHAR | &Type::BPCHAR | &Type::NAME) => {
            Box::new(s.clone())
        }
        // A number for a text parameter is its JSON text: `:amount::text::numeric` takes an
        // exact decimal this way.
        (Value::Number(n), &Type::TEXT | &Type::VARCHAR) => Box::new(n.to_string()),
        (v, ty) => {
            return Err(format!(
                "{} cannot be bound as {ty}; give a value of that type, or cast the parameter in the SQL (for numeric: `:name::text::numeric`)",
                kind(v)
            ));
        }
    };
    Ok(out)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_bind_to_the_type_the_server_asked_for_or_are_refused() {
        assert!(value_for(&json!(5), &Type::INT4).is_ok());
        assert!(value_for(&json!(5_000_000_000_i64), &Type::INT4).is_err());
        assert!(value_for(&json!(5.5), &Type::INT8).is_err());
        assert!(value_for(&json!("5"), &Type::INT8).is_err());
        assert!(value_for(&json!(null), &Type::NUMERIC).is_ok());
        assert!(value_for(&json!("12.30"), &Type::TEXT).is_ok());
        assert!(value_for(&json!(12.3), &Type::TEXT).is_ok());
        let err = value_for(&json!(12), &Type::NUMERIC).err().unwrap();
        assert!(err.contains("::text::numeric"), "{err}");
    }
}
