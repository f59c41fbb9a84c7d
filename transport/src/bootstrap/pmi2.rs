//! A client of the PMI-2 wire protocol, which MPICH's Hydra (`mpiexec`) and Slurm's `pmi2`
//! plug-in (`srun --mpi=pmi2`) serve on the same socket as PMI-1 (`PMI_FD` / `PMI_PORT`): after
//! a PMI-1 `cmd=init pmi_version=2` line, every command and answer is a 6-character length
//! field (the decimal length, padded with spaces) and that many bytes of `key=value;` pairs,
//! the first `cmd=<name>;` (`fullinit`, `kvs-put`, `kvs-fence`, `kvs-get`, `abort`,
//! `finalize`; a `;` in a value is doubled). Chosen with `RDCOLL_PMI=2` (PMI-1 by default).
//! As with PMI-1, rdcoll uses it only to find its own store.

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

use super::pmi1::{launcher_connection, Conn};
use crate::error::{Result, TransportError};

/// Longest command the length field can frame.
const MAX_COMMAND: usize = 999_999;

/// A connection to the launcher's PMI-2 server.
pub struct Pmi2 {
    reader: BufReader<Box<dyn Conn>>,
    writer: Box<dyn Conn>,
}

fn pmi_error(what: impl Into<String>) -> TransportError {
    TransportError::Bootstrap(format!("PMI-2: {}", what.into()))
}

/// A command or answer: its name and its other pairs, in order.
#[derive(Debug, PartialEq, Eq)]
struct Command {
    name: String,
    pairs: Vec<(String, String)>,
}

impl Command {
    fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `rc` must be 0 (an error names the command and the server's `errmsg`).
    fn check_rc(&self) -> Result<()> {
        match self.get("rc") {
            None | Some("0") => Ok(()),
            Some(rc) => Err(pmi_error(format!(
                "{} failed (rc={rc}{})",
                self.name,
                self.get("errmsg")
                    .map_or(String::new(), |m| format!(", {m}"))
            ))),
        }
    }
}

/// The framed bytes of command `name` with `pairs`.
fn encode(name: &str, pairs: &[(&str, &str)]) -> Result<Vec<u8>> {
    let mut body = format!("cmd={name};");
    for (k, v) in pairs {
        if k.is_empty() || k.contains(['=', ';']) {
            return Err(pmi_error(format!("{k:?} cannot be a PMI-2 key")));
        }
        body.push_str(k);
        body.push('=');
        body.push_str(&v.replace(';', ";;"));
        body.push(';');
    }
    if body.len() > MAX_COMMAND {
        return Err(pmi_error(format!(
            "a {}-byte {name} is too long",
            body.len()
        )));
    }
    let mut framed = format!("{:<6}", body.len()).into_bytes();
    framed.extend_from_slice(body.as_bytes());
    Ok(framed)
}

/// The pairs of a command body (`key=value;` ..., `;;` a `;` within a value; the last `;`
/// may be left out).
fn decode(body: &str) -> Result<Command> {
    let mut pairs = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let eq = match rest.find(['=', ';']) {
            Some(i) if rest.as_bytes()[i] == b'=' => i,
            _ => return Err(pmi_error(format!("a pair without '=' in {body:?}"))),
        };
        let key = rest[..eq].to_string();
        let mut value = String::new();
        let mut chars = rest[eq + 1..].char_indices().peekable();
        let mut next = rest.len();
        while let Some((i, c)) = chars.next() {
            if c == ';' {
                if chars.peek().map(|&(_, c)| c) == Some(';') {
                    chars.next();
                } else {
                    next = eq + 1 + i + 1;
                    break;
                }
            }
            value.push(c);
        }
        pairs.push((key, value));
        rest = &rest[next..];
    }
    let mut pairs = pairs.into_iter();
    match pairs.next() {
        Some((k, name)) if k == "cmd" => Ok(Command {
            name,
            pairs: pairs.collect(),
        }),
        _ => Err(pmi_error(format!(
            "an answer that is not a command: {body:?}"
        ))),
    }
}

impl Pmi2 {
    /// Connects through `PMI_FD` or `PMI_PORT` and initialises a PMI-2 session (`PMI_RANK`
    /// and `PMI_JOBID`, where the launcher set them, go with `fullinit`).
    pub fn connect(timeout: Duration) -> Result<Pmi2> {
        let (reader, writer) = launcher_connection(timeout, pmi_error)?;
        let mut pmi = Pmi2 {
            reader: BufReader::new(reader),
            writer,
        };
        pmi.init()?;
        Ok(pmi)
    }

    /// The PMI-1 line that switches the session to PMI-2, then `fullinit`.
    fn init(&mut self) -> Result<()> {
        self.writer
            .write_all(b"cmd=init pmi_version=2 pmi_subversion=0\n")
            .and_then(|()| self.writer.flush())
            .map_err(|e| TransportError::io("writing to the PMI-2 server", e))?;
        let mut line = String::new();
        let n = self
            .reader
            .read_line(&mut line)
            .map_err(|e| TransportError::io("reading from the PMI-2 server", e))?;
        let words: Vec<&str> = line.split_ascii_whitespace().collect();
        let word = |name: &str| {
            words
                .iter()
                .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
        };
        if n == 0 || word("cmd") != Some("response_to_init") {
            return Err(pmi_error(format!(
                "the launcher does not speak PMI-2 (it said {:?})",
                line.trim_end()
            )));
        }
        if !matches!(word("rc"), None | Some("0")) || word("pmi_version") != Some("2") {
            return Err(pmi_error(format!(
                "the launcher refused PMI-2: {:?}",
                line.trim_end()
            )));
        }
        let mut pairs = Vec::new();
        let jobid = std::env::var("PMI_JOBID").ok();
        if let Some(j) = &jobid {
            pairs.push(("pmijobid", j.as_str()));
        }
        let rank = std::env::var("PMI_ID")
            .or_else(|_| std::env::var("PMI_RANK"))
            .ok();
        if let Some(r) = &rank {
            pairs.push(("pmirank", r.as_str()));
        }
        pairs.push(("threaded", "FALSE"));
        let answer = self.call("fullinit", &pairs, "fullinit-response")?;
        if answer.get("rank").is_none() || answer.get("size").is_none() {
            return Err(pmi_error(
                "fullinit-response without this process's rank and size",
            ));
        }
        Ok(())
    }

    /// Publishes `key` = `value`.
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        self.call(
            "kvs-put",
            &[("key", key), ("value", value)],
            "kvs-put-response",
        )
        .map(drop)
    }

    /// Waits until every process of the job has reached this point; what each put before it
    /// is then visible to all (`kvs-fence`).
    pub fn barrier(&mut self) -> Result<()> {
        self.call("kvs-fence", &[], "kvs-fence-response").map(drop)
    }

    /// The value the process of rank `src` put under `key` before the last fence.
    pub fn get(&mut self, src: u32, key: &str) -> Result<String> {
        let src = src.to_string();
        let answer = self.call(
            "kvs-get",
            &[("srcid", src.as_str()), ("key", key)],
            "kvs-get-response",
        )?;
        if answer.get("found") != Some("TRUE") {
            return Err(pmi_error(format!("no value for {key}")));
        }
        answer
            .get("value")
            .map(str::to_string)
            .ok_or_else(|| pmi_error(format!("no value for {key}")))
    }

    /// Asks the launcher to end the whole job with `code` (it does not wait for an answer).
    pub fn abort(&mut self, code: i32) -> Result<()> {
        let code = code.to_string();
        let message = "rdcoll: the job was aborted";
        let pairs = [("isworld", "TRUE"), ("exitcode", &code), ("msg", message)];
        self.send("abort", &pairs)
    }

    /// Ends the session (the launcher then expects this process to exit).
    pub fn finalize(&mut self) -> Result<()> {
        self.call("finalize", &[], "finalize-response").map(drop)
    }

    fn send(&mut self, name: &str, pairs: &[(&str, &str)]) -> Result<()> {
        let framed = encode(name, pairs)?;
        self.writer
            .write_all(&framed)
            .and_then(|()| self.writer.flush())
            .map_err(|e| TransportError::io("writing to the PMI-2 server", e))
    }

    /// Sends command `name` and returns the answer, which must be `expect` with rc 0.
    fn call(&mut self, name: &str, pairs: &[(&str, &str)], expect: &str) -> Result<Command> {
        self.send(name, pairs)?;
        let answer = self.read_command()?;
        if answer.name != expect {
            return Err(pmi_error(format!(
                "expected {expect}, the launcher said {}",
                answer.name
            )));
        }
        answer.check_rc()?;
        Ok(answer)
    }

    fn read_command(&mut self) -> Result<Command> {
        let io = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => pmi_error("the launcher closed the connection"),
            _ => TransportError::io("reading from the PMI-2 server", e),
        };
        let mut field = [0u8; 6];
        self.reader.read_exact(&mut field).map_err(io)?;
        let field = String::from_utf8_lossy(&field);
        let len: usize = field
            .trim()
            .parse()
            .map_err(|_| pmi_error(format!("a malformed length field {field:?}")))?;
        if len > MAX_COMMAND {
            return Err(pmi_error(format!("a {len}-byte answer")));
        }
        let mut body = vec![0u8; len];
        self.reader.read_exact(&mut body).map_err(io)?;
        let body = String::from_utf8(body).map_err(|_| pmi_error("an answer that is not text"))?;
        decode(&body)
    }
}

#[cfg(test)]
#[path = "pmi2_tests.rs"]
mod tests;
