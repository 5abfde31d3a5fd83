//! PersistentVolumes and claims, as kube-controller-manager's PV binder and its
//! `pvc-protection` / `pv-protection` controllers:
//!
//! * a Pending claim is bound to the smallest Available volume that fits it — same class,
//!   volume mode, a superset of its access modes, at least the requested size, its label
//!   selector, and the node a `WaitForFirstConsumer` claim was given
//!   (`volume.kubernetes.io/selected-node`) — or to the volume it names
//!   (`spec.volumeName`), or to a volume pre-bound to it (`spec.claimRef`); the volume
//!   first (`claimRef`, `Bound`), then the claim (`volumeName`, `bind-completed`, `Bound`
//!   with the volume's capacity and access modes);
//! * with no fit, a class with a provisioner gets the claim annotated
//!   `volume.kubernetes.io/storage-provisioner` for it (event `ExternalProvisioning`), a
//!   `WaitForFirstConsumer` claim without a selected node waits (event
//!   `WaitForFirstConsumer`), and a claim without a class stays Pending (`FailedBinding`);
//! * a claim without a class gets the default StorageClass (kube's retroactive default);
//! * a bound volume whose claim is gone is `Released`; `Retain` keeps it so, `Delete` is
//!   left to the provisioner that made it (`pv.kubernetes.io/provisioned-by`), and a
//!   volume no provisioner made is `Failed` (kube has no deleter for it either);
//! * a bound claim whose volume is gone, or bound elsewhere, is `Lost` (`ClaimLost`,
//!   `ClaimMisbound`);
//! * every claim carries `kubernetes.io/pvc-protection` until it is deleted and no pod
//!   that is not finished uses it; every volume `kubernetes.io/pv-protection` until it is
//!   deleted and not Bound.
//!
//! Level-triggered: each sweep lists the cached volumes, claims and classes, computes the
//! actions ([`plan`], pure) and carries them out with resourceVersion preconditions, so a
//! stale cache only costs a conflict and the next sweep. Sweeps run on every change and
//! every 15 s (kube's sync period). An API client only; it never touches the store.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::events::{EventSink, EventType, Recorder};
use super::workload::selector_matches;

pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
pub const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
pub const ANN_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
pub const ANN_BETA_DEFAULT_CLASS: &str = "storageclass.beta.kubernetes.io/is-default-class";
/// The provisioner name of classes for volumes an administrator makes by hand.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// kube's PV controller resync period.
const SYNC_PERIOD: Duration = Duration::from_secs(15);
/// Changes come in bursts (a volume and its claim); one sweep after them.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// One thing a sweep does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    AddClaimFinalizer(Key),
    RemoveClaimFinalizer(Key),
    AddVolumeFinalizer(String),
    RemoveVolumeFinalizer(String),
    /// Give a claim without a class the default class.
    SetClaimClass(Key, String),
    /// `claimRef` (when not yet set to the claim's uid) and phase Bound.
    BindVolume {
        volume: String,
        claim: Key,
        claim_uid: String,
    },
    /// `volumeName`, the binding annotations, phase Bound with the volume's capacity and
    /// access modes.
    BindClaim {
        claim: Key,
        volume: String,
    },
    /// Drop a `claimRef` this controller set to a claim that is now bound elsewhere.
    UnbindVolume(String),
    VolumePhase {
        volume: String,
        phase: &'static str,
        message: Option<String>,
    },
    ClaimPhase(Key, &'static str),
    /// Hand the claim to the class's provisioner.
    AnnotateProvisioner {
        claim: Key,
        provisioner: String,
    },
    Event {
        object: ObjectReference,
        warning: bool,
        reason: &'static str,
        message: String,
    },
}

/// A claim's namespace and name.
pub type Key = (String, String);

fn key_of(pvc: &PersistentVolumeClaim) -> Key {
    (
        pvc.metadata.namespace.clone().unwrap_or_default(),
        pvc.metadata.name.clone().unwrap_or_default(),
    )
}

fn has_finalizer(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    f: &str,
) -> bool {
    meta.finalizers.iter().flatten().any(|x| x == f)
}

fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// A storage quantity in bytes (`None` when absent or malformed: such a claim matches
/// nothing, such a volume holds nothing).
fn storage(
    resources: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Option<i128> {
    crate::scheduler::quantity::parse_value(&resources?.get("storage")?.0)
}

fn volume_mode(mode: Option<&String>) -> &str {
    mode.map_or("Filesystem", String::as_str)
}

/// The default StorageClass: the newest of those annotated default (kube's choice when
/// several are).
pub fn default_class(classes: &[Arc<StorageClass>]) -> Option<&str> {
    classes
        .iter()
        .filter(|c| {
            [ANN_DEFAULT_CLASS, ANN_BETA_DEFAULT_CLASS]
                .iter()
                .any(|a| annotation(&c.metadata, a) == Some("true"))
        })
        .max_by_key(|c| {
            (
                c.metadata.creation_timestamp.as_ref().map(|t| t.0),
                c.metadata.name.clone(),
            )
        })
        .and_then(|c| c.metadata.name.as_deref())
}

/// Whether a volume's required node affinity admits `node` (its name as the
/// `kubernetes.io/hostname` label, the one label we know without the Node object).
fn affinity_admits(pv: &PersistentVolume, node: &str) -> bool {
    let Some(required) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return true;
    };
    let labels = BTreeMap::from([("kubernetes.io/hostname".to_string(), node.to_string())]);
    required.node_selector_terms.iter().any(|term| {
        term.match_expressions.iter().flatten().all(|req| {
            let value = labels.get(&req.key);
            let values = req.values.as_deref().unwrap_or_default();
            match req.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                // Gt/Lt and other labels: we cannot tell here; do not rule it out.
                _ => !matches!(req.key.as_str(), "kubernetes.io/hostname"),
            }
        })
    })
}

/// Whether `pv` can serve `pvc` (not counting who it is bound to).
fn fits(pv: &PersistentVolume, pvc: &PersistentVolumeClaim, class: &str) -> bool {
    let (Some(pv_spec), Some(pvc_spec)) = (pv.spec.as_ref(), pvc.spec.as_ref()) else {
        return false;
    };
    if pv.metadata.deletion_timestamp.is_some() {
        return false;
    }
    if pv_spec.storage_class_name.as_deref().unwrap_or("") != class {
        return false;
    }
    if volume_mode(pv_spec.volume_mode.as_ref()) != volume_mode(pvc_spec.volume_mode.as_ref()) {
        return false;
    }
    let offered: HashSet<&String> = pv_spec.access_modes.iter().flatten().collect();
    if !pvc_spec
        .access_modes
        .iter()
        .flatten()
        .all(|m| offered.contains(m))
    {
        return false;
    }
    let wanted = storage(
        pvc_spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref()),
    );
    let held = storage(pv_spec.capacity.as_ref());
    match (wanted, held) {
        (Some(w), Some(h)) if h >= w => {}
        (None, Some(_)) => {}
        _ => return false,
    }
    if let Some(selector) = pvc_spec.selector.as_ref()
        && (selector
            .match_labels
            .as_ref()
            .is_some_and(|m| !m.is_empty())
            || selector
                .match_expressions
                .as_ref()
                .is_some_and(|e| !e.is_empty()))
        && !selector_matches(selector, pv.metadata.labels.as_ref())
    {
        return false;
    }
    if let Some(node) = annotation(&pvc.metadata, ANN_SELECTED_NODE)
        && !affinity_admits(pv, node)
    {
        return false;
    }
    true
}

fn claim_ref_is(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> bool {
    let Some(claim_ref) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    let (namespace, name) = key_of(pvc);
    claim_ref.namespace.as_deref() == Some(namespace.as_str())
        && claim_ref.name.as_deref() == Some(name.as_str())
        && claim_ref
            .uid
            .as_deref()
            .is_none_or(|u| u.is_empty() || Some(u) == pvc.metadata.uid.as_deref())
}

/// The phase, `""` when none was written yet (the controller writes the first one).
fn volume_phase(pv: &PersistentVolume) -> &str {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// The phase, `""` when none was written yet (the controller writes `Pending`).
fn claim_phase(pvc: &PersistentVolumeClaim) -> &str {
    pvc.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn reference_to_claim(pvc: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: pvc.metadata.namespace.clone(),
        name: pvc.metadata.name.clone(),
        uid: pvc.metadata.uid.clone(),
        resource_version: pvc.metadata.resource_version.clone(),
        ..Default::default()
    }
}

fn reference_to_volume(pv: &PersistentVolume) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolume".into()),
        name: pv.metadata.name.clone(),
        uid: pv.metadata.uid.clone(),
        resource_version: pv.metadata.resource_version.clone(),
        ..Default::default()
    }
}

fn claim_event(
    pvc: &PersistentVolumeClaim,
    warning: bool,
    reason: &'static str,
    message: String,
) -> Action {
    Action::Event {
        object: reference_to_claim(pvc),
        warning,
        reason,
        message,
    }
}

/// What one sweep does, from the cached volumes, claims and classes; `claims_in_use` are
/// the claims (namespace, name) that a pod that has not finished uses (asked only for
/// deleted claims).
pub fn plan(
    volumes: &[Arc<PersistentVolume>],
    claims: &[Arc<PersistentVolumeClaim>],
    classes: &[Arc<StorageClass>],
    claims_in_use: &HashSet<Key>,
) -> Vec<Action> {
    let mut actions = Vec::new();
    let volume_by_name: HashMap<&str, &PersistentVolume> = volumes
        .iter()
        .filter_map(|v| Some((v.metadata.name.as_deref()?, v.as_ref())))
        .collect();
    let claim_by_key: HashMap<Key, &PersistentVolumeClaim> =
        claims.iter().map(|c| (key_of(c), c.as_ref())).collect();
    let class_by_name: HashMap<&str, &StorageClass> = classes
        .iter()
        .filter_map(|c| Some((c.metadata.name.as_deref()?, c.as_ref())))
        .collect();
    let default = default_class(classes);
    // Volumes handed out in this sweep: two claims must not get the same one.
    let mut taken: HashSet<&str> = HashSet::new();

    let mut sorted_claims: Vec<&PersistentVolumeClaim> =
        claims.iter().map(|c| c.as_ref()).collect();
    // Oldest first, as kube's queue mostly is: the first claim gets the first fit.
    sorted_claims.sort_by_key(|c| {
        (
            c.metadata.creation_timestamp.as_ref().map(|t| t.0),
            key_of(c),
        )
    });
    for pvc in sorted_claims {
        let key = key_of(pvc);
        let deleting = pvc.metadata.deletion_timestamp.is_some();
        let protected = has_finalizer(&pvc.metadata, PVC_PROTECTION);
        if !deleting && !protected {
            actions.push(Action::AddClaimFinalizer(key.clone()));
        }
        if deleting {
            if protected && !claims_in_use.contains(&key) {
                actions.push(Action::RemoveClaimFinalizer(key.clone()));
            }
            continue;
        }
        let Some(spec) = pvc.spec.as_ref() else {
            continue;
        };
        let phase = claim_phase(pvc);
        let volume_name = spec.volume_name.as_deref().filter(|n| !n.is_empty());
        if spec.storage_class_name.is_none()
            && volume_name.is_none()
            && let Some(class) = default
        {
            actions.push(Action::SetClaimClass(key.clone(), class.to_string()));
            continue;
        }
        let class = spec.storage_class_name.as_deref().unwrap_or("");
        if let Some(volume_name) = volume_name {
            match volume_by_name.get(volume_name) {
                None if phase == "Bound" => {
                    actions.push(Action::ClaimPhase(key.clone(), "Lost"));
                    actions.push(claim_event(
                        pvc,
                        true,
                        "ClaimLost",
                        "Bound claim has lost its PersistentVolume. Data on the volume is lost!"
                            .into(),
                    ));
                }
                None => {
                    if phase != "Pending" {
                        actions.push(Action::ClaimPhase(key.clone(), "Pending"));
                    }
                    actions.push(claim_event(
                        pvc,
                        true,
                        "FailedBinding",
                        format!("volume \"{volume_name}\" not found"),
                    ));
                }
                Some(pv) => {
                    let unclaimed = pv.spec.as_ref().is_none_or(|s| s.claim_ref.is_none());
                    if claim_ref_is(pv, pvc) || unclaimed {
                        let uid_set = pv
                            .spec
                            .as_ref()
                            .and_then(|s| s.claim_ref.as_ref())
                            .and_then(|r| r.uid.as_deref())
                            .is_some_and(|u| !u.is_empty());
                        if !uid_set || volume_phase(pv) != "Bound" {
                            actions.push(Action::BindVolume {
                                volume: volume_name.to_string(),
                                claim: key.clone(),
                                claim_uid: pvc.metadata.uid.clone().unwrap_or_default(),
                            });
                        }
                        if phase != "Bound"
                            || annotation(&pvc.metadata, ANN_BIND_COMPLETED).is_none()
                        {
                            actions.push(Action::BindClaim {
                                claim: key.clone(),
                                volume: volume_name.to_string(),
                            });
                        }
                        taken.insert(volume_name);
                    } else if phase == "Bound" {
                        actions.push(Action::ClaimPhase(key.clone(), "Lost"));
                        actions.push(claim_event(
                            pvc,
                            true,
                            "ClaimMisbound",
                            "Two claims are bound to the same volume, this one is bound incorrectly".into(),
                        ));
                    } else {
                        actions.push(claim_event(
                            pvc,
                            true,
                            "FailedBinding",
                            format!("volume \"{volume_name}\" already bound to a different claim."),
                        ));
                    }
                }
            }
            continue;
        }
        // Pending, no volume named: a volume pre-bound to it first, then the best fit.
        let pre_bound = volumes
            .iter()
            .map(|v| v.as_ref())
            .find(|pv| claim_ref_is(pv, pvc) && pv.metadata.deletion_timestamp.is_none());
        let class_object = class_by_name.get(class).copied();
        let waits_for_consumer = class_object.and_then(|c| c.volume_binding_mode.as_deref())
            == Some("WaitForFirstConsumer");
        let selected = annotation(&pvc.metadata, ANN_SELECTED_NODE).is_some();
        if pre_bound.is_none() && waits_for_consumer && !selected {
            if phase != "Pending" {
                actions.push(Action::ClaimPhase(key.clone(), "Pending"));
            }
            actions.push(claim_event(
                pvc,
                false,
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding".into(),
            ));
            continue;
        }
        let best = pre_bound.or_else(|| {
            volumes
                .iter()
                .map(|v| v.as_ref())
                .filter(|pv| {
                    let name = pv.metadata.name.as_deref().unwrap_or_default();
                    !taken.contains(name)
                        && pv.spec.as_ref().is_some_and(|s| s.claim_ref.is_none())
                        && matches!(volume_phase(pv), "Available" | "Pending" | "")
                        && fits(pv, pvc, class)
                })
                .min_by_key(|pv| {
                    (
                        storage(pv.spec.as_ref().and_then(|s| s.capacity.as_ref())),
                        pv.metadata.name.clone(),
                    )
                })
        });
        if let Some(pv) = best {
            let name = pv.metadata.name.as_deref().unwrap_or_default();
            taken.insert(name);
            actions.push(Action::BindVolume {
                volume: name.to_string(),
                claim: key.clone(),
                claim_uid: pvc.metadata.uid.clone().unwrap_or_default(),
            });
            actions.push(Action::BindClaim {
                claim: key.clone(),
                volume: name.to_string(),
            });
            continue;
        }
        if phase != "Pending" {
            actions.push(Action::ClaimPhase(key.clone(), "Pending"));
        }
        match class_object {
            _ if class.is_empty() => actions.push(claim_event(
                pvc,
                false,
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set".into(),
            )),
            None => actions.push(claim_event(
                pvc,
                true,
                "ProvisioningFailed",
                format!("storageclass.storage.k8s.io \"{class}\" not found"),
            )),
            Some(sc) if sc.provisioner == NO_PROVISIONER => actions.push(claim_event(
                pvc,
                false,
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set".into(),
            )),
            Some(sc) => {
                if annotation(&pvc.metadata, ANN_STORAGE_PROVISIONER)
                    != Some(sc.provisioner.as_str())
                {
                    actions.push(Action::AnnotateProvisioner {
                        claim: key.clone(),
                        provisioner: sc.provisioner.clone(),
                    });
                }
                actions.push(claim_event(
                    pvc,
                    false,
                    "ExternalProvisioning",
                    format!(
                        "Waiting for a volume to be created either by the external provisioner '{}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.",
                        sc.provisioner
                    ),
                ));
            }
        }
    }

    for pv in volumes {
        let Some(name) = pv.metadata.name.as_deref() else {
            continue;
        };
        let deleting = pv.metadata.deletion_timestamp.is_some();
        let protected = has_finalizer(&pv.metadata, PV_PROTECTION);
        let phase = volume_phase(pv);
        if !deleting && !protected {
            actions.push(Action::AddVolumeFinalizer(name.to_string()));
        }
        if deleting && protected && phase != "Bound" {
            actions.push(Action::RemoveVolumeFinalizer(name.to_string()));
        }
        if taken.contains(name) {
            continue;
        }
        let Some(spec) = pv.spec.as_ref() else {
            continue;
        };
        let Some(claim_ref) = spec.claim_ref.as_ref() else {
            if phase != "Available" {
                actions.push(Action::VolumePhase {
                    volume: name.to_string(),
                    phase: "Available",
                    message: None,
                });
            }
            continue;
        };
        let claim_key = (
            claim_ref.namespace.clone().unwrap_or_default(),
            claim_ref.name.clone().unwrap_or_default(),
        );
        let uid = claim_ref.uid.as_deref().filter(|u| !u.is_empty());
        let claim = claim_by_key.get(&claim_key).copied();
        match (claim, uid) {
            // Pre-bound, its claim not there yet or not bound yet: waits, Available.
            (None, None) | (Some(_), None) => {
                if phase != "Available" {
                    actions.push(Action::VolumePhase {
                        volume: name.to_string(),
                        phase: "Available",
                        message: None,
                    });
                }
            }
            (Some(pvc), Some(uid)) if pvc.metadata.uid.as_deref() == Some(uid) => {
                let claimed_volume = pvc
                    .spec
                    .as_ref()
                    .and_then(|s| s.volume_name.as_deref())
                    .filter(|n| !n.is_empty());
                match claimed_volume {
                    Some(v) if v == name && phase == "Bound" => {}
                    Some(v) if v == name => actions.push(Action::VolumePhase {
                        volume: name.to_string(),
                        phase: "Bound",
                        message: None,
                    }),
                    // The claim went to another volume: let go if we bound it.
                    Some(_) if annotation(&pv.metadata, ANN_BOUND_BY_CONTROLLER) == Some("yes") => {
                        actions.push(Action::UnbindVolume(name.to_string()));
                    }
                    Some(_) => actions.push(Action::VolumePhase {
                        volume: name.to_string(),
                        phase: "Released",
                        message: None,
                    }),
                    // Binding in progress: the claim's side follows.
                    None => {}
                }
            }
            // The claim it was bound to is gone (or was recreated): released.
            _ => {
                let policy = spec
                    .persistent_volume_reclaim_policy
                    .as_deref()
                    .unwrap_or("Retain");
                let provisioned = annotation(&pv.metadata, ANN_PROVISIONED_BY).is_some();
                if policy == "Retain" || provisioned || phase == "Failed" {
                    if phase != "Released" && phase != "Failed" {
                        actions.push(Action::VolumePhase {
                            volume: name.to_string(),
                            phase: "Released",
                            message: None,
                        });
                    }
                } else {
                    let message = format!(
                        "error getting deleter volume plugin for volume \"{name}\": no deletable volume plugin matched"
                    );
                    actions.push(Action::VolumePhase {
                        volume: name.to_string(),
                        phase: "Failed",
                        message: Some(message.clone()),
                    });
                    actions.push(Action::Event {
                        object: reference_to_volume(pv),
                        warning: true,
                        reason: "VolumeFailedDelete",
                        message,
                    });
                }
            }
        }
    }
    actions
}

/// Runs the PV controllers until the process ends.
pub async fn run(client: kube::Client) {
    let changed = Arc::new(Notify::new());
    let volumes = crate::informer::reflect(
        Api::<PersistentVolume>::all(client.clone()),
        changed.clone(),
        "persistentvolume",
    );
    let claims = crate::informer::reflect(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        changed.clone(),
        "persistentvolume",
    );
    let classes = crate::informer::reflect(
        Api::<StorageClass>::all(client.clone()),
        changed.clone(),
        "persistentvolume",
    );
    let events = EventSink::spawn(
        Recorder::new(client.clone(), "persistentvolume-controller"),
        256,
        2,
    );
    // (uid, reason, message) of events already said: a sweep repeats its plan, not its
    // events.
    let mut said: HashSet<(String, &'static str, String)> = HashSet::new();
    // Plan only from complete caches: a half-listed one would look like missing volumes.
    if volumes.wait_until_ready().await.is_err()
        || claims.wait_until_ready().await.is_err()
        || classes.wait_until_ready().await.is_err()
    {
        tracing::error!("persistent volume caches stopped before they were ready");
        return;
    }
    loop {
        let volume_list = volumes.state();
        let claim_list = claims.state();
        let class_list = classes.state();
        let in_use = claims_in_use(&client, &claim_list).await;
        let actions = plan(&volume_list, &claim_list, &class_list, &in_use);
        let live: HashSet<String> = claim_list
            .iter()
            .filter_map(|c| c.metadata.uid.clone())
            .chain(volume_list.iter().filter_map(|v| v.metadata.uid.clone()))
            .collect();
        said.retain(|(uid, _, _)| live.contains(uid));
        for action in actions {
            if let Action::Event {
                object,
                warning,
                reason,
                message,
            } = action
            {
                let said_key = (
                    object.uid.clone().unwrap_or_default(),
                    reason,
                    message.clone(),
                );
                if said.insert(said_key) {
                    let kind = if warning {
                        EventType::Warning
                    } else {
                        EventType::Normal
                    };
                    events.emit(object, kind, reason, message);
                }
                continue;
            }
            if let Err(e) = execute(&client, &action, &volume_list, &claim_list).await {
                tracing::debug!(?action, error = %e, "persistent volume action failed; retrying on the next sweep");
            }
        }
        tokio::select! {
            () = changed.notified() => tokio::time::sleep(DEBOUNCE).await,
            () = tokio::time::sleep(SYNC_PERIOD) => {}
        }
    }
}

/// The deleted claims (with the protection finalizer) that a pod which has not finished
/// still uses, asked of the API (a live list, as kube's pvc-protection controller
/// confirms before it lets go).
async fn claims_in_use(
    client: &kube::Client,
    claims: &[Arc<PersistentVolumeClaim>],
) -> HashSet<Key> {
    let mut in_use = HashSet::new();
    let namespaces: HashSet<&str> = claims
        .iter()
        .filter(|c| {
            c.metadata.deletion_timestamp.is_some() && has_finalizer(&c.metadata, PVC_PROTECTION)
        })
        .filter_map(|c| c.metadata.namespace.as_deref())
        .collect();
    for namespace in namespaces {
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let list = match pods.list(&ListParams::default()).await {
            Ok(list) => list,
            Err(e) => {
                // Unknown: treat every claim of the namespace as used, not as free.
                tracing::debug!(namespace, error = %e, "listing pods for pvc-protection");
                for c in claims {
                    if c.metadata.namespace.as_deref() == Some(namespace) {
                        in_use.insert(key_of(c));
                    }
                }
                continue;
            }
        };
        for pod in list.items {
            let finished = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|p| p == "Succeeded" || p == "Failed");
            if finished {
                continue;
            }
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
                if let Some(claim) = &volume.persistent_volume_claim {
                    in_use.insert((namespace.to_string(), claim.claim_name.clone()));
                }
                if volume.ephemeral.is_some() {
                    in_use.insert((namespace.to_string(), format!("{pod_name}-{}", volume.name)));
                }
            }
        }
    }
    in_use
}

fn find_claim<'a>(
    claims: &'a [Arc<PersistentVolumeClaim>],
    key: &Key,
) -> Option<&'a PersistentVolumeClaim> {
    claims
        .iter()
        .map(|c| c.as_ref())
        .find(|c| &key_of(c) == key)
}

fn find_volume<'a>(
    volumes: &'a [Arc<PersistentVolume>],
    name: &str,
) -> Option<&'a PersistentVolume> {
    volumes
        .iter()
        .map(|v| v.as_ref())
        .find(|v| v.metadata.name.as_deref() == Some(name))
}

/// A finalizer list with `finalizer` added or removed, as a merge patch guarded by the
/// resourceVersion the list was read at.
fn finalizer_patch(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    finalizer: &str,
    add: bool,
) -> Value {
    let mut list: Vec<String> = meta
        .finalizers
        .iter()
        .flatten()
        .filter(|f| f.as_str() != finalizer)
        .cloned()
        .collect();
    if add {
        list.push(finalizer.to_string());
    }
    json!({"metadata": {"finalizers": list, "resourceVersion": meta.resource_version}})
}

async fn execute(
    client: &kube::Client,
    action: &Action,
    volumes: &[Arc<PersistentVolume>],
    claims: &[Arc<PersistentVolumeClaim>],
) -> anyhow::Result<()> {
    let pv_api: Api<PersistentVolume> = Api::all(client.clone());
    let claim_api = |namespace: &str| -> Api<PersistentVolumeClaim> {
        Api::namespaced(client.clone(), namespace)
    };
    let params = PatchParams::default();
    let missing = || anyhow::anyhow!("not in the cache any more");
    match action {
        Action::AddClaimFinalizer(key) | Action::RemoveClaimFinalizer(key) => {
            let pvc = find_claim(claims, key).ok_or_else(missing)?;
            let add = matches!(action, Action::AddClaimFinalizer(_));
            claim_api(&key.0)
                .patch(
                    &key.1,
                    &params,
                    &Patch::Merge(finalizer_patch(&pvc.metadata, PVC_PROTECTION, add)),
                )
                .await?;
        }
        Action::AddVolumeFinalizer(name) | Action::RemoveVolumeFinalizer(name) => {
            let pv = find_volume(volumes, name).ok_or_else(missing)?;
            let add = matches!(action, Action::AddVolumeFinalizer(_));
            pv_api
                .patch(
                    name,
                    &params,
                    &Patch::Merge(finalizer_patch(&pv.metadata, PV_PROTECTION, add)),
                )
                .await?;
        }
        Action::SetClaimClass(key, class) => {
            let pvc = find_claim(claims, key).ok_or_else(missing)?;
            claim_api(&key.0)
                .patch(
                    &key.1,
                    &params,
                    &Patch::Merge(json!({
                        "metadata": {"resourceVersion": pvc.metadata.resource_version},
                        "spec": {"storageClassName": class}
                    })),
                )
                .await?;
        }
        Action::BindVolume {
            volume,
            claim,
            claim_uid,
        } => {
            let pv = find_volume(volumes, volume).ok_or_else(missing)?;
            let pvc = find_claim(claims, claim).ok_or_else(missing)?;
            let current = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
            let needs_ref = current.is_none_or(|r| r.uid.as_deref() != Some(claim_uid.as_str()));
            if needs_ref {
                let mut patch = json!({
                    "metadata": {"resourceVersion": pv.metadata.resource_version},
                    "spec": {"claimRef": {
                        "kind": "PersistentVolumeClaim",
                        "apiVersion": "v1",
                        "namespace": claim.0,
                        "name": claim.1,
                        "uid": claim_uid,
                        "resourceVersion": pvc.metadata.resource_version,
                    }}
                });
                if current.is_none() {
                    patch["metadata"]["annotations"] = json!({ANN_BOUND_BY_CONTROLLER: "yes"});
                }
                pv_api.patch(volume, &params, &Patch::Merge(patch)).await?;
            }
            pv_api
                .patch_status(
                    volume,
                    &params,
                    &Patch::Merge(
                        json!({"status": {"phase": "Bound", "message": null, "reason": null}}),
                    ),
                )
                .await?;
        }
        Action::BindClaim { claim, volume } => {
            let pv = find_volume(volumes, volume).ok_or_else(missing)?;
            let pvc = find_claim(claims, claim).ok_or_else(missing)?;
            let api = claim_api(&claim.0);
            let already_named =
                pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()) == Some(volume.as_str());
            let mut annotations = json!({ANN_BIND_COMPLETED: "yes"});
            if !already_named {
                annotations[ANN_BOUND_BY_CONTROLLER] = json!("yes");
            }
            api.patch(
                &claim.1,
                &params,
                &Patch::Merge(json!({
                    "metadata": {"resourceVersion": pvc.metadata.resource_version, "annotations": annotations},
                    "spec": {"volumeName": volume}
                })),
            )
            .await?;
            let spec = pv.spec.clone().unwrap_or_default();
            api.patch_status(
                &claim.1,
                &params,
                &Patch::Merge(json!({"status": {
                    "phase": "Bound",
                    "accessModes": spec.access_modes,
                    "capacity": spec.capacity,
                }})),
            )
            .await?;
        }
        Action::UnbindVolume(name) => {
            let pv = find_volume(volumes, name).ok_or_else(missing)?;
            pv_api
                .patch(
                    name,
                    &params,
                    &Patch::Merge(json!({
                        "metadata": {"resourceVersion": pv.metadata.resource_version,
                                     "annotations": {ANN_BOUND_BY_CONTROLLER: null}},
                        "spec": {"claimRef": null}
                    })),
                )
                .await?;
            pv_api
                .patch_status(
                    name,
                    &params,
                    &Patch::Merge(json!({"status": {"phase": "Available"}})),
                )
                .await?;
        }
        Action::VolumePhase {
            volume,
            phase,
            message,
        } => {
            pv_api
                .patch_status(
                    volume,
                    &params,
                    &Patch::Merge(json!({"status": {"phase": phase, "message": message}})),
                )
                .await?;
        }
        Action::ClaimPhase(key, phase) => {
            claim_api(&key.0)
                .patch_status(
                    &key.1,
                    &params,
                    &Patch::Merge(json!({"status": {"phase": phase}})),
                )
                .await?;
        }
        Action::AnnotateProvisioner { claim, provisioner } => {
            let pvc = find_claim(claims, claim).ok_or_else(missing)?;
            claim_api(&claim.0)
                .patch(
                    &claim.1,
                    &params,
                    &Patch::Merge(json!({"metadata": {
                        "resourceVersion": pvc.metadata.resource_version,
                        "annotations": {
                            ANN_STORAGE_PROVISIONER: provisioner,
                            ANN_BETA_STORAGE_PROVISIONER: provisioner,
                        }
                    }})),
                )
                .await?;
        }
        Action::Event { .. } => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pv(value: Value) -> Arc<PersistentVolume> {
        Arc::new(serde_json::from_value(value).expect("pv"))
    }
    fn pvc(value: Value) -> Arc<PersistentVolumeClaim> {
        Arc::new(serde_json::from_value(value).expect("pvc"))
    }
    fn class(value: Value) -> Arc<StorageClass> {
        Arc::new(serde_json::from_value(value).expect("class"))
    }
    fn volume(name: &str, size: &str, class: &str, extra: Value) -> Arc<PersistentVolume> {
        let mut v = json!({
            "metadata": {"name": name, "uid": format!("uid-{name}"), "finalizers": [PV_PROTECTION]},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": class, "hostPath": {"path": "/tmp"},
                     "persistentVolumeReclaimPolicy": "Retain"},
            "status": {"phase": "Available"}
        });
        merge(&mut v, extra);
        pv(v)
    }
    fn claim(
        name: &str,
        size: &str,
        class: Option<&str>,
        extra: Value,
    ) -> Arc<PersistentVolumeClaim> {
        let mut v = json!({
            "metadata": {"namespace": "default", "name": name, "uid": format!("uid-{name}"),
                         "finalizers": [PVC_PROTECTION]},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
            "status": {"phase": "Pending"}
        });
        if let Some(class) = class {
            v["spec"]["storageClassName"] = json!(class);
        }
        merge(&mut v, extra);
        pvc(v)
    }
    fn merge(base: &mut Value, extra: Value) {
        match (base, extra) {
            (Value::Object(b), Value::Object(e)) => {
                for (k, v) in e {
                    merge(b.entry(k).or_insert(Value::Null), v);
                }
            }
            (b, e) => *b = e,
        }
    }
    fn key(name: &str) -> Key {
        ("default".into(), name.into())
    }
    fn binds(actions: &[Action]) -> Vec<(String, String)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::BindVolume { volume, claim, .. } => Some((claim.1.clone(), volume.clone())),
                _ => None,
            })
            .collect()
    }
    fn reasons(actions: &[Action]) -> Vec<&'static str> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Event { reason, .. } => Some(*reason),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_claim_gets_the_smallest_volume_that_fits() {
        let volumes = [
            volume("big", "10Gi", "manual", json!({})),
            volume("small", "1Gi", "manual", json!({})),
            volume("tiny", "100Mi", "manual", json!({})),
            volume("other-class", "1Gi", "fast", json!({})),
            volume(
                "read-only",
                "1Gi",
                "manual",
                json!({"spec": {"accessModes": ["ReadOnlyMany"]}}),
            ),
            volume(
                "taken",
                "1Gi",
                "manual",
                json!({"spec": {"claimRef": {"namespace": "x", "name": "y", "uid": "u"}}}),
            ),
        ];
        let claims = [claim("data", "500Mi", Some("manual"), json!({}))];
        let actions = plan(&volumes, &claims, &[], &HashSet::new());
        assert_eq!(binds(&actions), [("data".to_string(), "small".to_string())]);
        assert!(actions.contains(&Action::BindClaim {
            claim: key("data"),
            volume: "small".into()
        }));
        // Two claims never get the same volume in one sweep.
        let claims = [
            claim(
                "a",
                "1Gi",
                Some("manual"),
                json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}}),
            ),
            claim(
                "b",
                "1Gi",
                Some("manual"),
                json!({"metadata": {"creationTimestamp": "2026-01-02T00:00:00Z"}}),
            ),
        ];
        assert_eq!(
            binds(&plan(&volumes, &claims, &[], &HashSet::new())),
            [
                ("a".to_string(), "small".to_string()),
                ("b".to_string(), "big".to_string())
            ]
        );
        // A label selector narrows the choice.
        let volumes = [
            volume("plain", "1Gi", "manual", json!({})),
            volume(
                "labelled",
                "5Gi",
                "manual",
                json!({"metadata": {"labels": {"tier": "db"}}}),
            ),
        ];
        let claims = [claim(
            "db",
            "1Gi",
            Some("manual"),
            json!({"spec": {"selector": {"matchLabels": {"tier": "db"}}}}),
        )];
        assert_eq!(
            binds(&plan(&volumes, &claims, &[], &HashSet::new())),
            [("db".to_string(), "labelled".to_string())]
        );
        // Nothing fits, no class: FailedBinding, stays Pending.
        let claims = [claim("huge", "1Ti", Some(""), json!({}))];
        let actions = plan(&volumes, &claims, &[], &HashSet::new());
        assert!(binds(&actions).is_empty());
        assert_eq!(reasons(&actions), ["FailedBinding"]);
    }

    #[test]
    fn pre_bound_volumes_and_named_volumes_are_honoured() {
        let volumes = [
            volume(
                "reserved",
                "1Gi",
                "manual",
                json!({"spec": {"claimRef": {"namespace": "default", "name": "mine"}}}),
            ),
            volume("small", "1Gi", "manual", json!({})),
        ];
        let claims = [claim("mine", "1Gi", Some("manual"), json!({}))];
        assert_eq!(
            binds(&plan(&volumes, &claims, &[], &HashSet::new())),
            [("mine".to_string(), "reserved".to_string())]
        );
        // A claim naming a volume binds to it and only it.
        let claims = [claim(
            "named",
            "1Gi",
            Some("manual"),
            json!({"spec": {"volumeName": "small"}}),
        )];
        let actions = plan(&volumes, &claims, &[], &HashSet::new());
        assert_eq!(
            binds(&actions),
            [("named".to_string(), "small".to_string())]
        );
        let claims = [claim(
            "ghost",
            "1Gi",
            Some("manual"),
            json!({"spec": {"volumeName": "nope"}}),
        )];
        assert_eq!(
            reasons(&plan(&volumes, &claims, &[], &HashSet::new())),
            ["FailedBinding"]
        );
    }

    #[test]
    fn wait_for_first_consumer_binds_only_on_the_selected_node() {
        let classes = [class(json!({
            "metadata": {"name": "local", "annotations": {ANN_DEFAULT_CLASS: "true"}},
            "provisioner": NO_PROVISIONER, "volumeBindingMode": "WaitForFirstConsumer"
        }))];
        let on = |node: &str| {
            json!({"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}})
        };
        let volumes = [
            volume("on-a", "1Gi", "local", on("a")),
            volume("on-b", "2Gi", "local", on("b")),
        ];
        let claims = [claim("c", "1Gi", Some("local"), json!({}))];
        let actions = plan(&volumes, &claims, &classes, &HashSet::new());
        assert!(binds(&actions).is_empty());
        assert_eq!(reasons(&actions), ["WaitForFirstConsumer"]);
        let claims = [claim(
            "c",
            "1Gi",
            Some("local"),
            json!({"metadata": {"annotations": {ANN_SELECTED_NODE: "b"}}}),
        )];
        assert_eq!(
            binds(&plan(&volumes, &claims, &classes, &HashSet::new())),
            [("c".to_string(), "on-b".to_string())]
        );
        // A claim without a class gets the default one first.
        let claims = [claim("d", "1Gi", None, json!({}))];
        assert_eq!(
            plan(&volumes, &claims, &classes, &HashSet::new()),
            [Action::SetClaimClass(key("d"), "local".into())]
        );
    }

    #[test]
    fn a_class_with_a_provisioner_gets_the_claim_annotated() {
        let classes = [class(
            json!({"metadata": {"name": "lp"}, "provisioner": "k3rs.io/local-path"}),
        )];
        let claims = [claim("c", "1Gi", Some("lp"), json!({}))];
        let actions = plan(&[], &claims, &classes, &HashSet::new());
        assert!(actions.contains(&Action::AnnotateProvisioner {
            claim: key("c"),
            provisioner: "k3rs.io/local-path".into()
        }));
        assert_eq!(reasons(&actions), ["ExternalProvisioning"]);
        let claims = [claim("c", "1Gi", Some("missing"), json!({}))];
        assert_eq!(
            reasons(&plan(&[], &claims, &classes, &HashSet::new())),
            ["ProvisioningFailed"]
        );
    }

    #[test]
    fn released_failed_and_lost() {
        let bound_to_gone = |policy: &str, extra: Value| {
            let mut e = json!({"spec": {"persistentVolumeReclaimPolicy": policy,
                     "claimRef": {"namespace": "default", "name": "gone", "uid": "uid-gone"}},
                     "status": {"phase": "Bound"}});
            merge(&mut e, extra);
            volume("v", "1Gi", "", e)
        };
        let phase_of = |actions: &[Action]| {
            actions.iter().find_map(|a| match a {
                Action::VolumePhase { phase, .. } => Some(*phase),
                _ => None,
            })
        };
        assert_eq!(
            phase_of(&plan(
                &[bound_to_gone("Retain", json!({}))],
                &[],
                &[],
                &HashSet::new()
            )),
            Some("Released")
        );
        let actions = plan(
            &[bound_to_gone("Delete", json!({}))],
            &[],
            &[],
            &HashSet::new(),
        );
        assert_eq!(phase_of(&actions), Some("Failed"));
        assert_eq!(reasons(&actions), ["VolumeFailedDelete"]);
        // A provisioned volume is left Released for its provisioner to delete.
        let provisioned = bound_to_gone(
            "Delete",
            json!({"metadata": {"annotations": {ANN_PROVISIONED_BY: "k3rs.io/local-path"}}}),
        );
        assert_eq!(
            phase_of(&plan(&[provisioned], &[], &[], &HashSet::new())),
            Some("Released")
        );
        // A claim recreated under the same name is not the one the volume was bound to.
        let recreated = claim(
            "gone",
            "1Gi",
            Some(""),
            json!({"metadata": {"uid": "new-uid"}}),
        );
        let actions = plan(
            &[bound_to_gone("Retain", json!({}))],
            &[recreated],
            &[],
            &HashSet::new(),
        );
        assert_eq!(phase_of(&actions), Some("Released"));
        assert!(binds(&actions).is_empty());
        // A bound claim whose volume is gone is Lost.
        let lost = claim(
            "l",
            "1Gi",
            Some(""),
            json!({"spec": {"volumeName": "vanished"}, "status": {"phase": "Bound"}}),
        );
        let actions = plan(&[], &[lost], &[], &HashSet::new());
        assert!(actions.contains(&Action::ClaimPhase(key("l"), "Lost")));
        assert_eq!(reasons(&actions), ["ClaimLost"]);
    }

    #[test]
    fn protection_finalizers() {
        let fresh_pvc =
            pvc(json!({"metadata": {"namespace": "default", "name": "f", "uid": "u"}, "spec": {}}));
        let fresh_pv = pv(
            json!({"metadata": {"name": "p", "uid": "pu"}, "spec": {}, "status": {"phase": "Available"}}),
        );
        let actions = plan(&[fresh_pv], &[fresh_pvc], &[], &HashSet::new());
        assert!(actions.contains(&Action::AddClaimFinalizer(key("f"))));
        assert!(actions.contains(&Action::AddVolumeFinalizer("p".into())));
        assert!(
            actions.contains(&Action::ClaimPhase(key("f"), "Pending")),
            "the first phase is the controller's to write: {actions:?}"
        );
        let deleting = claim(
            "d",
            "1Gi",
            Some(""),
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
        );
        let in_use = HashSet::from([key("d")]);
        assert!(
            plan(&[], std::slice::from_ref(&deleting), &[], &in_use).is_empty(),
            "a used claim stays"
        );
        assert_eq!(
            plan(&[], &[deleting], &[], &HashSet::new()),
            [Action::RemoveClaimFinalizer(key("d"))]
        );
        let deleting_bound = volume(
            "b",
            "1Gi",
            "",
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"claimRef": {"namespace": "default", "name": "c", "uid": "uid-c"}}, "status": {"phase": "Bound"}}),
        );
        let bound_claim = claim(
            "c",
            "1Gi",
            Some(""),
            json!({"spec": {"volumeName": "b"}, "status": {"phase": "Bound"},
            "metadata": {"annotations": {ANN_BIND_COMPLETED: "yes"}}}),
        );
        let actions = plan(&[deleting_bound], &[bound_claim], &[], &HashSet::new());
        assert!(
            !actions
                .iter()
                .any(|a| matches!(a, Action::RemoveVolumeFinalizer(_))),
            "{actions:?}"
        );
    }
}
