//! rnic-emu: an emulated PCIe RDMA NIC and a co-emulated GPU, served to QEMU over vfio-user.
//! This crate is the `rnic-emu` command and its harness; the work is split in three crates,
//! each depending only on the ones before it:
//!
//! - `rnic-emu-core` (device/core): the device model: registers, configuration space,
//!   verbs, fabric packets, the DMA router, the GPU engine. No sockets, no threads.
//! - `rnic-emu-server` (device/server): a node's server: the vfio-user adapter, the event
//!   loop, the fabric sockets, the control socket.
//! - this crate: [`run`] (boot a topology and run a guest command), [`qemu`] (QEMU command
//!   lines), [`image`] (the guest image), [`kv`] (the rendezvous store of multi-node runs)
//!   and [`hostdrv`] (the host test driver, a vfio-user client); [`iotrace_client`] reads
//!   a node's MMIO/DMA trace.
//!
//! The model's and the server's modules are re-exported here under their own names, so
//! `rnic_emu::regs`, `rnic_emu::contract::abi` or `rnic_emu::serve` name the same items
//! wherever they live; [`fabric`] joins the wire format (core) and the sockets (server).
pub use rnic_emu_core::{contract, function, gpu, mailbox, observe, platform, prng, ratelimit, regs, ring, rnic};
pub use rnic_emu_server::{evloop, fabric, serve, vfio};

pub mod bootwatch;
#[doc(hidden)]
pub mod fuzzing;
pub mod hostdrv;
pub mod image;
pub mod iotrace_client;
pub mod kv;
pub mod logging;
pub mod netns;
pub mod qemu;
pub mod run;
