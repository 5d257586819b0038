//! `rnic-emu model` and `rnic-emu trace` without `--mmio`/`--dma`: the timing model's and
//! the WQE log's command-line side.

use rnic_emu_core::observe::timing::collective::{reference, ring_all_reduce};
use rnic_emu_core::observe::timing::render::{record_text, ring_text, timeline_text};
use rnic_emu_core::observe::timing::wqe_log::Record;
use rnic_emu_core::observe::timing::{timeline, Mem, Op, Request};
use rnic_emu_core::platform::topology::params::Params;
use rnic_emu_core::platform::topology::{Layout, Topology};
use rnic_emu_server::serve::control_request;
use std::path::Path;
use std::time::Duration;

/// The output of `rnic-emu model`.
#[allow(clippy::too_many_arguments)]
pub fn model(topo: &Topology, op: Op, size: u64, src: Mem, dst: Mem, nodes: u32, collective: Option<&str>, json: bool) -> anyhow::Result<String> {
    let p = &topo.timing;
    let layout = Layout::of(&topo.nodes[0]);
    anyhow::ensure!(size <= 1 << 31, "--size is at most 2^31 bytes (the largest message)");
    match collective {
        None => {
            let t = timeline(p, &layout, &Request { op, len: size, src, dst });
            if !json {
                return Ok(timeline_text(&t, p, &layout));
            }
            let reference = (t.request == rnic_emu_core::observe::timing::reference::REQUEST).then(|| {
                let rows = rnic_emu_core::observe::timing::reference::compare(&t);
                let stages: Vec<_> =
                    rows.into_iter().map(|(key, m, r, ok)| serde_json::json!({ "key": key, "model_ns": m, "reference_ns": r, "ok": ok })).collect();
                serde_json::json!({ "stages": stages, "intervals": rnic_emu_core::observe::timing::reference::intervals(p, &layout, &t) })
            });
            Ok(serde_json::to_string_pretty(&serde_json::json!({ "timeline": t, "reference": reference }))? + "\n")
        }
        Some("all_reduce") => {
            anyhow::ensure!((2..=4096).contains(&nodes), "--nodes must be 2..=4096");
            let rows: Vec<_> = [true, false].into_iter().map(|gdr| ring_all_reduce(p, &layout, nodes, size, gdr)).collect();
            if !json {
                return Ok(ring_text(&rows));
            }
            let with_ref: Vec<_> = rows.iter().map(|r| serde_json::json!({ "model": r, "reference": reference(r.nodes, r.fabric, r.gdr) })).collect();
            Ok(serde_json::to_string_pretty(&with_ref)? + "\n")
        }
        Some(other) => anyhow::bail!("unknown collective '{other}' (all_reduce)"),
    }
}

fn mem_of(path: Option<&str>) -> Option<Mem> {
    path.map(|p| if p == "host" { Mem::Host } else { Mem::Gpu })
}

/// The modelled timeline of a logged request. Its source and destination are the paths
/// the device recorded (a READ's source is the responder's); one on another node, not
/// recorded here, is assumed to be the same kind of memory as the other.
pub fn model_of(rec: &Record, p: &Params, layout: &Layout) -> Option<rnic_emu_core::observe::timing::Timeline> {
    let op = rec.op.parse::<Op>().ok()?;
    let src = mem_of(rec.src.or(rec.dst))?;
    let dst = mem_of(rec.dst.or(rec.src))?;
    // The path the device recorded says where the GPU is, whatever the layout assumed.
    let mut layout = *layout;
    for path in [rec.src, rec.dst].into_iter().flatten() {
        match path {
            "p2p-switch" => layout.gpu_path = rnic_emu_core::platform::topology::P2pPath::Switch,
            "p2p-root-complex" => layout.gpu_path = rnic_emu_core::platform::topology::P2pPath::RootComplex,
            _ => {}
        }
    }
    Some(timeline(p, &layout, &Request { op, len: rec.len, src, dst }))
}

/// Prints the node's WQE log (and, with `follow`, what comes after) until interrupted.
pub fn wqe_log(socket_dir: &Path, node: &str, qp: Option<u32>, follow: bool, topo: Option<&Topology>, json: bool) -> anyhow::Result<()> {
    let p = topo.map(|t| t.timing.clone()).unwrap_or_default();
    let layout = topo.and_then(|t| t.node(node)).map(|(_, n)| Layout::of(n)).unwrap_or_default();
    let mut since = 0u64;
    loop {
        let q = qp.map(|q| format!(" qp={q}")).unwrap_or_default();
        let reply = control_request(socket_dir, node, &format!("trace since={since}{q}"))?;
        let Some(text) = reply["ok"].as_str() else { anyhow::bail!("{}", reply["error"].as_str().unwrap_or("bad reply")) };
        let records: Vec<serde_json::Value> = serde_json::from_str(text)?;
        for v in &records {
            since = since.max(v["seq"].as_u64().unwrap_or(0));
            if json {
                println!("{v}");
                continue;
            }
            let rec = parse_record(v);
            let m = model_of(&rec, &p, &layout);
            print!("{}", record_text(&rec, m.as_ref()));
        }
        if !follow {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A record back from JSON (names interned to the ones the device uses).
fn parse_record(v: &serde_json::Value) -> Record {
    const NAMES: &[&str] = &[
        "requester",
        "responder",
        "loopback",
        "fabric",
        "host",
        "p2p-switch",
        "p2p-root-complex",
        "write",
        "read",
        "send",
        "doorbell",
        "remote_read",
        "wqe_data",
        "sgl_parsed",
        "packetized",
        "on_wire",
        "placed",
        "ack",
        "cqe",
    ];
    let intern = |s: Option<&str>| s.and_then(|s| NAMES.iter().copied().find(|n| *n == s));
    let stages = v["stages"].as_array().map(|a| a.iter().filter_map(|s| Some((intern(s[0].as_str())?, s[1].as_u64()?))).collect());
    Record {
        seq: v["seq"].as_u64().unwrap_or(0),
        role: intern(v["role"].as_str()).unwrap_or("?"),
        qpn: v["qpn"].as_u64().unwrap_or(0) as u32,
        wr_id: v["wr_id"].as_u64().unwrap_or(0),
        op: intern(v["op"].as_str()).unwrap_or("?"),
        len: v["len"].as_u64().unwrap_or(0),
        transport: intern(v["transport"].as_str()).unwrap_or("?"),
        src: intern(v["src"].as_str()),
        dst: intern(v["dst"].as_str()),
        status: v["status"].as_u64().unwrap_or(0) as u8,
        stages: stages.unwrap_or_default(),
    }
}
