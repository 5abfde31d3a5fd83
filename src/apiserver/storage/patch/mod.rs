//! PATCH application for the API server: the three patch flavours kube-apiserver
//! accepts, implemented as pure functions over `serde_json::Value`.
//!
//! * [`apply_json_patch`] — RFC 6902 JSON Patch (`application/json-patch+json`), with
//!   the behaviour and error texts of `gopkg.in/evanphx/json-patch.v4`, which is
//!   what kube-apiserver links.
//! * [`apply_merge_patch`] — RFC 7386 JSON Merge Patch (`application/merge-patch+json`).
//! * [`apply_strategic_merge_patch`] — Kubernetes strategic merge patch
//!   (`application/strategic-merge-patch+json`), following
//!   `k8s.io/apimachinery/pkg/util/strategicpatch` as the server applies it (patch
//!   format v2, as kubectl sends it), driven by a [`PatchSchema`]; the merge keys of
//!   the built-in kinds come from [`builtin_schema`].
//!
//! This module owns patch *application* only: it takes the current object and the
//! decoded request body and returns the patched object or a [`PatchError`]. It does
//! no I/O and must not touch the store, HTTP, admission, validation, defaulting or
//! managed fields; server-side apply (`application/apply-patch+yaml`) is only
//! recognised by [`patch_type_from_content_type`], not implemented here.

mod go_fmt;
mod json_patch;
mod merge_keys;
mod merge_patch;
mod strategic;

pub use json_patch::{
    DEFAULT_COPY_SIZE_LIMIT, MAX_JSON_PATCH_OPERATIONS, apply_json_patch,
    apply_json_patch_with_copy_limit,
};
pub use merge_keys::builtin_schema;
pub use merge_patch::{apply_merge_patch, validate_merge_patch};
pub use strategic::apply_strategic_merge_patch;

/// The PATCH flavours, as selected by the request's `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchType {
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json` (built-in kinds only).
    StrategicMerge,
    /// `application/apply-patch+yaml` (server-side apply; not implemented here).
    Apply,
}

impl PatchType {
    /// The media type that selects this patch flavour.
    pub const fn content_type(self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }
}

/// Maps a request `Content-Type` to a patch flavour. Parameters such as
/// `; charset=utf-8` are ignored, as kube-apiserver does; so are surrounding
/// blanks and letter case. Returns `None` for anything else (the server answers
/// 415 Unsupported Media Type).
pub fn patch_type_from_content_type(ct: &str) -> Option<PatchType> {
    let base = ct.split(';').next().unwrap_or_default().trim();
    [
        PatchType::Json,
        PatchType::Merge,
        PatchType::StrategicMerge,
        PatchType::Apply,
    ]
    .into_iter()
    .find(|pt| pt.content_type().eq_ignore_ascii_case(base))
}

/// How a list field is combined with the list in a strategic merge patch
/// (the `patchStrategy` / `patchMergeKey` struct tags of the Go API types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListStrategy {
    /// No merge strategy: the patch's list replaces the current one.
    Atomic,
    /// `patchStrategy:"merge"` with `patchMergeKey`: items are matched on the key,
    /// matched items are merged recursively, new ones are added.
    MergeByKey(&'static str),
    /// `patchStrategy:"merge"` on a list of scalars (e.g. `metadata.finalizers`):
    /// the lists are merged as a set.
    MergePrimitives,
}

impl ListStrategy {
    /// The merge key, for [`ListStrategy::MergeByKey`].
    pub const fn merge_key(self) -> Option<&'static str> {
        match self {
            ListStrategy::MergeByKey(key) => Some(key),
            _ => None,
        }
    }
}

/// Field metadata that drives a strategic merge patch.
///
/// `path` is the list of field names from the object root to the list or map in
/// question, without list indices: the `env` lists of a Deployment's containers are
/// at `["spec", "template", "spec", "containers", "env"]`. Map keys (labels, data,
/// ...) appear in paths like field names; they simply match no rule.
pub trait PatchSchema: Send + Sync {
    /// The strategy of the list at `path`; [`ListStrategy::Atomic`] when unknown.
    fn list_strategy(&self, path: &[&str]) -> ListStrategy;
    /// Whether the field at `path` carries the `retainKeys` strategy (for a list, it
    /// applies to each item). Informational: like apimachinery, patch application
    /// honours a `$retainKeys` directive wherever the patch carries one; the flag
    /// matters to whoever generates patches.
    fn retain_keys(&self, path: &[&str]) -> bool;
    /// Whether the map at `path` has `patchStrategy:"replace"` (the patch's map
    /// replaces the current one instead of being merged into it), e.g. a
    /// PodDisruptionBudget's `spec.selector`.
    fn replace_map(&self, _path: &[&str]) -> bool {
        false
    }
}

/// Why a patch could not be applied.
///
/// `Display` gives the same text as the Go library kube-apiserver uses; the
/// [`status_code`](Self::status_code), [`reason`](Self::reason) and
/// [`status_message`](Self::status_message) helpers say what kube-apiserver puts in
/// the `metav1.Status` it answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The JSON Patch body is not a list of operations (400).
    #[error("{0}")]
    InvalidJsonPatch(String),
    /// More than [`MAX_JSON_PATCH_OPERATIONS`] operations (413).
    #[error("The allowed maximum operations in a JSON patch is {max}, got {got}")]
    TooManyOperations { max: usize, got: usize },
    /// A JSON Patch operation failed; the text is evanphx/json-patch's (422).
    #[error("{0}")]
    JsonPatchFailed(String),
    /// The merge patch body is neither an object nor a list (400).
    #[error("Invalid JSON Patch")]
    InvalidMergePatch,
    /// The strategic merge patch body or the object is not a JSON object (400).
    #[error("invalid JSON document")]
    BadJsonDoc,
    /// A strategic merge patch list holds lists (422).
    #[error("lists of lists are not supported")]
    NoListOfLists,
    /// Malformed `$deleteFromPrimitiveList/<field>` directive (400).
    #[error("invalid patch format of primitive list")]
    BadPatchFormatForPrimitiveList,
    /// Malformed `$retainKeys` directive, or the patch sets a key it does not
    /// retain (400).
    #[error("invalid patch format of retainKeys")]
    BadPatchFormatForRetainKeys,
    /// Malformed `$setElementOrder/<field>` directive (400).
    #[error("invalid patch format of setElementOrder list")]
    BadPatchFormatForSetElementOrderList,
    /// Any other strategic merge patch failure: missing merge key, unknown `$patch`
    /// value, mismatched element types, order list not matching the patch list...
    /// kube-apiserver passes these through untyped, i.e. as a 500 with an empty
    /// reason and this text as the message.
    #[error("{0}")]
    StrategicMerge(String),
}

impl PatchError {
    /// The HTTP status kube-apiserver answers with for this error.
    pub fn status_code(&self) -> u16 {
        match self {
            PatchError::InvalidJsonPatch(_)
            | PatchError::InvalidMergePatch
            | PatchError::BadJsonDoc
            | PatchError::BadPatchFormatForPrimitiveList
            | PatchError::BadPatchFormatForRetainKeys
            | PatchError::BadPatchFormatForSetElementOrderList => 400,
            PatchError::TooManyOperations { .. } => 413,
            PatchError::JsonPatchFailed(_) | PatchError::NoListOfLists => 422,
            PatchError::StrategicMerge(_) => 500,
        }
    }

    /// The `metav1.Status` reason kube-apiserver reports (empty for the untyped
    /// strategic merge errors).
    pub fn reason(&self) -> &'static str {
        match self.status_code() {
            400 => "BadRequest",
            413 => "RequestEntityTooLarge",
            422 => "Invalid",
            _ => "",
        }
    }

    /// The `metav1.Status` message kube-apiserver reports. For the 422 errors it
    /// is the generic text of `NewGenericServerResponse` (the detail is dropped, as
    /// upstream does), for 413 the error prefixed as `NewRequestEntityTooLargeError`
    /// does; otherwise it is the error's own text.
    pub fn status_message(&self) -> String {
        match self.status_code() {
            422 => "the server rejected our request due to an error in our request".to_string(),
            413 => format!("Request entity too large: {self}"),
            _ => self.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        assert_eq!(
            patch_type_from_content_type("application/json-patch+json"),
            Some(PatchType::Json)
        );
        assert_eq!(
            patch_type_from_content_type("application/merge-patch+json"),
            Some(PatchType::Merge)
        );
        assert_eq!(
            patch_type_from_content_type("application/strategic-merge-patch+json"),
            Some(PatchType::StrategicMerge)
        );
        assert_eq!(
            patch_type_from_content_type("application/apply-patch+yaml"),
            Some(PatchType::Apply)
        );
        assert_eq!(
            patch_type_from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
        assert_eq!(
            patch_type_from_content_type(" Application/JSON-Patch+JSON "),
            Some(PatchType::Json)
        );
        assert_eq!(patch_type_from_content_type("application/json"), None);
        assert_eq!(patch_type_from_content_type("application/yaml"), None);
        assert_eq!(
            patch_type_from_content_type("application/apply-patch+cbor"),
            None
        );
        assert_eq!(patch_type_from_content_type(""), None);
        for pt in [
            PatchType::Json,
            PatchType::Merge,
            PatchType::StrategicMerge,
            PatchType::Apply,
        ] {
            assert_eq!(patch_type_from_content_type(pt.content_type()), Some(pt));
        }
    }

    #[test]
    fn error_statuses() {
        let e = PatchError::JsonPatchFailed("testing value /a failed: test failed".into());
        assert_eq!(e.status_code(), 422);
        assert_eq!(e.reason(), "Invalid");
        assert_eq!(
            e.status_message(),
            "the server rejected our request due to an error in our request"
        );
        assert_eq!(e.to_string(), "testing value /a failed: test failed");

        let e = PatchError::TooManyOperations {
            max: 10000,
            got: 10001,
        };
        assert_eq!(e.status_code(), 413);
        assert_eq!(e.reason(), "RequestEntityTooLarge");
        assert_eq!(
            e.to_string(),
            "The allowed maximum operations in a JSON patch is 10000, got 10001"
        );
        assert_eq!(
            e.status_message(),
            "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
        );

        assert_eq!(PatchError::InvalidMergePatch.status_code(), 400);
        assert_eq!(
            PatchError::InvalidMergePatch.status_message(),
            "Invalid JSON Patch"
        );
        assert_eq!(PatchError::BadJsonDoc.to_string(), "invalid JSON document");
        assert_eq!(PatchError::BadJsonDoc.reason(), "BadRequest");
        assert_eq!(PatchError::NoListOfLists.status_code(), 422);
        assert_eq!(
            PatchError::BadPatchFormatForRetainKeys.to_string(),
            "invalid patch format of retainKeys"
        );
        assert_eq!(
            PatchError::BadPatchFormatForSetElementOrderList.to_string(),
            "invalid patch format of setElementOrder list"
        );
        assert_eq!(
            PatchError::BadPatchFormatForPrimitiveList.to_string(),
            "invalid patch format of primitive list"
        );
        let e = PatchError::StrategicMerge("boom".into());
        assert_eq!(
            (e.status_code(), e.reason(), e.status_message()),
            (500, "", "boom".into())
        );
    }

    #[test]
    fn list_strategy_merge_key() {
        assert_eq!(ListStrategy::MergeByKey("name").merge_key(), Some("name"));
        assert_eq!(ListStrategy::MergePrimitives.merge_key(), None);
        assert_eq!(ListStrategy::Atomic.merge_key(), None);
    }
}
