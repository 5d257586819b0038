//! The host side of a node's MMIO/DMA trace (`rnic-emu trace --mmio --dma`, `rnic-emu run
//! --trace FILE`; docs/trace.md): reads the node's ring over its control socket
//! (`iotrace since=N` requests), notices events the ring dropped before they were read,
//! filters by kind, function, QP and register, and prints events as text or JSON lines.
//! The ring itself, and what it records, is `rnic_emu_core::observe::iotrace`.

use anyhow::Context;
use rnic_emu_server::serve::control_request;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Reads a node's trace from where the last read stopped.
pub struct Reader {
    socket_dir: PathBuf,
    pub node: String,
    since: u64,
}

/// What one [`Reader::poll`] brought.
pub struct Polled {
    /// New events, oldest first (JSON objects as the node sent them).
    pub events: Vec<Value>,
    /// Events the ring dropped before this reader saw them.
    pub lost: u64,
    /// Events the ring has dropped in all since it was last cleared.
    pub overflow: u64,
    /// Whether recording is on.
    pub on: bool,
}

impl Reader {
    pub fn new(socket_dir: &Path, node: &str) -> Reader {
        Reader { socket_dir: socket_dir.to_path_buf(), node: node.to_string(), since: 0 }
    }

    /// The node's server was started again (a new, empty ring): read from its start.
    pub fn restart(&mut self) {
        self.since = 0;
    }

    /// Sends `iotrace <args>` to the node; returns the reply's text.
    pub fn request(&self, args: &str) -> anyhow::Result<String> {
        let reply = control_request(&self.socket_dir, &self.node, &format!("iotrace {args}"))?;
        match reply["ok"].as_str() {
            Some(text) => Ok(text.to_string()),
            None => anyhow::bail!("node {}: {}", self.node, reply["error"].as_str().unwrap_or("bad reply")),
        }
    }

    /// Everything recorded since the last poll (several requests when there is a lot).
    pub fn poll(&mut self) -> anyhow::Result<Polled> {
        let mut out = Polled { events: Vec::new(), lost: 0, overflow: 0, on: false };
        loop {
            let text = self.request(&format!("since={}", self.since))?;
            let batch: Value = serde_json::from_str(&text).with_context(|| format!("node {}: bad iotrace reply", self.node))?;
            let first = batch["first"].as_u64().unwrap_or(0);
            out.overflow = batch["overflow"].as_u64().unwrap_or(0);
            // A gap before the oldest event kept is what overflow took (a clear empties too).
            out.lost += first.saturating_sub(self.since + 1).min(out.overflow);
            out.on = batch["on"].as_bool().unwrap_or(false);
            let events = batch["events"].as_array().cloned().unwrap_or_default();
            let full = events.len() >= rnic_emu_core::observe::iotrace::MAX_REPLY;
            self.since = events.last().and_then(|e| e["seq"].as_u64()).unwrap_or(self.since.max(first.saturating_sub(1)));
            out.events.extend(events);
            if !full {
                return Ok(out);
            }
        }
    }
}

/// Which events to show.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub mmio: bool,
    pub dma: bool,
    /// "rnic" or "gpu".
    pub function: Option<String>,
    pub qp: Option<u32>,
    /// A register name or its prefix ("WQE_DB_IDX", "STATS", "DBPAGE.QP1"); MMIO only.
    pub reg: Option<String>,
}

impl Filter {
    pub fn keeps(&self, e: &Value) -> bool {
        let kind = e["kind"].as_str().unwrap_or("");
        (kind == "mmio" && self.mmio || kind == "dma" && self.dma)
            && self.function.as_deref().is_none_or(|f| e["dev"].as_str() == Some(f))
            && self.qp.is_none_or(|q| e["qp"].as_u64() == Some(u64::from(q)))
            && self.reg.as_deref().is_none_or(|r| e["reg"].as_str().is_some_and(|n| n.to_ascii_uppercase().starts_with(&r.to_ascii_uppercase())))
    }
}

/// One event as a line of text.
pub fn text(e: &Value) -> String {
    let (seq, ns) = (e["seq"].as_u64().unwrap_or(0), e["ns"].as_u64().unwrap_or(0));
    let (kind, function, dir) = (e["kind"].as_str().unwrap_or("?"), e["function"].as_str().unwrap_or("?"), e["dir"].as_str().unwrap_or("?"));
    let mut s = format!("#{seq:<6} {:>4}.{:06}s {kind:<4} {function:<12} {dir:<5} ", ns / 1_000_000_000, ns / 1000 % 1_000_000);
    if e["kind"] == "mmio" {
        let at = match e["bar"].as_u64() {
            Some(b) => format!("BAR{b}+{:#06x}", e["offset"].as_u64().unwrap_or(0)),
            None => format!("CFG+{:#05x}", e["offset"].as_u64().unwrap_or(0)),
        };
        let _ = write!(s, "{at:<14} {:<22} w{}", e["reg"].as_str().unwrap_or("?"), e["width"].as_u64().unwrap_or(0));
        if let Some(v) = e["value"].as_u64() {
            let _ = write!(s, " = {v:#x}");
        }
    } else {
        let (addr, len) = (e["addr"].as_u64().unwrap_or(0), e["len"].as_u64().unwrap_or(0));
        let _ = write!(s, "{addr:#014x} len {len:<7} {:<12} {}", e["what"].as_str().unwrap_or("?"), e["path"].as_str().unwrap_or("REFUSED"));
    }
    for key in ["qp", "cq", "mr"] {
        if let Some(v) = e[key].as_u64() {
            let _ = write!(s, " {key} {v}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_and_text() {
        let db: Value = serde_json::json!({"seq": 3, "ns": 1500, "kind": "mmio", "function": "node0-rnic0", "dev": "rnic", "dir": "write",
            "bar": 0, "offset": 0x1008, "width": 4, "value": 0x10003, "reg": "WQE_DB_IDX", "qp": 1});
        let cqe: Value = serde_json::json!({"seq": 4, "ns": 2500, "kind": "dma", "function": "node0-rnic0", "dev": "rnic", "dir": "write",
            "addr": 0x1000_2000u64, "len": 32, "path": "host", "what": "cqe", "qp": 1, "cq": 1});
        let all = Filter { mmio: true, dma: true, ..Filter::default() };
        assert!(all.keeps(&db) && all.keeps(&cqe));
        assert!(!Filter { mmio: true, ..Filter::default() }.keeps(&cqe));
        assert!(!Filter { qp: Some(2), ..all.clone() }.keeps(&db));
        assert!(Filter { reg: Some("wqe_db".into()), ..all.clone() }.keeps(&db));
        assert!(!Filter { reg: Some("WQE".into()), ..all.clone() }.keeps(&cqe), "--reg keeps register accesses only");
        assert!(!Filter { function: Some("gpu".into()), ..all.clone() }.keeps(&db));
        let t = text(&db);
        assert!(t.contains("BAR0+0x1008") && t.contains("WQE_DB_IDX") && t.contains("= 0x10003") && t.ends_with("qp 1"), "{t}");
        let t = text(&cqe);
        assert!(t.contains("0x000010002000 len 32") && t.contains("cqe") && t.contains("host qp 1 cq 1"), "{t}");
    }
}
