//! What every emulated PCI function offers the transport: config space, BAR regions,
//! interrupts, DMA maps and reset. The vfio-user adapter ([`crate::vfio`]) is written once
//! against this trait; the RNIC and GPU models implement it.

use crate::dma::DmaMaps;
use crate::msix::Interrupts;
use crate::pci::caps::{self, Capability};
use crate::pci::config::{ConfigSpace, Identity};
use crate::regs::pci_ids;
use crate::topology::Device;
use crate::regs::pci_ids::{MSIX_PBA_OFFSET, MSIX_TABLE_OFFSET};
use std::os::fd::RawFd;
use std::sync::RwLock;

/// A BAR as the transport offers it.
#[derive(Clone, Copy, Debug)]
pub struct BarRegion {
    pub index: usize,
    pub size: u64,
    /// Shared memory backing the whole BAR, for the client to mmap (sparse mmap area).
    pub mmap_fd: Option<RawFd>,
}

pub trait PciFunction: Send {
    /// Short name for logs ("node0-rnic0").
    fn name(&self) -> &str;
    fn config(&self) -> &ConfigSpace;
    fn config_mut(&mut self) -> &mut ConfigSpace;
    fn bar_regions(&self) -> Vec<BarRegion>;
    /// Reads BAR `bar`; the caller has checked `offset + data.len()` against the BAR size.
    fn bar_read(&mut self, bar: usize, offset: u64, data: &mut [u8]);
    /// Writes BAR `bar`; the caller has checked `offset + data.len()` against the BAR size.
    fn bar_write(&mut self, bar: usize, offset: u64, data: &[u8]);
    fn interrupts(&self) -> &Interrupts;
    /// The client's DMA maps, shared with whatever DMAs on the function's behalf.
    fn dma(&self) -> &RwLock<DmaMaps>;
    /// Function-level reset: registers to reset values, queues forgotten. DMA maps and
    /// interrupt eventfds belong to the client connection and survive it.
    fn reset(&mut self);
    /// The client went away: like [`PciFunction::reset`], but statistics survive so that
    /// the host can still read what the last client did (the next client's reset clears
    /// them).
    fn disconnect(&mut self) {
        self.reset();
    }
    /// Called after every configuration-space change (write, FLR, reset), so a function
    /// can publish where its BARs now decode.
    fn config_written(&mut self) {}
    /// A host-side control request (`rnic-emu` control socket), if the function takes it.
    fn control(&mut self, _request: &str) -> Option<Result<String, String>> {
        None
    }
    /// The function's statistics counters (name, value), for the host side.
    fn stats(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Counts one refused guest request (bad register or region access, refused DMA map
    /// or interrupt request) in the function's statistics. Its log line is rate-limited
    /// ([`crate::guest_warn!`]); the count is not.
    fn guest_error(&self);
}

/// Whether a BAR0 access falls in the MSI-X table or PBA, which QEMU's vfio-user client
/// emulates itself: a raw client touching them reads zeros, and its writes are dropped.
pub fn in_msix_area(offset: u64) -> bool {
    offset >= MSIX_TABLE_OFFSET.min(MSIX_PBA_OFFSET)
}

/// Fills a read of an invalid register access with all-ones, counts it and logs it
/// (rate-limited).
pub fn invalid_read(f: &dyn PciFunction, bar: usize, offset: u64, data: &mut [u8], why: &dyn std::fmt::Display) {
    f.guest_error();
    crate::guest_warn!("{}: BAR{bar} read of {} bytes at {offset:#x} refused: {why}", f.name(), data.len());
    data.fill(0xff);
}

/// Drops an invalid register write, counts it and logs it (rate-limited).
pub fn invalid_write(f: &dyn PciFunction, bar: usize, offset: u64, len: usize, why: &dyn std::fmt::Display) {
    f.guest_error();
    crate::guest_warn!("{}: BAR{bar} write of {len} bytes at {offset:#x} dropped: {why}", f.name());
}

/// A function's PCI identity from its node description, with the documented defaults.
pub fn identity(dev: &Device, class_code: u32) -> Identity {
    Identity {
        vendor_id: dev.vendor_id(),
        device_id: dev.device_id(),
        subsystem_vendor_id: dev.subsystem_vendor_id.unwrap_or(pci_ids::SUBSYS_VENDOR_ID),
        subsystem_id: dev.subsystem_id.unwrap_or(pci_ids::SUBSYS_ID),
        class_code,
        revision: 1,
    }
}

/// The capability list both functions carry: power management, MSI-X with table and PBA
/// in BAR0, PCI Express endpoint.
pub fn capabilities(vectors: u16) -> [Capability; 3] {
    [
        caps::power_management(),
        caps::msix(vectors, 0, MSIX_TABLE_OFFSET as u32, MSIX_PBA_OFFSET as u32),
        caps::pcie_endpoint(),
    ]
}
