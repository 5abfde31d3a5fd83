//! Garbage collection of what the kubelet leaves in the runtime: exited containers beyond
//! `maximum-dead-containers-per-container` per (pod, container) (the newest stays so
//! `kubectl logs --previous` works), not-ready sandboxes that are neither a pod's newest nor
//! hold containers, and unused images when the image filesystem is fuller than
//! `image-gc-high-threshold` (down to the low threshold, largest first, never a pinned image).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_cri::v1 as cri;

use super::{Kubelet, labels};

const PERIOD: Duration = Duration::from_secs(60);

/// An image must have been unused this long before GC may remove it (`image-minimum-gc-age`).
const IMAGE_MINIMUM_GC_AGE: Duration = Duration::from_secs(120);

pub async fn run(kubelet: Arc<Kubelet>) {
    let mut unused_since: HashMap<String, std::time::Instant> = HashMap::new();
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        if let Err(e) = collect_containers(&kubelet).await {
            tracing::warn!(error = %e, "container garbage collection");
        }
        if let Err(e) = collect_images(&kubelet, &mut unused_since).await {
            tracing::warn!(error = %e, "image garbage collection");
        }
    }
}

/// Which exited containers to remove: all but the newest `keep` per (pod, container name).
pub fn dead_containers_to_remove(containers: &[cri::Container], keep: usize) -> Vec<String> {
    let mut groups: HashMap<(String, String), Vec<&cri::Container>> = HashMap::new();
    for c in containers {
        let (Some(uid), Some(name)) = (
            c.labels.get(labels::POD_UID),
            c.labels.get(labels::CONTAINER_NAME),
        ) else {
            continue;
        };
        groups
            .entry((uid.clone(), name.clone()))
            .or_default()
            .push(c);
    }
    let mut out = Vec::new();
    for list in groups.values_mut() {
        list.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        // The newest instance is the container's current state whatever it is.
        let dead: Vec<&&cri::Container> = list
            .iter()
            .skip(1)
            .filter(|c| c.state == cri::ContainerState::ContainerExited as i32)
            .collect();
        let keep_dead = keep
            .saturating_sub(usize::from(list.first().is_some_and(|c| {
                c.state == cri::ContainerState::ContainerExited as i32
            })));
        out.extend(dead.into_iter().skip(keep_dead).map(|c| c.id.clone()));
    }
    out.sort();
    out
}

async fn collect_containers(kubelet: &Kubelet) -> anyhow::Result<()> {
    let containers = kubelet
        .cri
        .list_containers(&[(labels::MANAGED_BY, "true")])
        .await?;
    let keep = kubelet.config.extra.maximum_dead_containers_per_container as usize;
    for id in dead_containers_to_remove(&containers, keep.max(1)) {
        match kubelet.cri.remove_container(&id).await {
            Ok(()) => tracing::debug!(container = %id, "removed a dead container"),
            Err(e) => tracing::warn!(container = %id, error = %e, "removing a dead container"),
        }
    }
    let containers = kubelet
        .cri
        .list_containers(&[(labels::MANAGED_BY, "true")])
        .await?;
    let in_use: HashSet<&str> = containers
        .iter()
        .map(|c| c.pod_sandbox_id.as_str())
        .collect();
    let sandboxes = kubelet
        .cri
        .list_pod_sandboxes(&[(labels::MANAGED_BY, "true")])
        .await?;
    let mut newest: HashMap<&str, (u32, i64)> = HashMap::new();
    for s in &sandboxes {
        if let Some(uid) = s.labels.get(labels::POD_UID) {
            let key = (
                s.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
                s.created_at,
            );
            let e = newest.entry(uid.as_str()).or_insert(key);
            if key > *e {
                *e = key;
            }
        }
    }
    for s in &sandboxes {
        let not_ready = s.state != cri::PodSandboxState::SandboxReady as i32;
        let key = (
            s.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
            s.created_at,
        );
        let is_newest = s
            .labels
            .get(labels::POD_UID)
            .and_then(|u| newest.get(u.as_str()))
            == Some(&key);
        if not_ready
            && !is_newest
            && !in_use.contains(s.id.as_str())
            && let Err(e) = kubelet.cri.remove_pod_sandbox(&s.id).await
        {
            tracing::warn!(sandbox = %s.id, error = %e, "removing a dead sandbox");
        }
    }
    Ok(())
}

/// The sandbox image the runtime is configured with (containerd reports it in its verbose
/// CRI status), which no container lists as its image but every sandbox needs.
async fn sandbox_images(kubelet: &Kubelet) -> HashSet<String> {
    let mut out: HashSet<String> = kubelet
        .config
        .extra
        .pod_infra_container_image
        .iter()
        .cloned()
        .collect();
    if let Ok(info) = kubelet.cri.status_info().await
        && let Some(config) = info.get("config")
        && let Ok(value) = serde_json::from_str::<serde_json::Value>(config)
        && let Some(image) = value.get("sandboxImage").and_then(|v| v.as_str())
    {
        out.insert(image.to_string());
    }
    out
}

async fn collect_images(
    kubelet: &Kubelet,
    unused_since: &mut HashMap<String, std::time::Instant>,
) -> anyhow::Result<()> {
    let info = kubelet.cri.image_fs_info().await?;
    let Some(fs) = info.image_filesystems.first() else {
        return Ok(());
    };
    let used = fs.used_bytes.as_ref().map(|u| u.value).unwrap_or(0);
    let mountpoint = fs
        .fs_id
        .as_ref()
        .map(|f| f.mountpoint.clone())
        .unwrap_or_default();
    let Some(size) = super::host::filesystem_size(std::path::Path::new(&mountpoint)) else {
        return Ok(());
    };
    if size.total == 0 {
        return Ok(());
    }
    let args = &kubelet.config.extra;
    let usage = (size.total - size.available) * 100 / size.total;
    if usage < u64::from(args.image_gc_high_threshold) {
        return Ok(());
    }
    let target = size.total * u64::from(args.image_gc_low_threshold) / 100;
    let mut to_free = (size.total - size.available)
        .saturating_sub(target)
        .min(used);
    let containers = kubelet.cri.list_containers(&[]).await?;
    let in_use: HashSet<String> = containers
        .iter()
        .flat_map(|c| {
            [
                c.image_ref.clone(),
                c.image
                    .as_ref()
                    .map(|i| i.image.clone())
                    .unwrap_or_default(),
            ]
        })
        .collect();
    let mut images = kubelet.cri.list_images().await?;
    images.sort_by_key(|i| std::cmp::Reverse(i.size));
    let protected = sandbox_images(kubelet).await;
    let now = std::time::Instant::now();
    let is_unused = |image: &cri::Image| {
        !image.pinned
            && !in_use.contains(&image.id)
            && !image
                .repo_tags
                .iter()
                .any(|t| in_use.contains(t) || protected.contains(t))
    };
    unused_since.retain(|id, _| images.iter().any(|i| &i.id == id && is_unused(i)));
    for image in images.iter().filter(|i| is_unused(i)) {
        unused_since.entry(image.id.clone()).or_insert(now);
    }
    tracing::debug!(
        usage_percent = usage,
        "image filesystem above the high threshold; looking for unused images"
    );
    for image in images {
        if to_free == 0 {
            break;
        }
        let old_enough = unused_since
            .get(&image.id)
            .is_some_and(|since| now.duration_since(*since) >= IMAGE_MINIMUM_GC_AGE);
        if !is_unused(&image) || !old_enough {
            continue;
        }
        match kubelet.cri.remove_image(&image.id).await {
            Ok(()) => {
                tracing::info!(image = %image.id, tags = ?image.repo_tags, "removed an unused image");
                to_free = to_free.saturating_sub(image.size);
            }
            Err(e) => tracing::warn!(image = %image.id, error = %e, "removing an image"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(id: &str, uid: &str, name: &str, created: i64, exited: bool) -> cri::Container {
        cri::Container {
            id: id.into(),
            created_at: created,
            state: if exited {
                cri::ContainerState::ContainerExited
            } else {
                cri::ContainerState::ContainerRunning
            } as i32,
            labels: [
                (labels::POD_UID.to_string(), uid.to_string()),
                (labels::CONTAINER_NAME.to_string(), name.to_string()),
            ]
            .into(),
            ..Default::default()
        }
    }

    #[test]
    fn keeps_the_newest_dead_instance() {
        let list = vec![
            container("a1", "u", "a", 1, true),
            container("a2", "u", "a", 2, true),
            container("a3", "u", "a", 3, false),
            container("b1", "u", "b", 1, true),
            container("b2", "u", "b", 2, true),
            container("b3", "u", "b", 3, true),
        ];
        // a: running a3, keep a2 for --previous, drop a1. b: b3 is current (dead), b2 kept? no:
        // one dead instance in total is kept, and the current one counts.
        assert_eq!(dead_containers_to_remove(&list, 1), ["a1", "b1", "b2"]);
        assert_eq!(dead_containers_to_remove(&list, 2), ["b1"]);
    }
}
