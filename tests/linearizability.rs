//! The linearizability checker's own tests (the checker is `support/linearizability.rs`;
//! the HA tests and `cargo bench --bench ha` check their histories with it). A checker
//! that accepted everything would make those tests unable to fail, so it is tested here
//! on histories known to be linearizable and on ones known not to be.

#[path = "support/linearizability.rs"]
mod linearizability;
