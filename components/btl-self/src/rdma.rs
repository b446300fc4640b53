//! Registered regions and the memcpy GET/PUT over them: the only unsafe code of btl-self.
#![allow(unsafe_code)]

use rmca_framework::btl::{MemAccess, RemoteSegment, SendError};
use rmca_framework::buffer::UserBuf;

/// The memory registered with this module; a slot's index is its handle.
#[derive(Debug, Default)]
pub(crate) struct Regions {
    slots: Vec<Option<(UserBuf, MemAccess)>>,
    free: Vec<usize>,
}

impl Regions {
    pub(crate) fn insert(&mut self, buf: UserBuf, access: MemAccess) -> u64 {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some((buf, access));
                i as u64
            }
            None => {
                self.slots.push(Some((buf, access)));
                (self.slots.len() - 1) as u64
            }
        }
    }

    pub(crate) fn remove(&mut self, handle: u64) {
        let i = handle as usize;
        if self.slots.get(i).is_some_and(Option::is_some) {
            self.slots[i] = None;
            self.free.push(i);
        }
    }

    /// The registered buffer `remote` lies in, sliced to exactly `remote`, if its key names a
    /// live registration that covers it with the wanted right.
    fn resolve(&self, remote: &RemoteSegment, write: bool) -> Result<UserBuf, SendError> {
        let malformed = SendError::Unsupported("malformed remote key (expected 8 bytes)");
        let mut r = rmca_framework::wire::Reader::new(&remote.remote_key);
        let key = r.u64().map_err(|_| malformed.clone())?;
        if r.remaining() != 0 {
            return Err(malformed);
        }
        let (buf, access) =
            self.slots
                .get(key as usize)
                .and_then(|s| *s)
                .ok_or(SendError::Unsupported(
                    "remote key names no live registration",
                ))?;
        if (write && !access.remote_write) || (!write && !access.remote_read) {
            return Err(SendError::Unsupported(
                "registration lacks the access right",
            ));
        }
        let start = usize::try_from(remote.addr)
            .ok()
            .and_then(|a| a.checked_sub(buf.addr()));
        match start {
            Some(off)
                if off
                    .checked_add(remote.len)
                    .is_some_and(|end| end <= buf.len()) =>
            {
                if write && !buf.is_writable() {
                    return Err(SendError::Unsupported("registered memory is read-only"));
                }
                Ok(buf.slice(off, remote.len))
            }
            _ => Err(SendError::Unsupported(
                "remote segment outside its registration",
            )),
        }
    }

    /// Copy `remote` (our own registered memory) into `local`.
    pub(crate) fn get(&self, local: UserBuf, remote: &RemoteSegment) -> Result<(), SendError> {
        if local.len() > remote.len {
            return Err(SendError::Unsupported("get longer than the remote segment"));
        }
        let src = self.resolve(remote, false)?.slice(0, local.len());
        if local.is_empty() {
            return Ok(());
        }
        if !local.is_writable() {
            return Err(SendError::Unsupported("get into read-only memory"));
        }
        // SAFETY: `src` lies inside a region registered by this process, whose owner keeps it
        // valid until deregistration (the UserBuf contract); `local` is a writable UserBuf of
        // `local.len()` bytes. `copy` (not `copy_nonoverlapping`) tolerates a self-overlap.
        unsafe { std::ptr::copy(src.as_ptr(), local.as_ptr(), local.len()) };
        Ok(())
    }

    /// Copy `local` into `remote` (our own registered memory).
    pub(crate) fn put(&self, local: UserBuf, remote: &RemoteSegment) -> Result<(), SendError> {
        if local.len() > remote.len {
            return Err(SendError::Unsupported("put longer than the remote segment"));
        }
        let dst = self.resolve(remote, true)?.slice(0, local.len());
        if local.is_empty() {
            return Ok(());
        }
        // SAFETY: `dst` lies inside a writable region registered by this process with
        // remote_write (checked in resolve), valid until deregistration; `local` is readable for
        // `local.len()` bytes per the UserBuf contract.
        unsafe { std::ptr::copy(local.as_ptr(), dst.as_ptr(), local.len()) };
        Ok(())
    }
}
