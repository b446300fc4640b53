//! btl-ud.
