//! The event recorder every component uses: writes core/v1 Events through the API,
//! aggregating repeats (same object, type, reason and message) into one Event whose
//! `count` and `lastTimestamp` grow, as client-go's recorder does, so a crash-looping
//! pod does not flood the store. Talks only to the API.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::Mutex;

/// Event type: `Normal` or `Warning`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Identifies "the same event" for aggregation.
type EventKey = (String, String, String, &'static str, String, String);

/// Records Events for one component (`default-scheduler`, `deployment-controller`, ...).
#[derive(Clone)]
pub struct Recorder {
    client: kube::Client,
    component: String,
    host: Option<String>,
    /// Name and count of the Event already written for each key.
    seen: Arc<Mutex<HashMap<EventKey, (String, i32)>>>,
}

/// Now, as the timestamp type k8s-openapi uses.
fn timestamp() -> k8s_openapi::jiff::Timestamp {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    k8s_openapi::jiff::Timestamp::new(now.as_secs() as i64, now.subsec_nanos() as i32)
        .unwrap_or_default()
}

impl Recorder {
    pub fn new(client: kube::Client, component: impl Into<String>) -> Self {
        Recorder {
            client,
            component: component.into(),
            host: None,
            seen: Arc::default(),
        }
    }

    /// Sets the node the events come from (kubelets).
    pub fn with_host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into());
        self
    }

    /// Records an event about `object`. Failures are logged, never returned: events
    /// are best effort, as in Kubernetes.
    pub async fn record(
        &self,
        object: &ObjectReference,
        kind: EventType,
        reason: &str,
        message: &str,
    ) {
        if let Err(e) = self.try_record(object, kind, reason, message).await {
            tracing::debug!(reason, error = %e, "could not record an event");
        }
    }

    async fn try_record(
        &self,
        object: &ObjectReference,
        kind: EventType,
        reason: &str,
        message: &str,
    ) -> kube::Result<()> {
        let namespace = object
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let key: EventKey = (
            namespace.clone(),
            object.kind.clone().unwrap_or_default(),
            object.name.clone().unwrap_or_default(),
            kind.as_str(),
            reason.to_string(),
            message.to_string(),
        );
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let t = Time(timestamp());
        // The lock is never held across an API call: one slow write must not queue
        // every other event of this component behind it.
        let repeat = {
            let mut seen = self.seen.lock().await;
            seen.get_mut(&key).map(|(name, count)| {
                *count += 1;
                (name.clone(), *count)
            })
        };
        if let Some((name, count)) = repeat {
            let patch = serde_json::json!({"count": count, "lastTimestamp": t});
            if api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .is_ok()
            {
                return Ok(());
            }
            // The aggregated event is gone (expired or deleted): write a new one.
            self.seen.lock().await.remove(&key);
        }
        let object_name = object.name.clone().unwrap_or_default();
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{object_name}.")),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            involved_object: object.clone(),
            reason: Some(reason.to_string()),
            message: Some(message.to_string()),
            type_: Some(kind.as_str().to_string()),
            count: Some(1),
            first_timestamp: Some(t.clone()),
            last_timestamp: Some(t),
            event_time: None::<MicroTime>,
            source: Some(EventSource {
                component: Some(self.component.clone()),
                host: self.host.clone(),
            }),
            reporting_component: Some(self.component.clone()),
            reporting_instance: Some(self.host.clone().unwrap_or_else(|| self.component.clone())),
            ..Default::default()
        };
        let created = api.create(&PostParams::default(), &event).await?;
        let mut seen = self.seen.lock().await;
        if let Some(name) = created.metadata.name {
            seen.insert(key, (name, 1));
        }
        // Keep memory bounded: forget the oldest keys past a few thousand.
        if seen.len() > 4096 {
            let drop: Vec<EventKey> = seen.keys().take(1024).cloned().collect();
            for k in drop {
                seen.remove(&k);
            }
        }
        Ok(())
    }
}

/// An ObjectReference for an object with metadata.
pub fn reference<K>(object: &K) -> ObjectReference
where
    K: kube::Resource<DynamicType = ()>,
{
    let meta = object.meta();
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..Default::default()
    }
}
