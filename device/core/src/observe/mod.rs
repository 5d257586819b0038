//! What the host can observe of the devices besides their registers, and the modelled
//! time it is compared with. Nothing here changes what the devices do (the RNIC only
//! publishes the model's summary table in its configuration space):
//!
//! - [`iotrace`]: the node's MMIO/DMA trace (`rnic-emu trace --mmio --dma`): every
//!   register access a client made and every DMA the RNIC made, in one bounded ring;
//! - [`timing`]: modelled hardware time (what the same work would take on the hardware the
//!   topology describes) and the WQE log of measured stage times it is compared with.
//!
//! Built on [`crate::platform`] and [`crate::contract`]; the models above report into it.
pub mod iotrace;
pub mod timing;
