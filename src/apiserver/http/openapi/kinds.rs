//! The built-in kinds whose schemas the build script generated (`build.rs`, from the
//! list in `schema_roots.rs`): a table from group/version/kind to the kind's definition
//! name in the embedded schemas ([`super::schemas`]).

/// One kind with a Rust type in k8s-openapi.
#[derive(Debug)]
pub(super) struct KindEntry {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    /// Its definition name (`io.k8s.api.apps.v1.Deployment`).
    pub definition: &'static str,
}

/// Every stable kind k8s-openapi knows, including the kinds of subresources (`Scale`,
/// `Binding`, `Eviction`, `TokenRequest`).
pub(super) static TABLE: &[KindEntry] = include!(concat!(env!("OUT_DIR"), "/builtin_kinds.rs"));

/// The table entry of a kind, if it has a Rust type.
pub(super) fn find(group: &str, version: &str, kind: &str) -> Option<&'static KindEntry> {
    TABLE
        .iter()
        .find(|e| e.group == group && e.version == version && e.kind == kind)
}

/// Meta types every group-version document carries (request and response bodies of
/// delete and patch).
pub(super) const META: &[&str] = &[
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
    "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta",
];
