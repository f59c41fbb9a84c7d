//! Collectives on a [`Comm`]: broadcast (and, with issue 7, reduce, allreduce and barrier).
//! Every rank calls them in the same order; see `rdcoll_collectives` for the algorithms.

use bytemuck::Pod;
use rdcoll_collectives::Collectives;

use crate::{Comm, Error, Rank, Result};

impl Comm {
    /// The collectives of this communicator, created on first use.
    fn collectives(&self) -> Result<&Collectives> {
        if let Some(c) = self.collectives.get() {
            return Ok(c);
        }
        let c = Collectives::new(self.engine()?.clone(), self.context())?;
        Ok(self.collectives.get_or_init(|| c))
    }

    /// A duplicate of this communicator (see [`dup`](Comm::dup); collective) whose
    /// collectives use `cfg` instead of the `RDCOLL_*` settings: for choosing an algorithm per
    /// communicator, or for in-process ranks, which share one environment.
    pub fn with_collectives_config(&self, cfg: rdcoll_collectives::CollConfig) -> Result<Comm> {
        let comm = self.dup()?;
        let c = Collectives::with_config(comm.engine()?.clone(), comm.context(), cfg)?;
        let _ = comm.collectives.set(c);
        Ok(comm)
    }

    /// Returns once every rank of this communicator has called `barrier` (dissemination over
    /// one-byte RDMA writes).
    pub fn barrier(&self) -> Result<()> {
        Ok(self.collectives()?.barrier()?)
    }

    /// Broadcasts `buf` from `root`: afterwards every rank's `buf` holds the root's. Every
    /// rank passes a buffer of the same length (use [`bcast_any_size`](Comm::bcast_any_size)
    /// when only the root knows it). Small messages travel as RDMA writes with counter bytes
    /// down a binomial tree, large ones by the binomial pipeline of RDMC (`RDCOLL_BCAST_*`
    /// settings in the README).
    ///
    /// ```
    /// let got = rdcoll::local::run(4, |comm| {
    ///     let mut v = if comm.rank() == 2 { [7u32, 8, 9] } else { [0; 3] };
    ///     comm.bcast(&mut v, 2).unwrap();
    ///     v
    /// })
    /// .unwrap();
    /// assert!(got.iter().all(|v| *v == [7, 8, 9]));
    /// ```
    pub fn bcast<T: Pod>(&self, buf: &mut [T], root: Rank) -> Result<()> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        Ok(self.collectives()?.bcast(bytes, root)?)
    }

    /// Broadcasts `data` from `root` to ranks that need not know its length: the root passes
    /// `Some(data)`, the others `None`, and every rank gets the root's elements.
    ///
    /// ```
    /// let got = rdcoll::local::run(3, |comm| {
    ///     let mine = [1u16, 2, 3, 4];
    ///     let data = (comm.rank() == 0).then_some(&mine[..]);
    ///     comm.bcast_any_size(data, 0).unwrap()
    /// })
    /// .unwrap();
    /// assert!(got.iter().all(|v| v == &[1, 2, 3, 4]));
    /// ```
    pub fn bcast_any_size<T: Pod>(&self, data: Option<&[T]>, root: Rank) -> Result<Vec<T>> {
        let bytes = data.map(bytemuck::cast_slice::<T, u8>);
        let got = self.collectives()?.bcast_any_size(bytes, root)?;
        let size = std::mem::size_of::<T>();
        if size == 0 {
            return Ok(Vec::new());
        }
        if got.len() % size != 0 {
            return Err(Error::Mismatch(format!(
                "{} bytes broadcast are not a whole number of {size}-byte elements",
                got.len()
            )));
        }
        let mut out = vec![T::zeroed(); got.len() / size];
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&got);
        Ok(out)
    }
}
