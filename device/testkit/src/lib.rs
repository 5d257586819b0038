//! rnic-emu-testkit: the test machinery of rnic-emu, kept out of the product crates (the
//! `rnic-emu` command does not depend on it):
//!
//! - [`hostdrv`]: the host test driver, a vfio-user client that drives a real node server
//!   (`rnic-emu serve`, started by [`hostdrv::ServerProcess`] from the binary path its
//!   caller gives) with a memfd as guest RAM: host-level tests and benchmarks;
//! - [`netns`]: network namespaces, veth pairs and interface captures of a test's own, for
//!   the fabric's VXLAN and TAP backends against Linux (root);
//! - [`raw`]: a minimal vfio-user client that sees error replies, for tests that expect
//!   the server to refuse a request;
//! - [`fuzzing`]: the fuzz targets' entry points (`device/fuzz/`), their seeds and the
//!   kept corpus's replay, which `cargo test` runs.
//!
//! It builds on `rnic-emu-core` and `rnic-emu-server` only; the integration tests and
//! benches of the `rnic-emu` crate take it as a dev-dependency.
pub mod fuzzing;
pub mod hostdrv;
pub mod netns;
pub mod raw;
