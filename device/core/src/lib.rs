//! rnic-emu-core: the device model of rnic-emu, an emulated PCIe RDMA NIC and a co-emulated
//! GPU. Everything the guest can observe through registers, configuration space and DMA.
//! By layer, each importing only the ones before it:
//!
//! - [`regs`] and [`contract`]: the contract with software: the register map, the
//!   descriptor ABI, the statistics counters, and their C/Markdown renderings;
//! - [`ratelimit`] (guest-triggered log lines), [`mailbox`] (work posted to an engine
//!   another thread runs) and [`prng`] (the one seeded pseudo-random generator): small
//!   shared mechanisms;
//! - [`ring`]: the driver's side of the ring protocol, and its C header;
//! - [`platform`]: the PCIe platform: configuration space, MSI-X, register blocks, shared
//!   memory, the DMA maps and router, PCIe-side fault injection, topology files;
//! - [`observe`]: the node's MMIO/DMA trace and modelled hardware time (with the WQE log
//!   of measured stage times);
//! - [`function`]: what a PCI function offers the transport;
//! - [`rnic`] (with its verbs engine, doorbell page and RoCEv2 wire format) and [`gpu`]
//!   (with its copy engine): the two models.
//!
//! This crate must not open sockets, start threads (tests excepted), orchestrate processes
//! or depend on `anyhow`, vfio-user or the event loop: the server (`rnic-emu-server`) drives
//! these models over vfio-user and the fabric sockets, and the `rnic-emu` command
//! orchestrates QEMU and the servers.
pub mod contract;
pub mod function;
pub mod gpu;
pub mod mailbox;
pub mod observe;
pub mod platform;
pub mod prng;
pub mod ratelimit;
pub mod regs;
pub mod ring;
pub mod rnic;
