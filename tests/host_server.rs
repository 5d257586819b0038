//! Host-level tests: drive the real `rnic-emu serve` process over its vfio-user sockets
//! with rust-vmm's client (no QEMU): config space and BAR sizing through the socket,
//! BAR0 registers, GPU BAR1 shared memory, MSI-X eventfds, DMA maps, hostile requests,
//! and a server that keeps serving across disconnects.

mod common;
use common::*;
use rnic_emu_testkit::raw::Raw;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use vfio_bindings::bindings::vfio::*;
use vfio_user::Client;

use rnic_emu_core::regs::{gpu, rnic};

const CONFIG: u32 = VFIO_PCI_CONFIG_REGION_INDEX;

struct Node {
    _proc: Proc,
    dir: tempfile::TempDir,
}

/// `rnic-emu serve` of single-switch with its sockets in `dir` and GPU memory in `mem`.
fn serve(dir: &std::path::Path, mem: &std::path::Path) -> Command {
    let mut c = Command::new(bin());
    c.args(["serve", "--topology"]).arg(topology("single-switch")).arg("--socket-dir").arg(dir).arg("--gpu-mem-dir").arg(mem).stdin(Stdio::null());
    c
}

impl Node {
    fn start() -> Node {
        let dir = tempfile::tempdir().unwrap();
        let mem = dir.path().join("mem");
        std::fs::create_dir(&mem).unwrap();
        let child = serve(dir.path(), &mem).spawn().unwrap();
        let node = Node { _proc: Proc(child), dir };
        let (r, g) = (node.sock("rnic0"), node.sock("gpu0"));
        assert!(wait_until(Duration::from_secs(10), || r.exists() && g.exists()), "server did not come up");
        node
    }

    fn sock(&self, dev: &str) -> PathBuf {
        self.dir.path().join(format!("node0-{dev}.sock"))
    }

    fn client(&self, dev: &str) -> Client {
        // The socket file appears at bind(), a moment before listen(): retry a refused connect.
        let mut client = None;
        wait_until(Duration::from_secs(10), || {
            client = Client::new(&self.sock(dev)).ok();
            client.is_some()
        });
        client.unwrap_or_else(|| Client::new(&self.sock(dev)).expect("connecting to the server"))
    }

    fn gpu_mem(&self) -> PathBuf {
        self.dir.path().join("mem/node0-gpu0.bar1")
    }
}

fn rd32(c: &mut Client, region: u32, off: u64) -> u32 {
    let mut b = [0u8; 4];
    c.region_read(region, off, &mut b).unwrap();
    u32::from_le_bytes(b)
}

fn wr32(c: &mut Client, region: u32, off: u64, v: u32) {
    c.region_write(region, off, &v.to_le_bytes()).unwrap();
}

fn eventfd() -> File {
    // SAFETY: eventfd returns a new descriptor or -1 (checked); we own it.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0);
    // SAFETY: fd is valid and owned.
    unsafe { File::from_raw_fd(fd) }
}

fn eventfd_count(f: &mut File) -> u64 {
    let mut b = [0u8; 8];
    match f.read(&mut b) {
        Ok(8) => u64::from_ne_bytes(b),
        _ => 0,
    }
}

#[test]
fn config_space_through_the_socket() {
    let node = Node::start();
    let mut c = node.client("rnic0");
    assert_eq!(rd32(&mut c, CONFIG, 0), 0x52e1_1234, "vendor:device");
    assert_eq!(rd32(&mut c, CONFIG, 0x08) >> 8, 0x02_0000, "class: Ethernet controller");
    // 64-bit BAR0 of 64 KiB: sizing probe.
    assert_eq!(rd32(&mut c, CONFIG, 0x10) & 0xf, 0b0100, "64-bit, non-prefetchable memory");
    wr32(&mut c, CONFIG, 0x10, 0xffff_ffff);
    wr32(&mut c, CONFIG, 0x14, 0xffff_ffff);
    assert_eq!(rd32(&mut c, CONFIG, 0x10), 0xffff_0004);
    assert_eq!(rd32(&mut c, CONFIG, 0x14), 0xffff_ffff);
    // The whole 4 KiB reads in one message; the capability list starts at 0x40.
    let mut all = vec![0u8; 4096];
    c.region_read(CONFIG, 0, &mut all).unwrap();
    assert_eq!(all[0x34], 0x40);
    assert_eq!(c.region(CONFIG).unwrap().size, 4096);

    let mut g = node.client("gpu0");
    assert_eq!(rd32(&mut g, CONFIG, 0), 0x52e2_1234);
    wr32(&mut g, CONFIG, 0x14, 0xffff_ffff);
    wr32(&mut g, CONFIG, 0x18, 0xffff_ffff);
    assert_eq!(rd32(&mut g, CONFIG, 0x14), 0xf000_000c, "256 MiB, 64-bit prefetchable");
    assert_eq!(rd32(&mut g, CONFIG, 0x18), 0xffff_ffff);
}

#[test]
fn rnic_registers_reset_and_interrupts() {
    let node = Node::start();
    let mut c = node.client("rnic0");
    assert_eq!(rd32(&mut c, 0, rnic::RNIC_REG_ID), rnic::ID_MAGIC);
    assert_eq!(rd32(&mut c, 0, rnic::DMA_CTRL), 0x01, "reset value of the original register map (docs/programming.md)");
    wr32(&mut c, 0, rnic::WQE_DB_IDX, 0x1_0005);
    assert_eq!(rd32(&mut c, 0, rnic::WQE_DB_IDX), 0x1_0005, "QPN 1, producer index 5 (QP 1 is in RESET: ignored)");
    c.region_write(0, rnic::MTT_BASE, &0x1234_5678_9abc_d000u64.to_le_bytes()).unwrap();
    assert_eq!(rd32(&mut c, 0, rnic::MTT_BASE + 4), 0x1234_5678);
    wr32(&mut c, 0, rnic::RNIC_REG_RESET, rnic::RESET_MAGIC as u32);
    assert_eq!(rd32(&mut c, 0, rnic::WQE_DB_IDX), 0);
    assert_eq!(rd32(&mut c, 0, rnic::MTT_BASE), 0);

    // MSI-X: an eventfd for vector 3, raised by the self-test register.
    let mut efd = eventfd();
    let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, flags, 3, 1, &[efd.as_raw_fd()]).unwrap();
    wr32(&mut c, 0, rnic::RNIC_REG_INT_TRIGGER, 3);
    assert_eq!(eventfd_count(&mut efd), 1);
    assert_eq!(rd32(&mut c, 0, rnic::RNIC_REG_INT_COUNT), 1);
    wr32(&mut c, 0, rnic::RNIC_REG_INT_TRIGGER, 2);
    assert_eq!(eventfd_count(&mut efd), 0, "vector 2 has no eventfd");
    let none = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
    drop(c); // one client at a time per function
    let mut raw = Raw::connect(&node.sock("rnic0"));
    assert!(raw.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, none, 8, 1).is_err(), "vector 8 does not exist");
    assert!(raw.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, none, u32::MAX, 2).is_err(), "wrapping range");
    assert!(raw.set_irqs(VFIO_PCI_INTX_IRQ_INDEX, none, 0, 1).is_err(), "no INTx");
    assert!(raw.set_irqs(9, none, 0, 1).is_err(), "no such index");
}

#[test]
fn gpu_bar1_is_shared_memory() {
    let node = Node::start();
    let mut g = node.client("gpu0");
    let r = g.region(1).unwrap();
    assert_eq!(r.size, 256 << 20);
    assert_ne!(r.flags & VFIO_REGION_INFO_FLAG_MMAP, 0, "mmap-able");
    assert!(r.file_offset.is_some(), "the server hands over the memory fd");
    assert_eq!((r.sparse_areas.len(), r.sparse_areas[0].size), (1, 256 << 20));
    // Writes through the socket land in the backing memory, and the reverse.
    g.region_write(1, 0x10_0000, b"through the socket").unwrap();
    let mem = std::fs::read(node.gpu_mem()).unwrap();
    assert_eq!(&mem[0x10_0000..0x10_0012], b"through the socket");
    let f = std::fs::OpenOptions::new().write(true).open(node.gpu_mem()).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"from the host", 0x20_0000).unwrap();
    let mut b = [0u8; 13];
    g.region_read(1, 0x20_0000, &mut b).unwrap();
    assert_eq!(&b, b"from the host");
    assert_eq!(rd32(&mut g, 0, gpu::GPU_REG_MEM_SIZE), 256 << 20);
    drop(g);
    let mut raw = Raw::connect(&node.sock("gpu0"));
    assert!(raw.region_read(1, (256 << 20) - 4, 8).is_err(), "past the end of BAR1");
    assert_eq!(raw.region_read(1, 0x20_0000, 4).unwrap(), b"from");
}

#[test]
fn hostile_requests_get_errors_and_the_server_keeps_serving() {
    let node = Node::start();
    let mut c = Raw::connect(&node.sock("rnic0"));
    assert!(c.region_read(CONFIG, 4094, 4).is_err(), "config read past 4 KiB");
    assert!(c.region_write(CONFIG, u64::MAX - 1, &[0; 4]).is_err(), "wrapping offset");
    assert!(c.region_read(0, 0x1_0000, 4).is_err(), "past BAR0");
    assert!(c.region_read(0, u64::MAX, 4).is_err(), "wrapping BAR0 offset");
    assert!(c.region_read(4, 0, 4).is_err(), "no BAR4");
    assert!(c.region_read(3, 0, 4).is_err(), "BAR3 is the upper half of 64-bit BAR2");
    let db_size = rnic_emu_core::regs::pci_ids::RNIC_DB_BAR_SIZE;
    assert!(c.region_read(2, db_size - 2, 4).is_err(), "past the doorbell page (BAR2)");
    assert!(c.region_read(8, 0, 4).is_err(), "VGA region absent");
    assert!(c.region_read(42, 0, 4).is_err(), "no such region");
    assert!(c.region_read(0, 0, 0).is_err(), "empty access");
    // Sized wrongly or unmapped inside BAR0: all-ones, and writes are dropped.
    assert_eq!(c.region_read(0, rnic::RNIC_REG_ID, 2).unwrap(), [0xff, 0xff]);
    assert_eq!(c.region_read(0, 0x7000, 4).unwrap(), [0xff; 4]);
    assert_eq!(c.region_read(0, rnic::RNIC_REG_ID + 1, 4).unwrap(), [0xff; 4]);
    c.region_write(0, rnic::DMA_CTRL + 1, &[0u8; 4]).unwrap();
    assert_eq!(c.region_read(0, rnic::DMA_CTRL, 4).unwrap(), [1, 0, 0, 0]);
    // DMA maps: empty, wrapping and overlapping maps are refused.
    c.dma_map(0x1000_0000, 1 << 20).unwrap();
    assert!(c.dma_map(0x1008_0000, 1 << 20).is_err(), "overlap");
    assert!(c.dma_map(u64::MAX - 0xfff, 1 << 20).is_err(), "wraps");
    assert!(c.dma_map(0x2000_0000, 0).is_err(), "empty");
    // Still serving on this connection...
    assert_eq!(c.region_read(0, rnic::RNIC_REG_ID, 4).unwrap(), rnic::ID_MAGIC.to_le_bytes());
    c.region_write(0, rnic::RNIC_REG_SCRATCH, &0xabcdu32.to_le_bytes()).unwrap();
    drop(c);
    // ...and the next client gets a freshly reset device.
    let mut c2 = node.client("rnic0");
    assert_eq!(rd32(&mut c2, 0, rnic::RNIC_REG_SCRATCH), 0);
    assert_eq!(rd32(&mut c2, CONFIG, 0), 0x52e1_1234);
}

#[test]
fn garbage_on_the_socket_does_not_kill_the_server() {
    use std::io::Write;
    let node = Node::start();
    for junk in [&b"\x00"[..], &[0xffu8; 64][..], &[0x01, 0, 0x0b, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..]] {
        let mut s = std::os::unix::net::UnixStream::connect(node.sock("gpu0")).unwrap();
        let _ = s.write_all(junk);
        drop(s);
    }
    let mut g = node.client("gpu0");
    assert_eq!(rd32(&mut g, 0, gpu::GPU_REG_ID), gpu::ID_MAGIC);
}

#[test]
fn set_irqs_with_a_pipe_is_refused_and_a_later_eventfd_works() {
    let node = Node::start();
    let mut raw = Raw::connect(&node.sock("rnic0"));
    let trigger = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    // A pipe nobody reads: writing the vector's 8 bytes would block once its buffer fills.
    let (_rd, wr) = std::io::pipe().unwrap();
    let before = guest_errors(&node);
    assert!(raw.set_irqs_fds(VFIO_PCI_MSIX_IRQ_INDEX, trigger, 3, 1, &[wr.as_raw_fd()]).is_err(), "a pipe is not an eventfd");
    assert_eq!(guest_errors(&node), before + 1, "the refusal is counted");
    // Raising vector 3 many times (more than a pipe buffer's worth) does not hang the
    // server: the vector has no fd.
    for _ in 0..10_000 {
        raw.region_write(0, rnic::RNIC_REG_INT_TRIGGER, &3u32.to_le_bytes()).unwrap();
    }
    let mut efd = eventfd();
    raw.set_irqs_fds(VFIO_PCI_MSIX_IRQ_INDEX, trigger, 3, 1, &[efd.as_raw_fd()]).unwrap();
    raw.region_write(0, rnic::RNIC_REG_INT_TRIGGER, &3u32.to_le_bytes()).unwrap();
    assert_eq!(eventfd_count(&mut efd), 1);
}

fn guest_errors(node: &Node) -> u64 {
    function_errors(node, "rnic0")
}

fn function_errors(node: &Node, function: &str) -> u64 {
    let all = rnic_emu_server::serve::query_stats(node.dir.path(), "node0").unwrap();
    all[&format!("node0-{function}")]["guest_errors"].as_u64().unwrap_or_else(|| panic!("no guest_errors in {all}"))
}

#[test]
fn shared_memory_is_sealed_and_unsealed_guest_ram_is_refused() {
    let node = Node::start();
    let c = node.client("rnic0");
    let bar2 = c.region(2).unwrap();
    let fd = bar2.file_offset.as_ref().expect("BAR2's memfd").file().as_raw_fd();
    // SAFETY: ftruncate on the fd the server handed us.
    assert!(unsafe { libc::ftruncate(fd, 0) } < 0, "truncating BAR2's memfd fails (sealed)");
    drop(c);
    let mut raw = Raw::connect(&node.sock("rnic0"));
    let before = guest_errors(&node);
    // Guest RAM the client could truncate under the server's mapping: refused.
    // SAFETY: memfd_create with a valid name; the result is checked.
    let unsealed = unsafe { libc::memfd_create(c"ram".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(unsealed >= 0);
    // SAFETY: unsealed is a fresh fd we own.
    let unsealed = unsafe { File::from_raw_fd(unsealed) };
    unsealed.set_len(1 << 20).unwrap();
    assert!(raw.dma_map_fds(0x1000_0000, 1 << 20, &[unsealed.as_raw_fd()]).is_err(), "an unsealed memfd");
    assert_eq!(guest_errors(&node), before + 1);
    unsealed.set_len(0).unwrap(); // what a hostile client does next: nothing of ours maps it
    assert_eq!(raw.region_read(0, rnic::RNIC_REG_ID, 4).unwrap(), rnic::ID_MAGIC.to_le_bytes(), "still serving");
    let (_ram, sealed) = rnic_emu_core::platform::mem::dma::test_ram(1 << 20).unwrap();
    raw.dma_map_fds(0x1000_0000, 1 << 20, &[sealed.as_raw_fd()]).expect("a sealed memfd is taken");
}

#[test]
fn a_truncated_gpu_mem_file_fails_accesses_and_the_server_lives() {
    let node = Node::start();
    let mut raw = Raw::connect(&node.sock("gpu0"));
    raw.region_write(1, 0x10_0000, b"kept").unwrap();
    // --gpu-mem-dir files are regular files (they cannot be sealed); a client holding the
    // fd truncates it under the server's mapping.
    std::fs::OpenOptions::new().write(true).open(node.gpu_mem()).unwrap().set_len(0).unwrap();
    let before = function_errors(&node, "gpu0");
    // A BAR access the device cannot serve: all-ones (as a PCIe read of a failed target),
    // counted in guest_errors; not SIGBUS.
    assert_eq!(raw.region_read(1, 0x10_0000, 4).unwrap(), [0xff; 4], "an access past the new end reads all-ones");
    raw.region_write(1, 0x20_0000, b"gone").unwrap();
    assert_eq!(function_errors(&node, "gpu0"), before + 2, "both accesses are counted");
    assert_eq!(raw.region_read(0, gpu::GPU_REG_ID, 4).unwrap(), gpu::ID_MAGIC.to_le_bytes(), "the server keeps serving");
    let mut r = Raw::connect(&node.sock("rnic0"));
    assert_eq!(r.region_read(0, rnic::RNIC_REG_ID, 4).unwrap(), rnic::ID_MAGIC.to_le_bytes(), "and so does the node");
}

#[test]
fn a_symlinked_gpu_mem_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = dir.path().join("mem");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let child = serve(dir.path(), &link).stderr(Stdio::null()).spawn().unwrap();
    let mut server = Proc(child);
    let mut status = None;
    wait_until(Duration::from_secs(20), || {
        status = server.0.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.is_some_and(|s| !s.success()), "the server refuses a symlinked --gpu-mem-dir (and exits): {status:?}");
    assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0, "nothing was created through the symlink");
}
