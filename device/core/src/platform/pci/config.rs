//! A PCI Express type 0 configuration space (4 KiB): header, BARs, capability list.
//!
//! Models PCI Local Bus 3.0 §6.1-6.2 and PCIe Base 4.0 §7.5 as far as an endpoint needs:
//! per-byte writable and write-1-to-clear masks (so read-only fields stay put), BAR sizing
//! by writing all-ones, a linked standard-capability list starting at 0x40, and an empty
//! extended-capability list at 0x100. Any offset/length inside the 4 KiB is accepted;
//! accesses beyond it are refused by the caller (the server's `vfio` adapter).
//!
//! Not modelled: I/O BARs, expansion ROM (reads as 0, not writable), extended capabilities,
//! INTx (interrupt pin 0: functions interrupt through MSI-X only).

use super::caps::Capability;

pub const CONFIG_SPACE_SIZE: usize = 4096;

// Type 0 header offsets (PCI 3.0 §6.1).
pub const VENDOR_ID: usize = 0x00;
pub const DEVICE_ID: usize = 0x02;
pub const COMMAND: usize = 0x04;
pub const STATUS: usize = 0x06;
pub const REVISION_ID: usize = 0x08;
pub const CLASS_CODE: usize = 0x09;
pub const CACHE_LINE_SIZE: usize = 0x0c;
pub const HEADER_TYPE: usize = 0x0e;
pub const BAR0: usize = 0x10;
pub const SUBSYSTEM_VENDOR_ID: usize = 0x2c;
pub const SUBSYSTEM_ID: usize = 0x2e;
pub const CAPABILITIES_POINTER: usize = 0x34;
pub const INTERRUPT_LINE: usize = 0x3c;
pub const FIRST_CAPABILITY: usize = 0x40;

pub const COMMAND_MEMORY: u16 = 1 << 1;
pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
/// Command bits software may set: I/O, memory, bus master, parity, SERR#, INTx disable.
const COMMAND_WRITABLE: u16 = 0x0547;
/// Status bit: a capability list is present.
pub const STATUS_CAP_LIST: u16 = 1 << 4;
/// Status bits that are write-1-to-clear (parity/abort/SERR reporting).
const STATUS_W1C: u16 = 0xf900;

const BAR_MEM_64: u32 = 0b100;
const BAR_PREFETCHABLE: u32 = 0b1000;

/// A memory BAR of the function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarDef {
    /// BAR index 0..=5; a 64-bit BAR also takes `index + 1`.
    pub index: usize,
    /// Size in bytes: a power of two, at least 16 (4 KiB or more in practice).
    pub size: u64,
    pub is_64bit: bool,
    pub prefetchable: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub vendor_id: u16,
    pub device_id: u16,
    pub subsystem_vendor_id: u16,
    pub subsystem_id: u16,
    pub class_code: u32,
    pub revision: u8,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LayoutError {
    #[error("BAR {0}: size must be a power of two of at least 16 bytes")]
    BadSize(usize),
    #[error("BAR {0}: index out of range or overlapping another BAR")]
    BadIndex(usize),
    #[error("BAR {0}: a 32-bit BAR cannot be larger than 2 GiB")]
    TooLarge(usize),
    #[error("capabilities do not fit in the 256-byte header space")]
    CapabilitySpace,
}

/// What a configuration write changed that the function model has to act on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteEffects {
    /// A BAR register or the command register changed (BAR placement/decoding may differ).
    pub decoding_changed: bool,
    /// Software initiated a Function Level Reset (PCIe DevCtl bit 15).
    pub flr: bool,
}

#[derive(Clone)]
pub struct ConfigSpace {
    data: Vec<u8>,
    wmask: Vec<u8>,
    w1c: Vec<u8>,
    initial: Vec<u8>,
    bars: Vec<BarDef>,
    /// Offset of the PCI Express capability, if present (for FLR detection).
    pcie_cap: Option<usize>,
}

impl ConfigSpace {
    pub fn new(id: Identity, bars: &[BarDef], caps: &[Capability]) -> Result<Self, LayoutError> {
        let mut cs = ConfigSpace {
            data: vec![0; CONFIG_SPACE_SIZE],
            wmask: vec![0; CONFIG_SPACE_SIZE],
            w1c: vec![0; CONFIG_SPACE_SIZE],
            initial: Vec::new(),
            bars: Vec::new(),
            pcie_cap: None,
        };
        cs.put16(VENDOR_ID, id.vendor_id);
        cs.put16(DEVICE_ID, id.device_id);
        cs.put16(SUBSYSTEM_VENDOR_ID, id.subsystem_vendor_id);
        cs.put16(SUBSYSTEM_ID, id.subsystem_id);
        cs.data[REVISION_ID] = id.revision;
        cs.data[CLASS_CODE..CLASS_CODE + 3].copy_from_slice(&id.class_code.to_le_bytes()[..3]);
        cs.data[HEADER_TYPE] = 0x00;
        cs.set_wmask16(COMMAND, COMMAND_WRITABLE);
        cs.w1c[STATUS..STATUS + 2].copy_from_slice(&STATUS_W1C.to_le_bytes());
        cs.wmask[CACHE_LINE_SIZE] = 0xff;
        cs.wmask[INTERRUPT_LINE] = 0xff;
        let mut used = [false; 6];
        for bar in bars {
            cs.add_bar(bar, &mut used)?;
        }
        cs.add_capabilities(caps)?;
        cs.initial = cs.data.clone();
        Ok(cs)
    }

    fn add_bar(&mut self, bar: &BarDef, used: &mut [bool; 6]) -> Result<(), LayoutError> {
        let i = bar.index;
        if bar.size < 16 || !bar.size.is_power_of_two() {
            return Err(LayoutError::BadSize(i));
        }
        let slots = if bar.is_64bit { 2 } else { 1 };
        if i + slots > 6 || used[i..i + slots].iter().any(|u| *u) {
            return Err(LayoutError::BadIndex(i));
        }
        if !bar.is_64bit && bar.size > 1 << 31 {
            return Err(LayoutError::TooLarge(i));
        }
        used[i..i + slots].iter_mut().for_each(|u| *u = true);
        let off = BAR0 + 4 * i;
        let mut low = 0u32;
        if bar.is_64bit {
            low |= BAR_MEM_64;
        }
        if bar.prefetchable {
            low |= BAR_PREFETCHABLE;
        }
        self.put32(off, low);
        let addr_mask = !(bar.size - 1);
        self.set_wmask32(off, (addr_mask as u32) & !0xf);
        if bar.is_64bit {
            self.set_wmask32(off + 4, (addr_mask >> 32) as u32);
        }
        self.bars.push(*bar);
        Ok(())
    }

    fn add_capabilities(&mut self, caps: &[Capability]) -> Result<(), LayoutError> {
        let mut next = FIRST_CAPABILITY;
        let mut prev_link = CAPABILITIES_POINTER;
        self.add_extended(caps.iter().filter(|c| c.extended))?;
        for cap in caps.iter().filter(|c| !c.extended) {
            let len = cap.bytes.len();
            if next + len > 0x100 {
                return Err(LayoutError::CapabilitySpace);
            }
            self.data[prev_link] = next as u8;
            self.data[next..next + len].copy_from_slice(&cap.bytes);
            self.data[next + 1] = 0;
            self.wmask[next..next + len].copy_from_slice(&cap.wmask);
            self.w1c[next..next + len].copy_from_slice(&cap.w1c);
            if cap.id() == super::caps::CAP_ID_PCIE {
                self.pcie_cap = Some(next);
            }
            prev_link = next + 1;
            next = (next + len + 3) & !3;
        }
        if !caps.is_empty() {
            let status = self.get16(STATUS) | STATUS_CAP_LIST;
            self.put16(STATUS, status);
        }
        Ok(())
    }

    /// Returns every register to its power-on value (FLR, vfio-user DEVICE_RESET).
    pub fn reset(&mut self) {
        self.data.copy_from_slice(&self.initial);
    }

    /// Reads `data.len()` bytes at `offset`; `None` if the access leaves the 4 KiB.
    pub fn read(&self, offset: usize, data: &mut [u8]) -> Option<()> {
        let end = offset.checked_add(data.len())?;
        data.copy_from_slice(self.data.get(offset..end)?);
        Some(())
    }

    /// Applies a write through the writable and W1C masks; `None` if out of range.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Option<WriteEffects> {
        let end = offset.checked_add(data.len())?;
        if end > CONFIG_SPACE_SIZE {
            return None;
        }
        let mut effects = WriteEffects::default();
        for (i, &v) in (offset..end).zip(data) {
            let old = self.data[i];
            let new = ((old & !self.wmask[i]) | (v & self.wmask[i])) & !(v & self.w1c[i]);
            self.data[i] = new;
            if new != old && ((BAR0..BAR0 + 24).contains(&i) || (COMMAND..COMMAND + 2).contains(&i)) {
                effects.decoding_changed = true;
            }
        }
        if let Some(pcie) = self.pcie_cap {
            let devctl_hi = pcie + super::caps::PCIE_DEVCTL + 1;
            if (offset..end).contains(&devctl_hi) && data[devctl_hi - offset] & 0x80 != 0 {
                effects.flr = true;
            }
        }
        Some(effects)
    }

    pub fn get16(&self, off: usize) -> u16 {
        u16::from_le_bytes([self.data[off], self.data[off + 1]])
    }

    pub fn get32(&self, off: usize) -> u32 {
        u32::from_le_bytes(self.data[off..off + 4].try_into().unwrap_or([0; 4]))
    }

    fn put16(&mut self, off: usize, v: u16) {
        self.data[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }

    fn put32(&mut self, off: usize, v: u32) {
        self.data[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn set_wmask16(&mut self, off: usize, v: u16) {
        self.wmask[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }

    fn set_wmask32(&mut self, off: usize, v: u32) {
        self.wmask[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets bits of a register directly, past the write masks: the device itself latching
    /// an error status (AER, Device Status). Out-of-range offsets are ignored.
    pub fn latch32(&mut self, off: usize, bits: u32) {
        if let Some(b) = off.checked_add(4).and_then(|end| self.data.get_mut(off..end)) {
            let v = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) | bits;
            b.copy_from_slice(&v.to_le_bytes());
        }
    }

    /// Replaces the bits `mask` of a register with `value` (a device-owned field such as
    /// AER's First Error Pointer). Out-of-range offsets are ignored.
    pub fn set_field32(&mut self, off: usize, mask: u32, value: u32) {
        if let Some(b) = off.checked_add(4).and_then(|end| self.data.get_mut(off..end)) {
            let v = (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) & !mask) | (value & mask);
            b.copy_from_slice(&v.to_le_bytes());
        }
    }

    /// Offset of the PCI Express capability, if present.
    pub fn pcie_capability(&self) -> Option<usize> {
        self.pcie_cap
    }

    /// Offset of extended capability `id` (PCIe Base 5.0 §7.6.3), walking from 0x100.
    pub fn extended_capability(&self, id: u16) -> Option<usize> {
        let mut at = 0x100;
        for _ in 0..(CONFIG_SPACE_SIZE - 0x100) / 4 {
            let header = self.get32(at);
            if header == 0 {
                return None;
            }
            if header as u16 == id {
                return Some(at);
            }
            at = (header >> 20) as usize;
            if at < 0x100 || at + 4 > CONFIG_SPACE_SIZE {
                return None;
            }
        }
        None
    }

    pub fn bars(&self) -> &[BarDef] {
        &self.bars
    }

    pub fn memory_enabled(&self) -> bool {
        self.get16(COMMAND) & COMMAND_MEMORY != 0
    }

    pub fn bus_master_enabled(&self) -> bool {
        self.get16(COMMAND) & COMMAND_BUS_MASTER != 0
    }

    /// The bus address software programmed into BAR `index` (0 when unassigned).
    pub fn bar_address(&self, index: usize) -> Option<u64> {
        let bar = self.bars.iter().find(|b| b.index == index)?;
        let off = BAR0 + 4 * index;
        let low = u64::from(self.get32(off) & !0xf);
        let high = if bar.is_64bit { u64::from(self.get32(off + 4)) } else { 0 };
        Some(high << 32 | low)
    }

    /// The live window of BAR `index`: its address and size, when memory decoding is on.
    pub fn bar_window(&self, index: usize) -> Option<(u64, u64)> {
        let bar = self.bars.iter().find(|b| b.index == index)?;
        let addr = self.bar_address(index)?;
        (self.memory_enabled() && addr != 0).then_some((addr, bar.size))
    }
}

impl ConfigSpace {
    /// Lays out extended capabilities from 0x100, each header's next pointer naming the
    /// one after (PCIe Base 5.0 §7.6.3); none: 0x100 stays zero.
    fn add_extended<'a>(&mut self, caps: impl Iterator<Item = &'a Capability>) -> Result<(), LayoutError> {
        let mut at = 0x100;
        let mut prev: Option<usize> = None;
        for cap in caps {
            let len = cap.bytes.len();
            if len < 4 || at + len > CONFIG_SPACE_SIZE {
                return Err(LayoutError::CapabilitySpace);
            }
            if let Some(p) = prev {
                let header = self.get32(p) & 0x000f_ffff | (at as u32) << 20;
                self.put32(p, header);
            }
            self.data[at..at + len].copy_from_slice(&cap.bytes);
            self.wmask[at..at + len].copy_from_slice(&cap.wmask);
            self.w1c[at..at + len].copy_from_slice(&cap.w1c);
            let header = self.get32(at) & 0x000f_ffff;
            self.put32(at, header);
            prev = Some(at);
            at = (at + len + 3) & !3;
        }
        Ok(())
    }
}
