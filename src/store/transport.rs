//! The seam between the raft group and the network. The driver hands every outgoing
//! raft message (appends, votes, heartbeats, snapshots) to a `Transport`; incoming
//! ones arrive through `Store::receive_raft_message`. What the transport learns about
//! delivery goes back to raft through [`PeerFeedback`]. A one-member group uses
//! `NoPeers`; a group of servers uses [`super::peers::PeerNetwork`].

use std::net::SocketAddr;
use std::sync::mpsc;

use raft::eraftpb::Message;

use super::Input;

/// Delivers raft messages to other members. Must not block: queue and return.
pub trait Transport: Send {
    fn send(&mut self, messages: Vec<Message>);

    /// Called once, before the first `send`, with the way back to raft.
    fn attach(&mut self, _feedback: PeerFeedback) {}

    /// The other members' peer addresses (never this member's own: the driver, which
    /// alone knows this member's id for sure, leaves it out), after every membership
    /// change and at start.
    fn set_peers(&mut self, _peers: &[(u64, SocketAddr)]) {}

    /// The id of the cluster this member belongs to, once known (sent to peers, which
    /// refuse members of another cluster).
    fn set_cluster_id(&mut self, _id: Option<super::ClusterId>) {}
}

/// What a transport tells raft about delivery: raft-rs must hear that a peer is
/// unreachable (to stop streaming to it) and how every snapshot send ended (or the
/// follower stays in snapshot state until the next election).
#[derive(Clone)]
pub struct PeerFeedback {
    inputs: mpsc::Sender<Input>,
}

impl PeerFeedback {
    pub(crate) fn new(inputs: mpsc::Sender<Input>) -> PeerFeedback {
        PeerFeedback { inputs }
    }

    /// Nothing reached `peer`; `snapshot` if a snapshot was among what was lost.
    pub fn unreachable(&self, peer: u64, snapshot: bool) {
        let _ = self.inputs.send(Input::Unreachable { peer, snapshot });
    }

    /// A snapshot was written out to `peer` completely.
    pub fn snapshot_finished(&self, peer: u64) {
        let _ = self.inputs.send(Input::SnapshotSent { peer });
    }

    /// `peer` answered that it belongs to another cluster than this member.
    pub fn other_cluster(&self, peer: u64) {
        let _ = self.inputs.send(Input::OtherCluster { told_by: peer });
    }

    /// `peer` answered that this member was removed from the group.
    pub fn removed_from_group(&self, peer: u64) {
        let _ = self.inputs.send(Input::RemovedFromGroup { told_by: peer });
    }
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
