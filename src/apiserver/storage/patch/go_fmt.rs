//! Go-style rendering of JSON values for error texts, so that patch errors read
//! like the ones kube-apiserver produces (`fmt`'s `%v` / `%s` of the
//! `map[string]interface{}` trees apimachinery works on, and `reflect` type names).
//! Pure string formatting: no I/O, no store, no HTTP.

use serde_json::{Number, Value};

/// `fmt.Sprintf("%v", v)` of the Go value decoded from `v` (integers as `int64`,
/// other numbers as `float64`, objects as `map[string]interface{}`).
pub(crate) fn go_v(v: &Value) -> String {
    let mut out = String::new();
    write_v(&mut out, v);
    out
}

fn write_v(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_number(n)),
        Value::String(s) => out.push_str(s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_v(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push_str("map[");
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(key);
                out.push(':');
                write_v(out, &map[key]);
            }
            out.push(']');
        }
    }
}

/// `fmt.Sprintf("%s", v)`: strings verbatim, anything else as Go's bad-verb form.
pub(crate) fn go_s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "%!s(<nil>)".to_string(),
        Value::Object(_) | Value::Array(_) => go_v(v),
        other => format!("%!s({}={})", go_type(other), go_v(other)),
    }
}

/// `reflect.TypeOf(v).String()` (with `%s` of a nil type for JSON null).
pub(crate) fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "%!s(<nil>)",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// The JSON kind name `encoding/json` uses in "cannot unmarshal X into ..." errors.
pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn go_number(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    go_float(n.as_f64().unwrap_or_default())
}

/// `%v` of a float64: shortest representation, `%e` style when the decimal
/// exponent is below -4 or at least 6 (what `strconv` does for `'g'`, -1).
fn go_float(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".to_string()
        } else if f > 0.0 {
            "+Inf".to_string()
        } else {
            "-Inf".to_string()
        };
    }
    // Rust's `{:e}` is the shortest round-tripping form, e.g. "-1.25e-7".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{esign}{:02}", exp.abs());
    }
    // Plain decimal: the point goes after `exp + 1` digits.
    let point = exp + 1;
    let body = if point <= 0 {
        format!("0.{}{}", "0".repeat(point.unsigned_abs() as usize), digits)
    } else if point as usize >= digits.len() {
        format!("{}{}", digits, "0".repeat(point as usize - digits.len()))
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{int}.{frac}")
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_render_like_go() {
        assert_eq!(
            go_v(&json!({"hostPath": {"path": "/var/lib/kubelet/pods"}})),
            "map[hostPath:map[path:/var/lib/kubelet/pods]]"
        );
        assert_eq!(
            go_v(&json!({"b": [1, "x", null], "a": true})),
            "map[a:true b:[1 x <nil>]]"
        );
        assert_eq!(go_v(&json!([[1, 2], [3]])), "[[1 2] [3]]");
        assert_eq!(go_v(&json!(-7)), "-7");
        assert_eq!(go_v(&json!(u64::MAX)), "18446744073709551615");
    }

    #[test]
    fn floats_render_like_go() {
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(123456.0), "123456");
        assert_eq!(go_float(1_000_000.0), "1e+06");
        assert_eq!(go_float(1_234_567.0), "1.234567e+06");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(-2.5e-7), "-2.5e-07");
        assert_eq!(go_float(0.0), "0");
        assert_eq!(go_float(100.0), "100");
    }

    #[test]
    fn types_and_s_verb() {
        assert_eq!(go_type(&json!([])), "[]interface {}");
        assert_eq!(go_type(&json!({})), "map[string]interface {}");
        assert_eq!(go_type(&json!(1)), "int64");
        assert_eq!(go_type(&json!(1.5)), "float64");
        assert_eq!(go_type(&json!("x")), "string");
        assert_eq!(go_type(&json!(null)), "%!s(<nil>)");
        assert_eq!(go_s(&json!("merge")), "merge");
        assert_eq!(go_s(&json!(3)), "%!s(int64=3)");
        assert_eq!(go_s(&json!(null)), "%!s(<nil>)");
        assert_eq!(json_kind(&json!({})), "object");
    }
}
