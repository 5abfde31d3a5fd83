//! The commands carried in raft log entries and the results of applying them.
//!
//! Encoding is a small hand-written binary format (tag byte, then length-prefixed
//! fields) so the log is compact and decoding a damaged entry fails cleanly.

use super::KeyValue;
use super::error::{Result, StoreError};

/// Format tag written first in every command; bump when the layout changes.
const COMMAND_FORMAT: u8 = 1;

/// A state-machine command, as replicated through raft.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    Create {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Update {
        key: Vec<u8>,
        value: Vec<u8>,
        expected_mod_revision: i64,
    },
    Delete {
        key: Vec<u8>,
        expected_mod_revision: Option<i64>,
    },
    Compact {
        revision: i64,
    },
    /// Records a member's name and peer URL (the raft membership itself changes through
    /// conf-change entries).
    SetMember {
        id: u64,
        name: String,
        peer_url: String,
    },
}

/// The successful result of applying a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Applied {
    Put(KeyValue),
    Deleted { prev: KeyValue, revision: i64 },
    Compacted,
    MemberSet,
    ConfChanged,
}

impl Command {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.payload_len());
        out.push(COMMAND_FORMAT);
        match self {
            Command::Create { key, value } => {
                out.push(1);
                put_bytes(&mut out, key);
                put_bytes(&mut out, value);
            }
            Command::Update {
                key,
                value,
                expected_mod_revision,
            } => {
                out.push(2);
                put_bytes(&mut out, key);
                put_bytes(&mut out, value);
                out.extend_from_slice(&expected_mod_revision.to_le_bytes());
            }
            Command::Delete {
                key,
                expected_mod_revision,
            } => {
                out.push(3);
                put_bytes(&mut out, key);
                match expected_mod_revision {
                    Some(rev) => {
                        out.push(1);
                        out.extend_from_slice(&rev.to_le_bytes());
                    }
                    None => out.push(0),
                }
            }
            Command::Compact { revision } => {
                out.push(4);
                out.extend_from_slice(&revision.to_le_bytes());
            }
            Command::SetMember { id, name, peer_url } => {
                out.push(5);
                out.extend_from_slice(&id.to_le_bytes());
                put_bytes(&mut out, name.as_bytes());
                put_bytes(&mut out, peer_url.as_bytes());
            }
        }
        out
    }

    pub(crate) fn decode(data: &[u8]) -> Result<Command> {
        let mut r = Reader { data, pos: 0 };
        let format = r.u8()?;
        if format != COMMAND_FORMAT {
            return Err(StoreError::Incompatible {
                path: Default::default(),
                detail: format!(
                    "raft entry has command format {format}, this k3rs understands {COMMAND_FORMAT}; upgrade k3rs"
                ),
            });
        }
        let command = match r.u8()? {
            1 => Command::Create {
                key: r.bytes()?,
                value: r.bytes()?,
            },
            2 => Command::Update {
                key: r.bytes()?,
                value: r.bytes()?,
                expected_mod_revision: r.i64()?,
            },
            3 => {
                let key = r.bytes()?;
                let expected_mod_revision = match r.u8()? {
                    0 => None,
                    1 => Some(r.i64()?),
                    other => return Err(malformed(format!("bad option tag {other}"))),
                };
                Command::Delete {
                    key,
                    expected_mod_revision,
                }
            }
            4 => Command::Compact { revision: r.i64()? },
            5 => Command::SetMember {
                id: r.i64()? as u64,
                name: String::from_utf8(r.bytes()?)
                    .map_err(|_| malformed("member name is not UTF-8".into()))?,
                peer_url: String::from_utf8(r.bytes()?)
                    .map_err(|_| malformed("peer URL is not UTF-8".into()))?,
            },
            other => return Err(malformed(format!("unknown command tag {other}"))),
        };
        if r.pos != data.len() {
            return Err(malformed("trailing bytes".into()));
        }
        Ok(command)
    }

    fn payload_len(&self) -> usize {
        match self {
            Command::Create { key, value } | Command::Update { key, value, .. } => {
                key.len() + value.len()
            }
            Command::Delete { key, .. } => key.len(),
            Command::Compact { .. } => 0,
            Command::SetMember { name, peer_url, .. } => name.len() + peer_url.len(),
        }
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // Lengths are u32: values are bounded far below 4 GiB by the API server's body limit.
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn malformed(detail: String) -> StoreError {
    StoreError::InvalidArgument(format!("malformed raft command: {detail}"))
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.data.len());
        match end {
            Some(end) => {
                let slice = &self.data[self.pos..end];
                self.pos = end;
                Ok(slice)
            }
            None => Err(malformed("truncated".into())),
        }
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn i64(&mut self) -> Result<i64> {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(self.take(8)?);
        Ok(i64::from_le_bytes(buf))
    }

    fn bytes(&mut self) -> Result<Vec<u8>> {
        let mut len = [0u8; 4];
        len.copy_from_slice(self.take(4)?);
        Ok(self.take(u32::from_le_bytes(len) as usize)?.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip() {
        let commands = [
            Command::Create {
                key: b"/a".to_vec(),
                value: vec![1, 2, 3],
            },
            Command::Update {
                key: b"/b".to_vec(),
                value: vec![],
                expected_mod_revision: 42,
            },
            Command::Delete {
                key: b"/c".to_vec(),
                expected_mod_revision: None,
            },
            Command::Delete {
                key: b"/c".to_vec(),
                expected_mod_revision: Some(-1),
            },
            Command::Compact { revision: 7 },
            Command::SetMember {
                id: u64::MAX - 1,
                name: "server-2".into(),
                peer_url: "https://127.0.1.2:2380".into(),
            },
        ];
        for command in commands {
            assert_eq!(Command::decode(&command.encode()).unwrap(), command);
        }
    }

    #[test]
    fn damaged_commands_are_rejected() {
        let encoded = Command::Create {
            key: b"/a".to_vec(),
            value: vec![9; 10],
        }
        .encode();
        for cut in 0..encoded.len() {
            assert!(
                Command::decode(&encoded[..cut]).is_err(),
                "prefix of {cut} bytes decoded"
            );
        }
        let mut extra = encoded.clone();
        extra.push(0);
        assert!(Command::decode(&extra).is_err());
        let mut future = encoded;
        future[0] = 99;
        assert!(matches!(
            Command::decode(&future),
            Err(StoreError::Incompatible { .. })
        ));
    }
}
