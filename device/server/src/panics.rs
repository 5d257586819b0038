//! Telling the vfio-user library's panics from ours. A hostile client message can make the
//! library panic (for instance a VERSION shorter than its header); the server catches
//! those (`serve`) and drops only that connection, and a panic hook that asks here reports
//! them as a client's fault instead of a crash. This module holds nothing else: its frames
//! on the stack are never the panic's origin.

/// Whether a panic being raised comes from the vfio-user library: the innermost frame on
/// the stack that is the library's or one of our crates' (`rnic_emu*`), outside this
/// module and outside `hook` (the module path of the panic hook that asks, whose frames
/// sit on top of the panicking ones), is the library's. Its location alone does not tell:
/// a capacity overflow the library causes is located in the standard library.
pub fn raised_by_the_library(hook: &str) -> bool {
    let (own, hook) = (concat!(module_path!(), "::"), format!("{hook}::"));
    let trace = std::backtrace::Backtrace::force_capture().to_string();
    trace
        .lines()
        .find_map(|l| {
            // Every crate of ours: rnic_emu, rnic_emu_core, rnic_emu_server, rnic_emu_testkit.
            let ours = l.contains("rnic_emu") && !l.contains(own) && !l.contains(&hook);
            match (l.contains("vfio_user::"), ours) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            }
        })
        .unwrap_or(false)
}
