//! The manifests compiled into the binary (`embedded/manifests/` at the top of the
//! repository) and writing them to the manifests folder at start, as k3s stages its
//! packaged components: every start rewrites them (so an edited copy is restored), except
//! those `--disable` names, which the deploy loop then removes with what they created.

use std::io::Write;
use std::path::Path;

use anyhow::Context;

/// One packaged manifest: its add-on name (`--disable=<name>`) and content.
pub struct Packaged {
    pub name: &'static str,
    pub content: &'static str,
}

impl Packaged {
    /// The file name in the manifests folder.
    pub fn file_name(&self) -> String {
        format!("{}.yaml", self.name)
    }
}

/// Every packaged manifest.
pub const PACKAGED: &[Packaged] = &[Packaged {
    name: "rolebindings",
    content: include_str!("../../embedded/manifests/rolebindings.yaml"),
}];

/// The names `--disable` may give to remove a packaged manifest.
pub fn names() -> impl Iterator<Item = &'static str> {
    PACKAGED.iter().map(|p| p.name)
}

/// Writes every packaged manifest `disables` does not name into `dir` (created if
/// missing). A file that already has the packaged content is left untouched, so its mtime
/// does not change; others are replaced atomically (a temporary dotfile, which the deploy
/// loop skips, then a rename), so the loop never reads half a file.
pub fn stage(dir: &Path, disables: &[String]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the manifests folder {}", dir.display()))?;
    for packaged in PACKAGED {
        if disables.iter().any(|d| d == packaged.name) {
            continue;
        }
        let path = dir.join(packaged.file_name());
        if std::fs::read(&path).is_ok_and(|current| current == packaged.content.as_bytes()) {
            continue;
        }
        let temporary = dir.join(format!(".{}.tmp", packaged.file_name()));
        let written = std::fs::File::create(&temporary)
            .and_then(|mut file| {
                file.write_all(packaged.content.as_bytes())?;
                file.sync_all()
            })
            .and_then(|()| std::fs::rename(&temporary, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(e).with_context(|| format!("writing {}", path.display()));
        }
        tracing::info!(path = %path.display(), "wrote packaged manifest");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packaged_manifests_parse_and_are_named_by_their_file() {
        for packaged in PACKAGED {
            let objects = super::super::manifest::parse(packaged.content.as_bytes(), false)
                .unwrap_or_else(|e| panic!("{}: {e}", packaged.name));
            assert!(!objects.is_empty(), "{} is empty", packaged.name);
            assert_eq!(
                super::super::manifest::addon_name(&packaged.file_name()),
                packaged.name
            );
        }
    }

    #[test]
    fn stage_writes_all_but_the_disabled_and_restores_edits() {
        let dir = tempfile::tempdir().expect("tempdir");
        let manifests = dir.path().join("server/manifests");
        stage(&manifests, &[]).expect("stage");
        let path = manifests.join("rolebindings.yaml");
        assert_eq!(
            std::fs::read_to_string(&path).expect("written"),
            PACKAGED[0].content
        );
        std::fs::write(&path, "edited").expect("edit");
        stage(&manifests, &[]).expect("stage again");
        assert_eq!(
            std::fs::read_to_string(&path).expect("rewritten"),
            PACKAGED[0].content
        );
        let other = tempfile::tempdir().expect("tempdir");
        stage(other.path(), &["rolebindings".to_string()]).expect("stage");
        assert!(!other.path().join("rolebindings.yaml").exists());
        let leftovers: Vec<_> = std::fs::read_dir(&manifests)
            .expect("list")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect();
        assert_eq!(leftovers, ["rolebindings.yaml"]);
    }
}
