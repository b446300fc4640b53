//! rmca-info: lists components and MCA parameters.
