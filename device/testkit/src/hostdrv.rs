//! A minimal driver for the RNIC that runs on the host, over a vfio-user client, with a
//! memfd standing in for guest RAM (handed to the server with DMA_MAP). It follows
//! docs/verbs.md the way the guest driver does, for host-level tests and benchmarks that
//! need no QEMU. Not a general driver: no teardown, no ring-space accounting beyond what
//! its callers do.
//!
//! Completions are polled from RAM; with [`HostDriver::use_interrupts`] the driver hands
//! the server one eventfd per MSI-X vector (SET_IRQS, as QEMU does) and [`HostDriver::wait`]
//! arms the CQ and sleeps until its vector fires instead of spinning, so a benchmark on a
//! small host does not take a core from the node servers it measures
//! ([`HostDriver::spin_in_wait`] goes back to spinning).
//!
//! The Ethernet port (docs/programming.md "The Ethernet port"): [`HostDriver::eth_up`] sets
//! up both descriptor rings with one buffer per slot, [`HostDriver::eth_post_rx`] posts
//! receive buffers, [`HostDriver::eth_send`] queues a frame, [`HostDriver::eth_tx_done`]
//! waits for the transmit ring to drain and [`HostDriver::eth_recv`] collects received
//! frames (reposting their buffers).

use anyhow::{bail, Context};
use rnic_emu_core::contract::abi::*;
use rnic_emu_core::platform::mem::dma::test_ram;
use rnic_emu_core::platform::shm::SharedMemory;
use rnic_emu_core::regs::rnic::*;
use rnic_emu_core::ring;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vfio_bindings::bindings::vfio::{VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_MSIX_IRQ_INDEX};
use vfio_user::Client;
use vm_memory::ByteValued;
use vmm_sys_util::eventfd::EventFd;

/// Bus address at which the RAM memfd is mapped.
pub const IOVA: u64 = 0x4000_0000;
/// Virtual addresses used with MR keys are RAM offsets plus this.
pub const VA: u64 = 0x7f00_0000_0000;
/// MTT entries the driver gives the device (MTT_ENTRIES).
pub const MTT_ENTRIES_HOST: u32 = 1 << 16;
/// log2 of the WQE stride of every SQ and RQ: 64 bytes, two SGEs.
const WQE_LOG_STRIDE: u8 = 6;

/// How a QP is connected (RTR/RTS attributes); the default is loopback on this RNIC.
#[derive(Clone, Debug)]
pub struct Connection {
    pub dest_qpn: u32,
    /// The peer node's RNIC address; None: the peer QP is on this RNIC.
    pub dest_ip: Option<std::net::Ipv4Addr>,
    pub sq_psn: u32,
    pub rq_psn: u32,
    /// log2 of the path MTU (8..=12); 0: 4096.
    pub path_mtu_log: u8,
    pub retry_cnt: u8,
    /// 4.096 us * 2^timeout (0: never).
    pub timeout: u8,
    pub rnr_retry: u8,
}

impl Default for Connection {
    fn default() -> Self {
        Connection { dest_qpn: 0, dest_ip: None, sq_psn: 0, rq_psn: 0, path_mtu_log: 0, retry_cnt: 7, timeout: 8, rnr_retry: 7 }
    }
}

struct QpRings {
    sq: u64,
    rq: u64,
    log_size: u8,
    sq_pi: u16,
    rq_pi: u16,
}

/// Bytes of RAM behind each Ethernet descriptor: the largest frame (MTU 9000 + 14).
pub const ETH_BUF: u64 = 0x2400;

/// The Ethernet rings of [`HostDriver::eth_up`]: slot i of a ring owns the buffer at
/// `bufs + i * ETH_BUF`. Indices are free-running, as the device's.
struct EthRings {
    tx: u64,
    rx: u64,
    log2: u8,
    tx_bufs: u64,
    rx_bufs: u64,
    tx_pi: u16,
    /// Transmit descriptors before this one were reported by `eth_tx_done`.
    tx_seen: u16,
    rx_pi: u16,
    rx_ci: u16,
}

impl EthRings {
    fn slot(&self, idx: u16) -> u64 {
        u64::from(idx) & ((1u64 << self.log2) - 1)
    }
}

struct CqRing {
    ring: u64,
    log_size: u8,
    ci: u16,
    vector: u16,
}

pub struct HostDriver {
    pub client: Client,
    /// The doorbell page (BAR2) mapped from the region's fd, once enabled.
    dbpage: Option<vm_memory::mmap::MmapRegion>,
    pub ram: SharedMemory,
    _fd: File,
    next_free: u64,
    /// RAM offsets of the QP, CQ and MR context tables and of the MTT.
    pub tables: [u64; 4],
    mtt_next: u32,
    qps: Vec<Option<QpRings>>,
    cqs: Vec<Option<CqRing>>,
    /// One eventfd per MSI-X vector once [`HostDriver::use_interrupts`] was called.
    irqs: Vec<EventFd>,
    /// Whether [`HostDriver::wait`] sleeps on the CQ's vector (else it spins).
    sleep_in_wait: bool,
    /// The Ethernet rings, once [`HostDriver::eth_up`] was called.
    eth: Option<EthRings>,
    /// RAM offsets of the QP path and GID tables, once [`HostDriver::use_paths`] was called.
    paths: Option<(u64, u64)>,
}

impl HostDriver {
    /// Connects to an RNIC socket, maps `ram_size` bytes of RAM and brings the device up.
    pub fn connect(sock: &Path, ram_size: u64) -> anyhow::Result<HostDriver> {
        // The node server binds its sockets one after another: give it a moment.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sock.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        // The socket file appears just before the server listens on it: retry a refusal.
        let mut client = loop {
            match Client::new(sock) {
                Ok(c) => break c,
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(e).with_context(|| format!("connecting to {}", sock.display())),
            }
        };
        let (ram, fd) = test_ram(ram_size)?;
        client.dma_map(0, IOVA, ram_size, fd.as_raw_fd())?;
        let mut d = HostDriver {
            client,
            dbpage: None,
            ram,
            _fd: fd,
            next_free: 0,
            tables: [0; 4],
            mtt_next: 0,
            qps: (0..MAX_QP).map(|_| None).collect(),
            cqs: (0..MAX_CQ).map(|_| None).collect(),
            irqs: Vec::new(),
            sleep_in_wait: false,
            eth: None,
            paths: None,
        };
        let sizes = [MAX_QP * QpCtx::ABI.size as u64, MAX_CQ * 32, MAX_MR * 32, u64::from(MTT_ENTRIES_HOST) * 8];
        for (slot, size) in d.tables.iter_mut().zip(sizes) {
            *slot = Self::bump(&mut d.next_free, size, 4096);
        }
        d.load()?;
        Ok(d)
    }

    /// What a driver load does: enable memory decoding and bus mastering (Linux's
    /// pci_enable_device and pci_set_master), program the context tables and enable DMA
    /// and interrupts.
    fn load(&mut self) -> anyhow::Result<()> {
        let cfg = vfio_bindings::bindings::vfio::VFIO_PCI_CONFIG_REGION_INDEX;
        self.client.region_write(cfg, 0x04, &0x6u16.to_le_bytes())?;
        let t = self.tables;
        for (reg, off) in [(QP_CTX_BASE, t[0]), (CQ_CTX_BASE, t[1]), (MR_CTX_BASE, t[2]), (MTT_BASE, t[3])] {
            self.w64(reg, IOVA + off)?;
        }
        self.w32(MTT_ENTRIES, MTT_ENTRIES_HOST)?;
        self.w32(DMA_CTRL, (DMA_CTRL_ENABLE | DMA_CTRL_INT_ENABLE) as u32)
    }

    /// Loads the driver again on the same connection after a device reset: every QP, CQ
    /// and MR is forgotten (their RAM is not reused) and the device brought up afresh.
    pub fn reload(&mut self) -> anyhow::Result<()> {
        self.dbpage = None; // reset turned it off
        self.eth = None; // and stopped the Ethernet rings
        self.qps.iter_mut().for_each(|q| *q = None);
        self.cqs.iter_mut().for_each(|c| *c = None);
        self.mtt_next = 0;
        self.load()
    }

    /// Hands the server a second RAM range (a fresh memfd of `size` bytes at bus address
    /// `iova`), as QEMU does for RAM above 4 GiB; returns it for inspection.
    pub fn map_more_ram(&mut self, iova: u64, size: u64) -> anyhow::Result<SharedMemory> {
        let (ram, fd) = test_ram(size)?;
        self.client.dma_map(0, iova, size, fd.as_raw_fd())?;
        Ok(ram)
    }

    /// Maps the doorbell page (BAR2) and turns it on (docs/verbs.md §3.1): from now on
    /// `post` stores producer indices there and rings the MMIO doorbell only when the
    /// device's event index asks for it, and `poll` reports consumer indices there.
    pub fn use_doorbell_page(&mut self) -> anyhow::Result<()> {
        use rnic_emu_core::regs::pci_ids::{RNIC_DB_BAR, RNIC_DB_BAR_SIZE};
        let region = self.client.region(RNIC_DB_BAR as u32).context("the RNIC offers no BAR2")?;
        let fo = region.file_offset.clone().context("BAR2 comes without an fd to map")?;
        let map = vm_memory::mmap::MmapRegion::from_file(fo, RNIC_DB_BAR_SIZE as usize)?;
        self.dbpage = Some(map);
        let ctrl = self.r32(DMA_CTRL)?;
        self.w32(DMA_CTRL, ctrl | DMA_CTRL_DB_PAGE as u32)
    }

    /// Gives the server an eventfd for every MSI-X vector (SET_IRQS, as QEMU does): from
    /// now on [`HostDriver::wait`] arms the CQ and sleeps until its vector fires.
    pub fn use_interrupts(&mut self) -> anyhow::Result<()> {
        let count = self.client.get_irq_info(VFIO_PCI_MSIX_IRQ_INDEX)?.count;
        let fds = (0..count).map(|_| EventFd::new(libc::EFD_NONBLOCK)).collect::<Result<Vec<_>, _>>()?;
        let raw: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
        self.client.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER, 0, count, &raw)?;
        self.irqs = fds;
        self.sleep_in_wait = true;
        Ok(())
    }

    /// Makes [`HostDriver::wait`] spin on the CQ again (the eventfds stay with the server;
    /// an unarmed CQ does not raise its vector).
    pub fn spin_in_wait(&mut self) {
        self.sleep_in_wait = false;
    }

    fn page_store(&self, offset: u64, value: u16) {
        use vm_memory::{Bytes, VolatileMemory};
        if let Some(s) = self.dbpage.as_ref().and_then(|m| m.get_slice(0, m.len()).ok()) {
            let _ = s.store(u32::from(value), offset as usize, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn page_load(&self, offset: u64) -> u16 {
        use vm_memory::{Bytes, VolatileMemory};
        let slice = self.dbpage.as_ref().and_then(|m| m.get_slice(0, m.len()).ok());
        slice.and_then(|s| s.load::<u32>(offset as usize, std::sync::atomic::Ordering::SeqCst).ok()).unwrap_or(0) as u16
    }

    fn bump(next: &mut u64, size: u64, align: u64) -> u64 {
        let at = next.div_ceil(align) * align;
        *next = at + size;
        at
    }

    /// Reserves `size` bytes of RAM (offset), aligned to `align`.
    pub fn alloc(&mut self, size: u64, align: u64) -> u64 {
        Self::bump(&mut self.next_free, size, align)
    }

    pub fn w32(&mut self, reg: u64, v: u32) -> anyhow::Result<()> {
        Ok(self.client.region_write(0, reg, &v.to_le_bytes())?)
    }

    pub fn w64(&mut self, reg: u64, v: u64) -> anyhow::Result<()> {
        Ok(self.client.region_write(0, reg, &v.to_le_bytes())?)
    }

    pub fn r32(&mut self, reg: u64) -> anyhow::Result<u32> {
        let mut b = [0u8; 4];
        self.client.region_read(0, reg, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    pub fn r64(&mut self, reg: u64) -> anyhow::Result<u64> {
        let mut b = [0u8; 8];
        self.client.region_read(0, reg, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    pub fn put<T: ByteValued>(&self, off: u64, v: &T) -> anyhow::Result<()> {
        Ok(self.ram.write(off, v.as_slice())?)
    }

    /// Runs a command; returns its status.
    pub fn cmd(&mut self, op: u32, index: u32) -> anyhow::Result<u32> {
        self.w32(RNIC_REG_CMD, op << 24 | index)?;
        self.r32(RNIC_REG_CMD_STATUS)
    }

    fn cmd_ok(&mut self, op: u32, index: u32) -> anyhow::Result<()> {
        match self.cmd(op, index)? {
            CMD_OK => Ok(()),
            e => bail!("command {op} on {index} failed: {e}"),
        }
    }

    pub fn create_cq(&mut self, cqn: u32, log_size: u8, vector: u16) -> anyhow::Result<()> {
        let ring = self.alloc(32 << log_size, 4096);
        self.put(self.tables[1] + u64::from(cqn) * 32, &CqCtx { ring_addr: IOVA + ring, log_size, msix_vector: vector, ..Default::default() })?;
        self.cmd_ok(CMD_CREATE_CQ, cqn)?;
        self.cqs[cqn as usize] = Some(CqRing { ring, log_size, ci: 0, vector });
        Ok(())
    }

    fn qp_ctx_off(&self, qpn: u32) -> u64 {
        self.tables[0] + u64::from(qpn) * QpCtx::ABI.size as u64
    }

    /// A QP in INIT whose send and receive completions go to CQ `cqn`; 64-byte WQEs (2 SGEs).
    pub fn create_qp(&mut self, qpn: u32, pd: u32, cqn: u32, log_size: u8, access: u8) -> anyhow::Result<()> {
        let ring_bytes = 1u64 << (log_size + WQE_LOG_STRIDE);
        let (sq, rq) = (self.alloc(ring_bytes, 4096), self.alloc(ring_bytes, 4096));
        let ctx = QpCtx {
            state: QPS_INIT,
            sq_log_size: log_size,
            rq_log_size: log_size,
            sq_log_stride: WQE_LOG_STRIDE,
            rq_log_stride: WQE_LOG_STRIDE,
            access,
            rnr_retry: 7,
            pd,
            send_cqn: cqn,
            recv_cqn: cqn,
            sq_addr: IOVA + sq,
            rq_addr: IOVA + rq,
            ..Default::default()
        };
        self.put(self.qp_ctx_off(qpn), &ctx)?;
        self.cmd_ok(CMD_MODIFY_QP, qpn)?;
        self.qps[qpn as usize] = Some(QpRings { sq, rq, log_size, sq_pi: 0, rq_pi: 0 });
        Ok(())
    }

    /// Contract minor 8, as the ib_core driver does it: a QP path table and a GID table
    /// (zeroed: every path the rnic-emu convention, no GIDs), programmed.
    pub fn use_paths(&mut self) -> anyhow::Result<()> {
        let path = Self::bump(&mut self.next_free, MAX_QP * QpPath::ABI.size as u64, 4096);
        let gid = Self::bump(&mut self.next_free, u64::from(GID_TABLE_LEN) * GidEntry::ABI.size as u64, 4096);
        self.paths = Some((path, gid));
        self.w64(QP_PATH_BASE, IOVA + path)?;
        self.w64(GID_TABLE_BASE, IOVA + gid)
    }

    /// Writes QP `qpn`'s path entry (read at its next RTR).
    pub fn set_path(&mut self, qpn: u32, p: &QpPath) -> anyhow::Result<()> {
        let (path, _) = self.paths.context("use_paths first")?;
        self.put(path + u64::from(qpn) * QpPath::ABI.size as u64, p)
    }

    /// GID table entry `index` := `gid` (None: cleared), then CMD_SET_GID; its status.
    pub fn set_gid(&mut self, index: u32, gid: Option<[u8; 16]>) -> anyhow::Result<u32> {
        let (_, table) = self.paths.context("use_paths first")?;
        if index < GID_TABLE_LEN {
            self.put(table + u64::from(index) * GidEntry::ABI.size as u64, &rnic_emu_core::rnic::gid::entry(gid))?;
        }
        self.cmd(CMD_SET_GID, index)
    }

    /// Moves QP `qpn` (in INIT) through RTR to RTS, talking to `dest` on this RNIC.
    pub fn connect_qp(&mut self, qpn: u32, dest: u32) -> anyhow::Result<()> {
        self.connect_with(qpn, &Connection { dest_qpn: dest, ..Default::default() })
    }

    /// Moves QP `qpn` (in INIT) through RTR to RTS with the given connection attributes.
    pub fn connect_with(&mut self, qpn: u32, c: &Connection) -> anyhow::Result<()> {
        let off = self.qp_ctx_off(qpn);
        for state in [QPS_RTR, QPS_RTS] {
            let mut ctx = QpCtx::default();
            self.ram.read(off, ctx.as_mut_slice())?;
            ctx.state = state;
            ctx.dest_qpn = c.dest_qpn;
            ctx.dest_ip = c.dest_ip.map_or(0, u32::from);
            ctx.rq_psn = c.rq_psn;
            ctx.sq_psn = c.sq_psn;
            ctx.path_mtu = c.path_mtu_log;
            ctx.retry_cnt = c.retry_cnt;
            ctx.timeout = c.timeout;
            ctx.rnr_retry = c.rnr_retry;
            ctx.rnr_timer_us = 100;
            self.put(off, &ctx)?;
            self.cmd_ok(CMD_MODIFY_QP, qpn)?;
        }
        Ok(())
    }

    /// Registers RAM [off, off + len) as MR `index` at virtual address VA + off; returns
    /// its key (lkey = rkey).
    pub fn reg_mr(&mut self, index: u32, pd: u32, access: u8, off: u64, len: u64) -> anyhow::Result<u32> {
        let first = off & !0xfff;
        let pages: Vec<u64> = (0..(off + len - first).div_ceil(4096)).map(|i| IOVA + first + i * 4096).collect();
        self.reg_mr_pages(index, pd, access, VA + off, len, &pages)
    }

    /// Registers an MR at virtual address `iova` over 4 KiB pages at the given bus
    /// addresses (guest RAM, or a GPU's BAR1 for peer-to-peer); returns its key.
    pub fn reg_mr_pages(&mut self, index: u32, pd: u32, access: u8, iova: u64, len: u64, pages: &[u64]) -> anyhow::Result<u32> {
        let npages = pages.len() as u32;
        for (i, page) in pages.iter().enumerate() {
            let entry = self.tables[3] + (u64::from(self.mtt_next) + i as u64) * 8;
            self.ram.write(entry, &page.to_le_bytes())?;
        }
        let key = 0x5a;
        let ctx = MrCtx { iova, length: len, pd, mtt_offset: self.mtt_next, npages, access, key, page_shift: 12, rsvd0: 0 };
        self.put(self.tables[2] + u64::from(index) * 32, &ctx)?;
        self.cmd_ok(CMD_REG_MR, index)?;
        self.mtt_next += npages;
        Ok(index << 8 | u32::from(key))
    }

    /// Writes WQEs into the SQ (or RQ) and rings the doorbell once for all of them.
    pub fn post(&mut self, qpn: u32, send: bool, wqes: &[(WqeHeader, Vec<Sge>)]) -> anyhow::Result<()> {
        let Some(q) = self.qps[qpn as usize].as_mut() else { bail!("QP {qpn} not created") };
        let (base, pi) = if send { (q.sq, &mut q.sq_pi) } else { (q.rq, &mut q.rq_pi) };
        let mut buf = [0u8; 1 << WQE_LOG_STRIDE];
        for (hdr, sges) in wqes {
            buf.fill(0);
            buf[..32].copy_from_slice(hdr.as_slice());
            for (i, s) in sges.iter().take(2).enumerate() {
                buf[32 + 16 * i..48 + 16 * i].copy_from_slice(s.as_slice());
            }
            self.ram.write(base + ring::slot_offset(*pi, q.log_size, WQE_LOG_STRIDE), &buf)?;
            *pi = pi.wrapping_add(1);
        }
        let (old, new) = (pi.wrapping_sub(wqes.len() as u16), *pi);
        if self.dbpage.is_some() {
            let page = ring::dbp_qp(qpn);
            self.page_store(page + ring::dbp_pi(!send), new); // SeqCst: ordered before the load below
            if !ring::need_kick(self.page_load(page + ring::dbp_event(!send)), new, old) {
                return Ok(());
            }
        }
        self.w32(if send { WQE_DB_IDX } else { RQ_DB_IDX }, ring::db_value(qpn, new))
    }

    /// The next CQE of `cqn`, if one is there (consumer index reported right away).
    pub fn poll(&mut self, cqn: u32) -> anyhow::Result<Option<Cqe>> {
        let Some(cq) = self.cqs[cqn as usize].as_mut() else { bail!("CQ {cqn} not created") };
        let mut c = Cqe::default();
        self.ram.read(cq.ring + ring::slot_offset(cq.ci, cq.log_size, ring::CQE_LOG_STRIDE), c.as_mut_slice())?;
        if c.owner != ring::owner(cq.ci, cq.log_size) {
            return Ok(None);
        }
        cq.ci = cq.ci.wrapping_add(1);
        let ci = cq.ci;
        if self.dbpage.is_some() {
            self.page_store(ring::dbp_cq(cqn) + dbpage::CQ_CI, ci);
        } else {
            self.w32(CQE_CONS_IDX, ring::db_value(cqn, ci))?;
        }
        Ok(Some(c))
    }

    /// Waits for the next CQE of `cqn`: spins on RAM (no register traffic), or, after
    /// [`HostDriver::use_interrupts`], arms the CQ and sleeps on its vector's eventfd.
    pub fn wait(&mut self, cqn: u32, timeout: Duration) -> anyhow::Result<Cqe> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(c) = self.poll(cqn)? {
                return Ok(c);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("no completion on CQ {cqn} within {timeout:?}");
            }
            let vector = self.cqs[cqn as usize].as_ref().map(|c| usize::from(c.vector)).filter(|&v| self.sleep_in_wait && v < self.irqs.len());
            match vector {
                None => std::hint::spin_loop(),
                Some(v) => {
                    // A completion that lands between the poll above and the arm raises
                    // the vector at once (docs/verbs.md, CQ_ARM), so the sleep cannot miss it.
                    self.w32(CQ_ARM, ring::db_value(cqn, 0))?;
                    sleep_on(self.irqs[v].as_raw_fd(), left)?;
                    let _ = self.irqs[v].read(); // non-blocking: EAGAIN when it timed out
                }
            }
        }
    }
}

impl HostDriver {
    /// Brings the Ethernet port up: both rings of 2^`log2` descriptors (with an
    /// [`ETH_BUF`]-byte buffer per slot) programmed and enabled (`ETH_CTRL` TX and RX).
    /// No receive buffer is posted yet ([`HostDriver::eth_post_rx`]).
    pub fn eth_up(&mut self, log2: u8) -> anyhow::Result<()> {
        let entries = 1u64 << log2;
        let (tx, rx) = (self.alloc(16 * entries, 4096), self.alloc(16 * entries, 4096));
        let (tx_bufs, rx_bufs) = (self.alloc(ETH_BUF * entries, 4096), self.alloc(ETH_BUF * entries, 4096));
        self.ram.write(tx, &vec![0u8; 16 * entries as usize])?;
        self.ram.write(rx, &vec![0u8; 16 * entries as usize])?;
        self.w64(ETH_TXQ_BASE, IOVA + tx)?;
        self.w32(ETH_TXQ_LOG, u32::from(log2))?;
        self.w64(ETH_RXQ_BASE, IOVA + rx)?;
        self.w32(ETH_RXQ_LOG, u32::from(log2))?;
        self.w32(ETH_CTRL, (eth::CTRL_TX_EN | eth::CTRL_RX_EN) as u32)?;
        let ctrl = u64::from(self.r32(ETH_CTRL)?);
        if ctrl & (eth::CTRL_TX_EN | eth::CTRL_RX_EN) != eth::CTRL_TX_EN | eth::CTRL_RX_EN {
            bail!("the device refused the Ethernet rings (ETH_CTRL reads {ctrl:#x})");
        }
        self.eth = Some(EthRings { tx, rx, log2, tx_bufs, rx_bufs, tx_pi: 0, tx_seen: 0, rx_pi: 0, rx_ci: 0 });
        Ok(())
    }

    /// RAM and the Ethernet rings, borrowed together.
    fn eth_parts(&mut self) -> anyhow::Result<(&SharedMemory, &mut EthRings)> {
        let e = self.eth.as_mut().context("the Ethernet rings are not up (eth_up)")?;
        Ok((&self.ram, e))
    }

    /// Posts `n` empty receive buffers (at most what the ring has room for) and rings
    /// `ETH_RXQ_PI`.
    pub fn eth_post_rx(&mut self, n: u16) -> anyhow::Result<()> {
        let (ram, e) = self.eth_parts()?;
        let room = (1u16 << e.log2) - e.rx_pi.wrapping_sub(e.rx_ci);
        for _ in 0..n.min(room) {
            let slot = e.slot(e.rx_pi);
            let d = EthDesc { addr: IOVA + e.rx_bufs + slot * ETH_BUF, len: ETH_BUF as u16, ..Default::default() };
            ram.write(e.rx + slot * 16, d.as_slice())?;
            e.rx_pi = e.rx_pi.wrapping_add(1);
        }
        let pi = e.rx_pi;
        self.w32(ETH_RXQ_PI, u32::from(pi))
    }

    /// Queues one frame (header included, at most [`ETH_BUF`] bytes) on the transmit ring
    /// and rings `ETH_TXQ_PI`; returns its descriptor's index. Fails when the ring is full
    /// (call [`HostDriver::eth_tx_done`]).
    pub fn eth_send(&mut self, frame: &[u8]) -> anyhow::Result<u16> {
        let (ram, e) = self.eth_parts()?;
        if frame.len() as u64 > ETH_BUF {
            bail!("a frame of {} bytes does not fit a buffer", frame.len());
        }
        if e.tx_pi.wrapping_sub(e.tx_seen) >= 1 << e.log2 {
            bail!("the transmit ring is full");
        }
        let (idx, slot) = (e.tx_pi, e.slot(e.tx_pi));
        let addr = e.tx_bufs + slot * ETH_BUF;
        ram.write(addr, frame)?;
        let d = EthDesc { addr: IOVA + addr, len: frame.len() as u16, ..Default::default() };
        ram.write(e.tx + slot * 16, d.as_slice())?;
        e.tx_pi = e.tx_pi.wrapping_add(1);
        self.w32(ETH_TXQ_PI, u32::from(idx.wrapping_add(1)))?;
        Ok(idx)
    }

    /// Waits until every queued frame is done (the descriptors' DONE flags, in RAM);
    /// returns the flags of the descriptors done since the last call, in ring order
    /// (`eth::DESC_DONE`, with `eth::DESC_ERR` for a refused frame).
    pub fn eth_tx_done(&mut self, timeout: Duration) -> anyhow::Result<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let (ram, e) = self.eth_parts()?;
        let mut flags = Vec::new();
        while e.tx_seen != e.tx_pi {
            let mut d = EthDesc::default();
            ram.read(e.tx + e.slot(e.tx_seen) * 16, d.as_mut_slice())?;
            if d.flags & eth::DESC_DONE == 0 {
                if Instant::now() >= deadline {
                    bail!("transmit descriptor {} not done within {timeout:?}", e.tx_seen);
                }
                std::thread::yield_now();
                continue;
            }
            flags.push(d.flags);
            e.tx_seen = e.tx_seen.wrapping_add(1);
        }
        Ok(flags)
    }

    /// The frames received so far, in order (a descriptor handed back with `DESC_ERR`
    /// carries none and is skipped); each buffer is posted again.
    pub fn eth_recv(&mut self) -> anyhow::Result<Vec<Vec<u8>>> {
        let (ram, e) = self.eth_parts()?;
        let mut frames = Vec::new();
        let mut done = 0u16;
        while e.rx_ci != e.rx_pi {
            let at = e.rx + e.slot(e.rx_ci) * 16;
            let mut d = EthDesc::default();
            ram.read(at, d.as_mut_slice())?;
            if d.flags & eth::DESC_DONE == 0 {
                break;
            }
            if d.flags & eth::DESC_ERR == 0 {
                let mut f = vec![0u8; usize::from(d.len)];
                ram.read(d.addr - IOVA, &mut f)?;
                frames.push(f);
            }
            e.rx_ci = e.rx_ci.wrapping_add(1);
            done += 1;
        }
        if done > 0 {
            self.eth_post_rx(done)?;
        }
        Ok(frames)
    }

    /// Waits until `n` frames were received (polling RAM) and returns them.
    pub fn eth_wait_frames(&mut self, n: usize, timeout: Duration) -> anyhow::Result<Vec<Vec<u8>>> {
        let deadline = Instant::now() + timeout;
        let mut frames = Vec::new();
        while frames.len() < n {
            frames.extend(self.eth_recv()?);
            if frames.len() < n {
                if Instant::now() >= deadline {
                    bail!("{} of {n} frames received within {timeout:?}", frames.len());
                }
                std::thread::yield_now();
            }
        }
        Ok(frames)
    }
}

/// Sleeps until `fd` is readable or `left` has passed.
fn sleep_on(fd: std::os::fd::RawFd, left: Duration) -> anyhow::Result<()> {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
    // SAFETY: one pollfd that lives across the call.
    if unsafe { libc::poll(&mut p, 1, ms) } < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e.into());
        }
    }
    Ok(())
}

/// A `rnic-emu serve` child process, killed (by pid) when dropped.
pub struct ServerProcess {
    child: Child,
    pub socket_dir: PathBuf,
    pub node: String,
}

impl ServerProcess {
    /// Starts node 0 of `topology` and waits (10 s at most) for its sockets.
    pub fn start(bin: &Path, topology: &Path, socket_dir: &Path, gpu_mem_dir: Option<&Path>) -> anyhow::Result<ServerProcess> {
        Self::start_node(bin, topology, "node0", socket_dir, gpu_mem_dir, None, None)
    }

    /// Starts node `node` of `topology` (capturing its fabric traffic to `pcap` if given,
    /// on `segment` if given) and waits (10 s at most) for its sockets.
    pub fn start_node(
        bin: &Path,
        topology: &Path,
        node: &str,
        socket_dir: &Path,
        gpu_mem_dir: Option<&Path>,
        pcap: Option<&Path>,
        segment: Option<&str>,
    ) -> anyhow::Result<ServerProcess> {
        let cmd = Self::node_command(bin, topology, node, socket_dir, gpu_mem_dir, pcap, segment);
        Self::spawn(cmd, topology, node, socket_dir)
    }

    /// The command line of [`ServerProcess::start_node`], for a caller to wrap (in `ip
    /// netns exec`, say) and hand to [`ServerProcess::spawn`].
    pub fn node_command(
        bin: &Path,
        topology: &Path,
        node: &str,
        socket_dir: &Path,
        gpu_mem_dir: Option<&Path>,
        pcap: Option<&Path>,
        segment: Option<&str>,
    ) -> Command {
        let mut cmd = Command::new(bin);
        cmd.arg("serve").arg("--topology").arg(topology).arg("--node").arg(node).arg("--socket-dir").arg(socket_dir);
        if let Some(s) = segment {
            cmd.arg("--segment").arg(s);
        }
        if let Some(p) = pcap {
            cmd.arg("--pcap").arg(p);
        }
        if let Some(dir) = gpu_mem_dir {
            cmd.arg("--gpu-mem-dir").arg(dir);
        }
        // Log as `rnic-emu run` has its servers log (info unless RUST_LOG says otherwise).
        cmd.env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()));
        cmd
    }

    /// Starts `cmd`, a node server of node `node` of `topology` with its sockets in
    /// `socket_dir` (its stderr to `server.log` there), and waits (10 s at most) for its
    /// sockets; fails early, with the log, if it exits first.
    pub fn spawn(mut cmd: Command, topology: &Path, node: &str, socket_dir: &Path) -> anyhow::Result<ServerProcess> {
        let log = std::fs::File::create(socket_dir.join("server.log"))?;
        let child = cmd.stdin(Stdio::null()).stderr(log).spawn()?;
        let mut server = ServerProcess { child, socket_dir: socket_dir.to_path_buf(), node: node.to_string() };
        // The control socket, then every function's socket (bound after it).
        let topo = rnic_emu_core::platform::topology::Topology::load(topology)?;
        let (_, n) = topo.node(node).with_context(|| format!("no node {node}"))?;
        let mut sockets = vec![socket_dir.join(format!("{node}.ctl"))];
        sockets.extend(n.devices.iter().map(|d| socket_dir.join(n.socket_name(d))));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sockets.iter().all(|s| s.exists()) {
            if let Ok(Some(status)) = server.child.try_wait() {
                let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
                bail!("the node server exited ({status}) before its sockets were up:\n{log}");
            }
            if Instant::now() > deadline {
                bail!("the node server did not come up");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(server)
    }

    pub fn socket(&self, device: &str) -> PathBuf {
        self.socket_dir.join(format!("{}-{device}.sock", self.node))
    }

    /// The server's stderr (its log).
    pub fn log_path(&self) -> PathBuf {
        self.socket_dir.join("server.log")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Connects to a GPU and does what firmware and Linux do to its BAR1: place it at bus
/// address `addr` and turn memory decoding on. Keep the client: dropping it disconnects.
pub fn place_gpu_bar1(sock: &Path, addr: u64) -> anyhow::Result<Client> {
    let mut g = Client::new(sock)?;
    let cfg = vfio_bindings::bindings::vfio::VFIO_PCI_CONFIG_REGION_INDEX;
    g.region_write(cfg, 0x14, &(addr as u32).to_le_bytes())?;
    g.region_write(cfg, 0x18, &((addr >> 32) as u32).to_le_bytes())?;
    g.region_write(cfg, 0x04, &0x6u16.to_le_bytes())?;
    Ok(g)
}

/// Two node servers joined by the fabric, each RNIC driven by a [`HostDriver`], with QP 1
/// of each connected to QP 1 of the other and one 64 MiB buffer registered as MR 1 on each
/// (keys in `key`, RAM offsets in `buf`). For host-level fabric tests and benchmarks.
pub struct NodePair {
    pub h: [HostDriver; 2],
    pub servers: [ServerProcess; 2],
    /// The pair's segment (`GROUP:PORT@INTERFACE`, of its own; or what the caller of
    /// [`NodePair::connect`] gave).
    pub segment: String,
    /// Holds the segment's port for as long as the pair lives (a multicast segment of its
    /// own).
    pub segment_hold: Option<std::net::UdpSocket>,
    pub ips: [std::net::Ipv4Addr; 2],
    pub buf: [u64; 2],
    pub key: [u32; 2],
}

/// Options of a [`NodePair`].
pub struct PairOptions<'a> {
    pub ips: [std::net::Ipv4Addr; 2],
    /// TOML lines added to each `[[node]]` (e.g. `faults = { ... }`).
    pub node_toml: &'a str,
    pub retry_cnt: u8,
    /// Local ACK timeout exponent (4.096 us * 2^timeout).
    pub timeout: u8,
    /// Capture each node's traffic to `<dir>/node<i>.pcap`.
    pub capture: bool,
    /// RNR retries (7: forever).
    pub rnr_retry: u8,
    /// The ports' Ethernet MTU before the QPs connect (their path MTU follows it: 9000
    /// gives 4096); 0 keeps the default 1500 (path MTU 1024).
    pub eth_mtu: u32,
}

impl NodePair {
    pub fn start(bin: &Path, dir: &Path, o: &PairOptions) -> anyhow::Result<NodePair> {
        let tfile = Self::write_topology(dir, o)?;
        let (seg, segment_hold) = rnic_emu_server::fabric::segment::reserve(std::net::Ipv4Addr::LOCALHOST)?;
        let segment = seg.to_string();
        let mut servers = Vec::new();
        for i in 0..2 {
            let sock = dir.join(format!("n{i}"));
            std::fs::create_dir_all(&sock)?;
            let pcap = o.capture.then(|| dir.join(format!("node{i}.pcap")));
            servers.push(ServerProcess::start_node(bin, &tfile, &format!("node{i}"), &sock, None, pcap.as_deref(), Some(&segment))?);
        }
        let servers: [ServerProcess; 2] = servers.try_into().map_err(|_| anyhow::anyhow!("two servers"))?;
        Self::connect(servers, o, segment, Some(segment_hold))
    }

    /// Writes the pair's topology, `<dir>/pair.toml` (nodes `node0` and `node1` at
    /// `o.ips`, one RNIC `rnic0` each), and returns its path.
    pub fn write_topology(dir: &Path, o: &PairOptions) -> anyhow::Result<PathBuf> {
        let mut topo = String::from("name = \"pair\"\n");
        for (i, ip) in o.ips.iter().enumerate() {
            topo += &format!(
                "[[node]]\nname = \"node{i}\"\naddress = \"{ip}\"\n{}\nport = [ {{ id = \"rp\", kind = \"root-port\" }} ]\ndevice = [ {{ id = \"rnic0\", kind = \"rnic\", port = \"rp\" }} ]\n",
                o.node_toml
            );
        }
        let tfile = dir.join("pair.toml");
        std::fs::write(&tfile, topo)?;
        Ok(tfile)
    }

    /// Drives two servers already started (nodes `node0` and `node1` of the pair's
    /// topology, on `segment`): QP 1 of each connected to QP 1 of the other, MR 1 on each.
    pub fn connect(servers: [ServerProcess; 2], o: &PairOptions, segment: String, segment_hold: Option<std::net::UdpSocket>) -> anyhow::Result<NodePair> {
        let mut h = Vec::new();
        let (mut buf, mut key) = ([0; 2], [0; 2]);
        let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
        for (i, s) in servers.iter().enumerate() {
            let mut d = HostDriver::connect(&s.socket("rnic0"), 80 << 20)?;
            if o.eth_mtu != 0 {
                d.w32(ETH_MTU, o.eth_mtu)?;
            }
            d.create_cq(1, 12, 1)?;
            d.create_qp(1, 1, 1, 12, access)?;
            buf[i] = d.alloc(64 << 20, 4096);
            key[i] = d.reg_mr(1, 1, access, buf[i], 64 << 20)?;
            h.push(d);
        }
        for (i, d) in h.iter_mut().enumerate() {
            let c = Connection {
                dest_qpn: 1,
                dest_ip: Some(o.ips[1 - i]),
                sq_psn: 1000 * (i as u32 + 1),
                rq_psn: 1000 * (2 - i as u32),
                retry_cnt: o.retry_cnt,
                timeout: o.timeout,
                rnr_retry: o.rnr_retry,
                ..Default::default()
            };
            d.connect_with(1, &c)?;
        }
        let h: [HostDriver; 2] = h.try_into().map_err(|_| anyhow::anyhow!("two drivers"))?;
        Ok(NodePair { h, servers, segment, segment_hold, ips: o.ips, buf, key })
    }

    /// Posts an RDMA WRITE of `len` bytes at `off` of node `from`'s buffer to the same
    /// offset of the other node's buffer.
    pub fn write(&mut self, from: usize, off: u64, len: u64, wr_id: u64, signaled: bool) -> anyhow::Result<()> {
        let wqe = self.write_wqe(from, off, len, wr_id, signaled);
        self.h[from].post(1, true, &[wqe])
    }

    /// Posts `n` such WRITEs (wr_id `first`, `first + 1`, ...) with one doorbell, only the
    /// last one signaled.
    pub fn write_batch(&mut self, from: usize, off: u64, len: u64, first: u64, n: u64) -> anyhow::Result<()> {
        let wqes: Vec<_> = (0..n).map(|i| self.write_wqe(from, off, len, first + i, i + 1 == n)).collect();
        self.h[from].post(1, true, &wqes)
    }

    fn write_wqe(&self, from: usize, off: u64, len: u64, wr_id: u64, signaled: bool) -> (WqeHeader, Vec<Sge>) {
        let to = 1 - from;
        let flags = if signaled { WQE_FLAG_SIGNALED } else { 0 };
        let hdr =
            WqeHeader { opcode: WQE_OP_RDMA_WRITE, flags, num_sge: 1, wr_id, remote_addr: VA + self.buf[to] + off, rkey: self.key[to], ..Default::default() };
        (hdr, vec![Sge { addr: VA + self.buf[from] + off, length: len as u32, lkey: self.key[from] }])
    }
}
