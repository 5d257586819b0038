//! rnic-emu-core: the device model of rnic-emu, an emulated PCIe RDMA NIC and a co-emulated
//! GPU. Everything the guest can observe through registers, configuration space and DMA:
//!
//! - [`regs`], [`regfile`], [`contract`]: the register contract and its C/Markdown renderings.
//! - [`pci`]: configuration space and capabilities; [`msix`]: interrupts; [`shm`]: shared
//!   memory; [`doorbell`]: the doorbell page; [`ratelimit`]: guest-triggered log lines.
//! - [`fault`]: PCIe-side fault injection (docs/faults.md).
//! - [`mem`]: the client's DMA maps, the DMA router and the segment accesses.
//! - [`verbs`]: the verbs engine (requester, responder, completer, transports); [`fabric`]:
//!   the RoCEv2 wire format.
//! - [`function`]: what a PCI function offers; [`rnic`] and [`gpu`] (with [`gpu_engine`]):
//!   the two models; [`topology`]: topology files; [`timing`]: modelled hardware time and
//!   the trace of recent work requests; [`iotrace`]: the node's MMIO/DMA trace.
//!
//! This crate must not open sockets, start threads (tests excepted), orchestrate processes
//! or depend on `anyhow`, vfio-user or the event loop: the server (`rnic-emu-server`) drives
//! these models over vfio-user and the fabric sockets, and the `rnic-emu` command
//! orchestrates QEMU and the servers.
pub mod contract;
pub mod doorbell;
pub mod fabric;
pub mod fault;
pub mod function;
pub mod gpu;
pub mod gpu_engine;
pub mod iotrace;
pub mod mailbox;
pub mod mem;
pub mod msix;
pub mod pci;
pub mod ratelimit;
pub mod regfile;
pub mod regs;
pub mod rnic;
pub mod shm;
pub mod timing;
pub mod topology;
pub mod verbs;
