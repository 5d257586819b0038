//! Batched datagram I/O for the fabric port: `sendmmsg(2)` and `recvmmsg(2)` on a UDP
//! socket (through the `libc` crate), with an optional encapsulation header sent from its
//! own iovec (VXLAN's, `super::vxlan`), `read(2)` batches from a device that returns a
//! frame per read (TAP, `super::tap`), and a pool of datagram buffers so that the hot path
//! allocates nothing per frame. The segments are IPv4 (docs/fabric.md); anything else a
//! receive returns is reported with no address.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::RawFd;

/// Datagrams one system call moves at most.
pub const BATCH: usize = 32;
/// Receive buffer size: the largest frame of the port (a 9000-byte MTU plus the Ethernet
/// header) fits with room; a longer datagram is reported as truncated.
pub const RX_BUF: usize = 9216;
/// Buffers a pool keeps for reuse; more are freed when returned.
const POOL_KEEP: usize = 256;

/// Reusable datagram buffers.
#[derive(Default)]
pub struct Pool {
    free: Vec<Vec<u8>>,
}

impl Pool {
    /// An empty buffer, reused when one is free.
    pub fn take(&mut self) -> Vec<u8> {
        self.free.pop().unwrap_or_else(|| Vec::with_capacity(RX_BUF))
    }

    pub fn put(&mut self, mut buf: Vec<u8>) {
        if self.free.len() < POOL_KEEP {
            buf.clear();
            self.free.push(buf);
        }
    }
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
        sin_zero: [0; 8],
    }
}

/// Sends `n` datagrams with as few `sendmmsg` calls as it takes, datagram `i` being
/// `prefix` (an encapsulation header, which may be empty) followed by the bytes `msg(i)`
/// gives, to the address it gives: the prefix is a second iovec, so nothing is copied.
/// Returns how many were handed to the kernel (fewer on an error, which is returned with
/// them).
pub fn send_datagrams<'a>(fd: RawFd, prefix: &[u8], n: usize, msg: impl Fn(usize) -> (SocketAddrV4, &'a [u8])) -> (usize, Option<io::Error>) {
    let mut sent = 0;
    let parts = if prefix.is_empty() { 1 } else { 2 };
    while sent < n {
        let chunk = (n - sent).min(BATCH);
        let mut addrs = [sockaddr(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)); BATCH];
        // SAFETY: iovec and mmsghdr are plain C structs for which all-zero is valid.
        let mut iov: [[libc::iovec; 2]; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..chunk {
            let (dst, data) = msg(sent + i);
            addrs[i] = sockaddr(dst);
            let body = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
            iov[i] = if parts == 1 { [body, body] } else { [libc::iovec { iov_base: prefix.as_ptr() as *mut libc::c_void, iov_len: prefix.len() }, body] };
            hdrs[i].msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_in).cast();
            hdrs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            hdrs[i].msg_hdr.msg_iov = iov[i].as_mut_ptr();
            hdrs[i].msg_hdr.msg_iovlen = parts;
        }
        // SAFETY: every header points at live iovecs/addresses on this stack frame, each
        // iovec at the prefix or a datagram borrowed for the call; the kernel only reads
        // them.
        let r = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), chunk as libc::c_uint, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return (sent, Some(e));
        }
        sent += r as usize;
    }
    (sent, None)
}

/// Sends `msgs` (destination, datagram) as [`send_datagrams`] does, with no prefix.
pub fn send_batch(fd: RawFd, msgs: &[(SocketAddrV4, Vec<u8>)]) -> (usize, Option<io::Error>) {
    send_datagrams(fd, &[], msgs.len(), |i| (msgs[i].0, &msgs[i].1[..]))
}

/// One `recvmmsg` worth of receive buffers, allocated once.
pub struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    lens: [usize; BATCH],
    from: [Option<SocketAddrV4>; BATCH],
    truncated: [bool; BATCH],
    count: usize,
}

impl Default for RecvBatch {
    fn default() -> Self {
        RecvBatch { bufs: (0..BATCH).map(|_| vec![0u8; RX_BUF]).collect(), lens: [0; BATCH], from: [None; BATCH], truncated: [false; BATCH], count: 0 }
    }
}

impl RecvBatch {
    /// Receives what is queued on `fd` without waiting (up to [`BATCH`] datagrams);
    /// returns how many. Nothing queued is `Ok(0)`.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        self.count = 0;
        // SAFETY: all-zero is valid for these C structs (here and in the next two).
        let mut addrs: [libc::sockaddr_in; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..BATCH {
            iov[i] = libc::iovec { iov_base: self.bufs[i].as_mut_ptr().cast(), iov_len: self.bufs[i].len() };
            hdrs[i].msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_in).cast();
            hdrs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            hdrs[i].msg_hdr.msg_iov = &mut iov[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        let n = loop {
            // SAFETY: the headers point at this frame's address slots and at our own
            // buffers, each described with its real length; MSG_DONTWAIT: never blocks.
            let n = unsafe { libc::recvmmsg(fd, hdrs.as_mut_ptr(), BATCH as libc::c_uint, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(0),
                _ => return Err(e),
            }
        };
        for i in 0..n {
            let h = &hdrs[i];
            self.lens[i] = (h.msg_len as usize).min(RX_BUF);
            self.truncated[i] = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            self.from[i] = (addrs[i].sin_family == libc::AF_INET as libc::sa_family_t
                && h.msg_hdr.msg_namelen as usize >= std::mem::size_of::<libc::sockaddr_in>())
            .then(|| SocketAddrV4::new(Ipv4Addr::from(u32::from_be(addrs[i].sin_addr.s_addr)), u16::from_be(addrs[i].sin_port)));
        }
        self.count = n;
        Ok(n)
    }

    /// Reads what is queued on `fd`, a device where each `read(2)` returns one frame (a
    /// TAP device), without waiting (up to [`BATCH`] frames), reporting each as from
    /// `from`; returns how many. Nothing queued is `Ok(0)`. A frame that fills the whole
    /// buffer is reported as truncated (the device cuts what does not fit).
    pub fn read(&mut self, fd: RawFd, from: SocketAddrV4) -> io::Result<usize> {
        self.count = 0;
        while self.count < BATCH {
            let buf = &mut self.bufs[self.count];
            // SAFETY: read(2) into our own buffer, with its real length; the fd is
            // non-blocking, so this never waits.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => break,
                    _ if self.count > 0 => break, // the error comes back on the next call
                    _ => return Err(e),
                }
            }
            let i = self.count;
            self.lens[i] = n as usize;
            self.truncated[i] = n as usize >= RX_BUF;
            self.from[i] = Some(from);
            self.count += 1;
        }
        Ok(self.count)
    }

    /// Datagram `i` of the last receive: sender (None: not IPv4), bytes, and whether the
    /// kernel cut it to fit the buffer.
    pub fn get(&self, i: usize) -> Option<(Option<SocketAddrV4>, &[u8], bool)> {
        (i < self.count).then(|| (self.from[i], &self.bufs[i][..self.lens[i]], self.truncated[i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    #[test]
    fn batched_send_and_receive_round_trip() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dst = match rx.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            std::net::SocketAddr::V6(_) => panic!("bound to IPv4"),
        };
        let msgs: Vec<(SocketAddrV4, Vec<u8>)> = (0..50u8).map(|i| (dst, vec![i; 100 + usize::from(i)])).collect();
        assert_eq!(send_batch(tx.as_raw_fd(), &msgs).0, 50, "two sendmmsg calls");
        let mut b = RecvBatch::default();
        let mut got = Vec::new();
        let t = std::time::Instant::now();
        while got.len() < 50 && t.elapsed().as_secs() < 10 {
            let n = b.recv(rx.as_raw_fd()).unwrap();
            for i in 0..n {
                let (from, data, cut) = b.get(i).unwrap();
                assert!(!cut);
                assert_eq!(
                    from,
                    match tx.local_addr().unwrap() {
                        std::net::SocketAddr::V4(a) => Some(a),
                        _ => None,
                    }
                );
                got.push(data.to_vec());
            }
        }
        assert_eq!(got, msgs.into_iter().map(|(_, d)| d).collect::<Vec<_>>(), "in order, every byte");
        assert_eq!(b.recv(rx.as_raw_fd()).unwrap(), 0, "nothing queued: no wait");
        assert!(b.get(0).is_none());
        // A datagram longer than a receive buffer is reported as truncated.
        send_datagrams(tx.as_raw_fd(), &[], 1, |_| (dst, &[7; RX_BUF + 1][..]));
        let t = std::time::Instant::now();
        while b.recv(rx.as_raw_fd()).unwrap() == 0 && t.elapsed().as_secs() < 10 {}
        assert!(b.get(0).unwrap().2, "MSG_TRUNC seen");
    }

    #[test]
    fn a_prefix_goes_first_and_reads_take_one_frame_each() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(dst) = rx.local_addr().unwrap() else { panic!("bound to IPv4") };
        let frames = [vec![1u8; 60], vec![2u8; 1514]];
        assert_eq!(send_datagrams(tx.as_raw_fd(), b"VXLANHDR", 2, |i| (dst, &frames[i][..])).0, 2);
        rx.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        for f in &frames {
            let mut buf = [0u8; 2048];
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..8], b"VXLANHDR");
            assert_eq!(&buf[8..n], &f[..], "the frame follows the prefix, whole");
        }
        // A datagram socket pair stands in for a TAP device: one frame per read.
        let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let from = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
        let mut batch = RecvBatch::default();
        assert_eq!(batch.read(b.as_raw_fd(), from).unwrap(), 0, "nothing queued: no wait");
        for f in &frames {
            a.send(f).unwrap();
        }
        assert_eq!(batch.read(b.as_raw_fd(), from).unwrap(), 2);
        assert_eq!(batch.get(0).unwrap(), (Some(from), &frames[0][..], false));
        assert_eq!(batch.get(1).unwrap(), (Some(from), &frames[1][..], false));
        a.send(&vec![3u8; RX_BUF + 10]).unwrap();
        assert_eq!(batch.read(b.as_raw_fd(), from).unwrap(), 1);
        assert!(batch.get(0).unwrap().2, "a frame that fills the buffer is reported as cut");
    }

    #[test]
    fn pool_reuses_buffers() {
        let mut p = Pool::default();
        let mut b = p.take();
        b.extend_from_slice(&[1; 100]);
        let ptr = b.as_ptr();
        p.put(b);
        let again = p.take();
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), ptr, "the same allocation comes back");
    }
}
