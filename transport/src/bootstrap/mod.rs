//! Starting a job: rank and size from the launcher's environment, a key-value store to exchange
//! addresses (TCP, served by rank 0 or by `rdcoll-run`; or files on a shared path), the per-job
//! secret, and the choice of backend (same host: shm; otherwise tcp).
//!
//! | variable | meaning |
//! |---|---|
//! | `RDCOLL_RANK`, `RDCOLL_SIZE` | rank and size (else Slurm, Open MPI, MPICH Hydra variables) |
//! | `RDCOLL_STORE` | `host:port` (rank 0 serves it unless `RDCOLL_STORE_SERVER=launcher`) or `file:/dir`; unset under a launcher that speaks PMI-1 or PMI-2 (`PMI_FD` / `PMI_PORT`: MPICH's `mpiexec`, `srun --mpi=pmi2`; `RDCOLL_PMI` chooses) or PMIx (Open MPI's `mpirun`, Slurm `--mpi=pmix`; the `pmix` feature), rank 0 serves it and publishes its address through the launcher |
//! | `RDCOLL_TRANSPORT` | `auto` (default), `shm`, `tcp`, or `ofi` (libfabric; the `ofi` feature) |
//! | `RDCOLL_TCP_HOST` | address this rank listens on for tcp (default: the one that reaches the store) |

mod env;
mod file_store;
mod launcher;
mod pmi1;
mod pmi2;
#[cfg(feature = "pmix")]
mod pmix;
mod store;
mod store_gate;
mod tcp_store;

use std::net::IpAddr;
use std::sync::Arc;

pub use env::{rank_and_size, rank_and_size_from, RANK_SIZE_VARS};
pub use file_store::FileStore;
pub use launcher::abort_through_launcher;
pub use pmi1::Pmi1;
pub use pmi2::Pmi2;
#[cfg(feature = "pmix")]
pub use pmix::Pmix;
pub use store::Store;
pub use tcp_store::{Secret, StoreServer, TcpStore};

use crate::config::FabricConfig;
use crate::error::{Result, TransportError};
use crate::fabric::Fabric;
use crate::types::Rank;

/// Store key holding the per-job random secret checked on every tcp connection.
pub const SECRET_KEY: &str = "job/secret";
/// Store key holding the random job id (names shared-memory segments).
pub const JOB_ID_KEY: &str = "job/id";

/// Which backend to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportChoice {
    /// shm when every rank is on this host (same kernel, network and mount namespace), else tcp.
    Auto,
    /// Shared memory between processes on one host.
    Shm,
    /// TCP sockets, across hosts.
    Tcp,
    /// libfabric (the `ofi` feature): RDMA networks, or its tcp, shm, sockets providers.
    Ofi,
}

impl TransportChoice {
    /// Parses `RDCOLL_TRANSPORT`.
    pub fn from_env() -> Result<Self> {
        match crate::settings::word("RDCOLL_TRANSPORT")? {
            None | Some("auto") => Ok(TransportChoice::Auto),
            Some("shm") => Ok(TransportChoice::Shm),
            Some("tcp") => Ok(TransportChoice::Tcp),
            Some("ofi") if cfg!(feature = "ofi") => Ok(TransportChoice::Ofi),
            // The declared words leave only `ofi` in a build without it.
            Some(_) => Err(TransportError::InvalidArgument(
                "RDCOLL_TRANSPORT=ofi: this build has no libfabric backend (build rdcoll with \
                 `--features ofi`, which needs libfabric-dev)"
                    .into(),
            )),
        }
    }
}

/// A connected store plus what bootstrap learnt about this process.
pub struct StoreHandle {
    /// The store.
    pub store: Arc<dyn Store>,
    /// Kept alive while this rank serves the store.
    pub server: Option<StoreServer>,
    /// The local address that reaches the store (a good address to listen on).
    pub local_ip: Option<IpAddr>,
}

/// Connects to (or, as rank 0, serves) the store named by `RDCOLL_STORE`, and makes sure the job
/// secret and id are set.
pub fn connect_store(rank: Rank, cfg: &FabricConfig) -> Result<StoreHandle> {
    let spec = match std::env::var("RDCOLL_STORE") {
        Ok(spec) => spec,
        Err(_) if launcher::offered().is_some() => {
            return launcher::store_through_launcher(rank, cfg)
        }
        Err(_) => {
            // Slurm offers PMI only when asked (`MpiDefault=none` is common).
            let slurm = match std::env::var_os("SLURM_JOB_ID") {
                Some(_) => {
                    " (under srun: `srun --mpi=pmi2`, or `--mpi=pmix` with the `pmix` feature)"
                }
                None => "",
            };
            return Err(TransportError::Bootstrap(format!(
                "RDCOLL_STORE is not set and the launcher offers no PMI{slurm}: start the job \
                 with rdcoll-run or mpiexec, or set RDCOLL_STORE=host:port (rank 0 serves it) \
                 or RDCOLL_STORE=file:/shared/dir"
            )));
        }
    };
    let external = crate::settings::word("RDCOLL_STORE_SERVER")? == Some("launcher");
    let handle = if let Some(dir) = spec.strip_prefix("file:") {
        StoreHandle {
            store: Arc::new(FileStore::open(dir)?),
            server: None,
            local_ip: None,
        }
    } else {
        let addr = spec.strip_prefix("tcp://").unwrap_or(&spec).to_string();
        let secret = job_secret()?;
        let serve = |a: &str| match secret {
            Some(s) => StoreServer::start_secured(a, s),
            None => StoreServer::start(a),
        };
        let server = if rank == 0 && !external {
            let port = addr.rsplit_once(':').map(|(_, p)| p).unwrap_or("");
            Some(serve(addr.as_str()).or_else(|_| {
                serve(&format!("0.0.0.0:{port}")).map_err(|e| {
                    TransportError::Bootstrap(format!(
                        "rank 0 could not serve the store at {addr}: {e}"
                    ))
                })
            })?)
        } else {
            None
        };
        let client = connect_to_store(&addr, cfg.bootstrap_timeout)?;
        let local_ip = client.local_ip();
        StoreHandle {
            store: Arc::new(client),
            server,
            local_ip,
        }
    };
    if rank == 0 && !external {
        publish_job_identity(handle.store.as_ref())?;
    }
    Ok(handle)
}

/// Sets a fresh random job id and, where the launcher gave the ranks no secret of their own
/// (`job_secret` is `None`), a fresh secret in the store (done once per job by whoever owns the
/// store).
pub fn publish_job_identity(store: &dyn Store) -> Result<()> {
    if job_secret()?.is_none() {
        let secret: Secret = rand::random();
        store.set(SECRET_KEY, &secret)?;
    }
    publish_job_id(store).map(drop)
}

/// Sets a fresh random job id (it names the job's shared-memory segments); returns it.
pub fn publish_job_id(store: &dyn Store) -> Result<String> {
    let id = format!("{:016x}", rand::random::<u64>());
    store.set(JOB_ID_KEY, id.as_bytes())?;
    Ok(id)
}

/// Where a launcher puts the job's secret for its ranks (32 hex digits).
pub const SECRET_VAR: &str = "RDCOLL_JOB_SECRET";

/// The secret learnt through a launcher's exchange (PMI), for [`job_secret`].
static LAUNCHER_SECRET: std::sync::OnceLock<Secret> = std::sync::OnceLock::new();

/// The job's secret as the launcher handed it to this process (`RDCOLL_JOB_SECRET`, or through
/// PMI), `None` if it did not: the store is then unauthenticated and holds the secret itself.
pub fn job_secret() -> Result<Option<Secret>> {
    if let Some(s) = LAUNCHER_SECRET.get() {
        return Ok(Some(*s));
    }
    match std::env::var(SECRET_VAR) {
        Ok(hex) => parse_secret(&hex)
            .map(Some)
            .ok_or_else(|| TransportError::Bootstrap(format!("{SECRET_VAR} is not 32 hex digits"))),
        Err(_) => Ok(None),
    }
}

/// Records the secret learnt through the launcher's exchange.
pub(crate) fn set_launcher_secret(secret: Secret) {
    let _ = LAUNCHER_SECRET.set(secret);
}

/// `secret` as 32 hex digits.
pub fn secret_hex(secret: &Secret) -> String {
    secret.iter().map(|b| format!("{b:02x}")).collect()
}

/// The secret written as 32 hex digits.
pub fn parse_secret(hex: &str) -> Option<Secret> {
    let hex = hex.trim();
    if hex.len() != 32 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Connects to the store at `addr`, presenting the job's secret when this process has one.
pub fn connect_to_store(addr: &str, timeout: std::time::Duration) -> Result<TcpStore> {
    match job_secret()? {
        Some(s) => TcpStore::connect_secured(addr, timeout, &s),
        None => TcpStore::connect(addr, timeout),
    }
}

/// Identifies "this host" for choosing shm: boot id, plus network and mount namespaces (ranks in
/// different namespaces are treated as different hosts).
pub fn host_identity() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let ns = |n: &str| {
        std::fs::read_link(format!("/proc/self/ns/{n}"))
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!(
        "{}|{}|{}|{}",
        host.trim(),
        boot.trim(),
        ns("net"),
        ns("mnt")
    )
}

/// Builds this rank's fabric from the environment: the normal way a program joins its job.
pub fn init_from_env() -> Result<Box<dyn Fabric>> {
    let (rank, size) = rank_and_size()?;
    let cfg = FabricConfig::from_env()?;
    let choice = TransportChoice::from_env()?;
    if size == 1 && std::env::var("RDCOLL_STORE").is_err() {
        return Ok(Box::new(crate::local::create(1)?.remove(0)));
    }
    let handle = connect_store(rank, &cfg)?;
    let fabric = init_with_store(rank, size, &handle, choice, &cfg)?;
    // Kept (a client of a store the launcher serves) to say, when this rank fails, that it
    // failed first.
    if handle.server.is_none() {
        let _ = FAILURE_STORE.set((rank, handle.store.clone()));
    }
    Ok(fabric)
}

/// This rank and the store [`report_failure`] writes to.
static FAILURE_STORE: std::sync::OnceLock<(Rank, Arc<dyn Store>)> = std::sync::OnceLock::new();

/// Store key counting the ranks that reported a failure of their own; `FAILED_KEY/N` holds the
/// N-th of them (from 1).
pub const FAILED_KEY: &str = "job/failed";

/// Records in the job's store that this rank is failing of its own accord (a panic, an abort),
/// before its peers can notice it go and fail in turn: the launcher (`rdcoll-run`) names the
/// first rank that did so rather than the first to exit. Once per process; best effort.
pub fn report_failure() {
    static ONCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if ONCE.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    if let Some((rank, store)) = FAILURE_STORE.get() {
        if let Ok(n) = store.add(FAILED_KEY, 1) {
            let _ = store.set(&format!("{FAILED_KEY}/{n}"), rank.to_string().as_bytes());
        }
    }
}

/// Checks, before anything waits for peers, what would otherwise only show as a bootstrap
/// timeout: a rank started twice, and a job size or transport that differs from rank 0's.
fn roll_call(
    rank: Rank,
    size: usize,
    choice: TransportChoice,
    store: &dyn Store,
    cfg: &FabricConfig,
) -> Result<()> {
    if store.add(&format!("roll/{rank}"), 1)? > 1 {
        return Err(TransportError::Bootstrap(format!(
            "rank {rank} was started twice in this job (the launcher's rank variable, or \
             RDCOLL_RANK, repeats)"
        )));
    }
    let mine = format!("{size}/{choice:?}");
    if rank == 0 {
        return store.set("roll/settings", mine.as_bytes());
    }
    let theirs = store
        .get("roll/settings", cfg.bootstrap_timeout)
        .map_err(|e| match e {
            TransportError::Timeout { .. } => TransportError::Bootstrap(format!(
                "rank 0 never joined the job within {:?} (is it running, and with the same store?)",
                cfg.bootstrap_timeout
            )),
            e => e,
        })?;
    let theirs = String::from_utf8_lossy(&theirs).to_string();
    if theirs != mine {
        return Err(TransportError::Bootstrap(format!(
            "rank {rank} was started with size/transport {mine}, rank 0 with {theirs} \
             (RDCOLL_SIZE or the launcher's size, RDCOLL_TRANSPORT)"
        )));
    }
    Ok(())
}

/// Builds the fabric for `rank` of `size` over an already connected store.
pub fn init_with_store(
    rank: Rank,
    size: usize,
    handle: &StoreHandle,
    choice: TransportChoice,
    cfg: &FabricConfig,
) -> Result<Box<dyn Fabric>> {
    let store = handle.store.as_ref();
    roll_call(rank, size, choice, store, cfg)?;
    let choice = match choice {
        TransportChoice::Auto => {
            let me = host_identity();
            store.set(&format!("host/{rank}"), me.as_bytes())?;
            let mut same = true;
            for r in 0..size {
                same &= store.get(&format!("host/{r}"), cfg.bootstrap_timeout)? == me.as_bytes();
            }
            // Every rank must take the same decision: agree on "all on one host" via a counter.
            let key = "host/all-same";
            store.add(key, i64::from(same))?;
            store.barrier("host-decided", size, cfg.bootstrap_timeout)?;
            if store.add(key, 0)? == size as i64 {
                TransportChoice::Shm
            } else {
                TransportChoice::Tcp
            }
        }
        c => c,
    };
    let fabric: Box<dyn Fabric> = match choice {
        TransportChoice::Shm => Box::new(crate::shm::ShmFabric::new(rank, size, store, cfg)?),
        #[cfg(feature = "ofi")]
        TransportChoice::Ofi => Box::new(crate::ofi::OfiFabric::new(
            rank,
            size,
            store,
            cfg,
            handle.local_ip,
        )?),

        _ => Box::new(crate::tcp::TcpFabric::new(
            rank,
            size,
            store,
            cfg,
            handle.local_ip,
        )?),
    };
    store.barrier("bootstrap-done", size, cfg.bootstrap_timeout)?;
    Ok(fabric)
}
