//! btl-self: a rank sending to itself.
