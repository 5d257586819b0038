//! The device's contract with software, besides the register map ([`crate::regs`]): what
//! the guest driver and the host tools see and rely on, declared once here and rendered
//! for the other side.
//!
//! - [`abi`]: the descriptors the driver places in guest memory (WQE, SGE, CQE, QP/CQ/MR
//!   contexts) and the opcodes, flags, statuses and command codes that go in them;
//! - [`counters`]: the statistics counters BAR0 exposes at `STATS_BASE`, and the block that
//!   holds their values;
//! - [`render`]: the C header and the Markdown reference rendered from the register map,
//!   the descriptors and the counters (both checked in; tests fail when they drift).
//!
//! This layer imports nothing of the crate but [`crate::regs`]: every model and the host
//! side build on it.
pub mod abi;
pub mod counters;
pub mod render;
