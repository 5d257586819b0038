//! The RNIC function: PCI identity, BAR0 register block (`regs::rnic`, docs/programming.md
//! §0), MSI-X, and what sits behind it:
//!
//! - [`verbs`]: the verbs engine behind the doorbells and commands (docs/verbs.md);
//! - [`doorbell`]: the doorbell page (BAR2) the driver stores indices in;
//! - [`eth`]: the Ethernet port (`ETH_*` registers, the netdev's descriptor rings), with
//!   [`eth_offload`] its checksum and TCP segmentation offloads;
//! - [`fabric`]: the RoCEv2 wire format the engine's fabric transport speaks;
//! - `pcie_faults`: the RNIC's side of PCIe fault injection (the `pcie ...` requests).
//!
//! Registers with their reset values and access rules, device reset (register, FLR,
//! vfio-user reset), the interrupt self-test and statistics are here. The model binds no
//! socket and starts no thread: the server (`serve` in `rnic-emu-server`) hands its engine
//! to the node's event loop ([`Rnic::attach`]) and gives it the fabric port; from then on
//! this socket-side model only posts doorbells and waits for command results. Unattached
//! (unit tests, fuzzing) it runs the engine inline.

use crate::contract::abi::ASYNC_ERR_APERTURE;
use crate::contract::counters::{Stats, COUNTERS};
use crate::function::{capabilities, identity, in_msix_area, invalid_read, invalid_write, shm_bar_read, shm_bar_write, BarRegion, ModelError, PciFunction};
use crate::mailbox::Mailbox;
use crate::observe::iotrace::{FunctionKind, IoTrace};
use crate::observe::timing::wqe_log::WqeLog;
use crate::platform::mem::dma::DmaMaps;
use crate::platform::mem::router::{Peer, Router};
use crate::platform::msix::Interrupts;
use crate::platform::pci::config::{BarDef, ConfigSpace, LayoutError};
use crate::platform::pcie_fault::PcieFaults;
use crate::platform::regfile::RegisterFile;
use crate::platform::shm::SharedMemory;
use crate::platform::topology::Device;
use crate::regs::pci_ids::{self, RNIC_BAR0_SIZE, RNIC_DB_BAR, RNIC_DB_BAR_SIZE};
use crate::regs::rnic::eth as eth_bits;
use crate::regs::rnic::*;
use crate::rnic::doorbell::DoorbellPage;
use crate::rnic::eth::{mac_from_reg, mac_to_reg, EthShared, RingCfg};
use crate::rnic::verbs::engine::{Engine, Shared, Tables};
use crate::rnic::verbs::runner::{EngineRunner, EngineSlot, Event};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

pub mod doorbell;
pub mod eth;
pub mod eth_offload;
#[cfg(test)]
mod eth_offload_tests;
#[cfg(test)]
mod eth_tests;
pub mod fabric;
pub mod gid;
mod pcie_faults;
pub mod verbs;

pub struct Rnic {
    name: String,
    config: ConfigSpace,
    regs: RegisterFile,
    irqs: Arc<Interrupts>,
    dma: Arc<RwLock<DmaMaps>>,
    stats: Arc<Stats>,
    last_error: Arc<AtomicU64>,
    /// STATUS_FATAL, set by the engine's driver when the engine failed internally.
    fatal: Arc<AtomicBool>,
    engine: EngineSlot,
    router: Arc<Router>,
    /// The RNIC's fabric address (None: no fabric, loopback only).
    address: Option<Ipv4Addr>,
    /// BAR2: the doorbell page, shared memory the guest maps directly.
    dbpage: DoorbellPage,
    /// PCIe-side faults (docs/faults.md; `pcie_faults.rs`).
    faults: Arc<PcieFaults>,
    /// The engine's WQE log, cleared with the statistics.
    wqe_log: Arc<WqeLog>,
    /// The Ethernet port's shared state (the rings run with the engine).
    eth: Arc<EthShared>,
    /// ETH_PERM_MAC ([`eth::perm_mac`]).
    perm_mac: [u8; 6],
    /// The last accepted ETH_VECTOR (a refused write puts it back).
    eth_vector: u64,
}

/// Byte range of the statistics counters in BAR0.
fn stats_range() -> std::ops::Range<u64> {
    STATS_BASE..STATS_BASE + 8 * COUNTERS.len() as u64
}

impl Rnic {
    /// An RNIC whose DMA can reach `peers` (the node's GPUs) besides guest RAM, with the
    /// fabric address `address` (RNIC_REG_IPV4; the server attaches the port).
    pub fn new(name: String, dev: &Device, peers: Vec<Peer>, address: Option<Ipv4Addr>) -> Result<Self, ModelError> {
        let vectors = dev.msix_vectors();
        let id = identity(dev, pci_ids::RNIC_CLASS);
        let bars = [
            BarDef { index: 0, size: RNIC_BAR0_SIZE, is_64bit: true, prefetchable: false },
            BarDef { index: RNIC_DB_BAR, size: RNIC_DB_BAR_SIZE, is_64bit: true, prefetchable: false },
        ];
        let dbpage = DoorbellPage::new(Arc::new(SharedMemory::memfd(&format!("rnic-emu-{name}-dbpage"), RNIC_DB_BAR_SIZE)?));
        let caps = capabilities(dev);
        let faults = Arc::new(PcieFaults::default());
        let irqs = Arc::new(Interrupts::with_faults(vectors, faults.clone()));
        let dma = Arc::new(RwLock::new(DmaMaps::default()));
        let stats = Arc::new(Stats::default());
        let last_error = Arc::new(AtomicU64::new(0));
        let fatal = Arc::new(AtomicBool::new(false));
        let router = Arc::new(Router { faults: faults.clone(), ..Router::new(dma.clone(), peers, stats.clone()) });
        let shared = Shared { irqs: irqs.clone(), stats: stats.clone(), last_error: last_error.clone(), fatal: fatal.clone(), clock: Default::default() };
        let mut verbs = Engine::new(name.clone(), shared);
        verbs.set_faults(faults.clone());
        let wqe_log = verbs.wqe_log().clone();
        let mut runner = EngineRunner::new(verbs, Some(dbpage.clone()));
        runner.set_gate(router.gate.clone());
        let eth = runner.eth_shared().clone();
        let perm_mac = eth::perm_mac(address, &name);
        let engine = EngineSlot::Inline(Box::new(runner));
        let config: Result<ConfigSpace, LayoutError> = ConfigSpace::new(id, &bars, &caps);
        let regs = RegisterFile::new(REGS);
        let mut rnic = Rnic {
            name,
            config: config?,
            regs,
            irqs,
            dma,
            stats,
            last_error,
            fatal,
            engine,
            router,
            address,
            dbpage,
            faults,
            wqe_log,
            eth,
            perm_mac,
            eth_vector: 0,
        };
        rnic.reset();
        rnic.config_written();
        Ok(rnic)
    }

    /// Hands the verbs engine (with the doorbell page) to an event loop: returns it with
    /// the DMA router it works through; doorbells and commands go to `mailbox` from now
    /// on. None: already attached.
    pub fn attach(&mut self, mailbox: Arc<Mailbox<Event>>) -> Option<(EngineRunner, Arc<Router>)> {
        self.engine.attach(mailbox).map(|e| (e, self.router.clone()))
    }

    /// How long register writes that call into the attached engine wait for it
    /// (`runner::COMMAND_TIMEOUT`); tests shorten it. False: not attached.
    #[doc(hidden)]
    pub fn set_call_timeout(&mut self, timeout: std::time::Duration) -> bool {
        self.engine.set_call_timeout(timeout)
    }

    /// The Ethernet port's shared state: MAC filter, MTU, promiscuous mode, link (the
    /// fabric port sets it), the rings' state and consumer indices.
    pub fn eth_shared(&self) -> Arc<EthShared> {
        self.eth.clone()
    }

    /// The statistics block (the fabric port counts packets into it).
    pub fn stats_block(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    fn reset_registers(&mut self) {
        self.regs.reset();
        self.regs.set(RNIC_REG_NUM_VECTORS, self.irqs.count() as u64);
        self.regs.set(RNIC_REG_NUM_GPUS, self.router.peers.len() as u64);
        let ip = self.address.map_or(0, u32::from);
        self.regs.set(RNIC_REG_IPV4, u64::from(ip));
        self.router.apertures.iter().for_each(|a| a.store(0, Ordering::SeqCst));
        self.regs.set(ETH_PERM_MAC, mac_to_reg(self.perm_mac));
        self.regs.set(ETH_MAC, mac_to_reg(self.perm_mac));
        self.eth.reset_config(self.perm_mac);
        self.eth_vector = 0;
        self.dbpage.clear();
        self.update_status();
    }

    /// Records this RNIC's DMAs in the node's MMIO/DMA trace `io`. Only before
    /// [`Rnic::attach`] (the router is shared from then on): false afterwards.
    pub fn trace_into(&mut self, io: Arc<IoTrace>) -> bool {
        let name: Arc<str> = Arc::from(self.name.as_str());
        let Some(router) = Arc::get_mut(&mut self.router) else { return false };
        router.observer = io;
        router.observed_as = name;
        true
    }

    /// The doorbell page (BAR2), for the engine's event loop.
    pub fn doorbell_page(&self) -> &DoorbellPage {
        &self.dbpage
    }

    fn update_status(&mut self) {
        let mut status = STATUS_READY;
        if self.regs.get(DMA_CTRL) & DMA_CTRL_ENABLE != 0 {
            status |= STATUS_DMA_ENABLED;
        }
        if self.last_error.load(Ordering::SeqCst) != 0 {
            status |= STATUS_ERROR;
        }
        if self.fatal.load(Ordering::SeqCst) || self.router.gate.quarantined() {
            status |= STATUS_FATAL;
        }
        if self.faults.flr_required() {
            status |= STATUS_FATAL | STATUS_FLR_REQUIRED;
        }
        self.regs.set(RNIC_REG_STATUS, status);
    }

    fn tables(&self) -> Tables {
        Tables {
            qp_ctx: self.regs.get(QP_CTX_BASE),
            cq_ctx: self.regs.get(CQ_CTX_BASE),
            mr_ctx: self.regs.get(MR_CTX_BASE),
            mtt: self.regs.get(MTT_BASE),
            mtt_entries: self.regs.get(MTT_ENTRIES),
            qp_path: self.regs.get(QP_PATH_BASE),
            gid_table: self.regs.get(GID_TABLE_BASE),
            eq: self.regs.get(EQ_BASE),
            eq_log: self.regs.get(EQ_LOG),
        }
    }

    /// Reads that are not plain register-file reads: statistics, the read-to-clear error
    /// latch and the live status. None: an ordinary register.
    fn special_read(&mut self, offset: u64, len: usize) -> Option<u64> {
        if stats_range().contains(&offset) {
            let rel = offset - STATS_BASE;
            let value = self.stats.by_index((rel / 8) as usize)?;
            return match (len, rel % 8) {
                (8, 0) => Some(value),
                (4, 0) => Some(value & 0xffff_ffff),
                (4, 4) => Some(value >> 32),
                _ => None,
            };
        }
        match (offset, len) {
            (RNIC_REG_LAST_ERROR, 4) => Some(self.last_error.swap(0, Ordering::SeqCst)),
            (RNIC_REG_STATUS, 4) => {
                self.update_status();
                Some(self.regs.get(RNIC_REG_STATUS))
            }
            (ETH_LINK, 4) => Some(if self.eth.link_up() { eth_bits::LINK_UP } else { 0 }),
            (ETH_CTRL, 4) => Some(self.eth.ctrl()),
            (ETH_TXQ_CI, 4) => Some(u64::from(self.eth.tx_ci())),
            (ETH_RXQ_CI, 4) => Some(u64::from(self.eth.rx_ci())),
            _ => None,
        }
    }

    /// A register write took effect; `low_half`: only the low 4 bytes of a 64-bit
    /// register were written (its high half is expected next).
    fn on_register_write(&mut self, reg: u64, value: u64, low_half: bool) {
        match reg {
            RNIC_REG_RESET if self.faults.flr_required() => {
                crate::guest_warn!("{}: RNIC_REG_RESET ignored: the function needs a Function Level Reset", self.name);
            }
            RNIC_REG_RESET if value == RESET_MAGIC => {
                crate::guest_info!("{}: reset through RNIC_REG_RESET", self.name);
                self.reset();
            }
            RNIC_REG_RESET => {
                self.guest_error();
                crate::guest_warn!("{}: RNIC_REG_RESET write {value:#x} ignored (not RESET_MAGIC)", self.name);
            }
            RNIC_REG_INT_TRIGGER => {
                let raised = usize::try_from(value).is_ok_and(|v| self.irqs.trigger(v));
                if !raised {
                    self.guest_error();
                    crate::guest_warn!("{}: self-test interrupt on vector {value} not raised (not enabled)", self.name);
                }
                self.regs.set(RNIC_REG_INT_COUNT, self.irqs.raised() & 0xffff_ffff);
            }
            DMA_CTRL => {
                self.update_status();
                let (enabled, int_enabled) = (value & DMA_CTRL_ENABLE != 0, value & DMA_CTRL_INT_ENABLE != 0);
                let db_page = value & DMA_CTRL_DB_PAGE != 0;
                self.engine.dma_ctrl(&self.router, enabled, int_enabled, db_page);
            }
            WQE_DB_IDX | RQ_DB_IDX | CQE_CONS_IDX | CQ_ARM => {
                let (object, index) = ((value >> DB_OBJECT_SHIFT) as u32, (value & DB_INDEX_MASK) as u16);
                let ev = match reg {
                    WQE_DB_IDX => Event::SqDoorbell { qpn: object, pi: index },
                    RQ_DB_IDX => Event::RqDoorbell { qpn: object, pi: index },
                    CQE_CONS_IDX => Event::CqConsumed { cqn: object, ci: index },
                    _ => Event::CqArm { cqn: object },
                };
                self.engine.post(&self.router, ev);
            }
            EQ_CI => self.engine.post(&self.router, Event::EqConsumed { ci: value as u32 }),
            BAR1_APERTURE | BAR1_APERTURE_1 | BAR1_APERTURE_2 | BAR1_APERTURE_3 => {
                let slot = ((reg - BAR1_APERTURE) / 8) as usize;
                if let Some(a) = self.router.apertures.get(slot) {
                    a.store(value, Ordering::SeqCst);
                }
                // Checked once the whole value is there (docs/programming.md R-APT-2).
                if !low_half && value != 0 && !self.router.is_gpu_bar(value) {
                    self.guest_error();
                    crate::guest_warn!("{}: BAR1_APERTURE slot {slot} = {value:#x} is no GPU's BAR1: DMA there will fail", self.name);
                    self.last_error.store(u64::from(ASYNC_ERR_APERTURE) << 24 | slot as u64, Ordering::SeqCst);
                    if self.regs.get(DMA_CTRL) & DMA_CTRL_INT_ENABLE != 0 && self.irqs.trigger(crate::rnic::verbs::engine::ASYNC_VECTOR) {
                        self.stats.inc(crate::contract::counters::Counter::Interrupts);
                    }
                }
            }
            ETH_MAC | ETH_MTU | ETH_VECTOR | ETH_CTRL | ETH_TXQ_PI | ETH_RXQ_PI | ETH_ARM => self.on_eth_write(reg, value),
            RNIC_REG_CMD if self.faults.take_cmd_timeout() => {
                crate::guest_warn!("{}: command {value:#x} never completes (cmd-timeout fault): CMD_STATUS stays BUSY until a reset", self.name);
                self.regs.set(RNIC_REG_CMD_STATUS, u64::from(crate::contract::abi::CMD_BUSY));
            }
            RNIC_REG_CMD => {
                let (op, index) = ((value >> CMD_OP_SHIFT) as u32, (value & CMD_INDEX_MASK) as u32);
                let tables = self.tables();
                let status = self.engine.command(&self.router, op, index, tables);
                self.regs.set(RNIC_REG_CMD_STATUS, u64::from(status));
            }
            _ => {}
        }
    }
}

impl Rnic {
    /// A write to an `ETH_*` register that acts (docs/programming.md "The Ethernet port").
    fn on_eth_write(&mut self, reg: u64, value: u64) {
        match reg {
            ETH_MAC => self.eth.set_mac(mac_from_reg(self.regs.get(ETH_MAC))),
            ETH_MTU if !(eth_bits::MIN_MTU..=eth_bits::MAX_MTU).contains(&value) => {
                self.guest_error();
                crate::guest_warn!("{}: ETH_MTU {value} refused (outside {}..={})", self.name, eth_bits::MIN_MTU, eth_bits::MAX_MTU);
                self.regs.set(ETH_MTU, u64::from(self.eth.mtu()));
            }
            ETH_MTU => {
                self.eth.set_mtu(value as u32);
            }
            ETH_VECTOR if value >= self.irqs.count() as u64 => {
                self.guest_error();
                crate::guest_warn!("{}: ETH_VECTOR {value} refused: the function has {} vectors", self.name, self.irqs.count());
                self.regs.set(ETH_VECTOR, self.eth_vector);
            }
            ETH_VECTOR => self.eth_vector = value,
            ETH_CTRL => {
                self.eth.set_promisc(value & eth_bits::CTRL_PROMISC != 0);
                self.eth.set_rx_csum(value & eth_bits::CTRL_RX_CSUM != 0);
                // A ring that starts starts at index 0: its producer index too.
                if value & eth_bits::CTRL_TX_EN != 0 && !self.eth.tx_enabled() {
                    self.regs.set(ETH_TXQ_PI, 0);
                }
                if value & eth_bits::CTRL_RX_EN != 0 && !self.eth.rx_enabled() {
                    self.regs.set(ETH_RXQ_PI, 0);
                }
                let tx = RingCfg { base: self.regs.get(ETH_TXQ_BASE), log2: self.regs.get(ETH_TXQ_LOG) };
                let rx = RingCfg { base: self.regs.get(ETH_RXQ_BASE), log2: self.regs.get(ETH_RXQ_LOG) };
                self.engine.eth_ctrl(&self.router, value, tx, rx);
            }
            ETH_TXQ_PI => self.engine.post(&self.router, Event::EthTxDoorbell { pi: value as u16 }),
            ETH_RXQ_PI => self.engine.post(&self.router, Event::EthRxDoorbell { pi: value as u16 }),
            ETH_ARM => {
                let ev = Event::EthArm { tx_ci: value as u16, rx_ci: (value >> 16) as u16, vector: self.eth_vector as u16 };
                self.engine.post(&self.router, ev);
            }
            _ => {}
        }
    }
}

impl PciFunction for Rnic {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> FunctionKind {
        FunctionKind::Rnic
    }

    fn config(&self) -> &ConfigSpace {
        &self.config
    }

    fn config_mut(&mut self) -> &mut ConfigSpace {
        &mut self.config
    }

    fn bar_regions(&self) -> Vec<BarRegion> {
        vec![
            BarRegion { index: 0, size: RNIC_BAR0_SIZE, mmap_fd: None },
            BarRegion { index: RNIC_DB_BAR, size: RNIC_DB_BAR_SIZE, mmap_fd: Some(self.dbpage.memory().raw_fd()) },
        ]
    }

    fn bar_read(&mut self, bar: usize, offset: u64, data: &mut [u8]) {
        if self.faults.link_down() {
            data.fill(0xff); // no completion from a removed device: the root port answers all-ones
            return;
        }
        if bar == RNIC_DB_BAR {
            // A client that does not mmap the page reaches it through the socket.
            shm_bar_read(self, self.dbpage.memory(), bar, offset, data);
            return;
        }
        if bar != 0 || in_msix_area(offset) {
            data.fill(0);
            return;
        }
        if let Some(v) = self.special_read(offset, data.len()) {
            data.copy_from_slice(&v.to_le_bytes()[..data.len()]);
            return;
        }
        if stats_range().contains(&offset) {
            invalid_read(self, bar, offset, data, &"statistics take aligned 4- or 8-byte reads");
            return;
        }
        if let Err(e) = self.regs.read(offset, data) {
            invalid_read(self, bar, offset, data, &e);
        }
    }

    fn bar_write(&mut self, bar: usize, offset: u64, data: &[u8]) {
        if self.faults.link_down() {
            return;
        }
        if bar == RNIC_DB_BAR {
            shm_bar_write(self, self.dbpage.memory(), bar, offset, data);
            return;
        }
        if bar != 0 || in_msix_area(offset) {
            return;
        }
        match self.regs.write(offset, data) {
            Ok(Some(w)) => {
                let wide = REGS.iter().any(|r| r.offset == w.reg && r.width == 8);
                self.on_register_write(w.reg, w.value, wide && data.len() == 4 && offset == w.reg)
            }
            Ok(None) => log::debug!("{}: write to read-only register {offset:#x} ignored", self.name),
            Err(e) => invalid_write(self, bar, offset, data.len(), &e),
        }
    }

    fn interrupts(&self) -> &Interrupts {
        &self.irqs
    }

    fn dma(&self) -> &RwLock<DmaMaps> {
        &self.dma
    }

    /// FLR, vfio-user reset, RNIC_REG_RESET (refused earlier while an FLR is required).
    fn reset(&mut self) {
        self.faults.set_flr_required(false);
        self.disconnect();
        self.stats.reset();
        self.wqe_log.clear();
    }

    fn disconnect(&mut self) {
        self.faults.on_reset();
        self.engine.reset(&self.router);
        self.reset_registers();
    }

    fn config_read(&mut self, offset: usize, data: &mut [u8]) {
        self.sync_aer();
        if self.faults.link_down() {
            data.fill(0xff);
            return;
        }
        self.config.read(offset, data);
    }

    fn link_down(&self) -> bool {
        self.faults.link_down()
    }

    /// Mirrors PCI bus mastering (COMMAND bit 2) into the DMA gate: off, no DMA of the
    /// function reaches memory once the configuration write returns.
    fn config_written(&mut self) {
        if !self.router.gate.set_bus_master(self.config.bus_master_enabled()) {
            log::error!("{}: DMA under way did not end within {:?} of bus mastering going off", self.name, crate::platform::mem::gate::GATE_WAIT);
        }
    }

    /// The device counters, then the fault counters (host side only).
    fn stats(&self) -> Vec<(&'static str, u64)> {
        let mut all = self.stats.snapshot();
        all.extend(self.faults.snapshot());
        all
    }

    fn guest_error(&self) {
        self.stats.inc(crate::contract::counters::Counter::GuestErrors);
    }

    /// `trace [qp=N] [since=N]` (recent WQEs as JSON) and `trace on|off`: the device's
    /// WQE log (docs/timing.md).
    /// `pcie ...`: PCIe-side fault injection (docs/faults.md).
    fn control(&mut self, request: &str) -> Option<Result<String, String>> {
        let mut words = request.split_whitespace();
        let first = words.next();
        if first == Some("pcie") {
            return self.fault_control(&words.collect::<Vec<_>>());
        }
        if first != Some("trace") {
            return None;
        }
        Some(self.wqe_log.control(&words.collect::<Vec<_>>().join(" ")))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::platform::topology::Topology;

    fn rnic() -> Rnic {
        test_rnic("t", None)
    }

    /// An RNIC named `name` (4 MSI-X vectors, fabric address `address`) of a one-device
    /// topology, for the register-level unit tests.
    pub(crate) fn test_rnic(name: &str, address: Option<std::net::Ipv4Addr>) -> Rnic {
        let t = Topology::parse(
            r#"name = "t"
            [[node]]
            name = "n"
            port = [ { id = "rp", kind = "root-port" } ]
            device = [ { id = "r", kind = "rnic", port = "rp", msix_vectors = 4 } ]"#,
            "t",
        )
        .unwrap();
        Rnic::new(name.into(), &t.nodes[0].devices[0], Vec::new(), address).unwrap()
    }

    fn rd(r: &mut Rnic, off: u64) -> u32 {
        let mut b = [0u8; 4];
        r.bar_read(0, off, &mut b);
        u32::from_le_bytes(b)
    }

    fn wr(r: &mut Rnic, off: u64, v: u32) {
        r.bar_write(0, off, &v.to_le_bytes());
    }

    #[test]
    fn identification_and_reset_values() {
        let mut r = rnic();
        assert_eq!(rd(&mut r, RNIC_REG_ID), ID_MAGIC);
        assert_eq!(rd(&mut r, RNIC_REG_VERSION), crate::regs::CONTRACT_VERSION);
        assert_eq!(rd(&mut r, RNIC_REG_NUM_VECTORS), 4);
        assert_eq!(rd(&mut r, DMA_CTRL), 1);
        assert_eq!(u64::from(rd(&mut r, RNIC_REG_STATUS)), STATUS_READY | STATUS_DMA_ENABLED);
        assert_eq!(rd(&mut r, STATS_BASE), 0, "statistics start at zero");
    }

    #[test]
    fn register_reset_restores_everything() {
        let mut r = rnic();
        wr(&mut r, DMA_CTRL, 0);
        wr(&mut r, WQE_DB_IDX, 7);
        wr(&mut r, QP_CTX_BASE, 0x1000);
        assert_eq!(u64::from(rd(&mut r, RNIC_REG_STATUS)), STATUS_READY);
        wr(&mut r, RNIC_REG_RESET, 2);
        assert_eq!(rd(&mut r, WQE_DB_IDX), 7, "only RESET_MAGIC resets");
        wr(&mut r, RNIC_REG_RESET, RESET_MAGIC as u32);
        assert_eq!(rd(&mut r, WQE_DB_IDX), 0);
        assert_eq!(rd(&mut r, QP_CTX_BASE), 0);
        assert_eq!(rd(&mut r, DMA_CTRL), 1);
        assert_eq!(rd(&mut r, RNIC_REG_NUM_VECTORS), 4);
    }

    #[test]
    fn bad_accesses_read_all_ones_and_are_dropped() {
        let mut r = rnic();
        let mut b = [0u8; 2];
        r.bar_read(0, RNIC_REG_ID, &mut b);
        assert_eq!(b, [0xff, 0xff]);
        assert_eq!(rd(&mut r, 0x7000), 0xffff_ffff);
        r.bar_write(0, DMA_CTRL, &[0u8; 2]);
        assert_eq!(rd(&mut r, DMA_CTRL), 1);
        assert_eq!(rd(&mut r, pci_ids::MSIX_TABLE_OFFSET), 0);
    }

    #[test]
    fn doorbell_page_is_bar2_shared_memory_cleared_by_reset() {
        use crate::regs::rnic::dbpage;
        let mut r = rnic();
        let region = r.bar_regions().into_iter().find(|b| b.index == RNIC_DB_BAR).unwrap();
        assert_eq!(region.size, RNIC_DB_BAR_SIZE);
        assert!(region.mmap_fd.is_some(), "offered for mmap: guest stores do not trap");
        r.bar_write(RNIC_DB_BAR, 5 * dbpage::PAGE + dbpage::SQ_PI, &9u32.to_le_bytes());
        assert_eq!(r.doorbell_page().sq_pi(5), Some(9), "a socket write lands in the page");
        r.doorbell_page().set_sq_event(5, 4);
        let mut b = [0u8; 4];
        r.bar_read(RNIC_DB_BAR, 5 * dbpage::PAGE + dbpage::SQ_EVENT, &mut b);
        assert_eq!(u32::from_le_bytes(b), 4);
        wr(&mut r, RNIC_REG_RESET, RESET_MAGIC as u32);
        assert_eq!(r.doorbell_page().sq_pi(5), Some(0), "reset zeroes the page");
    }

    #[test]
    fn self_test_interrupt_without_eventfd_is_not_counted() {
        let mut r = rnic();
        wr(&mut r, RNIC_REG_INT_TRIGGER, 0);
        wr(&mut r, RNIC_REG_INT_TRIGGER, 0xffff_ffff);
        assert_eq!(rd(&mut r, RNIC_REG_INT_COUNT), 0);
    }
}
