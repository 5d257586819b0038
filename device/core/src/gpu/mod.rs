//! The co-emulated GPU function: BAR0 control registers (`regs::gpu`), MSI-X, and BAR1, a
//! large 64-bit prefetchable memory aperture backed by shared memory that QEMU maps
//! directly into the guest (sparse mmap), so guest CPU access to it never traps.
//!
//! The copy/fill/reduce engine ([`engine`]) runs on the node's event loop once the
//! server attaches it; the model itself starts no thread. Reset leaves BAR1 contents
//! alone, as GPU memory survives a function reset.

pub mod engine;

use crate::function::{capabilities, identity, in_msix_area, invalid_read, invalid_write, shm_bar_read, shm_bar_write, BarRegion, ModelError, PciFunction};
use crate::gpu::engine::{GpuEngine, Launch, Runner};
use crate::mailbox::Mailbox;
use crate::platform::mem::dma::DmaMaps;
use crate::platform::mem::router::PeerWindow;
use crate::platform::msix::Interrupts;
use crate::platform::pci::config::{BarDef, ConfigSpace};
use crate::platform::regfile::RegisterFile;
use crate::platform::shm::SharedMemory;
use crate::platform::topology::Device;
use crate::regs::gpu::*;
use crate::regs::pci_ids::{self, GPU_BAR0_SIZE};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Index of the memory aperture BAR.
pub const MEM_BAR: usize = 1;

pub struct Gpu {
    name: String,
    config: ConfigSpace,
    regs: RegisterFile,
    irqs: Arc<Interrupts>,
    dma: RwLock<DmaMaps>,
    engine: GpuEngine,
    mem: Arc<SharedMemory>,
    /// Where BAR1 decodes now, for the node's RNIC (DMA router).
    window: Arc<PeerWindow>,
    /// Refused guest requests ([`PciFunction::guest_error`]).
    guest_errors: AtomicU64,
}

impl Gpu {
    pub fn new(name: String, dev: &Device, mem: SharedMemory) -> Result<Self, ModelError> {
        let mem = Arc::new(mem);
        let id = identity(dev, pci_ids::GPU_CLASS);
        let bars = [
            BarDef { index: 0, size: GPU_BAR0_SIZE, is_64bit: false, prefetchable: false },
            BarDef { index: MEM_BAR, size: mem.size(), is_64bit: true, prefetchable: true },
        ];
        let vectors = dev.msix_vectors();
        let caps = capabilities(dev);
        let irqs = Arc::new(Interrupts::new(vectors));
        let engine = GpuEngine::new(mem.clone(), irqs.clone());
        let mut gpu = Gpu {
            name,
            config: ConfigSpace::new(id, &bars, &caps)?,
            regs: RegisterFile::new(REGS),
            irqs,
            dma: RwLock::default(),
            engine,
            window: Arc::new(PeerWindow::new(mem.clone())),
            mem,
            guest_errors: AtomicU64::new(0),
        };
        gpu.reset();
        Ok(gpu)
    }

    /// Hands the copy engine to the node's event loop (launches go to `mailbox`); returns
    /// what the loop runs. None: already attached.
    pub fn attach(&mut self, mailbox: Arc<Mailbox<Launch>>) -> Option<Runner> {
        self.engine.attach(mailbox)
    }

    /// The BAR1 memory, for the host side (statistics, inspection, peer DMA).
    pub fn memory(&self) -> &SharedMemory {
        &self.mem
    }

    /// BAR1 as the RNIC's DMA router sees it.
    pub fn window(&self) -> Arc<PeerWindow> {
        self.window.clone()
    }

    /// Refreshes the registers the engine owns before a read.
    fn sync_engine_registers(&mut self) {
        let st = &self.engine.state;
        self.regs.set(GPU_ENG_STATUS, st.status.load(Ordering::SeqCst));
        self.regs.set(GPU_ENG_DONE, st.done.load(Ordering::SeqCst) & 0xffff_ffff);
        self.regs.set(GPU_STAT_OPS, st.ops.load(Ordering::SeqCst));
        self.regs.set(GPU_STAT_BYTES, st.bytes.load(Ordering::SeqCst));
    }

    fn on_register_write(&mut self, reg: u64, value: u64) {
        if reg == GPU_ENG_LAUNCH {
            let r = |reg| self.regs.get(reg);
            let l = Launch {
                op: value,
                src: r(GPU_ENG_SRC),
                src2: r(GPU_ENG_SRC2),
                dst: r(GPU_ENG_DST),
                len: r(GPU_ENG_LEN),
                value: r(GPU_ENG_VALUE) as u32,
                vector: r(GPU_ENG_VECTOR) as usize,
            };
            self.engine.launch(l);
            return;
        }
        if reg == GPU_REG_INT_TRIGGER {
            let raised = usize::try_from(value).is_ok_and(|v| self.irqs.trigger(v));
            if !raised {
                self.guest_error();
                crate::guest_warn!("{}: self-test interrupt on vector {value} not raised (not enabled)", self.name);
            }
            self.regs.set(GPU_REG_INT_COUNT, self.irqs.raised() & 0xffff_ffff);
        }
    }
}

impl PciFunction for Gpu {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> crate::observe::iotrace::FunctionKind {
        crate::observe::iotrace::FunctionKind::Gpu
    }

    fn config(&self) -> &ConfigSpace {
        &self.config
    }

    fn config_mut(&mut self) -> &mut ConfigSpace {
        &mut self.config
    }

    fn bar_regions(&self) -> Vec<BarRegion> {
        vec![BarRegion { index: 0, size: GPU_BAR0_SIZE, mmap_fd: None }, BarRegion { index: MEM_BAR, size: self.mem.size(), mmap_fd: Some(self.mem.raw_fd()) }]
    }

    fn bar_read(&mut self, bar: usize, offset: u64, data: &mut [u8]) {
        match bar {
            0 if in_msix_area(offset) => data.fill(0),
            0 => {
                self.sync_engine_registers();
                if let Err(e) = self.regs.read(offset, data) {
                    invalid_read(self, bar, offset, data, &e);
                }
            }
            MEM_BAR => shm_bar_read(self, &self.mem, bar, offset, data),
            _ => data.fill(0xff),
        }
    }

    fn bar_write(&mut self, bar: usize, offset: u64, data: &[u8]) {
        match bar {
            0 if in_msix_area(offset) => {}
            0 => match self.regs.write(offset, data) {
                Ok(Some(w)) => self.on_register_write(w.reg, w.value),
                Ok(None) => {}
                Err(e) => invalid_write(self, bar, offset, data.len(), &e),
            },
            MEM_BAR => shm_bar_write(self, &self.mem, bar, offset, data),
            _ => {}
        }
    }

    fn interrupts(&self) -> &Interrupts {
        &self.irqs
    }

    fn dma(&self) -> &RwLock<DmaMaps> {
        &self.dma
    }

    fn reset(&mut self) {
        self.disconnect();
        self.engine.state.reset();
        self.guest_errors.store(0, Ordering::Relaxed);
    }

    fn disconnect(&mut self) {
        self.regs.reset();
        self.regs.set(GPU_REG_MEM_SIZE, self.mem.size());
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        let st = &self.engine.state;
        vec![
            ("engine_ops", st.ops.load(Ordering::SeqCst)),
            ("engine_bytes", st.bytes.load(Ordering::SeqCst)),
            ("engine_done", st.done.load(Ordering::SeqCst)),
            ("guest_errors", self.guest_errors.load(Ordering::Relaxed)),
        ]
    }

    fn guest_error(&self) {
        self.guest_errors.fetch_add(1, Ordering::Relaxed);
    }

    fn config_written(&mut self) {
        self.window.set(self.config.bar_window(MEM_BAR).map(|(addr, _)| addr));
    }
}
