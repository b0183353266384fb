//! The deterministic simulator of Motet (STYLE principle 9).
//!
//! N nodes run the real sans-IO core in one thread, with virtual time and one seeded PRNG; a
//! network model loses, duplicates, reorders, delays and partitions datagrams, every one of which
//! goes through the real wire codec; nodes crash (fail-stop). After every run the [`oracle`]s check
//! the guarantees over the delivered trace, and the run's trace hash lets CI check that the same
//! seed always gives the same run.
//! [`render_svg`] draws a run as a space-time diagram.

#![warn(missing_docs, unreachable_pub)]

pub mod diagram;
pub mod logcheck;
pub mod options;
pub mod oracle;
pub mod scenario;
mod world;

pub use diagram::{render_svg, DatagramRecord, Lost};
pub use options::{LossBurst, NetConfig, Partition, SimOptions};
pub use oracle::Violation;
pub use world::{run, SimReport};
