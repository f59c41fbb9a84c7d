use std::time::Instant;
fn main() {
    let world = rdcoll::init().unwrap();
    let me = world.rank();
    let data = [1u8; 8];
    let mut buf = [0u8; 8];
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    for _ in 0..1000 {
        world.send(&data, me, 5).unwrap();
        world.recv(&mut buf, me, 5).unwrap();
    }
    let t = Instant::now();
    for _ in 0..n {
        world.send(&data, me, 5).unwrap();
        world.recv(&mut buf, me, 5).unwrap();
    }
    let selfmsg = t.elapsed().as_nanos() as f64 / n as f64;
    let t = Instant::now();
    for _ in 0..n {
        world.send(&data, me, 5).unwrap();
    }
    let sends = t.elapsed().as_nanos() as f64 / n as f64;
    let t = Instant::now();
    for _ in 0..n {
        world.recv(&mut buf, me, 5).unwrap();
    }
    let recvs = t.elapsed().as_nanos() as f64 / n as f64;
    println!("rank {me}: self send+recv {selfmsg:.0} ns; {n} sends {sends:.0} ns each, then {n} recvs (unexpected) {recvs:.0} ns each");
}
