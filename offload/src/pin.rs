//! Pinning the agent thread to a core with hwloc (feature `hwloc`; without it the thread is
//! left to the scheduler).

/// Binds the calling thread to one core: agents take cores from the last one down, one per
/// local rank (`slot`), away from host threads, which start at the low ones. Returns the core
/// index, or why it could not bind.
#[cfg(feature = "hwloc")]
pub(crate) fn pin_current_thread(slot: usize) -> Result<usize, String> {
    use hwlocality::cpu::binding::CpuBindingFlags;
    use hwlocality::object::types::ObjectType;
    use hwlocality::Topology;
    let topology = Topology::new().map_err(|e| format!("hwloc topology: {e}"))?;
    let cores: Vec<_> = topology.objects_with_type(ObjectType::Core).collect();
    if cores.is_empty() {
        return Err("hwloc found no cores".into());
    }
    let index = cores.len() - 1 - slot % cores.len();
    let mut set = cores[index]
        .cpuset()
        .ok_or("the core has no cpu set")?
        .clone_target();
    set.singlify();
    topology
        .bind_cpu(&set, CpuBindingFlags::THREAD)
        .map_err(|e| format!("binding to core {index}: {e}"))?;
    Ok(index)
}

/// Without hwloc the agent thread is not pinned.
#[cfg(not(feature = "hwloc"))]
pub(crate) fn pin_current_thread(_slot: usize) -> Result<usize, String> {
    Err("built without the hwloc feature".into())
}

#[cfg(all(test, feature = "hwloc"))]
mod tests {
    use hwlocality::cpu::binding::CpuBindingFlags;
    use hwlocality::Topology;

    #[test]
    fn the_agent_thread_ends_up_on_one_cpu() {
        std::thread::spawn(|| {
            super::pin_current_thread(0).expect("pinned");
            let topology = Topology::new().unwrap();
            let bound = topology.cpu_binding(CpuBindingFlags::THREAD).unwrap();
            assert_eq!(bound.weight(), Some(1), "bound to {bound}");
        })
        .join()
        .unwrap();
    }
}
