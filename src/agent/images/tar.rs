//! Just enough of the tar format for image archives: an index of the regular files in a tar
//! (ustar, GNU long names, pax `path`/`size` records; base-256 sizes) so blobs can be read by
//! offset without extracting, and a writer for the archives k3rs builds itself (pause image,
//! test images).
//!
//! No file system access beyond the `Read + Seek` it is given; layer *contents* are never
//! interpreted here (containerd's diff service applies layers).

use std::collections::BTreeMap;
use std::io::{self, Read, Seek, SeekFrom};

const BLOCK: u64 = 512;

#[derive(Debug, thiserror::Error)]
pub enum TarError {
    #[error("reading the tar: {0}")]
    Io(#[from] io::Error),
    #[error("corrupt tar header at offset {offset}: {reason}")]
    Corrupt { offset: u64, reason: String },
}

/// Where one regular file's bytes are inside the tar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub offset: u64,
    pub size: u64,
}

/// Regular files by normalised path (no leading `./` or `/`). Symlinks are resolved one level,
/// enough for docker-archive's `layer.tar -> ../<id>/layer.tar` links.
#[derive(Debug, Default)]
pub struct TarIndex {
    pub files: BTreeMap<String, Entry>,
}

fn normalise(path: &str) -> String {
    let mut p = path.trim_start_matches("./").trim_start_matches('/');
    while let Some(rest) = p.strip_prefix("./") {
        p = rest;
    }
    p.trim_end_matches('/').to_string()
}

fn cstr(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

fn parse_number(field: &[u8], offset: u64) -> Result<u64, TarError> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        // GNU base-256: big-endian binary after the marker bit.
        let mut value: u64 = u64::from(field[0] & 0x7f);
        for &b in &field[1..] {
            value = value
                .checked_mul(256)
                .and_then(|v| v.checked_add(u64::from(b)))
                .ok_or_else(|| TarError::Corrupt {
                    offset,
                    reason: "size overflows".into(),
                })?;
        }
        return Ok(value);
    }
    let text = cstr(field);
    let text = text.trim_matches(|c: char| c == ' ' || c == '\0');
    if text.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(text, 8).map_err(|_| TarError::Corrupt {
        offset,
        reason: format!("bad octal number {text:?}"),
    })
}

fn checksum_ok(header: &[u8; 512]) -> bool {
    let stored = cstr(&header[148..156]);
    let Ok(stored) = u32::from_str_radix(stored.trim_matches(|c: char| c == ' ' || c == '\0'), 8)
    else {
        return false;
    };
    let sum: u32 = header
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                32
            } else {
                u32::from(b)
            }
        })
        .sum();
    sum == stored
}

fn read_exact_at<R: Read + Seek>(r: &mut R, offset: u64, len: u64) -> Result<Vec<u8>, TarError> {
    r.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    r.take(len).read_to_end(&mut buf)?;
    if buf.len() as u64 != len {
        return Err(TarError::Corrupt {
            offset,
            reason: "unexpected end of archive".into(),
        });
    }
    Ok(buf)
}

/// pax extended header records: `"<len> key=value\n"`.
fn parse_pax(data: &[u8]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = data;
    while !rest.is_empty() {
        let Some(space) = rest.iter().position(|&b| b == b' ') else {
            break;
        };
        let Some(len) = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
        else {
            break;
        };
        if len <= space || len > rest.len() {
            break;
        }
        let record = &rest[space + 1..len];
        let record = record.strip_suffix(b"\n").unwrap_or(record);
        if let Some(eq) = record.iter().position(|&b| b == b'=') {
            out.insert(
                String::from_utf8_lossy(&record[..eq]).into_owned(),
                String::from_utf8_lossy(&record[eq + 1..]).into_owned(),
            );
        }
        rest = &rest[len..];
    }
    out
}

impl TarIndex {
    /// Scans every header of the archive (seeking over file bodies).
    pub fn scan<R: Read + Seek>(r: &mut R) -> Result<TarIndex, TarError> {
        let total = r.seek(SeekFrom::End(0))?;
        let mut index = TarIndex::default();
        let mut links: Vec<(String, String)> = Vec::new();
        let mut offset = 0u64;
        let mut long_name: Option<String> = None;
        let mut long_link: Option<String> = None;
        let mut pax: BTreeMap<String, String> = BTreeMap::new();
        let mut saw_header = false;
        loop {
            if offset + BLOCK > total {
                if saw_header {
                    break; // tolerated: archives truncated right after the last entry's padding
                }
                return Err(TarError::Corrupt {
                    offset,
                    reason: "not a tar archive (too short)".into(),
                });
            }
            r.seek(SeekFrom::Start(offset))?;
            let mut header = [0u8; 512];
            r.read_exact(&mut header)?;
            if header.iter().all(|&b| b == 0) {
                break;
            }
            if !checksum_ok(&header) {
                return Err(TarError::Corrupt {
                    offset,
                    reason: "header checksum mismatch (not a tar archive?)".into(),
                });
            }
            saw_header = true;
            let mut size = parse_number(&header[124..136], offset)?;
            if let Some(s) = pax.get("size").and_then(|s| s.parse().ok()) {
                size = s;
            }
            let typeflag = header[156];
            let data_offset = offset + BLOCK;
            if data_offset + size > total {
                return Err(TarError::Corrupt {
                    offset,
                    reason: format!("entry of {size} bytes runs past the end of the archive"),
                });
            }
            let next = data_offset + size.div_ceil(BLOCK) * BLOCK;
            match typeflag {
                b'L' => {
                    let data = read_exact_at(r, data_offset, size)?;
                    long_name = Some(cstr(&data));
                }
                b'K' => {
                    let data = read_exact_at(r, data_offset, size)?;
                    long_link = Some(cstr(&data));
                }
                b'x' => {
                    let data = read_exact_at(r, data_offset, size)?;
                    pax = parse_pax(&data);
                }
                b'g' => {}
                _ => {
                    let name = if let Some(p) = pax.remove("path") {
                        p
                    } else if let Some(n) = long_name.take() {
                        n
                    } else {
                        let prefix = if &header[257..262] == b"ustar" {
                            cstr(&header[345..500])
                        } else {
                            String::new()
                        };
                        let name = cstr(&header[0..100]);
                        if prefix.is_empty() {
                            name
                        } else {
                            format!("{prefix}/{name}")
                        }
                    };
                    let linkname = pax
                        .remove("linkpath")
                        .or_else(|| long_link.take())
                        .unwrap_or_else(|| cstr(&header[157..257]));
                    let name = normalise(&name);
                    match typeflag {
                        b'0' | 0 | b'7' => {
                            index.files.insert(
                                name,
                                Entry {
                                    offset: data_offset,
                                    size,
                                },
                            );
                        }
                        b'1' => links.push((name, normalise(&linkname))),
                        b'2' => {
                            // Relative to the link's directory.
                            let dir = name.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
                            let mut parts: Vec<&str> =
                                dir.split('/').filter(|p| !p.is_empty()).collect();
                            for part in linkname.split('/') {
                                match part {
                                    "" | "." => {}
                                    ".." => {
                                        parts.pop();
                                    }
                                    p => parts.push(p),
                                }
                            }
                            let target = if linkname.starts_with('/') {
                                normalise(&linkname)
                            } else {
                                parts.join("/")
                            };
                            links.push((name, target));
                        }
                        _ => {}
                    }
                    long_name = None;
                    long_link = None;
                    pax.clear();
                }
            }
            offset = next;
        }
        for (name, target) in links {
            if let Some(entry) = index.files.get(&target).copied() {
                index.files.insert(name, entry);
            }
        }
        Ok(index)
    }

    pub fn read<R: Read + Seek>(&self, r: &mut R, name: &str) -> Result<Option<Vec<u8>>, TarError> {
        match self.files.get(name) {
            Some(e) => read_exact_at(r, e.offset, e.size).map(Some),
            None => Ok(None),
        }
    }
}

/// A tar being built in memory (ustar; names longer than 100 bytes use a GNU `L` record).
#[derive(Default)]
pub struct TarWriter {
    out: Vec<u8>,
}

fn header(name: &str, size: u64, mode: u32, typeflag: u8, linkname: &str) -> [u8; 512] {
    let mut h = [0u8; 512];
    let name_bytes = name.as_bytes();
    let n = name_bytes.len().min(100);
    h[..n].copy_from_slice(&name_bytes[..n]);
    let put = |h: &mut [u8; 512], at: usize, width: usize, value: u64| {
        let s = format!("{value:0w$o}\0", w = width - 1);
        h[at..at + width].copy_from_slice(s.as_bytes());
    };
    put(&mut h, 100, 8, u64::from(mode));
    put(&mut h, 108, 8, 0);
    put(&mut h, 116, 8, 0);
    put(&mut h, 124, 12, size);
    put(&mut h, 136, 12, 0);
    h[156] = typeflag;
    let l = linkname.as_bytes();
    let ln = l.len().min(100);
    h[157..157 + ln].copy_from_slice(&l[..ln]);
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    h
}

impl TarWriter {
    pub fn new() -> TarWriter {
        TarWriter::default()
    }

    fn long_name(&mut self, name: &str) {
        if name.len() > 100 {
            let mut data = name.as_bytes().to_vec();
            data.push(0);
            self.raw("././@LongLink", &data, 0o644, b'L', "");
        }
    }

    fn raw(&mut self, name: &str, data: &[u8], mode: u32, typeflag: u8, linkname: &str) {
        self.out
            .extend_from_slice(&header(name, data.len() as u64, mode, typeflag, linkname));
        self.out.extend_from_slice(data);
        let pad = (BLOCK as usize - data.len() % BLOCK as usize) % BLOCK as usize;
        self.out.extend(std::iter::repeat_n(0u8, pad));
    }

    pub fn file(&mut self, name: &str, data: &[u8], mode: u32) {
        self.long_name(name);
        self.raw(name, data, mode, b'0', "");
    }

    pub fn dir(&mut self, name: &str, mode: u32) {
        let name = format!("{}/", name.trim_end_matches('/'));
        self.long_name(&name);
        self.raw(&name, &[], mode, b'5', "");
    }

    pub fn symlink(&mut self, name: &str, target: &str) {
        if target.len() > 100 {
            let mut data = target.as_bytes().to_vec();
            data.push(0);
            self.raw("././@LongLink", &data, 0o644, b'K', "");
        }
        self.long_name(name);
        self.raw(name, &[], 0o777, b'2', target);
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.out
            .extend(std::iter::repeat_n(0u8, 2 * BLOCK as usize));
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn round_trip_with_long_names_and_links() {
        let long = format!("blobs/sha256/{}", "a".repeat(120));
        let mut w = TarWriter::new();
        w.dir("blobs", 0o755);
        w.file("index.json", b"{}", 0o644);
        w.file(&long, &vec![7u8; 1000], 0o644);
        w.symlink("blobs/alias", &long.replace("blobs/", ""));
        let bytes = w.finish();
        assert_eq!(bytes.len() % 512, 0);
        let mut cur = Cursor::new(bytes);
        let index = TarIndex::scan(&mut cur).unwrap();
        assert_eq!(index.read(&mut cur, "index.json").unwrap().unwrap(), b"{}");
        assert_eq!(
            index.read(&mut cur, &long).unwrap().unwrap(),
            vec![7u8; 1000]
        );
        assert_eq!(index.files["blobs/alias"], index.files[&long]);
        assert!(!index.files.contains_key("blobs"));
    }

    #[test]
    fn pax_path_and_garbage() {
        let mut w = TarWriter::new();
        let record = "30 path=dir/from-pax-name.txt\n";
        assert_eq!(record.len(), 30);
        w.raw("PaxHeaders/x", record.as_bytes(), 0o644, b'x', "");
        w.file("short", b"hello", 0o644);
        let mut cur = Cursor::new(w.finish());
        let index = TarIndex::scan(&mut cur).unwrap();
        assert!(
            index.files.contains_key("dir/from-pax-name.txt"),
            "{index:?}"
        );

        let err = TarIndex::scan(&mut Cursor::new(vec![1u8; 2048])).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
        let err = TarIndex::scan(&mut Cursor::new(vec![1u8; 10])).unwrap_err();
        assert!(err.to_string().contains("too short"), "{err}");
    }

    #[test]
    fn truncated_entry_is_corrupt() {
        let mut w = TarWriter::new();
        w.file("big", &vec![1u8; 4096], 0o644);
        let mut bytes = w.finish();
        bytes.truncate(2048);
        let err = TarIndex::scan(&mut Cursor::new(bytes)).unwrap_err();
        assert!(err.to_string().contains("past the end"), "{err}");
    }

    #[test]
    fn base256_size() {
        let mut field = [0u8; 12];
        field[0] = 0x80;
        field[11] = 0x05;
        field[10] = 0x01;
        assert_eq!(parse_number(&field, 0).unwrap(), 261);
    }
}
