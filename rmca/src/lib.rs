//! rmca: one import for applications.
