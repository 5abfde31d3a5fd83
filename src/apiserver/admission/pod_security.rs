//! The `PodSecurity` admission, as kube-apiserver's built-in plugin: the Pod Security
//! Standards (`privileged`, `baseline`, `restricted`) chosen per namespace by the
//! `pod-security.kubernetes.io/{enforce,audit,warn}[-version]` labels, with cluster defaults
//! and exemptions from `--pod-security-admission-config-file` ([`Config`]).
//!
//! Owns: parsing that file and the labels, the level checks (pure functions over the
//! k8s-openapi pod types, worded as kube words them), and the decision for a write: a
//! refused pod (403), `Warning` lines for pods and workload templates, the 422 for bad
//! labels on a namespace and the warnings about existing pods when a namespace's enforce
//! level is raised. Every version label is evaluated as `latest` (the checks of this
//! server's Kubernetes version). The audit mode annotates the request's audit event
//! (`pod-security.kubernetes.io/audit-violations`, as kube's).
//!
//! May not touch: the store or the watch cache (the caller hands in the namespace labels
//! and the pods it reads), nor any other admission.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Capabilities, ContainerPort, PodSpec, SELinuxOptions, SeccompProfile, SecurityContext, Volume,
};
use serde::Deserialize;
use serde_json::Value;

use crate::apiserver::http::status::ApiError;

pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";
pub const AUDIT_LABEL: &str = "pod-security.kubernetes.io/audit";
/// Audit annotations, as kube's PodSecurity plugin writes them: the exemption that let a
/// request through, the enforce level a pod was checked at, the audit level's violations.
const EXEMPT_ANNOTATION: &str = "pod-security.kubernetes.io/exempt";
const ENFORCE_POLICY_ANNOTATION: &str = "pod-security.kubernetes.io/enforce-policy";
const AUDIT_VIOLATIONS_ANNOTATION: &str = "pod-security.kubernetes.io/audit-violations";
pub const WARN_LABEL: &str = "pod-security.kubernetes.io/warn";

/// A Pod Security Standard, least to most strict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    /// kube's `ParseLevel`: an unknown value is an error, and evaluates as restricted.
    pub fn parse(value: &str) -> Result<Level, String> {
        match value {
            "privileged" => Ok(Level::Privileged),
            "baseline" => Ok(Level::Baseline),
            "restricted" => Ok(Level::Restricted),
            _ => Err("must be one of privileged, baseline, restricted".into()),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// A policy version: `latest` or `v1.<minor>`. Every version is evaluated with the latest
/// checks; the value is kept for messages (`"restricted:v1.30"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    Latest,
    Minor(u32),
}

impl Version {
    /// kube's `ParseVersion`: `latest` or `v1.x`; anything else is an error and latest.
    pub fn parse(value: &str) -> Result<Version, String> {
        const WRONG: &str = "must be \"latest\" or \"v1.x\"";
        if value == "latest" {
            return Ok(Version::Latest);
        }
        let digits = value.strip_prefix("v1.").ok_or(WRONG)?;
        let canonical = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        if !canonical {
            return Err(WRONG.into());
        }
        digits.parse().map(Version::Minor).map_err(|_| WRONG.into())
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::Minor(m) => write!(f, "v1.{m}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    pub level: Level,
    pub version: Version,
}

impl std::fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

const PRIVILEGED_LATEST: LevelVersion = LevelVersion {
    level: Level::Privileged,
    version: Version::Latest,
};

/// The level and version of each mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub enforce: LevelVersion,
    pub audit: LevelVersion,
    pub warn: LevelVersion,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            enforce: PRIVILEGED_LATEST,
            audit: PRIVILEGED_LATEST,
            warn: PRIVILEGED_LATEST,
        }
    }
}

impl Policy {
    fn fully_privileged(&self) -> bool {
        [self.enforce, self.audit, self.warn]
            .iter()
            .all(|m| m.level == Level::Privileged)
    }
}

/// A label that does not parse: `(label, value, why)`.
pub type LabelError = (String, String, String);

/// kube's `PolicyToEvaluate`: the namespace's labels over the defaults. A bad enforce level
/// evaluates as restricted; a bad audit or warn level as privileged (they fail open).
pub fn policy_for(
    labels: &BTreeMap<String, String>,
    defaults: &Policy,
) -> (Policy, Vec<LabelError>) {
    let mut policy = *defaults;
    let mut errors = Vec::new();
    let modes: [(&str, &mut LevelVersion, Level); 3] = [
        (ENFORCE_LABEL, &mut policy.enforce, Level::Restricted),
        (AUDIT_LABEL, &mut policy.audit, Level::Privileged),
        (WARN_LABEL, &mut policy.warn, Level::Privileged),
    ];
    for (label, mode, on_error) in modes {
        if let Some(value) = labels.get(label) {
            mode.level = Level::parse(value).unwrap_or_else(|why| {
                errors.push((label.to_string(), value.clone(), why));
                on_error
            });
        }
        let version_label = format!("{label}-version");
        if let Some(value) = labels.get(&version_label) {
            mode.version = Version::parse(value).unwrap_or_else(|why| {
                errors.push((version_label.clone(), value.clone(), why));
                Version::Latest
            });
        }
    }
    (policy, errors)
}

/// Who and what is never evaluated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exemptions {
    pub usernames: Vec<String>,
    pub runtime_classes: Vec<String>,
    pub namespaces: Vec<String>,
}

/// The cluster-wide configuration: kube's `PodSecurityConfiguration`. The default (no
/// `--pod-security-admission-config-file`) is kube-apiserver's and k3s's: every mode
/// `privileged:latest`, nothing exempt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub defaults: Policy,
    pub exemptions: Exemptions,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AdmissionConfigurationFile {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    #[serde(default)]
    plugins: Vec<AdmissionPlugin>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AdmissionPlugin {
    name: String,
    #[serde(default)]
    configuration: Option<serde_yaml::Value>,
    #[serde(default)]
    path: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PodSecurityConfigurationFile {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    #[serde(default)]
    defaults: DefaultsFile,
    #[serde(default)]
    exemptions: ExemptionsFile,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DefaultsFile {
    enforce: Option<String>,
    #[serde(rename = "enforce-version")]
    enforce_version: Option<String>,
    audit: Option<String>,
    #[serde(rename = "audit-version")]
    audit_version: Option<String>,
    warn: Option<String>,
    #[serde(rename = "warn-version")]
    warn_version: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ExemptionsFile {
    #[serde(default)]
    usernames: Vec<String>,
    #[serde(default, rename = "runtimeClasses")]
    runtime_classes: Vec<String>,
    #[serde(default)]
    namespaces: Vec<String>,
}

const CONFIG_API_VERSIONS: [&str; 3] = [
    "pod-security.admission.config.k8s.io/v1",
    "pod-security.admission.config.k8s.io/v1beta1",
    "pod-security.admission.config.k8s.io/v1alpha1",
];

impl Config {
    /// Parses an `AdmissionConfiguration` (YAML or JSON) whose `PodSecurity` plugin carries
    /// a `PodSecurityConfiguration`, or a bare `PodSecurityConfiguration`. Every problem is
    /// an error naming the field; a file without a `PodSecurity` plugin gives the default.
    pub fn parse(text: &str) -> Result<Config, String> {
        let value: serde_yaml::Value =
            serde_yaml::from_str(text).map_err(|e| format!("not YAML or JSON: {e}"))?;
        let kind = value.get("kind").and_then(serde_yaml::Value::as_str);
        let configuration = match kind {
            Some("PodSecurityConfiguration") => value,
            Some("AdmissionConfiguration") => {
                let file: AdmissionConfigurationFile =
                    serde_yaml::from_value(value).map_err(|e| e.to_string())?;
                if !matches!(
                    file.api_version.as_str(),
                    "apiserver.config.k8s.io/v1" | "apiserver.k8s.io/v1alpha1"
                ) || file.kind != "AdmissionConfiguration"
                {
                    return Err(format!(
                        "apiVersion {:?}: expected apiserver.config.k8s.io/v1",
                        file.api_version
                    ));
                }
                let Some(plugin) = file.plugins.into_iter().find(|p| p.name == "PodSecurity")
                else {
                    return Ok(Config::default());
                };
                if plugin.path.is_some() {
                    return Err("plugins[PodSecurity].path is not supported: put the \
                                PodSecurityConfiguration inline under `configuration`"
                        .into());
                }
                plugin.configuration.ok_or(
                    "plugins[PodSecurity] has no configuration (a PodSecurityConfiguration)",
                )?
            }
            _ => {
                return Err(
                    "kind must be AdmissionConfiguration (or PodSecurityConfiguration)".into(),
                );
            }
        };
        let file: PodSecurityConfigurationFile = serde_yaml::from_value(configuration)
            .map_err(|e| format!("PodSecurityConfiguration: {e}"))?;
        if !CONFIG_API_VERSIONS.contains(&file.api_version.as_str())
            || file.kind != "PodSecurityConfiguration"
        {
            return Err(format!(
                "PodSecurityConfiguration apiVersion {:?} kind {:?}: expected apiVersion \
                 pod-security.admission.config.k8s.io/v1, kind PodSecurityConfiguration",
                file.api_version, file.kind
            ));
        }
        let mut defaults = Policy::default();
        let d = &file.defaults;
        let modes = [
            (
                "enforce",
                &d.enforce,
                &d.enforce_version,
                &mut defaults.enforce,
            ),
            ("audit", &d.audit, &d.audit_version, &mut defaults.audit),
            ("warn", &d.warn, &d.warn_version, &mut defaults.warn),
        ];
        for (name, level, version, mode) in modes {
            if let Some(level) = level {
                mode.level = Level::parse(level)
                    .map_err(|why| format!("defaults.{name}: {level:?}: {why}"))?;
            }
            if let Some(version) = version {
                mode.version = Version::parse(version)
                    .map_err(|why| format!("defaults.{name}-version: {version:?}: {why}"))?;
            }
        }
        let e = file.exemptions;
        for (name, list) in [
            ("usernames", &e.usernames),
            ("runtimeClasses", &e.runtime_classes),
            ("namespaces", &e.namespaces),
        ] {
            let mut seen = BTreeSet::new();
            for (i, item) in list.iter().enumerate() {
                if item.is_empty() {
                    return Err(format!("exemptions.{name}[{i}]: must not be empty"));
                }
                if !seen.insert(item) {
                    return Err(format!("exemptions.{name}[{i}]: duplicate value {item:?}"));
                }
            }
        }
        Ok(Config {
            defaults,
            exemptions: Exemptions {
                usernames: e.usernames,
                runtime_classes: e.runtime_classes,
                namespaces: e.namespaces,
            },
        })
    }

    fn exempt_namespace(&self, namespace: &str) -> bool {
        !namespace.is_empty() && self.exemptions.namespaces.iter().any(|n| n == namespace)
    }

    fn exempt_user(&self, user: &str) -> bool {
        !user.is_empty() && self.exemptions.usernames.iter().any(|u| u == user)
    }

    fn exempt_runtime_class(&self, class: Option<&str>) -> bool {
        class.is_some_and(|c| {
            !c.is_empty() && self.exemptions.runtime_classes.iter().any(|r| r == c)
        })
    }
}

// ---------------------------------------------------------------------------------------
// The checks.

/// One failed check: kube's `ForbiddenReason` and `ForbiddenDetail`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

fn violation(reason: impl Into<String>, detail: impl Into<String>) -> Option<Violation> {
    Some(Violation {
        reason: reason.into(),
        detail: detail.into(),
    })
}

/// The failures joined as kube's `ForbiddenDetail`: `reason (detail), reason (detail)`.
pub fn forbidden_detail(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| {
            if v.detail.is_empty() {
                v.reason.clone()
            } else {
                format!("{} ({})", v.reason, v.detail)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// kube's `ForbiddenReason` of the aggregate: the reasons alone.
pub fn forbidden_reason(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| v.reason.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    items
        .iter()
        .map(|s| format!("\"{}\"", s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn plural<'a>(singular: &'a str, plural: &'a str, n: usize) -> &'a str {
    if n == 1 { singular } else { plural }
}

/// `container "a"` / `containers "a", "b"`.
fn containers_phrase(names: &[&str]) -> String {
    format!(
        "{} {}",
        plural("container", "containers", names.len()),
        join_quote(names)
    )
}

/// What the checks read of one container, init, regular or ephemeral alike.
struct Container<'a> {
    name: &'a str,
    sc: Option<&'a SecurityContext>,
    ports: &'a [ContainerPort],
}

/// The containers in kube's visiting order: init, regular, ephemeral.
fn containers(spec: &PodSpec) -> Vec<Container<'_>> {
    let mut out = Vec::new();
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        out.push(Container {
            name: &c.name,
            sc: c.security_context.as_ref(),
            ports: c.ports.as_deref().unwrap_or(&[]),
        });
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        out.push(Container {
            name: &c.name,
            sc: c.security_context.as_ref(),
            ports: c.ports.as_deref().unwrap_or(&[]),
        });
    }
    out
}

fn is_windows(spec: &PodSpec) -> bool {
    spec.os.as_ref().is_some_and(|os| os.name == "windows")
}

/// `pod and containers "a"`: who set a bad value.
fn setters(pod: bool, bad: &[&str]) -> String {
    let mut who = Vec::new();
    if pod {
        who.push("pod".to_string());
    }
    if !bad.is_empty() {
        who.push(containers_phrase(bad));
    }
    who.join(" and ")
}

type Check = fn(&BTreeMap<String, String>, &PodSpec) -> Option<Violation>;

const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

fn app_armor_profile(annotations: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    let bad: Vec<String> = annotations
        .iter()
        .filter(|(k, v)| {
            k.starts_with(APPARMOR_ANNOTATION_PREFIX)
                && !(v.is_empty() || *v == "runtime/default" || v.starts_with("localhost/"))
        })
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    if !bad.is_empty() {
        return violation(
            plural(
                "forbidden AppArmor profile",
                "forbidden AppArmor profiles",
                bad.len(),
            ),
            bad.join(", "),
        );
    }
    let allowed = |t: &str| t == "RuntimeDefault" || t == "Localhost";
    let mut values = BTreeSet::new();
    let pod = spec
        .security_context
        .as_ref()
        .and_then(|sc| sc.app_armor_profile.as_ref())
        .filter(|p| !allowed(&p.type_))
        .map(|p| values.insert(p.type_.clone()))
        .is_some();
    let mut bad_containers = Vec::new();
    for c in containers(spec) {
        if let Some(p) = c.sc.and_then(|sc| sc.app_armor_profile.as_ref())
            && !allowed(&p.type_)
        {
            bad_containers.push(c.name);
            values.insert(p.type_.clone());
        }
    }
    if pod || !bad_containers.is_empty() {
        let values: Vec<_> = values.into_iter().collect();
        return violation(
            "forbidden AppArmor profile",
            format!(
                "{} must not set securityContext.appArmorProfile.type to {}",
                setters(pod, &bad_containers),
                join_quote(&values)
            ),
        );
    }
    None
}

const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn capabilities_of<'a>(c: &Container<'a>) -> Option<&'a Capabilities> {
    c.sc.and_then(|sc| sc.capabilities.as_ref())
}

fn capabilities_baseline(_: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let mut valid = true;
        for cap in capabilities_of(&c)
            .and_then(|k| k.add.as_ref())
            .into_iter()
            .flatten()
        {
            if !BASELINE_CAPABILITIES.contains(&cap.as_str()) {
                valid = false;
                caps.insert(cap.as_str());
            }
        }
        if !valid {
            bad.push(c.name);
        }
    }
    if bad.is_empty() {
        return None;
    }
    let caps: Vec<_> = caps.into_iter().collect();
    violation(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad),
            join_quote(&caps)
        ),
    )
}

fn host_namespaces(_: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    let set: Vec<&str> = [
        (spec.host_network, "hostNetwork=true"),
        (spec.host_pid, "hostPID=true"),
        (spec.host_ipc, "hostIPC=true"),
    ]
    .into_iter()
    .filter(|(on, _)| *on == Some(true))
    .map(|(_, name)| name)
    .collect();
    if set.is_empty() {
        return None;
    }
    violation("host namespaces", set.join(", "))
}

fn host_path_volumes(_: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    let names: Vec<&str> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.host_path.is_some())
        .map(|v| v.name.as_str())
        .collect();
    if names.is_empty() {
        return None;
    }
    violation(
        "hostPath volumes",
        format!(
            "{} {}",
            plural("volume", "volumes", names.len()),
            join_quote(&names)
        ),
    )
}

fn host_ports(_: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut ports = BTreeSet::new();
    for c in containers(spec) {
        let mut valid = true;
        for p in c.ports {
            if let Some(h) = p.host_port.filter(|h| *h != 0) {
                valid = false;
                ports.insert(h.to_string());
            }
        }
        if !valid {
            bad.push(c.name);
        }
    }
    if bad.is_empty() {
        return None;
    }
    let ports: Vec<_> = ports.into_iter().collect();
    violation(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            plural("uses", "use", bad.len()),
            plural("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

fn privileged(_: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    let bad: Vec<&str> = containers(spec)
        .into_iter()
        .filter(|c| c.sc.and_then(|sc| sc.privileged) == Some(true))
        .map(|c| c.name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_phrase(&bad)
        ),
    )
}

fn proc_mount(_: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for c in containers(spec) {
        if let Some(t) = c.sc.and_then(|sc| sc.proc_mount.as_deref())
            && t != "Default"
        {
            bad.push(c.name);
            types.insert(t);
        }
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<_> = types.into_iter().collect();
    violation(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&bad),
            join_quote(&types)
        ),
    )
}

const SELINUX_TYPES: [&str; 5] = [
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

fn se_linux_options(_: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    let mut bad_types = BTreeSet::new();
    let mut set_user = false;
    let mut set_role = false;
    let mut valid = |o: &SELinuxOptions| {
        let mut ok = true;
        let ty = o.type_.clone().unwrap_or_default();
        if !SELINUX_TYPES.contains(&ty.as_str()) {
            ok = false;
            bad_types.insert(ty);
        }
        if o.user.as_deref().is_some_and(|u| !u.is_empty()) {
            ok = false;
            set_user = true;
        }
        if o.role.as_deref().is_some_and(|r| !r.is_empty()) {
            ok = false;
            set_role = true;
        }
        ok
    };
    let pod = spec
        .security_context
        .as_ref()
        .and_then(|sc| sc.se_linux_options.as_ref())
        .is_some_and(|o| !valid(o));
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(o) = c.sc.and_then(|sc| sc.se_linux_options.as_ref())
            && !valid(o)
        {
            bad.push(c.name);
        }
    }
    if !pod && bad.is_empty() {
        return None;
    }
    // As kube words it: the user and role notes follow a bad type only.
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        let types: Vec<_> = bad_types.into_iter().collect();
        data.push(format!(
            "{} {}",
            plural("type", "types", types.len()),
            join_quote(&types)
        ));
        if set_user {
            data.push("user may not be set".to_string());
        }
        if set_role {
            data.push("role may not be set".to_string());
        }
    }
    violation(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters(pod, &bad),
            data.join("; ")
        ),
    )
}

fn valid_seccomp(p: &SeccompProfile) -> bool {
    p.type_ == "RuntimeDefault" || p.type_ == "Localhost"
}

/// Baseline (`explicit_only`) and restricted seccomp: an explicit `Unconfined` is refused;
/// restricted also needs every container covered by the pod's or its own valid profile.
fn seccomp(spec: &PodSpec, explicit_only: bool) -> Option<Violation> {
    let mut values = BTreeSet::new();
    let mut pod_bad = false;
    let mut pod_set = false;
    if let Some(p) = spec
        .security_context
        .as_ref()
        .and_then(|sc| sc.seccomp_profile.as_ref())
    {
        if valid_seccomp(p) {
            pod_set = true;
        } else {
            pod_bad = true;
            values.insert(p.type_.clone());
        }
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match c.sc.and_then(|sc| sc.seccomp_profile.as_ref()) {
            Some(p) if !valid_seccomp(p) => {
                explicit.push(c.name);
                values.insert(p.type_.clone());
            }
            Some(_) => {}
            None if !pod_set => implicit.push(c.name),
            None => {}
        }
    }
    if pod_bad || !explicit.is_empty() {
        let values: Vec<_> = values.into_iter().collect();
        return violation(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters(pod_bad, &explicit),
                join_quote(&values)
            ),
        );
    }
    if !explicit_only && !implicit.is_empty() {
        return violation(
            "seccompProfile",
            format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_phrase(&implicit)
            ),
        );
    }
    None
}

fn seccomp_baseline(_: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    seccomp(spec, true)
}

const SAFE_SYSCTLS: [&str; 12] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

fn sysctls(_: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    let bad: Vec<&str> = spec
        .security_context
        .as_ref()
        .and_then(|sc| sc.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| s.name.as_str())
        .filter(|n| !SAFE_SYSCTLS.contains(n))
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation("forbidden sysctls", bad.join(", "))
}

fn windows_host_process(_: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    let bad: Vec<&str> = containers(spec)
        .into_iter()
        .filter(|c| {
            c.sc.and_then(|sc| sc.windows_options.as_ref())
                .and_then(|w| w.host_process)
                == Some(true)
        })
        .map(|c| c.name)
        .collect();
    let pod = spec
        .security_context
        .as_ref()
        .and_then(|sc| sc.windows_options.as_ref())
        .and_then(|w| w.host_process)
        == Some(true);
    if !pod && bad.is_empty() {
        return None;
    }
    violation(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters(pod, &bad)
        ),
    )
}

fn allow_privilege_escalation(_: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    let bad: Vec<&str> = containers(spec)
        .into_iter()
        .filter(|c| c.sc.and_then(|sc| sc.allow_privilege_escalation) != Some(false))
        .map(|c| c.name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_phrase(&bad)
        ),
    )
}

fn capabilities_restricted(_: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    let mut missing_drop = Vec::new();
    let mut adding = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let Some(k) = capabilities_of(&c) else {
            missing_drop.push(c.name);
            continue;
        };
        if !k.drop.iter().flatten().any(|d| d == "ALL") {
            missing_drop.push(c.name);
        }
        let mut bad = false;
        for cap in k.add.iter().flatten() {
            if cap != "NET_BIND_SERVICE" {
                bad = true;
                caps.insert(cap.as_str());
            }
        }
        if bad {
            adding.push(c.name);
        }
    }
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop)
        ));
    }
    if !adding.is_empty() {
        let caps: Vec<_> = caps.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&caps)
        ));
    }
    if details.is_empty() {
        return None;
    }
    violation("unrestricted capabilities", details.join("; "))
}

/// The volume's source as its JSON field name (`hostPath`), `unknown` if none is set.
fn volume_type(v: &Volume) -> &'static str {
    let Ok(Value::Object(fields)) = serde_json::to_value(v) else {
        return "unknown";
    };
    const KNOWN: [&str; 30] = [
        "awsElasticBlockStore",
        "azureDisk",
        "azureFile",
        "cephfs",
        "cinder",
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "fc",
        "flexVolume",
        "flocker",
        "gcePersistentDisk",
        "gitRepo",
        "glusterfs",
        "hostPath",
        "image",
        "iscsi",
        "nfs",
        "persistentVolumeClaim",
        "photonPersistentDisk",
        "portworxVolume",
        "projected",
        "quobyte",
        "rbd",
        "scaleIO",
        "secret",
        "storageos",
        "vsphereVolume",
    ];
    KNOWN
        .into_iter()
        .find(|k| fields.get(*k).is_some_and(|f| !f.is_null()))
        .unwrap_or("unknown")
}

const RESTRICTED_VOLUME_TYPES_ALLOWED: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

fn restricted_volumes(_: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    let mut names = Vec::new();
    let mut types = BTreeSet::new();
    for v in spec.volumes.iter().flatten() {
        let ty = volume_type(v);
        if !RESTRICTED_VOLUME_TYPES_ALLOWED.contains(&ty) {
            names.push(v.name.as_str());
            types.insert(ty);
        }
    }
    if names.is_empty() {
        return None;
    }
    let types: Vec<_> = types.into_iter().collect();
    violation(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            plural("volume", "volumes", names.len()),
            join_quote(&names),
            plural("uses", "use", names.len()),
            plural(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
    )
}

fn run_as_non_root(_: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    let pod_value = spec
        .security_context
        .as_ref()
        .and_then(|sc| sc.run_as_non_root);
    let pod_bad = pod_value == Some(false);
    let pod_ok = pod_value == Some(true);
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match c.sc.and_then(|sc| sc.run_as_non_root) {
            Some(false) => explicit.push(c.name),
            Some(true) => {}
            None if !pod_ok => implicit.push(c.name),
            None => {}
        }
    }
    if pod_bad || !explicit.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters(pod_bad, &explicit)
            ),
        );
    }
    if !implicit.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers_phrase(&implicit)
            ),
        );
    }
    None
}

fn run_as_user(_: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    let pod = spec.security_context.as_ref().and_then(|sc| sc.run_as_user) == Some(0);
    let bad: Vec<&str> = containers(spec)
        .into_iter()
        .filter(|c| c.sc.and_then(|sc| sc.run_as_user) == Some(0))
        .map(|c| c.name)
        .collect();
    if !pod && bad.is_empty() {
        return None;
    }
    violation(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", setters(pod, &bad)),
    )
}

fn seccomp_restricted(_: &BTreeMap<String, String>, spec: &PodSpec) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    seccomp(spec, false)
}

/// The baseline checks in kube's order (by check id); `true` marks those a restricted
/// check replaces.
const BASELINE_CHECKS: [(Check, bool); 11] = [
    (app_armor_profile, false),
    (capabilities_baseline, true),
    (host_namespaces, false),
    (host_path_volumes, true),
    (host_ports, false),
    (privileged, false),
    (proc_mount, false),
    (se_linux_options, false),
    (seccomp_baseline, true),
    (sysctls, false),
    (windows_host_process, false),
];

const RESTRICTED_CHECKS: [Check; 6] = [
    allow_privilege_escalation,
    capabilities_restricted,
    restricted_volumes,
    run_as_non_root,
    run_as_user,
    seccomp_restricted,
];

/// Every check of `level` that the pod fails, in kube's order.
pub fn evaluate(
    level: Level,
    annotations: &BTreeMap<String, String>,
    spec: &PodSpec,
) -> Vec<Violation> {
    let mut checks: Vec<Check> = Vec::new();
    match level {
        Level::Privileged => return Vec::new(),
        Level::Baseline => checks.extend(BASELINE_CHECKS.iter().map(|(c, _)| *c)),
        Level::Restricted => {
            checks.extend(BASELINE_CHECKS.iter().filter(|(_, r)| !r).map(|(c, _)| *c));
            checks.extend(RESTRICTED_CHECKS);
        }
    }
    checks
        .into_iter()
        .filter_map(|check| check(annotations, spec))
        .collect()
}

// ---------------------------------------------------------------------------------------
// The admission decision.

/// What a write is, as the admission sees it.
pub struct Request<'a> {
    pub group: &'a str,
    pub plural: &'a str,
    pub subresource: Option<&'a str>,
    /// The object's namespace (a Namespace's own name for namespaces).
    pub namespace: &'a str,
    pub name: &'a str,
    pub user: &'a str,
    pub object: &'a Value,
    /// Set on updates.
    pub old: Option<&'a Value>,
}

/// Whether the PodSecurity admission looks at writes of this resource.
pub fn applies_to(group: &str, plural: &str) -> bool {
    matches!(
        (group, plural),
        (
            "",
            "pods" | "namespaces" | "replicationcontrollers" | "podtemplates"
        ) | (
            "apps",
            "deployments" | "replicasets" | "statefulsets" | "daemonsets"
        ) | ("batch", "jobs" | "cronjobs")
    )
}

/// The labels of `object`; values that are not strings are left out.
pub fn labels_of(object: &Value) -> BTreeMap<String, String> {
    string_map(object.pointer("/metadata/labels"))
}

fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

fn decode_spec(value: Option<&Value>) -> Result<Option<PodSpec>, ApiError> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    PodSpec::deserialize(value)
        .map(Some)
        .map_err(|_| ApiError::bad_request("failed to decode pod"))
}

/// kube's `isSignificantPodUpdate`: only a changed image, or added containers, can change
/// what a running pod may do; other updates are not evaluated.
fn significant_pod_update(new: &PodSpec, old: &PodSpec) -> bool {
    if new.containers.len() != old.containers.len() {
        return true;
    }
    let (new_init, old_init) = (
        new.init_containers.as_deref().unwrap_or(&[]),
        old.init_containers.as_deref().unwrap_or(&[]),
    );
    if new_init.len() != old_init.len() {
        return true;
    }
    if new
        .containers
        .iter()
        .zip(&old.containers)
        .chain(new_init.iter().zip(old_init))
        .any(|(n, o)| n.image != o.image)
    {
        return true;
    }
    let old_ephemeral = old.ephemeral_containers.as_deref().unwrap_or(&[]);
    new.ephemeral_containers.iter().flatten().any(|n| {
        old_ephemeral
            .iter()
            .find(|o| o.name == n.name)
            .is_none_or(|o| o.image != n.image)
    })
}

/// The result of the admission for one write: a refusal, or warnings for the client.
pub type Outcome = Result<Vec<String>, ApiError>;

/// Decides a write of a pod, a workload or a namespace. `namespace_labels` are the labels of
/// the request's namespace (`None`: not found); `pods` lists the pods of a namespace whose
/// enforce level is being raised.
pub fn admit(
    config: &Config,
    request: &Request<'_>,
    namespace_labels: Option<&BTreeMap<String, String>>,
    pods: &dyn Fn(&str) -> Vec<Value>,
) -> Outcome {
    match (request.group, request.plural) {
        ("", "namespaces") => admit_namespace(config, request, pods),
        ("", "pods") => admit_pod(config, request, namespace_labels),
        _ => admit_template(config, request, namespace_labels),
    }
}

fn lookup_failed(namespace: &str) -> ApiError {
    ApiError::internal(format!("failed to lookup namespace {namespace:?}"))
}

/// Whether the request's namespace or user is exempt; says which in the audit event.
fn exempt(config: &Config, request: &Request<'_>) -> bool {
    let dimension = if config.exempt_namespace(request.namespace) {
        "namespace"
    } else if config.exempt_user(request.user) {
        "user"
    } else {
        return false;
    };
    crate::apiserver::auth::audit::annotate(EXEMPT_ANNOTATION, dimension.into());
    true
}

fn admit_pod(
    config: &Config,
    request: &Request<'_>,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> Outcome {
    const IGNORED: [&str; 8] = [
        "exec",
        "attach",
        "binding",
        "eviction",
        "log",
        "portforward",
        "proxy",
        "status",
    ];
    if request.subresource.is_some_and(|s| IGNORED.contains(&s)) {
        return Ok(Vec::new());
    }
    if exempt(config, request) {
        return Ok(Vec::new());
    }
    let labels = namespace_labels.ok_or_else(|| lookup_failed(request.namespace))?;
    let (policy, errors) = policy_for(labels, &config.defaults);
    crate::apiserver::auth::audit::annotate(ENFORCE_POLICY_ANNOTATION, policy.enforce.to_string());
    if errors.is_empty() && policy.fully_privileged() {
        return Ok(Vec::new());
    }
    let Some(spec) = decode_spec(request.object.get("spec"))? else {
        return Err(ApiError::bad_request("failed to decode pod"));
    };
    if let Some(old) = request.old {
        let old_spec = decode_spec(old.get("spec"))?.unwrap_or_default();
        if !significant_pod_update(&spec, &old_spec) {
            return Ok(Vec::new());
        }
    }
    let annotations = string_map(request.object.pointer("/metadata/annotations"));
    evaluate_pod(config, request, &policy, &annotations, &spec, true)
}

/// Where a workload keeps its pod template.
fn template_of<'a>(plural: &str, object: &'a Value) -> Option<&'a Value> {
    match plural {
        "podtemplates" => object.get("template"),
        "cronjobs" => object.pointer("/spec/jobTemplate/spec/template"),
        _ => object.pointer("/spec/template"),
    }
}

fn admit_template(
    config: &Config,
    request: &Request<'_>,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> Outcome {
    if request.subresource.is_some() {
        return Ok(Vec::new());
    }
    if exempt(config, request) {
        return Ok(Vec::new());
    }
    // kube lets the write through when the namespace cannot be read (audit-only error).
    let Some(labels) = namespace_labels else {
        return Ok(Vec::new());
    };
    let (policy, errors) = policy_for(labels, &config.defaults);
    if errors.is_empty()
        && policy.warn.level == Level::Privileged
        && policy.audit.level == Level::Privileged
    {
        return Ok(Vec::new());
    }
    let Some(template) = template_of(request.plural, request.object) else {
        return Ok(Vec::new());
    };
    // A template that does not decode is left to validation (kube: audit error only).
    let Ok(Some(spec)) = decode_spec(template.get("spec")) else {
        return Ok(Vec::new());
    };
    let annotations = string_map(template.pointer("/metadata/annotations"));
    evaluate_pod(config, request, &policy, &annotations, &spec, false)
}

fn evaluate_pod(
    config: &Config,
    request: &Request<'_>,
    policy: &Policy,
    annotations: &BTreeMap<String, String>,
    spec: &PodSpec,
    enforce: bool,
) -> Outcome {
    if config.exempt_runtime_class(spec.runtime_class_name.as_deref()) {
        crate::apiserver::auth::audit::annotate(EXEMPT_ANNOTATION, "runtimeClass".into());
        return Ok(Vec::new());
    }
    if enforce {
        let violations = evaluate(policy.enforce.level, annotations, spec);
        if !violations.is_empty() {
            let mut error = ApiError::forbidden(format!(
                "{} \"{}\" is forbidden: violates PodSecurity \"{}\": {}",
                crate::apiserver::http::status::qualified(request.group, request.plural),
                request.name,
                policy.enforce,
                forbidden_detail(&violations)
            ));
            error.details = Some(Box::new(crate::apiserver::http::status::StatusDetails {
                name: (!request.name.is_empty()).then(|| request.name.to_string()),
                kind: Some(request.plural.to_string()),
                ..Default::default()
            }));
            return Err(error);
        }
    }
    if policy.audit.level != Level::Privileged {
        let violations = evaluate(policy.audit.level, annotations, spec);
        if !violations.is_empty() {
            crate::apiserver::auth::audit::annotate(
                AUDIT_VIOLATIONS_ANNOTATION,
                format!(
                    "would violate PodSecurity \"{}\": {}",
                    policy.audit,
                    forbidden_detail(&violations)
                ),
            );
        }
    }
    let violations = evaluate(policy.warn.level, annotations, spec);
    if violations.is_empty() {
        return Ok(Vec::new());
    }
    Ok(vec![format!(
        "would violate PodSecurity \"{}\": {}",
        policy.warn,
        forbidden_detail(&violations)
    )])
}

fn label_errors(name: &str, errors: &[LabelError]) -> ApiError {
    let causes = errors
        .iter()
        .map(
            |(label, value, why)| crate::apiserver::http::status::StatusCause {
                reason: Some("FieldValueInvalid".into()),
                message: Some(format!("Invalid value: {value:?}: {why}")),
                field: Some(format!("metadata.labels[{label}]")),
            },
        )
        .collect();
    ApiError::invalid("", "Namespace", name, causes)
}

fn admit_namespace(
    config: &Config,
    request: &Request<'_>,
    pods: &dyn Fn(&str) -> Vec<Value>,
) -> Outcome {
    if request.subresource.is_some() {
        return Ok(Vec::new());
    }
    let labels = labels_of(request.object);
    let (policy, errors) = policy_for(&labels, &config.defaults);
    let Some(old) = request.old else {
        if !errors.is_empty() {
            return Err(label_errors(request.name, &errors));
        }
        if config.exempt_namespace(request.name) {
            return Ok(
                exempt_namespace_warning(config, request.name, &policy, &labels)
                    .into_iter()
                    .collect(),
            );
        }
        return Ok(Vec::new());
    };
    let (old_policy, old_errors) = policy_for(&labels_of(old), &config.defaults);
    if !errors.is_empty() && (old_errors.is_empty() || errors != old_errors) {
        return Err(label_errors(request.name, &errors));
    }
    if policy.enforce == old_policy.enforce
        || policy.enforce.level == Level::Privileged
        || (policy.enforce.version == old_policy.enforce.version
            && policy.enforce.level <= old_policy.enforce.level)
    {
        return Ok(Vec::new());
    }
    if config.exempt_namespace(request.name) {
        return Ok(
            exempt_namespace_warning(config, request.name, &policy, &labels)
                .into_iter()
                .collect(),
        );
    }
    Ok(existing_pods_warnings(
        config,
        request.name,
        policy.enforce,
        pods(request.name),
    ))
}

/// kube's warning for labels set on an exempt namespace.
fn exempt_namespace_warning(
    config: &Config,
    name: &str,
    policy: &Policy,
    labels: &BTreeMap<String, String>,
) -> Option<String> {
    if policy.fully_privileged() || *policy == config.defaults {
        return None;
    }
    let modes = [
        ("enforce", ENFORCE_LABEL, policy.enforce),
        ("audit", AUDIT_LABEL, policy.audit),
        ("warn", WARN_LABEL, policy.warn),
    ];
    let parts: Vec<String> = modes
        .into_iter()
        .filter(|(_, label, mode)| {
            mode.level != Level::Privileged
                && (labels.contains_key(*label) || labels.contains_key(&format!("{label}-version")))
        })
        .map(|(mode_name, _, mode)| format!("{mode_name}={mode}"))
        .collect();
    Some(format!(
        "namespace {name:?} is exempt from Pod Security, and the policy ({}) will be ignored",
        parts.join(", ")
    ))
}

/// At most this many existing pods are evaluated when a namespace's enforce level rises
/// (kube's default).
const MAX_PODS_TO_CHECK: usize = 3000;

/// kube's `EvaluatePodsInNamespace`: a summary line, then one line per distinct set of
/// failures naming the first pod (by name) and how many others share it.
pub fn existing_pods_warnings(
    config: &Config,
    namespace: &str,
    enforce: LevelVersion,
    pods: Vec<Value>,
) -> Vec<String> {
    struct Pod {
        name: String,
        controller: Option<String>,
        annotations: BTreeMap<String, String>,
        spec: PodSpec,
    }
    let mut decoded: Vec<Pod> = pods
        .iter()
        .filter_map(|p| {
            let spec = decode_spec(p.get("spec")).ok().flatten()?;
            if config.exempt_runtime_class(spec.runtime_class_name.as_deref()) {
                return None;
            }
            let controller = p
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
                .and_then(|r| r.get("uid").and_then(Value::as_str))
                .map(str::to_string);
            Some(Pod {
                name: p
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                controller,
                annotations: string_map(p.pointer("/metadata/annotations")),
                spec,
            })
        })
        .collect();
    // One pod per controller first, then the other replicas.
    let mut seen = BTreeSet::new();
    let (mut first, rest): (Vec<Pod>, Vec<Pod>) = decoded.drain(..).partition(|p| {
        p.controller
            .as_ref()
            .is_none_or(|uid| seen.insert(uid.clone()))
    });
    first.extend(rest);
    let total = first.len();
    first.truncate(MAX_PODS_TO_CHECK);
    let checked = first.len();
    let mut order: Vec<String> = Vec::new();
    let mut counts: BTreeMap<String, (String, usize)> = BTreeMap::new();
    for pod in &first {
        let violations = evaluate(enforce.level, &pod.annotations, &pod.spec);
        if violations.is_empty() {
            continue;
        }
        let reason = forbidden_reason(&violations);
        let entry = counts.entry(reason.clone()).or_insert_with(|| {
            order.push(reason.clone());
            (pod.name.clone(), 0)
        });
        if pod.name < entry.0 {
            entry.0 = pod.name.clone();
        }
        entry.1 += 1;
    }
    let mut warnings = Vec::new();
    if checked < total {
        warnings.push(format!(
            "new PodSecurity enforce level only checked against the first {checked} of {total} existing pods"
        ));
    }
    if !order.is_empty() {
        warnings.push(format!(
            "existing pods in namespace {namespace:?} violate the new PodSecurity enforce level \"{enforce}\""
        ));
    }
    let mut lines: Vec<String> = order
        .iter()
        .map(|reason| {
            let (name, count) = counts.get(reason).cloned().unwrap_or_default();
            match count {
                0 | 1 => format!("{name}: {reason}"),
                2 => format!("{name} (and 1 other pod): {reason}"),
                n => format!("{name} (and {} other pods): {reason}", n - 1),
            }
        })
        .collect();
    lines.sort();
    warnings.extend(lines);
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: Value) -> PodSpec {
        serde_json::from_value(v).expect("test spec")
    }

    fn no_annotations() -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    /// A pod that passes restricted: one container "c" with every field set right.
    fn compliant() -> Value {
        json!({
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": "i", "securityContext": {
                "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"]}
            }}]
        })
    }

    fn with(mut base: Value, pointer: &str, value: Value) -> Value {
        let mut parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
        let last = parts.pop().expect("pointer");
        let mut at = &mut base;
        for p in parts {
            at = match at {
                Value::Array(a) => &mut a[p.parse::<usize>().expect("index")],
                _ => at
                    .as_object_mut()
                    .expect("object")
                    .entry(p)
                    .or_insert(json!({})),
            };
        }
        at[last] = value;
        base
    }

    fn check(f: Check, v: Value) -> Option<Violation> {
        f(&no_annotations(), &spec(v))
    }

    fn detail(f: Check, v: Value) -> String {
        check(f, v)
            .map(|v| format!("{} ({})", v.reason, v.detail))
            .unwrap_or_default()
    }

    #[test]
    fn compliant_pod_passes_every_level() {
        for level in [Level::Privileged, Level::Baseline, Level::Restricted] {
            assert_eq!(
                evaluate(level, &no_annotations(), &spec(compliant())),
                vec![]
            );
        }
    }

    #[test]
    fn host_namespaces() {
        assert_eq!(
            check(
                super::host_namespaces,
                json!({"containers": [], "hostNetwork": false})
            ),
            None
        );
        assert_eq!(
            detail(
                super::host_namespaces,
                json!({"containers": [], "hostNetwork": true, "hostIPC": true})
            ),
            "host namespaces (hostNetwork=true, hostIPC=true)"
        );
    }

    #[test]
    fn privileged() {
        let ok = with(
            compliant(),
            "/containers/0/securityContext/privileged",
            json!(false),
        );
        assert_eq!(check(super::privileged, ok), None);
        let bad = with(
            compliant(),
            "/containers/0/securityContext/privileged",
            json!(true),
        );
        assert_eq!(
            detail(super::privileged, bad),
            "privileged (container \"c\" must not set securityContext.privileged=true)"
        );
    }

    #[test]
    fn capabilities_baseline_and_restricted() {
        let ok = with(
            compliant(),
            "/containers/0/securityContext/capabilities/add",
            json!(["CHOWN"]),
        );
        assert_eq!(check(capabilities_baseline, ok.clone()), None);
        assert_eq!(
            detail(capabilities_restricted, ok),
            "unrestricted capabilities (container \"c\" must not include \"CHOWN\" in securityContext.capabilities.add)"
        );
        let bad = with(
            json!({"initContainers": [{"name": "i"}], "containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["SYS_ADMIN", "NET_RAW"]}}}]}),
            "/hostPID",
            json!(false),
        );
        assert_eq!(
            detail(capabilities_baseline, bad.clone()),
            "non-default capabilities (container \"c\" must not include \"NET_RAW\", \"SYS_ADMIN\" in securityContext.capabilities.add)"
        );
        assert_eq!(
            detail(capabilities_restricted, bad),
            "unrestricted capabilities (containers \"i\", \"c\" must set securityContext.capabilities.drop=[\"ALL\"]; container \"c\" must not include \"NET_RAW\", \"SYS_ADMIN\" in securityContext.capabilities.add)"
        );
        let nbs = with(
            compliant(),
            "/containers/0/securityContext/capabilities/add",
            json!(["NET_BIND_SERVICE"]),
        );
        assert_eq!(check(capabilities_restricted, nbs), None);
    }

    #[test]
    fn host_path_and_restricted_volumes() {
        let v = with(
            compliant(),
            "/volumes",
            json!([
                {"name": "h", "hostPath": {"path": "/"}},
                {"name": "e", "emptyDir": {}},
                {"name": "n", "nfs": {"server": "s", "path": "/"}}
            ]),
        );
        assert_eq!(
            detail(host_path_volumes, v.clone()),
            "hostPath volumes (volume \"h\")"
        );
        assert_eq!(
            detail(restricted_volumes, v),
            "restricted volume types (volumes \"h\", \"n\" use restricted volume types \"hostPath\", \"nfs\")"
        );
        let ok = with(
            compliant(),
            "/volumes",
            json!([{"name": "s", "secret": {"secretName": "x"}}, {"name": "p", "projected": {"sources": []}}]),
        );
        assert_eq!(check(restricted_volumes, ok.clone()), None);
        assert_eq!(check(host_path_volumes, ok), None);
    }

    #[test]
    fn host_ports() {
        let bad = json!({"containers": [
            {"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81, "hostPort": 443}]},
            {"name": "b", "ports": [{"containerPort": 80}]}
        ], "ephemeralContainers": [{"name": "dbg", "ports": [{"containerPort": 1, "hostPort": 9}]}]});
        assert_eq!(
            detail(super::host_ports, bad),
            "hostPort (containers \"a\", \"dbg\" use hostPorts 443, 8080, 9)"
        );
        assert_eq!(check(super::host_ports, compliant()), None);
    }

    #[test]
    fn app_armor() {
        let mut annotations = BTreeMap::new();
        annotations.insert(
            format!("{APPARMOR_ANNOTATION_PREFIX}c"),
            "unconfined".to_string(),
        );
        let v = app_armor_profile(&annotations, &spec(compliant())).expect("violation");
        assert_eq!(v.reason, "forbidden AppArmor profile");
        assert_eq!(
            v.detail,
            "container.apparmor.security.beta.kubernetes.io/c=\"unconfined\""
        );
        annotations.insert(
            format!("{APPARMOR_ANNOTATION_PREFIX}c"),
            "runtime/default".to_string(),
        );
        assert_eq!(app_armor_profile(&annotations, &spec(compliant())), None);
        let field = with(
            compliant(),
            "/containers/0/securityContext/appArmorProfile",
            json!({"type": "Unconfined"}),
        );
        assert_eq!(
            detail(app_armor_profile, field),
            "forbidden AppArmor profile (container \"c\" must not set securityContext.appArmorProfile.type to \"Unconfined\")"
        );
    }

    #[test]
    fn se_linux() {
        let ok = with(
            compliant(),
            "/securityContext/seLinuxOptions",
            json!({"type": "container_t", "level": "s0:c1"}),
        );
        assert_eq!(check(se_linux_options, ok), None);
        let bad = with(
            compliant(),
            "/securityContext/seLinuxOptions",
            json!({"type": "spc_t", "user": "u"}),
        );
        let bad = with(
            bad,
            "/containers/0/securityContext/seLinuxOptions",
            json!({"type": "unconfined_t"}),
        );
        assert_eq!(
            detail(se_linux_options, bad),
            "seLinuxOptions (pod and container \"c\" set forbidden securityContext.seLinuxOptions: types \"spc_t\", \"unconfined_t\"; user may not be set)"
        );
    }

    #[test]
    fn proc_mount() {
        let ok = with(
            compliant(),
            "/containers/0/securityContext/procMount",
            json!("Default"),
        );
        assert_eq!(check(super::proc_mount, ok), None);
        let bad = with(
            compliant(),
            "/containers/0/securityContext/procMount",
            json!("Unmasked"),
        );
        assert_eq!(
            detail(super::proc_mount, bad),
            "procMount (container \"c\" must not set securityContext.procMount to \"Unmasked\")"
        );
    }

    #[test]
    fn seccomp_levels() {
        let none = json!({"containers": [{"name": "c"}]});
        assert_eq!(check(seccomp_baseline, none.clone()), None);
        assert_eq!(
            detail(seccomp_restricted, none),
            "seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
        );
        let unconfined = with(
            compliant(),
            "/securityContext/seccompProfile",
            json!({"type": "Unconfined"}),
        );
        let want = "seccompProfile (pod must not set securityContext.seccompProfile.type to \"Unconfined\")";
        assert_eq!(detail(seccomp_baseline, unconfined.clone()), want);
        assert_eq!(detail(seccomp_restricted, unconfined), want);
        let container_level = json!({"containers": [{"name": "c", "securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p"}}}]});
        assert_eq!(check(seccomp_restricted, container_level), None);
    }

    #[test]
    fn sysctls() {
        let ok = with(
            compliant(),
            "/securityContext/sysctls",
            json!([{"name": "net.ipv4.tcp_syncookies", "value": "1"}]),
        );
        assert_eq!(check(super::sysctls, ok), None);
        let bad = with(
            compliant(),
            "/securityContext/sysctls",
            json!([{"name": "kernel.msgmax", "value": "1"}, {"name": "net.core.somaxconn", "value": "1"}]),
        );
        assert_eq!(
            detail(super::sysctls, bad),
            "forbidden sysctls (kernel.msgmax, net.core.somaxconn)"
        );
    }

    #[test]
    fn windows_host_process() {
        let bad = with(
            compliant(),
            "/securityContext/windowsOptions",
            json!({"hostProcess": true}),
        );
        assert_eq!(
            detail(super::windows_host_process, bad),
            "hostProcess (pod must not set securityContext.windowsOptions.hostProcess=true)"
        );
        assert_eq!(check(super::windows_host_process, compliant()), None);
    }

    #[test]
    fn allow_privilege_escalation() {
        let bad = with(
            compliant(),
            "/containers/0/securityContext/allowPrivilegeEscalation",
            json!(true),
        );
        assert_eq!(
            detail(super::allow_privilege_escalation, bad.clone()),
            "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false)"
        );
        // Windows pods are exempt from it, as in kube 1.25+.
        let windows = with(bad, "/os", json!({"name": "windows"}));
        assert_eq!(check(super::allow_privilege_escalation, windows), None);
    }

    #[test]
    fn run_as_non_root_and_user() {
        let bad = with(compliant(), "/securityContext/runAsNonRoot", json!(false));
        assert_eq!(
            detail(run_as_non_root, bad),
            "runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false)"
        );
        let unset = json!({"containers": [{"name": "a"}, {"name": "b", "securityContext": {"runAsNonRoot": true}}]});
        assert_eq!(
            detail(run_as_non_root, unset),
            "runAsNonRoot != true (pod or container \"a\" must set securityContext.runAsNonRoot=true)"
        );
        assert_eq!(check(run_as_non_root, compliant()), None);
        let root = with(
            compliant(),
            "/containers/0/securityContext/runAsUser",
            json!(0),
        );
        assert_eq!(
            detail(run_as_user, root),
            "runAsUser=0 (container \"c\" must not set runAsUser=0)"
        );
        let user = with(compliant(), "/securityContext/runAsUser", json!(1000));
        assert_eq!(check(run_as_user, user), None);
    }

    #[test]
    fn restricted_message_matches_kube_for_a_privileged_pod() {
        let pod = json!({"containers": [{"name": "c", "image": "i", "securityContext": {"privileged": true}}]});
        let v = evaluate(Level::Restricted, &no_annotations(), &spec(pod.clone()));
        assert_eq!(
            forbidden_detail(&v),
            "privileged (container \"c\" must not set securityContext.privileged=true), allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
        );
        let b = evaluate(Level::Baseline, &no_annotations(), &spec(pod));
        assert_eq!(
            forbidden_detail(&b),
            "privileged (container \"c\" must not set securityContext.privileged=true)"
        );
    }

    #[test]
    fn labels_parse_as_kube() {
        let mut labels = BTreeMap::new();
        labels.insert(ENFORCE_LABEL.to_string(), "bogus".to_string());
        labels.insert(WARN_LABEL.to_string(), "bogus".to_string());
        labels.insert(format!("{AUDIT_LABEL}-version"), "v1.025".to_string());
        let (p, errors) = policy_for(&labels, &Policy::default());
        assert_eq!(
            p.enforce.level,
            Level::Restricted,
            "a bad enforce level fails closed"
        );
        assert_eq!(
            p.warn.level,
            Level::Privileged,
            "a bad warn level fails open"
        );
        assert_eq!(errors.len(), 3);
        assert_eq!(Version::parse("v1.30"), Ok(Version::Minor(30)));
        assert_eq!(Version::parse("latest"), Ok(Version::Latest));
        assert!(Version::parse("v2.1").is_err());
        assert!(Version::parse("v1.").is_err());
    }

    fn request<'a>(plural: &'a str, object: &'a Value, old: Option<&'a Value>) -> Request<'a> {
        Request {
            group: if plural == "deployments" { "apps" } else { "" },
            plural,
            subresource: None,
            namespace: "ns",
            name: "x",
            user: "jane",
            object,
            old,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn enforce_refuses_with_kube_status_and_warn_warns() {
        let pod = json!({"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "i", "securityContext": {"privileged": true}}]}});
        let none = |_: &str| Vec::new();
        let config = Config::default();
        let enforce = labels(&[(ENFORCE_LABEL, "baseline")]);
        let err = admit(&config, &request("pods", &pod, None), Some(&enforce), &none)
            .expect_err("refused");
        assert_eq!(err.code.as_u16(), 403);
        assert_eq!(
            err.message,
            "pods \"x\" is forbidden: violates PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"
        );
        let warn = labels(&[
            (WARN_LABEL, "baseline"),
            (format!("{WARN_LABEL}-version").as_str(), "v1.30"),
        ]);
        let warnings =
            admit(&config, &request("pods", &pod, None), Some(&warn), &none).expect("allowed");
        assert_eq!(
            warnings,
            vec![
                "would violate PodSecurity \"baseline:v1.30\": privileged (container \"c\" must not set securityContext.privileged=true)"
            ]
        );
        // Workload templates get warn, never enforce.
        let deployment = json!({"spec": {"template": pod.clone()}});
        let both = labels(&[(ENFORCE_LABEL, "restricted"), (WARN_LABEL, "baseline")]);
        let warnings = admit(
            &config,
            &request("deployments", &deployment, None),
            Some(&both),
            &none,
        )
        .expect("allowed");
        assert_eq!(warnings.len(), 1);
        // Exempt users, namespaces and runtime classes pass.
        let exempt = Config {
            exemptions: Exemptions {
                usernames: vec!["jane".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            admit(&exempt, &request("pods", &pod, None), Some(&enforce), &none).expect("exempt"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn insignificant_pod_updates_are_not_evaluated() {
        let pod = json!({"metadata": {"name": "x", "labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i", "securityContext": {"privileged": true}}]}});
        let old = json!({"metadata": {"name": "x"}, "spec": pod["spec"].clone()});
        let enforce = labels(&[(ENFORCE_LABEL, "baseline")]);
        let none = |_: &str| Vec::new();
        assert!(
            admit(
                &Config::default(),
                &request("pods", &pod, Some(&old)),
                Some(&enforce),
                &none
            )
            .is_ok()
        );
        let new_image = with(pod.clone(), "/spec/containers/0/image", json!("j"));
        assert!(
            admit(
                &Config::default(),
                &request("pods", &new_image, Some(&old)),
                Some(&enforce),
                &none
            )
            .is_err()
        );
    }

    #[test]
    fn namespace_labels_are_validated_and_raising_enforce_warns() {
        let none = |_: &str| Vec::new();
        let bad = json!({"metadata": {"name": "ns", "labels": {ENFORCE_LABEL: "strict"}}});
        let err = admit(
            &Config::default(),
            &request("namespaces", &bad, None),
            None,
            &none,
        )
        .expect_err("invalid");
        assert_eq!(err.code.as_u16(), 422);
        assert_eq!(
            err.message,
            "Namespace \"x\" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted"
        );
        let old = json!({"metadata": {"name": "ns"}});
        let new = json!({"metadata": {"name": "ns", "labels": {ENFORCE_LABEL: "restricted"}}});
        let pods = |_: &str| {
            vec![
                json!({"metadata": {"name": "b"}, "spec": {"containers": [{"name": "c", "securityContext": {"privileged": true}}]}}),
                json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "securityContext": {"privileged": true}}]}}),
                json!({"metadata": {"name": "ok"}, "spec": compliant()}),
            ]
        };
        let warnings = admit(
            &Config::default(),
            &request("namespaces", &new, Some(&old)),
            None,
            &pods,
        )
        .expect("allowed");
        assert_eq!(
            warnings,
            vec![
                "existing pods in namespace \"x\" violate the new PodSecurity enforce level \"restricted:latest\"".to_string(),
                "a (and 1 other pod): privileged, allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile".to_string(),
            ]
        );
    }

    #[test]
    fn config_file_parses_and_rejects() {
        let text = r#"
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      enforce-version: latest
      warn: restricted
    exemptions:
      namespaces: [kube-system]
      usernames: [admin]
      runtimeClasses: [kata]
"#;
        let c = Config::parse(text).expect("parses");
        assert_eq!(c.defaults.enforce.level, Level::Baseline);
        assert_eq!(c.defaults.warn.level, Level::Restricted);
        assert_eq!(c.defaults.audit.level, Level::Privileged);
        assert_eq!(c.exemptions.namespaces, vec!["kube-system"]);
        assert!(c.exempt_runtime_class(Some("kata")));
        assert!(
            Config::parse(&text.replace("baseline", "strict"))
                .unwrap_err()
                .contains("defaults.enforce")
        );
        assert!(Config::parse(&text.replace("usernames", "users")).is_err());
        assert!(Config::parse("kind: Pod").is_err());
        assert!(Config::parse("{{{").is_err());
    }
}
