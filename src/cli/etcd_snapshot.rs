//! `k3rs etcd-snapshot save|ls|delete|prune|restore`. All but `restore` ask the
//! running server over HTTPS (`/k3rs/v1/etcd-snapshots`, admin credentials from the
//! kubeconfig k3rs wrote); `restore` works offline on the data directory through the
//! API server module's restore function, like `k3rs server --cluster-reset`.
//!
//! Owns argument handling and output formatting; the snapshot logic lives in
//! `apiserver::snapshots`.

use std::path::PathBuf;

use anyhow::Context;
use serde::Serialize;

use super::config::{DEFAULT_DATA_DIR, DEFAULT_KUBECONFIG};
use super::snapshot_args::{EtcdSnapshotArgs, EtcdSnapshotCommand, SnapshotCommonArgs};
use super::snapshot_config::{default_snapshot_dir, s3_from_args, store_dir};
use crate::apiserver::cluster::snapshots::{
    self, DeleteRequest, PruneRequest, SaveRequest, SnapshotOptions, SnapshotRecord,
    SnapshotResult, restore,
};

/// Runs the subcommand.
pub fn run(args: EtcdSnapshotArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_async(args))
}

fn options(common: &SnapshotCommonArgs) -> anyhow::Result<SnapshotOptions> {
    let dir = match &common.dir {
        Some(d) => Some(
            std::path::absolute(d)
                .with_context(|| format!("--dir {d}"))?
                .display()
                .to_string(),
        ),
        None => None,
    };
    Ok(SnapshotOptions {
        dir,
        compress: common.compress,
        s3: s3_from_args(&common.s3).map_err(anyhow::Error::msg)?,
    })
}

async fn run_async(args: EtcdSnapshotArgs) -> anyhow::Result<()> {
    match args.command {
        EtcdSnapshotCommand::Save { name, common } => {
            let request = SaveRequest {
                name: Some(name),
                options: options(&common)?,
            };
            let result: SnapshotResult = call(&common, "", &request).await?;
            for item in &result.items {
                println!("Snapshot {} saved to {}", item.name, item.location);
            }
            report_s3_errors(&result)
        }
        EtcdSnapshotCommand::Ls { output, common } => {
            let result: SnapshotResult = call(&common, "/list", &options(&common)?).await?;
            match output.as_str() {
                "json" => println!("{}", serde_json::to_string_pretty(&result.items)?),
                "yaml" => print!("{}", serde_yaml::to_string(&result.items)?),
                _ => print!("{}", table(&result.items)),
            }
            for e in &result.s3_errors {
                eprintln!("warning: {e}");
            }
            Ok(())
        }
        EtcdSnapshotCommand::Delete { names, common } => {
            let request = DeleteRequest {
                names,
                options: options(&common)?,
            };
            let result: SnapshotResult = call(&common, "/delete", &request).await?;
            for item in &result.items {
                println!("Snapshot {} deleted from {}", item.name, item.location);
            }
            report_s3_errors(&result)
        }
        EtcdSnapshotCommand::Prune {
            retention,
            name,
            common,
        } => {
            let request = PruneRequest {
                name: Some(name),
                retention,
                options: options(&common)?,
            };
            let result: SnapshotResult = call(&common, "/prune", &request).await?;
            if result.items.is_empty() {
                println!("Nothing to prune: at most {retention} snapshot(s) per location");
            }
            for item in &result.items {
                println!("Snapshot {} pruned from {}", item.name, item.location);
            }
            report_s3_errors(&result)
        }
        EtcdSnapshotCommand::Restore { snapshot, common } => {
            let data_dir = PathBuf::from(common.data_dir.as_deref().unwrap_or(DEFAULT_DATA_DIR));
            let data_dir = std::path::absolute(&data_dir).unwrap_or(data_dir);
            let snapshot_dir = match &common.dir {
                Some(d) => PathBuf::from(d),
                None => default_snapshot_dir(&data_dir),
            };
            let options = restore::RestoreOptions {
                store_dir: store_dir(&data_dir),
                snapshot_dir,
                source: Some(snapshot),
                s3: s3_from_args(&common.s3).map_err(anyhow::Error::msg)?,
                refuse_if_peers_reachable: false,
                bootstrap: None,
            };
            let report = restore::restore(&options).await?;
            println!("{}", restore_message(&report));
            Ok(())
        }
    }
}

/// What the user reads after a restore (also logged by `k3rs server --cluster-reset`).
pub fn restore_message(report: &restore::RestoreReport) -> String {
    let old = match &report.old_database {
        Some(path) => format!(" The previous database was moved to {}.", path.display()),
        None => String::new(),
    };
    format!(
        "Restored the datastore from {} (revision {}).{old} Start k3rs again without --cluster-reset (systemctl start k3rs).",
        report.source, report.revision
    )
}

fn report_s3_errors(result: &SnapshotResult) -> anyhow::Result<()> {
    if result.s3_errors.is_empty() {
        return Ok(());
    }
    for e in &result.s3_errors {
        eprintln!("error: {e}");
    }
    anyhow::bail!("{} S3 operation(s) failed", result.s3_errors.len())
}

/// The `ls` table: k3s's columns, then the metadata k3rs records.
pub fn table(items: &[SnapshotRecord]) -> String {
    let header = [
        "Name", "Location", "Size", "Created", "Node", "Revision", "Version",
    ];
    let rows: Vec<[String; 7]> = items
        .iter()
        .map(|r| {
            [
                r.name.clone(),
                r.location.clone(),
                r.size.to_string(),
                r.created_at.clone(),
                r.node.clone(),
                r.revision.to_string(),
                r.k3rs_version.clone(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let text: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(text.join(" ").trim_end());
        out.push('\n');
    };
    line(&header);
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&cells);
    }
    out
}

/// POSTs `body` to the snapshot API of the running server and decodes the answer.
async fn call<B: Serialize, T: serde::de::DeserializeOwned>(
    common: &SnapshotCommonArgs,
    action: &str,
    body: &B,
) -> anyhow::Result<T> {
    let kubeconfig = common.kubeconfig.as_deref().unwrap_or(DEFAULT_KUBECONFIG);
    let (client, url) = crate::kube_client::from_kubeconfig_file(std::path::Path::new(kubeconfig))
        .with_context(|| {
            format!("reading the admin kubeconfig {kubeconfig} (is k3rs server installed here? use --kubeconfig)")
        })?;
    let request = http::Request::post(format!("{}{action}", snapshots::API_PREFIX))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body)?)
        .context("building the request")?;
    let text = client.request_text(request).await.map_err(|e| match e {
        kube::Error::Api(status) => anyhow::anyhow!("{}", status.message),
        other => anyhow::anyhow!(
            "cannot reach the k3rs server at {url}: {other} (is it running? systemctl status k3rs)"
        ),
    })?;
    serde_json::from_str(&text).context("decoding the server's answer")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let items = vec![SnapshotRecord {
            name: "on-demand-n-1".into(),
            location: "file:///s/on-demand-n-1".into(),
            size: 12345,
            created_at: "2024-01-01T00:00:00Z".into(),
            node: "n".into(),
            k3rs_version: "v0.1.0".into(),
            revision: 7,
            compressed: false,
            sha256: "ab".into(),
        }];
        let t = table(&items);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("Name          Location"), "{t}");
        assert!(
            lines[1].starts_with("on-demand-n-1 file:///s/on-demand-n-1 12345"),
            "{t}"
        );
        assert_eq!(table(&[]).lines().count(), 1);
    }
}
