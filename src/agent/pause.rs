//! The pause (sandbox) image, built by the agent so pods start without any registry:
//! `k3rs.local/pause:3.10` (or the `--pause-image` name), one layer holding `/pause`, config
//! `Entrypoint ["/pause"]`, imported through the same path as the air-gap images.
//!
//! `/pause` is a hand-assembled static ELF (x86_64 and aarch64, under 300 bytes), written here
//! byte by byte. It:
//! - installs SIGTERM and SIGINT handlers that `exit_group(0)`: it runs as PID 1 of the pod's
//!   PID namespace, where signals with the default action are ignored, so without handlers
//!   `StopPodSandbox` would always wait for containerd's SIGKILL;
//! - sets SIGCHLD to `SIG_IGN` with `SA_NOCLDWAIT`, so the kernel reaps zombies for it when the
//!   pod shares its PID namespace (what the upstream pause does with a `waitpid` loop);
//! - then blocks in `pause()` (x86_64) / `ppoll(NULL, 0, NULL, NULL)` (aarch64) forever.
//!
//! Owns only these bytes and the image built from them; no I/O besides the import call.

use std::collections::BTreeMap;

use super::images::archive::{ArchiveError, build_oci_layout};
use super::images::tar::TarWriter;

/// Where the single PT_LOAD segment is mapped (ET_EXEC, not position independent).
const BASE: u64 = 0x40_0000;
const EHDR_SIZE: usize = 64;
const PHDR_SIZE: usize = 56;
const CODE_OFFSET: usize = EHDR_SIZE + PHDR_SIZE; // 0x78

const SIGINT: u32 = 2;
const SIGTERM: u32 = 15;
const SIGCHLD: u32 = 17;
const SIG_IGN: u64 = 1;
const SA_NOCLDWAIT: u64 = 0x1;
/// Required on x86_64 for a handler; harmless on aarch64 (our handler never returns).
const SA_RESTORER: u64 = 0x0400_0000;

pub const DEFAULT_PAUSE_IMAGE: &str = "k3rs.local/pause:3.10";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    pub fn host() -> Option<Arch> {
        match std::env::consts::ARCH {
            "x86_64" => Some(Arch::X86_64),
            "aarch64" => Some(Arch::Aarch64),
            _ => None,
        }
    }

    fn e_machine(self) -> u16 {
        match self {
            Arch::X86_64 => 62,
            Arch::Aarch64 => 183,
        }
    }
}

/// The kernel's `struct sigaction` on both architectures: handler, flags, restorer, mask.
fn sigaction(handler: u64, flags: u64, restorer: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    out[0..8].copy_from_slice(&handler.to_le_bytes());
    out[8..16].copy_from_slice(&flags.to_le_bytes());
    out[16..24].copy_from_slice(&restorer.to_le_bytes());
    out
}

fn x86_64_code() -> Vec<u8> {
    // Offsets inside the code; the two sigaction structs follow at ACT_TERM and ACT_CHLD.
    const LOOP: usize = 0x3a;
    const HANDLER: usize = 0x43;
    const ACT_TERM: usize = 0x50;
    const ACT_CHLD: usize = 0x70;
    let lea_rsi = |at: usize, target: usize| {
        let disp = (target as i32) - (at as i32 + 7);
        let mut v = vec![0x48, 0x8d, 0x35];
        v.extend_from_slice(&disp.to_le_bytes());
        v
    };
    let mov_edi = |imm: u32| {
        let mut v = vec![0xbf];
        v.extend_from_slice(&imm.to_le_bytes());
        v
    };
    let mov_eax = |imm: u32| {
        let mut v = vec![0xb8];
        v.extend_from_slice(&imm.to_le_bytes());
        v
    };
    const SYSCALL: [u8; 2] = [0x0f, 0x05];
    let mut c = Vec::new();
    c.extend(lea_rsi(c.len(), ACT_TERM)); // rsi = &act_term
    c.extend(mov_edi(SIGTERM));
    c.extend([0x31, 0xd2]); // xor edx, edx (no old action)
    c.extend([0x41, 0xba, 8, 0, 0, 0]); // mov r10d, 8 (sigsetsize)
    c.extend(mov_eax(13)); // rt_sigaction
    c.extend(SYSCALL);
    c.extend(mov_edi(SIGINT)); // rsi/rdx/r10 survive syscall
    c.extend(mov_eax(13));
    c.extend(SYSCALL);
    c.extend(lea_rsi(c.len(), ACT_CHLD));
    c.extend(mov_edi(SIGCHLD));
    c.extend(mov_eax(13));
    c.extend(SYSCALL);
    assert_eq!(c.len(), LOOP);
    c.extend(mov_eax(34)); // pause
    c.extend(SYSCALL);
    let rel = LOOP as i32 - (c.len() as i32 + 2);
    c.extend([0xeb, rel as i8 as u8]); // jmp loop
    assert_eq!(c.len(), HANDLER);
    c.extend([0x31, 0xff]); // xor edi, edi
    c.extend(mov_eax(231)); // exit_group
    c.extend(SYSCALL);
    c.resize(ACT_TERM, 0xcc);
    let handler = BASE + (CODE_OFFSET + HANDLER) as u64;
    c.extend(sigaction(handler, SA_RESTORER, handler));
    c.extend(sigaction(SIG_IGN, SA_NOCLDWAIT | SA_RESTORER, handler));
    assert_eq!(c.len(), ACT_CHLD + 32);
    c
}

/// `movz x<rd>, #imm16`
fn a64_movz(rd: u32, imm: u32) -> u32 {
    0xd280_0000 | ((imm & 0xffff) << 5) | rd
}
/// `adr x<rd>, pc+offset`
fn a64_adr(rd: u32, offset: i32) -> u32 {
    let imm = (offset as u32) & 0x1f_ffff;
    0x1000_0000 | ((imm & 3) << 29) | ((imm >> 2) << 5) | rd
}
/// `b pc+offset`
fn a64_b(offset: i32) -> u32 {
    0x1400_0000 | (((offset >> 2) as u32) & 0x03ff_ffff)
}
const A64_SVC0: u32 = 0xd400_0001;

fn aarch64_code() -> Vec<u8> {
    const LOOP: usize = 0x2c;
    const HANDLER: usize = 0x4c;
    const ACT_TERM: usize = 0x58;
    const ACT_CHLD: usize = 0x78;
    let mut w: Vec<u32> = Vec::new();
    let pc = |w: &Vec<u32>| (w.len() * 4) as i32;
    w.push(a64_adr(1, ACT_TERM as i32 - pc(&w))); // x1 = &act_term
    w.push(a64_movz(0, SIGTERM));
    w.push(a64_movz(2, 0)); // no old action
    w.push(a64_movz(3, 8)); // sigsetsize
    w.push(a64_movz(8, 134)); // rt_sigaction
    w.push(A64_SVC0);
    w.push(a64_movz(0, SIGINT)); // x1..x3, x8 survive svc
    w.push(A64_SVC0);
    w.push(a64_adr(1, ACT_CHLD as i32 - pc(&w)));
    w.push(a64_movz(0, SIGCHLD));
    w.push(A64_SVC0);
    assert_eq!(pc(&w) as usize, LOOP);
    for r in 0..5 {
        w.push(a64_movz(r, 0)); // ppoll(NULL, 0, NULL, NULL, 0)
    }
    w.push(a64_movz(8, 73)); // ppoll
    w.push(A64_SVC0);
    w.push(a64_b(LOOP as i32 - pc(&w)));
    assert_eq!(pc(&w) as usize, HANDLER);
    w.push(a64_movz(0, 0));
    w.push(a64_movz(8, 94)); // exit_group
    w.push(A64_SVC0);
    let mut c: Vec<u8> = w.iter().flat_map(|i| i.to_le_bytes()).collect();
    assert_eq!(c.len(), ACT_TERM);
    let handler = BASE + (CODE_OFFSET + HANDLER) as u64;
    c.extend(sigaction(handler, SA_RESTORER, handler));
    c.extend(sigaction(SIG_IGN, SA_NOCLDWAIT | SA_RESTORER, handler));
    assert_eq!(c.len(), ACT_CHLD + 32);
    c
}

/// The complete `/pause` executable for `arch`.
pub fn pause_elf(arch: Arch) -> Vec<u8> {
    let code = match arch {
        Arch::X86_64 => x86_64_code(),
        Arch::Aarch64 => aarch64_code(),
    };
    let total = (CODE_OFFSET + code.len()) as u64;
    let mut e = Vec::with_capacity(total as usize);
    e.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]); // 64-bit, LE, v1, SysV
    e.extend_from_slice(&[0; 8]);
    e.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    e.extend_from_slice(&arch.e_machine().to_le_bytes());
    e.extend_from_slice(&1u32.to_le_bytes()); // EV_CURRENT
    e.extend_from_slice(&(BASE + CODE_OFFSET as u64).to_le_bytes()); // e_entry
    e.extend_from_slice(&(EHDR_SIZE as u64).to_le_bytes()); // e_phoff
    e.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
    e.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    e.extend_from_slice(&(EHDR_SIZE as u16).to_le_bytes());
    e.extend_from_slice(&(PHDR_SIZE as u16).to_le_bytes());
    e.extend_from_slice(&1u16.to_le_bytes()); // e_phnum
    e.extend_from_slice(&64u16.to_le_bytes()); // e_shentsize
    e.extend_from_slice(&0u16.to_le_bytes()); // e_shnum
    e.extend_from_slice(&0u16.to_le_bytes()); // e_shstrndx
    e.extend_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    e.extend_from_slice(&5u32.to_le_bytes()); // PF_R | PF_X
    e.extend_from_slice(&0u64.to_le_bytes()); // p_offset
    e.extend_from_slice(&BASE.to_le_bytes()); // p_vaddr
    e.extend_from_slice(&BASE.to_le_bytes()); // p_paddr
    e.extend_from_slice(&total.to_le_bytes()); // p_filesz
    e.extend_from_slice(&total.to_le_bytes()); // p_memsz
    e.extend_from_slice(&0x1_0000u64.to_le_bytes()); // p_align (fits 64 KiB pages)
    debug_assert_eq!(e.len(), CODE_OFFSET);
    e.extend(code);
    e
}

/// The pause image as an OCI-layout tarball for this machine, or `None` on an architecture we
/// have no `/pause` for.
pub fn image_tarball(name: &str) -> Option<Result<Vec<u8>, ArchiveError>> {
    let arch = Arch::host()?;
    let mut layer = TarWriter::new();
    layer.file("pause", &pause_elf(arch), 0o755);
    let config = serde_json::json!({
        "config": {
            "Entrypoint": ["/pause"],
            "WorkingDir": "/",
            "Labels": {"io.k3rs.image": "pause"},
        },
    });
    Some(build_oci_layout(name, &[layer.finish()], config))
}

/// Labels that keep the sandbox image out of image garbage collection (the CRI plugin's
/// convention for pinned images).
pub fn image_labels() -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert("io.cri-containerd.pinned".into(), "pinned".into());
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elf_headers_are_sane() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let elf = pause_elf(arch);
            assert!(elf.len() < 300, "{arch:?}: {} bytes", elf.len());
            assert_eq!(&elf[..4], b"\x7fELF");
            assert_eq!(elf[4], 2, "ELFCLASS64");
            assert_eq!(u16::from_le_bytes([elf[18], elf[19]]), arch.e_machine());
            let entry = u64::from_le_bytes(elf[24..32].try_into().unwrap());
            assert_eq!(entry, BASE + CODE_OFFSET as u64);
            let filesz = u64::from_le_bytes(elf[96..104].try_into().unwrap());
            assert_eq!(filesz, elf.len() as u64);
        }
    }

    #[test]
    fn aarch64_encodings_match_the_reference_manual() {
        // Well-known encodings: `mov x8, #93`, `svc #0`, `b .`, `adr x1, .+88`.
        assert_eq!(a64_movz(8, 93), 0xd280_0ba8);
        assert_eq!(A64_SVC0, 0xd400_0001);
        assert_eq!(a64_b(0), 0x1400_0000);
        assert_eq!(a64_b(-28), 0x17ff_fff9);
        assert_eq!(a64_adr(1, 88), 0x1000_02c1);
        assert_eq!(a64_adr(0, 1), 0x3000_0000);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x86_64_pause_runs_blocks_and_exits_on_sigterm() {
        use std::os::unix::fs::PermissionsExt;
        use std::time::{Duration, Instant};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pause");
        std::fs::write(&path, pause_elf(Arch::X86_64)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        for signal in [libc::SIGTERM, libc::SIGINT] {
            let mut child = std::process::Command::new(&path)
                .spawn()
                .expect("run /pause");
            std::thread::sleep(Duration::from_millis(200));
            assert!(
                child.try_wait().unwrap().is_none(),
                "pause exited by itself"
            );
            // SAFETY: kill(2) on our own child's pid.
            assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
            let started = Instant::now();
            let status = loop {
                if let Some(s) = child.try_wait().unwrap() {
                    break s;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "pause ignored {signal}"
                );
                std::thread::sleep(Duration::from_millis(10));
            };
            // Exit code 0 (not "killed by signal") proves our handler ran.
            assert_eq!(status.code(), Some(0), "{status:?}");
        }
    }

    #[test]
    fn image_tarball_parses() {
        let Some(tar) = image_tarball(DEFAULT_PAUSE_IMAGE) else {
            return; // no /pause for this architecture: nothing to build
        };
        let archive =
            super::super::images::ImageArchive::open(Box::new(std::io::Cursor::new(tar.unwrap())))
                .unwrap();
        assert_eq!(archive.images()[0].name, DEFAULT_PAUSE_IMAGE);
        assert!(archive.images()[0].unpack.is_some());
    }
}
