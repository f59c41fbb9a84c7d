use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;

use super::*;

/// Reads one framed command from `r`.
fn read_framed(r: &mut impl Read) -> String {
    let mut len = [0u8; 6];
    r.read_exact(&mut len).unwrap();
    let len: usize = std::str::from_utf8(&len).unwrap().trim().parse().unwrap();
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).unwrap();
    String::from_utf8(body).unwrap()
}

fn framed(body: &str) -> Vec<u8> {
    let mut f = format!("{:<6}", body.len()).into_bytes();
    f.extend_from_slice(body.as_bytes());
    f
}

/// A scripted PMI-2 server on the other end of a socket pair: the PMI-1 init line, then each
/// `(expected command prefix, answer)`; an empty answer sends nothing.
fn launcher(script: Vec<(&'static str, &'static str)>) -> (Pmi2, std::thread::JoinHandle<()>) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let t = std::thread::spawn(move || {
        let mut r = BufReader::new(theirs.try_clone().unwrap());
        let mut w = theirs;
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert_eq!(line, "cmd=init pmi_version=2 pmi_subversion=0\n");
        w.write_all(b"cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n")
            .unwrap();
        for (expect, reply) in script {
            let got = read_framed(&mut r);
            assert!(got.starts_with(expect), "got {got:?}, expected {expect:?}");
            if !reply.is_empty() {
                w.write_all(&framed(reply)).unwrap();
            }
        }
    });
    let r = ours.try_clone().unwrap();
    let mut pmi = Pmi2 {
        reader: BufReader::new(Box::new(r)),
        writer: Box::new(ours),
    };
    pmi.init().unwrap();
    (pmi, t)
}

const FULLINIT: (&str, &str) = (
    "cmd=fullinit;",
    "cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=1;size=4;appnum=0;\
     debugged=FALSE;pmiverbose=FALSE;",
);

#[test]
fn put_fence_get_speak_the_wire_protocol() {
    let (mut pmi, t) = launcher(vec![
        FULLINIT,
        (
            "cmd=kvs-put;key=k;value=a;;b=c;",
            "cmd=kvs-put-response;rc=0;",
        ),
        ("cmd=kvs-fence;", "cmd=kvs-fence-response;rc=0;"),
        (
            "cmd=kvs-get;srcid=0;key=k;",
            "cmd=kvs-get-response;rc=0;found=TRUE;value=a;;b=c;",
        ),
        (
            "cmd=kvs-get;srcid=0;key=missing;",
            "cmd=kvs-get-response;rc=0;found=FALSE;",
        ),
        (
            "cmd=kvs-fence;",
            "cmd=kvs-fence-response;rc=-1;errmsg=fence failed;",
        ),
        ("cmd=abort;isworld=TRUE;exitcode=3;", ""),
    ]);
    pmi.put("k", "a;b=c").unwrap();
    pmi.barrier().unwrap();
    assert_eq!(pmi.get(0, "k").unwrap(), "a;b=c");
    let missing = pmi.get(0, "missing").unwrap_err().to_string();
    assert!(missing.contains("no value for missing"), "{missing}");
    let fence = pmi.barrier().unwrap_err().to_string();
    assert!(
        fence.contains("rc=-1") && fence.contains("fence failed"),
        "{fence}"
    );
    pmi.abort(3).unwrap();
    t.join().unwrap();
}

#[test]
fn commands_are_framed_with_a_padded_length() {
    let f = encode("kvs-put", &[("key", "x"), ("value", "1;2")]).unwrap();
    assert_eq!(f, b"29    cmd=kvs-put;key=x;value=1;;2;".to_vec());
    assert!(encode("kvs-put", &[("a=b", "1")]).is_err());
    assert_eq!(
        decode("cmd=kvs-get-response;rc=0;found=TRUE;value=;;;").unwrap(),
        Command {
            name: "kvs-get-response".into(),
            pairs: vec![
                ("rc".into(), "0".into()),
                ("found".into(), "TRUE".into()),
                ("value".into(), ";".into()),
            ],
        }
    );
}

#[test]
fn malformed_answers_are_errors_not_hangs() {
    for body in ["rc=0;", "cmd=x;rc", "cmd=x;junk;rc=0;", "cmd"] {
        assert!(decode(body).is_err(), "{body:?} was accepted");
    }
    // The last pair's `;` may be left out.
    let last = decode("cmd=x;rc=0").unwrap();
    assert_eq!(last.get("rc"), Some("0"));
    let (mut pmi, t) = launcher(vec![FULLINIT, ("cmd=kvs-fence;", "cmd=something-else;")]);
    let err = pmi.barrier().unwrap_err().to_string();
    assert!(err.contains("expected kvs-fence-response"), "{err}");
    t.join().unwrap();
    // A length field that is not a number.
    let (mut pmi, t) = launcher(vec![FULLINIT]);
    t.join().unwrap();
    let (ours, mut theirs) = UnixStream::pair().unwrap();
    theirs.write_all(b"abc   cmd=x;").unwrap();
    pmi.reader = BufReader::new(Box::new(ours));
    let err = pmi.read_command().unwrap_err().to_string();
    assert!(err.contains("malformed length field \"abc   \""), "{err}");
    // The launcher goes away without answering: said so, not a raw read error.
    let (mut pmi, t) = launcher(vec![FULLINIT, ("cmd=kvs-fence;", "")]);
    let closed = pmi.barrier().unwrap_err().to_string();
    assert!(closed.contains("closed the connection"), "{closed}");
    t.join().unwrap();
}

#[test]
fn a_launcher_without_pmi_2_is_named() {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let t = std::thread::spawn(move || {
        let mut r = BufReader::new(theirs.try_clone().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let mut w = theirs;
        w.write_all(b"cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1\n")
            .unwrap();
    });
    let r = ours.try_clone().unwrap();
    let mut pmi = Pmi2 {
        reader: BufReader::new(Box::new(r)),
        writer: Box::new(ours),
    };
    let err = pmi.init().unwrap_err().to_string();
    assert!(err.contains("refused PMI-2"), "{err}");
    t.join().unwrap();
}
