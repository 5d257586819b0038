//! rnic-emu-server: a node's server process around the device model (`rnic-emu-core`).
//!
//! - [`vfio`]: the vfio-user adapter, one socket per PCI function;
//! - [`evloop`]: the node's event loop (doorbells, fabric readiness, timers, GPU engine
//!   completions);
//! - [`fabric`]: the fabric port (UDP sockets, batched I/O, fault injection, pcap capture);
//! - [`serve`]: serving one node of a topology;
//! - [`control`]: the node's control socket (bounded clients, lines and time);
//! - [`panics`]: telling the vfio-user library's panics (a hostile client's) from ours.
//!
//! This crate owns the sockets, the event loop and the threads; the device behaviour lives
//! in `rnic-emu-core`. It must not depend on the `rnic-emu` command crate (QEMU, guest
//! images, the rendezvous store) or on the test machinery (`rnic-emu-testkit`).
pub mod control;
pub mod evloop;
pub mod fabric;
pub mod panics;
pub mod serve;
pub mod vfio;
