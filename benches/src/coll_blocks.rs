//! The block collectives' steps for the OSU loops of `coll` (osu_allgather, osu_allgatherv,
//! osu_gather, osu_scatter, osu_alltoall, osu_alltoallv): the sizes are bytes per rank (per
//! pair of ranks for alltoall), as OSU prints them; the `v` forms use equal counts, as OSU's
//! do.

use crate::coll::{CollKind, Collective};

/// Send and receive buffers for `n` ranks and blocks of up to `max` bytes.
pub struct Buffers {
    send: Vec<u8>,
    recv: Vec<u8>,
    counts: Vec<usize>,
}

impl Buffers {
    /// Buffers for `kind` (empty for the other collectives).
    pub fn new(kind: CollKind, n: usize, max: usize) -> Buffers {
        let (send, recv) = match kind {
            CollKind::Allgather | CollKind::Allgatherv | CollKind::Gather => (max, n * max),
            CollKind::Scatter => (n * max, max),
            CollKind::Alltoall | CollKind::Alltoallv => (n * max, n * max),
            _ => (0, 0),
        };
        Buffers {
            send: (0..send).map(|i| i as u8).collect(),
            recv: vec![0; recv],
            counts: vec![0; n],
        }
    }

    /// Writes the receive buffer (the send buffer was written when made).
    pub fn touch(&mut self) {
        self.recv.fill(1);
    }

    /// One `kind` of blocks of `size` bytes.
    pub fn step(&mut self, c: &dyn Collective, kind: CollKind, size: usize) -> Result<(), String> {
        let n = c.size();
        self.counts.iter_mut().for_each(|x| *x = size);
        let (send, recv, counts) = (&self.send, &mut self.recv, &self.counts);
        match kind {
            CollKind::Allgather => c.allgather(&send[..size], &mut recv[..n * size]),
            CollKind::Allgatherv => c.allgatherv(&send[..size], &mut recv[..n * size], counts),
            CollKind::Gather => c.gather(&send[..size], &mut recv[..n * size], 0),
            CollKind::Scatter => c.scatter(&send[..n * size], &mut recv[..size], 0),
            CollKind::Alltoall => c.alltoall(&send[..n * size], &mut recv[..n * size]),
            CollKind::Alltoallv => c.alltoallv(&send[..n * size], &mut recv[..n * size], counts),
            other => Err(format!("{} is not a block collective", other.name())),
        }
    }
}
