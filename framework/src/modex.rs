//! The modex: business cards published by components and read by their peers after a fence.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use thiserror::Error;

use crate::rank::Rank;

/// Errors of the modex.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ModexError {
    /// The runtime environment (PMI) failed.
    #[error("modex: {0}")]
    Rte(String),
    /// A key was published twice by one process.
    #[error("modex key '{0}' published twice")]
    Duplicate(String),
}

/// Read access to the peers' business cards after the fence.
pub trait ModexRead {
    /// The card `rank` published under `key` (namespaced by the caller, e.g. `"btl.shm"`).
    fn get(&self, rank: Rank, key: &str) -> Result<Option<Vec<u8>>, ModexError>;
}

/// Write access to this process's business cards, before the fence.
pub trait ModexWrite {
    /// Publish `value` under `key`.
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), ModexError>;
}

type Cards = HashMap<(Rank, String), Vec<u8>>;

/// An in-process modex shared by simulated ranks: for tests that run several "ranks" in one
/// process, and for singletons.
#[derive(Clone, Debug, Default)]
pub struct LocalModex {
    cards: Arc<Mutex<Cards>>,
}

impl LocalModex {
    /// An empty modex.
    pub fn new() -> Self {
        Self::default()
    }

    /// A writer publishing as `rank`.
    pub fn writer(&self, rank: Rank) -> LocalModexWriter {
        LocalModexWriter {
            modex: self.clone(),
            rank,
        }
    }
}

/// Publishes into a [`LocalModex`] as one rank.
#[derive(Clone, Debug)]
pub struct LocalModexWriter {
    modex: LocalModex,
    rank: Rank,
}

impl ModexWrite for LocalModexWriter {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), ModexError> {
        let mut cards = self
            .modex
            .cards
            .lock()
            .map_err(|_| ModexError::Rte("poisoned".into()))?;
        if cards
            .insert((self.rank, key.to_owned()), value.to_vec())
            .is_some()
        {
            return Err(ModexError::Duplicate(key.to_owned()));
        }
        Ok(())
    }
}

impl ModexRead for LocalModex {
    fn get(&self, rank: Rank, key: &str) -> Result<Option<Vec<u8>>, ModexError> {
        let cards = self
            .cards
            .lock()
            .map_err(|_| ModexError::Rte("poisoned".into()))?;
        Ok(cards.get(&(rank, key.to_owned())).cloned())
    }
}
