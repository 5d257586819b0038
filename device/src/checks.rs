//! What the `rnic-emu` command checks before it builds or starts anything, and its exit
//! codes (README.md, "Exit codes"). A usage or configuration error (a missing or invalid
//! topology, an unknown node, an unusable socket directory or output file, no QEMU) is
//! a [`ConfigError`] and exits [`EXIT_USAGE`], as clap's own argument errors do; anything
//! that fails once work has started exits [`EXIT_FAILED`]. Each message names the file,
//! directory, socket or node it concerns once, with its cause once.

use rnic_emu_core::platform::topology::Topology;
use std::path::Path;

/// A bad argument or configuration (clap exits 2 for its own argument errors too).
pub const EXIT_USAGE: u8 = 2;
/// rnic-emu itself failed after it started working (`run`: QEMU or the server failed,
/// the guest timed out; other commands: the node server did not answer, ...).
pub const EXIT_FAILED: u8 = 125;
/// Interrupted (Ctrl-C).
pub const EXIT_INTERRUPTED: u8 = 130;

/// A usage or configuration error: its message (the whole cause chain, once).
#[derive(Debug)]
pub struct ConfigError(anyhow::Error);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Marks an error as a usage or configuration error.
pub trait OrConfig<T> {
    fn config(self) -> anyhow::Result<T>;
}

impl<T, E: Into<anyhow::Error>> OrConfig<T> for Result<T, E> {
    fn config(self) -> anyhow::Result<T> {
        self.map_err(|e| ConfigError(e.into()).into())
    }
}

/// The exit code for an error `main` caught.
pub fn exit_code(e: &anyhow::Error, interrupted: bool) -> u8 {
    if interrupted {
        EXIT_INTERRUPTED
    } else if e.downcast_ref::<ConfigError>().is_some() {
        EXIT_USAGE
    } else {
        EXIT_FAILED
    }
}

/// Reads and validates a topology file.
pub fn topology(path: &Path) -> anyhow::Result<Topology> {
    Topology::load(path).config()
}

/// The index of `node` (name or index) in `topo`, read from `path`.
pub fn node(topo: &Topology, path: &Path, node: &str) -> anyhow::Result<usize> {
    match topo.node(node) {
        Some((i, _)) => Ok(i),
        None => {
            let names: Vec<&str> = topo.nodes.iter().map(|n| n.name.as_str()).collect();
            Err(anyhow::anyhow!("topology {} ({}) has no node '{node}' (it has {})", topo.name, path.display(), names.join(", "))).config()
        }
    }
}

/// A topology and the index of one of its nodes.
pub fn topology_node(path: &Path, name: &str) -> anyhow::Result<(Topology, usize)> {
    let topo = topology(path)?;
    let i = node(&topo, path, name)?;
    Ok((topo, i))
}

/// The socket directory exists or can be made.
pub fn socket_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("creating the socket directory {}: {e}", dir.display())).config()
}

/// The node whose control socket is in `dir`: `node` by name, or by index ("1" is
/// `node1`); an error lists the nodes that are there.
pub fn served_node(dir: &Path, node: &str) -> anyhow::Result<String> {
    let candidates = [Some(node.to_string()), node.parse::<usize>().ok().map(|i| format!("node{i}"))];
    if let Some(name) = candidates.into_iter().flatten().find(|n| rnic_emu_server::serve::control_path(dir, n).exists()) {
        return Ok(name);
    }
    let mut there: Vec<String> =
        std::fs::read_dir(dir).map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".ctl").map(str::to_string)).collect()).unwrap_or_default();
    there.sort();
    let listing = if there.is_empty() { "no node server runs there".to_string() } else { format!("nodes served there: {}", there.join(", ")) };
    let path = rnic_emu_server::serve::control_path(dir, node);
    Err(anyhow::anyhow!("no node server for '{node}' in {} ({} does not exist; {listing})", dir.display(), path.display())).config()
}

/// An existing directory given with `flag`.
pub fn existing_dir(flag: &str, dir: &Path) -> anyhow::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    Err(anyhow::anyhow!("{flag} {}: no such directory", dir.display())).config()
}

/// A file `flag` will write: its directory must exist.
pub fn output_file(flag: &str, file: &Path) -> anyhow::Result<()> {
    let parent = file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if parent.is_dir() && !file.is_dir() {
        return Ok(());
    }
    let why = if file.is_dir() { "is a directory" } else { "its directory does not exist" };
    Err(anyhow::anyhow!("{flag} {}: {why}", file.display())).config()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_exit_2_and_print_their_cause_once() {
        let e = std::fs::read("/nonexistent/x").map_err(|e| anyhow::Error::new(e).context("reading /nonexistent/x")).config().unwrap_err();
        assert_eq!(exit_code(&e, false), EXIT_USAGE);
        assert_eq!(format!("{e:#}"), "reading /nonexistent/x: No such file or directory (os error 2)");
        assert_eq!(exit_code(&anyhow::anyhow!("boot failed"), false), EXIT_FAILED);
        assert_eq!(exit_code(&e, true), EXIT_INTERRUPTED);
        assert!(output_file("--trace", Path::new("/nonexistent/t.jsonl")).is_err());
        assert!(output_file("--trace", Path::new("t.jsonl")).is_ok(), "the current directory");
        assert!(output_file("--trace", Path::new("/")).is_err(), "a directory");
    }
}
