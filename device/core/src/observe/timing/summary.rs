//! The model summary the RNIC publishes in a Vendor-Specific Extended Capability of its
//! configuration space, so guest tools (`rnic-perf`, `rnic-coll`) can print modelled
//! columns beside what they measure without a driver change or a host round trip. The
//! table holds, for every op (WRITE, READ, SEND), source and destination memory (host,
//! GPU) and size 2^0..2^24 bytes, the modelled latency (doorbell to the local CPU seeing
//! the CQE, [`timeline`]) and the per-message time of a back-to-back stream
//! ([`interval`]), computed once from the topology's `[timing]` and the node's layout.
//! Layout (little-endian, offsets from the capability), documented in `docs/timing.md`:
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0x00 | 4 | extended capability header: ID 0x000b (VSEC), version 1, next |
//! | 0x04 | 4 | VSEC header: ID [`VSEC_ID`], revision 1, length (bytes, bits 31:20) |
//! | 0x08 | 1 | sizes per row ([`SIZES`]) |
//! | 0x09 | 1 | rows ([`ROWS`]: op x src x dst, op slowest) |
//! | 0x0a | 1 | time unit: 2^-n ns ([`UNIT_SHIFT`]) |
//! | 0x0b | 1 | reserved, 0 |
//! | 0x0c | ROWS x SIZES x 8 | per row, per size 2^k: latency (u32), interval (u32) |
//!
//! Times saturate at u32::MAX units. Not included: the staging copies of a host bounce
//! (the driver's MR_SYNC), queueing, and window limits (the tools apply their own).

use super::model::{interval, timeline, Mem, Op, Request};
use crate::platform::topology::params::Params;
use crate::platform::topology::Layout;
use std::sync::{Arc, Mutex};

/// The VSEC ID under the RNIC's vendor ID.
pub const VSEC_ID: u16 = 0x0001;
/// Sizes 2^0 ..= 2^(SIZES-1) bytes.
pub const SIZES: u8 = 25;
/// Rows: (write, read, send) x src (host, gpu) x dst (host, gpu).
pub const ROWS: u8 = 12;
/// Times are in units of 2^-UNIT_SHIFT ns.
pub const UNIT_SHIFT: u8 = 2;
/// Bytes of the table after the two headers.
pub const TABLE_BYTES: usize = 4 + ROWS as usize * SIZES as usize * 8;

const OPS: [Op; 3] = [Op::Write, Op::Read, Op::Send];
const MEMS: [Mem; 2] = [Mem::Host, Mem::Gpu];

fn units(ns: f64) -> u32 {
    let u = (ns * f64::from(1u32 << UNIT_SHIFT)).round();
    if u >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        u.max(0.0) as u32
    }
}

/// The table (from offset 0x08 of the capability).
fn build(p: &Params, l: &Layout) -> Vec<u8> {
    let mut out = vec![SIZES, ROWS, UNIT_SHIFT, 0];
    for op in OPS {
        for src in MEMS {
            for dst in MEMS {
                for k in 0..SIZES {
                    let req = Request { op, len: 1 << k, src, dst };
                    let lat = timeline(p, l, &req).at("cpu").unwrap_or(0.0);
                    out.extend_from_slice(&units(lat).to_le_bytes());
                    out.extend_from_slice(&units(interval(p, &req)).to_le_bytes());
                }
            }
        }
    }
    out
}

/// The last table built, with its inputs.
type Kept = Option<(Params, Layout, Arc<Vec<u8>>)>;

/// The table for `p` and `l`; the last one is kept, since every RNIC of a topology
/// asks for the same one (and fuzzing builds many).
pub fn table(p: &Params, l: &Layout) -> Arc<Vec<u8>> {
    static LAST: Mutex<Kept> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((lp, ll, t)) = last.as_ref() {
        if lp == p && ll == l {
            return t.clone();
        }
    }
    let t = Arc::new(build(p, l));
    *last = Some((p.clone(), *l, t.clone()));
    t
}

/// Reads back (latency, interval) in ns for `row` and size 2^`k` (tests, the docs).
pub fn lookup(table: &[u8], row: usize, k: usize) -> Option<(f64, f64)> {
    let at = 4 + (row * usize::from(SIZES) + k) * 8;
    let word = |o: usize| -> Option<f64> {
        let b: [u8; 4] = table.get(o..o + 4)?.try_into().ok()?;
        Some(f64::from(u32::from_le_bytes(b)) / f64::from(1u32 << UNIT_SHIFT))
    };
    Some((word(at)?, word(at + 4)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_holds_the_models_figures_monotone_in_size() {
        let p = Params::default();
        let l = Layout::default();
        let t = table(&p, &l);
        assert_eq!(t.len(), TABLE_BYTES);
        assert!(Arc::ptr_eq(&t, &table(&p, &l)), "kept");
        // Row 3: WRITE, GPU to GPU; 2^12 = 4 KiB: the pinned timeline's local CPU stage.
        let (lat, iv) = lookup(&t, 3, 12).unwrap();
        assert_eq!(lat, 2451.75);
        assert!(iv > 0.0 && iv < lat);
        for row in 0..usize::from(ROWS) {
            let mut last = (0.0, 0.0);
            for k in 0..usize::from(SIZES) {
                let (lat, iv) = lookup(&t, row, k).unwrap();
                assert!(lat > 0.0 && iv > 0.0 && lat >= last.0 && iv >= last.1, "row {row} size 2^{k}");
                last = (lat, iv);
            }
        }
        assert!(lookup(&t, 12, 0).is_none());
        assert_eq!(units(1e12), u32::MAX, "saturates");
    }
}
