//! Host-level fault tests, no QEMU: a hostile vfio-user client flooding the server with
//! bad BAR accesses (the log stays small, the statistics count every one), resource bounds
//! at their limit plus one, DMA_UNMAP while a WRITE into the unmapped memory is in flight,
//! device reset and FLR with WQEs queued and in flight, and a GPU's BAR1 moved while the
//! RNIC DMAs into it.

mod common;
use common::*;
use rnic_emu::hostdrv::ServerProcess;
use rnic_emu::regs::pci_ids::RNIC_BAR0_SIZE;
use rnic_emu::regs::rnic::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

const REGION_READ: u16 = 9;
const REGION_WRITE: u16 = 10;
const FLAG_ERROR: u32 = 0x20;

fn single_switch(dir: &std::path::Path) -> ServerProcess {
    ServerProcess::start(std::path::Path::new(bin()), &topology("single-switch"), dir, None).unwrap()
}

fn counter(server: &ServerProcess, function: &str, name: &str) -> u64 {
    let all = rnic_emu::serve::query_stats(&server.socket_dir, &server.node).unwrap();
    all[&format!("{}-{function}", server.node)][name].as_u64().unwrap_or_else(|| panic!("no counter {name} in {all}"))
}

/// One REGION_READ/REGION_WRITE message (vfio-user spec: header, offset, region, count, data).
fn access(out: &mut Vec<u8>, id: u16, write: bool, offset: u64, count: u32) {
    let data = if write { count } else { 0 };
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&(if write { REGION_WRITE } else { REGION_READ }).to_le_bytes());
    out.extend_from_slice(&(32 + data).to_le_bytes());
    out.extend_from_slice(&[0; 8]); // flags (command), error
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes()); // BAR0
    out.extend_from_slice(&count.to_le_bytes());
    out.resize(out.len() + data as usize, 0);
}

/// Reads one reply; returns whether it was an error reply.
fn reply(s: &mut UnixStream) -> bool {
    let mut hdr = [0u8; 16];
    s.read_exact(&mut hdr).expect("reply header (server hung or died?)");
    let size = u32::from_le_bytes(hdr[4..8].try_into().unwrap()) as usize;
    let mut body = vec![0u8; size.saturating_sub(16)];
    s.read_exact(&mut body).expect("reply payload");
    u32::from_le_bytes(hdr[8..12].try_into().unwrap()) & FLAG_ERROR != 0
}

/// A million bad BAR0 accesses, pipelined in batches: wrong widths, unmapped offsets and
/// offsets past the BAR. The server's log (info level, as `rnic-emu run` runs it) grows by
/// under 100 KB and `guest_errors` counts every access.
#[test]
fn a_million_bad_accesses_are_counted_not_logged() {
    const TOTAL: u64 = 1_000_000;
    const BATCH: u64 = 1000;
    let dir = tempfile::tempdir().unwrap();
    let server = single_switch(dir.path());
    let mut s = UnixStream::connect(server.socket("rnic0")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let log_before = std::fs::metadata(server.log_path()).unwrap().len();
    let kinds = [
        (false, RNIC_REG_ID, 3),               // odd width: all-ones, counted by the model
        (true, DMA_CTRL, 2),                   // narrow write to a 32-bit register: dropped
        (false, 0x7000, 4),                    // no register there
        (false, RNIC_BAR0_SIZE - 2, 4),        // runs past BAR0: refused by the transport
        (true, RNIC_BAR0_SIZE + 0x1000, 4),    // entirely outside BAR0
    ];
    let started = Instant::now();
    let (mut errors, mut msg) = (0u64, Vec::new());
    for batch in 0..TOTAL / BATCH {
        msg.clear();
        for i in 0..BATCH {
            let (write, offset, count) = kinds[((batch * BATCH + i) % kinds.len() as u64) as usize];
            access(&mut msg, i as u16, write, offset, count);
        }
        s.write_all(&msg).unwrap();
        errors += (0..BATCH).filter(|_| reply(&mut s)).count() as u64;
    }
    eprintln!("{TOTAL} bad accesses in {:?}", started.elapsed());
    assert_eq!(errors, 2 * TOTAL / kinds.len() as u64, "accesses outside BAR0 get error replies");
    // The device still answers properly on the same connection.
    let mut ok = Vec::new();
    access(&mut ok, 1, false, RNIC_REG_ID, 4);
    s.write_all(&ok).unwrap();
    assert!(!reply(&mut s));
    assert_eq!(counter(&server, "rnic0", "guest_errors"), TOTAL);
    let grown = std::fs::metadata(server.log_path()).unwrap().len() - log_before;
    let log = std::fs::read_to_string(server.log_path()).unwrap();
    eprintln!("log grew by {grown} bytes:\n{log}");
    assert!(grown < 100_000, "the log grew by {grown} bytes");
    assert!(log.contains("suppressed"), "the limiter reports what it dropped");
}
