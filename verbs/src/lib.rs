//! Verbs layer of rmca: one ibverbs-shaped API over a real provider (rdma-sys) and a software provider over sockets.
