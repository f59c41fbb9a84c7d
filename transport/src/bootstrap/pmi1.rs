//! A client of the PMI-1 wire protocol, the key-value exchange MPICH's Hydra (`mpiexec`) runs
//! for its jobs: the launcher hands each process a connected socket (`PMI_FD`) or an address
//! (`PMI_PORT`), and commands are lines of `key=value` words (`cmd=put kvsname=.. key=..
//! value=..`, `cmd=barrier_in`, `cmd=get ...`). rdcoll uses it only to find its own store:
//! rank 0 publishes the store's address, every rank reads it after the barrier.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::error::{Result, TransportError};

/// The two ends of the launcher's connection.
pub(super) trait Conn: std::io::Read + Write + Send {}
impl<T: std::io::Read + Write + Send> Conn for T {}

/// A connection to the launcher's PMI-1 server.
pub struct Pmi1 {
    reader: BufReader<Box<dyn Conn>>,
    writer: Box<dyn Conn>,
    kvsname: String,
}

fn pmi_error(what: impl Into<String>) -> TransportError {
    TransportError::Bootstrap(format!("PMI-1: {}", what.into()))
}

/// The two ends of the connection to the launcher's PMI server, shared by PMI-1 and PMI-2
/// (the same socket: the first command says which protocol follows): the inherited socket
/// `PMI_FD`, or `PMI_PORT` (`host:port`). `error` words the refusals.
pub(super) fn launcher_connection(
    timeout: Duration,
    error: impl Fn(String) -> TransportError,
) -> Result<(Box<dyn Conn>, Box<dyn Conn>)> {
    if let Ok(fd) = std::env::var("PMI_FD") {
        let fd: i32 = fd
            .trim()
            .parse()
            .map_err(|_| error(format!("PMI_FD={fd:?} is not a descriptor")))?;
        // SAFETY: fstat only reads the descriptor's status into a local.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is a valid, writable stat buffer.
        if fd < 0 || unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(error(format!("PMI_FD={fd} is not open")));
        }
        // SAFETY: the launcher gave this process the descriptor for PMI alone, and it was
        // just checked to be open; nothing else in the process owns it.
        let s = unsafe { UnixStream::from_raw_fd(fd) };
        s.set_read_timeout(Some(timeout))
            .map_err(|e| TransportError::io("PMI_FD", e))?;
        let r = s.try_clone().map_err(|e| TransportError::io("PMI_FD", e))?;
        Ok((Box::new(r), Box::new(s)))
    } else if let Ok(port) = std::env::var("PMI_PORT") {
        let s = TcpStream::connect(port.trim())
            .map_err(|e| TransportError::io("connecting to PMI_PORT", e))?;
        s.set_read_timeout(Some(timeout))
            .map_err(|e| TransportError::io("PMI_PORT", e))?;
        let r = s
            .try_clone()
            .map_err(|e| TransportError::io("PMI_PORT", e))?;
        Ok((Box::new(r), Box::new(s)))
    } else {
        Err(error("neither PMI_FD nor PMI_PORT is set".into()))
    }
}

impl Pmi1 {
    /// Whether the launcher offers PMI-1 (`PMI_FD` or `PMI_PORT` is set).
    pub fn offered() -> bool {
        std::env::var_os("PMI_FD").is_some() || std::env::var_os("PMI_PORT").is_some()
    }

    /// Connects through `PMI_FD` (an inherited socket) or `PMI_PORT` (`host:port`) and
    /// initialises the session.
    pub fn connect(timeout: Duration) -> Result<Pmi1> {
        let (reader, writer) = launcher_connection(timeout, pmi_error)?;
        let mut pmi = Pmi1 {
            reader: BufReader::new(reader),
            writer,
            kvsname: String::new(),
        };
        let init = pmi.call(
            "cmd=init pmi_version=1 pmi_subversion=1",
            "response_to_init",
        )?;
        check_rc(&init, "init")?;
        let name = pmi.call("cmd=get_my_kvsname", "my_kvsname")?;
        check_rc(&name, "get_my_kvsname")?;
        pmi.kvsname = field(&name, "kvsname")
            .ok_or_else(|| pmi_error("no kvsname in the launcher's answer"))?
            .to_string();
        Ok(pmi)
    }

    /// Publishes `key` = `value` (neither may hold spaces or `=`).
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        for s in [key, value] {
            if s.is_empty() || s.contains([' ', '=', '\n']) {
                return Err(pmi_error(format!("{s:?} cannot travel in a PMI-1 command")));
            }
        }
        let line = format!("cmd=put kvsname={} key={key} value={value}", self.kvsname);
        let answer = self.call(&line, "put_result")?;
        check_rc(&answer, "put")
    }

    /// Waits until every process of the job has reached this point (what each put before it
    /// is then visible to all).
    pub fn barrier(&mut self) -> Result<()> {
        let answer = self.call("cmd=barrier_in", "barrier_out")?;
        check_rc(&answer, "barrier")
    }

    /// The value some process put under `key` before the last barrier.
    pub fn get(&mut self, key: &str) -> Result<String> {
        let line = format!("cmd=get kvsname={} key={key}", self.kvsname);
        let answer = self.call(&line, "get_result")?;
        check_rc(&answer, &format!("get {key}"))?;
        field(&answer, "value")
            .map(str::to_string)
            .ok_or_else(|| pmi_error(format!("no value for {key}")))
    }

    /// Asks the launcher to end the whole job with `code` (it does not wait for an answer).
    pub fn abort(&mut self, code: i32) -> Result<()> {
        self.send(&format!("cmd=abort exitcode={code}"))
    }

    /// Ends the session (the launcher then expects this process to exit).
    pub fn finalize(&mut self) -> Result<()> {
        let answer = self.call("cmd=finalize", "finalize_ack")?;
        check_rc(&answer, "finalize")
    }

    fn send(&mut self, line: &str) -> Result<()> {
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| self.writer.flush())
            .map_err(|e| TransportError::io("writing to the PMI-1 server", e))
    }

    /// Sends `line` and returns the answer, which must be `cmd=<expect> ...`.
    fn call(&mut self, line: &str, expect: &str) -> Result<String> {
        self.send(line)?;
        let mut answer = String::new();
        let n = self
            .reader
            .read_line(&mut answer)
            .map_err(|e| TransportError::io("reading from the PMI-1 server", e))?;
        if n == 0 {
            return Err(pmi_error("the launcher closed the connection"));
        }
        let answer = answer.trim_end().to_string();
        if field(&answer, "cmd") != Some(expect) {
            return Err(pmi_error(format!(
                "expected cmd={expect}, the launcher said {answer:?}"
            )));
        }
        Ok(answer)
    }
}

/// The value of `name=` among the words of `line`.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split_ascii_whitespace()
        .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
}

/// An answer's `rc` must be 0 (or absent, as some servers leave it out of `barrier_out`).
fn check_rc(answer: &str, what: &str) -> Result<()> {
    match field(answer, "rc") {
        None | Some("0") => Ok(()),
        Some(rc) => Err(pmi_error(format!(
            "{what} failed (rc={rc}{})",
            field(answer, "msg").map_or(String::new(), |m| format!(", {m}"))
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted launcher on the other end of a socket pair.
    fn launcher(script: Vec<(&'static str, &'static str)>) -> (Pmi1, std::thread::JoinHandle<()>) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || {
            let mut r = BufReader::new(theirs.try_clone().unwrap());
            let mut w = theirs;
            for (expect, reply) in script {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                assert!(
                    line.starts_with(expect),
                    "got {line:?}, expected {expect:?}"
                );
                if !reply.is_empty() {
                    w.write_all(format!("{reply}\n").as_bytes()).unwrap();
                }
            }
        });
        let r = ours.try_clone().unwrap();
        let mut pmi = Pmi1 {
            reader: BufReader::new(Box::new(r)),
            writer: Box::new(ours),
            kvsname: String::new(),
        };
        let init = pmi.call(
            "cmd=init pmi_version=1 pmi_subversion=1",
            "response_to_init",
        );
        check_rc(&init.unwrap(), "init").unwrap();
        let name = pmi.call("cmd=get_my_kvsname", "my_kvsname").unwrap();
        pmi.kvsname = field(&name, "kvsname").unwrap().to_string();
        (pmi, t)
    }

    #[test]
    fn put_barrier_get_speak_the_wire_protocol() {
        let (mut pmi, t) = launcher(vec![
            (
                "cmd=init pmi_version=1",
                "cmd=response_to_init pmi_version=1 rc=0",
            ),
            ("cmd=get_my_kvsname", "cmd=my_kvsname kvsname=kvs_7_0 rc=0"),
            (
                "cmd=put kvsname=kvs_7_0 key=k value=v1",
                "cmd=put_result rc=0",
            ),
            ("cmd=barrier_in", "cmd=barrier_out"),
            (
                "cmd=get kvsname=kvs_7_0 key=k",
                "cmd=get_result rc=0 value=v1",
            ),
            (
                "cmd=get kvsname=kvs_7_0 key=missing",
                "cmd=get_result rc=-1 msg=key_not_found",
            ),
            ("cmd=abort exitcode=3", ""),
        ]);
        pmi.put("k", "v1").unwrap();
        pmi.barrier().unwrap();
        assert_eq!(pmi.get("k").unwrap(), "v1");
        let err = pmi.get("missing").unwrap_err().to_string();
        assert!(
            err.contains("rc=-1") && err.contains("key_not_found"),
            "{err}"
        );
        assert!(pmi.put("a b", "c").is_err());
        pmi.abort(3).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn an_unexpected_answer_is_an_error_not_a_hang() {
        let (mut pmi, t) = launcher(vec![
            ("cmd=init", "cmd=response_to_init rc=0"),
            ("cmd=get_my_kvsname", "cmd=my_kvsname kvsname=x rc=0"),
            ("cmd=barrier_in", "cmd=something_else"),
        ]);
        assert!(pmi.barrier().is_err());
        t.join().unwrap();
    }
}
