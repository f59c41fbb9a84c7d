//! Matching at depth through a messaging library's receive path, in two processes: the
//! pattern of `rdcoll-bench match --through-comm`, run the same way on rdcoll (`Comm`) and on
//! MPI (`rdcoll-bench-mpi match-depth`).
//!
//! - `unexpected`: rank 0 sends d 8-byte messages with tags 0..d, then a "done" message; rank
//!   1 takes "done" (so all d are queued as unexpected), then receives them in reverse tag
//!   order: each receive's match is the newest of d queued messages.
//! - `posted`: rank 1 posts d receives with tags 0..d, tells rank 0, and rank 0 sends tags in
//!   reverse order: each arrival's match is the newest of the receives still posted.
//!
//! With `any`, every other receive is ANY_SOURCE. Depths past `max_depth` are left out. Reported: nanoseconds per receive (rank 1's
//! time from the start of the receives to the last one's completion, over d), the median of
//! the repetitions.

/// Which queue the measured matches search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepthCase {
    /// Receives search d unexpected messages.
    Unexpected,
    /// Arrivals search d posted receives.
    Posted,
}

impl DepthCase {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DepthCase::Unexpected => "unexpected",
            DepthCase::Posted => "posted",
        }
    }

    /// The case named `s`.
    pub fn from_name(s: &str) -> Option<DepthCase> {
        match s {
            "unexpected" => Some(DepthCase::Unexpected),
            "posted" => Some(DepthCase::Posted),
            _ => None,
        }
    }
}

/// The depths measured.
pub const DEPTHS: [usize; 4] = [1, 100, 10_000, 100_000];

/// Tag of the control messages: above every measured tag (depth at most 100,000), below
/// MPICH 4's MPI_TAG_UB (2^19 - 1).
const CONTROL_TAG: u32 = 200_000;

/// What the pattern needs of a messaging library.
pub trait DepthComm {
    /// This rank.
    fn rank(&self) -> u32;
    /// A blocking send of `buf` to `peer` with `tag`.
    fn send(&self, buf: &[u8], peer: u32, tag: u32) -> Result<(), String>;
    /// A blocking receive into `buf` from `from` (`None`: ANY_SOURCE) with `tag`.
    fn recv(&self, buf: &mut [u8], from: Option<u32>, tag: u32) -> Result<(), String>;
    /// Posts one nonblocking receive per `(source, tag)` of `specs` into `bufs`, runs
    /// `between`, then waits for all of them.
    fn recv_all(
        &self,
        bufs: &mut [[u8; 8]],
        specs: &[(Option<u32>, u32)],
        between: &mut dyn FnMut() -> Result<(), String>,
    ) -> Result<(), String>;
    /// Seconds since some fixed point.
    fn wtime(&self) -> f64;
}

/// Repetitions at depth `d`: about 200,000 receives in all (2 runs at 100,000: a library
/// with linear queues takes tens of seconds for each).
fn reps(d: usize) -> usize {
    (200_000 / d).clamp(1, 2_000)
}

/// Runs the pattern at every depth up to `max_depth`; on rank 1, `(depth, ns per receive)`
/// rows.
pub fn run(
    c: &dyn DepthComm,
    case: DepthCase,
    any: bool,
    max_depth: usize,
) -> Result<Vec<(usize, f64)>, String> {
    let mut rows = Vec::new();
    for d in DEPTHS.into_iter().filter(|&d| d <= max_depth) {
        let mut samples = Vec::new();
        for _ in 0..reps(d) {
            if let Some(ns) = once(c, case, any, d)? {
                samples.push(ns);
            }
        }
        samples.sort_by(f64::total_cmp);
        if let Some(&m) = samples.get(samples.len() / 2) {
            rows.push((d, m));
        }
    }
    Ok(rows)
}

/// One run at depth `d`: on rank 1, ns per receive.
fn once(c: &dyn DepthComm, case: DepthCase, any: bool, d: usize) -> Result<Option<f64>, String> {
    let payload = [0u8; 8];
    let mut one = [0u8; 8];
    let source = |i: usize| (!any || i.is_multiple_of(2)).then_some(0);
    match (case, c.rank()) {
        (DepthCase::Unexpected, 0) => {
            for t in 0..d {
                c.send(&payload, 1, t as u32)?;
            }
            c.send(&payload, 1, CONTROL_TAG)?;
            // Wait for rank 1 to finish, so runs do not overlap.
            c.recv(&mut one, Some(1), CONTROL_TAG)?;
            Ok(None)
        }
        (DepthCase::Unexpected, _) => {
            c.recv(&mut one, Some(0), CONTROL_TAG)?;
            let start = c.wtime();
            for t in (0..d).rev() {
                c.recv(&mut one, source(t), t as u32)?;
                check(&one)?;
            }
            let ns = (c.wtime() - start) * 1e9 / d as f64;
            c.send(&payload, 0, CONTROL_TAG)?;
            Ok(Some(ns))
        }
        (DepthCase::Posted, 0) => {
            c.recv(&mut one, Some(1), CONTROL_TAG)?;
            for t in (0..d).rev() {
                c.send(&payload, 1, t as u32)?;
            }
            c.recv(&mut one, Some(1), CONTROL_TAG)?;
            Ok(None)
        }
        (DepthCase::Posted, _) => {
            let specs: Vec<_> = (0..d).map(|t| (source(t), t as u32)).collect();
            let mut bufs = vec![[1u8; 8]; d];
            let mut start = 0.0;
            c.recv_all(&mut bufs, &specs, &mut || {
                c.send(&payload, 0, CONTROL_TAG)?;
                start = c.wtime();
                Ok(())
            })?;
            let ns = (c.wtime() - start) * 1e9 / d as f64;
            for b in &bufs {
                check(b)?;
            }
            c.send(&payload, 0, CONTROL_TAG)?;
            Ok(Some(ns))
        }
    }
}

fn check(b: &[u8; 8]) -> Result<(), String> {
    if b.iter().any(|&x| x != 0) {
        return Err("a receive did not get its message's bytes".into());
    }
    Ok(())
}

/// The rows in the layout `compare::capture` reads: `# Size` header, then `depth value`.
pub fn format(what: &str, case: DepthCase, any: bool, rows: &[(usize, f64)]) -> String {
    let mut out = format!(
        "# rdcoll match depth ({}, {}), {what}\n# Size     ns per receive\n",
        case.name(),
        if any { "50% any-src" } else { "exact" }
    );
    for (d, ns) in rows {
        out.push_str(&format!("{d:<10}{ns:>18.1}\n"));
    }
    out
}
