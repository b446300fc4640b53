//! btl-tcp plugin.
