//! Importing an opened [`ImageArchive`] into containerd through its native API (namespace
//! `k8s.io`, where the CRI plugin looks): blobs into the content store, image records, and the
//! unpacked layers in the CRI snapshotter (containerd 1.6 has no transfer service, so this is
//! `snapshots.Prepare` → `diff.Apply` → `snapshots.Commit` per layer, as containerd's Go client
//! does), all under a lease so the garbage collector cannot reap half-imported content.
//!
//! Speaks only containerd's native gRPC services; never CRI, never the Kubernetes API.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use containerd_client::services::v1::snapshots::{
    CommitSnapshotRequest, PrepareSnapshotRequest, RemoveSnapshotRequest, StatSnapshotRequest,
    snapshots_client::SnapshotsClient,
};
use containerd_client::services::v1::{
    ApplyRequest, CreateImageRequest, CreateRequest as CreateLeaseRequest,
    DeleteRequest as DeleteLeaseRequest, Image, InfoRequest, UpdateImageRequest, UpdateRequest,
    WriteAction, WriteContentRequest, content_client::ContentClient, diff_client::DiffClient,
    images_client::ImagesClient, leases_client::LeasesClient,
};
use containerd_client::types::Descriptor as PbDescriptor;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

use super::archive::{ArchiveError, Descriptor, ImageArchive, PlannedBlob, UnpackPlan, chain_ids};

/// The containerd namespace the CRI plugin uses.
pub const NAMESPACE: &str = "k8s.io";
const CHUNK: usize = 1 << 20;
/// A crashed import's lease expires by itself after this long.
const LEASE_EXPIRY: Duration = Duration::from_secs(3600);

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error("containerd {what}: {status}")]
    Grpc { what: String, status: Status },
    #[error("layer {layer} unpacked to {got}, but the image config says {want}")]
    DiffIdMismatch {
        layer: String,
        got: String,
        want: String,
    },
    #[error("containerd closed the content write stream for {0} early")]
    StreamClosed(String),
}

fn grpc(what: impl Into<String>) -> impl FnOnce(Status) -> ImportError {
    let what = what.into();
    move |status| ImportError::Grpc { what, status }
}

fn pb(d: &Descriptor) -> PbDescriptor {
    PbDescriptor {
        media_type: d.media_type.clone(),
        digest: d.digest.clone(),
        size: d.size as i64,
        annotations: HashMap::new(),
    }
}

/// Imports archives into one containerd.
#[derive(Clone)]
pub struct Importer {
    channel: Channel,
    snapshotter: String,
}

/// Extra labels on the image records of one import (the pause image is pinned).
pub type ImageLabels = BTreeMap<String, String>;

impl Importer {
    pub fn new(channel: Channel, snapshotter: impl Into<String>) -> Importer {
        Importer {
            channel,
            snapshotter: snapshotter.into(),
        }
    }

    pub fn snapshotter(&self) -> &str {
        &self.snapshotter
    }

    fn req<T>(&self, msg: T, lease: Option<&str>) -> Request<T> {
        let mut r = Request::new(msg);
        let md = r.metadata_mut();
        md.insert(
            "containerd-namespace",
            tonic::metadata::MetadataValue::from_static(NAMESPACE),
        );
        if let Some(lease) = lease
            && let Ok(v) = lease.parse()
        {
            md.insert("containerd-lease", v);
        }
        r
    }

    /// Whether containerd has an image record called `name` (fully qualified).
    pub async fn image_exists(&self, name: &str) -> Result<bool, ImportError> {
        match ImagesClient::new(self.channel.clone())
            .get(self.req(
                containerd_client::services::v1::GetImageRequest {
                    name: name.to_string(),
                },
                None,
            ))
            .await
        {
            Ok(_) => Ok(true),
            Err(s) if s.code() == Code::NotFound => Ok(false),
            Err(s) => Err(grpc(format!("looking up image {name}"))(s)),
        }
    }

    /// Imports every image of `archive`; returns the image names.
    pub async fn import(
        &self,
        archive: &mut ImageArchive,
        labels: &ImageLabels,
    ) -> Result<Vec<String>, ImportError> {
        let lease = self.create_lease().await?;
        let result = self.import_under(archive, labels, &lease).await;
        let mut leases = LeasesClient::new(self.channel.clone());
        if let Err(status) = leases
            .delete(self.req(
                DeleteLeaseRequest {
                    id: lease.clone(),
                    sync: false,
                },
                None,
            ))
            .await
        {
            tracing::warn!(%lease, %status, "could not delete the import lease; it expires in an hour");
        }
        result
    }

    async fn create_lease(&self) -> Result<String, ImportError> {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let id = format!("k3rs-import-{nanos}");
        let expire = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::try_from(LEASE_EXPIRY).unwrap_or_default())
            .unwrap_or_else(|_| jiff::Timestamp::now());
        let mut labels = HashMap::new();
        labels.insert("containerd.io/gc.expire".to_string(), expire.to_string());
        LeasesClient::new(self.channel.clone())
            .create(self.req(
                CreateLeaseRequest {
                    id: id.clone(),
                    labels,
                },
                None,
            ))
            .await
            .map_err(grpc("creating an import lease"))?;
        Ok(id)
    }

    async fn import_under(
        &self,
        archive: &mut ImageArchive,
        labels: &ImageLabels,
        lease: &str,
    ) -> Result<Vec<String>, ImportError> {
        let plans = archive.images().to_vec();
        let mut names = Vec::new();
        for plan in plans {
            for blob in &plan.blobs {
                self.write_blob(archive, blob, lease).await?;
            }
            if let Some(unpack) = &plan.unpack {
                self.unpack(unpack, lease).await?;
            }
            self.put_image(&plan.name, &plan.target, labels, lease)
                .await?;
            names.push(plan.name.clone());
        }
        Ok(names)
    }

    /// Writes one blob unless containerd has it; makes sure it carries `blob.labels`.
    async fn write_blob(
        &self,
        archive: &mut ImageArchive,
        blob: &PlannedBlob,
        lease: &str,
    ) -> Result<(), ImportError> {
        let digest = &blob.desc.digest;
        let mut content = ContentClient::new(self.channel.clone());
        match content
            .info(self.req(
                InfoRequest {
                    digest: digest.clone(),
                },
                Some(lease),
            ))
            .await
        {
            Ok(info) => {
                let existing = info.into_inner().info.map(|i| i.labels).unwrap_or_default();
                let missing: BTreeMap<String, String> = blob
                    .labels
                    .iter()
                    .filter(|(k, v)| existing.get(*k) != Some(*v))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                return self.label_blob(digest, &missing, lease).await;
            }
            Err(s) if s.code() == Code::NotFound => {}
            Err(s) => return Err(grpc(format!("content info {digest}"))(s)),
        }

        let (tx, rx) = tokio::sync::mpsc::channel::<WriteContentRequest>(2);
        let write_ref = format!("k3rs-import-{digest}");
        let closed = || ImportError::StreamClosed(digest.clone());
        tx.send(WriteContentRequest {
            action: WriteAction::Stat as i32,
            r#ref: write_ref.clone(),
            total: blob.desc.size as i64,
            expected: digest.clone(),
            ..Default::default()
        })
        .await
        .map_err(|_| closed())?;
        let mut responses = content
            .write(self.req(tokio_stream::wrappers::ReceiverStream::new(rx), Some(lease)))
            .await
            .map_err(grpc(format!("content write {digest}")))?
            .into_inner();
        let status = responses
            .message()
            .await
            .map_err(grpc(format!("content write {digest}")))?
            .ok_or_else(closed)?;
        // A previous, interrupted import may have left a partial ingest under this ref.
        let mut offset = u64::try_from(status.offset).unwrap_or(0);
        if offset > blob.desc.size {
            offset = 0;
        }
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = archive.read_blob_at(digest, offset, &mut buf)?;
            if n == 0 {
                break;
            }
            tx.send(WriteContentRequest {
                action: WriteAction::Write as i32,
                r#ref: write_ref.clone(),
                offset: offset as i64,
                data: buf[..n].to_vec(),
                ..Default::default()
            })
            .await
            .map_err(|_| closed())?;
            responses
                .message()
                .await
                .map_err(grpc(format!("content write {digest}")))?
                .ok_or_else(closed)?;
            offset += n as u64;
        }
        tx.send(WriteContentRequest {
            action: WriteAction::Commit as i32,
            r#ref: write_ref,
            total: blob.desc.size as i64,
            offset: offset as i64,
            expected: digest.clone(),
            labels: blob.labels.clone().into_iter().collect(),
            ..Default::default()
        })
        .await
        .map_err(|_| closed())?;
        match responses.message().await {
            Ok(Some(_)) => {}
            Ok(None) => return Err(closed()),
            // Another import committed the same blob meanwhile.
            Err(s) if s.code() == Code::AlreadyExists => {
                self.label_blob(digest, &blob.labels, lease).await?;
            }
            Err(s) => return Err(grpc(format!("content commit {digest}"))(s)),
        }
        drop(tx);
        Ok(())
    }

    async fn label_blob(
        &self,
        digest: &str,
        labels: &BTreeMap<String, String>,
        lease: &str,
    ) -> Result<(), ImportError> {
        if labels.is_empty() {
            return Ok(());
        }
        let paths = labels.keys().map(|k| format!("labels.{k}")).collect();
        ContentClient::new(self.channel.clone())
            .update(self.req(
                UpdateRequest {
                    info: Some(containerd_client::services::v1::Info {
                        digest: digest.to_string(),
                        labels: labels.clone().into_iter().collect(),
                        ..Default::default()
                    }),
                    update_mask: Some(prost_types::FieldMask { paths }),
                },
                Some(lease),
            ))
            .await
            .map_err(grpc(format!("labelling content {digest}")))?;
        Ok(())
    }

    /// Unpacks the layers into the snapshotter: one committed snapshot per chain ID.
    async fn unpack(&self, plan: &UnpackPlan, lease: &str) -> Result<(), ImportError> {
        let chains = chain_ids(&plan.diff_ids);
        let mut snapshots = SnapshotsClient::new(self.channel.clone());
        let mut diff = DiffClient::new(self.channel.clone());
        let mut parent = String::new();
        for (i, layer) in plan.layers.iter().enumerate() {
            let chain = &chains[i];
            match snapshots
                .stat(self.req(
                    StatSnapshotRequest {
                        snapshotter: self.snapshotter.clone(),
                        key: chain.clone(),
                    },
                    Some(lease),
                ))
                .await
            {
                Ok(_) => {
                    parent = chain.clone();
                    continue;
                }
                Err(s) if s.code() == Code::NotFound => {}
                Err(s) => return Err(grpc(format!("snapshot stat {chain}"))(s)),
            }
            let nanos = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default();
            let key = format!("extract-{nanos}-{chain}");
            let mounts = snapshots
                .prepare(self.req(
                    PrepareSnapshotRequest {
                        snapshotter: self.snapshotter.clone(),
                        key: key.clone(),
                        parent: parent.clone(),
                        labels: HashMap::new(),
                    },
                    Some(lease),
                ))
                .await
                .map_err(grpc(format!("snapshot prepare for layer {}", layer.digest)))?
                .into_inner()
                .mounts;
            let outcome = async {
                let applied = diff
                    .apply(self.req(
                        ApplyRequest {
                            diff: Some(pb(layer)),
                            mounts,
                            payloads: HashMap::new(),
                            sync_fs: false,
                        },
                        Some(lease),
                    ))
                    .await
                    .map_err(grpc(format!("applying layer {}", layer.digest)))?
                    .into_inner()
                    .applied
                    .map(|d| d.digest)
                    .unwrap_or_default();
                if applied != plan.diff_ids[i] {
                    return Err(ImportError::DiffIdMismatch {
                        layer: layer.digest.clone(),
                        got: applied,
                        want: plan.diff_ids[i].clone(),
                    });
                }
                match snapshots
                    .clone()
                    .commit(self.req(
                        CommitSnapshotRequest {
                            snapshotter: self.snapshotter.clone(),
                            name: chain.clone(),
                            key: key.clone(),
                            labels: HashMap::new(),
                        },
                        Some(lease),
                    ))
                    .await
                {
                    Ok(_) => Ok(false),
                    // Unpacked concurrently (e.g. by the CRI plugin): ours is redundant.
                    Err(s) if s.code() == Code::AlreadyExists => Ok(true),
                    Err(s) => Err(grpc(format!("snapshot commit {chain}"))(s)),
                }
            }
            .await;
            let remove_key = !matches!(outcome, Ok(false));
            if remove_key {
                let _ = snapshots
                    .remove(self.req(
                        RemoveSnapshotRequest {
                            snapshotter: self.snapshotter.clone(),
                            key: key.clone(),
                        },
                        Some(lease),
                    ))
                    .await;
            }
            outcome?;
            parent = chain.clone();
        }
        // The config holds the snapshot chain against garbage collection, as containerd's
        // own unpacker records it.
        if let Some(top) = chains.last() {
            let mut labels = BTreeMap::new();
            labels.insert(
                format!("containerd.io/gc.ref.snapshot.{}", self.snapshotter),
                top.clone(),
            );
            self.label_blob(&plan.config.digest, &labels, lease).await?;
        }
        Ok(())
    }

    async fn put_image(
        &self,
        name: &str,
        target: &Descriptor,
        extra: &ImageLabels,
        lease: &str,
    ) -> Result<(), ImportError> {
        let mut labels: HashMap<String, String> = extra.clone().into_iter().collect();
        // What the CRI plugin puts on the images it manages itself.
        labels.insert("io.cri-containerd.image".into(), "managed".into());
        let image = Image {
            name: name.to_string(),
            labels,
            target: Some(pb(target)),
            created_at: None,
            updated_at: None,
        };
        let mut images = ImagesClient::new(self.channel.clone());
        match images
            .create(self.req(
                CreateImageRequest {
                    image: Some(image.clone()),
                    source_date_epoch: None,
                },
                Some(lease),
            ))
            .await
        {
            Ok(_) => Ok(()),
            Err(s) if s.code() == Code::AlreadyExists => {
                images
                    .update(self.req(
                        UpdateImageRequest {
                            image: Some(image),
                            update_mask: None,
                            source_date_epoch: None,
                        },
                        Some(lease),
                    ))
                    .await
                    .map_err(grpc(format!("updating image {name}")))?;
                Ok(())
            }
            Err(s) => Err(grpc(format!("creating image {name}"))(s)),
        }
    }
}
