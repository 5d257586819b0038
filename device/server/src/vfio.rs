//! The thin vfio-user adapter: turns the rust-vmm server's callbacks into calls on a
//! [`PciFunction`], after checking every region index, offset and length the client sent.
//! Out-of-range accesses get an error reply; sized/aligned register rules are the models'.
//! Every refusal is counted in the function's statistics ([`PciFunction::guest_error`])
//! and logged through [`rnic_emu_core::guest_warn!`], so a hostile client cannot flood the log.
//! A client may hold at most [`MAX_DMA_MAPS`] DMA maps, and an fd-backed map must lie
//! inside the file it maps (an access past its end would raise SIGBUS in the server).
//! Every served configuration-space and BAR access is recorded in the node's MMIO/DMA
//! trace ([`rnic_emu_core::observe::iotrace`]) when it is on.

use rnic_emu_core::function::PciFunction;
use rnic_emu_core::observe::iotrace::{FunctionKind, IoTrace};
use rnic_emu_core::platform::mem::dma::Prot;
use rnic_emu_core::platform::pci::config::CONFIG_SPACE_SIZE;
use std::fs::File;
use std::io::{Error, ErrorKind};
use std::mem::size_of;
use std::sync::{Arc, Mutex, MutexGuard};
use vfio_bindings::bindings::vfio::{
    vfio_region_info, vfio_region_sparse_mmap_area, VFIO_IRQ_INFO_EVENTFD, VFIO_PCI_BAR5_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_ERR_IRQ_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS, VFIO_PCI_REQ_IRQ_INDEX, VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::{DmaMapFlags, DmaUnmapFlags, IrqInfo, ServerBackend, ServerRegion, SparseArea};

pub type SharedFunction = Arc<Mutex<dyn PciFunction>>;

/// Locks a function, recovering from a poisoned lock (a panicked handler thread).
pub fn lock(f: &SharedFunction) -> MutexGuard<'_, dyn PciFunction + 'static> {
    f.lock().unwrap_or_else(|p| p.into_inner())
}

/// DMA maps one client may hold at once (docs/verbs.md, "Resource bounds"). QEMU maps
/// guest RAM in a few large ranges, or page by page behind a vIOMMU; every fd-backed map
/// is an mmap in this process, which the kernel limits (vm.max_map_count, 65530 by default).
pub const MAX_DMA_MAPS: usize = 16384;

/// Largest region access served through the socket. QEMU mmaps BAR1 and sends only
/// register-sized accesses; the limit keeps a hostile REGION_READ of a large BAR from
/// making the server copy gigabytes per message.
pub const MAX_REGION_ACCESS: usize = 1 << 20;

/// Counts and logs (rate-limited) a refused client request; returns the error reply.
fn invalid(f: &dyn PciFunction, msg: std::fmt::Arguments) -> Error {
    f.guest_error();
    let msg = format!("{}: {msg}", f.name());
    rnic_emu_core::guest_warn!("{msg}");
    Error::new(ErrorKind::InvalidInput, msg)
}

/// Whether `[offset, offset + size)` lies inside `fd` (regular files and memfds; other
/// kinds of fd are left to mmap to judge).
fn inside_file(fd: &File, offset: u64, size: u64) -> bool {
    match fd.metadata() {
        Ok(m) if m.file_type().is_file() => offset.checked_add(size).is_some_and(|end| end <= m.len()),
        Ok(_) => true,
        Err(_) => false,
    }
}

/// The region table the server advertises for a function.
pub fn regions(f: &dyn PciFunction) -> Vec<ServerRegion> {
    let mut regions: Vec<ServerRegion> = (0..VFIO_PCI_NUM_REGIONS)
        .map(|index| ServerRegion {
            region_info: vfio_region_info { argsz: size_of::<vfio_region_info>() as u32, index, ..Default::default() },
            sparse_areas: Vec::new(),
            mmap_fd: None,
        })
        .collect();
    let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
    let cfg = &mut regions[VFIO_PCI_CONFIG_REGION_INDEX as usize];
    cfg.region_info.size = CONFIG_SPACE_SIZE as u64;
    cfg.region_info.flags = rw;
    for bar in f.bar_regions() {
        let r = &mut regions[bar.index];
        r.region_info.size = bar.size;
        r.region_info.flags = rw;
        if let Some(fd) = bar.mmap_fd {
            r.region_info.flags |= VFIO_REGION_INFO_FLAG_MMAP;
            r.region_info.offset = 0; // offset into the fd
            r.sparse_areas = vec![SparseArea { area: vfio_region_sparse_mmap_area { offset: 0, size: bar.size } }];
            r.mmap_fd = Some(fd);
        }
    }
    regions
}

/// The interrupt table: MSI-X only (no INTx, MSI, error or request interrupts).
pub fn irqs(f: &dyn PciFunction) -> Vec<IrqInfo> {
    let vectors = f.interrupts().count() as u32;
    (0..VFIO_PCI_NUM_IRQS)
        .map(|index| match index {
            VFIO_PCI_MSIX_IRQ_INDEX => IrqInfo { index, flags: VFIO_IRQ_INFO_EVENTFD, count: vectors },
            _ => IrqInfo { index, flags: 0, count: 0 },
        })
        .collect()
}

pub struct Backend {
    f: SharedFunction,
    /// Region sizes, indexed by region number (0 = not present).
    sizes: Vec<u64>,
    /// The node's MMIO/DMA trace, and this function's name and kind in it.
    io: Arc<IoTrace>,
    name: Arc<str>,
    kind: FunctionKind,
}

impl Backend {
    /// A backend whose accesses go to a trace of its own (off).
    pub fn new(f: SharedFunction) -> Self {
        Backend::traced(f, Arc::default())
    }

    /// A backend recording its accesses in the node's trace `io`.
    pub fn traced(f: SharedFunction, io: Arc<IoTrace>) -> Self {
        let (sizes, name, kind) = {
            let g = lock(&f);
            (regions(&*g).iter().map(|r| r.region_info.size).collect(), Arc::from(g.name()), g.kind())
        };
        Backend { f, sizes, io, name, kind }
    }

    /// Checks a region access; returns the BAR index for BAR regions, None for config.
    fn check(&self, f: &dyn PciFunction, what: &str, region: u32, offset: u64, len: usize) -> Result<Option<usize>, Error> {
        let size = self.sizes.get(region as usize).copied().unwrap_or(0);
        let in_range = offset.checked_add(len as u64).is_some_and(|end| end <= size);
        if !in_range || len == 0 || len > MAX_REGION_ACCESS {
            return Err(invalid(f, format_args!("{what} of {len} bytes at {offset:#x} in region {region} (size {size:#x}) refused")));
        }
        match region {
            VFIO_PCI_CONFIG_REGION_INDEX => Ok(None),
            r if r <= VFIO_PCI_BAR5_REGION_INDEX => Ok(Some(r as usize)),
            _ => Err(invalid(f, format_args!("{what} of unsupported region {region}"))),
        }
    }

    /// Called when a client goes away: the next client starts from a freshly reset device.
    pub fn disconnected(&mut self) {
        let mut f = lock(&self.f);
        f.disconnect();
        f.config_mut().reset();
        f.config_written();
        f.interrupts().reset();
        let cleared = f.dma().write().unwrap_or_else(|p| p.into_inner()).clear();
        if let Err(e) = cleared {
            log::error!("{}: after the client left: {e}", f.name());
        }
    }
}

impl ServerBackend for Backend {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), Error> {
        let mut f = lock(&self.f);
        let bar = self.check(&*f, "read", region, offset, data.len())?;
        match bar {
            None => f.config_read(offset as usize, data),
            Some(bar) => f.bar_read(bar, offset, data),
        }
        self.io.mmio(&self.name, self.kind, bar, offset, data, false, Some(f.config()));
        Ok(())
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), Error> {
        let mut f = lock(&self.f);
        let bar = self.check(&*f, "write", region, offset, data.len())?;
        // Before its effect: the DMA a doorbell or command starts comes after it in the trace.
        self.io.mmio(&self.name, self.kind, bar, offset, data, true, Some(f.config()));
        match bar {
            None if f.link_down() => log::debug!("{}: configuration write dropped: link down", f.name()),
            None => {
                let fx = f.config_mut().write(offset as usize, data).unwrap_or_default();
                if fx.flr {
                    rnic_emu_core::guest_info!("{}: function level reset", f.name());
                    f.reset();
                    f.config_mut().reset();
                } else if fx.decoding_changed {
                    let cfg = f.config();
                    let windows: Vec<_> = cfg.bars().iter().map(|b| (b.index, cfg.bar_window(b.index))).collect();
                    log::debug!("{}: decoding changed, BAR windows {windows:x?}", f.name());
                }
                f.config_written();
            }
            Some(bar) => f.bar_write(bar, offset, data),
        }
        Ok(())
    }

    fn dma_map(&mut self, flags: DmaMapFlags, offset: u64, address: u64, size: u64, fd: Option<File>) -> Result<(), Error> {
        let f = lock(&self.f);
        let has_fd = fd.is_some();
        log::debug!("{}: DMA_MAP iova {address:#x} size {size:#x} fd {has_fd} flags {flags:?}", f.name());
        let mut maps = f.dma().write().unwrap_or_else(|p| p.into_inner());
        if maps.len() >= MAX_DMA_MAPS {
            return Err(invalid(&*f, format_args!("DMA_MAP at {address:#x} refused: the client already holds {MAX_DMA_MAPS} maps")));
        }
        if fd.as_ref().is_some_and(|fd| !inside_file(fd, offset, size)) {
            return Err(invalid(&*f, format_args!("DMA_MAP of {size:#x} bytes at fd offset {offset:#x} refused: past the end of the file")));
        }
        // QEMU maps guest RAM READ|WRITE and read-only sections (ROM) READ only.
        let prot = Prot { read: flags.contains(DmaMapFlags::READ), write: flags.contains(DmaMapFlags::WRITE) };
        maps.map_with(address, size, fd, offset, prot).map_err(|e| invalid(&*f, format_args!("{e}")))
    }

    fn dma_unmap(&mut self, flags: DmaUnmapFlags, address: u64, size: u64) -> Result<(), Error> {
        let f = lock(&self.f);
        log::debug!("{}: DMA_UNMAP iova {address:#x} size {size:#x} flags {flags:?}", f.name());
        let mut maps = f.dma().write().unwrap_or_else(|p| p.into_inner());
        // Success only once no further byte of the range is read or written (module
        // header of rnic_emu_core::platform::mem::dma); a range that cuts a mapping is
        // refused and removes nothing.
        let done = if flags.contains(DmaUnmapFlags::UNMAP_ALL) { maps.clear() } else { maps.unmap(address, size).map(|_| ()) };
        done.map_err(|e| invalid(&*f, format_args!("{e}")))
    }

    fn reset(&mut self) -> Result<(), Error> {
        let mut f = lock(&self.f);
        rnic_emu_core::guest_info!("{}: device reset requested by the client", f.name());
        f.reset();
        Ok(())
    }

    fn set_irqs(&mut self, index: u32, flags: u32, start: u32, count: u32, fds: Vec<File>) -> Result<(), Error> {
        let f = lock(&self.f);
        match index {
            VFIO_PCI_MSIX_IRQ_INDEX => {
                log::debug!("{}: SET_IRQS MSI-X flags {flags:#x} start {start} count {count} fds {}", f.name(), fds.len());
                f.interrupts().set(flags, start, count, fds).map_err(|e| invalid(&*f, format_args!("{e}")))
            }
            VFIO_PCI_ERR_IRQ_INDEX | VFIO_PCI_REQ_IRQ_INDEX if count == 0 => Ok(()),
            _ => Err(invalid(&*f, format_args!("SET_IRQS on unsupported index {index}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_emu_core::platform::topology::Topology;

    fn backend() -> (Backend, SharedFunction) {
        let t = Topology::parse(
            "name = \"t\"\n[[node]]\nname = \"n\"\nport = [ { id = \"rp\", kind = \"root-port\" } ]\ndevice = [ { id = \"r\", kind = \"rnic\", port = \"rp\" } ]",
            "t",
        )
        .unwrap();
        let f: SharedFunction = Arc::new(Mutex::new(rnic_emu_core::rnic::Rnic::new("t".into(), &t.nodes[0].devices[0], Vec::new(), None).unwrap()));
        (Backend::new(f.clone()), f)
    }

    fn guest_errors(f: &SharedFunction) -> u64 {
        lock(f).stats().into_iter().find(|(n, _)| *n == "GuestErrors").map_or(0, |(_, v)| v)
    }

    #[test]
    fn hostile_region_accesses_are_refused_and_counted() {
        let (mut b, f) = backend();
        let mut buf = [0u8; 4];
        assert!(b.region_read(0, u64::MAX - 1, &mut buf).is_err(), "offset + length wraps");
        assert!(b.region_write(VFIO_PCI_CONFIG_REGION_INDEX, u64::MAX, &buf).is_err());
        assert!(b.region_read(u32::MAX, 0, &mut buf).is_err(), "no such region");
        assert!(b.region_read(0, 0, &mut []).is_err(), "empty access");
        let mut big = vec![0u8; MAX_REGION_ACCESS + 1];
        assert!(b.region_read(0, 0, &mut big).is_err(), "larger than MAX_REGION_ACCESS");
        assert_eq!(guest_errors(&f), 5);
        assert!(b.region_read(0, 0, &mut buf).is_ok());
        assert_eq!(guest_errors(&f), 5);
    }

    #[test]
    fn dma_maps_are_bounded_and_must_lie_inside_their_file() {
        let (mut b, f) = backend();
        let (_ram, fd) = rnic_emu_core::platform::mem::dma::test_ram(1 << 20).unwrap();
        assert!(b.dma_map(DmaMapFlags::READ_WRITE, 0, 0x1000_0000, 2 << 20, Some(fd.try_clone().unwrap())).is_err(), "past the end of the file");
        assert!(b.dma_map(DmaMapFlags::READ_WRITE, u64::MAX - 0xfff, 0x1000_0000, 0x1000, Some(fd.try_clone().unwrap())).is_err(), "offset + size wraps");
        b.dma_map(DmaMapFlags::READ_WRITE, 0, 0x1000_0000, 1 << 20, Some(fd)).unwrap();
        for i in 1..MAX_DMA_MAPS as u64 {
            b.dma_map(DmaMapFlags::READ_WRITE, 0, 0x2000_0000 + i * 0x1000, 0x1000, None).unwrap();
        }
        assert!(b.dma_map(DmaMapFlags::READ_WRITE, 0, 0x9000_0000, 0x1000, None).is_err(), "one map beyond MAX_DMA_MAPS");
        assert_eq!(guest_errors(&f), 3);
        b.dma_unmap(DmaUnmapFlags::empty(), 0x2000_1000, 0x1000).unwrap();
        b.dma_map(DmaMapFlags::READ_WRITE, 0, 0x9000_0000, 0x1000, None).unwrap();
    }

    #[test]
    fn a_partial_unmap_is_refused_and_counted_and_map_flags_hold() {
        let (mut b, f) = backend();
        let (ram, fd) = rnic_emu_core::platform::mem::dma::test_ram(1 << 20).unwrap();
        b.dma_map(DmaMapFlags::READ_WRITE, 0, 0x1000_0000, 1 << 19, Some(fd.try_clone().unwrap())).unwrap();
        assert!(b.dma_unmap(DmaUnmapFlags::empty(), 0x1000_0000, 0x1000).is_err(), "cuts the map");
        assert_eq!(guest_errors(&f), 1);
        assert_eq!(lock(&f).dma().read().unwrap().len(), 1, "nothing removed");
        // What QEMU sends for a read-only section: READ only. The device may read, not write.
        b.dma_map(DmaMapFlags::READ, 1 << 19, 0x2000_0000, 1 << 19, Some(fd)).unwrap();
        ram.write(1 << 19, b"rom!").unwrap();
        let mut got = [0u8; 4];
        let g = lock(&f);
        let maps = g.dma().read().unwrap();
        maps.read(0x2000_0000, &mut got).unwrap();
        assert_eq!(&got, b"rom!");
        assert!(maps.write(0x2000_0000, b"xxxx").is_err(), "no device write into a READ-only map");
        drop(maps);
        drop(g);
        b.dma_unmap(DmaUnmapFlags::empty(), 0x1000_0000, 1 << 19).unwrap();
        assert!(b.dma_map(DmaMapFlags::empty(), 0, 0x3000_0000, 0x1000, None).is_err(), "a map allowing nothing");
    }
}
