//! Entry points for the fuzz targets (`device/fuzz/`, cargo fuzz) and for the in-tree smoke
//! test that runs them on pseudo-random inputs in every `cargo test`: hostile bytes as
//! WQEs, contexts and MTT entries fed to the verbs engine, and hostile BAR0/config accesses
//! fed to the RNIC model. They must never panic, hang or touch memory outside guest RAM.

use crate::mem::dma::{test_ram, DmaMaps};
use crate::function::PciFunction;
use crate::msix::Interrupts;
use crate::rnic::Rnic;
use crate::topology::Topology;
use crate::verbs::abi::*;
use crate::verbs::engine::{Engine, Shared, Tables};
use crate::verbs::stats::Stats;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

const RAM: u64 = 1 << 20;

/// Guest RAM whose first bytes are `data` (QP/CQ/MR tables, MTT and rings all overlap it),
/// then commands and doorbells chosen by `data`, then the engine runs a bounded time.
pub fn engine(data: &[u8]) {
    let Ok((ram, fd)) = test_ram(RAM) else { return };
    let mut mem = DmaMaps::default();
    if mem.map(0x1000, RAM, Some(fd), 0).is_err() {
        return;
    }
    let _ = ram.write(0, &data[..data.len().min(RAM as usize)]);
    let shared = Shared { irqs: Arc::new(Interrupts::new(4)), stats: Arc::new(Stats::default()), last_error: Arc::new(AtomicU64::new(0)) };
    let mut e = Engine::new("fuzz".into(), shared);
    e.set_dma_ctrl(true, true);
    let tables = Tables { qp_ctx: 0x1000, cq_ctx: 0x1000 + 0x4000, mr_ctx: 0x1000 + 0x6000, mtt: 0x1000 + 0x8000, mtt_entries: 0x1000 };
    let ops = [CMD_CREATE_CQ, CMD_MODIFY_QP, CMD_REG_MR, CMD_QUERY_QP, CMD_DESTROY_CQ, CMD_DESTROY_QP, CMD_DEREG_MR, 0];
    for chunk in data.chunks(4).take(64) {
        let b = |i: usize| chunk.get(i).copied().unwrap_or(0);
        match b(0) % 6 {
            0..=1 => {
                e.command(&mem, ops[usize::from(b(1)) % ops.len()], u32::from(b(2) % 8), tables);
            }
            2 => e.sq_doorbell(u32::from(b(1) % 8), u16::from_le_bytes([b(2), b(3)])),
            3 => e.rq_doorbell(u32::from(b(1) % 8), u16::from_le_bytes([b(2), b(3)])),
            4 => e.cq_consumed(u32::from(b(1) % 8), u16::from_le_bytes([b(2), b(3)])),
            _ => e.cq_arm(u32::from(b(1) % 8)),
        }
        for _ in 0..4 {
            if !e.run(&mem, 16) {
                break;
            }
        }
    }
}

/// Arbitrary bytes as a received RoCEv2 datagram: decoding must never panic, and whatever
/// decodes must encode back to a datagram that decodes to the same packet.
pub fn packet(data: &[u8]) {
    use crate::fabric::packet::{Endpoints, Packet};
    use std::net::Ipv4Addr;
    let ep = Endpoints { src: Ipv4Addr::new(127, 0, 0, 11), dst: Ipv4Addr::new(127, 0, 0, 12), src_port: 4791 };
    if let Ok(p) = Packet::decode(data, &ep) {
        let again = Packet::decode(&p.encode(&ep), &ep);
        assert!(again.as_ref().is_ok_and(|q| q.bth.opcode == p.bth.opcode && q.payload == p.payload), "re-encoding changed the packet");
    }
}

/// A sequence of BAR0 and config-space accesses: each 12-byte record is
/// (kind, size, offset: u16, value: u64).
pub fn bar0(data: &[u8]) {
    let Ok(topo) = Topology::parse(
        "name = \"f\"\n[[node]]\nname = \"n\"\nport = [ { id = \"rp\", kind = \"root-port\" } ]\ndevice = [ { id = \"r\", kind = \"rnic\", port = \"rp\" } ]",
        "fuzz",
    ) else {
        return;
    };
    let Ok(mut rnic) = Rnic::new("fuzz".into(), &topo.nodes[0].devices[0], Vec::new(), None) else { return };
    for rec in data.chunks(12).take(256) {
        let mut r = [0u8; 12];
        r[..rec.len()].copy_from_slice(rec);
        let len = [1usize, 2, 4, 8][usize::from(r[1] % 4)];
        let offset = u64::from(u16::from_le_bytes([r[2], r[3]]));
        let value = u64::from_le_bytes(r[4..12].try_into().unwrap_or([0; 8]));
        let mut buf = value.to_le_bytes();
        match r[0] % 4 {
            0 => rnic.bar_read(0, offset, &mut buf[..len]),
            1 => rnic.bar_write(0, offset, &buf[..len]),
            2 => {
                let _ = rnic.config().read(offset as usize, &mut buf[..len]);
            }
            _ => {
                let _ = rnic.config_mut().write(offset as usize, &buf[..len]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// A deterministic xorshift generator: the smoke test needs no extra crate.
    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn engine_survives_random_memory_and_commands() {
        for seed in 0..200 {
            super::engine(&bytes(seed, 64 << 10));
        }
    }

    #[test]
    fn packet_decoding_survives_random_bytes() {
        for seed in 0..2000 {
            let len = (seed as usize * 7) % 300;
            super::packet(&bytes(seed, len));
        }
        // Valid packets with random corruption: must be rejected or decode consistently.
        use crate::fabric::packet::*;
        let ep = Endpoints { src: std::net::Ipv4Addr::new(127, 0, 0, 11), dst: std::net::Ipv4Addr::new(127, 0, 0, 12), src_port: 4791 };
        let p = Packet { bth: Bth { opcode: op::WRITE_ONLY, psn: 9, ..Default::default() }, reth: Some(Reth::default()), payload: vec![7; 33], ..Default::default() };
        let wire = p.encode(&ep);
        for seed in 0..500u64 {
            let mut w = wire.clone();
            let noise = bytes(seed, 2);
            let i = noise[0] as usize % w.len();
            w[i] ^= noise[1] | 1;
            super::packet(&w);
        }
    }

    #[test]
    fn bar0_survives_random_accesses() {
        for seed in 0..50 {
            super::bar0(&bytes(seed, 3072));
        }
    }
}
