//! Binding each rank's process to cores of its own (`RDCOLL_BIND=core`), as Open MPI's
//! `mpirun` does by default: ranks the scheduler leaves on one core take turns at every
//! message. The cores a process may run on are split evenly, in order, between the ranks on
//! the host, so a rank in thread mode keeps a core for its agent where there are enough.

/// Binds the calling process to its share of the cores it may run on: the `local_rank`-th of
/// `local_size` equal slices. Where there are fewer cores than ranks it leaves the binding
/// alone (ranks share cores anyway).
pub(crate) fn to_core(local_rank: usize, local_size: usize) {
    // SAFETY: `cpu_set_t` is plain data; zeroed is an empty set.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid set of the size passed, for this process (pid 0).
    let got =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut allowed) };
    if got != 0 {
        tracing::warn!("RDCOLL_BIND: cannot read this process's cores; not binding");
        return;
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads the set within its fixed size.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &allowed) })
        .collect();
    if local_size == 0 || cpus.len() < local_size {
        tracing::info!(
            "RDCOLL_BIND: {} ranks here and {} cores: not binding",
            local_size,
            cpus.len()
        );
        return;
    }
    let per = cpus.len() / local_size;
    let mine = &cpus[local_rank % local_size * per..][..per];
    // SAFETY: as above.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in mine {
        // SAFETY: `cpu` is below CPU_SETSIZE (it came from the set).
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: a valid set of the size passed, for this process.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        tracing::warn!("RDCOLL_BIND: binding to cores {mine:?} failed");
    }
}
