//! `rdcoll-sim`: experiments on the simulated fabric (`rdcoll::sim`), the real library code at
//! scales this machine does not have. Each experiment writes its figure as a CSV file and an
//! SVG chart.

pub mod plot;
pub mod rdmc;
pub mod rendezvous;
pub mod robber;
pub mod scale;
pub mod scenario;
pub mod validate;

use std::path::Path;

use rdcoll::sim::{self, SimConfig};
use rdcoll::CollConfig;

/// One `bytes` broadcast from rank 0 on a simulated job, each rank's collectives configured
/// by `coll(rank)`: the root's start and the last rank's end, in virtual seconds. Every rank
/// passes a buffer it never touches (payload-free, the pages stay unbacked whatever the
/// size), and the job ends with a barrier: a rank that leaves tells every other, and that
/// must not queue ahead of a slower rank's data.
pub fn bcast_span(
    cfg: SimConfig,
    bytes: usize,
    coll: &(dyn Fn(u32) -> CollConfig + Sync),
) -> Result<(f64, f64), String> {
    let spans = sim::run(cfg, |world| -> Result<(f64, f64), String> {
        let err = |e: rdcoll::Error| e.to_string();
        let comm = world
            .with_collectives_config(coll(world.rank()))
            .map_err(err)?;
        let mut buf = vec![0u8; bytes];
        comm.barrier().map_err(err)?;
        let start = comm.wtime();
        comm.bcast(&mut buf, 0).map_err(err)?;
        let end = comm.wtime();
        comm.barrier().map_err(err)?;
        Ok((start, end))
    })
    .map_err(|e| e.to_string())?;
    let spans: Vec<(f64, f64)> = spans.into_iter().collect::<Result<_, _>>()?;
    let start = spans[0].0;
    Ok((start, spans.iter().map(|s| s.1).fold(start, f64::max)))
}

/// One line of a figure.
#[derive(Debug, Clone)]
pub struct Series {
    /// Its legend.
    pub name: String,
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// An empty series called `name`.
    pub fn new(name: &str) -> Series {
        Series {
            name: name.into(),
            points: Vec::new(),
        }
    }
}

/// What an experiment found: series over a common x axis.
#[derive(Debug, Clone)]
pub struct Figure {
    /// File name stem.
    pub name: String,
    /// Chart title.
    pub title: String,
    /// What x is.
    pub x_label: String,
    /// What y is.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
    /// Whether y is drawn on a logarithmic axis (values spanning orders of magnitude).
    pub log_y: bool,
}

impl Figure {
    /// The figure as CSV: one row per x, one column per series.
    pub fn csv(&self) -> String {
        let mut xs: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let mut out = self.x_label.replace(',', ";");
        for s in &self.series {
            out.push(',');
            out.push_str(&s.name.replace(',', ";"));
        }
        out.push('\n');
        for x in xs {
            out.push_str(&format!("{x}"));
            for s in &self.series {
                out.push(',');
                if let Some(p) = s.points.iter().find(|p| p.0 == x) {
                    out.push_str(&format!("{:.6}", p.1));
                }
            }
            out.push('\n');
        }
        out
    }

    /// Writes `<dir>/<name>.csv` and `<dir>/<name>.svg`.
    pub fn write(&self, dir: &Path) -> Result<(), String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let write = |ext: &str, text: String| {
            let path = dir.join(format!("{}.{ext}", self.name));
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
        };
        write("csv", self.csv())?;
        write("svg", plot::svg(self)?)
    }
}
