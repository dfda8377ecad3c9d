//! The allocator ruling's binaries run on, and the settings it needs.
//!
//! candle's CPU backend allocates a fresh buffer for every operation's output. With glibc's
//! allocator every buffer over 128 KiB is a new memory mapping, unmapped when dropped, so each
//! operation page-faults (and the kernel zeroes) its output again: measured here, a fifth of a
//! training step's time went to `clear_page`. mimalloc keeps freed memory for reuse, but by
//! default it still returns idle pages to the system after a short delay, which candle's
//! allocation pattern hits on every step. Told never to return them and to commit its arenas
//! up front, the same run trained 1.4 times faster (303 to 426 tokens/s, MiniLM-L6, 2 cores).
//!
//! mimalloc reads those settings from its environment when the process starts, before `main`
//! could set them, so [`settle`] re-executes the binary once with them set (the same process
//! id, via `exec`), unless they are already in the environment: set them yourself to choose
//! other values.
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOCATOR: ruling_alloc::Allocator = ruling_alloc::Allocator;
//!
//! fn main() {
//!     ruling_alloc::settle();
//!     // ...
//! }
//! ```

pub use mimalloc::MiMalloc as Allocator;

/// The settings, as mimalloc's environment variables.
pub const SETTINGS: [(&str, &str); 2] = [
    // Never hand freed pages back to the system: the next operation needs them again.
    ("MIMALLOC_PURGE_DELAY", "-1"),
    // Commit arena memory when reserved instead of page by page on first touch.
    ("MIMALLOC_ARENA_EAGER_COMMIT", "1"),
];

/// The variable that marks a process as already settled, so it re-executes at most once.
const SETTLED: &str = "RULING_ALLOCATOR_SETTLED";

/// Re-execute this binary with [`SETTINGS`] in its environment, unless it already has them
/// (or a previous call did this). Returns when nothing needed doing or the re-execution failed
/// (the program then runs with mimalloc's defaults, only slower).
pub fn settle() {
    if std::env::var_os(SETTLED).is_some()
        || SETTINGS
            .iter()
            .all(|(name, _)| std::env::var_os(name).is_some())
    {
        return;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let mut command = std::process::Command::new(exe);
        command.args(std::env::args_os().skip(1)).env(SETTLED, "1");
        for (name, value) in SETTINGS {
            if std::env::var_os(name).is_none() {
                command.env(name, value);
            }
        }
        // Only returns on failure.
        let _ = command.exec();
    }
}
