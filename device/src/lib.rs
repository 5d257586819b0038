//! rnic-emu: an emulated PCIe RDMA NIC and a co-emulated GPU, served to QEMU over vfio-user.
//!
//! Layout (one module per hardware object, STYLE §2):
//! - [`regs`], [`regfile`], [`contract`]: the register contract and its C/Markdown renderings.
//! - [`pci`]: configuration space and capabilities; [`msix`]: interrupts; [`dma`]: the
//!   client's DMA maps; [`shm`]: shared memory.
//! - [`function`]: what a PCI function offers; [`rnic`] and [`gpu`]: the two models.
//! - [`vfio`]: the vfio-user adapter; [`serve`]: a node's server process.
//! - [`topology`]: topology files; [`qemu`]: QEMU command lines; [`image`]: the guest
//!   image; [`run`]: boot a topology and run a guest command.
pub mod contract;
pub mod dma;
pub mod doorbell;
pub mod evloop;
pub mod fabric;
pub mod function;
#[doc(hidden)]
pub mod fuzzing;
pub mod gpu;
pub mod gpu_engine;
pub mod hostdrv;
pub mod image;
pub mod kv;
pub mod mem;
pub mod msix;
pub mod pci;
pub mod qemu;
pub mod ratelimit;
pub mod regfile;
pub mod regs;
pub mod rnic;
pub mod router;
pub mod run;
pub mod serve;
pub mod shm;
pub mod timing;
pub mod topology;
pub mod verbs;
pub mod vfio;
