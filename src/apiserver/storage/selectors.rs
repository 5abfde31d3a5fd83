//! Kubernetes label selectors and field selectors, as kube-apiserver implements them.
//!
//! # What this module owns
//!
//! * Parsing, canonical rendering and matching of **label selectors**: the `labelSelector`
//!   query-parameter syntax of `k8s.io/apimachinery/pkg/labels` ([`LabelSelector::parse`]),
//!   `metav1.LabelSelector` objects as found in Deployments, ReplicaSets, Jobs, ...
//!   ([`LabelSelector::from_label_selector_json`]) and plain `map[string]string` selectors as
//!   used by Services and ReplicationControllers ([`LabelSelector::from_map`]).
//! * Parsing, canonical rendering and matching of **field selectors**: the `fieldSelector`
//!   query-parameter syntax of `k8s.io/apimachinery/pkg/fields` ([`FieldSelector::parse`]),
//!   including its backslash escaping.
//! * The per-resource tables of **selectable fields**: which field labels kube-apiserver
//!   accepts for a resource ([`supported_fields`], [`check_supported`],
//!   [`convert_field_selector`], mirroring the field-label conversion functions registered in
//!   the scheme) and how each field's value is derived from a stored object
//!   ([`field_value`], mirroring the registries' `GetAttrs`/`ToSelectableFields`).
//!
//! Error texts are kube-apiserver's own (`unable to parse requirement: ...`,
//! `field label not supported: ...`, ...), because the API server returns them verbatim to
//! clients inside a `400 BadRequest` `metav1.Status`.
//!
//! # What it must not touch
//!
//! Everything here is a pure function of its arguments: no I/O, no access to the object store
//! or watch cache, no HTTP types, no logging, no global state. Callers (the list/watch
//! handlers) decide how to build the `Status` response, which resource and index to use,
//! and when to apply a selector; this module only answers "does it parse", "what is the
//! canonical text" and "does this object match".

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::names::go_quote;

use serde_json::{Map, Value};

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Errors produced while parsing or converting selectors. `Display` renders the exact text
/// kube-apiserver puts in the `message` of its `400 BadRequest` status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A `labelSelector` string failed to parse (text of `labels.Parse`).
    #[error("{0}")]
    LabelSelectorParse(String),
    /// A requirement could not be built (text of `labels.NewRequirement`'s aggregated field
    /// errors), e.g. an invalid key in a `metav1.LabelSelector`.
    #[error("{0}")]
    InvalidRequirement(String),
    /// A `metav1.LabelSelector` used an operator other than In/NotIn/Exists/DoesNotExist.
    #[error("{} is not a valid label selector operator", go_quote(.0))]
    InvalidOperator(String),
    /// A JSON label selector does not have the shape of a `metav1.LabelSelector` (or of a
    /// `map[string]string` for [`LabelSelector::from_map_json`]).
    #[error("{0}")]
    MalformedLabelSelector(String),
    /// A field selector term contains none of the operators `=`, `==`, `!=`.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    InvalidFieldSelectorTerm {
        /// The whole selector as given.
        selector: String,
        /// The offending comma-separated term.
        term: String,
    },
    /// A field selector value contains a backslash not followed by `\`, `,` or `=`.
    #[error("invalid field selector: invalid escape sequence: {0}")]
    InvalidEscapeSequence(String),
    /// A field selector value contains an unescaped `,` or `=`. Kubernetes prints the
    /// character as its decimal code point (Go's `%v` of a rune), e.g. `61` for `=`.
    #[error("invalid field selector: unescaped character in value: {}", u32::from(*.0))]
    UnescapedCharacter(char),
    /// The field label is not selectable for this resource (text of the resource's
    /// field-label conversion function).
    #[error("{message}")]
    FieldLabelNotSupported {
        /// The rejected field label.
        field: String,
        /// The full message, e.g. `field label not supported: spec.foo`.
        message: String,
    },
}

// ---------------------------------------------------------------------------------------------
// Label selectors
// ---------------------------------------------------------------------------------------------

/// A label selector operator (`k8s.io/apimachinery/pkg/selection.Operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `=`
    Equals,
    /// `==`
    DoubleEquals,
    /// `!=`
    NotEquals,
    /// `in (...)`
    In,
    /// `notin (...)`
    NotIn,
    /// `key`
    Exists,
    /// `!key`
    DoesNotExist,
    /// `>` (integer comparison)
    GreaterThan,
    /// `<` (integer comparison)
    LessThan,
}

impl Operator {
    /// The operator's `selection.Operator` string (`"="`, `"in"`, `"exists"`, `"!"`, `"gt"`...).
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => "in",
            Operator::NotIn => "notin",
            Operator::Exists => "exists",
            Operator::DoesNotExist => "!",
            Operator::GreaterThan => "gt",
            Operator::LessThan => "lt",
        }
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The binary operators, in the order apimachinery lists them in parse errors.
const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

/// One requirement of a label selector: a key, an operator and a (possibly empty) value list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

/// How a label key is present in the object being matched.
#[derive(Clone, Copy)]
enum Lookup<'a> {
    Missing,
    Str(&'a str),
    /// Present but not a string (only possible for hand-written JSON).
    NonString,
}

impl Requirement {
    /// Builds a validated requirement, like `labels.NewRequirement` without a field path:
    /// the key must be a qualified name, In/NotIn need at least one value, `=`/`==`/`!=`
    /// exactly one, Exists/DoesNotExist none, Gt/Lt exactly one integer, and every value must
    /// be a valid label value. Errors use apimachinery's field-error text, e.g.
    /// `key: Invalid value: "a/b/c": ...`.
    pub fn new(
        key: impl Into<String>,
        operator: Operator,
        values: Vec<String>,
    ) -> Result<Requirement, SelectorError> {
        let key = key.into();
        let mut errs = Vec::new();
        if let Some(detail) = validate_label_key(&key) {
            errs.push(field_invalid("key", &BadValue::Str(&key), &detail));
        }
        let values_bad = BadValue::List(&values);
        match operator {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    errs.push(field_invalid(
                        "values",
                        &values_bad,
                        "for 'in', 'notin' operators, values set can't be empty",
                    ));
                }
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
                if values.len() != 1 {
                    errs.push(field_invalid(
                        "values",
                        &values_bad,
                        "exact-match compatibility requires one single value",
                    ));
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    errs.push(field_invalid(
                        "values",
                        &values_bad,
                        "values set must be empty for exists and does not exist",
                    ));
                }
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(field_invalid(
                        "values",
                        &values_bad,
                        "for 'Gt', 'Lt' operators, exactly one value is required",
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(field_invalid(
                            &format!("values[{i}]"),
                            &BadValue::Str(v),
                            "for 'Gt', 'Lt' operators, the value must be an integer",
                        ));
                    }
                }
            }
        }
        for (i, v) in values.iter().enumerate() {
            let errors = label_value_errors(v);
            if !errors.is_empty() {
                errs.push(field_invalid(
                    &format!("values[{i}][{key}]"),
                    &BadValue::Str(v),
                    &errors.join("; "),
                ));
            }
        }
        if errs.is_empty() {
            Ok(Requirement {
                key,
                operator,
                values,
            })
        } else {
            Err(SelectorError::InvalidRequirement(aggregate(errs)))
        }
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, in the order given (sorted and de-duplicated when parsed from a string).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether this requirement matches the given label set.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(&|k: &str| match labels.get(k) {
            Some(v) => Lookup::Str(v.as_str()),
            None => Lookup::Missing,
        })
    }

    fn has_value(&self, v: &str) -> bool {
        self.values.iter().any(|x| x == v)
    }

    fn matches_with<'a, F: Fn(&str) -> Lookup<'a>>(&self, lookup: &F) -> bool {
        let found = lookup(&self.key);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => match found {
                Lookup::Str(v) => self.has_value(v),
                Lookup::Missing | Lookup::NonString => false,
            },
            Operator::NotIn | Operator::NotEquals => match found {
                Lookup::Str(v) => !self.has_value(v),
                Lookup::Missing | Lookup::NonString => true,
            },
            Operator::Exists => !matches!(found, Lookup::Missing),
            Operator::DoesNotExist => matches!(found, Lookup::Missing),
            Operator::GreaterThan | Operator::LessThan => {
                let Lookup::Str(v) = found else {
                    return false;
                };
                let Ok(have) = v.parse::<i64>() else {
                    return false;
                };
                let [want] = self.values.as_slice() else {
                    return false;
                };
                let Ok(want) = want.parse::<i64>() else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.operator {
            Operator::DoesNotExist => return write!(f, "!{}", self.key),
            Operator::Exists => return f.write_str(&self.key),
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
        };
        let set = matches!(self.operator, Operator::In | Operator::NotIn);
        write!(f, "{}{}", self.key, op)?;
        if set {
            f.write_str("(")?;
        }
        if let [only] = self.values.as_slice() {
            f.write_str(only)?;
        } else {
            let mut sorted: Vec<&str> = self.values.iter().map(String::as_str).collect();
            sorted.sort_unstable();
            f.write_str(&sorted.join(","))?;
        }
        if set {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A label selector: the AND of its requirements, kept sorted by key.
///
/// Two special values exist, as in apimachinery: [`LabelSelector::everything`] (no
/// requirements; matches every object; [`is_empty`](LabelSelector::is_empty) is true) and
/// [`LabelSelector::nothing`] (matches no object; what a *null* `metav1.LabelSelector`
/// converts to). Both render as the empty string.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl LabelSelector {
    /// The selector that matches everything (`labels.Everything()`).
    pub fn everything() -> LabelSelector {
        LabelSelector::default()
    }

    /// The selector that matches nothing (`labels.Nothing()`).
    pub fn nothing() -> LabelSelector {
        LabelSelector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// Builds a selector from requirements (sorted by key, like `Selector.Add`).
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> LabelSelector {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        LabelSelector {
            requirements,
            nothing: false,
        }
    }

    /// Parses the `labelSelector` query-parameter syntax exactly like `labels.Parse`.
    ///
    /// ```text
    /// <selector-syntax>  ::= <requirement> | <requirement> "," <selector-syntax>
    /// <requirement>      ::= [!] KEY [ <set-based-restriction> | <exact-match-restriction> ]
    /// <set-based-restriction>   ::= "" | ("in" | "notin") "(" VALUE { "," VALUE } ")"
    /// <exact-match-restriction> ::= ("=" | "==" | "!=" | ">" | "<") VALUE
    /// ```
    ///
    /// Whitespace (space, tab, CR, LF) separates tokens; values may be empty (`a=`,
    /// `a in (,b)`); `in`/`notin` are only keywords in operator position.
    pub fn parse(s: &str) -> Result<LabelSelector, SelectorError> {
        let mut parser = Parser::new(s);
        let requirements = parser.parse().map_err(SelectorError::LabelSelectorParse)?;
        Ok(LabelSelector::from_requirements(requirements))
    }

    /// A selector matching exactly the given labels (`labels.SelectorFromValidatedSet`), as
    /// used for `Service.spec.selector` and `ReplicationController.spec.selector`. Keys and
    /// values are not validated. An empty map gives [`LabelSelector::everything`]; callers
    /// that treat a missing Service selector as "select nothing" must check that themselves
    /// (or use [`LabelSelector::from_map_json`]).
    pub fn from_map(map: &BTreeMap<String, String>) -> LabelSelector {
        LabelSelector {
            requirements: map
                .iter()
                .map(|(k, v)| Requirement {
                    key: k.clone(),
                    operator: Operator::Equals,
                    values: vec![v.clone()],
                })
                .collect(),
            nothing: false,
        }
    }

    /// Like [`LabelSelector::from_map`] for a JSON value: `null` (or an absent field passed as
    /// `Value::Null`) gives [`LabelSelector::nothing`], an object of strings gives the
    /// equality selector, anything else is an error.
    pub fn from_map_json(v: &Value) -> Result<LabelSelector, SelectorError> {
        match v {
            Value::Null => Ok(LabelSelector::nothing()),
            Value::Object(m) => Ok(LabelSelector::from_map(&string_map(m, "selector")?)),
            other => Err(SelectorError::MalformedLabelSelector(format!(
                "label selector must be an object of strings, got {}",
                json_kind(other)
            ))),
        }
    }

    /// Converts a `metav1.LabelSelector` JSON object (`matchLabels`, `matchExpressions`) like
    /// `metav1.LabelSelectorAsSelector`: `null` matches nothing, `{}` (no labels and no
    /// expressions) matches everything, otherwise the AND of all requirements.
    pub fn from_label_selector_json(v: &Value) -> Result<LabelSelector, SelectorError> {
        let obj = match v {
            Value::Null => return Ok(LabelSelector::nothing()),
            Value::Object(o) => o,
            other => {
                return Err(SelectorError::MalformedLabelSelector(format!(
                    "label selector must be an object, got {}",
                    json_kind(other)
                )));
            }
        };
        let match_labels = match obj.get("matchLabels") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(m)) => string_map(m, "matchLabels")?,
            Some(other) => {
                return Err(SelectorError::MalformedLabelSelector(format!(
                    "matchLabels must be an object of strings, got {}",
                    json_kind(other)
                )));
            }
        };
        let expressions: &[Value] = match obj.get("matchExpressions") {
            None | Some(Value::Null) => &[],
            Some(Value::Array(a)) => a,
            Some(other) => {
                return Err(SelectorError::MalformedLabelSelector(format!(
                    "matchExpressions must be an array, got {}",
                    json_kind(other)
                )));
            }
        };
        if match_labels.is_empty() && expressions.is_empty() {
            return Ok(LabelSelector::everything());
        }
        let mut requirements = Vec::with_capacity(match_labels.len() + expressions.len());
        for (k, v) in &match_labels {
            requirements.push(Requirement::new(
                k.clone(),
                Operator::Equals,
                vec![v.clone()],
            )?);
        }
        for (i, expr) in expressions.iter().enumerate() {
            let Value::Object(expr) = expr else {
                return Err(SelectorError::MalformedLabelSelector(format!(
                    "matchExpressions[{i}] must be an object, got {}",
                    json_kind(expr)
                )));
            };
            let key = optional_string(expr, "key", i)?;
            let op = optional_string(expr, "operator", i)?;
            let operator = match op.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                _ => return Err(SelectorError::InvalidOperator(op)),
            };
            let values = match expr.get("values") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| {
                        v.as_str().map(str::to_owned).ok_or_else(|| {
                            SelectorError::MalformedLabelSelector(format!(
                                "matchExpressions[{i}].values must contain only strings, got {}",
                                json_kind(v)
                            ))
                        })
                    })
                    .collect::<Result<_, _>>()?,
                Some(other) => {
                    return Err(SelectorError::MalformedLabelSelector(format!(
                        "matchExpressions[{i}].values must be an array of strings, got {}",
                        json_kind(other)
                    )));
                }
            };
            requirements.push(Requirement::new(key, operator, values)?);
        }
        Ok(LabelSelector::from_requirements(requirements))
    }

    /// Whether the selector matches the given label set.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether the selector matches `metadata.labels` taken straight from a JSON object
    /// (`None` means the object has no labels).
    pub fn matches_json(&self, labels: Option<&Map<String, Value>>) -> bool {
        if self.nothing {
            return false;
        }
        let lookup = |k: &str| match labels.and_then(|m| m.get(k)) {
            None => Lookup::Missing,
            Some(Value::String(s)) => Lookup::Str(s.as_str()),
            Some(_) => Lookup::NonString,
        };
        self.requirements.iter().all(|r| r.matches_with(&lookup))
    }

    /// Whether the selector matches an object's `metadata.labels`.
    pub fn matches_object(&self, object: &Value) -> bool {
        self.matches_json(
            object
                .get("metadata")
                .and_then(|m| m.get("labels"))
                .and_then(Value::as_object),
        )
    }

    /// True when the selector does not restrict anything (`Selector.Empty()`); false for
    /// [`LabelSelector::nothing`].
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// True for [`LabelSelector::nothing`].
    pub fn matches_nothing(&self) -> bool {
        self.nothing
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// If the first requirement on `key` demands one exact value (`=`, `==`, or `in` with a
    /// single value), that value (`Selector.RequiresExactMatch`). Useful for index lookups.
    pub fn requires_exact_match(&self, key: &str) -> Option<&str> {
        let r = self.requirements.iter().find(|r| r.key == key)?;
        match (r.operator, r.values.as_slice()) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, [only]) => Some(only),
            _ => None,
        }
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl FromStr for LabelSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LabelSelector::parse(s)
    }
}

/// Free-function form of [`LabelSelector::from_label_selector_json`].
pub fn from_label_selector_json(v: &Value) -> Result<LabelSelector, SelectorError> {
    LabelSelector::from_label_selector_json(v)
}

/// Free-function form of [`LabelSelector::from_map`].
pub fn from_map(map: &BTreeMap<String, String>) -> LabelSelector {
    LabelSelector::from_map(map)
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn string_map(
    m: &Map<String, Value>,
    what: &str,
) -> Result<BTreeMap<String, String>, SelectorError> {
    m.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            other => Err(SelectorError::MalformedLabelSelector(format!(
                "{what}[{}] must be a string, got {}",
                go_quote(k),
                json_kind(other)
            ))),
        })
        .collect()
}

fn optional_string(m: &Map<String, Value>, field: &str, i: usize) -> Result<String, SelectorError> {
    match m.get(field) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(SelectorError::MalformedLabelSelector(format!(
            "matchExpressions[{i}].{field} must be a string, got {}",
            json_kind(other)
        ))),
    }
}

// ----- label selector lexer/parser (same tokenisation rules as apimachinery) -----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn literal_token(s: &[u8]) -> Option<Token> {
    Some(match s {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::DoesNotExist,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::GreaterThan,
        b"in" => Token::In,
        b"<" => Token::LessThan,
        b"!=" => Token::NotEquals,
        b"notin" => Token::NotIn,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Byte-oriented lexer. A NUL byte reads like the end of input, as in apimachinery.
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Lexer<'_> {
    fn read(&mut self) -> u8 {
        match self.s.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos -= 1;
    }

    fn scan_identifier_or_keyword(&mut self) -> (Token, String) {
        let mut buf = Vec::new();
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
            buf.push(ch);
        }
        let tok = match literal_token(&buf) {
            Some(t) => t,
            None => Token::Identifier,
        };
        (tok, String::from_utf8_lossy(&buf).into_owned())
    }

    fn scan_special_symbol(&mut self) -> (Token, String) {
        let mut buf = Vec::new();
        let mut last: Option<(Token, usize)> = None;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special(ch) {
                self.unread();
                break;
            }
            buf.push(ch);
            if let Some(tok) = literal_token(&buf) {
                last = Some((tok, buf.len()));
            } else if last.is_some() {
                self.unread();
                break;
            }
        }
        match last {
            Some((tok, len)) => (tok, String::from_utf8_lossy(&buf[..len]).into_owned()),
            None => (
                Token::Error,
                format!(
                    "error expected: keyword found '{}'",
                    String::from_utf8_lossy(&buf)
                ),
            ),
        }
    }

    fn lex(&mut self) -> (Token, String) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Token::EndOfString, String::new());
        }
        self.unread();
        if is_special(ch) {
            self.scan_special_symbol()
        } else {
            self.scan_identifier_or_keyword()
        }
    }
}

/// Whether `in`/`notin` are read as keywords (operator position) or as plain identifiers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

impl Parser {
    fn new(s: &str) -> Parser {
        let mut lexer = Lexer {
            s: s.as_bytes(),
            pos: 0,
        };
        let mut items = Vec::new();
        loop {
            let item = lexer.lex();
            let end = item.0 == Token::EndOfString;
            items.push(item);
            if end {
                break;
            }
        }
        Parser { items, position: 0 }
    }

    fn item(&self, idx: usize, ctx: Context) -> (Token, String) {
        let (tok, lit) = &self.items[idx.min(self.items.len() - 1)];
        let tok = match (ctx, tok) {
            (Context::Values, Token::In | Token::NotIn) => Token::Identifier,
            (_, t) => *t,
        };
        (tok, lit.clone())
    }

    fn lookahead(&self, ctx: Context) -> (Token, String) {
        self.item(self.position, ctx)
    }

    fn consume(&mut self, ctx: Context) -> (Token, String) {
        let it = self.item(self.position, ctx);
        self.position += 1;
        it
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut out = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    out.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(out),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => {
                            return Err(format!("found '{l}', expected: ',' or 'end of string'"));
                        }
                    }
                }
                Token::EndOfString => return Ok(out),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, inferred) = self.parse_key_and_infer_operator()?;
        if let Some(op) = inferred {
            return Requirement::new(key, op, Vec::new()).map_err(|e| e.to_string());
        }
        let operator = self.parse_operator()?;
        let values = match operator {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::new(key, operator, values).map_err(|e| e.to_string())
    }

    /// Returns the key and, when no binary operator follows, the inferred unary operator.
    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut not_exists = false;
        let (mut tok, mut lit) = self.consume(Context::Values);
        if tok == Token::DoesNotExist {
            not_exists = true;
            (tok, lit) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        if let Some(detail) = validate_label_key(&lit) {
            return Err(field_invalid("<nil>", &BadValue::Str(&lit), &detail));
        }
        if not_exists {
            // A '!' always yields DoesNotExist; whatever follows is judged by the caller.
            return Ok((lit, Some(Operator::DoesNotExist)));
        }
        let (next, _) = self.lookahead(Context::Values);
        if next == Token::EndOfString || next == Token::Comma {
            return Ok((lit, Some(Operator::Exists)));
        }
        Ok((lit, None))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => return Err(format!("found '{lit}', expected: {BINARY_OPERATORS}")),
        })
    }

    /// Parses `( v1, v2, ... )`, returning the sorted, de-duplicated value set.
    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let set = self.parse_identifiers_list()?;
                let (close, _) = self.consume(Context::Values);
                if close != Token::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(set)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
        let mut set = std::collections::BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    set.insert(lit);
                    let (next, next_lit) = self.lookahead(Context::Values);
                    match next {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(set.into_iter().collect()),
                        _ => {
                            return Err(format!("found '{next_lit}', expected: ',' or ')'"));
                        }
                    }
                }
                Token::Comma => {
                    // A leading, trailing or doubled comma stands for an empty value.
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    let (next, _) = self.lookahead(Context::Values);
                    if next == Token::ClosedPar {
                        set.insert(String::new());
                        return Ok(set.into_iter().collect());
                    }
                    if next == Token::Comma {
                        set.insert(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, String> {
        let (tok, _) = self.lookahead(Context::Values);
        if tok == Token::EndOfString || tok == Token::Comma {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier {
            Ok(vec![lit])
        } else {
            Err(format!("found '{lit}', expected: identifier"))
        }
    }
}

// ----- label key / value validation (k8s.io/apimachinery/pkg/api/validate/content) -----

const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const LABEL_MAX_LEN: usize = 63;
const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;

fn regex_error(msg: &str, re: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{re}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(e);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(re);
    out.push_str("')");
    out
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} bytes")
}

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`
fn is_label_token(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => edge(f) && edge(l) && b.iter().all(|c| edge(c) || *c == b'-'),
        _ => false,
    }
}

fn dns1123_subdomain_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > DNS1123_SUBDOMAIN_MAX_LEN {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LEN));
    }
    if !v.split('.').all(is_dns1123_label) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

fn label_key_errors(key: &str) -> Vec<String> {
    let parts: Vec<&str> = key.split('/').collect();
    let mut errs = Vec::new();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(
                    dns1123_subdomain_errors(prefix)
                        .into_iter()
                        .map(|e| format!("prefix part {e}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    LABEL_KEY_ERR,
                    LABEL_KEY_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > LABEL_MAX_LEN {
        errs.push(format!("name part {}", max_len_error(LABEL_MAX_LEN)));
    }
    if !is_label_token(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                LABEL_KEY_ERR,
                LABEL_KEY_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

fn label_value_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > LABEL_MAX_LEN {
        errs.push(max_len_error(LABEL_MAX_LEN));
    }
    if !v.is_empty() && !is_label_token(v) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// `validateLabelKey`: the joined error details, if the key is not a qualified name.
fn validate_label_key(key: &str) -> Option<String> {
    let errs = label_key_errors(key);
    (!errs.is_empty()).then(|| errs.join("; "))
}

/// Whether `key` is a valid label key (qualified name).
pub fn is_valid_label_key(key: &str) -> bool {
    label_key_errors(key).is_empty()
}

/// Whether `value` is a valid label value (may be empty).
pub fn is_valid_label_value(value: &str) -> bool {
    label_value_errors(value).is_empty()
}

// ----- field.Error rendering -----

enum BadValue<'a> {
    Str(&'a str),
    List(&'a [String]),
}

/// Renders a `field.Invalid(path, value, detail)` error like `field.Error.Error()`.
fn field_invalid(path: &str, value: &BadValue<'_>, detail: &str) -> String {
    let value = match value {
        BadValue::Str(s) => go_quote(s),
        // apimachinery passes a nil slice for "no values", which encodes as `null`.
        BadValue::List([]) => "null".to_owned(),
        BadValue::List(list) => {
            let items: Vec<String> = list.iter().map(|s| go_json_string(s)).collect();
            format!("[{}]", items.join(","))
        }
    };
    format!("{path}: Invalid value: {value}: {detail}")
}

/// `utilerrors.NewAggregate(...).Error()`: one message as is, several de-duplicated in `[...]`.
fn aggregate(errs: Vec<String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errs {
        if !seen.contains(&e) {
            seen.push(e);
        }
    }
    if seen.len() == 1 {
        seen.pop().unwrap_or_default()
    } else {
        format!("[{}]", seen.join(", "))
    }
}

/// Go's `encoding/json` encoding of a string (HTML-safe escaping included).
fn go_json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    crate::apiserver::http::table::format::write_go_json_string(s, &mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// Field selectors
// ---------------------------------------------------------------------------------------------

/// A field selector operator. `=` and `==` both parse to [`FieldOperator::Equals`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    /// `=` or `==`
    Equals,
    /// `!=`
    NotEquals,
}

/// One `field=value` / `field!=value` term (`fields.Requirement`), value unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The field label, e.g. `spec.nodeName`.
    pub field: String,
    /// The operator.
    pub operator: FieldOperator,
    /// The literal (unescaped) value.
    pub value: String,
}

impl FieldRequirement {
    /// Whether the term accepts a field whose value is `actual` (absent fields read as "").
    pub fn matches(&self, actual: &str) -> bool {
        match self.operator {
            FieldOperator::Equals => actual == self.value,
            FieldOperator::NotEquals => actual != self.value,
        }
    }
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.operator {
            FieldOperator::Equals => "=",
            FieldOperator::NotEquals => "!=",
        };
        write!(f, "{}{}{}", self.field, op, escape_field_value(&self.value))
    }
}

/// A field selector: the AND of its terms. Empty means "everything".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// The selector that matches everything.
    pub fn everything() -> FieldSelector {
        FieldSelector::default()
    }

    /// A selector with a single `field=value` term (`fields.OneTermEqualSelector`).
    pub fn one_term_equal(field: impl Into<String>, value: impl Into<String>) -> FieldSelector {
        FieldSelector {
            requirements: vec![FieldRequirement {
                field: field.into(),
                operator: FieldOperator::Equals,
                value: value.into(),
            }],
        }
    }

    /// A selector from explicit terms, kept in the given order.
    pub fn from_requirements(requirements: Vec<FieldRequirement>) -> FieldSelector {
        FieldSelector { requirements }
    }

    /// Parses the `fieldSelector` syntax exactly like `fields.ParseSelector`: terms are split
    /// on unescaped commas and sorted; each term is split at the first `!=`, `==` or `=`
    /// (the field part is taken literally); the value is unescaped (`\\`, `\,`, `\=`), and
    /// an unescaped `=` or any other backslash sequence in it is an error. Empty terms and
    /// terms with both an empty field and an empty value are dropped.
    pub fn parse(s: &str) -> Result<FieldSelector, SelectorError> {
        let mut parts = split_field_terms(s);
        parts.sort_unstable();
        let mut requirements = Vec::with_capacity(parts.len());
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((lhs, operator, rhs)) = split_field_term(part) else {
                return Err(SelectorError::InvalidFieldSelectorTerm {
                    selector: s.to_owned(),
                    term: part.to_owned(),
                });
            };
            let value = unescape_field_value(rhs)?;
            if lhs.is_empty() && value.is_empty() {
                continue;
            }
            requirements.push(FieldRequirement {
                field: lhs.to_owned(),
                operator,
                value,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// Whether the selector matches an object whose field values are given by `get`
    /// (`None` = the field is not in the object's field set, which reads as "").
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches(get(&r.field).as_deref().unwrap_or("")))
    }

    /// Whether the selector matches a stored object of the given resource, using
    /// [`field_value`].
    pub fn matches_object(&self, resource: &str, object: &Value) -> bool {
        self.matches(|f| field_value(resource, object, f))
    }

    /// True when there are no terms (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The terms, in canonical (sorted) order when parsed.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// The value of the first `field=value` term on `field`, if any
    /// (`Selector.RequiresExactMatch`), e.g. to use `spec.nodeName` as an index.
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == field && r.operator == FieldOperator::Equals)
            .map(|r| r.value.as_str())
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl FromStr for FieldSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FieldSelector::parse(s)
    }
}

/// Escapes a literal value for use in a field selector (`fields.EscapeValue`):
/// `\` → `\\`, `,` → `\,`, `=` → `\=`.
pub fn escape_field_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Reverses [`escape_field_value`] (`fields.UnescapeValue`).
pub fn unescape_field_value(v: &str) -> Result<String, SelectorError> {
    if !v.contains(['\\', ',', '=']) {
        return Ok(v.to_owned());
    }
    let mut out = String::with_capacity(v.len());
    let mut in_slash = false;
    for c in v.chars() {
        if in_slash {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(SelectorError::InvalidEscapeSequence(format!("\\{c}")));
            }
            out.push(c);
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => return Err(SelectorError::UnescapedCharacter(c)),
            c => out.push(c),
        }
    }
    if in_slash {
        return Err(SelectorError::InvalidEscapeSequence("\\".to_owned()));
    }
    Ok(out)
}

/// Splits on commas not preceded by an escaping backslash; escapes are kept in the terms.
fn split_field_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// Splits a term at the first operator occurrence, preferring `!=`, then `==`, then `=`.
fn split_field_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, kind) in [
            ("!=", FieldOperator::NotEquals),
            ("==", FieldOperator::Equals),
            ("=", FieldOperator::Equals),
        ] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], kind, value));
            }
        }
    }
    None
}

// ----- per-resource selectable fields -----

const DEFAULT_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];

const POD_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
];

const EVENT_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

const SECRET_FIELDS: &[&str] = &["metadata.name", "metadata.namespace", "type"];
const NODE_FIELDS: &[&str] = &["metadata.name", "spec.unschedulable"];
const NAMESPACE_FIELDS: &[&str] = &["metadata.name", "status.phase"];
const SERVICE_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.clusterIP",
    "spec.type",
];
const RC_FIELDS: &[&str] = &["metadata.name", "metadata.namespace", "status.replicas"];
const JOB_FIELDS: &[&str] = &["metadata.name", "metadata.namespace", "status.successful"];
const SIGNER_FIELDS: &[&str] = &["metadata.name", "spec.signerName"];
const POD_CERT_REQUEST_FIELDS: &[&str] = &[
    "metadata.name",
    "spec.signerName",
    "spec.podName",
    "spec.nodeName",
];

/// How a resource rejects an unknown field label.
enum Rejection {
    /// `field label not supported: %s` (the core/v1 and certificates/v1 conversion funcs).
    NotSupported,
    /// `field label %q not supported for Job` (batch/v1).
    Job,
    /// `%q is not a known field selector: only "metadata.name", "metadata.namespace"`
    /// (`runtime.DefaultMetaV1FieldSelectorConversion`, every other resource).
    Default,
}

fn field_table(resource: &str) -> (&'static [&'static str], Rejection) {
    match resource {
        "pods" => (POD_FIELDS, Rejection::NotSupported),
        "events" => (EVENT_FIELDS, Rejection::NotSupported),
        "secrets" => (SECRET_FIELDS, Rejection::NotSupported),
        "nodes" => (NODE_FIELDS, Rejection::NotSupported),
        "namespaces" => (NAMESPACE_FIELDS, Rejection::NotSupported),
        "services" => (SERVICE_FIELDS, Rejection::NotSupported),
        "replicationcontrollers" => (RC_FIELDS, Rejection::NotSupported),
        "jobs" => (JOB_FIELDS, Rejection::Job),
        "certificatesigningrequests" | "clustertrustbundles" => {
            (SIGNER_FIELDS, Rejection::NotSupported)
        }
        "podcertificaterequests" => (POD_CERT_REQUEST_FIELDS, Rejection::NotSupported),
        // apps/v1 registers no field-label conversion for ReplicaSets, so kube-apiserver
        // only accepts the metadata fields there (kubernetes/kubernetes#135136), although the
        // registry computes status.replicas (see field_value).
        _ => (DEFAULT_FIELDS, Rejection::Default),
    }
}

/// The field labels kube-apiserver accepts in a `fieldSelector` for a resource (plural
/// name), as registered by the field-label conversion functions. Resources without a
/// registered function (including `replicasets`, `persistentvolumes`, `configmaps`, ...)
/// accept `metadata.name` and `metadata.namespace`. For `pods` the legacy label `spec.host`
/// is additionally accepted and rewritten to `spec.nodeName` by [`convert_field_selector`].
pub fn supported_fields(resource: &str) -> &'static [&'static str] {
    field_table(resource).0
}

/// Converts one field label like the scheme's `ConvertFieldLabel`: the canonical label, or
/// kube-apiserver's error for an unsupported one.
fn convert_field_label(resource: &str, label: &str) -> Result<String, SelectorError> {
    if resource == "pods" && label == "spec.host" {
        return Ok("spec.nodeName".to_owned());
    }
    let (fields, rejection) = field_table(resource);
    if fields.contains(&label) {
        return Ok(label.to_owned());
    }
    let message = match rejection {
        Rejection::NotSupported => format!("field label not supported: {label}"),
        Rejection::Job => format!("field label {} not supported for Job", go_quote(label)),
        Rejection::Default => format!(
            "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
            go_quote(label)
        ),
    };
    Err(SelectorError::FieldLabelNotSupported {
        field: label.to_owned(),
        message,
    })
}

/// Checks every term's field label against [`supported_fields`] (in term order, reporting
/// the first unsupported one with kube-apiserver's message).
pub fn check_supported(resource: &str, selector: &FieldSelector) -> Result<(), SelectorError> {
    convert_field_selector(resource, selector).map(|_| ())
}

/// Like [`check_supported`], but also returns the selector with field labels converted to
/// their canonical names (pods: `spec.host` → `spec.nodeName`), which is what the API server
/// matches and indexes with.
pub fn convert_field_selector(
    resource: &str,
    selector: &FieldSelector,
) -> Result<FieldSelector, SelectorError> {
    let requirements = selector
        .requirements
        .iter()
        .map(|r| {
            Ok(FieldRequirement {
                field: convert_field_label(resource, &r.field)?,
                operator: r.operator,
                value: r.value.clone(),
            })
        })
        .collect::<Result<_, SelectorError>>()?;
    Ok(FieldSelector { requirements })
}

fn lookup<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, k| cur.get(k))
}

/// A string field, "" when absent (Go zero value).
fn string_at(v: &Value, path: &[&str]) -> String {
    lookup(v, path)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A boolean field rendered like `strconv.FormatBool` / `fmt.Sprint`, false when absent.
fn bool_at(v: &Value, path: &[&str]) -> String {
    let b = lookup(v, path).and_then(Value::as_bool).unwrap_or(false);
    b.to_string()
}

/// An integer field rendered like `strconv.Itoa`, 0 when absent.
fn int_at(v: &Value, path: &[&str]) -> String {
    let n = lookup(v, path).and_then(|n| {
        n.as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
    });
    n.unwrap_or(0).to_string()
}

/// Resources whose registry builds the field set without `metadata.namespace`
/// (`generic.ObjectMetaFieldsSet(meta, false)`).
fn omits_namespace_field(resource: &str) -> bool {
    matches!(
        resource,
        "nodes"
            | "namespaces"
            | "persistentvolumes"
            | "certificatesigningrequests"
            | "clustertrustbundles"
    )
}

/// How many levels of JSON containers below the object itself a selector can read: labels
/// (`metadata.labels.<key>`) and `status.podIPs[0].ip` are the deepest.
const SELECTABLE_DEPTH: u8 = 4;

/// Decodes the part of a stored object's JSON that label and field selectors read: every
/// object or array nested deeper than [`field_value`] and label matching ever look is
/// skipped without being built (it becomes `null`). Watches with selectors test every
/// event this way, so a pod's containers, volumes and managedFields are not allocated
/// for each of them.
pub fn selectable_view(json: &[u8]) -> Result<Value, serde_json::Error> {
    use serde::de::DeserializeSeed;
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    let value = Shallow(SELECTABLE_DEPTH).deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// A `Value` decoder that keeps containers down to `.0` more levels and skips the rest.
#[derive(Clone, Copy)]
struct Shallow(u8);

impl<'de> serde::de::DeserializeSeed<'de> for Shallow {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Shallow {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        serde::de::DeserializeSeed::deserialize(self, deserializer)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let Some(inner) = self.0.checked_sub(1) else {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            return Ok(Value::Null);
        };
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Shallow(inner))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let Some(inner) = self.0.checked_sub(1) else {
            while map
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {}
            return Ok(Value::Null);
        };
        let mut members = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Shallow(inner))?;
            members.insert(key, value);
        }
        Ok(Value::Object(members))
    }
}

/// The value of a selectable field of a stored (JSON, external-version) object, as the
/// resource's registry computes it for field-selector matching (`GetAttrs`). `None` means
/// the field is not part of the resource's field set, which matches like "".
///
/// Rendering follows Kubernetes: missing strings are "", booleans are "true"/"false"
/// (missing = "false"), integers are decimal (missing = "0"). Notable cases:
/// * pods: `status.podIP` is the primary IP (`status.podIP`, else `status.podIPs[0].ip`);
///   `status.podIPs` is accepted by the API but never populated by kube-apiserver, so it is
///   `None` (only `status.podIPs=` matches); `spec.host` reads `spec.nodeName`.
/// * events: `source` is `source.component`, falling back to `reportingComponent`;
///   events.k8s.io field names (`regarding`, `reportingController`, `deprecatedSource`) are
///   used when the core/v1 ones are absent.
/// * jobs: `status.successful` is `status.succeeded`.
pub fn field_value(resource: &str, object: &Value, field: &str) -> Option<String> {
    match field {
        "metadata.name" => return Some(string_at(object, &["metadata", "name"])),
        "metadata.namespace" => {
            return (!omits_namespace_field(resource))
                .then(|| string_at(object, &["metadata", "namespace"]));
        }
        _ => {}
    }
    let s = |path: &[&str]| Some(string_at(object, path));
    match (resource, field) {
        ("pods", "spec.nodeName" | "spec.host") => s(&["spec", "nodeName"]),
        ("pods", "spec.restartPolicy") => s(&["spec", "restartPolicy"]),
        ("pods", "spec.schedulerName") => s(&["spec", "schedulerName"]),
        ("pods", "spec.serviceAccountName") => s(&["spec", "serviceAccountName"]),
        ("pods", "spec.hostNetwork") => Some(bool_at(object, &["spec", "hostNetwork"])),
        ("pods", "status.phase") => s(&["status", "phase"]),
        ("pods", "status.podIP") => {
            let ip = string_at(object, &["status", "podIP"]);
            if ip.is_empty() {
                let first = lookup(object, &["status", "podIPs"])
                    .and_then(Value::as_array)
                    .and_then(|a| a.first());
                Some(first.map(|p| string_at(p, &["ip"])).unwrap_or_default())
            } else {
                Some(ip)
            }
        }
        ("pods", "status.nominatedNodeName") => s(&["status", "nominatedNodeName"]),
        ("events", f) => event_field(object, f),
        ("secrets", "type") => s(&["type"]),
        ("nodes", "spec.unschedulable") => Some(bool_at(object, &["spec", "unschedulable"])),
        ("namespaces", "status.phase") => s(&["status", "phase"]),
        ("services", "spec.clusterIP") => s(&["spec", "clusterIP"]),
        ("services", "spec.type") => s(&["spec", "type"]),
        ("replicasets" | "replicationcontrollers", "status.replicas") => {
            Some(int_at(object, &["status", "replicas"]))
        }
        ("jobs", "status.successful") => Some(int_at(object, &["status", "succeeded"])),
        (
            "certificatesigningrequests" | "clustertrustbundles" | "podcertificaterequests",
            "spec.signerName",
        ) => s(&["spec", "signerName"]),
        ("podcertificaterequests", "spec.podName") => s(&["spec", "podName"]),
        ("podcertificaterequests", "spec.nodeName") => s(&["spec", "nodeName"]),
        _ => None,
    }
}

fn event_field(object: &Value, field: &str) -> Option<String> {
    let first_non_empty = |paths: &[&[&str]]| {
        paths
            .iter()
            .map(|p| string_at(object, p))
            .find(|v| !v.is_empty())
            .unwrap_or_default()
    };
    let involved = |k: &str| first_non_empty(&[&["involvedObject", k], &["regarding", k]]);
    let reporting = || first_non_empty(&[&["reportingComponent"], &["reportingController"]]);
    Some(match field {
        "involvedObject.kind" => involved("kind"),
        "involvedObject.namespace" => involved("namespace"),
        "involvedObject.name" => involved("name"),
        "involvedObject.uid" => involved("uid"),
        "involvedObject.apiVersion" => involved("apiVersion"),
        "involvedObject.resourceVersion" => involved("resourceVersion"),
        "involvedObject.fieldPath" => involved("fieldPath"),
        "reason" => string_at(object, &["reason"]),
        "reportingComponent" => reporting(),
        "source" => {
            let component =
                first_non_empty(&[&["source", "component"], &["deprecatedSource", "component"]]);
            if component.is_empty() {
                reporting()
            } else {
                component
            }
        }
        "type" => string_at(object, &["type"]),
        _ => return None,
    })
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectable_view_keeps_what_selectors_read_and_skips_the_rest() {
        let pod = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web", "namespace": "default", "labels": {"app": "web", "tier": "front"},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:containers": {}}}}]
            },
            "spec": {
                "nodeName": "n1", "hostNetwork": true, "schedulerName": "default-scheduler",
                "containers": [{"name": "c", "image": "nginx", "env": [{"name": "A", "value": "1"}]}]
            },
            "status": {"phase": "Running", "podIPs": [{"ip": "10.42.0.7"}]}
        });
        let bytes = serde_json::to_vec(&pod).expect("encoding the pod");
        let view = selectable_view(&bytes).expect("a view of valid JSON");
        for field in [
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.hostNetwork",
            "spec.schedulerName",
            "status.phase",
            "status.podIP",
            "spec.restartPolicy",
        ] {
            assert_eq!(
                field_value("pods", &view, field),
                field_value("pods", &pod, field),
                "{field}"
            );
        }
        assert_eq!(
            field_value("pods", &view, "status.podIP").as_deref(),
            Some("10.42.0.7")
        );
        assert_eq!(view["metadata"]["labels"], pod["metadata"]["labels"]);
        let selector = LabelSelector::parse("app=web,tier in (front)").expect("a selector");
        assert!(selector.matches_json(view["metadata"]["labels"].as_object()));
        // Deeper containers are skipped, not decoded.
        assert_eq!(view["spec"]["containers"][0]["image"], "nginx");
        assert!(view["spec"]["containers"][0]["env"].is_null());
        assert!(view["metadata"]["managedFields"][0]["fieldsV1"].is_null());
        assert!(selectable_view(b"{\"a\":1} trailing").is_err());
    }
    use serde_json::json;

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn parse_err(s: &str) -> String {
        LabelSelector::parse(s)
            .expect_err(&format!("{s:?} should not parse"))
            .to_string()
    }

    fn lex_all(s: &str) -> Vec<Token> {
        let p = Parser::new(s);
        p.items.iter().map(|(t, _)| *t).collect()
    }

    const NAME_PART_REGEX: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const VALUE_REGEX: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

    // ----- lexer -----

    #[test]
    fn lexer_single_tokens() {
        use Token::*;
        for (s, t) in [
            ("", EndOfString),
            (",", Comma),
            ("notin", NotIn),
            ("in", In),
            ("=", Equals),
            ("==", DoubleEquals),
            (">", GreaterThan),
            ("<", LessThan),
            ("!", DoesNotExist),
            ("!=", NotEquals),
            ("(", OpenPar),
            (")", ClosedPar),
            ("~", Identifier),
            ("||", Identifier),
        ] {
            let mut l = Lexer {
                s: s.as_bytes(),
                pos: 0,
            };
            let (tok, lit) = l.lex();
            assert_eq!(tok, t, "{s:?}");
            assert_eq!(lit, s);
        }
    }

    #[test]
    fn lexer_sequences() {
        use Token::*;
        assert_eq!(
            lex_all("key in ( value1, value2 )"),
            [
                Identifier,
                In,
                OpenPar,
                Identifier,
                Comma,
                Identifier,
                ClosedPar,
                EndOfString
            ]
        );
        assert_eq!(lex_all("!key"), [DoesNotExist, Identifier, EndOfString]);
        assert_eq!(
            lex_all("== != (), = notin"),
            [
                DoubleEquals,
                NotEquals,
                OpenPar,
                ClosedPar,
                Comma,
                Equals,
                NotIn,
                EndOfString
            ]
        );
        assert_eq!(
            lex_all("key>2"),
            [Identifier, GreaterThan, Identifier, EndOfString]
        );
        // longest match, then restart: "!==" is "!=" followed by "="
        assert_eq!(lex_all("!=="), [NotEquals, Equals, EndOfString]);
        assert_eq!(lex_all("<="), [LessThan, Equals, EndOfString]);
        // a NUL byte where a token starts ends the input; inside a token it only ends the token
        assert_eq!(lex_all("a \0b=c"), [Identifier, EndOfString]);
        assert_eq!(lex_all("a\0b"), [Identifier, Identifier, EndOfString]);
    }

    // ----- label selector parsing -----

    #[test]
    fn parses_good_strings_and_restrings() {
        for (s, want) in [
            ("x=a,y=b,z=c", "x=a,y=b,z=c"),
            ("", ""),
            ("x!=a,y=b", "x!=a,y=b"),
            ("x=", "x="),
            ("x= ", "x="),
            ("x=,z= ", "x=,z="),
            ("x= ,z= ", "x=,z="),
            ("!x", "!x"),
            ("x>1", "x>1"),
            ("x>1,z<5", "x>1,z<5"),
            ("x==a", "x==a"),
            ("x in(a,b),y notin(c)", "x in (a,b),y notin (c)"),
        ] {
            let sel = LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
            assert_eq!(sel.to_string(), want, "{s:?}");
        }
    }

    #[test]
    fn canonical_form_sorts_keys_and_values() {
        let sel = LabelSelector::parse("z=1, a in (c, b, a, b), m, !n").unwrap();
        assert_eq!(sel.to_string(), "a in (a,b,c),m,!n,z=1");
        assert_eq!(
            LabelSelector::parse("x=a,a=x").unwrap().to_string(),
            LabelSelector::parse("a=x,x=a").unwrap().to_string()
        );
        let r = &sel.requirements()[0];
        assert_eq!(r.key(), "a");
        assert_eq!(r.operator(), Operator::In);
        assert_eq!(r.values(), ["a", "b", "c"]);
    }

    #[test]
    fn every_operator() {
        let cases: &[(&str, Operator, &[&str])] = &[
            ("k=v", Operator::Equals, &["v"]),
            ("k==v", Operator::DoubleEquals, &["v"]),
            ("k!=v", Operator::NotEquals, &["v"]),
            ("k in (v,w)", Operator::In, &["v", "w"]),
            ("k notin (v)", Operator::NotIn, &["v"]),
            ("k", Operator::Exists, &[]),
            ("!k", Operator::DoesNotExist, &[]),
            ("k>5", Operator::GreaterThan, &["5"]),
            ("k<5", Operator::LessThan, &["5"]),
        ];
        for (s, op, vals) in cases {
            let sel = LabelSelector::parse(s).unwrap();
            let [r] = sel.requirements() else {
                panic!("{s}")
            };
            assert_eq!(r.key(), "k");
            assert_eq!(r.operator(), *op, "{s}");
            assert_eq!(r.values(), *vals, "{s}");
            assert_eq!(sel.to_string(), *s);
        }
    }

    #[test]
    fn whitespace_rules() {
        let sel = LabelSelector::parse(" \t x \n in\r( a ,  b ) ,  y  !=  z , !  w ").unwrap();
        assert_eq!(sel.to_string(), "!w,x in (a,b),y!=z");
        assert!(LabelSelector::parse("x in(a)").is_ok());
        // other whitespace (vertical tab) is part of identifiers and fails validation
        assert!(
            parse_err("x\u{b}=a")
                .starts_with("unable to parse requirement: <nil>: Invalid value: \"x\\v\"")
        );
    }

    #[test]
    fn empty_values() {
        let one = |s: &str| {
            LabelSelector::parse(s).unwrap().requirements()[0]
                .values()
                .to_vec()
        };
        assert_eq!(one("x="), [""]);
        assert_eq!(one("x!="), [""]);
        assert_eq!(one("x=,y=a"), [""]);
        assert_eq!(one("x in ()"), [""]);
        assert_eq!(one("x in (,)"), [""]);
        assert_eq!(one("x in (,a)"), ["", "a"]);
        assert_eq!(one("x in (a,)"), ["", "a"]);
        assert_eq!(one("x in (a,,b)"), ["", "a", "b"]);
        assert_eq!(one("x notin ()"), [""]);
        assert_eq!(
            LabelSelector::parse("x in (a,,b)").unwrap().to_string(),
            "x in (,a,b)"
        );
        assert!(
            LabelSelector::parse("x=")
                .unwrap()
                .matches(&set(&[("x", "")]))
        );
        assert!(
            !LabelSelector::parse("x=")
                .unwrap()
                .matches(&set(&[("x", "y")]))
        );
    }

    #[test]
    fn in_and_notin_are_contextual_keywords() {
        let sel = LabelSelector::parse("notin=in").unwrap();
        assert!(sel.matches(&set(&[("notin", "in")])));
        let sel = LabelSelector::parse("in in (in, notin)").unwrap();
        assert_eq!(sel.to_string(), "in in (in,notin)");
        assert!(sel.matches(&set(&[("in", "notin")])));
        assert!(
            LabelSelector::parse("in")
                .unwrap()
                .matches(&set(&[("in", "")]))
        );
        assert_eq!(
            parse_err("x in in"),
            "unable to parse requirement: found 'in' expected: '('"
        );
    }

    #[test]
    fn syntax_errors() {
        let ops = "in, notin, =, ==, !=, gt, lt";
        let cases: Vec<(&str, String)> = vec![
            (
                ",",
                "found ',', expected: !, identifier, or 'end of string'".into(),
            ),
            (
                "=a",
                "found '=', expected: !, identifier, or 'end of string'".into(),
            ),
            ("x,", "found '', expected: identifier after ','".into()),
            ("x,,y", "found ',', expected: identifier after ','".into()),
            (
                "x=a y=b",
                "found 'y', expected: ',' or 'end of string'".into(),
            ),
            (
                "x==a==b",
                "found '==', expected: ',' or 'end of string'".into(),
            ),
            ("!x=a", "found '=', expected: ',' or 'end of string'".into()),
            (
                "x y",
                format!("unable to parse requirement: found 'y', expected: {ops}"),
            ),
            (
                "x !y",
                format!("unable to parse requirement: found '!', expected: {ops}"),
            ),
            (
                "x (a)",
                format!("unable to parse requirement: found '(', expected: {ops}"),
            ),
            (
                "!",
                "unable to parse requirement: found '', expected: identifier".into(),
            ),
            (
                "!(",
                "unable to parse requirement: found '(', expected: identifier".into(),
            ),
            (
                "!!x",
                "unable to parse requirement: found '!', expected: identifier".into(),
            ),
            (
                "x in",
                "unable to parse requirement: found '' expected: '('".into(),
            ),
            (
                "x in a",
                "unable to parse requirement: found 'a' expected: '('".into(),
            ),
            (
                "x in (",
                "unable to parse requirement: found '', expected: ',', ')' or identifier".into(),
            ),
            (
                "x in (=)",
                "unable to parse requirement: found '=', expected: ',', ')' or identifier".into(),
            ),
            (
                "x in (a",
                "unable to parse requirement: found '', expected: ',' or ')'".into(),
            ),
            (
                "x in (a b)",
                "unable to parse requirement: found 'b', expected: ',' or ')'".into(),
            ),
            (
                "x in (a,=)",
                "unable to parse requirement: found '=', expected: ',', or identifier".into(),
            ),
            (
                "x=(",
                "unable to parse requirement: found '(', expected: identifier".into(),
            ),
            (
                "x=)",
                "unable to parse requirement: found ')', expected: identifier".into(),
            ),
        ];
        for (s, want) in cases {
            assert_eq!(parse_err(s), want, "{s:?}");
        }
        assert!(matches!(
            LabelSelector::parse(","),
            Err(SelectorError::LabelSelectorParse(_))
        ));
    }

    #[test]
    fn invalid_keys() {
        assert_eq!(
            parse_err("*bar"),
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"*bar\": {NAME_PART_REGEX}"
            )
        );
        assert_eq!(
            parse_err("app:monolith"),
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"app:monolith\": {NAME_PART_REGEX}"
            )
        );
        assert_eq!(
            parse_err("app.kubernetes_io/name=x"),
            "unable to parse requirement: <nil>: Invalid value: \"app.kubernetes_io/name\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
        assert_eq!(
            parse_err("a/b/c"),
            "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        );
        assert_eq!(
            parse_err("/a"),
            "unable to parse requirement: <nil>: Invalid value: \"/a\": prefix part must be non-empty"
        );
        assert_eq!(
            parse_err("a/"),
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"a/\": name part must be non-empty; {NAME_PART_REGEX}"
            )
        );
        let long = "a".repeat(64);
        assert_eq!(
            parse_err(&long),
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"{long}\": name part must be no more than 63 bytes"
            )
        );
        assert!(LabelSelector::parse(&"a".repeat(63)).is_ok());
        let long_prefix = format!("{}/a", "a".repeat(254));
        assert!(parse_err(&long_prefix).ends_with(": prefix part must be no more than 253 bytes"));
        assert!(LabelSelector::parse("example.com/My_Name.x-1").is_ok());
        assert!(LabelSelector::parse("Example.com/x").is_err());
        assert!(LabelSelector::parse("-a").is_err());
        assert!(LabelSelector::parse("a-").is_err());
        assert!(is_valid_label_key("k8s.io/app"));
        assert!(!is_valid_label_key(""));
        // non-ASCII keys are quoted like Go's %q
        assert_eq!(
            parse_err("é"),
            format!("unable to parse requirement: <nil>: Invalid value: \"é\": {NAME_PART_REGEX}")
        );
    }

    #[test]
    fn invalid_values() {
        assert_eq!(
            parse_err("x=a||y=b"),
            format!(
                "unable to parse requirement: values[0][x]: Invalid value: \"a||y\": {VALUE_REGEX}"
            )
        );
        assert_eq!(
            parse_err("x in (b, -a)"),
            format!(
                "unable to parse requirement: values[0][x]: Invalid value: \"-a\": {VALUE_REGEX}"
            )
        );
        assert_eq!(
            parse_err("x in (-b, -a)"),
            format!(
                "unable to parse requirement: [values[0][x]: Invalid value: \"-a\": {VALUE_REGEX}, values[1][x]: Invalid value: \"-b\": {VALUE_REGEX}]"
            )
        );
        let long = "v".repeat(64);
        assert_eq!(
            parse_err(&format!("x={long}")),
            format!(
                "unable to parse requirement: values[0][x]: Invalid value: \"{long}\": must be no more than 63 bytes"
            )
        );
        assert!(LabelSelector::parse(&format!("x={}", "v".repeat(63))).is_ok());
        assert!(is_valid_label_value(""));
        assert!(!is_valid_label_value("a b"));
    }

    #[test]
    fn gt_lt() {
        assert_eq!(
            parse_err("x<a"),
            "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer"
        );
        // negative numbers are integers but not valid label values
        assert_eq!(
            parse_err("x>-1"),
            format!(
                "unable to parse requirement: values[0][x]: Invalid value: \"-1\": {VALUE_REGEX}"
            )
        );
        let gt = LabelSelector::parse("x>1").unwrap();
        assert!(gt.matches(&set(&[("x", "2")])));
        assert!(!gt.matches(&set(&[("x", "1")])));
        assert!(!gt.matches(&set(&[("x", "0")])));
        assert!(!gt.matches(&set(&[("x", "abc")])));
        assert!(!gt.matches(&set(&[("x", "")])));
        assert!(gt.matches(&set(&[("x", "+5")])));
        assert!(!gt.matches(&set(&[])));
        let lt = LabelSelector::parse("x<1").unwrap();
        assert!(lt.matches(&set(&[("x", "0")])));
        assert!(lt.matches(&set(&[("x", "-3")])));
        assert!(!lt.matches(&set(&[("x", "2")])));
    }

    #[test]
    fn matching() {
        let m = |s: &str, l: &[(&str, &str)]| LabelSelector::parse(s).unwrap().matches(&set(l));
        assert!(m("", &[("x", "y")]));
        assert!(m("x=y", &[("x", "y")]));
        assert!(m("x==y", &[("x", "y")]));
        assert!(m("x=y,z=w", &[("x", "y"), ("z", "w")]));
        assert!(m("x!=y,z!=w", &[("x", "z"), ("z", "a")]));
        assert!(m("x!=y", &[]));
        assert!(m("x", &[("x", "z")]));
        assert!(m("!x", &[("y", "z")]));
        assert!(m("x in (a,b)", &[("x", "b")]));
        assert!(m("x notin (a,b)", &[("x", "c")]));
        assert!(m("x notin (a,b)", &[]));
        assert!(!m("x=z", &[]));
        assert!(!m("x=y", &[("x", "z")]));
        assert!(!m("x=y,z=w", &[("x", "w"), ("z", "w")]));
        assert!(!m("x!=y,z!=w", &[("x", "z"), ("z", "w")]));
        assert!(!m("x", &[("y", "z")]));
        assert!(!m("!x", &[("x", "z")]));
        assert!(!m("x in (a,b)", &[]));
        assert!(!m("x in (a,b)", &[("x", "c")]));
        assert!(!m("x notin (a,b)", &[("x", "a")]));
        assert!(!m(
            "foo=bar,foobar=bar,baz=blah",
            &[("foo", "bar"), ("baz", "blah")]
        ));
    }

    #[test]
    fn everything_nothing_and_exact_match() {
        let all = LabelSelector::everything();
        assert!(all.is_empty() && all.matches(&set(&[])) && !all.matches_nothing());
        assert_eq!(LabelSelector::parse("").unwrap(), all);
        let none = LabelSelector::nothing();
        assert!(!none.is_empty() && none.matches_nothing());
        assert!(!none.matches(&set(&[("a", "b")])));
        assert!(!none.matches_json(None));
        assert_eq!(none.to_string(), "");

        let sel = LabelSelector::parse("a=1,b in (2),c in (3,4),d!=5").unwrap();
        assert_eq!(sel.requires_exact_match("a"), Some("1"));
        assert_eq!(sel.requires_exact_match("b"), Some("2"));
        assert_eq!(sel.requires_exact_match("c"), None);
        assert_eq!(sel.requires_exact_match("d"), None);
        assert_eq!(sel.requires_exact_match("e"), None);
        assert_eq!("a=1".parse::<LabelSelector>().unwrap().to_string(), "a=1");
    }

    #[test]
    fn matches_json_labels() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "fe", "n": 3}}});
        let labels = obj["metadata"]["labels"].as_object();
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches_json(labels);
        assert!(m("app=web"));
        assert!(m("app in (web,api),tier"));
        assert!(m("!missing"));
        assert!(m("n"));
        assert!(!m("n=3"));
        assert!(m("n!=3"));
        assert!(!m("app=api"));
        assert!(LabelSelector::parse("!app").unwrap().matches_json(None));
        assert!(!LabelSelector::parse("app").unwrap().matches_json(None));
        assert!(
            LabelSelector::parse("tier=fe")
                .unwrap()
                .matches_object(&obj)
        );
        assert!(
            !LabelSelector::parse("tier=fe")
                .unwrap()
                .matches_object(&json!({}))
        );
    }

    // ----- JSON label selectors -----

    #[test]
    fn metav1_label_selector() {
        let sel = from_label_selector_json(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["fe", "be"]},
                {"key": "env", "operator": "NotIn", "values": ["dev"]},
                {"key": "track", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist", "values": []}
            ]
        }))
        .unwrap();
        assert_eq!(
            sel.to_string(),
            "app=web,env notin (dev),!legacy,tier in (be,fe),track"
        );
        assert!(sel.matches(&set(&[("app", "web"), ("tier", "fe"), ("track", "x")])));
        assert!(!sel.matches(&set(&[("app", "web"), ("tier", "fe")])));
        assert!(!sel.matches(&set(&[
            ("app", "web"),
            ("tier", "fe"),
            ("track", ""),
            ("env", "dev")
        ])));
        assert!(!sel.matches(&set(&[
            ("app", "web"),
            ("tier", "fe"),
            ("track", ""),
            ("legacy", "")
        ])));
    }

    #[test]
    fn metav1_empty_and_null() {
        for v in [
            json!({}),
            json!({"matchLabels": {}}),
            json!({"matchExpressions": []}),
            json!({"matchLabels": null, "matchExpressions": null}),
        ] {
            let sel = LabelSelector::from_label_selector_json(&v).unwrap();
            assert!(sel.is_empty(), "{v}");
            assert!(sel.matches(&set(&[("any", "thing")])));
        }
        let sel = LabelSelector::from_label_selector_json(&Value::Null).unwrap();
        assert!(sel.matches_nothing());
        assert!(!sel.matches(&set(&[])));
    }

    #[test]
    fn metav1_errors() {
        let err = |v: Value| from_label_selector_json(&v).unwrap_err().to_string();
        assert_eq!(
            err(json!({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]})),
            "\"Equals\" is not a valid label selector operator"
        );
        assert_eq!(
            err(json!({"matchExpressions": [{"key": "a", "operator": "In"}]})),
            "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"
        );
        assert_eq!(
            err(
                json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["b", "<c>"]}]})
            ),
            format!(
                "[values: Invalid value: [\"b\",\"\\u003cc\\u003e\"]: values set must be empty for exists and does not exist, values[1][a]: Invalid value: \"<c>\": {VALUE_REGEX}]"
            )
        );
        assert_eq!(
            err(json!({"matchLabels": {"a b": "c"}})),
            format!("key: Invalid value: \"a b\": {NAME_PART_REGEX}")
        );
        assert_eq!(
            err(json!({"matchLabels": {"a": "-"}})),
            format!("values[0][a]: Invalid value: \"-\": {VALUE_REGEX}")
        );
        assert!(matches!(
            from_label_selector_json(&json!({"matchLabels": {"a": 1}})),
            Err(SelectorError::MalformedLabelSelector(_))
        ));
        assert!(matches!(
            from_label_selector_json(&json!([])),
            Err(SelectorError::MalformedLabelSelector(_))
        ));
        assert!(matches!(
            from_label_selector_json(
                &json!({"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]})
            ),
            Err(SelectorError::MalformedLabelSelector(_))
        ));
    }

    #[test]
    fn requirement_new_errors() {
        assert_eq!(
            Requirement::new("a", Operator::Equals, vec![])
                .unwrap_err()
                .to_string(),
            "values: Invalid value: null: exact-match compatibility requires one single value"
        );
        assert_eq!(
            Requirement::new("a", Operator::GreaterThan, vec!["1".into(), "x".into()])
                .unwrap_err()
                .to_string(),
            "[values: Invalid value: [\"1\",\"x\"]: for 'Gt', 'Lt' operators, exactly one value is required, values[1]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer]"
        );
        assert!(Requirement::new("a", Operator::In, vec!["x".into()]).is_ok());
        let r = Requirement::new("a", Operator::In, vec!["x".into(), "y".into()]).unwrap();
        assert!(r.matches(&set(&[("a", "y")])));
    }

    #[test]
    fn service_style_map_selectors() {
        let sel = from_map(&set(&[("b", "2"), ("a", "1")]));
        assert_eq!(sel.to_string(), "a=1,b=2");
        assert!(sel.matches(&set(&[("a", "1"), ("b", "2"), ("c", "3")])));
        assert!(!sel.matches(&set(&[("a", "1")])));
        assert!(LabelSelector::from_map(&BTreeMap::new()).is_empty());
        let sel = LabelSelector::from_map_json(&json!({"app": "web"})).unwrap();
        assert!(sel.matches(&set(&[("app", "web")])));
        assert!(
            LabelSelector::from_map_json(&Value::Null)
                .unwrap()
                .matches_nothing()
        );
        assert!(LabelSelector::from_map_json(&json!({"app": true})).is_err());
        assert!(LabelSelector::from_map_json(&json!("app=web")).is_err());
    }

    // ----- field selectors -----

    fn fields(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: BTreeMap<String, String> = set(pairs);
        move |k| m.get(k).cloned()
    }

    #[test]
    fn field_selector_parse_and_display() {
        let sel = FieldSelector::parse("spec.nodeName=n1,status.phase!=Running,metadata.name==a")
            .unwrap();
        assert_eq!(
            sel.to_string(),
            "metadata.name=a,spec.nodeName=n1,status.phase!=Running"
        );
        let reqs = sel.requirements();
        assert_eq!(reqs.len(), 3);
        assert_eq!(reqs[0].field, "metadata.name");
        assert_eq!(reqs[0].operator, FieldOperator::Equals);
        assert_eq!(reqs[2].operator, FieldOperator::NotEquals);
        assert_eq!(reqs[2].value, "Running");
        assert_eq!(sel.requires_exact_match("spec.nodeName"), Some("n1"));
        assert_eq!(sel.requires_exact_match("status.phase"), None);
        assert_eq!(sel.requires_exact_match("other"), None);
        assert!(FieldSelector::parse("").unwrap().is_empty());
        assert!(FieldSelector::parse(",,").unwrap().is_empty());
        assert!(FieldSelector::parse("=").unwrap().is_empty());
        assert!(FieldSelector::parse("==,!=").unwrap().is_empty());
        assert_eq!(FieldSelector::parse("a=").unwrap().to_string(), "a=");
        assert_eq!(FieldSelector::parse("=b").unwrap().to_string(), "=b");
        // the field part is not unescaped and may contain anything up to the operator
        assert_eq!(
            FieldSelector::parse(" a b = c ").unwrap().requirements()[0].field,
            " a b "
        );
        assert_eq!(
            FieldSelector::parse("a=!b").unwrap().requirements()[0].value,
            "!b"
        );
        assert_eq!(
            FieldSelector::parse("a!b=c").unwrap().requirements()[0].field,
            "a!b"
        );
        assert_eq!(
            FieldSelector::one_term_equal("a", "b,c").to_string(),
            "a=b\\,c"
        );
        assert_eq!("x=1".parse::<FieldSelector>().unwrap().to_string(), "x=1");
    }

    #[test]
    fn field_selector_escaping() {
        let value = |s: &str| {
            FieldSelector::parse(s).unwrap().requirements()[0]
                .value
                .clone()
        };
        assert_eq!(value(r"a=b\,c"), "b,c");
        assert_eq!(value(r"a=b\=c"), "b=c");
        assert_eq!(value(r"a=b\\c"), r"b\c");
        assert_eq!(value(r"a=b\\"), r"b\");
        assert_eq!(value(r"a=\,\,"), ",,");
        let sel = FieldSelector::parse(r"a=x\,y\=z\\w,b=1").unwrap();
        assert_eq!(sel.requirements().len(), 2);
        assert_eq!(sel.to_string(), r"a=x\,y\=z\\w,b=1");
        assert_eq!(FieldSelector::parse(&sel.to_string()).unwrap(), sel);
        assert_eq!(escape_field_value(r"a\b,c=d!e"), r"a\\b\,c\=d!e");
        assert_eq!(unescape_field_value(r"a\\b\,c\=d!e").unwrap(), r"a\b,c=d!e");
        assert_eq!(unescape_field_value("plain").unwrap(), "plain");

        let err = |s: &str| FieldSelector::parse(s).unwrap_err().to_string();
        assert_eq!(
            err(r"a=b\!"),
            r"invalid field selector: invalid escape sequence: \!"
        );
        assert_eq!(
            err(r"a=b\n"),
            r"invalid field selector: invalid escape sequence: \n"
        );
        assert_eq!(
            err(r"a=b\"),
            r"invalid field selector: invalid escape sequence: \"
        );
        assert_eq!(
            err("a=b=c"),
            "invalid field selector: unescaped character in value: 61"
        );
        assert_eq!(
            unescape_field_value("a,b").unwrap_err().to_string(),
            "invalid field selector: unescaped character in value: 44"
        );
        assert_eq!(
            err("a=b,cd"),
            "invalid selector: 'a=b,cd'; can't understand 'cd'"
        );
        assert_eq!(
            err("abc"),
            "invalid selector: 'abc'; can't understand 'abc'"
        );
        // terms are checked in sorted order
        assert_eq!(err("z,a"), "invalid selector: 'z,a'; can't understand 'a'");
    }

    #[test]
    fn field_selector_matching() {
        let sel = FieldSelector::parse("status.phase!=Running,spec.restartPolicy=Always").unwrap();
        assert!(sel.matches(fields(&[
            ("status.phase", "Pending"),
            ("spec.restartPolicy", "Always")
        ])));
        assert!(!sel.matches(fields(&[
            ("status.phase", "Running"),
            ("spec.restartPolicy", "Always")
        ])));
        assert!(!sel.matches(fields(&[("status.phase", "Pending")])));
        // absent fields read as ""
        assert!(FieldSelector::parse("x=").unwrap().matches(fields(&[])));
        assert!(FieldSelector::parse("x!=a").unwrap().matches(fields(&[])));
        assert!(!FieldSelector::parse("x=a").unwrap().matches(fields(&[])));
        assert!(FieldSelector::everything().matches(fields(&[])));
    }

    // ----- field extraction -----

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p1", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"nodeName": "node-a", "restartPolicy": "Always", "schedulerName": "default-scheduler",
                     "serviceAccountName": "sa", "hostNetwork": true},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}, {"ip": "fd00::5"}],
                       "nominatedNodeName": "node-b"}
        })
    }

    #[test]
    fn pod_fields() {
        let p = pod();
        let v = |f: &str| field_value("pods", &p, f);
        assert_eq!(v("metadata.name").as_deref(), Some("p1"));
        assert_eq!(v("metadata.namespace").as_deref(), Some("default"));
        assert_eq!(v("spec.nodeName").as_deref(), Some("node-a"));
        assert_eq!(v("spec.host").as_deref(), Some("node-a"));
        assert_eq!(v("spec.restartPolicy").as_deref(), Some("Always"));
        assert_eq!(
            v("spec.schedulerName").as_deref(),
            Some("default-scheduler")
        );
        assert_eq!(v("spec.serviceAccountName").as_deref(), Some("sa"));
        assert_eq!(v("spec.hostNetwork").as_deref(), Some("true"));
        assert_eq!(v("status.phase").as_deref(), Some("Running"));
        assert_eq!(v("status.podIP").as_deref(), Some("10.0.0.5"));
        assert_eq!(v("status.podIPs"), None);
        assert_eq!(v("status.nominatedNodeName").as_deref(), Some("node-b"));
        assert_eq!(v("spec.nodeSelector"), None);

        let bare = json!({"metadata": {"name": "q"}});
        let b = |f: &str| field_value("pods", &bare, f);
        assert_eq!(b("spec.hostNetwork").as_deref(), Some("false"));
        assert_eq!(b("spec.nodeName").as_deref(), Some(""));
        assert_eq!(b("status.podIP").as_deref(), Some(""));
        assert_eq!(b("metadata.namespace").as_deref(), Some(""));
        let legacy = json!({"status": {"podIP": "1.2.3.4", "podIPs": [{"ip": "5.6.7.8"}]}});
        assert_eq!(
            field_value("pods", &legacy, "status.podIP").as_deref(),
            Some("1.2.3.4")
        );

        let m = |s: &str| FieldSelector::parse(s).unwrap().matches_object("pods", &p);
        assert!(m("spec.nodeName=node-a"));
        assert!(m("spec.hostNetwork=true,status.phase=Running"));
        assert!(!m("spec.hostNetwork=false"));
        assert!(m("status.podIPs="));
        assert!(!m("status.podIPs=10.0.0.5"));
        assert!(m("metadata.namespace!=kube-system"));
    }

    #[test]
    fn event_fields() {
        let e = json!({
            "metadata": {"name": "e1", "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "namespace": "ns", "name": "p1", "uid": "u-1",
                               "apiVersion": "v1", "resourceVersion": "42", "fieldPath": "spec.containers{c}"},
            "reason": "Pulled", "type": "Normal", "source": {"component": "kubelet"},
            "reportingComponent": "kubelet-rc"
        });
        let v = |f: &str| field_value("events", &e, f);
        assert_eq!(v("involvedObject.kind").as_deref(), Some("Pod"));
        assert_eq!(v("involvedObject.namespace").as_deref(), Some("ns"));
        assert_eq!(v("involvedObject.name").as_deref(), Some("p1"));
        assert_eq!(v("involvedObject.uid").as_deref(), Some("u-1"));
        assert_eq!(v("involvedObject.apiVersion").as_deref(), Some("v1"));
        assert_eq!(v("involvedObject.resourceVersion").as_deref(), Some("42"));
        assert_eq!(
            v("involvedObject.fieldPath").as_deref(),
            Some("spec.containers{c}")
        );
        assert_eq!(v("reason").as_deref(), Some("Pulled"));
        assert_eq!(v("type").as_deref(), Some("Normal"));
        assert_eq!(v("source").as_deref(), Some("kubelet"));
        assert_eq!(v("reportingComponent").as_deref(), Some("kubelet-rc"));
        assert_eq!(v("metadata.namespace").as_deref(), Some("ns"));
        assert_eq!(v("message"), None);

        // source falls back to reportingComponent; events.k8s.io names are understood
        let e2 = json!({"regarding": {"kind": "Node", "name": "n"}, "reportingController": "ctl"});
        assert_eq!(field_value("events", &e2, "source").as_deref(), Some("ctl"));
        assert_eq!(
            field_value("events", &e2, "reportingComponent").as_deref(),
            Some("ctl")
        );
        assert_eq!(
            field_value("events", &e2, "involvedObject.kind").as_deref(),
            Some("Node")
        );
        assert_eq!(field_value("events", &e2, "reason").as_deref(), Some(""));

        let sel = FieldSelector::parse("involvedObject.kind=Pod,involvedObject.name=p1").unwrap();
        assert!(sel.matches_object("events", &e));
        assert!(!sel.matches_object("events", &e2));
    }

    #[test]
    fn secret_node_namespace_and_other_fields() {
        let secret =
            json!({"metadata": {"name": "s", "namespace": "ns"}, "type": "kubernetes.io/tls"});
        assert_eq!(
            field_value("secrets", &secret, "type").as_deref(),
            Some("kubernetes.io/tls")
        );
        assert!(
            FieldSelector::parse("type=kubernetes.io/tls")
                .unwrap()
                .matches_object("secrets", &secret)
        );

        let node = json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true}});
        assert_eq!(
            field_value("nodes", &node, "spec.unschedulable").as_deref(),
            Some("true")
        );
        assert_eq!(
            field_value("nodes", &json!({}), "spec.unschedulable").as_deref(),
            Some("false")
        );
        assert_eq!(
            field_value("nodes", &node, "metadata.name").as_deref(),
            Some("n1")
        );
        assert_eq!(field_value("nodes", &node, "metadata.namespace"), None);

        let ns = json!({"metadata": {"name": "kube-system"}, "status": {"phase": "Active"}});
        assert_eq!(
            field_value("namespaces", &ns, "status.phase").as_deref(),
            Some("Active")
        );

        let svc = json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "10.43.0.1", "type": "ClusterIP"}});
        assert_eq!(
            field_value("services", &svc, "spec.clusterIP").as_deref(),
            Some("10.43.0.1")
        );
        assert_eq!(
            field_value("services", &svc, "spec.type").as_deref(),
            Some("ClusterIP")
        );

        let rs = json!({"status": {"replicas": 3}});
        assert_eq!(
            field_value("replicasets", &rs, "status.replicas").as_deref(),
            Some("3")
        );
        assert_eq!(
            field_value("replicationcontrollers", &json!({}), "status.replicas").as_deref(),
            Some("0")
        );

        let job = json!({"status": {"succeeded": 2}});
        assert_eq!(
            field_value("jobs", &job, "status.successful").as_deref(),
            Some("2")
        );
        assert_eq!(
            field_value("jobs", &json!({}), "status.successful").as_deref(),
            Some("0")
        );

        let csr = json!({"metadata": {"name": "c"}, "spec": {"signerName": "kubernetes.io/kubelet-serving"}});
        assert_eq!(
            field_value("certificatesigningrequests", &csr, "spec.signerName").as_deref(),
            Some("kubernetes.io/kubelet-serving")
        );

        let cm = json!({"metadata": {"name": "c", "namespace": "ns"}, "data": {"k": "v"}});
        assert_eq!(
            field_value("configmaps", &cm, "metadata.namespace").as_deref(),
            Some("ns")
        );
        assert_eq!(field_value("configmaps", &cm, "data.k"), None);
        let pv = json!({"metadata": {"name": "pv1"}});
        assert_eq!(
            field_value("persistentvolumes", &pv, "metadata.namespace"),
            None
        );
        assert!(
            FieldSelector::parse("metadata.namespace=")
                .unwrap()
                .matches_object("persistentvolumes", &pv)
        );
        assert!(
            !FieldSelector::parse("metadata.namespace=x")
                .unwrap()
                .matches_object("persistentvolumes", &pv)
        );
    }

    // ----- supported fields -----

    #[test]
    fn supported_field_tables() {
        assert_eq!(supported_fields("pods").len(), 11);
        assert!(supported_fields("pods").contains(&"status.podIPs"));
        assert_eq!(supported_fields("events").len(), 13);
        assert_eq!(
            supported_fields("secrets"),
            ["metadata.name", "metadata.namespace", "type"]
        );
        assert_eq!(
            supported_fields("nodes"),
            ["metadata.name", "spec.unschedulable"]
        );
        assert_eq!(
            supported_fields("namespaces"),
            ["metadata.name", "status.phase"]
        );
        assert_eq!(
            supported_fields("replicationcontrollers"),
            ["metadata.name", "metadata.namespace", "status.replicas"]
        );
        assert_eq!(
            supported_fields("jobs"),
            ["metadata.name", "metadata.namespace", "status.successful"]
        );
        assert_eq!(
            supported_fields("certificatesigningrequests"),
            ["metadata.name", "spec.signerName"]
        );
        assert_eq!(
            supported_fields("services"),
            [
                "metadata.name",
                "metadata.namespace",
                "spec.clusterIP",
                "spec.type"
            ]
        );
        for r in [
            "replicasets",
            "persistentvolumeclaims",
            "persistentvolumes",
            "serviceaccounts",
            "endpoints",
            "configmaps",
            "deployments",
            "widgets",
        ] {
            assert_eq!(
                supported_fields(r),
                ["metadata.name", "metadata.namespace"],
                "{r}"
            );
        }
        // every field the table advertises can be extracted
        for r in [
            "pods",
            "events",
            "secrets",
            "nodes",
            "namespaces",
            "services",
            "replicationcontrollers",
            "jobs",
            "certificatesigningrequests",
        ] {
            for f in supported_fields(r) {
                if (r, *f) != ("pods", "status.podIPs") {
                    assert!(field_value(r, &json!({}), f).is_some(), "{r} {f}");
                }
            }
        }
    }

    #[test]
    fn unsupported_field_errors() {
        let check = |r: &str, s: &str| check_supported(r, &FieldSelector::parse(s).unwrap());
        assert!(
            check(
                "pods",
                "spec.nodeName=a,status.phase!=Running,metadata.name=x"
            )
            .is_ok()
        );
        assert!(check("pods", "").is_ok());
        assert_eq!(
            check("pods", "spec.foo=a").unwrap_err().to_string(),
            "field label not supported: spec.foo"
        );
        assert_eq!(
            check("nodes", "metadata.namespace=a")
                .unwrap_err()
                .to_string(),
            "field label not supported: metadata.namespace"
        );
        assert_eq!(
            check("namespaces", "metadata.namespace=a")
                .unwrap_err()
                .to_string(),
            "field label not supported: metadata.namespace"
        );
        assert_eq!(
            check("replicasets", "status.replicas=0")
                .unwrap_err()
                .to_string(),
            "\"status.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        assert_eq!(
            check("configmaps", "foo.bar=baz").unwrap_err().to_string(),
            "\"foo.bar\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        assert_eq!(
            check("jobs", "status.failed=1").unwrap_err().to_string(),
            "field label \"status.failed\" not supported for Job"
        );
        assert_eq!(
            check("widgets", "=x").unwrap_err().to_string(),
            "\"\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        // first unsupported term in sorted order is reported
        let err = check("secrets", "z.b=1,a.b=2,type=x").unwrap_err();
        assert_eq!(
            err,
            SelectorError::FieldLabelNotSupported {
                field: "a.b".into(),
                message: "field label not supported: a.b".into()
            }
        );
        assert!(check("persistentvolumes", "metadata.namespace=x").is_ok());
    }

    #[test]
    fn conversion_rewrites_legacy_pod_field() {
        let sel = FieldSelector::parse("spec.host=n1").unwrap();
        let converted = convert_field_selector("pods", &sel).unwrap();
        assert_eq!(converted.to_string(), "spec.nodeName=n1");
        assert_eq!(converted.requires_exact_match("spec.nodeName"), Some("n1"));
        assert!(check_supported("pods", &sel).is_ok());
        assert!(check_supported("nodes", &sel).is_err());
    }

    #[test]
    fn go_quoting() {
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(
            go_quote("\u{0}\u{7f}\t\u{a0}é😀"),
            r#""\x00\x7f\t\u00a0é😀""#
        );
        assert_eq!(
            go_json_string("a<b>&\"\n\u{1}"),
            r#""a\u003cb\u003e\u0026\"\n\u0001""#
        );
    }
}
