//! The opcode tables the requester, responder and completer consult instead of opcode
//! lists (as rxe's `rxe_opcode.c`): for each RC BTH opcode (IBA 9.2 table 35), the headers
//! it carries, its place in a message, whether it is a request or a response, whether it
//! consumes a RECV and the access it needs at the responder; for each send WQE opcode,
//! the request opcodes that carry it, the local access it needs and its CQE opcode.
//!
//! Atomics (contract minor 12): COMPARE_SWAP and FETCH_ADD requests carry an AtomicETH
//! and no payload; the ATOMIC ACKNOWLEDGE an AETH and the original value.
//!
//! FLUSH and ATOMIC WRITE (IBTA 1.5, contract minor 14): a FLUSH carries a FETH and a
//! RETH and no payload, an ATOMIC WRITE a RETH and its 8 bytes; both are answered by a
//! zero-length RDMA READ RESPONSE ONLY. They sit after the table's opcode-indexed rows.
//!
//! UC (contract minor 13): a UC SEND or WRITE opcode has the row of its RC counterpart
//! ([`info`] looks through the prefix, [`is_uc`] tells them apart).
//!
//! UD (contract minor 16): the two UD SEND ONLY opcodes have the rows of their RC
//! counterparts too (the DETH is the packet codec's); [`service_of`] tells the three
//! services' opcodes apart.
//!
//! Not modelled: SEND with invalidate.

use super::qp::Service;
use crate::contract::abi::*;
use crate::rnic::fabric::packet::op;

/// What a message does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Send,
    Write,
    ReadRequest,
    ReadResponse,
    Ack,
    /// COMPARE_SWAP or FETCH_ADD (which one: the opcode).
    Atomic,
    AtomicAck,
    /// IBTA 1.5 ATOMIC WRITE (minor 14).
    AtomicWrite,
    /// IBTA 1.5 RDMA FLUSH (minor 14).
    Flush,
}

/// One BTH opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpInfo {
    pub opcode: u8,
    pub kind: Kind,
    pub reth: bool,
    pub aeth: bool,
    pub imm: bool,
    pub payload: bool,
    /// First packet of its message (an ONLY packet is first and last).
    pub first: bool,
    pub last: bool,
    /// Requests go requester -> responder; the rest come back to the completer.
    pub request: bool,
    /// Consumes a RECV at the responder (SEND: from the first packet; WRITE with
    /// immediate: at its last packet).
    pub consumes_recv: bool,
    /// Access the responder's QP and MR must grant (ACCESS_REMOTE_*; 0: none).
    pub access: u8,
}

const fn row(opcode: u8, kind: Kind, first: bool, last: bool, reth: bool, imm: bool) -> OpInfo {
    let request = matches!(kind, Kind::Send | Kind::Write | Kind::ReadRequest | Kind::Atomic | Kind::AtomicWrite | Kind::Flush);
    let aeth = matches!(kind, Kind::Ack | Kind::AtomicAck) || (matches!(kind, Kind::ReadResponse) && (first || last));
    OpInfo {
        opcode,
        kind,
        reth,
        aeth,
        imm,
        payload: !matches!(kind, Kind::Ack | Kind::ReadRequest | Kind::Atomic | Kind::AtomicAck | Kind::Flush),
        first,
        last,
        request,
        consumes_recv: matches!(kind, Kind::Send) || (matches!(kind, Kind::Write) && imm),
        access: match kind {
            Kind::Write | Kind::AtomicWrite => ACCESS_REMOTE_WRITE,
            Kind::ReadRequest => ACCESS_REMOTE_READ,
            Kind::Atomic => ACCESS_REMOTE_ATOMIC,
            _ => 0,
        },
    }
}

use Kind::*;

/// Rows 0..INDEXED of [`OPCODES`] are indexed by opcode.
const INDEXED: usize = 21;

/// Every RC opcode the device speaks: indexed by opcode up to FETCH_ADD, then the IBTA
/// 1.5 ones.
pub const OPCODES: [OpInfo; 23] = [
    row(op::SEND_FIRST, Send, true, false, false, false),
    row(op::SEND_MIDDLE, Send, false, false, false, false),
    row(op::SEND_LAST, Send, false, true, false, false),
    row(op::SEND_LAST_IMM, Send, false, true, false, true),
    row(op::SEND_ONLY, Send, true, true, false, false),
    row(op::SEND_ONLY_IMM, Send, true, true, false, true),
    row(op::WRITE_FIRST, Write, true, false, true, false),
    row(op::WRITE_MIDDLE, Write, false, false, false, false),
    row(op::WRITE_LAST, Write, false, true, false, false),
    row(op::WRITE_LAST_IMM, Write, false, true, false, true),
    row(op::WRITE_ONLY, Write, true, true, true, false),
    row(op::WRITE_ONLY_IMM, Write, true, true, true, true),
    row(op::READ_REQUEST, ReadRequest, true, true, true, false),
    row(op::READ_RESPONSE_FIRST, ReadResponse, true, false, false, false),
    row(op::READ_RESPONSE_MIDDLE, ReadResponse, false, false, false, false),
    row(op::READ_RESPONSE_LAST, ReadResponse, false, true, false, false),
    row(op::READ_RESPONSE_ONLY, ReadResponse, true, true, false, false),
    row(op::ACK, Ack, true, true, false, false),
    row(op::ATOMIC_ACK, AtomicAck, true, true, false, false),
    row(op::COMPARE_SWAP, Atomic, true, true, false, false),
    row(op::FETCH_ADD, Atomic, true, true, false, false),
    row(op::FLUSH, Flush, true, true, true, false),
    row(op::ATOMIC_WRITE, AtomicWrite, true, true, true, false),
];

/// The table row of a BTH opcode, if the device speaks it (a UC opcode: its RC
/// counterpart's row).
pub fn info(opcode: u8) -> Option<&'static OpInfo> {
    let base = op::uc_base(opcode).or_else(|| op::ud_base(opcode)).unwrap_or(opcode);
    match OPCODES[..INDEXED].get(usize::from(base)) {
        Some(i) => Some(i).filter(|i| i.opcode == base),
        None => OPCODES[INDEXED..].iter().find(|i| i.opcode == base),
    }
}

/// Whether a BTH opcode is one of the Unreliable Connection service.
pub fn is_uc(opcode: u8) -> bool {
    op::uc_base(opcode).is_some()
}

/// The service a BTH opcode belongs to (its bits [7:5], IBA 9.2.1 table 38).
pub fn service_of(opcode: u8) -> Service {
    if op::uc_base(opcode).is_some() {
        Service::Uc
    } else if op::ud_base(opcode).is_some() {
        Service::Ud
    } else {
        Service::Rc
    }
}

/// The opcode of packet `i` of `n` of a message of `kind` (with immediate data on its
/// last packet when `imm`).
pub fn opcode_for(kind: Kind, imm: bool, i: u32, n: u32) -> u8 {
    let (first, last) = (i == 0, i + 1 >= n);
    OPCODES.iter().find(|o| o.kind == kind && o.first == first && o.last == last && (o.imm == (imm && last))).map_or(op::ACK, |o| o.opcode)
}

/// One send-queue WQE opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqeOp {
    pub opcode: u8,
    /// The messages it becomes.
    pub kind: Kind,
    pub imm: bool,
    /// Access the local SGEs need (a READ writes them).
    pub local_access: u8,
    /// Inline data allowed.
    pub inline: bool,
    /// CQE opcode of its completion.
    pub cqe_opcode: u8,
}

pub const WQE_OPS: [WqeOp; 9] = [
    WqeOp { opcode: WQE_OP_RDMA_WRITE, kind: Write, imm: false, local_access: 0, inline: true, cqe_opcode: CQE_OP_RDMA_WRITE },
    WqeOp { opcode: WQE_OP_RDMA_WRITE_IMM, kind: Write, imm: true, local_access: 0, inline: true, cqe_opcode: CQE_OP_RDMA_WRITE },
    WqeOp { opcode: WQE_OP_RDMA_READ, kind: ReadRequest, imm: false, local_access: ACCESS_LOCAL_WRITE, inline: false, cqe_opcode: CQE_OP_RDMA_READ },
    WqeOp { opcode: WQE_OP_SEND, kind: Send, imm: false, local_access: 0, inline: true, cqe_opcode: CQE_OP_SEND },
    WqeOp { opcode: WQE_OP_SEND_IMM, kind: Send, imm: true, local_access: 0, inline: true, cqe_opcode: CQE_OP_SEND },
    WqeOp { opcode: WQE_OP_ATOMIC_CMP_SWP, kind: Atomic, imm: false, local_access: ACCESS_LOCAL_WRITE, inline: false, cqe_opcode: CQE_OP_ATOMIC_CMP_SWP },
    WqeOp { opcode: WQE_OP_ATOMIC_FETCH_ADD, kind: Atomic, imm: false, local_access: ACCESS_LOCAL_WRITE, inline: false, cqe_opcode: CQE_OP_ATOMIC_FETCH_ADD },
    WqeOp { opcode: WQE_OP_ATOMIC_WRITE, kind: AtomicWrite, imm: false, local_access: 0, inline: false, cqe_opcode: CQE_OP_ATOMIC_WRITE },
    WqeOp { opcode: WQE_OP_FLUSH, kind: Flush, imm: false, local_access: 0, inline: false, cqe_opcode: CQE_OP_FLUSH },
];

/// The BTH opcode of an atomic WQE's request.
pub fn atomic_opcode(wqe_opcode: u8) -> u8 {
    if wqe_opcode == WQE_OP_ATOMIC_CMP_SWP {
        op::COMPARE_SWAP
    } else {
        op::FETCH_ADD
    }
}

/// The table row of a send WQE opcode.
pub fn wqe_op(opcode: u8) -> Option<&'static WqeOp> {
    WQE_OPS.iter().find(|w| w.opcode == opcode)
}

/// The CQE opcode reporting a send WQE (an unknown opcode reports as a WRITE).
pub fn send_cqe_opcode(opcode: u8) -> u8 {
    wqe_op(opcode).map_or(CQE_OP_RDMA_WRITE, |w| w.cqe_opcode)
}

/// The CQE opcode of the RECV a message of `kind` consumes.
pub fn recv_cqe_opcode(kind: Kind) -> u8 {
    if kind == Write {
        CQE_OP_RECV_RDMA_IMM
    } else {
        CQE_OP_RECV
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rnic::fabric::packet::layout;

    #[test]
    fn table_agrees_with_the_packet_codec() {
        for (i, o) in OPCODES.iter().enumerate() {
            assert!(i >= INDEXED || usize::from(o.opcode) == i, "indexed by opcode");
            assert_eq!(info(o.opcode), Some(o), "{:#x} found", o.opcode);
            let l = layout(o.opcode).unwrap();
            assert_eq!((o.reth, o.aeth, o.imm, o.payload), (l.reth, l.aeth, l.imm, l.payload), "{:#x}", o.opcode);
            assert_eq!(o.kind == Atomic, l.atomic, "{:#x}", o.opcode);
            assert_eq!(o.kind == AtomicAck, l.atomic_ack, "{:#x}", o.opcode);
            assert_eq!(o.kind == Flush, l.feth, "{:#x}", o.opcode);
        }
        assert!(info(0x15).is_none() && info(0xff).is_none());
        // UC: SEND and WRITE only, with the RC rows; no READ, ACK or atomic.
        assert_eq!(info(op::UC | op::WRITE_ONLY_IMM), info(op::WRITE_ONLY_IMM));
        assert_eq!(layout(op::UC | op::SEND_FIRST), layout(op::SEND_FIRST));
        assert!(is_uc(op::UC | op::SEND_ONLY) && !is_uc(op::SEND_ONLY));
        assert!(info(0x1b).is_none() && info(0x1e).is_none());
        // UD: SEND ONLY (with immediate) only, with the RC rows and a DETH.
        assert_eq!(info(op::UD_SEND_ONLY), info(op::SEND_ONLY));
        assert_eq!(info(op::UD_SEND_ONLY_IMM), info(op::SEND_ONLY_IMM));
        assert!(layout(op::UD_SEND_ONLY_IMM).is_some_and(|l| l.deth && l.imm && l.payload));
        assert!(info(0x60).is_none() && info(0x66).is_none() && layout(0x60).is_none());
        assert_eq!((service_of(op::UD_SEND_ONLY), service_of(op::UC | op::SEND_ONLY), service_of(op::SEND_ONLY)), (Service::Ud, Service::Uc, Service::Rc));
        for rc_only in [op::READ_REQUEST, op::ACK, op::FETCH_ADD, op::COMPARE_SWAP, op::FLUSH, op::ATOMIC_WRITE] {
            assert!(info(op::UC | rc_only).is_none() && layout(op::UC | rc_only).is_none(), "{rc_only:#x}");
        }
    }

    #[test]
    fn opcodes_per_position() {
        assert_eq!(opcode_for(Write, false, 0, 1), op::WRITE_ONLY);
        assert_eq!(opcode_for(Write, true, 0, 1), op::WRITE_ONLY_IMM);
        assert_eq!(opcode_for(Write, true, 0, 3), op::WRITE_FIRST);
        assert_eq!(opcode_for(Write, true, 1, 3), op::WRITE_MIDDLE);
        assert_eq!(opcode_for(Write, true, 2, 3), op::WRITE_LAST_IMM);
        assert_eq!(opcode_for(Write, false, 2, 3), op::WRITE_LAST);
        assert_eq!(opcode_for(Send, false, 1, 3), op::SEND_MIDDLE);
        assert_eq!(opcode_for(Send, true, 0, 1), op::SEND_ONLY_IMM);
        assert_eq!(opcode_for(Send, true, 1, 2), op::SEND_LAST_IMM);
        assert_eq!(opcode_for(ReadResponse, false, 0, 1), op::READ_RESPONSE_ONLY);
        assert_eq!(opcode_for(ReadResponse, false, 0, 2), op::READ_RESPONSE_FIRST);
        assert_eq!(opcode_for(ReadResponse, false, 1, 3), op::READ_RESPONSE_MIDDLE);
        assert_eq!(opcode_for(ReadResponse, false, 2, 3), op::READ_RESPONSE_LAST);
        assert_eq!(opcode_for(ReadRequest, false, 0, 1), op::READ_REQUEST);
    }

    #[test]
    fn recv_consumption_and_access() {
        let consumers: Vec<u8> = OPCODES.iter().filter(|o| o.consumes_recv).map(|o| o.opcode).collect();
        assert_eq!(consumers, [0, 1, 2, 3, 4, 5, op::WRITE_LAST_IMM, op::WRITE_ONLY_IMM]);
        assert_eq!(info(op::WRITE_MIDDLE).unwrap().access, ACCESS_REMOTE_WRITE);
        assert_eq!(info(op::READ_REQUEST).unwrap().access, ACCESS_REMOTE_READ);
        assert!(!info(op::ACK).unwrap().request && info(op::SEND_FIRST).unwrap().request);
        assert_eq!(send_cqe_opcode(WQE_OP_SEND_IMM), CQE_OP_SEND);
        assert_eq!(send_cqe_opcode(0x33), CQE_OP_RDMA_WRITE);
    }
}
