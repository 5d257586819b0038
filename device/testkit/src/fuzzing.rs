//! Entry points for the fuzz targets (`device/fuzz/`, cargo fuzz) and for the in-tree smoke
//! test that runs them on pseudo-random inputs in every `cargo test`: hostile bytes as
//! WQEs, contexts and MTT entries fed to the verbs engine, and hostile BAR0/config accesses
//! fed to the RNIC model. They must never panic, hang or touch memory outside guest RAM.

use rnic_emu_core::contract::abi::*;
use rnic_emu_core::contract::counters::Stats;
use rnic_emu_core::function::PciFunction;
use rnic_emu_core::platform::mem::dma::{test_ram, DmaMaps};
use rnic_emu_core::platform::msix::Interrupts;
use rnic_emu_core::platform::topology::Topology;
use rnic_emu_core::rnic::verbs::engine::{Engine, Shared, Tables};
use rnic_emu_core::rnic::Rnic;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

const RAM: u64 = 1 << 20;

mod control;
pub mod frame;
mod layout;
mod stream_fds;
mod udp_rx;
mod verbs_ops;
mod wire;
pub use control::control;
pub use frame::frame;
pub use udp_rx::udp_rx;
pub use verbs_ops::{dbpage, verbs_ops, verbs_pair};

/// Guest RAM whose first bytes are `data` (QP/CQ/MR tables, MTT and rings all overlap it),
/// then commands and doorbells chosen by `data`, then the engine runs a bounded time.
pub fn engine(data: &[u8]) {
    let Ok((ram, fd)) = test_ram(RAM) else { return };
    let mut mem = DmaMaps::default();
    if mem.map(0x1000, RAM, Some(fd), 0).is_err() {
        return;
    }
    let _ = ram.write(0, &data[..data.len().min(RAM as usize)]);
    let shared = Shared {
        irqs: Arc::new(Interrupts::new(4)),
        stats: Arc::new(Stats::default()),
        last_error: Arc::new(AtomicU64::new(0)),
        fatal: Default::default(),
        clock: Default::default(),
    };
    let mut e = Engine::new("fuzz".into(), shared);
    e.set_dma_ctrl(true, true);
    let tables = Tables {
        qp_ctx: 0x1000,
        cq_ctx: 0x1000 + 0x4000,
        mr_ctx: 0x1000 + 0x6000,
        mtt: 0x1000 + 0x8000,
        mtt_entries: 0x1000,
        qp_path: 0,
        gid_table: 0,
        eq: 0x1000 + 0x9000,
        eq_log: 4,
    };
    let ops = [CMD_CREATE_CQ, CMD_MODIFY_QP, CMD_REG_MR, CMD_QUERY_QP, CMD_DESTROY_CQ, CMD_DESTROY_QP, CMD_DEREG_MR, CMD_SET_EQ, 0];
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
    use rnic_emu_core::rnic::fabric::packet::{Endpoints, Packet};
    use std::net::Ipv4Addr;
    let ep = Endpoints { src: Ipv4Addr::new(127, 0, 0, 11), dst: Ipv4Addr::new(127, 0, 0, 12), src_port: 4791 };
    if let Ok(p) = Packet::decode(data, &ep) {
        let again = Packet::decode(&p.encode(&ep), &ep);
        assert!(again.as_ref().is_ok_and(|q| q.bth.opcode == p.bth.opcode && q.payload == p.payload), "re-encoding changed the packet");
    }
}

/// Where the `bar0` target's guest RAM appears first on the bus, and its size.
const BAR0_RAM_BASE: u64 = 0x10_0000;
const BAR0_RAM: u64 = 1 << 20;

/// The bus address record `r` maps or unmaps and its size: slices of the target's RAM
/// placed adjacent to RAM, after a gap, just below 2^64, or at a raw address.
fn bar0_map(r: &[u8; 12]) -> (u64, u64, u64) {
    let value = u64::from_le_bytes(r[4..12].try_into().unwrap_or([0; 8]));
    let pages = u64::from(r[2] % 64) + 1;
    let size = pages * 4096;
    let fd_offset = (u64::from(r[3]) % (BAR0_RAM / 4096 - pages + 1)) * 4096;
    let iova = match r[1] % 4 {
        0 => BAR0_RAM_BASE + (value % 512) * 4096,
        1 => BAR0_RAM_BASE + BAR0_RAM + (value % 64) * 0x10_0000,
        2 => 0u64.wrapping_sub(size) & !0xfff,
        _ => value & !0xfff,
    };
    (iova, size, fd_offset)
}

/// A sequence of 12-byte records (kind, size, offset: u16, value: u64) on an RNIC whose
/// engine runs inline: BAR0 and config-space reads and writes (register programming,
/// commands, doorbells, resets), DMA maps and unmaps of slices of one guest RAM (adjacent,
/// after gaps, overlapping, near 2^64, without memory), 8-byte guest RAM writes (contexts,
/// MTT entries, WQEs for the commands to find) and BAR2 (doorbell page) accesses through
/// the socket path. The first map places all of RAM at `BAR0_RAM_BASE`.
pub fn bar0(data: &[u8]) {
    bar0_counters(data);
}

/// [`bar0`], returning the RNIC's counters as they were before the final reset.
fn bar0_counters(data: &[u8]) -> Vec<(&'static str, u64)> {
    let Ok(topo) = Topology::parse(
        "name = \"f\"\n[[node]]\nname = \"n\"\nport = [ { id = \"rp\", kind = \"root-port\" } ]\ndevice = [ { id = \"r\", kind = \"rnic\", port = \"rp\" } ]",
        "fuzz",
    ) else {
        return Vec::new();
    };
    let Ok(mut rnic) = Rnic::new("fuzz".into(), &topo.nodes[0].devices[0], Vec::new(), None) else { return Vec::new() };
    // As a driver's probe does (memory decoding, bus mastering); the input may turn them off.
    let _ = rnic.config_mut().write(0x04, &0x6u16.to_le_bytes());
    rnic.config_written();
    let Ok((ram, fd)) = test_ram(BAR0_RAM) else { return Vec::new() };
    let map =
        |rnic: &Rnic, iova: u64, size: u64, fd: Option<std::fs::File>, off: u64| rnic.dma().write().unwrap_or_else(|p| p.into_inner()).map(iova, size, fd, off);
    let _ = map(&rnic, BAR0_RAM_BASE, BAR0_RAM, fd.try_clone().ok(), 0);
    for rec in data.chunks(12).take(256) {
        let mut r = [0u8; 12];
        r[..rec.len()].copy_from_slice(rec);
        let len = [1usize, 2, 4, 8][usize::from(r[1] % 4)];
        let offset = u64::from(u16::from_le_bytes([r[2], r[3]]));
        let value = u64::from_le_bytes(r[4..12].try_into().unwrap_or([0; 8]));
        let mut buf = value.to_le_bytes();
        match r[0] % 8 {
            0 => rnic.bar_read(0, offset, &mut buf[..len]),
            1 => rnic.bar_write(0, offset, &buf[..len]),
            2 => {
                let _ = rnic.config().read(offset as usize, &mut buf[..len]);
            }
            3 => {
                let _ = rnic.config_mut().write(offset as usize, &buf[..len]);
                rnic.config_written();
            }
            4 => {
                let (iova, size, fd_offset) = bar0_map(&r);
                let backing = if r[1] & 0x80 == 0 { fd.try_clone().ok() } else { None };
                let _ = map(&rnic, iova, size, backing, fd_offset);
            }
            5 => {
                let (iova, size, _) = bar0_map(&r);
                let _ = rnic.dma().write().unwrap_or_else(|p| p.into_inner()).unmap(iova, size);
            }
            6 => {
                let _ = ram.write((offset << 3 | u64::from(r[1] >> 2 & 1) << 19) & (BAR0_RAM - 8), &buf);
            }
            _ if r[1] & 0x80 == 0 => rnic.bar_read(rnic_emu_core::regs::pci_ids::RNIC_DB_BAR, offset << 4 | u64::from(r[1] & 0x70), &mut buf[..len]),
            _ => rnic.bar_write(rnic_emu_core::regs::pci_ids::RNIC_DB_BAR, offset << 4 | u64::from(r[1] & 0x70), &buf[..len]),
        }
    }
    let counters = rnic.stats();
    rnic.reset();
    counters
}

#[cfg(test)]
mod tests {
    /// Deterministic pseudo-random bytes of `seed` ([`super::smoke_bytes`]).
    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        super::smoke_bytes(seed, n)
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
        use rnic_emu_core::rnic::fabric::packet::*;
        let ep = Endpoints { src: std::net::Ipv4Addr::new(127, 0, 0, 11), dst: std::net::Ipv4Addr::new(127, 0, 0, 12), src_port: 4791 };
        let p = Packet {
            bth: Bth { opcode: op::WRITE_ONLY, psn: 9, ..Default::default() },
            reth: Some(Reth::default()),
            payload: vec![7; 33],
            ..Default::default()
        };
        let wire = p.encode(&ep);
        for seed in 0..500u64 {
            let mut w = wire.clone();
            let noise = bytes(seed, 2);
            let i = noise[0] as usize % w.len();
            w[i] ^= noise[1] | 1;
            super::packet(&w);
        }
    }

    /// The register-level seed moves data: two WRITEs on a loopback pair complete.
    #[test]
    fn the_bar0_session_programs_the_engine_through_registers() {
        let c: std::collections::HashMap<_, _> = super::bar0_counters(&super::bar0_session()).into_iter().collect();
        assert!(c["Commands"] >= 8 && c["CommandErrors"] == 0, "{c:?}");
        assert!(c["BytesWritten"] >= 1024 && c["Cqes"] >= 2 && c["Doorbells"] == 2, "{c:?}");
    }

    #[test]
    fn bar0_survives_random_accesses() {
        for seed in 0..50 {
            super::bar0(&bytes(seed, 3072));
        }
    }
}

// ---------------------------------------------------------------------------------------
// vfio-user message streams: arbitrary bytes sent over a real socket to the rust-vmm
// `vfio_user::Server` with our `vfio::Backend` behind it, exactly as `rnic-emu serve`
// runs them (headers, sizes, VERSION, region info/read/write, DMA_MAP/UNMAP without fds,
// IRQ info, SET_IRQS, reset). A byte stream cannot carry fds, so every DMA_MAP is fd-less.

use rnic_emu_server::vfio::Backend;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering as AtomicOrdering;
use std::sync::{Mutex, Once, OnceLock};

/// Panics raised inside the vfio-user library by a hostile message (for instance a
/// VERSION shorter than its header, or version data without a NUL). `rnic-emu serve`
/// catches them (serve.rs) and drops only that connection; the stream target does the
/// same and counts them here. A panic anywhere else is a crash.
pub static LIBRARY_PANICS: AtomicU64 = AtomicU64::new(0);

struct StreamTarget {
    server: vfio_user::Server,
    backend: Backend,
    /// The served function (what the backend drives).
    #[cfg_attr(not(test), allow(dead_code))]
    function: rnic_emu_server::vfio::SharedFunction,
    socket: std::path::PathBuf,
    vendor_id: u16,
    _dir: tempfile::TempDir,
}

/// Builds the served function: the RNIC (`gpu` false) or a 1 MiB-BAR1 GPU.
fn stream_target(gpu: bool) -> Option<StreamTarget> {
    let kind = if gpu { "gpu\", bar1_mib = 1" } else { "rnic\"" };
    let toml = format!(
        "name = \"f\"\n[[node]]\nname = \"n\"\nport = [ {{ id = \"rp\", kind = \"root-port\" }} ]\ndevice = [ {{ id = \"d\", kind = \"{kind}, port = \"rp\" }} ]"
    );
    let topo = Topology::parse(&toml, "fuzz").ok()?;
    let dev = &topo.nodes[0].devices[0];
    let f: rnic_emu_server::vfio::SharedFunction = if gpu {
        let mem = rnic_emu_core::platform::shm::SharedMemory::memfd("fuzz-bar1", dev.bar1_size()).ok()?;
        Arc::new(Mutex::new(rnic_emu_core::gpu::Gpu::new("fuzz-gpu".into(), dev, mem).ok()?))
    } else {
        Arc::new(Mutex::new(Rnic::new("fuzz-rnic".into(), dev, Vec::new(), None).ok()?))
    };
    let (regions, irqs, vendor_id) = {
        let g = rnic_emu_server::vfio::lock(&f);
        let mut id = [0u8; 2];
        g.config().read(0, &mut id);
        (rnic_emu_server::vfio::regions(&*g), rnic_emu_server::vfio::irqs(&*g), u16::from_le_bytes(id))
    };
    let dir = tempfile::tempdir().ok()?;
    let socket = dir.path().join("fuzz.sock");
    let server = vfio_user::Server::new(&socket, true, irqs, regions).ok()?;
    Some(StreamTarget { server, backend: Backend::new(f.clone()), function: f, socket, vendor_id, _dir: dir })
}

fn survive_library_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.location().is_some_and(|l| l.file().contains("vfio_user-")) || rnic_emu_server::panics::raised_by_the_library(module_path!()) {
                if LIBRARY_PANICS.fetch_add(1, AtomicOrdering::Relaxed) == 0 {
                    eprintln!("vfio_stream: the vfio-user library panicked on a message ({info}); the connection ends, the server lives on (counted, not reported again)");
                }
            } else {
                previous(info);
            }
        }));
    });
}

/// Sends all of `data` (without SIGPIPE: the server may hang up first), half-closes, and
/// reads replies until the server closes the connection.
fn client(mut s: UnixStream, data: &[u8]) {
    use std::io::Read;
    let mut sent = 0;
    while sent < data.len() {
        let rest = &data[sent..];
        // SAFETY: send() reads at most rest.len() bytes from a live slice on an owned socket.
        let n = unsafe { libc::send(s.as_raw_fd(), rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
        if n <= 0 {
            break;
        }
        sent += n as usize;
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut sink = vec![0u8; 1 << 16];
    while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
}

/// First byte: which function (bit 0: GPU, else RNIC) and how the rest is sent (bit 1:
/// framed, messages that may carry DMA_MAP memfds, `fuzzing::stream_fds`; else the
/// client's raw byte stream).
/// After the connection ends the function is reset as for a departing client and must
/// still answer a config-space read with its vendor ID.
pub fn vfio_stream(data: &[u8]) {
    use vfio_user::ServerBackend;
    static TARGETS: [OnceLock<Option<Mutex<StreamTarget>>>; 2] = [OnceLock::new(), OnceLock::new()];
    let Some((&select, stream)) = data.split_first() else { return };
    let gpu = select & 1 == 1;
    let Some(target) = TARGETS[usize::from(gpu)].get_or_init(|| stream_target(gpu).map(Mutex::new)) else { return };
    survive_library_panics();
    let mut guard = target.lock().unwrap_or_else(|p| p.into_inner());
    let t = &mut *guard;
    let Ok(s) = UnixStream::connect(&t.socket) else { return };
    // A joined thread, not a scoped one: scope() returns when the closure is done, join()
    // when the thread has exited, so no thread of this input outlives it (LeakSanitizer
    // would count its thread-local destructor record as a leak).
    let bytes = stream.to_vec();
    let framed = select & 2 == 2;
    let Ok(sender) = std::thread::Builder::new().spawn(move || if framed { stream_fds::client(s, &bytes) } else { client(s, &bytes) }) else { return };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.server.run(&mut t.backend)));
    let _ = sender.join();
    t.backend.disconnected();
    let mut id = [0u8; 2];
    let cfg = vfio_bindings::bindings::vfio::VFIO_PCI_CONFIG_REGION_INDEX;
    assert!(t.backend.region_read(cfg, 0, &mut id).is_ok(), "config space read refused after a stream");
    assert_eq!(u16::from_le_bytes(id), t.vendor_id, "the function no longer serves its config space");
}

// ---------------------------------------------------------------------------------------
// The kept corpus (device/fuzz/corpus/<target>/): seed inputs built from what the unit and
// smoke tests feed the same entry points, and the replay of every corpus file, which runs
// in `cargo test`.

/// A fuzz target's entry point.
pub type Entry = fn(&[u8]);

/// The fuzz targets and their entry points.
pub const TARGETS: &[(&str, Entry)] = &[
    ("engine", engine),
    ("bar0", bar0),
    ("packet", packet),
    ("vfio_stream", vfio_stream),
    ("verbs_ops", verbs_ops),
    ("verbs_pair", verbs_pair),
    ("dbpage", dbpage),
    ("frame", frame),
    ("control", control),
    ("udp_rx", udp_rx),
];

/// The pseudo-random bytes the smoke tests use: `n` bytes of the seeded generator.
pub fn smoke_bytes(seed: u64, n: usize) -> Vec<u8> {
    rnic_emu_core::prng::Rng::new(seed).bytes(n)
}

/// One vfio-user message: header (id, command, size, flags, error) and payload.
pub fn vfio_message(id: u16, command: u16, payload: &[u8]) -> Vec<u8> {
    let mut m = id.to_le_bytes().to_vec();
    m.extend_from_slice(&command.to_le_bytes());
    m.extend_from_slice(&(16 + payload.len() as u32).to_le_bytes());
    m.extend_from_slice(&[0; 8]);
    m.extend_from_slice(payload);
    m
}

/// A `bar0` input as a driver would program the RNIC: context tables, a CQ, an MR, a
/// loopback QP pair to RTS (contexts written into guest RAM, commands through
/// RNIC_REG_CMD), a WRITE posted and rung through WQE_DB_IDX, then maps adjacent, after a
/// gap, overlapping and near 2^64, a partial unmap, another WRITE, and the doorbell page.
fn bar0_session() -> Vec<u8> {
    use rnic_emu_core::regs::rnic::*;
    use vm_memory::ByteValued;
    let rec = |kind: u8, size: u8, off: u16, v: u64| {
        let mut r = vec![kind, size];
        r.extend_from_slice(&off.to_le_bytes());
        r.extend_from_slice(&v.to_le_bytes());
        r
    };
    let base = BAR0_RAM_BASE;
    let mut out = Vec::new();
    let ram = |out: &mut Vec<u8>, at: u64, bytes: &[u8]| {
        for (i, c) in bytes.chunks(8).enumerate() {
            let o = at + i as u64 * 8;
            let mut v = [0u8; 8];
            v[..c.len()].copy_from_slice(c);
            out.extend(rec(6, ((o >> 19) as u8 & 1) << 2, (o >> 3) as u16, u64::from_le_bytes(v)));
        }
    };
    // 8-byte registers take 8-byte writes, the others 4-byte ones.
    let reg = |out: &mut Vec<u8>, off: u64, v: u64| {
        let wide = REGS.iter().any(|r| r.offset == off && r.width == 8);
        out.extend(rec(1, if wide { 3 } else { 2 }, off as u16, v))
    };
    let cmd = |out: &mut Vec<u8>, op: u32, index: u32| out.extend(rec(1, 2, RNIC_REG_CMD as u16, u64::from(op) << CMD_OP_SHIFT | u64::from(index)));
    for (r, v) in [(QP_CTX_BASE, base), (CQ_CTX_BASE, base + 0x1000), (MR_CTX_BASE, base + 0x2000), (MTT_BASE, base + 0x3000), (MTT_ENTRIES, 64)] {
        reg(&mut out, r, v);
    }
    ram(&mut out, 0x1000 + 32, CqCtx { ring_addr: base + 0x3_0000, log_size: 6, ..Default::default() }.as_slice());
    cmd(&mut out, CMD_CREATE_CQ, 1);
    ram(&mut out, 0x3000, &[(base + 0x4_0000).to_le_bytes(), (base + 0x4_1000).to_le_bytes()].concat());
    ram(&mut out, 0x2000 + 32, MrCtx { iova: 0x7000_0000, length: 8192, npages: 2, access: 7, key: 0x11, page_shift: 12, ..Default::default() }.as_slice());
    cmd(&mut out, CMD_REG_MR, 1);
    let lkey = 1 << 8 | 0x11;
    for (qpn, dest) in [(1u32, 2u32), (2, 1)] {
        let sq = base + 0x1_0000 + u64::from(qpn) * 0x4000;
        let mut ctx = QpCtx {
            state: QPS_INIT,
            sq_log_size: 2,
            rq_log_size: 2,
            sq_log_stride: 6,
            rq_log_stride: 6,
            access: 7,
            send_cqn: 1,
            recv_cqn: 1,
            sq_addr: sq,
            rq_addr: sq + 0x2000,
            ..Default::default()
        };
        for state in [QPS_INIT, QPS_RTR, QPS_RTS] {
            (ctx.state, ctx.dest_qpn, ctx.path_mtu) = (state, dest, 10);
            ram(&mut out, u64::from(qpn) * QpCtx::ABI.size as u64, ctx.as_slice());
            cmd(&mut out, CMD_MODIFY_QP, qpn);
        }
    }
    let wqe = WqeHeader { opcode: WQE_OP_RDMA_WRITE, flags: 1, num_sge: 1, wr_id: 7, remote_addr: 0x7000_1000, rkey: lkey, ..Default::default() };
    let sge = Sge { addr: 0x7000_0000, length: 512, lkey };
    ram(&mut out, 0x1_4000, &[wqe.as_slice(), sge.as_slice()].concat());
    reg(&mut out, WQE_DB_IDX, 1 << DB_OBJECT_SHIFT | 1);
    out.extend(rec(0, 2, RNIC_REG_CMD_STATUS as u16, 0));
    out.extend(rec(0, 3, STATS_BASE as u16, 0));
    // Maps: a slice adjacent to RAM, one after a gap, one near 2^64, one overlapping RAM,
    // one without memory; an unmap of part of RAM (maps go whole or not at all) before a
    // second WRITE.
    for (how, pages, fd_page) in [(0u8, 4u8, 0u8), (1, 1, 8), (2, 2, 3), (0, 1, 1), (0x81, 3, 0)] {
        out.extend(rec(4, how, u16::from(pages - 1) | u16::from(fd_page) << 8, if how & 3 == 0 { 256 } else { 2 }));
    }
    ram(&mut out, 0x1_4040, &[wqe.as_slice(), sge.as_slice()].concat());
    out.extend(rec(5, 3, 0x0f, base + 0x4_0000));
    reg(&mut out, WQE_DB_IDX, 1 << DB_OBJECT_SHIFT | 2);
    reg(&mut out, CQE_CONS_IDX, 1 << DB_OBJECT_SHIFT | 1);
    reg(&mut out, CQ_ARM, 1 << DB_OBJECT_SHIFT);
    reg(&mut out, DMA_CTRL, DMA_CTRL_ENABLE | DMA_CTRL_DB_PAGE);
    out.extend(rec(7, 2, 0x100, 3)); // SQ_PI of QP 1 on the page (socket path)
    out.extend(rec(7, 0x82, 0x100, 0));
    out
}

fn le(fields: &[u64], widths: &[usize]) -> Vec<u8> {
    fields.iter().zip(widths).flat_map(|(v, w)| v.to_le_bytes()[..*w].to_vec()).collect()
}

/// A client session as QEMU (and the host tests' rust-vmm client) opens one, plus the
/// hostile requests of host_server.rs: every command the server implements.
fn vfio_session(gpu: bool) -> Vec<u8> {
    let mut s = vec![u8::from(gpu)];
    let caps = b"{\"capabilities\":{\"max_msg_fds\":16,\"max_data_xfer_size\":1048576,\"migration\":{\"pgsize\":4096}}}\0";
    let mut version = le(&[0, 1], &[2, 2]);
    version.extend_from_slice(caps);
    let access = |region: u64, offset: u64, count: u64, data: &[u8]| {
        let mut p = le(&[offset, region, count], &[8, 4, 4]);
        p.extend_from_slice(data);
        p
    };
    let msgs: Vec<(u16, Vec<u8>)> = vec![
        (1, version),
        (4, le(&[16, 0, 0, 0], &[4, 4, 4, 4])),                        // DEVICE_GET_INFO
        (5, le(&[32, 0, 0, 0, 0, 0], &[4, 4, 4, 4, 8, 8])),            // GET_REGION_INFO config
        (5, le(&[32, 0, 1, 0, 0, 0], &[4, 4, 4, 4, 8, 8])),            // GET_REGION_INFO BAR1
        (7, le(&[16, 0, 4, 0], &[4, 4, 4, 4])),                        // GET_IRQ_INFO MSI-X
        (9, access(7, 0, 4, &[])),                                     // config read
        (10, access(7, 4, 2, &[6, 0])),                                // enable decoding
        (9, access(0, 0, 4, &[])),                                     // BAR0 read
        (10, access(0, 0x20, 4, &1u32.to_le_bytes())),                 // BAR0 write
        (9, access(1, 0x100, 8, &[])),                                 // BAR1 read
        (9, access(0, 0xfff_ffff, 4, &[])),                            // past the BAR
        (2, le(&[32, 3, 0, 0x8000_0000, 0x1000], &[4, 4, 8, 8, 8])),   // DMA_MAP, no fd
        (2, le(&[32, 3, 0, u64::MAX - 10, 0x1000], &[4, 4, 8, 8, 8])), // wrapping map
        (3, le(&[32, 0, 0x8000_0000, 0x1000], &[4, 4, 8, 8])),         // DMA_UNMAP
        (3, le(&[32, 2, 0, 0], &[4, 4, 8, 8])),                        // DMA_UNMAP all
        (8, le(&[20, 0x24, 2, 0, 1], &[4, 4, 4, 4, 4])),               // SET_IRQS fd-less
        (8, le(&[20, 0x21, 2, 0, 0], &[4, 4, 4, 4, 4])),               // SET_IRQS trigger none
        (8, le(&[20, 0x24, 9, 0, 1], &[4, 4, 4, 4, 4])),               // unsupported index
        (13, Vec::new()),                                              // DEVICE_RESET
        (11, le(&[0, 16], &[8, 8])),                                   // DMA_READ (unsupported)
    ];
    for (i, (cmd, payload)) in msgs.iter().enumerate() {
        s.extend_from_slice(&vfio_message(i as u16, *cmd, payload));
    }
    s
}

/// Seed inputs of `target`.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    match target {
        "engine" => (0..4).map(|seed| smoke_bytes(seed, 4096)).collect(),
        "verbs_ops" => verbs_ops::seeds(),
        "verbs_pair" => verbs_ops::pair_seeds(),
        "dbpage" => verbs_ops::page_seeds(),
        "frame" => frame::seeds(),
        "control" => control::seeds(),
        "udp_rx" => udp_rx::seeds(),
        "bar0" => {
            // (kind, size, offset, value): ID read, DMA_CTRL write, reset magic, doorbell,
            // a narrow read, config reads and a command write, as the unit tests do.
            let rec = |kind: u8, size: u8, off: u16, v: u64| {
                let mut r = vec![kind, size];
                r.extend_from_slice(&off.to_le_bytes());
                r.extend_from_slice(&v.to_le_bytes());
                r
            };
            vec![
                [rec(0, 2, 0, 0), rec(1, 2, 0x20, 0), rec(0, 2, 0x24, 0), rec(1, 2, 0x10, 0x5245_5345)].concat(),
                [rec(2, 1, 0, 0), rec(3, 1, 4, 6), rec(2, 2, 0x10, 0), rec(3, 2, 0x10, 0xffff_ffff)].concat(),
                smoke_bytes(1, 3072),
                bar0_session(),
            ]
        }
        "packet" => {
            use rnic_emu_core::rnic::fabric::packet::*;
            let ep = Endpoints { src: std::net::Ipv4Addr::new(127, 0, 0, 11), dst: std::net::Ipv4Addr::new(127, 0, 0, 12), src_port: 4791 };
            let bth = |opcode| Bth { opcode, psn: 9, dest_qp: 1, ..Default::default() };
            let pkts = [
                Packet { bth: bth(op::WRITE_ONLY), reth: Some(Reth { va: 0x1000, rkey: 0x15a, len: 33 }), payload: vec![7; 33], ..Default::default() },
                Packet { bth: bth(op::SEND_ONLY_IMM), imm: Some(0xfeed), payload: vec![1; 64], ..Default::default() },
                Packet { bth: bth(op::READ_REQUEST), reth: Some(Reth { va: 0x2000, rkey: 0x25a, len: 4096 }), ..Default::default() },
                Packet { bth: bth(op::ACK), aeth: Some(Aeth { syndrome: syndrome::ACK, msn: 3 }), ..Default::default() },
                Packet { bth: bth(op::COMPARE_SWAP), atomic: Some(AtomicEth { va: 0x3000, rkey: 0x35a, swap_add: 2, compare: 1 }), ..Default::default() },
                Packet { bth: bth(op::ATOMIC_ACK), aeth: Some(Aeth { syndrome: syndrome::ACK, msn: 4 }), atomic_ack: Some(1), ..Default::default() },
            ];
            let mut out: Vec<Vec<u8>> = pkts.iter().map(|p| p.encode(&ep)).collect();
            // A FETCH_ADD cut inside its AtomicETH.
            let mut short = Packet { bth: bth(op::FETCH_ADD), atomic: Some(AtomicEth::default()), ..Default::default() }.encode(&ep);
            short.truncate(BTH_LEN + 10);
            out.push(short);
            out
        }
        "vfio_stream" => vec![vfio_session(false), vfio_session(true), [&[0u8][..], &smoke_bytes(3, 512)].concat(), stream_fds::seed()],
        _ => Vec::new(),
    }
}

/// The kept corpus of `target`: `device/fuzz/corpus/<target>/`.
pub fn corpus_dir(target: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target)
}

#[cfg(test)]
mod corpus_tests {
    use super::*;

    /// Every kept corpus input once through its entry point (the fuzzers' regression set).
    /// `RNIC_EMU_FUZZ_EXTRA_CORPUS=dir` adds `dir/<target>/` (`make fuzz-coverage` of what
    /// a fuzzing run found).
    #[test]
    fn corpus_replay() {
        let extra = std::env::var_os("RNIC_EMU_FUZZ_EXTRA_CORPUS").filter(|d| !d.is_empty()).map(std::path::PathBuf::from);
        for (target, entry) in TARGETS {
            let dir = corpus_dir(target);
            let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|f| f.unwrap().path()).collect();
            assert!(!files.is_empty(), "{} holds no corpus", dir.display());
            if let Some(Ok(more)) = extra.as_ref().map(|d| std::fs::read_dir(d.join(target))) {
                files.extend(more.filter_map(|f| f.ok()).map(|f| f.path()));
            }
            for path in files {
                let data = std::fs::read(&path).unwrap();
                // Name the input that failed (the panic's own message is printed above it).
                if std::panic::catch_unwind(|| entry(&data)).is_err() {
                    panic!("{target}: the input {} failed", path.display());
                }
            }
        }
    }

    /// (Re)writes the seed inputs into the kept corpus: `make fuzz-seed`.
    #[test]
    #[ignore = "writes device/fuzz/corpus; run by make fuzz-seed"]
    fn write_seed_corpus() {
        for (target, _) in TARGETS {
            let dir = corpus_dir(target);
            std::fs::create_dir_all(&dir).unwrap();
            for (i, s) in seeds(target).iter().enumerate() {
                std::fs::write(dir.join(format!("seed-{i}")), s).unwrap();
            }
            if *target == "verbs_ops" {
                let mut wrap = Vec::new();
                verbs_ops::mtt_wrap_ops().iter().for_each(|op| op.encode(&mut wrap));
                std::fs::write(dir.join("regression-mtt-wrap"), wrap).unwrap();
            }
        }
    }

    #[test]
    fn vfio_streams_survive_random_and_mutated_sessions() {
        for seed in 0..50u64 {
            let mut s = vfio_session(seed % 2 == 1);
            let noise = smoke_bytes(seed, 8);
            for pair in noise.chunks(2) {
                let i = 1 + usize::from(pair[0]) * s.len() / 256 % (s.len() - 1);
                s[i] ^= pair[1] | 1;
            }
            vfio_stream(&s);
            vfio_stream(&smoke_bytes(seed, 300));
        }
    }

    #[test]
    fn a_framed_stream_maps_memfds_truncates_one_and_the_server_lives_on() {
        let s = stream_fds::seed();
        // Up to the UNMAP_ALL: the memfd maps arrived (the server holds them), the
        // truncated one is still mapped because the partial unmap of it was refused.
        let mut t = stream_target(false).unwrap();
        let c = UnixStream::connect(&t.socket).unwrap();
        let upto = s.len() - (1 + 16 + 24);
        let bytes = s[1..upto].to_vec();
        let sender = std::thread::spawn(move || stream_fds::client(c, &bytes));
        let _ = t.server.run(&mut t.backend);
        sender.join().unwrap();
        {
            let f = rnic_emu_server::vfio::lock(&t.function);
            let maps = f.dma().read().unwrap();
            assert_eq!(maps.len(), 2, "the truncated map and the read-only one remain");
            let mut b = [0u8; 4];
            assert!(maps.read(0x6000_0000, &mut b).is_ok(), "the read-only memfd map is readable");
            assert!(maps.write(0x6000_0000, &b).is_err(), "and not writable");
            assert!(f.stats().contains(&("GuestErrors", 1)), "the partial unmap was refused and counted");
        }
        t.backend.disconnected();
        vfio_stream(&s);
        for seed in 0..20u64 {
            let mut m = s.clone();
            for pair in smoke_bytes(seed, 6).chunks(2) {
                let i = 1 + usize::from(pair[0]) * m.len() / 256 % (m.len() - 1);
                m[i] ^= pair[1] | 1;
            }
            vfio_stream(&m);
        }
    }
}
