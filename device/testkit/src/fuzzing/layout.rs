//! Where the harnesses of one engine (`verbs_ops`, `frame`) put the device's tables in
//! their guest RAM: RAM on the bus from [`RAM_BASE`], the QP, CQ and MR context tables and
//! the MTT and the event queue in its first 16 KiB. Each harness places its rings and data after them.

use rnic_emu_core::rnic::verbs::engine::Tables;

/// Where guest RAM starts on the bus.
pub const RAM_BASE: u64 = 0x10_0000;
/// Offsets in RAM.
pub const QP_TABLE: u64 = 0;
pub const CQ_TABLE: u64 = 0x1000;
pub const MR_TABLE: u64 = 0x2000;
pub const MTT: u64 = 0x3000;
/// The event queue: 2^[`EQ_LOG`] entries of 16 bytes, after the MTT's 512 entries.
pub const EQ: u64 = 0x3000 + 512 * 8;
pub const EQ_LOG: u64 = 4;

/// The tables as the engine is given them, with `mtt_entries` MTT entries (no QP path or
/// GID table: every path the rnic-emu convention).
pub fn tables(mtt_entries: u64) -> Tables {
    Tables {
        qp_ctx: RAM_BASE + QP_TABLE,
        cq_ctx: RAM_BASE + CQ_TABLE,
        mr_ctx: RAM_BASE + MR_TABLE,
        mtt: RAM_BASE + MTT,
        mtt_entries,
        qp_path: 0,
        gid_table: 0,
        eq: RAM_BASE + EQ,
        eq_log: EQ_LOG,
    }
}
