//! The built-in kinds whose schemas come from k8s-openapi's `schemars` support: a table
//! from group/version/kind to a function that adds the kind's schema (and everything it
//! references) to a schema generator.

use std::sync::OnceLock;

use k8s_openapi::schemars::{JsonSchema, SchemaGenerator};
use k8s_openapi::{api, apiextensions_apiserver, kube_aggregator};

/// One kind with a Rust type.
pub(super) struct KindEntry {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    /// Adds the kind's schema to the generator; returns its definition name
    /// (`io.k8s.api.apps.v1.Deployment`).
    pub add: fn(&mut SchemaGenerator) -> String,
    /// The definition name without generating anything.
    pub name: fn() -> String,
}

fn add<T: JsonSchema>(generator: &mut SchemaGenerator) -> String {
    generator.subschema_for::<T>();
    T::schema_name().into_owned()
}

fn name<T: JsonSchema>() -> String {
    T::schema_name().into_owned()
}

fn entry<T: k8s_openapi::Resource + JsonSchema>() -> KindEntry {
    KindEntry {
        group: T::GROUP,
        version: T::VERSION,
        kind: T::KIND,
        add: add::<T>,
        name: name::<T>,
    }
}

macro_rules! entries {
    ($($ty:ty),* $(,)?) => {
        vec![$(entry::<$ty>()),*]
    };
}

/// Every stable kind k8s-openapi knows, including the kinds of subresources (`Scale`,
/// `Binding`, `Eviction`, `TokenRequest`).
pub(super) fn table() -> &'static [KindEntry] {
    static TABLE: OnceLock<Vec<KindEntry>> = OnceLock::new();
    TABLE.get_or_init(|| {
        entries![
            api::admissionregistration::v1::MutatingWebhookConfiguration,
            api::admissionregistration::v1::ValidatingAdmissionPolicy,
            api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
            api::admissionregistration::v1::ValidatingWebhookConfiguration,
            api::apps::v1::ControllerRevision,
            api::apps::v1::DaemonSet,
            api::apps::v1::Deployment,
            api::apps::v1::ReplicaSet,
            api::apps::v1::StatefulSet,
            api::authentication::v1::SelfSubjectReview,
            api::authentication::v1::TokenRequest,
            api::authentication::v1::TokenReview,
            api::authorization::v1::LocalSubjectAccessReview,
            api::authorization::v1::SelfSubjectAccessReview,
            api::authorization::v1::SelfSubjectRulesReview,
            api::authorization::v1::SubjectAccessReview,
            api::autoscaling::v1::HorizontalPodAutoscaler,
            api::autoscaling::v1::Scale,
            api::autoscaling::v2::HorizontalPodAutoscaler,
            api::batch::v1::CronJob,
            api::batch::v1::Job,
            api::certificates::v1::CertificateSigningRequest,
            api::coordination::v1::Lease,
            api::core::v1::Binding,
            api::core::v1::ComponentStatus,
            api::core::v1::ConfigMap,
            api::core::v1::Endpoints,
            api::core::v1::Event,
            api::core::v1::LimitRange,
            api::core::v1::Namespace,
            api::core::v1::Node,
            api::core::v1::PersistentVolume,
            api::core::v1::PersistentVolumeClaim,
            api::core::v1::Pod,
            api::core::v1::PodTemplate,
            api::core::v1::ReplicationController,
            api::core::v1::ResourceQuota,
            api::core::v1::Secret,
            api::core::v1::Service,
            api::core::v1::ServiceAccount,
            api::discovery::v1::EndpointSlice,
            api::events::v1::Event,
            api::flowcontrol::v1::FlowSchema,
            api::flowcontrol::v1::PriorityLevelConfiguration,
            api::networking::v1::IPAddress,
            api::networking::v1::Ingress,
            api::networking::v1::IngressClass,
            api::networking::v1::NetworkPolicy,
            api::networking::v1::ServiceCIDR,
            api::node::v1::RuntimeClass,
            api::policy::v1::Eviction,
            api::policy::v1::PodDisruptionBudget,
            api::rbac::v1::ClusterRole,
            api::rbac::v1::ClusterRoleBinding,
            api::rbac::v1::Role,
            api::rbac::v1::RoleBinding,
            api::scheduling::v1::PriorityClass,
            api::storage::v1::CSIDriver,
            api::storage::v1::CSINode,
            api::storage::v1::CSIStorageCapacity,
            api::storage::v1::StorageClass,
            api::storage::v1::VolumeAttachment,
            apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
            kube_aggregator::pkg::apis::apiregistration::v1::APIService,
        ]
    })
}

/// The table entry of a kind, if it has a Rust type.
pub(super) fn find(group: &str, version: &str, kind: &str) -> Option<&'static KindEntry> {
    table()
        .iter()
        .find(|e| e.group == group && e.version == version && e.kind == kind)
}

/// Meta types every group-version document carries (request and response bodies of
/// delete and patch).
pub(super) fn add_meta(generator: &mut SchemaGenerator) {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
    generator.subschema_for::<meta::DeleteOptions>();
    generator.subschema_for::<meta::Status>();
    generator.subschema_for::<meta::Patch>();
    generator.subschema_for::<meta::ObjectMeta>();
    generator.subschema_for::<meta::ListMeta>();
}
