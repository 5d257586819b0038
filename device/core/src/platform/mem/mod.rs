//! The RNIC's memory layer, below the verbs engine and the fabric: the client's DMA maps
//! (guest RAM, taken as snapshots), the DMA router (guest RAM or a GPU's BAR1, through a
//! switch or the root complex) and the segment-list accesses the engine moves payload
//! with, and the DMA gate (bus mastering, quarantine) every access passes. Every access says which PCIe path it took, so the per-path byte counters are fed
//! from the access itself.
pub mod access;
pub mod dma;
pub mod gate;
pub mod revoke;
pub mod router;
