//! A PMIx client (the `pmix` feature, over the system's libpmix through csrc/pmix_shim.c): the
//! exchange Open MPI's `mpirun` and Slurm's `--mpi=pmix` run for their jobs. As with PMI-1,
//! rdcoll uses it to find its own store and to abort the job.

use std::ffi::{c_char, c_int, CStr, CString};

use crate::error::{Result, TransportError};
use crate::types::Rank;

extern "C" {
    fn rdc_pmix_init(rank: *mut u32, size: *mut u32) -> c_int;
    fn rdc_pmix_put(key: *const c_char, value: *const c_char) -> c_int;
    fn rdc_pmix_fence() -> c_int;
    fn rdc_pmix_get(rank: u32, key: *const c_char, out: *mut c_char, cap: usize) -> c_int;
    fn rdc_pmix_abort(code: c_int, msg: *const c_char) -> c_int;
    fn rdc_pmix_finalize() -> c_int;
}

/// Longest value [`Pmix::get`] returns.
const MAX_VALUE: usize = 4096;

fn pmix_error(what: &str, rc: c_int) -> TransportError {
    TransportError::Bootstrap(format!("PMIx: {what} failed (status {rc})"))
}

fn c_string(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| TransportError::InvalidArgument(format!("{s:?} holds a NUL")))
}

/// This process's PMIx session.
pub struct Pmix {
    rank: Rank,
    size: usize,
}

impl Pmix {
    /// Whether the launcher offers PMIx (its server's address is in the environment).
    pub fn offered() -> bool {
        std::env::vars_os().any(|(k, _)| {
            k.to_str()
                .is_some_and(|k| k.starts_with("PMIX_SERVER_URI") || k == "PMIX_NAMESPACE")
        })
    }

    /// Connects to the launcher's PMIx server.
    pub fn connect() -> Result<Pmix> {
        let (mut rank, mut size) = (0u32, 0u32);
        // SAFETY: both pointers are to live locals the call fills in.
        let rc = unsafe { rdc_pmix_init(&mut rank, &mut size) };
        if rc != 0 {
            return Err(pmix_error("init", rc));
        }
        Ok(Pmix {
            rank,
            size: size as usize,
        })
    }

    /// This process's rank and the job's size, as the launcher says.
    pub fn rank_and_size(&self) -> (Rank, usize) {
        (self.rank, self.size)
    }

    /// Publishes `key` = `value` to every process of the job.
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        let (k, v) = (c_string(key)?, c_string(value)?);
        // SAFETY: both are NUL-terminated strings alive for the call (PMIx copies them).
        let rc = unsafe { rdc_pmix_put(k.as_ptr(), v.as_ptr()) };
        if rc != 0 {
            return Err(pmix_error("put", rc));
        }
        Ok(())
    }

    /// Waits for every process of the job; what each put before is then visible to all.
    pub fn barrier(&mut self) -> Result<()> {
        // SAFETY: no arguments; the session is initialised.
        let rc = unsafe { rdc_pmix_fence() };
        if rc != 0 {
            return Err(pmix_error("fence", rc));
        }
        Ok(())
    }

    /// What `rank` published under `key`.
    pub fn get(&mut self, rank: Rank, key: &str) -> Result<String> {
        let k = c_string(key)?;
        let mut out = vec![0u8; MAX_VALUE];
        // SAFETY: `k` is NUL-terminated; `out` is writable for MAX_VALUE bytes, and the shim
        // writes a NUL-terminated string within them.
        let rc = unsafe { rdc_pmix_get(rank, k.as_ptr(), out.as_mut_ptr().cast(), out.len()) };
        if rc != 0 {
            return Err(pmix_error(&format!("get {key} of rank {rank}"), rc));
        }
        let value = CStr::from_bytes_until_nul(&out)
            .map_err(|_| pmix_error("get (unterminated value)", -1))?;
        Ok(value.to_string_lossy().into_owned())
    }

    /// Asks the launcher to end the whole job with `code`.
    pub fn abort(&mut self, code: i32, message: &str) -> Result<()> {
        let m = c_string(message).unwrap_or_default();
        // SAFETY: `m` is NUL-terminated and alive for the call.
        let rc = unsafe { rdc_pmix_abort(code, m.as_ptr()) };
        if rc != 0 {
            return Err(pmix_error("abort", rc));
        }
        Ok(())
    }

    /// Ends the session.
    pub fn finalize(&mut self) -> Result<()> {
        // SAFETY: no arguments; the session is initialised.
        let rc = unsafe { rdc_pmix_finalize() };
        if rc != 0 {
            return Err(pmix_error("finalize", rc));
        }
        Ok(())
    }
}
