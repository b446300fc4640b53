//! pml-dr: the data-reliability PML: acknowledged virtual fragments, checksums, retransmission and BTL failover.
