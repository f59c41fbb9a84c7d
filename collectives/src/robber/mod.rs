//! Robber: collective receiver-initiated multicast across clusters (paper 003), and MOB, its
//! predecessor without work stealing.

mod driver;
mod node;
mod pieces;
mod plan;
mod wire;

#[cfg(test)]
mod sim_tests;

pub(crate) use driver::{run, Job};
