//! Bootstrapping through the launcher's own key-value exchange, so that `mpiexec` and `mpirun`
//! need no `RDCOLL_STORE`: rank 0 serves rdcoll's store on a free port and publishes its
//! addresses through the launcher (PMI-1, or PMIx with the `pmix` feature); the other ranks
//! read them after the launcher's barrier. The session stays open for
//! [`abort_through_launcher`] and ends as the process exits.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

#[cfg(feature = "pmix")]
use super::Pmix;
use super::{
    parse_secret, publish_job_id, secret_hex, set_launcher_secret, Pmi1, Pmi2, Secret, StoreHandle,
    StoreServer, TcpStore,
};
use crate::config::FabricConfig;
use crate::error::{Result, TransportError};
use crate::types::Rank;

/// The PMI key rank 0 publishes its store's addresses under.
const STORE_KEY: &str = "rdcoll-store";
/// The PMI key rank 0 publishes the job's secret under (32 hex digits).
const SECRET_PMI_KEY: &str = "rdcoll-secret";

/// This process's launcher session, kept for aborting the job.
static LAUNCHER: OnceLock<Mutex<Session>> = OnceLock::new();

/// Which exchange the launcher offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Offer {
    /// PMI-1 (`PMI_FD` / `PMI_PORT`).
    Pmi1,
    /// PMIx (its server's address in the environment).
    Pmix,
}

/// The exchange the launcher offers, if any (PMI-1 first: Hydra may also set PMIx variables
/// that it does not serve).
pub(super) fn offered() -> Option<Offer> {
    if Pmi1::offered() {
        return Some(Offer::Pmi1);
    }
    let pmix = std::env::vars_os().any(|(k, _)| {
        k.to_str()
            .is_some_and(|k| k.starts_with("PMIX_SERVER_URI") || k == "PMIX_NAMESPACE")
    });
    pmix.then_some(Offer::Pmix)
}

/// A launcher session.
enum Session {
    Pmi1(Pmi1),
    Pmi2(Pmi2),
    #[cfg(feature = "pmix")]
    Pmix(Pmix),
}

impl Session {
    fn open(offer: Offer, cfg: &FabricConfig) -> Result<Session> {
        match offer {
            // The same socket serves both; PMI-1 unless `RDCOLL_PMI=2` asks for PMI-2.
            Offer::Pmi1 => match crate::settings::word("RDCOLL_PMI")? {
                Some("2") => Ok(Session::Pmi2(Pmi2::connect(cfg.bootstrap_timeout)?)),
                _ => Ok(Session::Pmi1(Pmi1::connect(cfg.bootstrap_timeout)?)),
            },
            #[cfg(feature = "pmix")]
            Offer::Pmix => Ok(Session::Pmix(Pmix::connect()?)),
            #[cfg(not(feature = "pmix"))]
            Offer::Pmix => Err(TransportError::Bootstrap(
                "this job was started by a PMIx launcher (Open MPI's mpirun, or srun \
                 --mpi=pmix), which this build of rdcoll cannot speak: build it with the \
                 `pmix` feature (needs libpmix-dev), set RDCOLL_STORE, or start the job with \
                 rdcoll-run or MPICH's mpiexec"
                    .into(),
            )),
        }
    }

    fn put(&mut self, key: &str, value: &str) -> Result<()> {
        match self {
            Session::Pmi1(p) => p.put(key, value),
            Session::Pmi2(p) => p.put(key, value),
            #[cfg(feature = "pmix")]
            Session::Pmix(p) => p.put(key, value),
        }
    }

    fn barrier(&mut self) -> Result<()> {
        match self {
            Session::Pmi1(p) => p.barrier(),
            Session::Pmi2(p) => p.barrier(),
            #[cfg(feature = "pmix")]
            Session::Pmix(p) => p.barrier(),
        }
    }

    /// What rank 0 published under `key`.
    fn get_from_rank0(&mut self, key: &str) -> Result<String> {
        match self {
            Session::Pmi1(p) => p.get(key),
            Session::Pmi2(p) => p.get(0, key),
            #[cfg(feature = "pmix")]
            Session::Pmix(p) => p.get(0, key),
        }
    }

    fn abort(&mut self, code: i32) -> Result<()> {
        match self {
            Session::Pmi1(p) => p.abort(code),
            Session::Pmi2(p) => p.abort(code),
            #[cfg(feature = "pmix")]
            Session::Pmix(p) => p.abort(code, "rdcoll: the job was aborted"),
        }
    }

    fn finalize(&mut self) -> Result<()> {
        match self {
            Session::Pmi1(p) => p.finalize(),
            Session::Pmi2(p) => p.finalize(),
            #[cfg(feature = "pmix")]
            Session::Pmix(p) => p.finalize(),
        }
    }
}

/// Connects to the store that rank 0 serves and announces through the launcher.
pub(super) fn store_through_launcher(rank: Rank, cfg: &FabricConfig) -> Result<StoreHandle> {
    let offer =
        offered().ok_or_else(|| TransportError::Bootstrap("no launcher exchange".into()))?;
    let mut session = Session::open(offer, cfg)?;
    let handle = if rank == 0 {
        // The job's secret travels through the launcher's exchange (private to the job), and
        // the store answers only its holders.
        let secret: Secret = rand::random();
        let server = StoreServer::start_secured("0.0.0.0:0", secret)?;
        let port = server.addr().port();
        let addrs: Vec<String> = reachable_addresses()
            .iter()
            .map(|ip| format!("{ip}:{port}"))
            .collect();
        session.put(STORE_KEY, &addrs.join(","))?;
        session.put(SECRET_PMI_KEY, &secret_hex(&secret))?;
        session.barrier()?;
        set_launcher_secret(secret);
        let addr = format!("127.0.0.1:{port}");
        let client = TcpStore::connect_secured(&addr, cfg.bootstrap_timeout, &secret)?;
        publish_job_id(&client)?;
        StoreHandle {
            local_ip: client.local_ip(),
            store: Arc::new(client),
            server: Some(server),
        }
    } else {
        session.barrier()?;
        let addrs = session.get_from_rank0(STORE_KEY)?;
        let secret = parse_secret(&session.get_from_rank0(SECRET_PMI_KEY)?)
            .ok_or_else(|| TransportError::Bootstrap("rank 0's secret is malformed".into()))?;
        set_launcher_secret(secret);
        let client = connect_any(&addrs, &secret)?;
        StoreHandle {
            local_ip: client.local_ip(),
            store: Arc::new(client),
            server: None,
        }
    };
    if LAUNCHER.set(Mutex::new(session)).is_ok() {
        // SAFETY: registers a plain `extern "C"` function with no arguments.
        unsafe { libc::atexit(finalize_at_exit) };
    }
    Ok(handle)
}

/// Set once the launcher was asked to abort the job: the session is not finalised after.
static ABORTED: AtomicBool = AtomicBool::new(false);

/// Ends the launcher session as the process exits: Hydra takes a process that drops its PMI
/// connection without `finalize` for a failed one and kills the job.
extern "C" fn finalize_at_exit() {
    if ABORTED.load(Ordering::Acquire) {
        return;
    }
    if let Some(Ok(mut session)) = LAUNCHER.get().map(|m| m.try_lock()) {
        let _ = session.finalize();
    }
}

/// Asks the launcher that started this job, if it offers a way, to end every process of it
/// with `code`. Returns whether a launcher was told.
pub fn abort_through_launcher(code: i32) -> bool {
    let Some(Ok(mut session)) = LAUNCHER.get().map(|m| m.lock()) else {
        return false;
    };
    ABORTED.store(true, Ordering::Release);
    session.abort(code).is_ok()
}

/// The first of `addrs` (comma-separated `ip:port`) that accepts a connection.
fn connect_any(addrs: &str, secret: &Secret) -> Result<TcpStore> {
    let mut failures = Vec::new();
    for a in addrs.split(',').filter(|a| !a.is_empty()) {
        match TcpStore::connect_secured(a, Duration::from_secs(2), secret) {
            Ok(c) => return Ok(c),
            Err(e) => failures.push(e.to_string()),
        }
    }
    Err(TransportError::Bootstrap(format!(
        "none of rank 0's store addresses ({addrs}) could be reached: {}",
        failures.join("; ")
    )))
}

/// This host's IPv4 addresses on interfaces that are up, loopback last (a remote rank that
/// tried loopback first could reach another job's store on its own host).
fn reachable_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `list`, freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } == 0 {
        let mut cur = list;
        while !cur.is_null() {
            // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freed.
            let ifa = unsafe { &*cur };
            let up = ifa.ifa_flags & libc::IFF_UP as u32 != 0;
            // SAFETY: a non-null ifa_addr points to a sockaddr whose family says its type.
            let inet = !ifa.ifa_addr.is_null()
                && unsafe { (*ifa.ifa_addr).sa_family } as i32 == libc::AF_INET;
            if up && inet {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                if !ip.is_loopback() {
                    out.push(IpAddr::V4(ip));
                }
            }
            cur = ifa.ifa_next;
        }
        // SAFETY: `list` came from getifaddrs and is freed once.
        unsafe { libc::freeifaddrs(list) };
    }
    out.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_comes_last() {
        let a = super::reachable_addresses();
        assert!(a.last().is_some_and(|ip| ip.is_loopback()));
        assert_eq!(a.iter().filter(|ip| ip.is_loopback()).count(), 1);
    }
}
