//! rmca-run: the job launcher and PMI server.
