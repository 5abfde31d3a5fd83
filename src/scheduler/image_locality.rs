//! ImageLocality, as kube-scheduler's plugin of that name: nodes that already hold a
//! pod's images (from `status.images`) score higher, scaled by how widely each image
//! is spread so that one popular image does not pull every pod onto the same nodes.
//! Pure: it reads the node image table the cache keeps.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Node, Pod};

const MB: i64 = 1024 * 1024;
/// Below this total, images are too small to matter (kube's `minThreshold`).
const MIN_THRESHOLD: i64 = 23 * MB;
/// Per container, above this the score saturates (kube's `maxContainerThreshold`).
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// Image sizes by name on each node, and on how many nodes each name is present.
#[derive(Default)]
pub struct ImageTable {
    by_node: HashMap<String, HashMap<String, i64>>,
    node_count: HashMap<String, usize>,
}

impl ImageTable {
    /// Records the images of `node` (replacing what it reported before).
    pub fn set_node(&mut self, node: &Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut images = HashMap::new();
        for image in node
            .status
            .as_ref()
            .and_then(|s| s.images.as_deref())
            .unwrap_or(&[])
        {
            for n in image.names.iter().flatten() {
                images.insert(n.clone(), image.size_bytes.unwrap_or(0));
            }
        }
        self.remove_node(&name);
        if images.is_empty() {
            return;
        }
        for n in images.keys() {
            *self.node_count.entry(n.clone()).or_default() += 1;
        }
        self.by_node.insert(name, images);
    }

    pub fn remove_node(&mut self, name: &str) {
        let Some(old) = self.by_node.remove(name) else {
            return;
        };
        for n in old.keys() {
            if let Some(count) = self.node_count.get_mut(n) {
                *count -= 1;
                if *count == 0 {
                    self.node_count.remove(n);
                }
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_node.is_empty()
    }

    /// The 0–100 score of `node` for `pod`, among `total_nodes` nodes.
    pub fn score(&self, pod: &Pod, node: &str, total_nodes: usize) -> i64 {
        let Some(spec) = pod.spec.as_ref() else {
            return 0;
        };
        let containers = spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter());
        let mut count = 0i64;
        let mut sum = 0i64;
        let images = self.by_node.get(node);
        for c in containers {
            count += 1;
            let Some(image) = c.image.as_deref() else {
                continue;
            };
            let name = normalized_image_name(image);
            if let Some(size) = images.and_then(|m| m.get(name.as_ref())) {
                let spread = self.node_count.get(name.as_ref()).copied().unwrap_or(0);
                // Scaled by the fraction of nodes holding it.
                sum += (*size as f64 * spread as f64 / total_nodes.max(1) as f64) as i64;
            }
        }
        priority(sum, count)
    }
}

/// kube's `calculatePriority`: the summed size mapped linearly between the thresholds.
fn priority(sum: i64, containers: i64) -> i64 {
    let max_threshold = MAX_CONTAINER_THRESHOLD * containers.max(1);
    let sum = sum.clamp(MIN_THRESHOLD, max_threshold);
    100 * (sum - MIN_THRESHOLD) / (max_threshold - MIN_THRESHOLD)
}

/// An image reference without tag or digest means `:latest`, as the kubelet pulls it.
fn normalized_image_name(name: &str) -> std::borrow::Cow<'_, str> {
    let last_colon = name.rfind(':');
    let last_slash = name.rfind('/');
    if last_colon.map(|c| Some(c) <= last_slash).unwrap_or(true) {
        std::borrow::Cow::Owned(format!("{name}:latest"))
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, images: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name}, "status": {"images": images}}))
            .expect("node")
    }

    #[test]
    fn names_are_normalized_like_kube() {
        assert_eq!(normalized_image_name("nginx"), "nginx:latest");
        assert_eq!(normalized_image_name("nginx:1.25"), "nginx:1.25");
        assert_eq!(
            normalized_image_name("registry:5000/app"),
            "registry:5000/app:latest"
        );
        assert_eq!(
            normalized_image_name("registry:5000/app:v1"),
            "registry:5000/app:v1"
        );
    }

    #[test]
    fn scores_follow_thresholds_and_spread() {
        let mut t = ImageTable::default();
        t.set_node(&node(
            "a",
            json!([{"names": ["big:1"], "sizeBytes": 500 * MB}]),
        ));
        t.set_node(&node(
            "b",
            json!([{"names": ["small:1"], "sizeBytes": 10 * MB}]),
        ));
        t.set_node(&node("c", json!([])));
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "x", "image": "big:1"}]}}))
        .expect("pod");
        // 500 MiB on 1 of 2 nodes with images... total_nodes is all nodes (3).
        let expected =
            100 * (500 * MB / 3 - MIN_THRESHOLD) / (MAX_CONTAINER_THRESHOLD - MIN_THRESHOLD);
        assert_eq!(t.score(&pod, "a", 3), expected);
        assert_eq!(t.score(&pod, "b", 3), 0);
        assert_eq!(t.score(&pod, "c", 3), 0);
        // Once every node has it, the full size counts.
        t.set_node(&node(
            "b",
            json!([{"names": ["big:1"], "sizeBytes": 500 * MB}]),
        ));
        t.set_node(&node(
            "c",
            json!([{"names": ["big:1"], "sizeBytes": 500 * MB}]),
        ));
        assert_eq!(
            t.score(&pod, "a", 3),
            100 * (500 * MB - MIN_THRESHOLD) / (MAX_CONTAINER_THRESHOLD - MIN_THRESHOLD)
        );
        t.remove_node("a");
        assert_eq!(t.node_count.get("big:1"), Some(&2));
    }
}
