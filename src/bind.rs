//! Binding this rank's process to one core (`RDCOLL_BIND=core`), as Open MPI's `mpirun` does
//! by default: ranks the scheduler leaves on one core take turns at every message.

/// Binds the calling process to the `local_rank`-th core it may run on, if there are at least
/// `local_size` of them (else it leaves the binding alone: ranks would share cores anyway).
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
    // SAFETY: CPU_ISSET reads the set within its fixed size.
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &allowed) })
        .collect();
    if cpus.len() < local_size {
        tracing::info!(
            "RDCOLL_BIND: {} ranks here and {} cores: not binding",
            local_size,
            cpus.len()
        );
        return;
    }
    let cpu = cpus[local_rank % cpus.len()];
    // SAFETY: as above.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (it came from the set).
    unsafe { libc::CPU_SET(cpu, &mut one) };
    // SAFETY: a valid set of the size passed, for this process.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) } != 0 {
        tracing::warn!("RDCOLL_BIND: binding to core {cpu} failed");
    }
}
