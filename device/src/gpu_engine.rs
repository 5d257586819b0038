//! The GPU's copy/fill/reduce engine: launched through BAR0 like a kernel launch, run on
//! its own thread against BAR1 memory, finished with a status, counters and an MSI-X
//! interrupt. Offsets and lengths come from guest registers and are checked against BAR1
//! before any byte moves (overflow-safe); a launch while busy is refused, not queued.

use crate::msix::Interrupts;
use crate::regs::gpu::*;
use crate::shm::SharedMemory;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;

/// What GPU_ENG_LAUNCH starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Launch {
    pub op: u64,
    pub src: u64,
    pub src2: u64,
    pub dst: u64,
    pub len: u64,
    pub value: u32,
    pub vector: usize,
}

/// Engine state the registers show.
#[derive(Default)]
pub struct EngineState {
    /// GPU_ENG_STATUS: busy bit and the last result code in [15:8].
    pub status: AtomicU64,
    pub done: AtomicU64,
    pub ops: AtomicU64,
    pub bytes: AtomicU64,
}

impl EngineState {
    pub fn reset(&self) {
        for v in [&self.status, &self.done, &self.ops, &self.bytes] {
            v.store(0, Ordering::SeqCst);
        }
    }
}

pub struct GpuEngine {
    tx: Sender<Launch>,
    pub state: Arc<EngineState>,
}

const CHUNK: usize = 64 << 10;

impl GpuEngine {
    pub fn spawn(name: &str, mem: Arc<SharedMemory>, irqs: Arc<Interrupts>) -> std::io::Result<GpuEngine> {
        let (tx, rx) = mpsc::channel();
        let state = Arc::new(EngineState::default());
        let st = state.clone();
        let thread_name = format!("{name}-gpu-engine");
        std::thread::Builder::new().name(thread_name).spawn(move || worker(&rx, &mem, &irqs, &st))?;
        Ok(GpuEngine { tx, state })
    }

    /// Starts an operation; refused (ENG_ERR_BUSY, no interrupt) while one runs.
    pub fn launch(&self, l: Launch) {
        let idle = self.state.status.fetch_or(ENG_STATUS_BUSY, Ordering::SeqCst) & ENG_STATUS_BUSY == 0;
        if !idle {
            crate::guest_warn!("GPU engine launch {l:?} refused: busy");
            return;
        }
        if self.tx.send(l).is_err() {
            self.state.status.store(ENG_ERR_BUSY << 8, Ordering::SeqCst);
        }
    }
}

fn worker(rx: &Receiver<Launch>, mem: &SharedMemory, irqs: &Interrupts, st: &EngineState) {
    while let Ok(l) = rx.recv() {
        let result = execute(mem, &l);
        let code = match result {
            Ok(()) => {
                st.ops.fetch_add(1, Ordering::SeqCst);
                st.bytes.fetch_add(l.len, Ordering::SeqCst);
                ENG_OK
            }
            Err(code) => {
                crate::guest_warn!("GPU engine op {l:?} failed with code {code}");
                code
            }
        };
        st.done.fetch_add(1, Ordering::SeqCst);
        st.status.store(code << 8, Ordering::SeqCst);
        irqs.trigger(l.vector);
    }
}

/// Checks that [off, off+len) is inside BAR1.
fn range(mem: &SharedMemory, off: u64, len: u64) -> Result<(), u64> {
    match off.checked_add(len) {
        Some(end) if end <= mem.size() => Ok(()),
        _ => Err(ENG_ERR_RANGE),
    }
}

pub fn execute(mem: &SharedMemory, l: &Launch) -> Result<(), u64> {
    let shm = |_| ENG_ERR_RANGE;
    match l.op {
        ENG_OP_FILL32 => {
            range(mem, l.dst, l.len)?;
            if l.len % 4 != 0 || l.dst % 4 != 0 {
                return Err(ENG_ERR_ALIGN);
            }
            let pattern: Vec<u8> = l.value.to_le_bytes().iter().copied().cycle().take(CHUNK).collect();
            let mut done = 0;
            while done < l.len {
                let n = (l.len - done).min(CHUNK as u64) as usize;
                mem.write(l.dst + done, &pattern[..n]).map_err(shm)?;
                done += n as u64;
            }
            Ok(())
        }
        ENG_OP_COPY => {
            range(mem, l.src, l.len)?;
            range(mem, l.dst, l.len)?;
            let overlap = l.src < l.dst + l.len && l.dst < l.src + l.len;
            if !overlap {
                return mem.copy_within(l.src, l.dst, l.len as usize).map_err(shm);
            }
            // Overlapping: memmove in chunks, back to front when moving up.
            let mut buf = vec![0u8; CHUNK];
            let chunks: Vec<u64> = (0..l.len.div_ceil(CHUNK as u64)).collect();
            let order: Box<dyn Iterator<Item = &u64>> =
                if l.dst > l.src { Box::new(chunks.iter().rev()) } else { Box::new(chunks.iter()) };
            for &c in order {
                let at = c * CHUNK as u64;
                let n = (l.len - at).min(CHUNK as u64) as usize;
                mem.read(l.src + at, &mut buf[..n]).map_err(shm)?;
                mem.write(l.dst + at, &buf[..n]).map_err(shm)?;
            }
            Ok(())
        }
        ENG_OP_REDUCE_SUM_F32 => {
            for off in [l.src, l.src2, l.dst] {
                range(mem, off, l.len)?;
            }
            if l.len % 4 != 0 || l.src % 4 != 0 || l.src2 % 4 != 0 || l.dst % 4 != 0 {
                return Err(ENG_ERR_ALIGN);
            }
            let (mut a, mut b) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
            let mut done = 0;
            while done < l.len {
                let n = (l.len - done).min(CHUNK as u64) as usize;
                mem.read(l.src + done, &mut a[..n]).map_err(shm)?;
                mem.read(l.src2 + done, &mut b[..n]).map_err(shm)?;
                for (x, y) in a[..n].chunks_exact_mut(4).zip(b[..n].chunks_exact(4)) {
                    let fx = f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
                    let fy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                    x.copy_from_slice(&(fx + fy).to_le_bytes());
                }
                mem.write(l.dst + done, &a[..n]).map_err(shm)?;
                done += n as u64;
            }
            Ok(())
        }
        _ => Err(ENG_ERR_BAD_OP),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem() -> SharedMemory {
        SharedMemory::memfd("gpu-test", 1 << 20).unwrap()
    }

    fn f32s(m: &SharedMemory, off: u64, n: usize) -> Vec<f32> {
        let mut b = vec![0u8; n * 4];
        m.read(off, &mut b).unwrap();
        b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }

    #[test]
    fn fill_copy_reduce() {
        let m = mem();
        execute(&m, &Launch { op: ENG_OP_FILL32, dst: 0x100, len: 200_000, value: 0x3f80_0000, ..Default::default() }).unwrap();
        assert!(f32s(&m, 0x100, 50_000).iter().all(|&v| v == 1.0));
        let vals: Vec<u8> = (0..1000u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
        m.write(0x80000, &vals).unwrap();
        execute(&m, &Launch { op: ENG_OP_REDUCE_SUM_F32, src: 0x80000, src2: 0x100, dst: 0x90000, len: 4000, ..Default::default() }).unwrap();
        let sums = f32s(&m, 0x90000, 1000);
        assert!(sums.iter().enumerate().all(|(i, &v)| v == i as f32 + 1.0));
        execute(&m, &Launch { op: ENG_OP_COPY, src: 0x90000, dst: 0xa0000, len: 4000, ..Default::default() }).unwrap();
        assert_eq!(f32s(&m, 0xa0000, 1000), sums);
        // Overlapping copy moves like memmove.
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        m.write(0, &data).unwrap();
        execute(&m, &Launch { op: ENG_OP_COPY, src: 0, dst: 1000, len: 200_000, ..Default::default() }).unwrap();
        let mut got = vec![0u8; 200_000];
        m.read(1000, &mut got).unwrap();
        assert_eq!(got, data);
    }

    #[test]
    fn hostile_launches_are_refused() {
        let m = mem();
        let size = m.size();
        assert_eq!(execute(&m, &Launch { op: 9, ..Default::default() }), Err(ENG_ERR_BAD_OP));
        assert_eq!(execute(&m, &Launch { op: ENG_OP_FILL32, dst: size - 4, len: 8, ..Default::default() }), Err(ENG_ERR_RANGE));
        assert_eq!(execute(&m, &Launch { op: ENG_OP_COPY, src: u64::MAX - 2, dst: 0, len: 8, ..Default::default() }), Err(ENG_ERR_RANGE));
        assert_eq!(execute(&m, &Launch { op: ENG_OP_REDUCE_SUM_F32, len: 6, ..Default::default() }), Err(ENG_ERR_ALIGN));
        assert_eq!(execute(&m, &Launch { op: ENG_OP_FILL32, dst: 2, len: 4, ..Default::default() }), Err(ENG_ERR_ALIGN));
    }
}
