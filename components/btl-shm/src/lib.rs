//! btl-shm: shared memory between the processes of a node.
