//! The target side's direct receives (an MPI portal's fast path, SEMANTICS.md §12): a put
//! that matched one is copied (or pulled) straight into the receive's buffer and reported as a
//! `DirectDone`, with no entry, region or event; a direct receive that took a queued header
//! gets its data copied out of the overflow entry.

use rdcoll_transport::{Rank, Region, RegionKey, RemoteAddr};

use crate::me::Placement;
use crate::mpi_lists::{DirectDone, DirectRecv};
use crate::portal::Unexpected;
use crate::state::{State, Transfer};
use crate::target::{answer, finish, to_usize, Arrival, Deposit};
use crate::types::{List, MeCounting, NiFail};
use crate::wire::PutData;

/// A direct receive took the header `u`: copies its data out of the overflow entry.
pub(crate) fn direct_from_header(st: &mut State, d: DirectRecv, u: &Unexpected, fail: NiFail) {
    let done = copy_out(d, u, fail);
    st.direct_done.push(done);
}

/// Copies the data of the taken header `u` (as much as fits) into direct receive `d`'s
/// buffer: what `d` is told.
pub(crate) fn copy_out(d: DirectRecv, u: &Unexpected, fail: NiFail) -> DirectDone {
    let mut mlength = 0;
    if fail == NiFail::Ok {
        let n = u.mlength.min(d.capacity);
        if n > 0 {
            // SAFETY: as in `DirectRecv::deposit`: the buffer is lent to this receive until it
            // completes, which this does; `n <= capacity`.
            let out = unsafe { std::slice::from_raw_parts_mut(d.addr as *mut u8, n) };
            match u.start.region.read(u.start.offset, out) {
                Ok(()) => mlength = n,
                Err(e) => tracing::error!("copying an unexpected message out failed: {e}"),
            }
        }
    }
    let (from, bits, hdr_data) = (u.initiator, u.match_bits, u.hdr_data);
    let mut done = direct_done(d, from, bits, hdr_data, u.rlength, mlength, fail);
    done.published = u.published;
    done
}

/// A put that matched a direct receive: inline data is copied into its buffer at once (no
/// region, transfer or event: the message layer's common case), other data pulled into it.
pub(crate) fn put_direct(
    st: &mut State,
    a: &Arrival,
    d: DirectRecv,
    quiet: bool,
    data: PutData<'_>,
) {
    match data {
        PutData::Inline(bytes) | PutData::Published { bytes, .. } => {
            let n = d.deposit(&bytes[..a.rlength.min(bytes.len())]);
            let mut done = direct_done(d, a.from, a.bits, a.hdr_data, a.rlength, n, NiFail::Ok);
            done.published = a.published;
            st.direct_done.push(done);
            if !quiet {
                let deposit = Deposit {
                    no_ack: false,
                    list: List::Priority,
                    mlength: n,
                    offset: 0,
                };
                answer(st, a.from, false, a.op, NiFail::Ok, Some(deposit));
            }
        }
        PutData::Pull { key, offset } => {
            let t = pull_transfer(st.rank(), a, d);
            if t.place.mlength == 0 {
                return finish(st, t, NiFail::Ok);
            }
            let src = RemoteAddr {
                rank: a.from,
                key: RegionKey(key),
                offset: to_usize(offset),
            };
            match st.fabric.get(&t.region, 0, t.place.mlength, src) {
                Ok(id) => {
                    st.transfers.insert(id, t);
                }
                Err(_) => finish(st, t, NiFail::Undeliverable),
            }
        }
    }
}

/// The transfer that pulls a put's data into a direct receive's buffer (reported by `finish`
/// as a `DirectDone`).
fn pull_transfer(rank: Rank, a: &Arrival, d: DirectRecv) -> Transfer {
    // SAFETY: the buffer `Ni::post_direct`'s caller lent to this receive, valid and untouched
    // by anything else until it completes; the region is only written by this transfer.
    let region = unsafe { Region::private(rank, d.addr as *mut u8, d.capacity) };
    Transfer {
        get: false,
        initiator: a.from,
        op: a.op,
        pt: a.pt,
        list: List::Priority,
        region,
        place: Placement {
            offset: 0,
            mlength: a.rlength.min(d.capacity),
        },
        bits: a.bits,
        rlength: a.rlength,
        remote_offset: 0,
        hdr_data: a.hdr_data,
        published: None,
        user_ptr: d.user_ptr,
        counting: MeCounting::default(),
        unlinked: true,
        ack_disabled: false,
        me_options: crate::types::MeOptions::default(),
        quiet: false,
        header: None,
        taken_by: None,
        direct: Some(d),
    }
}

/// What direct receive `d` is told of the message that matched it.
pub(crate) fn direct_done(
    d: DirectRecv,
    from: Rank,
    bits: u64,
    hdr_data: u64,
    rlength: usize,
    mlength: usize,
    fail: NiFail,
) -> DirectDone {
    DirectDone {
        user_ptr: d.user_ptr,
        initiator: from,
        match_bits: bits,
        hdr_data,
        rlength: rlength as u64,
        mlength: mlength as u64,
        fail,
        published: None,
    }
}
