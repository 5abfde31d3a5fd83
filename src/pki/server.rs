//! The server's TLS directory (`<data-dir>/server/tls/`): both CAs, the API server's serving
//! certificate and the component client certificates, created once and reused.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rcgen::{KeyPair, PublicKeyData};

use super::files::{self, PRIVATE_MODE, PUBLIC_MODE};
use super::inspect;
use super::{CertificateAuthority, IssuedCert, PkiError, ServingSans};

/// Leaf certificates expiring within this many seconds are re-issued (k3s: 90 days).
use super::rotation::RENEW_BEFORE_SECS;

/// File stem of the server CA (`server-ca.crt`/`.key`).
pub const SERVER_CA: &str = "server-ca";
/// File stem of the client CA (`client-ca.crt`/`.key`).
pub const CLIENT_CA: &str = "client-ca";
/// File stem of the API server's serving certificate.
pub const SERVING_APISERVER: &str = "serving-kube-apiserver";
/// Common name of the API server's serving certificate.
const SERVING_CN: &str = "kube-apiserver";
/// File stem of the admin client certificate.
pub const CLIENT_ADMIN: &str = "client-admin";
/// File stem of the local kubelet's client certificate.
pub const CLIENT_KUBELET: &str = "client-kubelet";

/// A client identity with a fixed certificate file in the TLS directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIdentity {
    /// File stem: `<stem>.crt` / `<stem>.key`.
    pub file_stem: &'static str,
    /// The user name (subject CN).
    pub common_name: &'static str,
    /// The groups (subject O).
    pub groups: &'static [&'static str],
}

/// The admin and the in-process components, with k3s's file names.
pub const COMPONENT_CLIENTS: &[ClientIdentity] = &[
    ClientIdentity {
        file_stem: CLIENT_ADMIN,
        common_name: "system:admin",
        groups: &["system:masters"],
    },
    ClientIdentity {
        file_stem: "client-controller",
        common_name: "system:kube-controller-manager",
        groups: &[],
    },
    ClientIdentity {
        file_stem: "client-scheduler",
        common_name: "system:kube-scheduler",
        groups: &[],
    },
    ClientIdentity {
        file_stem: "client-kube-proxy",
        common_name: "system:kube-proxy",
        groups: &[],
    },
    ClientIdentity {
        file_stem: "client-supervisor",
        common_name: "system:k3rs-supervisor",
        groups: &["system:masters"],
    },
    // The API server's identity towards kubelets (logs, exec, port-forward), as k3s's
    // `client-kube-apiserver`.
    ClientIdentity {
        file_stem: "client-kube-apiserver",
        common_name: "system:apiserver",
        groups: &["system:masters"],
    },
];

/// File stem of a kubelet's serving certificate (`serving-kubelet.crt`/`.key`, k3s's name).
pub const KUBELET_SERVING: &str = "serving-kubelet";

/// The names a kubelet's serving certificate covers: the node name, `localhost`, every node
/// IP, `127.0.0.1` and `::1`.
pub fn kubelet_serving_sans(node_name: &str, node_ips: &[IpAddr]) -> ServingSans {
    let mut sans = ServingSans::new();
    sans.add(node_name);
    sans.add("localhost");
    sans.add_ip(IpAddr::V4(Ipv4Addr::LOCALHOST));
    sans.add_ip(IpAddr::V6(Ipv6Addr::LOCALHOST));
    for ip in node_ips {
        sans.add_ip(*ip);
    }
    sans
}

/// The user and group of the kubelet on `node_name`, as the Node authorizer expects them.
pub fn kubelet_identity(node_name: &str) -> (String, &'static [&'static str]) {
    (format!("system:node:{node_name}"), &["system:nodes"])
}

/// What the serving and kubelet certificates must contain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerPkiOptions {
    /// Names and addresses the serving certificate must cover.
    pub sans: ServingSans,
    /// Issue `client-kubelet` and `serving-kubelet` for this node (`None` with
    /// `--disable-agent`).
    pub kubelet_node: Option<String>,
    /// The addresses `serving-kubelet` must cover besides the loopback ones.
    pub kubelet_ips: Vec<std::net::IpAddr>,
    /// Issue the raft peer certificate (`etcd/peer-server-client`) for these names (a
    /// clustered server); the peer CA is created either way.
    pub peer: Option<(String, ServingSans)>,
}

/// Stem of the raft peer CA (k3s: `server/tls/etcd/peer-ca.crt`).
pub const PEER_CA: &str = "etcd/peer-ca";
/// Stem of this server's raft peer certificate, for serving and as a client.
pub const PEER_CERT: &str = "etcd/peer-server-client";

/// The server's certificate material, loaded or created by [`ServerPki::ensure`].
#[derive(Debug)]
pub struct ServerPki {
    tls_dir: PathBuf,
    server_ca: CertificateAuthority,
    client_ca: CertificateAuthority,
    serving: IssuedCert,
    admin: IssuedCert,
    clients: BTreeMap<String, IssuedCert>,
    peer_ca: CertificateAuthority,
    peer: Option<IssuedCert>,
}

impl ServerPki {
    /// Loads the TLS directory, creating what is missing: the CAs once (never replaced), the
    /// serving certificate when absent, not signed by the server CA, expiring within 90 days
    /// or not covering `options.sans`, and each client certificate under the same rules
    /// (its CN and groups must match).
    pub fn ensure(tls_dir: &Path, options: &ServerPkiOptions) -> Result<Self, PkiError> {
        files::create_private_dir(tls_dir)?;
        let (server_ca, created) =
            CertificateAuthority::load_or_generate(tls_dir, SERVER_CA, "k3rs-server-ca")?;
        log_ca(tls_dir, SERVER_CA, created);
        let (client_ca, created) =
            CertificateAuthority::load_or_generate(tls_dir, CLIENT_CA, "k3rs-client-ca")?;
        log_ca(tls_dir, CLIENT_CA, created);
        files::create_private_dir(&tls_dir.join("etcd"))?;
        let (peer_ca, created) =
            CertificateAuthority::load_or_generate(tls_dir, PEER_CA, "k3rs-peer-ca")?;
        log_ca(tls_dir, PEER_CA, created);

        let now = unix_now();
        let peer = match &options.peer {
            None => None,
            Some((name, sans)) => Some(ensure_leaf(
                tls_dir,
                PEER_CERT,
                &peer_ca,
                now,
                &|info| sans_problem(info, sans),
                &|| peer_ca.issue_peer_cert(name, sans),
            )?),
        };
        let serving = ensure_leaf(
            tls_dir,
            SERVING_APISERVER,
            &server_ca,
            now,
            &|info| {
                let present = ServingSans::from_parts(&info.dns_names, &info.ips);
                let missing = options.sans.missing_from(&present);
                if missing.is_empty() {
                    None
                } else {
                    Some(format!("SANs do not cover {}", missing.join(",")))
                }
            },
            &|| server_ca.issue_serving_cert(SERVING_CN, &options.sans),
        )?;

        let mut wanted: Vec<(String, String, Vec<&str>)> = COMPONENT_CLIENTS
            .iter()
            .map(|c| {
                (
                    c.file_stem.to_string(),
                    c.common_name.to_string(),
                    c.groups.to_vec(),
                )
            })
            .collect();
        if let Some(node) = &options.kubelet_node {
            let (cn, groups) = kubelet_identity(node);
            wanted.push((CLIENT_KUBELET.to_string(), cn, groups.to_vec()));
        }
        let mut clients = BTreeMap::new();
        for (stem, cn, groups) in wanted {
            let cert = ensure_leaf(
                tls_dir,
                &stem,
                &client_ca,
                now,
                &|info| identity_mismatch(info, &cn, &groups),
                &|| client_ca.issue_client_cert(&cn, &groups),
            )?;
            clients.insert(stem, cert);
        }
        if let Some(node) = &options.kubelet_node {
            let sans = kubelet_serving_sans(node, &options.kubelet_ips);
            let (cn, _) = kubelet_identity(node);
            let cert = ensure_leaf(
                tls_dir,
                KUBELET_SERVING,
                &server_ca,
                now,
                &|info| sans_problem(info, &sans),
                &|| server_ca.issue_serving_cert(&cn, &sans),
            )?;
            clients.insert(KUBELET_SERVING.to_string(), cert);
        }
        let admin = clients
            .get(CLIENT_ADMIN)
            .cloned()
            .ok_or_else(|| PkiError::Invalid {
                path: tls_dir.join(format!("{CLIENT_ADMIN}.crt")),
                reason: "admin certificate missing from the component list".to_string(),
            })?;
        Ok(Self {
            tls_dir: tls_dir.to_path_buf(),
            server_ca,
            client_ca,
            serving,
            admin,
            clients,
            peer_ca,
            peer,
        })
    }

    /// The raft peer CA.
    pub fn peer_ca(&self) -> &CertificateAuthority {
        &self.peer_ca
    }

    /// This server's raft peer certificate, if it was asked for.
    pub fn peer(&self) -> Option<&IssuedCert> {
        self.peer.as_ref()
    }

    /// The TLS directory.
    pub fn tls_dir(&self) -> &Path {
        &self.tls_dir
    }

    /// The CA that signs serving certificates (clients pin it; the join token hashes it).
    pub fn server_ca(&self) -> &CertificateAuthority {
        &self.server_ca
    }

    /// The CA that signs client certificates (the API server trusts it for x509 authn).
    pub fn client_ca(&self) -> &CertificateAuthority {
        &self.client_ca
    }

    /// Path of `server-ca.crt`.
    pub fn server_ca_cert_path(&self) -> PathBuf {
        self.tls_dir.join(format!("{SERVER_CA}.crt"))
    }

    /// Path of a certificate in the TLS directory by file stem, e.g. `client-admin`.
    pub fn cert_path(&self, stem: &str) -> PathBuf {
        self.tls_dir.join(format!("{stem}.crt"))
    }

    /// Path of a private key in the TLS directory by file stem.
    pub fn key_path(&self, stem: &str) -> PathBuf {
        self.tls_dir.join(format!("{stem}.key"))
    }

    /// The API server's serving certificate.
    pub fn serving(&self) -> &IssuedCert {
        &self.serving
    }

    /// The admin client certificate (`system:admin`, `system:masters`).
    pub fn admin(&self) -> &IssuedCert {
        &self.admin
    }

    /// A component's client certificate by file stem (see [`COMPONENT_CLIENTS`], plus
    /// `client-kubelet` and the embedded kubelet's `serving-kubelet` unless the agent is
    /// disabled).
    pub fn client(&self, file_stem: &str) -> Option<&IssuedCert> {
        self.clients.get(file_stem)
    }

    /// Issues a further client certificate from the client CA (not written to disk), e.g. for
    /// an agent joining the cluster.
    pub fn issue_client_cert(
        &self,
        common_name: &str,
        groups: &[&str],
    ) -> Result<IssuedCert, PkiError> {
        self.client_ca.issue_client_cert(common_name, groups)
    }
}

fn log_ca(dir: &Path, stem: &str, created: bool) {
    let path = dir.join(format!("{stem}.crt"));
    if created {
        tracing::info!(path = %path.display(), "generated certificate authority");
    } else {
        tracing::debug!(path = %path.display(), "loaded certificate authority");
    }
}

pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn identity_mismatch(info: &inspect::CertInfo, cn: &str, groups: &[&str]) -> Option<String> {
    let mut have: Vec<&str> = info.organizations.iter().map(String::as_str).collect();
    let mut want = groups.to_vec();
    have.sort_unstable();
    want.sort_unstable();
    if info.common_name.as_deref() != Some(cn) || have != want {
        Some(format!(
            "subject is {:?} in {:?}, want {cn:?} in {want:?}",
            info.common_name.as_deref().unwrap_or(""),
            have
        ))
    } else {
        None
    }
}

/// Why the leaf at `<stem>.crt`/`.key` cannot be reused, or `None` if it can.
pub(crate) fn leaf_problem(
    cert_pem: &str,
    key_pem: &str,
    ca_der: &[u8],
    now: i64,
    check: &dyn Fn(&inspect::CertInfo) -> Option<String>,
) -> Option<String> {
    let der = match inspect::pem_to_der(cert_pem) {
        Ok(der) => der,
        Err(e) => return Some(e),
    };
    let info = match inspect::inspect(&der) {
        Ok(info) => info,
        Err(e) => return Some(e),
    };
    match KeyPair::from_pem(key_pem) {
        Ok(key) if key.subject_public_key_info() == info.spki => {}
        Ok(_) => return Some("the private key does not match the certificate".to_string()),
        Err(e) => return Some(format!("unreadable private key: {e}")),
    }
    if !inspect::signed_by(&der, ca_der) {
        return Some("not signed by the current CA".to_string());
    }
    if info.not_after - now < RENEW_BEFORE_SECS {
        return Some("expires within 90 days".to_string());
    }
    check(&info)
}

/// Reuses `<dir>/<stem>.crt`/`.key` when sound, else issues and writes a new pair.
/// Why a certificate no longer serves `sans` (the names it must cover), if it does not.
fn sans_problem(info: &inspect::CertInfo, sans: &ServingSans) -> Option<String> {
    let present = ServingSans::from_parts(&info.dns_names, &info.ips);
    let missing = sans.missing_from(&present);
    (!missing.is_empty()).then(|| format!("SANs do not cover {}", missing.join(",")))
}

fn ensure_leaf(
    dir: &Path,
    stem: &str,
    ca: &CertificateAuthority,
    now: i64,
    check: &dyn Fn(&inspect::CertInfo) -> Option<String>,
    issue: &dyn Fn() -> Result<IssuedCert, PkiError>,
) -> Result<IssuedCert, PkiError> {
    let cert_path = dir.join(format!("{stem}.crt"));
    let key_path = dir.join(format!("{stem}.key"));
    let reason = match (
        files::read_optional(&cert_path)?,
        files::read_optional(&key_path)?,
    ) {
        (Some(cert_pem), Some(key_pem)) => {
            match leaf_problem(&cert_pem, &key_pem, ca.cert_der(), now, check) {
                None => {
                    tracing::debug!(path = %cert_path.display(), "reusing certificate");
                    return Ok(IssuedCert { cert_pem, key_pem });
                }
                Some(reason) => Some(reason),
            }
        }
        (None, None) => None,
        _ => Some("certificate or key missing".to_string()),
    };
    let issued = issue()?;
    files::write_atomic(&key_path, issued.key_pem.as_bytes(), PRIVATE_MODE)?;
    files::write_atomic(&cert_path, issued.cert_pem.as_bytes(), PUBLIC_MODE)?;
    match reason {
        Some(reason) => {
            tracing::info!(path = %cert_path.display(), %reason, "re-issued certificate");
        }
        None => tracing::info!(path = %cert_path.display(), "generated certificate"),
    }
    Ok(issued)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;
    use std::os::unix::fs::PermissionsExt;

    fn options(extra: &[&str]) -> ServerPkiOptions {
        let tls_sans: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        ServerPkiOptions {
            sans: ServingSans::for_apiserver(
                &["node-a"],
                &["192.168.1.10".parse().expect("ip")],
                "cluster.local",
                "10.43.0.1".parse().expect("ip"),
                &tls_sans,
            ),
            kubelet_node: Some("node-a".to_string()),
            kubelet_ips: Vec::new(),
            peer: None,
        }
    }

    fn read(path: PathBuf) -> String {
        std::fs::read_to_string(path).expect("read")
    }

    fn info(pem: &str) -> inspect::CertInfo {
        inspect::inspect(&inspect::pem_to_der(pem).expect("pem")).expect("x509")
    }

    #[test]
    fn generates_then_reuses_everything() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tls = dir.path().join("server").join("tls");
        let first = ServerPki::ensure(&tls, &options(&[])).expect("generate");
        let ca_file = read(first.server_ca_cert_path());
        assert_eq!(ca_file, first.server_ca().cert_pem());

        let second = ServerPki::ensure(&tls, &options(&[])).expect("reload");
        assert_eq!(second.server_ca().cert_pem(), first.server_ca().cert_pem());
        assert_eq!(second.server_ca().key_pem(), first.server_ca().key_pem());
        assert_eq!(second.client_ca().cert_pem(), first.client_ca().cert_pem());
        assert_eq!(second.serving(), first.serving(), "serving cert reused");
        assert_eq!(second.admin(), first.admin(), "admin cert reused");
        assert_eq!(
            read(second.server_ca_cert_path()),
            ca_file,
            "CA file untouched"
        );

        // A reloaded CA issues certificates that chain to it like the original's.
        let extra = second
            .issue_client_cert("system:node:node-b", &["system:nodes"])
            .expect("issue");
        assert!(first.client_ca().issued(&extra.cert_pem));
        assert!(!first.server_ca().issued(&extra.cert_pem));
    }

    #[test]
    fn ca_names_validity_and_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = ServerPki::ensure(dir.path(), &options(&[])).expect("generate");
        for (ca, prefix) in [
            (pki.server_ca(), "k3rs-server-ca@"),
            (pki.client_ca(), "k3rs-client-ca@"),
        ] {
            let i = info(ca.cert_pem());
            assert!(i.is_ca);
            let cn = i.common_name.expect("cn");
            let ts: i64 = cn
                .strip_prefix(prefix)
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("CN {cn:?}"));
            let years = (i.not_after - ts) as f64 / (365.0 * 24.0 * 3600.0);
            assert!((9.9..10.1).contains(&years), "{years}");
        }
        let serving = info(&pki.serving().cert_pem);
        let days = (serving.not_after - unix_now()) / (24 * 3600);
        assert!((363..=365).contains(&days), "{days}");

        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("readdir")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for stem in [
            "server-ca",
            "client-ca",
            "serving-kube-apiserver",
            "client-admin",
            "client-controller",
            "client-scheduler",
            "client-kube-proxy",
            "client-supervisor",
            "client-kube-apiserver",
            "client-kubelet",
            "serving-kubelet",
        ] {
            for ext in ["crt", "key"] {
                let name = format!("{stem}.{ext}");
                assert!(names.contains(&name), "{name} missing from {names:?}");
                let mode = std::fs::metadata(dir.path().join(&name))
                    .expect("metadata")
                    .permissions()
                    .mode()
                    & 0o777;
                let want = if ext == "key" { 0o600 } else { 0o644 };
                assert_eq!(mode, want, "{name}");
            }
        }
        // The 22 files above and `etcd/`, which holds the raft peer CA.
        assert_eq!(names.len(), 23, "{names:?}");
        let mut peer: Vec<String> = std::fs::read_dir(dir.path().join("etcd"))
            .expect("etcd dir")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        peer.sort();
        assert_eq!(peer, ["peer-ca.crt", "peer-ca.key"]);
    }

    #[test]
    fn a_clustered_server_gets_a_peer_certificate_of_the_peer_ca() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut sans = ServingSans::new();
        sans.add("10.0.0.2");
        sans.add("node-a");
        let mut opts = options(&[]);
        opts.peer = Some(("node-a".to_string(), sans.clone()));
        let pki = ServerPki::ensure(dir.path(), &opts).expect("generate");
        let peer = pki.peer().expect("peer certificate");
        assert!(pki.peer_ca().issued(&peer.cert_pem));
        assert!(!pki.server_ca().issued(&peer.cert_pem));
        let i = info(&peer.cert_pem);
        assert!(i.ips.contains(&"10.0.0.2".parse().expect("ip")));
        // Reused on the next start; re-issued when the address changes.
        let again = ServerPki::ensure(dir.path(), &opts).expect("again");
        assert_eq!(again.peer(), Some(peer));
        sans.add("10.0.0.3");
        opts.peer = Some(("node-a".to_string(), sans));
        let moved = ServerPki::ensure(dir.path(), &opts).expect("moved");
        assert_ne!(moved.peer(), Some(peer));
        assert_eq!(moved.peer_ca().cert_pem(), pki.peer_ca().cert_pem());
    }

    #[test]
    fn serving_cert_covers_all_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = ServerPki::ensure(dir.path(), &options(&["api.example.com", "203.0.113.7"]))
            .expect("generate");
        let i = info(&pki.serving().cert_pem);
        assert_eq!(i.common_name.as_deref(), Some("kube-apiserver"));
        for dns in [
            "node-a",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "api.example.com",
        ] {
            assert!(
                i.dns_names.iter().any(|d| d == dns),
                "{dns} in {:?}",
                i.dns_names
            );
        }
        for ip in [
            "127.0.0.1",
            "::1",
            "10.43.0.1",
            "192.168.1.10",
            "203.0.113.7",
        ] {
            let ip: IpAddr = ip.parse().expect("ip");
            assert!(i.ips.contains(&ip), "{ip} in {:?}", i.ips);
        }
        assert!(
            !i.dns_names.iter().any(|d| d == "203.0.113.7"),
            "IPs are IP SANs"
        );
        assert!(pki.server_ca().issued(&pki.serving().cert_pem));
    }

    #[test]
    fn new_san_reissues_serving_cert_but_keeps_cas() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = ServerPki::ensure(dir.path(), &options(&[])).expect("generate");
        let second =
            ServerPki::ensure(dir.path(), &options(&["new.example.com"])).expect("reissue");
        assert_eq!(second.server_ca().cert_pem(), first.server_ca().cert_pem());
        assert_eq!(second.client_ca().cert_pem(), first.client_ca().cert_pem());
        assert_ne!(second.serving(), first.serving());
        assert!(
            info(&second.serving().cert_pem)
                .dns_names
                .contains(&"new.example.com".to_string())
        );
        assert_eq!(second.admin(), first.admin(), "client certs untouched");
        // Dropping the extra SAN again needs no new certificate: it still covers everything.
        let third = ServerPki::ensure(dir.path(), &options(&[])).expect("reuse");
        assert_eq!(third.serving(), second.serving());
    }

    #[test]
    fn client_identities() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = ServerPki::ensure(dir.path(), &options(&[])).expect("generate");
        let admin = info(&pki.admin().cert_pem);
        assert_eq!(admin.common_name.as_deref(), Some("system:admin"));
        assert_eq!(admin.organizations, ["system:masters"]);
        for c in COMPONENT_CLIENTS {
            let cert = pki.client(c.file_stem).expect("issued");
            let i = info(&cert.cert_pem);
            assert_eq!(i.common_name.as_deref(), Some(c.common_name));
            assert_eq!(i.organizations, c.groups);
            assert!(pki.client_ca().issued(&cert.cert_pem), "{}", c.file_stem);
        }
        let sup = info(&pki.client("client-supervisor").expect("issued").cert_pem);
        assert_eq!(sup.common_name.as_deref(), Some("system:k3rs-supervisor"));
        let kubelet = info(&pki.client(CLIENT_KUBELET).expect("issued").cert_pem);
        assert_eq!(kubelet.common_name.as_deref(), Some("system:node:node-a"));
        assert_eq!(kubelet.organizations, ["system:nodes"]);

        // A different node name re-issues the kubelet certificate.
        let mut opts = options(&[]);
        opts.kubelet_node = Some("node-b".to_string());
        let again = ServerPki::ensure(dir.path(), &opts).expect("reissue");
        let kubelet = info(&again.client(CLIENT_KUBELET).expect("issued").cert_pem);
        assert_eq!(kubelet.common_name.as_deref(), Some("system:node:node-b"));

        let two = pki
            .issue_client_cert("jane", &["devs", "ops"])
            .expect("two groups");
        assert_eq!(info(&two.cert_pem).organizations, ["devs", "ops"]);
        assert!(matches!(
            pki.issue_client_cert("x", &["a", "b", "c"]),
            Err(PkiError::TooManyGroups(3))
        ));
    }

    #[test]
    fn disabled_agent_has_no_kubelet_cert() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut opts = options(&[]);
        opts.kubelet_node = None;
        let pki = ServerPki::ensure(dir.path(), &opts).expect("generate");
        assert!(pki.client(CLIENT_KUBELET).is_none());
        assert!(!dir.path().join("client-kubelet.crt").exists());
    }

    #[test]
    fn broken_leaves_are_reissued() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = ServerPki::ensure(dir.path(), &options(&[])).expect("generate");
        // Swap the admin key for another one: mismatch, so it is re-issued.
        std::fs::write(
            dir.path().join("client-admin.key"),
            &first.client("client-controller").expect("issued").key_pem,
        )
        .expect("write");
        std::fs::remove_file(dir.path().join("client-scheduler.key")).expect("rm");
        let second = ServerPki::ensure(dir.path(), &options(&[])).expect("repair");
        assert_ne!(second.admin(), first.admin());
        assert_ne!(
            second.client("client-scheduler"),
            first.client("client-scheduler")
        );
        assert_eq!(
            second.client("client-kube-proxy"),
            first.client("client-kube-proxy")
        );
    }

    #[test]
    fn expiring_or_foreign_leaves_are_not_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = ServerPki::ensure(dir.path(), &options(&[])).expect("generate");
        let serving = pki.serving();
        let ok = |_: &inspect::CertInfo| None;
        let now = unix_now();
        assert_eq!(
            leaf_problem(
                &serving.cert_pem,
                &serving.key_pem,
                pki.server_ca().cert_der(),
                now,
                &ok
            ),
            None
        );
        let later = now + 300 * 24 * 3600;
        assert_eq!(
            leaf_problem(
                &serving.cert_pem,
                &serving.key_pem,
                pki.server_ca().cert_der(),
                later,
                &ok
            )
            .as_deref(),
            Some("expires within 90 days")
        );
        assert_eq!(
            leaf_problem(
                &serving.cert_pem,
                &serving.key_pem,
                pki.client_ca().cert_der(),
                now,
                &ok
            )
            .as_deref(),
            Some("not signed by the current CA")
        );
    }

    #[test]
    fn half_a_ca_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        ServerPki::ensure(dir.path(), &options(&[])).expect("generate");
        std::fs::remove_file(dir.path().join("server-ca.key")).expect("rm");
        let e = ServerPki::ensure(dir.path(), &options(&[])).expect_err("incomplete");
        assert!(matches!(e, PkiError::IncompleteCa { .. }), "{e}");
        assert!(e.to_string().contains("server-ca.key is missing"), "{e}");

        std::fs::write(dir.path().join("server-ca.key"), "garbage").expect("write");
        let e = ServerPki::ensure(dir.path(), &options(&[])).expect_err("bad key");
        assert!(e.to_string().contains("server-ca.crt"), "{e}");
    }
}
