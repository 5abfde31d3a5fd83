//! Vectors for `workloads` validation.
