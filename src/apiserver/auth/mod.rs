//! Who is asking, what they may do, and the record of what they did.
//!
//! Owns: authentication by client certificate or bearer token ([`authn`]), the
//! service-account tokens it verifies and issues ([`sa_token`]), authorization (RBAC, the
//! Node authorizer, impersonation and the admin-only check; [`authz`]), the join
//! credentials of servers and agents, which open only the join endpoints
//! ([`join_tokens`]), and the audit log ([`audit`]).
//!
//! May not touch: the raw store except through `storage::kv::KvStore` (the join-token
//! hashes and the objects tokens name); writes of API objects go through the handlers'
//! create path; it serves no endpoint of its own but the TokenRequest subresource.

pub mod audit;
pub mod authn;
pub mod authz;
pub mod join_tokens;
pub mod sa_token;
