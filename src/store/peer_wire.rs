//! The bytes of raft messages between members: encoding, and decoding of what a peer sent.
//!
//! raft-rs 0.7's messages are `protobuf` 2.x types, and that decoder recurses without bound
//! on nested groups in unknown fields (RUSTSEC-2024-0437): a peer — or anyone who got hold
//! of a peer certificate — could overflow the receiver's stack. raft messages never contain
//! groups, so before protobuf sees a byte, [`decode_message`] walks the wire format with the
//! schema of `eraftpb` (the nesting is at most five deep and fixed), refuses the group wire
//! types anywhere protobuf would parse, and checks every length against what is left. Conf
//! change entries (whose data the apply loop decodes) are walked with their schemas too.
//! Only bytes that pass reach `protobuf::Message::parse_from_bytes`.
//!
//! Owns this codec only; framing, TLS and queues are the transport's.

use protobuf::Message as _;
use raft::eraftpb::Message;

/// Why a peer's bytes were refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PeerWireError {
    #[error("malformed raft message: {0}")]
    Malformed(&'static str),
    #[error("raft message refused: {0}")]
    Refused(&'static str),
    #[error("raft message does not decode: {0}")]
    Decode(String),
}

/// The `eraftpb` messages whose fields protobuf parses as nested messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Schema {
    Message,
    Entry,
    Snapshot,
    SnapshotMetadata,
    ConfState,
    ConfChange,
    ConfChangeV2,
    ConfChangeSingle,
}

impl Schema {
    /// The schema of a length-delimited field that holds a nested message, if it does.
    fn nested(self, field: u64) -> Option<Schema> {
        match (self, field) {
            (Schema::Message, 7) => Some(Schema::Entry),
            (Schema::Message, 9) => Some(Schema::Snapshot),
            (Schema::Snapshot, 2) => Some(Schema::SnapshotMetadata),
            (Schema::SnapshotMetadata, 1) => Some(Schema::ConfState),
            (Schema::ConfChangeV2, 2) => Some(Schema::ConfChangeSingle),
            _ => None,
        }
    }
}

const ENTRY_TYPE_FIELD: u64 = 1;
const ENTRY_DATA_FIELD: u64 = 4;
const ENTRY_CONF_CHANGE: u64 = 1;
const ENTRY_CONF_CHANGE_V2: u64 = 2;

/// Nesting deeper than the schema allows cannot happen with valid input; the walk is
/// bounded by the schema, this is a second fence.
const MAX_DEPTH: usize = 8;

fn read_varint(bytes: &[u8], pos: &mut usize) -> Result<u64, PeerWireError> {
    let mut value = 0u64;
    for shift in 0..10 {
        let byte = *bytes
            .get(*pos)
            .ok_or(PeerWireError::Malformed("truncated varint"))?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << (7 * shift);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(PeerWireError::Malformed("varint longer than 10 bytes"))
}

fn take<'a>(bytes: &'a [u8], pos: &mut usize, len: u64) -> Result<&'a [u8], PeerWireError> {
    let len = usize::try_from(len).map_err(|_| PeerWireError::Malformed("length too large"))?;
    let end = pos
        .checked_add(len)
        .filter(|end| *end <= bytes.len())
        .ok_or(PeerWireError::Malformed("length beyond the end"))?;
    let slice = &bytes[*pos..end];
    *pos = end;
    Ok(slice)
}

/// Walks one message of `schema`; returns the entry type and data when it is an Entry.
fn walk(bytes: &[u8], schema: Schema, depth: usize) -> Result<(), PeerWireError> {
    if depth > MAX_DEPTH {
        return Err(PeerWireError::Refused("nested too deep"));
    }
    let mut pos = 0;
    let mut entry_type = 0u64;
    let mut entry_data: Option<&[u8]> = None;
    while pos < bytes.len() {
        let key = read_varint(bytes, &mut pos)?;
        let field = key >> 3;
        if field == 0 {
            return Err(PeerWireError::Malformed("field number 0"));
        }
        match key & 7 {
            0 => {
                let value = read_varint(bytes, &mut pos)?;
                if schema == Schema::Entry && field == ENTRY_TYPE_FIELD {
                    entry_type = value;
                }
            }
            1 => {
                take(bytes, &mut pos, 8)?;
            }
            2 => {
                let len = read_varint(bytes, &mut pos)?;
                let inner = take(bytes, &mut pos, len)?;
                if let Some(nested) = schema.nested(field) {
                    walk(inner, nested, depth + 1)?;
                } else if schema == Schema::Entry && field == ENTRY_DATA_FIELD {
                    // The last occurrence wins, as in protobuf.
                    entry_data = Some(inner);
                }
            }
            5 => {
                take(bytes, &mut pos, 4)?;
            }
            3 | 4 => return Err(PeerWireError::Refused("protobuf groups are not accepted")),
            _ => return Err(PeerWireError::Malformed("unknown wire type")),
        }
    }
    if schema == Schema::Entry
        && let Some(data) = entry_data
    {
        match entry_type {
            ENTRY_CONF_CHANGE => walk(data, Schema::ConfChange, depth + 1)?,
            ENTRY_CONF_CHANGE_V2 => walk(data, Schema::ConfChangeV2, depth + 1)?,
            _ => {}
        }
    }
    Ok(())
}

/// Checks and decodes a raft message a peer sent.
pub fn decode_message(bytes: &[u8]) -> Result<Message, PeerWireError> {
    walk(bytes, Schema::Message, 0)?;
    Message::parse_from_bytes(bytes).map_err(|e| PeerWireError::Decode(e.to_string()))
}

/// Encodes a raft message for a peer.
pub fn encode_message(message: &Message) -> Vec<u8> {
    // Writing a message with every field set cannot fail; an empty buffer would be
    // refused by the receiver, never misread.
    message.write_to_bytes().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::eraftpb::{
        ConfChangeSingle, ConfChangeType, ConfChangeV2, ConfState, Entry, EntryType, MessageType,
        Snapshot,
    };

    fn full_message() -> Message {
        let mut cc = ConfChangeV2::default();
        let mut single = ConfChangeSingle::default();
        single.set_change_type(ConfChangeType::AddLearnerNode);
        single.node_id = 7;
        cc.mut_changes().push(single);
        cc.context = b"server-3".to_vec().into();
        let mut conf_entry = Entry::default();
        conf_entry.set_entry_type(EntryType::EntryConfChangeV2);
        conf_entry.index = 11;
        conf_entry.term = 2;
        conf_entry.data = cc.write_to_bytes().expect("encode").into();
        // Normal entry data is opaque: bytes that look like a group must pass.
        let normal = Entry {
            index: 12,
            term: 2,
            data: vec![0x0b, 0x0c, 0xff, 0x03].into(),
            ..Default::default()
        };
        let mut snapshot = Snapshot {
            data: vec![0x0b; 5].into(),
            ..Default::default()
        };
        let conf = ConfState {
            voters: vec![1, 2, 3],
            learners: vec![7],
            ..Default::default()
        };
        snapshot.mut_metadata().set_conf_state(conf);
        snapshot.mut_metadata().index = 10;
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.to = 2;
        m.from = 1;
        m.term = 2;
        m.index = 10;
        m.commit = 9;
        m.set_entries(vec![conf_entry, normal].into());
        m.set_snapshot(snapshot);
        m.context = vec![0x13, 0x14].into();
        m
    }

    #[test]
    fn every_field_round_trips() {
        let m = full_message();
        let decoded = decode_message(&encode_message(&m)).expect("decode");
        assert_eq!(decoded, m);
        assert_eq!(
            decode_message(&[]).expect("empty is a default message"),
            Message::default()
        );
    }

    /// The bytes protobuf 2 recursed on without bound: a deep nest of start-group tags.
    fn nested_groups(depth: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        for _ in 0..depth {
            bytes.push((99 << 3 | 3) as u8 | 0x80);
            bytes.push(((99 << 3) >> 7) as u8);
        }
        bytes
    }

    #[test]
    fn groups_are_refused_wherever_protobuf_would_parse() {
        // At the top level: 100,000 nested groups would overflow protobuf's stack.
        let err = decode_message(&nested_groups(100_000)).expect_err("groups");
        assert_eq!(
            err,
            PeerWireError::Refused("protobuf groups are not accepted")
        );
        // Inside an entry, a snapshot's metadata, and a conf change's data.
        let entry = Entry {
            index: 1,
            ..Default::default()
        };
        let mut entry_bytes = entry.write_to_bytes().expect("encode");
        entry_bytes.extend(nested_groups(3));
        let mut outer = Vec::new();
        outer.push(7 << 3 | 2);
        outer.push(entry_bytes.len() as u8);
        outer.extend(&entry_bytes);
        assert!(matches!(
            decode_message(&outer),
            Err(PeerWireError::Refused(_))
        ));

        let mut cc_entry = Entry::default();
        cc_entry.set_entry_type(EntryType::EntryConfChangeV2);
        cc_entry.data = nested_groups(3).into();
        let mut m = Message::default();
        m.set_entries(vec![cc_entry].into());
        assert!(matches!(
            decode_message(&encode_message(&m)),
            Err(PeerWireError::Refused(_))
        ));
    }

    #[test]
    fn truncated_and_overlong_input_is_malformed() {
        let bytes = encode_message(&full_message());
        for cut in 1..bytes.len() {
            // Every prefix either decodes (a cut between fields) or is refused; none panics.
            let _ = decode_message(&bytes[..cut]);
        }
        assert!(matches!(
            decode_message(&[0x3a, 0xff, 0xff, 0xff, 0xff, 0x0f]),
            Err(PeerWireError::Malformed(_))
        ));
        assert!(matches!(
            decode_message(
                &[0x08; 1]
                    .iter()
                    .chain(&[0xff; 11])
                    .copied()
                    .collect::<Vec<_>>()
            ),
            Err(PeerWireError::Malformed(_))
        ));
        assert!(matches!(
            decode_message(&[0x0e, 0x00]),
            Err(PeerWireError::Malformed(_))
        ));
    }
}
