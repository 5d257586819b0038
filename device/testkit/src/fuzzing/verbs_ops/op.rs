//! The typed operations of the structure-aware verbs targets (`verbs_ops`, `verbs_pair`,
//! `dbpage`): [`Op`], decoded from fuzz input with the `arbitrary` crate's `Unstructured`
//! and encoded back to bytes for seeds. What each operation does is in
//! [`super::Harness::apply`]; this file only fixes the byte format.

use arbitrary::{Result, Unstructured};

/// One typed operation. Every field is raw input; [`super::Harness::apply`] gives it meaning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    CreateCq {
        cqn: u8,
        log_size: u8,
        vector: u8,
    },
    DestroyCq {
        cqn: u8,
    },
    /// A full QP context written and MODIFY_QP issued; `fabric` sends to [`super::PEER`].
    ModifyQp {
        qpn: u8,
        state: u8,
        dest: u8,
        access: u8,
        pd: u8,
        cqs: u8,
        sizes: u8,
        strides: u8,
        fabric: u8,
        mtu: u8,
        psn: u32,
    },
    /// QPs `a` and `b` created (if in RESET) and moved to RTS towards each other, on
    /// loopback or (`fabric` odd) through the wire.
    Connect {
        a: u8,
        b: u8,
        fabric: u8,
    },
    DestroyQp {
        qpn: u8,
    },
    QueryQp {
        qpn: u8,
    },
    /// MR over `pages` MTT entries, each (kind, value) (see `Harness::page`).
    RegMr {
        index: u8,
        pd: u8,
        access: u8,
        iova_kind: u8,
        iova: u64,
        length: u32,
        page_shift: u8,
        pages: Vec<(u8, u64)>,
    },
    DeregMr {
        index: u8,
    },
    /// A WQE in the SQ (`send` odd) or RQ and a doorbell for it; SGEs (addr kind, MR,
    /// offset, length, key kind).
    Post {
        qpn: u8,
        send: u8,
        opcode: u8,
        flags: u8,
        sges: Vec<(u8, u8, u32, u32, u8)>,
        remote: (u8, u8, u32),
        inline: u8,
    },
    /// A doorbell with the tracked producer index plus `delta`.
    Doorbell {
        qpn: u8,
        send: u8,
        delta: u16,
    },
    /// Consumes every valid CQE of `cqn` and reports the consumer index.
    Poll {
        cqn: u8,
    },
    Consumed {
        cqn: u8,
        ci: u16,
    },
    Arm {
        cqn: u8,
    },
    /// Maps `pages` more pages: after RAM, after a gap, near 2^64, or without memory.
    Map {
        kind: u8,
        pages: u8,
    },
    /// Unmaps extra map `which` (or RAM itself).
    Unmap {
        which: u8,
    },
    Reset,
    DmaCtrl {
        bits: u8,
    },
    /// A packet from [`super::PEER`] built from the input (`syndrome`: the AETH's low 7
    /// bits; bit 7 no RETH, bit 6 no AETH, bit 5 no immediate, bit 4 a P_Key from `psn`'s
    /// high bytes instead of the default partition's).
    Packet {
        qpn: u8,
        opcode: u8,
        psn: u32,
        va: u64,
        rkey: u32,
        len: u32,
        syndrome: u8,
        payload: u8,
    },
    /// A recorded packet back to the engine (`how`: as is, with its PSN or opcode changed,
    /// twice, or dropped; `pick` chooses which one, so reordering too).
    Reflect {
        pick: u8,
        how: u8,
    },
    Run {
        passes: u8,
    },
    /// The engine's (manual) clock moves `ms` milliseconds on, then a pass runs: the
    /// retransmission timer and the RNR wait expire when the input says so.
    Advance {
        ms: u16,
    },
    /// A driver's plain store into the doorbell page (BAR2): `field` picks SQ_PI, RQ_PI,
    /// an event index (which only the device should write) or CQ_CI, of object `index`.
    PageStore {
        field: u8,
        index: u8,
        value: u16,
    },
    /// The event loop going to sleep: event indices published, the page read again.
    Sleep,
    /// The GPU's BAR1 window: placed at its address, moved, or not decoding.
    Window {
        kind: u8,
    },
    /// A BAR1_APERTURE slot: the GPU window's address, empty, or another address.
    Aperture {
        slot: u8,
        kind: u8,
    },
}

const OPS: u8 = 25;

fn u64_le(u: &mut Unstructured<'_>) -> Result<u64> {
    let mut b = [0u8; 8];
    u.fill_buffer(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn u32_le(u: &mut Unstructured<'_>) -> Result<u32> {
    let mut b = [0u8; 4];
    u.fill_buffer(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn u16_le(u: &mut Unstructured<'_>) -> Result<u16> {
    let mut b = [0u8; 2];
    u.fill_buffer(&mut b)?;
    Ok(u16::from_le_bytes(b))
}

impl<'a> arbitrary::Arbitrary<'a> for Op {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let b = |u: &mut Unstructured<'a>| u.arbitrary::<u8>();
        Ok(match b(u)? % OPS {
            0 => Op::CreateCq { cqn: b(u)?, log_size: b(u)?, vector: b(u)? },
            1 => Op::DestroyCq { cqn: b(u)? },
            2 => Op::ModifyQp {
                qpn: b(u)?,
                state: b(u)?,
                dest: b(u)?,
                access: b(u)?,
                pd: b(u)?,
                cqs: b(u)?,
                sizes: b(u)?,
                strides: b(u)?,
                fabric: b(u)?,
                mtu: b(u)?,
                psn: u32_le(u)?,
            },
            3 => Op::Connect { a: b(u)?, b: b(u)?, fabric: b(u)? },
            4 => Op::DestroyQp { qpn: b(u)? },
            5 => Op::QueryQp { qpn: b(u)? },
            6 => {
                let (index, pd, access, iova_kind) = (b(u)?, b(u)?, b(u)?, b(u)?);
                let (iova, length, page_shift) = (u64_le(u)?, u32_le(u)?, b(u)?);
                let n = b(u)? % 9;
                let pages = (0..n).map(|_| Ok((b(u)?, u64_le(u)?))).collect::<Result<_>>()?;
                Op::RegMr { index, pd, access, iova_kind, iova, length, page_shift, pages }
            }
            7 => Op::DeregMr { index: b(u)? },
            8 => {
                let (qpn, send, opcode, flags) = (b(u)?, b(u)?, b(u)?, b(u)?);
                let n = b(u)? % 4;
                let sges = (0..n).map(|_| Ok((b(u)?, b(u)?, u32_le(u)?, u32_le(u)?, b(u)?))).collect::<Result<_>>()?;
                let remote = (b(u)?, b(u)?, u32_le(u)?);
                Op::Post { qpn, send, opcode, flags, sges, remote, inline: b(u)? }
            }
            9 => Op::Doorbell { qpn: b(u)?, send: b(u)?, delta: u16_le(u)? },
            10 => Op::Poll { cqn: b(u)? },
            11 => Op::Consumed { cqn: b(u)?, ci: u16_le(u)? },
            12 => Op::Arm { cqn: b(u)? },
            13 => Op::Map { kind: b(u)?, pages: b(u)? },
            14 => Op::Unmap { which: b(u)? },
            15 => Op::Reset,
            16 => Op::DmaCtrl { bits: b(u)? },
            17 => Op::Packet { qpn: b(u)?, opcode: b(u)?, psn: u32_le(u)?, va: u64_le(u)?, rkey: u32_le(u)?, len: u32_le(u)?, syndrome: b(u)?, payload: b(u)? },
            18 => Op::Reflect { pick: b(u)?, how: b(u)? },
            19 => Op::Run { passes: b(u)? },
            20 => Op::Advance { ms: u16_le(u)? },
            21 => Op::PageStore { field: b(u)?, index: b(u)?, value: u16_le(u)? },
            22 => Op::Sleep,
            23 => Op::Window { kind: b(u)? },
            _ => Op::Aperture { slot: b(u)?, kind: b(u)? },
        })
    }
}

impl Op {
    /// The bytes [`Op::arbitrary`] decodes back to this operation (for seeds).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let tag = |t: u8, out: &mut Vec<u8>| out.push(t);
        match self {
            Op::CreateCq { cqn, log_size, vector } => {
                tag(0, out);
                out.extend([*cqn, *log_size, *vector]);
            }
            Op::DestroyCq { cqn } => out.extend([1, *cqn]),
            Op::ModifyQp { qpn, state, dest, access, pd, cqs, sizes, strides, fabric, mtu, psn } => {
                out.extend([2, *qpn, *state, *dest, *access, *pd, *cqs, *sizes, *strides, *fabric, *mtu]);
                out.extend(psn.to_le_bytes());
            }
            Op::Connect { a, b, fabric } => out.extend([3, *a, *b, *fabric]),
            Op::DestroyQp { qpn } => out.extend([4, *qpn]),
            Op::QueryQp { qpn } => out.extend([5, *qpn]),
            Op::RegMr { index, pd, access, iova_kind, iova, length, page_shift, pages } => {
                out.extend([6, *index, *pd, *access, *iova_kind]);
                out.extend(iova.to_le_bytes());
                out.extend(length.to_le_bytes());
                out.extend([*page_shift, pages.len() as u8]);
                for (k, v) in pages {
                    out.push(*k);
                    out.extend(v.to_le_bytes());
                }
            }
            Op::DeregMr { index } => out.extend([7, *index]),
            Op::Post { qpn, send, opcode, flags, sges, remote, inline } => {
                out.extend([8, *qpn, *send, *opcode, *flags, sges.len() as u8]);
                for (k, mr, off, len, key) in sges {
                    out.extend([*k, *mr]);
                    out.extend(off.to_le_bytes());
                    out.extend(len.to_le_bytes());
                    out.push(*key);
                }
                out.extend([remote.0, remote.1]);
                out.extend(remote.2.to_le_bytes());
                out.push(*inline);
            }
            Op::Doorbell { qpn, send, delta } => {
                out.extend([9, *qpn, *send]);
                out.extend(delta.to_le_bytes());
            }
            Op::Poll { cqn } => out.extend([10, *cqn]),
            Op::Consumed { cqn, ci } => {
                out.extend([11, *cqn]);
                out.extend(ci.to_le_bytes());
            }
            Op::Arm { cqn } => out.extend([12, *cqn]),
            Op::Map { kind, pages } => out.extend([13, *kind, *pages]),
            Op::Unmap { which } => out.extend([14, *which]),
            Op::Reset => out.push(15),
            Op::DmaCtrl { bits } => out.extend([16, *bits]),
            Op::Packet { qpn, opcode, psn, va, rkey, len, syndrome, payload } => {
                out.extend([17, *qpn, *opcode]);
                out.extend(psn.to_le_bytes());
                out.extend(va.to_le_bytes());
                out.extend(rkey.to_le_bytes());
                out.extend(len.to_le_bytes());
                out.extend([*syndrome, *payload]);
            }
            Op::Reflect { pick, how } => out.extend([18, *pick, *how]),
            Op::Run { passes } => out.extend([19, *passes]),
            Op::Advance { ms } => {
                out.push(20);
                out.extend(ms.to_le_bytes());
            }
            Op::PageStore { field, index, value } => {
                out.extend([21, *field, *index]);
                out.extend(value.to_le_bytes());
            }
            Op::Sleep => out.push(22),
            Op::Window { kind } => out.extend([23, *kind]),
            Op::Aperture { slot, kind } => out.extend([24, *slot, *kind]),
        }
    }
}
