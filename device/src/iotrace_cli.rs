//! `rnic-emu trace --mmio --dma`: prints a running node's MMIO/DMA trace (docs/trace.md),
//! filtered, as text or JSON lines, once or following it; `--record on|off` switches the
//! node's recording; `--from FILE` prints what `rnic-emu run --trace FILE` recorded.

use crate::checks::OrConfig;
use anyhow::Context;
use rnic_emu::iotrace_client::{text, Filter, Reader};
use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

/// Runs the command until done (or, with `follow`, until interrupted).
pub fn trace(socket_dir: &Path, node: &str, record: Option<&str>, filter: &Filter, json: bool, follow: bool) -> anyhow::Result<()> {
    let mut reader = Reader::new(socket_dir, node);
    if let Some(r) = record {
        if r != "on" && r != "off" {
            return Err(anyhow::anyhow!("--record takes on or off, not '{r}'")).config();
        }
        println!("{}", reader.request(r)?);
        return Ok(());
    }
    let mut stdout = std::io::stdout().lock();
    let mut warned_off = false;
    loop {
        let polled = reader.poll()?;
        if !polled.on && !warned_off {
            eprintln!("rnic-emu: the MMIO/DMA trace of {node} is off: `rnic-emu trace --mmio --record on` starts it");
            warned_off = true;
        }
        if polled.lost > 0 {
            eprintln!(
                "rnic-emu: {} events lost: the ring of {node} overflowed before they were read ({} events kept, {} dropped since it was cleared)",
                polled.lost,
                rnic_emu_core::observe::iotrace::CAPACITY,
                polled.overflow
            );
        }
        for e in polled.events.iter().filter(|e| filter.keeps(e)) {
            let line = if json { e.to_string() } else { text(e) };
            if writeln!(stdout, "{line}").is_err() {
                return Ok(()); // the reader went away (a pipe into head)
            }
        }
        let _ = stdout.flush();
        if !follow {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Prints the events of `node` a `run --trace` file holds, filtered.
pub fn from_file(path: &Path, node: &str, filter: &Filter, json: bool) -> anyhow::Result<()> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display())).config()?;
    let mut stdout = std::io::stdout().lock();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        let e: serde_json::Value = serde_json::from_str(&line).with_context(|| format!("{} line {}: not a trace event", path.display(), n + 1))?;
        if e["node"].as_str().is_some_and(|n| n != node) {
            continue;
        }
        if let Some(lost) = e["lost"].as_u64() {
            eprintln!("rnic-emu: {lost} events of {node} lost here: the ring overflowed before they were read");
            continue;
        }
        if filter.keeps(&e) && writeln!(stdout, "{}", if json { e.to_string() } else { text(&e) }).is_err() {
            return Ok(());
        }
    }
    Ok(())
}
