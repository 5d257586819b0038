//! What a request costs the host: this test binary's global allocator counts the bytes
//! each thread holds, and a WRITE naming a 64 MiB range of 16384 scattered pages must cost
//! the responder no more at its first packet than one naming a page (docs/verbs.md §8: a
//! range is checked whole, translated one packet's share at a time, so what a peer names
//! is not what the host holds).

use super::tests::{MR_TABLE, MTT, MTT_ENTRIES, VA};
use super::tests_roles::{Pair, WireFaults, A, PSN_AB};
use crate::contract::abi::*;
use crate::rnic::fabric::packet::{op, Bth, Packet, Reth};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting per thread the bytes live and their peak.
struct Counting;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    let _ = LIVE.try_with(|l| {
        let now = l.get().saturating_add_signed(delta);
        l.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

// SAFETY: every call is forwarded to System unchanged; the counting touches only
// thread-locals without destructors.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: ptr came from System.alloc with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        count(new as isize - layout.size() as isize);
        // SAFETY: as GlobalAlloc::realloc requires, forwarded.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Bytes this thread's `f` held at its peak beyond what it held before.
fn peak_of(f: impl FnOnce()) -> usize {
    let before = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(before));
    f();
    PEAK.with(Cell::get) - before
}

/// MR `index` of the responder over `pages` MTT entries that all name the same 4 KiB page
/// (scattered: no two are contiguous on the bus), at VA; its rkey.
fn scattered_mr(p: &mut Pair, index: u32, pages: u32, bus: u64) -> u32 {
    let d = p.resp();
    let first = d.mtt_next;
    for i in 0..pages {
        d.put(MTT + u64::from(first + i) * 8, &bus);
    }
    d.mtt_next += pages;
    let ctx = MrCtx {
        iova: VA,
        length: u64::from(pages) << 12,
        pd: 7,
        mtt_offset: first,
        npages: pages,
        access: ACCESS_REMOTE_WRITE | ACCESS_LOCAL_WRITE,
        key: 1,
        page_shift: 12,
        rsvd0: 0,
    };
    d.put(MR_TABLE + u64::from(index) * 32, &ctx);
    assert_eq!(d.cmd(CMD_REG_MR, index), CMD_OK);
    index << 8 | 1
}

/// The first 1 KiB packet of a WRITE of `len` bytes at VA under `rkey`: the responder's
/// peak allocation while it takes it.
fn first_packet_cost(p: &mut Pair, psn: u32, rkey: u32, len: u32) -> usize {
    let bth = Bth { opcode: op::WRITE_FIRST, pkey: 0xffff, dest_qp: 2, psn, ..Default::default() };
    let pkt = Packet { bth, reth: Some(Reth { va: VA, rkey, len }), payload: vec![0x5a; 1024], ..Default::default() };
    let d = p.resp();
    peak_of(|| d.e.on_packet(&d.mem, A.into(), &pkt))
}

#[test]
fn a_write_naming_64_mib_of_scattered_pages_costs_its_first_packet_what_one_page_does() {
    let pages = (MTT_ENTRIES - 2) as u32;
    let bus = super::tests::DATA;
    let mut small = Pair::new(true, 7, WireFaults::default());
    let rk = scattered_mr(&mut small, 3, 2, bus);
    let one_page = first_packet_cost(&mut small, PSN_AB, rk, 4096);
    let mut big = Pair::new(true, 7, WireFaults::default());
    let rk = scattered_mr(&mut big, 3, pages, bus);
    let whole = first_packet_cost(&mut big, PSN_AB, rk, pages << 12);
    // Translating the whole range would hold a segment per page: 16382 of them.
    assert!(whole <= one_page + 4096, "first packet of a {} MiB WRITE: {whole} bytes at the peak, of a 4 KiB one: {one_page}", pages >> 8);
    let d = big.resp();
    assert_eq!(d.read(bus, 1024), vec![0x5a; 1024], "the packet was placed");
}
