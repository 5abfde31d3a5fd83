//! The server as one member of a cluster, and the admin operations on its datastore.
//!
//! Owns: the endpoints servers use to join and form the raft group ([`server_join`]),
//! the endpoints a joining agent uses before it has a certificate ([`node_join`]), this
//! server's member labels on its Node ([`member_node`]), the `kubernetes` Service's
//! endpoints ([`master_endpoints`]), the bootstrap data kept in the datastore
//! ([`bootstrap_copy`]), datastore snapshots ([`snapshots`]) and the running server's side
//! of `k3rs secrets-encrypt` ([`encryption_admin`]).
//!
//! May not touch: the REST handlers' internals beyond their write path (`Prepared`
//! writes, so validation, watches and managedFields apply); the store only through
//! `storage::kv::KvStore` or the store's own membership and snapshot primitives.

pub mod bootstrap_copy;
pub mod encryption_admin;
pub mod master_endpoints;
pub mod member_node;
pub mod node_join;
pub mod server_join;
pub mod snapshots;
