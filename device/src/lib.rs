//! rnic-emu: an emulated PCIe RDMA NIC and a co-emulated GPU, served to QEMU over vfio-user.
//! This crate is the `rnic-emu` command; the work is split in crates, each depending only
//! on the ones before it:
//!
//! - `rnic-emu-core` (device/core): the device model: registers, configuration space,
//!   verbs, fabric packets, the DMA router, the GPU engine. No sockets, no threads.
//! - `rnic-emu-server` (device/server): a node's server: the vfio-user adapter, the event
//!   loop, the fabric sockets, the control socket.
//! - this crate: [`run`] (boot a topology and run a guest command), [`qemu`] (QEMU command
//!   lines), [`image`] (the guest image), [`kv`] (the rendezvous store of multi-node runs),
//!   [`bootwatch`], [`netns`], [`logging`]; [`iotrace_client`] reads a node's MMIO/DMA
//!   trace.
//! - `rnic-emu-testkit` (device/testkit), beside it and not a dependency of it: the host
//!   test driver and the fuzz targets' entry points, for the integration tests, benches
//!   and fuzz targets.
//!
//! Nothing of the other crates is re-exported here: callers name the crate that owns what
//! they use (`rnic_emu_core::regs`, `rnic_emu_server::serve`, `rnic_emu_testkit::hostdrv`).
pub mod bootwatch;
pub mod image;
pub mod iotrace_client;
pub mod kv;
pub mod logging;
pub mod netns;
pub mod qemu;
pub mod run;
