//! A rank of a `wan` run (`rdcoll-bench wan-rank SIZE DIR`): one warm-up broadcast, a
//! barrier, then the timed broadcast of SIZE bytes from rank 0 with whatever algorithm
//! `RDCOLL_BCAST_ALGORITHM` names, as a user's program would. The root writes DIR/start as it
//! begins (the harness times its link changes from then), each rank DIR/end.RANK as it ends
//! (CLOCK_MONOTONIC nanoseconds); every rank checks the bytes; rank 0
//! prints `elapsed_ns=N`, from its start to the last rank's completion (CLOCK_MONOTONIC is
//! one clock for every namespace of the machine).

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn byte(i: usize) -> u8 {
    (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2]
}

pub fn run(args: &[String]) -> i32 {
    let (Some(size), Some(dir)) = (
        args.first().and_then(|s| s.parse::<usize>().ok()),
        args.get(1),
    ) else {
        eprintln!("usage: rdcoll-bench wan-rank SIZE DIR");
        return 2;
    };
    let world = match rdcoll::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("wan-rank: init: {e}");
            return 3;
        }
    };
    let me = world.rank();
    let result = (|| -> rdcoll::Result<Option<u64>> {
        let mut warm = vec![0u8; 1 << 20];
        world.bcast(&mut warm, 0)?;
        let mut buf: Vec<u8> = if me == 0 {
            (0..size).map(byte).collect()
        } else {
            vec![0; size]
        };
        world.barrier()?;
        let start = if me == 0 {
            let start = monotonic_ns();
            let _ = std::fs::write(std::path::Path::new(dir).join("start"), start.to_string());
            start
        } else {
            0
        };
        world.bcast(&mut buf, 0)?;
        let end = monotonic_ns();
        let _ = std::fs::write(
            std::path::Path::new(dir).join(format!("end.{me}")),
            end.to_string(),
        );
        let mut last = [0u64];
        world.allreduce(&[end], &mut last, rdcoll::Op::Max)?;
        // Checked once every rank is done, so as not to take the cores of ranks still at it.
        if let Some(i) = (0..size).find(|&i| buf[i] != byte(i)) {
            return Err(rdcoll::Error::Mismatch(format!(
                "rank {me}: byte {i} is {:#x}, not {:#x}",
                buf[i],
                byte(i)
            )));
        }
        Ok((me == 0).then(|| last[0] - start))
    })();
    match result {
        Ok(Some(ns)) => {
            println!("elapsed_ns={ns}");
            0
        }
        Ok(None) => 0,
        Err(e) => {
            eprintln!("wan-rank {me}: {e}");
            1
        }
    }
}
