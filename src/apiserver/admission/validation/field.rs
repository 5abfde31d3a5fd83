//! Field paths and field errors worded as apimachinery's `field` package words them, so a
//! 422 from k3rs reads (and parses, `details.causes[]`) exactly as kube-apiserver's does.
//!
//! A cause's `message` is kube's `ErrorBody()`: the error type's text, the bad value in Go's
//! formatting (`%q` for strings, `%v` for numbers and booleans), then `: detail`.

use serde_json::Value;

use crate::apiserver::http::status::StatusCause;

/// The list a validator appends to; turned into `details.causes` as is.
pub type ErrorList = Vec<StatusCause>;

/// A field path as kube prints it: `spec.containers[0].ports[1].name`, `data[key]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Path(String);

impl Path {
    pub fn new(root: &str) -> Path {
        Path(root.to_string())
    }

    /// The path of the object's root (`metadata`, `spec` are its children).
    pub fn root() -> Path {
        Path(String::new())
    }

    pub fn child(&self, name: &str) -> Path {
        if self.0.is_empty() {
            Path(name.to_string())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }

    pub fn index(&self, i: usize) -> Path {
        Path(format!("{}[{i}]", self.0))
    }

    /// A map key: `metadata.labels[app]`. Kube prints the key unquoted.
    pub fn key(&self, key: &str) -> Path {
        Path(format!("{}[{key}]", self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A bad value as Go's `%v`/`%q` prints it in kube's `ErrorBody`.
#[derive(Clone, Debug)]
pub enum Bad {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// A value printed as is (kube prints structs with `%#v`; we print JSON).
    Raw(String),
    Null,
}

impl Bad {
    fn render(&self) -> String {
        match self {
            Bad::Str(s) => go_quote(s),
            Bad::Int(i) => i.to_string(),
            Bad::Float(f) => format!("{f}"),
            Bad::Bool(b) => b.to_string(),
            Bad::Raw(s) => s.clone(),
            Bad::Null => "\"null\"".to_string(),
        }
    }
}

impl From<&str> for Bad {
    fn from(s: &str) -> Bad {
        Bad::Str(s.to_string())
    }
}
impl From<String> for Bad {
    fn from(s: String) -> Bad {
        Bad::Str(s)
    }
}
impl From<&String> for Bad {
    fn from(s: &String) -> Bad {
        Bad::Str(s.clone())
    }
}
impl From<i64> for Bad {
    fn from(i: i64) -> Bad {
        Bad::Int(i)
    }
}
impl From<i32> for Bad {
    fn from(i: i32) -> Bad {
        Bad::Int(i64::from(i))
    }
}
impl From<u16> for Bad {
    fn from(i: u16) -> Bad {
        Bad::Int(i64::from(i))
    }
}
impl From<usize> for Bad {
    fn from(i: usize) -> Bad {
        Bad::Int(i64::try_from(i).unwrap_or(i64::MAX))
    }
}
impl From<bool> for Bad {
    fn from(b: bool) -> Bad {
        Bad::Bool(b)
    }
}
impl From<&Value> for Bad {
    fn from(v: &Value) -> Bad {
        match v {
            Value::String(s) => Bad::Str(s.clone()),
            Value::Bool(b) => Bad::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Bad::Int(i),
                None => Bad::Float(n.as_f64().unwrap_or(0.0)),
            },
            Value::Null => Bad::Null,
            other => Bad::Raw(other.to_string()),
        }
    }
}

fn cause(reason: &str, path: &Path, message: String) -> StatusCause {
    StatusCause {
        reason: Some(reason.to_string()),
        message: Some(message),
        field: Some(path.0.clone()),
    }
}

fn with_detail(body: String, detail: &str) -> String {
    if detail.is_empty() {
        body
    } else {
        format!("{body}: {detail}")
    }
}

/// `Required value[: detail]`.
pub fn required(path: &Path, detail: &str) -> StatusCause {
    cause(
        "FieldValueRequired",
        path,
        with_detail("Required value".into(), detail),
    )
}

/// `Invalid value: <value>[: detail]`.
pub fn invalid(path: &Path, value: impl Into<Bad>, detail: &str) -> StatusCause {
    cause(
        "FieldValueInvalid",
        path,
        with_detail(format!("Invalid value: {}", value.into().render()), detail),
    )
}

/// `Unsupported value: <value>: supported values: "a", "b"`.
pub fn not_supported(path: &Path, value: impl Into<Bad>, valid: &[&str]) -> StatusCause {
    let detail = if valid.is_empty() {
        String::new()
    } else {
        let quoted: Vec<String> = valid.iter().map(|v| go_quote(v)).collect();
        format!("supported values: {}", quoted.join(", "))
    };
    cause(
        "FieldValueNotSupported",
        path,
        with_detail(
            format!("Unsupported value: {}", value.into().render()),
            &detail,
        ),
    )
}

/// `Duplicate value: <value>`.
pub fn duplicate(path: &Path, value: impl Into<Bad>) -> StatusCause {
    cause(
        "FieldValueDuplicate",
        path,
        format!("Duplicate value: {}", value.into().render()),
    )
}

/// `Not found: <value>`.
pub fn not_found(path: &Path, value: impl Into<Bad>) -> StatusCause {
    cause(
        "FieldValueNotFound",
        path,
        format!("Not found: {}", value.into().render()),
    )
}

/// `Forbidden[: detail]`.
pub fn forbidden(path: &Path, detail: &str) -> StatusCause {
    cause(
        "FieldValueForbidden",
        path,
        with_detail("Forbidden".into(), detail),
    )
}

/// `Too long: may not be more than <max> bytes` (kube 1.32+ wording; the value is omitted).
pub fn too_long(path: &Path, max: usize) -> StatusCause {
    cause(
        "FieldValueTooLong",
        path,
        format!("Too long: may not be more than {max} bytes"),
    )
}

/// `Too many: <actual>: must have at most <max> items`.
pub fn too_many(path: &Path, actual: usize, max: usize) -> StatusCause {
    cause(
        "FieldValueTooMany",
        path,
        format!("Too many: {actual}: must have at most {max} items"),
    )
}

/// One `Invalid` per message of a format check (kube's `for _, msg := range IsX(v)`).
pub fn invalid_each(path: &Path, value: &str, messages: Vec<String>) -> ErrorList {
    messages
        .into_iter()
        .map(|m| invalid(path, value, &m))
        .collect()
}

pub use crate::names::go_quote;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_print_as_kube_prints_them() {
        let p = Path::new("spec").child("ports").index(0).child("name");
        assert_eq!(p.as_str(), "spec.ports[0].name");
        assert_eq!(Path::new("data").key("a.b").as_str(), "data[a.b]");
        assert_eq!(Path::root().child("metadata").as_str(), "metadata");
    }

    #[test]
    fn messages_match_error_body() {
        let p = Path::new("spec.ports[0].name");
        assert_eq!(
            invalid(&p, "Web_1", "bad").message.unwrap(),
            "Invalid value: \"Web_1\": bad"
        );
        assert_eq!(
            invalid(&p, 70000i64, "").message.unwrap(),
            "Invalid value: 70000"
        );
        assert_eq!(required(&p, "").message.unwrap(), "Required value");
        assert_eq!(
            not_supported(&p, "SCTPX", &["SCTP", "TCP", "UDP"])
                .message
                .unwrap(),
            "Unsupported value: \"SCTPX\": supported values: \"SCTP\", \"TCP\", \"UDP\""
        );
        assert_eq!(
            duplicate(&p, "http").message.unwrap(),
            "Duplicate value: \"http\""
        );
        assert_eq!(
            too_long(&p, 63).message.unwrap(),
            "Too long: may not be more than 63 bytes"
        );
        assert_eq!(
            too_many(&p, 5, 3).message.unwrap(),
            "Too many: 5: must have at most 3 items"
        );
        assert_eq!(
            forbidden(&p, "may not be set").message.unwrap(),
            "Forbidden: may not be set"
        );
    }

    #[test]
    fn go_quoting() {
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("x\ny;}"), r#""x\ny;}""#);
        assert_eq!(go_quote("é"), "\"é\"");
        assert_eq!(go_quote("\u{1b}"), r#""\x1b""#);
        assert_eq!(go_quote("\u{200b}"), r#""\u200b""#);
    }
}
