//! core/v1 and events.k8s.io/v1 Events are one set of objects in two shapes, as in
//! kube-apiserver: what kube-rs's `events/v1` Recorder writes is what `kubectl get
//! events` and `kubectl describe` read, and the other way round.

mod support;

use std::path::Path;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent};
use k8s_openapi::api::events::v1::Event as NewEvent;
use kube::Resource;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::json;
use support::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_written_through_either_api_are_read_through_both() {
    let server = Server::start();
    let client = server.client().await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "subject"}})).expect("configmap");
    let cm = configmaps
        .create(&PostParams::default(), &cm)
        .await
        .expect("create configmap");
    let reference = cm.object_ref(&());

    let new_api: Api<NewEvent> = Api::namespaced(client.clone(), "default");
    let core_api: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let list = new_api.list(&ListParams::default()).await.expect("list");
    let mut watch = new_api
        .watch(
            &WatchParams::default().timeout(10),
            list.metadata.resource_version.as_deref().expect("rv"),
        )
        .await
        .expect("watch")
        .boxed();

    // kube-rs's recorder writes events.k8s.io/v1 (create, then a merge patch of
    // `series` for a repeat).
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "example.com/widget-controller".into(),
            instance: Some("widget-controller-0".into()),
        },
    );
    let event = Event {
        type_: EventType::Warning,
        reason: "Misconfigured".into(),
        note: Some("the widget has no spokes".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder.publish(&event, &reference).await.expect("publish");
    recorder
        .publish(&event, &reference)
        .await
        .expect("publish again");

    let core: Vec<CoreEvent> = core_api
        .list(&ListParams::default().fields("involvedObject.name=subject"))
        .await
        .expect("core list")
        .items;
    assert_eq!(core.len(), 1, "{core:?}");
    let core = &core[0];
    assert_eq!(core.message.as_deref(), Some("the widget has no spokes"));
    assert_eq!(core.reason.as_deref(), Some("Misconfigured"));
    assert_eq!(core.type_.as_deref(), Some("Warning"));
    assert_eq!(core.involved_object.kind.as_deref(), Some("ConfigMap"));
    assert_eq!(
        core.reporting_component.as_deref(),
        Some("example.com/widget-controller")
    );
    assert_eq!(core.series.as_ref().map(|s| s.count), Some(Some(2)));

    // The watch through events.k8s.io saw the events.k8s.io shape.
    match watch.next().await.expect("event").expect("ok") {
        WatchEvent::Added(e) => {
            assert_eq!(e.note.as_deref(), Some("the widget has no spokes"));
            assert_eq!(
                e.regarding.as_ref().and_then(|r| r.name.as_deref()),
                Some("subject")
            );
        }
        other => panic!("expected ADDED, got {other:?}"),
    }

    // kubectl (core/v1) shows it, in get and in describe.
    let out = server.kubectl_with(Path::new("kubectl"), &["get", "events"], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Misconfigured") && text.contains("configmap/subject"),
        "{text}"
    );
    let out = server.kubectl_with(
        Path::new("kubectl"),
        &["describe", "configmap", "subject"],
        None,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("the widget has no spokes"), "{text}");

    // A core event reads back through events.k8s.io.
    let core_event: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "legacy"},
        "involvedObject": {"kind": "ConfigMap", "name": "subject", "namespace": "default"},
        "reason": "Old", "message": "written through core/v1", "type": "Normal",
        "source": {"component": "legacy-tool"}, "count": 4
    }))
    .expect("core event");
    core_api
        .create(&PostParams::default(), &core_event)
        .await
        .expect("create core event");
    let viewed = new_api
        .get("legacy")
        .await
        .expect("get through events.k8s.io");
    assert_eq!(viewed.note.as_deref(), Some("written through core/v1"));
    assert_eq!(viewed.deprecated_count, Some(4));
    assert_eq!(
        viewed
            .deprecated_source
            .as_ref()
            .and_then(|s| s.component.as_deref()),
        Some("legacy-tool")
    );
    assert_eq!(
        viewed.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("subject")
    );
    let listed = new_api.list(&ListParams::default()).await.expect("list");
    assert_eq!(listed.items.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_k8s_io_creation_rules_are_enforced() {
    let server = Server::start();
    let client = server.client().await;
    let new_api: Api<NewEvent> = Api::namespaced(client.clone(), "default");
    let incomplete: NewEvent = serde_json::from_value(json!({
        "metadata": {"name": "incomplete"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "type": "Normal", "reason": "Something"
    }))
    .expect("event");
    match new_api.create(&PostParams::default(), &incomplete).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
            assert!(
                status.message.contains("reportingController"),
                "{}",
                status.message
            );
        }
        other => panic!("expected 422, got {other:?}"),
    }
    // Nothing was stored.
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    assert!(core.get_opt("incomplete").await.expect("get").is_none());
}

/// Events are not held in the watch cache (kube-apiserver's default `events#0`): get,
/// list, watch (from now, from a resourceVersion, with selectors) and deletecollection
/// are served from the store and behave as for every cached kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_served_from_the_store() {
    let server = Server::start();
    let client = server.client().await;
    let events: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let event = |name: &str, reason: &str| -> CoreEvent {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "involvedObject": {"kind": "ConfigMap", "name": "subject", "namespace": "default"},
            "reason": reason, "message": format!("{name} happened"), "type": "Normal",
            "source": {"component": "test"}, "count": 1
        }))
        .expect("event")
    };
    let first = events
        .create(&PostParams::default(), &event("first", "First"))
        .await
        .expect("create first");
    assert_eq!(
        events.get("first").await.expect("get").metadata.uid,
        first.metadata.uid
    );
    let listed = events.list(&ListParams::default()).await.expect("list");
    let rv = listed.metadata.resource_version.clone().expect("list rv");
    assert!(
        listed
            .items
            .iter()
            .any(|e| e.metadata.name.as_deref() == Some("first")),
        "{listed:?}"
    );

    // A watch from "0" starts with what exists; one from the list's version sees only later
    // changes; a selector watch sees only what matches.
    let mut from_zero = events
        .watch(&WatchParams::default().timeout(10), "0")
        .await
        .expect("watch from 0")
        .boxed();
    let mut from_list = events
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .expect("watch from the list")
        .boxed();
    let mut second_only = events
        .watch(
            &WatchParams::default().timeout(10).fields("reason=Second"),
            &rv,
        )
        .await
        .expect("selector watch")
        .boxed();
    match from_zero.next().await.expect("event").expect("ok") {
        WatchEvent::Added(e) => assert_eq!(e.metadata.name.as_deref(), Some("first")),
        other => panic!("expected ADDED first, got {other:?}"),
    }
    events
        .create(&PostParams::default(), &event("second", "Second"))
        .await
        .expect("create second");
    let mut changed = first.clone();
    changed.count = Some(2);
    events
        .replace("first", &PostParams::default(), &changed)
        .await
        .expect("update first");
    events
        .delete("second", &Default::default())
        .await
        .expect("delete second");
    let mut seen = Vec::new();
    for _ in 0..3 {
        match from_list.next().await.expect("event").expect("ok") {
            WatchEvent::Added(e) => {
                seen.push(format!("ADDED {}", e.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Modified(e) => seen.push(format!(
                "MODIFIED {} {:?}",
                e.metadata.name.unwrap_or_default(),
                e.count
            )),
            WatchEvent::Deleted(e) => {
                seen.push(format!("DELETED {}", e.metadata.name.unwrap_or_default()))
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        seen,
        ["ADDED second", "MODIFIED first Some(2)", "DELETED second"]
    );
    let mut selected = Vec::new();
    for _ in 0..2 {
        match second_only.next().await.expect("event").expect("ok") {
            WatchEvent::Added(e) => {
                selected.push(format!("ADDED {}", e.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Deleted(e) => {
                selected.push(format!("DELETED {}", e.metadata.name.unwrap_or_default()))
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(selected, ["ADDED second", "DELETED second"]);

    // deletecollection removes them all.
    events
        .delete_collection(&Default::default(), &ListParams::default())
        .await
        .expect("deletecollection");
    let left = events.list(&ListParams::default()).await.expect("list");
    assert!(left.items.is_empty(), "{:?}", left.items);
    assert!(events.get_opt("first").await.expect("get").is_none());
}
