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

/// One event waiting in an [`EventSink`].
struct Pending {
    object: ObjectReference,
    kind: EventType,
    reason: String,
    message: String,
}

/// A bounded, non-blocking front for a [`Recorder`], as client-go's event broadcaster
/// is: callers queue an event and go on, a few background writers drain the queue,
/// and when the queue is full the event is dropped (client-go's `DropIfChannelFull`)
/// instead of slowing the caller down. Hot paths (the scheduler binding thousands of
/// pods a second) use it so that an Event write never sits between two bindings.
#[derive(Clone)]
pub struct EventSink {
    queue: tokio::sync::mpsc::Sender<Pending>,
    dropped: Arc<std::sync::atomic::AtomicU64>,
}

impl EventSink {
    /// Starts `writers` tasks that write what is queued through `recorder`; at most
    /// `capacity` events wait. The writers end when every clone of the sink is gone.
    pub fn spawn(recorder: Recorder, capacity: usize, writers: usize) -> EventSink {
        let (queue, rx) = tokio::sync::mpsc::channel::<Pending>(capacity.max(1));
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..writers.max(1) {
            let (recorder, rx) = (recorder.clone(), rx.clone());
            tokio::spawn(async move {
                loop {
                    // Hold the receiver only to take one event, not while writing it.
                    let next = rx.lock().await.recv().await;
                    let Some(e) = next else { return };
                    recorder
                        .record(&e.object, e.kind, &e.reason, &e.message)
                        .await;
                }
            });
        }
        EventSink {
            queue,
            dropped: Arc::default(),
        }
    }

    /// Queues an event about `object`; drops it (and counts it) when the queue is full.
    pub fn emit(&self, object: ObjectReference, kind: EventType, reason: &str, message: String) {
        let event = Pending {
            object,
            kind,
            reason: reason.to_string(),
            message,
        };
        if self.queue.try_send(event).is_err() {
            let n = self
                .dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            // Say so now and then, not once per dropped event.
            if n.is_power_of_two() {
                tracing::warn!(dropped = n, reason, "event queue full; dropping events");
            }
        }
    }

    /// Events dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Pod".into()),
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        }
    }

    /// A client whose API hands every request's method and path to the test, then
    /// answers with `answer` (or never, when it is `None`).
    fn client(
        answer: Option<serde_json::Value>,
    ) -> (
        kube::Client,
        tokio::sync::mpsc::UnboundedReceiver<(String, String)>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let tx = tx.clone();
            let answer = answer.clone();
            async move {
                let _ = tx.send((req.method().to_string(), req.uri().path().to_string()));
                match answer {
                    Some(body) => http::Response::builder()
                        .status(201)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(body.to_string().into_bytes())),
                    None => std::future::pending().await,
                }
            }
        });
        (kube::Client::new(service, "default"), rx)
    }

    #[tokio::test]
    async fn a_full_sink_drops_events_instead_of_waiting() {
        // An API that never answers: the single writer hangs on its first event.
        let (client, mut requests) = client(None);
        let sink = EventSink::spawn(Recorder::new(client, "test"), 2, 1);
        // The test runtime is single-threaded: nothing is written until we yield, so
        // two events fit and the other eight are dropped without blocking.
        for i in 0..10 {
            sink.emit(
                object(&format!("p{i}")),
                EventType::Normal,
                "Scheduled",
                format!("m{i}"),
            );
        }
        assert_eq!(sink.dropped(), 8);
        let (method, path) = requests
            .recv()
            .await
            .expect("the writer sends the first event");
        assert_eq!(method, "POST");
        assert_eq!(path, "/api/v1/namespaces/default/events");
    }

    #[tokio::test]
    async fn queued_events_are_all_written() {
        let created = serde_json::json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "p.1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "p"},
        });
        let (client, mut requests) = client(Some(created));
        let sink = EventSink::spawn(Recorder::new(client, "test"), 100, 4);
        for i in 0..20 {
            sink.emit(
                object(&format!("p{i}")),
                EventType::Warning,
                "FailedScheduling",
                format!("m{i}"),
            );
        }
        for _ in 0..20 {
            let (method, path) =
                tokio::time::timeout(std::time::Duration::from_secs(5), requests.recv())
                    .await
                    .expect("every queued event is written")
                    .expect("the API is still there");
            assert_eq!(
                (method.as_str(), path.as_str()),
                ("POST", "/api/v1/namespaces/default/events")
            );
        }
        assert_eq!(sink.dropped(), 0);
    }
}
