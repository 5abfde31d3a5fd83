//! What a manifest file is, as k3s's deploy controller reads it: which files of the folder
//! count (the skip and disable rules), the Addon name a file maps to, its checksum, and its
//! documents parsed into API objects. Pure: no I/O, no API.

use std::collections::HashSet;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;
use sha2::Digest;

/// The extensions a manifest may have (case-insensitive), as k3s.
const EXTENSIONS: [&str; 3] = [".yaml", ".yml", ".json"];

/// An object a manifest applied: enough to find it again and delete it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    /// The API group of `api_version` (empty for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }

    /// Same object, whatever version it was applied as (a manifest may move a kind from
    /// `v1beta1` to `v1`).
    pub fn same_object(&self, other: &ObjectRef) -> bool {
        self.group() == other.group()
            && self.kind == other.kind
            && self.namespace == other.namespace
            && self.name == other.name
    }

    /// The entry of `status.appliedObjects`.
    pub fn to_json(&self) -> Value {
        let mut entry = serde_json::json!({
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
        });
        if !self.namespace.is_empty() {
            entry["namespace"] = Value::String(self.namespace.clone());
        }
        entry
    }

    /// Reads one `status.appliedObjects` entry; `None` when it lacks a field.
    pub fn from_json(entry: &Value) -> Option<ObjectRef> {
        let field = |name: &str| entry.get(name).and_then(Value::as_str).map(str::to_string);
        Some(ObjectRef {
            api_version: field("apiVersion").filter(|s| !s.is_empty())?,
            kind: field("kind").filter(|s| !s.is_empty())?,
            namespace: field("namespace").unwrap_or_default(),
            name: field("name").filter(|s| !s.is_empty())?,
        })
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// Why a manifest's content is not a list of API objects.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("document {document}: {message}")]
    Syntax { document: usize, message: String },
    #[error("document {document}: {message}")]
    NotAnObject { document: usize, message: String },
}

/// Whether `file_name` ends in `.yaml`, `.yml` or `.json`, in any case.
pub fn has_manifest_extension(file_name: &str) -> bool {
    let lower = file_name.to_ascii_lowercase();
    EXTENSIONS.iter().any(|ext| lower.ends_with(ext))
}

/// The `.skip` markers among `file_names`: `foo.yaml.skip` skips `foo.yaml`.
pub fn skip_markers<'a>(file_names: impl IntoIterator<Item = &'a str>) -> HashSet<String> {
    file_names
        .into_iter()
        .filter_map(|name| name.strip_suffix(".skip"))
        .map(str::to_string)
        .collect()
}

/// Whether the file `file_name` is left alone (k3s's rule): dotfiles, files with a `.skip`
/// marker next to them, and anything that is not YAML or JSON.
pub fn should_skip(file_name: &str, skips: &HashSet<String>) -> bool {
    file_name.starts_with('.') || skips.contains(file_name) || !has_manifest_extension(file_name)
}

/// Whether `--disable` names the file at `relative` (a path under the manifests folder): its
/// name without the extension (`traefik.yaml` for `traefik`), or one of its parent folders.
pub fn is_disabled(relative: &Path, disables: &[String]) -> bool {
    let disabled = |name: &str| disables.iter().any(|d| d == name);
    let mut parents = Vec::new();
    if let Some(parent) = relative.parent() {
        for component in parent.components() {
            parents.push(component.as_os_str().to_string_lossy().into_owned());
            if disabled(&parents.join("/")) {
                return true;
            }
        }
    }
    let Some(file_name) = relative.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    if !has_manifest_extension(file_name) {
        return false;
    }
    let stem = file_name
        .rsplit_once('.')
        .map_or(file_name, |(stem, _)| stem);
    disabled(stem)
}

/// The Addon a file is tracked as: its name up to the first dot (`foo.bar.yaml` → `foo`).
pub fn addon_name(file_name: &str) -> &str {
    file_name.split('.').next().unwrap_or(file_name)
}

/// The hex SHA-256 of a file's bytes (the Addon's `spec.checksum`).
pub fn checksum(content: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(content))
}

/// The API objects in `content`: YAML documents separated by `---` (or, for `json`,
/// concatenated JSON values), empty documents dropped, `List` kinds flattened into their
/// items. Every object must have `apiVersion`, `kind` and `metadata.name`.
pub fn parse(content: &[u8], json: bool) -> Result<Vec<Value>, ParseError> {
    let documents = if json {
        parse_json(content)?
    } else {
        parse_yaml(content)?
    };
    let mut objects = Vec::new();
    for (index, document) in documents.into_iter().enumerate() {
        let number = index + 1;
        if document.is_null() {
            continue;
        }
        let not_object = |message: String| ParseError::NotAnObject {
            document: number,
            message,
        };
        if !document.is_object() {
            return Err(not_object("not a Kubernetes object (a mapping)".into()));
        }
        let is_list = document["kind"]
            .as_str()
            .is_some_and(|k| k.ends_with("List"))
            && document["items"].is_array();
        if is_list {
            let items = document["items"].as_array().cloned().unwrap_or_default();
            for (item_index, item) in items.into_iter().enumerate() {
                check_object(&item).map_err(|m| not_object(format!("items[{item_index}]: {m}")))?;
                objects.push(item);
            }
        } else {
            check_object(&document).map_err(not_object)?;
            objects.push(document);
        }
    }
    Ok(objects)
}

fn parse_yaml(content: &[u8]) -> Result<Vec<Value>, ParseError> {
    let mut documents = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_slice(content).enumerate() {
        let value = Value::deserialize(document).map_err(|e| ParseError::Syntax {
            document: index + 1,
            message: e.to_string(),
        })?;
        documents.push(value);
    }
    Ok(documents)
}

fn parse_json(content: &[u8]) -> Result<Vec<Value>, ParseError> {
    let mut documents = Vec::new();
    for (index, value) in serde_json::Deserializer::from_slice(content)
        .into_iter::<Value>()
        .enumerate()
    {
        documents.push(value.map_err(|e| ParseError::Syntax {
            document: index + 1,
            message: e.to_string(),
        })?);
    }
    Ok(documents)
}

fn check_object(object: &Value) -> Result<(), String> {
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
    if !object.is_object() {
        return Err("not a Kubernetes object (a mapping)".into());
    }
    if text("/apiVersion").is_none_or(str::is_empty) {
        return Err("missing apiVersion".into());
    }
    if text("/kind").is_none_or(str::is_empty) {
        return Err("missing kind".into());
    }
    if text("/metadata/name").is_none_or(str::is_empty) {
        return Err(format!(
            "{} without metadata.name (generateName cannot be applied)",
            text("/kind").unwrap_or_default()
        ));
    }
    Ok(())
}

/// The reference of a parsed object, with its namespace as the manifest gives it (empty when
/// it gives none).
pub fn reference(object: &Value) -> ObjectRef {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    ObjectRef {
        api_version: text("/apiVersion"),
        kind: text("/kind"),
        namespace: text("/metadata/namespace"),
        name: text("/metadata/name"),
    }
}

/// The order objects are applied in: Namespaces, then CustomResourceDefinitions, then the
/// rest in file order (so a file may create a namespace or a CRD and use it).
pub fn apply_order(objects: &mut [Value]) {
    let rank = |object: &Value| match object["kind"].as_str() {
        Some("Namespace") => 0,
        Some("CustomResourceDefinition") => 1,
        _ => 2,
    };
    objects.sort_by_key(rank);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(objects: &[Value]) -> Vec<String> {
        objects.iter().map(|o| reference(o).to_string()).collect()
    }

    #[test]
    fn multi_document_yaml_with_empty_documents_and_comments() {
        let yaml = b"# leading comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n---\n# only a comment\n---\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: apps\n...\n";
        let objects = parse(yaml, false).expect("parses");
        assert_eq!(names(&objects), ["ConfigMap a", "Deployment apps/web"]);
        assert_eq!(objects[0]["data"]["k"], "v");
        assert!(parse(b"", false).expect("empty").is_empty());
        assert!(
            parse(b"---\n---\n# nothing\n", false)
                .expect("empty")
                .is_empty()
        );
    }

    #[test]
    fn json_single_concatenated_and_lists() {
        let json = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}
            {"apiVersion":"v1","kind":"List","items":[
              {"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":"x"}},
              {"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"sa"}}]}"#;
        let objects = parse(json, true).expect("parses");
        assert_eq!(
            names(&objects),
            ["ConfigMap a", "Secret x/s", "ServiceAccount sa"]
        );
        // JSON read as YAML (a .yaml file holding JSON) works as well.
        let objects = parse(
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}"#,
            false,
        )
        .expect("yaml superset");
        assert_eq!(names(&objects), ["ConfigMap a"]);
    }

    #[test]
    fn broken_documents_name_the_document() {
        let e = parse(
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\nkind: [unclosed\n",
            false,
        )
        .expect_err("syntax");
        assert!(matches!(e, ParseError::Syntax { document: 2, .. }), "{e}");
        let e =
            parse(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", false).expect_err("no name");
        assert!(
            e.to_string().contains("document 1") && e.to_string().contains("metadata.name"),
            "{e}"
        );
        let e = parse(b"- a\n- b\n", false).expect_err("a sequence");
        assert!(e.to_string().contains("mapping"), "{e}");
        let e = parse(b"kind: ConfigMap\nmetadata: {name: a}\n", false).expect_err("no apiVersion");
        assert!(e.to_string().contains("apiVersion"), "{e}");
        let e = parse(b"{\"apiVersion\": \"v1\",", true).expect_err("json syntax");
        assert!(matches!(e, ParseError::Syntax { document: 1, .. }), "{e}");
    }

    #[test]
    fn skip_rule() {
        let skips = skip_markers(["a.yaml", "b.yaml", "b.yaml.skip", "c.json", "README.md"]);
        assert!(!should_skip("a.yaml", &skips));
        assert!(should_skip("b.yaml", &skips), "b.yaml.skip skips b.yaml");
        assert!(should_skip("b.yaml.skip", &skips));
        assert!(!should_skip("c.json", &skips));
        assert!(!should_skip("D.YML", &skips), "extensions in any case");
        assert!(should_skip("README.md", &skips));
        assert!(
            should_skip(".hidden.yaml", &skips),
            "dotfiles (e.g. editors' temporaries)"
        );
        assert!(should_skip("notes", &skips));
    }

    #[test]
    fn disable_rule_and_addon_names() {
        let disables = vec!["traefik".to_string(), "extras".to_string()];
        assert!(is_disabled(Path::new("traefik.yaml"), &disables));
        assert!(is_disabled(Path::new("extras/anything.json"), &disables));
        assert!(!is_disabled(Path::new("traefik.yaml.skip"), &disables));
        assert!(!is_disabled(Path::new("traefik-extra.yaml"), &disables));
        assert!(!is_disabled(Path::new("mine.yaml"), &disables));
        assert_eq!(addon_name("foo.yaml"), "foo");
        assert_eq!(addon_name("foo.bar.yml"), "foo");
        assert_eq!(checksum(b"").len(), 64);
    }

    #[test]
    fn references_and_order() {
        let mut objects = parse(
            b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: n}\n---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: x.example.com}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: n}\n",
            false,
        )
        .expect("parses");
        apply_order(&mut objects);
        assert_eq!(
            names(&objects),
            [
                "Namespace n",
                "CustomResourceDefinition x.example.com",
                "ConfigMap n/a"
            ]
        );
        let r = reference(&objects[1]);
        assert_eq!(r.group(), "apiextensions.k8s.io");
        assert_eq!(ObjectRef::from_json(&r.to_json()), Some(r.clone()));
        let mut v2 = r.clone();
        v2.api_version = "apiextensions.k8s.io/v2".into();
        assert!(r.same_object(&v2));
        assert_eq!(
            ObjectRef::from_json(&serde_json::json!({"kind": "X"})),
            None
        );
    }
}
