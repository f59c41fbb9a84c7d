//! A token goes around the ring of ranks by RDMA write with immediate, then every rank reads its
//! right neighbour's region back with a get and checks it. Run it with
//! `rdcoll-run -n 4 target/release/examples/ring`.

use rdcoll::transport::{Event, Fabric, RemoteRegion};

fn next_event(f: &dyn Fabric, want: impl Fn(&Event) -> bool, stash: &mut Vec<Event>) -> Event {
    if let Some(i) = stash.iter().position(&want) {
        return stash.remove(i);
    }
    loop {
        let ev = f.wait(None).expect("wait").expect("an event");
        if want(&ev) {
            return ev;
        }
        stash.push(ev);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let comm = rdcoll::init()?;
    let (rank, n) = (comm.rank(), comm.size() as u32);
    let f = comm.fabric();
    let mut stash = Vec::new();
    let region = f.alloc_region(4096)?;
    region.write(0, &[rank as u8 + 1; 4096])?;
    for dest in 0..n {
        f.send(
            dest,
            &[b"D".as_slice(), &region.remote().to_bytes()].concat(),
        )?;
    }
    let mut peers = vec![None; n as usize];
    for _ in 0..n {
        let is_descriptor =
            |e: &Event| matches!(e, Event::Message { data, .. } if data.first() == Some(&b'D'));
        if let Event::Message { src, data } = next_event(f, is_descriptor, &mut stash) {
            peers[src as usize] = Some(RemoteRegion::from_bytes(&data[1..])?);
        }
    }
    let right = peers[((rank + 1) % n) as usize].ok_or("missing right neighbour")?;
    let started = comm.wtime();
    // The token: rank 0 starts it; everyone passes it on with an incremented immediate.
    let token = if rank == 0 {
        0
    } else {
        match next_event(f, |e| matches!(e, Event::Immediate { .. }), &mut stash) {
            Event::Immediate { imm, .. } => imm,
            _ => unreachable!(),
        }
    };
    let op = f.put(&region, 0, 8, right.at(4088), Some(token + 1))?;
    next_event(
        f,
        |e| matches!(e, Event::Completed { op: o, .. } if *o == op),
        &mut stash,
    );
    if rank == 0 {
        match next_event(f, |e| matches!(e, Event::Immediate { .. }), &mut stash) {
            Event::Immediate { imm, .. } if imm == n as u64 => {}
            other => return Err(format!("the token came back as {other:?}").into()),
        }
    }
    let check = f.alloc_region(4096)?;
    let op = f.get(&check, 0, 4088, right.at(0))?;
    match next_event(
        f,
        |e| matches!(e, Event::Completed { op: o, .. } if *o == op),
        &mut stash,
    ) {
        Event::Completed { result: Ok(()), .. } => {}
        other => return Err(format!("get failed: {other:?}").into()),
    }
    let mut bytes = vec![0u8; 4088];
    check.read(0, &mut bytes)?;
    let expect = ((rank + 1) % n) as u8 + 1;
    if bytes.iter().any(|&b| b != expect) {
        return Err("the neighbour's region read back wrong".into());
    }
    println!(
        "rank {rank} of {n} over {}: token passed, neighbour verified ({:.1} us)",
        comm.backend(),
        (comm.wtime() - started) * 1e6
    );
    // Nobody leaves while a peer may still read from its region.
    for dest in 0..n {
        f.send(dest, b"done")?;
    }
    for _ in 0..n {
        next_event(
            f,
            |e| matches!(e, Event::Message { data, .. } if &data[..] == b"done"),
            &mut stash,
        );
    }
    Ok(())
}
