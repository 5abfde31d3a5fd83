//! Entry points of the fuzz targets (`fuzz/`, run by `scripts/fuzz.sh`): one function per
//! parser that a network peer or a user feeds, taking arbitrary bytes. Each must return
//! (any error is fine) and never panic, hang or allocate without bound. The same
//! functions replay the committed corpus and every crashing input found so far under
//! `cargo test` (`tests/fuzz_regressions.rs`), so a fixed crash stays fixed without the
//! nightly toolchain.
//!
//! Owns nothing and touches nothing: no I/O except the snapshot reader's temporary file.
//! Like every component outside `apiserver`, it reaches the store's code only through the
//! API server module (the snapshot reader goes through `snapshots::restore::verify`).

use serde_json::Value;

use crate::apiserver::storage::objects::{self, FieldValidation};
use crate::apiserver::storage::registry::Registry;

/// Splits `data` at the first NUL byte: two inputs from one (document and patch, …).
fn split2(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}

/// One registry for every input: building it per input was most of a short input's time.
fn registry() -> &'static Registry {
    static REGISTRY: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(Registry::new)
}

fn json(data: &[u8]) -> Option<Value> {
    serde_json::from_slice(data).ok()
}

/// The name of every fuzz target, in `fuzz/Cargo.toml`'s order.
pub const TARGETS: &[&str] = &[
    "object_decode",
    "patch_json",
    "patch_merge",
    "patch_strategic",
    "server_side_apply",
    "selectors",
    "jsonpath",
    "dns_wire",
    "websocket_frames",
    "spdy_frames",
    "cri_log",
    "nft_render",
    "image_tar",
    "snapshot_reader",
];

/// Runs the target called `name` on `data`.
pub fn run(name: &str, data: &[u8]) {
    match name {
        "object_decode" => object_decode(data),
        "patch_json" => patch_json(data),
        "patch_merge" => patch_merge(data),
        "patch_strategic" => patch_strategic(data),
        "server_side_apply" => server_side_apply(data),
        "selectors" => selectors(data),
        "jsonpath" => jsonpath(data),
        "dns_wire" => dns_wire(data),
        "websocket_frames" => websocket_frames(data),
        "spdy_frames" => spdy_frames(data),
        "cri_log" => cri_log(data),
        "nft_render" => nft_render(data),
        "image_tar" => image_tar(data),
        "snapshot_reader" => snapshot_reader(data),
        other => panic!("no fuzz target {other}"),
    }
}

/// A request body through what a create does before storing: decode (JSON, or YAML when
/// the first byte is odd), type check against the kind's k8s-openapi type, defaulting and
/// kube's validation — for each built-in kind in turn (the second byte picks it).
pub fn object_decode(data: &[u8]) {
    let [mode, pick, body @ ..] = data else {
        return;
    };
    let content_type = if mode & 1 == 1 {
        "application/yaml"
    } else {
        "application/json"
    };
    let Ok(mut value) = objects::decode_body(body, Some(content_type)) else {
        return;
    };
    let registry = registry();
    let kinds: Vec<_> = registry.all().into_iter().filter(|r| !r.custom).collect();
    if kinds.is_empty() {
        return;
    }
    let info = &kinds[usize::from(*pick) % kinds.len()];
    let strict = if mode & 2 == 2 {
        FieldValidation::Strict
    } else {
        FieldValidation::Ignore
    };
    if objects::type_check(info, &mut value, strict).is_err() {
        return;
    }
    objects::apply_defaults(info, &mut value);
    objects::admission_defaults(info, &mut value);
    let _ = crate::apiserver::admission::validation::validate(info, &value, None);
    // An update of the object onto itself, prepared as the update handler prepares one.
    let mut updated = value.clone();
    if info.group.is_empty() && info.kind == "Service" {
        crate::apiserver::admission::validation::prepare_service_update(&value, &mut updated);
    }
    let _ = crate::apiserver::admission::validation::validate(info, &updated, Some(&value));
}

/// RFC 6902 JSON patch: `document NUL patch`.
pub fn patch_json(data: &[u8]) {
    let (doc, patch) = split2(data);
    if let (Some(doc), Some(patch)) = (json(doc), json(patch)) {
        let _ = crate::apiserver::storage::patch::apply_json_patch(&doc, &patch);
    }
}

/// RFC 7386 merge patch: `document NUL patch`.
pub fn patch_merge(data: &[u8]) {
    let (doc, patch) = split2(data);
    if let (Some(doc), Some(patch)) = (json(doc), json(patch))
        && crate::apiserver::storage::patch::validate_merge_patch(&patch).is_ok()
    {
        let _ = crate::apiserver::storage::patch::apply_merge_patch(&doc, &patch);
    }
}

/// Strategic merge patch with a built-in kind's merge keys (the first byte picks it):
/// `kind-byte document NUL patch`.
pub fn patch_strategic(data: &[u8]) {
    let [pick, rest @ ..] = data else {
        return;
    };
    let kinds = [
        ("", "Pod"),
        ("", "Service"),
        ("apps", "Deployment"),
        ("", "Node"),
        ("", "ConfigMap"),
        ("batch", "Job"),
    ];
    let (group, kind) = kinds[usize::from(*pick) % kinds.len()];
    let Some(schema) = crate::apiserver::storage::patch::builtin_schema(group, kind) else {
        return;
    };
    let (doc, patch) = split2(rest);
    if let (Some(doc), Some(patch)) = (json(doc), json(patch)) {
        let _ = crate::apiserver::storage::patch::apply_strategic_merge_patch(&doc, &patch, schema);
    }
}

/// Server-side apply of a YAML configuration onto a live Deployment (or onto nothing):
/// `live-json NUL applied-yaml`.
pub fn server_side_apply(data: &[u8]) {
    let (live, applied) = split2(data);
    let Ok(applied) = objects::decode_body(applied, Some("application/apply-patch+yaml")) else {
        return;
    };
    if !applied.is_object() {
        return;
    }
    let registry = registry();
    let Some(info) = registry.find("apps", "v1", "deployments") else {
        return;
    };
    let keys = crate::apiserver::storage::apply::keys_for(&info);
    let live = json(live);
    let _ = crate::apiserver::storage::managed_fields::apply(
        live.as_ref().filter(|v| v.is_object()),
        &applied,
        "fuzz",
        "apps/v1",
        true,
        keys.as_ref(),
        "2026-01-01T00:00:00Z",
    );
}

/// Label and field selectors, and matching them against a fixed object.
pub fn selectors(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let object = serde_json::json!({"metadata": {"name": "a", "namespace": "b",
        "labels": {"app": "web", "tier": "1"}}, "spec": {"nodeName": "n"},
        "status": {"phase": "Running"}});
    if let Ok(selector) = crate::apiserver::storage::selectors::LabelSelector::parse(text) {
        let _ = selector.matches_json(
            object
                .pointer("/metadata/labels")
                .and_then(Value::as_object),
        );
    }
    if let Ok(selector) = crate::apiserver::storage::selectors::FieldSelector::parse(text) {
        let _ = selector
            .matches(|f| crate::apiserver::storage::selectors::field_value("pods", &object, f));
        let _ = crate::apiserver::storage::selectors::check_supported("pods", &selector);
    }
}

/// `kubectl -o jsonpath` expressions (server-side printer columns use the same parser):
/// `expression NUL document`.
pub fn jsonpath(data: &[u8]) {
    let (expr, doc) = split2(data);
    let Ok(expr) = std::str::from_utf8(expr) else {
        return;
    };
    let doc = json(doc).unwrap_or_else(|| serde_json::json!({"a": [1, {"b": "c"}]}));
    if let Ok(path) = crate::apiserver::http::table::jsonpath::parse(expr) {
        let _ = path.find(&doc);
    }
}

/// A DNS message as the cluster DNS server receives it, and the answer it would build.
pub fn dns_wire(data: &[u8]) {
    if let Ok(message) = crate::dns::wire::Message::parse(data) {
        let bytes = message.to_bytes();
        let _ = crate::dns::wire::Message::parse(&bytes);
        let response = message.response(0);
        let _ = response.to_udp_bytes(message.udp_size());
    }
}

fn block_on<F: std::future::Future>(future: F) -> Option<F::Output> {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .ok()
        .map(|rt| rt.block_on(future))
}

/// WebSocket frames as the kubelet's and API server's stream endpoints read them.
pub fn websocket_frames(data: &[u8]) {
    let reader = data;
    let sender = crate::streaming::websocket::Sender::server(tokio::io::sink());
    let mut receiver = crate::streaming::websocket::Receiver::new(reader, sender);
    let _ = block_on(async move {
        // Bounded: every message consumes input, and the input is finite.
        for _ in 0..4096 {
            match receiver.next().await {
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    });
}

/// SPDY/3.1 frames as the stream endpoints read them.
pub fn spdy_frames(data: &[u8]) {
    let mut reader = data;
    let _ = block_on(async move {
        for _ in 0..4096 {
            match crate::streaming::spdy::read_frame(&mut reader).await {
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    });
}

/// One line of a CRI container log file.
pub fn cri_log(data: &[u8]) {
    for line in data.split(|b| *b == b'\n') {
        let _ = crate::kubelet::server::logs::parse_record(line);
    }
}

/// Arbitrary Services and EndpointSlices through the proxy's model and renderer: every
/// name in the ruleset must be from nft's identifier alphabet. `services-json NUL slices-json`
/// (each a JSON array; objects that do not decode as their type are dropped, as the
/// informers drop them).
pub fn nft_render(data: &[u8]) {
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let (services, slices) = split2(data);
    let decode = |bytes: &[u8]| -> Vec<Value> {
        match json(bytes) {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        }
    };
    let services: Vec<Service> = decode(services)
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect();
    let slices: Vec<EndpointSlice> = decode(slices)
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect();
    let ports = crate::proxy::model::service_ports(&services, &slices, "node-1");
    let options = crate::proxy::RenderOptions {
        table: "k3rs".into(),
        node_ips: vec![
            "192.0.2.1".parse().expect("literal"),
            "2001:db8::1".parse().expect("literal"),
        ],
        cluster_cidrs: vec!["10.42.0.0/16".into()],
    };
    for family in [crate::proxy::Family::V4, crate::proxy::Family::V6] {
        let ruleset = crate::proxy::table::render(family, &ports, &options);
        for name in ruleset.chains.keys().chain(ruleset.sets.keys()) {
            assert!(
                name.len() <= 256
                    && name
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || b"/_.-".contains(&c)),
                "unsafe nft name {name:?}"
            );
        }
        let _ = ruleset.full_text();
    }
}

/// An image tarball (docker-save or OCI layout) as the air-gap import opens it.
pub fn image_tar(data: &[u8]) {
    let source = std::io::Cursor::new(data.to_vec());
    if let Ok(mut archive) = crate::agent::images::archive::ImageArchive::open(Box::new(source)) {
        let digests: Vec<String> = archive
            .images()
            .iter()
            .flat_map(|image| image.blobs.iter().map(|b| b.desc.digest.clone()))
            .take(16)
            .collect();
        for digest in digests {
            let _ = archive.read_blob(&digest);
        }
    }
}

/// A snapshot file as `etcd-snapshot`/`--cluster-reset-restore-path` inspect it before
/// anything is restored.
pub fn snapshot_reader(data: &[u8]) {
    let Ok(dir) = tempfile_dir() else {
        return;
    };
    let path = dir.join("snapshot.db");
    if std::fs::write(&path, data).is_ok() {
        let _ = crate::apiserver::cluster::snapshots::restore::verify(&path, "a fuzz input");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> std::io::Result<std::path::PathBuf> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "k3rs-fuzz-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
