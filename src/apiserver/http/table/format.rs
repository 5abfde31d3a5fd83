//! Small formatting helpers shared by the table printers: reading loosely typed
//! JSON fields, label maps and label selectors as `kubectl` shows them, and Go's
//! text/JSON rendering of arbitrary values (for CRD string columns).
//!
//! Pure functions over `serde_json::Value`; no store, no HTTP.

use serde_json::Value;

/// `v[key]` as a string slice, "" when missing or not a string.
pub fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// `v[key]` as an integer (Go's zero value when missing). Floats truncate.
pub fn int_at(v: &Value, key: &str) -> i64 {
    v.get(key).map(as_int).unwrap_or(0)
}

/// `v[key]` as an optional integer (a Go `*int32` field).
pub fn opt_int_at(v: &Value, key: &str) -> Option<i64> {
    match v.get(key) {
        None | Some(Value::Null) => None,
        Some(x) => Some(as_int(x)),
    }
}

fn as_int(v: &Value) -> i64 {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|u| i64::try_from(u).unwrap_or(i64::MAX)))
            .or_else(|| n.as_f64().map(|f| f as i64))
            .unwrap_or(0),
        _ => 0,
    }
}

/// `v[key]` as a bool (false when missing).
pub fn bool_at(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// `v[key]` as an optional bool (a Go `*bool` field).
pub fn opt_bool_at(v: &Value, key: &str) -> Option<bool> {
    v.get(key).and_then(Value::as_bool)
}

/// `v[key]` as a slice of values (empty when missing or not an array).
pub fn arr_at<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// `v[key]` as an object, if it is one.
pub fn obj_at<'a>(v: &'a Value, key: &str) -> Option<&'a serde_json::Map<String, Value>> {
    v.get(key).and_then(Value::as_object)
}

/// Number of entries in the object (or array) at `v[key]`.
pub fn len_at(v: &Value, key: &str) -> i64 {
    match v.get(key) {
        Some(Value::Object(m)) => m.len() as i64,
        Some(Value::Array(a)) => a.len() as i64,
        _ => 0,
    }
}

/// `value` if non-empty, else `fallback`.
pub fn or_else<'a>(value: &'a str, fallback: &'a str) -> &'a str {
    if value.is_empty() { fallback } else { value }
}

/// `labels.FormatLabels`: "k1=v1,k2=v2" sorted by key, "<none>" when empty.
pub fn format_labels(map: Option<&serde_json::Map<String, Value>>) -> String {
    let mut pairs: Vec<String> = map
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    if pairs.is_empty() {
        return "<none>".to_string();
    }
    pairs.sort();
    pairs.join(",")
}

/// `metav1.LabelSelectorAsSelector(sel).String()`: requirements sorted by key,
/// "k=v", "k in (a,b)", "k notin (a,b)", "k", "!k"; "" for a nil or empty
/// selector; `Err` for an invalid one.
pub fn label_selector_string(sel: Option<&Value>) -> Result<String, ()> {
    let sel = match sel {
        None | Some(Value::Null) => return Ok(String::new()),
        Some(s) => s,
    };
    let mut reqs: Vec<(String, String)> = Vec::new();
    for (k, v) in obj_at(sel, "matchLabels").into_iter().flatten() {
        reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
    }
    for expr in arr_at(sel, "matchExpressions") {
        let key = str_at(expr, "key");
        let mut values: Vec<&str> = arr_at(expr, "values")
            .iter()
            .map(|v| v.as_str().unwrap_or(""))
            .collect();
        values.sort_unstable();
        let text = match str_at(expr, "operator") {
            "In" | "NotIn" if values.is_empty() => return Err(()),
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" if values.is_empty() => key.to_string(),
            "DoesNotExist" if values.is_empty() => format!("!{key}"),
            _ => return Err(()),
        };
        reqs.push((key.to_string(), text));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(reqs
        .into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join(","))
}

/// `metav1.FormatLabelSelector`: like [`label_selector_string`] but "<none>"
/// when empty and "<error>" when invalid.
pub fn format_label_selector(sel: Option<&Value>) -> String {
    match label_selector_string(sel) {
        Ok(s) if s.is_empty() => "<none>".to_string(),
        Ok(s) => s,
        Err(()) => "<error>".to_string(),
    }
}

/// The printers' `layoutContainerCells`: container names and images, each
/// comma-joined.
pub fn container_cells(containers: &[Value]) -> (String, String) {
    let names: Vec<&str> = containers.iter().map(|c| str_at(c, "name")).collect();
    let images: Vec<&str> = containers.iter().map(|c| str_at(c, "image")).collect();
    (names.join(","), images.join(","))
}

/// Go's `printBoolPtr`: "True", "False", or "<unset>".
pub fn bool_ptr_string(v: Option<bool>) -> String {
    match v {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    }
    .to_string()
}

/// An intstr.IntOrString value as Go's `String()` prints it.
pub fn int_or_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(_) => as_int(v).to_string(),
        _ => String::new(),
    }
}

/// Text for one JSONPath result, as client-go's `JSONPath.PrintResults` writes it:
/// maps and arrays as compact JSON (Go `json.Marshal`), strings raw, numbers and
/// bools with `fmt.Fprint`.
pub fn go_print_value(v: &Value) -> String {
    match v {
        Value::Object(_) | Value::Array(_) => go_json(v),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(u)) => u.to_string(),
            _ => go_float_v(n.as_f64().unwrap_or(0.0)),
        },
    }
}

/// Go's `encoding/json` rendering: sorted object keys, HTML-safe string escaping,
/// floats in Go's `'f'`/`'e'` choice.
pub fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(v, &mut out);
    out
}

fn write_go_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => out.push_str(&i.to_string()),
            (None, Some(u)) => out.push_str(&u.to_string()),
            _ => out.push_str(&go_json_float(n.as_f64().unwrap_or(0.0))),
        },
        Value::String(s) => write_go_json_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json_string(k, out);
                out.push(':');
                write_go_json(&map[k], out);
            }
            out.push('}');
        }
    }
}

/// Go's `encoding/json` encoding of a string (HTML-safe escaping included); shared by
/// every place that must print values the way kube-apiserver does.
pub(crate) fn write_go_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Shortest round-trip decimal digits and decimal exponent of `f` (finite,
/// non-zero): `f = 0.d1d2d3... * 10^(exp+1)`, i.e. `d1.d2d3... * 10^exp`.
fn shortest_digits(f: f64) -> (String, i32) {
    let e = format!("{:e}", f.abs());
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    (digits, exp.parse().unwrap_or(0))
}

fn exp_form(neg: bool, digits: &str, exp: i32) -> String {
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    s.push_str(&digits[..1]);
    if digits.len() > 1 {
        s.push('.');
        s.push_str(&digits[1..]);
    }
    s.push('e');
    s.push(if exp < 0 { '-' } else { '+' });
    s.push_str(&format!("{:02}", exp.abs()));
    s
}

/// `fmt.Sprint(float64)` (`%v`, i.e. `%g` with shortest precision: exponent
/// form when the decimal exponent is < -4 or >= 6, so 1e6 prints "1e+06").
pub fn go_float_v(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let (digits, exp) = shortest_digits(f);
    if !(-4..6).contains(&exp) {
        return exp_form(f < 0.0, &digits, exp);
    }
    // Plain decimal notation; Rust's Display is shortest round-trip too.
    format!("{f}")
}

/// Go `encoding/json` float64: `'f'` format unless |f| < 1e-6 or >= 1e21, then
/// `'e'` with a one- or more-digit exponent ("1e+21", "1e-7").
fn go_json_float(f: f64) -> String {
    if !f.is_finite() {
        return "null".to_string();
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let (digits, exp) = shortest_digits(f);
        let s = exp_form(f < 0.0, &digits, exp);
        // Go trims "e-07" to "e-7" (and "e+07" never occurs in this range).
        return s.replace("e-0", "e-").replace("e+0", "e+");
    }
    format!("{f}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labels_are_sorted_and_none_when_empty() {
        let m = json!({"b": "2", "a": "1"});
        assert_eq!(format_labels(m.as_object()), "a=1,b=2");
        assert_eq!(format_labels(None), "<none>");
        assert_eq!(format_labels(json!({}).as_object()), "<none>");
    }

    #[test]
    fn label_selectors_render_like_apimachinery() {
        let sel = json!({
            "matchLabels": {"tier": "web", "app": "nginx"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "dev"]},
                {"key": "zone", "operator": "NotIn", "values": ["b"]},
                {"key": "gpu", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist"}
            ]
        });
        assert_eq!(
            format_label_selector(Some(&sel)),
            "app=nginx,env in (dev,prod),gpu,!legacy,tier=web,zone notin (b)"
        );
        assert_eq!(format_label_selector(None), "<none>");
        assert_eq!(format_label_selector(Some(&json!({}))), "<none>");
        assert_eq!(label_selector_string(Some(&json!({}))), Ok(String::new()));
        let bad = json!({"matchExpressions": [{"key": "x", "operator": "In", "values": []}]});
        assert_eq!(format_label_selector(Some(&bad)), "<error>");
        let bad = json!({"matchExpressions": [{"key": "x", "operator": "Gt"}]});
        assert_eq!(label_selector_string(Some(&bad)), Err(()));
    }

    #[test]
    fn go_value_printing() {
        assert_eq!(go_print_value(&json!("x")), "x");
        assert_eq!(go_print_value(&json!(3)), "3");
        assert_eq!(go_print_value(&json!(1.5)), "1.5");
        assert_eq!(go_print_value(&json!(3.0)), "3");
        assert_eq!(go_print_value(&json!(1e21)), "1e+21");
        assert_eq!(go_print_value(&json!(0.00001)), "1e-05");
        assert_eq!(go_print_value(&json!(0.0001)), "0.0001");
        assert_eq!(go_print_value(&json!(1e6)), "1e+06");
        assert_eq!(go_print_value(&json!(123456.5)), "123456.5");
        assert_eq!(go_print_value(&json!(-1234567.0)), "-1.234567e+06");
        assert_eq!(go_print_value(&json!(true)), "true");
        assert_eq!(
            go_print_value(&json!({"b": [1, "<x>"], "a": 2.5})),
            r#"{"a":2.5,"b":[1,"\u003cx\u003e"]}"#
        );
        assert_eq!(go_json(&json!([1e21, 1e-7, 0.5])), "[1e+21,1e-7,0.5]");
    }
}
