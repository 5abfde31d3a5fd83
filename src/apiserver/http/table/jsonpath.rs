//! A small JSONPath evaluator covering what CRD `additionalPrinterColumns` use,
//! with client-go `util/jsonpath` semantics (missing keys allowed):
//! `.spec.replicas`, `.metadata.labels.app`, `.metadata.labels['app.kubernetes.io/name']`,
//! `.spec.items[0].name`, `[-1]`, `[1:3]`, `[0,2]`, `[*]`, `.*`, `..name`, and
//! filters such as `.status.conditions[?(@.type=="Ready")].status`.
//!
//! Pure functions over `serde_json::Value`; no store, no HTTP.

use serde_json::Value;

/// A parsed JSONPath expression.
#[derive(Clone, Debug, PartialEq)]
pub struct JsonPath {
    steps: Vec<Step>,
}

#[derive(Clone, Debug, PartialEq)]
enum Step {
    /// Apply the selector to each current value.
    Child(Selector),
    /// Apply the selector to each current value and all of its descendants.
    Recursive(Selector),
}

#[derive(Clone, Debug, PartialEq)]
enum Selector {
    Field(String),
    Fields(Vec<String>),
    Wildcard,
    Indices(Vec<IndexSel>),
    Filter(Box<Filter>),
}

#[derive(Clone, Debug, PartialEq)]
enum IndexSel {
    Index(i64),
    Slice(Option<i64>, Option<i64>, Option<i64>),
}

#[derive(Clone, Debug, PartialEq)]
struct Filter {
    left: Operand,
    cmp: Option<(CmpOp, Operand)>,
}

#[derive(Clone, Debug, PartialEq)]
enum Operand {
    /// A path relative to the element being filtered (`@.type`).
    Current(JsonPath),
    Literal(Value),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Parses a JSONPath such as `.status.conditions[?(@.type=="Ready")].status`.
/// A surrounding `{...}` and a leading `$` are accepted.
pub fn parse(expr: &str) -> Result<JsonPath, String> {
    let mut s = expr.trim();
    if let Some(inner) = s.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        s = inner.trim();
    }
    let s = s.strip_prefix('$').unwrap_or(s);
    let mut p = Parser {
        src: s.as_bytes(),
        text: s,
        pos: 0,
    };
    let path = p.path()?;
    if p.pos != p.src.len() {
        return Err(format!(
            "unexpected {:?} at {} in {expr:?}",
            &s[p.pos..],
            p.pos
        ));
    }
    Ok(path)
}

/// The first value `expr` selects in `root`: `None` if the path is invalid,
/// selects nothing, or fails to evaluate (as client-go would report an error).
pub fn first<'a>(expr: &str, root: &'a Value) -> Option<&'a Value> {
    parse(expr).ok()?.find(root).ok()?.into_iter().next()
}

impl JsonPath {
    /// Every value the path selects in `root`, in document order. Missing keys
    /// select nothing; filtering something that is not an array is an error.
    pub fn find<'a>(&self, root: &'a Value) -> Result<Vec<&'a Value>, String> {
        let mut cur = vec![root];
        for step in &self.steps {
            let mut next = Vec::new();
            match step {
                Step::Child(sel) => {
                    for v in cur {
                        apply(sel, v, &mut next)?;
                    }
                }
                Step::Recursive(sel) => {
                    for v in cur {
                        let mut all = Vec::new();
                        descendants(v, &mut all);
                        for d in all {
                            // Filters and indices only make sense on arrays;
                            // during descent skip values they cannot apply to.
                            let applicable = match sel {
                                Selector::Filter(_) | Selector::Indices(_) => d.is_array(),
                                _ => true,
                            };
                            if applicable {
                                apply(sel, d, &mut next)?;
                            }
                        }
                    }
                }
            }
            cur = next;
        }
        Ok(cur)
    }
}

fn descendants<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    out.push(v);
    match v {
        Value::Object(m) => m.values().for_each(|c| descendants(c, out)),
        Value::Array(a) => a.iter().for_each(|c| descendants(c, out)),
        _ => {}
    }
}

fn apply<'a>(sel: &Selector, v: &'a Value, out: &mut Vec<&'a Value>) -> Result<(), String> {
    match sel {
        Selector::Field(name) => out.extend(v.as_object().and_then(|m| m.get(name))),
        Selector::Fields(names) => {
            if let Some(m) = v.as_object() {
                out.extend(names.iter().filter_map(|n| m.get(n)));
            }
        }
        Selector::Wildcard => match v {
            Value::Object(m) => out.extend(m.values()),
            Value::Array(a) => out.extend(a.iter()),
            _ => {}
        },
        Selector::Indices(sels) => {
            let items = v
                .as_array()
                .ok_or_else(|| format!("{} is not array or slice", kind(v)))?;
            let len = items.len() as i64;
            for sel in sels {
                match *sel {
                    IndexSel::Index(i) => {
                        let i = if i < 0 { i + len } else { i };
                        if (0..len).contains(&i) {
                            out.push(&items[i as usize]);
                        }
                    }
                    IndexSel::Slice(start, end, step) => {
                        let norm = |x: i64| if x < 0 { (x + len).max(0) } else { x.min(len) };
                        let start = norm(start.unwrap_or(0));
                        let end = norm(end.unwrap_or(len));
                        let step = step.unwrap_or(1);
                        if step <= 0 {
                            return Err("step must be > 0".to_string());
                        }
                        let mut i = start;
                        while i < end {
                            out.push(&items[i as usize]);
                            i += step;
                        }
                    }
                }
            }
        }
        Selector::Filter(filter) => {
            let items = v.as_array().ok_or_else(|| {
                format!("{} is not array or slice and cannot be filtered", kind(v))
            })?;
            for item in items {
                if filter.matches(item)? {
                    out.push(item);
                }
            }
        }
    }
    Ok(())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

impl Filter {
    /// client-go's `evalFilter`: `[?(@.x)]` keeps elements where the path
    /// selects something; a comparison needs exactly one value on each side and
    /// comparable types, otherwise the whole evaluation fails.
    fn matches(&self, item: &Value) -> Result<bool, String> {
        let Some((op, right)) = &self.cmp else {
            return Ok(operand(&self.left, item).is_ok_and(|v| !v.is_empty()));
        };
        let left = single(operand(&self.left, item)?)?;
        let right = single(operand(right, item)?)?;
        compare(*op, &left, &right)
    }
}

fn operand(op: &Operand, item: &Value) -> Result<Vec<Value>, String> {
    match op {
        Operand::Literal(v) => Ok(vec![v.clone()]),
        Operand::Current(path) => Ok(path.find(item)?.into_iter().cloned().collect()),
    }
}

fn single(mut values: Vec<Value>) -> Result<Value, String> {
    if values.len() != 1 {
        return Err("can only compare one element at a time".to_string());
    }
    Ok(values.remove(0))
}

/// Go template's comparison kinds: integers and floats do not mix.
#[derive(PartialEq)]
enum BasicKind {
    Bool,
    Int,
    Float,
    String,
}

fn basic_kind(v: &Value) -> Result<BasicKind, String> {
    match v {
        Value::Bool(_) => Ok(BasicKind::Bool),
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(BasicKind::Int),
        Value::Number(_) => Ok(BasicKind::Float),
        Value::String(_) => Ok(BasicKind::String),
        _ => Err("invalid type for comparison".to_string()),
    }
}

/// The forked text/template `eq`/`ne`/`lt`/`le`/`gt`/`ge` on two JSON values.
fn compare(op: CmpOp, a: &Value, b: &Value) -> Result<bool, String> {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let (ka, kb) = (basic_kind(a)?, basic_kind(b)?);
    if ka != kb {
        return Err("incompatible types for comparison".to_string());
    }
    let ord = match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => {
            if !matches!(op, CmpOp::Eq | CmpOp::Ne) {
                return Err("invalid type for comparison".to_string());
            }
            x.cmp(y)
        }
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Number(x), Value::Number(y)) if ka == BasicKind::Int => {
            match (x.as_i64(), y.as_i64()) {
                (Some(x), Some(y)) => x.cmp(&y),
                // At least one is beyond i64: compare as u64 (negatives sort first).
                _ => match (x.as_u64(), y.as_u64()) {
                    (Some(x), Some(y)) => x.cmp(&y),
                    (Some(_), None) => Greater,
                    _ => Less,
                },
            }
        }
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            x.partial_cmp(&y).unwrap_or(Equal)
        }
        _ => return Err("invalid type for comparison".to_string()),
    };
    Ok(match op {
        CmpOp::Eq => ord == Equal,
        CmpOp::Ne => ord != Equal,
        CmpOp::Lt => ord == Less,
        CmpOp::Le => ord != Greater,
        CmpOp::Gt => ord == Greater,
        CmpOp::Ge => ord != Less,
    })
}

struct Parser<'s> {
    src: &'s [u8],
    text: &'s str,
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    /// Steps until the end of input or a character that cannot continue a path
    /// (inside a filter: an operator, a space or the closing parenthesis).
    fn path(&mut self) -> Result<JsonPath, String> {
        let mut steps = Vec::new();
        loop {
            match self.peek() {
                Some(b'.') => {
                    self.pos += 1;
                    let recursive = self.eat(b'.');
                    let sel = match self.peek() {
                        Some(b'*') => {
                            self.pos += 1;
                            Selector::Wildcard
                        }
                        Some(b'[') if recursive => self.bracket()?,
                        _ => Selector::Field(self.field_name()?),
                    };
                    steps.push(if recursive {
                        Step::Recursive(sel)
                    } else {
                        Step::Child(sel)
                    });
                }
                Some(b'[') => {
                    let sel = self.bracket()?;
                    steps.push(Step::Child(sel));
                }
                _ => break,
            }
        }
        Ok(JsonPath { steps })
    }

    /// A bare field name: up to the next unescaped `.`/`[` or a character that
    /// ends a path; `\.` stands for a literal dot.
    fn field_name(&mut self) -> Result<String, String> {
        let mut name = String::new();
        while let Some(c) = self.peek() {
            match c {
                b'\\' if self.src.get(self.pos + 1) == Some(&b'.') => {
                    name.push('.');
                    self.pos += 2;
                }
                b'.' | b'[' | b']' | b'(' | b')' | b'{' | b'}' | b'=' | b'!' | b'<' | b'>'
                | b',' => break,
                c if c.is_ascii_whitespace() => break,
                _ => {
                    // Copy one (possibly multi-byte) character.
                    let ch = self.text[self.pos..].chars().next().unwrap_or('\0');
                    name.push(ch);
                    self.pos += ch.len_utf8();
                }
            }
        }
        if name.is_empty() {
            return Err(format!("expected a field name at {}", self.pos));
        }
        Ok(name)
    }

    fn bracket(&mut self) -> Result<Selector, String> {
        if !self.eat(b'[') {
            return Err(format!("expected '[' at {}", self.pos));
        }
        self.skip_ws();
        let sel = match self.peek() {
            Some(b'?') => {
                self.pos += 1;
                self.skip_ws();
                if !self.eat(b'(') {
                    return Err(format!("expected '(' after '?' at {}", self.pos));
                }
                let f = self.filter()?;
                self.skip_ws();
                if !self.eat(b')') {
                    return Err(format!("expected ')' at {}", self.pos));
                }
                Selector::Filter(Box::new(f))
            }
            Some(b'*') => {
                self.pos += 1;
                Selector::Wildcard
            }
            Some(b'\'' | b'"') => {
                let mut names = vec![self.quoted()?];
                self.skip_ws();
                while self.eat(b',') {
                    self.skip_ws();
                    names.push(self.quoted()?);
                    self.skip_ws();
                }
                if names.len() == 1 {
                    Selector::Field(names.remove(0))
                } else {
                    Selector::Fields(names)
                }
            }
            _ => {
                let start = self.pos;
                while self.peek().is_some_and(|c| c != b']') {
                    self.pos += 1;
                }
                let inner = &self.text[start..self.pos];
                Selector::Indices(parse_indices(inner)?)
            }
        };
        self.skip_ws();
        if !self.eat(b']') {
            return Err(format!("expected ']' at {}", self.pos));
        }
        Ok(sel)
    }

    fn quoted(&mut self) -> Result<String, String> {
        let quote = self
            .peek()
            .filter(|c| *c == b'\'' || *c == b'"')
            .ok_or_else(|| format!("expected a quoted string at {}", self.pos))?;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let ch = self.text[self.pos..]
                .chars()
                .next()
                .ok_or_else(|| "unterminated string".to_string())?;
            self.pos += ch.len_utf8();
            match ch {
                '\\' => {
                    let esc = self.text[self.pos..]
                        .chars()
                        .next()
                        .ok_or_else(|| "unterminated string".to_string())?;
                    self.pos += esc.len_utf8();
                    out.push(match esc {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    });
                }
                c if c as u32 == u32::from(quote) => return Ok(out),
                c => out.push(c),
            }
        }
    }

    fn filter(&mut self) -> Result<Filter, String> {
        self.skip_ws();
        let left = self.operand()?;
        self.skip_ws();
        let op = match (self.peek(), self.src.get(self.pos + 1).copied()) {
            (Some(b'='), Some(b'=')) => Some((CmpOp::Eq, 2)),
            (Some(b'!'), Some(b'=')) => Some((CmpOp::Ne, 2)),
            (Some(b'<'), Some(b'=')) => Some((CmpOp::Le, 2)),
            (Some(b'>'), Some(b'=')) => Some((CmpOp::Ge, 2)),
            (Some(b'<'), _) => Some((CmpOp::Lt, 1)),
            (Some(b'>'), _) => Some((CmpOp::Gt, 1)),
            _ => None,
        };
        let cmp = match op {
            Some((op, width)) => {
                self.pos += width;
                self.skip_ws();
                Some((op, self.operand()?))
            }
            None => None,
        };
        Ok(Filter { left, cmp })
    }

    fn operand(&mut self) -> Result<Operand, String> {
        match self.peek() {
            Some(b'@') => {
                self.pos += 1;
                Ok(Operand::Current(self.path()?))
            }
            Some(b'\'' | b'"') => Ok(Operand::Literal(Value::String(self.quoted()?))),
            Some(_) => {
                let start = self.pos;
                while self
                    .peek()
                    .is_some_and(|c| !c.is_ascii_whitespace() && c != b')')
                {
                    self.pos += 1;
                }
                let word = &self.text[start..self.pos];
                match word {
                    "true" => Ok(Operand::Literal(Value::Bool(true))),
                    "false" => Ok(Operand::Literal(Value::Bool(false))),
                    "null" | "nil" => Ok(Operand::Literal(Value::Null)),
                    _ => {
                        if let Ok(i) = word.parse::<i64>() {
                            Ok(Operand::Literal(Value::from(i)))
                        } else if let Some(n) = word
                            .parse::<f64>()
                            .ok()
                            .and_then(serde_json::Number::from_f64)
                        {
                            Ok(Operand::Literal(Value::Number(n)))
                        } else {
                            Err(format!("unrecognized filter operand {word:?}"))
                        }
                    }
                }
            }
            None => Err("unterminated filter".to_string()),
        }
    }
}

fn parse_indices(inner: &str) -> Result<Vec<IndexSel>, String> {
    let parse_num = |s: &str| -> Result<Option<i64>, String> {
        let s = s.trim();
        if s.is_empty() {
            Ok(None)
        } else {
            s.parse::<i64>()
                .map(Some)
                .map_err(|_| format!("invalid array index {s:?}"))
        }
    };
    let mut out = Vec::new();
    for part in inner.split(',') {
        if part.contains(':') {
            let bits: Vec<&str> = part.split(':').collect();
            if bits.len() > 3 {
                return Err(format!("invalid slice {part:?}"));
            }
            let start = parse_num(bits[0])?;
            let end = parse_num(bits[1])?;
            let step = match bits.get(2) {
                Some(s) => parse_num(s)?,
                None => None,
            };
            out.push(IndexSel::Slice(start, end, step));
        } else {
            let i = parse_num(part)?.ok_or_else(|| "empty array index".to_string())?;
            out.push(IndexSel::Index(i));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj() -> Value {
        json!({
            "metadata": {
                "name": "web",
                "labels": {"app": "nginx", "app.kubernetes.io/name": "frontend"}
            },
            "spec": {
                "replicas": 3,
                "paused": false,
                "ratio": 0.5,
                "items": [
                    {"name": "a", "size": 1},
                    {"name": "b", "size": 5},
                    {"name": "c", "size": 10}
                ]
            },
            "status": {
                "conditions": [
                    {"type": "Progressing", "status": "True"},
                    {"type": "Ready", "status": "False", "reason": "Waiting"}
                ]
            }
        })
    }

    fn all(expr: &str) -> Vec<Value> {
        let o = obj();
        parse(expr)
            .unwrap()
            .find(&o)
            .unwrap()
            .into_iter()
            .cloned()
            .collect()
    }

    #[test]
    fn simple_fields() {
        let o = obj();
        assert_eq!(first(".spec.replicas", &o), Some(&json!(3)));
        assert_eq!(first("{.spec.replicas}", &o), Some(&json!(3)));
        assert_eq!(first("$.spec.paused", &o), Some(&json!(false)));
        assert_eq!(first(".metadata.labels.app", &o), Some(&json!("nginx")));
        assert_eq!(first(".metadata.missing.deeper", &o), None);
        assert_eq!(first(".spec.replicas.nope", &o), None);
    }

    #[test]
    fn keys_with_dots() {
        let o = obj();
        let want = Some(&json!("frontend"));
        assert_eq!(
            first(".metadata.labels['app.kubernetes.io/name']", &o),
            want
        );
        assert_eq!(
            first(r#".metadata.labels["app.kubernetes.io/name"]"#, &o),
            want
        );
        assert_eq!(
            first(r".metadata.labels.app\.kubernetes\.io/name", &o),
            want
        );
    }

    #[test]
    fn indices_and_slices() {
        let o = obj();
        assert_eq!(first(".spec.items[0].name", &o), Some(&json!("a")));
        assert_eq!(first(".spec.items[-1].name", &o), Some(&json!("c")));
        assert_eq!(first(".spec.items[7].name", &o), None);
        assert_eq!(all(".spec.items[1:].name"), vec![json!("b"), json!("c")]);
        assert_eq!(all(".spec.items[0:3:2].name"), vec![json!("a"), json!("c")]);
        assert_eq!(all(".spec.items[0,2].size"), vec![json!(1), json!(10)]);
        assert_eq!(all(".spec.items[*].name").len(), 3);
        assert_eq!(all(".metadata.labels.*").len(), 2);
    }

    #[test]
    fn filters() {
        let o = obj();
        assert_eq!(
            first(r#".status.conditions[?(@.type=="Ready")].status"#, &o),
            Some(&json!("False"))
        );
        assert_eq!(
            first(".status.conditions[?(@.type == 'Ready')].reason", &o),
            Some(&json!("Waiting"))
        );
        assert_eq!(
            first(r#".status.conditions[?(@.type=="Missing")].status"#, &o),
            None
        );
        assert_eq!(
            all(".spec.items[?(@.size > 1)].name"),
            vec![json!("b"), json!("c")]
        );
        assert_eq!(
            all(".spec.items[?(@.size<=5)].name"),
            vec![json!("a"), json!("b")]
        );
        assert_eq!(
            all(r#".spec.items[?(@.name!="a")].size"#),
            vec![json!(5), json!(10)]
        );
        assert_eq!(
            all(".status.conditions[?(@.reason)].type"),
            vec![json!("Ready")]
        );
        // As in client-go: an element without the compared key, or values of
        // different kinds, make the whole evaluation fail (a null cell).
        assert_eq!(
            first(r#".status.conditions[?(@.reason=="Waiting")].type"#, &o),
            None
        );
        assert_eq!(first(r#".spec.items[?(@.size=="5")].name"#, &o), None);
        assert_eq!(first(".spec.items[?(@.size==5.0)].name", &o), None);
        assert_eq!(
            first(".spec.items[?(@.size>=10)].name", &o),
            Some(&json!("c"))
        );
        assert_eq!(
            first(".spec.items[?(@.name<\"b\")].size", &o),
            Some(&json!(1))
        );
        // Filtering a non-array is an error, which a table cell shows as null.
        assert!(parse(".spec[?(@.x==1)]").unwrap().find(&o).is_err());
        assert_eq!(first(".spec[?(@.x==1)]", &o), None);
    }

    #[test]
    fn recursive_descent() {
        assert_eq!(
            all("..name"),
            vec![json!("web"), json!("a"), json!("b"), json!("c")]
        );
        assert_eq!(all("..status").len(), 3);
    }

    #[test]
    fn parse_errors() {
        for bad in [
            ".spec[",
            ".spec[?(@.a==)]",
            ".spec.items[x]",
            ".spec.items[1:2:3:4]",
            "]",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
