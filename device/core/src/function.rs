//! What every emulated PCI function offers the transport: config space, BAR regions,
//! interrupts, DMA maps and reset. The vfio-user adapter (`vfio` in `rnic-emu-server`) is
//! written once against this trait; the RNIC and GPU models implement it.

use crate::platform::mem::dma::DmaMaps;
use crate::platform::msix::Interrupts;
use crate::platform::pci::caps::{self, Capability};
use crate::platform::pci::config::{ConfigSpace, Identity, LayoutError};
use crate::platform::shm::{SharedMemory, ShmError};
use crate::platform::topology::{Device, DeviceKind};
use crate::regs::pci_ids;
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

/// Why a PCI function model could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error(transparent)]
    Memory(#[from] ShmError),
}

pub trait PciFunction: Send {
    /// Short name for logs ("node0-rnic0").
    fn name(&self) -> &str;
    /// Which model this is (the MMIO/DMA trace names registers from its table).
    fn kind(&self) -> crate::observe::iotrace::FunctionKind;
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
    /// A configuration read as the client sees it (the RNIC returns all-ones while its
    /// link is down, docs/faults.md).
    fn config_read(&mut self, offset: usize, data: &mut [u8]) {
        self.config().read(offset, data);
    }
    /// Whether configuration writes are dropped (link down).
    fn link_down(&self) -> bool {
        false
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

/// A socket access (a client that does not mmap it) to a BAR backed by shared memory: the
/// bytes of `mem`, or the invalid-access rule when the range is outside it.
pub fn shm_bar_read(f: &dyn PciFunction, mem: &SharedMemory, bar: usize, offset: u64, data: &mut [u8]) {
    if let Err(e) = mem.read(offset, data) {
        invalid_read(f, bar, offset, data, &e);
    }
}

/// The write side of [`shm_bar_read`].
pub fn shm_bar_write(f: &dyn PciFunction, mem: &SharedMemory, bar: usize, offset: u64, data: &[u8]) {
    if let Err(e) = mem.write(offset, data) {
        invalid_write(f, bar, offset, data.len(), &e);
    }
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
/// in BAR0, PCI Express endpoint with the topology's link (`[timing]` pcie_gen and
/// pcie_width), and Advanced Error Reporting in extended space; the RNIC adds the model
/// summary as a Vendor-Specific Extended Capability ([`crate::observe::timing::summary`]).
pub fn capabilities(dev: &Device) -> Vec<Capability> {
    let mut caps = vec![
        caps::power_management(),
        caps::msix(dev.msix_vectors(), 0, MSIX_TABLE_OFFSET as u32, MSIX_PBA_OFFSET as u32),
        caps::pcie_endpoint_link(dev.link.gen, dev.link.width, dev.link.mps, dev.link.mrrs),
        caps::aer(),
    ];
    if let (DeviceKind::Rnic, Some(t)) = (dev.kind, dev.timing.as_deref()) {
        let table = crate::observe::timing::summary::table(&t.0, &t.1);
        caps.push(caps::vendor_specific(crate::observe::timing::summary::VSEC_ID, 1, &table));
    }
    caps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::pci::config::BarDef;
    use crate::platform::topology::Topology;

    fn config_of(timing: &str) -> ConfigSpace {
        let text = crate::platform::topology::samples::SWITCH.replace("name = \"t\"", &format!("name = \"t\"\n{timing}"));
        let t = Topology::parse(&text, "t").unwrap();
        let dev = &t.nodes[0].devices[0];
        let bars = [BarDef { index: 0, size: 0x1_0000, is_64bit: true, prefetchable: false }];
        ConfigSpace::new(identity(dev, 0x020000), &bars, &capabilities(dev)).unwrap()
    }

    /// Offset of the capability `id` in the standard list.
    fn find(cs: &ConfigSpace, id: u8) -> usize {
        let mut at = usize::from(cs.get16(0x34) as u8);
        while at != 0 && cs.get16(at) as u8 != id {
            at = usize::from((cs.get16(at) >> 8) as u8);
        }
        at
    }

    #[test]
    fn the_link_is_the_topologys_and_aer_sits_in_extended_space() {
        let cs = config_of("");
        let pcie = find(&cs, caps::CAP_ID_PCIE);
        assert_ne!(pcie, 0);
        assert_eq!(cs.get32(pcie + 0x0c) & 0x3ff, 16 << 4 | 5, "LinkCap: x16, 32 GT/s by default");
        assert_eq!(cs.get16(pcie + 0x12) & 0x3ff, 16 << 4 | 5, "LinkSta");
        assert_eq!(cs.get32(pcie + 0x2c), 0b11_1110, "LinkCap2: 2.5..=32 GT/s");
        assert_eq!((cs.get32(pcie + 4) & 7, cs.get16(pcie + 8) >> 12 & 7), (2, 2), "MPS supported 512, MRRS 512");
        let cs4 = config_of("[timing]\npcie_gen = 4\npcie_width = 8\nmps = 256\nmrrs = 1024");
        let pcie4 = find(&cs4, caps::CAP_ID_PCIE);
        assert_eq!(cs4.get16(pcie4 + 0x12) & 0x3ff, 8 << 4 | 4, "Gen4 x8 from [timing]");
        assert_eq!((cs4.get32(pcie4 + 4) & 7, cs4.get16(pcie4 + 8) >> 12 & 7), (1, 3), "MPS 256, MRRS 1024");
        let mut cs = cs;
        let dev_kind = Topology::parse(crate::platform::topology::samples::SWITCH, "t").unwrap().nodes[0].devices[0].kind;
        let aer = cs.get32(0x100);
        assert_eq!(aer & 0xf_ffff, u32::from(caps::EXT_CAP_ID_AER) | 2 << 16, "AER v2 first");
        if dev_kind == DeviceKind::Rnic {
            // The RNIC's model summary follows: a VSEC, the last extended capability.
            let vsec = (aer >> 20) as usize;
            assert_eq!(vsec, 0x148);
            assert_eq!(cs.get32(vsec), u32::from(caps::EXT_CAP_ID_VSEC) | 1 << 16);
            let hdr = cs.get32(vsec + 4);
            assert_eq!((hdr & 0xffff, hdr >> 16 & 0xf, (hdr >> 20) as usize), (0x0001, 1, 8 + crate::observe::timing::summary::TABLE_BYTES));
            assert_eq!(cs.get32(vsec + 8), 25 | 12 << 8 | 2 << 16, "25 sizes, 12 rows, quarter nanoseconds");
            cs.write(vsec + 12, &[0xff; 4]).unwrap();
            assert_ne!(cs.get32(vsec + 12), u32::MAX, "read-only");
        } else {
            assert_eq!(aer >> 20, 0, "the GPU: AER is the last");
        }
        assert_eq!(cs.get32(0x10c), 0x0046_2030, "default severity");
        // Status bits are write-one-to-clear: nothing set, nothing to clear; masks take writes.
        cs.write(0x104, &u32::MAX.to_le_bytes()).unwrap();
        assert_eq!(cs.get32(0x104), 0);
        cs.write(0x108, &0x1000u32.to_le_bytes()).unwrap();
        assert_eq!(cs.get32(0x108), 0x1000);
        cs.reset();
        assert_eq!(cs.get32(0x108), 0x0040_0000, "reset restores the default mask");
        assert_ne!(find(&cs, caps::CAP_ID_MSIX), 0);
    }

    #[test]
    fn the_iotrace_names_capabilities_from_the_functions_list() {
        use crate::observe::iotrace::{capability_name, FunctionKind, IoTrace};
        use crate::platform::pci::caps::CAP_ID_MSIX;
        use std::sync::Arc;
        let t = crate::platform::topology::Topology::parse(crate::platform::topology::samples::SWITCH, "t").unwrap();
        let dev = &t.nodes[0].devices[0];
        let bars = [BarDef { index: 0, size: 0x1_0000, is_64bit: true, prefetchable: false }];
        let cs = ConfigSpace::new(identity(dev, 0x020000), &bars, &capabilities(dev)).unwrap();
        let mut msix = u64::from(cs.get16(0x34) as u8);
        while cs.get16(msix as usize) as u8 != CAP_ID_MSIX {
            msix = u64::from(cs.get16(msix as usize) >> 8);
        }
        assert_eq!(capability_name(&cs, msix + 2).as_deref(), Some("MSIX+0x2"), "MSI-X message control");
        assert_eq!(capability_name(&cs, 0x108).as_deref(), Some("AER+0x8"), "AER mask");
        assert_eq!(capability_name(&cs, 0x148).as_deref(), Some("VSEC+0x0"), "the model summary");
        assert_eq!(capability_name(&cs, 0xffc), None, "past the last extended capability");
        let t = IoTrace::default();
        t.set(true);
        t.mmio(&Arc::from("f"), FunctionKind::Gpu, None, msix + 2, &[0, 0x80], true, Some(&cs));
        t.mmio(&Arc::from("f"), FunctionKind::Gpu, None, 0x10, &[0; 4], true, Some(&cs));
        let names: Vec<_> = t.since(0, 8).events.into_iter().map(|e| e.reg.unwrap()).collect();
        assert_eq!(names, ["MSIX+0x2", "BAR0"]);
    }
}
