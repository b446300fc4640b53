//! What a rank gives and takes in a rooted collective (`MPI_Gather`, `MPI_Scatter`), worked
//! out once for the blocking and the non-blocking form: both check their arguments in the
//! same order and stage the same buffers, and differ only in how the collective runs.

use std::ffi::{c_int, c_void};

use super::coll::{apart, blocks_n, in_place, recv_n, root_of, same_block, send_n};
use super::{recv_data_n, send_data_n, RecvData, SendData};
use crate::abi::Handle;
use crate::state::MpiResult;

/// A rank's part in `MPI_Gather` / `MPI_Igather`.
pub(crate) enum Gather {
    /// Not the root: the block it sends.
    Leaf(SendData),
    /// The root: where every rank's block lands (in rank order), and its own block.
    Root { recv: RecvData, own: OwnBlock },
}

/// The root's own block of a gather.
pub(crate) enum OwnBlock {
    /// `MPI_IN_PLACE`: a copy of the block already in place in the receive buffer.
    Copied(Vec<u8>),
    /// From the send buffer.
    Sent(SendData),
}

impl OwnBlock {
    /// Where the block is and its length.
    pub(crate) fn span(&self) -> (*const u8, usize) {
        match self {
            OwnBlock::Copied(v) => (v.as_ptr(), v.len()),
            OwnBlock::Sent(s) => {
                let (at, len) = s.span();
                (at.cast(), len)
            }
        }
    }

    /// The block's bytes.
    ///
    /// # Safety
    /// As [`SendData::bytes`].
    pub(crate) unsafe fn bytes(&self) -> &[u8] {
        match self {
            OwnBlock::Copied(v) => v,
            // SAFETY: the caller's contract.
            OwnBlock::Sent(s) => unsafe { s.bytes() },
        }
    }
}

/// The root (a rank of `comm`) and this rank's part of a gather.
///
/// # Safety
/// `MPI_Gather`'s buffer contract: `sendbuf` holds `sendcount` elements of `sendtype` (or is
/// `MPI_IN_PLACE` at the root), the root's `recvbuf` size x `recvcount` of `recvtype`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gather(
    fname: &str,
    comm: &rmca::Communicator,
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: usize,
    recvtype: Handle,
    root: c_int,
) -> MpiResult<(usize, Gather)> {
    let (n, me) = (comm.size(), comm.rank());
    let root = root_of(root, n)?;
    if me != root {
        // SAFETY: the caller's contract.
        let send = unsafe { send_n(sendbuf, sendcount, sendtype, "send")? };
        return Ok((root, Gather::Leaf(send)));
    }
    let (rty, total, rb) = blocks_n(recvcount, recvtype, n, "receive")?;
    let mut recv = recv_data_n(recvbuf, total, &rty, "receive")?;
    let own = if in_place(sendbuf) {
        // SAFETY: the caller's contract: the root's own block is in recvbuf.
        unsafe {
            recv.load()?;
            OwnBlock::Copied(recv.bytes_mut()[me * rb..(me + 1) * rb].to_vec())
        }
    } else {
        // SAFETY: the caller's contract.
        let send = unsafe { send_n(sendbuf, sendcount, sendtype, "send")? };
        same_block(send.len(), rb, fname)?;
        apart(&send, &recv, fname)?;
        OwnBlock::Sent(send)
    };
    Ok((root, Gather::Root { recv, own }))
}

/// A rank's part in `MPI_Scatter` / `MPI_Iscatter`.
pub(crate) enum Scatter {
    /// Not the root: where its block lands.
    Leaf(RecvData),
    /// The root: every rank's block (in rank order, `block` bytes each), and where its own
    /// lands (`None`: `MPI_IN_PLACE`, it stays where it is in the send buffer).
    Root {
        send: SendData,
        own: Option<RecvData>,
        block: usize,
    },
}

/// The root (a rank of `comm`) and this rank's part of a scatter.
///
/// # Safety
/// `MPI_Scatter`'s buffer contract: the root's `sendbuf` holds size x `sendcount` elements of
/// `sendtype`, `recvbuf` `recvcount` of `recvtype` (or is `MPI_IN_PLACE` at the root).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn scatter(
    fname: &str,
    comm: &rmca::Communicator,
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: usize,
    recvtype: Handle,
    root: c_int,
) -> MpiResult<(usize, Scatter)> {
    let (n, me) = (comm.size(), comm.rank());
    let root = root_of(root, n)?;
    if me != root {
        let recv = recv_n(recvbuf, recvcount, recvtype, "receive")?;
        return Ok((root, Scatter::Leaf(recv)));
    }
    let (sty, total, block) = blocks_n(sendcount, sendtype, n, "send")?;
    // SAFETY: the caller's contract.
    let send = unsafe { send_data_n(sendbuf, total, &sty, "send")? };
    let own = if in_place(recvbuf) {
        None
    } else {
        let recv = recv_n(recvbuf, recvcount, recvtype, "receive")?;
        same_block(block, recv.len(), fname)?;
        apart(&send, &recv, fname)?;
        Some(recv)
    };
    Ok((root, Scatter::Root { send, own, block }))
}
