//! Text renderings of the model for `rnic-emu model` and `rnic-emu trace`: a timeline in
//! the "[T+ns] stage" form beside the reference, the ring all_reduce
//! rows beside the reference table, and a logged WQE's measured stages beside its
//! modelled ones.

use super::collective::{reference, Ring};
use super::model::{Mem, Timeline};
use super::reference::{compare, intervals, Verdict, REFERENCE_ON_WIRE, REFERENCE_WRITE_4K, REQUEST};
use super::wqe_log::Record;
use crate::platform::topology::params::Params;
use crate::platform::topology::Layout;
use std::fmt::Write;

fn mem_name(m: Mem) -> &'static str {
    match m {
        Mem::Host => "host",
        Mem::Gpu => "gpu",
    }
}

/// One line describing the parameters that matter most.
pub fn params_line(p: &Params) -> String {
    format!(
        "PCIe Gen{} x{} (MPS {}, MRRS {}), core {} MHz, {} {} Gb/s, MTU {}, NIC to NIC {} ns",
        p.pcie_gen,
        p.pcie_width,
        p.mps,
        p.mrrs,
        p.core_clock_mhz,
        p.fabric.name(),
        p.link_gbps,
        p.mtu,
        p.fabric_one_way_ns(2)
    )
}

/// The timeline; for a 4 KiB GPU-to-GPU WRITE with the reference column and the
/// reference's intervals classified.
pub fn timeline_text(t: &Timeline, p: &Params, l: &Layout) -> String {
    let r = &t.request;
    let mut out = String::new();
    let _ = writeln!(out, "{:?} of {} bytes, {} -> {}; {}", r.op, r.len, mem_name(r.src), mem_name(r.dst), params_line(p));
    let reference = *r == REQUEST;
    let rows = if reference { compare(t) } else { Vec::new() };
    let _ = writeln!(out, "  {:<14} {:<18} {:<4} stage", "model", if reference { "design doc." } else { "" }, "");
    for s in &t.stages {
        let model = format!("[T+{:.1}ns]", s.at_ns);
        let refcol = REFERENCE_WRITE_4K.iter().find(|x| x.0 == s.key).filter(|_| reference).map(|&(_, v, remote)| {
            if remote {
                format!("[T{REFERENCE_ON_WIRE:.0}ns+RTT+{v:.0}ns]")
            } else {
                format!("[T{v:.0}ns]")
            }
        });
        let verdict = rows.iter().find(|x| x.0 == s.key).map_or("", |x| if x.3 { "ok" } else { "OFF" });
        let side = if s.remote { "remote: " } else { "" };
        let _ = writeln!(out, "  {model:<14} {:<18} {verdict:<4} {side}{}", refcol.unwrap_or_default(), s.what);
    }
    if reference {
        let _ = writeln!(out, "  (RTT: the reference's symbol, taken as the model's one-way {:.0} ns; ok: within 10% or 5 ns)", t.wire_latency_ns);
        let _ = writeln!(out, "intervals: {:<26} {:>9} {:>9} {:>10}  verdict: terms", "", "reference", "model", "rate floor");
        for i in intervals(p, l, t) {
            let verdict = match i.verdict {
                Verdict::Agrees => "agrees",
                Verdict::BelowRateFloor => "BELOW RATE FLOOR",
                Verdict::BelowCitedLatency => "below cited latency",
                Verdict::AboveModel => "above model",
            };
            let span = format!("{} -> {}", i.from, i.to);
            let _ = writeln!(out, "  {span:<35} {:>9.1} {:>9.1} {:>10.1}  {verdict}: {}", i.reference_ns, i.model_ns, i.rate_floor_ns, i.terms);
        }
    }
    out
}

/// Ring all_reduce rows (GPUDirect on and off) beside the reference rows.
pub fn ring_text(rows: &[Ring]) -> String {
    let mut out = String::new();
    if let Some(r) = rows.first() {
        let _ = writeln!(out, "ring all_reduce, {} nodes over {}, {} bytes (chunk {} bytes)", r.nodes, r.fabric.name(), r.bytes, r.chunk);
    }
    let _ = writeln!(out, "  {:<12} {:<24} {:>8} {:>8} {:>8} {:>12}", "GPUDirect", "", "P50 us", "P99 us", "P999 us", "busbw GB/s");
    for r in rows {
        let on = if r.gdr { "on" } else { "off (bounce)" };
        let l = &r.latency;
        let _ = writeln!(out, "  {on:<12} {:<24} {:>8.2} {:>8.2} {:>8.2} {:>12.1}", "model", l.p50_us, l.p99_us, l.p999_us, r.busbw_gbps);
        match reference(r.nodes, r.fabric, r.gdr) {
            Some(x) => {
                let l = &x.latency;
                let err = 100.0 * (r.busbw_gbps - x.busbw_gbps) / x.busbw_gbps;
                let src = format!("reference ({})", x.label);
                let _ = writeln!(
                    out,
                    "  {:<12} {src:<24} {:>8.2} {:>8.2} {:>8.2} {:>12.1}  (bandwidth {err:+.1}%)",
                    "", l.p50_us, l.p99_us, l.p999_us, x.busbw_gbps
                );
                let implied = x.implied_time_us(r.bytes);
                let floor = if implied < r.hop_floor_us {
                    "below the hop floor"
                } else if implied < r.alpha_beta_floor_us {
                    "below the alpha-beta floor"
                } else {
                    "above the floors"
                };
                let _ = writeln!(
                    out,
                    "  {:<12} the reference's bandwidth implies {implied:.1} us, {floor}: wire alone {:.1} us, {} NIC-to-NIC hops alone {:.1} us, both {:.1} us; model {:.1} us",
                    "",
                    r.wire_floor_us,
                    2 * (r.nodes - 1),
                    r.hop_floor_us,
                    r.alpha_beta_floor_us,
                    r.time_us
                );
            }
            None if crate::observe::timing::collective::REFERENCE.iter().any(|x| x.nodes == r.nodes && x.gdr == r.gdr) => {
                let _ = writeln!(out, "  {:<12} (the reference's {}-node rows are for another fabric: --fabric roce or ib-ndr)", "", r.nodes);
            }
            None => {}
        }
        let _ = writeln!(
            out,
            "  {:<12} step {:.2} us, total {:.1} us; latency: {:.2} us unloaded + waits at {} egress queues (M/D/1, utilisation {:.2})",
            "", r.step_us, r.time_us, r.base_us, r.queues, r.utilisation
        );
    }
    out
}

/// A logged WQE: measured host-time stages, then the modelled timeline of the same
/// request (when its op and paths are known).
pub fn record_text(rec: &Record, model: Option<&Timeline>) -> String {
    let mut out = String::new();
    let path = |p: Option<&'static str>| p.unwrap_or("remote");
    let _ = writeln!(
        out,
        "#{} {} QP {} wr_id {:#x} {} {} bytes via {} (src {}, dst {}) status {}",
        rec.seq,
        rec.role,
        rec.qpn,
        rec.wr_id,
        rec.op,
        rec.len,
        rec.transport,
        path(rec.src),
        path(rec.dst),
        rec.status
    );
    for (stage, ns) in &rec.stages {
        let modelled = model.and_then(|t| t.at(stage)).map(|m| format!("[T+{m:.1}ns]")).unwrap_or_default();
        let _ = writeln!(out, "  measured [T+{ns}ns] {stage:<14} modelled {modelled}");
    }
    if let Some(t) = model {
        let _ = writeln!(out, "  modelled stages:");
        for s in &t.stages {
            let _ = writeln!(out, "    [T+{:.1}ns] {}{}", s.at_ns, if s.remote { "remote: " } else { "" }, s.what);
        }
    }
    out
}
