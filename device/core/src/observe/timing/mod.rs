//! Modelled hardware time. Under emulation every measured time is the emulator's; this
//! module says how long the same work would take on the hardware the topology describes,
//! from its physical parameters (`[timing]`, [`crate::platform::topology::params`]) and
//! each node's layout ([`crate::platform::topology::Layout`]):
//! - [`model`]: the per-stage timeline of one work request;
//! - [`collective`]: ring all_reduce bandwidth and latency percentiles (a stated
//!   queueing model);
//! - [`reference`]: the reference timeline beside the model's, each interval
//!   classified against the specified rates and the cited latencies;
//! - [`summary`]: the table of modelled latencies and stream intervals the RNIC
//!   publishes in its configuration space for guest tools;
//! - [`wqe_log`]: the device's bounded ring of recent WQEs with their measured host-time
//!   stages and PCIe paths, which `rnic-emu trace` prints next to the model;
//! - [`render`]: the text `rnic-emu model` and `rnic-emu trace` print.
//!
//! It does not slow the emulation down to modelled time, and nothing here feeds back into
//! the device's behaviour. Documented in `docs/timing.md`.
pub mod collective;
pub mod model;
pub mod reference;
pub mod render;
pub mod summary;
pub mod wqe_log;

pub use model::{timeline, timeline_in, Mem, Op, Request, Timeline};
