//! Reading a work-queue ring slot: one copy of the slot out of guest memory, then parsing
//! and checking it (opcode, flags, reserved bits, SGE count, inline length against the
//! ring's stride; an atomic's operands and its one SGE; an ATOMIC WRITE's operand and a
//! FLUSH's FETH byte, neither with an SGE; a UD send's address vector, minor 16, before
//! its SGEs or inline data). The WQE is never read again from the ring afterwards.

use super::opcode::{wqe_op, Kind};
use super::qp::Ring;
use crate::contract::abi::*;
use crate::platform::mem::access::GuestMem;
use vm_memory::ByteValued;

const HDR: usize = std::mem::size_of::<WqeHeader>();
const SGE: usize = std::mem::size_of::<Sge>();
const OPS: usize = std::mem::size_of::<AtomicOps>();
const AV: usize = std::mem::size_of::<UdAv>();

/// A WQE copied out of guest memory and parsed.
#[derive(Clone, Debug)]
pub struct Wqe {
    pub hdr: WqeHeader,
    pub sges: Vec<Sge>,
    pub inline: Vec<u8>,
    /// An atomic's operands (WQE_OP_ATOMIC_*, WQE_OP_ATOMIC_WRITE).
    pub atomic: Option<AtomicOps>,
    /// A UD send's address vector (minor 16).
    pub av: Option<UdAv>,
}

/// Why a ring slot gave no WQE.
#[derive(Clone, Debug)]
pub enum SlotError {
    /// The slot is not mapped guest memory.
    Dma,
    /// The WQE is malformed; its header as read (for the error completion).
    Malformed(WqeHeader),
}

/// Reads and checks WQE slot `idx` of `ring` (a send queue when `send`).
pub fn read_wqe(mem: &dyn GuestMem, ring: &Ring, idx: u16, send: bool) -> Result<Wqe, SlotError> {
    read_slot(mem, ring, idx, |slot| parse(slot, send))
}

/// Reads and checks send WQE slot `idx` of a UD QP's `ring` (minor 16): SEND or SEND_IMM,
/// the destination QP in remote_addr bits [23:0], the address vector, then its SGEs or
/// inline data.
pub fn read_ud_wqe(mem: &dyn GuestMem, ring: &Ring, idx: u16) -> Result<Wqe, SlotError> {
    read_slot(mem, ring, idx, parse_ud)
}

/// Copies slot `idx` of `ring` out of guest memory once and parses it with `parse`.
fn read_slot(mem: &dyn GuestMem, ring: &Ring, idx: u16, parse: impl FnOnce(&[u8]) -> Result<Wqe, ()>) -> Result<Wqe, SlotError> {
    let stride = ring.stride() as usize;
    let mut buf = [0u8; 256];
    let slot = buf.get_mut(..stride).ok_or(SlotError::Dma)?;
    let addr = ring.slot_addr(idx).ok_or(SlotError::Dma)?;
    mem.read(addr, slot).map_err(|_| SlotError::Dma)?;
    parse(slot).map_err(|()| SlotError::Malformed(header(slot)))
}

/// The `n` SGEs at the start of `buf`, if they fit.
fn sges_at(buf: &[u8], n: u8) -> Result<Vec<Sge>, ()> {
    let n = usize::from(n);
    if n > buf.len() / SGE {
        return Err(());
    }
    let sges = buf.chunks_exact(SGE).take(n).map(|c| {
        let mut s = Sge::default();
        s.as_mut_slice().copy_from_slice(c);
        s
    });
    Ok(sges.collect())
}

fn parse_ud(buf: &[u8]) -> Result<Wqe, ()> {
    let hdr = header(buf);
    let known_flags = WQE_FLAG_SIGNALED | WQE_FLAG_INLINE | WQE_FLAG_SOLICITED;
    let op_ok = matches!(hdr.opcode, WQE_OP_SEND | WQE_OP_SEND_IMM);
    if !op_ok || hdr.flags & !known_flags != 0 || hdr.rsvd0 != 0 || hdr.remote_addr >> 24 != 0 {
        return Err(());
    }
    let mut av = UdAv::default();
    av.as_mut_slice().copy_from_slice(buf.get(HDR..HDR + AV).ok_or(())?);
    if av.flags != 0 || av.rsvd != 0 || av.dest_mac >> 48 != 0 {
        return Err(());
    }
    let rest = buf.get(HDR + AV..).ok_or(())?;
    let room = rest.len();
    if hdr.flags & WQE_FLAG_INLINE != 0 {
        if hdr.num_sge != 0 || hdr.inline_len as usize > room {
            return Err(());
        }
        let inline = rest[..hdr.inline_len as usize].to_vec();
        return Ok(Wqe { hdr, sges: Vec::new(), inline, atomic: None, av: Some(av) });
    }
    let sges = sges_at(rest, hdr.num_sge)?;
    Ok(Wqe { hdr, sges, inline: Vec::new(), atomic: None, av: Some(av) })
}

/// The header of a slot as read (zeroes where the slot is short).
fn header(slot: &[u8]) -> WqeHeader {
    let mut hdr = WqeHeader::default();
    let n = slot.len().min(HDR);
    hdr.as_mut_slice()[..n].copy_from_slice(&slot[..n]);
    hdr
}

/// Only the header of slot `idx` (for a flush completion); zeroes if unreadable.
pub fn read_header(mem: &dyn GuestMem, ring: &Ring, idx: u16) -> WqeHeader {
    let mut hdr = WqeHeader::default();
    match ring.slot_addr(idx) {
        Some(a) if mem.read(a, hdr.as_mut_slice()).is_ok() => hdr,
        _ => WqeHeader::default(),
    }
}

fn parse(buf: &[u8], send: bool) -> Result<Wqe, ()> {
    let hdr = header(buf);
    let room = buf.len().checked_sub(HDR).ok_or(())?;
    let op = if send { wqe_op(hdr.opcode) } else { None };
    let op_ok = if send { op.is_some() } else { hdr.opcode == WQE_OP_RECV };
    let known_flags = WQE_FLAG_SIGNALED | WQE_FLAG_INLINE | WQE_FLAG_SOLICITED;
    let kind = op.map(|o| o.kind);
    let rsvd0_ok = if kind == Some(Kind::Flush) { feth_ok(hdr.rsvd0) } else { hdr.rsvd0 == 0 };
    if !op_ok || hdr.flags & !known_flags != 0 || !rsvd0_ok {
        return Err(());
    }
    if hdr.flags & WQE_FLAG_INLINE != 0 {
        let inline_ok = op.is_some_and(|o| o.inline) && (hdr.inline_len as usize) <= room && hdr.num_sge == 0;
        if !inline_ok {
            return Err(());
        }
        let data = buf.get(HDR..HDR + hdr.inline_len as usize).ok_or(())?.to_vec();
        return Ok(Wqe { hdr, sges: Vec::new(), inline: data, atomic: None, av: None });
    }
    if matches!(kind, Some(Kind::Flush | Kind::AtomicWrite)) {
        // No SGE; an ATOMIC WRITE's 8 bytes in the operands (compare 0).
        if hdr.num_sge != 0 {
            return Err(());
        }
        if kind == Some(Kind::Flush) {
            return Ok(Wqe { hdr, sges: Vec::new(), inline: Vec::new(), atomic: None, av: None });
        }
        let mut ops = AtomicOps::default();
        ops.as_mut_slice().copy_from_slice(buf.get(HDR..HDR + OPS).ok_or(())?);
        if ops.compare != 0 {
            return Err(());
        }
        return Ok(Wqe { hdr, sges: Vec::new(), inline: Vec::new(), atomic: Some(ops), av: None });
    }
    if kind == Some(Kind::Atomic) {
        // The operands, then exactly one SGE (for the original value).
        let mut ops = AtomicOps::default();
        ops.as_mut_slice().copy_from_slice(buf.get(HDR..HDR + OPS).ok_or(())?);
        let mut s = Sge::default();
        s.as_mut_slice().copy_from_slice(buf.get(HDR + OPS..HDR + OPS + SGE).ok_or(())?);
        if hdr.num_sge != 1 {
            return Err(());
        }
        return Ok(Wqe { hdr, sges: vec![s], inline: Vec::new(), atomic: Some(ops), av: None });
    }
    let sges = sges_at(buf.get(HDR..).ok_or(())?, hdr.num_sge)?;
    Ok(Wqe { hdr, sges, inline: Vec::new(), atomic: None, av: None })
}

/// Whether a FETH byte names a placement type (FLUSH_TYPE_* bits, at least one) and a
/// selectivity level (FLUSH_LEVEL_*), nothing else.
pub fn feth_ok(feth: u8) -> bool {
    let (ptype, level) = (feth & 0x0f, feth >> 4);
    ptype != 0 && ptype & !(FLUSH_TYPE_GLOBAL | FLUSH_TYPE_PERSISTENT) == 0 && (level == FLUSH_LEVEL_RANGE || level == FLUSH_LEVEL_MR)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(hdr: WqeHeader, stride: usize) -> Vec<u8> {
        let mut b = vec![0u8; stride];
        b[..HDR].copy_from_slice(hdr.as_slice());
        b
    }

    #[test]
    fn parse_checks_opcode_flags_sges_and_inline_room() {
        let ok = WqeHeader { opcode: WQE_OP_SEND, num_sge: 2, ..Default::default() };
        assert_eq!(parse(&slot(ok, 64), true).unwrap().sges.len(), 2);
        assert!(parse(&slot(WqeHeader { num_sge: 3, ..ok }, 64), true).is_err(), "3 SGEs do not fit 64 bytes");
        assert!(parse(&slot(ok, 64), false).is_err(), "a SEND on the receive queue");
        assert!(parse(&slot(WqeHeader { opcode: WQE_OP_RECV, ..ok }, 64), true).is_err(), "a RECV on the send queue");
        assert!(parse(&slot(WqeHeader { rsvd0: 1, ..ok }, 64), true).is_err());
        let inline = WqeHeader { opcode: WQE_OP_RDMA_WRITE, flags: WQE_FLAG_INLINE, inline_len: 32, ..Default::default() };
        assert_eq!(parse(&slot(inline, 64), true).unwrap().inline.len(), 32);
        assert!(parse(&slot(WqeHeader { inline_len: 33, ..inline }, 64), true).is_err());
        assert!(parse(&slot(WqeHeader { opcode: WQE_OP_RDMA_READ, ..inline }, 64), true).is_err(), "READ cannot be inline");
    }

    #[test]
    fn a_ud_send_carries_its_address_vector_before_its_sges() {
        let send = WqeHeader { opcode: WQE_OP_SEND, num_sge: 4, remote_addr: 0x00ab_cdef, rkey: 0x1111_2222, ..Default::default() };
        let mut b = slot(send, 128);
        let av = UdAv { dest_gid_lo: 1, dest_gid_hi: 2, dest_mac: 0x0000_0605_0403_0201, sgid_index: 3, ..Default::default() };
        b[HDR..HDR + AV].copy_from_slice(av.as_slice());
        b[HDR + AV + 3 * SGE + 8] = 7; // the fourth SGE's length
        let w = parse_ud(&b).unwrap();
        assert_eq!((w.av, w.sges.len(), w.sges[3].length), (Some(av), 4, 7));
        assert!(parse_ud(&slot(send, 64)).is_err(), "no room for an SGE after the vector in 64 bytes");
        assert!(parse_ud(&slot(WqeHeader { num_sge: 5, ..send }, 128)).is_err(), "5 SGEs do not fit 128 bytes");
        for bad in [
            WqeHeader { opcode: WQE_OP_RDMA_WRITE, ..send },
            WqeHeader { opcode: WQE_OP_RDMA_READ, ..send },
            WqeHeader { remote_addr: 1 << 24, ..send },
            WqeHeader { rsvd0: 1, ..send },
            WqeHeader { flags: 0x80, ..send },
        ] {
            let mut c = b.clone();
            c[..HDR].copy_from_slice(bad.as_slice());
            assert!(parse_ud(&c).is_err(), "{bad:?}");
        }
        let mut c = b.clone();
        c[HDR + 16 + 6] = 1; // a MAC with bits above 47
        assert!(parse_ud(&c).is_err(), "a MAC wider than 48 bits");
        let inline = WqeHeader { opcode: WQE_OP_SEND_IMM, flags: WQE_FLAG_INLINE, num_sge: 0, inline_len: 64, ..send };
        let mut d = slot(inline, 128);
        d[HDR + AV..].copy_from_slice(&[9; 64][..]);
        assert!(parse_ud(&d).is_ok_and(|w| w.inline == [9; 64]), "stride 128: 64 bytes inline");
        assert!(parse_ud(&slot(WqeHeader { inline_len: 65, ..inline }, 128)).is_err());
        assert!(parse_ud(&slot(WqeHeader { num_sge: 0, ..send }, 64)).is_ok_and(|w| w.sges.is_empty()), "stride 64: a SEND of no bytes");
    }

    #[test]
    fn flush_and_atomic_write_take_no_sge_and_check_their_fields() {
        let flush = WqeHeader { opcode: WQE_OP_FLUSH, rsvd0: FLUSH_LEVEL_MR << 4 | FLUSH_TYPE_GLOBAL, ..Default::default() };
        assert!(parse(&slot(flush, 64), true).unwrap().atomic.is_none());
        for bad in [0, 4, 0x21, 0x41, 0x81, FLUSH_LEVEL_MR << 4] {
            assert!(parse(&slot(WqeHeader { rsvd0: bad, ..flush }, 64), true).is_err(), "FETH byte {bad:#x}");
        }
        assert!(parse(&slot(WqeHeader { num_sge: 1, ..flush }, 64), true).is_err(), "a FLUSH with an SGE");
        assert!(parse(&slot(WqeHeader { flags: WQE_FLAG_INLINE, ..flush }, 64), true).is_err(), "an inline FLUSH");
        let aw = WqeHeader { opcode: WQE_OP_ATOMIC_WRITE, ..Default::default() };
        let mut b = slot(aw, 64);
        b[HDR..HDR + 8].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(parse(&b, true).unwrap().atomic.unwrap().swap_add, 0x1122_3344_5566_7788);
        b[HDR + 8] = 1;
        assert!(parse(&b, true).is_err(), "compare must be 0");
        assert!(parse(&slot(WqeHeader { rsvd0: 1, ..aw }, 64), true).is_err());
        assert!(parse(&slot(WqeHeader { num_sge: 1, ..aw }, 64), true).is_err(), "an ATOMIC WRITE with an SGE");
    }
}
