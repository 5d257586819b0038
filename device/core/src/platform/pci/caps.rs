//! Builders for the standard capabilities our functions expose (PCI 3.0 §6.7):
//! power management, MSI-X (PCI 3.0 §6.8.2) and PCI Express (PCIe Base 4.0 §7.5.3).
//! Each builder returns the capability's bytes with its writable/W1C masks; the config
//! space model links them into the list.

pub const CAP_ID_PM: u8 = 0x01;
pub const CAP_ID_PCIE: u8 = 0x10;
pub const CAP_ID_MSIX: u8 = 0x11;

/// Offset of Device Control within the PCI Express capability.
pub const PCIE_DEVCTL: usize = 0x08;

#[derive(Clone, Debug)]
pub struct Capability {
    pub bytes: Vec<u8>,
    pub wmask: Vec<u8>,
    pub w1c: Vec<u8>,
    /// An extended capability (PCIe extended configuration space, from 0x100).
    pub extended: bool,
}

impl Capability {
    fn new(id: u8, len: usize) -> Self {
        let mut bytes = vec![0; len];
        bytes[0] = id;
        Capability { bytes, wmask: vec![0; len], w1c: vec![0; len], extended: false }
    }

    pub fn id(&self) -> u8 {
        self.bytes[0]
    }

    fn put16(&mut self, off: usize, v: u16) {
        self.bytes[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }

    fn put32(&mut self, off: usize, v: u32) {
        self.bytes[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn wmask16(&mut self, off: usize, v: u16) {
        self.wmask[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }

    fn w1c16(&mut self, off: usize, v: u16) {
        self.w1c[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }
}

/// Power management, version 3, D0/D3hot only, No_Soft_Reset set.
pub fn power_management() -> Capability {
    let mut c = Capability::new(CAP_ID_PM, 8);
    c.put16(2, 0x0003);
    c.put16(4, 1 << 3);
    c.wmask16(4, 0x0103); // PowerState, PME_En
    c.w1c16(4, 0x8000); // PME_Status
    c
}

/// MSI-X with `vectors` entries; table and PBA live in BAR `bir` at the given offsets.
pub fn msix(vectors: u16, bir: u8, table_offset: u32, pba_offset: u32) -> Capability {
    let mut c = Capability::new(CAP_ID_MSIX, 12);
    c.put16(2, vectors.saturating_sub(1) & 0x7ff);
    c.wmask16(2, 0xc000); // MSI-X Enable, Function Mask
    c.put32(4, (table_offset & !7) | u32::from(bir & 7));
    c.put32(8, (pba_offset & !7) | u32::from(bir & 7));
    c
}

/// Link speed encodings (PCIe Base 4.0 §7.5.3.6).
pub const LINK_SPEED_16GT: u16 = 4;

/// PCI Express capability v2 of an endpoint: 256-byte max payload, FLR, x16 at 16 GT/s.
pub fn pcie_endpoint() -> Capability {
    let mut c = Capability::new(CAP_ID_PCIE, 0x3c);
    c.put16(0x02, 0x0002); // version 2, device/port type 0 = PCIe endpoint
    c.put32(0x04, 1 << 28 | 1 << 15 | 0x1); // DevCap: FLR, role-based errors, MPS 256 B
    c.put16(PCIE_DEVCTL, 0x2810); // MRRS 512 B, no snoop, relaxed ordering, MPS 128 B
    c.wmask16(PCIE_DEVCTL, 0x7cff); // error reporting, RO, MPS, ext tag, ..., MRRS; not FLR
    c.w1c16(0x0a, 0x000f); // DevSta error bits
    let width = 16u32;
    c.put32(0x0c, width << 4 | u32::from(LINK_SPEED_16GT)); // LinkCap: x16, 16 GT/s, port 0
    c.wmask16(0x10, 0x01c3); // LinkCtl: ASPM, RCB, common clock, extended synch
    c.put16(0x12, (width as u16) << 4 | LINK_SPEED_16GT); // LinkSta: negotiated x16 16 GT/s
    c.put32(0x24, 1 << 4); // DevCap2: completion timeout disable supported
    c.wmask16(0x28, 0x041f); // DevCtl2: completion timeout, ID-based ordering
    c.put32(0x2c, 0b1_1110); // LinkCap2: 2.5, 5, 8 and 16 GT/s supported
    c.put16(0x30, LINK_SPEED_16GT); // LinkCtl2: target speed
    c.wmask16(0x30, 0x000f);
    c
}

/// The PCI Express endpoint capability with the link the topology gives: Link
/// Capabilities and Link Status report `gen` (1..=6: 2.5 to 64 GT/s) and `width` lanes,
/// Link Capabilities 2 every speed up to it, Link Control 2 it as the target speed;
/// Device Capabilities the largest payload `mps`, Device Control `mrrs` as the reset
/// Max Read Request Size (PCIe Base 5.0 §7.5.3.3, 7.5.3.4, 7.5.3.6, 7.5.3.8, 7.5.3.18,
/// 7.5.3.19). Sizes are powers of two in 128..=4096 (others are clamped to them).
pub fn pcie_endpoint_link(gen: u8, width: u8, mps: u32, mrrs: u32) -> Capability {
    let mut c = pcie_endpoint();
    let code = |bytes: u32| bytes.clamp(128, 4096).ilog2() - 7;
    let devcap = c.bytes[0x04..0x08].try_into().map(u32::from_le_bytes).unwrap_or(0);
    c.put32(0x04, (devcap & !7) | code(mps));
    let devctl = u16::from_le_bytes([c.bytes[PCIE_DEVCTL], c.bytes[PCIE_DEVCTL + 1]]);
    c.put16(PCIE_DEVCTL, (devctl & !0x7000) | (code(mrrs) as u16) << 12);
    let speed = u16::from(gen.clamp(1, 6));
    let width = u16::from(width.clamp(1, 32));
    let cap = c.bytes[0x0c..0x10].try_into().map(u32::from_le_bytes).unwrap_or(0);
    c.put32(0x0c, (cap & !0x3ff) | u32::from(width) << 4 | u32::from(speed));
    c.put16(0x12, width << 4 | speed);
    c.put32(0x2c, ((1u32 << speed) - 1) << 1);
    c.put16(0x30, speed);
    c
}

/// Extended capability ID of Advanced Error Reporting.
pub const EXT_CAP_ID_AER: u16 = 0x0001;

/// Advanced Error Reporting (PCIe Base 5.0 §7.8.4), version 2, of an endpoint: error
/// status registers write-one-to-clear, masks and severity writable, the specification's
/// default mask and severity values, no ECRC, header and TLP prefix logs empty. The
/// device never reports an error through it; it exists so that software finds it
/// (Linux's per-device `aer_dev_*` counters).
pub fn aer() -> Capability {
    let mut c = Capability::new(0, 0x48);
    c.extended = true;
    c.put32(0x00, u32::from(EXT_CAP_ID_AER) | 2 << 16);
    const UNCOR: u32 = 0x07ff_f030; // bits 4, 5, 12..=26
    const COR: u32 = 0x0000_f1c1; // bits 0, 6, 7, 8, 12..=15
    c.put32(0x08, 0x0040_0000); // uncorrectable mask: internal error masked
    c.put32(0x0c, 0x0046_2030); // severity: DLP, SDES, FCP, overflow, malformed, internal
    c.put32(0x14, 0x0000_e000); // correctable mask: advisory non-fatal, internal, header log overflow
    for (off, w1c, wmask) in [(0x04, UNCOR, 0), (0x08, 0, UNCOR), (0x0c, 0, UNCOR), (0x10, COR, 0), (0x14, 0, COR)] {
        c.w1c[off..off + 4].copy_from_slice(&u32::to_le_bytes(w1c));
        c.wmask[off..off + 4].copy_from_slice(&u32::to_le_bytes(wmask));
    }
    c
}

/// Extended capability ID of a Vendor-Specific Extended Capability.
pub const EXT_CAP_ID_VSEC: u16 = 0x000b;

/// A Vendor-Specific Extended Capability (PCIe Base 5.0 §7.9.5), version 1: VSEC `id`,
/// revision `rev`, then `data`, read-only.
pub fn vendor_specific(id: u16, rev: u8, data: &[u8]) -> Capability {
    let len = 8 + data.len();
    let mut c = Capability::new(0, len);
    c.extended = true;
    c.put32(0x00, u32::from(EXT_CAP_ID_VSEC) | 1 << 16);
    c.put32(0x04, u32::from(id) | u32::from(rev & 0xf) << 16 | (len as u32 & 0xfff) << 20);
    c.bytes[8..].copy_from_slice(data);
    c
}
