//! The floors `rdcoll-bench transport` judges each backend against, measured in the same
//! run: a bare cache-line ping-pong between two threads and between the two rank processes,
//! a busy-polled TCP loopback ping-pong, single-thread `memcpy` and cross-memory-attach
//! bandwidth.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rdcoll_transport::Fabric;

use super::{median, wait_message, BATCHES, GET_SIZES};
/// Where the two processes probably ran, judging by the floor: the ratio of a fixed software
/// cost to the floor depends on it, so every judgement says which it was.
pub(super) fn placement(floor_ns: f64) -> &'static str {
    if floor_ns < 35.0 {
        "vCPUs on one physical core (SMT siblings)"
    } else if floor_ns < 120.0 {
        "vCPUs on neighbouring cores"
    } else {
        "vCPUs on distant cores"
    }
}

/// The cache-line floor between the two rank processes of a process backend: two counters in
/// a small shared mapping that rank 0 creates and names to rank 1 through the fabric.
pub(super) struct PairedFloor {
    mem: *mut libc::c_void,
    count: u64,
}

const FLOOR_MAP: usize = 4096;

impl PairedFloor {
    /// Only for shm: `local` ranks are threads, and `tcp` ranks share the two cores with their
    /// I/O threads, which makes a spinning floor meaningless.
    pub(super) fn open(f: &dyn Fabric) -> Result<Option<PairedFloor>, String> {
        if f.backend() != "shm" {
            return Ok(None);
        }
        let name = if f.rank() == 0 {
            let name = format!("/rdcoll-bench-floor-{}", std::process::id());
            f.send(1, name.as_bytes()).map_err(|e| e.to_string())?;
            name
        } else {
            String::from_utf8(wait_message(f)?).map_err(|e| e.to_string())?
        };
        let cname = std::ffi::CString::new(name).map_err(|e| e.to_string())?;
        let flags = if f.rank() == 0 {
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR
        } else {
            libc::O_RDWR
        };
        if f.rank() == 1 {
            // Rank 0 creates it before sending the name, but sizes it after: wait for that.
            wait_message(f)?;
        }
        // SAFETY: shm_open with a valid C string; the descriptor is closed below.
        let fd = unsafe { libc::shm_open(cname.as_ptr(), flags, 0o600) };
        if fd < 0 {
            return Err(format!("shm_open: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: sizing and mapping our descriptor, then closing it.
        let mem = unsafe {
            if f.rank() == 0 {
                libc::ftruncate(fd, FLOOR_MAP as libc::off_t);
            }
            let m = libc::mmap(
                std::ptr::null_mut(),
                FLOOR_MAP,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            libc::close(fd);
            m
        };
        if f.rank() == 0 {
            f.send(1, b"sized").map_err(|e| e.to_string())?;
            // Rank 1 has mapped it once it answers; then the name can go.
            wait_message(f)?;
            // SAFETY: unlinking the name we created.
            unsafe { libc::shm_unlink(cname.as_ptr()) };
        } else {
            f.send(0, b"mapped").map_err(|e| e.to_string())?;
        }
        if mem == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        Ok(Some(PairedFloor { mem, count: 0 }))
    }

    fn words(&self) -> (&AtomicU64, &AtomicU64) {
        // SAFETY: the mapping is page aligned and FLOOR_MAP long; offsets 0 and 128 are
        // 8-aligned and on separate cache lines.
        unsafe {
            (
                &*(self.mem as *const AtomicU64),
                &*((self.mem as *const u8).add(128) as *const AtomicU64),
            )
        }
    }

    /// `n` round trips; returns one-way ns.
    pub(super) fn batch(&mut self, me: u32, n: u64) -> f64 {
        let (ping, pong) = self.words();
        let start = self.count;
        let t0 = Instant::now();
        for i in start + 1..=start + n {
            if me == 0 {
                ping.store(i, Ordering::Release);
                while pong.load(Ordering::Acquire) != i {
                    std::hint::spin_loop();
                }
            } else {
                while ping.load(Ordering::Acquire) != i {
                    std::hint::spin_loop();
                }
                pong.store(i, Ordering::Release);
            }
        }
        self.count = start + n;
        t0.elapsed().as_nanos() as f64 / n as f64 / 2.0
    }
}

impl Drop for PairedFloor {
    fn drop(&mut self) {
        // SAFETY: unmapping what `open` mapped.
        unsafe { libc::munmap(self.mem, FLOOR_MAP) };
    }
}

/// Two processes bouncing a counter through two cache lines of shared memory: the floor for
/// one-way latency between processes on this machine.
pub(super) fn cacheline_floor_ns(iters: u64) -> f64 {
    // SAFETY: an anonymous shared mapping of two cache lines, unmapped at the end.
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if mem == libc::MAP_FAILED {
        return f64::NAN;
    }
    // SAFETY: the mapping is page aligned and 4096 bytes long; offsets 0 and 128 are aligned.
    let (ping, pong) = unsafe {
        (
            &*(mem as *const AtomicU64),
            &*((mem as *const u8).add(128) as *const AtomicU64),
        )
    };
    // SAFETY: fork; the child only spins on the shared words and exits with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        for i in 1..=iters {
            while ping.load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
            pong.store(i, Ordering::Release);
        }
        // SAFETY: leaving the forked child without running the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    let per_batch = iters / (BATCHES + 1);
    let mut batches = Vec::new();
    let mut i = 0;
    for b in 0..=BATCHES {
        let t0 = Instant::now();
        for _ in 0..per_batch {
            i += 1;
            ping.store(i, Ordering::Release);
            while pong.load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
        }
        if b > 0 {
            batches.push(t0.elapsed().as_nanos() as f64 / per_batch as f64 / 2.0);
        }
    }
    // Let the child finish its count.
    while i < iters {
        i += 1;
        ping.store(i, Ordering::Release);
        while pong.load(Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
    }
    let ns = median(&mut batches);
    // SAFETY: reaping our child, then unmapping.
    unsafe {
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        libc::munmap(mem, 4096);
    }
    ns
}

/// One-way latency (ns) of a bare 8-byte ping-pong over a TCP loopback connection between two
/// processes, both busy-polling nonblocking sockets with `TCP_NODELAY`: what the tcp backend's
/// latency is set against (NaN if the sockets cannot be set up).
pub(super) fn tcp_floor_ns(iters: u64) -> f64 {
    use std::io::{Read, Write};
    fn exchange(s: &mut std::net::TcpStream, buf: &mut [u8; 8]) -> bool {
        let mut got = 0;
        while got < 8 {
            match s.read(&mut buf[got..]) {
                Ok(0) => return false,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(_) => return false,
            }
        }
        true
    }
    let Ok(listener) = std::net::TcpListener::bind("127.0.0.1:0") else {
        return f64::NAN;
    };
    let Ok(addr) = listener.local_addr() else {
        return f64::NAN;
    };
    // SAFETY: fork; the child only runs the echo loop over its own socket and exits with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut buf = [0u8; 8];
        if let Ok(mut s) = std::net::TcpStream::connect(addr) {
            let _ = s.set_nodelay(true);
            let _ = s.set_nonblocking(true);
            for _ in 0..iters {
                if !exchange(&mut s, &mut buf) || s.write_all(&buf).is_err() {
                    break;
                }
            }
        }
        // SAFETY: leaving the forked child without running the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    let mut ns = f64::NAN;
    if let Ok((mut s, _)) = listener.accept() {
        let _ = s.set_nodelay(true);
        let _ = s.set_nonblocking(true);
        let mut buf = [0u8; 8];
        let per_batch = iters / (BATCHES + 1);
        let mut batches = Vec::new();
        'all: for b in 0..=BATCHES {
            let t0 = Instant::now();
            for _ in 0..per_batch {
                if s.write_all(&buf).is_err() || !exchange(&mut s, &mut buf) {
                    break 'all;
                }
            }
            if b > 0 {
                batches.push(t0.elapsed().as_nanos() as f64 / per_batch as f64 / 2.0);
            }
        }
        if batches.len() == BATCHES as usize {
            ns = median(&mut batches);
        }
    }
    // SAFETY: reaping our child (it exits once its count is done or the socket closes).
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    ns
}

/// Bandwidth (bytes/s) of a bare `process_vm_readv` loop from a forked child's buffer at each
/// of [`GET_SIZES`]: the ceiling of the single-copy path that gets of user memory take on shm.
/// `None` where the kernel refuses cross-memory attach.
pub(super) fn cma_bw() -> Option<Vec<(usize, f64)>> {
    let max = *GET_SIZES.last()?;
    let src = vec![7u8; max];
    let mut dst = vec![0u8; max];
    // SAFETY: fork; the child only sleeps until it is killed below (its copy of `src` is what
    // the parent reads).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        loop {
            // SAFETY: pause has no preconditions; the child leaves by the parent's SIGKILL.
            unsafe { libc::pause() };
        }
    }
    if pid < 0 {
        return None;
    }
    let read = |len: usize, dst: &mut [u8]| -> bool {
        let local = libc::iovec {
            iov_base: dst.as_mut_ptr() as *mut libc::c_void,
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: src.as_ptr() as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: `dst` holds `len` writable bytes; the remote range is the child's copy of
        // `src`, checked by the kernel.
        unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) == len as isize }
    };
    let mut rows = Vec::new();
    for &size in GET_SIZES {
        let iters = ((512usize << 20) / size).clamp(4, 2000);
        if !read(size, &mut dst) {
            rows.clear();
            break;
        }
        let t = Instant::now();
        for _ in 0..iters {
            read(size, &mut dst);
        }
        rows.push((size, (size * iters) as f64 / t.elapsed().as_secs_f64()));
    }
    // SAFETY: ending and reaping our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    (!rows.is_empty()).then_some(rows)
}

/// Single-thread memcpy bandwidth (bytes/s) at `size`, warm buffers.
pub(super) fn memcpy_bw(size: usize) -> f64 {
    let src = vec![1u8; size];
    let mut dst = vec![0u8; size];
    let iters = ((512usize << 20) / size).clamp(4, 2000);
    dst.copy_from_slice(&src);
    let t = Instant::now();
    for _ in 0..iters {
        // SAFETY: distinct buffers of `size` bytes each.
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::hint::black_box(src.as_ptr()),
                dst.as_mut_ptr(),
                size,
            )
        };
        std::hint::black_box(&mut dst);
    }
    (size * iters) as f64 / t.elapsed().as_secs_f64()
}
