//! rdcoll: message passing and collectives for parallel programs, over RDMA-shaped transports.
//!
//! A program joins its job with [`init`] (under `rdcoll-run`, `srun`, `mpirun` or `mpiexec`) and
//! gets a [`Comm`], or runs ranks as threads with [`local::run`] (tests, examples, users' own
//! unit tests). A `Comm` sends and receives MPI-style messages (matching on source and tag, with
//! wildcards, in order), blocking ([`Comm::send`], [`Comm::recv`], [`Comm::probe`]) or
//! nonblocking inside a [`Comm::scope`]; [`Comm::dup`] makes a communicator whose messages
//! never mix with its parent's. See DESIGN.md.
//!
//! ```
//! use rdcoll::{Source, Tag};
//!
//! let sums = rdcoll::local::run(4, |world| {
//!     let (rank, size) = (world.rank(), world.size() as u32);
//!     if rank == 0 {
//!         let mut total = 0u64;
//!         for _ in 1..size {
//!             let mut v = [0u64; 1];
//!             let st = world.recv(&mut v, Source::Any, Tag::Any).unwrap();
//!             assert_eq!(st.tag, st.source); // each rank tags with its rank
//!             total += v[0];
//!         }
//!         total
//!     } else {
//!         world.send(&[rank as u64 * 10], 0, rank).unwrap();
//!         0
//!     }
//! })
//! .unwrap();
//! assert_eq!(sums[0], 60);
//! ```
//!
//! The fabric underneath is reachable too (registered memory, put/get with immediates, active
//! messages); a program that uses it directly should not also use messaging on the same `Comm`:
//!
//! ```
//! use rdcoll::transport::Event;
//!
//! // Each rank sends its number to the next one around the ring.
//! let got = rdcoll::local::run(3, |comm| {
//!     let f = comm.fabric();
//!     let next = (comm.rank() + 1) % comm.size() as u32;
//!     f.send(next, &[comm.rank() as u8]).unwrap();
//!     loop {
//!         if let Some(Event::Message { data, .. }) = f.wait(None).unwrap() {
//!             break data[0];
//!         }
//!     }
//! })
//! .unwrap();
//! assert_eq!(got, vec![2, 0, 1]);
//! ```

mod bind;
mod blocks;
mod collective;
mod communicator;
mod icollectives;
pub mod local;
mod nonblocking;
mod p2p;
mod raw;
mod raw_collectives;
mod request;
pub mod sim;

use parking_lot::ReentrantMutex;
use std::sync::{Arc, OnceLock};

/// The `bytemuck` crate whose [`Pod`] the buffers of every call are made of, for the derive
/// attribute of a program that does not depend on it itself:
///
/// ```
/// #[derive(Clone, Copy, rdcoll::Pod, rdcoll::Zeroable)]
/// #[bytemuck(crate = "rdcoll::bytemuck")]
/// #[repr(C)]
/// struct Particle {
///     position: [f64; 3],
///     mass: f64,
/// }
/// let p = [Particle { position: [1.0, 2.0, 3.0], mass: 4.0 }];
/// assert_eq!(rdcoll::bytemuck::cast_slice::<Particle, u8>(&p).len(), 32);
/// ```
pub use bytemuck;
/// The element types of buffers (plain data: any bit pattern is a valid value), and their
/// derive macros (with `#[bytemuck(crate = "rdcoll::bytemuck")]`, see [`bytemuck`]).
pub use bytemuck::{Pod, Zeroable};
pub use nonblocking::CollRequest;
pub use raw::{RawIdler, RawRequest};
pub use rdcoll_collectives::reduce;
pub use rdcoll_collectives::schedule::Algorithm as BcastSchedule;
pub use rdcoll_collectives::{
    BarrierAlgorithm, BcastAlgorithm, BcastTransfer, CollConfig, CollError, Collectives, Complex32,
    Complex64, Element, Model, Multicast, Op, ReduceDegree,
};
pub use rdcoll_offload::p2p::{Source, Status, TagSel as Tag, NULL_TAG, PROC_NULL};
pub use rdcoll_offload::OffloadError;
pub use rdcoll_transport as transport;
pub use rdcoll_transport::{Rank, TransportError};
pub use request::{test_all, wait_all, wait_any, Request, Scope};

use rdcoll_offload::p2p::{Context, Engine, Members};
use rdcoll_transport::Fabric;

/// Errors from the rdcoll API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The transport failed (bad key, peer failed, I/O, bootstrap...).
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// A message was longer than the receive buffer. It was consumed; nothing past the buffer
    /// was written.
    #[error("message from rank {sender} (tag {tag}) is {len} bytes, longer than the {capacity}-byte receive buffer")]
    Truncated {
        /// The sender.
        sender: Rank,
        /// The message's tag.
        tag: u32,
        /// The message's true length in bytes.
        len: usize,
        /// The receive buffer's length in bytes.
        capacity: usize,
    },
    /// An argument was out of range (a rank not in the job, a bad setting...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The messaging engine failed otherwise (resources, timeouts).
    #[error(transparent)]
    Offload(OffloadError),
    /// Ranks called a collective with arguments that cannot go together (another length,
    /// root, count, operation or element type, or another collective). With
    /// `RDCOLL_CHECK_COLLECTIVES` on (the default in debug builds) every rank gets it, with the
    /// same message, before anything moves; off, only the ranks whose protocol notices (a
    /// receiver that hears another length than its own). The communicator stays usable -
    /// always with the check on; without it, a disagreement the protocol cannot absorb leaves
    /// the ranks out of step, and later collectives return
    /// [`CommunicatorBroken`](Error::CommunicatorBroken).
    #[error("ranks disagree: {0}")]
    Mismatch(String),
    /// An earlier collective on this communicator left the ranks out of step (a rank died, or
    /// a disagreement the protocol could not absorb); its collectives can no longer be used
    /// (point-to-point still can).
    #[error("{0}")]
    CommunicatorBroken(String),
    /// A rank panicked (with [`local::run`]); the message is the panic's, when it had one.
    #[error("rank {rank} panicked: {message}")]
    RankPanicked {
        /// The rank.
        rank: Rank,
        /// Its panic message.
        message: String,
    },
}

impl From<OffloadError> for Error {
    fn from(e: OffloadError) -> Error {
        match e {
            OffloadError::Transport(t) => Error::Transport(t),
            OffloadError::Truncated {
                sender,
                tag,
                len,
                capacity,
            } => Error::Truncated {
                sender,
                tag,
                len,
                capacity,
            },
            OffloadError::InvalidArgument(s) => Error::InvalidArgument(s),
            other => Error::Offload(other),
        }
    }
}

impl From<CollError> for Error {
    fn from(e: CollError) -> Error {
        match e {
            CollError::Transport(t) => Error::Transport(t),
            CollError::Offload(o) => Error::from(o),
            CollError::InvalidArgument(s) => Error::InvalidArgument(s),
            CollError::Mismatch(s) => Error::Mismatch(s),
            broken @ CollError::Broken(_) => Error::CommunicatorBroken(broken.to_string()),
        }
    }
}

/// Result of an rdcoll call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A communicator: this rank's view of its job.
pub struct Comm {
    fabric: Arc<dyn Fabric>,
    /// The messaging engine, started on first use (shared by duplicated communicators).
    engine: OnceLock<Arc<Engine>>,
    context: Context,
    /// This communicator's collectives, set up on first use.
    collectives: OnceLock<Arc<rdcoll_collectives::Collectives>>,
    /// The thread that runs its nonblocking collectives, started by the first one.
    worker: OnceLock<Arc<nonblocking::Worker>>,
    /// Held while the engine, the collectives or the worker starts, so that two threads'
    /// first calls start one, not two: a second engine would poll the same fabric and take
    /// messages meant for the first. Reentrant: starting the collectives starts the engine.
    starting: ReentrantMutex<()>,
    /// The ranks of a communicator over part of the job ([`Comm::split`]); `None` for the
    /// whole job in the fabric's order, whose ranks need no translation.
    members: Option<Arc<Members>>,
}

impl Drop for Comm {
    /// Gives a duplicated communicator's context id back (see [`Comm::dup`]).
    fn drop(&mut self) {
        if let Some(w) = self.worker.get() {
            w.stop();
        }
        if let (Some(engine), true) = (self.engine.get(), self.context != 0) {
            engine.release_context(self.context);
        }
    }
}

impl Comm {
    /// Wraps a fabric endpoint.
    pub fn from_fabric(fabric: Box<dyn Fabric>) -> Comm {
        Comm {
            fabric: Arc::from(fabric),
            engine: OnceLock::new(),
            context: 0,
            collectives: OnceLock::new(),
            worker: OnceLock::new(),
            starting: ReentrantMutex::new(()),
            members: None,
        }
    }

    fn context(&self) -> Context {
        self.context
    }

    /// The messaging engine, started on first use with settings from the environment.
    #[inline]
    fn engine(&self) -> Result<&Arc<Engine>> {
        match self.engine.get() {
            Some(e) => Ok(e),
            None => self.start_engine(),
        }
    }

    /// The first use's part of [`engine`](Comm::engine), kept out of line so that every later
    /// call is a load and a branch (it was 17 instructions of prologue on each send).
    #[cold]
    #[inline(never)]
    fn start_engine(&self) -> Result<&Arc<Engine>> {
        self.start_once(&self.engine, || {
            Ok(Engine::from_env(
                self.fabric.clone(),
                ranks_on_this_host(self)?,
            )?)
        })
    }

    /// The value in `cell`, made by `make` if no thread has made it yet; only one thread
    /// makes it, the others wait for it (see `starting`).
    fn start_once<'a, T>(
        &'a self,
        cell: &'a OnceLock<T>,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<&'a T> {
        let _one_at_a_time = self.starting.lock();
        if let Some(made) = cell.get() {
            return Ok(made);
        }
        let made = make()?;
        Ok(cell.get_or_init(|| made))
    }
    /// This rank, in `0..size`.
    pub fn rank(&self) -> Rank {
        match &self.members {
            None => self.fabric.rank(),
            Some(m) => m.me(),
        }
    }
    /// Number of ranks: a [`Rank`], as [`rank`](Comm::rank) is, so that rank arithmetic
    /// (`(comm.rank() + 1) % comm.size()`) needs no conversion; `comm.size() as usize` for
    /// a buffer of one element per rank.
    pub fn size(&self) -> Rank {
        match &self.members {
            None => self.fabric.size() as Rank,
            Some(m) => m.size() as Rank,
        }
    }
    /// The transport underneath: `local`, `shm` or `tcp`.
    pub fn backend(&self) -> &'static str {
        self.fabric.backend()
    }
    /// The fabric endpoint (register, put, get, active messages). It spans the whole job and
    /// numbers ranks as the job does, also for a communicator made by [`split`](Comm::split).
    pub fn fabric(&self) -> &dyn Fabric {
        self.fabric.as_ref()
    }
    /// Wall-clock seconds since the fabric started (read through the fabric).
    pub fn wtime(&self) -> f64 {
        self.fabric.now().as_secs_f64()
    }
}

/// Sends the library's `tracing` diagnostics to stderr when `RDCOLL_LOG` asks for them; keeps
/// any subscriber the application installed.
fn install_log() {
    let Some(filter) = rdcoll_transport::settings::given("RDCOLL_LOG") else {
        return;
    };
    let filter = match tracing_subscriber::EnvFilter::try_new(&filter) {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "rdcoll: RDCOLL_LOG={filter:?} is not a valid filter ({e}); logging stays off"
            );
            return;
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true)
        .try_init();
}

/// Joins the job this process was started in: rank and size from `RDCOLL_RANK`/`RDCOLL_SIZE`
/// (or Slurm, Open MPI, MPICH), peers through `RDCOLL_STORE`, transport by `RDCOLL_TRANSPORT`
/// (`auto`: shm on one host, tcp across hosts). A process started alone is a job of one.
///
/// With `RDCOLL_LOG` set (a `tracing` filter such as `warn` or `rdcoll_transport=debug`), the
/// library's diagnostics go to stderr, prefixed with the rank.
pub fn init() -> Result<Comm> {
    install_log();
    report_panics();
    let bind = rdcoll_transport::settings::word("RDCOLL_BIND")
        .map_err(rdcoll_transport::TransportError::from)?;
    let comm = Comm::from_fabric(rdcoll_transport::bootstrap::init_from_env()?);
    if bind == Some("core") && !spans_hosts(comm.backend()) {
        bind::to_core(comm.rank() as usize, comm.size() as usize);
    }
    Ok(comm)
}

/// Makes a panic in this process report this rank's failure to the launcher first (see
/// `bootstrap::report_failure`), so that `rdcoll-run` names it rather than a survivor that saw
/// it go. Chained before whatever hook was there; installed once.
fn report_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            rdcoll_transport::bootstrap::report_failure();
            previous(info);
        }));
    });
}

/// Ends the whole job: every rank of it exits with `code` (1 if `code` is 0: an aborted job
/// has failed), as `MPI_Abort` does. Under `mpiexec` (PMI-1) or `mpirun` (PMIx) the launcher is
/// asked to end every process; under `rdcoll-run` this process's exit does it (the launcher
/// ends the job when a rank fails); ranks of `local::run` see this process end. Does not return.
pub fn abort(code: i32) -> ! {
    let code = if code == 0 { 1 } else { code };
    let rank = rdcoll_transport::bootstrap::rank_and_size().map_or(0, |(r, _)| r);
    eprintln!("rdcoll: rank {rank} called abort({code}): ending the job");
    rdcoll_transport::bootstrap::report_failure();
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // A moment for the launcher to forward this process's last output before it tears the
    // job down (Hydra drops what it has not read yet).
    std::thread::sleep(std::time::Duration::from_millis(50));
    rdcoll_transport::bootstrap::abort_through_launcher(code);
    std::process::exit(code)
}

/// Whether ranks over `backend` may be on several hosts (tcp, ofi): then only the launcher
/// knows how many share this one.
fn spans_hosts(backend: &str) -> bool {
    !matches!(backend, "shm" | "local")
}

/// Ranks of this job on this host, as launchers tell it (all of them for `local` and `shm`,
/// one for `sim`, whose ranks are hosts of their own):
/// `RDCOLL_LOCAL_SIZE` if set (a malformed one is an error), else the first of the other
/// launchers' variables that holds a number, else the job size.
fn ranks_on_this_host(comm: &Comm) -> Result<usize> {
    if comm.backend() == "sim" {
        // Each simulated rank is a host of its own, with its own link into the network.
        return Ok(1);
    }
    if !spans_hosts(comm.backend()) {
        return Ok(comm.fabric.size());
    }
    let here = rdcoll_transport::settings::number_or_launchers(
        "RDCOLL_LOCAL_SIZE",
        &[
            "OMPI_COMM_WORLD_LOCAL_SIZE",
            "MPI_LOCALNRANKS",
            "SLURM_NTASKS_PER_NODE",
        ],
    )
    .map_err(rdcoll_transport::TransportError::from)?;
    Ok(here.map_or(comm.fabric.size(), |n| {
        usize::try_from(n).unwrap_or(usize::MAX)
    }))
}
