//! rnic-emu: an emulated PCIe RDMA NIC and a co-emulated GPU, served to QEMU over vfio-user.
//!
//! Layout (one module per hardware object, STYLE §2):
//! - [`regs`], [`regfile`], [`contract`]: the register contract and its C/Markdown renderings.
pub mod contract;
pub mod regfile;
pub mod regs;
