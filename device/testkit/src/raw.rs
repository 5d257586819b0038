//! A minimal vfio-user client for error paths. rust-vmm's `Client` ignores error replies
//! (and then waits for payload that never comes), so tests that expect the server to refuse
//! a request speak the protocol here: 16-byte header (message id, command, size, flags,
//! error), then the command's payload (vfio-user spec §"Message format").

use std::io::{Read, Write};
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

pub const DMA_MAP: u16 = 2;
pub const DMA_UNMAP: u16 = 3;
pub const SET_IRQS: u16 = 8;
pub const REGION_READ: u16 = 9;
pub const REGION_WRITE: u16 = 10;
const FLAG_ERROR: u32 = 0x20;

pub struct Raw {
    s: UnixStream,
    id: u16,
}

impl Raw {
    pub fn connect(path: &Path) -> Raw {
        let s = UnixStream::connect(path).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Raw { s, id: 0 }
    }

    /// Sends one command; returns the reply payload or the reply's error number.
    pub fn call(&mut self, command: u16, payload: &[u8]) -> Result<Vec<u8>, u32> {
        self.call_with_fds(command, payload, &[])
    }

    /// Sends one command with `fds` attached (SCM_RIGHTS); returns as [`Raw::call`].
    pub fn call_with_fds(&mut self, command: u16, payload: &[u8], fds: &[RawFd]) -> Result<Vec<u8>, u32> {
        self.id = self.id.wrapping_add(1);
        let mut msg = Vec::with_capacity(16 + payload.len());
        msg.extend_from_slice(&self.id.to_le_bytes());
        msg.extend_from_slice(&command.to_le_bytes());
        msg.extend_from_slice(&(16 + payload.len() as u32).to_le_bytes());
        msg.extend_from_slice(&0u32.to_le_bytes()); // command
        msg.extend_from_slice(&0u32.to_le_bytes());
        msg.extend_from_slice(payload);
        if fds.is_empty() {
            self.s.write_all(&msg).expect("send");
        } else {
            let sent = self.s.send_with_fds(&[&msg[..]], fds).expect("send with fds");
            assert_eq!(sent, msg.len(), "short send");
        }
        let mut hdr = [0u8; 16];
        self.s.read_exact(&mut hdr).expect("reply header (server hung or died?)");
        let size = u32::from_le_bytes(hdr[4..8].try_into().unwrap()) as usize;
        let flags = u32::from_le_bytes(hdr[8..12].try_into().unwrap());
        let error = u32::from_le_bytes(hdr[12..16].try_into().unwrap());
        let mut body = vec![0u8; size.saturating_sub(16)];
        self.s.read_exact(&mut body).expect("reply payload");
        if flags & FLAG_ERROR != 0 {
            Err(error)
        } else {
            Ok(body)
        }
    }

    fn access(region: u32, offset: u64, count: u32) -> Vec<u8> {
        let mut p = offset.to_le_bytes().to_vec();
        p.extend_from_slice(&region.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        p
    }

    pub fn region_read(&mut self, region: u32, offset: u64, count: u32) -> Result<Vec<u8>, u32> {
        self.call(REGION_READ, &Self::access(region, offset, count)).map(|b| b[16..].to_vec())
    }

    pub fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), u32> {
        let mut p = Self::access(region, offset, data.len() as u32);
        p.extend_from_slice(data);
        self.call(REGION_WRITE, &p).map(|_| ())
    }

    /// A DMA_MAP without an fd (as QEMU sends for peer BAR ranges).
    pub fn dma_map(&mut self, iova: u64, size: u64) -> Result<(), u32> {
        self.dma_map_fds(iova, size, &[])
    }

    /// A DMA_MAP of `fds` (guest RAM at file offset 0; any kind of fd).
    pub fn dma_map_fds(&mut self, iova: u64, size: u64, fds: &[RawFd]) -> Result<(), u32> {
        let mut p = 32u32.to_le_bytes().to_vec();
        p.extend_from_slice(&3u32.to_le_bytes()); // read | write
        p.extend_from_slice(&0u64.to_le_bytes());
        p.extend_from_slice(&iova.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        self.call_with_fds(DMA_MAP, &p, fds).map(|_| ())
    }

    /// A DMA_UNMAP of `[iova, iova + size)` (`flags` 0: that range; 2: everything).
    pub fn dma_unmap(&mut self, iova: u64, size: u64, flags: u32) -> Result<(), u32> {
        let mut p = 24u32.to_le_bytes().to_vec();
        p.extend_from_slice(&flags.to_le_bytes());
        p.extend_from_slice(&iova.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        self.call(DMA_UNMAP, &p).map(|_| ())
    }

    /// SET_IRQS without fds.
    pub fn set_irqs(&mut self, index: u32, flags: u32, start: u32, count: u32) -> Result<(), u32> {
        self.set_irqs_fds(index, flags, start, count, &[])
    }

    /// SET_IRQS with `fds` attached (any kind of fd: a hostile client's choice).
    pub fn set_irqs_fds(&mut self, index: u32, flags: u32, start: u32, count: u32, fds: &[RawFd]) -> Result<(), u32> {
        let mut p = 20u32.to_le_bytes().to_vec();
        for v in [flags, index, start, count] {
            p.extend_from_slice(&v.to_le_bytes());
        }
        self.call_with_fds(SET_IRQS, &p, fds).map(|_| ())
    }
}
