//! Shared by the conformance test binaries: the cases, the event sorter they use, and the
//! process-job runner.
#![allow(dead_code)]

pub mod cases;
pub mod harness;
pub mod procs;
pub mod threads;
