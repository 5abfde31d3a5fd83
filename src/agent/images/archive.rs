//! Reading image tarballs: OCI image layout (`oci-layout`, `index.json`, `blobs/<alg>/<hex>`) and
//! docker-archive (`manifest.json` with `Config`, `RepoTags`, `Layers`, as `docker save` writes).
//!
//! Produces, per named image, the blobs to write into containerd's content store (with the GC
//! labels containerd's own importer sets) and the layers to unpack for this machine's platform.
//! Only reads the archive; talking to containerd is [`super::import`]'s job.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, SeekFrom};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::reference;
use super::tar::{Entry, TarError, TarIndex};

pub const MEDIA_OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MEDIA_OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const MEDIA_OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const MEDIA_OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
pub const MEDIA_OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const MEDIA_DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const MEDIA_DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const MEDIA_DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub const MEDIA_DOCKER_LAYER: &str = "application/vnd.docker.image.rootfs.diff.tar";
pub const MEDIA_DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

pub const ANNOTATION_CONTAINERD_NAME: &str = "io.containerd.image.name";
pub const ANNOTATION_OCI_REF_NAME: &str = "org.opencontainers.image.ref.name";

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error(transparent)]
    Tar(#[from] TarError),
    #[error("reading the archive: {0}")]
    Io(#[from] std::io::Error),
    #[error("neither index.json (OCI layout) nor manifest.json (docker-archive) in the archive")]
    UnknownFormat,
    #[error("{file} is not valid JSON for {what}: {source}")]
    Json {
        file: String,
        what: &'static str,
        source: serde_json::Error,
    },
    #[error("blob {0} is referenced but missing from the archive")]
    MissingBlob(String),
    #[error("{0}")]
    Invalid(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    pub architecture: String,
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Index {
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    config: Descriptor,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

#[derive(Debug, Deserialize)]
struct ImageConfig {
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    os: String,
    #[serde(default)]
    rootfs: Option<RootFs>,
}

#[derive(Debug, Deserialize)]
struct RootFs {
    #[serde(default)]
    diff_ids: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerManifestEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    #[serde(default)]
    layers: Vec<String>,
}

/// A blob to write, with the labels it must carry.
#[derive(Debug, Clone)]
pub struct PlannedBlob {
    pub desc: Descriptor,
    pub labels: BTreeMap<String, String>,
}

/// What to unpack into the snapshotter for this platform.
#[derive(Debug, Clone)]
pub struct UnpackPlan {
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
    pub diff_ids: Vec<String>,
}

/// One named image of an archive.
#[derive(Debug, Clone)]
pub struct ImagePlan {
    pub name: String,
    pub target: Descriptor,
    /// Children before parents, so a parent's GC labels never point at a missing blob.
    pub blobs: Vec<PlannedBlob>,
    pub unpack: Option<UnpackPlan>,
}

/// The platform images are unpacked for: this machine's.
pub fn host_platform() -> Platform {
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    Platform {
        architecture: architecture.to_string(),
        os: "linux".to_string(),
        variant: None,
    }
}

fn platform_matches(p: &Platform, host: &Platform) -> bool {
    p.os == host.os && p.architecture == host.architecture
}

pub trait Source: Read + Seek + Send {}
impl<T: Read + Seek + Send> Source for T {}

enum Location {
    Tar(Entry),
    Inline(Vec<u8>),
}

/// An opened archive: its file index and the blobs by digest.
pub struct ImageArchive {
    source: Box<dyn Source>,
    blobs: HashMap<String, Location>,
    images: Vec<ImagePlan>,
}

fn sha256_digest(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// `containerd`'s chain IDs: chain[0] = diff[0]; chain[i] = sha256(chain[i-1] + " " + diff[i]).
pub fn chain_ids(diff_ids: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(diff_ids.len());
    for d in diff_ids {
        let next = match out.last() {
            None => d.clone(),
            Some(prev) => sha256_digest(format!("{prev} {d}").as_bytes()),
        };
        out.push(next);
    }
    out
}

fn parse_json<T: for<'de> Deserialize<'de>>(
    data: &[u8],
    file: &str,
    what: &'static str,
) -> Result<T, ArchiveError> {
    serde_json::from_slice(data).map_err(|source| ArchiveError::Json {
        file: file.to_string(),
        what,
        source,
    })
}

impl ImageArchive {
    /// Parses an uncompressed tar (OCI layout or docker-archive).
    pub fn open(mut source: Box<dyn Source>) -> Result<ImageArchive, ArchiveError> {
        let index = TarIndex::scan(&mut source)?;
        let mut archive = ImageArchive {
            source,
            blobs: HashMap::new(),
            images: Vec::new(),
        };
        if let Some(data) = index.read(&mut archive.source, "index.json")? {
            archive.open_oci(&index, &data)?;
        } else if let Some(data) = index.read(&mut archive.source, "manifest.json")? {
            archive.open_docker(&index, &data)?;
        } else {
            return Err(ArchiveError::UnknownFormat);
        }
        Ok(archive)
    }

    pub fn images(&self) -> &[ImagePlan] {
        &self.images
    }

    fn open_oci(&mut self, index: &TarIndex, data: &[u8]) -> Result<(), ArchiveError> {
        for (path, entry) in &index.files {
            if let Some(rest) = path.strip_prefix("blobs/")
                && let Some((algo, hex)) = rest.split_once('/')
                && !hex.contains('/')
            {
                self.blobs
                    .insert(format!("{algo}:{hex}"), Location::Tar(*entry));
            }
        }
        let top: Index = parse_json(data, "index.json", "an OCI image index")?;
        for desc in top.manifests {
            let name = desc
                .annotations
                .get(ANNOTATION_CONTAINERD_NAME)
                .or_else(|| desc.annotations.get(ANNOTATION_OCI_REF_NAME))
                .cloned();
            let Some(name) = name else {
                tracing::warn!(digest = %desc.digest, "image in OCI index has no name annotation; skipped");
                continue;
            };
            // `org.opencontainers.image.ref.name` may be only a tag ("1.0"); without a
            // repository there is nothing to call the image.
            if !name.contains('/')
                && !name.contains(':')
                && !desc.annotations.contains_key(ANNOTATION_CONTAINERD_NAME)
            {
                tracing::warn!(%name, "OCI ref.name is a bare tag, not an image name; skipped");
                continue;
            }
            let name =
                reference::normalise(&name).map_err(|e| ArchiveError::Invalid(e.to_string()))?;
            let mut target = desc.clone();
            target.annotations.clear();
            target.platform = None;
            let plan = self.plan(name, target)?;
            self.images.push(plan);
        }
        Ok(())
    }

    fn open_docker(&mut self, index: &TarIndex, data: &[u8]) -> Result<(), ArchiveError> {
        let entries: Vec<DockerManifestEntry> =
            parse_json(data, "manifest.json", "a docker-archive manifest")?;
        for entry in entries {
            let config = index
                .read(&mut self.source, entry.config.trim_start_matches("./"))?
                .ok_or_else(|| ArchiveError::MissingBlob(entry.config.clone()))?;
            let config_desc = Descriptor {
                media_type: MEDIA_DOCKER_CONFIG.into(),
                digest: sha256_digest(&config),
                size: config.len() as u64,
                annotations: BTreeMap::new(),
                platform: None,
            };
            self.blobs
                .insert(config_desc.digest.clone(), Location::Inline(config));
            let mut layers = Vec::new();
            for layer in &entry.layers {
                let path = layer.trim_start_matches("./");
                let e = *index
                    .files
                    .get(path)
                    .ok_or_else(|| ArchiveError::MissingBlob(layer.clone()))?;
                let (digest, gzip) = self.hash_entry(e)?;
                layers.push(Descriptor {
                    media_type: if gzip {
                        MEDIA_DOCKER_LAYER_GZIP
                    } else {
                        MEDIA_DOCKER_LAYER
                    }
                    .into(),
                    digest: digest.clone(),
                    size: e.size,
                    annotations: BTreeMap::new(),
                    platform: None,
                });
                self.blobs.insert(digest, Location::Tar(e));
            }
            let manifest = serde_json::json!({
                "schemaVersion": 2,
                "mediaType": MEDIA_DOCKER_MANIFEST,
                "config": config_desc,
                "layers": layers,
            });
            let manifest = serde_json::to_vec(&manifest)
                .map_err(|e| ArchiveError::Invalid(format!("encoding manifest: {e}")))?;
            let target = Descriptor {
                media_type: MEDIA_DOCKER_MANIFEST.into(),
                digest: sha256_digest(&manifest),
                size: manifest.len() as u64,
                annotations: BTreeMap::new(),
                platform: None,
            };
            self.blobs
                .insert(target.digest.clone(), Location::Inline(manifest));
            let tags = entry.repo_tags.unwrap_or_default();
            if tags.is_empty() {
                tracing::warn!(config = %entry.config, "docker-archive image has no RepoTags; skipped");
            }
            for tag in tags {
                let name =
                    reference::normalise(&tag).map_err(|e| ArchiveError::Invalid(e.to_string()))?;
                let plan = self.plan(name, target.clone())?;
                self.images.push(plan);
            }
        }
        Ok(())
    }

    fn hash_entry(&mut self, e: Entry) -> Result<(String, bool), ArchiveError> {
        self.source.seek(SeekFrom::Start(e.offset))?;
        let mut reader = (&mut self.source).take(e.size);
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut first = true;
        let mut gzip = false;
        loop {
            let n = reader.read(&mut buf)?;
            if n == 0 {
                break;
            }
            if first {
                gzip = n >= 2 && buf[0] == 0x1f && buf[1] == 0x8b;
                first = false;
            }
            hasher.update(&buf[..n]);
        }
        Ok((format!("sha256:{}", hex::encode(hasher.finalize())), gzip))
    }

    /// Reads a whole (small: JSON) blob.
    pub fn read_blob(&mut self, digest: &str) -> Result<Vec<u8>, ArchiveError> {
        match self.blobs.get(digest) {
            Some(Location::Inline(data)) => Ok(data.clone()),
            Some(Location::Tar(e)) => {
                let e = *e;
                self.source.seek(SeekFrom::Start(e.offset))?;
                let mut data = Vec::with_capacity(e.size as usize);
                (&mut self.source).take(e.size).read_to_end(&mut data)?;
                Ok(data)
            }
            None => Err(ArchiveError::MissingBlob(digest.to_string())),
        }
    }

    /// Reads up to `buf.len()` bytes of a blob from `offset`; 0 at the end.
    pub fn read_blob_at(
        &mut self,
        digest: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, ArchiveError> {
        match self.blobs.get(digest) {
            Some(Location::Inline(data)) => {
                let start = (offset as usize).min(data.len());
                let n = buf.len().min(data.len() - start);
                buf[..n].copy_from_slice(&data[start..start + n]);
                Ok(n)
            }
            Some(Location::Tar(e)) => {
                let e = *e;
                if offset >= e.size {
                    return Ok(0);
                }
                self.source.seek(SeekFrom::Start(e.offset + offset))?;
                let want = (buf.len() as u64).min(e.size - offset) as usize;
                self.source.read_exact(&mut buf[..want])?;
                Ok(want)
            }
            None => Err(ArchiveError::MissingBlob(digest.to_string())),
        }
    }

    fn has_blob(&self, digest: &str) -> bool {
        self.blobs.contains_key(digest)
    }

    /// Walks from `target` down, collecting blobs (children first) and the unpack plan.
    fn plan(&mut self, name: String, target: Descriptor) -> Result<ImagePlan, ArchiveError> {
        let host = host_platform();
        let mut blobs = Vec::new();
        let mut unpack = None;
        self.walk(&target, &host, true, &mut blobs, &mut unpack, 0)?;
        Ok(ImagePlan {
            name,
            target,
            blobs,
            unpack,
        })
    }

    fn walk(
        &mut self,
        desc: &Descriptor,
        host: &Platform,
        wanted: bool,
        blobs: &mut Vec<PlannedBlob>,
        unpack: &mut Option<UnpackPlan>,
        depth: usize,
    ) -> Result<(), ArchiveError> {
        if depth > 4 {
            return Err(ArchiveError::Invalid(
                "image indexes nested too deeply".into(),
            ));
        }
        let mut labels = BTreeMap::new();
        match desc.media_type.as_str() {
            MEDIA_OCI_INDEX | MEDIA_DOCKER_LIST => {
                let data = self.read_blob(&desc.digest)?;
                let index: Index = parse_json(&data, &desc.digest, "an image index")?;
                // Only the host's platform is unpacked; other platforms' manifests are stored
                // when their blobs are in the archive (multi-arch `docker save` output often
                // holds just one platform's layers).
                let mut chosen = false;
                for (i, child) in index.manifests.iter().enumerate() {
                    let matches = child
                        .platform
                        .as_ref()
                        .is_none_or(|p| platform_matches(p, host));
                    let take = wanted && matches && !chosen;
                    if !take && !self.has_blob(&child.digest) {
                        continue;
                    }
                    if !take && !self.children_present(child)? {
                        continue;
                    }
                    chosen |= take;
                    self.walk(child, host, take, blobs, unpack, depth + 1)?;
                    labels.insert(
                        format!("containerd.io/gc.ref.content.m.{i}"),
                        child.digest.clone(),
                    );
                }
                if wanted && !chosen {
                    return Err(ArchiveError::Invalid(format!(
                        "no manifest for platform {}/{} in {}",
                        host.os, host.architecture, desc.digest
                    )));
                }
            }
            MEDIA_OCI_MANIFEST | MEDIA_DOCKER_MANIFEST | "" => {
                let data = self.read_blob(&desc.digest)?;
                let manifest: Manifest = parse_json(&data, &desc.digest, "an image manifest")?;
                let config_data = self.read_blob(&manifest.config.digest)?;
                let config: ImageConfig =
                    parse_json(&config_data, &manifest.config.digest, "an image config")?;
                let diff_ids = config.rootfs.map(|r| r.diff_ids).unwrap_or_default();
                if diff_ids.len() != manifest.layers.len() {
                    return Err(ArchiveError::Invalid(format!(
                        "image config {} lists {} diff_ids for {} layers",
                        manifest.config.digest,
                        diff_ids.len(),
                        manifest.layers.len()
                    )));
                }
                for (layer, diff_id) in manifest.layers.iter().zip(&diff_ids) {
                    if !self.has_blob(&layer.digest) {
                        return Err(ArchiveError::MissingBlob(layer.digest.clone()));
                    }
                    let mut l = BTreeMap::new();
                    l.insert("containerd.io/uncompressed".to_string(), diff_id.clone());
                    blobs.push(PlannedBlob {
                        desc: layer.clone(),
                        labels: l,
                    });
                }
                blobs.push(PlannedBlob {
                    desc: manifest.config.clone(),
                    labels: BTreeMap::new(),
                });
                labels.insert(
                    "containerd.io/gc.ref.content.config".into(),
                    manifest.config.digest.clone(),
                );
                for (i, layer) in manifest.layers.iter().enumerate() {
                    labels.insert(
                        format!("containerd.io/gc.ref.content.l.{i}"),
                        layer.digest.clone(),
                    );
                }
                if wanted {
                    let host_ok = config.os.is_empty()
                        || platform_matches(
                            &Platform {
                                architecture: config.architecture.clone(),
                                os: config.os.clone(),
                                variant: None,
                            },
                            host,
                        );
                    if !host_ok {
                        tracing::warn!(
                            image = %desc.digest,
                            arch = %config.architecture,
                            "image is for another platform; stored but not unpacked"
                        );
                    } else {
                        *unpack = Some(UnpackPlan {
                            config: manifest.config.clone(),
                            layers: manifest.layers.clone(),
                            diff_ids,
                        });
                    }
                }
            }
            other => {
                return Err(ArchiveError::Invalid(format!(
                    "unsupported media type {other:?} for {}",
                    desc.digest
                )));
            }
        }
        blobs.push(PlannedBlob {
            desc: desc.clone(),
            labels,
        });
        Ok(())
    }

    /// Whether a (non-chosen) manifest's config and layers are all in the archive.
    fn children_present(&mut self, desc: &Descriptor) -> Result<bool, ArchiveError> {
        if !matches!(
            desc.media_type.as_str(),
            MEDIA_OCI_MANIFEST | MEDIA_DOCKER_MANIFEST
        ) {
            return Ok(false);
        }
        let data = self.read_blob(&desc.digest)?;
        let Ok(manifest) = serde_json::from_slice::<Manifest>(&data) else {
            return Ok(false);
        };
        Ok(self.has_blob(&manifest.config.digest)
            && manifest.layers.iter().all(|l| self.has_blob(&l.digest)))
    }
}

/// Builds an OCI-layout tarball in memory: one image, single-platform, the given uncompressed
/// layer tars and image config (`config` is the OCI image config JSON object without `rootfs`,
/// which is filled in here). Used for the pause image and the test images.
pub fn build_oci_layout(
    name: &str,
    layers: &[Vec<u8>],
    mut config: serde_json::Value,
) -> Result<Vec<u8>, ArchiveError> {
    let platform = host_platform();
    let diff_ids: Vec<String> = layers.iter().map(|l| sha256_digest(l)).collect();
    if let Some(obj) = config.as_object_mut() {
        obj.entry("architecture")
            .or_insert_with(|| platform.architecture.clone().into());
        obj.entry("os").or_insert_with(|| "linux".into());
        obj.insert(
            "rootfs".into(),
            serde_json::json!({"type": "layers", "diff_ids": diff_ids}),
        );
    } else {
        return Err(ArchiveError::Invalid(
            "image config must be a JSON object".into(),
        ));
    }
    let encode = |v: &serde_json::Value| {
        serde_json::to_vec(v).map_err(|e| ArchiveError::Invalid(format!("encoding JSON: {e}")))
    };
    let config_bytes = encode(&config)?;
    let desc = |media: &str, data: &[u8]| Descriptor {
        media_type: media.into(),
        digest: sha256_digest(data),
        size: data.len() as u64,
        annotations: BTreeMap::new(),
        platform: None,
    };
    let config_desc = desc(MEDIA_OCI_CONFIG, &config_bytes);
    let layer_descs: Vec<Descriptor> = layers.iter().map(|l| desc(MEDIA_OCI_LAYER, l)).collect();
    let manifest = encode(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_OCI_MANIFEST,
        "config": config_desc,
        "layers": layer_descs,
    }))?;
    let mut manifest_desc = desc(MEDIA_OCI_MANIFEST, &manifest);
    manifest_desc
        .annotations
        .insert(ANNOTATION_CONTAINERD_NAME.into(), name.into());
    let tag = name.rsplit_once(':').map(|(_, t)| t).unwrap_or("latest");
    manifest_desc
        .annotations
        .insert(ANNOTATION_OCI_REF_NAME.into(), tag.into());
    manifest_desc.platform = Some(platform);
    let index = encode(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_OCI_INDEX,
        "manifests": [manifest_desc],
    }))?;
    let mut w = super::tar::TarWriter::new();
    w.file("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#, 0o644);
    w.file("index.json", &index, 0o644);
    w.dir("blobs", 0o755);
    w.dir("blobs/sha256", 0o755);
    let blob_path = |d: &Descriptor| format!("blobs/{}", d.digest.replacen(':', "/", 1));
    w.file(
        &blob_path(&desc(MEDIA_OCI_MANIFEST, &manifest)),
        &manifest,
        0o644,
    );
    w.file(&blob_path(&config_desc), &config_bytes, 0o644);
    for (d, l) in layer_descs.iter().zip(layers) {
        w.file(&blob_path(d), l, 0o644);
    }
    Ok(w.finish())
}

#[cfg(test)]
mod tests {
    use super::super::tar::TarWriter;
    use super::*;
    use std::io::Cursor;

    fn layer(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = TarWriter::new();
        for (n, d) in files {
            w.file(n, d, 0o755);
        }
        w.finish()
    }

    #[test]
    fn oci_layout_round_trip() {
        let l1 = layer(&[("bin/a", b"aaa")]);
        let l2 = layer(&[("bin/b", b"bbb")]);
        let tar = build_oci_layout(
            "k3rs.test/thing:2",
            &[l1.clone(), l2.clone()],
            serde_json::json!({"config": {"Entrypoint": ["/bin/a"]}}),
        )
        .unwrap();
        let mut a = ImageArchive::open(Box::new(Cursor::new(tar))).unwrap();
        assert_eq!(a.images().len(), 1);
        let img = a.images()[0].clone();
        assert_eq!(img.name, "k3rs.test/thing:2");
        assert_eq!(img.target.media_type, MEDIA_OCI_MANIFEST);
        // layers, config, manifest: children first
        assert_eq!(img.blobs.len(), 4);
        assert_eq!(img.blobs.last().unwrap().desc, img.target);
        let manifest_labels = &img.blobs.last().unwrap().labels;
        assert_eq!(manifest_labels.len(), 3, "{manifest_labels:?}");
        let unpack = img.unpack.unwrap();
        assert_eq!(unpack.diff_ids[0], sha256_digest(&l1));
        assert_eq!(unpack.layers[1].digest, sha256_digest(&l2));
        assert_eq!(
            img.blobs[0].labels["containerd.io/uncompressed"],
            sha256_digest(&l1)
        );
        let mut buf = [0u8; 7];
        let n = a
            .read_blob_at(&unpack.layers[0].digest, 512, &mut buf)
            .unwrap();
        assert_eq!(&buf[..n], b"aaa\0\0\0\0");
    }

    #[test]
    fn docker_archive() {
        let l1 = layer(&[("etc/hostname", b"x")]);
        let config = br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":["DIFF"]}}"#;
        let config = String::from_utf8_lossy(config).replace("DIFF", &sha256_digest(&l1));
        let mut w = TarWriter::new();
        w.file(
            "manifest.json",
            br#"[{"Config":"abc.json","RepoTags":["busybox:latest","myorg/tool:1"],"Layers":["l1/layer.tar"]}]"#,
            0o644,
        );
        w.file("abc.json", config.as_bytes(), 0o644);
        w.file("l1/layer.tar", &l1, 0o644);
        let mut a = ImageArchive::open(Box::new(Cursor::new(w.finish()))).unwrap();
        let names: Vec<_> = a.images().iter().map(|i| i.name.clone()).collect();
        assert_eq!(
            names,
            ["docker.io/library/busybox:latest", "docker.io/myorg/tool:1"]
        );
        let img = a.images()[0].clone();
        assert_eq!(img.target.media_type, MEDIA_DOCKER_MANIFEST);
        assert_eq!(img.blobs[0].desc.media_type, MEDIA_DOCKER_LAYER);
        assert_eq!(img.blobs[0].desc.digest, sha256_digest(&l1));
        let manifest = a.read_blob(&img.target.digest).unwrap();
        assert_eq!(sha256_digest(&manifest), img.target.digest);
        if host_platform().architecture == "amd64" {
            assert!(img.unpack.is_some());
        }
    }

    #[test]
    fn broken_archives_are_errors() {
        let mut w = TarWriter::new();
        w.file("hello.txt", b"hi", 0o644);
        let err = ImageArchive::open(Box::new(Cursor::new(w.finish())))
            .err()
            .unwrap();
        assert!(matches!(err, ArchiveError::UnknownFormat), "{err}");

        let mut w = TarWriter::new();
        w.file(
            "manifest.json",
            b"[{\"Config\":\"c.json\",\"Layers\":[]}]",
            0o644,
        );
        let err = ImageArchive::open(Box::new(Cursor::new(w.finish())))
            .err()
            .unwrap();
        assert!(err.to_string().contains("c.json"), "{err}");

        let mut w = TarWriter::new();
        w.file("index.json", b"not json", 0o644);
        let err = ImageArchive::open(Box::new(Cursor::new(w.finish())))
            .err()
            .unwrap();
        assert!(err.to_string().contains("index.json"), "{err}");
    }

    #[test]
    fn chain_ids_match_containerd() {
        let d = vec!["sha256:aa".to_string(), "sha256:bb".to_string()];
        let c = chain_ids(&d);
        assert_eq!(c[0], "sha256:aa");
        assert_eq!(c[1], sha256_digest(b"sha256:aa sha256:bb"));
    }
}
