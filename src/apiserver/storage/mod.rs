//! The cluster's objects on top of the store: what is served, how objects are kept,
//! read, watched and merged.
//!
//! Owns: the store with encryption at rest ([`kv`], [`encryption`]), the watch cache
//! that serves lists and watches ([`watchcache`]), the resource registry and custom
//! resources ([`registry`], [`crd`], [`schema`]), object mechanics shared by every
//! handler ([`objects`]), the three patch flavours and server-side apply ([`patch`],
//! [`managed_fields`], [`apply`]) and label and field selectors ([`selectors`]).
//!
//! May not touch: HTTP framing and authorization (`http`, `auth`); the raw store is
//! reached here through [`kv::KvStore`] only.

pub mod apply;
pub mod crd;
pub mod encryption;
pub mod kv;
pub mod managed_fields;
pub mod objects;
pub mod patch;
pub mod registry;
pub mod schema;
pub mod selectors;
pub mod watchcache;
