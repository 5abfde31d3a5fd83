//! Which printer serves which resource, and the `columnDefinitions` each one
//! declares: the same names, types, formats and priorities as kube-apiserver's
//! `pkg/printers/internalversion` handlers (plus kube-aggregator's APIService
//! convertor). Descriptions follow the API's field docs, some shortened.
//!
//! Pure data; no store, no HTTP.

use super::Column;

/// A built-in table printer (one per kube-apiserver print handler).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Printer {
    Pod,
    PodTemplate,
    PodDisruptionBudget,
    ReplicationController,
    ReplicaSet,
    DaemonSet,
    Job,
    CronJob,
    Service,
    Ingress,
    IngressClass,
    StatefulSet,
    Endpoints,
    Node,
    Event,
    Namespace,
    Secret,
    ServiceAccount,
    PersistentVolume,
    PersistentVolumeClaim,
    ComponentStatus,
    Deployment,
    ConfigMap,
    NetworkPolicy,
    RoleBinding,
    ClusterRoleBinding,
    CertificateSigningRequest,
    Lease,
    StorageClass,
    ControllerRevision,
    ResourceQuota,
    PriorityClass,
    RuntimeClass,
    VolumeAttachment,
    EndpointSlice,
    CsiNode,
    CsiDriver,
    CsiStorageCapacity,
    MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration,
    ServiceCidr,
    ApiService,
}

/// The printer kube-apiserver uses for `group`/`resource` (plural, lower case),
/// or `None` when the resource uses the default convertor (Name, Created At):
/// e.g. roles, clusterroles, limitranges, customresourcedefinitions.
pub(crate) fn printer_for(group: &str, resource: &str) -> Option<Printer> {
    use Printer::*;
    Some(match (group, resource) {
        ("", "pods") => Pod,
        ("", "podtemplates") => PodTemplate,
        ("", "replicationcontrollers") => ReplicationController,
        ("", "services") => Service,
        ("", "endpoints") => Endpoints,
        ("", "nodes") => Node,
        ("", "events") | ("events.k8s.io", "events") => Event,
        ("", "namespaces") => Namespace,
        ("", "secrets") => Secret,
        ("", "serviceaccounts") => ServiceAccount,
        ("", "persistentvolumes") => PersistentVolume,
        ("", "persistentvolumeclaims") => PersistentVolumeClaim,
        ("", "componentstatuses") => ComponentStatus,
        ("", "configmaps") => ConfigMap,
        ("", "resourcequotas") => ResourceQuota,
        ("apps" | "extensions", "deployments") => Deployment,
        ("apps" | "extensions", "replicasets") => ReplicaSet,
        ("apps" | "extensions", "daemonsets") => DaemonSet,
        ("apps", "statefulsets") => StatefulSet,
        ("apps", "controllerrevisions") => ControllerRevision,
        ("batch", "jobs") => Job,
        ("batch", "cronjobs") => CronJob,
        ("policy", "poddisruptionbudgets") => PodDisruptionBudget,
        ("networking.k8s.io" | "extensions", "ingresses") => Ingress,
        ("networking.k8s.io", "ingressclasses") => IngressClass,
        ("networking.k8s.io" | "extensions", "networkpolicies") => NetworkPolicy,
        ("networking.k8s.io", "servicecidrs") => ServiceCidr,
        ("discovery.k8s.io", "endpointslices") => EndpointSlice,
        ("rbac.authorization.k8s.io", "rolebindings") => RoleBinding,
        ("rbac.authorization.k8s.io", "clusterrolebindings") => ClusterRoleBinding,
        ("certificates.k8s.io", "certificatesigningrequests") => CertificateSigningRequest,
        ("coordination.k8s.io", "leases") => Lease,
        ("storage.k8s.io", "storageclasses") => StorageClass,
        ("storage.k8s.io", "volumeattachments") => VolumeAttachment,
        ("storage.k8s.io", "csinodes") => CsiNode,
        ("storage.k8s.io", "csidrivers") => CsiDriver,
        ("storage.k8s.io", "csistoragecapacities") => CsiStorageCapacity,
        ("scheduling.k8s.io", "priorityclasses") => PriorityClass,
        ("node.k8s.io", "runtimeclasses") => RuntimeClass,
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations") => {
            MutatingWebhookConfiguration
        }
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations") => {
            ValidatingWebhookConfiguration
        }
        ("apiregistration.k8s.io", "apiservices") => ApiService,
        _ => return None,
    })
}

/// `metav1.ObjectMeta{}.SwaggerDoc()["name"]`.
pub(crate) const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// `metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]`.
pub(crate) const CREATION_TIMESTAMP_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

const CONTAINERS_DESCRIPTION: &str = "Names of each container in the template.";
const IMAGES_DESCRIPTION: &str = "Images referenced by each container in the template.";
const SELECTOR_DESCRIPTION: &str = "A label query over pods that should match the replica count. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";

fn col(name: &str, type_: &str, description: &str) -> Column {
    Column {
        name: name.to_string(),
        type_: type_.to_string(),
        format: String::new(),
        description: description.to_string(),
        priority: 0,
    }
}

fn s(name: &str, description: &str) -> Column {
    col(name, "string", description)
}

fn int(name: &str, description: &str) -> Column {
    col(name, "integer", description)
}

fn boolean(name: &str, description: &str) -> Column {
    col(name, "boolean", description)
}

fn wide(mut c: Column) -> Column {
    c.priority = 1;
    c
}

/// The "Name" column every printer starts with (`format: name`).
pub(crate) fn name_column() -> Column {
    Column {
        format: "name".to_string(),
        ..s("Name", NAME_DESCRIPTION)
    }
}

fn age() -> Column {
    s("Age", CREATION_TIMESTAMP_DESCRIPTION)
}

fn containers_images_selector(selector: bool) -> Vec<Column> {
    let mut v = vec![
        wide(s("Containers", CONTAINERS_DESCRIPTION)),
        wide(s("Images", IMAGES_DESCRIPTION)),
    ];
    if selector {
        v.push(wide(s("Selector", SELECTOR_DESCRIPTION)));
    }
    v
}

/// Column definitions of the default table convertor (`rest.NewDefaultTableConvertor`).
pub(crate) fn default_columns() -> Vec<Column> {
    vec![
        name_column(),
        col("Created At", "date", CREATION_TIMESTAMP_DESCRIPTION),
    ]
}

/// Column definitions for a built-in printer, in kube-apiserver's order.
pub(crate) fn columns(p: Printer) -> Vec<Column> {
    use Printer::*;
    let mut v = vec![name_column()];
    match p {
        Pod => v.extend([
            s("Ready", "The aggregate readiness state of this pod for accepting traffic."),
            s("Status", "The aggregate status of the containers in this pod."),
            s("Restarts", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
            age(),
            wide(s("IP", "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.")),
            wide(s("Node", "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName.")),
            wide(s("Nominated Node", "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.")),
            wide(s("Readiness Gates", "If specified, all readiness gates will be evaluated for pod readiness. More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates")),
        ]),
        PodTemplate => v.extend([
            s("Containers", CONTAINERS_DESCRIPTION),
            s("Images", IMAGES_DESCRIPTION),
            s("Pod Labels", "The labels for the pod template."),
        ]),
        PodDisruptionBudget => v.extend([
            s("Min Available", "The minimum number of pods that must be available."),
            s("Max Unavailable", "The maximum number of pods that may be unavailable."),
            int("Allowed Disruptions", "Calculated number of pods that may be disrupted at this time."),
            age(),
        ]),
        ReplicationController | ReplicaSet => {
            v.extend([
                int("Desired", "Replicas is the number of desired replicas."),
                int("Current", "Replicas is the most recently observed number of replicas."),
                int("Ready", "The number of ready replicas for this replica set."),
                age(),
            ]);
            v.extend(containers_images_selector(true));
        }
        DaemonSet => {
            v.extend([
                int("Desired", "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod)."),
                int("Current", "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod."),
                int("Ready", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready."),
                int("Up-to-date", "The total number of nodes that are running updated daemon pod."),
                int("Available", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available."),
                s("Node Selector", "NodeSelector is a selector which must be true for the pod to fit on a node."),
                age(),
            ]);
            v.extend(containers_images_selector(true));
        }
        Job => {
            v.extend([
                s("Status", "Status of the job."),
                s("Completions", "The number of pods which reached phase Succeeded."),
                s("Duration", "Time required to complete the job."),
                age(),
            ]);
            v.extend(containers_images_selector(true));
        }
        CronJob => {
            v.extend([
                s("Schedule", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
                s("Timezone", "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones."),
                boolean("Suspend", "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions. Defaults to false."),
                int("Active", "A list of pointers to currently running jobs."),
                s("Last Schedule", "Information when was the last time the job was successfully scheduled."),
                age(),
            ]);
            v.extend(containers_images_selector(true));
        }
        Service => v.extend([
            s("Type", "type determines how the Service is exposed. Defaults to ClusterIP. Valid options are ExternalName, ClusterIP, NodePort, and LoadBalancer."),
            s("Cluster-IP", "clusterIP is the IP address of the service and is usually assigned randomly."),
            s("External-IP", "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service."),
            s("Port(s)", "The list of ports that are exposed by this service."),
            age(),
            wide(s("Selector", "Route service traffic to pods with label keys and values matching this selector.")),
        ]),
        Ingress => v.extend([
            s("Class", "The name of the IngressClass resource that should be used for additional configuration"),
            s("Hosts", "Hosts that incoming requests are matched against before the ingress rule"),
            s("Address", "Address is a list containing ingress points for the load-balancer"),
            s("Ports", "Ports of TLS configurations that open"),
            age(),
        ]),
        IngressClass => v.extend([
            s("Controller", "Controller that is responsible for handling this class"),
            s("Parameters", "A reference to a resource with additional parameters"),
            age(),
        ]),
        StatefulSet => {
            v.extend([s("Ready", "Number of the pod with ready state"), age()]);
            v.extend(containers_images_selector(false));
        }
        Endpoints => v.extend([
            s("Endpoints", "The set of all endpoints is the union of all subsets."),
            age(),
        ]),
        Node => v.extend([
            s("Status", "The status of the node"),
            s("Roles", "The roles of the node"),
            age(),
            s("Version", "Kubelet Version reported by the node."),
            wide(s("Internal-IP", "List of addresses reachable to the node.")),
            wide(s("External-IP", "List of addresses reachable to the node.")),
            wide(s("OS-Image", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).")),
            wide(s("Kernel-Version", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).")),
            wide(s("Container-Runtime", "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).")),
        ]),
        Event => {
            // Events are the one printer whose Name is not first.
            v.clear();
            v.extend([
                s("Last Seen", "The time at which the most recent occurrence of this event was recorded."),
                s("Type", "Type of this event (Normal, Warning), new types could be added in the future"),
                s("Reason", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
                s("Object", "The object that this event is about."),
                wide(s("Subobject", "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement.")),
                wide(s("Source", "The component reporting this event.")),
                s("Message", "A human-readable description of the status of this operation."),
                wide(s("First Seen", "The time at which the event was first recorded.")),
                wide(s("Count", "The number of times this event has occurred.")),
                wide(name_column()),
            ]);
        }
        Namespace => v.extend([s("Status", "The status of the namespace"), age()]),
        Secret => v.extend([
            s("Type", "Used to facilitate programmatic handling of secret data."),
            s("Data", "Data contains the secret data."),
            age(),
        ]),
        ServiceAccount => v.extend([
            s("Secrets", "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use."),
            age(),
        ]),
        PersistentVolume => v.extend([
            s("Capacity", "capacity is the description of the persistent volume's resources and capacity."),
            s("Access Modes", "accessModes contains all ways the volume can be mounted."),
            s("Reclaim Policy", "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim."),
            s("Status", "phase indicates if a volume is available, bound to a claim, or released by a claim."),
            s("Claim", "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim."),
            s("StorageClass", "StorageClass of the pv"),
            s("VolumeAttributesClass", "VolumeAttributesClass of the pv"),
            s("Reason", "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI."),
            age(),
            wide(s("VolumeMode", "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state.")),
        ]),
        PersistentVolumeClaim => v.extend([
            s("Status", "phase represents the current phase of PersistentVolumeClaim."),
            s("Volume", "volumeName is the binding reference to the PersistentVolume backing this claim."),
            s("Capacity", "capacity represents the actual resources of the underlying volume."),
            s("Access Modes", "accessModes contains the actual access modes the volume backing the PVC has."),
            s("StorageClass", "StorageClass of the pvc"),
            s("VolumeAttributesClass", "VolumeAttributesClass of the pvc"),
            age(),
            wide(s("VolumeMode", "volumeMode defines what type of volume is required by the claim.")),
        ]),
        ComponentStatus => v.extend([
            s("Status", "Status of the component conditions"),
            s("Message", "Message of the component conditions"),
            s("Error", "Error of the component conditions"),
        ]),
        Deployment => {
            v.extend([
                s("Ready", "Number of the pod with ready state"),
                s("Up-to-date", "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
                s("Available", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
                age(),
            ]);
            v.extend(containers_images_selector(true));
        }
        ConfigMap => v.extend([
            s("Data", "Data contains the configuration data."),
            age(),
        ]),
        NetworkPolicy => v.extend([
            s("Pod-Selector", "Selects the pods to which this NetworkPolicy object applies."),
            age(),
        ]),
        RoleBinding | ClusterRoleBinding => {
            let what = if p == RoleBinding {
                "roleBinding"
            } else {
                "clusterRoleBinding"
            };
            v.extend([
                s("Role", "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace."),
                age(),
                wide(s("Users", &format!("Users in the {what}"))),
                wide(s("Groups", &format!("Groups in the {what}"))),
                wide(s("ServiceAccounts", &format!("ServiceAccounts in the {what}"))),
            ]);
        }
        CertificateSigningRequest => v.extend([
            age(),
            s("SignerName", "Requested signer for the request."),
            s("Requestor", "Information about the requesting user."),
            s("RequestedDuration", "expirationSeconds is the requested duration of validity of the issued certificate."),
            s("Condition", "Conditions applied to the request, such as approval or denial."),
        ]),
        Lease => v.extend([
            s("Holder", "holderIdentity contains the identity of the holder of a current lease."),
            age(),
        ]),
        StorageClass => v.extend([
            s("Provisioner", "provisioner indicates the type of the provisioner."),
            s("ReclaimPolicy", "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class. Defaults to Delete."),
            s("VolumeBindingMode", "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound."),
            s("AllowVolumeExpansion", "allowVolumeExpansion shows whether the storage class allow volume expand."),
            age(),
        ]),
        ControllerRevision => v.extend([
            s("Controller", "Controller of the object"),
            s("Revision", "Revision indicates the revision of the state represented by Data."),
            age(),
        ]),
        ResourceQuota => v.extend([
            s("Request", "Request represents a minimum amount of cpu/memory that a container may consume."),
            s("Limit", "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."),
            age(),
        ]),
        PriorityClass => v.extend([
            int("Value", "value represents the integer value of this priority class."),
            boolean("Global-Default", "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class."),
            age(),
            s("PreemptionPolicy", "preemptionPolicy is the Policy for preempting pods with lower priority."),
        ]),
        RuntimeClass => v.extend([
            s("Handler", "handler specifies the underlying runtime and configuration that the CRI implementation will use to handle pods of this class."),
            age(),
        ]),
        VolumeAttachment => v.extend([
            Column {
                format: "name".to_string(),
                ..s("Attacher", "attacher indicates the name of the volume driver that MUST handle this request.")
            },
            s("PV", "persistentVolumeName represents the name of the persistent volume to attach."),
            s("Node", "nodeName represents the node that the volume should be attached to."),
            boolean("Attached", "attached indicates the volume is successfully attached."),
            age(),
        ]),
        EndpointSlice => v.extend([
            s("AddressType", "addressType specifies the type of address carried by this EndpointSlice."),
            s("Ports", "ports specifies the list of network ports exposed by each endpoint in this slice."),
            s("Endpoints", "endpoints is a list of unique endpoints in this slice."),
            age(),
        ]),
        CsiNode => v.extend([
            int("Drivers", "Drivers indicates the number of CSI drivers registered on the node"),
            age(),
        ]),
        CsiDriver => v.extend([
            boolean("AttachRequired", "attachRequired indicates this CSI volume driver requires an attach operation."),
            boolean("PodInfoOnMount", "podInfoOnMount indicates this CSI volume driver requires additional pod information (like podName, podUID, etc.) during mount operations."),
            boolean("StorageCapacity", "storageCapacity indicates that the CSI volume driver wants pod scheduling to consider the storage capacity that the driver deployment will report."),
            s("TokenRequests", "tokenRequests indicates the CSI driver needs pods' service account tokens it is mounting volume for to do necessary authentication."),
            boolean("RequiresRepublish", "requiresRepublish indicates the CSI driver wants NodePublishVolume being periodically called to reflect any possible change in the mounted volume."),
            s("Modes", "volumeLifecycleModes defines what kind of volumes this CSI volume driver supports."),
            age(),
        ]),
        CsiStorageCapacity => v.extend([
            s("StorageClassName", "storageClassName represents the name of the StorageClass that the reported capacity applies to."),
            s("Capacity", "capacity is the value reported by the CSI driver in its GetCapacityResponse."),
        ]),
        MutatingWebhookConfiguration | ValidatingWebhookConfiguration => v.extend([
            int("Webhooks", "Webhooks indicates the number of webhooks registered in this configuration"),
            age(),
        ]),
        ServiceCidr => v.extend([
            s("CIDRs", "CIDRs defines the IP blocks in CIDR notation (e.g. \"192.168.0.0/24\" or \"2001:db8::/64\") from which to assign service cluster IPs."),
            age(),
        ]),
        ApiService => v.extend([
            s("Service", "The reference to the service that hosts this API endpoint."),
            s("Available", "Whether this service is available."),
            age(),
        ]),
    }
    v
}
