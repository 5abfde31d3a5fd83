//! The string formats kube validates everywhere (apimachinery's `util/validation`): DNS
//! labels and subdomains, qualified names (label and annotation keys), label values,
//! IANA service names (port names), environment variable names, config keys, IPs and
//! CIDRs. Each check returns kube's messages, empty when the value is valid.
//!
//! Shared by the API server's validation (which wraps each message in a field error) and
//! by every component that must not trust a stored object (proxy, network, DNS, kubelet):
//! they re-check the fields they turn into commands, names or paths. Pure; touches nothing.

use std::net::IpAddr;

fn max_len_error(max: usize) -> String {
    format!("must be no more than {max} characters")
}

/// kube's `RegexError`: `<msg> (e.g. 'a',  or 'b', regex used for validation is '<fmt>')`.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let shown: Vec<String> = examples.iter().map(|e| format!("'{e}'")).collect();
    format!(
        "{msg} (e.g. {}, regex used for validation is '{fmt}')",
        shown.join(",  or ")
    )
}

fn is_lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn matches_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_lower_alnum(b[0])
        && is_lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
}

fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns1123_label)
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";

pub fn dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !matches_dns1123_label(value) {
        if matches_dns1123_subdomain(value) {
            errs.push("must not contain dots".into());
        } else {
            errs.push(regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

pub fn dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !matches_dns1123_subdomain(value) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
            &["example.com"],
        ));
    }
    errs
}

pub fn dns1035_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63));
    }
    let b = value.as_bytes();
    let ok = !b.is_empty()
        && b[0].is_ascii_lowercase()
        && is_lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| is_lower_alnum(c) || c == b'-');
    if !ok {
        errs.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            "[a-z]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// `\*\.` followed by a DNS-1123 subdomain.
pub fn wildcard_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 253 {
        errs.push(max_len_error(253));
    }
    let ok = value
        .strip_prefix("*.")
        .is_some_and(matches_dns1123_subdomain);
    if !ok {
        errs.push(regex_error(
            "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character",
            "\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
            &["*.example.com"],
        ));
    }
    errs
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn matches_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
}

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// A qualified name: label keys, annotation keys, finalizers, resource names.
pub fn qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".into());
            } else {
                for msg in dns1123_subdomain(prefix) {
                    errs.push(format!("prefix part {msg}"));
                }
            }
            *name
        }
        _ => {
            errs.push(format!(
                "{} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    &format!("a qualified name {QUALIFIED_NAME_MSG}"),
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !name.is_empty() && !matches_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// A label value: empty, or a qualified name part of at most 63 characters.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !value.is_empty() && !matches_qualified_name_part(value) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?",
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// An IANA_SVC_NAME (RFC 6335): container and Service port names.
pub fn port_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 15 {
        errs.push(max_len_error(15));
    }
    if value.is_empty() || !value.bytes().all(|c| is_lower_alnum(c) || c == b'-') {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if !value.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".into());
    }
    if value.contains("--") {
        errs.push("must not contain consecutive hyphens".into());
    }
    if value.starts_with('-') || value.ends_with('-') {
        errs.push("must not begin or end with a hyphen".into());
    }
    errs
}

pub fn inclusive_range_error(lo: i64, hi: i64) -> String {
    format!("must be between {lo} and {hi}, inclusive")
}

/// A port number 1–65535.
pub fn port_number(value: i64) -> Vec<String> {
    if (1..=65535).contains(&value) {
        Vec::new()
    } else {
        vec![inclusive_range_error(1, 65535)]
    }
}

/// An environment variable name (RelaxedEnvironmentVariableValidation, on by default
/// since 1.32: printable ASCII except '=').
pub fn env_var_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.is_empty() {
        errs.push("environment variable name must be non-empty".into());
    }
    if value.chars().any(|c| !(' '..='~').contains(&c) || c == '=') {
        errs.push(
            "a valid environment variable name must consist only of printable ASCII characters other than '='"
                .into(),
        );
    }
    errs
}

/// A key of a ConfigMap, Secret or projected item.
pub fn config_map_key(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 253 {
        errs.push(max_len_error(253));
    }
    if value.is_empty()
        || !value
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
    {
        errs.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    if value == "." {
        errs.push("must not be '.'".into());
    } else if value == ".." {
        errs.push("must not be '..'".into());
    } else if value.starts_with("..") {
        errs.push("must not start with '..'".into());
    }
    errs
}

/// A C identifier: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn c_identifier(value: &str) -> Vec<String> {
    let b = value.as_bytes();
    let ok = !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_');
    if ok {
        Vec::new()
    } else {
        vec![regex_error(
            "a valid C identifier must start with alphabetic character or '_', followed by a string of alphanumeric characters or '_'",
            "[A-Za-z_][A-Za-z0-9_]*",
            &["my_name", "MY_NAME", "MyName"],
        )]
    }
}

/// An HTTP header name (`[-A-Za-z0-9]+`).
pub fn http_header_name(value: &str) -> Vec<String> {
    if !value.is_empty()
        && value
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-')
    {
        Vec::new()
    } else {
        vec![regex_error(
            "a valid HTTP header must consist of alphanumeric characters or '-'",
            "[-A-Za-z0-9]+",
            &["X-Header-Name"],
        )]
    }
}

/// Parses an IP as Kubernetes' `ParseIPSloppy` does: IPv4 octets may carry leading zeros
/// (read as decimal), IPv6 in any standard form. No zone, no brackets, no CIDR suffix.
pub fn parse_ip_sloppy(value: &str) -> Option<IpAddr> {
    if let Ok(ip) = value.parse::<IpAddr>() {
        return Some(ip);
    }
    // Leading zeros in dotted IPv4 ("010.001.002.003"), which Go's old parser accepted.
    let parts: Vec<&str> = value.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    let mut octets = [0u8; 4];
    for (o, p) in octets.iter_mut().zip(&parts) {
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        *o = p.parse().ok()?;
    }
    Some(IpAddr::from(octets))
}

/// Parses a CIDR (`ParseCIDRSloppy`): an address, `/`, a prefix length for its family.
pub fn parse_cidr_sloppy(value: &str) -> Option<(IpAddr, u8)> {
    let (ip, len) = value.split_once('/')?;
    let ip = parse_ip_sloppy(ip)?;
    if len.is_empty() || len.len() > 3 || !len.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let len: u8 = len.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some((ip, len))
}

pub fn ip(value: &str) -> Vec<String> {
    match parse_ip_sloppy(value) {
        Some(_) => Vec::new(),
        None => vec!["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".into()],
    }
}

pub fn cidr(value: &str) -> Vec<String> {
    match parse_cidr_sloppy(value) {
        Some(_) => Vec::new(),
        None => vec!["must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)".into()],
    }
}

/// apimachinery's `IsValidPathSegmentName`: a name that can be one segment of a URL path
/// (RBAC object names, the names in object references).
pub fn path_segment_name(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|c| name.contains(**c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

/// A percentage string (`[0-9]+%`).
pub fn percent(value: &str) -> Vec<String> {
    let ok = value
        .strip_suffix('%')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()));
    if ok {
        Vec::new()
    } else {
        vec![regex_error(
            "a valid percent string must be a numeric string followed by an ending '%'",
            "[0-9]+%",
            &["1%", "93%"],
        )]
    }
}

/// Go's `strconv.Quote`: printable runes as they are, `\"` `\\`, the C escapes, `\xNN` for
/// other bytes below 0x80 and invalid bytes, `\uNNNN`/`\UNNNNNNNN` for other runes.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if is_go_printable(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// Close to Go's `strconv.IsPrint`: letters, marks, numbers, punctuation, symbols and the
/// ASCII space. Control and format characters, other spaces and unassigned code points are
/// escaped.
fn is_go_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    // Format characters (Cf) and private-use/surrogate areas that Go escapes.
    !matches!(c as u32,
        0xad | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x200b..=0x200f | 0x202a..=0x202e
        | 0x2060..=0x206f | 0xfeff | 0xfff9..=0xfffb | 0xe000..=0xf8ff | 0xf0000..)
}

/// The label keys a kubelet may set on its own Node (kube's `k8s.io/kubelet` well-known
/// labels): the hostname, OS, architecture, instance-type and topology labels.
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
];

/// The label key namespaces (prefixes, and their subdomains) a kubelet may set freely.
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

/// The prefix of a label key (`a.b/c` → `a.b`); empty when it has none.
fn label_namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(prefix, _)| prefix)
}

fn in_namespace(namespace: &str, domain: &str) -> bool {
    namespace == domain
        || namespace
            .strip_suffix(domain)
            .is_some_and(|rest| rest.ends_with('.'))
}

/// Whether a node may add, change or remove the label `key` on its own Node (kube's
/// NodeRestriction): never a `node-restriction.kubernetes.io` one, and of the
/// `kubernetes.io` and `k8s.io` namespaces only the kubelet's own labels.
pub fn node_may_set_label(key: &str) -> bool {
    let namespace = label_namespace(key);
    if in_namespace(namespace, "node-restriction.kubernetes.io") {
        return false;
    }
    let kubernetes = in_namespace(namespace, "kubernetes.io") || in_namespace(namespace, "k8s.io");
    !kubernetes
        || KUBELET_LABELS.contains(&key)
        || KUBELET_LABEL_NAMESPACES
            .iter()
            .any(|allowed| in_namespace(namespace, allowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        assert!(dns1123_label("my-name").is_empty());
        assert!(dns1123_label("123-abc").is_empty());
        assert_eq!(dns1123_label("a.b"), vec!["must not contain dots"]);
        assert_eq!(dns1123_label("Web_1").len(), 1);
        assert_eq!(dns1123_label(&"a".repeat(64)).len(), 1);
        assert_eq!(dns1123_label(&"A".repeat(64)).len(), 2);
        assert!(dns1123_subdomain("example.com").is_empty());
        assert_eq!(dns1123_subdomain("example..com").len(), 1);
        assert!(dns1035_label("abc-123").is_empty());
        assert_eq!(dns1035_label("1abc").len(), 1);
        assert!(wildcard_dns1123_subdomain("*.example.com").is_empty());
        assert_eq!(wildcard_dns1123_subdomain("*.*.example.com").len(), 1);
    }

    #[test]
    fn qualified_names_and_label_values() {
        assert!(qualified_name("app").is_empty());
        assert!(qualified_name("example.com/My_Name.1").is_empty());
        assert_eq!(qualified_name("/a"), vec!["prefix part must be non-empty"]);
        assert_eq!(qualified_name("a/"), vec!["name part must be non-empty"]);
        assert_eq!(qualified_name("a/b/c").len(), 1);
        assert!(qualified_name("a/b/c")[0].starts_with("a qualified name must consist"));
        assert!(qualified_name("Example.com/a")[0].starts_with("prefix part a lowercase RFC 1123"));
        assert_eq!(
            qualified_name(&"a".repeat(64)),
            vec!["name part must be no more than 63 characters"]
        );
        assert!(label_value("").is_empty());
        assert!(label_value("my_value").is_empty());
        assert_eq!(label_value("-x").len(), 1);
    }

    #[test]
    fn port_names_are_iana_service_names() {
        assert!(port_name("http").is_empty());
        assert!(port_name("h2c-1").is_empty());
        assert_eq!(
            port_name("Web_1"),
            vec!["must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"]
        );
        assert_eq!(
            port_name("123"),
            vec!["must contain at least one letter (a-z)"]
        );
        assert_eq!(
            port_name("a--b"),
            vec!["must not contain consecutive hyphens"]
        );
        assert_eq!(
            port_name("-ab"),
            vec!["must not begin or end with a hyphen"]
        );
        assert_eq!(port_name(&"é".repeat(150)).len(), 3);
        assert_eq!(port_name("").len(), 2);
    }

    #[test]
    fn addresses() {
        assert!(ip("10.0.0.1").is_empty());
        assert!(ip("010.000.000.001").is_empty());
        assert!(ip("2001:db8::1").is_empty());
        assert_eq!(ip("10.0.0.1; rm -rf /").len(), 1);
        assert_eq!(ip("fe80::1%eth0").len(), 1);
        assert!(cidr("10.0.0.0/8").is_empty());
        assert!(cidr("2001:db8::/64").is_empty());
        assert_eq!(cidr("10.0.0.0/33").len(), 1);
        assert_eq!(cidr("10.0.0.0").len(), 1);
    }

    #[test]
    fn other_formats() {
        assert!(env_var_name("MY_VAR.1-x").is_empty());
        assert!(env_var_name("1abc").is_empty());
        assert_eq!(env_var_name("A=B").len(), 1);
        assert_eq!(env_var_name("").len(), 1);
        assert!(config_map_key("key.name").is_empty());
        assert_eq!(config_map_key("..a"), vec!["must not start with '..'"]);
        assert_eq!(config_map_key("a/b").len(), 1);
        assert!(c_identifier("_a1").is_empty());
        assert_eq!(c_identifier("1a").len(), 1);
        assert!(percent("25%").is_empty());
        assert_eq!(percent("%").len(), 1);
    }

    #[test]
    fn nodes_set_only_the_kubelet_labels_of_the_kubernetes_namespaces() {
        for key in [
            "kubernetes.io/hostname",
            "topology.kubernetes.io/zone",
            "node.kubernetes.io/instance-type",
            "node.kubernetes.io/anything",
            "kubelet.kubernetes.io/anything",
            "sub.node.kubernetes.io/x",
            "disk",
            "example.com/disk",
            "k3s.io/hostname",
            "notkubernetes.io/x",
        ] {
            assert!(node_may_set_label(key), "{key}");
        }
        for key in [
            "node-restriction.kubernetes.io/pool",
            "a.node-restriction.kubernetes.io/pool",
            "node-role.kubernetes.io/control-plane",
            "kubernetes.io/other",
            "k8s.io/x",
            "x.k8s.io/y",
            "topology.kubernetes.io/rack",
        ] {
            assert!(!node_may_set_label(key), "{key}");
        }
    }
}
