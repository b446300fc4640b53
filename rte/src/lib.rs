//! Runtime environment of rmca: PMI-1/PMI-2 clients, the modex, job identity.
