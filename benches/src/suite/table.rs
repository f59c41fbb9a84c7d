//! Reading back the side-by-side tables the benchmarks print (`--vs-mpi`), or rdcoll's own
//! OSU table when there is no MPI to compare with.

/// One table: a column per library, a row per message size.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// What it measures (from OSU's title line), e.g. "Latency Test".
    pub title: String,
    /// `us` or `MB/s`.
    pub unit: String,
    /// The libraries, rdcoll first.
    pub columns: Vec<String>,
    /// Size, then one value per column (`None`: that library printed no such row).
    pub rows: Vec<(usize, Vec<Option<f64>>)>,
}

impl Table {
    /// Whether a larger value is better (bandwidth).
    pub fn higher_is_better(&self) -> bool {
        self.unit == "MB/s"
    }

    /// rdcoll's value over the best other library's in row `i` (`None` without another).
    pub fn ratio(&self, i: usize) -> Option<f64> {
        let values = &self.rows[i].1;
        let ours = (*values.first()?)?;
        let others = values[1..].iter().flatten().copied();
        let best = if self.higher_is_better() {
            others.fold(None, |b: Option<f64>, v| Some(b.map_or(v, |b| b.max(v))))
        } else {
            others.fold(None, |b: Option<f64>, v| Some(b.map_or(v, |b| b.min(v))))
        }?;
        (best > 0.0).then(|| ours / best)
    }
}

/// Every table in a benchmark's output.
pub fn parse(text: &str) -> Vec<Table> {
    let mut tables: Vec<Table> = Vec::new();
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("# OSU MPI ") {
            let title = t.split(" v6").next().unwrap_or(t).trim().to_string();
            tables.push(Table {
                title,
                unit: "us".into(),
                columns: vec!["rdcoll".into()],
                rows: Vec::new(),
            });
        } else if let Some(head) = line.strip_prefix("# Size") {
            let Some(t) = tables.last_mut() else { continue };
            let names: Vec<&str> = head
                .split("  ")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            if head.contains("MB/s") {
                t.unit = "MB/s".into();
            }
            if names.iter().any(|n| n.contains("/best")) {
                t.columns = names
                    .iter()
                    .filter(|n| !n.contains("/best"))
                    .map(|n| {
                        let n = n.trim_end_matches(" us").trim_end_matches(" MB/s");
                        n.split('/').next().unwrap_or(n).to_string()
                    })
                    .collect();
            }
        } else if !line.starts_with('#') {
            let Some(t) = tables.last_mut() else { continue };
            let mut f = line.split_whitespace();
            let Some(size) = f.next().and_then(|s| s.parse().ok()) else {
                continue;
            };
            let values: Vec<Option<f64>> =
                f.take(t.columns.len()).map(|v| v.parse().ok()).collect();
            if values.len() == t.columns.len() {
                t.rows.push((size, values));
            }
        }
    }
    tables.retain(|t| !t.rows.is_empty());
    tables
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_side_by_side_table() {
        let text = "# 2 ranks
# OSU MPI Broadcast Latency Test v6.1 layout, rdcoll/shm vs Open MPI vs MPICH; same run
# Size         rdcoll/shm us       Open MPI us          MPICH us  rdcoll/best (lower wins)
1                       0.38              0.43              0.43                      0.88
65536                  10.49                 -              8.61                      1.22
";
        let t = &parse(text)[0];
        assert_eq!(t.title, "Broadcast Latency Test");
        assert_eq!(t.columns, ["rdcoll", "Open MPI", "MPICH"]);
        assert_eq!(t.rows[1], (65536, vec![Some(10.49), None, Some(8.61)]));
        assert!((t.ratio(0).unwrap() - 0.38 / 0.43).abs() < 1e-9);
        assert!(!t.higher_is_better());
    }

    #[test]
    fn reads_rdcoll_alone() {
        let text = "# OSU MPI Bandwidth Test v6.1 (rdcoll over shm)
# Size      Bandwidth (MB/s)
1                       2.40
2                       5.04
";
        let t = &parse(text)[0];
        assert_eq!((t.columns.len(), t.unit.as_str()), (1, "MB/s"));
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.ratio(0), None);
    }
}
