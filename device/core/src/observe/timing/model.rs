//! The modelled timeline of one work request: every stage a WQE goes through (doorbell,
//! WQE fetch, SGL parse, source read on its PCIe path, packetization, wire, remote
//! placement on its path, remote CQE and the remote CPU seeing it, ACK, local CQE and the
//! local CPU seeing it), each a deterministic function of [`Params`] and of where the
//! buffers sit ([`Layout`], from the topology). Both nodes of a transfer are assumed to
//! be built alike (same layout, same parameters).
//!
//! Messages longer than the MTU are a pipeline of packets: each packet's data is read
//! (completions at PCIe rate), built, queued and serialized on the wire after the one
//! before it; the receiver streams each packet into memory as it arrives, so after the
//! last bit only the last MPS-sized write remains (unless its PCIe link is the slower).
//! Not modelled: contention with other traffic (see [`super::collective`] for the
//! queueing model), PCIe flow-control credits, retransmission, the RECV WQE fetch of a
//! SEND (assumed prefetched), interrupts (the CPU is assumed to poll).

use crate::platform::topology::params::{Params, AETH, CQE_BYTES, RETH, WQE_BYTES};
use crate::platform::topology::{Layout, P2pPath};
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Write,
    Read,
    Send,
}

impl std::str::FromStr for Op {
    type Err = String;
    fn from_str(s: &str) -> Result<Op, String> {
        match s {
            "write" => Ok(Op::Write),
            "read" => Ok(Op::Read),
            "send" => Ok(Op::Send),
            _ => Err(format!("unknown op '{s}' (write, read, send)")),
        }
    }
}

/// Which memory a buffer is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mem {
    Host,
    Gpu,
}

impl std::str::FromStr for Mem {
    type Err = String;
    fn from_str(s: &str) -> Result<Mem, String> {
        match s {
            "host" => Ok(Mem::Host),
            "gpu" => Ok(Mem::Gpu),
            _ => Err(format!("unknown memory '{s}' (host, gpu)")),
        }
    }
}

/// What the model makes of a [`Layout`] (where the RNIC and the GPU sit, from the
/// topology): the idle latency to each memory and its words.
impl Layout {
    /// One-way latency from the RNIC to memory `m` (ns), idle.
    pub fn one_way(&self, p: &Params, m: Mem) -> f64 {
        let sw = p.switch_latency_ns;
        match (m, self.gpu_path) {
            (Mem::Host, _) => f64::from(self.rnic_switches) * sw + p.rc_latency_ns,
            (Mem::Gpu, P2pPath::Switch) => sw,
            (Mem::Gpu, P2pPath::RootComplex) => f64::from(self.rnic_switches + self.gpu_switches) * sw + p.rc_latency_ns,
        }
    }

    /// Words for the path to memory `m`.
    pub fn describe(&self, m: Mem) -> &'static str {
        match (m, self.gpu_path) {
            (Mem::Host, _) => "host memory via the root complex",
            (Mem::Gpu, P2pPath::Switch) => "GPU BAR1, P2P through the PCIe switch",
            (Mem::Gpu, P2pPath::RootComplex) => "GPU BAR1, P2P through the root complex",
        }
    }
}

/// One work request to model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Request {
    pub op: Op,
    pub len: u64,
    /// WRITE/SEND: the local source; READ: the remote source.
    pub src: Mem,
    /// WRITE/SEND: the remote destination; READ: the local destination.
    pub dst: Mem,
}

/// One stage of a timeline.
#[derive(Clone, Debug, Serialize)]
pub struct Stage {
    /// Stable key (tests, JSON, the reference table).
    pub key: &'static str,
    pub what: String,
    /// Modelled time since the doorbell (ns).
    pub at_ns: f64,
    /// On the responder's node.
    pub remote: bool,
    /// The memory this stage moves payload in, if any.
    pub payload: Option<Mem>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Timeline {
    pub request: Request,
    pub stages: Vec<Stage>,
    /// One-way NIC-to-NIC latency used (cables, PHYs, fabric switches); the reference's
    /// "RTT" offsets are taken from here.
    pub wire_latency_ns: f64,
}

impl Timeline {
    pub fn at(&self, key: &str) -> Option<f64> {
        self.stages.iter().find(|s| s.key == key).map(|s| s.at_ns)
    }
}

/// The end of a packet stream: when its last data came back, was built, queued, left
/// the wire, arrived, and was placed at the receiver.
struct Stream {
    data: f64,
    built: f64,
    fifo: f64,
    wire: f64,
    arrived: f64,
    placed: f64,
}

/// A message of `len` bytes read from `src` (reads issued at `issue`), sent in MTU
/// packets (the first carrying `first_extra` header bytes) and placed into `dst`.
#[allow(clippy::too_many_arguments)]
fn stream(p: &Params, l: &Layout, one_way: f64, issue: f64, len: u64, src: Mem, dst: Mem, first_extra: u32) -> Stream {
    let c = p.cycle_ns();
    let mtu = u64::from(p.mtu);
    let npkts = len.div_ceil(mtu).max(1);
    let src_lat = 2.0 * l.one_way(p, src) + lat(p, src);
    let mrd = p.pcie_ns(0, 1, 16); // one read request TLP on the upstream direction
    let mut s = Stream { data: issue, built: issue, fifo: issue, wire: issue, arrived: issue, placed: issue };
    let mut last_written = f64::MIN;
    for i in 0..npkts {
        let done = ((i + 1) * mtu).min(len);
        let payload = (done - i * mtu) as u32;
        // Read requests of MRRS bytes go out back to back; completions stream at the
        // link's payload rate (enough tags outstanding: 10-bit tags, PCIe 4.0 and later).
        let requested = issue + done.div_ceil(u64::from(p.mrrs)) as f64 * mrd;
        s.data = (requested + src_lat).max(issue + mrd + src_lat + p.read_ns(done));
        s.built = s.data.max(s.fifo) + 2.0 * c;
        s.fifo = s.built + c;
        let extra = if i == 0 { first_extra } else { 0 };
        s.wire = s.fifo.max(s.wire) + p.frame_ns(payload, extra);
        s.arrived = s.wire + one_way;
        // Streamed into memory as it arrives: after the last bit, the last MPS remains,
        // unless the writes of the packets before are still behind.
        let tail = s.arrived + 2.0 * c + p.write_ns(u64::from(payload.min(p.mps)));
        last_written = tail.max(last_written + p.write_ns(u64::from(payload)));
        s.placed = last_written + l.one_way(p, dst);
    }
    s
}

fn lat(p: &Params, m: Mem) -> f64 {
    match m {
        Mem::Host => p.host_mem_latency_ns,
        Mem::Gpu => p.gpu_mem_latency_ns,
    }
}

fn name(m: Mem) -> &'static str {
    match m {
        Mem::Host => "host memory",
        Mem::Gpu => "GPU BAR1",
    }
}

/// The modelled timeline of `req` between two nodes (one fabric switch between them).
pub fn timeline(p: &Params, l: &Layout, req: &Request) -> Timeline {
    timeline_in(p, l, req, 2)
}

/// The modelled timeline of `req` between two nodes of a job of `nodes` nodes (which
/// sets how many fabric switches lie between them).
pub fn timeline_in(p: &Params, l: &Layout, req: &Request, nodes: u32) -> Timeline {
    let c = p.cycle_ns();
    let one_way = p.fabric_one_way_ns(nodes);
    let mut st: Vec<Stage> = Vec::new();
    let mut push = |key, what: String, at_ns, remote, payload| st.push(Stage { key, what, at_ns, remote, payload });
    let host_rtt = 2.0 * l.one_way(p, Mem::Host) + p.host_mem_latency_ns;
    let cqe_write = |at: f64| at + c + p.write_ns(u64::from(CQE_BYTES)) + l.one_way(p, Mem::Host);
    let ack_wire = p.frame_ns(0, AETH) + one_way;

    push("doorbell", "CPU writes the send doorbell (WQE_DB_IDX)".into(), 0.0, false, None);
    let fetch = 2.0 * c;
    push("wqe_fetch", "WQE fetch issued (MRd to host memory)".into(), fetch, false, None);
    let wqe = fetch + host_rtt + p.pcie_ns(0, 1, 16) + p.read_ns(u64::from(WQE_BYTES));
    push("wqe_data", format!("WQE data back ({WQE_BYTES} B)"), wqe, false, None);
    let parsed = wqe + 2.0 * c;
    push("sgl_parsed", format!("SGL parsed: {} buffer recognised", name(if req.op == Op::Read { req.dst } else { req.src })), parsed, false, None);

    let (remote_done, local_seen_from);
    if req.op == Op::Read {
        let built = parsed + 2.0 * c;
        let wire = built + c + p.frame_ns(0, RETH);
        push("packetized", "READ request built".into(), built, false, None);
        push("on_wire", "READ request on the wire".into(), wire, false, None);
        let arrived = wire + one_way;
        let issue = arrived + 3.0 * c;
        push("remote_read", format!("responder issues MRd ({})", l.describe(req.src)), issue, true, None);
        let s = stream(p, l, one_way, issue, req.len, req.src, req.dst, AETH);
        push("source_data", format!("responder has the data ({})", l.describe(req.src)), s.data, true, Some(req.src));
        push("response_wire", "last READ response on the wire".into(), s.wire, true, None);
        push("placed", format!("requester placed the data ({})", l.describe(req.dst)), s.placed, false, Some(req.dst));
        remote_done = None;
        local_seen_from = s.placed;
    } else {
        let issue = parsed + c;
        push("source_read", format!("MRd issued ({})", l.describe(req.src)), issue, false, None);
        let first_extra = if req.op == Op::Write { RETH } else { 0 };
        let s = stream(p, l, one_way, issue, req.len, req.src, req.dst, first_extra);
        push("source_data", format!("source data back ({} B, {})", req.len, l.describe(req.src)), s.data, false, Some(req.src));
        push(
            "packetized",
            format!("{} packet built (BTH{})", if req.op == Op::Write { "RDMA WRITE" } else { "SEND" }, if req.op == Op::Write { "/RETH" } else { "" }),
            s.built,
            false,
            None,
        );
        push("tx_fifo", "packet enters the TX FIFO".into(), s.fifo, false, None);
        push("on_wire", "last bit on the wire".into(), s.wire, false, None);
        push("remote_write", format!("remote NIC receives, writes {}", l.describe(req.dst)), s.arrived + 2.0 * c, true, None);
        push("placed", format!("remote data placed ({})", l.describe(req.dst)), s.placed, true, Some(req.dst));
        let rcqe = cqe_write(s.placed);
        push("remote_cqe", "remote CQE written to host memory".into(), rcqe, true, None);
        push("remote_cpu", "remote CPU sees the CQE (polling)".into(), rcqe + p.cpu_poll_ns, true, None);
        remote_done = Some(s.placed);
        local_seen_from = s.placed + c + ack_wire;
    }
    let ack = local_seen_from + if remote_done.is_some() { 2.0 * c } else { 0.0 };
    if remote_done.is_some() {
        push("ack", "ACK received".into(), ack, false, None);
    }
    let cqe = cqe_write(ack);
    push("cqe", "local CQE written to host memory".into(), cqe, false, None);
    push("cpu", "local CPU sees the CQE (polling)".into(), cqe + p.cpu_poll_ns, false, None);
    Timeline { request: *req, stages: st, wire_latency_ns: one_way }
}

/// Per-message time (ns) of a back-to-back stream of `req` between two nodes built
/// alike: the occupancy per message of the busiest resource. The resources are each
/// direction of the requester's and of the responder's PCIe link (WQE and payload read
/// completions toward the NIC; payload and CQE writes from it), the wire (every frame),
/// and the core pipeline (5 cycles per WQE: fetch issue, parse, read issue; 3 per
/// packet: build and TX FIFO; its stages overlap, so the larger counts). Window limits
/// (outstanding WQEs, read tags) are the caller's: see `docs/timing.md`.
pub fn interval(p: &Params, req: &Request) -> f64 {
    let c = p.cycle_ns();
    let mtu = u64::from(p.mtu);
    let npkts = req.len.div_ceil(mtu).max(1);
    let first_extra = match req.op {
        Op::Write => RETH,
        Op::Read => AETH,
        Op::Send => 0,
    };
    let mut wire = 0.0;
    for i in 0..npkts {
        let payload = (((i + 1) * mtu).min(req.len) - i * mtu) as u32;
        wire += p.frame_ns(payload, if i == 0 { first_extra } else { 0 });
    }
    let wqe = p.read_ns(u64::from(WQE_BYTES));
    let cqe = p.write_ns(u64::from(CQE_BYTES));
    let (payload_in, payload_out) = (p.read_ns(req.len), p.write_ns(req.len));
    let links = match req.op {
        // requester in, requester out, responder in, responder out
        Op::Read => [wqe, payload_out + cqe, payload_in, 0.0],
        Op::Write | Op::Send => [wqe + payload_in, cqe, 0.0, payload_out + cqe],
    };
    let core = (5.0 * c).max(npkts as f64 * 3.0 * c);
    links.into_iter().fold(wire.max(core), f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write4k(src: Mem, dst: Mem, l: &Layout) -> Timeline {
        timeline(&Params::default(), l, &Request { op: Op::Write, len: 4096, src, dst })
    }

    #[test]
    fn stages_are_monotonic_and_paths_cost_what_they_should() {
        let sw = write4k(Mem::Gpu, Mem::Gpu, &Layout::default());
        for w in sw.stages.windows(2).filter(|w| w[0].remote == w[1].remote) {
            assert!(w[1].at_ns >= w[0].at_ns, "{} before {}", w[1].key, w[0].key);
        }
        assert!(sw.stages.iter().all(|s| s.payload != Some(Mem::Host)), "GPU to GPU: no payload in host memory");
        let rc = write4k(Mem::Gpu, Mem::Gpu, &Layout { rnic_switches: 0, gpu_switches: 0, gpu_path: P2pPath::RootComplex });
        assert!(rc.at("source_data") > sw.at("source_data"), "the root complex is slower than the switch");
        let host = write4k(Mem::Host, Mem::Host, &Layout::default());
        assert!(host.at("source_data") > sw.at("source_data"), "host memory is further than the GPU next door");
        let big = timeline(&Params::default(), &Layout::default(), &Request { op: Op::Write, len: 1 << 20, src: Mem::Gpu, dst: Mem::Gpu });
        let wire = big.at("on_wire").unwrap() - big.at("source_read").unwrap();
        let bound = (1u64 << 20) as f64 / Params::default().wire_goodput();
        assert!(wire > bound && wire < bound * 1.02, "1 MiB: wire-bound pipeline, {wire} vs {bound}");
        let read = timeline(&Params::default(), &Layout::default(), &Request { op: Op::Read, len: 4096, src: Mem::Gpu, dst: Mem::Host });
        assert!(read.at("cpu").unwrap() > read.at("placed").unwrap());
    }

    #[test]
    fn a_stream_runs_at_the_slower_of_pcie_and_the_wire() {
        let p = Params::default();
        let w = |len| interval(&p, &Request { op: Op::Write, len, src: Mem::Gpu, dst: Mem::Gpu });
        assert!((w(1 << 24) - (1u64 << 24) as f64 / p.wire_goodput()).abs() / w(1 << 24) < 0.001, "16 MiB: the wire's payload rate");
        assert!((w(64) - 5.0 * p.cycle_ns()).abs() < 1e-9, "64 B: the core's 5 cycles per WQE");
        let mut last = 0.0;
        for k in 0..=24 {
            let t = w(1u64 << k);
            assert!(t >= last, "monotone in size");
            last = t;
        }
        let narrow = Params { pcie_gen: 3, pcie_width: 8, ..p.clone() };
        let r = interval(&narrow, &Request { op: Op::Read, len: 1 << 20, src: Mem::Host, dst: Mem::Host });
        assert!((r - narrow.write_ns(1 << 20) - narrow.write_ns(u64::from(CQE_BYTES))).abs() < 1e-6, "Gen3 x8 is slower than the wire");
    }
}
