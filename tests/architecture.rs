//! The module boundaries of ARCHITECTURE.md, checked on the source text of `src/`.
//!
//! No build of the crate is involved: every `.rs` file under `src/` is read as text, its
//! comments and string and character literals are blanked (line numbers kept), and the
//! paths it names are collected: `use` trees expanded (`use crate::{a, b::c}` names
//! `crate::a` and `crate::b::c`) and every other `a::b::c` in the code. Paths that start
//! with `crate`, `k3rs`, `super` or `self` are resolved against the file's own module, so
//! `super::super::store` from `src/scheduler/framework.rs` is caught as well as
//! `crate::store`. Each rule collects every offending `file:line` and fails once with the
//! full list.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::sync::OnceLock;

/// One source file under `src/`.
struct Source {
    /// Relative to the crate root, with `/` separators: `src/scheduler/framework.rs`.
    path: String,
    /// The module the file is: `src/scheduler/framework.rs` is `[scheduler, framework]`,
    /// `src/scheduler/mod.rs` is `[scheduler]`, `src/lib.rs` is `[]`.
    module: Vec<String>,
    text: String,
    /// Every path the code names, with the line it is on.
    paths: Vec<PathRef>,
}

impl Source {
    fn is_under(&self, dir: &str) -> bool {
        self.path.starts_with(&format!("src/{dir}/"))
    }
}

#[derive(Debug)]
struct PathRef {
    segments: Vec<String>,
    line: usize,
}

impl PathRef {
    fn text(&self) -> String {
        self.segments.join("::")
    }

    /// The path from the crate root when it starts with `crate`, `k3rs`, `super` or `self`;
    /// `None` for paths into other crates or through local names.
    fn resolve(&self, module: &[String]) -> Option<Vec<String>> {
        let mut base: Vec<String> = match self.segments.first()?.as_str() {
            "crate" | "k3rs" => Vec::new(),
            "super" | "self" => module.to_vec(),
            _ => return None,
        };
        let mut rest = self.segments.iter().skip(1).peekable();
        if self.segments[0] == "super" {
            base.pop();
            while rest.next_if(|s| *s == "super").is_some() {
                base.pop();
            }
        }
        base.extend(rest.filter(|s| *s != "self").cloned());
        Some(base)
    }
}

struct Violation {
    file: String,
    line: usize,
    detail: String,
}

fn sources() -> &'static [Source] {
    static SOURCES: OnceLock<Vec<Source>> = OnceLock::new();
    SOURCES.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        walk(&root.join("src"), &mut files);
        files.sort();
        files
            .iter()
            .map(|file| {
                let path = file
                    .strip_prefix(root)
                    .expect("under the crate root")
                    .to_string_lossy()
                    .replace('\\', "/");
                let text = fs::read_to_string(file).expect("readable source");
                let paths = named_paths(&tokens(&blank_comments_and_literals(&text)));
                Source {
                    module: module_of(&path),
                    path,
                    text,
                    paths,
                }
            })
            .collect()
    })
}

fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).expect("readable directory") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            walk(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

fn module_of(path: &str) -> Vec<String> {
    let inner = path.trim_start_matches("src/").trim_end_matches(".rs");
    let mut module: Vec<String> = inner.split('/').map(str::to_string).collect();
    if matches!(
        module.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        module.pop();
    }
    module
}

/// The code with comments, string literals and character literals replaced by spaces
/// (newlines kept), so only code is left at its original lines and columns.
fn blank_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    // Copies `chars[from..to]` as blanks, keeping newlines.
    let blank = |out: &mut String, from: usize, to: usize| {
        for &c in &chars[from..to.min(chars.len())] {
            out.push(if c == '\n' { '\n' } else { ' ' });
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let start = i;
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(end) = raw_string_end(&chars, i) {
            i = end;
        } else if c == '"' || (c == 'b' && next == Some('"')) {
            i += if c == 'b' { 2 } else { 1 };
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if let Some(end) = char_literal_end(&chars, i) {
            i = end;
        } else {
            out.push(c);
            i += 1;
            continue;
        }
        blank(&mut out, start, i);
    }
    out
}

/// Where a raw string literal (`r"…"`, `r#"…"#`, `br"…"`) starting at `i` ends.
fn raw_string_end(chars: &[char], i: usize) -> Option<usize> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    if i > 0 && is_ident(chars[i - 1]) {
        return None;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = chars[j..].iter().take_while(|&&c| c == '#').count();
    j += hashes;
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < chars.len() {
        if chars[j] == '"'
            && chars[j + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == '#')
                .count()
                == hashes
        {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(chars.len())
}

/// Where a character literal (`'a'`, `'\n'`, `b'x'`) starting at `i` ends; `None` for a
/// lifetime or label (`'a`, `'static`).
fn char_literal_end(chars: &[char], i: usize) -> Option<usize> {
    let quote = if chars[i] == 'b' { i + 1 } else { i };
    if chars.get(quote) != Some(&'\'') || (quote > i && i > 0 && chars[i - 1].is_alphanumeric()) {
        return None;
    }
    if chars.get(quote + 1) == Some(&'\\') {
        // The escaped character itself may be a quote (`'\''`): look after it.
        let close = chars.get(quote + 3..)?.iter().position(|&c| c == '\'')?;
        return Some(quote + 3 + close + 1);
    }
    (chars.get(quote + 2) == Some(&'\'')).then_some(quote + 3)
}

#[derive(Debug, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Star,
    Other,
}

fn tokens(code: &str) -> Vec<(Tok, usize)> {
    let mut out = Vec::new();
    for (index, line) in code.lines().enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let tok = if c.is_alphabetic() || c == '_' {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push((Tok::Ident(chars[start..i].iter().collect()), index + 1));
                continue;
            } else if c == ':' && chars.get(i + 1) == Some(&':') {
                i += 1;
                Tok::PathSep
            } else if c.is_whitespace() {
                i += 1;
                continue;
            } else {
                match c {
                    '{' => Tok::Open,
                    '}' => Tok::Close,
                    ',' => Tok::Comma,
                    '*' => Tok::Star,
                    _ => Tok::Other,
                }
            };
            out.push((tok, index + 1));
            i += 1;
        }
    }
    out
}

/// Every path the tokens name: the leaves of each `use` tree, and each `a::b…` elsewhere.
fn named_paths(toks: &[(Tok, usize)]) -> Vec<PathRef> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Ident(word) if word == "use" => {
                i += 1;
                use_tree(toks, &mut i, Vec::new(), &mut out);
            }
            Tok::Ident(first) if matches!(toks.get(i + 1), Some((Tok::PathSep, _))) => {
                let line = toks[i].1;
                let mut segments = vec![first.clone()];
                i += 1;
                while let (Some((Tok::PathSep, _)), Some((Tok::Ident(next), _))) =
                    (toks.get(i), toks.get(i + 1))
                {
                    segments.push(next.clone());
                    i += 2;
                }
                out.push(PathRef { segments, line });
            }
            _ => i += 1,
        }
    }
    out
}

/// Expands the `use` tree at `toks[*i]` under `prefix` into `out`.
fn use_tree(toks: &[(Tok, usize)], i: &mut usize, mut prefix: Vec<String>, out: &mut Vec<PathRef>) {
    while let Some((tok, line)) = toks.get(*i) {
        *i += 1;
        match tok {
            Tok::PathSep => {}
            Tok::Ident(name) => {
                prefix.push(name.clone());
                if !matches!(toks.get(*i), Some((Tok::PathSep, _))) {
                    if matches!(toks.get(*i), Some((Tok::Ident(word), _)) if word == "as") {
                        *i += 2;
                    }
                    out.push(PathRef {
                        segments: prefix,
                        line: *line,
                    });
                    return;
                }
            }
            Tok::Star => {
                prefix.push("*".to_string());
                out.push(PathRef {
                    segments: prefix,
                    line: *line,
                });
                return;
            }
            Tok::Open => {
                while !matches!(toks.get(*i), None | Some((Tok::Close, _))) {
                    use_tree(toks, i, prefix.clone(), out);
                    if matches!(toks.get(*i), Some((Tok::Comma, _))) {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            _ => return,
        }
    }
}

/// Fails with every violation of `rule`, one `file:line` a line.
fn assert_none(rule: &str, violations: Vec<Violation>) {
    let list: Vec<String> = violations
        .iter()
        .map(|v| format!("  {}:{}: {}", v.file, v.line, v.detail))
        .collect();
    assert!(
        list.is_empty(),
        "rule broken: {rule}\n{} violation(s):\n{}",
        list.len(),
        list.join("\n")
    );
}

/// The paths of the files `applies` selects for which `offends(source, path)` holds.
fn path_violations(
    applies: impl Fn(&Source) -> bool,
    offends: impl Fn(&Source, &PathRef) -> bool,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for source in sources().iter().filter(|s| applies(s)) {
        for path in source.paths.iter().filter(|p| offends(source, p)) {
            out.push(Violation {
                file: source.path.clone(),
                line: path.line,
                detail: format!("`{}`", path.text()),
            });
        }
    }
    out
}

fn resolves_into(source: &Source, path: &PathRef, module: &[&str]) -> bool {
    path.resolve(&source.module)
        .is_some_and(|p| p.len() >= module.len() && p.iter().zip(module).all(|(a, b)| a == b))
}

#[test]
fn only_the_apiserver_uses_the_store() {
    // `src/lib.rs` declares `pub mod store;`: a declaration, not a path, so it passes.
    let violations = path_violations(
        |s| !s.is_under("store") && !s.is_under("apiserver"),
        |s, p| resolves_into(s, p, &["store"]),
    );
    assert_none(
        "only src/apiserver (and src/store itself) may use src/store",
        violations,
    );
}

#[test]
fn the_store_knows_nothing_of_kubernetes() {
    const KUBERNETES_CRATES: [&str; 4] = ["k8s_openapi", "kube", "k8s_pb", "k8s_cri"];
    let violations = path_violations(
        |s| s.is_under("store"),
        |_, p| {
            p.segments
                .first()
                .is_some_and(|s| KUBERNETES_CRATES.contains(&s.as_str()))
        },
    );
    assert_none(
        "src/store uses no Kubernetes types (k8s_openapi, kube, k8s_pb, k8s_cri): keys and values are bytes",
        violations,
    );
}

/// The components that are API clients and reach the API server only through a
/// `kube::Client` they are given (the in-process one is built by `src/cli/server.rs` with
/// `ApiServer::local_client`, so none of them needs the constructor).
const API_CLIENTS: [&str; 7] = [
    "addons",
    "scheduler",
    "controllers",
    "kubelet",
    "proxy",
    "dns",
    "network",
];

/// What those components may name in `crate::apiserver`, each with its reason.
const APISERVER_ITEMS_ALLOWED: [&str; 1] = [
    // The Kubernetes version the kubelet reports (nodeInfo, probe User-Agent): a constant,
    // not the server's state.
    "KUBE_VERSION",
];

#[test]
fn api_clients_use_no_apiserver_internals() {
    let violations = path_violations(
        |s| API_CLIENTS.iter().any(|dir| s.is_under(dir)),
        |s, p| {
            p.resolve(&s.module).is_some_and(|r| {
                r.first().is_some_and(|m| m == "apiserver")
                    && !r
                        .get(1)
                        .is_some_and(|item| APISERVER_ITEMS_ALLOWED.contains(&item.as_str()))
            })
        },
    );
    assert_none(
        &format!(
            "{} are API clients: of crate::apiserver they may use only {:?}",
            API_CLIENTS.join(", "),
            APISERVER_ITEMS_ALLOWED
        ),
        violations,
    );
}

#[test]
fn the_kubelet_speaks_cri_not_containerds_native_api() {
    // containerd's native API: the `containerd-client` crate, and the agent's modules that
    // wrap it (image import) or the containerd process. `crate::agent::cri` is the CRI
    // channel and is fine.
    const NATIVE: [&[&str]; 2] = [&["agent", "images"], &["agent", "containerd"]];
    let violations = path_violations(
        |s| s.is_under("kubelet"),
        |s, p| {
            matches!(
                p.segments.first().map(String::as_str),
                Some("containerd_client" | "containerd")
            ) || NATIVE.iter().any(|m| resolves_into(s, p, m))
        },
    );
    assert_none(
        "src/kubelet speaks CRI, not containerd's native API",
        violations,
    );
}

#[test]
fn every_source_file_starts_with_a_module_doc() {
    // Not modules: `include!`d into a function (openapi/schemas.rs) and into build.rs,
    // where an inner doc comment does not compile. Its header is a plain comment.
    const NOT_MODULES: [&str; 1] = ["src/apiserver/http/openapi/schema_roots.rs"];
    let mut violations = Vec::new();
    for source in sources()
        .iter()
        .filter(|s| !NOT_MODULES.contains(&s.path.as_str()))
    {
        // Blank lines and inner attributes (`#![…]`) may come first.
        let first = source
            .text
            .lines()
            .enumerate()
            .find(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with("#!["));
        if let Some((index, line)) = first.filter(|(_, l)| !l.trim_start().starts_with("//!")) {
            violations.push(Violation {
                file: source.path.clone(),
                line: index + 1,
                detail: format!("starts with `{}`", line.trim()),
            });
        }
    }
    assert_none(
        "every .rs file under src/ starts with a //! doc comment",
        violations,
    );
}

/// The scanner itself: what the rules above rely on it to see and not to see.
#[test]
fn the_scanner_sees_code_paths_only() {
    let text = r##"//! Mentions `crate::store` in a doc.
use crate::{apiserver::KUBE_VERSION, store::{self, Store as S}};
use super::super::store::*;
// crate::store in a comment
/* crate::store /* nested */ crate::store */
let s = "crate::store"; let r = r#"crate::store"#; let c = '"'; let l: &'static str = x;
fn f<'a>() { reflector::store::<Pod>(); k3rs::store::open(); }
"##;
    let found: Vec<(String, usize)> = named_paths(&tokens(&blank_comments_and_literals(text)))
        .into_iter()
        .map(|p| (p.text(), p.line))
        .collect();
    let expected = [
        ("crate::apiserver::KUBE_VERSION", 2),
        ("crate::store::self", 2),
        ("crate::store::Store", 2),
        ("super::super::store::*", 3),
        ("reflector::store", 7),
        ("k3rs::store::open", 7),
    ];
    let expected: Vec<(String, usize)> =
        expected.iter().map(|(p, l)| (p.to_string(), *l)).collect();
    assert_eq!(found, expected);

    let module = module_of("src/scheduler/framework.rs");
    assert_eq!(module, ["scheduler", "framework"]);
    let resolved: BTreeSet<Vec<String>> =
        named_paths(&tokens("use super::super::store; use self::x;"))
            .iter()
            .filter_map(|p| p.resolve(&module))
            .collect();
    let expected: BTreeSet<Vec<String>> = [
        vec!["store".to_string()],
        vec!["scheduler".into(), "framework".into(), "x".into()],
    ]
    .into_iter()
    .collect();
    assert_eq!(resolved, expected);
}
