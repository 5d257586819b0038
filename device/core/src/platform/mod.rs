//! The PCIe platform both functions sit on, and what a function is built from:
//!
//! - [`pci`]: configuration space and capabilities; [`msix`]: interrupts; [`regfile`]: a
//!   BAR register block driven by a table of [`crate::regs`]; [`shm`]: shared memory
//!   (BARs QEMU maps directly, guest RAM); [`sigbus`]: surviving a truncated named file
//!   under a mapping;
//! - [`mem`]: the client's DMA maps, the DMA router (guest RAM or a GPU's BAR1, through a
//!   switch or the root complex) and the segment accesses the engine moves payload with;
//! - [`pcie_fault`]: PCIe-side fault injection (docs/faults.md); the fabric's wire faults
//!   are the server's (`rnic-emu-server`, its fabric port);
//! - [`topology`]: topology files: nodes, functions, the PCIe tree, the hardware's
//!   physical parameters.
//!
//! Below it only [`crate::regs`] and [`crate::contract`] (and the crate's guest-triggered
//! log lines, [`crate::ratelimit`]); nothing here knows the RNIC's or the GPU's model or
//! what observes them (`crate::observe`).
pub mod mem;
pub mod msix;
pub mod pci;
pub mod pcie_fault;
pub mod regfile;
pub mod shm;
pub mod sigbus;
pub mod topology;
