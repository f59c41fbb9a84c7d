//! The collectives that move blocks between ranks on a [`Comm`]: gather, scatter, allgather,
//! alltoall (each with a `v` form taking counts per rank), reduce_scatter, scan and exscan.
//! Every rank calls them in the same order, as the other collectives; counts are in elements,
//! blocks lie one after another in rank order. See `rdcoll_collectives::blocks` for the
//! algorithms.

use std::ops::Range;

use bytemuck::Pod;
use rdcoll_collectives::blocks::even_parts;
use rdcoll_collectives::reduce::op::{check, op_reducer, reducer, Reducer};
use rdcoll_collectives::{Element, Op};

use crate::{Comm, Error, Rank, Result};

/// Byte ranges of blocks of `counts` elements of `T`, packed.
pub(crate) fn byte_parts<T>(counts: &[usize]) -> Result<Vec<Range<usize>>> {
    let size = std::mem::size_of::<T>();
    let mut at = 0usize;
    counts
        .iter()
        .map(|&c| {
            let start = at;
            at = at.checked_add(c.checked_mul(size)?)?;
            Some(start..at)
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Error::InvalidArgument("counts overflow".into()))
}

fn bytes<T: Pod>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

fn bytes_mut<T: Pod>(v: &mut [T]) -> &mut [u8] {
    bytemuck::cast_slice_mut(v)
}

/// `len` is `n` blocks of `block` elements.
fn whole_blocks(len: usize, n: usize, what: &str) -> Result<usize> {
    if n == 0 || len % n != 0 {
        return Err(Error::InvalidArgument(format!(
            "{what} has {len} elements, not a whole block for each of {n} ranks"
        )));
    }
    Ok(len / n)
}

impl Comm {
    /// Gathers every rank's `send` (the same length everywhere) into `root`'s `recv`, rank by
    /// rank (`recv` holds `size()` times as many elements; elsewhere it is ignored and may be
    /// empty).
    ///
    /// ```
    /// let got = rdcoll::local::run(3, |comm| {
    ///     let mine = [comm.rank() as u16; 2];
    ///     let mut all = if comm.rank() == 1 { vec![0u16; 6] } else { vec![] };
    ///     comm.gather(&mine, &mut all, 1).unwrap();
    ///     all
    /// })
    /// .unwrap();
    /// assert_eq!(got[1], [0, 0, 1, 1, 2, 2]);
    /// ```
    pub fn gather<T: Pod>(&self, send: &[T], recv: &mut [T], root: Rank) -> Result<()> {
        Ok(self
            .collectives()?
            .gather(bytes(send), bytes_mut(recv), root)?)
    }

    /// Gathers rank `r`'s `send` (`counts[r]` elements) into `root`'s `recv`, one block after
    /// another in rank order. `counts` and `recv` matter at the root only.
    pub fn gatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        root: Rank,
    ) -> Result<()> {
        let parts = self.arguments(byte_parts::<T>(counts))?;
        Ok(self
            .collectives()?
            .gatherv(bytes(send), bytes_mut(recv), &parts, root)?)
    }

    /// Scatters `root`'s `send` (`size()` blocks of `recv.len()` elements) to every rank's
    /// `recv`, block `r` to rank `r`. `send` matters at the root only.
    pub fn scatter<T: Pod>(&self, send: &[T], recv: &mut [T], root: Rank) -> Result<()> {
        Ok(self
            .collectives()?
            .scatter(bytes(send), bytes_mut(recv), root)?)
    }

    /// Scatters `root`'s `send`, block `r` of `counts[r]` elements (one after another in rank
    /// order) to rank `r`'s `recv`, which must hold exactly its block.
    pub fn scatterv<T: Pod>(
        &self,
        send: &[T],
        counts: &[usize],
        recv: &mut [T],
        root: Rank,
    ) -> Result<()> {
        let parts = self.arguments(byte_parts::<T>(counts))?;
        Ok(self
            .collectives()?
            .scatterv(bytes(send), &parts, bytes_mut(recv), root)?)
    }

    /// Every rank's `send` (the same length everywhere) into every rank's `recv`, in rank
    /// order.
    ///
    /// ```
    /// let got = rdcoll::local::run(3, |comm| {
    ///     let mut all = [0u32; 3];
    ///     comm.allgather(&[comm.rank() * 10], &mut all).unwrap();
    ///     all
    /// })
    /// .unwrap();
    /// assert!(got.iter().all(|a| *a == [0, 10, 20]));
    /// ```
    pub fn allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let parts = even_parts(self.size() as usize, std::mem::size_of_val(send));
        Ok(self
            .collectives()?
            .allgatherv(bytes(send), bytes_mut(recv), &parts)?)
    }

    /// Rank `r`'s `send` (`counts[r]` elements; every rank passes the same `counts`) into
    /// every rank's `recv`, one block after another in rank order.
    pub fn allgatherv<T: Pod>(&self, send: &[T], recv: &mut [T], counts: &[usize]) -> Result<()> {
        let parts = self.arguments(byte_parts::<T>(counts))?;
        Ok(self
            .collectives()?
            .allgatherv(bytes(send), bytes_mut(recv), &parts)?)
    }

    /// Block `j` of rank `i`'s `send` to block `i` of rank `j`'s `recv`; both hold `size()`
    /// blocks of the same length.
    ///
    /// ```
    /// let got = rdcoll::local::run(3, |comm| {
    ///     let me = comm.rank();
    ///     let send: Vec<u32> = (0..3).map(|to| me * 10 + to).collect();
    ///     let mut recv = [0u32; 3];
    ///     comm.alltoall(&send, &mut recv).unwrap();
    ///     recv
    /// })
    /// .unwrap();
    /// assert_eq!(got[2], [2, 12, 22]);
    /// ```
    pub fn alltoall<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let n = self.size();
        let block = self.arguments(whole_blocks(
            send.len(),
            n as usize,
            "alltoall's send buffer",
        ))?;
        if recv.len() != send.len() {
            return self.arguments(Err(Error::InvalidArgument(format!(
                "alltoall's receive buffer has {} elements, its send buffer {}",
                recv.len(),
                send.len()
            ))));
        }
        let block = block * std::mem::size_of::<T>();
        Ok(self
            .collectives()?
            .alltoall(bytes(send), bytes_mut(recv), block)?)
    }

    /// `send_counts[j]` elements of `send` (blocks one after another) to rank `j`, and
    /// `recv_counts[i]` elements from rank `i` into `recv` (likewise): the counts of a pair
    /// of ranks must agree.
    pub fn alltoallv<T: Pod>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
    ) -> Result<()> {
        let send_parts = self.arguments(byte_parts::<T>(send_counts))?;
        let recv_parts = self.arguments(byte_parts::<T>(recv_counts))?;
        Ok(self
            .collectives()?
            .alltoallv(bytes(send), &send_parts, bytes_mut(recv), &recv_parts)?)
    }

    /// Combines every rank's `send` (`size()` blocks of `recv.len()` elements) element-wise
    /// with `op`, and leaves block `r` of the result in rank `r`'s `recv`. Contributions are
    /// combined in rank order: the same result in every run.
    pub fn reduce_scatter_block<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: Op,
    ) -> Result<()> {
        self.arguments(check::<T>(op))?;
        let elem = std::mem::size_of::<T>();
        Ok(self.collectives()?.reduce_scatter_block(
            bytes(send),
            bytes_mut(recv),
            elem,
            &op_reducer::<T>(op),
        )?)
    }

    /// [`reduce_scatter_block`](Comm::reduce_scatter_block) with blocks of `counts[r]`
    /// elements (the same `counts` on every rank; `recv` holds this rank's block).
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        op: Op,
    ) -> Result<()> {
        self.arguments(check::<T>(op))?;
        let parts = self.arguments(byte_parts::<T>(counts))?;
        self.reduce_scatter_parts(send, &parts, recv, &op_reducer::<T>(op))
    }

    fn reduce_scatter_parts<T: Pod>(
        &self,
        send: &[T],
        parts: &[Range<usize>],
        recv: &mut [T],
        f: &Reducer<'_>,
    ) -> Result<()> {
        let elem = std::mem::size_of::<T>();
        Ok(self
            .collectives()?
            .reduce_scatter(bytes(send), parts, bytes_mut(recv), elem, f)?)
    }

    /// Rank `r`'s `recv` becomes the element-wise combination of ranks `0..=r`'s `send`, in
    /// rank order (`MPI_Scan`).
    ///
    /// ```
    /// let got = rdcoll::local::run(4, |comm| {
    ///     let mut prefix = [0u64];
    ///     comm.scan(&[comm.rank() as u64 + 1], &mut prefix, rdcoll::Op::Sum).unwrap();
    ///     prefix[0]
    /// })
    /// .unwrap();
    /// assert_eq!(got, [1, 3, 6, 10]);
    /// ```
    pub fn scan<T: Element>(&self, send: &[T], recv: &mut [T], op: Op) -> Result<()> {
        self.arguments(check::<T>(op))?;
        self.prefix(send, recv, &op_reducer::<T>(op), true)
    }

    /// [`scan`](Comm::scan) with a reduction of the caller's: `f(acc, x)` folds `x` into
    /// `acc`, with `acc` always holding lower ranks' contributions than `x` (so `f` need not
    /// be commutative).
    pub fn scan_with<T: Pod, F: Fn(&mut T, &T) + Sync>(
        &self,
        send: &[T],
        recv: &mut [T],
        f: F,
    ) -> Result<()> {
        self.prefix(send, recv, &reducer(f), true)
    }

    /// Rank `r > 0`'s `recv` becomes the combination of ranks `0..r`'s `send`; rank 0's is
    /// left as it was (`MPI_Exscan`).
    pub fn exscan<T: Element>(&self, send: &[T], recv: &mut [T], op: Op) -> Result<()> {
        self.arguments(check::<T>(op))?;
        self.prefix(send, recv, &op_reducer::<T>(op), false)
    }

    /// [`exscan`](Comm::exscan) with a reduction of the caller's (see
    /// [`scan_with`](Comm::scan_with)).
    pub fn exscan_with<T: Pod, F: Fn(&mut T, &T) + Sync>(
        &self,
        send: &[T],
        recv: &mut [T],
        f: F,
    ) -> Result<()> {
        self.prefix(send, recv, &reducer(f), false)
    }

    fn prefix<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        f: &Reducer<'_>,
        inclusive: bool,
    ) -> Result<()> {
        let elem = std::mem::size_of::<T>();
        let c = self.collectives()?;
        match inclusive {
            true => c.scan(bytes(send), bytes_mut(recv), elem, f)?,
            false => c.exscan(bytes(send), bytes_mut(recv), elem, f)?,
        }
        Ok(())
    }
}
