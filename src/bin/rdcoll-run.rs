//! `rdcoll-run -n N [--transport shm|tcp] [--tag-output] [--] PROGRAM ARGS...`
//!
//! Starts N ranks of PROGRAM on this host with `RDCOLL_RANK`, `RDCOLL_SIZE` and the bootstrap
//! store in their environment; everything from PROGRAM on passes through untouched. Exits with
//! the first failing rank's status; when a rank dies, stops the others and says which and how.

use std::ffi::OsString;
use std::process::ExitCode;

use rdcoll::transport::launch::{run_job, JobSpec};

const USAGE: &str =
    "usage: rdcoll-run -n N [--transport auto|shm|tcp|ofi] [--tag-output] [--] PROGRAM [ARGS...]";

fn parse(args: Vec<OsString>) -> Result<JobSpec, String> {
    let mut ranks = None;
    let mut transport = None;
    let mut tag = false;
    let mut it = args.into_iter();
    let mut command = Vec::new();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy().to_string();
        let mut value = |name: &str| {
            it.next()
                .map(|v| v.to_string_lossy().to_string())
                .ok_or(format!("{name} needs a value"))
        };
        match s.as_str() {
            "-n" | "-np" | "--ranks" => {
                let v = value(&s)?;
                ranks = Some(
                    v.parse::<usize>()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or(format!("-n {v:?}: expected a positive number"))?,
                );
            }
            "--transport" => {
                let v = value(&s)?;
                if !matches!(v.as_str(), "auto" | "shm" | "tcp" | "ofi") {
                    return Err(format!("--transport {v:?}: expected auto, shm, tcp or ofi"));
                }
                transport = Some(v);
            }
            "--tag-output" => tag = true,
            "-h" | "--help" => return Err(String::new()),
            "--" => {
                command.extend(it.by_ref());
                break;
            }
            _ if s.starts_with('-') && command.is_empty() => {
                return Err(format!("unknown option {s}"))
            }
            _ => {
                command.push(a);
                command.extend(it.by_ref());
                break;
            }
        }
    }
    let ranks = ranks.ok_or("-n N is required")?;
    if command.is_empty() {
        return Err("no program given".into());
    }
    let mut spec = JobSpec::new(ranks, command);
    spec.transport = transport;
    spec.prefix_output = tag;
    Ok(spec)
}

fn main() -> ExitCode {
    let spec = match parse(std::env::args_os().skip(1).collect()) {
        Ok(s) => s,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("rdcoll-run: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run_job(&spec) {
        Ok(report) => ExitCode::from(report.exit_code().clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("rdcoll-run: {e}");
            ExitCode::from(1)
        }
    }
}
