//! Runs a [`Schedule`] over the communicator's collective context.

use rmca_framework::btl::CommPattern;
use rmca_framework::buffer::UserBuf;
use rmca_framework::pml::{RequestId, SendMode};

use super::schedule::{Buf, Comm, Local, Region, Schedule};
use crate::{Communicator, Error, Result, Src};

/// Computes a [`Local::Reduce`] step `(dst, src, acc, src_first)`: `dst = src op acc` if
/// `src_first`, else `acc op src`, where `acc` is the accumulated operand, `None` when it is
/// `dst` itself (in place). Only called by reductions.
pub(crate) type ReduceFn<'a> = &'a dyn Fn(&mut [u8], &[u8], Option<&[u8]>, bool);

/// Execute `sched` on `comm` with `tag` over `send` (the caller's input, read only) and `work`
/// (the result, in the layout of the schedule's collective), with `scratch` as the schedule's
/// scratch space (grown as needed; its contents are not read before a round received into
/// them). Every round's transfers are posted together and all of them are waited for (even
/// after an error) before the buffers are touched again: the schedule guarantees that
/// concurrent regions are disjoint (checked by the schedule tests).
pub(crate) fn run(
    comm: &Communicator,
    sched: &Schedule,
    tag: i32,
    send: &[u8],
    work: &mut [u8],
    scratch: &mut Vec<u64>,
    reduce: Option<ReduceFn<'_>>,
) -> Result<()> {
    let words = sched.tmp_len.div_ceil(8);
    if scratch.len() < words {
        scratch.resize(words, 0);
    }
    let tmp: &mut [u8] = &mut bytemuck::cast_slice_mut(scratch.as_mut_slice())[..sched.tmp_len];
    let ctx = comm.coll_context();
    for round in &sched.rounds {
        match round.comms.as_slice() {
            [] => {}
            // The common shapes (tree hops, ring and butterfly exchanges) take the blocking
            // helpers, which need no request list.
            [Comm::Recv { peer, region }] => {
                let st = comm.recv_bytes(
                    slice_mut(region, work, tmp)?,
                    Src::Rank(*peer),
                    tag,
                    ctx,
                    CommPattern::Collective,
                )?;
                check_received(st.bytes, region.range.len(), *peer)?;
            }
            [Comm::Send { peer, region }] => {
                let b = slice_ref(region, send, work, tmp)?;
                comm.send_bytes(b, *peer, tag, ctx, CommPattern::Collective)?;
            }
            [Comm::Recv {
                peer: from,
                region: rr,
            }, Comm::Send {
                peer: to,
                region: sr,
            }] => {
                let (r, s) = split_pair(rr, sr, send, work, tmp)?;
                let st = comm.sendrecv_bytes(
                    (s, *to, tag),
                    (r, Src::Rank(*from), tag),
                    ctx,
                    CommPattern::Collective,
                )?;
                check_received(st.bytes, rr.range.len(), *from)?;
            }
            _ => post_and_wait(comm, &round.comms, tag, send, work, tmp)?,
        }
        run_locals(&round.locals, send, work, tmp, reduce)?;
    }
    Ok(())
}

fn check_received(got: usize, want: usize, peer: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!("collective arguments differ between ranks: expected {want} B from rank {peer}, got {got} B")))
    }
}

/// Post every transfer of a round, then wait for all of them (even after an error: no buffer
/// is released while the PML may still use it).
#[allow(unsafe_code)]
fn post_and_wait(
    comm: &Communicator,
    comms: &[Comm],
    tag: i32,
    send: &[u8],
    work: &mut [u8],
    tmp: &mut [u8],
) -> Result<()> {
    let ctx = comm.coll_context();
    {
        let mut posted: Vec<(RequestId, Option<usize>)> = Vec::with_capacity(comms.len());
        let mut first_err: Option<Error> = None;
        // Receives first, so that eager data from fast peers lands in place.
        for c in comms
            .iter()
            .filter(|c| matches!(c, Comm::Recv { .. }))
            .chain(comms.iter().filter(|c| matches!(c, Comm::Send { .. })))
        {
            let r = match c {
                // SAFETY (both arms): every request posted here is waited for below, before
                // the buffers' borrows end, whatever happens to the others.
                Comm::Recv { peer, region } => unsafe { region_mut(region, work, tmp) }
                    .and_then(|ub| {
                        comm.start_recv(ub, Src::Rank(*peer), tag, ctx, CommPattern::Collective)
                    })
                    .map(|id| (id, Some(region.range.len()))),
                Comm::Send { peer, region } => unsafe { region_ref(region, send, work, tmp) }
                    .and_then(|ub| {
                        comm.start_send(
                            ub,
                            *peer,
                            tag,
                            ctx,
                            SendMode::Standard,
                            CommPattern::Collective,
                        )
                    })
                    .map(|id| (id, None)),
            };
            match r {
                Ok(p) => posted.push(p),
                Err(e) => {
                    first_err = Some(e);
                    break;
                }
            }
        }
        for (id, expect) in posted {
            match comm.wait_raw(id) {
                Ok(st) => {
                    if let Some(want) = expect {
                        if let (Err(e), None) =
                            (check_received(st.bytes, want, st.source), &first_err)
                        {
                            first_err = Some(e);
                        }
                    }
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
    }
    Ok(())
}

fn run_locals(
    locals: &[Local],
    send: &[u8],
    work: &mut [u8],
    tmp: &[u8],
    reduce: Option<ReduceFn<'_>>,
) -> Result<()> {
    {
        for l in locals {
            match l {
                Local::Reduce {
                    src,
                    dst,
                    src_first,
                    acc,
                } => {
                    let f = reduce.ok_or_else(|| {
                        Error::InvalidArgument(
                            "internal: reduction step without an operation".into(),
                        )
                    })?;
                    let acc = match acc {
                        Buf::Work => None,
                        b => Some(slice_ref(
                            &Region {
                                buf: *b,
                                range: dst.clone(),
                            },
                            send,
                            &[],
                            tmp,
                        )?),
                    };
                    f(&mut work[dst.clone()], &tmp[src.clone()], acc, *src_first);
                }
                Local::Copy { src, dst } => match src.buf {
                    Buf::Send => work[dst.clone()].copy_from_slice(&send[src.range.clone()]),
                    Buf::Tmp => work[dst.clone()].copy_from_slice(&tmp[src.range.clone()]),
                    Buf::Work => work.copy_within(src.range.clone(), dst.start),
                },
            }
        }
    }
    Ok(())
}

fn oob(region: &Region) -> Error {
    Error::InvalidArgument(format!(
        "internal: collective region {region:?} outside its buffer"
    ))
}

/// `region` of `work` or `tmp` lent to the PML.
///
/// # Safety
/// The buffers must stay borrowed until the operation given the result completes.
#[allow(unsafe_code)]
unsafe fn region_mut(region: &Region, work: &mut [u8], tmp: &mut [u8]) -> Result<UserBuf> {
    let b = match region.buf {
        Buf::Work => work,
        Buf::Tmp => tmp,
        Buf::Send => return Err(oob(region)),
    };
    b.get_mut(region.range.clone())
        // SAFETY: the caller's contract.
        .map(|b| unsafe { UserBuf::from_mut_slice(b) })
        .ok_or_else(|| oob(region))
}

/// `region` of `send`, `work` or `tmp` lent to the PML, read-only.
///
/// # Safety
/// The buffers must stay borrowed until the operation given the result completes.
#[allow(unsafe_code)]
unsafe fn region_ref(region: &Region, send: &[u8], work: &[u8], tmp: &[u8]) -> Result<UserBuf> {
    let b = match region.buf {
        Buf::Work => work,
        Buf::Tmp => tmp,
        Buf::Send => send,
    };
    b.get(region.range.clone())
        // SAFETY: the caller's contract.
        .map(|b| unsafe { UserBuf::from_slice(b) })
        .ok_or_else(|| oob(region))
}

fn slice_mut<'a>(region: &Region, work: &'a mut [u8], tmp: &'a mut [u8]) -> Result<&'a mut [u8]> {
    let b = match region.buf {
        Buf::Work => work,
        Buf::Tmp => tmp,
        Buf::Send => return Err(oob(region)),
    };
    b.get_mut(region.range.clone()).ok_or_else(|| oob(region))
}

fn slice_ref<'a>(
    region: &Region,
    send: &'a [u8],
    work: &'a [u8],
    tmp: &'a [u8],
) -> Result<&'a [u8]> {
    let b = match region.buf {
        Buf::Work => work,
        Buf::Tmp => tmp,
        Buf::Send => send,
    };
    b.get(region.range.clone()).ok_or_else(|| oob(region))
}

/// The receive region (mutable) and the send region of an exchange, which may both live in
/// `work` (disjoint, as every schedule guarantees).
fn split_pair<'a>(
    rr: &Region,
    sr: &Region,
    send: &'a [u8],
    work: &'a mut [u8],
    tmp: &'a mut [u8],
) -> Result<(&'a mut [u8], &'a [u8])> {
    match (rr.buf, sr.buf) {
        (Buf::Work, Buf::Work) | (Buf::Tmp, Buf::Tmp) => {
            let b = if rr.buf == Buf::Work { work } else { tmp };
            let (r, s) = (rr.range.clone(), sr.range.clone());
            if r.end > b.len() || s.end > b.len() {
                return Err(oob(rr));
            }
            if r.is_empty() {
                return Ok((&mut [], &b[s]));
            }
            if r.end <= s.start {
                let (lo, hi) = b.split_at_mut(s.start);
                Ok((&mut lo[r], &hi[..s.len()]))
            } else if s.end <= r.start {
                let (lo, hi) = b.split_at_mut(r.start);
                Ok((&mut hi[..r.len()], &lo[s]))
            } else {
                Err(Error::InvalidArgument(format!(
                    "internal: exchange regions {rr:?} and {sr:?} overlap"
                )))
            }
        }
        (Buf::Tmp, Buf::Work) => Ok((slice_mut(rr, &mut [], tmp)?, slice_ref(sr, &[], work, &[])?)),
        (Buf::Tmp, Buf::Send) => Ok((slice_mut(rr, &mut [], tmp)?, slice_ref(sr, send, &[], &[])?)),
        (Buf::Work, Buf::Send) => Ok((
            slice_mut(rr, work, &mut [])?,
            slice_ref(sr, send, &[], &[])?,
        )),
        (Buf::Work, Buf::Tmp) => Ok((slice_mut(rr, work, &mut [])?, slice_ref(sr, &[], &[], tmp)?)),
        _ => Err(oob(rr)),
    }
}
