//! The seam between the raft group and the network. The driver hands every outgoing
//! raft message (appends, votes, heartbeats, snapshots) to a `Transport`; incoming
//! ones arrive through `Store::receive_raft_message`. A one-member group has no
//! peers, so `NoPeers` is the only transport until servers can join.

use raft::eraftpb::Message;

/// Delivers raft messages to other members. Must not block: queue and return.
pub trait Transport: Send {
    fn send(&mut self, messages: Vec<Message>);
}

/// The transport of a one-member group: there is nobody to talk to.
#[derive(Debug, Default)]
pub struct NoPeers;

impl Transport for NoPeers {
    fn send(&mut self, messages: Vec<Message>) {
        if !messages.is_empty() {
            tracing::debug!(
                count = messages.len(),
                "raft messages for peers dropped: no peers configured"
            );
        }
    }
}
