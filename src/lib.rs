//! rdcoll: message passing and collectives for parallel programs, over RDMA-shaped transports.
//!
//! A program joins its job with [`init`] (under `rdcoll-run`, `srun`, `mpirun` or `mpiexec`) and
//! gets a [`Comm`], or runs ranks as threads with [`local::run`] (tests, examples, users' own
//! unit tests). Today a `Comm` exposes the fabric underneath (registered memory, put/get with
//! immediates, active messages); point-to-point and collectives build on it. See DESIGN.md.
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

pub mod local;

pub use rdcoll_transport as transport;
pub use rdcoll_transport::{Rank, TransportError};

use rdcoll_transport::Fabric;

/// Errors from the rdcoll API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The transport failed (bad key, peer failed, I/O, bootstrap...).
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// A rank panicked (with [`local::run`]); the message is the panic's, when it had one.
    #[error("rank {rank} panicked: {message}")]
    RankPanicked {
        /// The rank.
        rank: Rank,
        /// Its panic message.
        message: String,
    },
}

/// Result of an rdcoll call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A communicator: this rank's view of its job.
pub struct Comm {
    fabric: Box<dyn Fabric>,
}

impl Comm {
    /// Wraps a fabric endpoint.
    pub fn from_fabric(fabric: Box<dyn Fabric>) -> Comm {
        Comm { fabric }
    }
    /// This rank, in `0..size`.
    pub fn rank(&self) -> Rank {
        self.fabric.rank()
    }
    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.fabric.size()
    }
    /// The transport underneath: `local`, `shm` or `tcp`.
    pub fn backend(&self) -> &'static str {
        self.fabric.backend()
    }
    /// The fabric endpoint (register, put, get, active messages).
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
    let Ok(filter) = std::env::var("RDCOLL_LOG") else {
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
    Ok(Comm {
        fabric: rdcoll_transport::bootstrap::init_from_env()?,
    })
}
