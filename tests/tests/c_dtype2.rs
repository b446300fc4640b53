//! Derived datatypes through the C interface, second part (`tests/c/dtype2.c`): envelopes
//! and contents of every constructor and their large-count forms (each type rebuilt from
//! its contents packs the same bytes), names, `MPI_Type_create_darray` against hand-made
//! layouts on a 2 x 2 grid, the value-index pair types' sizes (no padding counted),
//! commit of a predefined type, negative extents through send and receive, a 135 M
//! element vector, external32 packing, status element counts, type matching and bad
//! input, at 1, 2 and 3 ranks in every configuration.

use rmca_tests::c::every_config;

#[test]
fn contents_darray_pairs_negative_extents_huge_vectors_external32_and_bad_input() {
    every_config("dtype2");
}
