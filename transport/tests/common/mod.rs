//! Shared by the conformance test binaries: the cases and the event sorter they use.
#![allow(dead_code)]

pub mod cases;
pub mod harness;
