//! The driver's side of the ring protocol (docs/verbs.md §3, §3.1, §5), specified once:
//! where index `i` of a ring lives, when a work queue is full, which owner (pass) bit a
//! valid CQE at index `i` carries, the doorbell page's "kick needed?" test, the doorbell
//! register values and page offsets, and how the drivers tag the wr_id the device sees.
//!
//! The host test driver (`rnic_emu::hostdrv`), the engine's unit tests and the fuzz
//! harnesses call these functions; [`c_header`] renders the same helpers as static inline
//! C ([`HEADER_PATH`], checked in, regenerated with `rnic-emu gen-ring-header`) for the
//! guest kernel driver, the rdma-core provider and any guest tool that needs them. `tests`
//! fail when the checked-in header drifts, and compile it to check that every C helper
//! computes what its Rust twin does.
//!
//! Indices are free-running: 16-bit for work queues (the doorbells carry 16 bits), 16 bits
//! or wider for CQs; only the low `log_size + 1` bits matter. `log_size` is 0..=15
//! (`regs::rnic::MAX_RING_LOG2`), a WQE stride 2^6..=2^8 bytes, a CQE 2^[`CQE_LOG_STRIDE`].
//!
//! The device's side (`verbs::qp`, `verbs::cq`, `verbs::dbpage`) is written separately
//! from these, so every test that drives the engine through them checks one against the
//! other.

use crate::regs::rnic::{dbpage, DB_OBJECT_SHIFT};
use std::fmt::Write;

/// The header's path relative to the repository root.
pub const HEADER_PATH: &str = "guest-driver/include/uapi/rnic_emu_ring.h";

/// log2 of a CQE's size (`struct rnic_cqe`, 32 bytes): CQ slots are 2^5 bytes apart.
pub const CQE_LOG_STRIDE: u8 = 5;

/// wr_id bit 16: the WQE is a receive (the drivers' encoding, [`WrId`]).
pub const WRID_RECV: u64 = 1 << 16;
/// wr_id bits [63:32]: the QP's generation (bumped when the QP goes back to RESET).
pub const WRID_GEN_SHIFT: u32 = 32;
/// wr_id bits [15:0]: the WQE's free-running producer index.
pub const WRID_INDEX_MASK: u64 = 0xffff;
/// wr_id bits [31:17]: always 0 in a wr_id the drivers wrote.
pub const WRID_RSVD_MASK: u64 = 0xfffe_0000;

/// Mask of a ring of 2^`log_size` entries (as C's `(1U << log_size) - 1`, for 0..=16).
fn mask(log_size: u8) -> u32 {
    (1u32 << log_size.min(16)) - 1
}

/// The slot of index `idx` in a ring of 2^`log_size` entries (C: `rnic_ring_slot`).
pub fn slot(idx: u16, log_size: u8) -> u16 {
    (u32::from(idx) & mask(log_size)) as u16
}

/// Byte offset of index `idx`'s slot from the ring's start, for 2^`log_size` entries of
/// 2^`log_stride` bytes (C: `rnic_ring_offset`).
pub fn slot_offset(idx: u16, log_size: u8, log_stride: u8) -> u64 {
    u64::from(slot(idx, log_size)) << log_stride
}

/// Whether a work queue of 2^`log_size` entries with producer `pi` and consumer `ci` has
/// no free slot: a whole ring is outstanding (C: `rnic_ring_full`).
pub fn full(pi: u16, ci: u16, log_size: u8) -> bool {
    u32::from(pi.wrapping_sub(ci)) > mask(log_size)
}

/// The owner byte a valid CQE at index `idx` of a CQ of 2^`log_size` entries carries: 1 on
/// the first pass over the ring, 0 on the second, and so on (C: `rnic_ring_owner`).
pub fn owner(idx: u16, log_size: u8) -> u8 {
    ((u32::from(idx) >> log_size.min(16)) & 1) as u8 ^ 1
}

/// Whether a driver that moved a producer index from `old` to `new` must ring the MMIO
/// doorbell, given the device's published `event` index: true iff `event` lies in
/// `[old, new)` in 16-bit modular arithmetic (virtio's `vring_need_event`; C:
/// `rnic_need_kick`). The driver stores `new` into the page and issues a full barrier
/// before it loads `event` (`crate::rnic::doorbell`).
pub fn need_kick(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

/// The value written to a doorbell register (`WQE_DB_IDX`, `RQ_DB_IDX`, `CQE_CONS_IDX`,
/// `CQ_ARM` with index 0): the object in [31:16], the index in [15:0] (C: `rnic_db_value`).
pub fn db_value(object: u32, idx: u16) -> u32 {
    object << DB_OBJECT_SHIFT | u32::from(idx)
}

/// Offset in the doorbell page (BAR2) of QP `qpn`'s page (C: `rnic_dbp_qp`).
pub fn dbp_qp(qpn: u32) -> u64 {
    dbpage::QP_PAGES + u64::from(qpn) * dbpage::PAGE
}

/// Offset in the doorbell page (BAR2) of CQ `cqn`'s page (C: `rnic_dbp_cq`).
pub fn dbp_cq(cqn: u32) -> u64 {
    dbpage::CQ_PAGES + u64::from(cqn) * dbpage::PAGE
}

/// Offset in a QP's page of the producer index of its receive queue (`recv`) or send
/// queue (C: `rnic_dbp_pi`).
pub fn dbp_pi(recv: bool) -> u64 {
    if recv {
        dbpage::RQ_PI
    } else {
        dbpage::SQ_PI
    }
}

/// Offset in a QP's page of the device's event index of its receive queue (`recv`) or
/// send queue (C: `rnic_dbp_event`).
pub fn dbp_event(recv: bool) -> u64 {
    if recv {
        dbpage::RQ_EVENT
    } else {
        dbpage::SQ_EVENT
    }
}

/// The wr_id the drivers put in a WQE instead of the caller's, so that a completion names
/// its QP's generation, its queue and its slot: `gen << 32 | recv << 16 | index`. The device
/// returns a WQE's wr_id in its CQE unchanged and gives it no meaning of its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WrId {
    /// The QP's generation (bumped at RESET: CQEs of an earlier life are told apart).
    pub gen: u32,
    /// A receive-queue WQE (else a send-queue one).
    pub recv: bool,
    /// The WQE's free-running producer index.
    pub index: u16,
}

impl WrId {
    /// The encoded wr_id (C: `rnic_wrid`).
    pub fn encode(self) -> u64 {
        u64::from(self.gen) << WRID_GEN_SHIFT | if self.recv { WRID_RECV } else { 0 } | u64::from(self.index)
    }

    /// The fields of a wr_id the drivers wrote; None if a reserved bit is set (C:
    /// `rnic_wrid_valid`, `rnic_wrid_gen`, `rnic_wrid_recv`, `rnic_wrid_index`).
    pub fn decode(wr_id: u64) -> Option<WrId> {
        (wr_id & WRID_RSVD_MASK == 0).then_some(WrId {
            gen: (wr_id >> WRID_GEN_SHIFT) as u32,
            recv: wr_id & WRID_RECV != 0,
            index: (wr_id & WRID_INDEX_MASK) as u16,
        })
    }
}

/// The C twins of the functions above: (what it does, the function), in header order.
/// Parameters are `__u32` where C callers hold wider free-running indices (a CQ's `ci`).
const C_HELPERS: &[(&str, &str)] = &[
    (
        "The slot of free-running index @idx in a ring of 2^@log_size entries.",
        "static __inline__ __u32 rnic_ring_slot(__u32 idx, __u32 log_size)\n{\n\treturn idx & ((1U << log_size) - 1);\n}",
    ),
    (
        "Byte offset of index @idx's slot in a ring of 2^@log_size entries of 2^@log_stride bytes.",
        "static __inline__ __u64 rnic_ring_offset(__u32 idx, __u32 log_size, __u32 log_stride)\n{\n\treturn (__u64)rnic_ring_slot(idx, log_size) << log_stride;\n}",
    ),
    (
        "Whether a work queue of 2^@log_size entries with producer @pi and consumer @ci has no\n * free slot (a whole ring is outstanding).",
        "static __inline__ int rnic_ring_full(__u16 pi, __u16 ci, __u32 log_size)\n{\n\treturn (__u32)(__u16)(pi - ci) > (1U << log_size) - 1;\n}",
    ),
    (
        "The owner byte a valid CQE at index @idx of a CQ of 2^@log_size entries carries: 1 on\n * the first pass over the ring, 0 on the second, and so on. Read it, then the rest of\n * the CQE after a read barrier (the device writes the owner byte last).",
        "static __inline__ __u8 rnic_ring_owner(__u32 idx, __u32 log_size)\n{\n\treturn ((idx >> log_size) & 1) ^ 1;\n}",
    ),
    (
        "Whether moving a producer index from @old_idx to @new_idx must ring the MMIO doorbell,\n * given the device's event index @event from the doorbell page: iff @event lies in\n * [@old_idx, @new_idx) in 16-bit arithmetic (virtio's vring_need_event()). Store\n * @new_idx into the page and issue a full barrier before loading @event.",
        "static __inline__ int rnic_need_kick(__u16 event, __u16 new_idx, __u16 old_idx)\n{\n\treturn (__u16)(new_idx - event - 1) < (__u16)(new_idx - old_idx);\n}",
    ),
    (
        "The value of a doorbell register (WQE_DB_IDX, RQ_DB_IDX, CQE_CONS_IDX; CQ_ARM with\n * index 0): @object in [31:16], @idx in [15:0].",
        "static __inline__ __u32 rnic_db_value(__u32 object, __u16 idx)\n{\n\treturn object << RNIC_DB_OBJECT_SHIFT | idx;\n}",
    ),
    (
        "Offset in the doorbell page (BAR2) of QP @qpn's page.",
        "static __inline__ __u64 rnic_dbp_qp(__u32 qpn)\n{\n\treturn RNIC_DBP_QP_PAGES + (__u64)qpn * RNIC_DBP_PAGE;\n}",
    ),
    (
        "Offset in the doorbell page (BAR2) of CQ @cqn's page.",
        "static __inline__ __u64 rnic_dbp_cq(__u32 cqn)\n{\n\treturn RNIC_DBP_CQ_PAGES + (__u64)cqn * RNIC_DBP_PAGE;\n}",
    ),
    (
        "Offset in a QP's page of the producer index of its receive queue (@recv) or send queue.",
        "static __inline__ __u32 rnic_dbp_pi(int recv)\n{\n\treturn recv ? RNIC_DBP_RQ_PI : RNIC_DBP_SQ_PI;\n}",
    ),
    (
        "Offset in a QP's page of the device's event index of its receive queue (@recv) or send\n * queue.",
        "static __inline__ __u32 rnic_dbp_event(int recv)\n{\n\treturn recv ? RNIC_DBP_RQ_EVENT : RNIC_DBP_SQ_EVENT;\n}",
    ),
    (
        "The wr_id a driver puts in a WQE: the QP's generation @gen, a receive (@recv) or send\n * WQE, its producer index @idx.",
        "static __inline__ __u64 rnic_wrid(__u32 gen, int recv, __u16 idx)\n{\n\treturn (__u64)gen << RNIC_WRID_GEN_SHIFT | (recv ? RNIC_WRID_RECV : 0) | idx;\n}",
    ),
    (
        "Whether @wr_id can be one a driver wrote (no reserved bit set).",
        "static __inline__ int rnic_wrid_valid(__u64 wr_id)\n{\n\treturn !(wr_id & RNIC_WRID_RSVD_MASK);\n}",
    ),
    ("The QP generation of @wr_id.", "static __inline__ __u32 rnic_wrid_gen(__u64 wr_id)\n{\n\treturn (__u32)(wr_id >> RNIC_WRID_GEN_SHIFT);\n}"),
    ("Whether @wr_id names a receive WQE.", "static __inline__ int rnic_wrid_recv(__u64 wr_id)\n{\n\treturn !!(wr_id & RNIC_WRID_RECV);\n}"),
    ("The producer index of @wr_id's WQE.", "static __inline__ __u16 rnic_wrid_index(__u64 wr_id)\n{\n\treturn (__u16)(wr_id & RNIC_WRID_INDEX_MASK);\n}"),
];

fn c_define(out: &mut String, name: &str, value: String, comment: &str) {
    let _ = writeln!(out, "#define {name:<28} {value:<12} /* {comment} */");
}

/// The C header, for [`HEADER_PATH`].
pub fn c_header() -> String {
    let mut o = String::new();
    o.push_str("/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR Apache-2.0 */\n");
    o.push_str("/*\n * rnic-emu ring protocol, the driver's side (docs/verbs.md sections 3, 3.1, 5): ring\n");
    o.push_str(" * slots, the CQE owner bit, the doorbell page's kick test, doorbell values, and the\n");
    o.push_str(" * wr_id encoding the kernel driver and the rdma-core provider share. GENERATED by\n");
    o.push_str(" * `rnic-emu gen-ring-header` from device/core/src/ring.rs: do not edit by hand;\n");
    o.push_str(" * regenerate instead. Indices are free-running; only their low log_size + 1 bits count.\n */\n");
    o.push_str("#ifndef _UAPI_RNIC_EMU_RING_H\n#define _UAPI_RNIC_EMU_RING_H\n\n");
    o.push_str("#include \"rnic_emu_regs.h\"\n\n");
    c_define(&mut o, "RNIC_CQE_LOG_STRIDE", CQE_LOG_STRIDE.to_string(), "log2 of sizeof(struct rnic_cqe)");
    c_define(&mut o, "RNIC_WRID_RECV", format!("{WRID_RECV:#x}ULL"), "wr_id bit 16: a receive WQE");
    c_define(&mut o, "RNIC_WRID_GEN_SHIFT", WRID_GEN_SHIFT.to_string(), "wr_id [63:32]: the QP's generation");
    c_define(&mut o, "RNIC_WRID_INDEX_MASK", format!("{WRID_INDEX_MASK:#x}ULL"), "wr_id [15:0]: the producer index");
    c_define(&mut o, "RNIC_WRID_RSVD_MASK", format!("{WRID_RSVD_MASK:#x}ULL"), "wr_id [31:17]: 0");
    o.push_str("_Static_assert(sizeof(struct rnic_cqe) == 1 << RNIC_CQE_LOG_STRIDE, \"rnic_cqe stride\");\n");
    for (doc, f) in C_HELPERS {
        if doc.contains('\n') {
            let _ = writeln!(o, "\n/*\n * {doc}\n */\n{f}");
        } else {
            let _ = writeln!(o, "\n/* {doc} */\n{f}");
        }
    }
    o.push_str("\n#endif /* _UAPI_RNIC_EMU_RING_H */\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prng::Rng;
    use std::path::Path;
    use std::process::Command;

    #[test]
    fn slots_wrap_and_the_owner_bit_flips_each_pass() {
        assert_eq!((slot(0, 6), slot(63, 6), slot(64, 6), slot(0xffff, 6)), (0, 63, 0, 63));
        assert_eq!(slot(0xffff, 15), 0x7fff);
        assert_eq!(slot(5, 0), 0, "a ring of one entry");
        assert_eq!((slot_offset(65, 6, 7), slot_offset(3, 4, CQE_LOG_STRIDE)), (128, 96));
        assert_eq!((owner(0, 6), owner(63, 6), owner(64, 6), owner(128, 6)), (1, 1, 0, 1));
        assert_eq!((owner(0x7fff, 15), owner(0x8000, 15), owner(0xffff, 15)), (1, 0, 0));
        assert_eq!((owner(0, 0), owner(1, 0), owner(2, 0)), (1, 0, 1), "one entry: every index a pass");
    }

    #[test]
    fn a_work_queue_is_full_with_a_whole_ring_outstanding() {
        assert!(!full(63, 0, 6) && full(64, 0, 6));
        assert!(!full(3, 0xffc4, 6) && full(4, 0xffc4, 6), "across the 16-bit wrap");
        assert!(!full(7, 7, 0) && full(8, 7, 0));
        assert!(full(0x8000, 0, 15) && !full(0x7fff, 0, 15));
    }

    #[test]
    fn need_kick_is_virtio_vring_need_event() {
        assert!(need_kick(5, 6, 5), "the device waits at 5, the driver moved 5 -> 6");
        assert!(need_kick(5, 9, 3) && need_kick(3, 9, 3) && !need_kick(9, 9, 3));
        assert!(!need_kick(2, 9, 3), "the device saw 2 and is still busy (stale event)");
        assert!(need_kick(0xfffe, 1, 0xfffd), "across the 16-bit wrap");
        assert!(!need_kick(0x7000, 1, 0xfffd), "far behind: no kick");
        assert!(!need_kick(7, 7, 7), "nothing posted, nothing rung");
        // Exhaustively on a small window: the kick test is "event in [old, new)".
        for old in 0xfff0u16..=0xffff {
            for n in 0..8u16 {
                let new = old.wrapping_add(n);
                for e in 0..32u16 {
                    let event = old.wrapping_sub(8).wrapping_add(e);
                    assert_eq!(need_kick(event, new, old), event.wrapping_sub(old) < n, "{event} {new} {old}");
                }
            }
        }
    }

    #[test]
    fn wr_ids_round_trip_and_reserved_bits_are_refused() {
        let w = WrId { gen: 0xdead_beef, recv: true, index: 0xfffe };
        assert_eq!(w.encode(), 0xdead_beef_0001_fffe);
        assert_eq!(WrId::decode(w.encode()), Some(w));
        assert_eq!(WrId { gen: 3, recv: false, index: 7 }.encode(), 3 << 32 | 7);
        assert_eq!(WrId::decode(0x2_0000), None);
        assert_eq!(WrId::decode(1 << 31 | 5), None);
    }

    #[test]
    fn doorbell_values_and_page_offsets_follow_the_register_contract() {
        assert_eq!(db_value(3, 0x1234), 0x0003_1234);
        assert_eq!(db_value(0xffff, 0xffff), 0xffff_ffff);
        assert_eq!(dbp_qp(0) + dbp_pi(false), dbpage::SQ_PI);
        assert_eq!(dbp_qp(2) + dbp_event(true), 2 * dbpage::PAGE + dbpage::RQ_EVENT);
        assert_eq!(dbp_cq(1), dbpage::CQ_PAGES + dbpage::PAGE);
        assert_eq!((dbp_pi(true), dbp_event(false)), (dbpage::RQ_PI, dbpage::SQ_EVENT));
    }

    #[test]
    fn the_cqe_stride_is_the_descriptors() {
        assert_eq!(1usize << CQE_LOG_STRIDE, std::mem::size_of::<crate::contract::abi::Cqe>());
    }

    fn repo_path(rel: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
    }

    #[test]
    fn checked_in_c_header_matches_ring() {
        let path = repo_path(HEADER_PATH);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(text == c_header(), "{HEADER_PATH} is stale: run `cargo run -p rnic-emu -- gen-ring-header > {HEADER_PATH}`");
    }

    /// One input of every helper, and what the helpers return for it.
    #[derive(Debug)]
    struct Input {
        idx: u16,
        log: u8,
        stride: u8,
        pi: u16,
        ci: u16,
        event: u16,
        new: u16,
        old: u16,
        wr_id: u64,
        w: WrId,
    }

    impl Input {
        /// What the Rust helpers return, as the C program prints it.
        fn rust_line(&self) -> String {
            let d = WrId::decode(self.wr_id);
            let (gen, recv, index) = d.map_or((0, 0, 0), |d| (d.gen, u8::from(d.recv), d.index));
            format!(
                "{} {} {} {} {} {} {} {} {} {} {} {} {gen} {recv} {index}",
                slot(self.idx, self.log),
                slot_offset(self.idx, self.log, self.stride),
                u8::from(full(self.pi, self.ci, self.log)),
                owner(self.idx, self.log),
                u8::from(need_kick(self.event, self.new, self.old)),
                db_value(u32::from(self.w.index), self.ci),
                dbp_qp(self.w.gen & 0xff),
                dbp_cq(self.w.gen & 0xff),
                dbp_pi(self.w.recv),
                dbp_event(self.w.recv),
                self.w.encode(),
                u8::from(d.is_some()),
            )
        }

        /// The input as a C initializer of `struct in`.
        fn c_init(&self) -> String {
            let Input { idx, log, stride, pi, ci, event, new, old, wr_id, w } = self;
            format!("{{{idx}, {log}, {stride}, {pi}, {ci}, {event}, {new}, {old}, {wr_id}ULL, {}U, {}, {}}},", w.gen, u8::from(w.recv), w.index)
        }
    }

    /// The C helpers compute what the Rust ones do: the checked-in header, compiled with
    /// the host's C compiler (warnings are errors), over random and edge inputs.
    #[test]
    fn the_c_helpers_agree_with_the_rust_ones() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("linux")).unwrap();
        // The kernel types the headers use, without the kernel's headers.
        let types = "#include <stdint.h>\ntypedef uint8_t __u8;\ntypedef uint16_t __u16;\ntypedef uint32_t __u32;\ntypedef uint64_t __u64;\n";
        std::fs::write(dir.path().join("linux/types.h"), types).unwrap();
        let mut rng = Rng::new(0x7269_6e67);
        let mut inputs = Vec::new();
        for n in 0..4000u32 {
            let mut r = || rng.next_u64() as u16;
            let log = (n % 17) as u8;
            let idx = if n % 5 == 0 { (1u32 << log).wrapping_sub(n % 3) as u16 } else { r() };
            let (pi, ci, event, new) = (r(), r(), r(), r());
            let old = if n % 2 == 0 { new.wrapping_sub((n % 7) as u16) } else { r() };
            let index = r();
            let wr_id = if n % 3 == 0 { rng.next_u64() & !WRID_RSVD_MASK } else { rng.next_u64() };
            let w = WrId { gen: rng.next_u64() as u32, recv: n % 4 < 2, index };
            inputs.push(Input { idx, log, stride: 5 + (n % 4) as u8, pi, ci, event, new, old, wr_id, w });
        }
        let mut c = String::from("#include <stdio.h>\n#include \"uapi/rnic_emu_ring.h\"\n\n");
        c.push_str(
            "struct in {\n\tunsigned idx, log, stride, pi, ci, ev, new_idx, old_idx;\n\tunsigned long long wr_id;\n\tunsigned gen, recv, index;\n};\n\n",
        );
        c.push_str("static const struct in ins[] = {\n");
        for i in &inputs {
            let _ = writeln!(c, "\t{}", i.c_init());
        }
        c.push_str("};\n\nint main(void)\n{\n\tunsigned i;\n\n\tfor (i = 0; i < sizeof(ins) / sizeof(ins[0]); i++) {\n");
        c.push_str("\t\tconst struct in *p = &ins[i];\n\t\tint ok = rnic_wrid_valid(p->wr_id);\n\n");
        c.push_str("\t\tprintf(\"%u %llu %d %u %d %u %llu %llu %u %u %llu %d %u %d %u\\n\", rnic_ring_slot(p->idx, p->log),\n");
        c.push_str("\t\t       (unsigned long long)rnic_ring_offset(p->idx, p->log, p->stride), rnic_ring_full(p->pi, p->ci, p->log),\n");
        c.push_str("\t\t       rnic_ring_owner(p->idx, p->log), rnic_need_kick(p->ev, p->new_idx, p->old_idx), rnic_db_value(p->index, p->ci),\n");
        c.push_str("\t\t       (unsigned long long)rnic_dbp_qp(p->gen & 0xff), (unsigned long long)rnic_dbp_cq(p->gen & 0xff),\n");
        c.push_str("\t\t       rnic_dbp_pi(p->recv), rnic_dbp_event(p->recv), (unsigned long long)rnic_wrid(p->gen, p->recv, p->index), ok,\n");
        c.push_str("\t\t       ok ? rnic_wrid_gen(p->wr_id) : 0, ok ? rnic_wrid_recv(p->wr_id) : 0, ok ? rnic_wrid_index(p->wr_id) : 0);\n");
        c.push_str("\t}\n\treturn 0;\n}\n");
        let src = dir.path().join("ring_check.c");
        std::fs::write(&src, c).unwrap();
        let bin = dir.path().join("ring_check");
        let include = repo_path("guest-driver/include");
        let out = Command::new("cc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
            .arg(dir.path())
            .arg("-I")
            .arg(&include)
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .output()
            .expect("running cc (a C compiler is part of the Rust toolchain's requirements)");
        assert!(out.status.success(), "the header does not compile:\n{}", String::from_utf8_lossy(&out.stderr));
        let run = Command::new(&bin).output().unwrap();
        assert!(run.status.success());
        let got = String::from_utf8(run.stdout).unwrap();
        assert_eq!(got.lines().count(), inputs.len());
        for (line, input) in got.lines().zip(&inputs) {
            assert_eq!(line, input.rust_line(), "{input:?}");
        }
    }
}
