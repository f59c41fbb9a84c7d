//! Large vectors: reduce-scatter, then allgather (or gather, for a reduce), both bandwidth
//! optimal: each rank sends and receives `(n - 1) / n` of the vector in each phase.
//!
//! Rank `r` owns segment `r` of the vector. In the reduce-scatter every rank sends each owner
//! its part of the owner's segment, in chunks; the owner combines the `n` contributions of
//! each chunk strictly as `v0 op v1 op ... op v(n-1)` (ascending rank order, whatever the
//! arrival order, so results are reproducible bit for bit), while the next chunk is already
//! on its way (two chunks in flight). Then every owner sends its reduced segment to every
//! rank (allgather), or to the root (gather). Messages are the point-to-point engine's, on the
//! collectives' own context: large chunks are fetched by their receivers (the rendezvous).

use rdcoll_offload::p2p::{Context, Engine, ReqId, Source, TagSel};
use rdcoll_transport::Rank;

use crate::error::{CollError, Result};
use crate::reduce::op::Reducer;

/// Tag of reduce-scatter chunks.
const TAG_SCATTER: u32 = 0xC011_0100;
/// Tag of allgather / gather segments.
const TAG_GATHER: u32 = 0xC011_0101;

/// Bytes per reduce-scatter chunk (rounded to whole elements).
pub(crate) const CHUNK: usize = 128 << 10;

/// Elements `[start, start + len)` of the vector that rank `r` of `n` owns.
pub(crate) fn segment(count: usize, n: usize, r: usize) -> (usize, usize) {
    let (base, extra) = (count / n, count % n);
    (r * base + r.min(extra), base + usize::from(r < extra))
}

/// Requests in flight, waited for (or abandoned) as a group.
struct InFlight<'a> {
    engine: &'a Engine,
    ids: Vec<ReqId>,
}

impl InFlight<'_> {
    fn wait_all(&mut self) -> Result<()> {
        let mut first = None;
        for id in self.ids.drain(..) {
            if let Err(e) = self.engine.wait(id) {
                first.get_or_insert(e);
            }
        }
        match first {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

impl Drop for InFlight<'_> {
    /// Buffers lent to requests must not be released while transfers use them.
    fn drop(&mut self) {
        let _ = self.wait_all();
    }
}

/// Reduces `acc` (this rank's contribution; `elem`-byte elements, aligned) across all ranks:
/// afterwards every rank's `acc` holds the result (`root: None`), or the root's (`Some`).
pub(crate) fn reduce(
    engine: &Engine,
    context: Context,
    acc: &mut [u8],
    elem: usize,
    reduce: &Reducer<'_>,
    root: Option<Rank>,
) -> Result<()> {
    let (me, n) = (engine.rank() as usize, engine.size());
    if elem == 0 || !acc.len().is_multiple_of(elem) {
        return Err(CollError::InvalidArgument(format!(
            "{} bytes are not whole {elem}-byte elements",
            acc.len()
        )));
    }
    let count = acc.len() / elem;
    let chunk = (CHUNK / elem).max(1);
    let (my_start, my_len) = segment(count, n, me);
    let my_chunks = my_len.div_ceil(chunk);
    let most_chunks = (0..n)
        .map(|r| segment(count, n, r).1.div_ceil(chunk))
        .max()
        .unwrap_or(0);
    // Two chunks' worth of contributions from every other rank.
    let mut staging = vec![vec![0u8; chunk * elem * n]; 2];
    let mut partial = vec![0u64; (chunk * elem).div_ceil(8)];
    let bytes = |start: usize, len: usize| (start * elem)..((start + len) * elem);
    let base = acc.as_mut_ptr();
    let mut window: [InFlight; 2] = [
        InFlight {
            engine,
            ids: Vec::new(),
        },
        InFlight {
            engine,
            ids: Vec::new(),
        },
    ];
    // Posts chunk `q`'s receives (into `staging[q % 2]`) and sends.
    let post = |q: usize, stage: &mut [u8], flight: &mut InFlight| -> Result<()> {
        if q < my_chunks {
            let c = chunk.min(my_len - q * chunk);
            for r in (0..n).filter(|&r| r != me) {
                let at = r * chunk * elem;
                let dst = &mut stage[at..at + c * elem];
                // SAFETY: `stage` outlives the request (its `InFlight` is waited for before
                // `staging` is dropped or reused) and nothing else touches that part of it.
                let id = unsafe {
                    engine.irecv(
                        dst.as_mut_ptr(),
                        dst.len(),
                        Source::Rank(r as Rank),
                        TagSel::Value(TAG_SCATTER),
                        context,
                    )?
                };
                flight.ids.push(id);
            }
        }
        for r in (0..n).filter(|&r| r != me) {
            let (start, len) = segment(count, n, r);
            if q * chunk >= len {
                continue;
            }
            let c = chunk.min(len - q * chunk);
            let range = bytes(start + q * chunk, c);
            // SAFETY: the range is inside `acc`, which stays borrowed for the whole call;
            // other ranks' segments are only read until the reduce-scatter's sends are all
            // complete (both windows are waited for before any segment is received).
            let id = unsafe {
                engine.isend(
                    base.add(range.start),
                    range.len(),
                    r as Rank,
                    TAG_SCATTER,
                    context,
                )?
            };
            flight.ids.push(id);
        }
        Ok(())
    };
    let [w0, w1] = &mut window;
    let (s0, s1) = staging.split_at_mut(1);
    let stages = [&mut s0[0], &mut s1[0]];
    let [st0, st1] = stages;
    let mut flights = [(st0, w0), (st1, w1)];
    if most_chunks > 0 {
        let (st, fl) = &mut flights[0];
        post(0, st, fl)?;
    }
    for q in 0..most_chunks {
        if q + 1 < most_chunks {
            let (st, fl) = &mut flights[(q + 1) % 2];
            post(q + 1, st, fl)?;
        }
        let (st, fl) = &mut flights[q % 2];
        fl.wait_all()?;
        if q < my_chunks {
            let c = chunk.min(my_len - q * chunk);
            let mine = bytes(my_start + q * chunk, c);
            let out: &mut [u8] = &mut bytemuck::cast_slice_mut(&mut partial)[..c * elem];
            // v0 op v1 op ... in ascending rank order, this rank's own part in its place.
            for r in 0..n {
                // SAFETY: `mine` is inside `acc`; this rank's own segment is not lent to any
                // request (only other segments are sent), so reading it here is exclusive.
                let own = unsafe { std::slice::from_raw_parts(base.add(mine.start), mine.len()) };
                let part: &[u8] = if r == me {
                    own
                } else {
                    &st[r * chunk * elem..][..c * elem]
                };
                if r == 0 {
                    out.copy_from_slice(part);
                } else {
                    reduce(out, part);
                }
            }
            // SAFETY: as above; the copy goes into this rank's own segment.
            unsafe {
                std::ptr::copy_nonoverlapping(out.as_ptr(), base.add(mine.start), mine.len())
            };
        }
    }
    for (_, fl) in flights.iter_mut() {
        fl.wait_all()?;
    }
    // Allgather (every rank) or gather (the root) of the reduced segments.
    let mut gather = InFlight {
        engine,
        ids: Vec::new(),
    };
    let (my_bytes_start, my_bytes_len) = (my_start * elem, my_len * elem);
    let receivers: Vec<usize> = match root {
        None => (0..n).filter(|&r| r != me).collect(),
        Some(root) if root as usize != me => vec![root as usize],
        Some(_) => Vec::new(),
    };
    let gathers = root.is_none_or(|r| r as usize == me);
    if gathers {
        for r in (0..n).filter(|&r| r != me) {
            let (start, len) = segment(count, n, r);
            let range = bytes(start, len);
            // SAFETY: segment `r` of `acc` is written only by this receive until it completes
            // (waited for below, or by `InFlight`'s drop on an error path).
            let id = unsafe {
                engine.irecv(
                    base.add(range.start),
                    range.len(),
                    Source::Rank(r as Rank),
                    TagSel::Value(TAG_GATHER),
                    context,
                )?
            };
            gather.ids.push(id);
        }
    }
    for r in receivers {
        // SAFETY: this rank's own segment, only read while the send is in flight.
        let id = unsafe {
            engine.isend(
                base.add(my_bytes_start),
                my_bytes_len,
                r as Rank,
                TAG_GATHER,
                context,
            )?
        };
        gather.ids.push(id);
    }
    gather.wait_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_tile_the_vector() {
        for count in [0, 1, 7, 100, 1001] {
            for n in 1..=9 {
                let mut next = 0;
                for r in 0..n {
                    let (s, l) = segment(count, n, r);
                    assert_eq!(s, next);
                    next += l;
                }
                assert_eq!(next, count);
            }
        }
    }
}
