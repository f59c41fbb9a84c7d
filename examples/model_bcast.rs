//! Broadcasting a model: rank 0 holds the parameters (here made up: layers of f32 weights) and
//! every other rank needs a copy, as when a training job starts or a serving fleet takes a new
//! version. The layer shapes go first (only rank 0 knows how many there are:
//! `bcast_any_size`), then each layer's weights into buffers the ranks size from them; each
//! rank checks a checksum of what it got against rank 0's. Run it with
//! `rdcoll-run -n 4 target/release/examples/model_bcast [MIB]`.

/// Layer shapes (rows, columns) of a model of about `mib` MiB.
fn shapes(mib: usize) -> Vec<[u64; 2]> {
    let mut left = (mib << 20) / 4;
    let mut out = Vec::new();
    let mut width = 256u64;
    while left > 0 {
        let rows = (left as u64 / width).clamp(1, 1024);
        out.push([rows, width]);
        left = left.saturating_sub((rows * width) as usize);
        width = if width >= 4096 { 256 } else { width * 2 };
    }
    out
}

/// The weights of layer `l` as rank 0 "loads" them.
fn load(l: usize, [rows, cols]: [u64; 2]) -> Vec<f32> {
    (0..rows * cols)
        .map(|i| ((i as f32) * 0.001 + l as f32).sin())
        .collect()
}

/// An order-sensitive checksum of the weights' bits.
fn checksum(layers: &[Vec<f32>]) -> u64 {
    layers.iter().flatten().fold(0xcbf2_9ce4_8422_2325, |h, w| {
        (h ^ w.to_bits() as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let comm = rdcoll::init()?;
    let mib: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(64);
    let root = 0;
    let at_root = comm.rank() == root;
    let my_shapes = at_root.then(|| shapes(mib));
    let loaded: Vec<Vec<f32>> = my_shapes
        .iter()
        .flatten()
        .enumerate()
        .map(|(l, &s)| load(l, s))
        .collect();
    comm.barrier()?;
    let t0 = comm.wtime();
    let shapes = comm.bcast_any_size(my_shapes.as_deref(), root)?;
    let mut layers = if at_root {
        loaded
    } else {
        shapes
            .iter()
            .map(|s| vec![0.0f32; (s[0] * s[1]) as usize])
            .collect()
    };
    for layer in &mut layers {
        comm.bcast(layer, root)?;
    }
    let elapsed = comm.wtime() - t0;
    let mut sums = [checksum(&layers)];
    comm.bcast(&mut sums, root)?;
    let same = u8::from(sums[0] == checksum(&layers));
    let mut all_same = [0u8];
    comm.allreduce(&[same], &mut all_same, rdcoll::Op::Min)?;
    if at_root {
        let bytes: usize = layers.iter().map(|l| l.len() * 4).sum();
        println!(
            "model_bcast: {} ranks, {} layers, {bytes} bytes in {elapsed:.4} s ({:.2} GB/s); \
             every copy {}",
            comm.size(),
            layers.len(),
            bytes as f64 / elapsed / 1e9,
            if all_same[0] == 1 {
                "matches"
            } else {
                "DIFFERS"
            }
        );
    }
    if all_same[0] != 1 {
        return Err("a rank's copy of the model differs from rank 0's".into());
    }
    Ok(())
}
