//! Test images built without a registry: an OCI-layout tarball holding `/bin/busybox` from the
//! host (Debian's busybox-static) with applet symlinks, named `k3rs.test/busybox:1` unless told
//! otherwise. Drop it into an agent's `<data-dir>/agent/images/` and the agent imports it.

use std::path::{Path, PathBuf};

use k3rs::agent::images::build_oci_layout;
use k3rs::agent::images::tar::TarWriter;

pub const BUSYBOX_IMAGE: &str = "k3rs.test/busybox:1";
pub const HOST_BUSYBOX: &str = "/bin/busybox";

/// Applets linked into `/bin` (tests may use any of them as a command).
pub const APPLETS: &[&str] = &[
    "sh",
    "ash",
    "sleep",
    "cat",
    "echo",
    "printf",
    "true",
    "false",
    "test",
    "[",
    "env",
    "ls",
    "mkdir",
    "rm",
    "touch",
    "cp",
    "mv",
    "ln",
    "chmod",
    "stat",
    "find",
    "du",
    "df",
    "mount",
    "umount",
    "ps",
    "kill",
    "top",
    "id",
    "whoami",
    "hostname",
    "uname",
    "date",
    "seq",
    "tee",
    "head",
    "tail",
    "wc",
    "grep",
    "sed",
    "awk",
    "cut",
    "sort",
    "tr",
    "yes",
    "base64",
    "md5sum",
    "sha256sum",
    "dd",
    "httpd",
    "nc",
    "wget",
    "nslookup",
    "ping",
    "ip",
    "ifconfig",
    "route",
    "netstat",
    "telnet",
    "vi",
    "watch",
    "timeout",
    "nohup",
    "xargs",
    "basename",
    "dirname",
    "readlink",
    "realpath",
    "free",
    "uptime",
    "dmesg",
    "sync",
    "tar",
    "gzip",
    "gunzip",
];

/// A busybox-based test image.
#[derive(Debug, Clone)]
pub struct TestImage {
    pub name: String,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
    pub working_dir: String,
    /// Extra regular files (path without leading `/`, content, mode).
    pub files: Vec<(String, Vec<u8>, u32)>,
}

impl TestImage {
    /// `k3rs.test/busybox:1`, no entrypoint, `Cmd ["sh"]`.
    pub fn busybox() -> TestImage {
        TestImage {
            name: BUSYBOX_IMAGE.to_string(),
            entrypoint: Vec::new(),
            cmd: vec!["sh".to_string()],
            env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
            working_dir: "/".to_string(),
            files: Vec::new(),
        }
    }

    pub fn name(mut self, name: &str) -> TestImage {
        self.name = name.to_string();
        self
    }

    pub fn entrypoint(mut self, argv: &[&str]) -> TestImage {
        self.entrypoint = argv.iter().map(|s| s.to_string()).collect();
        self
    }

    pub fn cmd(mut self, argv: &[&str]) -> TestImage {
        self.cmd = argv.iter().map(|s| s.to_string()).collect();
        self
    }

    pub fn file(mut self, path: &str, content: &[u8], mode: u32) -> TestImage {
        self.files.push((
            path.trim_start_matches('/').to_string(),
            content.to_vec(),
            mode,
        ));
        self
    }

    /// The OCI-layout tarball.
    pub fn build(&self) -> Vec<u8> {
        let busybox = host_busybox();
        let mut layer = TarWriter::new();
        for dir in [
            "bin", "etc", "tmp", "root", "proc", "sys", "dev", "var", "var/www", "usr",
        ] {
            layer.dir(dir, if dir == "tmp" { 0o1777 } else { 0o755 });
        }
        layer.file("bin/busybox", &busybox, 0o755);
        for applet in APPLETS {
            layer.symlink(&format!("bin/{applet}"), "busybox");
        }
        layer.symlink("usr/bin", "../bin");
        layer.symlink("sbin", "bin");
        layer.file(
            "etc/passwd",
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
            0o644,
        );
        layer.file("etc/group", b"root:x:0:\nnobody:x:65534:\n", 0o644);
        for (path, content, mode) in &self.files {
            layer.file(path, content, *mode);
        }
        let mut config = serde_json::json!({
            "Env": self.env,
            "WorkingDir": self.working_dir,
        });
        if !self.entrypoint.is_empty() {
            config["Entrypoint"] = serde_json::json!(self.entrypoint);
        }
        if !self.cmd.is_empty() {
            config["Cmd"] = serde_json::json!(self.cmd);
        }
        build_oci_layout(
            &self.name,
            &[layer.finish()],
            serde_json::json!({ "config": config }),
        )
        .expect("building the test image")
    }

    /// Writes the tarball as `<images_dir>/<file-name>.tar` (atomically, so an agent polling the
    /// directory never sees half a file) and returns its path.
    pub fn write_to(&self, images_dir: &Path) -> PathBuf {
        std::fs::create_dir_all(images_dir).expect("images dir");
        let file_name: String = self
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = images_dir.join(format!("{file_name}.tar"));
        let tmp = images_dir.join(format!(".{file_name}.tar.tmp"));
        std::fs::write(&tmp, self.build()).expect("write test image");
        std::fs::rename(&tmp, &path).expect("rename test image");
        path
    }
}

/// `/bin/busybox`, which must be the static build (it runs in an empty root file system).
pub fn host_busybox() -> Vec<u8> {
    let bytes = std::fs::read(HOST_BUSYBOX).unwrap_or_else(|e| {
        panic!("{HOST_BUSYBOX}: {e}: install busybox-static (apt-get install busybox-static)")
    });
    assert!(
        !has_interpreter(&bytes),
        "{HOST_BUSYBOX} is dynamically linked: install busybox-static (apt-get install busybox-static)"
    );
    bytes
}

/// Whether an ELF64 little-endian file has a PT_INTERP program header (is dynamically linked).
fn has_interpreter(elf: &[u8]) -> bool {
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[32..40].try_into().unwrap_or_default()) as usize;
    let (phentsize, phnum) = (u16_at(54), u16_at(56));
    (0..phnum).any(|i| {
        let o = phoff + i * phentsize;
        o + 4 <= elf.len() && u32::from_le_bytes(elf[o..o + 4].try_into().unwrap_or_default()) == 3
    })
}
