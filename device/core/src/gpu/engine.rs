//! The GPU's copy/fill/reduce engine: launched through BAR0 like a kernel launch, run
//! against BAR1 memory by the node's event loop a step at a time (so a large fill does
//! not hold up doorbells and packets), finished with a status, counters and an MSI-X
//! interrupt. Offsets and lengths come from guest registers and are checked against BAR1
//! before any byte moves (overflow-safe); a launch while busy is refused, not queued.
//! Unattached to a loop (unit tests), a launch runs to completion on the caller's thread.
//!
//! Failure containment (as the verbs engine's, docs/verbs.md §5.1): a panic while a launch
//! starts or steps is caught; the launch completes with ENG_ERR_FATAL (status, interrupt),
//! one log line says so, and every later launch completes with ENG_ERR_FATAL at once until
//! the GPU is reset ([`EngineState::reset`]). The node's other engines keep running.

use crate::mailbox::Mailbox;
use crate::platform::msix::Interrupts;
use crate::platform::shm::SharedMemory;
use crate::regs::gpu::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// The engine failed (a contained panic); cleared by a reset.
    pub fatal: AtomicBool,
}

impl EngineState {
    pub fn reset(&self) {
        for v in [&self.status, &self.done, &self.ops, &self.bytes] {
            v.store(0, Ordering::SeqCst);
        }
        self.fatal.store(false, Ordering::SeqCst);
    }
}

/// Where a GPU's engine runs.
enum Slot {
    /// Not attached to an event loop: a launch runs to completion on the caller's thread.
    Inline(Runner),
    /// The node's event loop runs launches in steps; they reach it through the mailbox.
    Loop(Arc<Mailbox<Launch>>),
}

pub struct GpuEngine {
    slot: Slot,
    pub state: Arc<EngineState>,
}

const CHUNK: usize = 64 << 10;
/// Bytes one event-loop pass moves for a launch before doorbells and packets get a turn.
pub const STEP: u64 = 1 << 20;

impl GpuEngine {
    /// An engine over `mem` that completes launches with an interrupt on `irqs`. It starts
    /// no thread: until [`GpuEngine::attach`] it runs launches inline.
    pub fn new(mem: Arc<SharedMemory>, irqs: Arc<Interrupts>) -> GpuEngine {
        let state = Arc::new(EngineState::default());
        GpuEngine { slot: Slot::Inline(Runner::new(mem, irqs, state.clone())), state }
    }

    /// Hands the engine to an event loop: launches go to `mailbox` from now on; the loop
    /// drives the returned runner. None: already attached.
    pub fn attach(&mut self, mailbox: Arc<Mailbox<Launch>>) -> Option<Runner> {
        match std::mem::replace(&mut self.slot, Slot::Loop(mailbox)) {
            Slot::Inline(r) => Some(r),
            attached @ Slot::Loop(_) => {
                self.slot = attached;
                None
            }
        }
    }

    /// Starts an operation; refused (no interrupt) while one runs.
    pub fn launch(&mut self, l: Launch) {
        let idle = self.state.status.fetch_or(ENG_STATUS_BUSY, Ordering::SeqCst) & ENG_STATUS_BUSY == 0;
        if !idle {
            crate::guest_warn!("GPU engine launch {l:?} refused: busy");
            return;
        }
        match &mut self.slot {
            Slot::Inline(r) => {
                r.start(l);
                while r.step(u64::MAX) {}
            }
            Slot::Loop(m) => m.post(l),
        }
    }
}

/// A launch in progress: which operation, and how many bytes are done.
struct Job {
    l: Launch,
    done: u64,
}

/// Executes launches a step at a time and completes them (status, counters, interrupt).
pub struct Runner {
    mem: Arc<SharedMemory>,
    irqs: Arc<Interrupts>,
    state: Arc<EngineState>,
    job: Option<Job>,
    /// Test hook (unit tests): panic in the next step.
    #[cfg(test)]
    panic_next_step: bool,
}

impl Runner {
    fn new(mem: Arc<SharedMemory>, irqs: Arc<Interrupts>, state: Arc<EngineState>) -> Runner {
        Runner {
            mem,
            irqs,
            state,
            job: None,
            #[cfg(test)]
            panic_next_step: false,
        }
    }

    /// Runs `f`; a panic in it fails the engine: the launch under way (or `launch`)
    /// completes with ENG_ERR_FATAL.
    fn guarded<R>(&mut self, launch: Option<Launch>, f: impl FnOnce(&mut Runner) -> R) -> Option<R> {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut *self))) {
            Ok(r) => Some(r),
            Err(payload) => {
                let msg = payload.downcast_ref::<&str>().copied().or_else(|| payload.downcast_ref::<String>().map(String::as_str)).unwrap_or("?");
                if !self.state.fatal.swap(true, Ordering::SeqCst) {
                    crate::guest_warn!("GPU engine failed ({msg}): launches fail with ENG_ERR_FATAL until the GPU is reset");
                }
                if let Some(l) = self.job.take().map(|j| j.l).or(launch) {
                    self.complete(&l, Err(ENG_ERR_FATAL));
                }
                None
            }
        }
    }

    /// Takes a launch: checks it, and completes it right away if it is refused (or the
    /// engine has failed).
    pub fn start(&mut self, l: Launch) {
        if self.state.fatal.load(Ordering::SeqCst) {
            self.job = None;
            self.complete(&l, Err(ENG_ERR_FATAL));
            return;
        }
        self.guarded(Some(l), |r| r.start_checked(l));
    }

    fn start_checked(&mut self, l: Launch) {
        if let Some(old) = self.job.take() {
            // Cannot happen (the busy bit admits one launch); complete the old one as failed.
            self.complete(&old.l, Err(ENG_ERR_BUSY));
        }
        match validate(&self.mem, &l) {
            Ok(()) => self.job = Some(Job { l, done: 0 }),
            Err(code) => self.complete(&l, Err(code)),
        }
    }

    /// Moves up to `budget` bytes of the current launch; true while one is in progress
    /// after this step (more work to do).
    pub fn step(&mut self, budget: u64) -> bool {
        if self.state.fatal.load(Ordering::SeqCst) {
            return false;
        }
        self.guarded(None, |r| r.step_job(budget)).unwrap_or(false)
    }

    fn step_job(&mut self, budget: u64) -> bool {
        #[cfg(test)]
        if std::mem::take(&mut self.panic_next_step) {
            panic!("test hook: panic in a GPU engine step");
        }
        let Some(job) = self.job.as_mut() else { return false };
        let n = (job.l.len - job.done).min(budget.max(1));
        let result = run_part(&self.mem, &job.l, job.done, n);
        job.done += n;
        if result.is_ok() && job.done < job.l.len {
            return true;
        }
        let l = job.l;
        self.job = None;
        self.complete(&l, result);
        false
    }

    fn complete(&self, l: &Launch, result: Result<(), u64>) {
        let st = &self.state;
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
        self.irqs.trigger(l.vector);
    }
}

/// Checks that [off, off+len) is inside BAR1.
fn range(mem: &SharedMemory, off: u64, len: u64) -> Result<(), u64> {
    match off.checked_add(len) {
        Some(end) if end <= mem.size() => Ok(()),
        _ => Err(ENG_ERR_RANGE),
    }
}

/// Everything a launch is checked for before any byte moves.
fn validate(mem: &SharedMemory, l: &Launch) -> Result<(), u64> {
    match l.op {
        ENG_OP_FILL32 => {
            range(mem, l.dst, l.len)?;
            if !l.len.is_multiple_of(4) || !l.dst.is_multiple_of(4) {
                return Err(ENG_ERR_ALIGN);
            }
        }
        ENG_OP_COPY => {
            range(mem, l.src, l.len)?;
            range(mem, l.dst, l.len)?;
        }
        ENG_OP_REDUCE_SUM_F32 => {
            for off in [l.src, l.src2, l.dst] {
                range(mem, off, l.len)?;
            }
            if !l.len.is_multiple_of(4) || !l.src.is_multiple_of(4) || !l.src2.is_multiple_of(4) || !l.dst.is_multiple_of(4) {
                return Err(ENG_ERR_ALIGN);
            }
        }
        _ => return Err(ENG_ERR_BAD_OP),
    }
    Ok(())
}

/// Runs bytes [done, done+n) of a checked launch (in the order the operation needs: an
/// overlapping copy that moves up goes back to front, so "done" counts from the end).
fn run_part(mem: &SharedMemory, l: &Launch, done: u64, n: u64) -> Result<(), u64> {
    let shm = |_| ENG_ERR_RANGE;
    match l.op {
        ENG_OP_FILL32 => {
            let pattern: Vec<u8> = l.value.to_le_bytes().iter().copied().cycle().take(CHUNK).collect();
            let mut at = done;
            while at < done + n {
                let k = (done + n - at).min(CHUNK as u64) as usize;
                mem.write(l.dst + at, &pattern[..k]).map_err(shm)?;
                at += k as u64;
            }
            Ok(())
        }
        ENG_OP_COPY => {
            let overlap = l.src < l.dst + l.len && l.dst < l.src + l.len;
            if !overlap {
                return mem.copy_within(l.src + done, l.dst + done, n as usize).map_err(shm);
            }
            // Overlapping: memmove in chunks, back to front when moving up.
            let up = l.dst > l.src;
            let mut buf = vec![0u8; CHUNK];
            let mut moved = 0;
            while moved < n {
                let k = (n - moved).min(CHUNK as u64);
                let at = if up { l.len - (done + moved) - k } else { done + moved };
                mem.read(l.src + at, &mut buf[..k as usize]).map_err(shm)?;
                mem.write(l.dst + at, &buf[..k as usize]).map_err(shm)?;
                moved += k;
            }
            Ok(())
        }
        ENG_OP_REDUCE_SUM_F32 => {
            let (mut a, mut b) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
            let mut at = done;
            while at < done + n {
                let k = (done + n - at).min(CHUNK as u64) as usize;
                mem.read(l.src + at, &mut a[..k]).map_err(shm)?;
                mem.read(l.src2 + at, &mut b[..k]).map_err(shm)?;
                for (x, y) in a[..k].chunks_exact_mut(4).zip(b[..k].chunks_exact(4)) {
                    let fx = f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
                    let fy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                    x.copy_from_slice(&(fx + fy).to_le_bytes());
                }
                mem.write(l.dst + at, &a[..k]).map_err(shm)?;
                at += k as u64;
            }
            Ok(())
        }
        _ => Err(ENG_ERR_BAD_OP),
    }
}

/// Runs a whole launch at once (checks first).
pub fn execute(mem: &SharedMemory, l: &Launch) -> Result<(), u64> {
    validate(mem, l)?;
    run_part(mem, l, 0, l.len)
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
    fn stepped_launches_match_whole_ones_and_complete_once() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        let launches = [
            Launch { op: ENG_OP_COPY, src: 0, dst: 1000, len: 250_000, ..Default::default() }, // overlapping, up
            Launch { op: ENG_OP_COPY, src: 1000, dst: 0, len: 250_000, ..Default::default() }, // overlapping, down
            Launch { op: ENG_OP_COPY, src: 0, dst: 600_000, len: 250_000, ..Default::default() },
            Launch { op: ENG_OP_FILL32, dst: 4, len: 200_004, value: 0xdead_beef, ..Default::default() },
            Launch { op: ENG_OP_REDUCE_SUM_F32, src: 0, src2: 100_000, dst: 700_000, len: 80_000, ..Default::default() },
        ];
        for l in launches {
            let (whole, stepped) = (mem(), Arc::new(mem()));
            whole.write(0, &data).unwrap();
            stepped.write(0, &data).unwrap();
            execute(&whole, &l).unwrap();
            let state = Arc::new(EngineState::default());
            let mut r = Runner::new(stepped.clone(), Arc::new(Interrupts::new(1)), state.clone());
            r.start(l);
            let mut steps = 1;
            while r.step(40_000) {
                steps += 1;
                assert_eq!(state.done.load(Ordering::SeqCst), 0, "not complete before the last step");
            }
            assert!(steps > 1, "{l:?} took several steps");
            assert!(!r.step(40_000), "nothing left");
            let (mut a, mut b) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
            whole.read(0, &mut a).unwrap();
            stepped.read(0, &mut b).unwrap();
            assert!(a == b, "{l:?}: stepped result differs");
            assert_eq!((state.done.load(Ordering::SeqCst), state.ops.load(Ordering::SeqCst), state.bytes.load(Ordering::SeqCst)), (1, 1, l.len));
            assert_eq!(state.status.load(Ordering::SeqCst), ENG_OK << 8);
        }
        // A refused launch completes at once with its code.
        let state = Arc::new(EngineState::default());
        let mut r = Runner::new(Arc::new(mem()), Arc::new(Interrupts::new(1)), state.clone());
        r.start(Launch { op: 9, ..Default::default() });
        assert!(!r.step(STEP));
        assert_eq!(state.status.load(Ordering::SeqCst), ENG_ERR_BAD_OP << 8);
        assert_eq!(state.done.load(Ordering::SeqCst), 1);
    }

    /// A panic while a launch steps completes it with ENG_ERR_FATAL (interrupt raised),
    /// later launches fail at once, and a reset brings the engine back.
    #[test]
    fn a_panic_in_a_step_fails_the_engine_until_reset() {
        let state = Arc::new(EngineState::default());
        let irqs = Arc::new(Interrupts::new(1));
        let m = Arc::new(mem());
        let mut r = Runner::new(m.clone(), irqs.clone(), state.clone());
        let fill = Launch { op: ENG_OP_FILL32, dst: 0, len: 400_000, value: 7, ..Default::default() };
        r.start(fill);
        assert!(r.step(100_000));
        r.panic_next_step = true;
        assert!(!r.step(100_000), "the failed step ends the launch");
        assert!(state.fatal.load(Ordering::SeqCst));
        assert_eq!((state.status.load(Ordering::SeqCst), state.done.load(Ordering::SeqCst)), (ENG_ERR_FATAL << 8, 1));
        r.start(fill);
        assert!(!r.step(STEP), "refused while fatal");
        assert_eq!((state.status.load(Ordering::SeqCst), state.done.load(Ordering::SeqCst), state.ops.load(Ordering::SeqCst)), (ENG_ERR_FATAL << 8, 2, 0));
        state.reset();
        r.start(fill);
        while r.step(STEP) {}
        assert_eq!((state.status.load(Ordering::SeqCst), state.ops.load(Ordering::SeqCst)), (ENG_OK, 1), "a reset recovers");
        assert_eq!(f32s(&m, 0, 1)[0].to_bits(), 7);
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
