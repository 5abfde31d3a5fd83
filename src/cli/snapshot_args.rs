//! Command-line shape of everything snapshot-related, named as k3s names it: the
//! server's `--etcd-snapshot-*`, `--cluster-reset*` and `--etcd-s3-*` flags (each S3
//! flag also answers to `--s3-*`), and the `k3rs etcd-snapshot` subcommands.
//!
//! Values stay raw here (validation is in [`super::config`] and
//! [`super::etcd_snapshot`]); no files, no network.

use clap::builder::BoolishValueParser;
use clap::{Args, Subcommand};

/// `--etcd-s3-*` / `--s3-*`. Secrets may come from `AWS_*` variables.
#[derive(Debug, Default, Clone, Args)]
pub struct S3Args {
    /// (db) Enable backup to S3
    #[arg(long = "etcd-s3", visible_alias = "s3", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = BoolishValueParser::new(),
          value_name = "BOOL", help_heading = "S3")]
    pub enabled: Option<bool>,
    /// (db) S3 endpoint url [default: s3.amazonaws.com]
    #[arg(
        long = "etcd-s3-endpoint",
        visible_alias = "s3-endpoint",
        value_name = "HOST[:PORT]",
        help_heading = "S3"
    )]
    pub endpoint: Option<String>,
    /// (db) S3 custom CA cert to connect to S3 endpoint
    #[arg(
        long = "etcd-s3-endpoint-ca",
        visible_alias = "s3-endpoint-ca",
        value_name = "FILE",
        help_heading = "S3"
    )]
    pub endpoint_ca: Option<String>,
    /// (db) Disables S3 SSL certificate validation
    #[arg(long = "etcd-s3-skip-ssl-verify", visible_alias = "s3-skip-ssl-verify", num_args = 0..=1,
          require_equals = true, default_missing_value = "true",
          value_parser = BoolishValueParser::new(), value_name = "BOOL", help_heading = "S3")]
    pub skip_ssl_verify: Option<bool>,
    /// (db) S3 access key
    #[arg(
        long = "etcd-s3-access-key",
        visible_alias = "s3-access-key",
        env = "AWS_ACCESS_KEY_ID",
        hide_env_values = true,
        value_name = "KEY",
        help_heading = "S3"
    )]
    pub access_key: Option<String>,
    /// (db) S3 secret key
    #[arg(
        long = "etcd-s3-secret-key",
        visible_alias = "s3-secret-key",
        env = "AWS_SECRET_ACCESS_KEY",
        hide_env_values = true,
        value_name = "KEY",
        help_heading = "S3"
    )]
    pub secret_key: Option<String>,
    /// (db) S3 session token
    #[arg(
        long = "etcd-s3-session-token",
        visible_alias = "s3-session-token",
        env = "AWS_SESSION_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        help_heading = "S3"
    )]
    pub session_token: Option<String>,
    /// (db) S3 bucket name
    #[arg(
        long = "etcd-s3-bucket",
        visible_alias = "s3-bucket",
        value_name = "BUCKET",
        help_heading = "S3"
    )]
    pub bucket: Option<String>,
    /// (db) S3 region / bucket location [default: us-east-1]
    #[arg(
        long = "etcd-s3-region",
        visible_alias = "s3-region",
        value_name = "REGION",
        help_heading = "S3"
    )]
    pub region: Option<String>,
    /// (db) S3 folder
    #[arg(
        long = "etcd-s3-folder",
        visible_alias = "s3-folder",
        value_name = "FOLDER",
        help_heading = "S3"
    )]
    pub folder: Option<String>,
    /// (db) Disables S3 over HTTPS
    #[arg(long = "etcd-s3-insecure", visible_alias = "s3-insecure", num_args = 0..=1,
          require_equals = true, default_missing_value = "true",
          value_parser = BoolishValueParser::new(), value_name = "BOOL", help_heading = "S3")]
    pub insecure: Option<bool>,
    /// (db) S3 timeout [default: 5m0s]
    #[arg(
        long = "etcd-s3-timeout",
        visible_alias = "s3-timeout",
        value_name = "DURATION",
        help_heading = "S3"
    )]
    pub timeout: Option<String>,
    /// (db) Number of scheduled snapshots to retain on S3 [default: 5]
    #[arg(
        long = "etcd-s3-retention",
        visible_alias = "s3-retention",
        value_name = "N",
        help_heading = "S3"
    )]
    pub retention: Option<String>,
    /// (db) S3 bucket lookup type, one of 'auto', 'dns', 'path' [default: auto]
    #[arg(
        long = "etcd-s3-bucket-lookup-type",
        visible_alias = "s3-bucket-lookup-type",
        value_name = "TYPE",
        help_heading = "S3"
    )]
    pub bucket_lookup_type: Option<String>,
}

impl S3Args {
    /// `(config key, value)` pairs of the string flags that were given.
    pub fn strings(&self) -> [(&'static str, &Option<String>); 11] {
        [
            ("etcd-s3-endpoint", &self.endpoint),
            ("etcd-s3-endpoint-ca", &self.endpoint_ca),
            ("etcd-s3-access-key", &self.access_key),
            ("etcd-s3-secret-key", &self.secret_key),
            ("etcd-s3-session-token", &self.session_token),
            ("etcd-s3-bucket", &self.bucket),
            ("etcd-s3-region", &self.region),
            ("etcd-s3-folder", &self.folder),
            ("etcd-s3-timeout", &self.timeout),
            ("etcd-s3-retention", &self.retention),
            ("etcd-s3-bucket-lookup-type", &self.bucket_lookup_type),
        ]
    }

    /// `(config key, value)` pairs of the boolean flags.
    pub fn bools(&self) -> [(&'static str, Option<bool>); 3] {
        [
            ("etcd-s3", self.enabled),
            ("etcd-s3-skip-ssl-verify", self.skip_ssl_verify),
            ("etcd-s3-insecure", self.insecure),
        ]
    }
}

/// The server's snapshot and reset flags.
#[derive(Debug, Default, Clone, Args)]
pub struct ServerSnapshotArgs {
    /// (db) Disable automatic etcd snapshots
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_parser = BoolishValueParser::new(), value_name = "BOOL", help_heading = "Database")]
    pub etcd_disable_snapshots: Option<bool>,
    /// (db) Snapshot interval time in cron spec. eg. every 5 hours '0 */5 * * *' [default: 0 */12 * * *]
    #[arg(long, value_name = "CRON", help_heading = "Database")]
    pub etcd_snapshot_schedule_cron: Option<String>,
    /// (db) Number of snapshots to retain [default: 5]
    #[arg(long, value_name = "N", help_heading = "Database")]
    pub etcd_snapshot_retention: Option<String>,
    /// (db) Directory to save db snapshots [default: ${data-dir}/server/db/snapshots]
    #[arg(long, value_name = "DIR", help_heading = "Database")]
    pub etcd_snapshot_dir: Option<String>,
    /// (db) Set the base name of etcd snapshots [default: etcd-snapshot]
    #[arg(long, value_name = "NAME", help_heading = "Database")]
    pub etcd_snapshot_name: Option<String>,
    /// (db) Compress etcd snapshot
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_parser = BoolishValueParser::new(), value_name = "BOOL", help_heading = "Database")]
    pub etcd_snapshot_compress: Option<bool>,
    /// (cluster) Forget all peers and become sole member of a new cluster
    #[arg(long, env = "K3RS_CLUSTER_RESET", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = BoolishValueParser::new(),
          value_name = "BOOL", help_heading = "Cluster")]
    pub cluster_reset: Option<bool>,
    /// (db) Path to snapshot file to be restored (or a snapshot name on S3, with the S3 flags)
    #[arg(long, value_name = "PATH", help_heading = "Cluster")]
    pub cluster_reset_restore_path: Option<String>,
    /// (cluster) Reset even while other members of the cluster answer on their peer port
    #[arg(long, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = BoolishValueParser::new(),
          value_name = "BOOL", help_heading = "Cluster")]
    pub cluster_reset_force: Option<bool>,
    #[command(flatten)]
    pub s3: S3Args,
}

impl ServerSnapshotArgs {
    pub fn strings(&self) -> Vec<(&'static str, &Option<String>)> {
        let mut out = vec![
            (
                "etcd-snapshot-schedule-cron",
                &self.etcd_snapshot_schedule_cron,
            ),
            ("etcd-snapshot-retention", &self.etcd_snapshot_retention),
            ("etcd-snapshot-dir", &self.etcd_snapshot_dir),
            ("etcd-snapshot-name", &self.etcd_snapshot_name),
            (
                "cluster-reset-restore-path",
                &self.cluster_reset_restore_path,
            ),
        ];
        out.extend(self.s3.strings());
        out
    }

    pub fn bools(&self) -> Vec<(&'static str, Option<bool>)> {
        let mut out = vec![
            ("etcd-disable-snapshots", self.etcd_disable_snapshots),
            ("etcd-snapshot-compress", self.etcd_snapshot_compress),
            ("cluster-reset", self.cluster_reset),
            ("cluster-reset-force", self.cluster_reset_force),
        ];
        out.extend(self.s3.bools());
        out
    }
}

/// Config-file keys of the snapshot flags: (key, is boolean).
pub const CONFIG_KEYS: &[(&str, bool)] = &[
    ("etcd-disable-snapshots", true),
    ("etcd-snapshot-schedule-cron", false),
    ("etcd-snapshot-retention", false),
    ("etcd-snapshot-dir", false),
    ("etcd-snapshot-name", false),
    ("etcd-snapshot-compress", true),
    ("cluster-reset", true),
    ("cluster-reset-force", true),
    ("cluster-reset-restore-path", false),
    ("etcd-s3", true),
    ("etcd-s3-endpoint", false),
    ("etcd-s3-endpoint-ca", false),
    ("etcd-s3-skip-ssl-verify", true),
    ("etcd-s3-access-key", false),
    ("etcd-s3-secret-key", false),
    ("etcd-s3-session-token", false),
    ("etcd-s3-bucket", false),
    ("etcd-s3-region", false),
    ("etcd-s3-folder", false),
    ("etcd-s3-insecure", true),
    ("etcd-s3-timeout", false),
    ("etcd-s3-retention", false),
    ("etcd-s3-bucket-lookup-type", false),
];

/// `k3rs etcd-snapshot`.
#[derive(Debug, Args)]
pub struct EtcdSnapshotArgs {
    #[command(subcommand)]
    pub command: EtcdSnapshotCommand,
}

/// Flags every `etcd-snapshot` subcommand takes.
#[derive(Debug, Default, Clone, Args)]
pub struct SnapshotCommonArgs {
    /// (data) Folder to hold state [default: /var/lib/k3rs]
    #[arg(short = 'd', long, env = "K3RS_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<String>,
    /// (client) The admin kubeconfig used to reach the running server [default: /etc/k3rs/k3rs.yaml]
    #[arg(long, env = "K3RS_KUBECONFIG_OUTPUT", value_name = "FILE")]
    pub kubeconfig: Option<String>,
    /// (db) Directory to save etcd on-demand snapshot [default: ${data-dir}/server/db/snapshots]
    #[arg(long = "dir", visible_alias = "etcd-snapshot-dir", value_name = "DIR")]
    pub dir: Option<String>,
    /// (db) Compress etcd snapshot
    #[arg(long = "snapshot-compress", visible_alias = "etcd-snapshot-compress", num_args = 0..=1,
          require_equals = true, default_missing_value = "true",
          value_parser = BoolishValueParser::new(), value_name = "BOOL")]
    pub compress: Option<bool>,
    #[command(flatten)]
    pub s3: S3Args,
}

/// The `etcd-snapshot` subcommands.
#[derive(Debug, Subcommand)]
pub enum EtcdSnapshotCommand {
    /// Trigger an immediate etcd snapshot
    Save {
        /// (db) Set the base name of the etcd on-demand snapshot (appended with node name and UNIX timestamp)
        #[arg(long, default_value = "on-demand")]
        name: String,
        #[command(flatten)]
        common: SnapshotCommonArgs,
    },
    /// Delete given snapshot(s)
    Delete {
        /// Snapshot names, as `ls` shows them
        #[arg(required = true, value_name = "NAME")]
        names: Vec<String>,
        #[command(flatten)]
        common: SnapshotCommonArgs,
    },
    /// List snapshots
    #[command(visible_aliases = ["list", "l"])]
    Ls {
        /// (db) List format: table (default), json or yaml
        #[arg(short = 'o', long = "output", default_value = "table", value_parser = ["table", "json", "yaml"])]
        output: String,
        #[command(flatten)]
        common: SnapshotCommonArgs,
    },
    /// Remove snapshots that match the name prefix that exceed the configured retention count
    Prune {
        /// (db) Number of snapshots to retain
        #[arg(
            long = "snapshot-retention",
            id = "snapshot_retention",
            default_value_t = 5
        )]
        retention: usize,
        /// (db) Base name of the snapshots to prune
        #[arg(long, id = "prune_name", default_value = "on-demand")]
        name: String,
        #[command(flatten)]
        common: SnapshotCommonArgs,
    },
    /// Restore a snapshot offline (the server must be stopped); same as
    /// `k3rs server --cluster-reset --cluster-reset-restore-path=<snapshot>`
    Restore {
        /// A snapshot file, a name in the snapshot directory, or a name on S3
        #[arg(value_name = "SNAPSHOT")]
        snapshot: String,
        #[command(flatten)]
        common: SnapshotCommonArgs,
    },
}

#[cfg(test)]
mod tests {
    use super::super::args::{Cli, Command};
    use super::*;
    use clap::{CommandFactory, Parser};

    #[test]
    fn command_line_is_consistent() {
        // clap's own checks (unique argument ids, ...) for every subcommand.
        Cli::command().debug_assert();
    }

    #[test]
    fn s3_flags_answer_to_both_spellings() {
        for prefix in ["--s3", "--etcd-s3"] {
            let bucket = format!("{prefix}-bucket=b");
            let cli = Cli::try_parse_from(["k3rs", "etcd-snapshot", "save", prefix, &bucket])
                .expect("parses");
            let Some(Command::EtcdSnapshot(args)) = cli.command else {
                panic!("not etcd-snapshot");
            };
            let EtcdSnapshotCommand::Save { common, name } = args.command else {
                panic!("not save");
            };
            assert_eq!(name, "on-demand");
            assert_eq!(common.s3.enabled, Some(true));
            assert_eq!(common.s3.bucket.as_deref(), Some("b"));
        }
        let cli =
            Cli::try_parse_from(["k3rs", "server", "--s3-region", "eu-central-1"]).expect("parses");
        let Some(Command::Server(args)) = cli.command else {
            panic!("not server");
        };
        assert_eq!(args.snapshots.s3.region.as_deref(), Some("eu-central-1"));
    }
}
