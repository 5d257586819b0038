//! A BAR register block driven by a [`RegDef`] table: sized, aligned accesses only.
//!
//! 8-byte registers may be accessed as one 8-byte access or as two 4-byte halves (what a
//! driver without `readq` does). Anything else (unmapped offset, odd size, misalignment)
//! is an error the caller turns into all-ones reads and dropped writes, as an access no
//! register claims ends on PCIe (docs/programming.md R-DEV-2): the driver sees what it
//! would see on hardware, and nothing a guest sends can fail the model.

use crate::regs::{Access, RegDef};
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum RegError {
    #[error("no register at offset {offset:#x} for a {len}-byte access")]
    Unmapped { offset: u64, len: usize },
}

/// A register write that took effect, for the device to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    /// Offset of the register (not of the access).
    pub reg: u64,
    /// The register's value after the write (for `Wo` registers: the value written).
    pub value: u64,
}

pub struct RegisterFile {
    table: &'static [RegDef],
    values: Vec<u64>,
}

impl RegisterFile {
    pub fn new(table: &'static [RegDef]) -> Self {
        let mut rf = RegisterFile { table, values: vec![0; table.len()] };
        rf.reset();
        rf
    }

    pub fn reset(&mut self) {
        for (v, def) in self.values.iter_mut().zip(self.table) {
            *v = def.reset;
        }
    }

    /// Finds the register an access of `len` bytes at `offset` hits, and the bit shift of
    /// the access within it.
    fn locate(&self, offset: u64, len: usize) -> Result<(usize, u32), RegError> {
        let err = RegError::Unmapped { offset, len };
        if len != 4 && len != 8 {
            return Err(err);
        }
        for (i, def) in self.table.iter().enumerate() {
            if def.offset == offset && usize::from(def.width) == len {
                return Ok((i, 0));
            }
            if def.width == 8 && len == 4 && (offset == def.offset || Some(offset) == def.offset.checked_add(4)) {
                return Ok((i, if offset == def.offset { 0 } else { 32 }));
            }
        }
        Err(err)
    }

    pub fn read(&self, offset: u64, data: &mut [u8]) -> Result<(), RegError> {
        let (i, shift) = self.locate(offset, data.len())?;
        let value = match self.table[i].access {
            Access::Wo => 0,
            Access::Ro | Access::Rw => self.values[i] >> shift,
        };
        data.copy_from_slice(&value.to_le_bytes()[..data.len()]);
        Ok(())
    }

    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<Option<Written>, RegError> {
        let (i, shift) = self.locate(offset, data.len())?;
        let def = &self.table[i];
        let mut raw = [0u8; 8];
        raw[..data.len()].copy_from_slice(data);
        let access_mask = if data.len() == 8 { u64::MAX } else { 0xffff_ffffu64 << shift };
        let incoming = u64::from_le_bytes(raw) << shift;
        let old = self.values[i];
        let merged = (old & !access_mask) | (incoming & access_mask);
        let value = (old & !def.writable) | (merged & def.writable);
        match def.access {
            Access::Ro => Ok(None),
            Access::Rw => {
                self.values[i] = value;
                Ok(Some(Written { reg: def.offset, value }))
            }
            Access::Wo => Ok(Some(Written { reg: def.offset, value: merged & def.writable })),
        }
    }

    /// The current value of the register at `reg` (device-side view, any access type).
    pub fn get(&self, reg: u64) -> u64 {
        self.table.iter().position(|d| d.offset == reg).map_or(0, |i| self.values[i])
    }

    /// Sets a register from the device side, ignoring software access rules.
    pub fn set(&mut self, reg: u64, value: u64) {
        if let Some(i) = self.table.iter().position(|d| d.offset == reg) {
            self.values[i] = value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regs::rnic::*;

    fn rd(rf: &RegisterFile, off: u64, len: usize) -> Result<u64, RegError> {
        let mut b = [0u8; 8];
        rf.read(off, &mut b[..len])?;
        Ok(u64::from_le_bytes(b))
    }

    #[test]
    fn reset_values_and_read_only() {
        let mut rf = RegisterFile::new(REGS);
        assert_eq!(rd(&rf, RNIC_REG_ID, 4), Ok(u64::from(ID_MAGIC)));
        assert_eq!(rd(&rf, DMA_CTRL, 4), Ok(1));
        assert_eq!(rf.write(RNIC_REG_ID, &0u32.to_le_bytes()), Ok(None));
        assert_eq!(rd(&rf, RNIC_REG_ID, 4), Ok(u64::from(ID_MAGIC)));
    }

    #[test]
    fn writable_mask_applies() {
        let mut rf = RegisterFile::new(REGS);
        rf.write(DMA_CTRL, &0xdead_beefu32.to_le_bytes()).unwrap();
        assert_eq!(rd(&rf, DMA_CTRL, 4), Ok(0xef));
        rf.write(DMA_CTRL, &0xffff_ff00u32.to_le_bytes()).unwrap();
        assert_eq!(rd(&rf, DMA_CTRL, 4), Ok(0));
    }

    #[test]
    fn wide_register_in_halves_and_whole() {
        let mut rf = RegisterFile::new(REGS);
        rf.write(QP_CTX_BASE, &0x1122_3344u32.to_le_bytes()).unwrap();
        rf.write(QP_CTX_BASE + 4, &0x5566_7788u32.to_le_bytes()).unwrap();
        assert_eq!(rd(&rf, QP_CTX_BASE, 8), Ok(0x5566_7788_1122_3344));
        assert_eq!(rd(&rf, QP_CTX_BASE + 4, 4), Ok(0x5566_7788));
        rf.write(MTT_BASE, &0x0102_0304_0506_0708u64.to_le_bytes()).unwrap();
        assert_eq!(rd(&rf, MTT_BASE, 4), Ok(0x0506_0708));
    }

    #[test]
    fn bad_accesses_are_errors() {
        let mut rf = RegisterFile::new(REGS);
        assert!(rd(&rf, RNIC_REG_ID, 2).is_err());
        assert!(rd(&rf, RNIC_REG_ID + 1, 4).is_err());
        assert!(rd(&rf, WQE_DB_IDX, 8).is_err());
        assert!(rd(&rf, 0x7ffc, 4).is_err());
        assert!(rd(&rf, u64::MAX - 3, 4).is_err());
        assert!(rf.write(u64::MAX, &[0u8; 4]).is_err());
    }

    #[test]
    fn write_only_reads_zero_and_reports_value() {
        let mut rf = RegisterFile::new(REGS);
        let w = rf.write(RNIC_REG_INT_TRIGGER, &3u32.to_le_bytes()).unwrap();
        assert_eq!(w, Some(Written { reg: RNIC_REG_INT_TRIGGER, value: 3 }));
        assert_eq!(rd(&rf, RNIC_REG_INT_TRIGGER, 4), Ok(0));
    }
}
