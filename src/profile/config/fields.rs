//! The fields of one JSON object, read typed and named in errors with a
//! prefix ([`Fields`]).

use serde_json::{Map, Value};

use super::error::ConfigError;

/// The fields of one JSON object, named in errors with a prefix.
pub(super) struct Fields<'a> {
    pub(super) object: &'a Map<String, Value>,
    pub(super) prefix: &'static str,
}

impl<'a> Fields<'a> {
    /// `name` with the prefix.
    pub(super) fn path(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The field, or `None` when absent or null.
    pub(super) fn get(&self, name: &str) -> Option<&'a Value> {
        self.object.get(name).filter(|v| !v.is_null())
    }

    /// A string, or `None` when absent or null.
    pub(super) fn string(&self, name: &str) -> Result<Option<&'a str>, ConfigError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong_type(name, "a string", v)),
        }
    }

    /// An integer in `min..=max`, or `None` when absent or null.
    pub(super) fn int(&self, name: &str, min: i64, max: i64) -> Result<Option<i64>, ConfigError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let Value::Number(n) = v else {
            return Err(self.wrong_type(name, "an integer", v));
        };
        let value = match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Some(i),
            // `4096.0`: whole, and small enough to be exact.
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(f as i64),
            _ => None,
        };
        match value {
            Some(i) if (min..=max).contains(&i) => Ok(Some(i)),
            Some(_) => Err(self.out_of_range(name, n.to_string(), min, max)),
            None if n.is_u64() => Err(self.out_of_range(name, n.to_string(), min, max)),
            None => Err(self.wrong_type(name, "an integer", v)),
        }
    }

    /// An integer in `min..=max` that must be there.
    pub(super) fn required_int(&self, name: &str, min: i64, max: i64) -> Result<i64, ConfigError> {
        self.int(name, min, max)?
            .ok_or_else(|| ConfigError::Missing(self.path(name)))
    }

    /// A required `i32` field of at least `min`.
    pub(super) fn required_i32(&self, name: &str, min: i64) -> Result<i32, ConfigError> {
        let v = self.required_int(name, min, i64::from(i32::MAX))?;
        Ok(i32::try_from(v).unwrap_or(i32::MAX))
    }

    /// The error of a field that holds `found` where `expected` belongs.
    pub(super) fn wrong_type(
        &self,
        name: &str,
        expected: &'static str,
        found: &Value,
    ) -> ConfigError {
        ConfigError::WrongType {
            field: self.path(name),
            expected,
            found: kind(found),
        }
    }

    fn out_of_range(&self, name: &str, value: String, min: i64, max: i64) -> ConfigError {
        ConfigError::OutOfRange {
            field: self.path(name),
            value,
            min,
            max,
        }
    }
}

/// How a JSON value is named in errors.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a fractional number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
