//! btl-rc.
